/* tests/kvcache/test_kv_model.c: chunked prefill and a saved, reloaded cache
 * on the real model and the CPU backend, bit for bit:
 *   - chunked = unchunked: one block of N tokens vs chunks of 256, 100 and
 *     33, N past several cache blocks;
 *   - prefix reuse = full prefill: N - 20 tokens prefilled, saved, loaded
 *     into other blocks of the pool in memory, then the last 20 prefilled;
 *   - resumed = uninterrupted: the loaded logits are the saved ones, and 4
 *     greedy decode steps on the resumed cache give the tokens and logits of
 *     4 steps on the uninterrupted one.
 * Exits 77 when the model is absent. */
#include "backend/backend.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "tests/cpu/model_path.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

/* Sanitizer builds run ~30x slower: a shorter prompt there (still across a block edge). */
#if defined(__SANITIZE_ADDRESS__)
#define N_PROMPT 70
#else
#define N_PROMPT 300
#endif
#define N_TAIL 20
#define N_DECODE 4

/* Prefills tokens[0..n) at positions pos0.. of `table`, in chunks of `chunk`. */
static int prefill(struct backend *be, const int32_t *table, int slot, const int32_t *tokens,
                   int64_t n, int64_t pos0, int64_t chunk, float *logits)
{
    int st = IG_OK;
    for (int64_t p = 0; p < n && st == IG_OK; p += chunk)
        st = backend_run_seq(be, table, slot, tokens + p, n - p < chunk ? n - p : chunk,
                             pos0 + p, logits);
    return st;
}

/* N_DECODE greedy steps from `logits` at position pos; tokens and every step's logits out. */
static void greedy(struct backend *be, const int32_t *table, int slot, int64_t pos,
                   const float *logits, int64_t nv, int32_t *tok, float *step_logits)
{
    const float *cur = logits;
    for (int i = 0; i < N_DECODE; i++) {
        tok[i] = test_argmax(cur, nv);
        CHECK(backend_run_seq(be, table, slot, &tok[i], 1, pos + i, step_logits + i * nv) == IG_OK);
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
    test_sanitized_depth(m);
    int64_t nv = m->hp.n_vocab, n_ctx = N_PROMPT + N_DECODE, nb = kv_blocks_for(n_ctx);
    struct backend *be;
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = n_ctx,
                             .max_rows = N_PROMPT, .n_slots = 2, .kv_dtype = KV_F32};
    if (backend_create(m, &o, &be) != IG_OK)
        return 1;
    /* slot 0 in blocks 0.., slot 1 in the blocks after them, in reverse */
    int32_t *ta = malloc((size_t)nb * sizeof *ta), *tb = malloc((size_t)nb * sizeof *tb);
    for (int64_t b = 0; b < nb; b++)
        ta[b] = (int32_t)b, tb[b] = (int32_t)(2 * nb - 1 - b);
    int32_t prompt[N_PROMPT];
    uint32_t x = 777;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 1664525u + 1013904223u;
        prompt[i] = (int32_t)((x >> 8) % (uint32_t)nv);
    }
    float *whole = malloc((size_t)nv * sizeof *whole), *part = malloc((size_t)nv * sizeof *part);
    float *dec_a = malloc((size_t)(N_DECODE * nv) * sizeof *dec_a);
    float *dec_b = malloc((size_t)(N_DECODE * nv) * sizeof *dec_b);

    static const int64_t chunks[] = {256, 100, 33};
    for (size_t j = 0; j < sizeof chunks / sizeof chunks[0]; j++) {
        if (chunks[j] >= N_PROMPT)
            continue;
        CHECK(prefill(be, ta, 0, prompt, N_PROMPT, 0, chunks[j], part) == IG_OK);
        CHECK(prefill(be, ta, 0, prompt, N_PROMPT, 0, N_PROMPT, whole) == IG_OK);
        CHECKF(!memcmp(part, whole, (size_t)nv * sizeof *part), "chunks of %lld vs one block "
               "of %d differ (relative %.3e)", (long long)chunks[j], N_PROMPT,
               test_rel_err(part, whole, nv));
    }
    /* the reference: one block of N_PROMPT tokens (slot 0 holds it now) */
    CHECK(prefill(be, ta, 0, prompt, N_PROMPT, 0, N_PROMPT, whole) == IG_OK);

    /* slot 1: N - N_TAIL tokens, saved; its blocks overwritten with other
     * rows; the file loaded into a fresh store and back into slot 1; the
     * tail prefilled */
    int64_t n_head = N_PROMPT - N_TAIL;
    CHECK(prefill(be, tb, 1, prompt, n_head, 0, 64, part) == IG_OK);
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    struct backend_seq sb = {.table = tb, .slot = 1};
    const struct kv_store *st;
    const int32_t *stable;
    int64_t sslot;
    CHECK(backend_kv_export(be, &sb, n_head, &st, &stable, &sslot) == IG_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f && kv_file_write(f, "mem", st, stable, sslot, n_head, id, prompt, part, nv) ==
                   IG_OK);
    fclose(f);
    CHECK(prefill(be, tb, 1, prompt + 5, n_head, 0, 64, dec_b) == IG_OK); /* overwrite slot 1 */

    f = fmemopen(buf, len, "rb");
    struct kv_file_reader r;
    int32_t loaded[N_PROMPT];
    float *loaded_logits = malloc((size_t)nv * sizeof *loaded_logits);
    struct kv_store *back = NULL;
    CHECK(kv_file_read_header(&r, f, "mem", backend_kv_memory(be), nv, id) == IG_OK);
    CHECK(kv_file_read_body(&r, &back, loaded, loaded_logits) == IG_OK);
    fclose(f);
    CHECK(r.hdr.n_tokens == n_head && !memcmp(loaded, prompt, (size_t)n_head * sizeof *loaded));
    CHECK(!memcmp(loaded_logits, part, (size_t)nv * sizeof *part));
    CHECK(backend_kv_import(be, &sb, back, n_head) == IG_OK);
    CHECK(prefill(be, tb, 1, prompt + n_head, N_TAIL, n_head, N_TAIL, part) == IG_OK);
    CHECKF(!memcmp(part, whole, (size_t)nv * sizeof *part), "prefix reuse (%lld loaded + %d) "
           "vs full prefill differ (relative %.3e)", (long long)n_head, N_TAIL,
           test_rel_err(part, whole, nv));

    int32_t tok_a[N_DECODE], tok_b[N_DECODE];
    greedy(be, ta, 0, N_PROMPT, whole, nv, tok_a, dec_a);
    greedy(be, tb, 1, N_PROMPT, part, nv, tok_b, dec_b);
    CHECKF(!memcmp(tok_a, tok_b, sizeof tok_a), "greedy tokens after resume: %d %d %d %d vs "
           "%d %d %d %d", tok_b[0], tok_b[1], tok_b[2], tok_b[3], tok_a[0], tok_a[1], tok_a[2],
           tok_a[3]);
    CHECKF(!memcmp(dec_a, dec_b, (size_t)(N_DECODE * nv) * sizeof *dec_a),
           "decode after resume vs uninterrupted differ (relative %.3e)",
           test_rel_err(dec_b, dec_a, N_DECODE * nv));

    kv_store_free(back);
    free(loaded_logits);
    free(buf);
    free(dec_b);
    free(dec_a);
    free(part);
    free(whole);
    free(tb);
    free(ta);
    backend_free(be);
    model_free(m);
    return test_summary("test_kv_model");
}
