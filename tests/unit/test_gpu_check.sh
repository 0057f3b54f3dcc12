#!/usr/bin/env bash
# tests/unit/test_gpu_check.sh: the GPU check's runner (scripts/gpu-check.sh) on a
# table of fake steps, no GPU needed: a step that fails and one that runs out of
# time do not stop the later ones, the budget cuts a step's limit and skips what
# no longer fits, an empty slot is reported as such, the statuses and seconds land
# in steps.tsv, and what comes back is the tarball, steps.tsv and the steps'
# tables, nothing else. Then the real table against the 8-minute window and
# docs/gpu.md (scripts/gpu_steps.py). Label unit.
set -uo pipefail
src=${IGNITE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$1"; then :; else echo "FAIL: $2"; fails=$((fails + 1)); fi; }

mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "ignite fake"\n' >"$tmp/bin/ignite"
chmod +x "$tmp/bin/ignite"
cat >"$tmp/steps.txt" <<'STEPS'
# fake steps
ok      10  1  ok.tsv     echo made >"$WORK/ok.tsv"; echo "limit $LIMIT"
fail    10  1  -          echo broken; exit 3
hang     6  1  -          sleep 30
after   10  1  after.txt  echo ran >"$WORK/after.txt"
missing 10  1  gone.tsv   true
slot     0  0  -          -  # slot: nobody's yet
STEPS

run_check() { # $1 budget, $2 out dir
    OUT=$2 GPU_CHECK_BUDGET=$1 GPU_CHECK_BIN="$tmp/bin" GPU_CHECK_STEPS="$tmp/steps.txt" \
        PY=/bin/false bash "$src/scripts/gpu-check.sh" >"$2.log" 2>&1
}

run_check 60 "$tmp/out"
rc=$?
check '[ $rc = 1 ]' "exit status $rc, want 1 (a step failed)"
st() { awk -F'\t' -v id="$1" '$1 == id {print $2}' "$2/steps.tsv"; }
check '[ "$(st ok "$tmp/out")" = ok ]' "step ok: $(st ok "$tmp/out")"
check '[ "$(st fail "$tmp/out")" = failed ]' "step fail: $(st fail "$tmp/out")"
check '[ "$(st hang "$tmp/out")" = timeout ]' "step hang: $(st hang "$tmp/out")"
check '[ "$(st after "$tmp/out")" = ok ]' "step after a failure and a timeout: $(st after "$tmp/out")"
check '[ "$(st slot "$tmp/out")" = empty ]' "slot: $(st slot "$tmp/out")"
files=$(cd "$tmp/out" && ls | sort | tr '\n' ' ')
check '[ "$files" = "after.txt gpu-check.tar.gz ok.tsv steps.tsv " ]' "files back: $files"
# (the listing goes to a file: `tar | grep -q` under pipefail fails whenever
# grep stops reading before tar has written its last name)
tar -tzf "$tmp/out/gpu-check.tar.gz" >"$tmp/listing" 2>&1
check 'grep -q "hang/log.txt" "$tmp/listing"' "the tarball has every log: $(tr '\n' ' ' <"$tmp/listing")"
check 'grep -q "limit 10" "$tmp/out/ok.tsv" || grep -q "made" "$tmp/out/ok.tsv"' "a step's table"
check 'grep -q "wrote no gone.tsv" "$tmp/out.log"' "a missing table is reported"

# A budget of 8 s: hang's limit is cut to what is left, then after is skipped.
run_check 8 "$tmp/out2"
check '[ "$(st after "$tmp/out2")" = skipped ]' "out of budget: $(st after "$tmp/out2")"
lim=$(awk -F'\t' '$1 == "hang" {print $5}' "$tmp/out2/steps.tsv")
check '[ "$lim" -le 8 ]' "hang's limit cut to the budget: $lim"

python3 "$src/scripts/gpu_steps.py" || { echo "FAIL: scripts/gpu_steps.py"; fails=$((fails + 1)); }
[ $fails = 0 ] && echo "test_gpu_check: ok" || echo "test_gpu_check: $fails failed"
[ $fails = 0 ]
