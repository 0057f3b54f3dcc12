#!/usr/bin/env bash
# scripts/gpu/gemma4.sh: Gemma 4 E2B's shape on the GPU (not yet a step of
# scripts/gpu-steps.txt: E2B's global layers have head dim 512, which the attention
# kernels do not take yet, so --device cuda refuses it in one line; add the step's
# line when they do). Writes bench/arch_speed.sh's gemma4 file (bench/random_gguf.py
# --arch gemma4 --shape E2B --type Q4_K_M: random weights, 3.4 GB) into $WORK, then
# `ignite bench --device cuda` pp512 and tg128 (native weights, 2 timed runs each),
# one JSON line a test into $WORK/gemma4.jsonl, and removes the file.
#   as a step: gemma4  60  ?  gemma4.jsonl  scripts/gpu/gemma4.sh
#   alone:     BIN=.gpubin WORK=$OUT PY=python3 scripts/gpu/gemma4.sh
set -uo pipefail
f=$WORK/gemma4-e2b-q4_k_m.gguf
t0=$(date +%s)
"$PY" bench/random_gguf.py "$f" --arch gemma4 --shape E2B --type Q4_K_M || exit 1
echo "gemma4: file written in $(($(date +%s) - t0)) s"
"$BIN/ignite" bench -m "$f" --device cuda -p 512 -n 128 -r 2 -o jsonl >"$WORK/gemma4.jsonl"
rc=$?
cat "$WORK/gemma4.jsonl"
rm -f "$f"
exit $rc
