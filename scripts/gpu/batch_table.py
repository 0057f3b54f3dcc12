#!/usr/bin/env python3
"""scripts/gpu/batch_table.py: the table of the GPU check's batch step
(scripts/gpu/batch.sh), from the files its parts left in its directory:

  parts.tsv      one line per part: name, status (ok, failed, timeout, skipped), exit
  single.jsonl   `ignite bench -p IN -n OUT -o jsonl`: the tgOUT row's avg_ts is the
                 single-sequence decode rate
  pN.jsonl       `ignite bench --requests R -P N -o jsonl`: one report
  pN.mixed0.jsonl  the same under IGNITE_GPU_MIXED=0 (its row's run ends in
                 "IGNITE_GPU_MIXED=0"; a # line: the default's tok/s over its)
  hf.jsonl       bench/hf_batch_generate.py: one row per batch size

Writes a TSV (-o), one row per run:
  engine run parallel requests completed seconds output_tok_s x_single status
x_single = output tokens/s over ignite's single-sequence decode tokens/s (the
issue's target: at least 10 for ignite at -P 64 and 256), then comment lines
(#) with ignite against transformers at each batch size and each ignite run's
pure decode steps: from its per-request timings (submitted_s, ttft_ms, itl_ms),
the gaps that lie between the last request's first token and the first
request's last token, when every request of the run is in flight and decoding
(issue 44: a 256-row step <= 13 ms); their median and count. A run that did not
finish has its status and empty figures.

  batch_table.py DIR --requests 256 --input-len 512 --output-len 128 -o DIR/batch.tsv
Exit 1 when an ignite run that finished did not complete every request with
every token (or its file is unreadable), else 0. Tested by
tests/unit/test_gpu_check.sh on made-up files."""
import argparse
import json
import os
import sys


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def read_parts(path):
    parts = {}
    try:
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) >= 2:
                    parts[fields[0]] = fields[1]
    except OSError:
        pass
    return parts


def pure_decode_gaps(rep):
    """The inter-token gaps (ms) of the steps in which every request of the
    report was decoding: after the last first token, before the first last
    token. [] when the report has no timings or no such window."""
    reqs = rep.get("requests") or []
    firsts, lasts, tokens = [], [], []
    for q in reqs:
        t = float(q["submitted_s"]) + float(q["ttft_ms"]) / 1e3
        times = [t]
        for g in q.get("itl_ms") or []:
            t += float(g) / 1e3
            times.append(t)
        firsts.append(times[0])
        lasts.append(times[-1])
        tokens.append(times)
    if not reqs:
        return []
    lo, hi = max(firsts) - 1e-6, min(lasts) + 1e-6  # a microsecond of rounding
    return [(b - a) * 1e3 for times in tokens for a, b in zip(times, times[1:])
            if a >= lo and b <= hi]


def fmt(x, digits=1):
    return "" if x is None else f"{x:.{digits}f}"


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--input-len", type=int, required=True)
    ap.add_argument("--output-len", type=int, required=True)
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)
    d, n, n_out = args.dir, args.requests, args.output_len
    parts = read_parts(os.path.join(d, "parts.tsv"))
    problems = []
    rows = []  # engine, run, parallel, requests, completed, seconds, tok/s, status

    single = None
    if parts.get("single") == "ok":
        try:
            tg = [r for r in read_jsonl(os.path.join(d, "single.jsonl"))
                  if r.get("test") == f"tg{n_out}"]
            single = float(tg[0]["avg_ts"]) if tg else None
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"single: {e}")
        if single is None:
            problems.append(f"single: no tg{n_out} row")
    st = parts.get("single", "missing")
    rows.append(("ignite", f"decode tg{n_out}", 1, 1, 1 if single else None, None, single,
                 "bad" if st == "ok" and single is None else st))

    ignite, steps, mixed0 = {}, {}, {}  # steps: -P -> (median pure decode gap ms, gaps)

    def ignite_run(name, p, label):
        """One `ignite bench --requests` part's row; its tok/s when complete."""
        st, done, secs, ts, ok = parts[name], None, None, None, None
        if st == "ok":
            try:
                rep = read_jsonl(os.path.join(d, f"{name}.jsonl"))[0]
                done, secs = int(rep["completed"]), float(rep["duration_s"])
                ts = float(rep["output_throughput"])
                if done != n or int(rep["total_output_tokens"]) != n * n_out:
                    st = "incomplete"
                    problems.append(f"-P {p}{label}: {done} of {n} requests, "
                                    f"{rep['total_output_tokens']} of {n * n_out} tokens")
                else:
                    ok = ts
                gaps = sorted(pure_decode_gaps(rep))
                if gaps and not label:
                    steps[p] = (gaps[len(gaps) // 2], len(gaps))
            except (OSError, ValueError, KeyError, IndexError) as e:
                st = "bad"
                problems.append(f"-P {p}{label}: {e}")
        rows.append(("ignite", f"requests {args.input_len}/{n_out}{label}", p, n, done, secs,
                     ts, st))
        return ok

    for name in sorted((k for k in parts if k.startswith("p") and k[1:].isdigit()),
                       key=lambda k: int(k[1:])):
        ts = ignite_run(name, int(name[1:]), "")
        if ts is not None:
            ignite[int(name[1:])] = ts
    # pN.mixed0: the same run under IGNITE_GPU_MIXED=0 (decode rows of mixed steps
    # through the prefill kernel, as before issue 44): the A/B of the mixed route
    for name in sorted((k for k in parts if k.startswith("p") and k.endswith(".mixed0") and
                        k[1:-7].isdigit()), key=lambda k: int(k[1:-7])):
        ts = ignite_run(name, int(name[1:-7]), " IGNITE_GPU_MIXED=0")
        if ts is not None:
            mixed0[int(name[1:-7])] = ts

    hf = {}
    if "hf" in parts:
        try:
            hf_rows = read_jsonl(os.path.join(d, "hf.jsonl"))
        except (OSError, ValueError):
            hf_rows = []
        for r in hf_rows:
            b = int(r["batch"])
            st = "error: " + r["error"] if r.get("error") else "ok"
            ts = r.get("output_tok_s") if st == "ok" else None
            if ts:
                hf[b] = float(ts)
            rows.append(("transformers", f"generate {r['input_len']}/{r['output_len']}", b,
                         r["requests"], r["requests"] if ts else None,
                         r.get("seconds") if ts else None, ts, st))
        if not hf_rows:
            rows.append(("transformers", "generate", None, None, None, None, None,
                         parts["hf"] if parts["hf"] != "ok" else "no rows"))

    with open(args.out, "w") as f:
        f.write("engine\trun\tparallel\trequests\tcompleted\tseconds\toutput_tok_s\t"
                "x_single\tstatus\n")
        for eng, run, p, req, done, secs, ts, st in rows:
            x = ts / single if ts and single else None
            f.write(f"{eng}\t{run}\t{'' if p is None else p}\t{'' if req is None else req}\t"
                    f"{'' if done is None else done}\t{fmt(secs, 2)}\t{fmt(ts)}\t{fmt(x, 2)}\t"
                    f"{st}\n")
        for p in sorted(ignite):
            target = "met" if single and ignite[p] >= 10 * single else "not met"
            f.write(f"# -P {p}: ignite {fmt(ignite[p])} tok/s = {fmt(ignite[p] / single, 2) if single else '?'}"
                    f"x single decode (target 10x: {target if single else 'unknown'})")
            f.write(f"; {fmt(ignite[p] / hf[p], 2)}x transformers at batch {p}\n" if p in hf
                    else "; transformers at this batch: no figure\n")
        for p in sorted(mixed0):
            f.write(f"# -P {p}: IGNITE_GPU_MIXED=0 {fmt(mixed0[p])} tok/s; the default (decode "
                    f"rows of mixed steps through the decode attention) "
                    + (f"{fmt(ignite[p])} tok/s = {fmt(ignite[p] / mixed0[p], 3)}x\n"
                       if p in ignite else "no figure\n"))
        for p in sorted(k for k in parts if k.startswith("p") and k[1:].isdigit()):
            p = int(p[1:])
            if p in steps:
                ms, k = steps[p]
                f.write(f"# -P {p}: pure decode steps ({p} rows): median {ms:.2f} ms over {k} "
                        f"gaps{' (target <= 13 ms: ' + ('met' if ms <= 13 else 'not met') + ')' if p == 256 else ''}\n")
            else:
                f.write(f"# -P {p}: pure decode steps: no figure (no per-request timings or "
                        f"no step with every request decoding)\n")
        for msg in problems:
            f.write(f"# problem: {msg}\n")
    with open(args.out) as f:
        sys.stdout.write(f.read())
    bad = any(m.startswith("-P") for m in problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
