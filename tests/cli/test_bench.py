"""tests/cli/test_bench.py: `ignite bench` on a synthetic SmolLM2-135M (random
weights in memory, nothing downloaded) with tiny tests: csv, json and jsonl
parse, md has its header and one row per test, every row carries the model,
its size and parameters, the device, the version and the test's numbers; two
thread counts and two prompt lengths give one row each; a GGUF model made by
tests/pylib/ggufgen.py works too; a list longer than 255 characters is read whole; bad options exit 2, a CUDA device that is not
there exits 7, a context beyond memory exits 5 naming -p, -n and -d, a stdout that cannot
take the rows exits 3 naming why, a closed stdout ends it with 0, Ctrl-C leaves a
closed json array (exit 130); --depth-fill copies the depth past N (a multiple of 64, else exit 2). Rows name the build (its commit checked with git);
avg_ns and stddev_ns are whole numbers; nothing to run or an empty list item is exit 2.
No timing asserts."""
import csv
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import ggufgen
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]
MODEL = "synthetic:SmolLM2-135M:Q4_1"

FIELDS = ["ignite_version", "build_commit", "build_number", "build_compiler", "build_cuda",
          "cpu_info", "device", "isa", "matmul", "model_filename",
          "model_type", "model_size", "model_n_params", "n_batch", "n_threads", "type_kv",
          "n_prompt", "n_gen", "n_depth", "test", "repetitions", "avg_ns", "stddev_ns", "avg_ts",
          "stddev_ts", "ttft_ms"]



SRC = os.environ.get("IGNITE_SOURCE_DIR", ".")


def git_ok():
    try:
        return subprocess.run(["git", "-C", SRC, "rev-parse", "--git-dir"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def bench(*args, model=MODEL):
    r = subprocess.run([IGNITE, "bench", "-m", model, "-r", "2", *args], capture_output=True,
                       timeout=300)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def check_row(row, what, n_prompt, n_gen, threads=None):
    for f in FIELDS:
        check(f in row, f"{what}: field {f} missing")
    if any(f not in row for f in FIELDS):
        return
    check(row["ignite_version"] and row["device"] == "cpu", f"{what}: version/device {row}")
    check(str(row["model_filename"]).startswith("synthetic:SmolLM2-135M") or
          str(row["model_filename"]).endswith(".gguf"), f"{what}: model {row['model_filename']}")
    check(float(row["model_size"]) > 0 and float(row["model_n_params"]) > 0,
          f"{what}: size/params {row['model_size']} {row['model_n_params']}")
    check(int(float(row["n_prompt"])) == n_prompt and int(float(row["n_gen"])) == n_gen,
          f"{what}: n_prompt/n_gen {row['n_prompt']} {row['n_gen']}")
    test = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
    check(int(float(row.get("n_depth", -1))) == 0, f"{what}: n_depth {row.get('n_depth')}")
    check(row["test"] == test, f"{what}: test {row['test']} != {test}")
    check(float(row["avg_ts"]) > 0 and float(row["avg_ns"]) > 0, f"{what}: speed {row['avg_ts']}")
    # whole nanoseconds, written out in full as llama-bench does (never 1.81937e+08)
    for f in ("avg_ns", "stddev_ns"):
        v = row[f]
        check(isinstance(v, int) if not isinstance(v, str) else v.isdigit(),
              f"{what}: {f} is not an integer: {v!r}")
    check(row["build_cuda"] == "none" or row["build_cuda"][:1].isdigit(),
          f"{what}: build_cuda {row['build_cuda']!r}")
    commit = row["build_commit"]
    if git_ok():
        r = subprocess.run(["git", "-C", SRC, "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True)
        check(r.returncode == 0, f"{what}: build_commit {commit!r} is not a commit of {SRC}")
        check(int(float(row["build_number"])) > 0, f"{what}: build_number {row['build_number']}")
    else:
        check(commit == "unknown", f"{what}: build_commit {commit!r} outside git")
    if threads is not None:
        check(int(float(row["n_threads"])) == threads, f"{what}: threads {row['n_threads']}")
    ttft = row["ttft_ms"]
    if n_prompt:
        check(ttft not in (None, "") and float(ttft) > 0, f"{what}: ttft {ttft!r}")
    else:
        check(ttft in (None, ""), f"{what}: tg row has a ttft {ttft!r}")


def interrupted_json(args, n_rows):
    """Starts `bench -o json ARGS`, waits for n_rows rows (0: for the warm-up
    to begin), sends SIGINT and checks that stdout parses as an array of
    those rows and the status is 130. The second test must outlast the wait:
    a long prefill on 1 thread."""
    p = subprocess.Popen([IGNITE, "bench", "-m", MODEL, "-r", "3", "-t", "1", "-o", "json",
                          *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = b""
    while got.count(b"}") < n_rows:  # a row arrives whole, flushed
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        got += chunk
    if n_rows == 0:
        time.sleep(2)
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=120)
    out = (got + rest).decode()
    try:
        arr = json.loads(out)
    except ValueError:
        arr = None
    check(p.returncode == 130, f"Ctrl-C {args}: exit {p.returncode}, want 130: {err!r}")
    check(isinstance(arr, list) and len(arr) == n_rows,
          f"Ctrl-C {args}: stdout is not a closed array of {n_rows} rows: {out!r}")


def main():
    # csv: a header and one row per (threads, test)
    rc, out, err = bench("-p", "8,16", "-n", "4", "-t", "1,2", "-o", "csv")
    check(rc == 0, f"csv: exit {rc}: {err}")
    rows = list(csv.DictReader(io.StringIO(out)))
    check(len(rows) == 6, f"csv: {len(rows)} rows, expected 6:\n{out}")
    want = [(8, 0, 1), (16, 0, 1), (0, 4, 1), (8, 0, 2), (16, 0, 2), (0, 4, 2)]
    for row, (p, n, t) in zip(rows, want):
        check_row(row, f"csv row {row.get('test')}", p, n, t)

    # json: one array
    rc, out, err = bench("-p", "8", "-n", "4", "-t", "1", "-o", "json")
    check(rc == 0, f"json: exit {rc}: {err}")
    try:
        arr = json.loads(out)
    except ValueError:
        arr = None
    check(isinstance(arr, list) and len(arr) == 2, f"json: not an array of 2 rows: {out[:300]}")
    for row, (p, n) in zip(arr or [], [(8, 0), (0, 4)]):
        check_row(row, "json row", p, n, 1)
        check(len(row.get("samples_ts", [])) == 2, f"json: samples {row.get('samples_ts')}")

    # jsonl: one object per line
    rc, out, err = bench("-p", "8", "-n", "0", "-t", "1", "-o", "jsonl")
    check(rc == 0, f"jsonl: exit {rc}: {err}")
    lines = [l for l in out.splitlines() if l.strip()]
    check(len(lines) == 1, f"jsonl: {len(lines)} lines")
    for l in lines:
        try:
            check_row(json.loads(l), "jsonl row", 8, 0, 1)
        except ValueError:
            check(False, f"jsonl: bad line {l!r}")

    # md: header, separator, one row per test, then the build's line as
    # llama-bench ends its table; stdout only (no progress off a TTY)
    rc, out, err = bench("-p", "8", "-n", "4", "-t", "1")
    md = out.splitlines()
    check(rc == 0 and len(md) == 6 and md[0].startswith("| model") and md[4] == "" and
          md[5].startswith("build: "), f"md: {out!r} {err}")
    check(any("pp8" in l for l in md) and any("tg4" in l for l in md), f"md rows: {out}")
    check("\r" not in err, f"progress written when stderr is not a TTY: {err!r}")

    # a GGUF file and the exact path
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.gguf")
        with open(path, "wb") as f:
            f.write(ggufgen.tiny_llama().build())
        rc, out, err = bench("-p", "4", "-n", "2", "-t", "1", "--exact", "-o", "jsonl",
                             model=path)
        check(rc == 0, f"gguf: exit {rc}: {err}")
        for l, (p, n) in zip(out.splitlines(), [(4, 0), (0, 2)]):
            row = json.loads(l)
            check_row(row, "gguf row", p, n, 1)
            check(row.get("matmul") == "exact", f"gguf: matmul {row.get('matmul')}")

    # depth: each test after N tokens already in the cache, named like llama-bench
    rc, out, err = bench("-p", "8", "-n", "4", "-d", "0,16", "-t", "1", "-o", "jsonl")
    check(rc == 0, f"depth: exit {rc}: {err}")
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    got = [(r.get("test"), r.get("n_depth")) for r in rows]
    check(got == [("pp8", 0), ("tg4", 0), ("pp8 @ d16", 16), ("tg4 @ d16", 16)],
          f"depth rows: {got}")

    # --depth-fill: the depth past N copied (tests/cli/test_bench_fill.c checks the rows);
    # not a multiple of the block is a usage error
    rc, out, err = bench("-p", "0", "-n", "2", "-d", "200", "--depth-fill", "64", "-t", "1",
                         "-o", "jsonl")
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    got = [(r.get("test"), r.get("n_depth")) for r in rows]
    check(rc == 0 and got == [("tg2 @ d200", 200)], f"--depth-fill: exit {rc}, {got}: {err}")
    rc, out, err = bench("-n", "2", "-d", "200", "--depth-fill", "100")
    check(rc == 2 and out == "" and "multiple of 64" in err and err.count("\n") == 1,
          f"--depth-fill 100: exit {rc}: {err!r}")

    # csv numbers keep their precision: the fractions read back the same
    rc, out, err = bench("-p", "8", "-n", "0", "-t", "1", "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    check(rc == 0 and len(rows) == 1 and "e+" not in out, f"csv precision: {out!r}")

    # nothing to run, or an empty item in a list, is a usage error
    for args in (["-p", "0", "-n", "0"], ["-p", "64,,8"], ["-n", "8,"], ["-d", ",0"]):
        rc, out, err = bench(*args)
        check(rc == 2 and out == "" and err.count("\n") == 1, f"{args}: exit {rc}: {err!r}")

    # a reader that closes stdout ends bench quietly with 0, at once
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = subprocess.run([IGNITE, "bench", "-m", MODEL, "-r", "1", "-p", "4", "-n", "0",
                            "-t", "1", "-o", "jsonl"], stdout=wr, stderr=subprocess.PIPE,
                           timeout=300)
    finally:
        os.close(wr)
    check(r.returncode == 0 and r.stderr == b"", f"bench | (closed): exit {r.returncode}: "
          f"{r.stderr!r}")

    # Ctrl-C: the rows so far as a whole json document (the array closed), exit 130
    interrupted_json(["-p", "4,8192", "-n", "0"], 1)
    interrupted_json(["-p", "8192", "-n", "0"], 0)

    # a list of any length is read whole (a 255-byte copy once cut this to 4,0: pp4 alone)
    rc, out, err = bench("-p", "4," + "0" * 300 + "8", "-n", "0", "-t", "1", "-o", "jsonl")
    got = [json.loads(l).get("test") for l in out.splitlines() if l.strip()]
    check(rc == 0 and got == ["pp4", "pp8"], f"long -p list: exit {rc}, rows {got}: {err}")
    rc, out, err = bench("-n", ",".join(["0" * 20 + "1"] * 17))
    check(rc == 2 and "at most 16" in err and out == "", f"17 long values: exit {rc}: {err}")

    # a context beyond memory names bench's options, not run's -c
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "wide.gguf")
        with open(path, "wb") as f:  # 16 layers x 512 x (K, V) x f32 = 64 KiB a position
            f.write(ggufgen.tiny_llama(n_layer=16, n_embd=512, n_head=4, n_head_kv=4).build())
        avail = 0
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
        n_ctx = 2 * (1 << 20) + 1
        if avail and n_ctx * 65536 > avail:
            rc, out, err = bench("-p", str(1 << 20), "-d", str(1 << 20), "-n", "0",
                                 "--cache-type", "f32", "--device", "cpu", model=path)
            check(rc == 5 and "lower -p, -n or -d" in err and "-c" not in err and out == "",
                  f"context beyond memory: exit {rc}: {err!r}")

    # errors
    for args, code in [(["-o", "xml"], 2), (["-p", "x"], 2), (["--device", "cuda:1023"], 7),
                       (["--device", "tpu"], 2)]:
        rc, out, err = bench(*args)
        check(rc == code, f"{args}: exit {rc}, expected {code}: {err}")
        check(err.count("\n") >= 1 and out == "", f"{args}: output {out!r} {err!r}")
    rc, out, err = bench(model="synthetic:NoSuchModel")
    check(rc == 2 and "SmolLM2-135M" in err, f"unknown synthetic model: exit {rc}: {err}")
    rc, out, err = bench(model="synthetic:SmolLM2-135M:Q4_K")
    check(rc == 2, f"Q4_K on 576-wide SmolLM2: exit {rc}: {err}")
    # the architectures after Llama 2: a Gemma 3 shape (local layers, GELU, norms) runs
    rc, out, err = bench("-p", "8", "-n", "2", "-o", "jsonl", "--device", "cpu",
                         model="synthetic:Gemma-3-270M:Q4_0")
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    check(rc == 0 and len(rows) == 2 and all(r["model_type"].startswith("gemma3 ") and
                                             r["avg_ts"] > 0 for r in rows),
          f"synthetic:Gemma-3-270M: exit {rc}: {out!r} {err!r}")
    # every synthetic type builds and runs (the 256-wide tiny shape fits every block size)
    for qt in ("Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS"):
        rc, out, err = bench("-p", "8", "-n", "2", "-o", "jsonl", "--device", "cpu",
                             model=f"synthetic:Llama-tiny:{qt}")
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        check(rc == 0 and len(rows) == 2 and all(f" {qt}" in r["model_type"] and
                                                 r["avg_ts"] > 0 for r in rows),
              f"synthetic:Llama-tiny:{qt}: exit {rc}: {out!r} {err!r}")
    # rows stdout cannot take are an I/O error, not success
    if os.access("/dev/full", os.W_OK):
        with open("/dev/full", "wb") as full:
            r = subprocess.run([IGNITE, "bench", "-m", MODEL, "-r", "1", "-p", "4", "-n", "0",
                                "-t", "1"], stdout=full, stderr=subprocess.PIPE, timeout=300)
        check(r.returncode == 3 and b"No space left on device" in r.stderr and
              r.stderr.count(b"\n") == 1, f"bench >/dev/full: exit {r.returncode}: {r.stderr!r}")

    return summary("test_bench")


if __name__ == "__main__":
    sys.exit(main())
