"""tests/cpu/test_deltanet.py: the CPU forward of a Qwen3.5 hybrid (qwen35:
gated DeltaNet layers, backend/cpu_deltanet.c, and gated attention) against
the fp64 numpy reference written from transformers' recurrent form, token
by token (tests/cpu/ref_deltanet.py, weights dequantized by the gguf
package), on bench/random_gguf.py's qwen35 `tiny` shape (3 DeltaNet layers
of 2 key and 4 value heads, then 1 gated attention layer) in F16 and
Q4_K_M.

- Exact path: a 150-token prompt in one step (the chunked form: chunks of
  64, 64 and 22 rows, the state carried between them), 2 fixed and 6 greedy
  decode steps (the recurrent step): logits within 1e-4 relative of the
  reference at every step, greedy tokens equal; the logits not flat.
- Int8 path (Q4_K_M): NMSE <= 1e-3, relative <= 4e-2, the same top token.
- Cuts (exact path; Q4_K_M also int8): the prompt in steps of 64, of 37, 50 and
  64+13, of 7, of 100 rows and one row a step gives the whole prompt's
  DeltaNet states and every prompt row's and decode step's logits bit for
  bit (a step ending inside a chunk keeps a checkpoint; the next runs the
  chunk again whole; a partial chunk's outputs are its rows' bits in the
  whole chunk); with
  IGNITE_DELTANET=recurrent (every row of the 150-row step by the
  recurrent step) within 2e-5 relative (float32 sums in another order),
  the same greedy tokens.
- Every instruction set's kernels (backend/cpu_deltanet_lanes.h) give the
  same bits: IGNITE_SIMD=avx2 (the AVX2 set, 8-float vectors) and =scalar
  (the baseline set) the uncapped run's logits (the AVX-512 set where the CPU
  has it; else the AVX2 set, which the reference check above then holds),
  F16, exact path, the 150-row prompt and 6 decode steps; the trace names
  the set each ran.
- The chunked form runs: IGNITE_DELTANET_TRACE names the form of each
  sequence's rows in each DeltaNet layer: the 150-row step "chunked 3" in
  all 3 layers, each decode row "recurrent 1".
- The engine (with llama.cpp's qwen35 vocabulary, models/ggml-vocab-qwen35.gguf
  of scripts/fetch-model.sh llama-src; skipped without it): `ignite batch`
  of 4 greedy requests gives the same texts one at a time (-P 1) as 4 at
  once in steps of 5 or 9 rows (each sequence's state in its own slot); a
  prompt saved with --save-kv and continued with --load-kv gives the text of
  the whole prompt run at once (the file carries the DeltaNet state); --lookup
  is refused in one line, exit 2 (a recurrent state cannot roll back).
- The exact path on 3 key and 9 value heads (a 70-token prompt and 8 decode
  steps) within 1e-4 relative of the reference: the heads' sums of squares
  in groups of four and a rest.
- Bad files: value heads not a multiple of key heads, a missing ssm key, a
  missing DeltaNet weight: one line naming it, exit 4 (`ignite info`).
Under the sanitizers the cuts run on the F16 file only (17 forward_dump runs of the normal
build's 33; the Q4_K_M file's cuts run the same DeltaNet code beside other matmuls).
Usage: test_deltanet.py FORWARD_DUMP IGNITE
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from bench_gguf import random_gguf  # noqa: E402
import randgguf_qwen35  # noqa: E402
from igtest import llama_vocab, sanitized  # noqa: E402
from ref_deltanet import Qwen35Ref  # noqa: E402
from int8_check import int8_steps_match  # noqa: E402

BOUND = 1e-4
CHUNK_BOUND = 2e-5


def dump(tool, path, prompt, fixed, n_greedy, out, exact=True, opts=(), env_extra=None):
    env = dict(os.environ, IGNITE_MATMUL="exact" if exact else "int8")
    env.update(env_extra or {})
    cmd = [tool, "-m", path, "-o", out, "-g", str(n_greedy), "-d", ",".join(map(str, fixed)),
           "-t", "2", *opts, ",".join(map(str, prompt))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"forward_dump failed with status {res.returncode}")
    greedy = [int(t) for line in res.stdout.splitlines() if line.startswith("greedy:")
              for t in line.split()[1:]]
    return np.fromfile(out, dtype=np.float32), greedy, res.stderr


def against_reference(tool, path, name, prompt, fixed, tmp):
    ref = Qwen35Ref(path)
    flat, greedy, _ = dump(tool, path, prompt, fixed, 6, os.path.join(tmp, "l.bin"))
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    cache = ref.new_cache()
    worst, ratios = 0.0, []
    for i, toks in enumerate([prompt] + [[t] for t in fixed + greedy]):
        r = ref.forward(toks, cache)
        p = np.sort(np.exp(r - r.max()))[::-1]
        ratios.append(p[0] / p[1])
        err = np.abs(ours[i] - r).max() / np.abs(r).max()
        worst = max(worst, err)
        if err > BOUND:
            print(f"FAIL {name}, step {i}: relative error {err:.3e} > {BOUND:.0e}")
            return False, None
        if 0 <= i - len(fixed) < len(greedy):  # this step's logits chose a greedy token
            mine, theirs = greedy[i - len(fixed)], int(np.argmax(r))
            if mine != theirs and (r[theirs] - r[mine]) / np.abs(r).max() > BOUND:
                print(f"FAIL {name}, greedy step {i - len(fixed)}: ours {mine}, reference "
                      f"{theirs}")
                return False, None
    flat_ratio = float(np.median(ratios))
    if flat_ratio < 1.3:
        print(f"FAIL {name}: logits nearly flat (median top-1/top-2 {flat_ratio:.2f})")
        return False, None
    print(f"ok     {name}: {1 + len(fixed) + len(greedy)} steps, worst relative error "
          f"{worst:.2e}, median top-1/top-2 {flat_ratio:.2f}, greedy {greedy}")
    return True, ref


def int8_against_reference(tool, path, name, ref, prompt, fixed, tmp):
    flat, greedy, _ = dump(tool, path, prompt, fixed, 6, os.path.join(tmp, "q.bin"), exact=False)
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    return int8_steps_match(ours, ref, [prompt] + [[t] for t in fixed + greedy], name)


def chunk_sizes(tool, path, name, prompt, fixed, tmp, paths=(True,)):
    """The prompt in steps of any size gives the whole prompt's state (-s:
    every DeltaNet layer's, after the prompt) and logits of every prompt row
    (-a) and decode step bit for bit: a step that ends inside a 64-row chunk
    keeps a checkpoint, and the next runs that chunk again whole from it
    (backend/cpu_deltanet.c). The cut chunk's rows keep the outputs their
    first step gave them (the next step does not write them): each row's
    logits equal to the whole prompt's say a partial chunk's outputs are
    its rows' bits in the whole chunk. Without the checkpoint (the next
    step going on from the cut state) every cut but 64 differed.
    `paths`: True the exact path, False the int8 one (on F16 weights the
    int8 path's products depend on a step's row count under 32 rows, in a
    dense llama file too: not the DeltaNet's, so the Q4_K_M file's only)."""
    ok, worst = True, 0.0
    for exact in paths:
        path_name = "exact" if exact else "int8"
        st0 = os.path.join(tmp, "s0.bin")
        base, gb, _ = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "c0.bin"),
                           exact=exact, opts=["-s", st0, "-a"])
        state = np.fromfile(st0, dtype=np.uint8)
        cases = [("steps of 64 rows", ["-c", "64"]),
                 # one thread: the convolution's items 128 channels wide where
                 # two threads take 64 (conv_width); the same bits
                 ("one thread", ["-t", "1"]),
                 ("steps of 37, 50, 64+13 rows", ["-c", "37,50,77"]),
                 ("steps of 7 rows", ["-c", "7"]),
                 ("steps of 100 rows", ["-c", "100"]),
                 ("one row a step", ["-c", "1"])]
        for label, opts in cases:
            st1 = os.path.join(tmp, "s1.bin")
            lg, g, _ = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "c1.bin"),
                            exact=exact, opts=[*opts, "-s", st1, "-a"])
            same_state = np.array_equal(np.fromfile(st1, dtype=np.uint8), state)
            if not np.array_equal(lg, base) or g != gb or not same_state:
                vocab = randgguf_qwen35.SHAPES["tiny"]["vocab"]
                row = int(np.argmax(lg != base)) // vocab if lg.shape == base.shape else -1
                print(f"FAIL {name}, {path_name}: {label}: logits differ from the whole prompt's "
                      f"by {np.abs(lg - base).max():.3e} (first in row {row}), states "
                      f"{'equal' if same_state else 'differ'}, "
                      f"greedy {g} vs {gb}: every cut must give the same bits")
                ok = False
    # the recurrent form on every row: other sums, within rounding
    lg, g, _ = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "c1.bin"),
                    env_extra={"IGNITE_DELTANET": "recurrent"})
    base, gb, _ = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "c0.bin"))
    worst = np.abs(lg.astype(np.float64) - base).max() / np.abs(base).max()
    if worst > CHUNK_BOUND or g != gb:
        print(f"FAIL {name}: IGNITE_DELTANET=recurrent: relative {worst:.3e} from the chunked "
              f"form (> {CHUNK_BOUND:.0e}?), greedy {g} vs {gb}")
        ok = False
    print(f"{'ok' if ok else 'FAILED':6} {name}: steps of 64, 37/50/77, 7, 100 and 1 rows and "
          f"one thread = the whole prompt bit for bit (states, every row's logits, "
          f"{'exact and int8' if len(paths) > 1 else 'exact'}); the recurrent form within "
          f"{worst:.2e} relative, the same greedy tokens")
    return ok


def instruction_sets(tool, path, name, prompt, fixed, tmp):
    """IGNITE_SIMD=avx2 and =scalar against the uncapped run, bit for bit
    (cpu_deltanet.c's dn_kernels_here picks the set; each element's
    operations are the same in every set). The exact path: the int8 path's
    scalar products round otherwise (not the DeltaNet's)."""
    env = {"IGNITE_DELTANET_TRACE": "1", "IGNITE_SIMD": ""}  # "": no cap
    base, gb, err = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "i0.bin"),
                         env_extra=env)

    def set_of(err):
        sets = {ln.split()[-1] for ln in err.splitlines() if ln.startswith("deltanet kernels:")}
        return sets.pop() if len(sets) == 1 else f"{sorted(sets)}"

    ok, seen = True, [f"uncapped {set_of(err)}"]
    for isa, want in (("avx2", ("avx2", "baseline")), ("scalar", ("baseline",))):
        lg, g, err = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "i1.bin"),
                          env_extra=dict(env, IGNITE_SIMD=isa))
        got = set_of(err)
        seen.append(f"{isa} {got}")
        if got not in want or not np.array_equal(lg, base) or g != gb:
            print(f"FAIL {name}: IGNITE_SIMD={isa} ran the {got} set: logits "
                  f"{np.abs(lg - base).max():.3e} from the uncapped run's, greedy {g} vs {gb}: "
                  f"every set must give the same bits")
            ok = False
    print(f"{'ok' if ok else 'FAILED':6} {name}: each instruction set's DeltaNet kernels the "
          f"same bits ({', '.join(seen)})")
    return ok


def chunked_form_runs(tool, path, prompt, tmp):
    _, _, err = dump(tool, path, prompt, [3], 1, os.path.join(tmp, "t.bin"),
                     env_extra={"IGNITE_DELTANET_TRACE": "1"})
    lines = [ln.split() for ln in err.splitlines() if ln.startswith("deltanet:")]
    prefill = [ln for ln in lines if ln[8] == str(len(prompt))]
    decode = [ln for ln in lines if ln[8] == "1"]
    ok = (len(prefill) == 3 and all(ln[9:11] == ["chunked", "3"] for ln in prefill)
          and len(decode) == 3 * 2 and all(ln[9:11] == ["recurrent", "1"] for ln in decode))
    print(f"{'ok' if ok else 'FAIL':6} the 150-row step runs the chunked form (3 chunks) in "
          f"each DeltaNet layer, decode rows the recurrent step"
          + ("" if ok else f": {err[-800:]}"))
    return ok


def bad_files(ignite, tmp):
    path = os.path.join(tmp, "bad.gguf")
    keys = randgguf_qwen35.keys
    cases = []
    randgguf_qwen35.SHAPES["bad"] = dict(randgguf_qwen35.SHAPES["tiny"], dn_v=3)
    cases.append(("value heads", lambda: random_gguf.write(path, "bad", "F16", 1, "qwen35"),
                  "not a multiple"))

    def no_conv_key():
        randgguf_qwen35.keys = lambda *a: [k for k in keys(*a) if b"ssm.conv_kernel" not in k]
        try:
            random_gguf.write(path, "tiny", "F16", 1, "qwen35")
        finally:
            randgguf_qwen35.keys = keys
    cases.append(("missing key", no_conv_key, "ssm.conv_kernel' is missing"))
    tensors = randgguf_qwen35.tensors

    def no_weight():
        randgguf_qwen35.tensors = lambda *a: [t for t in tensors(*a)
                                              if t[0] != "blk.1.ssm_beta.weight"]
        try:
            random_gguf.write(path, "tiny", "F16", 1, "qwen35")
        finally:
            randgguf_qwen35.tensors = tensors
    cases.append(("missing weight", no_weight, "blk.1.ssm_beta.weight' is missing"))
    return refused(ignite, path, cases, "qwen35")


def refused(ignite, path, cases, arch):
    """Each case (label, make, words) writes a bad file at path, which `ignite
    info` must refuse with one line holding words, exit 4."""
    ok = True
    for label, make, words in cases:
        make()
        res = subprocess.run([ignite, "info", "-m", path], capture_output=True, text=True)
        lines = res.stderr.strip().splitlines()
        if res.returncode != 4 or len(lines) != 1 or words not in lines[0]:
            print(f"FAIL bad file ({label}): exit {res.returncode}, stderr {res.stderr!r}")
            ok = False
    print(f"{'ok' if ok else 'FAILED':6} bad {arch} files: one line, exit 4")
    return ok


def ignite_text(ignite, args, stdin=None):
    res = subprocess.run([ignite, *args], capture_output=True, text=True, input=stdin)
    return res.returncode, res.stdout, res.stderr


def engine_cases(ignite, tmp):
    vocab = llama_vocab("qwen35")
    if not vocab:
        print("skip   engine cases: no models/ggml-vocab-qwen35.gguf (fetch-model.sh llama-src)")
        return True
    path = os.path.join(tmp, "qwen35-vocab.gguf")
    random_gguf.write(path, "tiny", "Q4_K_M", seed=5, arch="qwen35", vocab_from=vocab)
    ok = True
    reqs = "".join(json.dumps({"prompt": p, "n_predict": 12}) + "\n" for p in (
        "The quick brown fox jumps over", "Once upon a time in a land far away there lived",
        "1, 2, 3, 4,", "Hello"))
    texts = {}
    for label, opts in (("-P 1", ["-P", "1"]), ("-P 4 -b 5", ["-P", "4", "-b", "5"]),
                        ("-P 4 -b 9", ["-P", "4", "-b", "9"])):
        rc, out, err = ignite_text(ignite, ["batch", "-m", path, "--temp", "0", "-t", "2",
                                            *opts], reqs)
        objs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        texts[label] = {o.get("id"): o.get("text") for o in objs if "text" in o}
        if rc != 0 or len(texts[label]) != 4:
            print(f"FAIL batch {label}: exit {rc}, {len(texts[label])} texts: {err[-300:]}")
            ok = False
    if ok and not (texts["-P 1"] == texts["-P 4 -b 5"] == texts["-P 4 -b 9"]):
        print(f"FAIL batch: texts differ with the batch: {texts}")
        ok = False
    kv = os.path.join(tmp, "a.kv")
    head, tail = "Once upon a time in a land far away", " there lived a king"
    r1 = ignite_text(ignite, ["run", "-m", path, "-p", head, "--prompt-only", "--save-kv", kv])
    r2 = ignite_text(ignite, ["run", "-m", path, "--load-kv", kv, "-p", tail, "-n", "10",
                              "--temp", "0"])
    r3 = ignite_text(ignite, ["run", "-m", path, "-p", head + tail, "-n", "10", "--temp", "0"])
    if r1[0] or r2[0] or r3[0] or r2[1] != r3[1] or not r3[1]:
        print(f"FAIL --save-kv / --load-kv: {r2[1]!r} vs the whole prompt's {r3[1]!r} "
              f"({r1[2][-200:]} {r2[2][-200:]})")
        ok = False
    rc, _, err = ignite_text(ignite, ["run", "-m", path, "-p", head, "-n", "4", "--lookup"])
    lines = err.strip().splitlines()
    if rc != 2 or len(lines) != 1 or "recurrent state" not in lines[0]:
        print(f"FAIL --lookup on qwen35: exit {rc}, {err!r}")
        ok = False
    print(f"{'ok' if ok else 'FAILED':6} engine: batch texts the same at -P 1 and 4 (steps of "
          "5, 9 rows), --load-kv continues the saved state, --lookup refused")
    return ok


def main():
    tool, ignite = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(5)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for qtype in ("F16", "Q4_K_M"):
            path = os.path.join(tmp, f"qwen35-tiny-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, seed=5, arch="qwen35")
            vocab = randgguf_qwen35.SHAPES["tiny"]["vocab"]
            prompt = [int(t) for t in rng.integers(0, vocab, 150)]
            fixed = [int(t) for t in rng.integers(0, vocab, 2)]
            name = f"qwen35 tiny {qtype}"
            good, ref = against_reference(tool, path, name, prompt, fixed, tmp)
            ok &= good
            if good and qtype == "Q4_K_M":
                ok &= int8_against_reference(tool, path, name, ref, prompt, fixed, tmp)
            # (the sanitizers, ~30x slower: the cuts on F16 alone; Q4_K_M's run the
            # same DeltaNet code, its checkpoints and states, beside other matmuls)
            if not (sanitized() and qtype == "Q4_K_M"):
                ok &= chunk_sizes(tool, path, name, prompt, fixed, tmp,
                                  (True, False) if qtype == "Q4_K_M" else (True,))
            if qtype == "F16":
                ok &= chunked_form_runs(tool, path, prompt, tmp)
                ok &= instruction_sets(tool, path, name, prompt, fixed, tmp)
        # 3 key and 9 value heads (2 DeltaNet layers then 1 attention layer, F16): the
        # heads' sums of squares go four heads at a time and then one by one
        # (cpu_deltanet.c's sumsq_rows): q|k's 6 heads a group and a rest, the gated
        # norm's 9 two groups and a rest (the tiny's 4 and 4 are one group each)
        randgguf_qwen35.SHAPES["heads9"] = dict(randgguf_qwen35.SHAPES["tiny"], layers=3,
                                                every=3, dn_k=3, dn_v=9)
        path = os.path.join(tmp, "qwen35-heads9-F16.gguf")
        random_gguf.write(path, "heads9", "F16", seed=7, arch="qwen35")
        prompt = [int(t) for t in rng.integers(0, vocab, 70)]
        ok &= against_reference(tool, path, "qwen35 heads9 F16", prompt, fixed, tmp)[0]
        ok &= engine_cases(ignite, tmp)
        ok &= bad_files(ignite, tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
