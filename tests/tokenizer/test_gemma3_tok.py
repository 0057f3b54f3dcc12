#!/usr/bin/env python3
"""Gemma 3's tokenizer (270M Q4_K_M, 262,144 SentencePiece BPE pieces with
byte fallback, no space prefix) against sentencepiece running the same
vocabulary (spmproto.from_gguf) on every valid-UTF-8 string of corpus.txt
and 3,000 random strings of edge characters:
  - special parsing off: every string; on: strings without control-token
    text (<bos>, <start_of_turn>...: sentencepiece never parses those);
  - decode(encode(s)) == s and the streaming decoder on every string;
  - `ignite tokenize` itself on a few strings (BOS first, --no-bos,
    --no-special, a chat turn's control tokens parsed as one id each).
Labels: tokenizer, model (exits 77 without the file: make fetch-model)."""
import os
import subprocess
import sys

import sentencepiece as spm

import corpus
import spmproto
from igtest import gemma3_path

BIN = os.environ.get("IGNITE_BIN", "build/ignite")


def ignite_ids(path, text, *flags):
    r = subprocess.run([BIN, "tokenize", "-m", path, "--json", "-p", text, *flags],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"ignite tokenize failed ({r.returncode}): {r.stderr}")
    return [int(x) for x in r.stdout.strip()[1:-1].split(",") if x]


def main():
    path = gemma3_path()
    if not os.path.exists(path):
        print(f"skip: no Gemma 3 270M at {path} (make fetch-model)")
        return 77
    proto, tokens, types = spmproto.from_gguf(path)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    records = corpus.load() + corpus.random_strings(3000, seed=17)
    control = [t.encode("utf-8") for t, ty in zip(tokens, types) if ty == 3]
    failures = 0
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
            skip = not corpus.is_valid(rec) or \
                (special and b"<" in rec and any(c in rec for c in control))
            if not skip:
                compared += 1
                want = sp.encode(rec.decode("utf-8"))
                if ours != want:
                    i = corpus.first_diff(ours, want)
                    problems.append(f"ids differ at {i}: ours {ours[i:i + 6]}, sentencepiece "
                                    f"{want[i:i + 6]}")
            if problems:
                failures += 1
                if failures <= 10:
                    print(f"MISMATCH (special={special}) {rec[:100]!r}:\n  " +
                          "\n  ".join(problems))
        print(f"special={special}: {compared} strings compared with sentencepiece, "
              f"{len(records)} round trips")
    # the command itself
    text = "Gemma's tokenizer: 1234 spaces  and\ttabs\n\nnew lines, émigré, 日本語 🙂"
    want = sp.encode(text)
    for flags, expect in [((), [2] + want), (("--no-bos",), want)]:
        got = ignite_ids(path, text, *flags)
        if got != expect:
            failures += 1
            print(f"MISMATCH ignite tokenize {flags}: {got[:12]} vs {expect[:12]}")
    turn = "<start_of_turn>user\nHi<end_of_turn>\n"
    got = ignite_ids(path, turn, "--no-bos")
    expect = [tokens.index("<start_of_turn>")] + sp.encode("user\nHi") + \
        [tokens.index("<end_of_turn>")] + sp.encode("\n")
    if got != expect:
        failures += 1
        print(f"MISMATCH chat turn: {got} vs {expect}")
    if ignite_ids(path, turn, "--no-bos", "--no-special") != sp.encode(turn):
        failures += 1
        print("MISMATCH chat turn with --no-special")
    print(f"test_gemma3_tok: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
