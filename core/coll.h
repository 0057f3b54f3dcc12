/* core/coll.h: the ranks of one ignite job and what passes between them:
 * collectives (broadcast, all-reduce, gather) and point-to-point buffers
 * (send, receive), over MPI where the build found it (core/coll_mpi.c),
 * else a job of one rank (core/coll_none.c).
 *
 * The job is MPI_COMM_WORLD: `mpirun -np N ignite ...` (or srun) starts N
 * processes and ig_coll_start makes them a job; run without a launcher it
 * is one rank and no MPI is started. Tensor parallelism (backend/tp.c)
 * all-reduces each block's partial sums and gathers the logits here; the
 * point-to-point calls are for what moves between ranks of different jobs
 * in a step (prefill and decode on different ranks: KV blocks). NCCL's
 * collectives between GPUs will sit beside these, their unique id handed
 * out with ig_coll_bcast (docs/design.md, "Distributed").
 *
 * Every call is collective over all ranks unless it says otherwise; sizes
 * are in bytes or floats as named. A transport error ends the whole job
 * (MPI's default handler: every rank stops, mpirun reports it), so calls
 * return nothing. Covered by tests/tp/. */
#ifndef IGNITE_CORE_COLL_H
#define IGNITE_CORE_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True where this build has MPI (IGNITE_MPI). */
bool ig_coll_available(void);

/* True when a launcher (mpirun, srun) started this process as one of
 * several: its environment says so (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMIX_RANK with a size), whether or not this build has MPI. */
bool ig_coll_launched(void);

/* Joins the job where launched (MPI_Init), else makes a job of one. Returns
 * IG_OK, or IG_E_USAGE after one line where a launcher started several
 * ranks of a build without MPI. */
int ig_coll_start(int *argc, char ***argv);

/* Leaves the job (MPI_Finalize). */
void ig_coll_finish(void);

/* This process's rank, 0 .. size - 1, and the job's ranks (1 alone). */
int ig_coll_rank(void);
int ig_coll_size(void);

/* Ends every rank of the job with exit code `status` (MPI_Abort) after this
 * rank's one line; never returns. Where a rank cannot go on and the others
 * would wait for it. */
_Noreturn void ig_coll_abort(int status);

/* bytes of buf from `root` to every rank. */
void ig_coll_bcast(void *buf, size_t bytes, int root);

/* buf[0..n) summed over the ranks, on every rank (ranks' parts added in
 * rank order by MPI's reduction: the same bits on every rank). */
void ig_coll_allreduce_sum(float *buf, int64_t n);

/* The largest of *v over the ranks, on every rank. */
void ig_coll_allreduce_max(int64_t *v);

/* Rank r's n[r] floats of `part` into root's `out` at offset at[r] (floats),
 * in rank order; out and at, n are read on root only. */
void ig_coll_gatherv(const float *part, int64_t n_part, float *out, const int64_t *n,
                     const int64_t *at, int root);

/* Point to point: bytes of buf to rank `to` (tag: the caller's kind of
 * message), and from rank `from` (blocks until it comes; the size must
 * match). */
void ig_coll_send(const void *buf, size_t bytes, int to, int tag);
void ig_coll_recv(void *buf, size_t bytes, int from, int tag);

/* Without waiting: a message for this rank from any rank (not yet
 * received)? Fills its sender, tag and bytes. Where a rank serves several
 * others at once (prefill/decode separation, cli/pd.c) and must not block
 * on one of them. Not collective. */
bool ig_coll_poll(int *from, int *tag, size_t *bytes);

/* A send that does not wait for the receiver: buf (at most 1 GiB, one
 * message, so that ig_coll_poll sees its whole size) must stay as it is
 * until ig_coll_sent says it went. Returns the send's handle. Ranks that
 * send to each other at once never deadlock this way. Not collective. */
struct ig_coll_send_req;
struct ig_coll_send_req *ig_coll_isend(const void *buf, size_t bytes, int to, int tag);
/* True when the send is done (the handle is then freed); false: not yet. */
bool ig_coll_sent(struct ig_coll_send_req *req);
#define IG_COLL_MESSAGE_MAX ((size_t)1 << 30)

/* Seconds spent in this rank's collectives since the start (the all-reduce's
 * cost per step: ignite bench with --tp). */
double ig_coll_seconds(void);

#endif
