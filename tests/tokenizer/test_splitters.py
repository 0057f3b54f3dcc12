#!/usr/bin/env python3
"""ignite's pre-tokenizers (tokenizer/pretok.c) vs HF tokenizers' own, on the
valid-UTF-8 strings of corpus.txt and 20,000 random strings of characters
that sit on the regexes' edges (corpus.random_strings): the pre-token
boundaries must be identical.
  gpt2    ByteLevel(add_prefix_space=False, use_regex=True)
  smollm  Sequence[Digits(individual_digits=True), ByteLevel(...)]
  llama3  Split(<Llama 3 regex>, "isolated")
  qwen2   Split(<Qwen2 regex>, "isolated")
  qwen35  Split(<Qwen3.5 regex>, "isolated")
  tekken  Split(<Mistral Nemo's regex>, "isolated")
  gpt-4o  Split(<o200k's regex, gpt-oss's tokenizer.json and llama.cpp's>, "isolated")
  deepseek-llm, deepseek-coder, falcon: a Sequence of Splits, one per regex
          llama.cpp lists for them (from their tokenizer.json files)
The regexes are the ones the models' tokenizer.json files carry. The newer
pre-tokenizers also get 20,000 strings with more edge characters
(corpus.EXTRA: letters by case, ranges the regexes spell out, digits).
Label: tokenizer."""
import sys

from tokenizers import Regex, pre_tokenizers

import corpus

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
          r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
          r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DS_LETTERS = ("A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf"
              "\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f"
              "\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
              "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
              "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
              "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
              "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
              "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
              "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
              "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184"
              "\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
              "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
              "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
              "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
              "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
DEEPSEEK_LLM = ["[\r\n]", "\\s?[" + DS_LETTERS + "]+",
                "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                "\\s+$", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}+"]
DEEPSEEK_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                  "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}"]
FALCON = ["[\\p{P}\\$\\+<=>\\^~\\|`]+",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
          "[0-9][0-9][0-9]"]


def splits(regexes):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), "isolated") for r in regexes])


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
        "qwen35": pre_tokenizers.Split(Regex(QWEN35), "isolated"),
        "tekken": pre_tokenizers.Split(Regex(TEKKEN), "isolated"),
        "gpt-4o": pre_tokenizers.Split(Regex(GPT4O), "isolated"),
        "deepseek-llm": splits(DEEPSEEK_LLM),
        "deepseek-coder": splits(DEEPSEEK_CODER),
        "falcon": splits(FALCON),
    }
    base = [r for r in corpus.load() if corpus.is_valid(r)] + corpus.random_strings(20000)
    extra = corpus.random_strings(20000, seed=23, chars=corpus.TRICKY + corpus.EXTRA)
    failures = 0
    for name, pre in splitters.items():
        records = base + (extra if name not in ("gpt2", "smollm", "llama3", "qwen2") else [])
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
