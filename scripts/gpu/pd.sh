#!/usr/bin/env bash
# scripts/gpu/pd.sh: issue 49's GPU part: `--pd` between two CUDA ranks, which
# the lent machines (one GPU each) cannot run. On 2 GPUs with mpirun:
#   1. correctness: `mpirun -np 2 $BIN/pd_nccl_gpu` (tests/emu/pd_nccl_emu.c built
#      for the GPU: a cache sent by real NCCL into the decode rank's blocks, its
#      bytes and the decode steps after it one process's, bit for bit);
#   2. the cost of the transfer: `ignite bench --requests-file` of a mixed workload
#      (a third of the requests 2048-token prompts, the rest 128; 128 tokens out
#      each; Poisson arrivals at $PD_RATE requests/s, seed 1) on Qwen2.5-Coder-1.5B's
#      shapes (bench/random_gguf.py, Q4_K_M, random weights: the GPU machine
#      downloads nothing), four ways in the same run on the same machine:
#        one    one process on one GPU (colocated: prompts and decode rows in steps
#               together)
#        nccl   `--pd 1:1`, IGNITE_PD_XFER=nccl (device to device, the transfer stream)
#        host   `--pd 1:1`, IGNITE_PD_XFER=host (host memory and MPI, copies on the
#               copy stream, layer by layer)
#        host0  host with IGNITE_PD_COPY_STREAM=0 (each layer's copies synchronous:
#               the A/B of the copy stream)
#      and prints, a row each, TTFT and TPOT p50/p99 (ms), each request's cache
#      bytes and transfer time (`pd.transfer_ms` of requests[], the decode rank's
#      time from the cache's head to its last part), into $WORK/pd.tsv.
# Where there are not 2 GPUs or no mpirun it says so and exits 0 (skipped).
# PD_DRY=1 runs it anyway (with PD_MPI_ENV, PD_MODEL and PD_REQUESTS, a check of
# the script itself over the emulator: see docs/gpu.md). LIMIT=300 for the
# measurement (each run under its own share); exit 1 when a part fails.
#   PD_RATE=2  PD_REQUESTS=24
set -uo pipefail
limit=${LIMIT:-300}
rate=${PD_RATE:-2}
n_req=${PD_REQUESTS:-24}
if [ "${PD_DRY:-0}" != 1 ]; then
    n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "${n_gpu:-0}" -lt 2 ]; then
        echo "pd: needs 2 GPUs, this machine has ${n_gpu:-0}: skipped"
        exit 0
    fi
fi
# shellcheck source=scripts/gpu/mpi_two.sh
. "$(dirname "$0")/mpi_two.sh"
mpi_two pd || exit 0
if [ "$limit" -lt 60 ]; then
    echo "pd: ${limit} s is too short to measure (LIMIT=300 scripts/gpu/pd.sh runs it): skipped"
    exit 0
fi
# (the environment each rank needs, -x NAME each: mpirun passes no other)
for v in ${PD_MPI_ENV:-}; do mpi+=(-x "$v"); done
t_end=$((SECONDS + limit - 2))
left() { echo $((t_end - SECONDS)); }
status=0

if [ -x "$BIN/pd_nccl_gpu" ]; then
    timeout "$(left)" "${mpi[@]}" "$BIN/pd_nccl_gpu" >"$WORK/pd_nccl_gpu.txt" 2>&1 ||
        { echo "pd: pd_nccl_gpu failed ($WORK/pd_nccl_gpu.txt)"; status=1; }
    grep -E "checks" "$WORK/pd_nccl_gpu.txt"
else
    echo "pd: no $BIN/pd_nccl_gpu (scripts/gpu-prebuild.sh builds it where MPI is found)"
fi

model=${PD_MODEL:-$WORK/qwen2.5-1.5b-shape-q4_k_m.gguf}
if [ ! -f "$model" ]; then
    timeout "$(left)" "$PY" bench/random_gguf.py "$model" --shape Qwen2.5-1.5B --type Q4_K_M ||
        { echo "pd: random_gguf failed"; exit 1; }
fi
reqs=$WORK/mixed.jsonl
"$PY" - "$reqs" "$n_req" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    for i in range(n):  # every third request a long prompt
        f.write(json.dumps({"input_len": 2048 if i % 3 == 0 else 128, "output_len": 128}) + "\n")
PY
bench=(bench --device cuda -m "$model" --requests "$n_req" --requests-file "$reqs" -P 8
       --request-rate "$rate" -s 1 -o json)
# each way its share of what is left, so that a slow one leaves the others theirs
run() { # name, then the command
    local name=$1 share
    shift
    share=$(( $(left) / ways_left ))
    ways_left=$((ways_left - 1))
    timeout "$share" "$@" >"$WORK/$name.json" 2>"$WORK/$name.err" ||
        { echo "pd: $name failed or ran out of its ${share} s ($WORK/$name.err)"; status=1; }
}
ways_left=4
run one "$BIN/ignite" "${bench[@]}"
run nccl env IGNITE_PD_XFER=nccl "${mpi[@]}" -x IGNITE_PD_XFER "$BIN/ignite" "${bench[@]}" --pd 1:1
run host env IGNITE_PD_XFER=host "${mpi[@]}" -x IGNITE_PD_XFER "$BIN/ignite" "${bench[@]}" --pd 1:1
run host0 env IGNITE_PD_XFER=host IGNITE_PD_COPY_STREAM=0 "${mpi[@]}" -x IGNITE_PD_XFER \
    -x IGNITE_PD_COPY_STREAM "$BIN/ignite" "${bench[@]}" --pd 1:1
"$PY" scripts/gpu/pd_table.py "$WORK" one nccl host host0 | tee "$WORK/pd.tsv"
exit $status
