#!/usr/bin/env bash
# One-command set-up on a fresh Debian/Ubuntu machine:
#   scripts/setup.sh run    install what is missing, build ignite alone (not the test
#                           programs), run it on the default model
#   scripts/setup.sh test   install what is missing, build, run the whole test suite,
#                           then again in an ASan + UBSan build (all but the emulated CUDA
#                           tests, which run with the sanitizers in the first build)
# Installs system packages with apt-get (through sudo when not root), the
# Python test packages into .venv, and the default model into the cache.
# Everything already present is left alone. Further arguments go to make.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

what=${1:-run}
shift || true
case "$what" in run|test|asan) ;; *) echo "usage: scripts/setup.sh run|test|asan [make args]" >&2; exit 2 ;; esac

# Debian package -> a file that shows it is installed.
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have make || need+=(make)
have cc || need+=(gcc)
have c++ || need+=(g++)
have cmake || need+=(cmake)
have python3 || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
[ -f /usr/include/cjson/cJSON.h ] || need+=(libcjson-dev)
[ -f /usr/include/editline/readline.h ] || need+=(libedit-dev) # line editing in chat
# MPI ranks: tensor parallelism (mpirun -np N ignite ...) and its tests
[ -f /usr/include/x86_64-linux-gnu/mpi/mpi.h ] || [ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
    || need+=(libopenmpi-dev)
have mpirun || need+=(openmpi-bin)
if [ "$what" != run ]; then
    have clang || need+=(clang)
    # libFuzzer and clang's sanitizer runtimes
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
        || need+=(libclang-rt-dev)
fi

if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "setup: installing ${need[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

case "$what" in
test) exec make test asan "$@" ;;
*) exec make "$what" "$@" ;;
esac
