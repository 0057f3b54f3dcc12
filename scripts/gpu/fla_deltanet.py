#!/usr/bin/env python3
"""scripts/gpu/fla_deltanet.py: flash-linear-attention's chunk_gated_delta_rule (the
peer of ignite's gk_dn_chunk, bench/bench_deltanet.c) timed on the same shape: one
sequence of n rows from a zero state, 32 heads of 128 (Qwen3.5-35B-A3B's value heads;
q and k given per value head, as transformers repeats them), q and k L2-normed, beta
in (0.5, 1), log decay in (-0.3, 0]; f16 q, k, v (ignite's tensor-core operands), f32
g and beta; the final state asked for (ignite writes it). The median of 5 calls after
3 (Triton compiles and autotunes in the first). One line per n:
    fla_chunk_gated_delta_rule n=8192 H=32 D=128 ms=...
fla from the wheels in argv[1] (scripts/gpu-prebuild.sh downloads fla-core and einops
into .gpubin/wheels) when it is not installed; Triton from the machine's torch.
Prints why and exits 77 when torch, a GPU, Triton or fla is missing."""
import os
import sys
import zipfile


def load_fla(wheels):
    try:
        import fla  # noqa: F401
        return None
    except ImportError:
        pass
    if not wheels or not os.path.isdir(wheels):
        return "fla not installed and no wheels directory"
    dest = os.path.join(os.environ.get("RUN", "/tmp"), "fla-pylib")
    for w in sorted(os.listdir(wheels)):
        if w.endswith(".whl"):
            zipfile.ZipFile(os.path.join(wheels, w)).extractall(dest)
    sys.path.insert(0, dest)
    try:
        import fla  # noqa: F401
    except ImportError as e:
        return f"fla from {wheels}: {e}"
    return None


def main():
    try:
        import torch
    except ImportError:
        print("fla_deltanet: skipped: no torch")
        return 77
    if not torch.cuda.is_available():
        print("fla_deltanet: skipped: no GPU")
        return 77
    try:
        import triton  # noqa: F401
    except ImportError:
        print("fla_deltanet: skipped: no triton beside torch")
        return 77
    why = load_fla(sys.argv[1] if len(sys.argv) > 1 else None)
    if why:
        print(f"fla_deltanet: skipped: {why}")
        return 77
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    H, D = 32, 128
    for n in [int(a) for a in sys.argv[2:]] or [512, 8192]:
        g0 = torch.Generator(device="cuda").manual_seed(1)
        def rnd(*shape):
            return torch.rand(*shape, device="cuda", generator=g0) * 2 - 1
        q = torch.nn.functional.normalize(rnd(1, n, H, D), dim=-1).half()
        k = torch.nn.functional.normalize(rnd(1, n, H, D), dim=-1).half()
        v = rnd(1, n, H, D).half()
        beta = 0.75 + 0.25 * rnd(1, n, H)
        g = -0.15 * (1 + rnd(1, n, H))

        def call():
            return chunk_gated_delta_rule(q, k, v, g, beta, scale=D ** -0.5,
                                          output_final_state=True)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        ms = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        ms.sort()
        print(f"fla_chunk_gated_delta_rule n={n} H={H} D={D} ms={ms[2]:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
