"""tests/cli/test_bench_arrivals.py: `ignite bench --requests` with arrivals
over time (--request-rate, --burstiness), --goodput objectives, --range-ratio
lengths and --requests-file, on synthetic Llama-tiny (random weights, nothing
downloaded; SmolLM2 for a "prompt" line when it is fetched). Checked from the
per-request timings of -o json, independently of ignite's own statistics:
a seeded schedule is reproduced (same seed, same arrivals; another seed,
others; the last at N/R as vLLM scales it), no request is submitted or
admitted before its arrival, the gaps' spread is the gamma shape's
(coefficient of variation 1/sqrt(B)), the mean and p50/p90/p99 of TTFT, TPOT,
ITL and E2EL equal numpy's on those timings, goodput is the count meeting
every objective (vLLM's rule: TPOT 0 for one token) over the duration, and
bad flags end with one line and exit 2 (a bad --requests-file line: 6; a
schedule longer than a day, an objective given twice: 2).
About 10 s on 2 cores."""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from igtest import check, model_path, summary

IGNITE = os.environ["IGNITE_BIN"]
TINY = "synthetic:Llama-tiny"


def bench(*args, model=TINY):
    r = subprocess.run([IGNITE, "bench", "-m", model, "-t", "2", *args],
                       capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def report(*args, model=TINY):
    rc, out, err = bench(*args, "-o", "json", model=model)
    try:
        rows = json.loads(out)
    except ValueError:
        rows = []
    check(rc == 0 and len(rows) == 1, f"{args}: rc {rc} {err[-300:]!r}")
    return rows[0] if rows else {"requests": []}


def close(a, b, what):
    check(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), f"{what}: ignite {a} numpy {b}")


def schedule():
    """Same seed, same arrivals; the clock honours them."""
    runs = [report("--requests", "40", "-P", "4", "--input-len", "8", "--output-len", "3",
                   "--request-rate", "400", "-s", s) for s in ("5", "5", "6")]
    at = [[q["arrival_s"] for q in r["requests"]] for r in runs]
    check(len(at[0]) == 40 and at[0] == at[1], f"seed 5 twice: {at[0][:4]} {at[1][:4]}")
    check(at[0] != at[2], "seeds 5 and 6 gave the same arrivals")
    for r, a in zip(runs, at):
        check(r.get("request_rate") == 400 and r.get("burstiness") == 1, f"rate in report: {r}")
        check(all(x <= y for x, y in zip(a, a[1:])) and a[0] > 0, f"arrivals not ordered: {a}")
        close(a[-1], 40 / 400, "the last arrival (vLLM scales it to N/R)")
        check(r["duration_s"] >= a[-1], f"the run ended before the last arrival: {r['duration_s']}")
        for q in r["requests"]:
            check(q["submitted_s"] >= q["arrival_s"] and q["queue_ms"] >= 0 and
                  q["ttft_ms"] >= q["queue_ms"], f"request before its time: {q}")
    # the rate changes when requests come, not what they are
    inf = report("--requests", "40", "-P", "4", "--input-len", "8", "--output-len", "3",
                 "--range-ratio", "0.5", "-s", "5")
    slow = report("--requests", "40", "-P", "4", "--input-len", "8", "--output-len", "3",
                  "--range-ratio", "0.5", "-s", "5", "--request-rate", "1000")
    check(inf.get("request_rate") == "inf" and all(q["arrival_s"] == 0 for q in inf["requests"]),
          "rate inf: every request at 0")
    lens = [[(q["input_len"], q["output_len"]) for q in r["requests"]] for r in (inf, slow)]
    check(lens[0] == lens[1], "the lengths changed with the rate")
    li = [l[0] for l in lens[0]]
    lo = [l[1] for l in lens[0]]
    check(min(li) >= 4 and max(li) <= 12 and len(set(li)) > 3,
          f"--input-len 8 --range-ratio 0.5: lengths in [4, 12]: {li}")
    check(min(lo) >= 1 and max(lo) <= 5, f"--output-len 3 --range-ratio 0.5: [1, 5]: {lo}")


def burstiness():
    """The gaps' coefficient of variation is 1/sqrt(shape) (gamma)."""
    for b, want, tol in (("1", 1.0, 0.25), ("4", 0.5, 0.15), ("inf", 0.0, 1e-6)):
        r = report("--requests", "300", "-P", "8", "--input-len", "2", "--output-len", "1",
                   "--request-rate", "3000", "--burstiness", b, "-s", "2")
        a = np.array([q["arrival_s"] for q in r["requests"]])
        gaps = np.diff(np.concatenate([[0.0], a]))
        cv = float(np.std(gaps) / np.mean(gaps)) if len(gaps) else -1
        check(abs(cv - want) <= tol, f"--burstiness {b}: gaps' CV {cv:.3f}, want {want}")


def statistics():
    """Percentiles and goodput from the per-request timings."""
    args = ["--requests", "30", "-P", "3", "--input-len", "16", "--output-len", "6",
            "--range-ratio", "0.9", "--request-rate", "300", "-s", "7"]
    first = report(*args)
    qs = first["requests"]
    if not qs:
        return
    # objectives near the medians, so that some requests miss them
    slo_ttft = float(np.median([q["ttft_ms"] for q in qs]))
    slo_tpot = float(np.median([(q["e2el_ms"] - q["ttft_ms"]) / (q["output_len"] - 1)
                                for q in qs if q["output_len"] > 1]))
    r = report(*args, "--goodput", f"ttft:{slo_ttft:.6f}", f"tpot:{slo_tpot:.6f}")
    qs = r["requests"]
    check(len(qs) == 30 and r.get("completed") == 30, f"30 requests: {len(qs)}")
    check(any(q["output_len"] == 1 for q in qs), "no one-token request drawn")
    ttft = [q["ttft_ms"] for q in qs]
    e2el = [q["e2el_ms"] for q in qs]
    tpot = [(q["e2el_ms"] - q["ttft_ms"]) / (q["output_len"] - 1) for q in qs
            if q["output_len"] > 1]
    itl = [g for q in qs for g in q["itl_ms"]]
    check(len(itl) == sum(q["output_len"] - 1 for q in qs), "an ITL per token after the first")
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        close(r[f"mean_{name}_ms"], float(np.mean(v)), f"mean {name}")
        for p in (50, 90, 99):
            close(r[f"p{p}_{name}_ms"], float(np.percentile(v, p)), f"p{p} {name}")
        close(r[f"median_{name}_ms"], float(np.median(v)), f"median {name}")
    good = sum(1 for q in qs
               if q["ttft_ms"] <= slo_ttft and
               (q["output_len"] <= 1 or
                (q["e2el_ms"] - q["ttft_ms"]) / (q["output_len"] - 1) <= slo_tpot * (1 + 1e-9)))
    check(r.get("good_requests") == good, f"good requests: ignite {r.get('good_requests')} "
          f"by the timings {good}")
    close(r.get("request_goodput", -1), good / r["duration_s"], "request_goodput")
    check(r.get("slo_ttft_ms") is not None and r.get("slo_tpot_ms") is not None, "SLOs echoed")
    # e2el alone, in one word with a comma
    e = report(*args, "--goodput", "e2el:1e9,ttft:1e9")
    check(e.get("good_requests") == 30, f"generous objectives: all good {e.get('good_requests')}")
    z = report(*args, "--goodput", "e2el:0")
    check(z.get("good_requests") == 0 and z.get("request_goodput") == 0, "e2el:0: none good")
    check("request_goodput" not in first, "no --goodput: no goodput in the report")
    rc, out, err = bench(*args, "--goodput", "ttft:5", "tpot:5", "-o", "csv")
    check(rc == 0 and "request_goodput" in out.splitlines()[0] and "requests" not in
          out.splitlines()[0].split(","), f"csv: {out[:300]!r}")


def requests_file():
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "req.jsonl")
        with open(f, "w") as fh:
            fh.write('{"input_len": 5, "output_len": 3}\n\n{"input_len": 9, "output_len": 1, '
                     '"id": 7}\n{"input_len": 2}\n')
        r = report("--requests-file", f, "--output-len", "4")
        lens = [(q["input_len"], q["output_len"]) for q in r["requests"]]
        check(lens == [(5, 3), (9, 1), (2, 4)], f"--requests-file lengths: {lens}")
        r = report("--requests-file", f, "--requests", "2")
        check(r.get("completed") == 2, f"--requests 2 of the file: {r.get('completed')}")
        rc, out, err = bench("--requests-file", f, "--requests", "4")
        check(rc == 2 and err.count("\n") == 1, f"--requests 4 of 3 lines: {rc} {err!r}")
        rc, out, err = bench("--requests-file", f, "--request-rate", "3e-5")
        check(rc == 2 and err.count("\n") == 1 and "3 requests would arrive over 100000 s" in err,
              f"3 lines over 1e5 s: {rc} {err!r}")
        for bad in ('{"input_len": 0}', '{"prompt": ""}', '{"input_len": 3, "prompt": "x"}',
                    '{"output_len": 3}', '{"input_len": 3, "temperature": 1}', 'not json',
                    '{"input_len": 2.5}',
                    # read as strictly as ignite batch reads a line (were taken: the first
                    # object, the last value, 20, the prompt cut at the NUL; bad UTF-8 ran)
                    '{"input_len": 4}{"input_len": 9}', '{"input_len": 4, "input_len": 8}',
                    '{"input_len": 020}', '{"prompt": "a\\u0000b"}', '{"prompt": "a\udcffb"}'):
            with open(f, "w", errors="surrogateescape") as fh:  # \udcff: the byte 0xff
                fh.write('{"input_len": 4}\n' + bad + "\n")
            rc, out, err = bench("--requests-file", f)
            check(rc == 6 and err.count("\n") == 1 and "line 2" in err, f"{bad}: {rc} {err!r}")
        with open(f, "w") as fh:
            fh.write('{"prompt": "Hello there"}\n')
        rc, out, err = bench("--requests-file", f)
        check(rc == 2 and err.count("\n") == 1, f"a prompt on a synthetic model: {rc} {err!r}")
        rc, out, err = bench("--requests-file", os.path.join(d, "missing.jsonl"))
        check(rc == 3 and err.count("\n") == 1, f"a missing file: {rc} {err!r}")
        if os.path.exists(model_path()):
            with open(f, "w") as fh:
                fh.write('{"prompt": "The capital of France is", "output_len": 3}\n'
                         '{"input_len": 6, "output_len": 2}\n')
            r = report("--requests-file", f, "--request-rate", "50", model=model_path())
            check([q["output_len"] for q in r["requests"]] == [3, 2] and
                  r["requests"][0]["input_len"] >= 5, f"SmolLM2 prompt line: {r.get('requests')}")


def bad_flags():
    base = ["--requests", "3", "--input-len", "4", "--output-len", "2"]
    for bad in (["--request-rate", "0"], ["--request-rate", "-2"], ["--request-rate", "x"],
                ["--request-rate", "nan"], ["--burstiness", "0"], ["--burstiness", "-1"],
                ["--goodput", "foo:1"], ["--goodput", "ttft:-5"], ["--goodput", "ttft"],
                ["--goodput", "ttft:abc"], ["--goodput", "tpot:"], ["--goodput", "ttft:5", "x:1"],
                ["--range-ratio", "1"], ["--range-ratio", "-0.1"],
                ["--range-ratio", "0.5", "--input-len", "8:2"],
                # the last of 3 arrives at 3/R: 3e9 s (decades) and 3e300 s (past an int64
                # of ns: negative TTFTs) were waited for or reported
                ["--request-rate", "1e-9"], ["--request-rate", "1e-300"],
                ["--goodput", "ttft:5", "ttft:6"], ["--goodput", "tpot:1,tpot:2"]):
        rc, out, err = bench(*base, *bad)
        check(rc == 2 and err.count("\n") == 1 and not out, f"bad {bad}: rc {rc} {err!r}")
    rc, out, err = bench("--request-rate", "5", "-p", "8", "-n", "0")
    check(rc == 2 and "--requests" in err and err.count("\n") == 1,
          f"--request-rate without --requests: {rc} {err!r}")


def main():
    schedule()
    burstiness()
    statistics()
    requests_file()
    bad_flags()
    return summary("test_bench_arrivals")


if __name__ == "__main__":
    sys.exit(main())
