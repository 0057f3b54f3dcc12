#!/usr/bin/env python3
"""bench/sdpa_compare.py: ignite's prefill attention kernel, every tile variant
(PREFILL_ATTN_VARIANTS in prefill/flash_attn.h), against PyTorch's
scaled_dot_product_attention on the same GPU: B=1, 32 query heads, 8 KV heads,
head dim 128 and 64, causal, bf16, n = 512..16384. Prints one row per shape:
TFLOP/s of each variant, of torch, and best / torch; then per head dim the
variant with the best mean TFLOP/s. FLOPs = 4 * hd * heads * n(n+1)/2 for
both. About 40 ms of timed launches per measurement (< 90 s in all on an H200).

Usage: sdpa_compare.py --bin build/bench/bench_flash_attn [--max-n 16384]
       [--variant all|auto|NAME]
Needs torch with CUDA. Run by scripts/gpu-check.sh."""
import argparse
import re
import subprocess
import sys


def torch_tflops(torch, F, n, hd, heads=32, kv_heads=8):
    q = torch.randn(1, heads, n, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, kv_heads, n, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, kv_heads, n, hd, device="cuda", dtype=torch.bfloat16)
    try:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:  # torch < 2.5: no enable_gqa, expand the KV heads
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
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
    return ms, flops / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="path to bench_flash_attn")
    ap.add_argument("--max-n", type=int, default=16384)
    ap.add_argument("--variant", default="all", help="all, auto or a variant name")
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
        out = subprocess.run([args.bin, "--variant", args.variant, "32", "8", str(hd)] +
                             [str(n) for n in ns], capture_output=True, text=True)
        if out.returncode != 0:  # report, and still print what was timed
            print(out.stderr, file=sys.stderr)
            status = 1
        ours = {}  # variant -> n -> TFLOP/s
        for line in out.stdout.splitlines():
            m = re.search(r"variant=(\S+) .*n=(\d+) ms=([\d.]+) tflops=([\d.]+)", line)
            if m:
                ours.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(4))
        names = list(ours)
        if not names:
            continue
        w = max([7] + [len(v) for v in names])
        print(f"\nhd {hd}: TFLOP/s")
        print(f"{'n':>6} " + " ".join(f"{v:>{w}}" for v in names) +
              f" {'torch':>7} {'best':>{w}} {'best/torch':>10}")
        for n in ns:
            _, t_tf = torch_tflops(torch, F, n, hd)
            row = {v: ours[v].get(n, float("nan")) for v in names}
            best = max(names, key=lambda v: row[v] if row[v] == row[v] else -1.0)  # NaN: failed
            print(f"{n:>6} " + " ".join(f"{row[v]:>{w}.1f}" for v in names) +
                  f" {t_tf:>7.1f} {best:>{w}} {row[best] / t_tf:>10.2f}", flush=True)
        mean = {v: sum(ours[v].get(n, 0.0) for n in ns) / len(ns) for v in names}
        top = max(names, key=lambda v: mean[v])
        print(f"hd {hd}: best mean over n: {top} ({mean[top]:.1f} TFLOP/s); at n={ns[-1]}: "
              f"{max(names, key=lambda v: ours[v].get(ns[-1], 0.0))}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
