#!/usr/bin/env bash
# scripts/gpu/spec.sh: step spec of the GPU check (issues 44 and 50): the CUDA backend's
# verify steps (a sequence's k drafted tokens and the last accepted one) on the decode
# kernels. Speculation needs a model with a vocabulary, and no real GGUF fits the run's
# 64 MiB carry (SmolLM2-135M is 98 MB), so the step times what bounds it on a synthetic
# Llama-3.2-1B Q4_K (Qwen2.5 Coder 1.5B's size class): `ignite bench -p 2,5,9 -n 32
# -d 0,4096` (a step of k + 1 = 2, 5, 9 rows of one sequence at depth 0 and 4096, and the
# plain decode's time a token), once on the decode kernels and once through the prefill
# path (IGNITE_GPU_VERIFY=0); v = a k+1-row step's time over a plain token's. The
# issue's real pair (Qwen2.5 Coder 1.5B Q4_K_M with the 0.5B as draft, prompt lookup
# too) runs where $SPEC_MODELS holds both GGUF files (scripts/fetch-model.sh's names);
# otherwise the line says it skipped them. Every JSON line goes to $WORK/spec.txt.
set -uo pipefail
out="$WORK/spec.txt"
: >"$out"
status=0
bench() {
    local what=$1
    shift
    echo "-- $what: $*" | tee -a "$out"
    timeout 60 "$BIN/ignite" bench --device cuda -o jsonl "$@" >>"$out" 2>"$WORK/$what.err"
    local rc=$?
    tail -2 "$WORK/$what.err"
    [ $rc = 0 ] || { echo "FAILED: $what (exit $rc)" | tee -a "$out"; status=1; }
}
T=synthetic:Llama-3.2-1B:Q4_K
bench verify-decode-kernels -m "$T" -p 2,5,9 -n 32 -d 0,4096 -r 2
IGNITE_GPU_VERIFY=0 bench verify-prefill-path -m "$T" -p 2,5,9 -n 0 -d 0,4096 -r 2
M=${SPEC_MODELS:-}
Q=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf D=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
if [ -n "$M" ] && [ -f "$Q" ] && [ -f "$D" ]; then
    R=(--requests 4 -P 1 --input-len 256 --output-len 128)
    bench qwen-plain -m "$Q" "${R[@]}"
    bench qwen-draft -m "$Q" -md "$D" "${R[@]}"
    bench qwen-lookup -m "$Q" --lookup "${R[@]}"
else
    echo "qwen2.5-coder 1.5B / 0.5B: skipped (not on this machine: SPEC_MODELS)" | tee -a "$out"
fi
exit $status
