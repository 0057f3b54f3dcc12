#!/usr/bin/env bash
# scripts/gpu-quant-check.sh: the GPU checks of quantized weights on the
# device (ops/gpu_qmm.h, docs/gpu.md "Quantized weights"), as steps the one
# GPU check (scripts/gpu-check.sh) runs, each one line of its table with its
# own time limit; also runnable alone: scripts/gpu-quant-check.sh [STEP...].
#
#   step      limit  about  what
#   qtests    300 s  90 s   test_qmm_gpu (every kernel, every type, against the
#                           twins) and test_backend_gpu (both --gpu-weights modes)
#   qkernels  180 s  45 s   bench_qmm: GEMV GB/s of Q4_0/Q4_K/Q6_K at Llama-3-8B
#                           shapes against the copy and the f16 GEMV, a decode
#                           step's GEMVs added up, the product paths for
#                           n = 1..2048 and their crossovers (gk_qmm_choose)
#   qdecode   180 s  40 s   ignite bench tg128 of synthetic Llama-3-8B Q4_0, Q4_K
#                           and F16 (same shapes): tokens/s, the ratio to F16,
#                           the whole step's bandwidth (the weight bytes a step
#                           reads x tokens/s) as a fraction of the copy, and the
#                           GEMVs' time alone (qkernels' step lines)
#   qprefill  180 s  40 s   ignite bench pp512/pp2048 (-b 2048) of the same three,
#                           TTFT ratio to F16; pp2048 again with every product
#                           on the tensor cores (IGNITE_QMM_PATH=qmma)
#   qllama    480 s  300 s  only where .gpubin/llama.cpp/bin/llama-bench runs:
#                           random Q4_0 and Q4_K_M GGUF files of Llama-3-8B
#                           (bench/random_gguf.py, numpy only), llama-bench and
#                           ignite bench pp512, pp2048, tg128 on each
#
# Logs and summaries go to $OUT when set (else $BUILD). Programs: .gpubin/
# (scripts/gpu-prebuild.sh) when they start there, else $BUILD. Exit status 1
# when a step failed (the others still run), 0 otherwise.
#   BUILD=build-gpu  PYTHON=python3  MODEL_DIR=/tmp (where qllama writes 9 GB)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
PYTHON=${PYTHON:-python3}
LOG=${OUT:-$BUILD}
MODEL_DIR=${MODEL_DIR:-/tmp}
mkdir -p "$LOG"
status=0
t0=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }
fail() { echo "FAILED: $*"; status=1; }

cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
export LD_LIBRARY_PATH="$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu:$cuda_root/lib64:$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin() {
    if [ -x ".gpubin/$1" ] && ".gpubin/ignite" --version >/dev/null 2>&1; then
        echo ".gpubin/$1"
    else
        find "$BUILD" -name "$1" -type f -perm -u+x 2>/dev/null | head -1
    fi
}
IGNITE=$(bin ignite)
M8=synthetic:Llama-3-8B

# Copy bandwidth (GB/s, read + write) of this run, for the fractions.
copy_gbps() { timeout 60 "$(bin bench_qmm)" --copy-only | sed -n 's/.*GBps=\([0-9.]*\).*/\1/p'; }

# summarize JSONL_FILE COPY_GBPS GEMV_STEP_MS...: one line per row, ratios to F16.
summarize() {
    "$PYTHON" - "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
copy = float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else 0.0
f16 = {r["test"]: r for r in rows if r["model_filename"].endswith(":F16")}
for r in rows:
    t, ref = r["test"], f16.get(r["test"])
    line = f"{r['model_filename']:28s} {t:8s} {r['avg_ts']:9.1f} tok/s"
    if r["n_prompt"]:
        line += f"  ttft {r['ttft_ms']:8.1f} ms"
        if ref:
            line += f"  ({r['ttft_ms'] / ref['ttft_ms']:.3f} x F16)"
    else:
        gbps = r["device_step_bytes"] * r["avg_ts"] / 1e9
        line += f"  {1e3 / r['avg_ts']:.3f} ms/tok  reads {r['device_step_bytes'] / 1e9:.2f} GB"
        line += f"  step {gbps:.0f} GB/s"
        if copy:
            line += f" = {gbps / copy:.2f} of the copy"
        if ref:
            line += f"  ({r['avg_ts'] / ref['avg_ts']:.2f} x F16)"
    print(line)
PY
}

step_qtests() {
    local rc=0
    for t in test_qmm_gpu test_backend_gpu; do
        echo "-- $t"
        timeout 150 "$(bin $t)" >"$LOG/$t.log" 2>&1; rc=$?
        grep -E "worst|x the model|GiB on the device|checks" "$LOG/$t.log" | tail -20
        [ $rc = 0 ] || { tail -20 "$LOG/$t.log"; fail "$t (exit $rc)"; }
    done
}

step_qkernels() {
    timeout 170 "$(bin bench_qmm)" --types Q4_0,Q4_K,Q6_K | tee "$LOG/bench_qmm.txt" ||
        fail "bench_qmm"
}

step_qdecode() {
    local copy
    copy=$(copy_gbps)
    echo "copy ${copy} GB/s"
    rm -f "$LOG/qdecode.jsonl"
    for ty in Q4_0 Q4_K F16; do
        timeout 80 "$IGNITE" bench --device cuda -m "$M8:$ty" -p 0 -n 128 -r 3 -o jsonl \
            >>"$LOG/qdecode.jsonl" || fail "ignite bench tg128 $ty"
    done
    summarize "$LOG/qdecode.jsonl" "$copy" | tee "$LOG/qdecode.txt"
    # The GEMVs alone (bench_qmm's step lines, when qkernels ran before).
    grep "^step " "$LOG/bench_qmm.txt" 2>/dev/null || true
}

step_qprefill() {
    rm -f "$LOG/qprefill.jsonl"
    for ty in Q4_0 Q4_K F16; do
        timeout 60 "$IGNITE" bench --device cuda -m "$M8:$ty" -p 512,2048 -n 0 -b 2048 -r 3 \
            -o jsonl >>"$LOG/qprefill.jsonl" || fail "ignite bench pp $ty"
    done
    summarize "$LOG/qprefill.jsonl" "" | tee "$LOG/qprefill.txt"
    echo "-- pp2048 with every product on the tensor cores (IGNITE_QMM_PATH=qmma)"
    IGNITE_QMM_PATH=qmma timeout 60 "$IGNITE" bench --device cuda -m "$M8:Q4_K" -p 2048 -n 0 \
        -b 2048 -r 3 -o md || fail "ignite bench pp2048 qmma"
}

step_qllama() {
    local lb=.gpubin/llama.cpp/bin/llama-bench
    if ! LD_LIBRARY_PATH=".gpubin/llama.cpp/lib:$LD_LIBRARY_PATH" "$lb" --help >/dev/null 2>&1; then
        echo "skipped: no runnable $lb (docs/benchmarks.md says how to build and carry it)"
        return 0
    fi
    for ty in Q4_0 Q4_K_M; do
        local f="$MODEL_DIR/random-llama3-8b-$ty.gguf"
        say "write $f"
        timeout 120 "$PYTHON" bench/random_gguf.py "$f" --type "$ty" || { fail "random_gguf $ty"; continue; }
        say "llama-bench $ty"
        LD_LIBRARY_PATH=".gpubin/llama.cpp/lib:$LD_LIBRARY_PATH" timeout 150 "$lb" -m "$f" \
            -p 512,2048 -n 128 -r 3 -ngl 99 -b 2048 -ub 2048 -o jsonl \
            >>"$LOG/llama.jsonl" 2>"$LOG/llama.$ty.err" || fail "llama-bench $ty"
        say "ignite bench $ty"
        timeout 150 "$IGNITE" bench --device cuda -m "$f" -p 512,2048 -n 128 -r 3 -b 2048 \
            -o jsonl >>"$LOG/ignite_gguf.jsonl" || fail "ignite bench $ty"
        rm -f "$f"
    done
    "$PYTHON" - "$LOG/llama.jsonl" "$LOG/ignite_gguf.jsonl" <<'PY' | tee "$LOG/qllama.txt"
import json, os, sys
def rows(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
llama = {(os.path.basename(r["model_filename"]), r["n_prompt"], r["n_gen"]): r
         for r in rows(sys.argv[1])}
print("| model | test | llama.cpp t/s | ignite t/s | ignite / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
for r in rows(sys.argv[2]):
    k = (os.path.basename(r["model_filename"]), r["n_prompt"], r["n_gen"])
    t = f"pp{k[1]}" if k[1] else f"tg{k[2]}"
    l = llama.get(k)
    ratio = f"{r['avg_ts'] / l['avg_ts']:.2f}" if l else "-"
    lts = f"{l['avg_ts']:.1f}" if l else "-"
    print(f"| {k[0]} | {t} | {lts} | {r['avg_ts']:.1f} | {ratio} |")
PY
}

steps=${*:-qtests qkernels qdecode qprefill}
for s in $steps; do
    case $s in
    qtests|qkernels|qdecode|qprefill|qllama) say "$s"; "step_$s" ;;
    *) echo "gpu-quant-check.sh: unknown step '$s'" >&2; exit 2 ;;
    esac
done
say "done (status $status)"
exit $status
