#!/usr/bin/env bash
# scripts/gpu/kvq.sh: step kvq of scripts/gpu-steps-kvq.txt: the quantized KV pool on
# the GPU (issue 51), never run on a GPU yet. Two parts, into $WORK/kvq.txt:
#   attn   bench_decode_kernels --kv: the split-KV decode attention over an f16, q8_0
#          and fp8 pool (Llama-3-8B's heads, 32 / 8, hd 128), one sequence at 4096 and
#          32768 positions and 8 at 32768; GB/s of the pool's bytes and of_copy, the
#          fraction of the device-to-device copy's bandwidth (target: q8_0/fp8 >= 0.80
#          at 32k), each checked against its twin
#   serve  synthetic Llama-3-8B f16 weights, 8 requests of 32768 in / 128 out at -P 8,
#          the pool f16 then q8_0 then fp8 (-ctk/-ctv): output tokens/s (target: q8_0 >=
#          1.4x f16; one sequence's bound near 1.13x by its f16 weights)
set -uo pipefail
limit=${LIMIT:-240}
out="$WORK/kvq.txt"
status=0
{
    echo "== attn (bench_decode_kernels --kv)"
    timeout --kill-after=3 60 "$BIN/bench_decode_kernels" --kv || status=1
} >>"$out" 2>&1
left=$(((limit - SECONDS - 5) / 3))
for t in f16 q8_0 fp8; do
    echo "== serve $t (${left} s)" >>"$out"
    timeout --kill-after=3 "$left" "$BIN/ignite" bench --device cuda \
        -m synthetic:Llama-3-8B:F16 --gpu-weights f16 -ctk $t -ctv $t \
        --requests 8 -P 8 --input-len 32768 --output-len 128 -o jsonl >>"$out" 2>&1 ||
        status=1
done
cat "$out"
exit $status
