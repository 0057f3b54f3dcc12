#!/usr/bin/env python3
"""bench/sdpa_compare.py: ignite's prefill attention kernel, every tile variant
(PREFILL_ATTN_VARIANTS in prefill/flash_attn.h) this device runs, against
PyTorch's scaled_dot_product_attention on the same GPU: B=1, 32 query heads,
8 KV heads, causal, bf16, head dims and n as given (default 128 and 64,
n = 1024..16384). Two torch figures: the backend torch picks itself ("torch":
cuDNN or FlashAttention-3-class kernels on Hopper), and its flash backend
forced ("flash": FlashAttention-2). Prints one row per shape: TFLOP/s of each
variant, of both, best / flash and best / torch; then per head dim the
variant with the best mean TFLOP/s. FLOPs = 4 * hd * heads * n(n+1)/2 for
all. About 40 ms of timed launches per measurement.

Each variant is timed by a bench_flash_attn process of its own, with a time
limit: a variant that faults the CUDA context or hangs loses its own figures
only (printed as nan, exit status 1). The ws variants go first, then the
wgmma ones, then mma.sync, and --budget stops starting new ones when the
step's time is nearly spent (what was measured is kept).

--tsv FILE writes every figure as the chooser's table: device, cc, variant,
hd, n, tflops (torch's rows as variants "torch" and "flash");
scripts/attn_speed_table.py --from FILE makes it the chooser's.

Usage: sdpa_compare.py --bin build/bench/bench_flash_attn [--ns 1024,...]
       [--hds 128,64] [--variant all|auto|NAME] [--tsv FILE] [--budget S]
       [--skip NAME,...]
Needs torch with CUDA. Run by scripts/gpu/attn_speed.sh (the GPU check)."""
import argparse
import contextlib
import re
import subprocess
import sys
import time


def flash_backend(torch):
    """A context manager that restricts SDPA to its flash backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:  # torch < 2.3
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False)


def torch_tflops(torch, F, n, hd, backend, heads=32, kv_heads=8):
    """TFLOP/s of SDPA under `backend` (a context-manager factory), and a note:
    "" or "kv expanded" where the backend takes no GQA and K/V were repeated
    per query head beforehand (outside the timing)."""
    q = torch.randn(1, heads, n, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, kv_heads, n, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, kv_heads, n, hd, device="cuda", dtype=torch.bfloat16)
    note = ""
    with backend():
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except (TypeError, RuntimeError):  # no enable_gqa (torch < 2.5) or not in this backend
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            note = "kv expanded"
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iters = 5  # back-to-back launches; the first batch sizes one of about 40 ms
        for rep in range(2):
            start.record()
            for _ in range(iters):
                run()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            if rep == 0:
                iters = max(5, min(1000, int(40.0 / (ms / iters)))) if ms > 0 else 1000
    ms /= iters
    flops = 4.0 * hd * heads * n * (n + 1) / 2
    return flops / (ms * 1e-3) / 1e12, note


def variant_names(binary, hd, variant, skip=()):
    """The variants to time at hd, the ws ones first, then wgmma, then mma.sync;
    those named in skip left out."""
    if variant != "all":
        return [variant]
    out = subprocess.run([binary, "--list", str(hd)], capture_output=True, text=True,
                         timeout=60)
    names = [v for v in out.stdout.split() if v not in skip]
    rank = lambda v: 0 if v.startswith("ws") else 1 if v.startswith("wg") else 2
    return sorted(names, key=rank)


def time_variant(binary, name, hd, ns, timeout):
    """{n: TFLOP/s} of one variant, timed in its own process; missing n failed."""
    try:
        out = subprocess.run([binary, "--variant", name, "32", "8", str(hd)] +
                             [str(n) for n in ns], capture_output=True, text=True,
                             timeout=timeout)
        stdout, stderr, rc = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as e:  # its output comes back as bytes
        stdout = (e.stdout or b"").decode(errors="replace")
        stderr = f"no result within {timeout} s"
        rc = 124
    tflops = {}
    for line in stdout.splitlines():
        m = re.search(r"n=(\d+) ms=([\d.]+) tflops=([\d.]+)", line)
        if m:
            tflops[int(m.group(1))] = float(m.group(3))
    if rc != 0:  # report, and still use what was timed
        print(f"sdpa_compare: {name} hd {hd}: exit {rc}: {stderr.strip()}", file=sys.stderr)
    return tflops, rc == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="path to bench_flash_attn")
    ap.add_argument("--ns", default="1024,2048,4096,8192,16384")
    ap.add_argument("--hds", default="128,64")
    ap.add_argument("--variant", default="all", help="all, auto or a variant name")
    ap.add_argument("--timeout", type=int, default=30, help="seconds per variant process")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds after which no further variant is started (0: none)")
    ap.add_argument("--tsv", help="write device, cc, variant, hd, n, tflops rows here")
    ap.add_argument("--skip", default="", help="variants (comma-separated) not to time")
    args = ap.parse_args()
    t0 = time.time()
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_compare: torch sees no CUDA device", file=sys.stderr)
        return 77
    dev = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    cc = 10 * major + minor
    print(f"device: {dev} (cc {cc}), torch {torch.__version__}")
    ns = [int(x) for x in args.ns.split(",")]
    rows = []  # (variant, hd, n, tflops)
    status = 0
    for hd in [int(x) for x in args.hds.split(",")]:
        ours = {}  # variant -> n -> TFLOP/s
        for name in variant_names(args.bin, hd, args.variant, args.skip.split(",")):
            if args.budget and time.time() - t0 > args.budget:
                print(f"sdpa_compare: out of time, {name} hd {hd} not timed", file=sys.stderr)
                status = 1
                continue
            ours[name], ok = time_variant(args.bin, name, hd, ns, args.timeout)
            status |= 0 if ok else 1
        names = list(ours)
        if not names:
            status = 1
            continue
        w = max([7] + [len(v) for v in names])
        print(f"\nhd {hd}: TFLOP/s")
        print(f"{'n':>6} " + " ".join(f"{v:>{w}}" for v in names) +
              f" {'torch':>7} {'flash':>7} {'best':>{w}} {'best/flash':>10} {'best/torch':>10}")
        notes = set()
        for n in ns:
            t_tf, _ = torch_tflops(torch, F, n, hd, contextlib.nullcontext)
            try:
                f_tf, note = torch_tflops(torch, F, n, hd, lambda: flash_backend(torch))
            except RuntimeError as e:  # no flash kernel for this GPU or build
                f_tf, note = float("nan"), f"unavailable ({str(e).splitlines()[0]})"
            if note:
                notes.add(note)
            row = {v: ours[v].get(n, float("nan")) for v in names}
            best = max(names, key=lambda v: row[v] if row[v] == row[v] else -1.0)  # NaN: failed
            print(f"{n:>6} " + " ".join(f"{row[v]:>{w}.1f}" for v in names) +
                  f" {t_tf:>7.1f} {f_tf:>7.1f} {best:>{w}} {row[best] / f_tf:>10.2f}"
                  f" {row[best] / t_tf:>10.2f}", flush=True)
            rows += [(v, hd, n, row[v]) for v in names if row[v] == row[v]]
            rows += [("torch", hd, n, t_tf), ("flash", hd, n, f_tf)]
        if notes:
            print(f"flash: {', '.join(sorted(notes))}")
        mean = {v: sum(ours[v].get(n, 0.0) for n in ns) / len(ns) for v in names}
        top = max(names, key=lambda v: mean[v])
        print(f"hd {hd}: best mean over n: {top} ({mean[top]:.1f} TFLOP/s); at n={ns[-1]}: "
              f"{max(names, key=lambda v: ours[v].get(ns[-1], 0.0))}", flush=True)
    if args.tsv:
        with open(args.tsv, "w") as f:
            f.write("device\tcc\tvariant\thd\tn\ttflops\n")
            for v, hd, n, tf in rows:
                f.write(f"{dev}\t{cc}\t{v}\t{hd}\t{n}\t{tf:.1f}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
