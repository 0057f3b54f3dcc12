"""tests/tp/test_cli_emu.py: the CLI over the emulated CUDA backend
(`ignite_emu`, tests/emu/ignite_emu_main.c) against `ignite --device cpu`, on
bench/random_gguf.py's Llama-tiny (2 layers of 256, F16) with llama.cpp's
llama-spm vocabulary (or SmolLM2's where that is absent), written into a
scratch folder: `--version` says "cuda: emulated" (ignite's does not);
`batch --device cuda` on 4 greedy requests (two with a repeat penalty, whose
tokens never repeat): each request's text, stop and token counts the CPU's;
`run --json --device cuda` the CPU's text on cuda:0; `bench --requests` on
cuda:0 named "emulator". Under mpirun (skipped where it or this build's MPI
is absent): `batch --pd 1:1 --device cuda` one process's requests byte for
byte on the same seed's Q4_0 file, a greedy one and 3 seeded sampled ones,
each prompt of at most 16 tokens, all 4 in one step (a verify step of 8 rows
a sequence through the int8 GEMVs in one process, and on the prefill rank:
issue 49; with the prefill path there, each seeded text differs), each
cache on the host path (pd.path "host") from prefill rank 0 to decode rank 1,
and again on the NCCL path (IGNITE_PD_XFER=nccl through the stand-in); and
`--tp 2` over 2 emulated devices (IGNITE_EMU_DEVICES=2, the all-reduce
through the NCCL stand-in, IGNITE_TP_REDUCE=nccl) the CPU's greedy requests.
No sampled request against the CPU: the device's logits are not the CPU's
bits, and a seeded sample follows a few ulps where greedy does not.

Usage: test_cli_emu.py IGNITE_EMU [NCCL_STANDIN.so]   (IGNITE_BIN names ignite)
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from igtest import check, llama_vocab, model_path, summary  # noqa: E402
from tplib import sanitizer_env, scratch  # noqa: E402

IGNITE = os.environ.get("IGNITE_BIN", "ignite")
LIMIT = 300


def tiny_llamas(tmp):
    """The F16 and the Q4_0 file's paths, or None (said on stderr) without a
    vocabulary. F16 against the CPU: bench/random_gguf.py's Q4_0 Llama-tiny
    of the same seed decodes into near ties (the CPU's and the device's
    greedy tokens part on 3 of 16 8-token requests), its F16 one into text
    of the prompt's with room. Q4_0 for --pd: one process's decode kernels
    (the int8 GEMV) are not the prefill path's bits there."""
    vocab = llama_vocab("llama-spm")
    if not vocab and os.path.exists(model_path()):
        vocab = model_path()
    if not vocab:
        print("SKIP: no vocabulary for the tiny llama (scripts/fetch-model.sh llama-src, "
              "or the default model)", file=sys.stderr)
        return None
    from bench_gguf import random_gguf
    paths = [os.path.join(tmp, f"llama_tiny_{t.lower()}.gguf") for t in ("F16", "Q4_0")]
    for path, t in zip(paths, ("F16", "Q4_0")):
        random_gguf.write(path, "Llama-tiny", t, seed=2, vocab_from=vocab)
    return paths


def write_requests(tmp, name, reqs):
    f = os.path.join(tmp, name)
    with open(f, "w") as out:
        out.write("".join(json.dumps(r) + "\n" for r in reqs))
    return f, len(reqs)


def greedy(n_predict):
    """Greedy requests, two with a repeat penalty (their tokens all apart)."""
    prompts = ["The river town", "Paris is a city of", "Once upon a time",
               "Who built the bridge?"]
    return [{"id": i, "prompt": p, "n_predict": n_predict, "temperature": 0,
             "repeat_penalty": 1.3 if i % 2 else 1.0} for i, p in enumerate(prompts)]


def requests(tmp):
    return write_requests(tmp, "reqs.jsonl", greedy(6))


def pd_requests(tmp):
    """The first greedy request and 3 seeded sampled ones, 4 tokens each,
    every prompt of at most 16 tokens: with -P 4, one step of 4 sequences of
    at most 16 rows, a verify step (4 x 16 rows fit the 64 of its logits)."""
    prompts = ["Tell me about seven", "A cold morning", "The market square"]
    seeded = [{"id": 4 + i, "prompt": p, "n_predict": 4, "temperature": 1.0, "seed": 11 + i}
              for i, p in enumerate(prompts)]
    return write_requests(tmp, "pd.jsonl", greedy(4)[:1] + seeded)


def results(r):
    rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
    return rows, [(o["id"], o.get("text"), o.get("stop"), o.get("tokens")) for o in rows]


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, timeout=LIMIT, env=sanitizer_env(), **kw)


def mpi(mpirun, n, argv, **env):
    """argv on n ranks, leaks not checked (ignite_emu is always under ASan;
    Open MPI's own allocations need tests/tp/lsan.supp and the slow unwinder:
    the one-process runs check the CLI's)."""
    cmd = [mpirun, "--oversubscribe", "-np", str(n)] + list(argv)
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return subprocess.run(cmd, capture_output=True, timeout=LIMIT,
                          env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0", **env))


def timed(what, fn):
    t = time.time()
    fn()
    print(f"{what}: {time.time() - t:.1f} s", file=sys.stderr)


def version(emu):
    a, b = run([emu, "--version"]), run([IGNITE, "--version"])
    check(a.returncode == 0 and b"cuda: emulated" in a.stdout and b"emulated" not in b.stdout,
          f"--version: ignite_emu {a.stdout!r}, ignite {b.stdout!r}")


def one_process(emu, path, f, n):
    """batch and run --json on the emulated device against the CPU; bench
    --requests naming the emulator. The CPU's requests, or []."""
    args = ["batch", "-m", path, "-t", "1", "-P", "4", "--ordered", "-f", f]
    cpu = run([IGNITE] + args + ["--device", "cpu"])
    got = run([emu] + args + ["--device", "cuda"])
    _, want = results(cpu)
    _, res = results(got)
    check(cpu.returncode == 0 and len(want) == n and all(w[1] for w in want),
          f"ignite batch --device cpu: exit {cpu.returncode}: {cpu.stderr[-300:]}")
    check(got.returncode == 0 and res == want,
          f"ignite_emu batch --device cuda: exit {got.returncode}, {res} against the CPU's "
          f"{want}: {got.stderr[-300:]}")
    argv = ["run", "-m", path, "-t", "1", "-p", "The river town", "-n", "6", "--temp", "0",
            "--json"]
    cpu, got = run([IGNITE] + argv + ["--device", "cpu"]), run([emu] + argv + ["--device", "cuda"])
    try:
        a, b = json.loads(cpu.stdout), json.loads(got.stdout)
    except ValueError:
        a, b = {}, {}
    check(a.get("text") and b.get("text") == a.get("text") and b.get("device") == "cuda:0",
          f"ignite_emu run --json: {b.get('text')!r} on {b.get('device')} against the CPU's "
          f"{a.get('text')!r}: {got.stderr[-300:]}")
    r = run([emu, "bench", "-m", path, "-t", "1", "--device", "cuda", "--requests", "2",
             "--input-len", "8", "--output-len", "3", "-s", "1", "-o", "json"])
    try:
        d = json.loads(r.stdout)
        d = d[0] if isinstance(d, list) else d
    except ValueError:
        d = {}
    check(r.returncode == 0 and d.get("completed") == 2 and d.get("device") == "cuda:0" and
          d.get("device_name") == "emulator",
          f"ignite_emu bench --requests: exit {r.returncode}, completed {d.get('completed')} "
          f"on {d.get('device')} ({d.get('device_name')!r}): {r.stderr[-300:]}")
    return want if res == want else []


def pd_args(path, f):
    return ["batch", "-m", path, "-t", "1", "-P", "4", "--ordered", "-f", f, "--device", "cuda"]


def pd_want(emu, path, f, n):
    """One process's pd_requests on the emulated device (their prompts of at
    most 16 tokens: one verify step), or []."""
    got = run([emu] + pd_args(path, f))
    rows, want = results(got)
    check(got.returncode == 0 and len(want) == n and all(w[1] for w in want) and
          all(o["tokens"]["prompt"] <= 16 for o in rows),
          f"ignite_emu batch, the --pd requests: exit {got.returncode}, "
          f"{[(o['id'], o['tokens']) for o in rows]}: {got.stderr[-300:]}")
    return want if got.returncode == 0 and len(want) == n else []


def pd(mpirun, emu, path, f, want, way, **env):
    """--pd 1:1 on the emulated device: the requests one process's byte for
    byte, seeded ones too, each cache on path `way` ("host", or "nccl" with
    env naming the stand-in) from rank 0 to rank 1."""
    got = mpi(mpirun, 2, [emu] + pd_args(path, f) + ["--pd", "1:1"], **env)
    rows, res = results(got)
    check(got.returncode == 0 and res == want,
          f"ignite_emu --pd 1:1 --device cuda ({way}): exit {got.returncode}, {res} against "
          f"one process's {want}: {got.stderr[-400:]}")
    ways = {(o["pd"]["path"], o["pd"]["prefill_rank"], o["pd"]["decode_rank"]) for o in rows
            if "pd" in o}
    check(len(rows) == len(want) and ways == {(way, 0, 1)},
          f"ignite_emu --pd 1:1 ({way}): the caches' ways {ways}")


def tp(mpirun, emu, path, f, want, standin):
    """--tp 2 over two emulated devices, the all-reduce through the NCCL
    stand-in: the requests one process's."""
    args = ["batch", "-m", path, "-t", "1", "-P", "4", "--ordered", "-f", f, "--device", "cuda",
            "--tp", "2"]
    got = mpi(mpirun, 2, [emu] + args, IGNITE_EMU_DEVICES="2", IGNITE_TP_REDUCE="nccl",
              IGNITE_NCCL_LIB=standin)
    _, res = results(got)
    check(got.returncode == 0 and res == want,
          f"ignite_emu --tp 2 --device cuda: exit {got.returncode}, {res} against one "
          f"process's {want}: {got.stderr[-400:]}")


def main():
    if len(sys.argv) < 2:
        print("usage: test_cli_emu.py IGNITE_EMU [NCCL_STANDIN.so]", file=sys.stderr)
        return 2
    emu, standin = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    tmp = scratch()
    paths = tiny_llamas(tmp)
    if not paths:
        return 77
    path, q4 = paths
    f, n = requests(tmp)
    timed("version", lambda: version(emu))
    want = []
    timed("one process", lambda: want.extend(one_process(emu, path, f, n)))
    mpirun = shutil.which("mpirun")
    probe = run([IGNITE, "tokenize", "--tp", "2", "-p", "x"])
    if not mpirun or b"built without" in probe.stderr:
        print("SKIP the mpirun cases: no mpirun, or this build has no MPI", file=sys.stderr)
    else:
        fp, n_pd = pd_requests(tmp)
        pd_one = []
        timed("one process, the --pd requests", lambda: pd_one.extend(pd_want(emu, q4, fp, n_pd)))
        if pd_one:
            timed("--pd 1:1", lambda: pd(mpirun, emu, q4, fp, pd_one, "host"))
        if pd_one and standin:
            timed("--pd 1:1, NCCL", lambda: pd(mpirun, emu, q4, fp, pd_one, "nccl",
                                               IGNITE_NCCL_LIB=standin, IGNITE_PD_XFER="nccl"))
        if want and standin:
            timed("--tp 2", lambda: tp(mpirun, emu, path, f, want, standin))
    return summary("test_cli_emu")


if __name__ == "__main__":
    sys.exit(main())
