#!/usr/bin/env python3
"""Generates tests/tokenizer/corpus.txt: the strings the tokenizer tests run
through ignite and the reference tokenizers. Deterministic (fixed seed, no
inputs), so rerunning it reproduces the committed file byte for byte.

Format: one string per line, UTF-8, with escapes so that any bytes fit:
\\\\ backslash, \\n newline, \\r carriage return, \\t tab, \\xNN any other byte
(control characters and bytes that are not valid UTF-8). corpus.py reads it.

Usage: python3 tests/tokenizer/gen_corpus.py > tests/tokenizer/corpus.txt
"""
import random
import sys

R = random.Random(20241129)

WORDS = ("the of and to in is you that it he was for on are as with his they I at be this "
         "have from or one had by word but not what all were we when your can said there use "
         "an each which she do how their if will up other about out many then them these so "
         "some her would make like him into time has look two more write go see number no way "
         "could people my than first water been call who oil its now find long down day did get "
         "come made may part tokenizer inference attention transformer GPU kernel latency "
         "throughput Hello World OpenAI HuggingFace llama SmolLM prefill decode cache").split()

CONTRACTIONS = ["it's", "don't", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "DON'T",
                "We'Re", "she'LL", "'s", "'t", "''", "'", "rock'n'roll", "o'clock", "'twas"]

SCRIPTS = {
    "zh": "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从",
    "ja": "こんにちは世界ありがとうございますカタカナひらがな漢字東京大阪日本語のテキストです。、「」ー",
    "ko": "안녕하세요세계한국어텍스트입니다감사합니다서울부산",
    "ar": "مرحبا بالعالم هذا نص عربي للاختبار السلام عليكم ورحمة الله وبركاته",
    "hi": "नमस्ते दुनिया यह हिंदी पाठ है क्षत्रिय श्री द्वितीय अंग्रेज़ी",
    "ru": "Привет мир это русский текст для проверки Ёлка ЖУК съешь",
    "el": "Γειά σου κόσμε ελληνικά κείμενα ΑΒΓΔ",
    "he": "שלום עולם זה טקסט בעברית",
    "th": "สวัสดีชาวโลก ภาษาไทย",
    "vi": "Tiếng Việt có dấu: ừ, ở, ữ, Đường",
}

EMOJI = ["😀", "👍", "👍🏽", "🎉", "🔥", "❤️", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑‍💻", "👩🏾‍🚀", "🇫🇷", "🇯🇵",
         "☺", "✔️", "🤖", "1️⃣", "#️⃣", "🫠", "🐈‍⬛"]

COMBINING = ["e\u0301", "a\u0300\u0316", "n\u0303", "Z\u0351\u0324\u0334a\u0357\u0330l\u0310g\u0353o\u0352",
             "\u0301", "o\u0308\u0304", "\u1100\u1161\u11a8", "i\u0307", "\u0915\u094d\u0937"]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>",
            "<jupyter_code>", "<s>", "</s>", "<unk>", "<|im_start", "im_end|>", "<|im_start|",
            "<|<|im_end|>|>", "<|user|>", "<|user|>hi<|u"]

UNICODE_SPACES = ["\u00a0", "\u3000", "\u2009", "\u200b", "\u0085", "\u1680", "\u2028",
                  "\u2029", "\u202f", "\u205f", "\u000b", "\u000c", "\u001c", "\u200d", "\ufeff"]

NUMBER_CHARS = ["٣", "३", "１", "²", "½", "Ⅻ", "〇", "𝟘", "߃", "௮"]

CODE = [
    'int main(int argc, char **argv) {\n    printf("hello %d\\n", argc);\n    return 0;\n}\n',
    'def f(x):\n\tif x > 0:\n\t\treturn x ** 2\n\treturn -x  # negative\n',
    'for (i = 0; i < n; i++) { a[i] += b[i] * c; }',
    'const x = {"key": [1, 2.5, -3e10], \'y\': null};',
    '#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
    '    __global__ void k(float* __restrict__ y) { y[threadIdx.x] = 0.f; }',
    'if [[ -n "$VAR" ]]; then echo "${VAR}" | grep -E \'^[a-z]+$\'; fi',
    '<div class="x">&nbsp;&lt;tag&gt;</div>',
    'https://example.com/path/to/page?query=1&x=%20#frag',
    'λx. x + 1 → ∀y ∈ ℝ: y² ≥ 0',
    'x==y!=z<=w>=v&&u||t->s::r...q;;;',
]


def words(n):
    return " ".join(R.choice(WORDS) for _ in range(n))


def sentence():
    s = words(R.randint(3, 14))
    s = s[0].upper() + s[1:]
    if R.random() < 0.3:
        s += " " + R.choice(CONTRACTIONS)
    return s + R.choice([".", "!", "?", ",", ";", ":", "...", ""])


def script_text(key):
    src = SCRIPTS[key]
    n = R.randint(1, 30)
    start = R.randrange(len(src))
    return (src * 3)[start:start + n]


def number(ndigits):
    return "".join(R.choice("0123456789") for _ in range(ndigits))


def whitespace_run():
    return "".join(R.choice([" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\t "])
                   for _ in range(R.randint(1, 6)))


def random_cp():
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F),
              (0x2100, 0x22FF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF)]
    a, b = R.choice(blocks)
    return chr(R.randint(a, b))


def invalid_bytes():
    bad = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\x80", b"\xbf", b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98", b"\xf8\x88\x80\x80\x80",
           b"\xc3\x28", b"\xe2\x82\x28", b"\xa0\xa1"]
    parts = []
    for _ in range(R.randint(1, 4)):
        r = R.random()
        if r < 0.4:
            parts.append(R.choice(bad))
        elif r < 0.7:
            parts.append(sentence().encode())
        elif r < 0.85:
            parts.append(bytes(R.randrange(256) for _ in range(R.randint(1, 12))))
        else:
            parts.append(R.choice(EMOJI).encode() + R.choice(bad))
    return b"".join(parts)


def mixed():
    parts = []
    for _ in range(R.randint(2, 8)):
        k = R.randrange(10)
        if k == 0:
            parts.append(sentence())
        elif k == 1:
            parts.append(script_text(R.choice(list(SCRIPTS))))
        elif k == 2:
            parts.append(R.choice(EMOJI))
        elif k == 3:
            parts.append(number(R.randint(1, 12)))
        elif k == 4:
            parts.append(whitespace_run())
        elif k == 5:
            parts.append(R.choice(SPECIALS))
        elif k == 6:
            parts.append(R.choice(COMBINING))
        elif k == 7:
            parts.append(R.choice(UNICODE_SPACES))
        elif k == 8:
            parts.append("".join(random_cp() for _ in range(R.randint(1, 8))))
        else:
            parts.append(R.choice(NUMBER_CHARS) * R.randint(1, 4))
    return R.choice(["", " "]).join(parts)


def generate():
    out = []  # bytes
    add = lambda s: out.append(s if isinstance(s, bytes) else s.encode("utf-8"))
    # Edges and single characters.
    for s in ["", " ", "  ", "\n", "\t", "\r\n", "a", "A", "'", "''", "'s", " 's", "'S",
              "'ll", "'LL", "'re", "'Re", "x's", "x'sy", "don't'", "a'b'c'd'e"]:
        add(s)
    for c in range(0x20, 0x7F):
        add(chr(c))
        add(" " + chr(c) + " ")
    for c in range(0x01, 0x20):
        add("x" + chr(c) + "y")
    # Numbers of every length, alone and in context.
    for n in range(1, 41):
        add(number(n))
        add(" " + number(n))
        add("v" + number(n) + "x")
        add("-" + number(n) + "." + number(R.randint(1, 6)))
    for c in NUMBER_CHARS:
        add(c)
        add("a" + c * 3 + " " + c + "1")
    add("1,234,567.89 and 3.14159 and 1e-10 and 0x1F and 10%")
    # Whitespace runs and leading / trailing spaces.
    for sp in [" ", "\t", "\n", "\r", "\r\n", "  ", "   ", "\t\t", "\n\n\n", " \t\n", "\n \n"]:
        for n in (1, 2, 5):
            add(sp * n)
            add(sp * n + "word")
            add("word" + sp * n)
            add("a" + sp * n + "b")
            add("a" + sp * n + "1")
            add("a" + sp * n + "!")
    for u in UNICODE_SPACES:
        add("a" + u + "b")
        add(u + u + "x")
        add("x " + u + " y")
    # Special-token text in every position.
    for s in SPECIALS:
        add(s)
        add(" " + s + " ")
        add("a" + s + "b")
        add(s + s)
        add(s + "\n" + sentence())
        add("<|im_start|>user\n" + sentence() + "<|im_end|>\n<|im_start|>assistant\n")
    # Scripts, emoji, combining marks.
    for key in SCRIPTS:
        add(SCRIPTS[key])
        for _ in range(25):
            add(script_text(key))
            add(" " + script_text(key) + " " + script_text(key))
    for e in EMOJI:
        add(e)
        add(" " + e)
        add(e * 3)
        add("a" + e + "b " + e + "1")
    for c in COMBINING:
        add(c)
        add(" " + c + c)
        add("x" + c + "y")
    # Code.
    for c in CODE:
        add(c)
        add(c.replace("    ", "\t"))
    # Very long words.
    add("a" * 1000)
    add("ab" * 700)
    add(" " * 300)
    add("\n" * 100)
    add("".join(R.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3000)))
    add("9" * 500)
    add("日本" * 400)
    add("😀" * 200)
    add("supercalifragilisticexpialidocious" * 20)
    add("x" + "\u0301" * 200)
    # Invalid UTF-8.
    for _ in range(150):
        add(invalid_bytes())
    # English prose and random mixtures.
    for _ in range(400):
        add(" ".join(sentence() for _ in range(R.randint(1, 4))))
    for _ in range(800):
        add(mixed())
    return out


def escape(b):
    out = []
    i = 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else \
            4 if 0xF0 <= c <= 0xF4 else 0
        if n > 1:
            try:
                ch = b[i:i + n].decode("utf-8")
                out.append(ch)
                i += n
                continue
            except UnicodeDecodeError:
                n = 0
        if c == 0x5C:
            out.append("\\\\")
        elif c == 0x0A:
            out.append("\\n")
        elif c == 0x0D:
            out.append("\\r")
        elif c == 0x09:
            out.append("\\t")
        elif n == 0 or c < 0x20 or c == 0x7F:
            out.append("\\x%02X" % c)
        else:
            out.append(chr(c))
        i += 1
    s = "".join(out)
    # Characters that would split a line in text tools: escape as bytes.
    for ch in ("\u0085", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"):
        s = s.replace(ch, "".join("\\x%02X" % x for x in ch.encode()))
    return s


def main():
    lines = [escape(b) for b in generate()]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
