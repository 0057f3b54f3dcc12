/* backend/gpu_p2p.h: NCCL's sends and receives between CUDA ranks, for
 * batch --pd's cache (a prefill rank's layer blocks to a decode rank:
 * backend/gpu_kv_p2p.c). libnccl.so.2 loaded at run time as for the
 * all-reduce (gpu_reduce_nccl.c, IGNITE_NCCL_LIB names another file); the
 * communicator is every rank of the job (ranks as ig_coll_rank's).
 * Bytes move as ncclUint8, on the stream given, in stream order; several
 * in flight at once only between group_start and group_end, where NCCL
 * runs them. The emulated backend (host memory) takes only the tests'
 * stand-in (tests/emu/nccl_standin.c). Covered by tests/emu/pd_nccl_emu.c. */
#ifndef IGNITE_BACKEND_GPU_P2P_H
#define IGNITE_BACKEND_GPU_P2P_H

#include <stdbool.h>
#include <stddef.h>

struct gpu_p2p;

/* Collective (every rank of the job calls it): the library loaded and a
 * communicator made. IG_OK; IG_E_DEVICE after one line (rank 0's) where a
 * rank could not, *out NULL then. The calling thread's current CUDA device
 * must be the rank's (its backend made first): ncclCommInitRank binds the
 * communicator to it, and two ranks left on device 0 fail or hang (NCCL,
 * "Creating a communicator"). */
int gpu_p2p_nccl_open(bool host_memory, struct gpu_p2p **out);
void gpu_p2p_free(struct gpu_p2p *p);

int gpu_p2p_group_start(struct gpu_p2p *p);
/* Runs the group's sends and receives (a mismatch fails here). */
int gpu_p2p_group_end(struct gpu_p2p *p);
/* bytes of device memory buf to / from rank peer, whose receive / send
 * must be of the same bytes. IG_OK or IG_E_DEVICE after one line. */
int gpu_p2p_send(struct gpu_p2p *p, const void *buf, size_t bytes, int peer, void *stream);
int gpu_p2p_recv(struct gpu_p2p *p, void *buf, size_t bytes, int peer, void *stream);

/* The watchdog: while the host is in a wait that NCCL's transfers may hold
 * up (begin .. end), a thread of p's polls ncclCommGetAsyncError and the
 * wait's time; on an error, or past IGNITE_TP_WATCHDOG seconds (default
 * 600, 0 off: the MPI path's limit), it aborts the communicator
 * (ncclCommAbort) and ends the job with one line naming the peer and the
 * last group queued, exit 7. ncclGroupEnd is watched here; callers watch
 * their syncs behind the transfer stream. begin returns whether it began a
 * watched wait (false: p NULL, the watchdog off, or inside a watched wait
 * already, whose start counts); end takes that (p not read where false)
 * and, where the watchdog ended the wait, never returns: the job is
 * ending, and the communicator is gone. */
bool gpu_p2p_wait_begin(struct gpu_p2p *p, const char *where);
void gpu_p2p_wait_end(struct gpu_p2p *p, bool began);

#endif
