"""tests/cpu/test_fast_forward.py: the default (int8-activation) matmul path
against the exact f32 path on the real model, which test_forward_ref ties to
the fp64 numpy reference within 1e-4; so this bounds the fast path's error
against the reference.

Why not 1e-4: int8 activations round each element by up to d/2 with
d = max|block| / 127. SmolLM2's residual stream has outliers in the
thousands; a block holding one quantizes its small neighbours coarsely (to 0
when they are below d/2), which is the price every int8-activation engine
pays (llama.cpp's q8_0/q8_1/q8_K activations do the same). Over 30 layers
the logits end up about 1-20% off in RMS terms: measured on these cases,
NMSE (sum((fast - exact)^2) / sum(exact^2)) up to 4.0e-2 and
max|fast - exact| / max|exact| up to 6.8e-2. The kernels themselves are
checked to 1e-5 against fp64 on the same quantized inputs (test_qmatmul);
this test catches what integration can break (a wrong buffer, stride or
scale gives NMSE near 1) and checks that generation keeps its choices.
Checked on every step (a prefill and fixed decode ids, so both paths see the
same history):
  - NMSE <= 6e-2 (llama.cpp's test-backend-ops allows 5e-4 for one op; a
    30-layer forward with outlier blocks is chaotic in it: a change of 1e-6
    relative anywhere moves which small activations round to 0, and a step's
    NMSE with it. The fused attention of the int8 path, 1e-12 NMSE from the
    exact one's logits on exact matmuls, moved the chat case's last step
    from 2.1e-2 to 4.0e-2 and the story's second from 2.0e-2 to 8.7e-4, so
    the bound has 1.5x headroom over the worst seen, not more; a wrong
    buffer, stride or scale gives NMSE near 1);
  - max |fast - exact| / max |exact| <= 0.15;
  - the same top-1 token unless the exact top two are closer than the
    observed max error (a near tie may flip).
And the fast path's logits must not depend on how the prompt is chunked: a
token's matmuls give the same sums in a block of 1-7 tokens as in a larger
one (the packed GEMV and the GEMM of ops/qmatmul_x86.h), so the essay in
chunks of 8 (a last chunk of 4) and in one chunk agree to within 1e-5 of
max |logit| (they were 1.4e-2 apart when small blocks took other kernels).
Usage: test_fast_forward.py FORWARD_DUMP   (exits 77 when the model is absent)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_forward_ref import CHAT, ESSAY, STORY, model_path  # noqa: E402
from igtest import sanitized  # noqa: E402

SKIP = 77
NMSE_BOUND = 6e-2
MAX_REL_BOUND = 0.15

CASES = [
    ("chat", CHAT, [], [13, 30, 1780, 314, 260]),
    ("story in chunks of 4", STORY, ["-c", "4"], [28, 665, 436]),
    ("essay", ESSAY, ["-t", "1"], [13, 30]),
]


# Sanitizer builds are ~30x slower: one short case there.
SANITIZED_CASES = [("chat", CHAT[:8], [], [13])]


def run(dump, model, ids, opts, decode, exact):
    env = dict(os.environ)
    env["IGNITE_MATMUL"] = "exact" if exact else "fast"
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        cmd = [dump, "-m", model, "-o", out.name] + opts
        if decode:
            cmd += ["-d", ",".join(map(str, decode))]
        cmd.append(",".join(map(str, ids)))
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        return np.fromfile(out.name, dtype=np.float32)


def main():
    dump = sys.argv[1]
    model = model_path()
    if not model or not os.path.exists(model):
        print("model absent: skipped")
        return SKIP
    failures = 0
    worst = (0.0, 0.0)
    for name, ids, opts, decode in SANITIZED_CASES if sanitized() else CASES:
        fast = run(dump, model, ids, opts, decode, exact=False).astype(np.float64)
        exact = run(dump, model, ids, opts, decode, exact=True).astype(np.float64)
        steps = 1 + len(decode)
        fast = fast.reshape(steps, -1)
        exact = exact.reshape(steps, -1)
        for s in range(steps):
            f, e = fast[s], exact[s]
            nmse = float(np.sum((f - e) ** 2) / np.sum(e ** 2))
            max_abs = float(np.max(np.abs(f - e)))
            max_rel = max_abs / float(np.max(np.abs(e)))
            worst = (max(worst[0], nmse), max(worst[1], max_rel))
            top = np.argsort(e)[::-1][:2]
            margin = e[top[0]] - e[top[1]]
            same_top = int(np.argmax(f)) == int(top[0])
            ok = nmse <= NMSE_BOUND and max_rel <= MAX_REL_BOUND and (same_top or margin < max_abs)
            line = (f"{name} step {s}: nmse {nmse:.2e} max rel {max_rel:.2e} "
                    f"top-1 {'same' if same_top else 'differs'} (exact margin {margin:.3f})")
            print(("ok   " if ok else "FAIL ") + line)
            failures += not ok
    if not sanitized():
        whole = run(dump, model, ESSAY, [], [], exact=False).astype(np.float64)
        chunked = run(dump, model, ESSAY, ["-c", "8"], [], exact=False).astype(np.float64)
        rel = float(np.max(np.abs(whole - chunked)) / np.max(np.abs(whole)))
        ok = rel <= 1e-5
        print(("ok   " if ok else "FAIL ") + f"essay in chunks of 8 vs one chunk: max rel {rel:.2e}")
        failures += not ok
    print(f"worst: nmse {worst[0]:.2e} (bound {NMSE_BOUND:g}), max rel {worst[1]:.2e} "
          f"(bound {MAX_REL_BOUND:g})")
    print(f"test_fast_forward: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
