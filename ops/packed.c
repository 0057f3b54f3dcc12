/* ops/packed.c: the packed weights (ops/packed.h): a table of decode-layout
 * copies sorted by the stored weight's data pointer, each made once by
 * ops_qmm_repack over the pool, laid one after the other in arenas of
 * transparent huge pages (see struct packed_arena). The int8 kernels read a
 * packed weight's copy only, so the stored rows' pages of a mapped file are
 * given back once copied (ig_mapped_release): the process holds each weight
 * once, not twice.
 * Covered by tests/cpu/test_qmatmul.c and tests/models/tensor_table_check.c. */
#include "ops/packed.h"

#include "core/mapped_file.h"
#include "core/status.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A weight's copy in the decode layout of ops/qmatmul.h. */
struct packed_weight {
    const void *src; /* the stored weight's data: the key */
    enum quant_type type;
    int64_t rows, cols; /* (a lookup checks them too) */
    uint8_t *data;   /* ops_qmm_packed_bytes, 64-byte aligned */
};

/* The copies live in arenas of 2 MiB pages, asked of the kernel with
 * madvise(MADV_HUGEPAGE) (transparent huge pages are "madvise" on common
 * hosts: without the request every copy is 4 KiB pages). A decode token
 * streams every used matrix once: a qwen3moe token reads 1.1 GB of copies,
 * its experts 0.9 MB each, and in 4 KiB pages that is a TLB miss and a
 * page walk every 4 KiB, and the L2 streamer stops at each page's end
 * (docs/benchmarks.md, "qwen3moe decode, the packed copies in huge
 * pages"). Copies are placed one after the other, 64-byte aligned; a
 * copy larger than an arena gets one of its own size. Where the kernel
 * gives no huge pages the arena is ordinary memory. */
#define PACKED_ARENA_BYTES ((size_t)64 << 20)
#define PACKED_HUGE_PAGE ((size_t)2 << 20)

struct packed_arena {
    uint8_t *base;
    size_t size, used;
};

struct ops_packed {
    struct packed_weight *w; /* [n] sorted by src */
    int64_t n, cap;
    struct packed_arena *arena; /* [n_arena]; the last one is filled */
    int64_t n_arena, cap_arena;
};

int ops_packed_create(const struct model *m, struct ops_pool *pool, struct ops_packed **out)
{
    *out = NULL;
    struct ops_packed *p = calloc(1, sizeof *p);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory for the packed weight table");
    int st = IG_OK;
    struct model_tensor_it it;
    if (m)
        for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_TIED);
             st == IG_OK && model_tensors_next(&it);)
            if (it.t->kind == TENSOR_MATRIX && !it.t->gathered)
                /* each expert its own copy: the MoE FFN multiplies by one
                 * expert's matrix at a time (ops_weight_expert) */
                for (int64_t e = 0; st == IG_OK && e < it.w->n_expert; e++) {
                    struct model_weight one = ops_weight_expert(it.w, e);
                    st = ops_packed_add(p, &one, pool);
                }
    if (st != IG_OK) {
        ops_packed_free(p);
        return st;
    }
    *out = p;
    return IG_OK;
}

void ops_packed_free(struct ops_packed *p)
{
    if (!p)
        return;
    for (int64_t i = 0; i < p->n_arena; i++)
        munmap(p->arena[i].base, p->arena[i].size);
    free(p->arena);
    free(p->w);
    free(p);
}

/* bytes (a multiple of 64) from the last arena, or from a new one where
 * they do not fit: NULL when out of memory. */
static uint8_t *arena_take(struct ops_packed *p, size_t bytes)
{
    struct packed_arena *a = p->n_arena ? &p->arena[p->n_arena - 1] : NULL;
    if (!a || a->size - a->used < bytes) {
        if (p->n_arena == p->cap_arena) {
            int64_t cap = p->cap_arena ? 2 * p->cap_arena : 16;
            struct packed_arena *na = realloc(p->arena, (size_t)cap * sizeof *na);
            if (!na)
                return NULL;
            p->arena = na;
            p->cap_arena = cap;
        }
        size_t size = bytes > PACKED_ARENA_BYTES ? bytes : PACKED_ARENA_BYTES;
        size = (size + PACKED_HUGE_PAGE - 1) / PACKED_HUGE_PAGE * PACKED_HUGE_PAGE;
        /* 2 MiB more, to start on a huge page's boundary */
        uint8_t *map = mmap(NULL, size + PACKED_HUGE_PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return NULL;
        uintptr_t at = ((uintptr_t)map + PACKED_HUGE_PAGE - 1) & ~(uintptr_t)(PACKED_HUGE_PAGE - 1);
        uint8_t *base = (uint8_t *)at;
        if (base > map)
            munmap(map, (size_t)(base - map));
        if (base + size < map + size + PACKED_HUGE_PAGE)
            munmap(base + size, (size_t)(map + size + PACKED_HUGE_PAGE - (base + size)));
#ifdef MADV_HUGEPAGE
        madvise(base, size, MADV_HUGEPAGE); /* a request: refused, 4 KiB pages */
#endif
        a = &p->arena[p->n_arena++];
        *a = (struct packed_arena){base, size, 0};
    }
    uint8_t *data = a->base + a->used;
    a->used += bytes;
    return data;
}

struct repack_job {
    const struct model_weight *w;
    uint8_t *dst;
};

static void repack_task(void *arg, int64_t g0, int64_t g1, int thread)
{
    const struct repack_job *job = arg;
    (void)thread;
    ops_qmm_repack(job->w, g0, g1, job->dst);
}

/* Index of the first entry whose src is >= src. */
static int64_t lower_bound(const struct ops_packed *p, const void *src)
{
    int64_t lo = 0, hi = p->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)p->w[mid].src < (uintptr_t)src)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ops_packed_add(struct ops_packed *p, const struct model_weight *w, struct ops_pool *pool)
{
    enum qmm_isa isa = ops_qmm_best_isa();
    if (!w->data || isa == QMM_SCALAR || w->cols % QMM_QK != 0 ||
        (!ops_qmm_gemv8(w->type, isa) && !ops_qmm_fgemm_packed(w->type)) ||
        !ops_qmm_packable(w))
        return IG_OK; /* the tile kernels read the stored rows */
    int64_t at = lower_bound(p, w->data);
    if (at < p->n && p->w[at].src == w->data)
        return IG_OK; /* (tied embeddings: the output head is token_embd) */
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 64;
        struct packed_weight *e = realloc(p->w, (size_t)cap * sizeof *e);
        if (!e)
            return ig_error(IG_E_NOMEM, "out of memory for the packed weight table");
        p->w = e;
        p->cap = cap;
    }
    size_t bytes = (ops_qmm_packed_bytes(w->type, w->rows, w->cols) + 63) & ~(size_t)63;
    uint8_t *data = arena_take(p, bytes ? bytes : 64);
    if (!data)
        return ig_error(IG_E_NOMEM, "out of memory repacking a %lld x %lld weight (%zu bytes)",
                        (long long)w->rows, (long long)w->cols, bytes);
    struct repack_job job = {w, data};
    int64_t groups = (w->rows + QMM_PR - 1) / QMM_PR;
    ops_pool_run(pool, groups, 16, repack_task, &job);
    ig_mapped_release(w->data, (size_t)w->rows * w->row_bytes);
    memmove(p->w + at + 1, p->w + at, (size_t)(p->n - at) * sizeof *p->w);
    p->w[at] = (struct packed_weight){w->data, w->type, w->rows, w->cols, data};
    p->n++;
    return IG_OK;
}

const uint8_t *ops_packed_find(const struct ops_packed *p, const struct model_weight *w)
{
    if (!p)
        return NULL;
    int64_t at = lower_bound(p, w->data);
    if (at == p->n)
        return NULL;
    const struct packed_weight *e = &p->w[at];
    return e->src == w->data && e->type == w->type && e->rows == w->rows && e->cols == w->cols
               ? e->data
               : NULL;
}

size_t ops_packed_bytes(const struct ops_packed *p)
{
    size_t bytes = 0;
    for (int64_t i = 0; p && i < p->n; i++)
        bytes += (ops_qmm_packed_bytes(p->w[i].type, p->w[i].rows, p->w[i].cols) + 63) &
                 ~(size_t)63;
    return bytes;
}
