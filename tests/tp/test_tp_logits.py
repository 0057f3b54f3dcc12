"""tests/tp/test_tp_logits.py: tensor parallelism's forward against one
process on the exact path (IGNITE_MATMUL=exact: f32 matmuls): 2 and 3 ranks
(mpirun), the real test models (SmolLM2: 9 query / 3 KV heads; Gemma 3 270M:
4 / 1, the KV head replicated) and synthetic GQA models (tests/pylib/archgen.py:
Qwen2's Q/K/V biases split with their rows, 8 / 2 heads at 3 ranks (two ranks
share a KV head), 6 / 3 heads, Gemma 3's head norms and window; a qwen3moe's
experts split across the ranks; gpt-oss's sinks, output bias and experts' biases;
gemma4's shared KV and per-layer embeddings, whose table splits by vocabulary rows:
the prompt's tokens fall in every rank's rows, each rank's pages of the table
(IGNITE_TP_STATS) at most 1/N of it and the 64 KiB the kernel maps around a
fault at either end, `info --tp N --json`'s per_layer_embd_bytes its rows';
qwen35's gated DeltaNet layers split by heads (2 key / 4 value heads: at 3
ranks a key head replicated on two ranks, one of its value heads each) and
its gated attention, a prompt of 84 crossing the chunked form's chunk of 64; the same
weights as a Hugging Face folder, its value heads in the grouped order); a dense FFN
beside the experts split by its columns: qwen35moe's shared expert (its sigmoid gate
replicated) and Gemma 4's MLP (its output and the experts' sum all-reduced before
their norms): 4.2 and 4.1 s at load 12. Widths that leave a rank nothing (issue 48,
refused before): a llama's Q4_K FFN of 512 (2 blocks: 1, 1 and none at 3 ranks) with
16 heads of 64 in units of 4 (wo's blocks: 8, 4, 4), the shared expert and the MLP
64 wide in Q8_0 (2 blocks: 1, 1, none).
Each case
prefills a prompt in chunks, then greedy steps (forward_dump); every step's
logits within 1e-5 relative (max |tp - one| / max |one|) of one process's,
and the greedy tokens equal, except at a step where one process's top two
logits lie within 1e-4 (the ranks' sums are added in another order): such a
step is named and the comparison of that case ends there. Under the
sanitizers: SmolLM2 (not Gemma 3), 2 greedy steps, every case at 2 ranks only.
Usage: test_tp_logits.py FORWARD_DUMP   (29 s at load average 5 on 2 cores, 228 s
at 14)
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from archgen import QT, write_model  # noqa: E402
from igtest import check as _check, gemma3_path, model_path, sanitized, summary  # noqa: E402
import gguf  # noqa: E402
from tplib import mpi, mpirun_or_skip, sanitizer_env, scratch  # noqa: E402

REL = 1e-5
TIE = 1e-4
GEMMA4 = "gemma4 shared KV, per-layer embeddings"
FAULT_AROUND = 2 * 64 / 1024  # MiB: 64 KiB mapped beside each end of a rank's rows
IGNITE = os.environ.get("IGNITE_BIN", "ignite")
U32 = gguf.GGUFValueType.UINT32


def check(cond, what):
    """igtest.check that also returns cond."""
    _check(cond, what)
    return cond


def dump(mpirun, n, dumper, model, ids, chunk, greedy, out):
    """The logits' file and greedy tokens of a forward_dump run, and the
    ranks' IGNITE_TP_STATS lines (stderr)."""
    argv = [dumper, "-m", model, "-o", out, "-t", "1", "-c", str(chunk), "-g", str(greedy),
            ",".join(map(str, ids))]
    env = dict(os.environ, IGNITE_MATMUL="exact", IGNITE_TP_STATS="1")
    r = mpi(mpirun, n, argv, env=env, text=True) if n > 1 else \
        subprocess.run(argv, capture_output=True, env=env, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return None, None, []
    toks = [int(t) for t in r.stdout.split("greedy:")[1].split()] if greedy else []
    return toks, out, [ln for ln in r.stderr.splitlines() if ln.startswith("tp: rank ")]


def compare(name, n, one, tp, n_vocab):
    (t1, f1, _), (tn, fn, _) = one, tp
    if not check(fn is not None, f"{name}, {n} ranks: the run failed"):
        return
    a = np.fromfile(f1, dtype=np.float32).reshape(-1, n_vocab)
    b = np.fromfile(fn, dtype=np.float32).reshape(-1, n_vocab)
    check(a.shape == b.shape, f"{name}, {n} ranks: {b.shape} logits, one process {a.shape}")
    worst = 0.0
    for i in range(min(len(a), len(b))):
        rel = float(np.max(np.abs(a[i] - b[i])) / np.max(np.abs(a[i])))
        worst = max(worst, rel)
        if not check(rel <= REL, f"{name}, {n} ranks, step {i}: relative error {rel:.2e}"):
            return
        if i < len(t1):  # logits a[i] chose token t1[i]
            if t1[i] != tn[i]:
                top = np.sort(a[i])[-2:]
                gap = float(top[1] - top[0])
                check(gap < TIE, f"{name}, {n} ranks, greedy step {i}: {tn[i]} != {t1[i]} "
                      f"(top-two gap {gap:.2e})")
                print(f"{name}, {n} ranks: greedy step {i} is a near tie ({gap:.2e}): "
                      "compared up to it", file=sys.stderr)
                return
    print(f"{name}, {n} ranks: {len(a)} steps, tokens equal, largest relative error "
          f"{worst:.1e}", file=sys.stderr)


def main():
    dumper = sys.argv[1]
    mpirun = mpirun_or_skip()
    tmp = scratch()
    cases = []
    real = ((model_path(), "SmolLM2"), (gemma3_path(), "Gemma 3 270M"))
    for path, name in real[:1] if sanitized() else real:  # (the sanitizers: ~30x slower)
        if os.path.exists(path):
            ids = [1, 504, 3458, 282, 4649, 314, 253, 1345, 30, 2, 444, 1171, 12345, 990] * 3
            cases.append((name, path, ids, 16, 2 if sanitized() else 6))
        else:
            print(f"{name}: {path} absent, not run", file=sys.stderr)
    syn = [
        ("qwen2 biases, 8 q / 2 kv", dict(arch="qwen2", n_head=8, n_head_kv=2, head_dim=16,
                                          n_embd=64, n_ff=96, tied=False)),
        ("llama 6 q / 3 kv", dict(arch="llama", n_head=6, n_head_kv=3, head_dim=32,
                                  n_embd=96, n_ff=128)),
        ("gemma3 4 q / 1 kv, window 8", dict(arch="gemma3", n_head=4, n_head_kv=1, head_dim=32,
                                              n_embd=64, n_ff=96, n_layer=3,
                                              keys={"attention.sliding_window": (8, U32)})),
        # uneven widths (issue 48): Q4_K's FFN of 512 is 2 blocks, at 3 ranks 1, 1 and
        # none (the last rank's FFN adds zeros); its 16 heads of 64 in units of 4 (a
        # block of wo's columns): 8, 4, 4 at 3 ranks (by heads, 6, 5, 5 would cut blocks)
        ("llama Q4_K, FFN 2 blocks, 16 heads of 64",
         dict(arch="llama", n_head=16, n_head_kv=16, head_dim=64, n_embd=256, n_ff=512,
              mat=QT.Q4_K)),
    ]
    for i, (name, kw) in enumerate(syn):
        p = os.path.join(tmp, f"syn{i}.gguf")
        write_model(p, seed=i + 1, **kw)
        ids = list(np.random.default_rng(i).integers(0, 48, 30))
        cases.append((name, p, ids, 7, 5))
    # experts across ranks (whole experts a rank: 8 over 2 and 3 ranks), the router on
    # every rank (bench/random_gguf.py's qwen3moe tiny: 8 experts, 2 used)
    from bench_gguf import random_gguf
    p = os.path.join(tmp, "moe.gguf")
    random_gguf.write(p, "tiny", "F16", 7, "qwen3moe")
    cases.append(("qwen3moe 8 experts, 2 used", p, list(range(3, 60, 3)), 7, 5))
    # gpt-oss: each rank's sinks with its query heads, the output bias added once (rank 0's),
    # the experts' biases with their experts; its window of 32 crossed
    p = os.path.join(tmp, "oss.gguf")
    random_gguf.write(p, "tiny", "F16", 3, "gpt-oss")
    cases.append(("gpt-oss sinks, biases, experts", p, list(range(5, 200, 5)), 7, 5))
    # gemma4: per-layer heads and head dims, shared-KV layers reading their source's heads,
    # per-layer embeddings (their table by vocabulary rows, as token_embd: the prompt's
    # tokens in every rank's rows) and output scales (replicated), V normed without a weight
    p = os.path.join(tmp, "gemma4.gguf")
    random_gguf.write(p, "tiny", "F16", 3, "gemma4")
    cases.append((GEMMA4, p, list(range(4, 1024, 14)), 7, 5))
    # qwen35: each rank's value heads (tiled: not contiguous) with their key heads, their
    # rows of q|k|v, z, beta, alpha, channels of the convolution and its state, A and dt,
    # ssm_out's columns; the attention's q_proj rows with each head's output gate
    p = os.path.join(tmp, "qwen35.gguf")
    random_gguf.write(p, "tiny", "F16", 3, "qwen35")
    cases.append(("qwen35 gated DeltaNet", p, list(range(3, 1000, 12)), 16, 5))
    # the same weights as a Hugging Face folder: the value heads in the checkpoint's grouped
    # order (a rank's part grouped again, models/tp.c's model_tp_dn_head)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
    from test_hf_qwen35 import write_folder
    folder = os.path.join(tmp, "qwen35-folder")
    write_folder(folder, p, "qwen35", random_gguf.qwen35.SHAPES["tiny"])
    cases.append(("qwen35 folder, grouped value heads", folder, list(range(3, 1000, 12)), 16,
                  5))
    # a dense FFN beside the experts, by its columns as a dense FFN's: qwen35moe's shared
    # expert (its one-row sigmoid gate on every rank) beside 16 experts over DeltaNet layers;
    # Gemma 4's MLP beside 8 experts, the MLP's output and the experts' sum each normed
    # before they are added (summed over the ranks first: one all-reduce of the two). Each
    # 64 wide in Q8_0 (issue 48): 2 blocks, at 3 ranks 1, 1 and none (the last rank's
    # shared expert adds nothing, its MLP zeros to the sum before the norms)
    random_gguf.qwen35.MOE_SHAPES["tpw"] = dict(random_gguf.qwen35.MOE_SHAPES["tiny"],
                                                ff_shexp=64)
    p = os.path.join(tmp, "qwen35moe.gguf")
    random_gguf.write(p, "tpw", "Q8_0", 3, "qwen35moe")
    cases.append(("qwen35moe shared expert", p, list(range(3, 1000, 12)), 16, 5))
    random_gguf.randgguf_gemma4.SHAPES["moe-tpw"] = dict(
        random_gguf.randgguf_gemma4.SHAPES["moe-tiny"], ff=64)
    p = os.path.join(tmp, "gemma4moe.gguf")
    random_gguf.write(p, "moe-tpw", "Q8_0", 3, "gemma4")
    cases.append(("gemma4 MoE, dense MLP beside", p, list(range(4, 1024, 14)), 7, 5))
    for name, path, ids, chunk, greedy in cases:
        one = dump(mpirun, 1, dumper, path, ids, chunk, greedy, os.path.join(tmp, "one.f32"))
        if not check(one[1] is not None, f"{name}: one process failed"):
            continue
        n_vocab = vocab_of(path)
        # (the sanitizers: 2 ranks, the uneven splits of 3 are the same code)
        for n in (2,) if sanitized() else (2, 3):
            tp = dump(mpirun, n, dumper, path, ids, chunk, greedy,
                      os.path.join(tmp, f"tp{n}.f32"))
            compare(name, n, one, tp, n_vocab)
            if name == GEMMA4 and tp[1] is not None:
                ple_pages(name, n, tp[2])
    ple_info(os.path.join(tmp, "gemma4.gguf"))
    return summary("test_tp_logits")


def ple_pages(name, n, stats):
    """Each rank's pages of the per-layer table (IGNITE_TP_STATS) about 1/n of
    it: its rows' pages, and those the kernel's fault-around (64 KiB aligned)
    maps beside the two ends of its range."""
    got = [re.search(r"per-layer table pages ([0-9.]+) of ([0-9.]+) MiB", ln) for ln in stats]
    if not check(len(got) == n and all(got), f"{name}, {n} ranks: per-layer table pages in "
                 f"{stats}"):
        return
    pages = [float(g.group(1)) for g in got]
    whole = float(got[0].group(2))
    check(all(0 < p <= whole / n + FAULT_AROUND for p in pages),
          f"{name}, {n} ranks: per-layer table pages {pages} MiB, the table {whole} MiB")
    print(f"{name}, {n} ranks: per-layer table pages {pages} MiB of {whole}", file=sys.stderr)


def ple_info(path):
    """`info --tp N --json`: each rank's bytes of the per-layer table, its
    vocabulary rows', together the table's."""
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == "per_layer_token_embd.weight")
    whole, rows = int(t.n_bytes), int(t.shape[1])
    for n in (2, 3):
        q = subprocess.run([IGNITE, "info", "-m", path, "--tp", str(n), "--json"],
                           capture_output=True, env=sanitizer_env(), text=True)
        parts = json.loads(q.stdout)["tensor_parallel"]["parts"] if q.returncode == 0 else []
        got = [p.get("per_layer_embd_bytes", 0) for p in parts]
        want = [(v[1] - v[0] + 1) * whole // rows for v in (p["vocab_rows"] for p in parts)]
        check(len(got) == n and got == want and sum(got) == whole,
              f"info --tp {n}: per-layer table bytes {got}, the vocabulary rows' {want}, "
              f"the table {whole}: {q.stderr[-300:]}")


def vocab_of(path):
    if os.path.isdir(path):  # a Hugging Face folder
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        return c.get("text_config", c)["vocab_size"]
    r = gguf.GGUFReader(path)
    for t in r.tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[1])
    raise ValueError("no token_embd")


if __name__ == "__main__":
    sys.exit(main())
