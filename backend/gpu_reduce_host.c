/* backend/gpu_reduce_host.c: the host path of a tensor-parallel GPU rank's
 * all-reduce (backend/gpu_reduce.h): the partial sums device -> host,
 * MPI_Allreduce (core/coll.h), host -> device. Synchronous, so it cannot be
 * captured in a graph (the backend's decode steps then run without). What
 * the emulated backend runs in CI; on GPUs, the fallback where NCCL is
 * absent or asked for. Compiled twice like gpu.c (backend/gpu.h). Covered
 * by tests/tp/test_tp_gpu.py. */
#include "backend/gpu_impl.h"
#include "backend/gpu_reduce.h"

#include "core/coll.h"
#include "core/status.h"

#include <stdlib.h>

struct host_reduce {
    struct gpu_reduce base;
    struct dev *dev;
    float *host; /* [cap] the partial sums on their way */
    int64_t cap;
};

static int host_sum(struct gpu_reduce *base, float *buf, int64_t n, void *stream)
{
    struct host_reduce *r = (struct host_reduce *)base;
    (void)stream; /* the device layer's copies run on its one stream */
    if (n > r->cap) {
        float *p = realloc(r->host, (size_t)n * sizeof *p);
        if (!p)
            return ig_error(IG_E_NOMEM, "out of memory for the all-reduce's %lld floats",
                            (long long)n);
        r->host = p;
        r->cap = n;
    }
    int st = IG_DEV(dev_download)(r->dev, r->host, buf, (size_t)n * sizeof *buf);
    if (st != IG_OK)
        return st;
    ig_coll_allreduce_sum(r->host, n);
    return IG_DEV(dev_upload)(r->dev, buf, r->host, (size_t)n * sizeof *buf);
}

static void host_free(struct gpu_reduce *base)
{
    struct host_reduce *r = (struct host_reduce *)base;
    if (r)
        free(r->host);
    free(r);
}

int IG_DEV(gpu_reduce_host_open)(struct dev *dev, struct gpu_reduce **out)
{
    struct host_reduce *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return ig_error(IG_E_NOMEM, "out of memory");
    r->base = (struct gpu_reduce){.name = "mpi", .capturable = false, .sum = host_sum,
                                  .free = host_free};
    r->dev = dev;
    *out = &r->base;
    return IG_OK;
}
