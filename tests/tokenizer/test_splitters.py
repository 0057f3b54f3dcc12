#!/usr/bin/env python3
"""ignite's pre-tokenizers (tokenizer/pretok.c) vs HF tokenizers' own, on the
valid-UTF-8 strings of corpus.txt and 20,000 random strings of characters
that sit on the regexes' edges (corpus.random_strings): the pre-token
boundaries must be identical.
  gpt2    ByteLevel(add_prefix_space=False, use_regex=True)
  smollm  Sequence[Digits(individual_digits=True), ByteLevel(...)]
  llama3  Split(<Llama 3 regex>, "isolated")
  qwen2   Split(<Qwen2 regex>, "isolated")
The regexes are the ones the models' tokenizer.json files carry.
Label: tokenizer."""
import sys

from tokenizers import Regex, pre_tokenizers

import corpus

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_ends(s, pieces):
    """End offsets in bytes of HF's pieces (HF reports character offsets)."""
    pos = [0]
    for ch in s:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    ends = []
    for _, (a, e) in pieces:
        if ends and pos[a] != ends[-1]:
            ends.append(pos[a])  # a gap HF left unsplit (does not happen for these regexes)
        ends.append(pos[e])
    return ends


def main():
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    splitters = {
        "gpt2": bl,
        "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl]),
        "llama3": pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
        "qwen2": pre_tokenizers.Split(Regex(QWEN2), "isolated"),
    }
    records = [r for r in corpus.load() if corpus.is_valid(r)] + corpus.random_strings(20000)
    failures = 0
    for name, pre in splitters.items():
        lines = corpus.run_tool(["split", name], records)
        bad = 0
        for rec, line in zip(records, lines):
            ours = [int(x) for x in line.split()]
            s = rec.decode("utf-8")
            want = byte_ends(s, pre.pre_tokenize_str(s))
            if ours != want:
                bad += 1
                if bad <= 5:
                    i = corpus.first_diff(ours, want)
                    print("MISMATCH %s %r: first differing boundary #%d: ours %s, HF %s" %
                          (name, rec[:100], i, ours[i:i + 4], want[i:i + 4]))
        print("%s: %d strings, %d mismatching" % (name, len(records), bad))
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
