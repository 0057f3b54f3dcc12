"""tests/cpu/test_forward_tiny.py: the CPU forward against the fp64 numpy
reference on small synthetic models, written here with tests/pylib/ggufgen.py.

They cover what the real test model does not: the qwen2 layout (RoPE pairs
(i, i + n_rot/2), Q/K/V biases, an untied output head), F16, BF16, Q4_0,
Q4_1, IQ4_NL and IQ4_XS weights, GQA ratios 1, 2 and 4; and they need no download, so the forward
is checked (also under sanitizers) wherever the tests run. Weights are random
but in valid encodings with modest scales. Same checks as
test_forward_ref.py: logits within 1e-4 relative at every step, greedy tokens
equal to the reference's.
Usage: test_forward_tiny.py FORWARD_DUMP
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ggufgen import BLOCK, T_F16, T_F32, T_Q4_0, T_Q8_0, tiny_llama  # noqa: E402
from ref_forward import RefModel  # noqa: E402
from test_forward_ref import check_case  # noqa: E402

T_Q4_1, T_BF16, T_IQ4_NL, T_IQ4_XS = 3, 30, 20, 23


def f16_bytes(x):
    return np.asarray(x, dtype=np.float16).tobytes()


def valid_data(name, ne, ttype, rng):
    """Random weights of `ne` elements in `ttype` with finite, modest scales."""
    n = int(np.prod(ne))
    if ttype == T_F32:
        base = 1.0 if "norm" in name else 0.0
        return (base + 0.2 * rng.standard_normal(n)).astype(np.float32).tobytes()
    if ttype == T_F16:
        return f16_bytes(0.2 * rng.standard_normal(n))
    if ttype == T_BF16:
        f = (0.2 * rng.standard_normal(n)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    be, bb = BLOCK[ttype]
    out = bytearray()
    for _ in range(n // be):
        d = rng.uniform(0.01, 0.05)
        if ttype == T_Q4_0:
            out += f16_bytes([d]) + rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
        elif ttype == T_Q4_1:
            out += f16_bytes([d, -8 * d]) + rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
        elif ttype == T_Q8_0:
            out += f16_bytes([d / 8]) + rng.integers(-128, 128, 32, dtype=np.int8).tobytes()
        elif ttype == T_IQ4_NL:  # levels up to 127
            out += f16_bytes([d / 16]) + rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
        elif ttype == T_IQ4_XS:  # scales -32..31 times levels up to 127
            out += f16_bytes([d / 256]) + rng.integers(0, 256, 134, dtype=np.uint8).tobytes()
        else:
            raise ValueError(f"no generator for type {ttype}")
    assert len(out) == n // be * bb
    return bytes(out)


def write_model(path, seed, **kw):
    g = tiny_llama(**kw)
    rng = np.random.default_rng(seed)
    for t in g.tensors:
        t["data"] = valid_data(t["name"], t["ne"], t["type"], rng)
    with open(path, "wb") as f:
        f.write(g.build())


# name, model options, forward_dump options
MODELS = [
    ("llama Q4_0, Q8_0 embeddings, GQA 2", dict(arch="llama", n_layer=2, n_embd=64, n_head=4,
     n_head_kv=2, n_ff=96, n_vocab=48, mat_type=T_Q4_0, emb_type=T_Q8_0), []),
    ("qwen2 F16, biases, untied Q4_1 head", dict(arch="qwen2", n_layer=2, n_embd=64, n_head=4,
     n_head_kv=4, n_ff=64, n_vocab=40, mat_type=T_F16, emb_type=T_Q4_1, tied=False,
     bias=True), ["-c", "30"]),
    ("llama BF16, GQA 4, f16 cache", dict(arch="llama", n_layer=1, n_embd=64, n_head=4,
     n_head_kv=1, n_ff=32, n_vocab=36, mat_type=T_BF16, emb_type=T_F16), ["--f16"]),
    ("llama IQ4_NL, IQ4_NL embeddings", dict(arch="llama", n_layer=1, n_embd=64, n_head=4,
     n_head_kv=2, n_ff=96, n_vocab=40, mat_type=T_IQ4_NL, emb_type=T_IQ4_NL), []),
    ("llama IQ4_XS, GQA 2", dict(arch="llama", n_layer=1, n_embd=256, n_head=4,
     n_head_kv=2, n_ff=256, n_vocab=32, mat_type=T_IQ4_XS, emb_type=T_Q8_0), []),
]


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_forward_tiny.py FORWARD_DUMP")
    tool = sys.argv[1]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, kw, opts) in enumerate(MODELS):
            path = os.path.join(tmp, f"tiny{i}.gguf")
            write_model(path, seed=100 + i, **kw)
            ref = RefModel(path)
            rng = np.random.default_rng(i)
            prompt = [int(t) for t in rng.integers(0, kw["n_vocab"], 70)]
            fixed = [int(t) for t in rng.integers(0, kw["n_vocab"], 3)]
            bound = 3e-3 if "--f16" in opts else 1e-4
            failed += not check_case(ref, tool, path, name, prompt, opts, fixed, 5, bound, tmp)
    print(f"test_forward_tiny: {len(MODELS)} models, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
