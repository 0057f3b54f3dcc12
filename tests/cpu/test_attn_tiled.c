/* tests/cpu/test_attn_tiled.c: the tiled prefill attention against a plain
 * fp64 softmax(Q K^T / sqrt(d)) V with a causal mask, on seeded random inputs
 * over ragged shapes: query counts around the tile sizes (1, 2, 63, 64, 65,
 * 1000), GQA ratios 1, 3 and 4, an empty and a non-empty cache (pos0 > 0),
 * f32 and f16 caches, and a head_dim that is not a multiple of the column
 * block; sliding windows shorter and longer than a key tile, crossing tiles
 * and chunk edges (the keys behind every query's window are NaN, so a kernel
 * that reads them fails), and soft-capped scores. The bound is flash-attention's rule: at most twice the error of a
 * naive f32 implementation against fp64 (plus a floor of 1e-6 relative).
 * Guard bands around the output catch writes out of bounds. */
#include "core/half.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "ops/ops.h"
#include "prefill/attn_tiled.h"
#include "tests/test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define SENTINEL 12345.0f

static uint64_t rng_state = 0x9e3779b97f4a7c15ull; /* test_rand_f's stream */

struct shape {
    int64_t n, pos0, n_head_kv, group, head_dim;
    enum kv_dtype dtype;
    int64_t window; /* 0: none */
    float softcap;  /* 0: none */
};

/* K or V element as the kernel sees it (f16-rounded for an f16 cache). */
static double cache_value(const void *base, enum kv_dtype dt, int64_t i)
{
    return dt == KV_F32 ? ((const float *)base)[i] : ig_f16_to_f32(((const ig_f16 *)base)[i]);
}

/* References in one pass: ref = the exact result in double, naive = what a
 * straightforward f32 kernel computes (the yardstick of the error bound). */
static void reference(const struct shape *s, const float *q, const void *k, const void *v,
                      int64_t n_ctx, double *ref, float *naive)
{
    int64_t n_head = s->n_head_kv * s->group, hd = s->head_dim;
    int64_t n_keys_max = s->pos0 + s->n;
    double *p = malloc((size_t)n_keys_max * sizeof *p);
    float *pf = malloc((size_t)n_keys_max * sizeof *pf);
    for (int64_t t = 0; t < s->n; t++) {
        int64_t nk = s->pos0 + t + 1;
        int64_t j0 = s->window && nk > s->window ? nk - s->window : 0;
        for (int64_t h = 0; h < n_head; h++) {
            int64_t base = (h / s->group) * n_ctx * hd;
            const float *qv = q + (t * n_head + h) * hd;
            double mx = -INFINITY;
            float mxf = -INFINITY;
            for (int64_t j = j0; j < nk; j++) {
                double dot = 0;
                float dotf = 0;
                for (int64_t d = 0; d < hd; d++) {
                    double kv = cache_value(k, s->dtype, base + j * hd + d);
                    dot += (double)qv[d] * kv;
                    dotf += qv[d] * (float)kv;
                }
                p[j] = dot / sqrt((double)hd);
                pf[j] = dotf / sqrtf((float)hd);
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
                    double vv = cache_value(v, s->dtype, base + j * hd + d);
                    acc += p[j] * vv;
                    accf += pf[j] * (float)vv;
                }
                ref[(t * n_head + h) * hd + d] = acc / sum;
                naive[(t * n_head + h) * hd + d] = accf / sumf;
            }
        }
    }
    free(pf);
    free(p);
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

static void run_shape(struct ops_pool *pool, const struct shape *s)
{
    int64_t n_head = s->n_head_kv * s->group, hd = s->head_dim;
    int64_t n_ctx = s->pos0 + s->n + 3; /* slack: the kernel must not read it */
    int64_t q_elems = s->n * n_head * hd, kv_elems = s->n_head_kv * n_ctx * hd;
    size_t eb = kv_dtype_bytes(s->dtype);

    float *q = malloc((size_t)q_elems * sizeof *q);
    void *k = malloc((size_t)kv_elems * eb), *v = malloc((size_t)kv_elems * eb);
    float *out = malloc((size_t)(q_elems + 2 * GUARD) * sizeof *out);
    double *ref = malloc((size_t)q_elems * sizeof *ref);
    float *naive_f = malloc((size_t)q_elems * sizeof *naive_f);
    int threads = ops_pool_threads(pool);
    int64_t stride = attn_tiled_scratch_floats(n_head, s->n_head_kv, hd);
    float *scratch = malloc((size_t)(stride * threads) * sizeof *scratch);

    /* Scores of a few units make the softmax neither flat nor one-hot. */
    for (int64_t i = 0; i < q_elems; i++)
        q[i] = 2.0f * test_rand_f(&rng_state);
    for (int64_t i = 0; i < kv_elems; i++) {
        float kx = 2.0f * test_rand_f(&rng_state), vx = test_rand_f(&rng_state);
        if (s->dtype == KV_F32) {
            ((float *)k)[i] = kx;
            ((float *)v)[i] = vx;
        } else {
            ((ig_f16 *)k)[i] = ig_f32_to_f16(kx);
            ((ig_f16 *)v)[i] = ig_f32_to_f16(vx);
        }
    }
    /* Keys behind the first query's window: no query may read them. */
    int64_t hidden = s->window && s->pos0 + 1 > s->window ? s->pos0 + 1 - s->window : 0;
    for (int64_t h = 0; h < s->n_head_kv; h++)
        for (int64_t i = h * n_ctx * hd; i < (h * n_ctx + hidden) * hd; i++) {
            if (s->dtype == KV_F32) {
                ((float *)k)[i] = ((float *)v)[i] = NAN;
            } else {
                ((ig_f16 *)k)[i] = ((ig_f16 *)v)[i] = ig_f32_to_f16(NAN);
            }
        }
    for (int64_t i = 0; i < q_elems + 2 * GUARD; i++)
        out[i] = SENTINEL;

    struct attn_params p = {
        .q = q, .q_tok_stride = n_head * hd, .k_blocks = &k, .v_blocks = &v,
        .block_size = n_ctx, .kv_dtype = s->dtype, .kv_head_stride = n_ctx * hd, .out = out + GUARD, .out_tok_stride = n_head * hd,
        .n_tokens = s->n, .pos0 = s->pos0, .n_head = n_head, .n_head_kv = s->n_head_kv,
        .head_dim = hd, .scale = (float)(1.0 / sqrt((double)hd)), .window = s->window,
        .softcap = s->softcap,
    };
    attn_tiled_run(&p, pool, scratch, stride);

    reference(s, q, k, v, n_ctx, ref, naive_f);

    double ref_max, naive_max;
    double err = max_abs_diff(ref, out + GUARD, q_elems, &ref_max) / ref_max;
    double naive_err = max_abs_diff(ref, naive_f, q_elems, &naive_max) / ref_max;
    double bound = 2.0 * naive_err + 1e-6;
    CHECKF(err <= bound, "n=%lld pos0=%lld kv_heads=%lld group=%lld hd=%lld %s window %lld "
           "softcap %g: relative error %.3e > %.3e (naive f32 %.3e)", (long long)s->n,
           (long long)s->pos0, (long long)s->n_head_kv, (long long)s->group, (long long)hd,
           s->dtype == KV_F32 ? "f32" : "f16", (long long)s->window, (double)s->softcap, err,
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

    free(scratch);
    free(naive_f);
    free(ref);
    free(out);
    free(v);
    free(k);
    free(q);
}

int main(void)
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
                struct shape s = {ns[a], pos0s[b], 2, groups[g], 64, KV_F32, 0, 0};
                run_shape(pool, &s);
                s.dtype = KV_F16;
                run_shape(pool, &s);
            }
    /* Long blocks: many K/V tiles, the diagonal inside and across tiles. */
    struct shape big[] = {
        {1000, 0, 1, 3, 64, KV_F32, 0, 0},
        {1000, 129, 1, 1, 64, KV_F16, 0, 0},
        {70, 200, 2, 3, 40, KV_F32, 0, 0}, /* head_dim not a multiple of the column block */
        {1, 1000, 3, 3, 64, KV_F32, 0, 0}, /* one query continuing a long cache */
        /* sliding windows: inside one tile, across tiles, wider than the block */
        {300, 0, 1, 4, 256, KV_F32, 8, 0},   /* Gemma 3's head_dim 256 */
        {200, 37, 2, 2, 64, KV_F16, 70, 0},
        {65, 500, 1, 3, 64, KV_F32, 64, 0},  /* the window one tile long */
        {1, 1000, 2, 1, 64, KV_F32, 512, 0}, /* a decode-like query, Gemma's 512 */
        {130, 0, 2, 1, 64, KV_F32, 1000, 0}, /* wider than the context */
        {100, 20, 1, 2, 64, KV_F32, 0, 50.0f}, /* soft-capped scores */
        {100, 80, 1, 2, 32, KV_F32, 33, 5.0f},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        run_shape(pool, &big[i]);
    ops_pool_free(pool);
    return test_summary("test_attn_tiled");
}
