#!/usr/bin/env bash
# tests/unit/test_ptxas_guard.sh: scripts/ptxas_guard.sh (the sm_90a compiles'
# launcher) fails a compile whose ptxas output reports serialized wgmma (C7515,
# C7511) or an ignored setmaxnreg (C7508), passes a clean one with its output,
# and keeps a failing compiler's exit status. Label unit.
set -uo pipefail
src=${IGNITE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
guard=$src/scripts/ptxas_guard.sh
fails=0
expect() { # $1 wanted exit status, $2 message, rest: command for the guard
    local want=$1 what=$2
    shift 2
    out=$("$guard" "$@" 2>&1)
    rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $what: exit $rc, want $want; output: $out"
        fails=$((fails + 1))
    fi
}
expect 0 "a clean compile" sh -c 'echo "ptxas info    : Used 168 registers"'
expect 1 "C7515" sh -c 'echo "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the presence of Extern calls"'
expect 1 "C7511" sh -c 'echo "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources"'
expect 1 "C7508" sh -c 'echo "ptxas info    : (C7508) Potential Performance Loss: setmaxnreg ignored; unable to determine register count at entry" >&2'
expect 4 "a failing compiler" sh -c 'echo "error"; exit 4'
out=$("$guard" sh -c 'echo "kept output"' 2>&1)
[ "$out" = "kept output" ] || { echo "FAIL: output not passed on: $out"; fails=$((fails + 1)); }
[ $fails = 0 ] && echo "test_ptxas_guard: ok"
[ $fails = 0 ]
