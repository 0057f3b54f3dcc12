"""tests/cpu/test_forward_arch.py: the CPU forward of every architecture and
RoPE scaling against the fp64 numpy reference (tests/cpu/ref_forward.py,
written from transformers' modeling code) on small synthetic models made
with the gguf package (tests/pylib/archgen.py): the real models' structure
(tensor names, metadata keys, the Gemma 3 layer pattern) at a few dozen
dimensions, random weights.

Each case prefills a prompt (whole, or in chunks that do not line up with
the window or the attention tiles), then runs fixed and greedy decode
steps; logits must be within 1e-4 relative of the reference at every step
(f16 cache: 3e-3) and greedy tokens equal (test_forward_ref.check_case).
Sliding windows are smaller than the prompt, and prompts shorter than the
window decode past its edge, so both attention paths cross it.
Usage: test_forward_arch.py FORWARD_DUMP
"""
import os
import sys
import tempfile

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from archgen import T, llama3_rope_freqs, write_model  # noqa: E402
from ref_forward import RefModel  # noqa: E402
from test_forward_ref import check_case  # noqa: E402
from igtest import sanitized  # noqa: E402

U32, F32, STR = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING


def gemma(window, **extra):
    keys = {"attention.sliding_window": (window, U32),
            "rope.freq_base": (1000000.0, F32)}
    keys.update(extra)
    return keys


# name, write_model arguments, prompt length, forward_dump options,
# fixed decode steps, greedy steps
CASES = [
    ("qwen3, head_dim 32 != n_embd / n_head, GQA 2", dict(
        arch="qwen3", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=32, n_ff=96,
        rope_base=1000000.0), 70, ["-c", "30"], 3, 5),
    ("qwen3 F16 untied, MHA, one thread", dict(
        arch="qwen3", n_layer=2, n_embd=64, n_head=2, n_head_kv=2, mat=T.F16, emb=T.F16,
        tied=False), 40, ["-t", "1"], 2, 3),
    ("gemma3 1B-like: 7 layers (5 local, 1 global, 1 local), head_dim 256, window 8, Q5_0",
     dict(arch="gemma3", n_layer=7, n_embd=128, n_head=2, n_head_kv=1, head_dim=256, n_ff=160,
          mat=T.Q5_0, emb=T.Q8_0, keys=gemma(8)), 70, ["-c", "16"], 3, 5),
    ("gemma3 window 70 (crosses key tiles and decode chunks), unchunked",
     dict(arch="gemma3", n_layer=6, n_embd=64, n_head=4, n_head_kv=2, head_dim=32, n_ff=96,
          keys=gemma(70)), 200, [], 2, 3),
    ("gemma3 window 70 in chunks of 23", dict(
        arch="gemma3", n_layer=6, n_embd=64, n_head=4, n_head_kv=2, head_dim=32, n_ff=96,
        keys=gemma(70)), 200, ["-c", "23"], 2, 3),
    ("gemma3 prompt 30 < window 40, decode past its edge", dict(
        arch="gemma3", n_layer=6, n_embd=64, n_head=4, n_head_kv=1, head_dim=32, n_ff=64,
        keys=gemma(40)), 30, [], 4, 16),
    ("gemma3 4B-like: linear RoPE 8 on global layers, local base from the file", dict(
        arch="gemma3", n_layer=6, n_embd=64, n_head=2, n_head_kv=1, head_dim=64, n_ff=96,
        keys=gemma(16, **{"rope.scaling.type": ("linear", STR),
                          "rope.scaling.factor": (8.0, F32),
                          "rope.freq_base_swa": (20000.0, F32)})), 60, ["-c", "25"], 2, 4),
    ("gemma3 27B-like: 62 layers, query_pre_attn_scalar = n_embd / n_head (32 != head_dim 16)",
     dict(arch="gemma3", n_layer=62, n_embd=64, n_head=2, n_head_kv=1, head_dim=16, n_ff=32,
          n_vocab=32, keys=gemma(6)), 20, [], 1, 3),
    ("gemma3 pattern 3 from the file, soft-capped scores (50) and logits (3)", dict(
        arch="gemma3", n_layer=4, n_embd=64, n_head=2, n_head_kv=1, head_dim=32, n_ff=64,
        keys=gemma(10, **{"attention.sliding_window_pattern": (3, U32),
                          "attn_logit_softcapping": (50.0, F32),
                          "final_logit_softcapping": (3.0, F32)})), 40, ["-c", "7"], 2, 3),
    ("gemma3 window 12, f16 cache", dict(
        arch="gemma3", n_layer=6, n_embd=64, n_head=4, n_head_kv=2, head_dim=32, n_ff=96,
        keys=gemma(12)), 50, ["--f16", "-c", "17"], 2, 4),
    ("llama with rope_freqs (Llama 3.1's scaling, factor 8, original context 64)", dict(
        arch="llama", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=96,
        tensors={"rope_freqs.weight": llama3_rope_freqs(10000.0, 32, 8.0, old_ctx=64)}),
     90, ["-c", "40"], 2, 4),
    ("llama, linear RoPE scaling 4", dict(
        arch="llama", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=96,
        keys={"rope.scaling.type": ("linear", STR), "rope.scaling.factor": (4.0, F32)}),
     50, [], 2, 3),
    ("qwen2, YaRN factor 4 from 4096 positions", dict(
        arch="qwen2", n_layer=2, n_embd=64, n_head=2, n_head_kv=2, n_ff=64,
        keys={"rope.scaling.type": ("yarn", STR), "rope.scaling.factor": (4.0, F32),
              "rope.scaling.original_context_length": (4096, U32)}),
     60, ["-c", "13"], 2, 3),
    ("qwen3, YaRN factor 2.5 with beta_fast 16 and beta_slow 2", dict(
        arch="qwen3", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=64,
        keys={"rope.scaling.type": ("yarn", STR), "rope.scaling.factor": (2.5, F32),
              "rope.scaling.original_context_length": (2048, U32),
              "rope.scaling.yarn_beta_fast": (16.0, F32),
              "rope.scaling.yarn_beta_slow": (2.0, F32)}),
     40, [], 2, 3),
]

# Under sanitizers: one case per path, short.
SANITIZED = [0, 2, 9, 10]


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_forward_arch.py FORWARD_DUMP")
    tool = sys.argv[1]
    cases = [CASES[i] for i in SANITIZED] if sanitized() else CASES
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, kw, n_prompt, opts, n_fixed, n_greedy) in enumerate(cases):
            path = os.path.join(tmp, f"arch{i}.gguf")
            write_model(path, seed=200 + i, **kw)
            ref = RefModel(path)
            n_vocab = kw.get("n_vocab", 48)
            rng = np.random.default_rng(i)
            prompt = [int(t) for t in rng.integers(0, n_vocab, n_prompt)]
            fixed = [int(t) for t in rng.integers(0, n_vocab, n_fixed)]
            bound = 3e-3 if "--f16" in opts else 1e-4
            failed += not check_case(ref, tool, path, name, prompt, opts, fixed, n_greedy,
                                     bound, tmp)
    print(f"test_forward_arch: {len(cases)} models, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
