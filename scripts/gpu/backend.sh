#!/usr/bin/env bash
# scripts/gpu/backend.sh: step backend of the GPU check: the device layer, the
# element-wise kernels and the whole CUDA backend against the CPU backend
# (test_device_gpu, test_gpu_ops_gpu, test_backend_gpu) and batch --pd's layer
# hook (test_backend_pd_gpu: one process's bits, no graph captured); on
# compute capability 9.0 the backend once more on the ws prefill kernel (its
# single-sequence checks: the variable-length prefill of several sequences is
# mma.sync's; the wgmma kernel cannot read the KV pool's blocks, so the
# backend never runs it).
set -uo pipefail
status=0
run() {
    echo "-- $*"
    "$@" >"$WORK/$(basename "$1")${VARIANT:+.$VARIANT}.log" 2>&1
    local rc=$?
    tail -3 "$WORK/$(basename "$1")${VARIANT:+.$VARIANT}.log"
    [ $rc = 0 ] || { echo "FAILED: $* (exit $rc)"; status=1; }
}
run "$BIN/test_device_gpu"
run "$BIN/test_gpu_ops_gpu"
run "$BIN/test_backend_gpu"
run "$BIN/test_backend_pd_gpu"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
if [ "$cap" = 90 ]; then
    for v in ws128n128; do
        VARIANT=$v IGNITE_FLASH_VARIANT=$v run "$BIN/test_backend_gpu"
    done
fi
exit $status
