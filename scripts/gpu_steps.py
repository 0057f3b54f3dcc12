#!/usr/bin/env python3
"""scripts/gpu_steps.py: checks the GPU check's step table (scripts/gpu-steps.txt)
against what a GPU window allows and against docs/gpu.md:

  * every line parses (id, limit_s, est_s, table, command), ids are unique;
  * the limits add up to at most the run's budget (scripts/gpu-check.sh's
    GPU_CHECK_BUDGET, 470 s) and the budget plus starting and packing to at most
    the 8 minutes a run may take;
  * at most 8 files come back: the tarball, steps.tsv and one table per step;
  * docs/gpu.md has the table of steps (between <!-- gpu-steps:begin --> and
    <!-- gpu-steps:end -->) with the same ids, limits and seconds, in the same
    order.

  python3 scripts/gpu_steps.py [--steps FILE] [--doc FILE]
Exit status 0, or 1 with one line per problem. A ctest (test_gpu_steps)."""

import argparse
import os
import re
import shlex
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RUN_LIMIT_S = 480     # one run of the GPU check on the GPU machine
BUDGET_S = 470        # the steps' share (scripts/gpu-check.sh GPU_CHECK_BUDGET)
MAX_FILES = 8         # files that come back from the machine


def read_steps(path):
    steps = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split(None, 4)
            if len(fields) < 5:
                steps.append({"error": f"{path}:{no}: expected id limit est table command"})
                continue
            sid, limit, est, table, cmd = fields
            try:
                steps.append({"id": sid, "limit": int(limit), "est": int(est), "table": table,
                              "cmd": cmd.strip(), "line": no})
            except ValueError:
                steps.append({"error": f"{path}:{no}: limit and est must be whole seconds"})
    return steps


def doc_rows(path):
    """(id, limit, est) of the step table in docs/gpu.md, between the lines
    <!-- gpu-steps:begin --> and <!-- gpu-steps:end -->: rows `| `id` | limit | est |`."""
    rows, inside = [], False
    with open(path) as f:
        for line in f:
            if "<!-- gpu-steps:begin -->" in line:
                inside = True
            elif "<!-- gpu-steps:end -->" in line:
                inside = False
            m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line)
            if inside and m:
                rows.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return rows


def check(steps_path, doc_path):
    problems = []
    steps = read_steps(steps_path)
    problems += [s["error"] for s in steps if "error" in s]
    steps = [s for s in steps if "error" not in s]
    ids = [s["id"] for s in steps]
    if len(set(ids)) != len(ids):
        problems.append(f"{steps_path}: a step id appears twice")
    for s in steps:
        empty = s["cmd"] == "-" or s["cmd"].startswith("- ")
        if empty and s["limit"] != 0:
            problems.append(f"{steps_path}:{s['line']}: empty slot {s['id']} with a limit")
        if not empty and s["limit"] < 5:
            problems.append(f"{steps_path}:{s['line']}: step {s['id']} has under 5 s")
        if not empty and s["est"] > s["limit"]:
            problems.append(f"{steps_path}:{s['line']}: step {s['id']} takes {s['est']} s, "
                            f"its limit is {s['limit']} s")
        if not empty:
            try:
                shlex.split(s["cmd"])
            except ValueError as e:
                problems.append(f"{steps_path}:{s['line']}: {e}")
    total = sum(s["limit"] for s in steps)
    if total > BUDGET_S:
        problems.append(f"{steps_path}: the limits add up to {total} s, over the budget of "
                        f"{BUDGET_S} s (the run: {RUN_LIMIT_S} s)")
    files = 2 + sum(1 for s in steps if s["table"] != "-")
    if files > MAX_FILES:
        problems.append(f"{steps_path}: {files} files would come back, at most {MAX_FILES}")
    want = [(s["id"], s["limit"], s["est"]) for s in steps]
    got = doc_rows(doc_path)
    if got != want:
        problems.append(f"{doc_path}: its step table {got} is not {steps_path}'s {want}")
    return problems, total, files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default=os.path.join(ROOT, "scripts", "gpu-steps.txt"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "gpu.md"))
    args = ap.parse_args()
    problems, total, files = check(args.steps, args.doc)
    for p in problems:
        print(p)
    if not problems:
        print(f"gpu_steps: {total} s of limits in a {BUDGET_S} s budget, {files} files back")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
