#!/usr/bin/env bash
# scripts/gpu/batch.sh: step batch of the GPU check: the batch engine (issue 14) on the
# CUDA backend end to end: `ignite bench --device cuda --requests` on synthetic
# Llama-3.2-1B shapes (head dim 64, GQA 4), 24 requests of 256 +- 64 prompt and 32
# generated tokens, once with one sequence in flight and once with 8. Its rows'
# logits against the CPU backend are the backend step's (test_backend_gpu's two
# sequences in one step); this step proves the engine runs every request to its end
# on the GPU and measures what batching gives there (the CUDA backend runs a step's
# sequences one after the other until its batched forward lands: expect P 8 near P 1).
# Writes $WORK/batch.jsonl: one report per run (docs/cli.md, bench --requests).
set -uo pipefail
n=24
status=0
: >"$WORK/batch.jsonl"
for p in 1 8; do
    echo "-- --requests $n -P $p"
    "$BIN/ignite" bench --device cuda -m synthetic:Llama-3.2-1B --requests "$n" -P "$p" \
        --input-len 256:64 --output-len 32 -o jsonl >"$WORK/p$p.jsonl" || {
        echo "FAILED: bench --requests -P $p (exit $?)"
        status=1
        continue
    }
    cat "$WORK/p$p.jsonl" | tee -a "$WORK/batch.jsonl"
    # every request completed, every token generated
    grep -q "\"completed\": *$n[,}]" "$WORK/p$p.jsonl" &&
        grep -q "\"total_output_tokens\": *$((n * 32))[,}]" "$WORK/p$p.jsonl" || {
        echo "FAILED: -P $p did not complete $n requests of 32 tokens"
        status=1
    }
done
exit $status
