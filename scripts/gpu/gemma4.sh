#!/usr/bin/env bash
# scripts/gpu/gemma4.sh: step gemma4 of scripts/gpu-steps-arch.txt: Gemma 4 E2B's
# shape on the GPU (its global layers' head dim 512: the m64w4n16 prefill variant and
# the decode attention's two-chunk lanes). First the prefill kernel at head dim 512
# against fp64 (test_flash_attn_gpu --quick m64w4n16: its 512 cases only), then
# bench/arch_speed.sh's gemma4 file (bench/random_gguf.py --arch gemma4 --shape E2B
# --type Q4_K_M: random weights, 3.4 GB) written into $WORK, `ignite bench --device
# cuda` pp512 and tg128 (native weights, 2 timed runs each), one JSON line a test into
# $WORK/gemma4.jsonl, and the file removed.
#   alone: BIN=.gpubin WORK=$OUT PY=python3 scripts/gpu/gemma4.sh
set -uo pipefail
"$BIN/test_flash_attn_gpu" --quick m64w4n16 2>&1 | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || { echo "gemma4: test_flash_attn_gpu m64w4n16 failed"; exit 1; }
f=$WORK/gemma4-e2b-q4_k_m.gguf
t0=$(date +%s)
"$PY" bench/random_gguf.py "$f" --arch gemma4 --shape E2B --type Q4_K_M || exit 1
echo "gemma4: file written in $(($(date +%s) - t0)) s"
"$BIN/ignite" bench -m "$f" --device cuda -p 512 -n 128 -r 2 -o jsonl >"$WORK/gemma4.jsonl"
rc=$?
cat "$WORK/gemma4.jsonl"
rm -f "$f"
exit $rc
