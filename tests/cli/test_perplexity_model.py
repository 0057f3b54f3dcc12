"""tests/cli/test_perplexity_model.py: `ignite perplexity` on the real model:
- the exact path's perplexity and per-window figures against the fp64 numpy
  forward (tests/cpu/ref_forward.py, weights dequantized by the gguf package)
  over the same windows (2 windows of 64 tokens, the second half scored;
  32 under the sanitizers, whose forward is ~30x slower);
- the default int8 path against the exact path's base file: a small KL
  divergence and a high top-1 agreement (sanity bounds, not references);
- Ctrl-C after the first window: exit 130, the windows done reported, the base
  file cut to exactly them (its header and length), nothing partial left.
Exits 77 when the model is absent."""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from igtest import check, model_path, sanitized, summary  # noqa: E402
from ref_forward import RefModel  # noqa: E402

IGNITE = os.environ["IGNITE_BIN"]

TEXT = (
    "The lighthouse at the end of the harbour wall had been dark for eleven years when the "
    "new keeper arrived. She carried a canvas bag, a tin of paraffin and a notebook in which "
    "she had copied, in a small careful hand, the tables of tides for the whole of the coming "
    "winter. The harbour master looked at the notebook for a long time before he gave her the "
    "key. Nobody in the village could remember who had last climbed the hundred and twelve "
    "steps, and the door at the top was swollen with damp. It took her the rest of the "
    "afternoon to open it, and most of the evening to clean the great lens, which was furred "
    "with salt and the droppings of gulls. When the lamp was lit at last, a little after "
    "midnight, the fishermen on the quay stood up from their nets and watched the beam sweep "
    "once across the water, then again, as if the sea itself had opened an eye.\n")


def log_softmax(l):
    m = l.max(axis=-1, keepdims=True)
    return l - m - np.log(np.exp(l - m).sum(axis=-1, keepdims=True))


W = 32 if sanitized() else 64  # the window (-c)


def run(*args, **kw):
    return subprocess.run([IGNITE, "perplexity", *args], capture_output=True, timeout=900, **kw)


def main():
    model = model_path()
    if not os.path.exists(model):
        print(f"skipped: {model} is absent (make fetch-model)", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        toks = json.loads(subprocess.run([IGNITE, "tokenize", "-m", model, "-f", text, "--json",
                                          "--no-special"], capture_output=True).stdout)
        check(len(toks) >= 128, f"the text is {len(toks)} tokens")

        base = os.path.join(tmp, "exact.kl")
        r = run("-m", model, "-f", text, "-c", str(W), "--chunks", "2", "--exact", "--json",
                "--kl-divergence-base", base)
        obj = json.loads(r.stdout or b"{}")
        check(r.returncode == 0 and obj.get("windows") == 2, f"exact run: {r.returncode} {obj} "
              f"{r.stderr.decode()}")

        ref = RefModel(model)
        nll = []
        for c in range(2):
            win = toks[c * W:(c + 1) * W]  # SmolLM2 adds no BOS
            lp = log_softmax(ref.forward(win, ref.new_cache(), all_rows=True))
            nll.append([-lp[r, win[r + 1]] for r in range(W // 2, W - 1)])
            got = obj.get("per_window", [{}, {}])[c].get("ppl", 0)
            want = np.exp(np.mean(nll[c]))
            check(abs(got / want - 1) < 2e-4, f"window {c + 1}: PPL {got}, numpy fp64 {want}")
        allv = np.concatenate(nll)
        want = np.exp(allv.mean())
        want_err = want * np.sqrt((np.mean(allv ** 2) - allv.mean() ** 2) / (len(allv) - 1))
        check(abs(obj.get("ppl", 0) / want - 1) < 2e-4 and
              abs(obj.get("ppl_err", 0) / want_err - 1) < 2e-3,
              f"PPL {obj.get('ppl')} +/- {obj.get('ppl_err')}, numpy fp64 {want} +/- {want_err}")

        r = run("-m", model, "--kl-divergence-base", base, "--kl-divergence", "--json")
        kl = json.loads(r.stdout or b"{}")
        check(r.returncode == 0 and kl.get("matmul") == "int8", f"int8 run: {r.returncode} {kl}")
        check(0 < kl.get("kl_mean", 1) < 0.05 and kl.get("top1", 0) > 0.85,
              f"int8 vs exact: KL {kl.get('kl_mean')}, top-1 {kl.get('top1')}")

        # Ctrl-C after the first window's line
        long_text = os.path.join(tmp, "long.txt")
        with open(long_text, "w") as f:
            f.write(TEXT * 12)
        cut = os.path.join(tmp, "cut.kl")
        p = subprocess.Popen([IGNITE, "perplexity", "-m", model, "-f", long_text, "-c", str(W),
                              "-t", "1", "--kl-divergence-base", cut],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines = []
        for line in p.stdout:
            lines.append(line.decode())
            if line.split()[:1] == [b"1"]:
                p.send_signal(signal.SIGINT)
                break
        out, err = p.communicate(timeout=600)
        out = "".join(lines) + out.decode()
        done = [ln for ln in out.splitlines() if ln.startswith("interrupted: ")]
        check(p.returncode == 130 and done and "Final estimate: PPL" in out,
              f"Ctrl-C: exit {p.returncode}, {out!r} {err.decode()!r}")
        n_done = int(done[0].split()[1]) if done else 0
        if os.path.exists(cut):
            b = open(cut, "rb").read()
            n_ctx, n_vocab, n_chunk = struct.unpack("<iii", b[8:20])
            size = 20 + 4 * n_chunk * n_ctx + 2 * n_chunk * (W // 2 - 1) * (n_vocab + 4)
            check(n_chunk == n_done >= 1 and len(b) == size,
                  f"Ctrl-C: the file holds {n_chunk} windows, {len(b)} bytes (want {n_done}, "
                  f"{size})")
        else:
            check(False, "Ctrl-C: no base file was kept")
        check(not [f for f in os.listdir(tmp) if ".partial-" in f], "a partial file was left")
    return summary("test_perplexity_model")


if __name__ == "__main__":
    sys.exit(main())
