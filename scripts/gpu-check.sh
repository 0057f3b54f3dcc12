#!/usr/bin/env bash
# scripts/gpu-check.sh: the checks that need a GPU, in one run of about 8
# minutes on an H100/H200-class machine (`make gpu-check` runs it):
#   1. build everything for this GPU only;
#   2. ctest label `gpu`: the device layer, the CUDA backend against the CPU
#      backend, the decode kernels, the prefill attention kernel against its
#      CPU twin;
#   3. the CLI on the GPU (a short bench, the error for a missing device);
#   4. bench/cuda_vs_hf.py: `ignite bench --device cuda` on synthetic
#      Llama-3-8B shapes against transformers + SDPA, with the GEMM floor and
#      the copy bandwidth measured in the same run;
#   5. bench_decode_kernels (GEMV and split-KV attention bandwidth) and
#      bench/sdpa_compare.py (the prefill kernel against torch SDPA).
# Every step has a time box; a failed step is reported and the rest still
# run; the exit status is 1 if any failed. Logs go to $OUT when it is set.
#   BUILD=build-gpu  build directory      PYTHON=python3  Python with torch
#   STEPS="1 2 3 4 5"                      which steps to run
# Libraries the machine lacks (cJSON) come from .devdeps/root when present
# (scripts/device-deps.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-1 2 3 4 5}
LOG=${OUT:-$BUILD}
JOBS=$(nproc 2>/dev/null || echo 4)
t0=$(date +%s)
status=0
step() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
fail() { echo "FAILED: $*"; status=1; }

step "device"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.sm,clocks.mem \
    --format=csv,noheader || true
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
arch=${cap:-90}
mkdir -p "$BUILD" "$LOG"

if want 1; then
    step "1. build (sm_$arch)"
    prefix=()
    [ -d .devdeps/root/usr ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps/root/usr")
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIGNITE_CUDA=ON "${prefix[@]}" \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$LOG/configure.log" 2>&1 ||
        { cat "$LOG/configure.log"; fail "configure"; exit 1; }
    timeout 300 cmake --build "$BUILD" -j"$JOBS" >"$LOG/build.log" 2>&1 ||
        { tail -40 "$LOG/build.log"; fail "build"; exit 1; }
    grep -A2 "Compiling entry function" "$LOG/build.log" | grep -E "entry|registers|spill" |
        sed 's/ptxas info *: //' >"$LOG/ptxas.txt" || true
fi
IGNITE="$BUILD/ignite"

if want 2; then
    step "2. ctest -L gpu"
    # The backend and kernels first; the attention test (long CPU reference) last.
    (cd "$BUILD" && timeout 200 ctest -L gpu -E test_flash_attn_gpu --output-on-failure \
        --timeout 180) 2>&1 | tee "$LOG/ctest-gpu.log" | tail -40 || fail "ctest -L gpu"
fi

if want 3; then
    step "3. CLI on the GPU"
    timeout 60 "$IGNITE" bench --device cuda -m synthetic:SmolLM2-135M -p 64,300 -n 16 -r 2 ||
        fail "ignite bench --device cuda"
    "$IGNITE" run --device cuda:99 -p x 2>&1; rc=$?
    [ $rc = 7 ] || fail "--device cuda:99 exited $rc, expected 7"
fi

if want 4; then
    step "4. ignite --device cuda vs transformers + SDPA"
    PYTHONUNBUFFERED=1 timeout 200 "$PYTHON" bench/cuda_vs_hf.py --bin "$IGNITE" \
        --model Llama-3-8B -p 512,2048,8192 -n 128 -r 3 --json "$LOG/cuda_vs_hf.json" ||
        fail "cuda_vs_hf"
fi

if want 5; then
    step "5a. decode kernels"
    [ -x "$BUILD/bench/bench_decode_kernels" ] &&
        { timeout 60 "$BUILD/bench/bench_decode_kernels" || fail "bench_decode_kernels"; }
    step "5b. prefill attention vs torch SDPA"
    PYTHONUNBUFFERED=1 timeout 150 "$PYTHON" bench/sdpa_compare.py \
        --bin "$BUILD/bench/bench_flash_attn" || fail "sdpa_compare"
    step "5c. prefill attention kernel vs its CPU twin"
    (cd "$BUILD" && timeout 150 ctest -R test_flash_attn_gpu --output-on-failure) 2>&1 |
        tail -5 || fail "test_flash_attn_gpu"
fi
step "done (status $status)"
exit $status
