#!/usr/bin/env python3
"""bench/spec_compare.py: speculative decoding's speed against plain decode
(docs/benchmarks.md, "Speculative decoding"), on the CPU, greedy.

For each prompt file (bench/spec/*.txt, in the model's chat template) and
each mode (plain, --lookup, -md DRAFT), `ignite run --json` generates up to
-n tokens; the modes' texts must be identical (greedy). Reported per mode:
decode tok/s (first token to last), the speed-up over plain, the
acceptance, k (mean drafted a verify step), E[accepted + 1], v (a verify
step's time over plain decode's time a token), c (the draft's time a
drafted token over the same) and the issue's bound E[accepted + 1] /
(c k + v). Modes run interleaved, --reps times, and the median is kept,
because the machine is shared.

    bench/spec_compare.py --target T.gguf --draft D.gguf [-n 256] [-t 2] [--reps 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(ignite, model, prompt, n, threads, extra):
    args = [ignite, "run", "-m", model, "--chat", "-f", prompt, "--json", "-q", "--temp", "0",
            "-n", str(n), "-t", str(threads), "--device", "cpu", *extra]
    r = subprocess.run(args, capture_output=True, timeout=3600)
    if r.returncode:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.decode()[-400:]}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ignite", default=os.path.join(HERE, "..", "build", "ignite"))
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("prompts", nargs="*",
                    default=[os.path.join(HERE, "spec", f) for f in ("edit.txt", "summary.txt", "free.txt")])
    a = ap.parse_args()
    modes = {"plain": [], "lookup": ["--lookup"],
             "draft": ["-md", a.draft, "--spec-draft-n-max", str(a.draft_max)]}
    print("| prompt | mode | tokens | decode tok/s | x plain | acceptance | k | E[acc+1] | v | c | bound |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in a.prompts:
        res = {m: [] for m in modes}
        for _ in range(a.reps):
            for m, extra in modes.items():
                res[m].append(run(a.ignite, a.target, p, a.n, a.t, extra))
        texts = {m: r[0]["text"] for m, r in res.items()}
        same = all(t == texts["plain"] for t in texts.values())
        plain_ms = statistics.median(r["timings"]["decode_ms_per_tok"] for r in res["plain"])
        plain_ts = statistics.median(r["timings"]["decode_tok_s"] for r in res["plain"])
        name = os.path.basename(p)
        for m, rs in res.items():
            ts = statistics.median(r["timings"]["decode_tok_s"] for r in rs)
            row = [name, m, str(rs[0]["tokens"]["generated"]), f"{ts:.2f}", f"{ts / plain_ts:.2f}"]
            sp = rs[0].get("speculation")
            if sp and sp["verify_steps"]:
                nv, nd, acc = sp["verify_steps"], sp["drafted"], sp["accepted"]
                k, e = nd / nv, acc / nv + 1
                v = statistics.median(r["speculation"]["verify_ms"] / r["speculation"]["verify_steps"]
                                      for r in rs) / plain_ms
                c = statistics.median(r["speculation"]["draft_ms"] / max(r["speculation"]["drafted"], 1)
                                      for r in rs) / plain_ms
                row += [f"{acc / nd:.2f}", f"{k:.2f}", f"{e:.2f}", f"{v:.2f}", f"{c:.2f}",
                        f"{e / (c * k + v):.2f}"]
            else:
                row += ["", "", "", "", "", ""]
            print("| " + " | ".join(row) + " |", flush=True)
        print(f"<!-- {name}: texts identical across modes: {same} -->", flush=True)
        if not same:
            for m, t in texts.items():
                print(f"<!-- {m}: {t[:200]!r} -->")


if __name__ == "__main__":
    main()
