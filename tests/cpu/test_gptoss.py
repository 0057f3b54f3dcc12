"""tests/cpu/test_gptoss.py: the CPU forward of gpt-oss (models/arch.c's
row: attention sinks, Q/K/V and output biases, sliding window on even
layers, YaRN, experts with biases and the clamped SwiGLU, MXFP4 experts)
against the fp64 numpy reference written from transformers' GptOss code
(tests/cpu/ref_gptoss.py, weights dequantized by the gguf package), on
bench/random_gguf.py's gpt-oss `tiny` shape (2 layers, window 32 on layer
0, 8 experts of 256 with 2 used) written here in F16, Q8_0 and MXFP4.

Each file: a 90-token prompt (past the window of 32 and a KV block of 64),
2 fixed and 6 greedy decode steps, on the exact path: logits within 1e-4
relative of the reference at every step and greedy tokens equal, a step
with router logits within 1e-6 at the top-k edge named and left out
(tests/cpu/test_moe.py's checks, and its check that the logits are not
flat). On the int8 path (the default) the MXFP4 file's logits within NMSE
2e-3 (INT8_NMSE says why) and 4e-2 relative, the same top token unless the
reference's top two lie closer than the step's largest error (named) (MXFP4 only: the Q8_0 file's
first step has a top-2 close enough for int8 activations to swap them, nmse
6.7e-4); then bit for bit on the
exact path (and the int8 path for Q8_0 and MXFP4): the prompt in chunks of
7 = whole, one thread = two. The weights' gains put some gate and up values
past the clamp of 7 and give the sinks a real share of each softmax, so
dropping either breaks the comparison (tried: both fail it). Last, broken
files (sinks missing or of the wrong length, an expert bias of the wrong
shape, the router or a bias in MXFP4) are one line naming the tensor, exit 4.
Usage: test_gptoss.py FORWARD_DUMP
"""
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_gguf import random_gguf  # noqa: E402
from ref_gptoss import GptOssRef  # noqa: E402
from test_moe import against_reference, dump, invariance  # noqa: E402

# The int8 path against the reference: test_moe's bounds but NMSE 2e-3 (its
# 1e-3 is Q4_K_M's on qwen3moe; here the experts' gate and up are 6x the
# embedding's scale, into the clamp, and carry int8 activations' error
# further: the MXFP4 file's worst step is 1.3e-3, its top token the same).
INT8_NMSE, INT8_REL = 2e-3, 4e-2


def int8_against_reference(ref, tool, path, name, prompt, fixed, n_greedy, tmp):
    flat, greedy = dump(tool, path, prompt, [], fixed, n_greedy, os.path.join(tmp, "q8.bin"),
                        exact=False)
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    cache, worst = ref.new_cache(), [0.0, 0.0]
    for i, toks in enumerate([prompt] + [[t] for t in fixed + greedy]):
        r = ref.forward(toks, cache)
        nmse = np.mean((ours[i] - r) ** 2) / np.mean(r ** 2)
        rel = np.abs(ours[i] - r).max() / np.abs(r).max()
        worst = [max(worst[0], nmse), max(worst[1], rel)]
        mine, theirs = int(np.argmax(ours[i])), int(np.argmax(r))
        # a top swapped where the reference's top two lie within this step's
        # error of each other: named, not failed (the error is bounded above)
        swap = mine != theirs and r[theirs] - r[mine] > np.abs(ours[i] - r).max()
        if mine != theirs and not swap:
            print(f"  note {name}, int8 path, step {i}: top {mine} vs {theirs}, "
                  f"{r[theirs] - r[mine]:.2e} apart in the reference, within the step's error")
        if nmse > INT8_NMSE or rel > INT8_REL or swap:
            print(f"FAIL {name}, int8 path, step {i}: nmse {nmse:.2e}, relative {rel:.2e}, "
                  f"top {int(np.argmax(ours[i]))} vs {int(np.argmax(r))}")
            return False
    print(f"ok     {name}, int8 path: worst nmse {worst[0]:.2e}, relative {worst[1]:.2e}")
    return True


def refusals(tmp):
    """Broken gpt-oss files: one line naming the tensor, exit 4 (`ignite info`)."""
    import subprocess

    import randgguf_gptoss
    bin_ = os.environ.get("IGNITE_BIN", "build/ignite")
    orig = randgguf_gptoss.tensors

    def edited(drop=None, dims=None, ttype=None):
        def f(sh, qtype, vocab):
            out = []
            for name, t, d in orig(sh, qtype, vocab):
                if name == drop:
                    continue
                out.append((name, ttype.get(name, t) if ttype else t,
                            dims.get(name, d) if dims else d))
            return out
        return f
    cases = [
        ("a layer's sinks missing", edited(drop="blk.1.attn_sinks.weight"),
         "tensor 'blk.1.attn_sinks.weight' is missing"),
        ("sinks of the wrong length", edited(dims={"blk.0.attn_sinks.weight": [5]}),
         "tensor 'blk.0.attn_sinks.weight' has shape ne=[5, 1, 1, 1], expected ne=[4, 1]"),
        ("an expert bias of the wrong shape", edited(dims={"blk.0.ffn_up_exps.bias": [256, 7]}),
         "tensor 'blk.0.ffn_up_exps.bias' has shape ne=[256, 7, 1, 1], expected ne=[256, 8]"),
        ("the router in MXFP4", edited(ttype={"blk.0.ffn_gate_inp.weight": "MXFP4"}),
         "tensor 'blk.0.ffn_gate_inp.weight' (the router) has type MXFP4, expected F32"),
        ("a bias in MXFP4", edited(ttype={"blk.0.attn_output.bias": "MXFP4"}),
         "tensor 'blk.0.attn_output.bias' has type MXFP4, expected F32"),
    ]
    ok = True
    path = os.path.join(tmp, "broken.gguf")
    try:
        for what, fn, needle in cases:
            randgguf_gptoss.tensors = fn
            random_gguf.write(path, "tiny", "MXFP4", seed=1, arch="gpt-oss")
            r = subprocess.run([bin_, "info", "-m", path], capture_output=True, text=True)
            lines = r.stderr.strip().splitlines()
            if r.returncode != 4 or len(lines) != 1 or needle not in r.stderr or r.stdout:
                print(f"FAIL refusal, {what}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
                ok = False
    finally:
        randgguf_gptoss.tensors = orig
    print(f"{'ok' if ok else 'FAILED':6} gpt-oss: {len(cases)} broken files refused in one line, "
          "exit 4")
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_gptoss.py FORWARD_DUMP")
    tool = sys.argv[1]
    failed = 0
    rng = np.random.default_rng(4545)
    with tempfile.TemporaryDirectory() as tmp:
        for qtype in ("F16", "Q8_0", "MXFP4"):
            path = os.path.join(tmp, f"gptoss-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, seed=45, arch="gpt-oss")
            ref = GptOssRef(path)
            prompt = [int(t) for t in rng.integers(0, ref.n_vocab, 90)]
            fixed = [int(t) for t in rng.integers(0, ref.n_vocab, 2)]
            name = f"gpt-oss tiny {qtype}"
            failed += not against_reference(ref, tool, path, name, prompt, fixed, 6, tmp)
            if qtype == "MXFP4":  # the format this adds (test_moe: Q4_K_M's)
                failed += not int8_against_reference(GptOssRef(path), tool, path, name, prompt,
                                                     fixed, 6, tmp)
            paths = (True,) if qtype == "F16" else (True, False)
            failed += not invariance(tool, path, name, prompt, fixed, 3, tmp, paths)
        failed += not refusals(tmp)
    print(f"test_gptoss: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
