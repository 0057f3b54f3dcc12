/* tests/emu/attn_case.h: one prefill-attention test case, shared by the
 * emulated (tests/emu) and GPU (tests/gpu) kernel tests: seeded inputs in a
 * fused QKV buffer, a KV cache with earlier rows filled, sentinel-filled
 * outputs with guard bands, an fp64 reference, the naive same-precision
 * baseline that sets the error budget, and the checks; and a variable-length
 * case (attn_varlen: several sequences' rows in one call over a shared pool).
 *
 * "Naive same-precision" (the baseline of the tolerance rule): inputs rounded
 * to bf16/f16 (the test's inputs already are); S = q.k accumulated in fp32;
 * m = row max; p_j = exp(scale*(s_j - m)) in fp32; l = sum p_j in fp32; P
 * rounded to bf16/f16 before P.V; O = (sum_j p_j v_j accumulated in fp32) / l,
 * rounded to bf16/f16. The kernel's max abs error against fp64 may be at most
 * twice the baseline's. */
#ifndef IGNITE_TESTS_EMU_ATTN_CASE_H
#define IGNITE_TESTS_EMU_ATTN_CASE_H

#include "core/half.h"
#include "prefill/flash_attn.h"
#include "prefill/flash_attn_pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_SENTINEL 0x7fffu /* NaN in bf16 and in f16 */
#define ATTN_GUARD 256        /* elements of guard band around every output */

#define ATTN_BLOCK KV_BLOCK /* positions per block of a paged cache: the KV pool's */

struct attn_case {
    int64_t n, pos0, n_head, n_head_kv, hd;
    int64_t window;      /* 0, or a sliding window (keys pos - window + 1 .. pos) */
    int paged;           /* the caches as a pool of ATTN_BLOCK-position blocks: block
                            b [n_head_kv][ATTN_BLOCK][hd], found through `table` */
    int dtype;
    uint64_t seed;
    /* host buffers, guard bands included */
    int64_t qkv_width, n_ctx;
    uint16_t *qkv;       /* [n][(n_head + 2 n_head_kv) hd] */
    uint16_t *kc, *vc;   /* GUARD + [n_head_kv][n_ctx][hd] + GUARD, or paged
                            GUARD + [n_blocks][n_head_kv][ATTN_BLOCK][hd] + GUARD */
    int64_t n_blocks;    /* paged: blocks in the pool (more than the table uses) */
    int32_t *table;      /* paged: [n_ctx / ATTN_BLOCK] the pool block of each */
    struct kv_layout pool; /* paged: the KV pool's layout of one layer of this shape
                              (kv_store_layout's strides; k and v unused) */
    uint16_t *kc0, *vc0; /* the caches before the call */
    uint16_t *o;         /* GUARD + [n][n_head][hd] + GUARD */
    float *lse;          /* GUARD + [n_head][n] + GUARD */
    size_t qkv_elems, cache_elems, o_elems, lse_elems;
    const float *sinks;  /* NULL, or gpt-oss's [n_head] sink logits (the caller's) */
};

static inline uint64_t attn_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Uniform in [-a, a), rounded to the case's type. */
static inline uint16_t attn_rand(struct attn_case *c, uint64_t *s, float a)
{
    float x = ((float)(attn_rng(s) & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * a;
    return c->dtype == PREFILL_ATTN_BF16 ? ig_f32_to_bf16(x) : ig_f32_to_f16(x);
}

static inline double attn_val(const struct attn_case *c, uint16_t h)
{
    return c->dtype == PREFILL_ATTN_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
}

static inline float attn_round(const struct attn_case *c, float x)
{
    return c->dtype == PREFILL_ATTN_BF16 ? ig_bf16_to_f32(ig_f32_to_bf16(x))
                                    : ig_f16_to_f32(ig_f32_to_f16(x));
}

static inline void attn_fill16(uint16_t *p, size_t n, uint16_t v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

/* Offset (guard band excluded) of element 0 of cache row pos of kv head hk. */
static inline int64_t attn_cache_at(const struct attn_case *c, int64_t hk, int64_t pos)
{
    if (!c->paged)
        return (hk * c->n_ctx + pos) * c->hd;
    return kv_row_offset(&c->pool, c->table, hk, pos);
}

/* Random keys and values (in that order per element) at positions
 * 0 .. at->pos0 - 1 of every KV head, addressed as `at` lays them out (its
 * table), into c's caches. */
static inline void attn_fill_cached(struct attn_case *c, const struct attn_case *at, uint64_t *s)
{
    for (int64_t hk = 0; hk < c->n_head_kv; hk++)
        for (int64_t pos = 0; pos < at->pos0; pos++)
            for (int64_t d = 0; d < c->hd; d++) {
                size_t i = ATTN_GUARD + (size_t)(attn_cache_at(at, hk, pos) + d);
                c->kc[i] = attn_rand(c, s, 2.0f);
                c->vc[i] = attn_rand(c, s, 2.0f);
            }
}

static inline void attn_case_init(struct attn_case *c)
{
    uint64_t s = c->seed * 0x9e3779b97f4a7c15ull + 17;
    c->qkv_width = (c->n_head + 2 * c->n_head_kv) * c->hd;
    c->n_ctx = c->pos0 + c->n + 3; /* rows past the chunk must stay untouched */
    c->qkv_elems = (size_t)(c->n * c->qkv_width);
    c->cache_elems = (size_t)(c->n_head_kv * c->n_ctx * c->hd) + 2 * ATTN_GUARD;
    c->table = NULL;
    if (c->paged) {
        /* The table covers n_ctx rounded up; the pool has two blocks more,
         * and the table takes them in another order. */
        const int64_t used = (c->n_ctx + ATTN_BLOCK - 1) / ATTN_BLOCK;
        c->n_ctx = used * ATTN_BLOCK;
        c->n_blocks = used + 2;
        c->table = (int32_t *)malloc(sizeof(int32_t) * (size_t)used);
        for (int64_t i = 0; i < used; i++) /* backwards from the last: 0 and 1 unused */
            c->table[i] = (int32_t)(c->n_blocks - 1 - i);
        c->cache_elems = (size_t)(c->n_blocks * c->n_head_kv * ATTN_BLOCK * c->hd) + 2 * ATTN_GUARD;
        /* The strides the batch engine's pool has (kvcache/), from its own
         * definition: a store of one layer, no page of it touched. */
        struct kv_memory *mem = NULL;
        struct kv_store *st = NULL;
        if (kv_memory_uniform(KV_F16, 1, c->n_head_kv, c->hd, &mem) != 0 ||
            kv_store_create(mem, c->n_blocks, 0, NULL, &st) != 0) {
            fprintf(stderr, "attn_case: kv_store_create failed\n");
            abort();
        }
        c->pool = kv_store_layout(st, 0);
        c->pool.k = c->pool.v = NULL;
        kv_store_free(st);
        kv_memory_free(mem);
    }
    c->o_elems = (size_t)(c->n * c->n_head * c->hd) + 2 * ATTN_GUARD;
    c->lse_elems = (size_t)(c->n_head * c->n) + 2 * ATTN_GUARD;
    c->qkv = (uint16_t *)aligned_alloc(64, (c->qkv_elems * 2 + 63) / 64 * 64);
    size_t cb = (c->cache_elems * 2 + 63) / 64 * 64;
    c->kc = (uint16_t *)aligned_alloc(64, cb);
    c->vc = (uint16_t *)aligned_alloc(64, cb);
    c->kc0 = (uint16_t *)malloc(cb);
    c->vc0 = (uint16_t *)malloc(cb);
    c->o = (uint16_t *)aligned_alloc(64, (c->o_elems * 2 + 63) / 64 * 64);
    c->lse = (float *)malloc(c->lse_elems * sizeof(float));
    for (size_t i = 0; i < c->qkv_elems; i++)
        c->qkv[i] = attn_rand(c, &s, 2.0f);
    attn_fill16(c->kc, c->cache_elems, ATTN_SENTINEL);
    attn_fill16(c->vc, c->cache_elems, ATTN_SENTINEL);
    attn_fill_cached(c, c, &s);
    memcpy(c->kc0, c->kc, c->cache_elems * 2);
    memcpy(c->vc0, c->vc, c->cache_elems * 2);
    attn_fill16(c->o, c->o_elems, ATTN_SENTINEL);
    for (size_t i = 0; i < c->lse_elems; i++)
        c->lse[i] = NAN;
}

static inline void attn_case_free(struct attn_case *c)
{
    free(c->qkv);
    free(c->kc);
    free(c->vc);
    free(c->kc0);
    free(c->vc0);
    free(c->o);
    free(c->lse);
    free(c->table);
}

/* Params for buffers laid out like the host ones at the given bases (host or
 * device copies of qkv, kc, vc, o, lse including their guard bands). */
static inline struct prefill_attn_params attn_case_params(const struct attn_case *c, void *qkv,
                                                    void *kc, void *vc, void *o, float *lse)
{
    struct prefill_attn_params p;
    memset(&p, 0, sizeof p);
    int64_t hd = c->hd;
    p.q = qkv;
    p.k = (uint16_t *)qkv + c->n_head * hd;
    p.v = (uint16_t *)qkv + (c->n_head + c->n_head_kv) * hd;
    p.k_cache = (uint16_t *)kc + ATTN_GUARD;
    p.v_cache = (uint16_t *)vc + ATTN_GUARD;
    p.o = (uint16_t *)o + ATTN_GUARD;
    p.lse = lse + ATTN_GUARD;
    p.n_tokens = c->n;
    p.pos0 = c->pos0;
    p.n_ctx = c->n_ctx;
    p.n_head = c->n_head;
    p.n_head_kv = c->n_head_kv;
    p.head_dim = hd;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = c->qkv_width;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = hd;
    p.o_row_stride = c->n_head * hd;
    p.o_head_stride = hd;
    p.cache_row_stride = hd;
    p.cache_head_stride = c->n_ctx * hd;
    if (c->paged) { /* host table: the GPU test copies it */
        struct kv_layout L = c->pool;
        L.k = p.k_cache, L.v = p.v_cache;
        if (prefill_attn_use_pool(&p, &L, c->table, c->n_ctx / ATTN_BLOCK, c->n_blocks) != 0) {
            fprintf(stderr, "attn_case: prefill_attn_use_pool refused an f16 pool\n");
            abort();
        }
    }
    p.lse_head_stride = c->n;
    p.scale = 1.0f / sqrtf((float)hd);
    p.dtype = c->dtype;
    p.window = c->window;
    p.sinks = c->sinks;
    return p;
}

static inline const uint16_t *attn_key(const struct attn_case *c, int kind, int64_t hk, int64_t pos)
{
    if (pos < c->pos0)
        return (kind ? c->vc0 : c->kc0) + ATTN_GUARD + attn_cache_at(c, hk, pos);
    return c->qkv + (pos - c->pos0) * c->qkv_width + (c->n_head + kind * c->n_head_kv + hk) * c->hd;
}

/* fp64 attention of a case (from the same rounded inputs), computed once. */
struct attn_ref {
    double *o;       /* [n][n_head][hd] */
    double *lse;     /* [n_head][n] */
    double naive;    /* max |O_naive - O_fp64| of the naive same-precision baseline */
};

/* Errors of one output against fp64, max over elements. */
struct attn_err {
    double o_max;    /* max |O - O_fp64|; a NaN counts as infinite */
    double lse_max;  /* max |lse - lse_fp64|; a NaN counts as infinite */
};

static inline void attn_reference(const struct attn_case *c, struct attn_ref *r)
{
    const int64_t hd = c->hd, group = c->n_head / c->n_head_kv;
    const double scale = 1.0 / sqrt((double)hd);
    double *s = (double *)malloc(sizeof(double) * (size_t)(c->pos0 + c->n));
    float *sf = (float *)malloc(sizeof(float) * (size_t)(c->pos0 + c->n));
    double acc[512];
    float accf[512];
    r->o = (double *)malloc(sizeof(double) * (size_t)(c->n * c->n_head * hd));
    r->lse = (double *)malloc(sizeof(double) * (size_t)(c->n * c->n_head));
    r->naive = 0;
    for (int64_t h = 0; h < c->n_head; h++)
        for (int64_t i = 0; i < c->n; i++) {
            const uint16_t *q = c->qkv + i * c->qkv_width + h * hd;
            int64_t nk = c->pos0 + i + 1; /* keys j0 .. nk - 1 */
            int64_t j0 = c->window > 0 && nk - c->window > 0 ? nk - c->window : 0;
            double m = -INFINITY, l = 0, qd[512];
            float mf = -INFINITY, lf = 0;
            for (int64_t x = 0; x < hd; x++)
                qd[x] = attn_val(c, q[x]);
            for (int64_t j = j0; j < nk; j++) {
                const uint16_t *k = attn_key(c, 0, h / group, j);
                double d = 0;
                float df = 0;
                for (int64_t x = 0; x < hd; x++) {
                    double kx = attn_val(c, k[x]);
                    d += qd[x] * kx;
                    df += (float)qd[x] * (float)kx;
                }
                s[j] = d * scale;
                sf[j] = df;
                m = fmax(m, s[j]);
                mf = fmaxf(mf, df);
            }
            /* a sink: in the max and the denominator, with no value */
            const double sink = c->sinks ? c->sinks[h] : -INFINITY;
            m = fmax(m, sink);
            for (int64_t x = 0; x < hd; x++)
                acc[x] = 0, accf[x] = 0;
            for (int64_t j = j0; j < nk; j++) {
                const uint16_t *v = attn_key(c, 1, h / group, j);
                double p = exp(s[j] - m);
                float pf = expf((float)scale * (sf[j] - mf));
                l += p;
                lf += pf;
                float pr = attn_round(c, pf);
                for (int64_t x = 0; x < hd; x++) {
                    double vx = attn_val(c, v[x]);
                    acc[x] += p * vx;
                    accf[x] += pr * (float)vx;
                }
            }
            if (c->sinks) {
                l += exp(sink - m);
                lf += expf((float)sink - (float)scale * mf);
            }
            double *o = r->o + (i * c->n_head + h) * hd;
            for (int64_t x = 0; x < hd; x++) {
                o[x] = acc[x] / l;
                r->naive = fmax(r->naive, fabs((double)attn_round(c, accf[x] / lf) - o[x]));
            }
            r->lse[h * c->n + i] = m + log(l);
        }
    free(s);
    free(sf);
}

static inline void attn_ref_free(struct attn_ref *r)
{
    free(r->o);
    free(r->lse);
}

/* Compares o/lse (case layout, guards included) with the fp64 reference. */
static inline void attn_errors(const struct attn_case *c, const struct attn_ref *r, const uint16_t *o,
                        const float *lse, struct attn_err *e)
{
    e->o_max = e->lse_max = 0;
    for (int64_t i = 0; i < c->n * c->n_head * c->hd; i++) {
        double got = attn_val(c, o[ATTN_GUARD + i]);
        e->o_max = fmax(e->o_max, isnan(got) ? INFINITY : fabs(got - r->o[i]));
    }
    for (int64_t i = 0; i < c->n * c->n_head; i++) {
        double got = lse[ATTN_GUARD + i];
        e->lse_max = fmax(e->lse_max, isnan(got) ? INFINITY : fabs(got - r->lse[i]));
    }
}

/* Sentinels: guard bands of o and lse untouched, every cache row outside the
 * chunk untouched, the chunk's rows equal to k/v. Returns the number of
 * violations (first few printed). */
static inline int attn_check_memory(const struct attn_case *c, const uint16_t *o, const float *lse,
                             const uint16_t *kc, const uint16_t *vc, const char *who)
{
    int bad = 0;
    for (size_t i = 0; i < ATTN_GUARD; i++) {
        bad += o[i] != ATTN_SENTINEL || o[c->o_elems - 1 - i] != ATTN_SENTINEL;
        bad += !isnan(lse[i]) || !isnan(lse[c->lse_elems - 1 - i]);
    }
    if (bad)
        fprintf(stderr, "%s: output guard bands overwritten (%d)\n", who, bad);
    /* Paged: the position each pool block holds (-1: a block the table skips). */
    int64_t *first = NULL;
    if (c->paged) {
        first = (int64_t *)malloc(sizeof(int64_t) * (size_t)c->n_blocks);
        for (int64_t b = 0; b < c->n_blocks; b++)
            first[b] = -1;
        for (int64_t i = 0; i < c->n_ctx / ATTN_BLOCK; i++)
            first[c->table[i]] = i * ATTN_BLOCK;
    }
    for (int kind = 0; kind < 2; kind++) {
        const uint16_t *now = kind ? vc : kc, *before = kind ? c->vc0 : c->kc0;
        for (size_t i = 0; i < c->cache_elems; i++) {
            int64_t e = (int64_t)i - ATTN_GUARD;
            int64_t row = e / c->hd % c->n_ctx, hk = e / c->hd / c->n_ctx;
            if (c->paged && e >= 0) { /* [block][kv head][ATTN_BLOCK][hd] */
                const int64_t b = e / c->hd / ATTN_BLOCK / c->n_head_kv;
                hk = e / c->hd / ATTN_BLOCK % c->n_head_kv;
                row = b < c->n_blocks && first[b] >= 0 ? first[b] + e / c->hd % ATTN_BLOCK : -1;
            }
            int in_chunk = e >= 0 && (size_t)e < c->cache_elems - 2 * ATTN_GUARD &&
                           row >= c->pos0 && row < c->pos0 + c->n;
            uint16_t want = in_chunk ? attn_key(c, kind, hk, row)[e % c->hd] : before[i];
            if (now[i] != want && bad++ < 5)
                fprintf(stderr, "%s: %s cache element %lld (row %lld, kv head %lld) = %04x, "
                        "want %04x\n", who, kind ? "V" : "K", (long long)e, (long long)row,
                        (long long)hk, now[i], want);
        }
    }
    free(first);
    return bad;
}

/* ---- variable length: several sequences in one call ---------------------
 * A batch step's rows: sequence s owns n_rows rows from row0 at positions
 * pos0 .. (its first pos0 positions cached in its blocks of a shared pool).
 * The sequences' rows are not in sequence order and a gap row (NaN q, k, v;
 * its o and lse must stay untouched) follows each, so a sequence that read
 * another's rows, or a gap, would show. Pool blocks are handed out in a
 * shuffled order, three blocks no table names and every position not
 * cached yet hold NaN, and table entries past a sequence's blocks are -1. */
#define ATTN_MAX_SEQS 6
#if defined(__cplusplus)
#define ATTN_ALIGN16 alignas(16)
#else
#define ATTN_ALIGN16 _Alignas(16)
#endif

struct attn_varlen {
    int n_seqs;
    int32_t n_rows[ATTN_MAX_SEQS], pos0[ATTN_MAX_SEQS]; /* set before init */
    int64_t n_head, n_head_kv, hd, window;
    int dtype;
    uint64_t seed;
    /* made by attn_varlen_init */
    ATTN_ALIGN16 struct prefill_attn_seq seqs[ATTN_MAX_SEQS]; /* as the ws kernel reads them */
    int64_t rows;          /* the step's rows, gaps included */
    int64_t table_stride, n_blocks;
    int32_t *tables;       /* [n_seqs][table_stride] */
    struct attn_case one[ATTN_MAX_SEQS]; /* sequence s as a case over the shared buffers
                                            (for attn_reference; owns nothing) */
    struct attn_case c;    /* the shared buffers: qkv [rows], caches (the pool), o
                              [rows], lse [n_head][rows], with guard bands; c.pool */
};

static inline void attn_varlen_init(struct attn_varlen *vl)
{
    struct attn_case *c = &vl->c;
    uint64_t s = vl->seed * 0x9e3779b97f4a7c15ull + 29;
    memset(c, 0, sizeof *c);
    c->n_head = vl->n_head, c->n_head_kv = vl->n_head_kv, c->hd = vl->hd;
    c->window = vl->window, c->dtype = vl->dtype, c->paged = 1, c->seed = vl->seed;
    /* Rows: the sequences in reverse order, each followed by a gap row. */
    vl->rows = 0;
    for (int i = vl->n_seqs - 1; i >= 0; i--) {
        vl->seqs[i].row0 = (int32_t)vl->rows, vl->seqs[i].n_rows = vl->n_rows[i];
        vl->seqs[i].pos0 = vl->pos0[i], vl->seqs[i].pad_ = 0;
        vl->rows += vl->n_rows[i] + 1;
    }
    /* Blocks: each sequence's positions plus one more, shuffled over the pool. */
    int64_t used = 0, most = 0;
    for (int i = 0; i < vl->n_seqs; i++) {
        int64_t b = (vl->pos0[i] + vl->n_rows[i] + ATTN_BLOCK) / ATTN_BLOCK;
        used += b;
        most = b > most ? b : most;
    }
    vl->table_stride = most + 1;
    vl->n_blocks = used + 3;
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)vl->n_blocks);
    for (int64_t i = 0; i < vl->n_blocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = vl->n_blocks - 1; i > 0; i--) { /* Fisher-Yates, seeded */
        int64_t j = (int64_t)(attn_rng(&s) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    vl->tables = (int32_t *)malloc(sizeof(int32_t) * (size_t)(vl->n_seqs * vl->table_stride));
    int64_t next = 0;
    for (int i = 0; i < vl->n_seqs; i++) {
        int64_t b = (vl->pos0[i] + vl->n_rows[i] + ATTN_BLOCK) / ATTN_BLOCK;
        for (int64_t t = 0; t < vl->table_stride; t++)
            vl->tables[i * vl->table_stride + t] = t < b ? perm[next++] : -1;
    }
    free(perm);
    /* The shared buffers, through attn_case's fields. */
    c->n = vl->rows;
    c->qkv_width = (c->n_head + 2 * c->n_head_kv) * c->hd;
    c->n_ctx = vl->table_stride * ATTN_BLOCK;
    c->n_blocks = vl->n_blocks;
    c->qkv_elems = (size_t)(c->n * c->qkv_width);
    c->cache_elems = (size_t)(c->n_blocks * c->n_head_kv * ATTN_BLOCK * c->hd) + 2 * ATTN_GUARD;
    c->o_elems = (size_t)(c->n * c->n_head * c->hd) + 2 * ATTN_GUARD;
    c->lse_elems = (size_t)(c->n_head * c->n) + 2 * ATTN_GUARD;
    struct kv_memory *mem = NULL;
    struct kv_store *st = NULL;
    if (kv_memory_uniform(KV_F16, 1, c->n_head_kv, c->hd, &mem) != 0 ||
        kv_store_create(mem, c->n_blocks, 0, NULL, &st) != 0) {
        fprintf(stderr, "attn_varlen: kv_store_create failed\n");
        abort();
    }
    c->pool = kv_store_layout(st, 0);
    c->pool.k = c->pool.v = NULL;
    kv_store_free(st);
    kv_memory_free(mem);
    c->qkv = (uint16_t *)aligned_alloc(64, (c->qkv_elems * 2 + 63) / 64 * 64);
    size_t cb = (c->cache_elems * 2 + 63) / 64 * 64;
    c->kc = (uint16_t *)aligned_alloc(64, cb);
    c->vc = (uint16_t *)aligned_alloc(64, cb);
    c->kc0 = (uint16_t *)malloc(cb);
    c->vc0 = (uint16_t *)malloc(cb);
    c->o = (uint16_t *)aligned_alloc(64, (c->o_elems * 2 + 63) / 64 * 64);
    c->lse = (float *)malloc(c->lse_elems * sizeof(float));
    attn_fill16(c->qkv, c->qkv_elems, ATTN_SENTINEL); /* the gap rows stay NaN */
    attn_fill16(c->kc, c->cache_elems, ATTN_SENTINEL);
    attn_fill16(c->vc, c->cache_elems, ATTN_SENTINEL);
    for (int i = 0; i < vl->n_seqs; i++) {
        struct attn_case *o = &vl->one[i];
        *o = *c;
        o->n = vl->n_rows[i], o->pos0 = vl->pos0[i];
        o->qkv = c->qkv + vl->seqs[i].row0 * c->qkv_width;
        o->table = vl->tables + i * vl->table_stride;
        for (int64_t r = 0; r < o->n * c->qkv_width; r++)
            o->qkv[r] = attn_rand(c, &s, 2.0f);
        attn_fill_cached(c, o, &s);
    }
    memcpy(c->kc0, c->kc, c->cache_elems * 2);
    memcpy(c->vc0, c->vc, c->cache_elems * 2);
    for (int i = 0; i < vl->n_seqs; i++)
        vl->one[i].kc0 = c->kc0, vl->one[i].vc0 = c->vc0;
    attn_fill16(c->o, c->o_elems, ATTN_SENTINEL);
    for (size_t i = 0; i < c->lse_elems; i++)
        c->lse[i] = NAN;
}

static inline void attn_varlen_free(struct attn_varlen *vl)
{
    vl->c.table = NULL;
    attn_case_free(&vl->c);
    free(vl->tables);
}

/* Params over buffers laid out like the host ones (device copies for the
 * GPU test): seqs and tables in the memory the kernel reads, the host
 * copy of the sequences from vl. */
static inline struct prefill_attn_params attn_varlen_params(const struct attn_varlen *vl,
                                                            void *qkv, void *kc, void *vc,
                                                            void *o, float *lse,
                                                            const struct prefill_attn_seq *seqs,
                                                            const int32_t *tables)
{
    const struct attn_case *c = &vl->c;
    struct prefill_attn_params p = attn_case_params(c, qkv, kc, vc, o, lse); /* no table yet */
    struct kv_layout L = c->pool;
    L.k = p.k_cache, L.v = p.v_cache;
    if (prefill_attn_use_pool_varlen(&p, &L, tables, vl->table_stride, vl->n_blocks, seqs,
                                     vl->seqs, vl->n_seqs) != 0) {
        fprintf(stderr, "attn_varlen: prefill_attn_use_pool_varlen refused an f16 pool\n");
        abort();
    }
    p.lse_head_stride = vl->rows;
    return p;
}

/* fp64 references of every sequence. */
static inline void attn_varlen_reference(struct attn_varlen *vl, struct attn_ref *r)
{
    for (int i = 0; i < vl->n_seqs; i++)
        attn_reference(&vl->one[i], &r[i]);
}

/* Sequence i's errors against its fp64 reference (o, lse: the step's
 * buffers, guards included). */
static inline void attn_varlen_errors(const struct attn_varlen *vl, int i, const struct attn_ref *r,
                                      const uint16_t *o, const float *lse, struct attn_err *e)
{
    const struct attn_case *c = &vl->one[i];
    const int64_t row0 = vl->seqs[i].row0, hd = c->hd;
    e->o_max = e->lse_max = 0;
    for (int64_t j = 0; j < c->n * c->n_head * hd; j++) {
        double got = attn_val(c, o[ATTN_GUARD + row0 * c->n_head * hd + j]);
        e->o_max = fmax(e->o_max, isnan(got) ? INFINITY : fabs(got - r->o[j]));
    }
    for (int64_t h = 0; h < c->n_head; h++)
        for (int64_t j = 0; j < c->n; j++) {
            double got = lse[ATTN_GUARD + h * vl->rows + row0 + j];
            e->lse_max = fmax(e->lse_max, isnan(got) ? INFINITY : fabs(got - r->lse[h * c->n + j]));
        }
}

/* Guard bands and gap rows of o and lse untouched; in the pool exactly each
 * sequence's chunk positions written (with its k/v rows), nothing else.
 * Returns the violations (first few printed). */
static inline int attn_varlen_check_memory(const struct attn_varlen *vl, const uint16_t *o,
                                           const float *lse, const uint16_t *kc,
                                           const uint16_t *vc, const char *who)
{
    const struct attn_case *c = &vl->c;
    const int64_t hd = c->hd, width = c->n_head * hd;
    char *owned = (char *)calloc((size_t)vl->rows, 1);
    for (int i = 0; i < vl->n_seqs; i++)
        for (int32_t j = 0; j < vl->seqs[i].n_rows; j++)
            owned[vl->seqs[i].row0 + j] = 1;
    int bad = 0;
    for (size_t i = 0; i < ATTN_GUARD; i++) {
        bad += o[i] != ATTN_SENTINEL || o[c->o_elems - 1 - i] != ATTN_SENTINEL;
        bad += !isnan(lse[i]) || !isnan(lse[c->lse_elems - 1 - i]);
    }
    for (int64_t r = 0; r < vl->rows; r++)
        if (!owned[r]) {
            for (int64_t x = 0; x < width; x++)
                bad += o[ATTN_GUARD + r * width + x] != ATTN_SENTINEL;
            for (int64_t h = 0; h < c->n_head; h++)
                bad += !isnan(lse[ATTN_GUARD + h * vl->rows + r]);
        }
    free(owned);
    if (bad)
        fprintf(stderr, "%s: output guard bands or gap rows overwritten (%d)\n", who, bad);
    /* Each pool block's sequence and first position (-1: no table names it). */
    int64_t *first = (int64_t *)malloc(sizeof(int64_t) * (size_t)vl->n_blocks);
    int *seq_of = (int *)malloc(sizeof(int) * (size_t)vl->n_blocks);
    for (int64_t b = 0; b < vl->n_blocks; b++)
        first[b] = -1, seq_of[b] = -1;
    for (int i = 0; i < vl->n_seqs; i++)
        for (int64_t t = 0; t < vl->table_stride; t++) {
            int32_t b = vl->tables[i * vl->table_stride + t];
            if (b >= 0)
                first[b] = t * ATTN_BLOCK, seq_of[b] = i;
        }
    for (int kind = 0; kind < 2; kind++) {
        const uint16_t *now = kind ? vc : kc, *before = kind ? c->vc0 : c->kc0;
        for (size_t i = 0; i < c->cache_elems; i++) {
            const int64_t e = (int64_t)i - ATTN_GUARD;
            uint16_t want = before[i];
            if (e >= 0 && (size_t)e < c->cache_elems - 2 * ATTN_GUARD) {
                const int64_t b = e / hd / ATTN_BLOCK / c->n_head_kv;
                const int64_t hk = e / hd / ATTN_BLOCK % c->n_head_kv;
                const int sq = seq_of[b];
                if (sq >= 0) {
                    const struct attn_case *one = &vl->one[sq];
                    const int64_t pos = first[b] + e / hd % ATTN_BLOCK;
                    if (pos >= one->pos0 && pos < one->pos0 + one->n)
                        want = attn_key(one, kind, hk, pos)[e % hd];
                }
            }
            if (now[i] != want && bad++ < 5)
                fprintf(stderr, "%s: %s pool element %lld = %04x, want %04x\n", who,
                        kind ? "V" : "K", (long long)e, now[i], want);
        }
    }
    free(first);
    free(seq_of);
    return bad;
}

static inline void attn_varlen_name(const struct attn_varlen *vl, char *buf, size_t size)
{
    int len = snprintf(buf, size, "varlen heads=%lld/%lld hd=%lld %s", (long long)vl->n_head,
                       (long long)vl->n_head_kv, (long long)vl->hd,
                       vl->dtype == PREFILL_ATTN_BF16 ? "bf16" : "f16");
    for (int i = 0; i < vl->n_seqs && len > 0 && (size_t)len < size; i++)
        len += snprintf(buf + len, size - (size_t)len, " %d@%d", vl->n_rows[i], vl->pos0[i]);
    if (vl->window && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, " window=%lld", (long long)vl->window);
}

static inline void attn_case_name(const struct attn_case *c, char *buf, size_t size)
{
    int len = snprintf(buf, size, "n=%lld pos0=%lld heads=%lld/%lld hd=%lld %s", (long long)c->n,
                       (long long)c->pos0, (long long)c->n_head, (long long)c->n_head_kv,
                       (long long)c->hd, c->dtype == PREFILL_ATTN_BF16 ? "bf16" : "f16");
    if (c->window && len > 0 && (size_t)len < size)
        len += snprintf(buf + len, size - (size_t)len, " window=%lld", (long long)c->window);
    if (c->paged && len > 0 && (size_t)len < size)
        len += snprintf(buf + len, size - (size_t)len, " paged");
    if (c->sinks && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, " sinks");
}

#endif
