"""Reads tests/tokenizer/corpus.txt (format in gen_corpus.py) and the small
helpers the tokenizer tests share: running tok_tool, locating things."""
import os
import random
import subprocess
import sys
from igtest import model_path

HERE = os.path.dirname(os.path.abspath(__file__))


def unescape(line):
    out = bytearray()
    raw = line.encode("utf-8")
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        e = raw[i + 1:i + 2]
        if e == b"\\":
            out.append(0x5C)
            i += 2
        elif e == b"n":
            out.append(0x0A)
            i += 2
        elif e == b"r":
            out.append(0x0D)
            i += 2
        elif e == b"t":
            out.append(0x09)
            i += 2
        elif e == b"x":
            out.append(int(raw[i + 2:i + 4], 16))
            i += 4
        else:
            raise ValueError("bad escape in corpus line: %r" % line[:80])
    return bytes(out)


def load():
    """All corpus strings as bytes."""
    with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8", newline="\n") as f:
        return [unescape(l) for l in f.read().split("\n")[:-1]]


def is_valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def tool_path():
    return os.path.join(os.environ.get("IGNITE_BUILD_DIR", "build"), "tests", "tokenizer", "tok_tool")


def run_tool(args, records):
    """Feeds records (bytes) to tok_tool as '<len>\\n<bytes>' and returns its
    stdout lines, one per record."""
    data = b"".join(b"%d\n" % len(r) + r for r in records)
    p = subprocess.run([tool_path()] + args, input=data, stdout=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("tok_tool %s failed with status %d" % (" ".join(args), p.returncode))
    lines = p.stdout.decode("ascii").split("\n")[:-1]
    if len(lines) != len(records):
        sys.exit("tok_tool printed %d lines for %d records" % (len(lines), len(records)))
    return lines


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# Characters whose classes meet at the regexes' edges: spaces of every kind,
# newlines, letters and the contraction letters in both cases (and U+017F,
# which folds to 's'), numbers of several kinds, marks, punctuation, CJK,
# emoji and ZWJ, the pieces of special-token text, and letters and digits
# that Unicode 15.0 and 16.0 added (CJK Ext. H, Todhri, Nag Mundari, Kawi).
TRICKY = [" ", " ", "\t", "\n", "\r", "a", "A", "b", "1", "2", "\u0663", "\u00bd", "\u00b2",
          "!", ".", "'", "'", "s", "S", "t", "l", "L", "e", "r", "R", "v", "m", "d", "D",
          "\u017f", "\u00a0", "\u3000", "\u0301", "\u65e5", "\U0001f600", "\u200d", "\u0085",
          "\u000b", "\u2028", "-", "_", "\u1680", "\u00e9", "\u0903", "<|", "|>", "im_start",
          "<|im_end|>", "\U00031350", "\U000105c0", "\U0001e4f1", "\U00011f04"]


# More edges for the pre-tokenizers that tell letters by case (tekken), list
# punctuation and CJK ranges themselves (deepseek) or split digits in threes
# (falcon): title case, modifier and caseless letters, letters the regexes
# list by code point, full-width and CJK punctuation, symbols.
EXTRA = ["\u01c5", "\u02b0", "\u00b5", "\u2126", "\u212a", "\u1f7d", "\u4e00", "\uac00",
         "\u0800", "\uff01", "\u2018", "\u3001", "$", "+", "<", "=", "^", "`", "|", "~", "/",
         "3", "4", "5", "\u00c9", "\u0391", "\u03b1", "Hello", "WORLD", "\u0300"]


def random_strings(n, seed=5, chars=TRICKY):
    """n short strings of TRICKY (or `chars`) characters (deterministic)."""
    r = random.Random(seed)
    return ["".join(r.choice(chars) for _ in range(r.randint(1, 16))).encode("utf-8")
            for _ in range(n)]
