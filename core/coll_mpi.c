/* core/coll_mpi.c: core/coll.h over MPI (Open MPI from Debian's
 * libopenmpi-dev; any MPI 3 will do). MPI counts are ints: buffers go in
 * pieces of at most 1 GiB. The error handler stays MPI's default
 * (MPI_ERRORS_ARE_FATAL): a transport error ends the job, never hangs it.
 * Covered by tests/tp/. */
#include "core/coll.h"

#include "core/status.h"
#include "core/timer.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PIECE ((size_t)1 << 30)

static bool started; /* MPI_Init done by ig_coll_start */
static double spent;  /* seconds in collectives */

/* The watchdog (IGNITE_TP_WATCHDOG seconds, default 600; 0 off): a rank
 * that stops answering without dying (stopped, stuck) leaves the others
 * waiting inside a collective, where MPI cannot tell; a thread ends the job
 * when one call has waited that long (a step's all-reduce or gather, the
 * set-up's agreement, point to point). Waiting for rank 0's next command
 * (ig_coll_bcast: a chat waits for its user) is not watched. */
static _Atomic long long armed_ns; /* when the watched call began; 0: none */
static double watch_limit;

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        sleep(1);
        long long at = atomic_load(&armed_ns);
        if (at && (double)(ig_now_ns() - at) * 1e-9 > watch_limit) {
            int r;
            MPI_Comm_rank(MPI_COMM_WORLD, &r);
            fprintf(stderr, "ignite: rank %d: no answer from the other ranks in %.0f s (a rank "
                    "stopped or stuck; IGNITE_TP_WATCHDOG sets the limit): ending the job\n", r,
                    watch_limit);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, IG_E_DEVICE);
        }
    }
    return NULL;
}

static void arm(void)
{
    if (watch_limit > 0)
        atomic_store(&armed_ns, ig_now_ns());
}

static void disarm(void)
{
    atomic_store(&armed_ns, 0);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

bool ig_coll_available(void)
{
    return true;
}

int ig_coll_start(int *argc, char ***argv)
{
    if (!ig_coll_launched())
        return IG_OK; /* a job of one: no MPI started */
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return ig_error(IG_E_DEVICE, "MPI_Init failed");
    started = true;
    const char *w = getenv("IGNITE_TP_WATCHDOG");
    watch_limit = w ? atof(w) : 600;
    pthread_t t;
    if (watch_limit > 0 && pthread_create(&t, NULL, watchdog, NULL) == 0)
        pthread_detach(t);
    return IG_OK;
}

void ig_coll_finish(void)
{
    if (started)
        MPI_Finalize();
    started = false;
}

int ig_coll_rank(void)
{
    int r = 0;
    if (started)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int ig_coll_size(void)
{
    int n = 1;
    if (started)
        MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

_Noreturn void ig_coll_abort(int status)
{
    fflush(stdout);
    fflush(stderr);
    if (started)
        MPI_Abort(MPI_COMM_WORLD, status);
    exit(status);
}

void ig_coll_bcast(void *buf, size_t bytes, int root)
{
    double t = now();
    for (size_t at = 0; started && at < bytes; at += PIECE) {
        size_t k = bytes - at < PIECE ? bytes - at : PIECE;
        MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
    }
    spent += now() - t;
}

void ig_coll_allreduce_sum(float *buf, int64_t n)
{
    double t = now();
    arm();
    int64_t piece = (int64_t)(PIECE / sizeof *buf);
    for (int64_t at = 0; started && at < n; at += piece) {
        int64_t k = n - at < piece ? n - at : piece;
        MPI_Allreduce(MPI_IN_PLACE, buf + at, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    disarm();
    spent += now() - t;
}

void ig_coll_allreduce_max(int64_t *v)
{
    arm(); /* (the set-up's agreement: a rank stopped while loading) */
    if (started)
        MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    disarm();
}

void ig_coll_gatherv(const float *part, int64_t n_part, float *out, const int64_t *n,
                     const int64_t *at, int root)
{
    double t = now();
    int size = ig_coll_size(), rank = ig_coll_rank();
    if (!started) {
        for (int64_t i = 0; i < n_part; i++)
            out[at[0] + i] = part[i];
        return;
    }
    /* Point to point from each rank, so that no count is bounded by an int
     * offset into out. */
    arm();
    if (rank != root) {
        ig_coll_send(part, (size_t)n_part * sizeof *part, root, 1);
    } else {
        for (int r = 0; r < size; r++)
            if (r == root)
                for (int64_t i = 0; i < n_part; i++)
                    out[at[r] + i] = part[i];
            else
                ig_coll_recv(out + at[r], (size_t)n[r] * sizeof *out, r, 1);
    }
    disarm();
    spent += now() - t;
}

void ig_coll_send(const void *buf, size_t bytes, int to, int tag)
{
    arm();
    for (size_t at = 0; at < bytes; at += PIECE) {
        size_t k = bytes - at < PIECE ? bytes - at : PIECE;
        MPI_Send((const char *)buf + at, (int)k, MPI_BYTE, to, tag, MPI_COMM_WORLD);
    }
    disarm();
}

void ig_coll_recv(void *buf, size_t bytes, int from, int tag)
{
    arm();
    for (size_t at = 0; at < bytes; at += PIECE) {
        size_t k = bytes - at < PIECE ? bytes - at : PIECE;
        MPI_Recv((char *)buf + at, (int)k, MPI_BYTE, from, tag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    }
    disarm();
}

bool ig_coll_poll(int *from, int *tag, size_t *bytes)
{
    int flag = 0, count = 0;
    MPI_Status s;
    if (!started)
        return false;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &s);
    if (!flag)
        return false;
    MPI_Get_count(&s, MPI_BYTE, &count);
    *from = s.MPI_SOURCE;
    *tag = s.MPI_TAG;
    *bytes = (size_t)count;
    return true;
}

struct ig_coll_send_req {
    MPI_Request req;
};

struct ig_coll_send_req *ig_coll_isend(const void *buf, size_t bytes, int to, int tag)
{
    IG_ASSERT(bytes <= IG_COLL_MESSAGE_MAX);
    struct ig_coll_send_req *r = malloc(sizeof *r);
    if (!r) {
        fprintf(stderr, "ignite: out of memory for a send\n");
        ig_coll_abort(IG_E_NOMEM);
    }
    MPI_Isend(buf, (int)bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD, &r->req);
    return r;
}

bool ig_coll_sent(struct ig_coll_send_req *r)
{
    int flag = 0;
    MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (flag)
        free(r);
    return flag;
}

double ig_coll_seconds(void)
{
    return spent;
}
