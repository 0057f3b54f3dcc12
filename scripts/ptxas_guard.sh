#!/usr/bin/env bash
# scripts/ptxas_guard.sh: the compiler launcher of the sm_90a kernels (CMakeLists.txt,
# ignite_gpu_sm90a): runs the nvcc command it is given and fails it when ptxas
# reports wgmma.mma_async instructions it serialized (info C7515 or C7511: the
# tensor cores then wait for each MMA) or a setmaxnreg it ignored (C7508: the
# register split of a warp-specialized kernel would not happen). ptxas prints
# these as info lines, which -Werror does not catch. Everything the compiler
# prints is passed on. Checked by tests/unit/test_ptxas_guard.sh.
set -uo pipefail
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc = 0 ] || exit $rc
bad=$(printf '%s\n' "$out" | grep -E 'C75(15|11|08)|wgmma.mma_async instructions are serialized|setmaxnreg ignored')
if [ -n "$bad" ]; then
    printf 'ptxas_guard: serialized wgmma or ignored setmaxnreg, failing the build:\n%s\n' "$bad" >&2
    exit 1
fi
