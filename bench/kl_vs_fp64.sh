#!/usr/bin/env bash
# bench/kl_vs_fp64.sh: llama.cpp's and ignite's (int8 and exact paths) logits
# of a random-weight file (bench/random_gguf.py) each against an fp64 forward
# of the same dequantized weights, with their MoE routing: writes the three
# perplexity base files and llama.cpp's router logits
# (bench/llamacpp_moe_route.cpp), then runs bench/kl_vs_fp64.py on them.
# A benchmark, not a test (docs/benchmarks.md, issues 45 and 47).
#
# usage: bench/kl_vs_fp64.sh [-a gemma4|gpt-oss] [-s SHAPE] [-T "Q4_K_M"] [-c 256]
#                            [-n CHUNKS] [-t 2] [-f text] [-o DIR]
# env:   IGNITE_BUILD (default build: its ignite and tests/cpu/forward_dump),
#        IGNITE_CACHE, VOCAB (gemma4: the sdist's ggml-vocab-gemma-4.gguf;
#        gpt-oss: the cache's SmolLM2), LLAMA_ARGS (default -nr: llama.cpp's
#        repacked weights crash on these files, docs/benchmarks.md)
# The windows: the first CHUNKS (default 7) of -c tokens of the text
# (default the first 9000 bytes of bench/data/ppl-text.txt).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
build=${IGNITE_BUILD:-$here/build}
arch=gemma4 shape= types=Q4_K_M ctx=256 chunks=7 threads=2 text= out=
while [ $# -gt 0 ]; do
    case $1 in
    -a) arch=$2; shift 2 ;;
    -s) shape=$2; shift 2 ;;
    -T) types=$2; shift 2 ;;
    -c) ctx=$2; shift 2 ;;
    -n) chunks=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -f) text=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    *) echo "kl_vs_fp64.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
src=$cache/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp
case $arch in
gemma4) vocab=${VOCAB:-$src/models/ggml-vocab-gemma-4.gguf}; shape=${shape:-moe-tiny} ;;
gpt-oss) vocab=${VOCAB:-$cache/SmolLM2-135M-Instruct.Q4_1.gguf}; shape=${shape:-tiny} ;;
*) echo "kl_vs_fp64.sh: -a must be gemma4 or gpt-oss, not '$arch'" >&2; exit 2 ;;
esac
out=${out:-$(mktemp -d)}
mkdir -p "$out"
if [ -z "$text" ]; then
    text=$out/text.txt
    head -c 9000 "$here/bench/data/ppl-text.txt" >"$text"
fi
bin=$("$here/bench/llamacpp_build.sh" llama-perplexity)
lbuild=$(dirname "$bin")
route=$out/llamacpp_moe_route
# (the build was configured with GGML_OPENMP=ON, hence -fopenmp)
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" "$here/bench/llamacpp_moe_route.cpp" \
    -o "$route" "$lbuild/src/libllama.a" "$lbuild/ggml/src/libggml.a" \
    "$lbuild/ggml/src/libggml-cpu.a" "$lbuild/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm

for ty in $types; do
    f=$out/$arch-$shape-$ty.gguf
    [ -f "$f" ] || "$here/.venv/bin/python" "$here/bench/random_gguf.py" "$f" --arch "$arch" \
        --shape "$shape" --type "$ty" --vocab-from "$vocab"
    echo "llama-$ty: $(uptime)" >&2
    # shellcheck disable=SC2086
    "$bin/llama-perplexity" -t "$threads" -m "$f" -f "$text" -c "$ctx" -b "$ctx" \
        --chunks "$chunks" ${LLAMA_ARGS:--nr} --kl-divergence-base "$out/llama-$ty.kl" \
        >"$out/llama-$ty.txt" 2>&1
    "$route" "$f" "$out/llama-$ty.kl" "$chunks" "$out/llama-$ty.routes" "$threads" \
        2>"$out/llama-$ty.routes.err"
    for path in int8 exact; do
        echo "ignite-$ty-$path: $(uptime)" >&2
        "$build/ignite" perplexity -t "$threads" -m "$f" -f "$text" -c "$ctx" \
            --chunks "$chunks" $([ $path = exact ] && echo --exact) \
            --kl-divergence-base "$out/ignite-$ty-$path.kl" >"$out/ignite-$ty-$path.txt" 2>&1
    done
    echo "judge-$ty: $(uptime)" >&2
    "$here/.venv/bin/python" "$here/bench/kl_vs_fp64.py" "$f" "llama.cpp=$out/llama-$ty.kl" \
        "ignite-int8=$out/ignite-$ty-int8.kl" "ignite-exact=$out/ignite-$ty-exact.kl" \
        --chunks "$chunks" --llama-routes "$out/llama-$ty.routes" \
        --forward-dump "$build/tests/cpu/forward_dump" --threads "$threads" |
        tee "$out/judge-$ty.txt"
done
echo "outputs: $out" >&2
