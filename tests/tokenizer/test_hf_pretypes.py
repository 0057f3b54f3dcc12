#!/usr/bin/env python3
"""Byte-level BPE end to end with the gpt2, llama3, qwen2, qwen35, tekken,
deepseek-llm, deepseek-coder and falcon pre-tokenizers, against HF tokenizers. There is no such model in the test set, so both sides
use SmolLM2's real vocabulary and merges under another tokenizer.ggml.pre:
the GGUF's tokenizer metadata is copied into a small GGUF (gguf.GGUFWriter)
with the pre type changed, and HF is built as those models' tokenizer.json
files are: gpt2 = ByteLevel(use_regex=True); llama3 / qwen2 =
Split(<regex>, "isolated") then ByteLevel(use_regex=False), and for llama3
BPE(ignore_merges=True) (tekken too); the multi-regex ones a Split per regex.
ids must be identical on the valid corpus strings
and the random edge-character strings, with special parsing on.
Labels: tokenizer, model (needs SmolLM2's vocabulary)."""
import os
import sys
import tempfile

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

import corpus
import hfref
from test_splitters import (DEEPSEEK_CODER, DEEPSEEK_LLM, FALCON, LLAMA3, QWEN2, QWEN35,
                            TEKKEN)

SINGLE = {"llama3": LLAMA3, "qwen2": QWEN2, "qwen35": QWEN35, "tekken": TEKKEN}
SEQUENCES = {"deepseek-llm": DEEPSEEK_LLM, "deepseek-coder": DEEPSEEK_CODER, "falcon": FALCON}


def write_gguf(path, pre, tokens, types, merges):
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t.encode("utf-8") for t in tokens])
    w.add_token_types([int(t) for t in types])
    w.add_token_merges([m.encode("utf-8") for m in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_tokenizer(pre, tokens, types, merges):
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges],
                              ignore_merges=(pre in ("llama3", "tekken"))))
    if pre == "gpt2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        regexes = [SINGLE[pre]] if pre in SINGLE else SEQUENCES[pre]
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), "isolated") for r in regexes] +
            [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i in range(len(tokens)) if types[i] in (hfref.CONTROL, hfref.USER_DEFINED)])
    return tk


def main():
    model = corpus.model_path()
    if not model:
        print("test model not found; skipped")
        return 77
    tokens, types, merges, _ = hfref.read_vocab(model)
    enc = hfref.bytes_to_unicode()
    vocab = set(tokens)
    missing = {b for b in range(256) if enc[b] not in vocab}
    records = [r for r in corpus.load() if corpus.is_valid(r)] + corpus.random_strings(3000, seed=17)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for pre in ("gpt2", "llama3", "qwen2", "qwen35", "tekken", "deepseek-llm",
                    "deepseek-coder", "falcon"):
            path = os.path.join(tmp, pre + ".gguf")
            write_gguf(path, pre, tokens, types, merges)
            tk = hf_tokenizer(pre, tokens, types, merges)
            lines = corpus.run_tool(["encode", path], records)
            bad = 0
            for rec, line in zip(records, lines):
                f = line.split()
                ours = [int(x) for x in f[2:]]
                want = tk.encode(rec.decode("utf-8")).ids
                problems = []
                if ours != want:
                    i = corpus.first_diff(ours, want)
                    problems.append("ids differ at position %d: ours %s, HF %s" %
                                    (i, ours[i:i + 6], want[i:i + 6]))
                if f[0] != "1" and not any(x in missing for x in rec):
                    problems.append("decode(encode(s)) != s")
                if f[1] != "1":
                    problems.append("streaming decode differs or split a UTF-8 character")
                if problems:
                    bad += 1
                    if bad <= 5:
                        print("MISMATCH %s %r:\n  %s" % (pre, rec[:120], "\n  ".join(problems)))
            print("%s: %d strings, %d mismatching" % (pre, len(records), bad))
            failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
