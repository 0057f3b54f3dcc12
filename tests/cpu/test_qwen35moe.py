"""tests/cpu/test_qwen35moe.py: the CPU forward of a Qwen3.5 MoE hybrid
(qwen35moe: qwen35's gated DeltaNet and gated attention layers, every FFN a
mixture of experts with a shared expert beside it, backend/cpu_moe.c)
against the fp64 numpy reference written from transformers' code
(tests/cpu/ref_deltanet.py, token by token), on bench/random_gguf.py's
qwen35moe `tiny` shape (16 experts of 256, 2 used, a shared expert of 512;
no feed_forward_length key, as llama.cpp's converter writes none) in F16 and
Q4_K_M. The checks are test_deltanet.py's:

- Exact path: a 150-token prompt in one step (the chunked DeltaNet form),
  2 fixed and 6 greedy decode steps: logits within 1e-4 relative of the
  reference at every step, greedy tokens equal, the logits not flat.
- Int8 path (Q4_K_M): NMSE <= 1e-3, relative <= 4e-2, the same top token.
- Chunk sizes (F16, exact path): steps of 64 rows give the whole prompt's
  logits bit for bit; steps of 7 and 100, one token a step and the
  recurrent form within 2e-5 relative, the same greedy tokens.
- Bad files: a shared expert's weight missing, expert_shared_feed_forward_length
  missing (with no feed_forward_length to stand for it): one line naming
  it, exit 4 (`ignite info`).
A mutant that drops the shared expert's sigmoid gate fails the reference
check (docs/testing-mutants.md, moe-shexp-gate). 7 s on the idle 2-core
machine (18 s loaded); in the sanitizer build only Q4_K_M's two paths and
the bad files.
Usage: test_qwen35moe.py FORWARD_DUMP IGNITE
"""
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_gguf import random_gguf  # noqa: E402
import randgguf_qwen35  # noqa: E402
from test_deltanet import (against_reference, chunk_sizes, int8_against_reference,  # noqa: E402
                           refused)
from igtest import sanitized  # noqa: E402

ARCH = "qwen35moe"


def bad_files(ignite, tmp):
    path = os.path.join(tmp, "bad.gguf")
    keys, tensors = randgguf_qwen35.keys, randgguf_qwen35.tensors

    def no_shexp_width():
        randgguf_qwen35.keys = lambda *a: [k for k in keys(*a)
                                           if b"expert_shared_feed_forward_length" not in k]
        try:
            random_gguf.write(path, "tiny", "F16", 1, ARCH)
        finally:
            randgguf_qwen35.keys = keys

    def no_shexp_weight():
        randgguf_qwen35.tensors = lambda *a: [t for t in tensors(*a)
                                              if t[0] != "blk.2.ffn_gate_inp_shexp.weight"]
        try:
            random_gguf.write(path, "tiny", "F16", 1, ARCH)
        finally:
            randgguf_qwen35.tensors = tensors
    return refused(ignite, path, (
        ("missing key", no_shexp_width, "expert_shared_feed_forward_length' is missing"),
        ("missing weight", no_shexp_weight, "blk.2.ffn_gate_inp_shexp.weight' is missing")), ARCH)


def main():
    tool, ignite = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(7)
    vocab = randgguf_qwen35.MOE_SHAPES["tiny"]["vocab"]
    prompt = [int(t) for t in rng.integers(0, vocab, 150)]
    fixed = [int(t) for t in rng.integers(0, vocab, 2)]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # under the sanitizers (a forward ~30x slower) the Q4_K_M file's two paths only
        for qtype in ("Q4_K_M",) if sanitized() else ("F16", "Q4_K_M"):
            path = os.path.join(tmp, f"{ARCH}-tiny-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, seed=5, arch=ARCH)
            name = f"{ARCH} tiny {qtype}"
            good, ref = against_reference(tool, path, name, prompt, fixed, tmp)
            ok &= good
            if good and qtype == "Q4_K_M":
                ok &= int8_against_reference(tool, path, name, ref, prompt, fixed, tmp)
            if qtype == "F16":
                ok &= chunk_sizes(tool, path, name, prompt, fixed, tmp)
        ok &= bad_files(ignite, tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
