#!/usr/bin/env bash
# scripts/gpu/attn_speed.sh: step attn-speed of the GPU check: TFLOP/s of the chooser's
# candidates (every variant this device runs, ws first: on the dynamic schedule, the
# work counter) and of torch SDPA's own pick and its forced flash backend, hd 128 and
# 64, n = 1024..16384 (bench/sdpa_compare.py, a process per variant); $WORK/attn_speed.tsv
# is the chooser's new table (scripts/attn_speed_table.py --from attn_speed.tsv). Then
# the ws schedule's A/B pair, back to back: ws128n128 at hd 128 on the static schedule
# (IGNITE_WS_STATIC=1, lines "schedule=static") and on the dynamic one.
set -uo pipefail
"$PY" bench/sdpa_compare.py --bin "$BIN/bench_flash_attn" --ns 1024,2048,4096,8192,16384 \
    --hds 128,64 --timeout 25 --budget $(( ${LIMIT:-125} - 17 )) --tsv "$WORK/attn_speed.tsv"
rc=$?
echo "ws schedule A/B (ws128n128, hd 128): static, then dynamic"
IGNITE_WS_STATIC=1 timeout 6 "$BIN/bench_flash_attn" --variant ws128n128 32 8 128 2048 4096 \
    8192 16384 || rc=1
timeout 6 "$BIN/bench_flash_attn" --variant ws128n128 32 8 128 2048 4096 8192 16384 || rc=1
exit $rc
