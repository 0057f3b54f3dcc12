#!/usr/bin/env bash
# scripts/gpu/attn_speed.sh: step attn-speed of the GPU check: TFLOP/s of the chooser's
# candidates (every variant this device runs, ws first) and of torch SDPA's own pick
# and its forced flash backend, hd 128 and 64, n = 1024..16384 (bench/sdpa_compare.py,
# a process per variant); $WORK/attn_speed.tsv is the chooser's new table
# (scripts/attn_speed_table.py --from attn_speed.tsv).
set -uo pipefail
exec "$PY" bench/sdpa_compare.py --bin "$BIN/bench_flash_attn" --ns 1024,2048,4096,8192,16384 \
    --hds 128,64 --timeout 25 --budget $(( ${LIMIT:-125} - 5 )) --tsv "$WORK/attn_speed.tsv"
