#!/usr/bin/env python3
"""bench/kl_depth.py: a full-depth qwen35 file judged by the fp64 forward
(bench/ref_qwen35_window.py: a window, a layer at a time), and how chaotic
the file is. A benchmark, not a test.

For the first --chunks windows of perplexity base files (llama.cpp's and
ignite's `--kl-divergence-base` logits of the same text; bench/kl_judge.py
reads them), the fp64 forward of each window (the first token BOS where
--bos says) gives the logits of the scored rows exactly and, side by side,
with the activations rounded at every product's input:
  q8    every product reads its input as ggml's quantize_row_q8_0 leaves it
        (blocks of 32, d = amax / 127 in f16): a relative rounding of about
        2^-9 that every int8 engine does, whatever the weights' type;
  f16   every product reads it rounded to f16 (2^-11 relative);
  llama llama.cpp's CPU products: q8_0 before Q8_0 weights, q8_K (blocks of
        256, d in f32) before K-quants, f16 before F16 weights;
  ignite ignite's int8 path: q8_0 with d in f32 before every quantized weight,
        f32 (no rounding) before F16 ones.
Printed: each file's mean KL from the exact fp64 (P the file's distribution
above its 16-nat floor, as kl_judge) and its same top; each rounding's mean
KL from the exact at each of --depths (the model cut after that many layers:
output norm and head on the residual there), its same top; at full depth
each file's KL from each rounded forward too (is llama.cpp the fp64 with
its rounding?); for the first window, the exact forward's residual RMS after
each layer (and its mixer's and FFN's), and each rounded forward's residual's
distance from the exact one's, relative (does a rounding grow or explode?).
--save DIR keeps the full depth's fp64 log-probabilities (f64, 300 MB a
rounding and window at the 0.8B vocabulary); --load DIR judges more base
files against them without the forward.

--check TINY.gguf: this forward against tests/cpu/ref_deltanet.py's
token-by-token one on a small qwen35 file (exact and q8), the largest
difference of the logits.

usage: bench/kl_depth.py MODEL.gguf [LABEL=BASE ...] [--chunks N] [--skip N] [--bos ID]
                         [--depths 4,8,16,24] [--roundings q8,f16,llama,ignite]
                         [--save DIR | --load DIR]
       bench/kl_depth.py --check TINY.gguf
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cpu"))
from kl_judge import f16, kl_from, open_base, q8_0, record_logprobs  # noqa: E402
from ref_qwen35_window import WindowRef  # noqa: E402

TIE = 1e-9


def q8_k(x):
    """ggml's quantize_row_q8_K: blocks of 256, d = max / -127 (max the
    value of largest magnitude) in f32, q = nearest_int(x / d) (half to even)
    clamped to 127."""
    b = x.reshape(-1, 256)
    i = np.argmax(np.abs(b), axis=1)
    mx = b[np.arange(len(b)), i][:, None]
    iscale = np.where(mx != 0, -127.0 / np.where(mx != 0, mx, 1), 0).astype(np.float32)
    q = np.minimum(127, np.rint(iscale.astype(np.float64) * b))
    d = np.where(iscale != 0, 1 / iscale.astype(np.float64), 0).astype(np.float32)
    return (q * d.astype(np.float64)).reshape(x.shape)


QUANT = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
ROUNDINGS = {
    "q8": lambda ty: (lambda x: q8_0(x)),
    "f16": lambda ty: f16,
    "llama": lambda ty: {"F16": f16, "F32": None}.get(ty, q8_k if ty.endswith("_K") else q8_0),
    "ignite": lambda ty: (lambda x: q8_0(x, False)) if ty in QUANT else None,
}


def log_softmax(lg):
    m = lg.max(axis=1, keepdims=True)
    return lg - m - np.log(np.sum(np.exp(lg - m), axis=1, keepdims=True))


def kl_rows(lp_p, lp_q):
    """KL(P || Q) a row, over the full vocabulary."""
    return np.sum(np.exp(lp_p) * (lp_p - lp_q), axis=1)


def same_top(lp_ref, tops):
    """Rows whose chosen token is a top of the reference (ties are tops)."""
    return lp_ref[np.arange(len(tops)), tops] >= lp_ref.max(axis=1) - TIE


def check(path):
    from ref_deltanet import Qwen35Ref
    from kl_judge import RoundedWeight
    from gguf import GGUFReader
    toks = [1, 17, 300, 5, 42, 999, 7, 7, 128, 64, 3, 500, 2, 801, 33, 90]
    wr = WindowRef(path)
    worst = 0.0
    for name, rnd in (("exact", None), ("q8", ROUNDINGS["q8"])):
        ref = Qwen35Ref(path)
        if rnd:
            for t in GGUFReader(path).tensors:
                if len(t.shape) >= 2 and "conv1d" not in t.name:
                    ref.w[t.name] = RoundedWeight(ref.w[t.name], rnd(t.tensor_type.name))
        cache = ref.new_cache()
        want = np.stack([ref.forward([t], cache) for t in toks])
        got = {}
        wr.window(toks, np.arange(len(toks)), lambda d, lg: got.update({d: lg[0]}),
                  roundings=(rnd,))
        diff = np.abs(got[wr.n_layer] - want).max()
        print(f"{path} {name}: largest |logit difference| {diff:.3e} of "
              f"{np.abs(want).max():.2f}")
        worst = max(worst, diff)
    return 0 if worst < 1e-9 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bases", nargs="*", metavar="LABEL=BASE")
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--skip", type=int, default=0, help="windows passed over first")
    ap.add_argument("--bos", type=int, default=-1)
    ap.add_argument("--depths", default="")
    ap.add_argument("--roundings", default="q8,f16")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--save", default="", help="a folder for the full depth's log-probs")
    ap.add_argument("--load", default="", help="a --save folder: no forward, files only")
    a = ap.parse_args()
    if a.check:
        return check(a.model)
    labels, files = zip(*(b.split("=", 1) for b in a.bases)) if a.bases else ((), ())
    opened = [open_base(f) for f in files]
    if not opened:
        raise SystemExit("kl_depth: give at least one LABEL=BASE (the text's windows)")
    n_ctx, n_vocab, n_chunk, toks, _ = opened[0]
    ref = WindowRef(a.model)
    depths = [] if a.load else sorted({int(d) for d in a.depths.split(",") if d} | {ref.n_layer})
    rnames = [r for r in a.roundings.split(",") if r]
    roundings = [None] + [ROUNDINGS[r] for r in rnames]
    first = n_ctx // 2
    rows = np.arange(first, n_ctx - 1)
    acc = {}  # key -> list of per-row values
    if a.save:
        os.makedirs(a.save, exist_ok=True)

    def add(key, v):
        acc.setdefault(key, []).append(np.asarray(v, dtype=np.float64))

    for c in range(a.skip, min(a.skip + a.chunks, n_chunk)):
        window = [int(t) for t in toks[c]]
        if a.bos >= 0:
            window[0] = a.bos
        t0 = time.time()

        def on_depth(d, lgs):
            lps = [log_softmax(lg[:, :n_vocab]) for lg in lgs]
            del lgs[:]
            judge(d, lps)

        def judge(d, lps):
            ex = lps[0]
            for name, lp in zip(rnames, lps[1:]):
                add(("round", name, d, "kl"), kl_rows(ex, lp))
                add(("round", name, d, "top"), same_top(ex, np.argmax(lp, axis=1)))
            if d != ref.n_layer:
                return
            for name, lp in zip(["exact"] + rnames, lps if a.save else []):
                np.save(os.path.join(a.save, f"{name}-w{c}.npy"), lp)
            for lb, o in zip(labels, opened):
                recs = o[4][c]
                for name, lp in zip(["exact"] + rnames, lps):
                    kls, tops = [], []
                    for r in range(len(rows)):
                        flp, keep = record_logprobs(recs[r], n_vocab)
                        kls.append(kl_from(flp, keep, lp[r]))
                        tops.append(int(np.argmax(recs[r, 4:4 + n_vocab])))
                    add(("file", lb, name, "kl"), kls)
                    add(("file", lb, name, "top"), same_top(lp, np.array(tops)))

        if a.load:
            judge(ref.n_layer, [np.load(os.path.join(a.load, f"{name}-w{c}.npy"))
                                for name in ["exact"] + rnames])
            continue
        ref.window(window[:n_ctx - 1], rows, on_depth, roundings, depths)
        print(f"window {c}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if c == a.skip:
            print(f"  window {c}, exact: RMS of the residual after layers 0.. (mixer, FFN): " +
                  ", ".join(f"{il}: {r:.3g} ({m:.2g}, {f:.2g})"
                            for il, (r, m, f) in enumerate(ref.trace)), flush=True)
            for i, name in enumerate(rnames):
                print(f"  window {c}, {name} rounding: the residual's distance from the exact's, "
                      "relative, median over the positions, after layers 1..: " +
                      ", ".join(f"{il + 1}: {d[i]:.2g}" for il, d in enumerate(ref.drift)),
                      flush=True)

    n_win = len(range(a.skip, min(a.skip + a.chunks, n_chunk)))
    print(f"{a.model}: {len(rows) * n_win} scored rows of {n_win} windows of {n_ctx} "
          f"(from window {a.skip})")
    for name in rnames:
        for d in depths:
            kl = np.concatenate(acc[("round", name, d, "kl")])
            top = np.concatenate(acc[("round", name, d, "top")])
            print(f"  fp64 with {name:6} rounding vs exact fp64, {d:2} layers: mean KL "
                  f"{kl.mean():.6f}, median {np.median(kl):.2e}, same top {100 * top.mean():.2f} %")
    for lb in labels:
        for name in ["exact"] + rnames:
            kl = np.concatenate(acc[("file", lb, name, "kl")])
            top = np.concatenate(acc[("file", lb, name, "top")])
            print(f"  {lb:12} vs fp64 {name:6}: mean KL {kl.mean():.6f}, median "
                  f"{np.median(kl):.2e}, max {kl.max():.4f}, same top {100 * top.mean():.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
