#!/usr/bin/env bash
# scripts/gpu-prebuild.sh: builds the GPU check's programs here (no GPU needed) into
# .gpubin/, which travels to the GPU machine (the `run` tool's carry), so that its
# minutes go to running them (scripts/gpu-check.sh builds nothing):
#   .gpubin/<program>        ignite, the GPU tests and the benchmarks, stripped
#   .gpubin/lib/             libignite_core.so (every kernel, once) and the
#                            libraries they need beyond the C runtime and the CUDA
#                            toolkit (scripts/device-deps.sh)
#   .gpubin/BUILD            what was built, from which commit, with which nvcc
#   .gpubin/kernels.txt      scripts/check_kernels.py's report (registers, SASS)
# Real code for sm_90 and sm_90a only, no PTX: checked here with cuobjdump
# (scripts/check_kernels.py, which also checks the warp-specialized kernels' SASS for
# TMA, mbarrier and setmaxnreg instructions), and the whole of .gpubin must stay
# within MAX_MIB (56 of the 64 MiB a run carries, the rest for the checkout).
#   BUILD=build-gpubin  MAX_MIB=56
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpubin}
MAX_MIB=${MAX_MIB:-56}
TARGETS="ignite test_device_gpu test_backend_gpu test_gpu_ops_gpu test_flash_attn_gpu
         bench_decode_kernels bench_flash_attn test_qmm_gpu test_backend_qgpu bench_qmm
         test_backend_moe_gpu bench_moe test_deltanet_gpu bench_deltanet test_backend_pd_gpu"
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIGNITE_CUDA=ON -DIGNITE_SHARED_CORE=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real >"$BUILD/configure.log"
# --pd's 2-GPU check (scripts/gpu/pd.sh), where MPI is found (a target then)
cmake --build "$BUILD" --target help | grep '^\.\.\. pd_nccl_gpu$' >/dev/null && TARGETS="$TARGETS pd_nccl_gpu"
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"${JOBS:-2}" --target $TARGETS >"$BUILD/prebuild.log" 2>&1 ||
    { grep -E "error|ptxas_guard" "$BUILD/prebuild.log" | head -40; exit 1; }
rm -rf .gpubin
mkdir -p .gpubin/lib
for t in $TARGETS; do
    f=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
    strip --strip-debug -o ".gpubin/$t" "$f"
done
strip --strip-debug -o .gpubin/lib/libignite_core.so "$BUILD/libignite_core.so"
scripts/device-deps.sh .gpubin/lib .gpubin/ignite
# flash-linear-attention's kernels (pure Python over Triton) for the qwen35 step's
# comparison: ~1.2 MiB of wheels; without a registry the step says it skipped
"${PY:-python3}" -m pip download -q --no-deps -d .gpubin/wheels fla-core==0.6.0 einops ||
    echo "gpu-prebuild: no fla wheels (the qwen35 step skips its fla comparison)"
{
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
    echo "$(nvcc --version | tail -1); CMAKE_CUDA_ARCHITECTURES=90-real + sm_90a kernels"
} >.gpubin/BUILD
scripts/check_kernels.py --lib .gpubin/lib/libignite_core.so | tee .gpubin/kernels.txt | tail -1
mib=$(du -sm .gpubin | cut -f1)
du -sh .gpubin/* .gpubin/lib/* | sort -h | tail -12
if [ "$mib" -gt "$MAX_MIB" ]; then
    echo "gpu-prebuild: .gpubin is ${mib} MiB, over ${MAX_MIB}" >&2
    exit 1
fi
echo "gpu-prebuild: .gpubin is ${mib} MiB; carry it: run(command=\"make gpu-check\", carry=[\".gpubin\"], timeout_s=540)"
