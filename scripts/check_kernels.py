#!/usr/bin/env python3
"""scripts/check_kernels.py: what the built GPU code is, read without a GPU.

For a library, program or object file with CUDA code (the GPU check's
.gpubin/lib/libignite_core.so, or an object of ignite_gpu_sm90a):
  * no PTX is embedded (only real code: nothing is JIT-compiled on the GPU
    machine), and every ELF is for sm_90 or sm_90a (--archs to change);
  * each warp-specialized prefill kernel (flash_attn_ws_kernel) has in its
    sm_90a SASS the TMA loads and stores (UTMALDG, UTMASTG), the mbarrier
    operations (SYNCS...: arrive, try-wait), the register hand-over
    (USETMAXREG), warpgroup MMAs (HGMMA) and named barriers (BAR.SYNC with a
    thread count), and uses exactly the registers its setmaxnreg split
    starts from (168 for 384 threads, 128 for 512; a different count means
    ptxas did not honour the launch bound the split assumes);
  * each quantized GEMV (qgemv_kernel, ops/gpu_qgemv.cu) streams its weights
    with 16-byte loads that bypass L1 (LDG.E.NA.128) and no narrower ones
    (ld.global.nc.L1::no_allocate of another width would be a weight load
    the K-type repack or the load ring broke into pieces).
Prints one line per kernel; exit status 1 on any problem.

cuobjdump (and the nvdisasm it runs for -sass) come from --cuobjdump,
$CUOBJDUMP, the PATH, or the PyPI packages nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm, which it installs into the repository's .venv when none
is found (the CUDA toolkit here has no disassembler).

  python3 scripts/check_kernels.py --lib .gpubin/lib/libignite_core.so
Run by scripts/gpu-prebuild.sh and by the ctest test_kernel_sass."""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CUOBJDUMP_PKG = "nvidia-cuda-cuobjdump==13.2.51"
NVDISASM_PKG = "nvidia-cuda-nvdisasm==13.2.51"  # cuobjdump -sass runs it
# SASS each warp-specialized kernel must contain: (what, regular expression).
WS_SASS = [
    ("TMA load", r"\bUTMALDG\b"),
    ("TMA store", r"\bUTMASTG\b"),
    ("mbarrier arrive", r"\bSYNCS\.ARRIVE"),
    ("mbarrier wait", r"\bSYNCS\.PHASECHK"),
    ("setmaxnreg", r"\bUSETMAXREG\b"),
    ("wgmma", r"\bHGMMA\."),
    ("named barrier", r"\bBAR\.(SYNC|ARV)\b[^;]*, 0x"),
]
LAUNCH_REGS = {168, 128}


def find_cuobjdump(given, install):
    for cand in (given, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")):
        if cand:
            return cand
    venv = os.path.join(ROOT, ".venv")
    pattern = os.path.join(venv, "lib", "python*", "site-packages", "nvidia", "*", "bin",
                           "cuobjdump")
    hits = glob.glob(pattern)
    nvdisasm = glob.glob(pattern.replace("cuobjdump", "nvdisasm"))
    if (not hits or not nvdisasm) and install and os.path.exists(os.path.join(venv, "bin", "pip")):
        print(f"check_kernels: installing {CUOBJDUMP_PKG} {NVDISASM_PKG} into .venv",
              file=sys.stderr)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", CUOBJDUMP_PKG,
                        NVDISASM_PKG], check=False)
        hits = glob.glob(pattern)
    return hits[0] if hits else None


def run(tool, *args):
    """cuobjdump's output; nvdisasm is looked for beside it."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(tool)) + os.pathsep + env.get("PATH", "")
    out = subprocess.run([tool, *args], capture_output=True, text=True, env=env)
    if "fatal" in out.stderr:
        sys.exit(f"check_kernels: {tool} {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout + out.stderr


def check(tool, path, archs):
    problems = []
    ptx = run(tool, "--list-ptx", path)
    has_ptx = re.search(r"PTX file\s+\d+:", ptx) is not None
    if has_ptx:
        problems.append(f"{path}: embedded PTX: {ptx.strip().splitlines()[:3]}")
    elfs = re.findall(r"ELF file\s+\d+:\s*(\S+)", run(tool, "--list-elf", path))
    if not elfs:
        problems.append(f"{path}: no CUDA ELF found")
    for e in elfs:
        m = re.search(r"\.(sm_\d+a?)\.cubin", e)
        if not m or m.group(1) not in archs:
            problems.append(f"{path}: {e}: not for {', '.join(sorted(archs))}")
    regs = {}
    fn = None
    for line in run(tool, "-res-usage", path).splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"REG:(\d+)", line)
        if m and fn:
            regs[fn] = int(m.group(1))
    sass = run(tool, "-sass", path)
    funcs = re.split(r"\n\s*Function : ", sass)
    n_ws = 0
    for body in funcs[1:]:
        name = body.split("\n", 1)[0].strip()
        if "flash_attn_ws_kernel" not in name:
            continue
        n_ws += 1
        missing = [what for what, rx in WS_SASS if not re.search(rx, body)]
        counts = {what: len(re.findall(rx, body)) for what, rx in WS_SASS}
        reg = regs.get(name)
        short = re.sub(r"^.*flash_attn_ws_kernel", "flash_attn_ws_kernel", name)
        print(f"{short}: regs {reg}, " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if missing:
            problems.append(f"{short}: no {', '.join(missing)} in its SASS")
        if reg not in LAUNCH_REGS:
            problems.append(f"{short}: {reg} registers, not a launch count the setmaxnreg "
                            f"split assumes ({sorted(LAUNCH_REGS)})")
    qgemv = {}
    for body in funcs[1:]:
        name = body.split("\n", 1)[0].strip()
        if "qgemv_kernel" not in name:
            continue
        na = re.findall(r"\bLDG\.E(?:\.[A-Z0-9]+)*\.NA(?:\.[A-Z0-9]+)*", body)
        wide = [op for op in na if ".128" in op]
        qgemv[name] = (len(wide), len(na) - len(wide))
        if not wide or len(na) != len(wide):
            problems.append(f"{name}: {len(wide)} LDG.E.NA.128, {len(na) - len(wide)} narrower "
                            "streaming loads")
    if qgemv:
        counts = sorted({w for w, _ in qgemv.values()})
        print(f"qgemv_kernel: {len(qgemv)} instances, LDG.E.NA.128 per instance {counts}")
    print(f"check_kernels: {path}: {len(elfs)} ELF ({', '.join(sorted(set(elfs)))[:120]}), "
          f"PTX: {'yes' if has_ptx else 'none'}, {n_ws} ws kernels")
    return problems, n_ws


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, nargs="+",
                    help="libraries, programs or objects with CUDA code (together they must "
                         "hold the ws kernels)")
    ap.add_argument("--archs", default="sm_90,sm_90a")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--no-install", action="store_true",
                    help="exit 77 instead of installing cuobjdump when none is found")
    args = ap.parse_args()
    tool = find_cuobjdump(args.cuobjdump, not args.no_install)
    if not tool:
        print("check_kernels: no cuobjdump (pip install " + CUOBJDUMP_PKG + ")", file=sys.stderr)
        return 77
    problems, n_ws = [], 0
    paths = [x for arg in args.lib for x in arg.split(";") if x]  # a CMake list, from ctest
    for path in paths:
        more, n = check(tool, path, set(args.archs.split(",")))
        problems += more
        n_ws += n
    if n_ws == 0:
        problems.append("no flash_attn_ws_kernel in " + " ".join(paths))
    for p in problems:
        print("check_kernels: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
