#!/usr/bin/env bash
# bench/vs_llamacpp.sh: ignite bench and llama.cpp's llama-bench on the same
# GGUF, with the same threads, in one run; prints both tables and the ratio
# ignite / llama.cpp per test. A benchmark, not a test: not part of CI.
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (it vendors
# llama.cpp's source); bench/llamacpp_build.sh builds it for the CPU
# (GGML_NATIVE, Release) under $IGNITE_CACHE/llama.cpp-build, outside the
# repository.
#
# usage: bench/vs_llamacpp.sh [-m model.gguf]... [-p 512,2048] [-n 128]
#                             [-r 3] [-t 2] [--build-only]
# env:   IGNITE (the ignite binary, default build/ignite),
#        LLAMA_CPP_PYTHON_VERSION (default 0.3.36), IGNITE_CACHE (~/.cache/ignite)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ignite=${IGNITE:-$here/build/ignite}
models=() prompt=512,2048 gen=128 reps=3 threads=$(nproc) build_only=0

while [ $# -gt 0 ]; do
    case $1 in
    -m) models+=("$2"); shift 2 ;;
    -p) prompt=$2; shift 2 ;;
    -n) gen=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "vs_llamacpp.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[ ${#models[@]} -gt 0 ] || models=("$cache/SmolLM2-135M-Instruct.Q4_1.gguf")

# ---- get and build llama.cpp ------------------------------------------------
bin=$("$here/bench/llamacpp_build.sh" llama-bench)
[ "$build_only" = 1 ] && { echo "llama-bench: $bin/llama-bench"; exit 0; }

# ---- run both, then the ratios ----------------------------------------------
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in "${models[@]}"; do
    "$bin/llama-bench" -m "$m" -p "$prompt" -n "$gen" -r "$reps" -t "$threads" -o jsonl \
        >>"$out/llama.jsonl"
    "$ignite" bench -m "$m" -p "$prompt" -n "$gen" -r "$reps" -t "$threads" -o jsonl \
        >>"$out/ignite.jsonl"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/llama.jsonl" "$out/ignite.jsonl" <<'PY'
import json, os, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]
def key(model, npp, ntg, threads):
    return (os.path.basename(model), npp, ntg, threads)
llama = {key(r["model_filename"], r["n_prompt"], r["n_gen"], r["n_threads"]): r
         for r in rows(sys.argv[1])}
print(f"| model | test | t | llama.cpp t/s | ignite t/s | ratio |")
print(f"| --- | --- | ---: | ---: | ---: | ---: |")
for r in rows(sys.argv[2]):
    k = key(r["model_filename"], r["n_prompt"], r["n_gen"], r["n_threads"])
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    l = llama.get(k)
    if l is None:
        print(f"| {k[0]} | {test} | {k[3]} | - | {r['avg_ts']:.2f} | - |")
        continue
    print(f"| {k[0]} | {test} | {k[3]} | {l['avg_ts']:.2f} ± {l['stddev_ts']:.2f} "
          f"| {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} | {r['avg_ts'] / l['avg_ts']:.2f}x |")
PY
