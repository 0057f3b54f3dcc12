"""tests/cpu/test_forward_ref.py: ignite's CPU forward against the fp64 numpy
reference (tests/cpu/ref_forward.py) on the real model.

For each case, forward_dump prefills fixed token ids (whole or in chunks),
runs decode steps on fixed ids and then greedy steps, and writes the logits of
every step. The reference runs the same tokens. Checked at every step:
  - relative error max|ours - ref| / max|ref| <= 1e-4 (f32 KV cache) or the
    looser bound given for an f16 cache;
  - each greedy token (our argmax) is the reference's argmax given the same
    history, so our greedy sequence is the reference's greedy sequence. An
    exact tie in the reference (top two within the error bound) is reported,
    not failed. The reference is fed our tokens, so a tie cannot derail the
    steps after it.
Usage: test_forward_ref.py FORWARD_DUMP   (exits 77 when the model is absent)
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_forward import RefModel  # noqa: E402
from igtest import sanitized, model_path

SKIP = 77

# Token ids of the SmolLM2 vocabulary, fixed here so the test does not depend
# on the tokenizer: a chat turn, prose, code, and 108 tokens of an essay.
CHAT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 32075, 14542, 100, 198]
STORY = [6403, 1980, 253, 655, 28, 665, 436, 253, 1838, 8180, 3365, 14176, 617, 5732, 288]
CODE = [1604, 3987, 46477, 24, 94, 727, 2367, 342, 304, 2067, 216, 34, 42, 466, 5406, 304,
        2367, 5406]
ESSAY = [504, 1463, 282, 260, 7510, 1757, 5634, 281, 260, 35561, 2070, 28, 645, 28322, 45382,
         5276, 39245, 4718, 1502, 28, 2664, 29, 2542, 12923, 284, 253, 10091, 21665, 1757, 618,
         253, 817, 338, 856, 2690, 2905, 3112, 284, 44838, 30, 6993, 451, 10531, 28, 2905, 592,
         19309, 411, 1369, 28, 2007, 411, 19513, 1891, 281, 28868, 28, 284, 253, 2244, 4981, 856,
         1188, 2704, 288, 9199, 30, 378, 725, 1835, 2824, 5645, 1699, 1910, 42, 411, 260, 713,
         216, 33, 37, 32, 32, 28, 7510, 14402, 11548, 281, 540, 670, 827, 3822, 4199, 28, 284,
         5711, 282, 2905, 761, 719, 3281, 30, 21177, 7440, 338, 260, 1757, 4573]
RANDOM = [int(t) for t in np.random.default_rng(7).integers(0, 49152, 40)]

# name, prompt, forward_dump options, fixed decode ids, greedy steps, bound.
# 8 greedy steps a short prompt: its decode stays inside the first key tile of
# 64, where more steps only repeat the same kernels at one more position (the
# essay's decode runs past the tile; each reference step is an fp64 forward).
CASES = [
    ("chat", CHAT, [], [], 8, 1e-4),
    ("story", STORY, [], [], 8, 1e-4),
    ("code in chunks of 5", CODE, ["-c", "5"], [], 8, 1e-4),
    ("essay 108 tokens", ESSAY, [], [13, 30], 4, 1e-4),
    ("random ids, one thread", RANDOM, ["-t", "1", "-c", "16"], [0, 49151, 5], 0, 1e-4),
    ("one token", [1], [], [], 8, 1e-4),
    ("story, f16 KV cache", STORY, ["--f16"], [], 8, 3e-3),
]


# Sanitizer builds run the forward unvectorized and checked (~30x slower):
# there a few short cases cover the same code paths.
SANITIZED_CASES = [
    ("chat", CHAT, [], [], 2, 1e-4),
    ("code in chunks of 5", CODE[:12], ["-c", "5", "-t", "1"], [7], 1, 1e-4),
    ("story, f16 KV cache", STORY[:6], ["--f16"], [], 1, 3e-3),
]


def run_ours(tool, model, prompt, opts, fixed, n_greedy, out):
    cmd = [tool, "-m", model, "-o", out, "-g", str(n_greedy)] + opts
    if fixed:
        cmd += ["-d", ",".join(map(str, fixed))]
    cmd.append(",".join(map(str, prompt)))
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"forward_dump failed with status {res.returncode}: {' '.join(cmd)}")
    sys.stderr.write("  " + res.stderr.strip() + "\n")
    greedy = []
    for line in res.stdout.splitlines():
        if line.startswith("greedy:"):
            greedy = [int(t) for t in line.split()[1:]]
    return greedy


def describe(ours, ref, k=5):
    d = np.abs(ours - ref)
    idx = np.argsort(-d)[:k]
    return ", ".join(f"[{i}] ours {ours[i]:.6f} ref {ref[i]:.6f}" for i in idx)


def check_case(ref_model, tool, model, name, prompt, opts, fixed, n_greedy, bound, tmp):
    out = os.path.join(tmp, "logits.bin")
    greedy = run_ours(tool, model, prompt, opts, fixed, n_greedy, out)
    n_vocab = ref_model.n_vocab
    ours = np.fromfile(out, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    if len(ours) != 1 + len(fixed) + n_greedy or len(greedy) != n_greedy:
        print(f"FAIL {name}: expected {1 + len(fixed) + n_greedy} logit rows and "
              f"{n_greedy} greedy tokens, got {len(ours)} and {len(greedy)}")
        return False

    cache = ref_model.new_cache()
    steps = [("prefill", prompt)] + [(f"decode {t}", [t]) for t in fixed + greedy]
    ok, worst, ties = True, 0.0, 0
    for i, (what, toks) in enumerate(steps):
        ref = ref_model.forward(toks, cache)
        err = np.abs(ours[i] - ref).max() / np.abs(ref).max()
        worst = max(worst, err)
        if err > bound:
            print(f"FAIL {name}, step {i} ({what}): relative error {err:.3e} > {bound:.0e}: "
                  f"{describe(ours[i], ref)}")
            ok = False
            break
        if i >= len(fixed) and i - len(fixed) < n_greedy:
            ours_tok, ref_tok = greedy[i - len(fixed)], int(np.argmax(ref))
            if ours_tok != ref_tok:
                gap = (ref[ref_tok] - ref[ours_tok]) / np.abs(ref).max()
                if gap > bound:
                    print(f"FAIL {name}, greedy step {i - len(fixed)}: ours {ours_tok}, "
                          f"reference {ref_tok} (logits {ref[ours_tok]:.6f} vs "
                          f"{ref[ref_tok]:.6f})")
                    ok = False
                    break
                ties += 1
                print(f"  note {name}: greedy step {i - len(fixed)} is a tie in the reference "
                      f"(gap {gap:.1e})")
    status = "ok" if ok else "FAILED"
    print(f"{status:6} {name}: {len(prompt)} prompt tokens, {len(fixed)} fixed + "
          f"{n_greedy} greedy steps, worst relative error {worst:.2e}"
          + (f", {ties} tie" if ties else ""))
    return ok


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_forward_ref.py FORWARD_DUMP")
    tool = sys.argv[1]
    model = model_path()
    if not os.path.exists(model):
        print("skip: model not found (make fetch-model)")
        return SKIP
    t0 = time.time()
    ref_model = RefModel(model)
    print(f"reference weights dequantized in {time.time() - t0:.1f} s")
    cases = SANITIZED_CASES if sanitized() else CASES
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            failed += not check_case(ref_model, tool, model, *case, tmp)
    print(f"test_forward_ref: {len(cases)} cases, {failed} failed, {time.time() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
