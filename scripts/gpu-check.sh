#!/usr/bin/env bash
# scripts/gpu-check.sh: the one GPU check (`make gpu-check`), run on a GPU machine
# from programs built beforehand on a machine without one (scripts/gpu-prebuild.sh
# writes .gpubin/: the programs, libignite_core.so with sm_90/sm_90a code and no
# PTX, the libraries they need beyond the CUDA toolkit). It builds nothing.
#
# The steps, their order and time limits are the table scripts/gpu-steps.txt. Each
# step runs under `timeout` with its own limit, cut to what is left of the run's
# budget (GPU_CHECK_BUDGET, 470 s of the 8 minutes, the rest for starting and
# packing); a step that fails, times out or is skipped does not stop the next.
# What comes back (in $OUT, at most 8 files): gpu-check.tar.gz (every step's log
# and files), steps.tsv (id, status, exit code, seconds, limit) and each step's
# table named in scripts/gpu-steps.txt. Without $OUT: build-gpu-check/out/.
#   STEPS="attn-correct ttft"   only these steps (default: all)
#   PY=python3                  the Python with torch (and transformers)
#   GPU_CHECK_STEPS, GPU_CHECK_BIN: another step table, another .gpubin (tests)
# Exit status 0 when every step that ran passed, else 1.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUDGET=${GPU_CHECK_BUDGET:-470}
PY=${PY:-python3}
OUT=${OUT:-$ROOT/build-gpu-check/out}
RUN=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
BIN=${GPU_CHECK_BIN:-$ROOT/.gpubin}
TABLE=${GPU_CHECK_STEPS:-scripts/gpu-steps.txt}
t0=$(date +%s)
mkdir -p "$OUT"
export BIN RUN PY
say() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }

# The prebuilt programs find libignite_core.so and the copied libraries in
# .gpubin/lib, cuBLAS and the CUDA runtime in the machine's toolkit.
cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
export LD_LIBRARY_PATH="$BIN/lib:$cuda_root/lib64:$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

say "device"
{
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm \
        --format=csv,noheader
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    "$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    cat "$BIN/BUILD" 2>/dev/null
} | tee "$RUN/device.txt"
if ! "$BIN/ignite" --version >"$RUN/prebuilt.txt" 2>&1; then
    echo "gpu-check: the programs in .gpubin do not start here (run scripts/gpu-prebuild.sh"
    echo "on the build machine and carry .gpubin):"
    cat "$RUN/prebuilt.txt"
    ldd "$BIN/ignite" 2>&1 | grep "not found"
fi

status=0
printf 'id\tstatus\texit\tseconds\tlimit\n' >"$RUN/steps.tsv"
tables=()
while read -r id limit est table cmd; do
    [[ -z "$id" || "$id" == \#* ]] && continue
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $id "* ]]; then
        continue
    fi
    if [ "$cmd" = "-" ] || [[ "$cmd" == "- "* ]]; then
        printf '%s\tempty\t-\t0\t0\n' "$id" >>"$RUN/steps.tsv"
        continue
    fi
    left=$(( BUDGET - ($(date +%s) - t0) ))
    lim=$(( limit < left ? limit : left ))
    if [ "$lim" -lt 5 ]; then
        say "$id: skipped, ${left} s left of the budget"
        printf '%s\tskipped\t-\t0\t%s\n' "$id" "$limit" >>"$RUN/steps.tsv"
        status=1
        continue
    fi
    WORK=$RUN/$id
    mkdir -p "$WORK"
    say "$id (limit ${lim} s)"
    s0=$(date +%s)
    WORK=$WORK LIMIT=$lim timeout --kill-after=5 "$lim" bash -c "$cmd" >"$WORK/log.txt" 2>&1
    rc=$?
    secs=$(( $(date +%s) - s0 ))
    tail -n 25 "$WORK/log.txt"
    case $rc in
        0) st=ok ;;
        124|137) st=timeout; status=1 ;;
        77) st=skipped ;;
        *) st=failed; status=1 ;;
    esac
    say "$id: $st (exit $rc, ${secs} s)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$st" "$rc" "$secs" "$lim" >>"$RUN/steps.tsv"
    if [ "$table" != "-" ]; then
        if [ -f "$WORK/$table" ]; then
            tables+=("$WORK/$table")
        else
            echo "gpu-check: step $id wrote no $table"
        fi
    fi
done <"$TABLE"

say "packing"
cat "$RUN/steps.tsv"
tar -czf "$OUT/gpu-check.tar.gz" -C "$RUN" . 2>/dev/null
cp "$RUN/steps.tsv" "$OUT/"
for f in "${tables[@]}"; do
    cp "$f" "$OUT/"
done
rm -rf "$RUN"
say "done (status $status)"
exit $status
