#!/usr/bin/env bash
# tests/unit/test_gpu_check.sh: the GPU check's runner (scripts/gpu-check.sh) on a
# table of fake steps, no GPU needed: a step that fails and one that runs out of
# time do not stop the later ones, the budget cuts a step's limit and skips what
# no longer fits, an empty slot is reported as such, the statuses and seconds land
# in steps.tsv, and what comes back is the tarball, steps.tsv and the steps'
# tables, nothing else. The batch step's script and table on a fake ignite and a
# fake transformers run; the attn-speed step's paged A/B on a fake bench. Then the real table against the 8-minute window and
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
# run: the table's rows and ratios (IGNITE_GPU_MIXED=0's run beside the default's), a run that did not complete every request
# fails the step, transformers' error shows in its row; its Python script's plan
# without torch.
mkdir -p "$tmp/batch" "$tmp/bbin"
cat >"$tmp/bbin/ignite" <<'FAKE'
#!/bin/sh
p=0
while [ $# -gt 0 ]; do [ "$1" = -P ] && p=$2; shift; done
case $p in
    0) echo '{"test": "pp512", "avg_ts": 9000.0}'; echo '{"test": "tg128", "avg_ts": 100.0}' ;;
    256) [ "${IGNITE_GPU_MIXED:-}" = 0 ] && { echo '{"completed": 256, "total_output_tokens": 32768, "duration_s": 10.24, "output_throughput": 3200.0}'; exit 0; }
         echo '{"completed": 256, "total_output_tokens": 32768, "duration_s": 8.0, "output_throughput": 4096.0, "requests": [{"submitted_s": 0, "ttft_ms": 100, "itl_ms": [12, 12, 14, 12]}, {"submitted_s": 0, "ttft_ms": 112, "itl_ms": [12, 14, 12, 12]}]}' ;;
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
check 'grep -q "^ignite	requests 512/128 IGNITE_GPU_MIXED=0	256	256	256	10.24	3200.0	32.00	ok$" "$bt"' \
    "-P 256 IGNITE_GPU_MIXED=0 row: $(grep MIXED=0 "$bt")"
check 'grep -q "^# -P 256: IGNITE_GPU_MIXED=0 3200.0 tok/s; the default (decode rows of mixed steps through the decode attention) 4096.0 tok/s = 1.280x$" "$bt"' \
    "the mixed A/B line: $(grep '^# -P 256: IGNITE' "$bt")"
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

# The attn-speed step's paged A/B (scripts/gpu/attn_speed.sh, attn_paged_table.py) on a
# fake bench_flash_attn (paged 2 % slower at hd 128, 10 % at hd 64, a static line
# kept apart) and a fake sdpa_compare.py: the pairs' ratios land in attn_speed.tsv.
mkdir -p "$tmp/attn" "$tmp/abin"
cat >"$tmp/abin/bench_flash_attn" <<'FAKE'
#!/bin/sh
paged=0 pos0=""
while [ "${1#--}" != "$1" ]; do
    case $1 in --paged) paged=1; shift ;; --pos0) pos0=" pos0=$2"; shift 2 ;; *) shift 2 ;; esac
done
hd=$3; shift 3
for n in "$@"; do
    echo "flash_attn variant=ws128n128 n_head=32 n_head_kv=8 hd=$hd n=$n ms=2.0000 tflops=500.00$pos0"
    [ $paged = 1 ] && [ "$hd" = 128 ] && echo "flash_attn variant=ws128n128 n_head=32 n_head_kv=8 hd=$hd n=$n ms=2.0400 tflops=490.00$pos0 paged=1"
    [ $paged = 1 ] && [ "$hd" = 64 ] && echo "flash_attn variant=ws128n128 n_head=32 n_head_kv=8 hd=$hd n=$n ms=2.2000 tflops=450.00$pos0 paged=1"
done
exit 0
FAKE
cat >"$tmp/abin/py" <<'FAKE'
#!/bin/sh
[ "$1" = bench/sdpa_compare.py ] && exit 0
exec python3 "$@"
FAKE
chmod +x "$tmp/abin/bench_flash_attn" "$tmp/abin/py"
(cd "$src" && BIN="$tmp/abin" PY="$tmp/abin/py" WORK="$tmp/attn" LIMIT=55 \
    bash scripts/gpu/attn_speed.sh >"$tmp/attn.log" 2>&1)
rc=$?
at=$tmp/attn/attn_speed.tsv
check '[ $rc = 0 ]' "attn-speed step on fakes: exit $rc"
check 'grep -q "^# paged ws128n128 hd=128 n=4096 pos0=0: paged/unpaged time 1.020 (2.0400 / 2.0000 ms) (target <= 1.05: met)$" "$at"' \
    "paged hd 128: $(grep 'hd=128 n=4096 pos0=0' "$at")"
check 'grep -q "^# paged ws128n128 hd=128 n=4096 pos0=4096: paged/unpaged time 1.020" "$at"' "paged after pos0"
check 'grep -q "^# paged ws128n128 hd=64 n=4096 pos0=0: paged/unpaged time 1.100 .*(target <= 1.05: not met)$" "$at"' \
    "paged hd 64: $(grep 'hd=64' "$at")"
check 'grep -q "^# paged: 4 of 5 pairs within 5 %$" "$at"' "paged summary: $(grep '^# paged:' "$at")"
printf 'flash_attn variant=ws128n128 n_head=32 n_head_kv=8 hd=128 n=2048 ms=1.0 tflops=1.0 schedule=static paged=1\n' \
    >"$tmp/orphan.txt"
python3 "$src/scripts/gpu/attn_paged_table.py" "$tmp/orphan.txt" >"$tmp/orphan.out"
rc=$?
check '[ $rc = 1 ] && grep -q "no unpaged line" "$tmp/orphan.out"' "a paged line alone: $(cat "$tmp/orphan.out")"

python3 "$src/scripts/gpu_steps.py" || { echo "FAIL: scripts/gpu_steps.py"; fails=$((fails + 1)); }
[ $fails = 0 ] && echo "test_gpu_check: ok" || echo "test_gpu_check: $fails failed"
[ $fails = 0 ]
