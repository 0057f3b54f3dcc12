#!/usr/bin/env bash
# bench/llamacpp_build.sh: builds llama.cpp tools for the CPU, outside the
# repository, for the benchmarks that compare against them; prints the
# directory holding the binaries.
#
#   bench/llamacpp_build.sh TARGET...     e.g. llama-bench llama-batched-bench
#                                         (llama-speculative-simple, llama-lookup: examples,
#                                         turned on for them)
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (it vendors
# llama.cpp's source), built with GGML_NATIVE in Release under
# $IGNITE_CACHE/llama.cpp-build/VERSION. Targets already built are left alone.
#
# LLAMACPP_ISA=avx2 builds instead a variant without AVX-512 and VNNI (no
# GGML_NATIVE; AVX, AVX2, FMA, F16C, BMI2 on) into VERSION-avx2, to compare
# with ignite's AVX2 path (IGNITE_SIMD=avx2) on the same instructions.
# LLAMACPP_ISA=avxvnni builds that variant with AVX-VNNI (the VEX vpdpbusd
# of Intel's client cores from Alder Lake on, without AVX-512) into
# VERSION-avxvnni, beside ignite's AVX-VNNI path (IGNITE_SIMD=avxvnni).
# LLAMACPP_ISA=avx512 builds AVX-512 with VNNI, VBMI and BF16 but without AMX
# into VERSION-avx512 (what native means on a CPU with AMX): on Sapphire Rapids and later GGML_NATIVE compiles
# llama.cpp's AMX matmuls, which crash there in ggml_backend_amx_mul_mat
# (llama.cpp issue 20824; seen with 0.3.36 on every model we bench), and
# `--repack 0` would also turn off its repacked Q4_0 kernels.
# env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), IGNITE_CACHE (~/.cache/ignite),
#      LLAMACPP_ISA (native, the default, avx2, avxvnni or avx512)
set -euo pipefail

cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ver=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
src=$cache/llama-src/llama_cpp_python-$ver/vendor/llama.cpp
isa=${LLAMACPP_ISA:-native}
# native on a CPU with AMX would compile the AMX matmuls that crash (below):
# build the AVX-512 variant there instead, which every caller then uses
if [ "$isa" = native ] && grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
    isa=avx512
fi
x86_avx2=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
          -DGGML_BMI2=ON)
case $isa in
native) bld=$cache/llama.cpp-build/$ver
        isa_flags=(-DGGML_NATIVE=ON) ;;
avx2)   bld=$cache/llama.cpp-build/$ver-avx2
        isa_flags=("${x86_avx2[@]}" -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
                   -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF) ;;
avxvnni) bld=$cache/llama.cpp-build/$ver-avxvnni
        isa_flags=("${x86_avx2[@]}" -DGGML_AVX_VNNI=ON -DGGML_AVX512=OFF
                   -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF) ;;
avx512) bld=$cache/llama.cpp-build/$ver-avx512
        isa_flags=("${x86_avx2[@]}" -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
                   -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF
                   -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
*)      echo "llamacpp_build.sh: LLAMACPP_ISA must be native, avx2, avxvnni or avx512, not '$isa'" >&2
        exit 2 ;;
esac

need=()
for t in "$@"; do
    [ -x "$bld/bin/$t" ] || need+=("$t")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ ! -f "$src/CMakeLists.txt" ]; then
        mkdir -p "$cache/llama-src"
        (cd "$cache/llama-src" &&
         python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$ver" >&2 &&
         tar xzf "llama_cpp_python-$ver.tar.gz")
    fi
    # the speculative-decoding programs are examples, not tools, in llama.cpp
    examples=OFF
    for t in "${need[@]}"; do
        case $t in llama-speculative* | llama-lookup*) examples=ON ;; esac
    done
    [ "$examples" = OFF ] && grep -q '^LLAMA_BUILD_EXAMPLES:BOOL=ON' "$bld/CMakeCache.txt" 2>/dev/null &&
        examples=ON # (an earlier build turned them on: keep them)
    cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=$examples \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
    for t in "${need[@]}"; do
        cmake --build "$bld" --target "$t" -j "$(nproc)" >&2
    done
fi
echo "$bld/bin"
