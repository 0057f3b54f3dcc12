/* tests/kvcache/test_kv_model.c: chunked prefill and a saved, reloaded cache
 * on the real model. With an f32 cache the logits of the last position must
 * agree to <= 1e-5 relative (max|a - b| / max|b|):
 *   - chunked = unchunked: one block of N tokens vs chunks of 256 (a block
 *     edge), 100 and 33, N past the first cache block of 256 positions;
 *   - prefix reuse = full prefill: N - 20 tokens prefilled, saved, loaded
 *     into a fresh cache in memory, then the last 20 prefilled;
 *   - resumed = uninterrupted: the loaded logits are the saved ones bit for
 *     bit, and 4 greedy decode steps on the resumed cache give the tokens
 *     and logits of 4 steps on the uninterrupted one.
 * Exits 77 when the model is absent. */
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
#include <string.h>

/* Sanitizer builds run ~30x slower: a prompt inside one block there. */
#if defined(__SANITIZE_ADDRESS__)
#define N_PROMPT 40
#else
#define N_PROMPT 300
#endif
#define N_TAIL 20
#define N_DECODE 4
#define BOUND 1e-5

/* Prefills tokens[0..n) after what kv holds, in chunks of `chunk`. */
static int prefill(struct ops_ctx *ctx, struct kv_cache *kv, const int32_t *tokens, int64_t n,
                   int64_t chunk, float *logits)
{
    int st = IG_OK;
    int64_t pos0 = kv->n_pos;
    for (int64_t p = 0; p < n && st == IG_OK; p += chunk)
        st = prefill_forward(ctx, kv, tokens + p, n - p < chunk ? n - p : chunk, pos0 + p,
                             logits);
    return st;
}

/* N_DECODE greedy steps from `logits`; tokens and every step's logits out. */
static void greedy(struct ops_ctx *ctx, struct kv_cache *kv, const float *logits, int64_t nv,
                   int32_t *tok, float *step_logits)
{
    const float *cur = logits;
    for (int i = 0; i < N_DECODE; i++) {
        tok[i] = test_argmax(cur, nv);
        CHECK(decode_forward(ctx, kv, tok[i], kv->n_pos, step_logits + i * nv) == IG_OK);
        cur = step_logits + i * nv;
    }
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
    int64_t nv = m->hp.n_vocab, n_ctx = N_PROMPT + N_DECODE;
    int32_t prompt[N_PROMPT];
    uint32_t x = 777;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 1664525u + 1013904223u;
        prompt[i] = (int32_t)((x >> 8) % (uint32_t)nv);
    }
    float *whole = malloc((size_t)nv * sizeof *whole), *part = malloc((size_t)nv * sizeof *part);
    float *dec_a = malloc((size_t)(N_DECODE * nv) * sizeof *dec_a);
    float *dec_b = malloc((size_t)(N_DECODE * nv) * sizeof *dec_b);

    /* the reference: one block of N_PROMPT tokens */
    struct kv_cache *ref;
    CHECK(kv_cache_create(&m->hp, n_ctx, KV_F32, NULL, &ref) == IG_OK);
    CHECK(prefill(ctx, ref, prompt, N_PROMPT, N_PROMPT, whole) == IG_OK);

    static const int64_t chunks[] = {256, 100, 33};
    for (size_t j = 0; j < sizeof chunks / sizeof chunks[0]; j++) {
        if (chunks[j] >= N_PROMPT)
            continue;
        struct kv_cache *kv;
        CHECK(kv_cache_create(&m->hp, n_ctx, KV_F32, NULL, &kv) == IG_OK);
        CHECK(prefill(ctx, kv, prompt, N_PROMPT, chunks[j], part) == IG_OK);
        double e = test_rel_err(part, whole, nv);
        CHECKF(e <= BOUND, "chunks of %lld vs one block of %d: relative error %.3e",
               (long long)chunks[j], N_PROMPT, e);
        fprintf(stderr, "chunks of %lld vs one block: %.2e\n", (long long)chunks[j], e);
        kv_cache_free(kv);
    }

    /* save after N - N_TAIL tokens, load into a fresh cache, prefill the tail */
    struct kv_cache *head, *back;
    int64_t n_head = N_PROMPT - N_TAIL;
    CHECK(kv_cache_create(&m->hp, n_ctx, KV_F32, NULL, &head) == IG_OK);
    CHECK(prefill(ctx, head, prompt, n_head, 64, part) == IG_OK);
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f && kv_file_write(f, "mem", head, id, prompt, part, nv) == IG_OK);
    fclose(f);
    kv_cache_free(head);

    f = fmemopen(buf, len, "rb");
    struct kv_file_reader r;
    int32_t loaded[N_PROMPT];
    float *loaded_logits = malloc((size_t)nv * sizeof *loaded_logits);
    CHECK(kv_file_read_header(&r, f, "mem", &m->hp, id) == IG_OK);
    CHECK(kv_cache_create(&m->hp, n_ctx, r.hdr.dtype, NULL, &back) == IG_OK);
    CHECK(kv_file_read_body(&r, back, loaded, loaded_logits) == IG_OK);
    fclose(f);
    CHECK(back->n_pos == n_head && !memcmp(loaded, prompt, (size_t)n_head * sizeof *loaded));
    CHECK(!memcmp(loaded_logits, part, (size_t)nv * sizeof *part));
    CHECK(prefill(ctx, back, prompt + n_head, N_TAIL, N_TAIL, part) == IG_OK);
    double e = test_rel_err(part, whole, nv);
    CHECKF(e <= BOUND, "prefix reuse (%lld loaded + %d) vs full prefill: %.3e",
           (long long)n_head, N_TAIL, e);
    fprintf(stderr, "prefix reuse vs full prefill: %.2e\n", e);

    int32_t tok_a[N_DECODE], tok_b[N_DECODE];
    greedy(ctx, ref, whole, nv, tok_a, dec_a);
    greedy(ctx, back, part, nv, tok_b, dec_b);
    CHECKF(!memcmp(tok_a, tok_b, sizeof tok_a), "greedy tokens after resume: %d %d %d %d vs "
           "%d %d %d %d", tok_b[0], tok_b[1], tok_b[2], tok_b[3], tok_a[0], tok_a[1], tok_a[2],
           tok_a[3]);
    e = test_rel_err(dec_b, dec_a, N_DECODE * nv);
    CHECKF(e <= BOUND, "decode after resume vs uninterrupted: %.3e", e);

    free(loaded_logits);
    free(buf);
    kv_cache_free(back);
    kv_cache_free(ref);
    free(dec_b);
    free(dec_a);
    free(part);
    free(whole);
    ops_ctx_free(ctx);
    model_free(m);
    return test_summary("test_kv_model");
}
