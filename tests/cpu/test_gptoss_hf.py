"""tests/cpu/test_gptoss_hf.py: a GptOssForCausalLM folder (the experts as
fused MXFP4 `_blocks` + `_scales`, gate and up rows interleaved, biases,
sinks) against the GGUF its weights came from.

The GGUF: bench/random_gguf.py's gpt-oss `tiny` shape as MXFP4_F16 (MXFP4
experts, F16 matrices, F32 norms, biases and sinks); the folder: written
from it in Hugging Face's layout by tests/pylib/gptosshf.py (the inverse of
llama.cpp's converter, independent of ignite's repacking). Both through
forward_dump on a 70-token prompt, 2 fixed and 4 greedy steps: logits equal
bit for bit on the exact path and on the int8 path (the folder's experts
are repacked into the very blocks the GGUF holds, never dequantized).
`ignite info` on both: the experts, active parameters and bytes a token
reads as the gguf package's count of the GGUF gives them, MXFP4 tensors. Broken folders (a
`_scales` of the wrong shape or dtype, a missing `_scales`, a `_blocks` of
the wrong shape, a quantization method other than mxfp4): one line naming
the tensor or key, exit 4.
Usage: test_gptoss_hf.py FORWARD_DUMP. Time: ~5 s on 2 cores."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import gptosshf  # noqa: E402
from bench_gguf import random_gguf  # noqa: E402
from test_moe import dump  # noqa: E402

IGNITE = os.environ.get("IGNITE_BIN", "build/ignite")


def same_logits(tool, gguf_path, folder, tmp):
    rng = np.random.default_rng(4546)
    prompt = [int(x) for x in rng.integers(0, 1024, 70)]
    fixed = [int(x) for x in rng.integers(0, 1024, 2)]
    ok = True
    for exact in (True, False):
        lg, gg = dump(tool, gguf_path, prompt, [], fixed, 4, os.path.join(tmp, "g.bin"), exact)
        lf, gf = dump(tool, folder, prompt, [], fixed, 4, os.path.join(tmp, "f.bin"), exact)
        path = "exact" if exact else "int8"
        if lg.shape != lf.shape or not np.array_equal(lg, lf) or gg != gf:
            diff = np.abs(lg - lf).max() if lg.shape == lf.shape else "shapes differ"
            print(f"FAIL folder vs its GGUF, {path} path: max difference {diff}, greedy "
                  f"{gf} vs {gg}")
            ok = False
        elif np.std(lg) == 0:
            print(f"FAIL {path} path: flat logits prove nothing")
            ok = False
    print(f"{'ok' if ok else 'FAILED':6} GptOssForCausalLM folder = its GGUF bit for bit "
          "(exact and int8 paths)")
    return ok


def expected_use(gguf_path):
    """What a token uses, counted here from the GGUF by the gguf package
    (docs/cli.md's definition: the used experts of each expert tensor, the
    rest whole; bytes: one row of the embedding table)."""
    import gguf
    r = gguf.GGUFReader(gguf_path)
    E = int(r.fields["gpt-oss.expert_count"].contents())
    k = int(r.fields["gpt-oss.expert_used_count"].contents())
    active, nbytes = 0, 0
    for t in r.tensors:
        n, b = int(np.prod(t.shape)), int(t.n_bytes)
        if "_exps" in t.name:
            n, b = n // E * k, b // E * k
        elif t.name == "token_embd.weight":
            b //= int(t.shape[1])
        active += n
        nbytes += b
    return {"n_expert": E, "n_expert_used": k, "n_ff_exp": 256, "active_params": active,
            "bytes_per_token": nbytes}


def info_reports_experts(gguf_path, folder):
    """`ignite info` on the GGUF and on the folder: experts, active
    parameters and bytes a token reads as counted here; MXFP4 tensors."""
    import hfgen  # a tokenizer.json (the tiny byte-level BPE): info loads one
    hfgen.tiny_tokenizer().save(os.path.join(folder, "tokenizer.json"))
    want = expected_use(gguf_path)
    ok = True
    for path in (gguf_path, folder):
        r = subprocess.run([IGNITE, "info", "-m", path, "--json"], capture_output=True,
                           text=True)
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        mine = {key: got.get(key) for key in want}
        types = set(got.get("tensor_types", {}))
        if mine != want or "MXFP4" not in types:
            print(f"FAIL info on {os.path.basename(path)}: {mine}, want {want}; types {types} "
                  f"{r.stderr.strip()!r}")
            ok = False
        r = subprocess.run([IGNITE, "info", "-m", path], capture_output=True, text=True)
        line = "experts         8, 2 used a token, FFN size 256 each"
        if line not in r.stdout or f"{want['active_params']} parameters a token" not in r.stdout:
            print(f"FAIL info text on {os.path.basename(path)}: {r.stdout!r}")
            ok = False
    print(f"{'ok' if ok else 'FAILED':6} info: {want['active_params']} active parameters, "
          f"{want['bytes_per_token']} bytes a token, on the GGUF and the folder")
    return ok


def refusals(folder):
    """Broken folders: one line naming the tensor or key, exit 4."""
    from safetensors.numpy import load_file, save_file
    cfg_path = os.path.join(folder, "config.json")
    st_path = os.path.join(folder, "model.safetensors")
    with open(cfg_path) as f:
        cfg = json.load(f)
    weights = load_file(st_path)
    sc = "model.layers.1.mlp.experts.gate_up_proj_scales"
    bl = "model.layers.0.mlp.experts.down_proj_blocks"
    cases = [
        ("a _scales of the wrong shape", None, lambda w: w.update({sc: w[sc][:, :, :-1]}),
         f"tensor '{sc}' in 'model.safetensors' has shape [8, 512, 7], config.json makes it "
         "[8, 512, 8]"),
        ("a _scales of another dtype", None,
         lambda w: w.update({sc: w[sc].astype(np.float32)}),
         f"tensor '{sc}' has dtype F32, expected U8"),
        ("a _scales missing", None, lambda w: w.pop(sc), f"tensor '{sc}' is missing"),
        ("a _blocks of the wrong shape", None, lambda w: w.update({bl: w[bl][:, :, :, :8]}),
         f"tensor '{bl}' in 'model.safetensors' has shape [8, 256, 8, 8]"),
        ("another quantization", {"quantization_config": {"quant_method": "fp8"}}, None,
         "method 'fp8'"),
    ]
    ok = True
    for what, cfg_edit, w_edit, needle in cases:
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, **(cfg_edit or {})), f)
        w = dict(weights)
        if w_edit:
            w_edit(w)
        save_file(w, st_path)
        r = subprocess.run([IGNITE, "info", "-m", folder], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 4 or len(lines) != 1 or needle not in r.stderr or r.stdout:
            print(f"FAIL folder, {what}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
            ok = False
    print(f"{'ok' if ok else 'FAILED':6} {len(cases)} broken gpt-oss folders refused in one "
          "line, exit 4")
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_gptoss_hf.py FORWARD_DUMP")
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gptoss-MXFP4_F16.gguf")
        random_gguf.write(path, "tiny", "MXFP4_F16", seed=46, arch="gpt-oss")
        folder = gptosshf.write_folder(path, os.path.join(tmp, "gptoss-folder"))
        ok = same_logits(tool, path, folder, tmp)
        ok &= info_reports_experts(path, folder)
        ok &= refusals(folder)
    print(f"test_gptoss_hf: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
