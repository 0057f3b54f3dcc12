#!/usr/bin/env bash
# bench/moe_vs_llamacpp.sh: ignite's forward of an architecture with no
# weights to download (qwen3moe, the default; -a gpt-oss: its types F16 Q8_0
# MXFP4 by default; -a gemma4; -a qwen35; -a qwen35moe) against llama.cpp's on the same
# random-weight files (bench/random_gguf.py,
# the tokenizer copied from a real GGUF so both tools tokenize the text),
# one per type: llama-perplexity writes its logits as a base
# (--kl-divergence-base), then `ignite perplexity --kl-divergence` reads that
# base (-f: ignite checks its tokens of the text are llama.cpp's) on the
# int8 path (the default) and the exact one. A benchmark, not a test.
#
# gemma4: give VOCAB=llama.cpp's models/ggml-vocab-gemma-4.gguf (the sdist's);
# qwen35's and qwen35moe's default VOCAB is llama.cpp's models/ggml-vocab-qwen35.gguf.
#
# llama-perplexity runs with -b = -c: one window a batch. With its default
# batch of 2048 (4 windows a batch) llama.cpp 0.3.36's logits of the 2nd and
# later windows of a qwen35 file are not those it computes for the same
# window alone (mean KL 10 against ignite's there, 0 with -b 512).
#
# usage: bench/moe_vs_llamacpp.sh [-a qwen3moe|gemma4|gpt-oss|qwen35|qwen35moe] [-s SHAPE]
#                                 [-l LAYERS]
#                                 [-n CHUNKS] [-T "F16 Q8_0 Q4_K_M"] [-f text] [-c 512] [-t 2]
#                                 [-o DIR]
# env:   IGNITE (default build/ignite), IGNITE_CACHE (~/.cache/ignite),
#        VOCAB (default the cache's SmolLM2-135M-Instruct.Q4_1.gguf),
#        LLAMA_ARGS (more llama-perplexity options, e.g. --no-repack: llama.cpp's
#        AMX weight repacking crashed on gemma4's and gpt-oss's quantized files
#        on a CPU with AMX before llamacpp_build.sh built the AVX-512 variant there)
# Prints one table (mean KL divergence, same top token); every run's output
# stays in DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ignite=${IGNITE:-$here/build/ignite}
arch=qwen3moe shape=tiny layers= chunks= types= text=$here/bench/data/ppl-text.txt ctx=512
threads=$(nproc) out=

while [ $# -gt 0 ]; do
    case $1 in
    -a) arch=$2; shift 2 ;;
    -n) chunks=$2; shift 2 ;;
    -s) shape=$2; shift 2 ;;
    -l) layers=$2; shift 2 ;;
    -T) types=$2; shift 2 ;;
    -f) text=$2; shift 2 ;;
    -c) ctx=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    *) echo "moe_vs_llamacpp.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
llama_args=${LLAMA_ARGS:-}
vocab=${VOCAB:-$(case $arch in qwen35*) true ;; *) false ;; esac &&
    echo "$cache/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen35.gguf" ||
    echo "$cache/SmolLM2-135M-Instruct.Q4_1.gguf")}
[ -n "$types" ] || types=$([ "$arch" = gpt-oss ] && echo "F16 Q8_0 MXFP4" || echo "F16 Q8_0 Q4_K_M")
out=${out:-$(mktemp -d)}
mkdir -p "$out"
bin=$("$here/bench/llamacpp_build.sh" llama-perplexity)

for ty in $types; do
    f=$out/$arch-$shape${layers:+-$layers}-$ty.gguf
    [ -f "$f" ] || "$here/.venv/bin/python" "$here/bench/random_gguf.py" "$f" --arch "$arch" \
        --shape "$shape" --type "$ty" ${layers:+--layers "$layers"} --vocab-from "$vocab"
    echo "llama-$ty: $(uptime)" >&2
    # shellcheck disable=SC2086
    "$bin/llama-perplexity" -t "$threads" -m "$f" -f "$text" -c "$ctx" -b "$ctx" \
        ${chunks:+--chunks "$chunks"} $llama_args \
        --kl-divergence-base "$out/llama-$ty.kl" >"$out/llama-$ty.txt" 2>&1
    for path in int8 exact; do
        echo "ignite-$ty-$path: $(uptime)" >&2
        "$ignite" perplexity -t "$threads" -m "$f" -f "$text" $([ $path = exact ] && echo --exact) \
            --kl-divergence-base "$out/llama-$ty.kl" --kl-divergence \
            >"$out/ignite-$ty-$path.txt" 2>"$out/ignite-$ty-$path.err"
    done
done

# The figures under the labels both tools print.
pick() { sed -n "s/^.*$2 *:[^0-9-]*\([-0-9.]*\)\( *± *\([0-9.]*\)\)\{0,1\}.*$/\1 \3/p" "$out/$1.txt" | head -1; }
printf '%-24s %-12s %-22s %-12s %-10s %s\n' run "PPL (llama)" "mean KLD" "99% KLD" "max KLD" \
    "same top (%)"
for ty in $types; do
    ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1/p' "$out/llama-$ty.txt")
    for path in int8 exact; do
        r=ignite-$ty-$path
        printf '%-24s %-12s %-22s %-12s %-10s %s\n' "$r" "$ppl" \
            "$(pick "$r" "Mean    KLD" | sed 's/ \(.\)/ ± \1/')" \
            "$(pick "$r" "99.0%   KLD" | cut -d' ' -f1)" "$(pick "$r" "Maximum KLD" | cut -d' ' -f1)" \
            "$(pick "$r" "Same top p" | sed 's/ \(.\)/ ± \1/')"
    done
done
echo "outputs: $out" >&2
