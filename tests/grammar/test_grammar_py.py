"""GBNF against an independent judge and the messages of refused grammars.

1. Random regular grammars (literals, classes with ranges and negation,
   '.', alternation, groups, * + ? {m} {m,} {m,n}, references to other
   rules) are written both as GBNF and as a Python regular expression; on
   random strings the matcher (grammar_tool match) must say "whole match"
   exactly when re.fullmatch does, and "no match at all" never for a string
   that some short extension turns into a match.
2. Bad grammars exit 2 with one line naming FILE:LINE:COLUMN (positions
   worked out here by hand).

Usage: test_grammar_py.py GRAMMAR_TOOL
"""
import os
import random
import re
import subprocess
import sys
import tempfile

from igtest import check, summary

TOOL = sys.argv[1]
ALPHABET = ["a", "b", "c", "é", "-", "\n"]


def gbnf_char(ch, in_class):
    if ch == "\n":
        return "\\n"
    if ch in '"\\' or (in_class and ch in "]-^["):
        return "\\" + ch if ch != "^" else "\\x5E"
    return ch


def rand_class(rng):
    chars = rng.sample(ALPHABET, rng.randint(1, 3))
    neg = rng.random() < 0.3
    parts_g, parts_r = [], []
    for ch in chars:
        if ch == "a" and rng.random() < 0.5:  # a range
            parts_g.append("a-c")
            parts_r.append("a-c")
        else:
            parts_g.append(gbnf_char(ch, True))
            parts_r.append(re.escape(ch))
    return ("[" + ("^" if neg else "") + "".join(parts_g) + "]",
            "[" + ("^" if neg else "") + "".join(parts_r) + "]")


def rand_expr(rng, depth, rules):
    """Returns (gbnf, regex) for a random expression."""
    kind = rng.random()
    if depth > 2 or kind < 0.3:
        r = rng.random()
        if r < 0.45:
            s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 2)))
            g, x = '"' + "".join(gbnf_char(c, False) for c in s) + '"', re.escape(s)
        elif r < 0.85:
            g, x = rand_class(rng)
        elif r < 0.92 or not rules:
            g, x = ".", "."
        else:
            name = rng.choice(list(rules))
            g, x = name, "(?:" + rules[name] + ")"
    elif kind < 0.55:
        items = [rand_expr(rng, depth + 1, rules) for _ in range(rng.randint(2, 3))]
        g = " ".join(i[0] for i in items)
        x = "".join(i[1] for i in items)
    elif kind < 0.75:
        items = [rand_expr(rng, depth + 1, rules) for _ in range(rng.randint(2, 3))]
        g = "(" + " | ".join(i[0] for i in items) + ")"
        x = "(?:" + "|".join(i[1] for i in items) + ")"
    else:
        ig, ix = rand_expr(rng, depth + 1, rules)
        q = rng.choice(["*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}"])
        g, x = "(" + ig + ")" + q, "(?:" + ix + ")" + q
    return g, x


def rand_grammar(rng):
    rules, lines = {}, []
    for k in range(rng.randint(0, 2)):
        g, x = rand_expr(rng, 1, rules)
        name = f"r{k}"
        lines.append(f"{name} ::= {g}")
        rules[name] = x
    g, x = rand_expr(rng, 0, rules)
    lines.insert(0, f"root ::= {g}")
    return "\n".join(lines) + "\n", x


def run_tool(cmd, grammar_text, lines):
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False, encoding="utf-8") as f:
        f.write(grammar_text)
        path = f.name
    try:
        p = subprocess.run([TOOL, cmd, path], input="".join(lines), capture_output=True,
                           text=True, encoding="utf-8", timeout=60)
    finally:
        os.unlink(path)
    return p


def json_line(s):
    import json
    return json.dumps(s) + "\n"


def differential():
    rng = random.Random(1234)
    n_grammars = n_strings = 0
    for _ in range(120):
        gtext, rx = rand_grammar(rng)
        pattern = re.compile(rx, re.DOTALL)
        strings = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
                   for _ in range(40)]
        # and strings that match, from a few random tries of the regex itself
        p = run_tool("match", gtext, [json_line(s) for s in strings])
        check(p.returncode == 0, f"grammar_tool failed on:\n{gtext}\n{p.stderr}")
        if p.returncode != 0:
            continue
        got = p.stdout.split()
        check(len(got) == len(strings), "one answer per string")
        n_grammars += 1
        for s, g in zip(strings, got):
            n_strings += 1
            want = pattern.fullmatch(s) is not None
            check((g == "1") == want,
                  f"grammar\n{gtext}regex {rx!r}\nstring {s!r}: matcher {g}, re {want}")
            if g == "0":  # no extension of up to 2 characters may match
                ext = [s + a for a in ALPHABET] + [s + a + b for a in ALPHABET for b in ALPHABET]
                check(not any(pattern.fullmatch(e) for e in ext),
                      f"grammar\n{gtext}string {s!r} rejected but an extension matches")
    print(f"differential: {n_grammars} grammars, {n_strings} strings", file=sys.stderr)


# (grammar text, expected "LINE:COL" of the message, a word the message has)
BAD = [
    ('root ::= "abc\n', "1:10", "not closed"),
    ('root ::= [a-z\n', "1:10", "not closed"),
    ('root ::= ("a" | "b"\n', "2:1", "')'"),
    ('root ::= "a"\n\nitem ::= "x" ::= "y"\n', "3:14", "unexpected ':'"),
    ('root ::= x\nx ::= y\n', "2:7", "'y' is used but never defined"),
    ('root ::= "a"\nroot ::= "b"\n', "2:1", "defined twice"),
    ('root ::= list\nlist ::= list "," item | item\nitem ::= [0-9]\n', "2:1", "left recursion"),
    ('root ::= "é\\q"\n', "1:12", "unknown escape"),
    ('root ::= "é" \\q\n', "1:14", "unexpected"),
    ('root ::= "a"{5,3}\n', "1:13", "minimum is above"),
    ('# comment\nroot ::= "a" "b"\n  | "c"\n', "3:3", "rule name"),
    ('root ::= x\nx ::= "(" x ")"\n', "2:1", "can match no text"),
    ('root ::= <think>\n', "1:10", "token"),
]


def messages():
    for text, pos, word in BAD:
        p = run_tool("check", text, [])
        lines = p.stderr.strip().split("\n")
        check(p.returncode == 2, f"{text!r}: exit {p.returncode}, want 2")
        check(len(lines) == 1, f"{text!r}: one line, got {lines}")
        m = re.match(r"ignite: .*?\.gbnf:(\d+:\d+): (.*)", lines[0])
        check(m is not None and m.group(1) == pos,
              f"{text!r}: want position {pos}: {lines[0]!r}")
        check(word in lines[0], f"{text!r}: message lacks {word!r}: {lines[0]!r}")


def main():
    differential()
    messages()
    return summary("test_grammar_py")


if __name__ == "__main__":
    sys.exit(main())
