# scripts/gpu/mpi_two.sh: sourced by the steps that launch 2 ranks (tp.sh, pd.sh):
# `mpi_two NAME` sets the array `mpi` to the mpirun command of 2 ranks (in PATH, or
# $BIN/mpi/bin/mpirun; --oversubscribe, --allow-run-as-root as root), or prints
# "NAME: no mpirun ...: skipped" and returns 1.
mpi_two() {
    local mpirun
    mpirun=$(command -v mpirun || true)
    [ -z "$mpirun" ] && [ -x "$BIN/mpi/bin/mpirun" ] && mpirun=$BIN/mpi/bin/mpirun
    if [ -z "$mpirun" ]; then
        echo "$1: no mpirun on this machine (Open MPI: openmpi-bin): skipped"
        return 1
    fi
    mpi=("$mpirun" --oversubscribe -np 2)
    [ "$(id -u)" = 0 ] && mpi=("$mpirun" --allow-run-as-root --oversubscribe -np 2)
    return 0
}
