"""tests/cpu/test_moe.py: the CPU forward of a mixture of experts (qwen3moe,
backend/cpu_moe.c) against the fp64 numpy reference written from
transformers' Qwen3MoeSparseMoeBlock (tests/cpu/ref_forward.py, weights
dequantized by the gguf package), on bench/random_gguf.py's `tiny` shape
(3 layers, 8 experts of 256, 2 used) written here in F16 and Q4_K_M.

Each file: a 40-token prompt, 2 fixed and 6 greedy decode steps, on the
exact path: logits within 1e-4 relative of the reference at every step and
greedy tokens equal (tests/cpu/test_forward_ref.py's check). A step in
which some row's k-th and (k+1)-th router logits lie within 1e-6 in the
reference may pick either expert: such a step is named and left out,
nothing else. On the int8 path (the default), the Q4_K_M file's logits
within NMSE 1e-3 and 4e-2 relative of the reference at every step with the
same top token (worst seen 4.1e-4 and 2.1e-2: int8 activations). A third
file (F16) has router rows 0 and 1 equal in every layer: their logits tie
exactly, and the lower index must win (torch.topk's and llama.cpp's
order), checked against the reference the same way.

Then, bit for bit on the exact path and (Q4_K_M) on the int8 path: the
prompt in chunks of 7 = a row at a time = whole, one thread = two (a row's
experts and sums do not depend on the rows that share its step, a decode's
lone rows included). Not F16 on the int8 path:
there float weights take the FMA GEMM from 8 rows on and ops/matmul.c
below, whose roundings differ, for a dense model's F16 weights as much as
for experts (ops/qmatmul.c's ops_qmatmul_handles). And the files' logits
are not flat: the reference's top token is at least 1.3 times as likely as
the second at the median step (a random model whose top tokens tie proves
nothing).

Last, a Hugging Face folder (Qwen3MoeForCausalLM: a tensor per expert, F32)
and a GGUF of the same weights written here give the same logits bit for
bit with norm_topk_prob true, and with it false the folder's match the
reference run without renormalizing; broken folders (more experts used
than there are, dense layers among them, an expert's tensor missing or of
the wrong shape) are one line, exit 4 (`ignite info`).
Usage: test_moe.py FORWARD_DUMP
"""
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_gguf import random_gguf  # noqa: E402
from ref_forward import RefModel  # noqa: E402
from int8_check import int8_steps_match  # noqa: E402
from test_forward_ref import describe  # noqa: E402
from moegen import write_folder_and_gguf  # noqa: E402

BOUND = 1e-4


def dump(tool, path, prompt, opts, fixed, n_greedy, out, exact):
    env = dict(os.environ, IGNITE_MATMUL="exact" if exact else "int8")
    cmd = [tool, "-m", path, "-o", out, "-g", str(n_greedy), "-d", ",".join(map(str, fixed))]
    cmd += opts + [",".join(map(str, prompt))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"forward_dump failed with status {res.returncode}: {' '.join(cmd)}")
    greedy = [int(t) for line in res.stdout.splitlines() if line.startswith("greedy:")
              for t in line.split()[1:]]
    return np.fromfile(out, dtype=np.float32), greedy


def against_reference(ref, tool, path, name, prompt, fixed, n_greedy, tmp):
    out = os.path.join(tmp, "logits.bin")
    flat, greedy = dump(tool, path, prompt, [], fixed, n_greedy, out, exact=True)
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    if len(ours) != 1 + len(fixed) + n_greedy or len(greedy) != n_greedy:
        print(f"FAIL {name}: {len(ours)} logit rows, {len(greedy)} greedy tokens")
        return False
    cache = ref.new_cache()
    steps = [("prefill", prompt)] + [(f"decode {t}", [t]) for t in fixed + greedy]
    ok, worst, skipped, ratios = True, 0.0, [], []
    for i, (what, toks) in enumerate(steps):
        ties = ref.moe_ties
        r = ref.forward(toks, cache)
        p = np.sort(np.exp(r - r.max()))[::-1]
        ratios.append(p[0] / p[1])
        if ref.moe_ties != ties:
            skipped.append(i)
            print(f"  note {name}: step {i} ({what}) has router logits within 1e-6 at the "
                  "top-k edge: either expert is right, not compared")
            continue
        err = np.abs(ours[i] - r).max() / np.abs(r).max()
        worst = max(worst, err)
        if err > BOUND:
            print(f"FAIL {name}, step {i} ({what}): relative error {err:.3e} > {BOUND:.0e}: "
                  f"{describe(ours[i], r)}")
            ok = False
            break
        if i >= len(fixed) and i - len(fixed) < n_greedy:
            mine, theirs = greedy[i - len(fixed)], int(np.argmax(r))
            if mine != theirs and (r[theirs] - r[mine]) / np.abs(r).max() > BOUND:
                print(f"FAIL {name}, greedy step {i - len(fixed)}: ours {mine}, reference "
                      f"{theirs}")
                ok = False
                break
    flat_ratio = float(np.median(ratios))
    if flat_ratio < 1.3:
        print(f"FAIL {name}: logits nearly flat (top-1 / top-2 probability {flat_ratio:.2f} "
              "at the median step)")
        ok = False
    print(f"{'ok' if ok else 'FAILED':6} {name}: {len(steps)} steps, worst relative error "
          f"{worst:.2e}, median top-1/top-2 {flat_ratio:.2f}, {ref.moe_exact_ties} exact router "
          "ties at the top-k edge"
          + (f", steps {skipped} left out (router ties)" if skipped else ""))
    return ok


def int8_against_reference(ref, tool, path, name, prompt, fixed, n_greedy, tmp):
    flat, greedy = dump(tool, path, prompt, [], fixed, n_greedy, os.path.join(tmp, "q8.bin"),
                        exact=False)
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    return int8_steps_match(ours, ref, [prompt] + [[t] for t in fixed + greedy], name)


def invariance(tool, path, name, prompt, fixed, n_greedy, tmp, paths):
    """Bit for bit: whole = chunks of 7 = a row at a time = one thread, on
    each path (exact: True)."""
    ok = True
    for exact in paths:
        path_name = "exact" if exact else "int8"
        runs = {}
        for label, opts in (("whole, 2 threads", ["-t", "2"]),
                            ("chunks of 7", ["-t", "2", "-c", "7"]),
                            ("a row at a time", ["-t", "2", "-c", "1"]),
                            ("1 thread", ["-t", "1"])):
            out = os.path.join(tmp, f"inv{len(runs)}.bin")
            runs[label] = dump(tool, path, prompt, opts, fixed, n_greedy, out, exact)
        base_l, base_g = runs["whole, 2 threads"]
        for label, (lg, g) in runs.items():
            if g != base_g or lg.shape != base_l.shape or not np.array_equal(lg, base_l):
                diff = np.abs(lg - base_l).max() if lg.shape == base_l.shape else float("nan")
                print(f"FAIL {name}, {path_name}: {label} differs from whole, 2 threads "
                      f"(max {diff:.3e}; greedy {g} vs {base_g})")
                ok = False
    print(f"{'ok' if ok else 'FAILED':6} {name}: chunked = a row at a time = whole, "
          "1 thread = 2, bit for bit "
          f"({' and '.join('exact' if e else 'int8' for e in paths)})")
    return ok


def tie_router_rows(path):
    """Router row 1 := row 0 in every layer, in place (F32 rows)."""
    r = gguf.GGUFReader(path)
    spans = [(int(t.data_offset), int(t.shape[0])) for t in r.tensors
             if t.name.endswith("ffn_gate_inp.weight")]
    del r
    with open(path, "r+b") as f:
        for off, cols in spans:
            f.seek(off)
            row0 = f.read(4 * cols)
            f.seek(off + 4 * cols)
            f.write(row0)


def folder_case(tool, tmp):
    ok = True
    rng = np.random.default_rng(7)
    for norm_topk in (True, False):
        folder, path, n_vocab = write_folder_and_gguf(tmp, 11, norm_topk)
        prompt = [int(t) for t in rng.integers(0, n_vocab, 30)]
        fixed = [int(t) for t in rng.integers(0, n_vocab, 2)]
        lf, gf = dump(tool, folder, prompt, ["-c", "9"], fixed, 3,
                      os.path.join(tmp, "folder.bin"), exact=True)
        if norm_topk:
            lg, gg = dump(tool, path, prompt, ["-c", "9"], fixed, 3,
                          os.path.join(tmp, "gguf.bin"), exact=True)
            same = np.array_equal(lf, lg) and gf == gg
            if not same:
                print(f"FAIL Qwen3MoeForCausalLM folder vs its GGUF: logits differ (max "
                      f"{np.abs(lf - lg).max():.3e}), greedy {gf} vs {gg}")
                ok = False
            continue
        ref = RefModel(path)
        ref.norm_topk = False
        ours = lf.reshape(-1, n_vocab).astype(np.float64)
        cache = ref.new_cache()
        for i, toks in enumerate([prompt] + [[t] for t in fixed + gf]):
            r = ref.forward(toks, cache)
            err = np.abs(ours[i] - r).max() / np.abs(r).max()
            if err > BOUND or ref.moe_ties:
                print(f"FAIL folder, norm_topk_prob false, step {i}: relative error {err:.3e}"
                      f" ({ref.moe_ties} router near-ties)")
                ok = False
                break
            if i >= len(fixed) and i - len(fixed) < len(gf) and gf[i - len(fixed)] != int(
                    np.argmax(r)):
                print(f"FAIL folder, norm_topk_prob false, greedy step {i - len(fixed)}")
                ok = False
                break
    ok &= folder_refusals(folder)
    print(f"{'ok' if ok else 'FAILED':6} Qwen3MoeForCausalLM folder: = its GGUF bit for bit; "
          "norm_topk_prob false = the reference without renormalizing; broken ones refused")
    return ok


def folder_refusals(folder):
    """config.json or an expert tensor broken: one line, exit 4."""
    from safetensors.numpy import load_file, save_file
    ok = True
    cfg_path = os.path.join(folder, "config.json")
    st_path = os.path.join(folder, "model.safetensors")
    with open(cfg_path) as f:
        cfg = json.load(f)
    weights = load_file(st_path)
    bin_ = os.environ.get("IGNITE_BIN", "build/ignite")
    gate0 = "model.layers.1.mlp.experts.5.gate_proj.weight"
    cases = [
        ("num_experts_per_tok over num_experts", dict(num_experts_per_tok=9), None,
         "'num_experts_per_tok' must be a whole number from 1 to 8"),
        ("decoder_sparse_step 2", dict(decoder_sparse_step=2), None,
         "dense layers among the experts'"),
        ("mlp_only_layers", dict(mlp_only_layers=[0]), None, "dense layers among the experts'"),
        ("an expert missing", {}, lambda w: w.pop(gate0),
         f"tensor '{gate0}' is missing (config.json says num_experts 8)"),
        ("an expert's shape", {}, lambda w: w.update({gate0: w[gate0][:64]}),
         f"tensor '{gate0}' in 'model.safetensors' is not [96, 128]"),
    ]
    for what, cfg_edit, w_edit, needle in cases:
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, **cfg_edit), f)
        w = dict(weights)
        if w_edit:
            w_edit(w)
        save_file(w, st_path)
        r = subprocess.run([bin_, "info", "-m", folder], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 4 or len(lines) != 1 or needle not in r.stderr or r.stdout:
            print(f"FAIL folder, {what}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
            ok = False
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_moe.py FORWARD_DUMP")
    tool = sys.argv[1]
    failed = 0
    rng = np.random.default_rng(45)
    with tempfile.TemporaryDirectory() as tmp:
        for qtype, tie in (("F16", False), ("Q4_K_M", False), ("F16", True)):
            path = os.path.join(tmp, f"moe-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, seed=45, arch="qwen3moe")
            if tie:
                tie_router_rows(path)
            ref = RefModel(path)
            prompt = [int(t) for t in rng.integers(0, ref.n_vocab, 40)]
            fixed = [int(t) for t in rng.integers(0, ref.n_vocab, 2)]
            name = f"qwen3moe tiny {qtype}" + (", router rows 0 = 1" if tie else "")
            failed += not against_reference(ref, tool, path, name, prompt, fixed, 6, tmp)
            if tie and not ref.moe_exact_ties:
                print(f"FAIL {name}: no exact tie at the top-k edge to check")
                failed += 1
            if tie:
                continue
            if qtype == "Q4_K_M":
                failed += not int8_against_reference(RefModel(path), tool, path, name, prompt,
                                                     fixed, 6, tmp)
            paths = (True,) if qtype == "F16" else (True, False)
            failed += not invariance(tool, path, name, prompt, fixed, 3, tmp, paths)
        failed += not folder_case(tool, tmp)
    print(f"test_moe: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
