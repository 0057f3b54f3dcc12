#!/usr/bin/env python3
"""bench/pd_gap.py: what sending the cache layer by layer saves in `batch --pd 1:1`
(docs/benchmarks.md): 4 prompts of about --tokens tokens, n_predict 1 (the first
token is sampled on the decode rank from the logits that came with the cache),
one prompt at a time (-P 1, chunks of -b 128), run layer by layer and with
IGNITE_PD_WHOLE=1 (every part after the prompt), alternated --rounds times. Per
request: the gap (TTFT - queue - prefill: the cache's trip after the prompt's
last step, its writing included where it comes after), admission to first token
(TTFT - queue) and the prefill rank's pack time; per run the prefill rank's line.

Usage: bench/pd_gap.py [--ignite BIN] [--model GGUF] [--rounds 3] [--tokens 480]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work").split()


def main():
    home = os.path.join(os.path.expanduser("~"), ".cache", "ignite")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ignite", default=shutil.which("ignite") or "build/ignite")
    ap.add_argument("--model", default=os.path.join(home, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=480, help="words a prompt (about a token each)")
    a = ap.parse_args()
    rng = random.Random(1)
    f = os.path.join(tempfile.mkdtemp(), "req.jsonl")
    with open(f, "w") as out:
        for i in range(4):
            out.write(json.dumps({"id": i, "prompt": " ".join(rng.choice(WORDS)
                                                              for _ in range(a.tokens)),
                                  "n_predict": 1, "temperature": 0}) + "\n")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = [a.mpirun, "--oversubscribe", *root, "-np", "2", a.ignite, "batch", "-m", a.model,
           "-t", "1", "-P", "1", "-b", "128", "-c", str(2 * a.tokens + 64), "--ordered", "-f", f,
           "--pd", "1:1"]
    res = {"layers": [], "whole": []}
    for r in range(a.rounds):
        for mode in ("layers", "whole"):
            env = dict(os.environ)
            env.pop("IGNITE_PD_WHOLE", None)
            if mode == "whole":
                env["IGNITE_PD_WHOLE"] = "1"
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            for ln in p.stdout.splitlines():
                o = json.loads(ln)
                t = o["timings"]
                res[mode].append({"gap": t["ttft_ms"] - t["queue_ms"] - t["prefill_ms"],
                                  "admit": t["ttft_ms"] - t["queue_ms"],
                                  "pack": o["pd"]["pack_ms"], "prompt": o["tokens"]["prompt"]})
            rank0 = [ln for ln in p.stderr.splitlines() if ln.startswith("pd: rank 0")]
            print(mode, r, "gaps", [round(x["gap"]) for x in res[mode][-4:]],
                  rank0[0].split("; ")[-1] if rank0 else "", flush=True)
    for mode, v in res.items():
        g = sorted(x["gap"] for x in v)
        print(f"{mode}: gap median {statistics.median(g):.0f} ms (p10 {g[len(g) // 10]:.0f}, "
              f"p90 {g[len(g) * 9 // 10]:.0f}), admission to first token median "
              f"{statistics.median(x['admit'] for x in v):.0f} ms, pack median "
              f"{statistics.median(x['pack'] for x in v):.0f} ms, {len(v)} requests of "
              f"{v[0]['prompt']} tokens")


if __name__ == "__main__":
    main()
