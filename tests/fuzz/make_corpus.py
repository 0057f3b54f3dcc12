#!/usr/bin/env python3
"""tests/fuzz/make_corpus.py: writes the GGUF fuzzing seed corpus into
tests/fuzz/corpus/ (committed; rerun after changing tests/pylib/ggufgen.py).
Small valid files that between them use every metadata value type, arrays
of every element type, GGUF v2 and v3, several alignments, both supported
architectures and a tensor of every ggml type ignite dequantizes."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from ggufgen import (ARR, BOOL, F32, F64, I8, I16, I32, I64, STR, U8, U16, U32, U64,  # noqa: E402
                     Gguf, tiny_llama)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
# ggml id -> (block elems, block bytes) for every type quant.c dequantizes
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22),
         7: (32, 24), 8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144),
         13: (256, 176), 14: (256, 210)}


def all_values():
    g = Gguf()
    g.add("u8", U8, 200).add("i8", I8, -100).add("u16", U16, 60000).add("i16", I16, -30000)
    g.add("u32", U32, 4000000000).add("i32", I32, -2000000000).add("f32", F32, 1.5)
    g.add("bool", BOOL, 1).add("str", STR, "hello").add("u64", U64, 1 << 60)
    g.add("i64", I64, -(1 << 60)).add("f64", F64, 2.25)
    for name, t, v in [("au8", U8, [1, 2]), ("ai8", I8, [-1]), ("au16", U16, [7]),
                       ("ai16", I16, [-7]), ("au32", U32, [9]), ("ai32", I32, [-9]),
                       ("af32", F32, [0.5]), ("abool", BOOL, [0, 1]), ("astr", STR, ["a", ""]),
                       ("au64", U64, [3]), ("ai64", I64, [-3]), ("af64", F64, [1.0]),
                       ("aempty", U32, [])]:
        g.add(name, ARR, v, t)
    g.tensor("one", [4], 0)
    return g


def all_types():
    g = Gguf(alignment=16).add("general.alignment", U32, 16)
    rng = np.random.default_rng(7)
    for tid, (be, bb) in TYPES.items():
        n_blocks = {1: 32, 32: 8, 256: 1}[be]
        data = rng.integers(0, 256, n_blocks * bb, dtype=np.uint8).tobytes()
        g.tensor(f"t{tid}", [n_blocks * be], tid, data=data)
    return g


def main():
    os.makedirs(OUT, exist_ok=True)
    v2 = tiny_llama()
    v2.version = 2
    files = {
        "tiny_llama.gguf": tiny_llama(),
        "tiny_llama_v2.gguf": v2,
        "tiny_qwen2.gguf": tiny_llama(arch="qwen2", bias=True, tied=False, n_vocab=8),
        "align1.gguf": tiny_llama(alignment=1).add("general.alignment", U8, 1),
        "all_values.gguf": all_values(),
        "all_types.gguf": all_types(),
        "header_only.gguf": Gguf(),
    }
    for name, g in files.items():
        b = g.build()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)
        print(f"{name}: {len(b)} bytes")


if __name__ == "__main__":
    main()
