#!/usr/bin/env python3
"""Tokenizer throughput: `ignite tokenize` vs HF tokenizers (SmolLM2's
pipeline, tests/tokenizer/hfref.py) on ~1 MB each of generated English prose,
source code and CJK text, in the same run on the same machine.

ignite is timed as the CLI end to end (`ignite tokenize -f FILE`, ids
printed to a pipe, best of N) minus its start-up on an empty file (GGUF
metadata + vocabulary build, reported separately); HF as tk.encode(text) on the whole text (best
of N), and HF once more as encode_batch over the text's lines (its usual
way with large inputs; it uses every core there, ignite one). ignite's ids
are compared with HF's whole-text encode. Wall time and CPU time (user +
system, all threads) are both reported: on a loaded machine the CPU figure
is the steadier one.

Usage: .venv/bin/python bench/tokenizer_speed.py [--bin build/ignite] [--model PATH] [--runs 5]
"""
import argparse
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tokenizer"))
import corpus  # noqa: E402
import hfref  # noqa: E402

SIZE = 1 << 20


def prose(r):
    words = ("the of and to in is you that it he was for on are as with his they at be this have "
             "from or one had by word but not what all were we when your can said there use an each "
             "which she do how their if will up other about out many then them these so some her "
             "would make like him into time has look two more write go see number no way could "
             "people my than first water been call who oil its now find long down day did get come "
             "made may part").split()
    out = []
    n = 0
    while n < SIZE:
        s = " ".join(r.choice(words) for _ in range(r.randint(5, 20)))
        s = s[0].upper() + s[1:] + r.choice([". ", ", ", "! ", "? ", ".\n\n"])
        out.append(s)
        n += len(s)
    return "".join(out)[:SIZE]


def code(r):
    lines = ["static int {f}(const struct {t} *p, int64_t n)", "{{",
             "    for (int64_t i = 0; i < n; i++) {{", "        if (p[i].{a} > {k})",
             "            return -{k};", "        total += p[i].{b} * 0x{h:04x};", "    }}",
             "    return (int)(total % {k});", "}}", "",
             "def {f}(self, {a}, {b}={k}):", "    \"\"\"Return the {a} of {t}.\"\"\"",
             "    return [x ** 2 for x in range({k}) if x % 3 == 0]", ""]
    names = ["alpha", "beta", "gamma", "delta", "tokens", "cache", "rope", "norm", "weights"]
    out = []
    n = 0
    while n < SIZE:
        s = r.choice(lines).format(f=r.choice(names) + "_" + r.choice(names),
                                   t=r.choice(names), a=r.choice(names), b=r.choice(names),
                                   k=r.randint(0, 99999), h=r.randint(0, 65535)) + "\n"
        out.append(s)
        n += len(s)
    return "".join(out)[:SIZE]


def cjk(r):
    src = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事"
           "其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只"
           "こんにちは世界ありがとうございます東京大阪日本語のテキストです안녕하세요한국어")
    out = []
    n = 0
    while n < SIZE:
        s = "".join(r.choice(src) for _ in range(r.randint(10, 40))) + r.choice(["。", "，", "！", "\n"])
        out.append(s)
        n += len(s.encode("utf-8"))
    return "".join(out).encode("utf-8")[:SIZE].decode("utf-8", "ignore")


def cpu_now():
    """CPU seconds (user + system) of this process and its waited-for children."""
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def best(f, runs):
    """Best wall time, best CPU time, and f's value."""
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = cpu_now(), time.perf_counter()
        v = f()
        wall.append(time.perf_counter() - t0)
        cpu.append(cpu_now() - c0)
    return min(wall), min(cpu), v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "ignite"))
    ap.add_argument("--model", default=corpus.model_path())
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not a.model:
        sys.exit("no model: pass --model or run make fetch-model")
    tk, _, _ = hfref.smollm_tokenizer(a.model)
    r = random.Random(7)
    texts = {"English prose": prose(r), "C/Python code": code(r), "CJK": cjk(r)}
    print("machine: %s, %s, %d CPUs; python %s" % (platform.node(), platform.processor() or
          platform.machine(), os.cpu_count(), platform.python_version()))
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.txt")
        open(empty, "w").close()
        cmd = lambda p: subprocess.run([a.bin, "tokenize", "-m", a.model, "-f", p],
                                       check=True, stdout=subprocess.PIPE).stdout
        startup, startup_cpu, _ = best(lambda: cmd(empty), a.runs)
        print("ignite start-up (GGUF metadata + vocabulary): %.1f ms wall, %.1f ms CPU" %
              (startup * 1e3, startup_cpu * 1e3))
        print("MB/s by wall time, and (in brackets) by CPU time summed over threads:")
        print("%-14s %5s %7s %15s %15s %15s %s" % ("text", "MB", "tokens", "ignite", "HF",
                                                 "HF lines", "ids"))
        for name, text in texts.items():
            path = os.path.join(tmp, "t.txt")
            data = text.encode("utf-8")
            with open(path, "wb") as f:
                f.write(data)
            t_ig, c_ig, out = best(lambda: cmd(path), a.runs)
            ours = [int(x) for x in out.split()]
            t_hf, c_hf, enc = best(lambda: tk.encode(text), a.runs)
            lines = text.splitlines(keepends=True)
            t_ln, c_ln, _ = best(lambda: tk.encode_batch(lines), a.runs)
            mb = len(data) / 1e6
            rate = lambda w, c: "%6.1f (%6.1f)" % (mb / max(w, 1e-9), mb / max(c, 1e-9))
            print("%-14s %5.2f %7d %15s %15s %15s %s" % (
                name, mb, len(ours), rate(t_ig - startup, c_ig - startup_cpu), rate(t_hf, c_hf),
                rate(t_ln, c_ln), "identical" if ours == enc.ids else "DIFFERENT"))


if __name__ == "__main__":
    main()
