#!/usr/bin/env bash
# bench/llamacpp_build.sh: builds llama.cpp tools for the CPU, outside the
# repository, for the benchmarks that compare against them; prints the
# directory holding the binaries.
#
#   bench/llamacpp_build.sh TARGET...     e.g. llama-bench llama-batched-bench
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (it vendors
# llama.cpp's source), built with GGML_NATIVE in Release under
# $IGNITE_CACHE/llama.cpp-build/VERSION. Targets already built are left alone.
# env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), IGNITE_CACHE (~/.cache/ignite)
set -euo pipefail

cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ver=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
src=$cache/llama-src/llama_cpp_python-$ver/vendor/llama.cpp
bld=$cache/llama.cpp-build/$ver

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
    cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
    for t in "${need[@]}"; do
        cmake --build "$bld" --target "$t" -j "$(nproc)" >&2
    done
fi
echo "$bld/bin"
