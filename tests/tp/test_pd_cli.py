"""tests/tp/test_pd_cli.py: `mpirun -np P+D ignite batch --pd P:D` (prefill
and decode on different ranks, cli/pd.c) against one process's `ignite
batch` on SmolLM2: a batch of 13 requests (greedy and seeded sampled ones,
one long prompt over several chunks and KV blocks, and again with another
question: its first blocks shared on the prefill rank as in one process),
request by request (id, text, stop, token counts; at 2:1 prompt + cached, as
prompt blocks are shared within a prefill rank) at 1:1, 1:2 and 2:1, each
cache sent layer by layer as it is written; where each request ran (decode
ranks ran no prompt rows, prefill ranks no decode rows, both decode ranks of
1:2 used) and its cache's bytes (those of `run --prompt-only --save-kv` for
the same prompt, but the checksum); a hybrid (the tiny qwen35: DeltaNet
states and attention rows, prompts over several chunks) at 1:1, its parts
chunk by chunk; a decode rank with room for
one request at a time (--kv-mem): prefill waits, every request completes,
the same texts; and the failures: --pd without mpirun, against the ranks
started, a bad P:D (exit 2, one line each), a decode rank killed mid-run
(the job ends, non-zero, no hang), one stopped (IGNITE_TP_WATCHDOG=3: one
line naming it, exit 7). And `bench --requests --pd 1:2` on a seeded
schedule: one process's requests, every token's gap, each rank's rows.
Under the sanitizers: 4 of the requests at 1:2, no killed or stopped rank.
Where given ignite_emu and the NCCL stand-in (tests/tp/CMakeLists.txt passes
them where MPI is), the NCCL path end to end, a hybrid's states and a window
model's window blocks too, and a decode rank stopped mid-transfer there (the NCCL
watchdog: one line, exit 7) (nccl() below).
Usage: test_pd_cli.py [IGNITE_EMU NCCL_STANDIN]
       (37 s normal build, 63 s ASan + UBSan, 2 cores at load average 9-10; 99 s
       with the NCCL case, 63 s of it, at load average 8; its stopped decode rank
       7 s of that, 3 s of its ranks' CPU)
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from igtest import check, llama_vocab, model_path, sanitized, summary, tiny_qwen35  # noqa: E402
from tplib import mpi, mpirun_or_skip, sanitizer_env, scratch  # noqa: E402

IGNITE = os.environ.get("IGNITE_BIN", "ignite")
LIMIT = 900 if sanitized() else 120
STOPPED_LIMIT = 300 if sanitized() else 40  # (a stopped rank's watchdog: 3 s past the set-up)
LONG = ("The history of the river town begins with a mill, a bridge and a market "
        "square where farmers sold grain, wool and apples every week. ") * 8


def requests():
    words = ["red", "seven", "river", "Paris", "code", "music"]
    reqs = []
    for i in range(11):
        r = {"id": i, "prompt": f"Tell me about {words[i % 6]} and the number {i}:",
             "n_predict": 4 + i % 5}
        if i % 3 == 1:  # seeded sampling: the same stream on whichever rank
            r.update(temperature=0.9, seed=100 + i)
        else:
            r["temperature"] = 0
        reqs.append(r)
    reqs.insert(5, {"id": "long", "prompt": LONG + "What sold best?", "n_predict": 6,
                    "temperature": 0})
    # the long prompt's first blocks again: shared on the prefill rank as in one process
    reqs.append({"id": "long2", "prompt": LONG + "Who built the bridge?", "n_predict": 5,
                 "temperature": 0.7, "seed": 7})
    if sanitized():  # (~30x slower) a greedy, a seeded, the long pair
        reqs = [r for r in reqs if r["id"] in (0, 1, "long", "long2")]
    return reqs


def results(stdout):
    rows = [json.loads(line) for line in stdout.decode().splitlines()]
    return rows, [(o["id"], o.get("text"), o.get("stop"), o.get("tokens")) for o in rows]


def batch(mpirun, n, args, **kw):
    argv = [IGNITE, "batch"] + args
    if n == 1:
        return subprocess.run(argv, capture_output=True, timeout=LIMIT, **kw)
    return mpi(mpirun, n, argv, timeout=LIMIT, **kw)


def pd_lines(stderr):
    """{rank: (role, prompt rows, decode rows)} from the `pd: rank` lines."""
    out = {}
    for ln in stderr.decode(errors="replace").splitlines():
        if ln.startswith("pd: rank "):
            w = ln.split()
            out[int(w[2])] = (w[3].strip("():"), int(w[4]), int(w[7]))
    return out


def equal_runs(mpirun, tmp):
    path = model_path()
    f = os.path.join(tmp, "reqs.jsonl")
    with open(f, "w") as out:
        out.write("".join(json.dumps(r) + "\n" for r in requests()))
    args = ["-m", path, "-t", "1", "-P", "4", "-b", "32", "--ordered", "-f", f]
    one = batch(mpirun, 1, args)
    check(one.returncode == 0, f"one process: {one.stderr[-300:]}")
    _, want = results(one.stdout)
    n = len(requests())
    check(len(want) == n and all(w[1] for w in want), f"one process: {want}")
    # the long request's cache as `run --prompt-only --save-kv` writes it
    kv = os.path.join(tmp, "long.kv")
    r = subprocess.run([IGNITE, "run", "-m", path, "-t", "1", "-p", LONG + "What sold best?",
                        "--prompt-only", "--save-kv", kv], capture_output=True, timeout=LIMIT,
                       env=sanitizer_env())
    check(r.returncode == 0 and os.path.exists(kv), f"run --save-kv: {r.stderr[-300:]}")
    layouts = ((1, 2),) if sanitized() else ((1, 1), (1, 2), (2, 1))
    for p, d in layouts:
        t = time.time()
        got = batch(mpirun, p + d, args + ["--pd", f"{p}:{d}"])
        what = f"--pd {p}:{d}"
        check(got.returncode == 0, f"{what}: exit {got.returncode}: {got.stderr[-400:]}")
        rows, res = results(got.stdout)
        if p > 1:  # blocks are shared within a prefill rank: "cached" may move to "prompt"
            res, want_p = ([(i, t, s, (n["prompt"] + n["cached"], n["generated"]))
                            for i, t, s, n in x] for x in (res, want))
        else:
            want_p = want
        diff = [(g, w) for g, w in zip(res, want_p) if g != w]
        check(len(res) == n and not diff, f"{what}: {len(diff)} requests differ, first {diff[:1]}")
        ranks = pd_lines(got.stderr)
        check(sorted(ranks) == list(range(p + d)), f"{what}: pd lines {ranks}")
        check(all(ranks[r][2] == 0 for r in range(p)) and all(ranks[r][1] == 0 for r in
                                                               range(p, p + d)),
              f"{what}: a prefill rank decoded or a decode rank ran prompt rows: {ranks}")
        check(sum(ranks[r][2] for r in ranks) == sum(o["tokens"]["generated"] - 1 for o in rows),
              f"{what}: decode rows {ranks} against the generated tokens")
        used = {o["pd"]["decode_rank"] for o in rows}
        check(used == set(range(p, p + d)), f"{what}: decode ranks used {used}")
        check({o["pd"]["prefill_rank"] for o in rows} == set(range(p)),
              f"{what}: prefill ranks used")
        long_row = [o for o in rows if o["id"] == "long"]
        # (the parts carry every byte of the saved file but its 4-byte checksum)
        check(long_row and os.path.exists(kv) and
              long_row[0]["pd"]["kv_bytes"] == os.path.getsize(kv) - 4,
              f"{what}: the long prompt's cache: {long_row and long_row[0]['pd']} against "
              f"{os.path.exists(kv) and os.path.getsize(kv)} bytes saved by run")
        shared = [o["tokens"]["cached"] for o in rows if o["id"] == "long2"]
        # (the sanitizers' 4 requests are admitted together: nothing computed to share yet)
        check(p > 1 or sanitized() or (shared and shared[0] >= 64),
              f"{what}: the long prompt's blocks not shared: {shared}")
        print(f"{what}: {time.time() - t:.1f} s", file=sys.stderr)
    # a decode rank with room for one request at a time (SmolLM2's f32 block is
    # 2.8 MiB: 12 MiB hold 4 blocks, the long request's): prefill waits, and
    # every request completes with one process's text (a request's text does
    # not depend on the pool: what was cached may move to "prompt")
    small = args + ["--kv-mem", "12", "-P", "2"]
    got = batch(mpirun, 2, small + ["--pd", "1:1"])
    _, res = results(got.stdout)
    res, want = ([(i, t, s, (n["prompt"] + n["cached"], n["generated"])) for i, t, s, n in x]
                 for x in (res, want))
    waited = [ln for ln in got.stderr.decode(errors="replace").splitlines()
              if ln.startswith("pd: rank 0") and "waited" in ln]
    # (whether a cache waited is a race between the ranks: under the sanitizers, whose
    # slowdown is not even across the ranks' work, it may not happen; the normal build
    # is where it is shown)
    check(sanitized() or (waited and int(waited[0].split(", ")[-1].split()[0]) > 0),
          f"--kv-mem 12, --pd 1:1: no cache waited for room: {waited}")
    check(got.returncode == 0 and res == want and len(res) == n,
          f"--kv-mem 12, --pd 1:1: exit {got.returncode}, {sum(g != w for g, w in zip(res, want))}"
          f" differ of {len(res)}: {got.stderr[-300:]}")


def parts(stderr):
    """The parts prefill rank 0 sent, from its `pd: rank 0` line."""
    for ln in stderr.decode(errors="replace").splitlines():
        if ln.startswith("pd: rank 0 ") and " parts " in ln:
            return int(ln.split(" parts ")[0].split()[-1])
    return -1


def hybrid(mpirun, tmp):
    """The tiny qwen35 (bench/randgguf_qwen35.py: 3 gated DeltaNet layers, then
    1 attention layer) with llama.cpp's qwen35 vocabulary, prompts over several
    chunks of -b 8: at --pd 1:1 each prompt's cache leaves layer by layer as
    written, the attention layer's rows chunk by chunk and each DeltaNet
    state once the prompt's last chunk is in it: the texts are one process's,
    and the parts at least 1 head + a chunk's rows per 8 prompt rows + 3
    states + 1 end each (every part after the prompt, IGNITE_PD_WHOLE=1,
    would be 6)."""
    path = tiny_qwen35(tmp)
    if not path:
        return
    f = os.path.join(tmp, "hybrid.jsonl")
    words = "the river town mill bridge market farmers grain wool apples week".split()
    with open(f, "w") as out:
        for i in range(2 if sanitized() else 5):
            r = {"id": i, "prompt": " ".join(words[j % 11] for j in range(i, 9 + 7 * i)),
                 "n_predict": 5, "temperature": 0.8 if i % 2 else 0, "seed": 50 + i}
            out.write(json.dumps(r) + "\n")
    # the int8 path: a prompt cut inside a DeltaNet chunk (-b 8) keeps a
    # checkpoint and its next step runs the chunk again whole, so a request's
    # rows are the same bits whatever shares its steps (docs/kvcache.md; --exact
    # was needed before: one process's -P 1 and -P 3 texts differed)
    args = ["-m", path, "-t", "1", "-P", "3", "-b", "8", "--ordered", "-f", f]
    one = batch(mpirun, 1, args)
    rows, want = results(one.stdout)
    check(one.returncode == 0 and all(w[1] for w in want), f"qwen35, one process: "
          f"{one.stderr[-300:]}")
    least = sum(5 + -(-o["tokens"]["prompt"] // 8) for o in rows)
    got = batch(mpirun, 2, args + ["--pd", "1:1"])
    prow, res = results(got.stdout)
    n = parts(got.stderr)
    check(prow and all(o["pd"]["path"] == "host" for o in prow), "qwen35 --pd 1:1: the path "
          f"{[o['pd']['path'] for o in prow]}")
    check(got.returncode == 0 and res == want, f"qwen35 --pd 1:1: exit {got.returncode}, {res} "
          f"against {want}: {got.stderr[-300:]}")
    check(n >= least, f"qwen35 --pd 1:1: {n} parts for {len(want)} requests, not layer by "
          f"layer (at least {least})")


def errors(mpirun, tmp):
    """Requests that fail on the prefill rank (over the context), on rank 0 (not
    JSON, a grammar that does not compile) and on the decode rank (more blocks
    than its pool: --kv-mem 3 holds one) get one process's error objects; the
    others run (exit 9 both)."""
    path = model_path()
    f = os.path.join(tmp, "bad.jsonl")
    with open(f, "w") as out:
        out.write(json.dumps({"id": "ok", "prompt": "Hello there", "n_predict": 3,
                              "temperature": 0}) + "\n")
        out.write(json.dumps({"id": "long", "prompt": LONG, "n_predict": 3}) + "\n")
        out.write("{not json\n")
        out.write(json.dumps({"id": "gbnf", "prompt": "Hi", "grammar": "root ::= ("}) + "\n")
        out.write(json.dumps({"id": "many", "prompt": "Hi", "n_predict": 100}) + "\n")
    args = ["-m", path, "-t", "1", "-c", "128", "--kv-mem", "3", "--ordered", "-f", f]

    def rows(r):
        return [(o.get("id"), o.get("text"), o.get("error"), o.get("status"))
                for o in map(json.loads, r.stdout.decode().splitlines())]
    one, pd = batch(mpirun, 1, args), batch(mpirun, 2, args + ["--pd", "1:1"])
    check(one.returncode == 9 and pd.returncode == 9 and rows(pd) == rows(one) and
          len(rows(one)) == 5, f"failing requests: exit {one.returncode}/{pd.returncode}: "
          f"{rows(pd)} against {rows(one)}")


def bench(mpirun):
    """bench --requests --pd 1:2 on a seeded schedule: the requests, their
    arrivals and lengths one process's; every token's gap reported; each rank's
    rows in the JSON (decode rows: a row per token after the first)."""
    path = model_path()
    args = ["bench", "-m", path, "-t", "1", "--requests", "4" if sanitized() else "6", "-P", "2",
            "--input-len", "40",
            "--output-len", "6:2", "--request-rate", "20", "-s", "3", "-o", "json"]

    def report(r):
        d = json.loads(r.stdout)
        return d[0] if isinstance(d, list) else d
    one = subprocess.run([IGNITE] + args, capture_output=True, timeout=LIMIT, env=sanitizer_env())
    got = mpi(mpirun, 3, [IGNITE] + args + ["--pd", "1:2"], timeout=LIMIT)
    check(one.returncode == 0 and got.returncode == 0,
          f"bench --pd 1:2: exit {one.returncode}/{got.returncode}: {got.stderr[-300:]}")
    if one.returncode or got.returncode:
        return
    a, b = report(one), report(got)
    keys = ("completed", "total_input_tokens", "total_output_tokens")
    check(all(a[k] == b[k] for k in keys), f"bench --pd: {[(a[k], b[k]) for k in keys]}")
    req = [[(q["index"], q["arrival_s"], q["input_len"], q["output_len"]) for q in x["requests"]]
           for x in (a, b)]
    check(sorted(req[0]) == sorted(req[1]), f"bench --pd: requests {req[1]} against {req[0]}")
    check(all(len(q["itl_ms"]) == q["output_len"] - 1 and q["pd"]["kv_bytes"] > 0
              for q in b["requests"]), "bench --pd: a request's gaps or cache bytes")
    ranks = b.get("pd", {}).get("ranks", [])
    # the prefill rank's overlap: its time computing (the layers' parts posted
    # inside), writing the parts, idle on the sends and on room
    # CPU ranks: auto takes the host path and says why
    check(b.get("pd", {}).get("path") == "host" and "cpu" in b["pd"].get("path_why", ""),
          f"bench --pd: path {b.get('pd', {}).get('path')}, {b.get('pd', {}).get('path_why')}")
    check(b.get("pd", {}).get("transfer") == "layers" and len(ranks) == 3 and
          ranks[0].get("compute_ms", 0) > 0 and ranks[0].get("pack_ms", 0) > 0 and
          all(k in ranks[0] for k in ("send_wait_ms", "room_wait_ms", "messages")),
          f"bench --pd: the prefill rank's figures {ranks[:1]}")
    check(len(ranks) == 3 and ranks[0]["decode_rows"] == 0 and
          sum(r["prompt_rows"] for r in ranks[1:]) == 0 and
          sum(r["decode_rows"] for r in ranks) == b["total_output_tokens"] - b["completed"],
          f"bench --pd: ranks {ranks}")


def one_line(stderr, *words):
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.startswith("ignite:")]
    return len(lines) == 1 and all(w in lines[0] for w in words), lines


def failures(mpirun, tmp):
    path = model_path()
    f = os.path.join(tmp, "one.jsonl")
    with open(f, "w") as out:
        out.write(json.dumps({"prompt": "Hello", "n_predict": 2}) + "\n")
    r = subprocess.run([IGNITE, "batch", "-m", path, "--pd", "1:1", "-f", f],
                       capture_output=True, env=sanitizer_env(), timeout=LIMIT)
    ok, lines = one_line(r.stderr, "mpirun -np 2")
    check(r.returncode == 2 and ok, f"--pd 1:1 without mpirun: exit {r.returncode}, {lines}")
    r = batch(mpirun, 3, ["-m", path, "--pd", "1:1", "-f", f])
    ok, lines = one_line(r.stderr, "--pd 1:1", "needs 2 ranks", "started 3")
    check(r.returncode == 2 and ok, f"--pd 1:1 on 3 ranks: exit {r.returncode}, {lines}")
    r = subprocess.run([IGNITE, "batch", "-m", path, "--pd", "0:1", "-f", f],
                       capture_output=True, env=sanitizer_env(), timeout=LIMIT)
    ok, lines = one_line(r.stderr, "--pd", "P:D")
    check(r.returncode == 2 and ok, f"--pd 0:1: exit {r.returncode}, {lines}")
    # rank 1 (decode) killed, then stopped, a second into long generations
    long = os.path.join(tmp, "long.jsonl")
    with open(long, "w") as out:
        out.write("".join(json.dumps({"prompt": f"Story {i}:", "n_predict": 3000,
                                      "ignore_eos": True}) + "\n" for i in range(3)))
    argv = ["batch", "-m", path, "-t", "1", "-c", "4096", "--pd", "1:1", "-f", long]
    cmd = " ".join(f"'{a}'" for a in [IGNITE] + argv)
    base = [mpirun, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    if sanitized():  # they test mpirun and the watchdog: the normal build runs them
        return
    for sig, env, want in (("KILL", {}, None), ("STOP", {"IGNITE_TP_WATCHDOG": "3"}, 7)):
        t = time.time()
        try:
            r = subprocess.run(base + ["-np", "1", IGNITE] + argv +
                               [":", "-np", "1", "sh", "-c", f"(sleep 2; kill -{sig} $$) & exec {cmd}"],
                               capture_output=True, env=dict(sanitizer_env(), **env),
                               timeout=LIMIT)
        except subprocess.TimeoutExpired:
            check(False, f"decode rank {sig}: the job still ran after {LIMIT} s (a hang)")
            continue
        if want is None:
            # Open MPI ends every rank and names the dead one: "process rank 1 ..."
            check(r.returncode != 0 and b"rank 1" in r.stderr,
                  f"decode rank killed: exit {r.returncode}, {r.stderr[-300:]!r}")
        else:
            ok, lines = one_line(r.stderr, "rank 1 of 2 (decode)", "sent nothing")
            check(r.returncode == want and ok, f"decode rank stopped: exit {r.returncode}, "
                  f"{lines}")
        print(f"decode rank {sig}: exit {r.returncode} in {time.time() - t:.1f} s",
              file=sys.stderr)


def nccl(mpirun, tmp, emu, standin):
    """The NCCL path end to end: `mpirun -np 2 ignite_emu batch --pd 1:1 --device
    cuda` (the CLI over the emulated CUDA backend, tests/emu/ignite_emu_main.c)
    through the NCCL stand-in (IGNITE_NCCL_LIB) with IGNITE_PD_XFER=nccl, on
    bench/random_gguf.py's Llama-tiny (Q8_0, llama.cpp's llama-spm vocabulary):
    one process's texts (a prompt over two blocks in chunks of -b 32, a seeded
    one beside it, then the first again with other questions: its first
    block shared on the prefill rank), every request's pd.path "nccl", on a
    device that fills up (IGNITE_EMU_DEVICE_MEM: what one process needed and
    a block of the model more, less than a request's cache: the decode
    rank receives into its pool's blocks, no staging store) with a pool of
    96 blocks where a long request's room is 50 (its n_predict; a stop
    string ends it at its second token), so the later ones wait for the
    decode rank's room (its count left out: the job ends); a hybrid's states
    and a window layer's blocks (states_and_windows); the decode rank stopped
    mid-transfer: the prefill rank's watchdog ends the job with one line,
    exit 7; and IGNITE_PD_XFER naming nothing, nccl on CPU ranks, or nccl at
    --pd 2:2, refused, one line naming why, exit 2."""
    vocab = llama_vocab("llama-spm")
    if not vocab:
        print("SKIP the NCCL path: no ggml-vocab-llama-spm.gguf", file=sys.stderr)
        return
    from bench_gguf import random_gguf
    path = os.path.join(tmp, "llama-tiny.gguf")
    random_gguf.write(path, "Llama-tiny", "Q8_0", seed=3, arch="llama", vocab_from=vocab)
    f = os.path.join(tmp, "nccl.jsonl")
    with open(f, "w") as out:
        out.write(json.dumps({"id": "long", "prompt": LONG[:400] + "What sold best?",
                              "n_predict": 3100, "stop": ["chars"], "temperature": 0}) + "\n")
        out.write(json.dumps({"id": 1, "prompt": "Tell me about the river and 7:",
                              "n_predict": 3, "temperature": 0.8, "seed": 9}) + "\n")
        # its first block shared on the prefill rank, sent from there by NCCL all the same
        out.write(json.dumps({"id": "long2", "prompt": LONG[:400] + "Who built the bridge?",
                              "n_predict": 3100, "stop": ["chars"], "temperature": 0}) + "\n")
        out.write(json.dumps({"id": "long3", "prompt": LONG[:400] + "When was the mill built?",
                              "n_predict": 3100, "stop": ["chars"], "temperature": 0}) + "\n")
    # the emulator: POISON fills new device memory (a row not received reads garbage),
    # m64w4 the prefill kernel the chooser's pick costs twice the time of
    env = dict(os.environ, IGNITE_NCCL_LIB=standin, IGNITE_PD_XFER="nccl",
               IGNITE_EMU_POISON="1", IGNITE_FLASH_VARIANT="m64w4",
               ASAN_OPTIONS="detect_leaks=0")  # (Open MPI's allocations: tplib.sanitizer_env)
    cmd = [mpirun, "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    # (a pool of 96 blocks: past the set-up's passing peak, so the pool fills the device;
    # two long requests' room, 2 x 50 blocks, more than it)
    args = ["batch", "--device", "cuda", "-t", "1", "-P", "2", "-b", "32", "-c", "3200",
            "--kv-mem", "6", "--ordered", "-f", f]
    one = subprocess.run([emu] + args + ["-m", path], capture_output=True, timeout=LIMIT,
                         env=dict(env, IGNITE_EMU_DEVICE_MEM=str(1 << 40)))
    _, want = results(one.stdout)
    peak = re.search(r"emulated device: (\d+) bytes held at most", one.stderr.decode())
    check(one.returncode == 0 and len(want) == 4 and all(w[1] for w in want) and peak,
          f"ignite_emu, one process: exit {one.returncode}: {one.stderr[-300:]}")
    block = 64 * 1024  # (Llama-tiny's f16 pool: 1024 bytes a position, `ignite info`)
    full = dict(env, IGNITE_EMU_DEVICE_MEM=str(int(peak.group(1)) + block if peak else 0))
    got = subprocess.run(cmd + [emu] + args + ["-m", path, "--pd", "1:1"], capture_output=True,
                         timeout=LIMIT, env=full)
    rows, res = results(got.stdout)
    check(len(want) == 4 and want[2][3]["cached"] >= 64, f"the long prompt's first block not "
          f"shared: {want}")
    check(got.returncode == 0 and res == want, f"IGNITE_PD_XFER=nccl --pd 1:1: exit "
          f"{got.returncode}, {res} against {want}: {got.stderr[-400:]}")
    check(rows and all(o.get("pd", {}).get("path") == "nccl" and o["pd"]["kv_bytes"] > 0
                       for o in rows), f"IGNITE_PD_XFER=nccl: pd {[o.get('pd') for o in rows]}")
    # the decode rank stopped (SIGSTOP, by the stand-in) as its first group of receives
    # begins: the prefill rank's sends wait in the stand-in's wait, which only the
    # watchdog ends (backend/gpu_reduce_nccl.c: ncclCommAbort, one line, exit 7)
    t = time.time()
    try:
        r = subprocess.run(cmd + [emu] + args + ["-m", path, "--pd", "1:1"], capture_output=True,
                           timeout=STOPPED_LIMIT,
                           env=dict(env, IGNITE_NCCL_STANDIN_STOP="1", IGNITE_TP_WATCHDOG="3"))
        lines = [ln for ln in r.stderr.decode(errors="replace").splitlines()
                 if ln.startswith("ignite:") and not ln.startswith("ignite: warning:")]
        ok = len(lines) == 1 and all(w in lines[0] for w in (
            "rank 0: NCCL sends to rank 1", "not done in 3 s", "aborting the communicator"))
        check(r.returncode == 7 and ok, f"NCCL path, decode rank stopped: exit {r.returncode}, "
              f"{lines}")
    except subprocess.TimeoutExpired:
        check(False, f"NCCL path, decode rank stopped: still waiting after {STOPPED_LIMIT} s "
              f"(a hang)")
    print(f"NCCL path, decode rank stopped: {time.time() - t:.1f} s", file=sys.stderr)
    states_and_windows(cmd, emu, env, tmp, vocab, random_gguf)
    # a value naming nothing, and nccl where a rank has no such path (ignite's CPU ranks:
    # a launch costs mpirun's start and the model's load alone)
    for xfer, words in (("pigeon", ["pigeon"]), ("nccl", ["cannot move by NCCL", "cpu"])):
        r = subprocess.run(cmd + [IGNITE, "batch", "--device", "cpu", "-t", "1", "-f", f, "-m",
                                  path, "--pd", "1:1"], capture_output=True, timeout=LIMIT,
                           env=dict(env, IGNITE_PD_XFER=xfer))
        ok, lines = one_line(r.stderr, f"IGNITE_PD_XFER={xfer}" if xfer == "nccl"
                             else "IGNITE_PD_XFER", *words)
        check(r.returncode == 2 and ok and not r.stdout,
              f"IGNITE_PD_XFER={xfer}: exit {r.returncode}, {lines}")
    # 2:2 (the transfer streams' orders could cross: gpu.md's review), refused before the
    # device is asked (ignite's CPU ranks: mpirun's start and the model's load alone)
    r = subprocess.run(cmd[:-1] + ["4", IGNITE, "batch", "--device", "cpu", "-t", "1", "-f", f,
                                    "-m", path, "--pd", "2:2"], capture_output=True,
                       timeout=LIMIT, env=env)
    ok, lines = one_line(r.stderr, "IGNITE_PD_XFER=nccl", "several prefill and several decode")
    check(r.returncode == 2 and ok and not r.stdout,
          f"IGNITE_PD_XFER=nccl at --pd 2:2: exit {r.returncode}, {lines}")


def states_and_windows(cmd, emu, env, tmp, vocab, random_gguf):
    """nccl()'s other kinds of layer, against one process's texts, every
    request's pd.path "nccl": the tiny qwen35 (3 gated DeltaNet layers, each
    state sent once the prompt's last chunk of -b 16 is in it, into the
    decode rank's slot held for the request) under IGNITE_PD_XFER=nccl, and
    gpt-oss's tiny file (layer 0 a window of 32 under the window rule: the
    decode rank receives only the window blocks a row after the prompt
    sees, not block 0 of a prompt of 102 tokens; a second prompt's first
    block shared on the prefill rank, its window twin with it) under auto;
    and the latter refused at --pd 2:1 under nccl (one line, exit 2). (7 + 8 +
    2 s CPU.)"""
    def request(rid, prompt, n, **kw):
        return json.dumps(dict(dict(id=rid, prompt=prompt, n_predict=n, temperature=0), **kw)) \
            + "\n"
    seeded = request(1, "Tell me about the river and 7:", 3, temperature=0.8, seed=9)
    cases = (("qwen35", "nccl", "16", [request("long", LONG[:160] + "What sold best?", 4),
                                       seeded]),
             ("gpt-oss", "auto", "32", [request("long", LONG[:400] + "What sold best?", 4),
                                        seeded,
                                        request("long2", LONG[:300] + "Who built it?", 4)]))
    for arch, xfer, chunk, lines in cases:
        f = os.path.join(tmp, f"{arch}.jsonl")
        with open(f, "w") as out:
            out.write("".join(lines))
        path = os.path.join(tmp, f"{arch}-spm.gguf")  # (their own vocabularies: seconds more)
        random_gguf.write(path, "tiny", "Q8_0", seed=5, arch=arch, vocab_from=vocab)
        args = ["batch", "--device", "cuda", "-t", "1", "-P", "2", "-b", chunk, "-c", "512",
                "--ordered", "-f", f, "-m", path]
        one = subprocess.run([emu] + args, capture_output=True, timeout=LIMIT, env=env)
        _, want = results(one.stdout)
        check(one.returncode == 0 and len(want) == len(lines) and all(w[1] for w in want),
              f"{arch}, one process: exit {one.returncode}: {one.stderr[-300:]}")
        got = subprocess.run(cmd + [emu] + args + ["--pd", "1:1"], capture_output=True,
                             timeout=LIMIT, env=dict(env, IGNITE_PD_XFER=xfer))
        rows, res = results(got.stdout)
        check(got.returncode == 0 and res == want, f"{arch} IGNITE_PD_XFER={xfer} --pd 1:1: "
              f"exit {got.returncode}, {res} against {want}: {got.stderr[-400:]}")
        check(rows and all(o.get("pd", {}).get("path") == "nccl" and o["pd"]["kv_bytes"] > 0
                           for o in rows), f"{arch}: pd {[o.get('pd') for o in rows]}")
    # two prefill ranks could promise a decode rank's slot twice (each spends its whole
    # room), which the window blocks need at a head: nccl refused, one line, exit 2
    r = subprocess.run(cmd[:-1] + ["3", emu] + args + ["--pd", "2:1"], capture_output=True,
                       timeout=LIMIT, env=dict(env, IGNITE_PD_XFER="nccl"))
    ok, lines = one_line(r.stderr, "IGNITE_PD_XFER=nccl", "more than one prefill rank")
    check(r.returncode == 2 and ok and not r.stdout,
          f"{arch} IGNITE_PD_XFER=nccl --pd 2:1: exit {r.returncode}, {lines}")


def main():
    mpirun = mpirun_or_skip()
    if not os.path.exists(model_path()):
        print(f"SKIP: {model_path()} absent (scripts/fetch-model.sh)", file=sys.stderr)
        return 77
    tmp = scratch()
    for name, fn in (("equal", lambda: equal_runs(mpirun, tmp)),
                     ("errors", lambda: errors(mpirun, tmp)),
                     ("hybrid", lambda: hybrid(mpirun, tmp)),
                     ("bench", lambda: bench(mpirun)),
                     ("failures", lambda: failures(mpirun, tmp)),
                     ("nccl", lambda: len(sys.argv) > 2 and nccl(mpirun, tmp, *sys.argv[1:3]))):
        t = time.time()
        fn()
        print(f"{name}: {time.time() - t:.1f} s", file=sys.stderr)
    return summary("test_pd_cli")


if __name__ == "__main__":
    sys.exit(main())
