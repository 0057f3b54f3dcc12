#!/usr/bin/env python3
"""bench/sdpa_compare.py: ignite's prefill attention kernel, every tile variant
(PREFILL_ATTN_VARIANTS in prefill/flash_attn.h), against PyTorch's
scaled_dot_product_attention on the same GPU: B=1, 32 query heads, 8 KV heads,
head dim 128 and 64, causal, bf16, n = 512..16384. Two torch figures: the
backend torch picks itself ("torch": cuDNN or FlashAttention-3-class kernels
on Hopper), and its flash backend forced ("flash": FlashAttention-2, the
issue's reference). Prints one row per shape: TFLOP/s of each variant, of
both, and best / flash; then per head dim the variant with the best mean
TFLOP/s. FLOPs = 4 * hd * heads * n(n+1)/2 for all. About 40 ms of timed
launches per measurement (< 2 min in all on an H200).

Each variant is timed by a bench_flash_attn process of its own, with a time
limit: a variant that faults the CUDA context or hangs loses its own figures
only (printed as nan, exit status 1).

Usage: sdpa_compare.py --bin build/bench/bench_flash_attn [--max-n 16384]
       [--variant all|auto|NAME]
Needs torch with CUDA. Run by scripts/gpu-check.sh."""
import argparse
import contextlib
import re
import subprocess
import sys


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


def variant_names(binary, hd, variant):
    if variant != "all":
        return [variant]
    out = subprocess.run([binary, "--list", str(hd)], capture_output=True, text=True,
                         timeout=60)
    return out.stdout.split()


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
    ap.add_argument("--max-n", type=int, default=16384)
    ap.add_argument("--variant", default="all", help="all, auto or a variant name")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per variant process")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_compare: torch sees no CUDA device", file=sys.stderr)
        return 77
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ns = [n for n in (512, 1024, 2048, 4096, 8192, 16384) if n <= args.max_n]
    status = 0
    for hd in (128, 64):
        ours = {}  # variant -> n -> TFLOP/s
        for name in variant_names(args.bin, hd, args.variant):
            ours[name], ok = time_variant(args.bin, name, hd, ns, args.timeout)
            status |= 0 if ok else 1
        names = list(ours)
        if not names:
            status = 1
            continue
        w = max([7] + [len(v) for v in names])
        print(f"\nhd {hd}: TFLOP/s")
        print(f"{'n':>6} " + " ".join(f"{v:>{w}}" for v in names) +
              f" {'torch':>7} {'flash':>7} {'best':>{w}} {'best/flash':>10}")
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
                  f" {t_tf:>7.1f} {f_tf:>7.1f} {best:>{w}} {row[best] / f_tf:>10.2f}",
                  flush=True)
        if notes:
            print(f"flash: {', '.join(sorted(notes))}")
        mean = {v: sum(ours[v].get(n, 0.0) for n in ns) / len(ns) for v in names}
        top = max(names, key=lambda v: mean[v])
        print(f"hd {hd}: best mean over n: {top} ({mean[top]:.1f} TFLOP/s); at n={ns[-1]}: "
              f"{max(names, key=lambda v: ours[v].get(ns[-1], 0.0))}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
