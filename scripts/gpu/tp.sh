#!/usr/bin/env bash
# scripts/gpu/tp.sh: step tp of the GPU check: tensor-parallel CUDA ranks
# (backend/gpu_tp.c) on 2 GPUs: decode (tg128, `ignite bench -p 512 -n 128`) of
# Qwen2.5-Coder-1.5B's shapes (bench/random_gguf.py --shape Qwen2.5-1.5B, Q4_K_M,
# random weights, as a llama: the GPU machine downloads nothing) at 2 ranks
# (`mpirun -np 2`, NCCL where it loads, else the host path) against 1 process, same
# build, same machine, same run; then the 2 ranks again with IGNITE_TP_REDUCE=mpi
# (the host path) and IGNITE_TP_STATS=1 (the seconds each rank spent in the
# all-reduces, per step). Needs 2 GPUs and mpirun (in PATH, or $BIN/mpi/bin/mpirun):
# where either is missing it says so and exits 0 (skipped). TP_ONE_GPU=1 runs both
# ranks on the one GPU (the host path; correctness and overhead only: no link is
# crossed, so no scaling figure). Prints "tp: tg128 2 ranks / 1 process = R". The
# check's slot (5 s) only says why it skips; LIMIT=300 runs the measurement.
set -uo pipefail
limit=${LIMIT:-300}
n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${n_gpu:-0}" -lt 2 ] && [ "${TP_ONE_GPU:-0}" != 1 ]; then
    echo "tp: needs 2 GPUs, this machine has ${n_gpu:-0}: skipped (TP_ONE_GPU=1 runs 2 ranks on one)"
    exit 0
fi
# shellcheck source=scripts/gpu/mpi_two.sh
. "$(dirname "$0")/mpi_two.sh"
mpi_two tp || exit 0
if [ "$limit" -lt 60 ]; then # the check's slot: the model alone takes longer
    echo "tp: ${limit} s is too short to measure (LIMIT=300 scripts/gpu/tp.sh runs it): skipped"
    exit 0
fi
model=$WORK/qwen2.5-1.5b-shape-q4_k_m.gguf
t_end=$((SECONDS + limit - 2))
left() { echo $((t_end - SECONDS)); }
timeout "$(left)" "$PY" bench/random_gguf.py "$model" --shape Qwen2.5-1.5B --type Q4_K_M ||
    { echo "tp: random_gguf failed"; exit 1; }
bench=(bench --device cuda -m "$model" -p 512 -n 128 -r 2 -o json)
timeout "$(left)" "$BIN/ignite" "${bench[@]}" >"$WORK/one.json" ||
    { echo "tp: 1 process failed"; exit 1; }
timeout "$(left)" "${mpi[@]}" "$BIN/ignite" "${bench[@]}" >"$WORK/tp2.json" ||
    { echo "tp: 2 ranks failed"; exit 1; }
# NCCL's first all-reduce inside a decode graph's capture (tg only: no prefill step before
# it sets up NCCL's connections; docs/gpu.md, "Review against real CUDA and NCCL semantics")
timeout "$(left)" "${mpi[@]}" "$BIN/ignite" bench --device cuda -m "$model" -p 0 -n 16 -r 1 \
    -o json >"$WORK/tp2_decode_first.json" || echo "tp: 2 ranks, a decode step first: failed"
IGNITE_TP_REDUCE=mpi IGNITE_TP_STATS=1 timeout "$(left)" "${mpi[@]}" -x IGNITE_TP_REDUCE \
    -x IGNITE_TP_STATS "$BIN/ignite" "${bench[@]}" >"$WORK/tp2_mpi.json" ||
    echo "tp: 2 ranks, host path: failed"
"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def tg(name):
    try:
        d = json.load(open(f"{w}/{name}.json"))
    except (OSError, ValueError):
        return None
    for r in d if isinstance(d, list) else []:
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            return r.get("avg_ts")
    return None
one, two, host = tg("one"), tg("tp2"), tg("tp2_mpi")
print(f"tp: tg128 1 process {one} tok/s, 2 ranks {two} tok/s, 2 ranks host path {host} tok/s")
if one and two:
    print(f"tp: tg128 2 ranks / 1 process = {two / one:.2f}")
PY
