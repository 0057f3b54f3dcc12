#!/usr/bin/env bash
# scripts/gpu/attn_speed.sh: step attn-speed of the GPU check: TFLOP/s of the chooser's
# candidates (every variant this device runs, ws first: on the dynamic schedule, the
# work counter) and of torch SDPA's own pick and its forced flash backend, hd 128 and
# 64, n = 1024..16384 (bench/sdpa_compare.py, a process per variant; not ws192n64, which
# ran at 0.78-0.80x ws128n128 at every n on 2026-12-04: its process's seconds went to
# ws192n128, FA3's hd 64 tile, untimed so far); $WORK/attn_speed.tsv
# is the chooser's new table (scripts/attn_speed_table.py --from attn_speed.tsv). Then
# the ws schedule's A/B pair, back to back: ws128n128 at hd 128 on the static schedule
# (IGNITE_WS_STATIC=1, lines "schedule=static") and on the dynamic one. Then the paged
# A/B (issue 44: paged within 5 % of unpaged): ws128n128 (the dynamic ws schedule, which
# reads a pool; hd 64's measured pick, wg64n64, reads none) at hd 128 (n = 2048, 4096,
# 8192 from position 0, and a 4096 chunk after 4096 cached positions) and hd 64 (n =
# 4096), each shape unpaged then through a shuffled pool (`bench_flash_attn --paged`); scripts/gpu/attn_paged_table.py appends the paged/unpaged times to
# attn_speed.tsv as # lines (the chooser's table reader skips them).
set -uo pipefail
"$PY" bench/sdpa_compare.py --bin "$BIN/bench_flash_attn" --ns 1024,2048,4096,8192,16384 \
    --hds 128,64 --timeout 25 --budget $(( ${LIMIT:-125} - 27 )) --tsv "$WORK/attn_speed.tsv" \
    --skip ws192n64
rc=$?
echo "ws schedule A/B (ws128n128, hd 128): static, then dynamic"
IGNITE_WS_STATIC=1 timeout 6 "$BIN/bench_flash_attn" --variant ws128n128 32 8 128 2048 4096 \
    8192 16384 || rc=1
timeout 6 "$BIN/bench_flash_attn" --variant ws128n128 32 8 128 2048 4096 8192 16384 || rc=1
echo "paged A/B (ws128n128): unpaged, then paged=1"
paged=$WORK/paged.txt
: >"$paged"
pa=("$BIN/bench_flash_attn" --paged --variant ws128n128)
timeout 5 "${pa[@]}" 32 8 128 2048 4096 8192 | tee -a "$paged" || rc=1
timeout 3 "${pa[@]}" --pos0 4096 32 8 128 4096 | tee -a "$paged" || rc=1
timeout 3 "${pa[@]}" 32 8 64 4096 | tee -a "$paged" || rc=1
"$PY" scripts/gpu/attn_paged_table.py "$paged" | tee -a "$WORK/attn_speed.tsv" || rc=1
exit $rc
