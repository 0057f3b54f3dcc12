#!/usr/bin/env bash
# scripts/llamacpp-cuda.sh: builds llama.cpp's CUDA llama-bench and
# llama-quantize for sm_90 alone on a machine without a GPU (nvcc needs none)
# and stages what the GPU check's quant step (scripts/gpu/quant.sh, part llama) needs into .gpubin/llama.cpp/
# (bin/ and lib/; ignored by git, carried to the GPU machine), then prints
# its size. Nothing of llama.cpp enters the repository: the source is the
# PyPI sdist of llama-cpp-python (it vendors llama.cpp), built under
# $IGNITE_CACHE/llama.cpp-build/cuda-sm90. Findings (time, sizes) are in
# docs/benchmarks.md, "llama.cpp's CUDA build".
#   LLAMA_CPP_PYTHON_VERSION=0.3.36  IGNITE_CACHE=~/.cache/ignite  JOBS=2
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ver=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
src=$cache/llama-src/llama_cpp_python-$ver/vendor/llama.cpp
bld=$cache/llama.cpp-build/cuda-sm90
if [ ! -f "$src/CMakeLists.txt" ]; then
    mkdir -p "$cache/llama-src"
    (cd "$cache/llama-src" &&
     python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$ver" &&
     tar xzf "llama_cpp_python-$ver.tar.gz")
fi
# Shared libraries: the CUDA code (libggml-cuda) once for both programs.
# No NCCL (one GPU; the machine may lack it), no CPU-native flags (the GPU
# machine's CPU is not this one), no curl/OpenSSL.
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=ON >/dev/null
cmake --build "$bld" -j"${JOBS:-2}" --target llama-bench llama-quantize
out=$here/.gpubin/llama.cpp
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
cp "$bld/bin/llama-bench" "$bld/bin/llama-quantize" "$out/bin/"
find "$bld" -name "*.so*" \( -type f -o -type l \) -exec cp -P {} "$out/lib/" \;
strip --strip-unneeded "$out/bin/"* "$out/lib/"*.so* 2>/dev/null || true
du -b "$out/bin/"* "$out/lib/"* | sort -n
du -sh "$out"
