#!/usr/bin/env python3
"""tests/tokenizer/test_hf_json.py: tokenizer.json files read by ignite
(tokenizer/hf_vocab.c) against the tokenizers package reading the same
files, and against ignite's GGUF path.

  - SmolLM2: the folder's tokenizer.json written with the tokenizers package
    from the GGUF's vocabulary and merges (tests/pylib/hfgen.py, the
    original's pipeline: Digits + ByteLevel, added control tokens): ids
    identical to tokenizers' on every valid string of corpus.txt and 3,000
    random edge-character strings, and identical to the GGUF path on every
    string (invalid UTF-8 included), special parsing on and off;
  - the same vocabulary under the gpt2, llama3 and qwen2 pipelines
    (ByteLevel regex; Split with each family's regex + ByteLevel, llama3
    with ignore_merges): ids identical to tokenizers';
  - SentencePiece-style BPE: test_spm.py's sentencepiece model converted
    the way transformers' LlamaConverter writes tokenizer.json (merges from
    the pieces ordered by score, byte_fallback, <s> added by a
    TemplateProcessing post-processor) with the Metaspace pre-tokenizer
    (prepend_scheme "first") and with the legacy Prepend + Replace
    normalizer, and Gemma's (Replace alone, then a Split on ' '): ids
    identical to tokenizers', special tokens in the text included;
Labels: tokenizer, model (needs SmolLM2's vocabulary; exits 77 without it)."""
import json
import os
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

import corpus
import hfgen
import hfref
import test_spm

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
failures = 0


def fail(msg):
    global failures
    failures += 1
    if failures <= 12:
        print("MISMATCH " + msg)


def compare(name, folder, tk, records, special=True, gguf=None):
    """ignite's ids for `folder` vs tokenizers' (valid strings) and vs the
    GGUF path (every string)."""
    args = ["encode", folder] + ([] if special else ["--no-special"])
    ours = [[int(x) for x in ln.split()[2:]] for ln in corpus.run_tool(args, records)]
    theirs = None
    if gguf:
        theirs = [[int(x) for x in ln.split()[2:]]
                  for ln in corpus.run_tool(["encode", gguf] + args[2:], records)]
    n_hf = 0
    for k, rec in enumerate(records):
        if theirs is not None and ours[k] != theirs[k]:
            i = corpus.first_diff(ours[k], theirs[k])
            fail(f"{name} (special={special}) vs GGUF {rec[:60]!r}: at {i}: ours "
                 f"{ours[k][i:i + 5]}, GGUF {theirs[k][i:i + 5]}")
        if tk is None or not corpus.is_valid(rec):
            continue
        n_hf += 1
        want = tk.encode(rec.decode("utf-8")).ids
        if ours[k] != want:
            i = corpus.first_diff(ours[k], want)
            fail(f"{name} (special={special}) {rec[:60]!r}: at {i}: ours {ours[k][i:i + 5]}, "
                 f"tokenizers {want[i:i + 5]}")
    print(f"{name} (special={special}): {n_hf} strings vs tokenizers"
          + (f", {len(records)} vs the GGUF path" if gguf else ""))


def folder_with(tmp, name, tk, tc=None, gen=None):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    tk.save(os.path.join(d, "tokenizer.json"))
    for fn, j in (("tokenizer_config.json", tc), ("generation_config.json", gen)):
        if j is not None:
            with open(os.path.join(d, fn), "w") as f:
                json.dump(j, f)
    return d


def spm_tokenizer(sp, legacy):
    """tokenizer.json of a sentencepiece BPE model as transformers'
    LlamaConverter writes it."""
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for piece, i in vocab.items():
        local = [(piece[:k], piece[k:], sp.get_score(i)) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
    merges = [(a, b) for a, b, _ in sorted(merges, key=lambda m: m[2], reverse=True)]
    tk = Tokenizer(models.BPE(vocab, merges, unk_token=sp.id_to_piece(sp.unk_id()),
                              byte_fallback=True, fuse_unk=True))
    specials = [sp.id_to_piece(i) for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    tk.add_special_tokens(specials)
    # as the converter adds them: matched in the raw text, not the normalized
    tk.add_tokens([AddedToken(t, normalized=False) for t in test_spm.USER_DEFINED])
    if legacy == "gemma":  # transformers' GemmaConverter: no prefix, a Split that splits nothing
        tk.normalizer = normalizers.Replace(" ", "▁")
        tk.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    elif legacy:
        tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                              normalizers.Replace(" ", "▁")])
    else:
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                    split=False)
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    bos = sp.id_to_piece(sp.bos_id())
    tk.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, sp.bos_id())])
    return tk


def main():
    model = corpus.model_path()
    if not model:
        print("test model not found; skipped")
        return 77
    src = hfgen.Source(model)
    records = corpus.load() + corpus.random_strings(3000, seed=17)
    valid = [r for r in records if corpus.is_valid(r)]
    with tempfile.TemporaryDirectory() as tmp:
        smol = folder_with(tmp, "smollm", hfgen.tokenizer(src))
        tk = Tokenizer.from_file(os.path.join(smol, "tokenizer.json"))
        compare("smollm", smol, tk, records, True, gguf=model)
        compare("smollm", smol, None, records, False, gguf=model)

        for pre in ("gpt2", "llama3", "qwen2"):
            t = hfref.smollm_tokenizer(model)[0]
            vocab = {x: i for i, x in enumerate(src.tokens)}
            t.model = models.BPE(vocab, [tuple(m.split(" ", 1)) for m in src.merges],
                                 ignore_merges=(pre == "llama3"))
            if pre == "gpt2":
                t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            else:
                from tokenizers import Regex
                t.pre_tokenizer = pre_tokenizers.Sequence([
                    pre_tokenizers.Split(Regex(hfgen.SPLIT_REGEX[pre]), "isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            d = folder_with(tmp, pre, t)
            compare(pre, d, Tokenizer.from_file(os.path.join(d, "tokenizer.json")), valid)
            r = subprocess.run([BIN, "tokenize", "-m", d, "-p", "x"], capture_output=True)
            if r.returncode != 0:
                fail(f"{pre}: ignite tokenize failed: {r.stderr!r}")

        lines = [ln for r in valid for ln in r.decode("utf-8").split("\n") if ln.strip()]
        sp = test_spm.train(lines)
        spm_records = valid + [b"<s>hello", b"a</s> b<s>", b" <s> x", b"<|user|>hi <|u"]
        for legacy in (False, True, "gemma"):
            name = {False: "spm metaspace", True: "spm legacy", "gemma": "spm gemma"}[legacy]
            d = folder_with(tmp, name.replace(" ", "_"), spm_tokenizer(sp, legacy))
            compare(name, d, Tokenizer.from_file(os.path.join(d, "tokenizer.json")), spm_records)

        # control-token text is one token when special parsing is on
        out = corpus.run_tool(["encode", smol], [b"<|im_start|>hi"])
        ids = [int(x) for x in out[0].split()[2:]]
        if ids[:1] != [1]:
            fail(f"control token text must encode as its id: {ids}")
    print(f"test_hf_json: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
