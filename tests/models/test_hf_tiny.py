#!/usr/bin/env python3
"""tests/models/test_hf_tiny.py: small synthetic Hugging Face folders of
every architecture the loader takes, against the fp64 HF-style numpy forward
(tests/models/hf_ref.py) over the folder's own tensors, with
IGNITE_MATMUL=exact:
  - LlamaForCausalLM (tied; F32, BF16, F16; sharded), MistralForCausalLM
    (untied, "head_dim": null), Qwen2ForCausalLM (Q/K/V biases, untied, also
    BF16 so the biases are widened), and a head_dim that is not
    hidden_size / heads: logits of prefill and decode steps within 1e-4;
  - generation_config.json: its sampling values become run's defaults
    (do_sample false = greedy), options given on the command line win;
  - --chat takes the template from tokenizer_config.json.
Random weights, a tiny byte-level tokenizer (tests/pylib/hfgen.py): no
model download needed. Label: unit."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfgen  # noqa: E402
from hf_ref import HFRef  # noqa: E402
from igtest import check, summary  # noqa: E402

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
DUMP = sys.argv[1] if len(sys.argv) > 1 else "build/tests/cpu/forward_dump"
ENV = dict(os.environ, IGNITE_MATMUL="exact")
IDS = [5, 17, 200, 3, 99, 260, 1, 42, 7]


def dump(folder, ids, fixed, opts=()):
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        cmd = [DUMP, "-m", folder, "-o", out.name, "-d", ",".join(map(str, fixed)), *opts,
               ",".join(map(str, ids))]
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
        check(r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        return np.fromfile(out.name, dtype=np.float32).astype(np.float64)


def check_logits(name, folder):
    fixed = [9, 250, 0]
    ref = HFRef(folder)
    want = ref.logits(IDS + fixed)[len(IDS) - 1:]
    for opts in [(), ("-c", "4"), ("-t", "1")]:
        ours = dump(folder, IDS, fixed, opts)
        if ours.size != want.size:
            check(False, f"{name}: {ours.size} logits, expected {want.size}")
            continue
        ours = ours.reshape(want.shape)
        err = float(np.abs(ours - want).max() / np.abs(want).max())
        check(err <= 1e-4, f"{name} {' '.join(opts)}: relative error {err:.2e} > 1e-4")
    print(f"ok {name}: relative error {err:.1e}")


def run_json(folder, *args):
    r = subprocess.run([BIN, "run", "-m", folder, "-p", "the cat", "-n", "2", "--json", "-q",
                        *args], capture_output=True, text=True, env=ENV)
    check(r.returncode == 0, f"run {folder} {args}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout) if r.returncode == 0 else {"sampling": {}, "tokens": {}}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = lambda n: os.path.join(tmp, n)  # noqa: E731
        cases = [
            ("llama F32 tied", hfgen.write_tiny(d("llama"), "LlamaForCausalLM", "F32")),
            ("llama BF16", hfgen.write_tiny(d("llama_bf16"), dtype="BF16", seed=1)),
            ("llama F16 in 3 shards", hfgen.write_tiny(d("llama_f16"), dtype="F16", shards=3, seed=2)),
            ("mistral untied, head_dim null", hfgen.write_tiny(
                d("mistral"), "MistralForCausalLM", tied=False, seed=3, head_dim=None)),
            ("qwen2 biases", hfgen.write_tiny(d("qwen2"), "Qwen2ForCausalLM", tied=False, seed=4)),
            ("qwen2 BF16 biases", hfgen.write_tiny(d("qwen2_bf16"), "Qwen2ForCausalLM", "BF16",
                                                   tied=False, seed=5)),
            ("head_dim 32 != 64/4", hfgen.write_tiny(d("hd32"), seed=6, head_dim=32)),
        ]
        for name, folder in cases:
            check_logits(name, folder)

        # generation_config.json defaults, overridden by options
        g = hfgen.write_tiny(d("gen"), generation={"temperature": 0.6, "top_p": 0.9,
                                                   "top_k": 20, "repetition_penalty": 1.1})
        s = run_json(g)["sampling"]
        check(s.get("temperature") == 0.6 and s.get("top_p") == 0.9 and s.get("top_k") == 20
              and abs(s.get("repeat_penalty", 0) - 1.1) < 1e-12,
              f"generation_config defaults not applied: {s}")
        s = run_json(g, "--temp", "1.5", "--top-k", "3")["sampling"]
        check(s.get("temperature") == 1.5 and s.get("top_k") == 3 and s.get("top_p") == 0.9,
              f"options given must win over generation_config: {s}")
        g2 = hfgen.write_tiny(d("greedy"), generation={"do_sample": False, "temperature": 0.7})
        s = run_json(g2)["sampling"]
        check(s.get("temperature") == 0, f"do_sample false must mean greedy: {s}")
        s = run_json(cases[0][1])["sampling"]
        check(s.get("temperature") == 0.8 and s.get("top_k") == 40,
              f"without generation_config the built-in defaults hold: {s}")

        # --chat renders tokenizer_config.json's template: 4 tokens of the
        # template around 'the cat' + generation prompt, BOS not added
        chat = run_json(cases[0][1], "--chat")
        plain = run_json(cases[0][1])
        check(chat["tokens"].get("prompt", 0) > plain["tokens"].get("prompt", 0) + 4,
              f"--chat prompt of {chat['tokens'].get('prompt')} tokens vs "
              f"{plain['tokens'].get('prompt')} without")
    return summary("test_hf_tiny")


if __name__ == "__main__":
    sys.exit(main())
