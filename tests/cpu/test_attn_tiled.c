/* tests/cpu/test_attn_tiled.c: the tiled attention against a plain fp64
 * softmax(Q K^T / sqrt(d)) V with a causal mask, on seeded random inputs over
 * ragged shapes: query counts around the tile sizes (1, 2, 63, 64, 65,
 * 1000), GQA ratios 1, 3 and 4, an empty and a non-empty cache (pos0 > 0),
 * f32 and f16 caches, and a head_dim that is not a multiple of the column
 * block, K/V read through a block table of scattered blocks; sliding windows
 * shorter and longer than a key tile, crossing tiles and sequence edges (the
 * keys behind every query's window are NaN, and the table entries of the
 * blocks wholly behind it point at a block of NaN, so a kernel that reads
 * them fails), and soft-capped scores. The bound is flash-attention's rule:
 * at most twice the error of a naive f32 implementation against fp64 (plus a
 * floor of 1e-6 relative). Guard bands around the output catch writes out of
 * bounds. Several sequences in one call give each exactly (bit for bit) its
 * result alone; decode rows over an f16 cache (prefill/attn_decode.c) give
 * what the same rows give in one item, on one to four threads (a lone
 * token's heads cut between them). On AVX-512 the prefill items accumulate
 * 32 columns at a time (ctest runs this again under IGNITE_SIMD=avx2).
 * Everything twice: the exact path's attention, then the int8 path's fused
 * build (prefill/attn_fused.h), which must differ from it somewhere.
 * Quantized caches (q8_0, q4_0, K and V of different types): the reference
 * reads the blocks' values (models/quant.c's dequantization, the gguf
 * package's twin: tests/models/test_dequant.py); on the int8 path a
 * quantized K is scored against the query quantized to int8 (ops/qmatmul.h's
 * quantizer, tests/cpu/test_qmatmul.c), so there the reference takes that
 * query's values too: the same bound holds for both paths. Decode rows
 * over quantized caches (prefill/attn_decode_quant.c) are checked as the
 * f16 ones: against fp64 and bit for bit against the rows in one item. */
#include "core/half.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/quant.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"
#include "prefill/attn_tiled.h"
#include "tests/test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define SENTINEL 12345.0f

static uint64_t rng_state = 0x9e3779b97f4a7c15ull; /* test_rand_f's stream */

/* The pass running: the exact path's attention, or the int8 path's fused
 * build (and how many outputs it has changed against the exact one: none
 * would mean the fused build never ran). */
static bool fused;
static int64_t fused_changed;

struct shape {
    int64_t n, pos0, n_head_kv, group, head_dim;
    enum kv_dtype dtype;
    int64_t window; /* 0: none */
    float softcap;  /* 0: none */
    int v_type;     /* 0: V of `dtype` too; else V's enum kv_dtype + 1 */
};

static enum kv_dtype v_dtype(const struct shape *s)
{
    return s->v_type ? (enum kv_dtype)(s->v_type - 1) : s->dtype;
}

/* One sequence's cache: n_ctx positions in scattered blocks of a store. */
struct cache {
    struct kv_store *st;
    struct kv_layout L;
    int32_t *table;
};

/* K or V element d of position j, KV head h, as the kernel sees it
 * (f16-rounded for an f16 cache, its block's d q for a quantized one). */
static double cache_value(const struct cache *c, void *base, int64_t h, int64_t j, int64_t d)
{
    const void *row = kv_row(&c->L, base, c->table, h, j);
    enum kv_dtype dt = kv_base_dtype(&c->L, base);
    if (kv_dtype_quantized(dt)) {
        float blk[32];
        quant_dequantize_row(dt == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0,
                             (const char *)row + kv_dtype_row_bytes(dt, d / 32 * 32), blk, 32);
        return blk[d % 32];
    }
    return dt == KV_F32 ? ((const float *)row)[d] : ig_f16_to_f32(((const ig_f16 *)row)[d]);
}

/* References in one pass: ref = the exact result in double, naive = what a
 * straightforward f32 kernel computes (the yardstick of the error bound). */
static void reference(const struct shape *s, const float *q, const struct cache *c, double *ref,
                      float *naive)
{
    int64_t n_head = s->n_head_kv * s->group, hd = s->head_dim;
    int64_t n_keys_max = s->pos0 + s->n;
    double *p = malloc((size_t)n_keys_max * sizeof *p);
    float *pf = malloc((size_t)n_keys_max * sizeof *pf);
    /* The int8 path's query of a quantized K: q * scale in f32, quantized. */
    bool q8 = fused && kv_dtype_quantized(s->dtype);
    float scale = (float)(1.0 / sqrt((double)hd));
    float *qs = malloc((size_t)hd * sizeof *qs);
    struct qmm_q8 *qb = malloc((size_t)(hd / 32 + 1) * sizeof *qb);
    for (int64_t t = 0; t < s->n; t++) {
        int64_t nk = s->pos0 + t + 1;
        int64_t j0 = s->window && nk > s->window ? nk - s->window : 0;
        for (int64_t h = 0; h < n_head; h++) {
            int64_t kvh = h / s->group;
            const float *qv = q + (t * n_head + h) * hd;
            if (q8) {
                for (int64_t d = 0; d < hd; d++)
                    qs[d] = qv[d] * scale;
                ops_qmm_quantize(qs, hd, qb);
                for (int64_t d = 0; d < hd; d++)
                    qs[d] = qb[d / 32].d * (float)qb[d / 32].qs[d % 32];
                qv = qs;
            }
            double mx = -INFINITY;
            float mxf = -INFINITY;
            for (int64_t j = j0; j < nk; j++) {
                double dot = 0;
                float dotf = 0;
                for (int64_t d = 0; d < hd; d++) {
                    double kv = cache_value(c, c->L.k, kvh, j, d);
                    dot += (double)qv[d] * kv;
                    dotf += qv[d] * (float)kv;
                }
                p[j] = q8 ? dot : dot / sqrt((double)hd);
                pf[j] = q8 ? dotf : dotf / sqrtf((float)hd);
                if (s->softcap > 0) {
                    p[j] = s->softcap * tanh(p[j] / s->softcap);
                    pf[j] = s->softcap * tanhf(pf[j] / s->softcap);
                }
                mx = fmax(mx, p[j]);
                mxf = fmaxf(mxf, pf[j]);
            }
            double sum = 0;
            float sumf = 0;
            for (int64_t j = j0; j < nk; j++) {
                p[j] = exp(p[j] - mx);
                pf[j] = expf(pf[j] - mxf);
                sum += p[j];
                sumf += pf[j];
            }
            for (int64_t d = 0; d < hd; d++) {
                double acc = 0;
                float accf = 0;
                for (int64_t j = j0; j < nk; j++) {
                    double vv = cache_value(c, c->L.v, kvh, j, d);
                    acc += p[j] * vv;
                    accf += pf[j] * (float)vv;
                }
                ref[(t * n_head + h) * hd + d] = acc / sum;
                naive[(t * n_head + h) * hd + d] = accf / sumf;
            }
        }
    }
    free(qb);
    free(qs);
    free(pf);
    free(p);
}

/* A cache of n_ctx random positions whose blocks lie in reverse order (and
 * one spare, block 0) in the store. With a window, the positions behind the
 * first query's window are NaN, and the blocks wholly behind it are
 * replaced in the table by block 0, all NaN: no query may read them. */
static struct cache make_cache(const struct shape *s, int64_t n_ctx)
{
    struct cache c;
    int64_t nb = kv_blocks_for(n_ctx);
    struct kv_memory *mem = NULL;
    struct kv_layer_mem one = {.kind = KV_FULL, .n_head_kv = s->n_head_kv,
                               .head_dim = s->head_dim, .source = -1};
    CHECK(kv_memory_build(&one, 1, s->dtype, v_dtype(s), &mem) == IG_OK);
    CHECK(kv_store_create(mem, nb + 1, 0, NULL, &c.st) == IG_OK);
    kv_memory_free(mem);
    c.L = kv_store_layout(c.st, 0);
    c.table = malloc((size_t)nb * sizeof *c.table);
    for (int64_t b = 0; b < nb; b++)
        c.table[b] = (int32_t)(nb - b);
    int64_t kv_dim = s->n_head_kv * s->head_dim;
    float *k = malloc((size_t)kv_dim * sizeof *k), *v = malloc((size_t)kv_dim * sizeof *v);
    for (int64_t p = 0; p < n_ctx; p++) {
        for (int64_t i = 0; i < kv_dim; i++)
            k[i] = 2.0f * test_rand_f(&rng_state), v[i] = test_rand_f(&rng_state);
        kv_write_rows(&c.L, c.table, s->n_head_kv, p, 1, k, v);
    }
    int64_t hidden = s->window && s->pos0 + 1 > s->window ? s->pos0 + 1 - s->window : 0;
    for (int64_t i = 0; i < kv_dim; i++)
        k[i] = v[i] = NAN;
    int32_t spare[1] = {0};
    for (int64_t p = 0; p < KV_BLOCK; p++)
        kv_write_rows(&c.L, spare, s->n_head_kv, p, 1, k, v);
    for (int64_t p = 0; p < hidden; p++)
        kv_write_rows(&c.L, c.table, s->n_head_kv, p, 1, k, v);
    for (int64_t b = 0; (b + 1) * KV_BLOCK <= hidden; b++)
        c.table[b] = 0;
    free(k);
    free(v);
    return c;
}

static void free_cache(struct cache *c)
{
    kv_store_free(c->st);
    free(c->table);
}

static double max_abs_diff(const double *ref, const float *x, int64_t n, double *ref_max)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)x[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    *ref_max = m;
    return e;
}

/* The kernel on one sequence, then its rows as two sequences of one call. */
static void run_shape(struct ops_pool *pool, const struct shape *s)
{
    int64_t n_head = s->n_head_kv * s->group, hd = s->head_dim;
    int64_t n_ctx = s->pos0 + s->n;
    int64_t q_elems = s->n * n_head * hd;

    struct cache c = make_cache(s, n_ctx);
    float *q = malloc((size_t)q_elems * sizeof *q);
    float *out = malloc((size_t)(q_elems + 2 * GUARD) * sizeof *out);
    float *out2 = malloc((size_t)(q_elems + 2 * GUARD) * sizeof *out2);
    double *ref = malloc((size_t)q_elems * sizeof *ref);
    float *naive_f = malloc((size_t)q_elems * sizeof *naive_f);
    int threads = ops_pool_threads(pool);
    int64_t stride = attn_tiled_scratch_floats(n_head, s->n_head_kv, hd);
    float *scratch = malloc((size_t)(stride * threads) * sizeof *scratch);

    /* Scores of a few units make the softmax neither flat nor one-hot. */
    for (int64_t i = 0; i < q_elems; i++)
        q[i] = 2.0f * test_rand_f(&rng_state);
    for (int64_t i = 0; i < q_elems + 2 * GUARD; i++)
        out[i] = out2[i] = SENTINEL;

    struct attn_seq seq = {.q = q, .out = out + GUARD, .table = c.table, .n_tokens = s->n,
                           .pos0 = s->pos0};
    int64_t items[3];
    struct attn_params p = {
        .kv = c.L, .seqs = &seq, .n_seqs = 1, .item_offsets = items,
        .q_tok_stride = n_head * hd, .out_tok_stride = n_head * hd, .n_head = n_head,
        .n_head_kv = s->n_head_kv, .head_dim = hd, .scale = (float)(1.0 / sqrt((double)hd)),
        .window = s->window, .softcap = s->softcap, .fused = fused,
    };
    attn_tiled_run(&p, pool, scratch, stride);
    if (fused) {
        p.fused = false;
        seq.out = out2 + GUARD;
        attn_tiled_run(&p, pool, scratch, stride);
        for (int64_t i = 0; i < q_elems; i++)
            fused_changed += out[GUARD + i] != out2[GUARD + i];
        p.fused = true;
        seq.out = out + GUARD;
    }

    reference(s, q, &c, ref, naive_f);

    double ref_max, naive_max;
    double err = max_abs_diff(ref, out + GUARD, q_elems, &ref_max) / ref_max;
    double naive_err = max_abs_diff(ref, naive_f, q_elems, &naive_max) / ref_max;
    double bound = 2.0 * naive_err + 1e-6;
    CHECKF(err <= bound, "n=%lld pos0=%lld kv_heads=%lld group=%lld hd=%lld K %s V %s window=%lld "
           "softcap=%g: relative error %.3e > %.3e (naive f32 %.3e)", (long long)s->n,
           (long long)s->pos0, (long long)s->n_head_kv, (long long)s->group, (long long)hd,
           kv_dtype_name(s->dtype), kv_dtype_name(v_dtype(s)), (long long)s->window, (double)s->softcap, err,
           bound, naive_err);
    if (err > bound) {
        int shown = 0;
        for (int64_t i = 0; i < q_elems && shown < 5; i++)
            if (fabs(out[GUARD + i] - ref[i]) > bound * ref_max) {
                fprintf(stderr, "  token %lld head %lld dim %lld: got %.7f want %.7f\n",
                        (long long)(i / (n_head * hd)), (long long)(i / hd % n_head),
                        (long long)(i % hd), out[GUARD + i], ref[i]);
                shown++;
            }
    }
    int guard_ok = 1;
    for (int64_t i = 0; i < GUARD; i++)
        guard_ok &= out[i] == SENTINEL && out[GUARD + q_elems + i] == SENTINEL;
    CHECKF(guard_ok, "n=%lld: write outside the output", (long long)s->n);

    /* The same rows split into two sequences over the same cache, in one call:
     * the first half's queries as a sequence of its own, then the rest. Each
     * row must come out bit for bit as in the single call. */
    if (s->n >= 2) {
        for (int64_t i = 0; i < q_elems + 2 * GUARD; i++)
            out2[i] = SENTINEL; /* the fused pass left the exact output there */
        int64_t h1 = s->n / 2;
        struct attn_seq two[2] = {
            {.q = q, .out = out2 + GUARD, .table = c.table, .n_tokens = h1, .pos0 = s->pos0},
            {.q = q + h1 * n_head * hd, .out = out2 + GUARD + h1 * n_head * hd,
             .table = c.table, .n_tokens = s->n - h1, .pos0 = s->pos0 + h1},
        };
        p.seqs = two;
        p.n_seqs = 2;
        attn_tiled_run(&p, pool, scratch, stride);
        CHECKF(!memcmp(out, out2, (size_t)(q_elems + 2 * GUARD) * sizeof *out),
               "n=%lld: rows split over two sequences of one call differ from one sequence",
               (long long)s->n);

        /* The last token alone, the only sequence of its call: on several
         * threads its query heads are cut between them (lone rows of a KV
         * head included); its rows must still be the single call's. */
        int64_t last = (s->n - 1) * n_head * hd;
        struct attn_seq one = {.q = q + last, .out = out2 + GUARD + last, .table = c.table,
                               .n_tokens = 1, .pos0 = s->pos0 + s->n - 1};
        for (int64_t i = 0; i < n_head * hd; i++)
            out2[GUARD + last + i] = SENTINEL;
        p.seqs = &one;
        p.n_seqs = 1;
        attn_tiled_run(&p, pool, scratch, stride);
        CHECKF(!memcmp(out + GUARD + last, out2 + GUARD + last,
                       (size_t)(n_head * hd) * sizeof *out),
               "n=%lld pos0=%lld kv_heads=%lld group=%lld hd=%lld, %d threads: the last token "
               "alone differs from the same token in one call", (long long)s->n,
               (long long)s->pos0, (long long)s->n_head_kv, (long long)s->group, (long long)hd,
               threads);
    }

    free(scratch);
    free(naive_f);
    free(ref);
    free(out2);
    free(out);
    free(q);
    free_cache(&c);
}

/* Every shape, on the exact path's attention or the fused one. */
static int run_all(void)
{
    struct ops_pool *pool;
    if (ops_pool_create(2, &pool) != IG_OK)
        return 1;
    static const int64_t ns[] = {1, 2, 63, 64, 65};
    static const int64_t groups[] = {1, 3, 4};
    static const int64_t pos0s[] = {0, 37};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
            for (size_t b = 0; b < sizeof pos0s / sizeof pos0s[0]; b++) {
                struct shape s = {ns[a], pos0s[b], 2, groups[g], 64, KV_F32, 0, 0, 0};
                run_shape(pool, &s);
                s.dtype = KV_F16;
                run_shape(pool, &s);
            }
    /* Long blocks: many K/V tiles, the diagonal inside and across tiles. */
    struct shape big[] = {
        {1000, 0, 1, 3, 64, KV_F32, 0, 0, 0},
        {1000, 129, 1, 1, 64, KV_F16, 0, 0, 0},
        {70, 200, 2, 3, 40, KV_F32, 0, 0, 0}, /* head_dim not a multiple of the column block */
        {1, 1000, 3, 3, 64, KV_F32, 0, 0, 0}, /* one query continuing a long cache */
        /* sliding windows: inside one tile, across tiles, wider than the block */
        {300, 0, 1, 4, 256, KV_F32, 8, 0, 0},   /* Gemma 3's head_dim 256 */
        {200, 37, 2, 2, 64, KV_F16, 70, 0, 0},
        {65, 500, 1, 3, 64, KV_F32, 64, 0, 0},  /* the window one tile long */
        {1, 1000, 2, 1, 64, KV_F32, 512, 0, 0}, /* a decode-like query, Gemma's 512 */
        {130, 0, 2, 1, 64, KV_F32, 1000, 0, 0}, /* wider than the context */
        {100, 20, 1, 2, 64, KV_F32, 0, 50.0f, 0}, /* soft-capped scores */
        {100, 80, 1, 2, 32, KV_F32, 33, 5.0f, 0},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        run_shape(pool, &big[i]);
    /* Quantized caches: K and V of each type and mixed, prompt rows across
     * tiles and a decode-like row (the splits above: bit for bit alone),
     * a window, soft-capping, Gemma 3's head_dim 256. */
    struct shape quant[] = {
        {65, 37, 2, 3, 64, KV_Q8_0, 0, 0, 0},
        {65, 37, 2, 3, 64, KV_Q4_0, 0, 0, 0},
        {2, 200, 2, 3, 64, KV_Q8_0, 0, 0, 1 + KV_Q4_0},
        {2, 200, 3, 3, 64, KV_Q4_0, 0, 0, 1 + KV_F16},
        {70, 30, 1, 2, 64, KV_F32, 50, 0, 1 + KV_Q8_0},
        {40, 100, 1, 2, 32, KV_F16, 33, 5.0f, 1 + KV_Q4_0},
        {70, 0, 1, 4, 256, KV_Q8_0, 8, 0, 0},
    };
    for (size_t i = 0; i < sizeof quant / sizeof quant[0]; i++)
        run_shape(pool, &quant[i]);
    /* Decode rows over an f16 cache (prefill/attn_decode.c where the CPU has
     * F16C): two tokens as one item, then each alone (the splits above), bit
     * for bit; groups in blocks of three and two rows and lone rows, head
     * dims with tails of the column blocks and of the eight lanes, a window
     * starting inside a block, soft-capping, more KV heads than one walk
     * holds. On one thread every KV head of a token is walked together; on
     * two, three and four a lone token's query heads are cut into a part per
     * thread (9 heads as 4 + 5 on two, 2 + 2 + 2 + 3 on four). */
    struct shape dec[] = {
        {2, 1000, 3, 3, 64, KV_F16, 0, 0, 0},  {2, 150, 2, 2, 64, KV_F16, 0, 0, 0},
        {2, 130, 1, 4, 40, KV_F16, 0, 0, 0},   {2, 70, 2, 5, 36, KV_F16, 0, 0, 0},
        {2, 90, 1, 8, 64, KV_F16, 0, 0, 0},    {2, 300, 2, 3, 64, KV_F16, 100, 0, 0},
        {2, 100, 1, 2, 32, KV_F16, 33, 5.0f, 0}, {1, 200, 2, 3, 128, KV_F16, 0, 0, 0},
        {2, 80, 3, 2, 40, KV_F16, 0, 0, 0},    {2, 70, 17, 2, 32, KV_F16, 0, 0, 0},
        {2, 200, 3, 3, 64, KV_F16, 64, 0, 0},
        /* quantized caches (V dequantized in registers, prefill/attn_decode_quant.c;
         * a quantized K scored in its blocks on the int8 path), mixed with f16 */
        {2, 1000, 3, 3, 64, KV_Q8_0, 0, 0, 0},  {2, 1000, 3, 3, 64, KV_Q4_0, 0, 0, 0},
        {2, 150, 2, 2, 64, KV_Q4_0, 0, 0, 0},   {2, 130, 1, 4, 32, KV_Q8_0, 0, 0, 0},
        {2, 300, 2, 3, 64, KV_Q8_0, 100, 0, 1 + KV_Q4_0},
        {2, 100, 1, 2, 32, KV_Q4_0, 33, 5.0f, 1 + KV_Q8_0},
        {1, 200, 2, 3, 128, KV_F16, 0, 0, 1 + KV_Q8_0},
        {2, 90, 1, 8, 96, KV_Q4_0, 0, 0, 1 + KV_F16},
        {2, 70, 17, 2, 32, KV_Q8_0, 0, 0, 0},   {2, 200, 1, 4, 256, KV_Q4_0, 64, 0, 0},
    };
    for (int t = 1; t <= 4; t++) {
        struct ops_pool *dp = pool;
        if (t != 2 && ops_pool_create(t, &dp) != IG_OK)
            return 1;
        for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++)
            run_shape(dp, &dec[i]);
        if (dp != pool)
            ops_pool_free(dp);
    }
    ops_pool_free(pool);
    return 0;
}

int main(void)
{
    if (run_all() != 0)
        return 1;
    fused = true;
    if (run_all() != 0)
        return 1;
    CHECKF(fused_changed > 0, "the fused attention gave the exact one's bits everywhere");
    fprintf(stderr, "fused attention: %lld outputs differ from the exact path's\n",
            (long long)fused_changed);
    return test_summary("test_attn_tiled");
}
