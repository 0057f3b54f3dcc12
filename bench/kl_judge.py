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

usage: bench/kl_judge.py MODEL.gguf LABEL=BASE LABEL=BASE [--chunks N] [--bos ID]
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cpu"))
from ref_deltanet import Qwen35Ref  # noqa: E402


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
    a = ap.parse_args()
    labels, files = zip(*(b.split("=", 1) for b in a.bases))
    opened = [open_base(f) for f in files]
    n_ctx, n_vocab, n_chunk, toks, _ = opened[0]
    for o, f in zip(opened[1:], files[1:]):
        if o[:2] != (n_ctx, n_vocab) or not np.array_equal(o[3][:a.chunks], toks[:a.chunks]):
            raise SystemExit(f"kl_judge: {f} is not of the same text and window as {files[0]}")
    ref = Qwen35Ref(a.model)
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
            order = np.argsort(-ref_lp)[:2]
            margins.append(ref_lp[order[0]] - ref_lp[order[1]])
            tops, kls = [], []
            for lb, o in zip(labels, opened):
                lp, keep = record_logprobs(o[4][c, row], n_vocab)
                # the file's top: its largest word (the first on a tie, as llama.cpp)
                tops.append(int(np.argmax(o[4][c, row, 4:4 + n_vocab])))
                kls.append(kl_from(lp, keep, ref_lp))
                stats[lb]["kl"].append(kls[-1])
                stats[lb]["top"] += tops[-1] == order[0]
            if tops[0] != tops[1]:
                differ.append((c, row, ref_lp[tops[0]] - ref_lp[tops[1]],
                               ref_lp[order[0]] - ref_lp[order[1]], tops, int(order[0]), kls))
            n_rows += 1
    print(f"{a.model}: {n_rows} scored rows of {min(a.chunks, n_chunk)} windows of {n_ctx}; "
          f"the reference's top-2 log-prob margin: median {np.median(margins):.3f}, "
          f"10th percentile {np.percentile(margins, 10):.4f}")
    for lb in labels:
        kl = np.array(stats[lb]["kl"])
        print(f"  {lb:10} against the fp64 reference: mean KL {kl.mean():.6f}, median "
              f"{np.median(kl):.2e}, max {kl.max():.4f}, same top {100 * stats[lb]['top'] / n_rows:.2f} %")
    print(f"  rows where {labels[0]}'s and {labels[1]}'s top tokens differ: {len(differ)}")
    if differ:
        gap = np.abs([d[2] for d in differ])
        print(f"    the reference's margin between the two tokens: median {np.median(gap):.4f}, "
              f"max {gap.max():.4f}")
        won = {lb: sum(d[4][i] == d[5] for d in differ) for i, lb in enumerate(labels)}
        print("    the reference's top is " + ", ".join(f"{lb}'s in {n}" for lb, n in won.items())
              + f" (neither's in {len(differ) - sum(won.values())})")
        for c, row, gap2, top2, tops, rtop, kls in sorted(differ, key=lambda d: -abs(d[2]))[:8]:
            print(f"    window {c} row {row}: margin {gap2:+.4f} (ref top-2 {top2:.4f}), tops "
                  f"{tops} ref {rtop}, KL to ref " + " / ".join(f"{k:.2e}" for k in kls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
