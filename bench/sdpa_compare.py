#!/usr/bin/env python3
"""bench/sdpa_compare.py: ignite's prefill attention kernel against PyTorch's
scaled_dot_product_attention on the same GPU: B=1, 32 query heads, 8 KV heads,
head dim 128 and 64, causal, bf16, n = 512..16384. Prints TFLOP/s of both and
the ratio (ours / torch). FLOPs = 4 * hd * heads * n(n+1)/2 for both.

Usage: sdpa_compare.py --bin build/bench/bench_flash_attn [--max-n 16384]
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
    iters = 5  # back-to-back launches; the first batch sizes one of about 100 ms
    for rep in range(2):
        start.record()
        for _ in range(iters):
            run()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        if rep == 0:
            iters = max(5, min(2000, int(100.0 / (ms / iters)))) if ms > 0 else 2000
    ms /= iters
    flops = 4.0 * hd * heads * n * (n + 1) / 2
    return ms, flops / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="path to bench_flash_attn")
    ap.add_argument("--max-n", type=int, default=16384)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_compare: torch sees no CUDA device", file=sys.stderr)
        return 77
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ns = [n for n in (512, 1024, 2048, 4096, 8192, 16384) if n <= args.max_n]
    print(f"{'hd':>4} {'n':>6} {'ours ms':>9} {'ours TF/s':>10} {'torch ms':>9} "
          f"{'torch TF/s':>11} {'ratio':>6}")
    for hd in (128, 64):
        out = subprocess.run([args.bin, "32", "8", str(hd)] + [str(n) for n in ns],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        ours = {}
        for line in out.stdout.splitlines():
            m = re.search(r"n=(\d+) ms=([\d.]+) tflops=([\d.]+)", line)
            if m:
                ours[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        for n in ns:
            t_ms, t_tf = torch_tflops(torch, F, n, hd)
            o_ms, o_tf = ours[n]
            print(f"{hd:>4} {n:>6} {o_ms:>9.3f} {o_tf:>10.1f} {t_ms:>9.3f} {t_tf:>11.1f} "
                  f"{o_tf / t_tf:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
