#!/usr/bin/env python3
"""tests/models/test_arch_load.py: loading qwen3 and gemma3 files and the
RoPE scaling keys, and refusing what ignite does not run, on small models
the gguf package writes (tests/pylib/archgen.py).

  - `ignite info --json` on each architecture: shapes and features (RoPE
    scaling, rope_freqs, window, local layers and their base, norms,
    activation, scales) equal to what gguf.GGUFReader reads from the file
    and, where the file is silent, the architecture's definition
    (transformers' Gemma3TextConfig: pattern 6, local base 10000, eps 1e-6,
    query_pre_attn_scalar 256 but 168 = 5376/32 for the 62-layer 27B);
  - an architecture ignite does not know: `info` describes the file (exit 0,
    "supported": false) and `run` refuses it in one line naming it and the
    known ones (exit 4);
  - a known architecture missing a tensor or key, a per-layer shape that
    varies, an unknown or unsupported RoPE scaling: exit 4, one line naming
    the file and the tensor or key.
Label: unit (needs no model file)."""
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np

from archgen import llama3_rope_freqs, write_model

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
U32, F32, STR = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING
ARR, BOOL = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL
failures = []


def info(path):
    r = subprocess.run([BIN, "info", "-m", path, "--json"], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else None), r.stderr


def expect(case, what, got, want):
    ok = abs(got - want) <= 1e-6 * abs(want) if isinstance(want, float) else got == want
    if not ok:
        failures.append(f"{case}: {what}: ignite says {got!r}, expected {want!r}")


def check_info(tmp, case, kw, want):
    path = os.path.join(tmp, case + ".gguf")
    write_model(path, **kw)
    rc, o, err = info(path)
    if rc != 0:
        failures.append(f"{case}: info exit {rc}: {err.strip()}")
        return
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    expect(case, "architecture", o["architecture"], arch)
    expect(case, "supported", o["supported"], True)
    expect(case, "n_layer", o["n_layer"], r.fields[f"{arch}.block_count"].contents())
    expect(case, "n_embd", o["n_embd"], r.fields[f"{arch}.embedding_length"].contents())
    for k, v in want.items():
        got = o["features"][k] if k in o["features"] else o[k]
        expect(case, k, got, v)


def check_refused(tmp, case, kw, want, cmd="info", path=None):
    """kw: write_model's arguments, or None where `path` is written."""
    path = path or os.path.join(tmp, case + ".gguf")
    if kw is not None:
        write_model(path, **kw)
    args = [BIN, "info", "-m", path] if cmd == "info" else \
        [BIN, "run", "-m", path, "-p", "t3", "-n", "1"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    problems = []
    if r.returncode != 4:
        problems.append(f"exit {r.returncode}, want 4")
    if len(r.stderr.splitlines()) != 1:
        problems.append(f"{len(r.stderr.splitlines())} stderr lines, want 1")
    if want not in r.stderr:
        problems.append(f"message lacks {want!r}")
    if path not in r.stderr:
        problems.append("message does not name the file")
    if r.stdout:
        problems.append("wrote to stdout")
    if problems:
        failures.append(f"{case}: {'; '.join(problems)}; stderr: {r.stderr.strip()!r}")


def check_keyed_features(tmp):
    """gemma4's per-layer embeddings and its experts are on where the keys say
    so (embedding_length_per_layer_input, expert_count); a file that holds
    their tensors while the key is 0 or missing is refused, not run without
    those weights (bench/random_gguf.py's tiny and moe-tiny, a key dropped)."""
    from bench_gguf import random_gguf
    import randgguf_gemma4
    build = randgguf_gemma4.build

    def without(key, zero=False):
        def edited(*a, **kw):
            ts, kvs, gain, fixed = build(*a, **kw)
            drop = random_gguf.gguf_str(key)
            kvs = [k for k in kvs if not k.startswith(drop)]
            if zero:
                kvs.append(random_gguf.kv(key, 4, 0))
            return ts, kvs, gain, fixed
        return edited
    cases = [("gemma4_ple_zero", "tiny", "gemma4.embedding_length_per_layer_input", True,
              "tensor 'per_layer_token_embd.weight' is in the file, but gemma4.embedding_length"
              "_per_layer_input is 0 or missing (no per-layer embeddings)"),
             ("gemma4_expert_count_missing", "moe-tiny", "gemma4.expert_count", False,
              "tensor 'blk.0.ffn_gate_inp.weight' is in the file, but gemma4.expert_count is "
              "missing (no mixture of experts)")]
    try:
        for case, shape, key, zero, want in cases:
            randgguf_gemma4.build = without(key, zero)
            path = os.path.join(tmp, case + ".gguf")
            random_gguf.write(path, shape, "Q8_0", arch="gemma4", layers=3 if zero else 1)
            check_refused(tmp, case, None, want, path=path)
    finally:
        randgguf_gemma4.build = build


def kv_group(kind, window, layers, n_head_kv, head_dim):
    """A `kv_groups` entry of `info --json` for paged layers, by the formula
    of docs/kvcache.md: K and V, n_head_kv x head_dim elements a position."""
    per = 2 * len(layers) * n_head_kv * head_dim
    return {"kind": kind, "window": window, "layers": layers,
            "bytes_per_token": {"f32": per * 4, "f16": per * 2},
            "bytes_per_block": {"f32": per * 4 * 64, "f16": per * 2 * 64},
            "bytes_per_sequence": 0}


def gemma(window, **extra):
    keys = {"attention.sliding_window": (window, U32), "rope.freq_base": (1000000.0, F32)}
    keys.update(extra)
    return keys


SMALL = dict(n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=64, n_vocab=32)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_info(tmp, "qwen3", dict(arch="qwen3", head_dim=48, **SMALL), {
            "head_dim": 48, "rope_style": "half-split", "has_qkv_bias": False, "qk_norm": True,
            "post_norms": False, "ffn_activation": "silu", "embedding_scale": 1.0,
            "attention_scale": 48 ** -0.5, "sliding_window": 0, "rope_scaling": "none",
            "kv_groups": [kv_group("full", 0, [0, 1], 1, 48)]})
        check_info(tmp, "gemma3_270m_like", dict(
            arch="gemma3", n_layer=18, n_embd=64, n_head=4, n_head_kv=1, head_dim=256, n_ff=64,
            n_vocab=32, keys=gemma(512)), {
            "head_dim": 256, "qk_norm": True, "post_norms": True, "ffn_activation": "gelu_tanh",
            "embedding_scale": 8.0, "attention_scale": 1 / 16, "sliding_window": 512,
            "sliding_window_layers": 15, "rope_base_local": 10000.0, "rope_base": 1e6,
            "norm_eps": 1e-6, "rope_scaling": "none",
            # every sixth layer global (transformers' pattern 6): two groups
            "kv_groups": [kv_group("sliding_window", 512, [i for i in range(18) if i % 6 != 5],
                                   1, 256),
                          kv_group("full", 0, [5, 11, 17], 1, 256)]})
        check_info(tmp, "gemma3_4b_like", dict(
            arch="gemma3", n_layer=7, n_embd=64, n_head=2, n_head_kv=1, head_dim=32, n_ff=64,
            n_vocab=32, keys=gemma(64, **{"rope.scaling.type": ("linear", STR),
                                          "rope.scaling.factor": (8.0, F32),
                                          "rope.freq_base_swa": (5000.0, F32)})), {
            "rope_scaling": "linear", "rope_scaling_factor": 8.0, "sliding_window_layers": 6,
            "rope_base_local": 5000.0})
        check_info(tmp, "gemma3_27b_like", dict(
            arch="gemma3", n_layer=62, n_embd=64, n_head=2, n_head_kv=1, head_dim=16, n_ff=32,
            n_vocab=32, keys=gemma(8)), {"attention_scale": 32 ** -0.5,
                                         "sliding_window_layers": 52})
        check_info(tmp, "gemma3_no_window", dict(arch="gemma3", **SMALL), {
            "sliding_window": 0, "sliding_window_layers": 0, "rope_base_local": None})
        check_info(tmp, "gemma3_pattern_bools", dict(
            arch="gemma3", n_layer=4, n_embd=64, n_head=2, n_head_kv=1, n_ff=64, n_vocab=32,
            keys=gemma(16, **{"attention.sliding_window_pattern":
                              ([True, False, True, True], ARR)})), {
            "sliding_window_layers": 3,
            "kv_groups": [kv_group("sliding_window", 16, [0, 2, 3], 1, 32),
                          kv_group("full", 0, [1], 1, 32)]})
        check_info(tmp, "llama3_rope_freqs", dict(
            arch="llama", tensors={"rope_freqs.weight": llama3_rope_freqs(500000.0, 32, 8.0)},
            **SMALL), {"rope_freqs": True, "rope_scaling": "none"})
        check_info(tmp, "qwen2_yarn", dict(
            arch="qwen2", keys={"rope.scaling.type": ("yarn", STR),
                                "rope.scaling.factor": (4.0, F32),
                                "rope.scaling.original_context_length": (32768, U32)},
            **SMALL), {"rope_scaling": "yarn", "rope_scaling_factor": 4.0,
                       "rope_original_context": 32768})
        check_info(tmp, "llama_factor_only", dict(
            arch="llama", keys={"rope.scaling.factor": (2.0, F32)}, **SMALL),
            {"rope_scaling": "linear", "rope_scaling_factor": 2.0})
        check_info(tmp, "llama_uniform_head_arrays", dict(
            arch="llama", keys={"attention.head_count_kv": ([1, 1], ARR)}, **SMALL),
            {"n_head_kv": 1})

        # an architecture ignite does not run: described by info, refused by run
        path = os.path.join(tmp, "mamba.gguf")
        write_model(path, arch="mamba", keys={"attention.head_count_kv": ([1, 2], ARR)},
                    **SMALL)
        rc, o, err = info(path)
        if rc != 0 or o["supported"] is not False or o["architecture"] != "mamba" or \
                o["tokenizer"]["n_tokens"] != 32:
            failures.append(f"mamba info: exit {rc}, {o}, {err.strip()!r}")
        check_refused(tmp, "unknown_arch", dict(arch="gpt2", **SMALL),
                      "architecture 'gpt2' is not supported (supported: llama, qwen2, qwen3, "
                      "gemma3, qwen3moe, qwen35, gemma4, gpt-oss, qwen35moe)", cmd="run")
        # gemma4 (tests/cpu/test_gemma4.py runs it): a llama-shaped file lacks its weights
        check_refused(tmp, "gemma4_llama_shaped", dict(
            arch="gemma4", keys={"attention.head_count_kv": ([1, 2], ARR)}, **SMALL),
            "tensor 'blk.0.attn_q_norm.weight' is missing")

        check_keyed_features(tmp)

        check_refused(tmp, "gemma3_no_post_norm", dict(
            arch="gemma3", skip=("blk.1.post_ffw_norm.weight",), **SMALL),
            "tensor 'blk.1.post_ffw_norm.weight' is missing")
        check_refused(tmp, "qwen3_no_k_norm", dict(
            arch="qwen3", skip=("blk.0.attn_k_norm.weight",), **SMALL),
            "tensor 'blk.0.attn_k_norm.weight' is missing")
        check_refused(tmp, "gemma3_no_block_count", dict(
            arch="gemma3", skip=("gemma3.block_count",), **SMALL),
            "metadata key 'gemma3.block_count' is missing")
        check_refused(tmp, "longrope", dict(
            arch="llama", keys={"rope.scaling.type": ("longrope", STR)}, **SMALL),
            "llama.rope.scaling.type 'longrope' is not supported")
        check_refused(tmp, "scaling_unknown", dict(
            arch="qwen3", keys={"rope.scaling.type": ("ntk", STR)}, **SMALL),
            "qwen3.rope.scaling.type 'ntk' is not supported (supported: none, linear, yarn, "
            "longrope)")
        check_refused(tmp, "yarn_log_mul", dict(
            arch="qwen2", keys={"rope.scaling.type": ("yarn", STR),
                                "rope.scaling.factor": (4.0, F32),
                                "rope.scaling.yarn_log_multiplier": (0.1, F32)}, **SMALL),
            "qwen2.rope.scaling.yarn_log_multiplier (YaRN with mscale_all_dim) is not supported")
        check_refused(tmp, "per_layer_kv_heads", dict(
            arch="llama", keys={"attention.head_count_kv": ([1, 2], ARR)}, **SMALL),
            "llama.attention.head_count_kv differs between layers (1, then 2 at layer 1)")
        check_refused(tmp, "rope_freqs_shape", dict(
            arch="llama", tensors={"rope_freqs.weight": np.ones(8)}, **SMALL),
            "tensor 'rope_freqs.weight' has shape ne=[8, 1, 1, 1], expected ne=[16, 1]")
        check_refused(tmp, "rope_freqs_zero", dict(
            arch="llama", tensors={"rope_freqs.weight": np.zeros(16)}, **SMALL),
            "tensor 'rope_freqs.weight' holds 0 at 0, expected positive frequency factors")
        check_refused(tmp, "pattern_length", dict(
            arch="gemma3", keys=gemma(8, **{"attention.sliding_window_pattern":
                                            ([True, False, True], ARR)}), **SMALL),
            "gemma3.attention.sliding_window_pattern should be 2 bools (one per layer)")
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"test_arch_load: {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
