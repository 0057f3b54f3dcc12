/* tests/emu/nccl_standin.c: a stand-in for libnccl.so.2, built for tests
 * only (libignite_nccl_standin.so), so that CI runs ignite's NCCL calls
 * (backend/gpu_reduce_nccl.c: dlopen, the unique id over MPI,
 * ncclCommInitRank, ncclAllReduce) on the emulated CUDA ranks, where no GPU
 * and no NCCL exist. Its sends and receives in groups are there for PD's
 * cache between CUDA ranks (backend/gpu_kv_p2p.c), checked alone by
 * nccl_standin_check.c.
 *
 * What it implements is NCCL's documented contract (the user guide,
 * docs.nvidia.com/deeplearning/nccl/user-guide/docs/: api/colls.html,
 * api/p2p.html, api/group.html, usage/inplace.html), over MPI between the
 * job's processes:
 *   - ncclAllReduce: the element-wise op of `count` values of every rank's
 *     sendbuff into every rank's recvbuff, in place where sendbuff ==
 *     recvbuff (float32 sum only: all ignite asks);
 *   - ncclSend / ncclRecv: `count` elements to / from `peer`; "the
 *     corresponding ncclRecv must use the same count and datatype";
 *     several in flight at once only inside ncclGroupStart/End;
 *   - stream order: a call acts after the work queued before it on the
 *     stream. ignite makes each call where the emulated stream runs it
 *     (device/device_emu.cc): the all-reduce on the main stream, which is
 *     synchronous (a launch has run when it returns); PD's groups of sends
 *     and receives from the transfer stream's queued call (dev_stream_call:
 *     run when that stream is waited on, or where the host would idle or
 *     block, dev_streams_run). So doing the transfer inside the call is
 *     doing it in stream order. Under a group the operations run at
 *     ncclGroupEnd, as NCCL launches them there.
 *   - an emulated device pointer is host memory (device_emu.cc allocates
 *     with posix_memalign), so the buffers are read and written in place.
 *   - fault tolerance (api/comms.html; NCCL 2.4's release notes added both
 *     calls for it): ncclCommAbort, from any thread, ends the
 *     communicator's uncompleted operations, so a group blocked in its
 *     wait returns ncclRemoteError (its requests left to MPI_Finalize:
 *     MPI is not called from the aborting thread); ncclCommGetAsyncError,
 *     from any thread, reports the first error a group of the
 *     communicator hit. The handle is not freed (another thread may still
 *     be inside a call with it).
 *   - for the CLI's watchdog's test: IGNITE_NCCL_STANDIN_STOP=R stops
 *     rank R (SIGSTOP) as its first send or receive is queued: a peer
 *     alive but silent mid-transfer, at a point the test does not have to
 *     guess (before its ncclGroupEnd, whose own watchdog would otherwise
 *     count the stopped time once mpirun's SIGCONT comes before its kill).
 *
 * What real NCCL leaves undefined (a hang, or garbage) where a caller gets
 * it wrong, the stand-in refuses, on every rank concerned, with one line on
 * stderr ("nccl stand-in: rank R: ...") and ncclInvalidUsage (5):
 *   - an all-reduce whose count, type or op differ between the ranks, or
 *     that ranks reach in different orders (each call's sequence number);
 *   - a send and its receive of different count or type (the sender's
 *     header is checked by the receiver, which answers before any data);
 *   - ncclCommInitRank with an id not made by ncclGetUniqueId, with ranks
 *     that do not make 0..nranks-1 of the job's processes exactly once, or
 *     with another id than the other ranks';
 *   - ncclGroupEnd without its ncclGroupStart, ncclCommDestroy with a group
 *     open or operations queued, a peer outside the communicator, a type
 *     or op it does not implement.
 * What it does not prove: anything of NCCL itself (its transports, its
 * kernels, its timing, that it really runs in stream order on a GPU, graph
 * capture): only that ignite's calls are the right ones.
 *
 * It exports `ignite_nccl_stand_in`, which backend/gpu_reduce_nccl.c asks
 * for before letting the emulated backend (host memory) use a library.
 * Covered by tests/tp/test_tp_gpu.py (IGNITE_TP_REDUCE=nccl, and
 * nccl_standin_check). */
#include <mpi.h>

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* nccl.h's ABI (2.x) */
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct standin_comm *ncclComm_t;
enum { ncclSuccess = 0, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
       ncclInvalidUsage = 5, ncclRemoteError = 6 };
enum { ncclFloat32 = 7, ncclSum = 0, N_TYPES = 10 };

/* Prototypes of the exports (the library's interface: nccl.h's). */
int ncclGetVersion(int *version);
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclCommDestroy(ncclComm_t comm);
int ncclCommAbort(ncclComm_t comm);
int ncclCommGetAsyncError(ncclComm_t comm, int *async_error);
int ncclCommCount(const ncclComm_t comm, int *count);
int ncclCommUserRank(const ncclComm_t comm, int *rank);
int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, ncclComm_t comm,
                  void *stream);
int ncclSend(const void *send, size_t count, int type, int peer, ncclComm_t comm, void *stream);
int ncclRecv(void *recv, size_t count, int type, int peer, ncclComm_t comm, void *stream);
int ncclGroupStart(void);
int ncclGroupEnd(void);
const char *ncclGetErrorString(int result);

/* The marker gpu_reduce_nccl.c looks for: this library reads host memory. */
const int ignite_nccl_stand_in = 1;

static const char MAGIC[16] = "ignite-standin1";

/* bytes of an element, by ncclDataType_t (int8 .. bfloat16) */
static const size_t type_bytes[N_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

struct standin_comm {
    char magic[16];
    MPI_Comm mpi;     /* the communicator's own: no message meets ignite's */
    int rank, size;
    int64_t n_reduce; /* all-reduces so far: ranks must reach them in one order */
    _Atomic bool aborted; /* ncclCommAbort's mark */
    _Atomic int async;    /* the first error a group hit (ncclCommGetAsyncError) */
};

/* A send or a receive queued in a group. */
struct p2p {
    bool send;
    void *buf;
    size_t count;
    int type, peer;
    ncclComm_t comm;
    int64_t hdr[2], peer_hdr[2]; /* count and type: ours, the other side's */
    int verdict, peer_verdict;   /* the receiver's answer: 1 agreed, 0 not */
};

static int depth;          /* ncclGroupStart's not yet ended */
static struct p2p *queued; /* this group's sends and receives */
static int n_queued, cap_queued;

enum { TAG_HDR = 1, TAG_VERDICT, TAG_DATA };
#define PIECE ((size_t)1 << 30) /* bytes an MPI message carries at most (its int count) */

/* One line on stderr naming the rank; ncclInvalidUsage. */
__attribute__((format(printf, 2, 3))) static int refuse(const ncclComm_t c, const char *fmt, ...)
{
    int r = 0;
    if (c)
        r = c->rank;
    else
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nccl stand-in: rank %d: ", r);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return ncclInvalidUsage;
}

static bool comm_ok(const ncclComm_t c)
{
    return c && !memcmp(c->magic, MAGIC, sizeof MAGIC);
}

int ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = 21803; /* the ABI it follows: 2.18 */
    return ncclSuccess;
}

const char *ncclGetErrorString(int result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (stand-in: MPI failed)";
    case ncclInternalError: return "internal error (stand-in: out of memory)";
    case ncclInvalidArgument: return "invalid argument (stand-in: see the line above)";
    case ncclInvalidUsage: return "invalid usage (stand-in: see the line above)";
    case ncclRemoteError: return "remote process exited or there was a network error "
                                 "(stand-in: the communicator was aborted)";
    default: return "unknown result code";
    }
}

int ncclGetUniqueId(ncclUniqueId *id)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!id || !inited)
        return ncclInvalidUsage; /* the stand-in's processes are MPI's */
    memset(id, 0, sizeof *id);
    memcpy(id->internal, MAGIC, sizeof MAGIC);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    int64_t nonce[3] = {(int64_t)getpid(), (int64_t)t.tv_sec, (int64_t)t.tv_nsec};
    memcpy(id->internal + sizeof MAGIC, nonce, sizeof nonce);
    return ncclSuccess;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm)
        return ncclInvalidArgument;
    *comm = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return refuse(NULL, "ncclCommInitRank before MPI_Init");
    /* every rank of the job takes part in the split, so every rank checks */
    bool good = !memcmp(id.internal, MAGIC, sizeof MAGIC);
    MPI_Comm mpi;
    if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi) != MPI_SUCCESS)
        return ncclSystemError;
    int size, me;
    MPI_Comm_size(mpi, &size);
    MPI_Comm_rank(mpi, &me);
    /* each rank's id, nranks and rank, seen by all */
    struct { char id[128]; int nranks, rank, good; } mine, *all = malloc((size_t)size * sizeof mine);
    if (!all) {
        MPI_Comm_free(&mpi);
        return ncclInternalError;
    }
    memcpy(mine.id, id.internal, sizeof mine.id);
    mine.nranks = nranks;
    mine.rank = rank;
    mine.good = good;
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, mpi);
    int st = ncclSuccess;
    for (int i = 0; i < size && st == ncclSuccess; i++) {
        if (!all[i].good)
            st = refuse(NULL, "ncclCommInitRank: rank %d's id is not from ncclGetUniqueId",
                        all[i].rank);
        else if (memcmp(all[i].id, mine.id, sizeof mine.id))
            st = refuse(NULL, "ncclCommInitRank: ranks %d and %d have different ids", me, i);
        else if (all[i].nranks != size || all[i].rank != i)
            st = refuse(NULL, "ncclCommInitRank: rank %d of %d: not the ranks 0..nranks-1 "
                        "of the job's %d processes once each", all[i].rank, all[i].nranks,
                        size);
    }
    free(all);
    if (st != ncclSuccess) {
        MPI_Comm_free(&mpi);
        return st;
    }
    struct standin_comm *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Comm_free(&mpi);
        return ncclInternalError;
    }
    memcpy(c->magic, MAGIC, sizeof MAGIC);
    c->mpi = mpi;
    c->rank = me;
    c->size = size;
    *comm = c;
    return ncclSuccess;
}

int ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm_ok(comm) || !count)
        return ncclInvalidArgument;
    *count = comm->size;
    return ncclSuccess;
}

int ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm_ok(comm) || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

int ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    if (!comm_ok(comm))
        return ncclInvalidArgument;
    if (depth || n_queued)
        return refuse(comm, "ncclCommDestroy inside a group (%d open, %d operations queued)",
                      depth, n_queued);
    MPI_Comm_free(&comm->mpi);
    memset(comm->magic, 0, sizeof comm->magic);
    free(comm);
    return ncclSuccess;
}

int ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    if (!comm_ok(comm))
        return ncclInvalidArgument;
    atomic_store(&comm->aborted, true);
    return ncclSuccess;
}

int ncclCommGetAsyncError(ncclComm_t comm, int *async_error)
{
    if (!comm_ok(comm) || !async_error)
        return ncclInvalidArgument;
    *async_error = atomic_load(&comm->async);
    return ncclSuccess;
}

/* ---- the all-reduce ---------------------------------------------------------------- */

int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, ncclComm_t comm,
                  void *stream)
{
    (void)stream; /* the emulated stream is synchronous: now is its order */
    if (!comm_ok(comm))
        return ncclInvalidArgument;
    if (depth)
        return refuse(comm, "ncclAllReduce inside a group: the stand-in runs collectives "
                      "alone");
    /* count, type, op and the call's number, the same on every rank */
    int64_t mine[4] = {(int64_t)count, type, op, comm->n_reduce++}, lo[4], hi[4];
    MPI_Allreduce(mine, lo, 4, MPI_INT64_T, MPI_MIN, comm->mpi);
    MPI_Allreduce(mine, hi, 4, MPI_INT64_T, MPI_MAX, comm->mpi);
    if (memcmp(lo, hi, sizeof lo))
        return refuse(comm, "ncclAllReduce #%lld: count %lld..%lld, type %lld..%lld, op "
                      "%lld..%lld over the ranks (or the ranks are at different calls)",
                      (long long)mine[3], (long long)lo[0], (long long)hi[0],
                      (long long)lo[1], (long long)hi[1], (long long)lo[2], (long long)hi[2]);
    if (type != ncclFloat32 || op != ncclSum)
        return refuse(comm, "ncclAllReduce: type %d, op %d: the stand-in sums float32 only",
                      type, op);
    if (count && (!send || !recv))
        return ncclInvalidArgument;
    const float *in = send;
    float *out = recv;
    size_t piece = PIECE / sizeof(float);
    for (size_t at = 0; at < count; at += piece) {
        int k = (int)(count - at < piece ? count - at : piece);
        int rc = in == out ? MPI_Allreduce(MPI_IN_PLACE, out + at, k, MPI_FLOAT, MPI_SUM,
                                           comm->mpi)
                           : MPI_Allreduce(in + at, out + at, k, MPI_FLOAT, MPI_SUM, comm->mpi);
        if (rc != MPI_SUCCESS)
            return ncclSystemError;
    }
    return ncclSuccess;
}

/* ---- point to point, in groups ----------------------------------------------------- */

int ncclGroupStart(void)
{
    depth++;
    return ncclSuccess;
}

/* IGNITE_NCCL_STANDIN_STOP=R: rank R stops at its first send or receive. */
static void stop_if_asked(const ncclComm_t c)
{
    static bool asked;
    const char *e = getenv("IGNITE_NCCL_STANDIN_STOP");
    if (!asked && e && *e && atoi(e) == c->rank) {
        asked = true;
        raise(SIGSTOP);
    }
}

static int queue_p2p(bool send, void *buf, size_t count, int type, int peer, ncclComm_t comm)
{
    if (!comm_ok(comm))
        return ncclInvalidArgument;
    if (peer < 0 || peer >= comm->size)
        return refuse(comm, "%s: peer %d of %d ranks", send ? "ncclSend" : "ncclRecv", peer,
                      comm->size);
    if (type < 0 || type >= N_TYPES)
        return refuse(comm, "%s: type %d", send ? "ncclSend" : "ncclRecv", type);
    if (count && !buf)
        return ncclInvalidArgument;
    stop_if_asked(comm);
    if (n_queued == cap_queued) {
        int cap = cap_queued ? 2 * cap_queued : 16;
        struct p2p *q = realloc(queued, (size_t)cap * sizeof *q);
        if (!q)
            return ncclInternalError;
        queued = q;
        cap_queued = cap;
    }
    queued[n_queued++] = (struct p2p){.send = send, .buf = buf, .count = count, .type = type,
                                      .peer = peer, .comm = comm,
                                      .hdr = {(int64_t)count, type}};
    return ncclSuccess;
}

/* MPI_Waitall that sleeps between its tests: a group now runs where the
 * emulated transfer stream runs (device_emu.cc), often before its peer's
 * match is queued, and Open MPI's own wait spins, taking the core the peer
 * needs to get there. ncclRemoteError once c is aborted (another thread's
 * ncclCommAbort), the requests left pending. */
static int wait_all(int n, MPI_Request *rq, const ncclComm_t c)
{
    int done = 0;
    for (MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE); !done;
         MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE)) {
        if (c && atomic_load(&c->aborted))
            return ncclRemoteError;
        nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    return ncclSuccess;
}

/* The group's sends and receives (n queued, rq room for 2n requests, c
 * the first one's communicator): every header first (the sender's count
 * and type), each receiver's verdict back, then the data of the agreed
 * ones. A disagreement fails both sides, before any data moves; an abort
 * (wait_all) ends it where it waits. */
static int move(int n, MPI_Request *rq, const ncclComm_t c)
{
    int st = ncclSuccess;
    for (int i = 0; i < n; i++) {
        struct p2p *p = &queued[i];
        if (p->send)
            MPI_Isend(p->hdr, 2, MPI_INT64_T, p->peer, TAG_HDR, p->comm->mpi, &rq[i]);
        else
            MPI_Irecv(p->peer_hdr, 2, MPI_INT64_T, p->peer, TAG_HDR, p->comm->mpi, &rq[i]);
    }
    if (wait_all(n, rq, c) != ncclSuccess)
        return ncclRemoteError;
    for (int i = 0; i < n; i++) {
        struct p2p *p = &queued[i];
        if (p->send) {
            MPI_Irecv(&p->peer_verdict, 1, MPI_INT, p->peer, TAG_VERDICT, p->comm->mpi, &rq[i]);
            continue;
        }
        p->verdict = !memcmp(p->hdr, p->peer_hdr, sizeof p->hdr);
        p->peer_verdict = p->verdict;
        if (!p->verdict)
            st = refuse(p->comm, "ncclRecv from rank %d: %lld elements of type %lld sent, "
                        "%lld of type %lld to receive", p->peer, (long long)p->peer_hdr[0],
                        (long long)p->peer_hdr[1], (long long)p->hdr[0], (long long)p->hdr[1]);
        MPI_Isend(&p->verdict, 1, MPI_INT, p->peer, TAG_VERDICT, p->comm->mpi, &rq[i]);
    }
    if (wait_all(n, rq, c) != ncclSuccess)
        return ncclRemoteError;
    int m = 0;
    for (int i = 0; i < n; i++) {
        struct p2p *p = &queued[i];
        if (!p->peer_verdict) {
            if (p->send)
                st = refuse(p->comm, "ncclSend of %lld elements to rank %d: its ncclRecv does "
                            "not match", (long long)p->count, p->peer);
            continue;
        }
        size_t bytes = p->count * type_bytes[p->type];
        for (size_t at = 0; at < bytes; at += PIECE) { /* at most 1 GiB a message */
            int k = (int)(bytes - at < PIECE ? bytes - at : PIECE);
            if (m == 2 * n) { /* more pieces than requests: let these go first */
                if (wait_all(m, rq, c) != ncclSuccess)
                    return ncclRemoteError;
                m = 0;
            }
            if (p->send)
                MPI_Isend((char *)p->buf + at, k, MPI_BYTE, p->peer, TAG_DATA, p->comm->mpi,
                          &rq[m++]);
            else
                MPI_Irecv((char *)p->buf + at, k, MPI_BYTE, p->peer, TAG_DATA, p->comm->mpi,
                          &rq[m++]);
        }
    }
    return wait_all(m, rq, c) != ncclSuccess ? ncclRemoteError : st;
}

/* Runs the group queued (move); its failure is also its communicator's
 * async error, the first one kept. */
static int run_group(void)
{
    int n = n_queued;
    ncclComm_t c = n ? queued[0].comm : NULL;
    MPI_Request *rq = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *rq);
    if (!rq)
        return ncclInternalError;
    int st = move(n, rq, c), none = ncclSuccess;
    if (st != ncclSuccess && c)
        atomic_compare_exchange_strong(&c->async, &none, st);
    free(rq);
    if (!(c && atomic_load(&c->aborted))) /* (else MPI's pending requests may write into it) */
        free(queued); /* nothing kept between groups (LeakSanitizer sees none at exit) */
    queued = NULL;
    n_queued = cap_queued = 0;
    return st;
}

int ncclGroupEnd(void)
{
    if (depth == 0)
        return refuse(NULL, "ncclGroupEnd without ncclGroupStart");
    return --depth ? ncclSuccess : run_group();
}

int ncclSend(const void *send, size_t count, int type, int peer, ncclComm_t comm, void *stream)
{
    (void)stream;
    int st = queue_p2p(true, (void *)send, count, type, peer, comm);
    return st != ncclSuccess || depth ? st : run_group(); /* alone: a group of one */
}

int ncclRecv(void *recv, size_t count, int type, int peer, ncclComm_t comm, void *stream)
{
    (void)stream;
    int st = queue_p2p(false, recv, count, type, peer, comm);
    return st != ncclSuccess || depth ? st : run_group();
}
