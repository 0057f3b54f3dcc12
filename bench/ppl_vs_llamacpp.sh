#!/usr/bin/env bash
# bench/ppl_vs_llamacpp.sh: the quality of ignite's paths and llama.cpp's on
# one quantized model, each against the logits of an F32 file made from that
# model (bench/gguf_to_f32.py), with `ignite perplexity` and llama.cpp's
# llama-perplexity on the same text and windows. A benchmark, not a test.
#
#   ignite, F32 file, --exact            -> ignite's base (its log-probabilities)
#   ignite, quantized, int8 (default)    vs ignite's base
#   ignite, quantized, --exact           vs ignite's base
#   llama.cpp, F32 file                  -> llama.cpp's base
#   llama.cpp, quantized (its defaults)  vs llama.cpp's base
# and, since the two tools read each other's base files, across: ignite's int8
# path and llama.cpp against the other's base, and the two F32 runs against
# each other (how far apart the two bases are). -f is given to every ignite
# run against llama.cpp's base: ignite checks that its tokens of the text are
# the ones llama.cpp wrote.
#
# With --cache-type T[,T..] it compares KV cache types instead, on the
# quantized model alone: each tool's f16 cache is its own base, and each
# type T (K and V both) is measured against it (llama-perplexity with -fa on,
# which a quantized V cache needs there; ignite's default int8 path):
#
#   ignite, -ctk f16 -ctv f16            -> ignite's base
#   ignite, -ctk T -ctv T                vs ignite's base       (for each T)
#   llama.cpp, -fa on -ctk f16 -ctv f16  -> llama.cpp's base
#   llama.cpp, -fa on -ctk T -ctv T      vs llama.cpp's base    (for each T)
#
# usage: bench/ppl_vs_llamacpp.sh [-m model.gguf] [-f text] [-c 512] [-t 2] [-o DIR]
#                                 [--cache-type q8_0,q4_0]
# env:   IGNITE (default build/ignite), IGNITE_CACHE (~/.cache/ignite)
# Prints one table; every run's full output stays in DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ignite=${IGNITE:-$here/build/ignite}
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf text=$here/bench/data/ppl-text.txt ctx=512
threads=$(nproc) out= cache_types=

while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    -f) text=$2; shift 2 ;;
    -c) ctx=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --cache-type) cache_types=$2; shift 2 ;;
    *) echo "ppl_vs_llamacpp.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
out=${out:-$(mktemp -d)}
mkdir -p "$out"
bin=$("$here/bench/llamacpp_build.sh" llama-perplexity)
f32=$cache/$(basename "${model%.gguf}").F32.gguf
if [ -z "$cache_types" ] && [ ! -f "$f32" ]; then
    echo "making $f32" >&2
    "$here/.venv/bin/python" "$here/bench/gguf_to_f32.py" "$model" "$f32.tmp" && mv "$f32.tmp" "$f32"
fi

ig() { # NAME ARGS...
    local name=$1; shift
    echo "$name: $(uptime)" >&2
    "$ignite" perplexity -t "$threads" "$@" >"$out/$name.txt" 2>"$out/$name.err"
}
lp() { # NAME ARGS...
    local name=$1; shift
    echo "$name: $(uptime)" >&2
    "$bin/llama-perplexity" -t "$threads" "$@" >"$out/$name.txt" 2>&1
}

# The figures under the labels both tools print.
# (the label then a colon: llama-perplexity's table heading names "Same top p" too)
pick() { sed -n "s/^.*$2 *:[^0-9-]*\([-0-9.]*\)\( *± *\([0-9.]*\)\)\{0,1\}.*$/\1 \3/p" "$out/$1.txt" | head -1; }
table() { # RUN...
    printf '%-28s %-22s %-22s %-12s %-10s %s\n' run "PPL" "mean KLD" "99% KLD" "max KLD" "same top (%)"
    for r in "$@"; do
        ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p' "$out/$r.txt")
        [ -n "$ppl" ] || ppl=$(pick "$r" "Mean PPL(Q)" | sed 's/ / ± /')
        printf '%-28s %-22s %-22s %-12s %-10s %s\n' "$r" "$ppl" \
            "$(pick "$r" "Mean    KLD" | sed 's/ \(.\)/ ± \1/')" "$(pick "$r" "99.0%   KLD" | cut -d' ' -f1)" \
            "$(pick "$r" "Maximum KLD" | cut -d' ' -f1)" "$(pick "$r" "Same top p" | sed 's/ \(.\)/ ± \1/')"
    done
    echo "outputs: $out" >&2
}

if [ -n "$cache_types" ]; then
    ig ignite-cache-f16 -m "$model" -f "$text" -c "$ctx" -ctk f16 -ctv f16 \
        --kl-divergence-base "$out/ignite-cache-f16.kl"
    lp llama-cache-f16 -m "$model" -f "$text" -c "$ctx" -fa on -ctk f16 -ctv f16 \
        --kl-divergence-base "$out/llama-cache-f16.kl"
    runs="ignite-cache-f16 llama-cache-f16"
    for t in ${cache_types//,/ }; do
        ig "ignite-cache-$t" -m "$model" -ctk "$t" -ctv "$t" \
            --kl-divergence-base "$out/ignite-cache-f16.kl" --kl-divergence
        lp "llama-cache-$t" -m "$model" -fa on -ctk "$t" -ctv "$t" \
            --kl-divergence-base "$out/llama-cache-f16.kl" --kl-divergence
        runs="$runs ignite-cache-$t llama-cache-$t"
    done
    table $runs
    exit 0
fi

ig ignite-f32 -m "$f32" --exact -f "$text" -c "$ctx" --kl-divergence-base "$out/ignite-f32.kl"
ig ignite-int8 -m "$model" --kl-divergence-base "$out/ignite-f32.kl" --kl-divergence
ig ignite-exact -m "$model" --exact --kl-divergence-base "$out/ignite-f32.kl" --kl-divergence
lp llama-f32 -m "$f32" -f "$text" -c "$ctx" --kl-divergence-base "$out/llama-f32.kl"
lp llama-quant -m "$model" --kl-divergence-base "$out/llama-f32.kl" --kl-divergence
ig ignite-int8-vs-llama-base -m "$model" -f "$text" --kl-divergence-base "$out/llama-f32.kl" \
    --kl-divergence
lp llama-quant-vs-ignite-base -m "$model" --kl-divergence-base "$out/ignite-f32.kl" \
    --kl-divergence
ig ignite-f32-vs-llama-base -m "$f32" --exact -f "$text" \
    --kl-divergence-base "$out/llama-f32.kl" --kl-divergence

table ignite-f32 llama-f32 ignite-int8 ignite-exact llama-quant ignite-int8-vs-llama-base \
      llama-quant-vs-ignite-base ignite-f32-vs-llama-base
