#!/usr/bin/env python3
"""tests/emu/test_gemma4_emu.py: Gemma 4 through the CUDA backend under the
emulator against the CPU backend, on a gemma4 file: bench/random_gguf.py's
`emu512` shape (F16: 4 layers of 128, window 8, 1 head on 1 KV head of
Gemma 4's head dims 256 local / 512 global, V = K on the global layer, the last two layers reading
the first two's K/V, per-layer embeddings of 16, output scales, proportional
RoPE, logits soft-capped; the `emu` shape's head dims 64 / 128 cost less
but run no kernel Gemma 4 runs), written here, run by test_backend_arch_emu --model:
24 ids prefilled in one chunk (past the window), 5 decode steps, each
step's logits within the f16 bound of backend_checks.h (3e-2 of max |logit|,
NMSE 1e-3) and the same top-1, the exported cache against the CPU's, an
imported one continuing; then two sequences a step (backend_checks.h's
run_two): a second prompt of 20 ids beside the first's decode row, 17 rows in
a step that takes the mixed route (the decode row through the decode attention
at head dim 512 on the global layer, 256 on the local, the shared-KV layers
reading their sources' rows: issue 44), 3 in a verify step, then both
decoding. Then the
same on the `moe-emu` shape (F16: 2 layers of 128, local then global, head
dims 64 / 128, 4 experts of 64, 2 used, beside a dense MLP of 256): Gemma 4's MoE on the device (backend/gpu_moe.c:
the MLP beside the experts, the router's input scale, GeGLU experts, the
per-expert scale, the three norms after). Label emu (about 8 s of CPU, and
the MoE file's 4-5; the two sequences take about 1 s of each).

The emu512 file again on a q8_0 pool (the CPU's cache q8_0 too: the same
rotation and blocks, the exported K caches within a quant step) and an fp8
pool (against the CPU's f16 cache, within the same bounds; fp8's rotated rows
not compared with f16's; the prompt and its decode steps only, --short): issue 51, the shared-KV layers reading their
sources' quantized blocks, with the queries rotated as the source's K. Then
a copy of the backend whose shared layers read blocks of their own (zeros,
never written: mutate.cmake's g4_own_blocks) must fail the q8_0 run.

The emu512 file again under the window rule (issue 47, test_backend_arch_emu
--window-rule --short: 75 positions, the window of 8 leaving block 0 behind;
the device with the rule bit for bit the device keeping every block, within
the bound of the CPU's; the cache out and back), and a copy of the pool
giving a window block back one block early (mutate.cmake's w_early) must
fail it (its logits 2e-2 off at the second step: within the CPU bound, not
the same bits). CMake's test_window_rule_gptoss_emu runs the long form on
gpt-oss's tiny file (window 32: 139 positions, a block given back handed
out again).

usage: test_gemma4_emu.py TEST_BACKEND_ARCH_EMU [MUTANT [W_MUTANT]]"""
import os
import subprocess
import sys
import tempfile

from bench_gguf import random_gguf


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rc = 0
        for shape in ("emu512", "moe-emu"):
            path = os.path.join(tmp, f"gemma4-{shape}.gguf")
            random_gguf.write(path, shape, "F16", seed=2, arch="gemma4")
            print(f"== gemma4 {shape}", flush=True)
            rc |= subprocess.run([sys.argv[1], "--model", path], timeout=600).returncode
            if shape != "emu512":
                continue
            for ct, more in (("q8_0", []), ("fp8", ["--short"])):
                print(f"== gemma4 {shape}, a {ct} pool", flush=True)
                rc |= subprocess.run([sys.argv[1], "--model", path, "--cache-type", ct] + more,
                                     timeout=600).returncode
            if len(sys.argv) > 2:
                print(f"== gemma4 {shape}, q8_0, mutant: shared layers read their own blocks",
                      flush=True)
                rc |= mutant(sys.argv[2], "g4_own_blocks",
                             ["--model", path, "--cache-type", "q8_0", "--short"])
            print(f"== gemma4 {shape}, the window rule", flush=True)
            rc |= subprocess.run([sys.argv[1], "--model", path, "--window-rule", "--short"],
                                 timeout=600).returncode
            if len(sys.argv) > 3:
                print(f"== gemma4 {shape}, the window rule, mutant: a block given back early",
                      flush=True)
                rc |= mutant(sys.argv[3], "w_early",
                             ["--model", path, "--window-rule", "--short"])
        return rc


def mutant(exe, name, args):
    """Runs a mutant's binary: 0 where its checks fail it (exit 1, a FAIL
    line, no sanitizer report), else 1 after its output's end."""
    r = subprocess.run([exe] + args, timeout=600, capture_output=True, text=True)
    caught = r.returncode == 1 and "FAIL" in r.stderr and "Sanitizer" not in r.stderr
    print(f"mutant {name}: {'caught' if caught else 'NOT caught'} (exit {r.returncode})",
          flush=True)
    if not caught:
        print(r.stderr[-2000:], file=sys.stderr)
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
