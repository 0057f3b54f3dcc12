#!/usr/bin/env python3
"""tests/cli/test_chat_models.py: `ignite run --chat` on synthetic gemma3 and
qwen3 files (tests/pylib/archgen.py) that carry Gemma 3's and Qwen3's chat
templates: the prompt ignite prefills (read back from the tokens of a
--prompt-only --save-kv file) must be the ids of jinja2's render of the
template (bos_token "", BOS added by the tokenizer as the file says),
tokenized by `ignite tokenize`. For Qwen3 also with --no-think
(enable_thinking false: an empty think block after the assistant header),
and --no-think is refused on a template without the switch.
Label: cli (no model file; Qwen3's template comes from the llama.cpp
source in the cache and that case is skipped, with a note, without it)."""
import os
import subprocess
import sys
import tempfile

import gguf
import jinja2

import chat_templates
from archgen import write_model
from kvfile import kv_tokens

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
failures = []


def vocab(specials):
    """A SentencePiece vocabulary: the control tokens, the 256 byte tokens
    (so any text encodes), a few pieces."""
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + specials + \
        [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "\u2581Hi", "\u2581there", "user",
                                                  "model", "assistant", "system"]
    types = [3, 3, 3, 2] + [3] * len(specials) + [6] * 256 + [1] * 7
    scores = [0.0] * len(toks)
    return toks, scores, types, "llama"


def render(template, user, system, thinking=None):
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    msgs = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]
    extra = {} if thinking is None else {"enable_thinking": thinking}
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                            bos_token="", **extra)


def check(tmp, name, path, template, user, system, thinking=None):
    kv = os.path.join(tmp, name + ".kv")
    args = [BIN, "run", "-m", path, "--chat", "-p", user, "--prompt-only", "--save-kv", kv,
            "-q"] + (["--system", system] if system else []) + \
        (["--no-think"] if thinking is False else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        failures.append(f"{name}: run exit {r.returncode}: {r.stderr.strip()}")
        return
    text = render(template, user, system, thinking)
    t = subprocess.run([BIN, "tokenize", "-m", path, "--json", "-p", text], capture_output=True,
                       text=True, timeout=60)
    want = [int(x) for x in t.stdout.strip()[1:-1].split(",") if x]
    got = kv_tokens(kv)
    if t.returncode != 0 or got != want:
        failures.append(f"{name}: prefilled {got}, expected {want} (render {text!r})")
    else:
        print(f"ok     {name}: {len(got)} prompt tokens")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        g = os.path.join(tmp, "gemma3.gguf")
        write_model(g, "gemma3", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=64,
                    n_vocab=len(vocab(["<start_of_turn>", "<end_of_turn>"])[0]),
                    keys={"attention.sliding_window": (16, gguf.GGUFValueType.UINT32)},
                    vocab=vocab(["<start_of_turn>", "<end_of_turn>"]),
                    template=chat_templates.GEMMA3)
        check(tmp, "gemma3", g, chat_templates.GEMMA3, " Hi there \n", None)
        check(tmp, "gemma3 with a system message", g, chat_templates.GEMMA3, "Hi there",
              "Be brief.")
        r = subprocess.run([BIN, "run", "-m", g, "--chat", "-p", "Hi", "--no-think", "-n", "1"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 2 or "no thinking switch" not in r.stderr:
            failures.append(f"--no-think on Gemma 3: exit {r.returncode}: {r.stderr.strip()!r}")
        qwen3 = chat_templates.qwen3()
        if qwen3 is None:
            print("note: no llama.cpp source in the cache; the Qwen3 template is not checked")
        else:
            q = os.path.join(tmp, "qwen3.gguf")
            sp = ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]
            write_model(q, "qwen3", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=64,
                        n_vocab=len(vocab(sp)[0]), vocab=vocab(sp), template=qwen3)
            check(tmp, "qwen3 thinking", q, qwen3, "Hi there", None)
            check(tmp, "qwen3 --no-think", q, qwen3, "Hi there", "Be brief.", thinking=False)
    for f in failures:
        print("FAIL", f)
    print(f"test_chat_models: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
