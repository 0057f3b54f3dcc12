#!/usr/bin/env bash
# bench/vs_llamacpp.sh: ignite bench and llama.cpp's llama-bench on the same
# GGUF, with the same threads, in one run; prints both tables and the ratio
# ignite / llama.cpp per test. A benchmark, not a test: not part of CI.
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (it vendors
# llama.cpp's source); bench/llamacpp_build.sh builds it for the CPU
# (GGML_NATIVE, Release) under $IGNITE_CACHE/llama.cpp-build, outside the
# repository. --isa avx2 compares on AVX2 alone: llama.cpp built without
# AVX-512/VNNI (LLAMACPP_ISA=avx2) against ignite under IGNITE_SIMD=avx2.
# --isa avxvnni compares on AVX2 with AVX-VNNI (Intel's client cores from
# Alder Lake on): both built or capped to it, no AVX-512.
# --isa avx512 compares llama.cpp built for AVX-512 VNNI without AMX with
# ignite's native path: on CPUs with AMX, where llama.cpp's native build
# crashes in its AMX matmul (bench/llamacpp_build.sh).
#
# Each test (one ppN or tgN, at each depth and thread count) runs llama.cpp
# (at every -fa setting asked) and then ignite, before the next test: on a
# shared machine the two engines then see the same load. The ratio is
# against llama.cpp's better -fa setting of that test.
#
# usage: bench/vs_llamacpp.sh [-m model.gguf]... [-p 512,2048] [-n 128]
#                             [-d 0,4096] [-r 3] [-t 1,2] [--fa 0,1]
#                             [--isa native|avx2|avxvnni|avx512] [--build-only]
# env:   IGNITE (the ignite binary, default build/ignite),
#        LLAMA_CPP_PYTHON_VERSION (default 0.3.36), IGNITE_CACHE (~/.cache/ignite)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ignite=${IGNITE:-$here/build/ignite}
models=() prompt=512,2048 gen=128 depth=0 reps=3 threads=$(nproc) fa=1 isa=native build_only=0

while [ $# -gt 0 ]; do
    case $1 in
    -m) models+=("$2"); shift 2 ;;
    -p) prompt=$2; shift 2 ;;
    -n) gen=$2; shift 2 ;;
    -d) depth=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --fa) fa=$2; shift 2 ;;
    --isa) isa=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "vs_llamacpp.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[ ${#models[@]} -gt 0 ] || models=("$cache/SmolLM2-135M-Instruct.Q4_1.gguf")
case $isa in
native | avx512) simd= ;;
avx2) simd=avx2 ;;
avxvnni) # llama.cpp's build would die on an illegal instruction without it
    grep -qw avx_vnni /proc/cpuinfo 2>/dev/null ||
        { echo "vs_llamacpp.sh: --isa avxvnni: this CPU has no AVX-VNNI (try --isa avx2)" >&2; exit 2; }
    simd=avxvnni ;;
*) echo "vs_llamacpp.sh: --isa must be native, avx2, avxvnni or avx512, not '$isa'" >&2; exit 2 ;;
esac

# ---- get and build llama.cpp ------------------------------------------------
bin=$(LLAMACPP_ISA=$isa "$here/bench/llamacpp_build.sh" llama-bench)
[ "$build_only" = 1 ] && { echo "llama-bench: $bin/llama-bench"; exit 0; }

# ---- run both, test by test, then the ratios --------------------------------
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
tests=()
for p in ${prompt//,/ }; do [ "$p" = 0 ] || tests+=("-p $p -n 0"); done
for n in ${gen//,/ }; do [ "$n" = 0 ] || tests+=("-p 0 -n $n"); done
for m in "${models[@]}"; do
    for t in ${threads//,/ }; do
        for d in ${depth//,/ }; do
            for test in "${tests[@]}"; do
                for f in ${fa//,/ }; do
                    # shellcheck disable=SC2086
                    "$bin/llama-bench" -m "$m" $test -d "$d" -r "$reps" -t "$t" \
                        -fa "$([ "$f" = 1 ] && echo on || echo off)" -o jsonl \
                        >>"$out/llama.jsonl"
                done
                # shellcheck disable=SC2086
                IGNITE_SIMD=$simd "$ignite" bench -m "$m" $test -d "$d" -r "$reps" -t "$t" \
                    -o jsonl >>"$out/ignite.jsonl"
            done
        done
    done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/llama.jsonl" "$out/ignite.jsonl" <<'PY'
import json, os, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]
def key(r):
    return (os.path.basename(r["model_filename"]), r["n_prompt"], r["n_gen"],
            r.get("n_depth", 0), r["n_threads"])
llama = {}
for r in rows(sys.argv[1]):
    llama.setdefault(key(r), {})[1 if r["flash_attn"] in (1, True, "on") else 0] = r
print("| model | test | isa | t | llama.cpp -fa 0 t/s | llama.cpp -fa 1 t/s | ignite t/s | ratio |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for r in rows(sys.argv[2]):
    k = key(r)
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    if k[3]:
        test += f" @ d{k[3]}"
    l = llama.get(k, {})
    cell = lambda f: f"{l[f]['avg_ts']:.2f} ± {l[f]['stddev_ts']:.2f}" if f in l else "-"
    best = max((x["avg_ts"] for x in l.values()), default=None)
    ratio = f"{r['avg_ts'] / best:.2f}x" if best else "-"
    print(f"| {k[0]} | {test} | {r.get('isa', '')} | {k[4]} | {cell(0)} | {cell(1)} "
          f"| {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} | {ratio} |")
PY
