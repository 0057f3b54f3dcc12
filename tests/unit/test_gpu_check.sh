#!/usr/bin/env bash
# tests/unit/test_gpu_check.sh: the GPU check's runner (scripts/gpu-check.sh) on a
# table of fake steps, no GPU needed: a step that fails and one that runs out of
# time do not stop the later ones, the budget cuts a step's limit and skips what
# no longer fits, an empty slot is reported as such, the statuses and seconds land
# in steps.tsv, and what comes back is the tarball, steps.tsv and the steps'
# tables, nothing else. The batch step's script and table on a fake ignite and a
# fake transformers run. Then the real table against the 8-minute window and
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

# The batch step (scripts/gpu/batch.sh) on a fake ignite and a fake transformers
# run: the table's rows and ratios, a run that did not complete every request
# fails the step, transformers' error shows in its row; its Python script's plan
# without torch.
mkdir -p "$tmp/batch" "$tmp/bbin"
cat >"$tmp/bbin/ignite" <<'FAKE'
#!/bin/sh
p=0
while [ $# -gt 0 ]; do [ "$1" = -P ] && p=$2; shift; done
case $p in
    0) echo '{"test": "pp512", "avg_ts": 9000.0}'; echo '{"test": "tg128", "avg_ts": 100.0}' ;;
    256) echo '{"completed": 256, "total_output_tokens": 32768, "duration_s": 8.0, "output_throughput": 4096.0, "requests": [{"submitted_s": 0, "ttft_ms": 100, "itl_ms": [12, 12, 14, 12]}, {"submitted_s": 0, "ttft_ms": 112, "itl_ms": [12, 14, 12, 12]}]}' ;;
    *) echo '{"completed": 250, "total_output_tokens": 32000, "duration_s": 9.0, "output_throughput": 3555.5}' ;;
esac
FAKE
cat >"$tmp/bbin/py" <<'FAKE'
#!/bin/sh
if [ "$1" = bench/hf_batch_generate.py ]; then
    echo '{"engine": "transformers", "batch": 64, "requests": 64, "input_len": 512, "output_len": 128, "seconds": 4.0, "output_tok_s": 2048.0}'
    echo '{"engine": "transformers", "batch": 256, "requests": 256, "input_len": 512, "output_len": 128, "seconds": 0.0, "output_tok_s": null, "error": "CUDA out of memory"}'
    exit 1
fi
exec python3 "$@"
FAKE
chmod +x "$tmp/bbin/ignite" "$tmp/bbin/py"
(cd "$src" && BIN="$tmp/bbin" PY="$tmp/bbin/py" WORK="$tmp/batch" LIMIT=150 \
    bash scripts/gpu/batch.sh >"$tmp/batch.log" 2>&1)
rc=$?
check '[ $rc = 1 ]' "batch step: exit $rc, want 1 (-P 64 incomplete)"
bt=$tmp/batch/batch.tsv
row() { awk -F'\t' -v e="$1" -v p="$2" '$1 == e && $3 == p' "$bt"; }
check 'row ignite 1 | grep -q "	100.0	1.00	ok$"' "single row: $(row ignite 1)"
check 'row ignite 256 | grep -q "	256	256	8.00	4096.0	40.96	ok$"' "-P 256 row: $(row ignite 256)"
check 'row ignite 64 | grep -q "incomplete$"' "-P 64 row: $(row ignite 64)"
check 'row transformers 64 | grep -q "	2048.0	20.48	ok$"' "transformers 64: $(row transformers 64)"
check 'row transformers 256 | grep -q "error: CUDA out of memory$"' "transformers 256: $(row transformers 256)"
check 'grep -q "^# -P 256: ignite 4096.0 tok/s = 40.96x single decode (target 10x: met); transformers at this batch: no figure" "$bt"' \
    "-P 256 summary: $(grep '^# -P 256' "$bt")"
check 'grep -q "^# problem: -P 64: 250 of 256 requests" "$bt"' "the incomplete run named"
# pure decode steps: the gaps between the last first token (112 ms) and the first
# last token (150 ms): 12, 14, 12 of each request
check 'grep -q "^# -P 256: pure decode steps (256 rows): median 12.00 ms over 6 gaps (target <= 13 ms: met)" "$bt"' \
    "-P 256 pure decode steps: $(grep '^# -P 256: pure' "$bt")"
check 'grep -q "^# -P 64: pure decode steps: no figure" "$bt"' "-P 64 pure decode steps"
plan=$(cd "$src" && python3 bench/hf_batch_generate.py --dry-run --batches 64,256 --requests 100 2>&1)
check 'echo "$plan" | grep -q "\"num_key_value_heads\": 8"' "hf plan: $plan"
check 'echo "$plan" | tr -d " \n" | grep -q "\"batch\":64,\"calls\":\[64,36\]"' "hf plan's calls: $plan"
(cd "$src" && python3 bench/hf_batch_generate.py --batches 0 --dry-run >/dev/null 2>&1)
check '[ $? = 2 ]' "hf_batch_generate refuses a batch of 0"

python3 "$src/scripts/gpu_steps.py" || { echo "FAIL: scripts/gpu_steps.py"; fails=$((fails + 1)); }
[ $fails = 0 ] && echo "test_gpu_check: ok" || echo "test_gpu_check: $fails failed"
[ $fails = 0 ]
