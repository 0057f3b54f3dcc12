"""tests/tp/test_tp_cli.py: `ignite` under mpirun against one process
(--exact, greedy), 2 and 3 ranks: `run`'s text byte for byte on SmolLM2 (8
tokens at 2 and 3 ranks) and Gemma 3 270M (at 3); a batch of 8 requests
(SmolLM2, -P 6) request by request; saved
caches interchangeable between TP sizes (saved at 2 ranks, loaded at 1 and
3; saved by one process, loaded at 2), each continuation's text equal;
`info --tp N`; Qwen3.5's gated DeltaNet (bench/random_gguf.py's qwen35 tiny, Q8_0,
with SmolLM2's vocabulary): run's text at 1 and 3 ranks, caches with the
DeltaNet state saved at 3 loaded at 1 and saved at 1 loaded at 2, a batch of
8 at 1 and 3, `info --tp 3 --json`'s DeltaNet heads and state bytes; a qwen3moe's
experts a rank with their CUDA bytes; and the failures: --tp without mpirun (how to launch, exit
2), --tp against the ranks started (exit 2), a bad file on rank 1 alone
(IGNITE_TP_MODEL: one line naming rank 1, exit 3), another model on rank 1
(exit 4), rank 1 out of memory (ulimit -v; exit 5), a bad file on every
rank (exit 3), a rank killed mid-run (the job ends, non-zero, no hang), a
rank stopped mid-run (the watchdog, IGNITE_TP_WATCHDOG=5: exit 7).
Greedy steps that are near ties (one process's top two logits within 1e-4)
are test_tp_logits.py's: none occur on these prompts, so the texts must be
equal. Under the sanitizers (the memory of the code paths, not the orchestration
again): run's text on SmolLM2 at 2 ranks, a batch of 3 at 2, a cache saved at 2 ranks
loaded at 1 and at 2, the failures that end in ignite's own checks (the killed and stopped ranks, which
test mpirun and the watchdog, run in the normal build only).
Usage: test_tp_cli.py   (33 CPU-s, 335 s wall at load average 15-45 on 2 cores; was 58
 CPU-s with 16-token texts, a batch of 16 and 10-token continuations)
"""
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from igtest import check as _check, gemma3_path, model_path, sanitized, summary  # noqa: E402
from tplib import mpi, mpirun_or_skip, sanitizer_env, scratch  # noqa: E402

IGNITE = os.environ.get("IGNITE_BIN", "ignite")
# seconds a run may take before the test calls it a hang (the sanitizers' build
# runs a batch on one process in minutes on a loaded machine)
LIMIT = 900 if sanitized() else 120


def check(cond, what):
    _check(cond, what)
    return cond


def run(mpirun, n, args, **kw):
    argv = [IGNITE] + args
    if n == 1:
        return subprocess.run(argv, capture_output=True, timeout=LIMIT, **kw)
    return mpi(mpirun, n, argv, timeout=LIMIT, **kw)


def gen(model, prompt, n_predict, *extra):
    return ["run", "-m", model, "--exact", "--temp", "0", "-t", "1", "-p", prompt,
            "-n", str(n_predict), *extra]


def texts(mpirun):
    real = ((model_path(), "SmolLM2"), (gemma3_path(), "Gemma 3 270M"))
    # Gemma 3 at 3 ranks alone (its one KV head replicated on each): test_tp_logits
    # holds its logits at 2 and 3; a rank's greedy step waits on the all-reduces'
    # round trips, so a few tokens
    ranks = {"SmolLM2": (2, 3), "Gemma 3 270M": (3,)}
    for path, name in real[:1] if sanitized() else real:  # (the sanitizers: ~30x slower)
        if not os.path.exists(path):
            print(f"{name}: {path} absent, not run", file=sys.stderr)
            continue
        args = gen(path, "The three largest cities of Europe are", 6 if sanitized() else 8)
        one = run(mpirun, 1, args)
        check(one.returncode == 0 and one.stdout, f"{name}: one process: {one.stderr[-300:]}")
        for n in (2,) if sanitized() else ranks[name]:
            tp = run(mpirun, n, args)
            check(tp.returncode == 0, f"{name}, {n} ranks: exit {tp.returncode}: "
                  f"{tp.stderr[-300:]}")
            check(tp.stdout == one.stdout, f"{name}, {n} ranks: text {tp.stdout!r} != one "
                  f"process's {one.stdout!r}")


def batch(mpirun, tmp):
    path = model_path()
    if not os.path.exists(path):
        return
    words = ["red", "seven", "river", "Paris", "code", "music", "winter", "apple"]
    n_reqs = 3 if sanitized() else 8  # (8: more than -P 6, so slots are taken again)
    reqs = [{"id": i, "prompt": f"Write about {words[i % 8]} number {i}:",
             "n_predict": 3 + i % 5, "temperature": 0} for i in range(n_reqs)]
    f = os.path.join(tmp, "reqs.jsonl")
    with open(f, "w") as out:
        out.write("".join(json.dumps(r) + "\n" for r in reqs))
    args = ["batch", "-m", path, "--exact", "-t", "1", "-P", "6", "-b", "32", "--ordered",
            "-f", f]

    def results(r):
        rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
        return [(o["id"], o["text"], o["stop"], o["tokens"]) for o in rows]

    one = run(mpirun, 1, args)
    check(one.returncode == 0, f"batch, one process: {one.stderr[-300:]}")
    want = results(one)
    check(len(want) == n_reqs, f"batch: {len(want)} results of {n_reqs}")
    for n in (2,) if sanitized() else (2, 3):
        tp = run(mpirun, n, args)
        check(tp.returncode == 0, f"batch, {n} ranks: exit {tp.returncode}: {tp.stderr[-300:]}")
        got = results(tp)
        diff = [g for g, w in zip(got, want) if g != w]
        check(len(got) == n_reqs and not diff, f"batch, {n} ranks: {len(diff)} requests differ, "
              f"first {diff[:1]}")


def caches(mpirun, tmp):
    path = model_path()
    if not os.path.exists(path):
        return
    saved = {}
    if sanitized():  # (the memory of saving at 2 ranks, loading at 1 and at 2)
        saved[2] = os.path.join(tmp, "saved2.kv")
        r = run(mpirun, 2, gen(path, "The sky over the sea is", 8, "--save-kv", saved[2]))
        check(r.returncode == 0, f"--save-kv at 2 ranks: {r.stderr[-300:]}")
        cont = gen(path, " and the grass", 10, "--load-kv", saved[2])
        one, two = run(mpirun, 1, cont), run(mpirun, 2, cont)
        check(one.returncode == 0 and two.returncode == 0 and one.stdout == two.stdout,
              f"a cache saved at 2 ranks, loaded at 1 and 2: {one.stdout!r} vs {two.stdout!r}: "
              f"{two.stderr[-300:]}")
        return
    for n in (1, 2):
        saved[n] = os.path.join(tmp, f"saved{n}.kv")
        r = run(mpirun, n, gen(path, "The sky over the sea is", 8, "--save-kv", saved[n]))
        check(r.returncode == 0, f"--save-kv at {n} ranks: {r.stderr[-300:]}")
    cont = gen(path, " and the grass", 6, "--load-kv")

    def loaded(n, f):
        r = run(mpirun, n, cont[:-1] + ["--load-kv", f])
        check(r.returncode == 0, f"--load-kv {os.path.basename(f)} at {n} ranks: "
              f"{r.stderr[-300:]}")
        return r.stdout

    want = loaded(1, saved[1])
    check(bool(want), "--load-kv: no text")
    for n, f in ((1, saved[2]), (3, saved[2]), (2, saved[1])):
        got = loaded(n, f)
        check(got == want, f"cache saved at {2 if f == saved[2] else 1} rank(s), loaded at "
              f"{n}: {got!r} != {want!r}")


def hybrid(mpirun, tmp):
    """Qwen3.5's DeltaNet layers split by heads, on a tiny random qwen35: run's
    text at 1 and 3 ranks, each saving its cache (at 3 the replicated key
    heads' state sent once), the one of 3 loaded at 1 and the one of 1 at 2,
    each continuation's text equal; a batch of 8 at 1 and 3. The runs side by
    side (a launch mostly waits on mpirun's start)."""
    if not os.path.exists(model_path()):
        return
    from bench_gguf import random_gguf
    path = os.path.join(tmp, "qwen35v.gguf")
    random_gguf.write(path, "tiny", "Q8_0", 3, "qwen35", vocab_from=model_path())
    many = 2 if sanitized() else 3
    saved = {n: os.path.join(tmp, f"q35_{n}.kv") for n in (1, many)}
    words = ["red", "seven", "river", "Paris", "code", "music", "winter", "apple"]
    f = os.path.join(tmp, "q35reqs.jsonl")
    with open(f, "w") as out:
        out.write("".join(json.dumps({"id": i, "prompt": f"Write about {w} number {i}:",
                                      "n_predict": 3 + i % 5, "temperature": 0}) + "\n"
                          for i, w in enumerate(words)))
    bargs = ["batch", "-m", path, "--exact", "-t", "1", "-P", "4", "-b", "32", "--ordered",
             "-f", f]
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = {n: pool.submit(run, mpirun, n, gen(path, "The sky over the sea is", 12,
                                                    "--save-kv", saved[n])) for n in saved}
        batches = {n: pool.submit(run, mpirun, n, bargs) for n in (1, many)}
        for n, t in texts.items():
            r = t.result()
            check(r.returncode == 0 and r.stdout, f"qwen35, {n} ranks: exit {r.returncode}: "
                  f"{r.stderr[-300:]}")
        one, tp = texts[1].result().stdout, texts[many].result().stdout
        check(tp == one, f"qwen35, {many} ranks: text {tp!r} != one process's {one!r}")
        cont = gen(path, " and the grass", 10)
        loads = {(1, saved[many]): None, (2, saved[1]): None}
        for n, f in loads:
            loads[(n, f)] = pool.submit(run, mpirun, n, cont + ["--load-kv", f])
        got = {}
        for n, b in batches.items():
            r = b.result()
            check(r.returncode == 0, f"qwen35 batch, {n} ranks: {r.stderr[-300:]}")
            got[n] = [(o["id"], o["text"], o["stop"], o["tokens"])
                      for o in map(json.loads, r.stdout.decode().splitlines())]
        check(len(got[1]) == 8 and got[many] == got[1], f"qwen35 batch, {many} ranks: "
              f"{got[many][:2]} != one process's {got[1][:2]}")
        (a, b) = [x.result() for x in loads.values()]
        check(a.returncode == 0 and a.stdout and b.stdout == a.stdout,
              f"qwen35: the cache of {many} ranks loaded at 1: {a.stdout!r}, the cache of 1 "
              f"loaded at 2: {b.stdout!r}: {a.stderr[-300:]} {b.stderr[-300:]}")
    # info: every value head on one rank, each rank's state its heads' (the key heads'
    # channels replicated), less than the whole's
    r = subprocess.run([IGNITE, "info", "-m", path, "--tp", "3", "--json"],
                       capture_output=True, env=sanitizer_env(), text=True, timeout=LIMIT)
    d = json.loads(r.stdout) if r.returncode == 0 else {}
    whole = sum(g["bytes_per_sequence"] for g in d.get("kv_groups", []))
    parts = d.get("tensor_parallel", {}).get("parts", [])
    heads = [(p.get("deltanet_key_heads"), p.get("deltanet_value_heads_per_key_head"))
             for p in parts]
    state = [p.get("state_bytes_per_sequence", 0) for p in parts]
    check(heads == [([0, 0], 1), ([0, 0], 1), ([1, 1], 2)] and all(0 < b < whole for b in state)
          and whole < sum(state) < 1.1 * whole, f"qwen35 info --tp 3 --json: heads {heads}, "
          f"state {state} of {whole}: {r.stderr[-300:]}")


def one_line(stderr, *words):
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.startswith("ignite:")]
    return len(lines) == 1 and all(w in lines[0] for w in words), lines


def failures(mpirun, tmp):
    path = model_path()
    r = subprocess.run([IGNITE, "run", "-m", path, "--tp", "2", "-p", "x"], capture_output=True,
                       env=sanitizer_env(),
                       timeout=LIMIT)
    ok, lines = one_line(r.stderr, "mpirun -np 2")
    check(r.returncode == 2 and ok, f"--tp 2 without mpirun: exit {r.returncode}, {lines}")
    r = run(mpirun, 2, ["run", "-m", path, "--tp", "3", "-p", "x", "-n", "1"])
    ok, lines = one_line(r.stderr, "--tp 3", "2 ranks")
    check(r.returncode == 2 and ok, f"--tp 3 on 2 ranks: exit {r.returncode}, {lines}")
    # MPMD: rank 0 as usual, rank 1 told to read another file
    base = [mpirun, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    args = [IGNITE] + gen(path, "Hello", 4)
    for other, status, words in ((os.path.join(tmp, "absent.gguf"), 3, ["rank 1 of 2"]),
                                 (gemma3_path(), 4, ["rank 1 of 2", "not rank 0's model"])):
        if not os.path.exists(other) and status == 4:
            continue
        t = time.time()
        r = subprocess.run(base + ["-np", "1"] + args + [":", "-np", "1", "-x",
                           f"IGNITE_TP_MODEL={other}"] + args, capture_output=True,
                           env=sanitizer_env(), timeout=LIMIT)
        ok, lines = one_line(r.stderr, *words)
        check(r.returncode == status and ok and not r.stdout,
              f"{os.path.basename(other)} on rank 1: exit {r.returncode} (want {status}), "
              f"{lines}, stdout {r.stdout[:80]!r}")
        print(f"{os.path.basename(other)} on rank 1: exit {r.returncode} in "
              f"{time.time() - t:.1f} s: {lines}", file=sys.stderr)
    # a build linking CUDA's libraries cannot even start in 400 MB of address space
    # (cuBLAS maps more): the case runs in builds without CUDA, CI's among them
    starts = subprocess.run(["sh", "-c", f"ulimit -v 400000; exec {IGNITE} --version"],
                            capture_output=True).returncode == 0
    if not starts:
        print("rank 1 out of memory: not run (this ignite does not start in 400 MB of "
              "address space: its CUDA libraries)", file=sys.stderr)
    if not sanitized() and starts:  # (ASan's shadow memory does not live under ulimit -v)
        # rank 1 out of memory: 400 MB of address space holds MPI and the model, not the
        # buffers of 512-row steps
        t = time.time()
        r = subprocess.run(base + ["-np", "1"] + args + ["-c", "4096", ":", "-np", "1", "sh",
                           "-c", f"ulimit -v 400000; exec {IGNITE} run"], capture_output=True,
                           env=sanitizer_env(), timeout=LIMIT)
        ok, lines = one_line(r.stderr, "rank 1 of 2", "out of memory")
        check(r.returncode == 5 and ok, f"rank 1 out of memory: exit {r.returncode}, {lines}")
        print(f"rank 1 out of memory: exit {r.returncode} in {time.time() - t:.1f} s: {lines}",
              file=sys.stderr)
    r = run(mpirun, 2, gen(os.path.join(tmp, "absent.gguf"), "Hello", 4))
    check(r.returncode == 3, f"a bad file on every rank: exit {r.returncode}")
    if sanitized():
        print("killed and stopped ranks: run in the normal build only", file=sys.stderr)
        return
    # rank 1 killed (SIGKILL) a second into a long generation
    t = time.time()
    cmd = " ".join(f"'{a}'" for a in gen(path, "Once upon a time", 4000))
    killer = f"(sleep 1; kill -9 $$) & exec {IGNITE} {cmd}"
    try:
        r = subprocess.run(base + ["-np", "1", IGNITE] + gen(path, "Once upon a time", 4000) +
                           [":", "-np", "1", "sh", "-c", killer], capture_output=True,
                           env=sanitizer_env(), timeout=LIMIT)
        check(r.returncode != 0, "a killed rank: the job exited 0")
        print(f"rank 1 killed: the job ended with exit {r.returncode} in {time.time() - t:.1f} s",
              file=sys.stderr)
    except subprocess.TimeoutExpired:
        check(False, f"a killed rank: the job still ran after {LIMIT} s (a hang)")
    # rank 1 stopped (SIGSTOP: alive, silent): the watchdog ends the job, exit 7
    t = time.time()
    stopper = f"(sleep 1; kill -STOP $$) & exec {IGNITE} {cmd}"
    try:
        r = subprocess.run(base + ["-np", "1", IGNITE] + gen(path, "Once upon a time", 4000) +
                           [":", "-np", "1", "sh", "-c", stopper], capture_output=True,
                           env=dict(sanitizer_env(), IGNITE_TP_WATCHDOG="5"), timeout=LIMIT)
        check(r.returncode == 7 and b"no answer from the other ranks" in r.stderr,
              f"a stopped rank: exit {r.returncode}, {r.stderr[-300:]!r}")
        print(f"rank 1 stopped: the job ended with exit {r.returncode} in "
              f"{time.time() - t:.1f} s", file=sys.stderr)
    except subprocess.TimeoutExpired:
        check(False, f"a stopped rank: the job still ran after {LIMIT} s (a hang)")


def info():
    r = subprocess.run([IGNITE, "info", "-m", model_path(), "--tp", "3"], capture_output=True,
                       env=sanitizer_env(),
                       text=True, timeout=LIMIT)
    ranks = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("rank ")]
    check(r.returncode == 0 and len(ranks) == 3, f"info --tp 3: {r.stdout[-400:]}")
    check(all("query heads" in ln and "MiB" in ln for ln in ranks), f"info --tp 3: {ranks}")
    # --json: the same parts; SmolLM2's 9 query heads over 3 ranks, 3 each, one KV head each,
    # every vocabulary row once
    r = subprocess.run([IGNITE, "info", "-m", model_path(), "--tp", "3", "--json"],
                       capture_output=True, env=sanitizer_env(), text=True, timeout=LIMIT)
    tp = json.loads(r.stdout).get("tensor_parallel", {}) if r.returncode == 0 else {}
    parts = tp.get("parts", [])
    check(len(parts) == 3 and [p["query_heads"] for p in parts] == [[0, 2], [3, 5], [6, 8]]
          and [p["kv_heads"] for p in parts] == [[0, 0], [1, 1], [2, 2]],
          f"info --tp 3 --json: {r.returncode} {str(tp)[:400]}")
    rows = [p["vocab_rows"] for p in parts]
    check(rows and rows[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(rows, rows[1:]))
          and rows[-1][1] + 1 == json.loads(r.stdout)["n_vocab"], f"vocab rows {rows}")
    check(sum(p["weight_bytes"] for p in parts) < 1.5 * tp.get("weight_bytes_one_process", 0),
          f"info --tp 3 --json: weight bytes {[p['weight_bytes'] for p in parts]}")
    # each rank's CUDA plan: a part of the whole's, the replicated tables (the tied
    # embedding, norms) on every rank
    whole = (json.loads(r.stdout).get("cuda_weight_bytes") or {}).get("native", 0) \
        if r.returncode == 0 else 0
    cuda = [(p.get("cuda_weight_bytes") or {}).get("native", 0) for p in parts]
    check(whole > 0 and all(0 < c < whole for c in cuda) and sum(cuda) > whole,
          f"info --tp 3 --json: CUDA weight bytes {cuda}, one process {whole}")


def unsplit(tmp):
    """A dense FFN beside the experts splits by its columns (qwen35moe's shared
    expert of 512, Gemma 4's MLP of 512, F16: `info --tp 3 --json`'s ffn_columns
    beside the experts, in units of 8; test_tp_logits.py runs them); widths with
    fewer units than ranks (issue 48, refused before): a shared expert of 64 in
    Q8_0 and a llama's Q4_K FFN of 512, 2 blocks each, at 3 ranks 1, 1 and none
    (ffn_columns [], ffn_width 0, CUDA bytes still; the text's "none"), the
    llama's 16 heads of 64 in units of 4 (wo's Q4_K blocks): 8, 4, 4; a DeltaNet
    output that does not split on its blocks is refused in one line, exit 2."""
    from bench_gguf import random_gguf
    for arch, shape, experts in (("qwen35moe", "tiny", [[0, 5], [6, 10], [11, 15]]),
                                 ("gemma4", "moe-tiny", [[0, 2], [3, 5], [6, 7]])):
        path = os.path.join(tmp, f"{arch}.gguf")
        random_gguf.write(path, shape, "F16", 1, arch)
        r = subprocess.run([IGNITE, "info", "-m", path, "--tp", "3", "--json"],
                           capture_output=True, env=sanitizer_env(), text=True, timeout=LIMIT)
        parts = json.loads(r.stdout).get("tensor_parallel", {}).get("parts", []) \
            if r.returncode == 0 else []
        got = [(p.get("experts"), p.get("ffn_columns")) for p in parts]
        want = list(zip(experts, [[0, 175], [176, 343], [344, 511]]))
        check(got == want, f"{arch} info --tp 3 --json: experts and the columns beside them "
              f"{got}, expected {want}: exit {r.returncode}: {r.stderr[-300:]}")
    random_gguf.qwen35.MOE_SHAPES["tpw"] = dict(random_gguf.qwen35.MOE_SHAPES["tiny"],
                                                ff_shexp=64)
    shexp = os.path.join(tmp, "qwen35moe_shexp64.gguf")
    random_gguf.write(shexp, "tpw", "Q8_0", 1, "qwen35moe")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
    from archgen import QT, write_model
    llama = os.path.join(tmp, "llama_q4k_ff512.gguf")
    write_model(llama, "llama", seed=1, n_head=16, n_head_kv=16, head_dim=64, n_embd=256,
                n_ff=512, mat=QT.Q4_K)
    for path, heads, cols in ((shexp, None, [[0, 31], [32, 63], []]),
                              (llama, [[0, 7], [8, 11], [12, 15]], [[0, 255], [256, 511], []])):
        name = os.path.basename(path)
        r = subprocess.run([IGNITE, "info", "-m", path, "--tp", "3", "--json"],
                           capture_output=True, env=sanitizer_env(), text=True, timeout=LIMIT)
        parts = json.loads(r.stdout).get("tensor_parallel", {}).get("parts", []) \
            if r.returncode == 0 else []
        got = [p.get("ffn_columns") for p in parts]
        widths = [p.get("ffn_width") for p in parts]
        check(got == cols and widths == [c and c[1] - c[0] + 1 or 0 for c in cols]
              and all(p.get("cuda_weight_bytes") for p in parts),
              f"{name} info --tp 3 --json: columns {got}, widths {widths}, expected {cols}: "
              f"exit {r.returncode}: {r.stderr[-300:]}")
        check(heads is None or [p["query_heads"] for p in parts] == heads,
              f"{name} info --tp 3 --json: query heads {[p.get('query_heads') for p in parts]}"
              f", expected {heads}")
        t = subprocess.run([IGNITE, "info", "-m", path, "--tp", "3"], capture_output=True,
                           env=sanitizer_env(), text=True, timeout=LIMIT)
        ranks = [ln for ln in t.stdout.splitlines() if "rank " in ln or "beside" in ln]
        check(t.returncode == 0 and "columns none" in t.stdout
              and sum("none" in ln for ln in ranks) == 1,
              f"{name} info --tp 3: exit {t.returncode}: {t.stdout[-600:]}{t.stderr[-300:]}")
    # a DeltaNet whose value heads' ssm_out columns are not whole blocks at the ranks'
    # split: qwen35 tiny's heads of 64 in Q4_K's blocks of 256 (2 key heads: no units of 4)
    path = os.path.join(tmp, "qwen35q4k.gguf")
    random_gguf.write(path, "tiny", "Q4_K_M", 1, "qwen35")
    r = subprocess.run([IGNITE, "info", "-m", path, "--tp", "2"], capture_output=True,
                       env=sanitizer_env(), text=True, timeout=LIMIT)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "DeltaNet output (Q4_K, blocks of 256) "
          "cannot split" in lines[0] and not r.stdout,
          f"qwen35 Q4_K_M info --tp 2: exit {r.returncode}: {r.stderr[-300:]}")


def experts_info(tmp):
    """info --tp N --json on random_gguf.py's qwen3moe tiny file (Q8_0, 8
    experts): each rank's experts and their CUDA bytes (cuda_expert_bytes,
    backend/gpu_plan.c over its part) against the file's shape: gate, up and
    down of n_embd x an expert's width a layer and expert, 2 bytes a weight
    (f16) or 34 a block of 32 (Q8_0)."""
    from bench_gguf import random_gguf
    sh = random_gguf.MOE_SHAPES["tiny"]
    path = os.path.join(tmp, "qwen3moe.gguf")
    random_gguf.write(path, "tiny", "Q8_0", 1, "qwen3moe")
    per = sh["layers"] * 3 * sh["embd"] * sh["ff_exp"]  # weights of one expert
    for n, ranges in ((2, [[0, 3], [4, 7]]), (3, [[0, 2], [3, 5], [6, 7]])):
        r = subprocess.run([IGNITE, "info", "-m", path, "--tp", str(n), "--json"],
                           capture_output=True, env=sanitizer_env(), text=True, timeout=LIMIT)
        parts = json.loads(r.stdout).get("tensor_parallel", {}).get("parts", []) \
            if r.returncode == 0 else []
        got = [(p.get("experts"), p.get("cuda_expert_bytes")) for p in parts]
        want = [(e, {"native": (e[1] - e[0] + 1) * per // 32 * 34,
                     "f16": (e[1] - e[0] + 1) * per * 2}) for e in ranges]
        check(got == want, f"qwen3moe info --tp {n} --json: experts and their CUDA bytes "
              f"{got}, expected {want}")


def main():
    mpirun = mpirun_or_skip()
    tmp = scratch()
    for name, fn in (("texts", lambda: texts(mpirun)), ("batch", lambda: batch(mpirun, tmp)),
                     ("caches", lambda: caches(mpirun, tmp)),
                     ("hybrid", lambda: hybrid(mpirun, tmp)),
                     ("failures", lambda: failures(mpirun, tmp)), ("info", info),
                     ("unsplit", lambda: unsplit(tmp)), ("experts", lambda: experts_info(tmp))):
        t = time.time()
        fn()
        print(f"{name}: {time.time() - t:.1f} s", file=sys.stderr)
    return summary("test_tp_cli")


if __name__ == "__main__":
    sys.exit(main())
