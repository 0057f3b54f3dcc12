#!/usr/bin/env bash
# scripts/gpu/ttft.sh: step ttft of the GPU check: time to first token of `ignite bench
# --device cuda` on synthetic Llama-3-8B shapes against transformers + SDPA in the
# same run (bench/cuda_vs_hf.py), with the chooser's pick and with the fastest
# variant of this run's attn-speed step at hd 128 near n = 8192.
set -uo pipefail
exec "$PY" bench/cuda_vs_hf.py --bin "$BIN/ignite" --model Llama-3-8B -p 512,2048,8192 -n 16 \
    -r 2 --best-from "$RUN/attn-speed/attn_speed.tsv" --json "$WORK/ttft.json"
