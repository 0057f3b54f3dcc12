#!/usr/bin/env bash
# scripts/gpu-prebuild.sh: builds the GPU check's programs here, for one GPU
# architecture (default sm_90), into .gpubin/, so a lent GPU machine spends
# its minutes running them rather than compiling. scripts/gpu-check.sh uses
# .gpubin when its programs start there and builds on the machine otherwise.
#   ARCH=90  BUILD=build-sm90
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ARCH:-90}
BUILD=${BUILD:-build-sm$ARCH}
TARGETS="ignite test_device_gpu test_backend_gpu test_gpu_ops_gpu test_flash_attn_gpu
         bench_decode_kernels bench_flash_attn test_qmm_gpu test_backend_qgpu bench_qmm"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIGNITE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD" -j2 --target $TARGETS 2>&1 | tee "$BUILD/prebuild.log" |
    grep -E "error|warning" || true
rm -rf .gpubin && mkdir -p .gpubin
for t in $TARGETS; do
    cp "$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)" .gpubin/
done
grep -A2 "Compiling entry function" "$BUILD/prebuild.log" | grep -E "entry|registers|spill" |
    sed 's/ptxas info *: //' >.gpubin/ptxas.txt || true
echo "$ARCH" >.gpubin/arch
du -sh .gpubin
