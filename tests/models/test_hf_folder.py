#!/usr/bin/env python3
"""tests/models/test_hf_folder.py: Hugging Face folders of the real model
against independent references.

From the default GGUF (dequantized by the gguf package) tests/pylib/hfgen.py
writes, with the safetensors and tokenizers packages:
  bf16/   one BF16 file, tied embeddings (what SmolLM2 ships)
  f16/    one F16 file
  f32/    F32 in 3 shards with model.safetensors.index.json, untied (an
          lm_head.weight equal to the embedding)
and, with the gguf package, the same weights as f32.gguf and bf16.gguf in
llama.cpp's layout (Q/K rows permuted for adjacent-pair RoPE). Checked, with
IGNITE_MATMUL=exact:
  - `ignite info --json`: the GGUF's keys, the hyper-parameters of the GGUF,
    rope_style half-split, the tensor count and bytes of the folder;
  - logits (prefill, then greedy decode steps; also in prefill chunks) of
    each folder against an fp64 numpy forward over the folder's own tensors
    written the HF way with rotate-half RoPE (tests/models/hf_ref.py):
    relative error <= 1e-4;
  - the same logits against the GGUF of the same weights (f32/ vs f32.gguf,
    bf16/ vs bf16.gguf, so BF16 is compared within its own rounding):
    relative error <= 1e-4, so both RoPE pairings agree with one reference;
  - `ignite run --chat --temp 0` writes the same text from folder and GGUF.
Sanitizer builds (30x slower forward) run shorter prompts and skip the F16
folder, the GGUFs' logits (the folders' memory is the point there) and the
F32 text. Exits 77 when the model is absent. Labels: model, cpu."""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfgen  # noqa: E402
from hf_ref import HFRef  # noqa: E402
from igtest import sanitized, check, model_path, summary  # noqa: E402

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
DUMP = sys.argv[1] if len(sys.argv) > 1 else "build/tests/cpu/forward_dump"
ENV = dict(os.environ, IGNITE_MATMUL="exact")
BOUND = 1e-4

# SmolLM2 ids of a chat turn and of prose (as tests/cpu/test_forward_ref.py).
CHAT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 32075, 14542, 100, 198]
STORY = [6403, 1980, 253, 655, 28, 665, 436, 253, 1838, 8180, 3365, 14176, 617, 5732, 288]


SANITIZED = sanitized()
# prompt, greedy steps, forward_dump options
CASES = [(CHAT[:8], 2, ())] if SANITIZED else [(CHAT, 6, ()), (STORY, 3, ("-c", "4"))]


def dump(model, ids, greedy, opts=()):
    """forward_dump's logits rows (last prefill position, then each greedy
    step) and its greedy tokens."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        cmd = [DUMP, "-m", model, "-o", out.name, "-g", str(greedy), *opts,
               ",".join(map(str, ids))]
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
        if r.returncode != 0:
            raise SystemExit(f"FAIL: {' '.join(cmd)}: exit {r.returncode}: {r.stderr}")
        logits = np.fromfile(out.name, dtype=np.float32).astype(np.float64)
    toks = [int(t) for ln in r.stdout.splitlines() if ln.startswith("greedy:")
            for t in ln.split()[1:]]
    return logits.reshape(greedy + 1, -1), toks


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def info(model):
    r = subprocess.run([BIN, "info", "-m", model, "--json"], capture_output=True, text=True)
    check(r.returncode == 0, f"info {model}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout) if r.returncode == 0 else {}


def check_info(folder, gguf_info, n_files, dtype, tied):
    got = info(folder)
    check(set(got) == set(gguf_info), f"info {folder}: keys {sorted(set(got) ^ set(gguf_info))} "
          "differ from the GGUF's")
    check(set(got.get("tokenizer", {})) == set(gguf_info["tokenizer"]),
          f"info {folder}: tokenizer keys differ from the GGUF's")
    for k in ("architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff",
              "n_vocab", "n_ctx_train", "n_rot", "rope_base", "kv_bytes_per_token", "kv_groups"):
        check(got.get(k) == gguf_info[k], f"info {folder}: {k} {got.get(k)} != GGUF {gguf_info[k]}")
    check(abs(got.get("norm_eps", 0) - gguf_info["norm_eps"]) < 1e-12, f"info {folder}: norm_eps")
    for k in ("model", "pre", "bos_id", "eos_id", "n_tokens", "chat_template"):
        check(got["tokenizer"].get(k) == gguf_info["tokenizer"][k],
              f"info {folder}: tokenizer.{k} {got['tokenizer'].get(k)} != GGUF's")
    files = [f for f in os.listdir(folder) if f.endswith(".safetensors")]
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    _, tensors = hfgen.read_folder(folder)
    want = {"format": "safetensors", "gguf_version": None, "n_files": n_files,
            "rope_style": "half-split", "tied_embeddings": tied, "file_size": size,
            "n_tensors": len(tensors), "n_params": sum(t.size for t in tensors.values())}
    for k, v in want.items():
        check(got.get(k) == v, f"info {folder}: {k} is {got.get(k)!r}, expected {v!r}")
    types = got.get("tensor_types", {})
    check(list(types) == [dtype] and types[dtype]["count"] == len(tensors),
          f"info {folder}: tensor_types {types}, expected {len(tensors)} {dtype}")


def check_logits(name, folder, ref, gguf):
    worst_ref = worst_gguf = 0.0
    for ids, greedy, opts in CASES:
        ours, toks = dump(folder, ids, greedy, opts)
        want = ref.logits(ids + toks)[len(ids) - 1:]
        for i in range(greedy + 1):
            e = rel(ours[i], want[i])
            worst_ref = max(worst_ref, e)
            check(e <= BOUND, f"{name}: step {i} of {len(ids)}-token prompt: relative error "
                  f"{e:.2e} against the fp64 HF forward")
        if gguf:
            theirs, toks_g = dump(gguf, ids, greedy, opts)
            e = rel(ours, theirs)
            worst_gguf = max(worst_gguf, e)
            check(e <= BOUND, f"{name}: relative error {e:.2e} against {os.path.basename(gguf)}")
            check(toks == toks_g, f"{name}: greedy {toks} vs the GGUF's {toks_g}")
    print(f"ok {name}: worst relative error {worst_ref:.1e} vs fp64 HF forward"
          + (f", {worst_gguf:.1e} vs {os.path.basename(gguf)}" if gguf else ""))


def run_text(model):
    r = subprocess.run([BIN, "run", "-m", model, "--chat", "-p", "What is the capital of France?",
                        "-n", "6" if SANITIZED else "24", "--temp", "0", "-q"],
                       capture_output=True, env=ENV)
    check(r.returncode == 0, f"run -m {model}: exit {r.returncode}: {r.stderr[-300:]!r}")
    return r.stdout


def main():
    path = model_path()
    if not os.path.exists(path):
        print(f"skipped: no model at {path}", file=sys.stderr)
        return 77
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        src = hfgen.Source(path)
        hf = hfgen.hf_tensors(src, tied=True)
        bf16 = hfgen.write_folder(src, os.path.join(tmp, "bf16"), "BF16", tensors=hf)
        f16 = None if SANITIZED else hfgen.write_folder(src, os.path.join(tmp, "f16"), "F16",
                                                        tensors=hf)
        f32 = hfgen.write_folder(src, os.path.join(tmp, "f32"), "F32", shards=3, tied=False,
                                 tensors=dict(hf, **{"lm_head.weight": hf["model.embed_tokens.weight"]}))
        f32_gguf = None if SANITIZED else hfgen.write_gguf(src, os.path.join(tmp, "f32.gguf"),
                                                            "F32", tensors=hf)
        bf16_gguf = hfgen.write_gguf(src, os.path.join(tmp, "bf16.gguf"), "BF16", tensors=hf)
        del src, hf
        print(f"folders written in {time.time() - t0:.1f} s")

        gi = info(path)
        check_info(bf16, gi, 1, "BF16", True)
        if f16:
            check_info(f16, gi, 1, "F16", True)
        check_info(f32, gi, 3, "F32", False)

        check_logits("bf16 folder", bf16, HFRef(bf16), None if SANITIZED else bf16_gguf)
        if f16:
            check_logits("f16 folder", f16, HFRef(f16), None)
        check_logits("f32 sharded untied folder", f32, HFRef(f32), None if SANITIZED else f32_gguf)

        for folder, gguf in [(bf16, bf16_gguf)] + ([] if SANITIZED else [(f32, f32_gguf)]):
            a, b = run_text(folder), run_text(gguf)
            check(a == b and len(a) > 0, f"run --chat --temp 0: {os.path.basename(folder)} wrote "
                  f"{a[:80]!r}, {os.path.basename(gguf)} {b[:80]!r}")
    print(f"test_hf_folder: {time.time() - t0:.1f} s")
    return summary("test_hf_folder")


if __name__ == "__main__":
    sys.exit(main())
