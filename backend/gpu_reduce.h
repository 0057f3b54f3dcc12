/* backend/gpu_reduce.h: the all-reduce of a tensor-parallel GPU rank
 * (backend/gpu_tp.c): a device buffer of floats summed over the job's ranks
 * in place, on the step's stream. Two ways:
 *
 *   nccl  gpu_reduce_nccl.c: libnccl.so.2 loaded with dlopen at run time
 *         (IGNITE_NCCL_LIB names another file), ncclCommInitRank with the
 *         unique id broadcast over MPI (core/coll.h), ncclAllReduce queued on
 *         the stream: a decode graph captures it.
 *   mpi   gpu_reduce_host.c: device -> host, MPI_Allreduce, host -> device.
 *         Synchronous, so it cannot be captured: a backend reducing so runs
 *         its decode steps without graphs. What the emulated backend runs
 *         (CI), and the fallback where NCCL is absent or ranks share a GPU.
 *
 * IGNITE_TP_REDUCE=auto (default: nccl where it loads and every rank has a
 * GPU of its own, else mpi), nccl (a missing library is an error) or mpi.
 * The emulated backend takes nccl only from the tests' stand-in
 * (tests/emu/nccl_standin.c: NCCL's calls over MPI on host memory).
 * Covered by tests/tp/test_tp_gpu.py (the mpi path under the emulator, the
 * nccl path's calls through the stand-in, its refusals) and the GPU check's
 * tp step (scripts/gpu/tp.sh). */
#ifndef IGNITE_BACKEND_GPU_REDUCE_H
#define IGNITE_BACKEND_GPU_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_reduce {
    const char *name; /* "nccl" or "mpi" */
    bool capturable;  /* sum only queues work on the stream (a graph may hold it) */
    /* buf[0..n) (device) summed over the ranks, on every rank. IG_OK or a
     * status after one line. */
    int (*sum)(struct gpu_reduce *r, float *buf, int64_t n, void *stream);
    void (*free)(struct gpu_reduce *r);
};

/* The NCCL communicator of the job's ranks, each on its current CUDA
 * device (collective: every rank calls it). host_memory (the emulated
 * backend): only a library that reads host memory, the tests' stand-in
 * (tests/emu/nccl_standin.c). IG_OK; IG_E_DEVICE after one line (rank 0's)
 * where a rank could not load the library or NCCL failed (the line names
 * the rank and the file); *out NULL then. */
int gpu_reduce_nccl_open(bool host_memory, struct gpu_reduce **out);

/* Whether this rank can load NCCL (no collective; for IGNITE_TP_REDUCE=auto).
 * Fills why (a line's worth) where not. */
bool gpu_reduce_nccl_loads(char *why, size_t cap);

#endif
