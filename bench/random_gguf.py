#!/usr/bin/env python3
"""bench/random_gguf.py: writes a GGUF file of random weights for a known
Llama shape, stored as F16, Q4_0, Q4_K, Q6_K or Q4_K_M (llama.cpp's recipe:
Q4_K, with attn_v and ffn_down in Q6_K on the layers its use_more_bits
picks and the output head in Q6_K), so that ignite and llama.cpp can be
timed on the same file on a machine that can download nothing (the GPU
check's quant step, scripts/gpu/quant.sh). numpy only (no gguf package there).

Weights are random blocks (quant bytes random, scales set so that
|w| <~ 1/sqrt(cols), as models/synthetic.c makes them); f16 and f32 tensors
repeat a random block of 2^20 values (writing 16 GB of fresh random numbers
would take minutes and measure nothing more). There is no tokenizer:
tokenizer.ggml.model is "no_vocab" and llama.vocab_size the row count, which
llama.cpp accepts for benchmarks; ignite's bench needs no tokenizer either.
tests/models/test_random_gguf.py reads a small one back with the gguf package
and loads it in ignite.

Usage: random_gguf.py OUT.gguf [--shape Llama-3-8B|Llama-tiny] [--type Q4_0|Q4_K|Q6_K|Q4_K_M|F16]
"""
import argparse
import struct
import sys

import numpy as np

SHAPES = {  # layers, embd, heads, kv heads, head dim, ff, vocab, ctx, rope base
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, 8192, 500000.0),
    "Llama-tiny": (2, 256, 4, 2, 64, 768, 1000, 1024, 10000.0),
}
# ggml type ids, elements and bytes per block
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_K": (12, 256, 144),
         "Q6_K": (14, 256, 210)}
FILE_TYPES = {"F16": 1, "Q4_0": 2, "Q4_K": 15, "Q6_K": 18, "Q4_K_M": 15}  # llama_ftype
ALIGN = 32


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == 4:  # uint32
        out += struct.pack("<I", value)
    elif vtype == 6:  # float32
        out += struct.pack("<f", value)
    elif vtype == 8:  # string
        out += gguf_str(value)
    else:
        raise ValueError(vtype)
    return out


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(shape, qtype):
    """(name, type, [ne0, ne1] or [ne0]) in the order llama.cpp writes them."""
    layers, e, h, kvh, hd, ff, vocab = shape[:7]
    base = "Q4_K" if qtype == "Q4_K_M" else qtype
    heavy = "Q6_K" if qtype == "Q4_K_M" else qtype
    out = [("token_embd.weight", base, [e, vocab])]
    for i in range(layers):
        more = heavy if use_more_bits(i, layers) else base
        out += [
            (f"blk.{i}.attn_norm.weight", "F32", [e]),
            (f"blk.{i}.attn_q.weight", base, [e, h * hd]),
            (f"blk.{i}.attn_k.weight", base, [e, kvh * hd]),
            (f"blk.{i}.attn_v.weight", more, [e, kvh * hd]),
            (f"blk.{i}.attn_output.weight", base, [h * hd, e]),
            (f"blk.{i}.ffn_norm.weight", "F32", [e]),
            (f"blk.{i}.ffn_gate.weight", base, [e, ff]),
            (f"blk.{i}.ffn_up.weight", base, [e, ff]),
            (f"blk.{i}.ffn_down.weight", more, [ff, e]),
        ]
    out += [("output_norm.weight", "F32", [e]), ("output.weight", heavy, [e, vocab])]
    return out


def nbytes(ttype, dims):
    _, blk, bb = TYPES[ttype]
    n = int(np.prod(dims))
    assert n % blk == 0 and dims[0] % blk == 0, (ttype, dims)
    return n // blk * bb


def f16_bytes(v):
    return np.array([v], dtype=np.float16).tobytes()


def data(ttype, dims, rng):
    """The tensor's bytes: random blocks with scales for |w| <~ 1/sqrt(cols)."""
    cols = dims[0]
    a = 1.0 / np.sqrt(cols)
    n = int(np.prod(dims))
    if ttype in ("F32", "F16"):
        if len(dims) == 1:  # norms near 1
            return (1.0 + 0.1 * rng.uniform(-1, 1, n)).astype(np.float32).tobytes()
        block = (a * rng.uniform(-1, 1, 1 << 20)).astype(np.float16)
        return np.resize(block, n).tobytes()
    _, blk, bb = TYPES[ttype]
    raw = np.frombuffer(rng.bytes(n // blk * bb), dtype=np.uint8).reshape(-1, bb).copy()
    if ttype == "Q4_0":  # d (q - 8)
        raw[:, 0:2] = np.frombuffer(f16_bytes(a / 8), dtype=np.uint8)
    elif ttype == "Q4_K":  # d sc q - dmin m, 6-bit sc and m
        raw[:, 0:2] = np.frombuffer(f16_bytes(2 * a / (15 * 63)), dtype=np.uint8)
        raw[:, 2:4] = np.frombuffer(f16_bytes(a / 63), dtype=np.uint8)
    elif ttype == "Q6_K":  # d sc (q - 32), 8-bit sc; d is the last field
        raw[:, 208:210] = np.frombuffer(f16_bytes(a / (32 * 128)), dtype=np.uint8)
    return raw.tobytes()


def write(path, shape_name, qtype, seed=1):
    shape = SHAPES[shape_name]
    layers, e, h, kvh, hd, ff, vocab, ctx, rope = shape
    ts = tensors(shape, qtype)
    kvs = [kv("general.architecture", 8, "llama"),
           kv("general.name", 8, f"random {shape_name} {qtype}"),
           kv("general.file_type", 4, FILE_TYPES[qtype]),
           kv("llama.block_count", 4, layers), kv("llama.context_length", 4, ctx),
           kv("llama.embedding_length", 4, e), kv("llama.feed_forward_length", 4, ff),
           kv("llama.attention.head_count", 4, h), kv("llama.attention.head_count_kv", 4, kvh),
           kv("llama.rope.freq_base", 6, rope), kv("llama.rope.dimension_count", 4, hd),
           kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
           kv("llama.vocab_size", 4, vocab), kv("tokenizer.ggml.model", 8, "no_vocab")]
    infos, offset = b"", 0
    for name, ttype, dims in ts:
        infos += gguf_str(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", TYPES[ttype][0], offset)
        offset += (nbytes(ttype, dims) + ALIGN - 1) // ALIGN * ALIGN
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)))
        f.write(b"".join(kvs) + infos)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for name, ttype, dims in ts:
            d = data(ttype, dims, rng)
            assert len(d) == nbytes(ttype, dims)
            f.write(d)
            f.write(b"\0" * (-len(d) % ALIGN))
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="Llama-3-8B", choices=sorted(SHAPES))
    ap.add_argument("--type", default="Q4_0", choices=sorted(FILE_TYPES))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    n = write(args.out, args.shape, args.type, args.seed)
    print(f"{args.out}: {args.shape} {args.type}, {n} bytes of tensors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
