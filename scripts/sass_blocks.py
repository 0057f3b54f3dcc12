#!/usr/bin/env python3
"""scripts/sass_blocks.py: a kernel's machine code, read without a GPU.

Compiles a CUDA source to a cubin for one architecture (nvcc -cubin, the
project's include path), disassembles it with cuobjdump from the PyPI package
nvidia-cuda-cuobjdump (the toolkit here ships no disassembler), and prints for
each kernel whose mangled name contains FILTER: registers and spills from
ptxas, the instruction count, the opcode mix, and with --blocks its basic
blocks (start address, instruction count, main opcodes, last instruction), so
the path one loop iteration takes can be added up by hand. Used for the
instruction counts in docs/gpu.md.

  python3 scripts/sass_blocks.py prefill/flash_attn.cu --arch 90 \\
      --variant m128w4n48 --hd 128 --blocks
  (pip install nvidia-cuda-cuobjdump, into any environment, first; or point
  --cuobjdump / $CUOBJDUMP at one)
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def find_cuobjdump(given):
    """--cuobjdump, $CUOBJDUMP, the PATH, then the PyPI package's copy in
    this Python's site-packages."""
    for cand in (given, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")):
        if cand:
            return cand
    for root in sys.path:
        hits = glob.glob(os.path.join(root, "nvidia", "*", "bin", "cuobjdump"))
        if hits:
            return hits[0]
    sys.exit("sass_blocks: cuobjdump not found: pip install nvidia-cuda-cuobjdump, "
             "or pass --cuobjdump PATH")


def variant_filter(root, name, hd, dtype):
    """The mangled-name fragment of a prefill attention kernel instantiation:
    the variant's enum value is its row in PREFILL_ATTN_VARIANTS (AUTO = 0)."""
    with open(os.path.join(root, "prefill", "flash_attn.h")) as f:
        names = re.findall(r'X\([A-Z0-9]+, "([a-z0-9]+)"', f.read())
    if name not in names:
        sys.exit(f"sass_blocks: no variant {name} (have {', '.join(names)})")
    tag = "9ig_bf16_t" if dtype == "bf16" else "8ig_f16_t"
    return f"I{tag}Li{hd}ELi{names.index(name) + 1}E"


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def parse(sass):
    """{kernel name: [(address, instruction text)]}"""
    kernels, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = kernels.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2).strip()))
    return kernels


def blocks(ins):
    leaders = {ins[0][0]}
    for k, (addr, text) in enumerate(ins):
        m = re.search(r"BRA (?:!?U?P\w+, )?0x([0-9a-f]+)", text)
        if m:
            leaders.add(int(m.group(1), 16))
        if k + 1 < len(ins) and any(w in text for w in ("BRA", "EXIT", "BSYNC", "RET")):
            leaders.add(ins[k + 1][0])
    out = []
    for addr, text in ins:
        if addr in leaders or not out:
            out.append((addr, []))
        out[-1][1].append(text)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("--arch", default="90", help="90, 90a, 80 ...")
    ap.add_argument("--filter", default="", help="substring of the mangled kernel name")
    ap.add_argument("--variant", help="a prefill attention variant (sets --filter)")
    ap.add_argument("--hd", type=int, default=128, help="head dim, with --variant")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"], help="with --variant")
    ap.add_argument("--blocks", action="store_true", help="list basic blocks")
    ap.add_argument("--cuobjdump", help="path of cuobjdump")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.variant:
        args.filter = variant_filter(root, args.variant, args.hd, args.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        cc = subprocess.run(["nvcc", "-std=c++17", "-O3", "-I" + root,
                             f"-gencode=arch=compute_{args.arch},code=sm_{args.arch}",
                             "-Xptxas=-v", "-cubin", "-o", cubin, args.source],
                            capture_output=True, text=True)
        if cc.returncode:
            sys.exit(cc.stderr)
        sass = subprocess.run([find_cuobjdump(args.cuobjdump), "-sass", cubin], capture_output=True,
                              text=True, check=True).stdout
    report, name = {}, None
    for line in cc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name = m.group(1)
        elif name and ("spill" in line or "Used" in line):
            report.setdefault(name, []).append(line.split(":", 1)[-1].strip())
    for kname, ins in parse(sass).items():
        if args.filter not in kname:
            continue
        mix = collections.Counter(opcode(t) for _, t in ins)
        print(f"== {kname}\n   {' | '.join(report.get(kname, []))}")
        print(f"   {len(ins)} instructions: " +
              " ".join(f"{k}:{v}" for k, v in mix.most_common(16)))
        if args.blocks:
            for addr, texts in blocks(ins):
                bm = collections.Counter(opcode(t) for t in texts)
                print(f"   {addr:06x} n={len(texts):4d} " +
                      " ".join(f"{k}{v}" for k, v in bm.most_common(6)) +
                      f"  | {texts[-1][:48]}")


if __name__ == "__main__":
    main()
