#!/usr/bin/env bash
# scripts/gpu/spec.sh: step spec of the GPU check (issues 44 and 50): speculative
# decoding on the CUDA backend, its verify steps (a sequence's k drafted tokens and
# the last accepted one) on the decode kernels. `ignite bench --requests` on a
# synthetic Llama-3.2-1B (Q8_0) as the target, one sequence at a time (-P 1, 128
# prompt tokens, 64 out): plain decoding; prompt lookup with the verify steps on the
# decode kernels and again through the prefill path (IGNITE_GPU_VERIFY=0: the verify
# step's time against k plain steps, bench's `v`, either way); the same model in Q4_0
# as a draft. Each JSON line (tok/s, acceptance, k, v) goes to $WORK/spec.txt. The
# issue's real pair (Qwen2.5 Coder 1.5B Q4_K_M with the 0.5B as draft) runs where
# $SPEC_MODELS holds both GGUF files (qwen2.5-coder-1.5b-instruct-q4_k_m.gguf and
# qwen2.5-coder-0.5b-instruct-q4_k_m.gguf); they do not fit the run's 64 MiB carry, so
# the line says it skipped them otherwise.
set -uo pipefail
out="$WORK/spec.txt"
: >"$out"
status=0
bench() {
    local what=$1
    shift
    echo "-- $what: $*" | tee -a "$out"
    timeout 20 "$BIN/ignite" bench --device cuda --requests 2 -P 1 --input-len 128 \
        --output-len 64 -o jsonl "$@" >>"$out" 2>"$WORK/$what.err"
    local rc=$?
    tail -2 "$WORK/$what.err"
    [ $rc = 0 ] || { echo "FAILED: $what (exit $rc)" | tee -a "$out"; status=1; }
}
T=synthetic:Llama-3.2-1B:Q8_0
bench plain -m "$T"
bench lookup -m "$T" --lookup
IGNITE_GPU_VERIFY=0 bench lookup-prefill-path -m "$T" --lookup
bench draft -m "$T" -md synthetic:Llama-3.2-1B:Q4_0 --spec-draft-n-max 4
M=${SPEC_MODELS:-}
if [ -n "$M" ] && [ -f "$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" ] &&
   [ -f "$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" ]; then
    Q="$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    bench qwen-plain -m "$Q"
    bench qwen-draft -m "$Q" -md "$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    bench qwen-lookup -m "$Q" --lookup
else
    echo "qwen2.5-coder 1.5B / 0.5B: skipped (not on this machine: SPEC_MODELS)" | tee -a "$out"
fi
cat "$out"
exit $status
