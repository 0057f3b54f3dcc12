#!/usr/bin/env bash
# scripts/gpu/quant.sh: the quant step of the GPU check (scripts/gpu-steps.txt; the
# quantized weights of ops/gpu_qmm.h, docs/gpu.md "Quantized weights"). Its
# parts, in order (QUANT_PARTS picks; the default fits the step's slot):
#
#   part     about  what
#   tests    20 s   test_qmm_gpu (every kernel and type against the CPU twins) and
#                   test_backend_qgpu (--gpu-weights f16; native K types, forced
#                   paths; shapes-only Llama-3-8B Q4_K/Q4_0 within 5% of its bytes)
#   kernels  20 s   bench_qmm --quick --types Q4_K,Q4_0: GEMV GB/s at Llama-3-8B shapes
#                   against the copy and the f16 GEMV (issue 44's targets: gate|up,
#                   down and head >= 0.85 of the copy, QKV and wo >= 0.70), a decode
#                   step's GEMVs added up (<= 1.25 ms), the product paths for
#                   n = 8..2048 and their crossovers
#   decode   24 s   ignite bench tg64 of synthetic Llama-3-8B Q4_0, Q4_K and F16:
#                   tokens/s, x F16, the bytes a step reads x tokens/s against the copy,
#                   the launches (graph nodes) a step; each again with a decode step's
#                   launches unfused (IGNITE_GPU_FUSE=0, docs/gpu.md "A decode step's
#                   launches"); Q4_0 and Q4_K again with programmatic dependent launch
#                   (IGNITE_PDL=1: the GEMVs and the decode attention)
#   prefill  10 s   pp2048 (-b 2048) of the same three: TTFT and x F16
#   full     +60 s  (not by default) bench_qmm on Q4_0, Q4_K, Q6_K with every row
#                   count, pp512 too, and pp2048 with IGNITE_QMM_PATH=qmma; Q4_K's
#                   pp2048 again with IGNITE_PDL=1, by default and with qmma
#   llama    +300 s (not by default; only where .gpubin/llama.cpp/bin/llama-bench runs,
#                   scripts/llamacpp-cuda.sh): random Q4_0 and Q4_K_M GGUF files of
#                   Llama-3-8B (bench/random_gguf.py), llama-bench and ignite bench
#                   pp512, pp2048, tg128 on each
#
# Under scripts/gpu-check.sh: $BIN (the prebuilt programs), $WORK (this step's
# directory; quant.txt there is the table that comes back), $PY. Alone, from the
# repository: BIN defaults to .gpubin, WORK to build-gpu-quant. Exit 1 when a part
# failed (the later ones still run).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-$PWD/.gpubin}
WORK=${WORK:-$PWD/build-gpu-quant}
PY=${PY:-python3}
PARTS=${QUANT_PARTS:-tests kernels decode prefill}
MODEL_DIR=${MODEL_DIR:-${TMPDIR:-/tmp}}
M8=synthetic:Llama-3-8B
mkdir -p "$WORK"
# Alone: the CUDA toolkit's libraries and .gpubin/lib (the GPU check sets these).
cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
export LD_LIBRARY_PATH="$BIN/lib:$cuda_root/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TABLE=$WORK/quant.txt
: >"$TABLE"
status=0
t0=$(date +%s)
say() { echo "-- $* ($(( $(date +%s) - t0 )) s)"; }
fail() { echo "FAILED: $*" | tee -a "$TABLE"; status=1; }

# summarize JSONL COPY_GBPS: a line per row; ratios to the F16 row of the same test.
summarize() {
    "$PY" - "$@" <<'PY'
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
        line += f"  {gbps:.0f} GB/s"
        if copy:
            line += f" = {gbps / copy:.2f} of the copy"
        if ref:
            line += f"  ({r['avg_ts'] / ref['avg_ts']:.2f} x F16)"
        line += f"  {r.get('device_step_nodes', -1)} nodes/step"
    print(line)
PY
}

part_tests() {
    local t rc
    for t in test_qmm_gpu test_backend_qgpu; do
        timeout 60 "$BIN/$t" >"$WORK/$t.log" 2>&1; rc=$?
        grep -E "x the model|worst|checks" "$WORK/$t.log" | tail -12 | tee -a "$TABLE"
        [ $rc = 0 ] || { tail -15 "$WORK/$t.log"; fail "$t (exit $rc)"; }
    done
}

part_kernels() {
    timeout 50 "$BIN/bench_qmm" --quick --types Q4_K,Q4_0 >"$WORK/bench_qmm.txt" 2>&1 ||
        fail "bench_qmm --quick"
    grep -E "^(copy|step|crossover)|n=1 |rows .*n=(8|64|256|2048) " "$WORK/bench_qmm.txt" |
        tee -a "$TABLE"
}

part_decode() {
    local copy ty
    copy=$(grep -m1 "^copy " "$WORK/bench_qmm.txt" 2>/dev/null | sed 's/.*GBps=\([0-9.]*\).*/\1/')
    [ -n "$copy" ] || copy=$(timeout 20 "$BIN/bench_qmm" --copy-only | sed -n 's/.*GBps=\([0-9.]*\).*/\1/p')
    rm -f "$WORK/decode.jsonl"
    for ty in Q4_0 Q4_K F16; do
        timeout 30 "$BIN/ignite" bench --device cuda -m "$M8:$ty" -p 0 -n 64 -r 2 -o jsonl \
            >>"$WORK/decode.jsonl" || fail "ignite bench tg64 $ty"
    done
    echo "copy $copy GB/s" | tee -a "$TABLE"
    summarize "$WORK/decode.jsonl" "$copy" | tee -a "$TABLE"
    # The same with a decode step's launches one by one (the path before the fusions).
    rm -f "$WORK/decode_unfused.jsonl"
    for ty in Q4_0 Q4_K F16; do
        IGNITE_GPU_FUSE=0 timeout 30 "$BIN/ignite" bench --device cuda -m "$M8:$ty" -p 0 -n 64 \
            -r 2 -o jsonl >>"$WORK/decode_unfused.jsonl" || fail "ignite bench tg64 $ty, unfused"
    done
    summarize "$WORK/decode_unfused.jsonl" "$copy" | sed 's/^/IGNITE_GPU_FUSE=0: /' |
        tee -a "$TABLE"
    # The GEMVs and the decode attention as programmatic dependent launches
    # (IGNITE_PDL=1: each starts loading its weights under the previous kernel's
    # last wave; docs/gpu.md), against the default lines above.
    rm -f "$WORK/decode_pdl.jsonl"
    for ty in Q4_0 Q4_K; do
        IGNITE_PDL=1 timeout 30 "$BIN/ignite" bench --device cuda -m "$M8:$ty" -p 0 -n 64 -r 2 \
            -o jsonl >>"$WORK/decode_pdl.jsonl" || fail "ignite bench tg64 $ty, IGNITE_PDL=1"
    done
    summarize "$WORK/decode_pdl.jsonl" "$copy" | sed 's/^/IGNITE_PDL=1: /' | tee -a "$TABLE"
}

part_prefill() {
    local ty
    rm -f "$WORK/prefill.jsonl"
    for ty in Q4_0 Q4_K F16; do
        timeout 30 "$BIN/ignite" bench --device cuda -m "$M8:$ty" -p 2048 -n 0 -b 2048 -r 2 \
            -o jsonl >>"$WORK/prefill.jsonl" || fail "ignite bench pp2048 $ty"
    done
    summarize "$WORK/prefill.jsonl" "" | tee -a "$TABLE"
}

part_full() {
    timeout 170 "$BIN/bench_qmm" --types Q4_0,Q4_K,Q6_K >"$WORK/bench_qmm_full.txt" 2>&1 ||
        fail "bench_qmm"
    grep -E "^(step|crossover)" "$WORK/bench_qmm_full.txt" | tee -a "$TABLE"
    local ty
    rm -f "$WORK/prefill_full.jsonl"
    for ty in Q4_0 Q4_K F16; do
        timeout 40 "$BIN/ignite" bench --device cuda -m "$M8:$ty" -p 512,2048 -n 0 -b 2048 \
            -r 3 -o jsonl >>"$WORK/prefill_full.jsonl" || fail "ignite bench pp $ty"
    done
    summarize "$WORK/prefill_full.jsonl" "" | tee -a "$TABLE"
    IGNITE_QMM_PATH=qmma timeout 40 "$BIN/ignite" bench --device cuda -m "$M8:Q4_K" -p 2048 \
        -n 0 -b 2048 -r 3 -o jsonl >"$WORK/prefill_qmma.jsonl" || fail "pp2048 qmma"
    summarize "$WORK/prefill_qmma.jsonl" "" | sed 's/^/qmma forced: /' | tee -a "$TABLE"
    # programmatic dependent launch: the default path at 2048 rows (the slabs'
    # dequantization before cuBLAS), then gk_qmma's (weights before the wait)
    IGNITE_PDL=1 timeout 40 "$BIN/ignite" bench --device cuda -m "$M8:Q4_K" -p 2048 -n 0 \
        -b 2048 -r 3 -o jsonl >"$WORK/prefill_pdl.jsonl" || fail "pp2048, IGNITE_PDL=1"
    summarize "$WORK/prefill_pdl.jsonl" "" | sed 's/^/IGNITE_PDL=1: /' | tee -a "$TABLE"
    IGNITE_PDL=1 IGNITE_QMM_PATH=qmma timeout 40 "$BIN/ignite" bench --device cuda \
        -m "$M8:Q4_K" -p 2048 -n 0 -b 2048 -r 3 -o jsonl >"$WORK/prefill_qmma_pdl.jsonl" ||
        fail "pp2048 qmma, IGNITE_PDL=1"
    summarize "$WORK/prefill_qmma_pdl.jsonl" "" | sed 's/^/qmma forced, IGNITE_PDL=1: /' |
        tee -a "$TABLE"
}

part_llama() {
    local lb=$BIN/llama.cpp/bin/llama-bench lib=$BIN/llama.cpp/lib ty f
    if ! LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" "$lb" --help >/dev/null 2>&1; then
        echo "llama: skipped, no runnable $lb (scripts/llamacpp-cuda.sh)" | tee -a "$TABLE"
        return 0
    fi
    rm -f "$WORK/llama.jsonl" "$WORK/ignite_gguf.jsonl"
    for ty in Q4_0 Q4_K_M; do
        f="$MODEL_DIR/random-llama3-8b-$ty.gguf"
        say "write $f"
        timeout 120 "$PY" bench/random_gguf.py "$f" --type "$ty" || { fail "random_gguf $ty"; continue; }
        say "llama-bench $ty"
        LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 150 "$lb" -m "$f" -p 512,2048 -n 128 \
            -r 3 -ngl 99 -b 2048 -ub 2048 -o jsonl >>"$WORK/llama.jsonl" 2>"$WORK/llama.$ty.err" ||
            fail "llama-bench $ty"
        say "ignite bench $ty"
        timeout 150 "$BIN/ignite" bench --device cuda -m "$f" -p 512,2048 -n 128 -r 3 -b 2048 \
            -o jsonl >>"$WORK/ignite_gguf.jsonl" || fail "ignite bench $ty"
        rm -f "$f"
    done
    "$PY" - "$WORK/llama.jsonl" "$WORK/ignite_gguf.jsonl" <<'PY' | tee -a "$TABLE"
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

for p in $PARTS; do
    case $p in
    tests|kernels|decode|prefill|full|llama) say "$p"; "part_$p" ;;
    *) echo "quant.sh: unknown part '$p'" >&2; exit 2 ;;
    esac
done
say "done (status $status)"
exit $status
