#!/usr/bin/env python3
"""bench/kvq_judge.py: how much a quantized KV cache alone moves a model's
next-token distributions, with tests/cpu/ref_forward.py's fp64 numpy forward
(llama, qwen2, qwen3, gemma3) as the judge. A benchmark, not a test.

For the first --chunks windows of a perplexity base file (its tokens, its
window length; the window's first token replaced by --bos), the reference runs
each window once per cache variant, everything float64 but what the variant
rounds after RoPE (ref_forward's kv_hook):

  f16        K and V rounded to f16 (the base both tools compare against)
  T          K and V of type T (q8_0, q4_0) as ggml's reference quantizers
             leave them (quantize_row_q8_0_ref / _q4_0_ref, d stored as f16),
             of the rows rotated as llama.cpp's attn_rot_k / attn_rot_v do
             (K and the query by the Walsh-Hadamard matrix of the largest
             power of two dividing the head dim, V by 64); the query exact
  T+qq       the same with the rotated query rounded to int8 in blocks of 32
             (d = amax / 127, ggml's quantize_row_q8_0: what both tools' CPU
             scores of a quantized K read; d kept in f32 as ignite's int8 path)
  T/K, T/V   only K, or only V, of type T (the query exact)

and prints, for each variant, the mean KL divergence of the f16 variant's
distribution from it over the scored rows (the second half of each window, as
`perplexity --kl-divergence`): the quantization's own KL, free of either
tool's arithmetic. With LABEL=VARIANT=FILE arguments (perplexity base files
of the same text, e.g. a tool's q4_0 run written with --kl-divergence-base),
each file's mean KL from that variant's reference too: a tool's arithmetic
around the same cache.

usage: bench/kvq_judge.py MODEL.gguf BASE.kl --types q4_0 [--chunks N] [--bos ID]
                          [--variants f16,q4_0,q4_0+qq] [LABEL=VARIANT=FILE ...]
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cpu"))
sys.path.insert(0, HERE)
from ref_forward import RefModel  # noqa: E402
from kl_judge import open_base, record_logprobs, kl_from  # noqa: E402


def f16(x):
    return x.astype(np.float16).astype(np.float64)


def q8_0(x, d_f16=True):
    """ggml's quantize_row_q8_0_ref, dequantized: blocks of 32, d = amax / 127
    (stored as f16 where d_f16), q = round(x / d) half away from zero."""
    b = x.reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / 127
    idv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    q = np.trunc(b * idv + np.copysign(0.5, b))
    return (q * (f16(d) if d_f16 else d)).reshape(x.shape)


def q4_0(x):
    """ggml's quantize_row_q4_0_ref, dequantized: d = m / -8 for the m of largest
    |m| in the block (stored as f16), q = min(15, (int)(x / d + 8.5)), x = (q - 8) d."""
    b = x.reshape(-1, 32)
    m = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
    d = m / -8
    idv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, np.trunc(b * idv + 8.5))
    return ((q - 8) * f16(d)).reshape(x.shape)


def hadamard(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rotate(x, h):
    """x [..., head_dim] by the symmetric orthonormal h in chunks of its order
    (its own inverse)."""
    n = h.shape[0]
    return (x.reshape(*x.shape[:-1], -1, n) @ h).reshape(x.shape)


QUANT = {"q8_0": q8_0, "q4_0": q4_0}


def make_hook(variant, head_dim):
    """ref_forward's kv_hook for one variant name (see the docstring)."""
    if variant == "f16":
        return lambda q, k, v: (q, f16(k), f16(v))
    t, _, part = variant.partition("/")
    qq = t.endswith("+qq")
    t = t.removesuffix("+qq")
    quant = QUANT[t]
    nk = 64
    while head_dim % (2 * nk) == 0:
        nk *= 2
    hk, hv = hadamard(nk), hadamard(64)

    def hook(q, k, v):
        if part in ("", "K"):
            k = rotate(quant(rotate(k, hk)), hk)
            if qq:
                q = rotate(q8_0(rotate(q, hk), d_f16=False), hk)
        else:
            k = f16(k)
        if part in ("", "V"):
            v = rotate(quant(rotate(v, hv)), hv)
        else:
            v = f16(v)
        return q, k, v
    return hook


def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("base")
    ap.add_argument("files", nargs="*", metavar="LABEL=VARIANT=FILE")
    ap.add_argument("--variants", default="f16,q4_0,q4_0+qq")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--bos", type=int, default=-1)
    a = ap.parse_args()
    variants = a.variants.split(",")
    if variants[0] != "f16":
        variants.insert(0, "f16")
    n_ctx, n_vocab, n_chunk, toks, _ = open_base(a.base)
    files = []
    for spec in a.files:
        label, variant, path = spec.split("=", 2)
        o = open_base(path)
        if o[:2] != (n_ctx, n_vocab) or not np.array_equal(o[3][:a.chunks], toks[:a.chunks]):
            raise SystemExit(f"kvq_judge: {path} is not of the same text and window as {a.base}")
        if variant not in variants:
            variants.append(variant)
        files.append((label, variant, o[4]))
    ref = RefModel(a.model)
    first = n_ctx // 2
    kl = {v: [] for v in variants[1:]}
    fkl = {f[0]: [] for f in files}
    n_chunks = min(a.chunks, n_chunk)
    for c in range(n_chunks):
        window = [int(t) for t in toks[c]]
        if a.bos >= 0:
            window[0] = a.bos
        base = None
        for var in variants:
            ref.kv_hook = make_hook(var, ref.head_dim)
            logits = ref.forward(window[:n_ctx - 1], ref.new_cache(), all_rows=True)
            lp = log_softmax(logits[first:, :n_vocab])
            del logits
            print(f"window {c} {var}: {time.process_time():.0f} s of CPU", file=sys.stderr,
                  flush=True)
            if var == "f16":
                base = lp
            else:
                kl[var].append(np.sum(np.exp(base) * (base - lp), axis=1))
            for label, fv, recs in files:
                if fv == var:
                    for row in range(lp.shape[0]):
                        flp, keep = record_logprobs(recs[c, row], n_vocab)
                        fkl[label].append(kl_from(flp, keep, lp[row]))
        print(f"window {c}: " + ", ".join(f"{v} {np.mean(kl[v][-1]):.6f}" for v in kl),
              file=sys.stderr, flush=True)
    n_rows = sum(len(x) for x in kl[variants[1]]) if len(variants) > 1 else 0
    print(f"{a.model}: {n_rows} scored rows of {n_chunks} windows of {n_ctx}")
    for v in variants[1:]:
        x = np.concatenate(kl[v])
        print(f"  fp64, {v:10} against fp64 f16: mean KL {x.mean():.6f} ± "
              f"{x.std() / np.sqrt(len(x)):.6f}, 99% {np.percentile(x, 99):.4f}, max {x.max():.4f}")
    for label, v, _ in files:
        x = np.array(fkl[label])
        print(f"  {label:18} against fp64 {v:10}: mean KL {x.mean():.6f}, "
              f"99% {np.percentile(x, 99):.4f}, max {x.max():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
