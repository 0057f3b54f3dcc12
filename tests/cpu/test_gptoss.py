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
1e-3 and 4e-2 relative with the same top token (MXFP4 only: the Q8_0 file's
first step has a top-2 close enough for int8 activations to swap them, nmse
6.7e-4); then bit for bit on the
exact path (and the int8 path for Q8_0 and MXFP4): the prompt in chunks of
7 = whole, one thread = two. The weights' gains put some gate and up values
past the clamp of 7 and give the sinks a real share of each softmax, so
dropping either breaks the comparison (tried: both fail it).
Usage: test_gptoss.py FORWARD_DUMP
"""
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import random_gguf  # noqa: E402
from ref_gptoss import GptOssRef  # noqa: E402
from test_moe import against_reference, int8_against_reference, invariance  # noqa: E402


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
    print(f"test_gptoss: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
