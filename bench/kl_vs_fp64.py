#!/usr/bin/env python3
"""bench/kl_vs_fp64.py: where llama.cpp's and ignite's logits of a quantized
file differ, which is nearer an fp64 forward of the same dequantized weights
(issues 45, 47). A benchmark, not a test.

The judge: tests/cpu/ref_gemma4.py's Gemma4Ref (gemma4) or
tests/cpu/ref_gptoss.py's GptOssRef (gpt-oss), weights dequantized by the
gguf package, everything after in float64. For the first --chunks windows of
the perplexity base files given (`--kl-divergence-base`, docs/perplexity.md;
all of the same text and window), each window run whole from an empty cache
(its first token replaced by BOS where the vocabulary adds one, as both
tools do), per file over the scored rows (the second half of each window):

  KL(fp64 || file)   sum of p_ref (log p_ref - log p_file) over the tokens the
                     reference puts less than 16 nats below its top (as
                     llama.cpp and ignite sum over the base's tokens above its
                     floor), the file's below its own floor taken at the
                     floor; mean, 99th percentile, max. The file's 16-bit
                     words (steps of 16 / 65535 nats) leave about 1e-5 of it
  same top           rows whose top token (the file's largest record word, the
                     first on a tie) has the reference's top log-probability

and, on the rows where a file's top is not the reference's, the reference's
log-probability margin between the two tokens (a near tie when small).

Routing (a mixture of experts): the reference's router logits at every
position and layer against each engine's, the experts chosen (k largest
logits) compared as sets:
  --llama-routes FILE   bench/llamacpp_moe_route.cpp's records (llama.cpp's
                        router logits on the same windows; its last layer
                        runs the scored half only)
  --forward-dump BIN    runs tests/cpu/forward_dump (-a, the window whole)
                        on each window with IGNITE_MOE_TRACE=1, on the int8
                        path and the exact one (labels ignite-int8,
                        ignite-exact)
Per engine: the decisions that differ from the reference's (of all), the
reference's logit margin between its k-th and (k+1)-th expert there, the
largest difference of the router logits themselves, and the file of the
same label's mean KL split: scored rows whose own position chose the
reference's experts in every layer, and the others.

usage: bench/kl_vs_fp64.py MODEL LABEL=BASE... [--chunks N] [--llama-routes FILE]
                           [--forward-dump BIN] [--threads T]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cpu"))
sys.path.insert(0, HERE)
from gguf import GGUFReader  # noqa: E402
from kl_judge import open_base, record_logprobs  # noqa: E402


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    return v.item() if v.size == 1 else v


def open_reference(path):
    """(the reference model, its arch, the BOS id to put first or -1)."""
    r = GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    add_bos = field(r, "tokenizer.ggml.add_bos_token", False)
    bos = int(field(r, "tokenizer.ggml.bos_token_id", -1)) if add_bos else -1
    del r
    if arch == "gemma4":
        from ref_gemma4 import Gemma4Ref
        return Gemma4Ref(path), arch, bos
    if arch == "gpt-oss":
        from ref_gptoss import GptOssRef
        return GptOssRef(path), arch, bos
    raise SystemExit(f"kl_vs_fp64: no fp64 reference here for architecture '{arch}'")


def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True))


def llama_routes(path, kind):
    """{(chunk, layer): [rows, n_expert] float32} of llamacpp_moe_route's
    records of a kind (0 the router's logits, 1 what llama.cpp's top k reads)."""
    out, raw = {}, np.fromfile(path, dtype=np.uint8)
    off = 0
    while off < raw.size:
        c, layer, kd, rows, ne = (int(v) for v in raw[off:off + 20].view(np.int32))
        off += 20
        if kd == kind:
            out[(c, layer)] = raw[off:off + 4 * rows * ne].view(np.float32).reshape(rows, ne)
        off += 4 * rows * ne
    return out


def ignite_routes(tool, model, window, path, threads, tmp):
    """{layer: [rows, n_expert]} of forward_dump's IGNITE_MOE_TRACE on one window."""
    env = dict(os.environ, IGNITE_MOE_TRACE="1", IGNITE_MATMUL=path)
    cmd = [tool, "-m", model, "-o", os.path.join(tmp, "l.bin"), "-a", "-t", str(threads),
           ",".join(map(str, window))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"kl_vs_fp64: forward_dump failed ({res.returncode}): "
                         f"{res.stderr[-400:]}")
    rows = {}
    for line in res.stderr.splitlines():
        if line.startswith("moe: layer "):
            w = line.split()
            lg = w[w.index("logits") + 1:]
            rows.setdefault(int(w[2]), []).append([float(v) for v in lg])
    return {layer: np.array(v) for layer, v in rows.items()}


def chosen(logits, k):
    """The k largest per row, as sets (ties: the lower index)."""
    return [frozenset(r) for r in np.argsort(-logits, axis=1, kind="stable")[:, :k]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bases", nargs="+", metavar="LABEL=BASE")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--llama-routes")
    ap.add_argument("--forward-dump")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    labels, files = zip(*(b.split("=", 1) for b in a.bases))
    opened = [open_base(f) for f in files]
    n_ctx, n_vocab, n_chunk, toks, _ = opened[0]
    n_chunks = min(a.chunks, n_chunk)
    for o, f in zip(opened[1:], files[1:]):
        if o[:2] != (n_ctx, n_vocab) or not np.array_equal(o[3][:n_chunks], toks[:n_chunks]):
            raise SystemExit(f"kl_vs_fp64: {f} is not of the same text and window as {files[0]}")
    ref, arch, bos = open_reference(a.model)
    k = ref.n_expert_used
    moe = k > 0
    first = n_ctx // 2
    st = {lb: {"kl": [], "top": 0, "miss": [], "vs0": [], "top0": 0} for lb in labels}
    engines = {}
    if moe and a.llama_routes:
        # (gpt-oss: its biased logits are the "probs" its top k reads; gemma4's
        # softmax keeps the logits' order)
        lr = llama_routes(a.llama_routes, 1 if arch == "gpt-oss" else 0)
        engines["llama.cpp"] = lambda c: {layer: v for (cc, layer), v in lr.items() if cc == c}
    if moe and a.forward_dump:
        tmp = tempfile.mkdtemp()
        for path in ("int8", "exact"):
            engines[f"ignite-{path}"] = (lambda p: lambda c: ignite_routes(
                a.forward_dump, a.model, window_of(c), p, a.threads, tmp))(path)
    rt = {e: {"n": 0, "differ": 0, "margins": [], "dlogit": 0.0} for e in engines}
    flipped = {e: set() for e in engines}  # (window, position) where a layer's choice differs
    ref_margins = []

    def window_of(c):
        w = [int(t) for t in toks[c]]
        if bos >= 0:
            w[0] = bos
        return w[:n_ctx - 1]

    n_rows = 0
    for c in range(n_chunks):
        t0 = time.time()
        if moe:
            ref.routes = []  # each MoE layer's router logits, in layer order
        logits = ref.forward(window_of(c), ref.new_cache(), all_rows=True)
        lp = log_softmax(logits[first:, :n_vocab])
        del logits
        for row in range(lp.shape[0]):
            ref_lp = lp[row]
            top_lp = ref_lp.max()
            rk = ref_lp > top_lp - 16
            p = np.exp(ref_lp[rk])
            for i, (lb, o) in enumerate(zip(labels, opened)):
                flp, keep = record_logprobs(o[4][c, row], n_vocab)
                st[lb]["kl"].append(float(np.sum(p * (ref_lp[rk] - flp[rk]))))
                ftop = int(np.argmax(o[4][c, row, 4:4 + n_vocab]))
                if i == 0:
                    lp0, keep0, top0 = flp, keep, ftop
                else:  # against the first file, as `perplexity --kl-divergence` (its floor)
                    st[lb]["vs0"].append(float(np.sum(np.exp(lp0[keep0]) *
                                                      (lp0[keep0] - flp[keep0]))))
                    st[lb]["top0"] += ftop == top0
                if ref_lp[ftop] >= top_lp - 1e-9:
                    st[lb]["top"] += 1
                else:
                    st[lb]["miss"].append(top_lp - ref_lp[ftop])
            n_rows += 1
        if moe:  # (every layer is a MoE one in these models)
            ref_r = {i: r[-1] if isinstance(r, tuple) else r for i, r in enumerate(ref.routes)}
            for layer, lg in ref_r.items():
                s = -np.sort(-lg, axis=1)
                ref_margins.extend(s[:, k - 1] - s[:, k])
            for e, get in engines.items():
                for layer, elg in get(c).items():
                    rows = elg.shape[0]
                    pos0 = (n_ctx if e == "llama.cpp" else n_ctx - 1) - rows
                    rlg = ref_r[layer][pos0:pos0 + rows]
                    elg = elg[:rlg.shape[0]]
                    ours, theirs = chosen(rlg, k), chosen(elg, k)
                    s = -np.sort(-rlg, axis=1)
                    r = rt[e]
                    r["n"] += len(ours)
                    r["dlogit"] = max(r["dlogit"], float(np.abs(elg - rlg).max()))
                    for i, (x, y) in enumerate(zip(ours, theirs)):
                        if x != y:
                            r["differ"] += 1
                            flipped[e].add((c, pos0 + i))
                            r["margins"].append(s[i, k - 1] - s[i, k])
        print(f"window {c}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"{os.path.basename(a.model)}: {n_rows} scored rows of {n_chunks} windows of {n_ctx}"
          f" (BOS {bos} first)")
    for lb in labels:
        kl = np.array(st[lb]["kl"])
        miss = np.array(st[lb]["miss"])
        print(f"  {lb:14} KL(fp64 || file): mean {kl.mean():.6f} ± "
              f"{kl.std() / np.sqrt(len(kl)):.6f}, 99% {np.percentile(kl, 99):.5f}, "
              f"max {kl.max():.4f}; same top as fp64 {100 * st[lb]['top'] / n_rows:.2f} %"
              + (f"; where not, fp64's margin median {np.median(miss):.4f}, max "
                 f"{miss.max():.4f}" if len(miss) else ""))
    for lb in labels[1:]:
        x = np.array(st[lb]["vs0"])
        print(f"  {lb:14} KL({labels[0]} || file): mean {x.mean():.6f}, max {x.max():.4f}; "
              f"same top {100 * st[lb]['top0'] / n_rows:.2f} %")
    if ref_margins:
        m = np.array(ref_margins)
        print(f"  routing: fp64's logit margin between its {k}th and {k + 1}th expert over "
              f"{len(m)} decisions: median {np.median(m):.4f}, 1st percentile "
              f"{np.percentile(m, 1):.5f}")
    for e, r in rt.items():
        mg = np.array(r["margins"])
        print(f"  routing {e:14}: {r['differ']} of {r['n']} decisions differ from fp64's"
              + (f" (fp64's margin there: median {np.median(mg):.5f}, max {mg.max():.5f})"
                 if len(mg) else "") + f"; router logits at most {r['dlogit']:.2e} from fp64's")
        if e in st:  # the file of the same label: its KL where the row's own routing is fp64's
            kl = np.array(st[e]["kl"])
            own = np.array([(c, first + row) in flipped[e] for c in range(n_chunks)
                            for row in range(n_ctx - 1 - first)])
            print(f"    scored rows whose every layer chose fp64's experts: {np.sum(~own)}, mean KL "
                  f"{kl[~own].mean():.6f}; the {np.sum(own)} others: mean KL "
                  + (f"{kl[own].mean():.6f}" if own.any() else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
