#!/usr/bin/env bash
# scripts/device-deps.sh: copies into DIR the shared libraries that PROGRAM (and
# DIR's libignite_core.so) load beyond glibc and the CUDA toolkit's (cudart,
# cuBLAS, the driver): cJSON, and libstdc++ / libgcc_s in case the GPU machine's
# are older than this machine's. scripts/gpu-prebuild.sh calls it for .gpubin/lib;
# scripts/gpu-check.sh puts that directory first on LD_LIBRARY_PATH.
#   scripts/device-deps.sh DIR PROGRAM
set -euo pipefail
dir=$1
prog=$2
LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$prog" "$dir"/libignite_core.so |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        case "$name" in
            libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) continue ;;
            libcudart.so*|libcublas.so*|libcublasLt.so*|libnvJitLink.so*) continue ;;
            libignite_core.so) continue ;;
        esac
        cp -L "$path" "$dir/$name"
        echo "device-deps: $name from $path"
    done
