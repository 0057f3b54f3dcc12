#!/usr/bin/env python3
"""scripts/gpu/pd_table.py WORK NAME..: scripts/gpu/pd.sh's table, a row a way
(WORK/NAME.json, `ignite bench --requests -o json`'s report): requests done,
TTFT and TPOT p50/p99 (ms, the report's), and from requests[]: the path the
caches took, the median cache bytes and transfer ms a request (`pd`), the
transfer's rate (bytes / ms, median of the requests'). A way whose file is
missing or not a report gets its row with its reason."""
import json
import statistics
import sys


def row(work, name):
    try:
        with open(f"{work}/{name}.json") as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        return [name, f"no report ({type(e).__name__})"]
    if isinstance(r, list):  # (bench writes one report for --requests; a list is rows)
        r = r[0] if r else {}
    reqs = r.get("requests") or []
    pds = [q["pd"] for q in reqs if isinstance(q.get("pd"), dict)]

    def med(xs):
        return f"{statistics.median(xs):.2f}" if xs else "-"
    paths = sorted({p.get("path", "?") for p in pds}) or ["-"]
    rates = [p["kv_bytes"] / p["transfer_ms"] / 1e6 for p in pds
             if p.get("transfer_ms", 0) > 0]  # bytes/ms / 1e6 = GB/s
    return [name, str(r.get("completed", "?")),
            *(f"{r.get(k, float('nan')):.1f}" for k in
              ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")),
            ",".join(paths), med([p["kv_bytes"] / 2**20 for p in pds]),
            med([p["transfer_ms"] for p in pds]), med(rates)]


def main():
    work, names = sys.argv[1], sys.argv[2:]
    print("\t".join(["way", "done", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "path",
                     "kv_mib", "transfer_ms", "gb_s"]))
    for n in names:
        print("\t".join(row(work, n)))


if __name__ == "__main__":
    main()
