#!/usr/bin/env bash
# scripts/gpu/attn_correct.sh: step attn-correct of the GPU check (scripts/gpu-steps.txt):
# every prefill attention variant this device runs, the ws and wgmma ones first,
# against fp64 on test_flash_attn_gpu's quick list (small n first), each in a
# process of its own so a variant that faults the CUDA context fails alone, in
# parallel (the fp64 reference is CPU time), all within the step's limit ($LIMIT).
# Writes $WORK/attn_correct.tsv: variant, exit code, the test's summary.
set -uo pipefail
variants=$(for hd in 64 128 256; do "$BIN/bench_flash_attn" --list "$hd"; done | awk '!seen[$0]++')
ordered=$(printf '%s\n' $variants | grep '^ws'; printf '%s\n' $variants | grep '^wg';
          printf '%s\n' $variants | grep -v '^w')
[ -n "$ordered" ] || { echo "attn_correct: no variant runs on this device"; exit 1; }
per=$(( ${LIMIT:-75} - 8 ))
jobs=$(nproc 2>/dev/null || echo 8)
printf 'variant\texit\tsummary\n' >"$WORK/attn_correct.tsv"
run_one() {
    timeout "$per" "$BIN/test_flash_attn_gpu" --quick "$1" >"$WORK/$1.log" 2>&1
    echo "$?" >"$WORK/$1.rc"
}
running=0
for v in $ordered; do
    run_one "$v" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
status=0
for v in $ordered; do
    rc=$(cat "$WORK/$v.rc" 2>/dev/null || echo 125)
    summary=$(tail -1 "$WORK/$v.log" | tr '\t' ' ')
    printf '%s\t%s\t%s\n' "$v" "$rc" "$summary" >>"$WORK/attn_correct.tsv"
    echo "$v: exit $rc: $summary"
    if [ "$rc" != 0 ]; then
        grep -m 5 FAIL "$WORK/$v.log"
        status=1
    fi
done
exit $status
