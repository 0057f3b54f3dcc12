/* backend/gpu_reduce_nccl.c: the NCCL all-reduce of tensor-parallel GPU
 * ranks (backend/gpu_reduce.h). libnccl.so.2 is loaded with dlopen at run
 * time, so that a build needs neither NCCL's headers nor its library and a
 * machine without it says so in one line; the few declarations below are
 * NCCL's stable C ABI (nccl.h, 2.x). Host code only: the stream and the
 * buffers pass through as pointers. Covered by tests/tp/test_tp_gpu.py (a
 * missing library; the emulated ranks' sums through the tests' stand-in,
 * tests/emu/nccl_standin.c) and the GPU check's tp step. Also NCCL's sends
 * and receives (gpu_p2p.h: batch --pd's cache between CUDA ranks), covered
 * by tests/emu/pd_nccl_emu.c through the same stand-in, and their watchdog
 * (a peer stopped mid-transfer), by tests/tp/test_pd_cli.py's nccl case. */
#include "backend/gpu_reduce.h"

#include "backend/gpu_p2p.h"

#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* nccl.h's types, as its ABI has them. */
typedef struct {
    char internal[128];
} nccl_id;
typedef void *nccl_comm;
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7, NCCL_UINT8 = 1, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

struct nccl_lib {
    void *so;
    int (*get_unique_id)(nccl_id *id);
    int (*comm_init_rank)(nccl_comm *comm, int n_ranks, nccl_id id, int rank);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op,
                      nccl_comm comm, void *stream);
    int (*comm_destroy)(nccl_comm comm);
    const char *(*error_string)(int result);
    int (*get_version)(int *version); /* NULL where the library lacks it */
    /* point to point (gpu_p2p.h; NULL where the library lacks them) */
    int (*send)(const void *buf, size_t count, int dtype, int peer, nccl_comm comm,
                void *stream);
    int (*recv)(void *buf, size_t count, int dtype, int peer, nccl_comm comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*comm_abort)(nccl_comm comm);
    int (*get_async_error)(nccl_comm comm, int *async_error);
};

struct nccl_reduce {
    struct gpu_reduce base;
    struct nccl_lib lib;
    nccl_comm comm;
};

/* The library's file: IGNITE_NCCL_LIB, else the soname (the loader's path:
 * the CUDA installation, or LD_LIBRARY_PATH naming the nvidia-nccl-cu12
 * package's lib/). */
static const char *lib_name(void)
{
    const char *e = getenv("IGNITE_NCCL_LIB");
    return e && *e ? e : "libnccl.so.2";
}

/* Loads the library and its entry points into L. host_memory (the
 * emulated backend, whose device pointers are host memory): only a library
 * that says it reads host memory, the tests' stand-in
 * (tests/emu/nccl_standin.c, its symbol ignite_nccl_stand_in). false with
 * why filled where it cannot. */
static bool load(struct nccl_lib *L, bool host_memory, char *why, size_t cap)
{
    memset(L, 0, sizeof *L);
    const char *name = lib_name();
    if (!(L->so = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        snprintf(why, cap, "cannot load NCCL (%s): %s", name, e ? e : "not found");
        return false;
    }
    *(void **)&L->get_unique_id = dlsym(L->so, "ncclGetUniqueId");
    *(void **)&L->comm_init_rank = dlsym(L->so, "ncclCommInitRank");
    *(void **)&L->all_reduce = dlsym(L->so, "ncclAllReduce");
    *(void **)&L->comm_destroy = dlsym(L->so, "ncclCommDestroy");
    *(void **)&L->error_string = dlsym(L->so, "ncclGetErrorString");
    *(void **)&L->get_version = dlsym(L->so, "ncclGetVersion");
    *(void **)&L->send = dlsym(L->so, "ncclSend");
    *(void **)&L->recv = dlsym(L->so, "ncclRecv");
    *(void **)&L->group_start = dlsym(L->so, "ncclGroupStart");
    *(void **)&L->group_end = dlsym(L->so, "ncclGroupEnd");
    *(void **)&L->comm_abort = dlsym(L->so, "ncclCommAbort");
    *(void **)&L->get_async_error = dlsym(L->so, "ncclCommGetAsyncError");
    if (!(L->get_unique_id && L->comm_init_rank && L->all_reduce && L->comm_destroy &&
          L->error_string))
        snprintf(why, cap, "%s is not NCCL 2 (ncclCommInitRank, ncclAllReduce missing)", name);
    else if (host_memory && !dlsym(L->so, "ignite_nccl_stand_in"))
        snprintf(why, cap, "%s is NCCL, which reads device memory, and the emulated backend's "
                 "is the host's (IGNITE_NCCL_LIB=the tests' stand-in, or IGNITE_TP_REDUCE=mpi)",
                 name);
    else
        return true;
    dlclose(L->so);
    L->so = NULL;
    return false;
}

bool gpu_reduce_nccl_loads(char *why, size_t cap)
{
    struct nccl_lib L;
    if (!load(&L, false, why, cap))
        return false;
    dlclose(L.so);
    return true;
}

static int nccl_sum(struct gpu_reduce *base, float *buf, int64_t n, void *stream)
{
    struct nccl_reduce *r = (struct nccl_reduce *)base;
    int rc = r->lib.all_reduce(buf, buf, (size_t)n, NCCL_FLOAT32, NCCL_SUM, r->comm, stream);
    if (rc != NCCL_SUCCESS)
        return ig_error(IG_E_DEVICE, "rank %d: ncclAllReduce of %lld floats: %s",
                        ig_coll_rank(), (long long)n, r->lib.error_string(rc));
    return IG_OK;
}

static void nccl_free(struct gpu_reduce *base)
{
    struct nccl_reduce *r = (struct nccl_reduce *)base;
    if (!r)
        return;
    if (r->comm)
        r->lib.comm_destroy(r->comm);
    if (r->lib.so)
        dlclose(r->lib.so);
    free(r);
}

/* Every rank's ok, agreed: IG_OK, or on every rank IG_E_DEVICE, rank 0
 * printing the failing rank's line (the last such rank's). */
static int agreed(bool ok, const char *why)
{
    int64_t bad = ok ? -1 : ig_coll_rank();
    ig_coll_allreduce_max(&bad);
    if (bad < 0)
        return IG_OK;
    char line[512];
    snprintf(line, sizeof line, "%s", why);
    ig_coll_bcast(line, sizeof line, (int)bad);
    if (ig_coll_rank() != 0)
        return IG_E_DEVICE;
    return ig_error(IG_E_DEVICE, "rank %d of %d: %s", (int)bad, ig_coll_size(), line);
}

/* The library into *L and the job's communicator into *comm (collective);
 * p2p: the library must have ncclSend/Recv and the groups. */
static int nccl_connect(bool host_memory, bool p2p, struct nccl_lib *L, nccl_comm *comm)
{
    char why[400] = "";
    bool ok = load(L, host_memory, why, sizeof why);
    if (ok && p2p && !(L->send && L->recv && L->group_start && L->group_end && L->comm_abort &&
                       L->get_async_error)) {
        snprintf(why, sizeof why, "%s has no ncclSend/ncclRecv/ncclCommAbort (NCCL 2.7 or later)",
                 lib_name());
        dlclose(L->so);
        L->so = NULL;
        ok = false;
    }
    int st = agreed(ok, why);
    nccl_id id = {{0}};
    int rc = NCCL_SUCCESS;
    if (st == IG_OK && ig_coll_rank() == 0)
        rc = L->get_unique_id(&id);
    if (st == IG_OK) { /* rank 0's id: the others wait for it */
        if (rc != NCCL_SUCCESS)
            snprintf(why, sizeof why, "ncclGetUniqueId: %s", L->error_string(rc));
        st = agreed(rc == NCCL_SUCCESS, why);
    }
    if (st == IG_OK) {
        ig_coll_bcast(&id, sizeof id, 0);
        rc = L->comm_init_rank(comm, ig_coll_size(), id, ig_coll_rank());
        if (rc != NCCL_SUCCESS) {
            *comm = NULL;
            snprintf(why, sizeof why, "ncclCommInitRank: %s (two ranks on one GPU need "
                     "NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL 2.30, or IGNITE_TP_REDUCE=mpi)",
                     L->error_string(rc));
        }
        st = agreed(rc == NCCL_SUCCESS, why);
    }
    return st;
}

int gpu_reduce_nccl_open(bool host_memory, struct gpu_reduce **out)
{
    *out = NULL;
    struct nccl_reduce *r = calloc(1, sizeof *r);
    if (!r) { /* (as a failed rank: the others wait for its word) */
        (void)agreed(false, "out of memory");
        return IG_E_DEVICE;
    }
    int st = nccl_connect(host_memory, false, &r->lib, &r->comm);
    if (st != IG_OK) {
        nccl_free(&r->base);
        return st;
    }
    /* Captured by CUDA graphs from NCCL 2.9 ("Using NCCL with CUDA Graphs"); before
     * 2.9.6 captures were seen to hang at replay (pytorch/pytorch#64440): older
     * ones sum outside graphs. Uniform over the ranks: one library, agreed. */
    int version = 0;
    int64_t old_nccl = r->lib.get_version &&
                       (r->lib.get_version(&version) != NCCL_SUCCESS || version < 20906);
    ig_coll_allreduce_max(&old_nccl);
    r->base = (struct gpu_reduce){.name = "nccl", .capturable = !old_nccl, .sum = nccl_sum,
                                  .free = nccl_free};
    *out = &r->base;
    return IG_OK;
}

/* ---- point to point (gpu_p2p.h) ------------------------------------------------- */

/* A group's transfers: what the watchdog names. */
struct p2p_what {
    bool send;
    int peer;
    int64_t ops;
    size_t bytes;
};

struct gpu_p2p {
    struct nccl_lib lib;
    nccl_comm comm;
    int rank;
    /* The watchdog (gpu_p2p_wait_begin): limit_s, 0 off; waiting_ns, when
     * the host's watched wait began (0: none); where, that wait's name;
     * building, the group being queued; last (under mu), the last queued. */
    double limit_s;
    pthread_t thread;
    bool watching;
    _Atomic bool quit, gave_up, aborted;
    _Atomic long long waiting_ns;
    const char *_Atomic where;
    struct p2p_what building;
    pthread_mutex_t mu;
    struct p2p_what last;
};

static void *abort_comm(void *arg)
{
    struct gpu_p2p *p = arg;
    (void)p->lib.comm_abort(p->comm);
    atomic_store(&p->aborted, true);
    return NULL;
}

/* One line naming the peer and what was outstanding, the communicator
 * aborted (ncclCommAbort: the NCCL user guide's "Fault tolerance" and
 * api/comms.html: it frees the communicator and ends its uncompleted
 * operations, so NCCL's kernels spinning on a gone peer stop), the job
 * ended, exit 7 (as core/coll_mpi.c's watchdog). The line first, and the
 * abort given 10 s on a thread of its own: ncclCommAbort has been seen to
 * hang, joining a proxy thread stuck on the dead connection
 * (NVIDIA/nccl#863, #992, #1777; PyTorch's abort waits with a timeout too);
 * the job ends either way, and the process's end frees the GPU's work.
 * nccl_rc: the async error, or NCCL_SUCCESS for a wait past the limit. */
_Noreturn static void give_up(struct gpu_p2p *p, int nccl_rc, double waited_s)
{
    atomic_store(&p->gave_up, true); /* (before the abort ends the host's wait) */
    pthread_mutex_lock(&p->mu);
    struct p2p_what w = p->last;
    pthread_mutex_unlock(&p->mu);
    char why[200];
    if (nccl_rc != NCCL_SUCCESS)
        snprintf(why, sizeof why, "NCCL reports an error: %s", p->lib.error_string(nccl_rc));
    else
        snprintf(why, sizeof why, "not done in %.0f s (rank %d stopped or stuck; "
                 "IGNITE_TP_WATCHDOG sets the limit)", waited_s, w.peer);
    fprintf(stderr, "ignite: rank %d: NCCL %s rank %d (%lld transfers, %zu bytes; the host in "
            "%s) %s: aborting the communicator, ending the job\n", p->rank,
            w.send ? "sends to" : "receives from", w.peer, (long long)w.ops, w.bytes,
            atomic_load(&p->where), why);
    fflush(stderr);
    pthread_t t;
    if (pthread_create(&t, NULL, abort_comm, p) == 0) {
        pthread_detach(t);
        for (int i = 0; i < 100 && !atomic_load(&p->aborted); i++)
            nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    ig_coll_abort(IG_E_DEVICE);
}

/* The host's thread, back from a wait the watchdog ended: it waits for the
 * watchdog to end the job, reporting nothing more (a second line) and
 * calling nothing of the communicator the abort freed. */
static void park_if_given_up(const struct gpu_p2p *p)
{
    while (atomic_load(&p->gave_up))
        pause();
}

/* A thread, not a poll in each wait: the host blocks where it cannot poll
 * (inside ncclGroupEnd, which the stand-in runs there and real NCCL may
 * block in while it connects to the peer; in a CUDA sync or a synchronous
 * copy behind the main stream's wait for the transfer stream), and only
 * another thread can end such a wait (ncclCommAbort from another thread:
 * what PyTorch's NCCL watchdog does). Every 0.1 s while the host waits:
 * ncclCommGetAsyncError (an error NCCL hit on its own, a peer's connection
 * lost) and the limit. */
static void *watch(void *arg)
{
    struct gpu_p2p *p = arg;
    while (!atomic_load(&p->quit)) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        long long at = atomic_load(&p->waiting_ns);
        if (!at)
            continue;
        int async = NCCL_SUCCESS, rc = p->lib.get_async_error(p->comm, &async);
        int bad = rc != NCCL_SUCCESS ? rc : async == NCCL_IN_PROGRESS ? NCCL_SUCCESS : async;
        double waited = (double)(ig_now_ns() - at) * 1e-9;
        if (bad != NCCL_SUCCESS || waited > p->limit_s)
            give_up(p, bad, waited);
    }
    return NULL;
}

bool gpu_p2p_wait_begin(struct gpu_p2p *p, const char *where)
{
    long long none = 0;
    if (!p || !p->watching)
        return false;
    if (!atomic_compare_exchange_strong(&p->waiting_ns, &none, ig_now_ns()))
        return false; /* inside a wait already watched: its start counts */
    atomic_store(&p->where, where);
    return true;
}

void gpu_p2p_wait_end(struct gpu_p2p *p, bool began)
{
    if (!began)
        return; /* (p not read: a step's may be gone, its communicator freed) */
    atomic_store(&p->waiting_ns, 0);
    park_if_given_up(p);
}

int gpu_p2p_nccl_open(bool host_memory, struct gpu_p2p **out)
{
    *out = NULL;
    struct gpu_p2p *p = calloc(1, sizeof *p);
    if (!p) {
        (void)agreed(false, "out of memory");
        return IG_E_DEVICE;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->rank = ig_coll_rank();
    atomic_store(&p->where, "a wait");
    int st = nccl_connect(host_memory, true, &p->lib, &p->comm);
    if (st != IG_OK) {
        gpu_p2p_free(p);
        return st;
    }
    const char *w = getenv("IGNITE_TP_WATCHDOG"); /* (the MPI path's limit and default) */
    p->limit_s = w ? atof(w) : 600;
    p->watching = p->limit_s > 0 && pthread_create(&p->thread, NULL, watch, p) == 0;
    *out = p;
    return IG_OK;
}

void gpu_p2p_free(struct gpu_p2p *p)
{
    if (!p)
        return;
    if (p->watching) {
        atomic_store(&p->quit, true);
        pthread_join(p->thread, NULL);
    }
    if (p->comm)
        p->lib.comm_destroy(p->comm);
    if (p->lib.so)
        dlclose(p->lib.so);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static int p2p_status(const struct gpu_p2p *p, int rc, const char *what, size_t bytes, int peer)
{
    if (rc == NCCL_SUCCESS)
        return IG_OK;
    if (peer < 0) /* a group's start or end */
        return ig_error(IG_E_DEVICE, "rank %d: %s: %s", ig_coll_rank(), what,
                        p->lib.error_string(rc));
    return ig_error(IG_E_DEVICE, "rank %d: %s of %zu bytes (rank %d): %s", ig_coll_rank(), what,
                    bytes, peer, p->lib.error_string(rc));
}

int gpu_p2p_group_start(struct gpu_p2p *p)
{
    park_if_given_up(p);
    p->building = (struct p2p_what){0};
    return p2p_status(p, p->lib.group_start(), "ncclGroupStart", 0, -1);
}

int gpu_p2p_group_end(struct gpu_p2p *p)
{
    pthread_mutex_lock(&p->mu);
    p->last = p->building;
    pthread_mutex_unlock(&p->mu);
    bool began = gpu_p2p_wait_begin(p, "ncclGroupEnd");
    int rc = p->lib.group_end();
    park_if_given_up(p); /* (inside a step's watched wait too: no line of its own) */
    gpu_p2p_wait_end(p, began);
    return p2p_status(p, rc, "ncclGroupEnd", 0, -1);
}

static void count_op(struct gpu_p2p *p, bool send, int peer, size_t bytes)
{
    p->building.send = send;
    p->building.peer = peer;
    p->building.ops++;
    p->building.bytes += bytes;
}

int gpu_p2p_send(struct gpu_p2p *p, const void *buf, size_t bytes, int peer, void *stream)
{
    count_op(p, true, peer, bytes);
    return p2p_status(p, p->lib.send(buf, bytes, NCCL_UINT8, peer, p->comm, stream), "ncclSend",
                      bytes, peer);
}

int gpu_p2p_recv(struct gpu_p2p *p, void *buf, size_t bytes, int peer, void *stream)
{
    count_op(p, false, peer, bytes);
    return p2p_status(p, p->lib.recv(buf, bytes, NCCL_UINT8, peer, p->comm, stream), "ncclRecv",
                      bytes, peer);
}
