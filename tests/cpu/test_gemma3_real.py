"""tests/cpu/test_gemma3_real.py: Gemma 3 270M (Q4_K_M, real weights) on the
CPU forward, against the fp64 numpy reference (tests/cpu/ref_forward.py,
written from transformers' Gemma3 code) and, on the fast path, against the
exact one. The prompts are long enough to cross the local layers' window of
512 positions: in prefill chunks that straddle it, and in decode steps past
it.

  - exact path (IGNITE_MATMUL=exact): logits within 1e-4 relative of the
    reference at every step, greedy tokens equal (test_forward_ref.check_case);
  - the default int8 path against the exact one on the same steps: NMSE
    <= 2e-3, max |fast - exact| / max |exact| <= 4e-2 (its own error with
    a margin of a quarter; a truncating quantizer fails), and the same top-1
    unless the exact top two are within that error (as test_fast_forward);
    and not depending on the chunking: 100 tokens in chunks of 7 and in one
    agree within 1e-5 of max |logit| (Q5_0 and Q8_0 give a token the same
    sums in any block; the tiles of the K formats too);
  - `ignite info` names the file's features (window 512 on 15 of 18
    layers, local base 10000, GELU, Q/K and post norms).
Usage: test_gemma3_real.py FORWARD_DUMP   (exits 77 without the model:
make fetch-model)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from igtest import gemma3_path  # noqa: E402
from ref_forward import RefModel  # noqa: E402
from test_forward_ref import check_case  # noqa: E402
from igtest import sanitized  # noqa: E402

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
SKIP = 77

# Prose for the prompts (written for this test): the first ~600 tokens.
TEXT = (
    "The lighthouse keeper's log for the winter of that year survives in a single "
    "water-stained volume. Its entries are short at first: the wind from the north-east, "
    "the lamp trimmed at dusk, a ship sighted at noon and lost again in the haze. By "
    "December they grow longer. The keeper writes about the supply boat that did not come, "
    "about rationing the oil so that the light would burn through the longest nights, and "
    "about the gulls that gathered on the gallery rail as if they, too, were waiting for "
    "something. He counts the tins in the storeroom twice a week. He notes the barometer "
    "falling and rising and falling again. On the twelfth he records that the fog was so "
    "thick he could not see the rocks below the tower, and that he rang the bell every two "
    "minutes from midnight until the grey light of morning, his arms aching, his breath "
    "freezing in his beard. There is a gap of four days after that. When the entries "
    "resume, the handwriting is careful and small, as if the writer were afraid of wasting "
    "ink. The boat has come at last. It brought flour, coffee, lamp oil, two letters and a "
    "newspaper three weeks old. He reads the newspaper from the first page to the last, "
    "including the shipping notices and the advertisements for patent medicines, and he "
    "copies into the log a short article about a comet that astronomers expect to see in "
    "the spring. In January the weather turns clear and bitterly cold. The sea freezes in "
    "the sheltered cove for the first time in living memory, and the keeper walks out onto "
    "the ice to look back at the tower from below, something he has never been able to do "
    "before. He describes the tower as smaller than he had imagined it, a white pencil "
    "against a sky so blue it hurt to look at. He measures the thickness of the ice with a "
    "hand drill and finds it safe. He writes that he stood there a long time. In February "
    "the ice breaks up in a single night with a noise like cannon fire, and the entries "
    "return to wind, lamp and ships. The last page is dated the first of March. The keeper "
    "notes that the days are lengthening, that he has seen the first curlews returning to "
    "the marsh, and that the oil will last. Below the final entry, in a different hand, "
    "someone has added a single line: relieved of duty, in good health, the light never "
    "failed. Historians who have studied the log disagree about almost everything in it. "
    "Some read it as a record of endurance, others as the diary of a man who found, in "
    "isolation, a kind of freedom he could not name. The keeper himself left no other "
    "writing. What is certain is that the tower still stands, that the lamp was electrified "
    "long ago, and that on clear winter evenings visitors walk out along the breakwater to "
    "watch the beam sweep across the water, counting the seconds between flashes the way "
    "he once counted the tins in his storeroom, one by one, until the night was over. "
    "Years later his granddaughter found the volume in a trunk, wrapped in oilcloth and "
    "tied with tarred string, and gave it to the county archive, where it")

# The int8 path's own error on these steps: worst NMSE 1.59e-3, max rel
# 3.14e-2 (AVX-512 VNNI); an activation quantizer that truncates instead of
# rounding to nearest gives 2.51e-3 and 4.69e-2, which test_fast_forward's
# looser bounds (3e-2, 0.15: a model of other scales) also catch on SmolLM2.
NMSE_BOUND = 2.0e-3
MAX_REL_BOUND = 4.0e-2


def tokenize(path, text):
    r = subprocess.run([BIN, "tokenize", "-m", path, "--json", "-p", text], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"ignite tokenize failed: {r.stderr}")
    return [int(x) for x in r.stdout.strip()[1:-1].split(",")]


def dump(tool, path, ids, opts, fixed, exact, out):
    env = dict(os.environ, IGNITE_MATMUL="exact" if exact else "fast")
    cmd = [tool, "-m", path, "-o", out, "-d", ",".join(map(str, fixed))] + opts + \
        [",".join(map(str, ids))]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"forward_dump failed ({r.returncode}): {r.stderr}")
    return np.fromfile(out, dtype=np.float32).reshape(1 + len(fixed), -1).astype(np.float64)


def check_info(path):
    r = subprocess.run([BIN, "info", "-m", path, "--json"], capture_output=True, text=True,
                       timeout=120)
    f = json.loads(r.stdout)["features"] if r.returncode == 0 else {}
    want = {"sliding_window": 512, "sliding_window_layers": 15, "rope_base_local": 10000,
            "ffn_activation": "gelu_tanh", "qk_norm": True, "post_norms": True,
            "rope_scaling": "none"}
    bad = {k: (f.get(k), v) for k, v in want.items() if f.get(k) != v}
    print(("ok    " if not bad else "FAILED") + f" info features {bad or ''}")
    return not bad


def check_fast(tool, path, ids, opts, fixed, tmp):
    out = os.path.join(tmp, "l.f32")
    exact = dump(tool, path, ids, opts, fixed, True, out)
    fast = dump(tool, path, ids, opts, fixed, False, out)
    ok, worst = True, [0.0, 0.0]
    for i, (e, f) in enumerate(zip(exact, fast)):
        nmse = np.sum((f - e) ** 2) / np.sum(e ** 2)
        rel = np.abs(f - e).max() / np.abs(e).max()
        worst = [max(worst[0], nmse), max(worst[1], rel)]
        top = np.argsort(-e)[:2]
        tie = (e[top[0]] - e[top[1]]) <= np.abs(f - e).max()
        same = int(np.argmax(f)) == int(top[0]) or tie
        if nmse > NMSE_BOUND or rel > MAX_REL_BOUND or not same:
            ok = False
            print(f"FAIL fast path step {i}: NMSE {nmse:.2e}, max rel {rel:.2e}, top-1 "
                  f"{int(np.argmax(f))} vs {int(top[0])}")
    print(("ok    " if ok else "FAILED") + f" fast path vs exact: {len(ids)} prompt tokens, "
          f"{len(fixed)} decode steps, worst NMSE {worst[0]:.2e}, max rel {worst[1]:.2e}")
    one = dump(tool, path, ids[:100], [], [], False, out)[0]
    sevens = dump(tool, path, ids[:100], ["-c", "7"], [], False, out)[0]
    d = np.abs(one - sevens).max() / np.abs(one).max()
    print(("ok    " if d <= 1e-5 else "FAILED") + f" fast path in chunks of 7 vs one: {d:.1e}")
    return ok and d <= 1e-5


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_gemma3_real.py FORWARD_DUMP")
    tool, path = sys.argv[1], gemma3_path()
    if not os.path.exists(path):
        print(f"skip: no Gemma 3 270M at {path} (make fetch-model)")
        return SKIP
    ids = tokenize(path, TEXT)
    print(f"prompt: {len(ids)} tokens")
    ok = check_info(path)
    if sanitized():  # 30x slower: one short case crossing a small prefix of the window
        cases = [("gemma3 270M, 40 tokens", ids[:40], ["-c", "16"], [], 2, 1e-4)]
    else:
        # (prefill queries past the window in the last chunk, decode steps past it)
        cases = [
            ("gemma3 270M, 600 tokens in chunks of 256 (across the window)", ids[:600],
             ["-c", "256"], ids[600:604], 8, 1e-4),
        ]
    t0 = time.time()
    ref = RefModel(path)
    print(f"reference weights dequantized in {time.time() - t0:.1f} s")
    env_exact = os.environ.get("IGNITE_MATMUL")
    os.environ["IGNITE_MATMUL"] = "exact"
    with tempfile.TemporaryDirectory() as tmp:
        for name, prompt, opts, fixed, n_greedy, bound in cases:
            ok &= check_case(ref, tool, path, name, prompt, opts, fixed, n_greedy, bound, tmp)
        if env_exact is None:
            del os.environ["IGNITE_MATMUL"]
        else:
            os.environ["IGNITE_MATMUL"] = env_exact
        if not sanitized():
            ok &= check_fast(tool, path, ids[:600], ["-c", "200"], ids[600:606], tmp)
    print(f"test_gemma3_real: {'ok' if ok else 'FAILED'}, {time.time() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
