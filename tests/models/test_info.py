#!/usr/bin/env python3
"""tests/models/test_info.py: `ignite info --json` on the real model against
what gguf.GGUFReader reads from the same file, plus the text form and the
spec defaults/derivations (head_dim, tied output, KV bytes, the weights'
bytes on a CUDA device) computed here from the reader's fields. Exit 77 when
the model is absent."""
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import gguf
from igtest import model_path

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
failures = []


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def expect(what, got, want, rel=0.0):
    ok = abs(got - want) <= rel * abs(want) if rel and isinstance(want, float) else got == want
    if not ok:
        failures.append(f"{what}: ignite says {got!r}, the gguf package {want!r}")


def main():
    path = model_path()
    if not os.path.exists(path):
        print(f"skipped: no model at {path}", file=sys.stderr)
        return 77
    r = subprocess.run([BIN, "info", "-m", path, "--json"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        print(f"FAIL: exit {r.returncode}: {r.stderr}", file=sys.stderr)
        return 1
    info = json.loads(r.stdout)  # exactly one JSON object, nothing else on stdout
    if r.stdout.count("\n") != 1:
        failures.append(f"--json is not one line: {r.stdout.count(chr(10))} newlines")
    reader = gguf.GGUFReader(path)
    arch = field(reader, "general.architecture")
    a = lambda k, d=None: field(reader, f"{arch}.{k}", d)  # noqa: E731

    expect("architecture", info["architecture"], arch)
    expect("name", info["name"], field(reader, "general.name"))
    expect("gguf_version", info["gguf_version"], int(field(reader, "GGUF.version")))
    expect("file_size", info["file_size"], os.path.getsize(path))
    expect("n_layer", info["n_layer"], a("block_count"))
    expect("n_embd", info["n_embd"], a("embedding_length"))
    expect("n_head", info["n_head"], a("attention.head_count"))
    expect("n_head_kv", info["n_head_kv"], a("attention.head_count_kv", a("attention.head_count")))
    head_dim = a("attention.key_length", a("embedding_length") // a("attention.head_count"))
    expect("head_dim", info["head_dim"], head_dim)
    expect("n_ff", info["n_ff"], a("feed_forward_length"))
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    expect("n_vocab", info["n_vocab"], a("vocab_size", int(emb.shape[1])))
    expect("n_ctx_train", info["n_ctx_train"], a("context_length"))
    expect("n_rot", info["n_rot"], a("rope.dimension_count", head_dim))
    expect("rope_base", info["rope_base"], float(a("rope.freq_base", 10000.0)), rel=1e-12)
    expect("norm_eps", info["norm_eps"], float(a("attention.layer_norm_rms_epsilon", 1e-5)),
           rel=1e-12)
    expect("rope_style", info["rope_style"], {"llama": "adjacent", "qwen2": "half-split"}[arch])
    names = {t.name for t in reader.tensors}
    expect("tied_embeddings", info["tied_embeddings"], "output.weight" not in names)
    expect("has_qkv_bias", info["has_qkv_bias"], "blk.0.attn_q.bias" in names)
    tok = info["tokenizer"]
    expect("tokenizer.model", tok["model"], field(reader, "tokenizer.ggml.model"))
    expect("tokenizer.pre", tok["pre"], field(reader, "tokenizer.ggml.pre"))
    expect("bos_id", tok["bos_id"], field(reader, "tokenizer.ggml.bos_token_id"))
    expect("eos_id", tok["eos_id"], field(reader, "tokenizer.ggml.eos_token_id"))
    expect("n_tokens", tok["n_tokens"], len(reader.fields["tokenizer.ggml.tokens"].data))
    expect("chat_template", tok["chat_template"], "tokenizer.chat_template" in reader.fields)
    expect("n_tensors", info["n_tensors"], len(reader.tensors))
    expect("n_params", info["n_params"], int(sum(int(np.prod(t.shape)) for t in reader.tensors)))
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    sizes = Counter()
    for t in reader.tensors:
        sizes[t.tensor_type.name] += int(t.n_bytes)
    want_types = {k: {"count": counts[k], "bytes": sizes[k]} for k in counts}
    expect("tensor_types", info["tensor_types"], want_types)
    # On a CUDA device (computed on the host): native keeps the file's blocks
    # (Q6_K: 2 bytes more a block, each allocation's planes 256-aligned), so
    # within 5% of the file's tensor bytes; f16 is 2 bytes a matrix element
    # and f32 norms. Tensors the device layout lacks (none here) go f16.
    tensor_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    f16_bytes = sum((2 if len(t.shape) >= 2 else 4) * int(np.prod(t.shape))
                    for t in reader.tensors)
    cw = info["cuda_weight_bytes"]
    if not tensor_bytes <= cw["native"] <= 1.05 * tensor_bytes:
        failures.append(f"cuda_weight_bytes.native {cw['native']}: the tensors hold {tensor_bytes}")
    if not f16_bytes <= cw["f16"] <= 1.001 * f16_bytes:
        failures.append(f"cuda_weight_bytes.f16 {cw['f16']}: 2 bytes a weight make {f16_bytes}")
    n_kv = a("attention.head_count_kv", a("attention.head_count"))
    per = 2 * a("block_count") * n_kv * head_dim
    # ggml's q8_0 and q4_0: 32 values in 34 and 18 bytes (head dims of whole blocks);
    # the CUDA pool's fp8 (e4m3, an f16 scale a 32): 34
    expect("kv_bytes_per_token", info["kv_bytes_per_token"],
           {"f32": per * 4, "f16": per * 2, "q8_0": per // 32 * 34, "q4_0": per // 32 * 18,
            "fp8": per // 32 * 34}
           if head_dim % 32 == 0 else {"f32": per * 4, "f16": per * 2})
    # no window: one group of full attention, every layer
    n_layer = a("block_count")
    expect("kv_groups", info["kv_groups"], [{
        "kind": "full", "window": 0, "layers": list(range(n_layer)),
        "bytes_per_token": {"f32": per * 4, "f16": per * 2},
        "bytes_per_block": {"f32": per * 4 * 64, "f16": per * 2 * 64},
        "bytes_per_sequence": 0}])

    text = subprocess.run([BIN, "info", "-m", path], capture_output=True, text=True, timeout=60)
    if text.returncode != 0 or text.stderr:
        failures.append(f"text form: exit {text.returncode}, stderr {text.stderr!r}")
    for needle in (f"architecture    {arch}", f"layers          {a('block_count')}",
                   f"{info['n_params']}", "chat template   yes", f"{per * 2} bytes/token f16",
                   f"KV group        full attention, {n_layer} layers (0-{n_layer - 1}): "
                   f"{per * 4} bytes/token f32, {per * 2} f16"):
        if needle not in text.stdout:
            failures.append(f"text form lacks {needle!r}")
    h = subprocess.run([BIN, "info", "--help"], capture_output=True, text=True)
    if h.returncode != 0 or "--json" not in h.stdout:
        failures.append("info --help")
    u = subprocess.run([BIN, "info", "--bogus"], capture_output=True, text=True)
    if u.returncode != 2:
        failures.append(f"info --bogus: exit {u.returncode}, want 2")

    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"test_info: {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
