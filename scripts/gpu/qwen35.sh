#!/usr/bin/env bash
# scripts/gpu/qwen35.sh: step qwen35 of the GPU check: Qwen3.5's hybrid layers on the
# CUDA backend (backend/gpu_deltanet.c, ops/gpu_deltanet.cu). First the tiny file
# (bench/random_gguf.py --arch qwen35 --shape tiny, F16): test_deltanet_gpu, the CUDA
# backend against the CPU backend on it (tests/emu/test_deltanet_emu.c's backend part:
# prefill in chunks, decode, the states, two sequences a step, batched vs alone). Then Qwen3.5-0.8B's shape (the
# file bench/arch_speed.sh names, written here in Q8_0: numpy writes it in seconds, where
# Q4_K_M takes minutes) at pp512, tg128 and pp8192 (one chunk: the DeltaNet prefill in
# the chunked form), and pp8192 again with IGNITE_DELTANET=recurrent (the A/B of the
# prefill's form). Then the delta rule alone at Qwen3.5-35B-A3B's shape (32 value heads
# of 128), n = 512 and 8192: bench_deltanet (the chunked kernel, the recurrent one, the
# chunked one's error against it) and flash-linear-attention's chunk_gated_delta_rule
# on the same shape (scripts/gpu/fla_deltanet.py, fla from .gpubin/wheels, Triton from
# the machine's torch; skipped, said in one line, where either is missing). Rows into
# $WORK/qwen35.jsonl, the kernel lines into $WORK/deltanet_kernels.txt.
set -uo pipefail
out="$WORK/qwen35.jsonl"
: >"$out"
"$PY" bench/random_gguf.py "$WORK/tiny.gguf" --arch qwen35 --shape tiny --type F16 || exit 1
"$BIN/test_deltanet_gpu" "$WORK/tiny.gguf" >"$WORK/test_deltanet_gpu.log" 2>&1
rc=$?
tail -4 "$WORK/test_deltanet_gpu.log"
[ $rc = 0 ] || { echo "FAILED: test_deltanet_gpu (exit $rc)"; exit 1; }
"$PY" bench/random_gguf.py "$WORK/q35.gguf" --arch qwen35 --shape Qwen3.5-0.8B --type Q8_0 ||
    exit 1
rc=0
"$BIN/ignite" bench --device cuda -m "$WORK/q35.gguf" -p 512 -n 128 -r 2 -o jsonl >>"$out" || rc=1
"$BIN/ignite" bench --device cuda -m "$WORK/q35.gguf" -p 8192 -n 0 -b 8192 -r 1 -o jsonl \
    >>"$out" || rc=1
IGNITE_DELTANET=recurrent "$BIN/ignite" bench --device cuda -m "$WORK/q35.gguf" -p 8192 -n 0 \
    -b 8192 -r 1 -o jsonl | sed 's/^{/{"deltanet":"recurrent",/' >>"$out" || rc=1
cat "$out"
kern="$WORK/deltanet_kernels.txt"
"$BIN/bench_deltanet" 512 8192 | tee "$kern" || rc=1
"$PY" scripts/gpu/fla_deltanet.py "$BIN/wheels" 512 8192 | tee -a "$kern"
exit $rc
