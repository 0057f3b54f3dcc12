#!/usr/bin/env bash
# scripts/gpu/batch.sh: step batch of the GPU check: batched serving on the CUDA
# backend against its own single-sequence decode and against Hugging Face
# transformers' batched generate, same shapes, same device, same run (issue 15's
# "Numbers to reach"). Synthetic Llama-3-8B with f16 weights (random, made on the
# device):
#   single  `ignite bench -p 512 -n 128`: the tg128 rate of one sequence
#   p256    `ignite bench --requests 256 -P 256`, 512 in / 128 out each
#   p64     the same at -P 64
#   p256.mixed0  p256 again under IGNITE_GPU_MIXED=0 (decode rows of mixed steps
#           through the prefill kernel: the A/B of issue 44's mixed route), in the
#           time p64 and the rest leave (skipped before hf's share is touched)
#   hf      bench/hf_batch_generate.py: LlamaForCausalLM of the same configuration,
#           f16 random weights, one generate of 64 and one of 256 prompts of 512
#           random tokens, exactly 128 new tokens each (a batch of 64's rate is the
#           rate of 256 requests run 64 at a time)
# Each part runs under its own timeout, cut so the later ones keep their share
# of $LIMIT; a part that fails or runs out of time leaves its row's status. The
# table, $WORK/batch.tsv (scripts/gpu/batch_table.py: output tokens/s, x the
# single-sequence decode, ignite against transformers), is written at the end and
# again after every part, so a step killed at its limit still returns one.
# Exit 1 when an ignite run fails or does not complete every request with every
# token; transformers' failures only show in the table.
set -uo pipefail
model=Llama-3-8B
n=256
in_len=512
out_len=128
limit=${LIMIT:-150}
t_end=$((SECONDS + limit - 3)) # the last seconds: the table
status=0
: >"$WORK/parts.tsv"

table() {
    "$PY" scripts/gpu/batch_table.py "$WORK" --requests $n --input-len $in_len \
        --output-len $out_len -o "$WORK/batch.tsv" >/dev/null
}

# part NAME CAP RESERVE OUT CMD...: runs CMD (stdout to OUT) for at most CAP
# seconds, fewer if RESERVE seconds must stay for the later parts.
part() {
    local name=$1 cap=$2 reserve=$3 out=$4 rc st
    shift 4
    local left=$((t_end - SECONDS - reserve))
    local lim=$((cap < left ? cap : left))
    if [ "$lim" -lt 5 ]; then
        echo "-- $name: skipped (${left} s left)"
        printf '%s\tskipped\t-\n' "$name" >>"$WORK/parts.tsv"
        return 1
    fi
    echo "-- $name (${lim} s): $*"
    timeout --kill-after=3 "$lim" "$@" >"$out"
    rc=$?
    case $rc in
        0) st=ok ;;
        124|137) st=timeout ;;
        *) st=failed ;;
    esac
    echo "-- $name: $st (exit $rc)"
    printf '%s\t%s\t%s\n' "$name" "$st" "$rc" >>"$WORK/parts.tsv"
    cat "$out"
    table
    [ "$st" = ok ]
}

ig=("$BIN/ignite" bench --device cuda -m "synthetic:$model:F16" --gpu-weights f16)
# caps and reserves (s): docs/gpu.md, "The GPU check's steps"
part single 15 130 "$WORK/single.jsonl" "${ig[@]}" -p $in_len -n $out_len -r 1 -o jsonl ||
    status=1
part p256 35 95 "$WORK/p256.jsonl" "${ig[@]}" --requests $n -P 256 --input-len $in_len \
    --output-len $out_len -o jsonl || status=1
part p64 30 65 "$WORK/p64.jsonl" "${ig[@]}" --requests $n -P 64 --input-len $in_len \
    --output-len $out_len -o jsonl || status=1
part p256.mixed0 35 65 "$WORK/p256.mixed0.jsonl" env IGNITE_GPU_MIXED=0 "${ig[@]}" \
    --requests $n -P 256 --input-len $in_len --output-len $out_len -o jsonl ||
    grep -q '^p256.mixed0	skipped' "$WORK/parts.tsv" || status=1 # skipped: no failure
part hf 65 0 "$WORK/hf.jsonl" "$PY" bench/hf_batch_generate.py --model $model \
    --batches 64,256 --input-len $in_len --output-len $out_len --dtype f16
"$PY" scripts/gpu/batch_table.py "$WORK" --requests $n --input-len $in_len \
    --output-len $out_len -o "$WORK/batch.tsv" || status=1
exit $status
