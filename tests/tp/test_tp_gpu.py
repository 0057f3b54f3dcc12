"""tests/tp/test_tp_gpu.py: tensor-parallel ranks of the CUDA backend
(backend/gpu_tp.c) under the emulator: tests/emu/tp_gpu_dump_emu at 2 ranks
(mpirun, the host path's all-reduce: IGNITE_TP_REDUCE=mpi, what CI runs)
against one emulated process, on tiny synthetic models (tests/pylib/archgen.py):
a llama (4 query / 2 KV heads of 64, an untied head, an f16 embedding table:
gk_embed) and a gemma3 (4 / 1: the KV head replicated, post norms: the
partial sums reduced before their norm, a tied head over a Q8_0 table:
gk_qembed, the sqrt(n_embd) scale) and a qwen35 (random_gguf.py's emu shape:
a gated DeltaNet layer of 2 key / 4 value heads, each rank a key head with its
two value heads, apart in the tiled order: gathered weights, its heads' state;
and a gated attention layer, 2 / 1 heads, the KV head replicated) within
Q35_REL. Each rank holds its vocabulary rows of
the embedding table (zeros for the other ranks' tokens, summed before layer
0) and of the head (a tied one's are the same rows), its logits gathered on
rank 0. Then a gemma4 (random_gguf.py's emu shape: 2 / 1 heads, shared KV,
per-layer embeddings, whose table splits by vocabulary rows too, the looked-up
rows summed) with a prompt of its own whose tokens fall in both ranks' rows,
within G4_REL (its f16 residual copies round apart, see below). Then
random_gguf.py's qwen3moe (Q8_0) and gpt-oss (F16: sinks, biases, the
clamped SwiGLU) tiny files, 8 experts of which 2 a row: each rank routes over
all 8 and runs the pairs of its 4 (backend/gpu_moe.c), the sum in the
all-reduce, within MOE_REL. A dense FFN beside the experts, split by its
columns: random_gguf.py's qwen35moe emu (a shared expert, here 24 wide: 16
and 8 columns, issue 48's short share, its gated partial output in the
experts' partial sum) in the first launch, within Q35_REL; gemma4's moe-emu
(a dense MLP, here 24 wide: 16 and 8, its output and the experts' sum
all-reduced together before their norms) in the gemma4 launch, within
G4_REL. Issue 48's widths at 3 ranks in a launch of their own: llamas whose
FFN leaves the last rank none (Q8_0, 2 blocks) or a short share (F16, 5 units
of 8: 2, 2, 1), each refused before; the mutant tp_short_offset (models/tp.c's
copy: the short rank's columns one unit early) on the F16 one.
Two sequences: chunked prefill, decode steps of both, a last step's
greedy tokens from the backend. Every row's logits within REL of one
process's (max |tp - one| / max |one|: the ranks' sums meet in another
order, and the residual's f16 copies may round apart), the greedy tokens
equal (a step where one process's top two lie within TIE is named and ends
the comparison). Mutants (tests/emu/mutate.cmake: a partial sum not reduced,
one reduced twice, the embedded rows not summed, the embedding kernel writing
no zeros for the other ranks' tokens; run on the llama; gemma4's per-layer
table rows not summed, on the gemma4) must miss REL by far. The llama again on a
q8_0 pool (issue 51: check_q8), with the mutant tp_kv_other_heads (an imported
cache's head rows sent to the other rank) on it; a rank running the pairs of
another rank's experts, on the qwen3moe; gemma4's MLP normed before its
sum (tp_moe_mlp_no_sum), on the gemma4 MoE; the shared expert's columns
added by rank 0 alone (tp_moe_shexp_once), on the qwen35moe. IGNITE_TP_REDUCE=nccl where the
library is missing: one line naming the rank and the file, exit 7. The NCCL path
(IGNITE_TP_REDUCE=nccl) through the stand-in for libnccl.so.2 (STANDIN.so,
tests/emu/nccl_standin.c: NCCL's calls over MPI on the emulated device's host
memory), on the llama: its logits the MPI path's bit for bit (both sum 2 ranks'
floats in one addition); the mutant tp_nccl_half (gpu_reduce_nccl.c summing
half the floats) must miss REL by far, tp_nccl_uneven (each rank its own count)
must end the run with the stand-in's line; the stand-in's sends and receives
and its refusals (nccl_standin_check, [CHECKER]). Each comparison's
one process is a 1-rank launch beside its ranks' launch (not -s: the other
ranks spin in MPI while rank 0 runs alone); the mutants' launches run the
prefill rows only (-g 0; tp_kv_other_heads whole); they and the 1-rank
launches without LeakSanitizer. Usage: test_tp_gpu.py DUMP [QWEN3MOE.gguf GPTOSS.gguf]
[STANDIN.so CHECKER] [MUTANT_DUMP...] (time: see
docs/gpu.md "Tensor parallelism")
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from archgen import QT, write_model  # noqa: E402
from bench_gguf import random_gguf  # noqa: E402
from igtest import check as _check, summary  # noqa: E402
from tplib import mpi, mpirun_or_skip, scratch  # noqa: E402

REL = 1e-4   # the emulator measures 0 (the log line "largest relative error")
TIE = 1e-4
FAR = 0.05   # a mutant's error is at least this
IDS = "3,17,5,9,30,2,41,7,11,23,19,4"
# gemma4's (vocabulary 256): tokens in both ranks' rows of its two tables
G4_IDS = "3,200,17,150,5,130,41,255,9,140,30,2"
G4_VOCAB = 256
# gemma4's bounds: its ranks' partial sums, added in another order than one process's
# products, move the residual's f16 copies by a rounding here and there (measured
# 2.6e-4, the same bits with its per-layer table whole on each rank, as before the
# split: the table's sum adds zeros, exact); the mutant of that sum misses by 8.6e-2
G4_REL = 1e-3
G4_FAR = 2e-2
Q8_X = ("-k", "q8_0", "-x")  # a q8_0 pool, the cache exported and imported
# a mutant's launch: the two prefill rows (A's in chunks, B's) and no decode steps; every
# mutant but tp_kv_other_heads (whose fault is in the imported cache's step: Q8_X's run
# whole) misses there by far, as in the decode steps after
MUTANT_G = ("-g", "0")
# qwen35's: likewise the residual's f16 copies (measured 4.1e-4; one emulated process is
# 2.2e-3 from the CPU's exact logits on the tiny shape)
Q35_REL = 1e-3
Q35_VOCAB = 256
# the mixtures of experts (vocabulary 1024): tokens in both ranks' rows; a row's
# experts summed over the ranks meet x in another order than one process's
# combine (x + w0 y0 + w1 y1 against (x + w0 y0) + w1 y1), so the f16 copies of the
# residual round apart here and there: gemma4's bound (measured 4.7e-4 qwen3moe,
# 2.8e-4 gpt-oss). Their weights as f16 (dump's -w f16): the Q8_0 file's native
# products quantize their activations to int8, where such a rounding moves a value
# by a step (measured 6.7e-3 on the qwen3moe's, the greedy tokens equal)
MOE_IDS = "3,700,17,900,5,530,41,1000,9,640,30,2"
MOE_VOCAB = 1024
MOE_REL = 1e-3


def check(cond, what):
    """igtest.check that also returns cond."""
    _check(cond, what)
    return cond


def dump(mpirun, exe, models, prefix, alone=False, env=None, ids=IDS, extra=(), n=2,
         leaks=True):
    """exe at n ranks on each model (with alone: by itself too, at 1 rank, beside
    it; extra: more options, -k TYPE -x); the run and its greedy tokens by label
    ("0", "0 one", ...), the one process's files as PREFIX<i>.one.f32 and .kv.
    (Not -s, rank 0 alone first: the other ranks' MPI waits spin meanwhile, 10 of
    the first launch's 33 CPU s.) The mixtures of experts (MOE_IDS): their weights as
    f16, their attention on the mma.sync kernel m64w4 (the emulated
    warp-specialized one the chooser takes at head dim 64 took 2.2x the
    launch's CPU time; gpt-oss's sinks take an mma.sync one anyway). Every
    launch with the emulated device's fresh memory NaN (IGNITE_EMU_POISON).
    leaks=False: no LeakSanitizer (a mutant's launch: the slow unwinder that
    tests/tp/lsan.supp needs was half its CPU time, and its leaks are the
    dumper's own, which the other launches check); the 1-rank launch never (one
    emulated process: test_backend_emu, test_backend_arch_emu and the other
    in-process emu tests check its leaks)."""
    moe = ids == MOE_IDS
    no_lsan = ["env", "ASAN_OPTIONS=detect_leaks=0"]
    pre = no_lsan if not leaks else []
    opts = ["-c", "5", "-g", "3"] + list(extra) + (["-w", "f16"] if moe else [])
    env = (env or {}) | ({"IGNITE_FLASH_VARIANT": "m64w4"} if moe else {})
    for m in models:
        opts += ["-m", m]
    opts.append(ids)
    # fresh device memory NaN (device/device_emu.cc): a read of a never-written state
    # slot or buffer is NaN every launch, not where malloc happens to reuse a block
    env = dict(os.environ, IGNITE_TP_REDUCE="mpi", IGNITE_EMU_POISON="1") | env
    with ThreadPoolExecutor(max_workers=2) as pool:
        one = pool.submit(mpi, mpirun, 1, no_lsan + [exe, "-o", prefix + "one"] + opts,
                          env=env, text=True) if alone else None
        r = mpi(mpirun, n, pre + [exe, "-o", prefix] + opts, env=env, text=True)
        r1 = one.result() if one else None
    toks = {}
    for label, run in (("", r), (" one", r1)):
        for line in run.stdout.splitlines() if run and run.returncode == 0 else []:
            if line.startswith("greedy "):
                i, rest = line[len("greedy "):].split(":", 1)
                toks[i + label] = [int(t) for t in rest.split()]
    if r1 is not None:  # the one process's files under the names the checks read
        for i in range(len(models)):
            for ext in ("f32", "kv"):
                if os.path.exists(f"{prefix}one{i}.{ext}"):
                    os.replace(f"{prefix}one{i}.{ext}", f"{prefix}{i}.one.{ext}")
        if r1.returncode != 0:  # the failure the checks report
            r = r1
    return r, toks


def worst_error(f1, fn, n_vocab, rows=None):
    """The largest relative error of fn's rows against f1's (rows: f1's first
    rows only, fn must hold that many)."""
    a = np.fromfile(f1, dtype=np.float32).reshape(-1, n_vocab)
    b = np.fromfile(fn, dtype=np.float32).reshape(-1, n_vocab)
    a = a[:rows] if rows else a
    if a.shape != b.shape:
        return float("inf"), a, b
    rel = [float(np.max(np.abs(a[i] - b[i])) / np.max(np.abs(a[i]))) for i in range(len(a))]
    # a NaN row is the worst (max() would pass over it: NaN compares false)
    return max(r if np.isfinite(r) else float("inf") for r in rel), a, b


def tokens_match(name, a, t1, tn):
    """Greedy tokens equal up to a near tie of one process's logits. The
    tokens fed in: row 0 is A's prefill, 1 B's, then pairs per decode step."""
    if len(t1) != len(tn):
        return check(False, f"{name}: {len(tn)} greedy tokens, one process {len(t1)}")
    for i, (x, y) in enumerate(zip(t1, tn)):
        if x == y:
            continue
        row = a[i] if i < len(a) else None
        gap = float(np.diff(np.sort(row)[-2:])[0]) if row is not None else 0.0
        check(row is not None and gap < TIE,
              f"{name}: greedy token {i}: {y} != {x} (top-two gap {gap:.1e})")
        print(f"{name}: token {i} is a near tie ({gap:.1e}): compared up to it",
              file=sys.stderr)
        return False
    return True


def check_q8(run, tmp, n_vocab):
    """The llama on a q8_0 pool (issue 51): each rank's pool quantized over
    its own KV heads. Its logits within REL of one process's (a q8_0 pool
    too), the greedy tokens equal; then (-x) A's cache exported from the
    ranks (each head gathered from its rank) byte for byte the one process's
    export, imported into B's slot (each rank its heads) and a step there
    within REL of one process's same step: the rows moved as bytes, the type
    in the store."""
    name = "llama, q8_0 pool"
    r, toks = run
    check(r.returncode == 0, f"{name}, 2 ranks failed: exit {r.returncode}: {r.stderr[-2000:]}")
    if not check("0 one" in toks and "0" in toks, f"{name}: no greedy tokens"):
        return
    q = os.path.join(tmp, "q")
    err, a, _ = worst_error(f"{q}0.one.f32", f"{q}0.f32", n_vocab)
    check(err <= REL, f"{name}, 2 ranks: largest relative error {err:.2e} > {REL}")
    tokens_match(name, a, toks["0 one"], toks["0"])
    with open(f"{q}0.one.kv", "rb") as f1, open(f"{q}0.kv", "rb") as f2:
        k1, k2 = f1.read(), f2.read()
    check(len(k1) > 0 and k1 == k2,
          f"{name}: the exported cache ({len(k2)} bytes) is not one process's ({len(k1)})")
    print(f"{name}, 2 ranks: {len(a)} rows (the last after the cache's export and import), "
          f"largest relative error {err:.1e}, exported cache {len(k2)} bytes equal, "
          f"greedy {toks['0']}", file=sys.stderr)


def widths(tmp):
    """Issue 48's files: widths that leave a rank at 3 a short or an empty share
    (models/tp.c: whole units, a float type's 8, uneven), each refused before: a
    llama whose Q8_0 FFN of 64 is 2 blocks (32, 32, none: the last rank's FFN adds
    zeros, no product), one whose F16 FFN of 40 is 5 units of 8 (16, 16, 8: the
    short rank's columns 32..39). (qwen35moe's shared expert and Gemma 4's MLP: the
    first launch's and the gemma4 launch's, 24 wide: 16 and 8 at 2 ranks.) Paths and
    (name, vocabulary, bound): the F16 llama's products are f16 and sum in another
    order over the ranks (measured 4.9e-4 at 2 ranks, where its shares are whole,
    5.3e-4 at 3)."""
    paths, names = [], []
    for i, (name, kw, rel) in enumerate((
            ("llama Q8_0 FFN of 64 at 3 ranks: 32, 32, none", dict(n_ff=64), REL),
            ("llama F16 FFN of 40 at 3 ranks: 16, 16, 8", dict(n_ff=40, mat=QT.F16), Q35_REL))):
        paths.append(os.path.join(tmp, f"w{i}.gguf"))
        write_model(paths[-1], arch="llama", seed=i + 11, n_vocab=48, n_head=6, n_head_kv=3,
                    head_dim=64, n_embd=128, emb=QT.F16, **kw)
        names.append((name, 48, rel))
    return paths, names


def main():
    dumper = sys.argv[1]
    moe = [a for a in sys.argv[2:] if a.endswith(".gguf")]
    standin = next((a for a in sys.argv[2:] if a.endswith(".so")), None)
    checker = next((a for a in sys.argv[2:] if a.endswith("nccl_standin_check")), None)
    mutants = [a for a in sys.argv[2:]
               if not a.endswith((".gguf", ".so", "nccl_standin_check"))]
    mpirun = mpirun_or_skip()
    tmp = scratch()
    n_vocab = 48
    models = [
        ("llama 4 q / 2 kv, untied head, f16 table",
         dict(arch="llama", n_head=4, n_head_kv=2, head_dim=64, n_embd=128, n_ff=128,
              tied=False, emb=QT.F16)),
        ("gemma3 4 q / 1 kv, post norms, tied Q8_0 head",
         dict(arch="gemma3", n_head=4, n_head_kv=1, head_dim=64, n_embd=128, n_ff=128)),
    ]
    paths = []
    for i, (name, kw) in enumerate(models):
        paths.append(os.path.join(tmp, f"m{i}.gguf"))
        write_model(paths[-1], seed=i + 3, n_vocab=n_vocab, **kw)
    paths.append(os.path.join(tmp, "q35.gguf"))  # in the same launch: ~2 s a process more
    random_gguf.write(paths[-1], "emu", "F16", 5, "qwen35")
    # qwen35moe: the qwen35 emu's layers with 4 experts beside a shared expert, whose
    # columns split as a dense FFN's, added into the experts' partial sums; 24 wide (issue
    # 48): 3 units of 8, 16 and 8 at 2 ranks (12 and 12, refused before)
    random_gguf.qwen35.MOE_SHAPES["emu24"] = dict(random_gguf.qwen35.MOE_SHAPES["emu"],
                                                  ff_shexp=24)
    paths.append(os.path.join(tmp, "q35moe.gguf"))
    random_gguf.write(paths[-1], "emu24", "F16", 5, "qwen35moe")
    bounds = [(name, n_vocab, REL) for name, _ in models] + \
        [("qwen35 emu, gated DeltaNet and attention", Q35_VOCAB, Q35_REL),
         ("qwen35moe emu, shared expert", Q35_VOCAB, Q35_REL)]
    pre = os.path.join(tmp, "d")
    r, toks = dump(mpirun, dumper, paths, pre, alone=True)
    check(r.returncode == 0, f"2 ranks failed: exit {r.returncode}: {r.stderr[-2000:]}")
    for i, (name, nv, rel) in enumerate(bounds):
        t1, t2 = toks.get(f"{i} one"), toks.get(f"{i}")
        if not check(t1 is not None and t2 is not None, f"{name}: no greedy tokens"):
            continue
        err, a, _ = worst_error(f"{pre}{i}.one.f32", f"{pre}{i}.f32", nv)
        check(err <= rel, f"{name}, 2 ranks: largest relative error {err:.2e} > {rel}")
        tokens_match(name, a, t1, t2)
        print(f"{name}, 2 ranks: {len(a)} rows, largest relative error {err:.1e}, "
              f"greedy {t2}", file=sys.stderr)
    # the mutants, gemma4 and the refusal below at once: a launch mostly waits (mpirun's
    # start), so side by side they take about the time of one. Gemma 4 (the emu shape:
    # shared KV, per-layer embeddings whose table splits by vocabulary rows as
    # token_embd's) with a prompt of its own; the mutant of its table's sum on it
    g4 = os.path.join(tmp, "g4.gguf")
    random_gguf.write(g4, "emu", "F16", 5, "gemma4")
    # Gemma 4's MoE in the same launch: its dense MLP's columns and the experts split, the
    # two partial sums summed before their norms; the MLP 24 wide (issue 48): 16 and 8
    random_gguf.randgguf_gemma4.SHAPES["moe-emu24"] = dict(
        random_gguf.randgguf_gemma4.SHAPES["moe-emu"], ff=24)
    g4moe = os.path.join(tmp, "g4moe.gguf")
    random_gguf.write(g4moe, "moe-emu24", "F16", 5, "gemma4")
    lib = os.path.join(tmp, "no", "libnccl.so.2")
    wpaths, wnames = widths(tmp)

    def mutant_case(exe):
        """(models, ids, reference logits, vocabulary, far) of a mutant."""
        name = os.path.basename(exe)
        if "short" in name:  # the F16 FFN of 40: its short rank's columns
            return wpaths[1:2], IDS, f"{tmp}/w1.one.f32", 48, FAR
        if "ple" in name:
            return [g4], G4_IDS, f"{tmp}/g0.one.f32", G4_VOCAB, G4_FAR
        if "mlp" in name:
            return [g4moe], G4_IDS, f"{tmp}/g1.one.f32", G4_VOCAB, G4_FAR
        if "shexp" in name:
            return paths[3:4], IDS, f"{pre}3.one.f32", Q35_VOCAB, FAR
        if "moe" in name:
            return moe[:1], MOE_IDS, f"{tmp}/e0.one.f32", MOE_VOCAB, FAR
        if "_kv_" in name:  # the q8_0 pool's run, its last row the imported cache's step
            return paths[:1], IDS, f"{tmp}/q0.one.f32", n_vocab, FAR
        return paths[:1], IDS, f"{pre}0.one.f32", n_vocab, FAR

    # the NCCL path: ignite's calls into the stand-in (its sums over MPI)
    nccl_env = {"IGNITE_TP_REDUCE": "nccl", "IGNITE_NCCL_LIB": standin or "",
                "IGNITE_TP_STATS": "1"}
    mutants = [exe for exe in mutants if ("moe" not in exe or moe)
               and ("nccl" not in exe or standin)]
    uneven = [exe for exe in mutants if "nccl_uneven" in exe]
    mutants = [exe for exe in mutants if exe not in uneven]
    with ThreadPoolExecutor(max_workers=len(mutants) + 6) as pool:
        runs = [pool.submit(dump, mpirun, exe, mutant_case(exe)[0],
                            os.path.join(tmp, os.path.basename(exe)), ids=mutant_case(exe)[1],
                            extra=Q8_X if "_kv_" in exe else MUTANT_G,
                            env=nccl_env if "nccl" in exe else None,
                            n=3 if "short" in exe else 2, leaks=False)
                for exe in mutants]
        nccl = pool.submit(dump, mpirun, dumper, paths[:1], os.path.join(tmp, "n"),
                           env=nccl_env) if standin else None
        nccl_bad = [pool.submit(dump, mpirun, exe, paths[:1], os.path.join(tmp, "u"),
                                env=nccl_env) for exe in uneven]
        p2p = pool.submit(mpi, mpirun, 2, [checker, standin], text=True) \
            if standin and checker else None
        width_run = pool.submit(dump, mpirun, dumper, wpaths, os.path.join(tmp, "w"), alone=True,
                             n=3)
        q8 = pool.submit(dump, mpirun, dumper, paths[:1], os.path.join(tmp, "q"), alone=True,
                         extra=Q8_X)
        gemma4 = pool.submit(dump, mpirun, dumper, [g4, g4moe], os.path.join(tmp, "g"),
                             alone=True, ids=G4_IDS)
        experts = pool.submit(dump, mpirun, dumper, moe, os.path.join(tmp, "e"), alone=True,
                              ids=MOE_IDS) if moe else None
        refusal = pool.submit(dump, mpirun, dumper, paths[:1], os.path.join(tmp, "x"),
                              env={"IGNITE_TP_REDUCE": "nccl", "IGNITE_NCCL_LIB": lib})
    r, toks = gemma4.result()
    check(r.returncode == 0, f"gemma4, 2 ranks failed: exit {r.returncode}: {r.stderr[-2000:]}")
    for i, name in enumerate(("gemma4 emu, per-layer embeddings",
                              "gemma4 moe-emu, dense MLP beside the experts")):
        if not check(f"{i} one" in toks and f"{i}" in toks, f"{name}: no greedy tokens"):
            continue
        g = os.path.join(tmp, "g")
        err, a, _ = worst_error(f"{g}{i}.one.f32", f"{g}{i}.f32", G4_VOCAB)
        check(err <= G4_REL, f"{name}, 2 ranks: largest relative error {err:.2e} > {G4_REL}")
        tokens_match(name, a, toks[f"{i} one"], toks[f"{i}"])
        print(f"{name}, 2 ranks: {len(a)} rows, largest relative error {err:.1e}, "
              f"greedy {toks[str(i)]}", file=sys.stderr)
    check_q8(q8.result(), tmp, n_vocab)
    r, toks = width_run.result()
    check(r.returncode == 0, f"uneven widths, 3 ranks failed: exit {r.returncode}: "
          f"{r.stderr[-2000:]}")
    for i, (name, nv, rel) in enumerate(wnames):
        if not check(f"{i} one" in toks and f"{i}" in toks, f"{name}: no greedy tokens"):
            continue
        w = os.path.join(tmp, "w")
        err, a, _ = worst_error(f"{w}{i}.one.f32", f"{w}{i}.f32", nv)
        check(err <= rel, f"{name}: largest relative error {err:.2e} > {rel}")
        tokens_match(name, a, toks[f"{i} one"], toks[f"{i}"])
        print(f"{name}: {len(a)} rows, largest relative error {err:.1e}, greedy {toks[str(i)]}",
              file=sys.stderr)
    r, toks = experts.result() if moe else (None, {})
    check(not moe or r.returncode == 0,
          f"mixtures of experts, 2 ranks failed: exit {r and r.returncode}: "
          f"{r and r.stderr[-2000:]}")
    for i, path in enumerate(moe):
        name = os.path.basename(path)
        if not check(f"{i} one" in toks and f"{i}" in toks, f"{name}: no greedy tokens"):
            continue
        e = os.path.join(tmp, "e")
        err, a, _ = worst_error(f"{e}{i}.one.f32", f"{e}{i}.f32", MOE_VOCAB)
        check(err <= MOE_REL, f"{name}, 2 ranks: largest relative error {err:.2e} > {MOE_REL}")
        tokens_match(name, a, toks[f"{i} one"], toks[f"{i}"])
        print(f"{name}, 2 ranks of 4 experts: {len(a)} rows, largest relative error "
              f"{err:.1e}, greedy {toks[f'{i}']}", file=sys.stderr)
    for exe, run in zip(mutants, runs):
        name = os.path.basename(exe)
        r, toks = run.result()
        _, _, ref, nv, far = mutant_case(exe)
        err = worst_error(ref, os.path.join(tmp, f"{name}0.f32"), nv,
                          None if "_kv_" in name else 2)[0] if "0" in toks else float("inf")
        check(err > far, f"mutant {name}: not caught (largest relative error {err:.2e})")
        print(f"mutant {name}: caught, largest relative error {err:.2e}", file=sys.stderr)
    if nccl:  # the same sums as the MPI path's: the same bits
        r, toks = nccl.result()
        check(r.returncode == 0 and "tp: the ranks' sums by nccl" in r.stderr,
              f"NCCL stand-in, 2 ranks failed: exit {r.returncode}: {r.stderr[-2000:]}")
        a = np.fromfile(f"{pre}0.f32", dtype=np.float32)
        b = np.fromfile(os.path.join(tmp, "n0.f32"), dtype=np.float32) \
            if r.returncode == 0 else np.zeros(0, np.float32)
        check(a.size > 0 and a.shape == b.shape and np.array_equal(a, b),
              f"NCCL stand-in: the llama's logits ({b.size}) are not the MPI path's ({a.size})")
        print(f"llama, 2 ranks by the NCCL stand-in: {a.size // n_vocab} rows, the MPI path's "
              f"bits, greedy {toks.get('0')}", file=sys.stderr)
    if p2p:  # the stand-in's sends, receives and refusals (nccl_standin_check.c)
        r = p2p.result()
        oks = [ln for ln in r.stdout.splitlines() if ": ok " in ln]
        check(r.returncode == 0 and len(oks) == 2,
              f"nccl_standin_check: exit {r.returncode}: {r.stdout[-800:]} {r.stderr[-800:]}")
        print(f"the NCCL stand-in's point to point: {oks}", file=sys.stderr)
    for run in nccl_bad:  # each rank its own count: the stand-in's one line, no hang
        r, _ = run.result()
        lines = [ln for ln in r.stderr.splitlines() if "nccl stand-in: rank" in ln]
        check(r.returncode != 0 and lines and "ncclAllReduce #0: count" in lines[0],
              f"mutant tp_nccl_uneven: exit {r.returncode}, stderr {r.stderr[-600:]!r}")
        print(f"mutant tp_nccl_uneven: refused, exit {r.returncode}: {lines[:1]}",
              file=sys.stderr)
    # IGNITE_TP_REDUCE=nccl without the library: one line on rank 0 naming the rank and
    # the file (backend/gpu_reduce_nccl.c's loader; every rank checks), exit 7
    r, _ = refusal.result()
    lines = [ln for ln in r.stderr.splitlines() if "cannot load NCCL" in ln]
    check(r.returncode == 7 and len(lines) == 1 and lib in lines[0]
          and "rank 1 of 2" in lines[0],
          f"IGNITE_TP_REDUCE=nccl, no library: exit {r.returncode}, stderr {r.stderr[-600:]!r}")
    return summary("test_tp_gpu")


if __name__ == "__main__":
    sys.exit(main())
