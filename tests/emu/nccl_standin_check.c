/* tests/emu/nccl_standin_check.c: the stand-in for libnccl.so.2
 * (nccl_standin.c) against NCCL's documented point-to-point contract, at 2
 * ranks (mpirun, from tests/tp/test_tp_gpu.py):
 *
 *   nccl_standin_check STANDIN.so
 *
 * Loaded with dlopen as ignite loads NCCL. Checked: a group of two sends and
 * two receives each way (two layers' K and V, each rank both sides) moves
 * every byte; a lone send and its receive (a group of one); a receive of
 * another count than its send refused on both ranks, with no data moved and
 * no hang; an all-reduce of different counts refused on both; ncclGroupEnd
 * without its start refused; ncclCommDestroy inside a group refused; and
 * fault tolerance (api/comms.html): a second communicator's receive that no
 * send meets, ended by ncclCommAbort from another thread (ncclRemoteError,
 * not a hang); ncclCommGetAsyncError: none on a new communicator, the first
 * failed group's (the refused receive's) on the first. Prints
 * "ok N checks" on each rank, or the failed checks; exit 1 on a failure. */
#include <mpi.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char internal[128];
} nccl_id;
typedef void *nccl_comm;
enum { UINT8 = 1, FLOAT32 = 7, SUM = 0, INVALID_USAGE = 5, REMOTE_ERROR = 6 };

static int (*get_unique_id)(nccl_id *);
static int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
static int (*comm_destroy)(nccl_comm);
static int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
static int (*nsend)(const void *, size_t, int, int, nccl_comm, void *);
static int (*nrecv)(void *, size_t, int, int, nccl_comm, void *);
static int (*group_start)(void);
static int (*group_end)(void);
static int (*comm_abort)(nccl_comm);
static int (*get_async_error)(nccl_comm, int *);

static int rank, checks, failed;

static void check(int ok, const char *what)
{
    checks++;
    if (!ok) {
        failed++;
        fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
    }
}

/* ncclCommAbort of *arg a fifth of a second from now, from this thread */
static void *abort_later(void *arg)
{
    nanosleep(&(struct timespec){0, 200000000}, NULL);
    comm_abort(*(nccl_comm *)arg);
    return NULL;
}

static unsigned char pattern(int from, int buf, size_t i)
{
    return (unsigned char)(from * 101 + buf * 37 + i * 7);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    void *so = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!so) {
        fprintf(stderr, "usage: nccl_standin_check STANDIN.so (%s)\n", dlerror());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    *(void **)&get_unique_id = dlsym(so, "ncclGetUniqueId");
    *(void **)&comm_init_rank = dlsym(so, "ncclCommInitRank");
    *(void **)&comm_destroy = dlsym(so, "ncclCommDestroy");
    *(void **)&all_reduce = dlsym(so, "ncclAllReduce");
    *(void **)&nsend = dlsym(so, "ncclSend");
    *(void **)&nrecv = dlsym(so, "ncclRecv");
    *(void **)&group_start = dlsym(so, "ncclGroupStart");
    *(void **)&group_end = dlsym(so, "ncclGroupEnd");
    *(void **)&comm_abort = dlsym(so, "ncclCommAbort");
    *(void **)&get_async_error = dlsym(so, "ncclCommGetAsyncError");
    check(get_unique_id && comm_init_rank && comm_destroy && all_reduce && nsend && nrecv &&
          group_start && group_end && comm_abort && get_async_error &&
          dlsym(so, "ignite_nccl_stand_in"), "the exports");
    if (failed)
        MPI_Abort(MPI_COMM_WORLD, 1);
    nccl_id id;
    if (rank == 0)
        check(get_unique_id(&id) == 0, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_comm c = NULL;
    check(comm_init_rank(&c, 2, id, rank) == 0 && c, "ncclCommInitRank");
    int peer = 1 - rank;

    /* a group: two buffers each way, of odd sizes, each rank sending and receiving */
    enum { NB = 2 };
    size_t bytes[NB] = {4096 + 3, 65536 + 17};
    unsigned char *out[NB], *in[NB];
    for (int b = 0; b < NB; b++) {
        out[b] = malloc(bytes[b]);
        in[b] = calloc(1, bytes[b]);
        for (size_t i = 0; i < bytes[b]; i++)
            out[b][i] = pattern(rank, b, i);
    }
    group_start();
    int rc = 0;
    for (int b = 0; b < NB; b++) {
        rc |= nsend(out[b], bytes[b], UINT8, peer, c, NULL);
        rc |= nrecv(in[b], bytes[b], UINT8, peer, c, NULL);
    }
    rc |= group_end();
    check(rc == 0, "a group of sends and receives");
    size_t bad = 0;
    for (int b = 0; b < NB; b++)
        for (size_t i = 0; i < bytes[b]; i++)
            bad += in[b][i] != pattern(peer, b, i);
    check(bad == 0, "a group's bytes are the peer's");

    /* a lone send and its receive: a group of one */
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    rc = rank == 0 ? nsend(x, 5, FLOAT32, 1, c, NULL) : nrecv(y, 5, FLOAT32, 0, c, NULL);
    check(rc == 0 && (rank == 0 || (y[0] == 1 && y[4] == 5)), "a lone send and receive");

    /* a receive of another count: refused on both ranks, nothing moved */
    memset(y, 0, sizeof y);
    rc = rank == 0 ? nsend(x, 5, FLOAT32, 1, c, NULL) : nrecv(y, 4, FLOAT32, 0, c, NULL);
    check(rc == INVALID_USAGE && y[0] == 0, "a receive of another count is refused");
    rc = rank == 0 ? nsend(x, 5, FLOAT32, 1, c, NULL) : nrecv(y, 5, UINT8, 0, c, NULL);
    check(rc == INVALID_USAGE, "a receive of another type is refused");
    int async = -1;
    check(get_async_error(c, &async) == 0 && async == INVALID_USAGE,
          "ncclCommGetAsyncError: the first failed group's");

    /* an all-reduce of different counts: refused on both; then one that agrees */
    float s[4] = {1, 2, 3, (float)rank};
    check(all_reduce(s, s, 4 - (size_t)rank, FLOAT32, SUM, c, NULL) == INVALID_USAGE,
          "an all-reduce of different counts is refused");
    check(all_reduce(s, s, 4, FLOAT32, SUM, c, NULL) == 0 && s[0] == 2 && s[3] == 1,
          "an in-place all-reduce sums");

    check(group_end() == INVALID_USAGE, "ncclGroupEnd without its start is refused");
    group_start();
    check(comm_destroy(c) == INVALID_USAGE, "ncclCommDestroy inside a group is refused");
    group_end();
    check(comm_destroy(c) == 0, "ncclCommDestroy");

    /* a receive no send meets (each rank's from the other), aborted from another thread */
    if (rank == 0)
        check(get_unique_id(&id) == 0, "ncclGetUniqueId again");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    check(comm_init_rank(&c, 2, id, rank) == 0 && c, "a second communicator");
    check(get_async_error(c, &async) == 0 && async == 0, "no async error at first");
    pthread_t t;
    check(pthread_create(&t, NULL, abort_later, &c) == 0, "a thread to abort");
    check(nrecv(y, 5, FLOAT32, peer, c, NULL) == REMOTE_ERROR,
          "ncclCommAbort from another thread ends a receive's wait");
    pthread_join(t, NULL); /* (c is gone: NCCL frees an aborted communicator) */
    for (int b = 0; b < NB; b++) {
        free(out[b]);
        free(in[b]);
    }
    printf("rank %d: %s %d checks\n", rank, failed ? "FAILED" : "ok", checks);
    dlclose(so);
    MPI_Finalize();
    return failed != 0;
}
