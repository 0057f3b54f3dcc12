/* tests/cpu/test_prefill_decode.c: the batched prefill against one-token
 * decode steps on the real model. Both fill the cache the same way but share
 * no attention code, so the logits of the last position must agree to
 * <= 1e-5 relative (max|a - b| / max|b|) with an f32 cache: prefill of the
 * first n tokens vs n decode steps, for several n, and prefill in chunks vs
 * in one block; the same with an f16 cache within 1e-3 and the same top-1. Also checks the errors: a token id outside the vocabulary
 * and a block past the context. Exits 77 when the model is absent. */
#include "core/status.h"
#include "decode/decode.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "ops/ops.h"
#include "prefill/prefill.h"
#include "tests/cpu/model_path.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>

/* Sanitizer builds run the kernels unvectorized and checked, ~30x slower:
 * there a shorter prompt (still across query tiles) and the f32 cache only. */
#if defined(__SANITIZE_ADDRESS__)
#define N_PROMPT 18
#define CHECK_F16 0
#else
#define N_PROMPT 70
#define CHECK_F16 1
#endif
/* An f16 cache rounds K and V; the two paths' f32 values differ in the last
 * bits, so a few elements round to neighbouring f16 values (5e-4 apart). */
#define BOUND_F32 1e-5
#define BOUND_F16 1e-3

/* Prefills prompt[0..n) in chunks of `chunk` into a fresh cache. */
static int prefill_chunks(struct ops_ctx *ctx, const struct model *m, enum kv_dtype dt,
                          const int32_t *prompt, int64_t n, int64_t chunk, float *logits)
{
    struct kv_cache *kv;
    int st = kv_cache_create(&m->hp, N_PROMPT, dt, NULL, &kv);
    for (int64_t p = 0; p < n && st == IG_OK; p += chunk)
        st = prefill_forward(ctx, kv, prompt + p, n - p < chunk ? n - p : chunk, p, logits);
    if (st == IG_OK)
        CHECK(kv->n_pos == n);
    kv_cache_free(kv);
    return st;
}

static void check_dtype(struct ops_ctx *ctx, const struct model *m, enum kv_dtype dt,
                        const int32_t *prompt)
{
    int64_t nv = m->hp.n_vocab;
    const char *dname = dt == KV_F32 ? "f32" : "f16";
    double bound = dt == KV_F32 ? BOUND_F32 : BOUND_F16;
    float *dec = malloc((size_t)(N_PROMPT * nv) * sizeof *dec); /* decode logits per step */
    float *pre = malloc((size_t)nv * sizeof *pre);
    float *whole = malloc((size_t)nv * sizeof *whole);

    struct kv_cache *kv;
    CHECK(kv_cache_create(&m->hp, N_PROMPT, dt, NULL, &kv) == IG_OK);
    for (int64_t i = 0; i < N_PROMPT; i++)
        CHECK(decode_forward(ctx, kv, prompt[i], i, dec + i * nv) == IG_OK);
    CHECK(kv->n_pos == N_PROMPT);
    kv_cache_free(kv);

    /* Lengths around the query tile (16) and the key tile (64); the last is
     * the whole prompt, kept in `whole` for the chunked runs below. */
    static const int64_t lens_f32[] = {1, 17, 64, 65, N_PROMPT}, lens_f16[] = {17, N_PROMPT};
    const int64_t *lens = dt == KV_F32 ? lens_f32 : lens_f16;
    size_t n_lens = dt == KV_F32 ? sizeof lens_f32 / sizeof lens_f32[0] : 2;
    for (size_t j = 0; j < n_lens; j++) {
        int64_t n = lens[j];
        if (n > N_PROMPT || (n == N_PROMPT && j + 1 < n_lens))
            continue;
        float *dst = n == N_PROMPT ? whole : pre;
        CHECK(prefill_chunks(ctx, m, dt, prompt, n, n, dst) == IG_OK);
        double e = test_rel_err(dst, dec + (n - 1) * nv, nv);
        CHECKF(e <= bound, "%s cache: prefill of %lld tokens vs %lld decode steps: "
               "relative error %.3e", dname, (long long)n, (long long)n, e);
        CHECKF(test_argmax(dst, nv) == test_argmax(dec + (n - 1) * nv, nv), "%s cache, n=%lld: top-1 "
               "%lld vs %lld", dname, (long long)n, (long long)test_argmax(dst, nv),
               (long long)test_argmax(dec + (n - 1) * nv, nv));
        fprintf(stderr, "%s cache, n=%lld: prefill vs decode %.2e\n", dname, (long long)n, e);
    }

    static const int64_t chunks[] = {7, 64};
    for (size_t j = 0; j < (dt == KV_F32 ? 2u : 1u) && chunks[j] < N_PROMPT; j++) {
        CHECK(prefill_chunks(ctx, m, dt, prompt, N_PROMPT, chunks[j], pre) == IG_OK);
        double e = test_rel_err(pre, whole, nv);
        CHECKF(e <= bound, "%s cache: prefill in chunks of %lld vs one block: %.3e", dname,
               (long long)chunks[j], e);
    }
    free(whole);
    free(pre);
    free(dec);
}

static void check_errors(struct ops_ctx *ctx, const struct model *m)
{
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    struct kv_cache *kv;
    CHECK(kv_cache_create(&m->hp, 4, KV_F32, NULL, &kv) == IG_OK);
    int32_t bad[2] = {5, (int32_t)m->hp.n_vocab};
    fprintf(stderr, "(two error lines expected)\n");
    CHECK(prefill_forward(ctx, kv, bad, 2, 0, logits) == IG_E_INPUT);
    int32_t ok[5] = {1, 2, 3, 4, 5};
    CHECK(prefill_forward(ctx, kv, ok, 5, 0, logits) == IG_E_INPUT); /* past n_ctx */
    CHECK(prefill_forward(ctx, kv, ok, 4, 0, logits) == IG_OK);
    CHECK(kv->n_pos == 4);
    kv_cache_free(kv);
    free(logits);
}

int main(void)
{
    char path[4096];
    if (test_model_path(path, sizeof path) != 0)
        return TEST_SKIP;
    struct model *m;
    if (model_load(path, &m) != IG_OK)
        return 1;
    struct ops_ctx *ctx;
    if (ops_ctx_create(m, 2, N_PROMPT, &ctx) != IG_OK)
        return 1;

    int32_t prompt[N_PROMPT];
    uint32_t x = 12345;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 1664525u + 1013904223u;
        prompt[i] = (int32_t)((x >> 8) % (uint32_t)m->hp.n_vocab);
    }
    check_dtype(ctx, m, KV_F32, prompt);
    if (CHECK_F16)
        check_dtype(ctx, m, KV_F16, prompt);
    check_errors(ctx, m);

    ops_ctx_free(ctx);
    model_free(m);
    return test_summary("test_prefill_decode");
}
