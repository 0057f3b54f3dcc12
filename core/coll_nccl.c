/* core/coll_nccl.c: core/coll_nccl.h: NCCL through dlopen, its API
 * declared here from nccl.h (the ABI of NCCL 2: ncclUniqueId is 128 bytes,
 * ncclComm_t a pointer, the enums ints), so no NCCL or CUDA header is
 * needed to build it. Covered by tests/unit/test_coll_nccl.c. */
#include "core/coll_nccl.h"

#include "core/coll.h"
#include "core/status.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef struct { char internal[128]; } nccl_id; /* ncclUniqueId */
typedef void *nccl_comm;                          /* ncclComm_t */
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };          /* ncclFloat32, ncclSum */

struct ig_nccl {
    void *lib;
    nccl_comm comm;
    int version;
    int (*get_version)(int *);
    int (*get_unique_id)(nccl_id *);
    int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
    int (*comm_destroy)(nccl_comm);
    const char *(*error_string)(int);
};

int ig_nccl_open(struct ig_nccl **out)
{
    *out = NULL;
    const char *path = getenv("IGNITE_NCCL") ? getenv("IGNITE_NCCL") : "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return ig_error(IG_E_DEVICE, "NCCL not found (%s): install it with CUDA or pip's "
                        "nvidia-nccl-cu12, or name libnccl.so.2 in IGNITE_NCCL", dlerror());
    struct ig_nccl *nc = calloc(1, sizeof *nc);
    if (!nc) {
        dlclose(lib);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    nc->lib = lib;
    struct { void **fn; const char *name; } syms[] = {
        {(void **)&nc->get_version, "ncclGetVersion"},
        {(void **)&nc->get_unique_id, "ncclGetUniqueId"},
        {(void **)&nc->comm_init_rank, "ncclCommInitRank"},
        {(void **)&nc->all_reduce, "ncclAllReduce"},
        {(void **)&nc->comm_destroy, "ncclCommDestroy"},
        {(void **)&nc->error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(lib, syms[i].name))) {
            int st = ig_error(IG_E_DEVICE, "%s: no %s in it", path, syms[i].name);
            ig_nccl_close(nc);
            return st;
        }
    nc->get_version(&nc->version);
    *out = nc;
    return IG_OK;
}

int ig_nccl_version(const struct ig_nccl *nc)
{
    return nc->version;
}

int ig_nccl_comm_init(struct ig_nccl *nc)
{
    nccl_id id = {{0}};
    int r = ig_coll_rank() == 0 ? nc->get_unique_id(&id) : 0;
    /* every rank learns whether rank 0 has an id before waiting on it */
    int64_t bad = r != 0;
    ig_coll_allreduce_max(&bad);
    if (bad)
        return ig_error(IG_E_DEVICE, "ncclGetUniqueId failed on rank 0");
    ig_coll_bcast(&id, sizeof id, 0);
    r = nc->comm_init_rank(&nc->comm, ig_coll_size(), id, ig_coll_rank());
    if (r != 0)
        return ig_error(IG_E_DEVICE, "ncclCommInitRank (rank %d of %d): %s", ig_coll_rank(),
                        ig_coll_size(), nc->error_string(r));
    return IG_OK;
}

int ig_nccl_allreduce_sum(struct ig_nccl *nc, float *buf, int64_t n, void *stream)
{
    int r = nc->all_reduce(buf, buf, (size_t)n, NCCL_FLOAT32, NCCL_SUM, nc->comm, stream);
    if (r != 0)
        return ig_error(IG_E_DEVICE, "ncclAllReduce of %lld floats: %s", (long long)n,
                        nc->error_string(r));
    return IG_OK;
}

void ig_nccl_close(struct ig_nccl *nc)
{
    if (!nc)
        return;
    if (nc->comm)
        nc->comm_destroy(nc->comm);
    dlclose(nc->lib);
    free(nc);
}
