/* tests/cpu/test_prefill_decode.c: a row's logits do not depend on the step
 * it runs in, on the real model and the CPU backend, bit for bit:
 *   - a prompt as one-row steps (what decode does), as one block (every
 *     row's logits), as blocks of 1, 17, 64, 65 (the last row's) and in
 *     chunks (7, 64) gives the same logits at every position checked;
 *   - three sequences whose rows share steps in a ragged interleaving
 *     (prompt chunks beside decode rows, blocks of the pool in any order)
 *     give each the logits it gets alone (sequence 0 in one-row steps, the
 *     others as one block);
 * with an f32 and an f16 cache, on the exact f32 path and on the default
 * int8 path, and with quantized caches (q4_0 K and q8_0 V on the int8 path,
 * q8_0 K and q4_0 V on the exact one). That is what makes `ignite batch` give every request the
 * tokens `ignite run` gives it alone. Also checks the errors: a token id
 * outside the vocabulary. Exits 77 when the model is absent. */
#include "backend/backend.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "tests/cpu/model_path.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

/* Sanitizer builds run the kernels unvectorized and checked, ~30x slower:
 * there a shorter prompt. Both cross query tiles and a block edge; the
 * sequences' tokens are the prompt's first ones for sequence 0, so its
 * one-row logits are computed once. */
#if defined(__SANITIZE_ADDRESS__)
#define N_PROMPT 70
#define N_SEQ_TOKENS 30
#else
#define N_PROMPT 100
#define N_SEQ_TOKENS 60
#endif
#define N_SLOTS 3

struct fixture {
    const struct model *m;
    struct backend *be;
    int64_t nv;
    int32_t table[N_SLOTS][8]; /* each slot's blocks, scattered over the pool */
};

static int make_backend(struct fixture *f, enum kv_dtype dt, enum kv_dtype dv, bool exact,
                        int64_t max_rows)
{
    backend_free(f->be);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2,
                             .n_ctx = 8 * KV_BLOCK, .max_rows = max_rows, .n_slots = N_SLOTS,
                             .kv_dtype = dt, .kv_dtype_v = dv, .exact = exact};
    return backend_create(f->m, &o, &f->be);
}

/* Logits after prompt[0..n) for slot 0, fed in chunks of `chunk` rows. */
static void run_chunks(struct fixture *f, const int32_t *prompt, int64_t n, int64_t chunk,
                       float *logits)
{
    for (int64_t p = 0; p < n; p += chunk)
        CHECK(backend_run_seq(f->be, f->table[0], 0, prompt + p, n - p < chunk ? n - p : chunk,
                              p, logits) == IG_OK);
}

static bool same(const float *a, const float *b, int64_t n)
{
    return !memcmp(a, b, (size_t)n * sizeof *a);
}

/* One prompt: one block, chunks, one-row steps (left in `steps`). */
static void check_chunking(struct fixture *f, const int32_t *prompt, float *steps,
                           const char *what)
{
    int64_t nv = f->nv;
    float *got = malloc((size_t)nv * sizeof *got);
    for (int64_t i = 0; i < N_PROMPT; i++)
        CHECK(backend_run_seq(f->be, f->table[0], 0, prompt + i, 1, i, steps + i * nv) == IG_OK);
    /* The whole prompt as one block with every row's logits: each row = its
     * one-row step (check_interleaved relies on it). */
    bool *all = malloc(N_PROMPT * sizeof *all);
    float *rows = malloc((size_t)(N_PROMPT * nv) * sizeof *rows);
    for (int64_t i = 0; i < N_PROMPT; i++)
        all[i] = true;
    struct backend_seq seq = {.table = f->table[0], .slot = 0, .n_rows = N_PROMPT};
    struct backend_batch b = {.tokens = prompt, .want_logits = all, .n_rows = N_PROMPT,
                              .seqs = &seq, .n_seqs = 1, .logits = rows};
    CHECK(backend_step(f->be, &b) == IG_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < N_PROMPT; i++)
        if (!same(rows + i * nv, steps + i * nv, nv) && bad++ < 3)
            CHECKF(0, "%s: row %lld of one block of %d tokens differs from its one-row step "
                   "(relative %.3e)", what, (long long)i, N_PROMPT,
                   test_rel_err(rows + i * nv, steps + i * nv, nv));
    free(rows);
    free(all);
    /* Blocks of lengths around the query tile (16) and the key tile / block
     * (64), only their last row's logits. */
    static const int64_t lens[] = {1, 17, 64, 65};
    for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
        int64_t n = lens[j];
        run_chunks(f, prompt, n, n, got);
        CHECKF(same(got, steps + (n - 1) * nv, nv), "%s: one block of %lld tokens vs %lld "
               "one-row steps differ (relative %.3e)", what, (long long)n, (long long)n,
               test_rel_err(got, steps + (n - 1) * nv, nv));
    }
    static const int64_t chunks[] = {7, 64};
    for (size_t j = 0; j < 2; j++) {
        run_chunks(f, prompt, N_PROMPT, chunks[j], got);
        CHECKF(same(got, steps + (N_PROMPT - 1) * nv, nv), "%s: chunks of %lld differ from "
               "one-row steps (relative %.3e)", what, (long long)chunks[j],
               test_rel_err(got, steps + (N_PROMPT - 1) * nv, nv));
    }
    free(got);
}

/* Three sequences, each alone and then interleaved in shared steps;
 * sequence 0's logits alone are check_chunking's one-row `steps`, the
 * others' one block each with every row's logits (check_chunking proves a
 * block's rows = one-row steps, so no second set of one-row steps). */
static void check_interleaved(struct fixture *f, int32_t prompts[N_SLOTS][N_SEQ_TOKENS],
                              const float *steps, const char *what)
{
    int64_t nv = f->nv;
    float *alone = malloc((size_t)(N_SLOTS * N_SEQ_TOKENS * nv) * sizeof *alone);
    float *logits = malloc((size_t)(N_SLOTS * 64 * nv) * sizeof *logits);
    memcpy(alone, steps, (size_t)(N_SEQ_TOKENS * nv) * sizeof *alone);
    bool all[N_SEQ_TOKENS];
    for (int64_t i = 0; i < N_SEQ_TOKENS; i++)
        all[i] = true;
    for (int s = 1; s < N_SLOTS; s++) {
        struct backend_seq seq = {.table = f->table[s], .slot = s, .n_rows = N_SEQ_TOKENS};
        struct backend_batch b = {.tokens = prompts[s], .want_logits = all,
                                  .n_rows = N_SEQ_TOKENS, .seqs = &seq, .n_seqs = 1,
                                  .logits = alone + s * N_SEQ_TOKENS * nv};
        CHECK(backend_step(f->be, &b) == IG_OK);
    }

    /* Each step, sequence s takes a ragged number of rows (a prompt chunk or
     * a lone row) until it has all its tokens; every row wants logits. */
    int64_t done[N_SLOTS] = {0}, step = 0;
    int mismatches = 0;
    for (;;) {
        int32_t tokens[64];
        bool want[64];
        struct backend_seq seqs[N_SLOTS];
        int64_t rows = 0, n_seqs = 0;
        for (int s = 0; s < N_SLOTS; s++) {
            int64_t k = (step * 5 + s * 3) % 11 + (s == 1 ? 0 : 1); /* 0..11 rows */
            if (k > N_SEQ_TOKENS - done[s])
                k = N_SEQ_TOKENS - done[s];
            if (!k)
                continue;
            seqs[n_seqs++] = (struct backend_seq){.table = f->table[s], .slot = s, .row0 = rows,
                                                  .n_rows = k, .pos0 = done[s]};
            for (int64_t i = 0; i < k; i++) {
                tokens[rows + i] = prompts[s][done[s] + i];
                want[rows + i] = true;
            }
            rows += k;
        }
        if (!n_seqs)
            break;
        struct backend_batch b = {.tokens = tokens, .want_logits = want, .n_rows = rows,
                                  .seqs = seqs, .n_seqs = n_seqs, .logits = logits};
        CHECK(backend_step(f->be, &b) == IG_OK);
        for (int64_t i = 0; i < n_seqs; i++) {
            int s = seqs[i].slot;
            for (int64_t r = 0; r < seqs[i].n_rows; r++) {
                const float *a = logits + (seqs[i].row0 + r) * nv;
                const float *e = alone + (s * N_SEQ_TOKENS + seqs[i].pos0 + r) * nv;
                if (!same(a, e, nv) && mismatches++ < 5)
                    CHECKF(0, "%s: step %lld, sequence %d, position %lld: the logits differ "
                           "from its run alone (relative %.3e)", what, (long long)step, s,
                           (long long)(seqs[i].pos0 + r), test_rel_err(a, e, nv));
            }
            done[s] += seqs[i].n_rows;
        }
        step++;
    }
    CHECKF(mismatches == 0, "%s: %d rows differ in all", what, mismatches);
    free(logits);
    free(alone);
}

static void check_errors(struct fixture *f)
{
    float *logits = malloc((size_t)f->nv * sizeof *logits);
    int32_t bad[2] = {5, (int32_t)f->nv};
    fprintf(stderr, "(an error line expected)\n");
    CHECK(backend_run_seq(f->be, f->table[0], 0, bad, 2, 0, logits) == IG_E_INPUT);
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
    test_sanitized_depth(m);
    struct fixture f = {.m = m, .nv = m->hp.n_vocab};
    /* Blocks of the three slots interleaved and out of order in the pool. */
    for (int s = 0; s < N_SLOTS; s++)
        for (int b = 0; b < 8; b++)
            f.table[s][b] = (int32_t)((7 - b) * N_SLOTS + (s + b) % N_SLOTS);

    int32_t prompt[N_PROMPT], prompts[N_SLOTS][N_SEQ_TOKENS];
    uint32_t x = 12345;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 1664525u + 1013904223u;
        prompt[i] = (int32_t)((x >> 8) % (uint32_t)m->hp.n_vocab);
    }
    memcpy(prompts[0], prompt, sizeof prompts[0]);
    for (int s = 1; s < N_SLOTS; s++)
        for (int i = 0; i < N_SEQ_TOKENS; i++) {
            x = x * 1664525u + 1013904223u;
            prompts[s][i] = (int32_t)((x >> 8) % (uint32_t)m->hp.n_vocab);
        }

    static const struct {
        enum kv_dtype dt, dv;
        bool exact;
        const char *name;
    } modes[] = {{KV_F32, KV_F32, true, "exact, f32 cache"},
                 {KV_F32, KV_F32, false, "int8, f32 cache"},
                 {KV_F16, KV_F16, false, "int8, f16 cache"},
                 {KV_F16, KV_F16, true, "exact, f16 cache"},
                 /* quantized rows: the int8 path's int8 scores of a q4_0 K, the
                  * exact path's f32 over dequantized blocks */
                 {KV_Q4_0, KV_Q8_0, false, "int8, q4_0 K / q8_0 V cache"},
                 {KV_Q8_0, KV_Q4_0, true, "exact, q8_0 K / q4_0 V cache"}};
    float *steps = malloc((size_t)(N_PROMPT * f.nv) * sizeof *steps);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
#if defined(__SANITIZE_ADDRESS__)
        /* (the exact path's f32 and f16 caches run under the sanitizers in
         * test_forward_ref and test_kv_model: here the int8 path's three and
         * the exact path's dequantized blocks) */
        if (modes[i].exact && modes[i].dt != KV_Q8_0)
            continue;
#endif
        CHECK(make_backend(&f, modes[i].dt, modes[i].dv, modes[i].exact, N_PROMPT) == IG_OK);
        check_chunking(&f, prompt, steps, modes[i].name);
        check_interleaved(&f, prompts, steps, modes[i].name);
    }
    free(steps);
    check_errors(&f);

    backend_free(f.be);
    model_free(m);
    return test_summary("test_prefill_decode");
}
