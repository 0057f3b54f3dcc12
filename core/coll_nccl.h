/* core/coll_nccl.h: NCCL's collectives between GPU ranks, loaded at run time
 * (dlopen of libnccl.so.2: from the CUDA installation, or the
 * nvidia-nccl-cu12/-cu13 Python package's lib/ where IGNITE_NCCL names it),
 * so that every build compiles it and none links NCCL. The communicator's
 * unique id goes from rank 0 to the others over core/coll.h.
 *
 * Compiled and its loading tested in CI (no GPU: "not found" is the
 * answer); the CUDA backend's tensor parallelism that will call it is not
 * done. Device pointers and the stream are the caller's (void * here: no
 * CUDA header is needed). Covered by tests/unit/test_coll_nccl.c. */
#ifndef IGNITE_CORE_COLL_NCCL_H
#define IGNITE_CORE_COLL_NCCL_H

#include <stdint.h>

struct ig_nccl;

/* Loads NCCL: $IGNITE_NCCL (a path to libnccl.so.2), else libnccl.so.2 on
 * the library path. IG_OK and *out, or IG_E_DEVICE after one line (not
 * found, or a symbol missing: the path and dlerror()). */
int ig_nccl_open(struct ig_nccl **out);

/* NCCL's version (e.g. 22703 for 2.27.3). */
int ig_nccl_version(const struct ig_nccl *nc);

/* The job's communicator over every rank of core/coll.h (collective: rank 0
 * makes the unique id and broadcasts it), on the device the caller has
 * made current. IG_OK or IG_E_DEVICE after one line with NCCL's words. */
int ig_nccl_comm_init(struct ig_nccl *nc);

/* In-place sum of n f32 values at device pointer buf over the ranks, on
 * `stream` (a cudaStream_t; NULL the default stream). Enqueued, not waited
 * for. IG_OK or IG_E_DEVICE after one line. */
int ig_nccl_allreduce_sum(struct ig_nccl *nc, float *buf, int64_t n, void *stream);

/* Destroys the communicator, unloads the library. NULL is fine. */
void ig_nccl_close(struct ig_nccl *nc);

#endif
