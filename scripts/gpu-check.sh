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
#   5. bench_decode_kernels (GEMV and split-KV attention bandwidth),
#      bench/sdpa_compare.py (every prefill attention variant against torch
#      SDPA, its own pick and its flash backend) and test_flash_attn_gpu (every
#      variant against fp64), a process per variant;
#   6. quantized weights (scripts/gpu/quant.sh's default parts, about a
#      minute): their kernels' and backend's GPU tests, the GEMV's GB/s, decode
#      and prefill of synthetic Llama-3-8B Q4_0/Q4_K against F16.
# Every step has a time box; a failed step is reported and the rest still
# run; the exit status is 1 if any failed. Logs go to $OUT when it is set.
#   BUILD=build-gpu  build directory      PYTHON=python3  Python with torch
#   STEPS="1 2 3 4 5 6"                    which steps to run
# Programs built ahead by scripts/gpu-prebuild.sh (.gpubin/, carried to the
# machine) are used when they start there; step 1 then builds nothing.
# Libraries the machine lacks (cJSON) come from .devdeps/root when present
# (scripts/device-deps.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-1 2 3 4 5 6}
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

# Libraries the carried programs need and the machine may lack.
cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
export LD_LIBRARY_PATH="$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu:$cuda_root/lib64:$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
prebuilt=0
if [ -x .gpubin/ignite ] && .gpubin/ignite --version >/dev/null 2>&1 &&
    .gpubin/test_device_gpu >/dev/null 2>&1; then
    prebuilt=1
    echo "using the programs in .gpubin (built ahead for sm_$(cat .gpubin/arch 2>/dev/null || echo 90))"
    cp .gpubin/ptxas.txt "$LOG/" 2>/dev/null || true
fi
# bin NAME: where program NAME is.
bin() {
    if [ $prebuilt = 1 ]; then echo ".gpubin/$1"; return; fi
    find "$BUILD" -name "$1" -type f -perm -u+x | head -1
}

if want 1 && [ $prebuilt = 0 ]; then
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
IGNITE=$(bin ignite)

if want 2; then
    step "2. ctest -L gpu"
    # The backend and kernels first; the attention test (long CPU reference) last.
    for t in test_device_gpu test_gpu_ops_gpu test_backend_gpu; do
        echo "-- $t"
        timeout 120 "$(bin $t)" >"$LOG/$t.log" 2>&1; rc=$?
        tail -12 "$LOG/$t.log"
        [ $rc = 0 ] || fail "$t (exit $rc)"
    done
    if [ "$arch" = 90 ]; then
        # Hopper: the whole backend once more on the wgmma prefill kernel.
        echo "-- test_backend_gpu, IGNITE_FLASH_VARIANT=wg128n64"
        IGNITE_FLASH_VARIANT=wg128n64 timeout 120 "$(bin test_backend_gpu)" \
            >"$LOG/test_backend_gpu_wgmma.log" 2>&1; rc=$?
        tail -4 "$LOG/test_backend_gpu_wgmma.log"
        [ $rc = 0 ] || fail "test_backend_gpu with wg128n64 (exit $rc)"
    fi
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
    timeout 60 "$(bin bench_decode_kernels)" || fail "bench_decode_kernels"
    step "5b. prefill attention vs torch SDPA"
    PYTHONUNBUFFERED=1 timeout 240 "$PYTHON" bench/sdpa_compare.py \
        --bin "$(bin bench_flash_attn)" || fail "sdpa_compare"
    step "5c. prefill attention kernel vs its CPU twin, a process per variant"
    # In parallel (the fp64 reference is CPU time); apart, so a variant that
    # faults the CUDA context fails alone.
    variants=$({ "$(bin bench_flash_attn)" --list 128; "$(bin bench_flash_attn)" --list 64; } |
        sort -u)
    pids=()
    for v in $variants; do
        timeout 200 "$(bin test_flash_attn_gpu)" "$v" >"$LOG/test_flash_attn_gpu.$v.log" 2>&1 &
        pids+=($!)
    done
    i=0
    for v in $variants; do
        wait "${pids[i]}"; rc=$?; i=$((i + 1))
        echo "-- $v: $(tail -1 "$LOG/test_flash_attn_gpu.$v.log")"
        [ $rc = 0 ] || { tail -6 "$LOG/test_flash_attn_gpu.$v.log"; fail "test_flash_attn_gpu $v (exit $rc)"; }
    done
fi

if want 6; then
    step "6. quantized weights (scripts/gpu/quant.sh)"
    qbin=$PWD/.gpubin
    if [ $prebuilt = 0 ]; then # the programs of this build, where quant.sh looks
        mkdir -p "$BUILD/quant-bin"
        qbin=$(readlink -f "$BUILD/quant-bin")
        for t in ignite test_qmm_gpu test_backend_qgpu bench_qmm; do
            ln -sf "$(readlink -f "$(bin $t)")" "$qbin/$t"
        done
    fi
    mkdir -p "$LOG/quant"
    BIN=$qbin WORK=$(readlink -f "$LOG/quant") PY=$PYTHON timeout 180 scripts/gpu/quant.sh ||
        fail "quant (scripts/gpu/quant.sh)"
fi
step "done (status $status)"
exit $status
