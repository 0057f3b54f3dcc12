/* core/coll_none.c: core/coll.h in a build without MPI: a job of one rank.
 * A process that a launcher started as one of several says that this
 * build cannot join them (ig_coll_start). Covered by tests/tp/. */
#include "core/coll.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ig_coll_available(void)
{
    return false;
}

int ig_coll_start(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (ig_coll_launched())
        return ig_error(IG_E_USAGE, "started by mpirun as one of several ranks, but this ignite "
                        "was built without MPI (install libopenmpi-dev and rebuild)");
    return IG_OK;
}

void ig_coll_finish(void)
{
}

int ig_coll_rank(void)
{
    return 0;
}

int ig_coll_size(void)
{
    return 1;
}

_Noreturn void ig_coll_abort(int status)
{
    fflush(stdout);
    exit(status);
}

void ig_coll_bcast(void *buf, size_t bytes, int root)
{
    (void)buf, (void)bytes, (void)root;
}

void ig_coll_allreduce_sum(float *buf, int64_t n)
{
    (void)buf, (void)n;
}

void ig_coll_allreduce_max(int64_t *v)
{
    (void)v;
}

void ig_coll_gatherv(const float *part, int64_t n_part, float *out, const int64_t *n,
                     const int64_t *at, int root)
{
    (void)n, (void)root;
    memcpy(out + at[0], part, (size_t)n_part * sizeof *part);
}

void ig_coll_send(const void *buf, size_t bytes, int to, int tag)
{
    (void)buf, (void)bytes, (void)to, (void)tag;
    IG_ASSERT(!"ig_coll_send in a job of one rank");
}

void ig_coll_recv(void *buf, size_t bytes, int from, int tag)
{
    (void)buf, (void)bytes, (void)from, (void)tag;
    IG_ASSERT(!"ig_coll_recv in a job of one rank");
}

bool ig_coll_poll(int *from, int *tag, size_t *bytes)
{
    (void)from, (void)tag, (void)bytes;
    return false; /* nobody else to hear from */
}

struct ig_coll_send_req *ig_coll_isend(const void *buf, size_t bytes, int to, int tag)
{
    (void)buf, (void)bytes, (void)to, (void)tag;
    IG_ASSERT(!"ig_coll_isend in a job of one rank");
    return NULL;
}

bool ig_coll_sent(struct ig_coll_send_req *req)
{
    (void)req;
    return true;
}

double ig_coll_seconds(void)
{
    return 0;
}
