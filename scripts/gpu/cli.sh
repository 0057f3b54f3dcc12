#!/usr/bin/env bash
# scripts/gpu/cli.sh: step cli of the GPU check: a short `ignite bench --device cuda`
# and the error (exit 7) for a device that does not exist.
set -uo pipefail
"$BIN/ignite" bench --device cuda -m synthetic:SmolLM2-135M -p 64,300 -n 16 -r 2 || exit 1
"$BIN/ignite" run --device cuda:99 -p x
rc=$?
[ $rc = 7 ] || { echo "--device cuda:99 exited $rc, expected 7"; exit 1; }
