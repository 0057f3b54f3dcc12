#!/usr/bin/env python3
"""ignite's SentencePiece-style BPE ("llama" vocabularies) vs sentencepiece.

Trains a small BPE model with byte fallback with the sentencepiece package
(deterministic: fixed corpus, one thread; identity normalisation so the text
is not rewritten, dummy prefix on, two user-defined symbols), writes its
pieces, scores and types as a tiny GGUF with tokenizer.ggml.model = "llama"
(gguf.GGUFWriter), and compares ignite's ids with sentencepiece's own
encoding on every valid-UTF-8 string of corpus.txt and 5,000 random strings
of edge characters (corpus.random_strings):
  - special parsing off: every string (user-defined symbols are matched
    either way, by both);
  - special parsing on: strings without control-token text (<s>, </s>),
    which ignite then matches and sentencepiece never does.
Also: decode(encode(s)) == s and the streaming decoder, for every string,
invalid UTF-8 included (byte fallback keeps every byte).
Label: tokenizer (needs no model file)."""
import io
import os
import sys
import tempfile

import gguf
import sentencepiece as spm

import corpus

USER_DEFINED = ["<|user|>", "<|u"]


def train(lines):
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=m, vocab_size=2000, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, character_coverage=0.98, num_threads=1, minloglevel=2,
        user_defined_symbols=USER_DEFINED)
    return spm.SentencePieceProcessor(model_proto=m.getvalue())


def piece_type(sp, i):
    if sp.is_unknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.is_control(i):
        return gguf.TokenType.CONTROL
    if sp.is_unused(i):
        return gguf.TokenType.UNUSED
    if sp.is_byte(i):
        return gguf.TokenType.BYTE
    if sp.id_to_piece(i) in USER_DEFINED:
        return gguf.TokenType.USER_DEFINED
    return gguf.TokenType.NORMAL


def write_gguf(sp, path):
    w = gguf.GGUFWriter(path, "llama")
    n = sp.get_piece_size()
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types([int(piece_type(sp, i)) for i in range(n)])
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    records = corpus.load()
    valid = [r for r in records if corpus.is_valid(r)]
    lines = [l for r in valid for l in r.decode("utf-8").split("\n") if l.strip()]
    sp = train(lines)
    records += corpus.random_strings(5000, seed=13)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spm.gguf")
        write_gguf(sp, path)
        for special in (False, True):
            args = ["encode", path, "--no-bos"] + ([] if special else ["--no-special"])
            out = corpus.run_tool(args, records)
            compared = 0
            for rec, line in zip(records, out):
                f = line.split()
                rt, st, ours = f[0], f[1], [int(x) for x in f[2:]]
                problems = []
                if rt != "1":
                    problems.append("decode(encode(s)) != s")
                if st != "1":
                    problems.append("streaming decode differs or split a UTF-8 character")
                skip = not corpus.is_valid(rec) or (special and (b"<s>" in rec or b"</s>" in rec))
                if not skip:
                    compared += 1
                    want = sp.encode(rec.decode("utf-8"))
                    if ours != want:
                        i = corpus.first_diff(ours, want)
                        problems.append("ids differ at position %d: ours %s, sentencepiece %s" %
                                        (i, ours[i:i + 6], want[i:i + 6]))
                if problems:
                    failures += 1
                    if failures <= 10:
                        print("MISMATCH (special=%s) %r:\n  %s" % (special, rec[:120], "\n  ".join(problems)))
            print("special=%s: %d strings compared with sentencepiece, %d checked for the round trip" %
                  (special, compared, len(records)))
        # BOS comes first when the vocabulary asks for it.
        out = corpus.run_tool(["encode", path], [b"hello"])
        ids = [int(x) for x in out[0].split()[2:]]
        if ids != [sp.bos_id()] + sp.encode("hello"):
            failures += 1
            print("MISMATCH BOS: %s" % ids)
    print("%d mismatching strings" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
