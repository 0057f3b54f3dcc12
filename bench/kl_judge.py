#!/usr/bin/env python3
"""bench/kl_judge.py: which of two perplexity base files (llama.cpp's and
ignite's logits of the same text, `--kl-divergence-base`, docs/perplexity.md)
is nearer the truth, with tests/cpu/ref_deltanet.py's fp64 numpy forward of a
qwen35 / qwen35moe GGUF as the judge. A benchmark, not a test.

For the first --chunks windows of the files (the same text, the same window
length), the reference runs each window token by token from an empty state
(the window's first token replaced by BOS where --bos says so) and gives its
logits at every scored row. Per file: the mean KL divergence of the file's
distribution from the reference's (the form ignite's --kl-divergence takes:
the file's log-probabilities above its 16-nat floor as P), the share of rows
whose top token is the reference's, the largest KL. Then over the rows where
the two files' top tokens differ: the reference's logit margin between the
two tokens (a near tie when it is small against the rows' median top-2
margin), which file has the reference's top, and each file's KL there.

--llama-activations makes the judge round what each product with a Q8_0
or F16 weight reads as llama.cpp's CPU backend does (its vec_dot_type:
ggml's quantize_row_q8_0, blocks of 32, d = amax / 127 stored as f16,
q = round(x / d); f16 for F16 weights), everything else still float64: how
far that rounding alone moves this model's logits. --q8-scale-f32 keeps
q8_0's d in f32 (ignite's int8 path, ops/qmatmul.h's struct qmm_q8).

usage: bench/kl_judge.py MODEL.gguf LABEL=BASE LABEL=BASE [--chunks N] [--bos ID]
                         [--llama-activations [--q8-scale-f32]]
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cpu"))
from ref_deltanet import Qwen35Ref  # noqa: E402
from gguf import GGUFReader  # noqa: E402


def q8_0(x, d_f16=True):
    """x as ggml's quantize_row_q8_0 leaves it: blocks of 32, d = amax / 127
    rounded to f16, each value round(x / d) (half away from zero) times d."""
    b = x.reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / 127
    q = np.zeros_like(b)
    nz = d[:, 0] > 0
    q[nz] = np.trunc(b[nz] / d[nz] + np.copysign(0.5, b[nz]))
    return (q * (d.astype(np.float16).astype(np.float64) if d_f16 else d)).reshape(x.shape)


def f16(x):
    return x.astype(np.float16).astype(np.float64)


class RoundedWeight:
    """A weight whose products read their vector rounded by `rnd`."""

    def __init__(self, a, rnd):
        self.a, self.rnd = a, rnd
        self.shape = a.shape

    def __matmul__(self, x):
        return self.a @ self.rnd(x)

    def __getitem__(self, i):  # an expert's matrix, or an embedding row (not rounded)
        r = self.a[i]
        return RoundedWeight(r, self.rnd) if r.ndim == 2 else r

    def reshape(self, *s):
        return RoundedWeight(self.a.reshape(*s), self.rnd)


def open_base(path):
    """(n_ctx, n_vocab, n_chunk, tokens [n_chunk, n_ctx], records
    [n_chunk, n_scored, words] u16) of a base file, memory-mapped."""
    head = np.fromfile(path, dtype=np.uint8, count=20)
    if bytes(head[:8]) != b"_logits_":
        raise SystemExit(f"kl_judge: {path} is not a perplexity base file")
    n_ctx, n_vocab, n_chunk = (int(x) for x in head[8:20].view(np.int32))
    toks = np.fromfile(path, dtype=np.int32, count=n_chunk * n_ctx, offset=20)
    words = 2 * ((n_vocab + 1) // 2) + 4
    n_scored = n_ctx - 1 - n_ctx // 2
    recs = np.memmap(path, dtype=np.uint16, mode="r", offset=20 + 4 * n_chunk * n_ctx,
                     shape=(n_chunk, n_scored, words))
    return n_ctx, n_vocab, n_chunk, toks.reshape(n_chunk, n_ctx), recs


def record_logprobs(rec, n_vocab):
    """The record's log-probabilities (float64) and the mask of those above
    its floor (words of 0 stand for everything 16 nats or more below the top)."""
    scale = float(rec[0:2].view(np.float32)[0])
    min_lp = float(rec[2:4].view(np.float32)[0])
    q = rec[4:4 + n_vocab]
    return scale * q.astype(np.float64) + min_lp, q > 0


TIE = 1e-9  # log-probabilities this close are the same value


def kl_from(lp_p, keep, ref_lp):
    """KL(P || ref) over P's rows above its floor, as ppl/score.c's ppl_kl_row."""
    p = np.exp(lp_p[keep])
    return float(np.sum(p * (lp_p[keep] - ref_lp[keep])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bases", nargs=2, metavar="LABEL=BASE")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--bos", type=int, default=-1)
    ap.add_argument("--llama-activations", action="store_true")
    ap.add_argument("--q8-scale-f32", action="store_true")
    a = ap.parse_args()
    labels, files = zip(*(b.split("=", 1) for b in a.bases))
    opened = [open_base(f) for f in files]
    n_ctx, n_vocab, n_chunk, toks, _ = opened[0]
    for o, f in zip(opened[1:], files[1:]):
        if o[:2] != (n_ctx, n_vocab) or not np.array_equal(o[3][:a.chunks], toks[:a.chunks]):
            raise SystemExit(f"kl_judge: {f} is not of the same text and window as {files[0]}")
    ref = Qwen35Ref(a.model)
    if a.llama_activations:
        rounding = {"Q8_0": lambda x: q8_0(x, not a.q8_scale_f32), "F16": f16}
        for t in GGUFReader(a.model).tensors:
            if t.tensor_type.name in rounding and len(t.shape) >= 2:
                ref.w[t.name] = RoundedWeight(ref.w[t.name], rounding[t.tensor_type.name])
    first = n_ctx // 2
    stats = {lb: {"kl": [], "top": 0} for lb in labels}
    margins, differ = [], []
    n_rows = 0
    for c in range(min(a.chunks, n_chunk)):
        window = [int(t) for t in toks[c]]
        if a.bos >= 0:
            window[0] = a.bos
        cache = ref.new_cache()
        for j in range(n_ctx - 1):
            logits = ref.forward([window[j]], cache)
            if j < first:
                continue
            row = j - first
            lse = logits.max() + np.log(np.sum(np.exp(logits - logits.max())))
            ref_lp = logits[:n_vocab] - lse
            # (tokens whose rows of the head are equal tie exactly: the
            # margin is to the next other value, a top is any of the tied)
            top_lp = ref_lp.max()
            rtop = int(np.argmax(ref_lp))
            margin = top_lp - ref_lp[ref_lp < top_lp - TIE].max()
            margins.append(margin)
            tops, kls = [], []
            for lb, o in zip(labels, opened):
                lp, keep = record_logprobs(o[4][c, row], n_vocab)
                # the file's top: its largest word (the first on a tie, as llama.cpp)
                tops.append(int(np.argmax(o[4][c, row, 4:4 + n_vocab])))
                kls.append(kl_from(lp, keep, ref_lp))
                stats[lb]["kl"].append(kls[-1])
                stats[lb]["top"] += ref_lp[tops[-1]] >= top_lp - TIE
            if abs(ref_lp[tops[0]] - ref_lp[tops[1]]) > TIE:
                differ.append((c, row, ref_lp[tops[0]] - ref_lp[tops[1]], margin, tops, rtop,
                               kls, [ref_lp[t] >= top_lp - TIE for t in tops]))
            n_rows += 1
    judge = "fp64 reference" + (" (llama.cpp's activations" + (", q8_0's d in f32)" if
                                  a.q8_scale_f32 else ")") if a.llama_activations else "")
    print(f"{a.model}: {n_rows} scored rows of {min(a.chunks, n_chunk)} windows of {n_ctx}; "
          f"the reference's top-2 log-prob margin: median {np.median(margins):.3f}, "
          f"10th percentile {np.percentile(margins, 10):.4f}")
    for lb in labels:
        kl = np.array(stats[lb]["kl"])
        print(f"  {lb:10} against the {judge}: mean KL {kl.mean():.6f}, median "
              f"{np.median(kl):.2e}, max {kl.max():.4f}, same top {100 * stats[lb]['top'] / n_rows:.2f} %")
    print(f"  rows where {labels[0]}'s and {labels[1]}'s top tokens differ (and do not tie in "
          f"the reference): {len(differ)}")
    if differ:
        gap = np.abs([d[2] for d in differ])
        print(f"    the reference's margin between the two tokens: median {np.median(gap):.4f}, "
              f"max {gap.max():.4f}")
        won = {lb: sum(d[7][i] for d in differ) for i, lb in enumerate(labels)}
        print("    the reference's top is " + ", ".join(f"{lb}'s in {n}" for lb, n in won.items())
              + f" (neither's in {len(differ) - sum(won.values())})")
        for c, row, gap2, top2, tops, rtop, kls, _ in sorted(differ, key=lambda d: -abs(d[2]))[:8]:
            print(f"    window {c} row {row}: margin {gap2:+.4f} (ref top-2 {top2:.4f}), tops "
                  f"{tops} ref {rtop}, KL to ref " + " / ".join(f"{k:.2e}" for k in kls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
