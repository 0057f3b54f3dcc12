#!/usr/bin/env python3
"""bench/pd_mixed.py: prefill/decode separation against colocated serving on a
mixed workload (issue 49's measurement): a third of the requests with LONG-token
prompts, the rest SHORT-token prompts, OUT output tokens each (greedy, end of
generation ignored), arriving as a seeded Poisson process at each --rate, fed
line by line into `ignite batch`'s stdin at their times (batch counts TTFT from
when it reads a line). Three ways to serve them on two cores:

  pd   mpirun -np 2 ignite batch --pd 1:1 -t 1         (a prefill and a decode rank)
  dp   two `ignite batch -t 1` processes, alternate requests (data parallel)
  t2   one `ignite batch -t 2`

The objectives are set first, from one engine alone (-t 1): TTFT = 3 x a lone
LONG-token prefill's TTFT, TPOT = 1.5 x the median TPOT of -P short requests
decoding together. For each rate and way: TTFT and TPOT p50/p99, and goodput,
the requests per second that met both (over the span from the first arrival
to the last result), with the fraction of requests that met both.

Usage: bench/pd_mixed.py [--model GGUF] [--ignite BIN] [--requests 24]
                         [--rates 0.05,0.1,0.2] [--json FILE]
(minutes per rate: the lead reruns it on a quiet machine; docs/benchmarks.md)
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money "
         "story fact month lot right study book eye job word business issue side kind head "
         "house service friend father power hour game line end member law car city name").split()


def tokens(ignite, model, text):
    r = subprocess.run([ignite, "tokenize", "-m", model, "--count", "-p", text],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def prompt_of(ignite, model, n, rng):
    """A text of about n tokens, its own words from the first (nothing shared)."""
    words = [rng.choice(WORDS) for _ in range(n)]
    have = tokens(ignite, model, " ".join(words))
    while have > n:  # each word is a token or two: trim to the length
        del words[max(1, (have - n) // 2) * -1:]
        have = tokens(ignite, model, " ".join(words))
    return " ".join(words)


def line(prompt, n_out):
    return json.dumps({"prompt": prompt, "n_predict": n_out, "temperature": 0,
                       "ignore_eos": True, "chat": False}) + "\n"


def serve(cmds, lines, at):
    """Feeds lines[i] at time at[i] (s after the start) to cmds[i % len(cmds)]'s
    stdin; returns the result objects, each with its process's index, and the
    span from the first arrival to the last result."""
    procs = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in cmds]
    # one short request through each first: the clock starts with every engine loaded
    warm = line("Hello", 1)
    for p in procs:
        p.stdin.write(warm)
        p.stdin.flush()
        p.stdout.readline()
    t0 = time.time()
    out, done_at = [], [0.0]

    def feed():
        for i, (ln, t) in enumerate(zip(lines, at)):
            time.sleep(max(0.0, t0 + t - time.time()))
            p = procs[i % len(procs)]
            p.stdin.write(ln)
            p.stdin.flush()
        for p in procs:
            p.stdin.close()

    def read(k, p):
        for ln in p.stdout:
            o = json.loads(ln)
            o["_proc"] = k
            out.append(o)
            done_at[0] = max(done_at[0], time.time())

    threads = [threading.Thread(target=feed)] + [
        threading.Thread(target=read, args=(k, p)) for k, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errs = [p.stderr.read() for p in procs]
    for p, e in zip(procs, errs):
        if p.wait() != 0:
            sys.exit(f"{cmds[0][:4]}... failed: {e[-500:]}")
    return out, done_at[0] - (t0 + at[0]), errs


def pct(v, q):
    v = sorted(v)
    if not v:
        return float("nan")
    k = q * (len(v) - 1)
    lo = int(k)
    return v[lo] + (k - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])


def tpot(o):
    n = o["tokens"]["generated"]
    return o["timings"]["decode_ms"] / (n - 1) if n > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    home = os.path.join(os.path.expanduser("~"), ".cache", "ignite")
    ap.add_argument("--model", default=os.path.join(home, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--ignite", default=shutil.which("ignite") or "build/ignite")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--rates", default="0.05,0.1,0.2", help="requests per second, comma-separated")
    ap.add_argument("--long", type=int, default=2048)
    ap.add_argument("--short", type=int, default=128)
    ap.add_argument("--out", type=int, default=128)
    ap.add_argument("--parallel", "-P", type=int, default=4)
    ap.add_argument("--ways", default="pd,dp,t2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ctx = a.long + a.out + 64
    base = [a.ignite, "batch", "-m", a.model, "-c", str(ctx), "-P", str(a.parallel), "-q"]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []

    long_p = [prompt_of(a.ignite, a.model, a.long, rng) for _ in range(a.requests // 3)]
    short_p = [prompt_of(a.ignite, a.model, a.short, rng)
               for _ in range(a.requests - len(long_p))]
    prompts = long_p + short_p
    rng.shuffle(prompts)
    lines = [line(p, a.out) for p in prompts]

    # the objectives, from one single-thread engine alone
    lone, _, _ = serve([base + ["-t", "1"]], [line(long_p[0], 1)], [0.0])
    ttft_slo = 3 * lone[0]["timings"]["ttft_ms"]
    dec, _, _ = serve([base + ["-t", "1"]], [line(p, a.out) for p in short_p[:a.parallel]],
                      [0.0] * min(a.parallel, len(short_p)))
    decode_alone = statistics.median(tpot(o) for o in dec)
    tpot_slo = 1.5 * decode_alone
    print(f"objectives: TTFT {ttft_slo:.0f} ms (3 x a lone {a.long}-token prefill, "
          f"{ttft_slo / 3:.0f} ms), TPOT {tpot_slo:.1f} ms (1.5 x {decode_alone:.1f} ms, "
          f"{a.parallel} short requests decoding alone)")

    ways = {
        "pd": [[a.mpirun, "--oversubscribe", *root, "-np", "2"] + base +
               ["-t", "1", "--pd", "1:1"]],
        "dp": [base + ["-t", "1"], base + ["-t", "1"]],
        "t2": [base + ["-t", "2"]],
    }
    report = {"model": a.model, "requests": a.requests, "long": a.long, "short": a.short,
              "out": a.out, "parallel": a.parallel, "ttft_slo_ms": ttft_slo,
              "tpot_slo_ms": tpot_slo, "decode_alone_tpot_ms": decode_alone, "runs": []}
    print(f"{'rate':>6} {'way':>4} {'ttft p50':>9} {'ttft p99':>9} {'tpot p50':>9} "
          f"{'tpot p99':>9} {'goodput':>8} {'met':>5}")
    for rate in (float(x) for x in a.rates.split(",")):
        r2 = random.Random(a.seed * 1000 + int(rate * 1000))
        at, t = [], 0.0
        for _ in lines:
            at.append(t)
            t += r2.expovariate(rate)
        for way in a.ways.split(","):
            out, span, _ = serve(ways[way], lines, at)
            ttft = [o["timings"]["ttft_ms"] for o in out]
            tp = [tpot(o) for o in out]
            met = sum(o["timings"]["ttft_ms"] <= ttft_slo and tpot(o) <= tpot_slo for o in out)
            row = {"rate": rate, "way": way, "ttft_p50": pct(ttft, .5), "ttft_p99": pct(ttft, .99),
                   "tpot_p50": pct(tp, .5), "tpot_p99": pct(tp, .99),
                   "goodput": met / span if span > 0 else 0.0, "met": met / len(out),
                   "span_s": span, "n": len(out)}
            report["runs"].append(row)
            print(f"{rate:6.3f} {way:>4} {row['ttft_p50']:9.0f} {row['ttft_p99']:9.0f} "
                  f"{row['tpot_p50']:9.1f} {row['tpot_p99']:9.1f} {row['goodput']:8.3f} "
                  f"{row['met']:5.0%}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
