/* tests/emu/test_backend_pd_emu.c: the CUDA backend's backend_batch.on_layer
 * under the emulator (batch --pd's prefill ranks: backend/gpu_cache.c's
 * gpu_layer_out, called by gpu_forward.c's layer loop after each layer's
 * mixer). Three steps of the synthetic Llama-tiny (2 layers) on an f16 pool
 * and on a q8_0 pool (its blocks reordered as kv_export does): two prompts
 * of 66 and 10 rows in blocks that are not in order (a prefill step); then
 * the first's next 4 rows (read from position 66), the second's one row not
 * read (layer_from -1: no table for it), a third prompt starting at 64 whose
 * first block is the first prompt's (a shared prefix: read from 0, rows the
 * step did not write): a verify step, 4 rows a sequence through the decode
 * kernels, as one process runs it (issue 49); then a row of each of the two
 * (a decode step, ungraphed). In each step the hook comes once a layer, in
 * order, and each read sequence's part as the PD sender writes it
 * (kv_file_write_layer through the hook's table and slot) equals, byte for
 * byte, that written from the cache exported after the step
 * (backend_kv_export); on the f16 pool a twin backend runs each step without
 * the hook (one process) and its logits and exported caches are the hooked
 * step's bit for bit, its route the same (the verify steps counted); the
 * first prompt's parts of the three steps, read as a decode rank reads them
 * (cli/pd_decode.c: header, layers, tokens) and imported into a second
 * backend (--load-kv's path), export the same bytes again. A verify step
 * with layer_device (the NCCL path's hook, no store): the hook once a layer,
 * one process's bits. Through an engine over the backend (cli/pd_prefill.c's
 * rule: each layer's rows from those sent so far): two prompt-only handoff
 * requests, the second sharing the first's first block, its first step at
 * position 64 given from 0; the parts equal those of engine_handoff's
 * export. With a hybrid file (argv[1], CMake: bench/random_gguf.py's qwen35
 * tiny Q8_0, 3 DeltaNet layers and a gated attention layer) the same for one
 * step of two prompts, then a row of each (a decode step): the DeltaNet
 * layers' states and the attention rows, and the twin's bits. Weights native
 * (the default). The copies run on the emulated copy stream, late
 * (device_emu.cc), so a hook that reads before its copy's event is done sees
 * stale staging. Mutants by hand (docs/gpu.md): the hook called before its
 * layer's mixer (gpu_forward.c), the engine's layer_from without the shared
 * prefix (engine.c); scripts/mutants.py's pd-copy-no-host-wait,
 * pd-copy-no-mixer-wait, pd-route-prefill and pd-route-no-hook. Label emu;
 * tests/gpu's test_backend_pd_gpu is this source on a GPU (exit 77 without
 * one), where the hooked steps must also leave no graph captured. */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/status.h"
#include "generate/generate.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tests/emu/kv_export_bytes.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 3
#define MAX_LAYERS 8

/* n random token ids of m's vocabulary, from seed. */
static void random_ids(const struct model *m, int32_t *ids, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(test_rand_u64(&seed) % (uint64_t)m->hp.n_vocab);
}

/* What the hook saw in a step: each read sequence's part of each layer. */
struct capture {
    const struct backend_batch *batch;
    int64_t n_layer, next_layer;
    char *part[MAX_SEQS][MAX_LAYERS];
    size_t bytes[MAX_SEQS][MAX_LAYERS];
};

/* Sequence i's part of layer l from p0 to p1 in store st (the PD sender's
 * writer), into *buf. */
static void write_part(const struct kv_store *st, const int32_t *table, int64_t slot, int64_t l,
                       int64_t p0, int64_t p1, char **buf, size_t *bytes)
{
    FILE *f = open_memstream(buf, bytes);
    CHECK(f && kv_file_write_layer(f, "'the part'", st, table, NULL, slot, l, p0, p1) == IG_OK);
    if (f)
        fclose(f);
}

static void on_layer(void *user, int64_t layer, const struct kv_store *kv,
                     const struct backend_layer_seq *ls)
{
    struct capture *c = user;
    const struct backend_batch *b = c->batch;
    CHECKF(layer == c->next_layer, "the hook came for layer %lld, expected %lld",
           (long long)layer, (long long)c->next_layer);
    c->next_layer = layer + 1;
    CHECK(ls != NULL && layer < MAX_LAYERS);
    for (int64_t i = 0; ls && layer < MAX_LAYERS && i < b->n_seqs; i++) {
        const struct backend_seq *s = &b->seqs[i];
        if (b->layer_from[i] < 0) {
            CHECKF(!ls[i].table, "sequence %lld is not read but has a table", (long long)i);
            continue;
        }
        CHECK(ls[i].table != NULL);
        if (ls[i].table)
            write_part(kv, ls[i].table, ls[i].slot, layer, b->layer_from[i],
                       s->pos0 + s->n_rows, &c->part[i][layer], &c->bytes[i][layer]);
    }
}

/* The parts of step sequence 0 a decode rank would get: a step's layers. */
struct sent {
    int64_t n_steps, p0[4], p1[4];
    char *part[4][MAX_LAYERS];
    size_t bytes[4][MAX_LAYERS];
};

/* Runs the step with the hook, then compares each read sequence's parts
 * with those of the cache exported after it; sequence 0's parts to *keep
 * where given. */
static void step_and_check(struct backend *g, struct backend_batch *b, const char *what,
                           struct sent *keep)
{
    const int64_t n_layer = g->m->hp.n_layer;
    struct capture c = {.batch = b, .n_layer = n_layer};
    b->on_layer = on_layer;
    b->layer_user = &c;
    CHECK(backend_step(g, b) == IG_OK);
    CHECKF(c.next_layer == n_layer, "%s: the hook came for %lld layers of %lld", what,
           (long long)c.next_layer, (long long)n_layer);
    int64_t bad = 0, parts = 0;
    for (int64_t i = 0; i < b->n_seqs && i < MAX_SEQS; i++) {
        const struct backend_seq *s = &b->seqs[i];
        if (b->layer_from[i] < 0)
            continue;
        const struct kv_store *st = NULL;
        const int32_t *table = NULL;
        int64_t slot = 0, end = s->pos0 + s->n_rows;
        CHECK(backend_kv_export(g, s, end, &st, &table, &slot) == IG_OK);
        for (int64_t l = 0; st && l < n_layer && l < MAX_LAYERS; l++) {
            char *want = NULL;
            size_t n = 0;
            write_part(st, table, slot, l, b->layer_from[i], end, &want, &n);
            parts++;
            if (!c.part[i][l] || c.bytes[i][l] != n || memcmp(c.part[i][l], want, n) != 0) {
                if (bad++ < 4)
                    fprintf(stderr, "%s: sequence %lld, layer %lld, rows %lld..%lld: the "
                            "hook's part (%zu bytes) is not the exported cache's (%zu)\n",
                            what, (long long)i, (long long)l, (long long)b->layer_from[i],
                            (long long)end, c.bytes[i][l], n);
            }
            free(want);
        }
    }
    CHECKF(bad == 0, "%s: %lld of %lld parts differ", what, (long long)bad, (long long)parts);
    if (keep && keep->n_steps < 4 && b->layer_from[0] >= 0) {
        int64_t k = keep->n_steps++;
        keep->p0[k] = b->layer_from[0];
        keep->p1[k] = b->seqs[0].pos0 + b->seqs[0].n_rows;
        for (int l = 0; l < MAX_LAYERS; l++) {
            keep->part[k][l] = c.part[0][l];
            keep->bytes[k][l] = c.bytes[0][l];
            c.part[0][l] = NULL;
        }
    }
    for (int i = 0; i < MAX_SEQS; i++)
        for (int l = 0; l < MAX_LAYERS; l++)
            free(c.part[i][l]);
    b->on_layer = NULL;
}

/* Two backends over o: *g for the steps with the hook, *g0 its twin for
 * one process's (same_as_one_process). Whether both were made. */
static bool create_twins(const struct model *m, const struct backend_opts *o, struct backend **g,
                         struct backend **g0)
{
    CHECK(IG_DEV(gpu_backend_create)(m, o, g) == IG_OK);
    CHECK(IG_DEV(gpu_backend_create)(m, o, g0) == IG_OK);
    return *g && *g0;
}

/* One process's side of step b, which g ran with the hook (its wanted rows'
 * logits in b->logits): the same step on twin backend g0, without the hook,
 * takes the same route (a verify step counted alike) and gives the same
 * logits and exported caches, bit for bit. No g0: nothing. */
static void same_as_one_process(struct backend *g, struct backend *g0, struct backend_batch *b,
                                int64_t n_want, const char *what)
{
    if (!g0)
        return;
    const int64_t nv = g->m->hp.n_vocab;
    const float *hooked = b->logits;
    float *logits = malloc((size_t)(n_want * nv) * sizeof *logits);
    b->logits = logits;
    CHECK(logits && backend_step(g0, b) == IG_OK);
    b->logits = (float *)hooked;
    struct gpu_backend_info info, info0;
    IG_DEV(gpu_get_info)(g, &info);
    IG_DEV(gpu_get_info)(g0, &info0);
    CHECKF(info.verify_steps == info0.verify_steps,
           "%s: %lld verify steps with the hook, %lld without", what,
           (long long)info.verify_steps, (long long)info0.verify_steps);
    int64_t bad = 0;
    for (int64_t k = 0; logits && k < n_want * nv; k++)
        bad += memcmp(&logits[k], &hooked[k], sizeof *logits) != 0;
    CHECKF(logits && bad == 0, "%s: %lld of %lld logits are not one process's bits", what,
           (long long)bad, (long long)(n_want * nv));
    for (int64_t i = 0; i < b->n_seqs; i++) {
        const struct backend_seq *s = &b->seqs[i];
        size_t a_bytes = 0, b_bytes = 0;
        char *a = kv_export_bytes(g, s, s->pos0 + s->n_rows, &a_bytes);
        char *c = kv_export_bytes(g0, s, s->pos0 + s->n_rows, &b_bytes);
        CHECKF(a && c && a_bytes == b_bytes && memcmp(a, c, a_bytes) == 0,
               "%s: sequence %lld's cache (%zu bytes) is not one process's (%zu)", what,
               (long long)i, a_bytes, b_bytes);
        free(a);
        free(c);
    }
    free(logits);
}

/* The decode rank's side (cli/pd_decode.c's reads, --load-kv's import): the
 * head, the kept parts of sequence seq of g and its tokens and logits read
 * into a store, imported into a second backend's blocks 1 and 4 (slot 1),
 * exported again: the same bytes as g's export of the sequence. */
static void receive(const struct model *m, const struct backend_opts *o, struct backend *g,
                    const struct backend_seq *seq, const struct sent *sent,
                    const int32_t *tokens, const char *what)
{
    int64_t n = sent->p1[sent->n_steps - 1], nv = m->hp.n_vocab;
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    char *head = NULL, *tail = NULL;
    size_t head_bytes = 0, tail_bytes = 0;
    float *logits = calloc((size_t)nv, sizeof *logits);
    int32_t *got = malloc((size_t)n * sizeof *got);
    FILE *f = open_memstream(&head, &head_bytes);
    CHECK(f && kv_file_write_head(f, "'the head'", backend_kv_memory(g), n, id, nv) == IG_OK);
    if (f)
        fclose(f);
    f = open_memstream(&tail, &tail_bytes);
    CHECK(f && kv_file_write_tokens(f, "'the tokens'", tokens, n, logits, nv) == IG_OK);
    if (f)
        fclose(f);
    struct kv_memory *want = NULL;
    struct kv_store *st = NULL;
    struct kv_file_reader rd = {0};
    CHECK(kv_memory_of(m, KV_F32, KV_F32, &want) == IG_OK);
    f = head ? fmemopen(head, head_bytes, "rb") : NULL;
    CHECK(f && want && kv_file_read_header(&rd, f, "'the head'", want, nv, id) == IG_OK);
    if (f)
        fclose(f);
    rd.no_crc = true;
    CHECK(kv_file_new_store(&rd, &st) == IG_OK);
    for (int64_t k = 0; st && k < sent->n_steps; k++)
        for (int64_t l = 0; l < m->hp.n_layer; l++) {
            rd.f = sent->part[k][l] ? fmemopen(sent->part[k][l], sent->bytes[k][l], "rb") : NULL;
            CHECK(rd.f && kv_file_read_layer(&rd, st, l, sent->p0[k], sent->p1[k]) == IG_OK);
            if (rd.f)
                fclose(rd.f);
        }
    rd.f = tail ? fmemopen(tail, tail_bytes, "rb") : NULL;
    CHECK(rd.f && got && kv_file_read_tokens(&rd, got, logits) == IG_OK);
    if (rd.f)
        fclose(rd.f);
    CHECK(got && memcmp(got, tokens, (size_t)n * sizeof *got) == 0);
    struct backend *g2 = NULL;
    CHECK(IG_DEV(gpu_backend_create)(m, o, &g2) == IG_OK);
    int32_t table2[2] = {1, 4};
    struct backend_seq seq2 = {.table = table2, .slot = 1};
    if (g2 && st) {
        CHECK(backend_kv_import(g2, &seq2, st, n) == IG_OK);
        size_t a_bytes = 0, b_bytes = 0;
        char *a = kv_export_bytes(g, seq, n, &a_bytes), *b = kv_export_bytes(g2, &seq2, n, &b_bytes);
        CHECKF(a && b && a_bytes == b_bytes && memcmp(a, b, a_bytes) == 0,
               "%s: the cache received and imported (%zu bytes) is not the prefill side's "
               "(%zu)", what, b_bytes, a_bytes);
        free(a);
        free(b);
    }
    backend_free(g2);
    kv_store_free(st);
    kv_memory_free(want);
    free(head);
    free(tail);
    free(logits);
    free(got);
}

/* The three steps of the header on Llama-tiny with K/V pool type `dt`. */
static void llama_steps(const struct model *m, enum kv_dtype dt)
{
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 256, .max_rows = 128,
                             .n_slots = MAX_SEQS, .n_blocks = 8, .kv_dtype = dt,
                             .kv_dtype_v = dt, .gpu_weights = BACKEND_GPU_NATIVE};
    /* g0: one process's, no hook (on the f16 pool only: the route is not the pool's) */
    struct backend *g = NULL, *g0 = NULL;
    CHECK(IG_DEV(gpu_backend_create)(m, &o, &g) == IG_OK);
    CHECK(dt != KV_F16 || IG_DEV(gpu_backend_create)(m, &o, &g0) == IG_OK);
    if (!g || (dt == KV_F16 && !g0)) {
        backend_free(g);
        backend_free(g0);
        return;
    }
    const char *name = kv_dtype_name(dt);
    int32_t ids[128];
    random_ids(m, ids, 128, 29);
    int32_t ta[2] = {5, 2}, tb[1] = {3}, tc[2] = {5, 6}, tokens[128];
    char what[64];

    /* 1: A rows 0..65 (blocks 5, 2), B rows 0..9 */
    memcpy(tokens, ids, 66 * sizeof *tokens);
    memcpy(tokens + 66, ids + 100, 10 * sizeof *tokens);
    struct backend_seq s1[2] = {{.table = ta, .slot = 0, .row0 = 0, .n_rows = 66, .pos0 = 0},
                                {.table = tb, .slot = 1, .row0 = 66, .n_rows = 10, .pos0 = 0}};
    int64_t from1[2] = {0, 0};
    float *logits = malloc((size_t)(3 * m->hp.n_vocab) * sizeof *logits);
    struct backend_batch b = {.tokens = tokens, .n_rows = 76, .seqs = s1, .n_seqs = 2,
                              .logits = logits, .layer_from = from1};
    struct sent sent = {0};
    snprintf(what, sizeof what, "%s step 1", name);
    step_and_check(g, &b, what, &sent);
    same_as_one_process(g, g0, &b, 2, what);

    /* 2: A rows 66..69 from 66; B one row, not read; C (A's first block
     * shared) rows 64..66, read from 0 */
    memcpy(tokens, ids + 66, 4 * sizeof *tokens);
    tokens[4] = ids[110];
    memcpy(tokens + 5, ids + 111, 3 * sizeof *tokens);
    struct backend_seq s2[3] = {{.table = ta, .slot = 0, .row0 = 0, .n_rows = 4, .pos0 = 66},
                                {.table = tb, .slot = 1, .row0 = 4, .n_rows = 1, .pos0 = 10},
                                {.table = tc, .slot = 2, .row0 = 5, .n_rows = 3, .pos0 = 64}};
    int64_t from2[3] = {66, -1, 0};
    b = (struct backend_batch){.tokens = tokens, .n_rows = 8, .seqs = s2, .n_seqs = 3,
                               .logits = logits, .layer_from = from2};
    snprintf(what, sizeof what, "%s step 2", name);
    step_and_check(g, &b, what, &sent);
    same_as_one_process(g, g0, &b, 3, what);
    struct gpu_backend_info info;
    IG_DEV(gpu_get_info)(g, &info);
    CHECKF(info.verify_steps == 1, "%s: %lld verify steps (expected 1: a step of at most 16 "
           "rows a sequence)", what, (long long)info.verify_steps);

    /* 3: a row of A and of C: one row a sequence, still the hook's */
    tokens[0] = ids[121];
    tokens[1] = ids[122];
    struct backend_seq s3[2] = {{.table = ta, .slot = 0, .row0 = 0, .n_rows = 1, .pos0 = 70},
                                {.table = tc, .slot = 2, .row0 = 1, .n_rows = 1, .pos0 = 67}};
    int64_t from3[2] = {70, 67};
    b = (struct backend_batch){.tokens = tokens, .n_rows = 2, .seqs = s3, .n_seqs = 2,
                               .logits = logits, .layer_from = from3};
    snprintf(what, sizeof what, "%s step 3", name);
    step_and_check(g, &b, what, &sent);
    same_as_one_process(g, g0, &b, 2, what);
    IG_DEV(gpu_get_info)(g, &info); /* (a GPU's check: the emulator captures none) */
    CHECKF(info.graphs == 0, "%s: a step with the hook left %d graphs", what, info.graphs);

    /* A's prompt (ids 0..69, 121) through the decode rank's reads */
    int32_t a_tokens[71];
    memcpy(a_tokens, ids, 70 * sizeof *a_tokens);
    a_tokens[70] = ids[121];
    CHECK(sent.n_steps == 3 && sent.p1[2] == 71);
    snprintf(what, sizeof what, "%s received", name);
    if (sent.n_steps == 3)
        receive(m, &o, g, &s3[0], &sent, a_tokens, what);
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < MAX_LAYERS; l++)
            free(sent.part[k][l]);
    free(logits);
    backend_free(g);
    backend_free(g0);
}

/* backend_batch.layer_device's hook (the NCCL path's: it sends from the
 * device): called with no store, once a layer, in order. */
static void device_hook(void *user, int64_t layer, const struct kv_store *kv,
                        const struct backend_layer_seq *ls)
{
    int64_t *next = user;
    CHECKF(layer == *next && !kv && !ls, "the device hook came for layer %lld (expected %lld) "
           "with %s", (long long)layer, (long long)*next, kv || ls ? "a store" : "none");
    *next = layer + 1;
}

/* A verify step (prompts of 5 and 3 rows) with layer_device: the hook once
 * a layer, the logits and caches one process's. */
static void device_hook_step(const struct model *m)
{
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 256, .max_rows = 64,
                             .n_slots = 2, .n_blocks = 4, .kv_dtype = KV_F16,
                             .kv_dtype_v = KV_F16, .gpu_weights = BACKEND_GPU_NATIVE};
    struct backend *g = NULL, *g0 = NULL;
    if (create_twins(m, &o, &g, &g0)) {
        int32_t tokens[8], ta[1] = {3}, tb[1] = {1};
        random_ids(m, tokens, 8, 41);
        struct backend_seq s[2] = {{.table = ta, .slot = 0, .row0 = 0, .n_rows = 5},
                                   {.table = tb, .slot = 1, .row0 = 5, .n_rows = 3}};
        int64_t from[2] = {0, 0}, next = 0;
        float *logits = malloc((size_t)(2 * m->hp.n_vocab) * sizeof *logits);
        struct backend_batch b = {.tokens = tokens, .n_rows = 8, .seqs = s, .n_seqs = 2,
                                  .logits = logits, .layer_from = from,
                                  .on_layer = device_hook, .layer_user = &next,
                                  .layer_device = true};
        CHECK(logits && backend_step(g, &b) == IG_OK);
        CHECKF(next == m->hp.n_layer, "the device hook came for %lld layers of %lld",
               (long long)next, (long long)m->hp.n_layer);
        b.on_layer = NULL;
        b.layer_device = false;
        struct gpu_backend_info info;
        IG_DEV(gpu_get_info)(g, &info);
        CHECKF(info.verify_steps == 1, "layer_device: %lld verify steps (expected 1)",
               (long long)info.verify_steps);
        if (logits)
            same_as_one_process(g, g0, &b, 2, "layer_device");
        free(logits);
    }
    backend_free(g);
    backend_free(g0);
}

/* ---- through the engine (cli/pd_prefill.c's rule) ------------------------------ */

/* A handoff request as the PD sender keeps it: rows sent so far, and each
 * step's range, its parts written as they came. */
struct ho_job {
    struct gen_request r;
    int64_t sent, n_steps, p0[8], p1[8];
    char *buf;
    size_t bytes;
    FILE *f;
    int done;
};

/* The engine and the model's layers, for the callbacks. */
struct ho_ctx {
    struct engine *e;
    int64_t n_layer;
};

static void ho_layer(void *user, struct gen_request *r, int64_t layer,
                     const struct gen_layer_rows *rows)
{
    const struct ho_ctx *c = user;
    struct ho_job *j = r->user;
    CHECKF(rows->from <= j->sent, "layer %lld: the store holds rows from %lld, %lld were sent",
           (long long)layer, (long long)rows->from, (long long)j->sent);
    if (layer == 0 && j->n_steps < 8) {
        j->p0[j->n_steps] = j->sent;
        j->p1[j->n_steps++] = rows->n_pos;
    }
    CHECK(kv_file_write_layer(j->f, "'the part'", rows->kv, rows->table, rows->wtable,
                              rows->slot, layer, j->sent, rows->n_pos) == IG_OK);
    if (layer == c->n_layer - 1) /* every layer has these rows now */
        j->sent = rows->n_pos;
}

/* The prompt is in: the parts sent equal, byte for byte, those written from
 * the cache engine_handoff exports (what IGNITE_PD_WHOLE=1 would send). */
static void ho_done(void *user, struct gen_request *r)
{
    const struct ho_ctx *c = user;
    struct ho_job *j = r->user;
    j->done++;
    CHECK(r->result.status == IG_OK && r->result.stop == GEN_STOP_PROMPT);
    struct gen_handoff ho;
    CHECK(engine_handoff(c->e, r, true, &ho) == IG_OK);
    fflush(j->f);
    char *want = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&want, &n);
    for (int64_t k = 0; f && k < j->n_steps; k++)
        for (int64_t l = 0; l < c->n_layer; l++)
            CHECK(kv_file_write_layer(f, "'the export'", ho.kv, ho.table, NULL, ho.slot, l,
                                      j->p0[k], j->p1[k]) == IG_OK);
    if (f)
        fclose(f);
    CHECKF(j->sent == r->n_tokens && j->bytes == n && memcmp(j->buf, want, n) == 0,
           "a handoff prompt of %lld tokens (%lld cached): %lld rows in %lld steps, %zu bytes "
           "sent, the export's %zu", (long long)r->n_tokens, (long long)r->result.n_cached,
           (long long)j->sent, (long long)j->n_steps, j->bytes, n);
    free(want);
}

/* Two prompt-only handoff requests on an engine over the CUDA backend, the
 * second after the first, sharing its first block (64 tokens): its first
 * step has rows 64..65 and the hook gives it from 0. */
static void engine_handoffs(const struct model *m)
{
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 256, .max_rows = 48,
                             .n_slots = 2, .n_blocks = 8, .kv_dtype = KV_F16,
                             .kv_dtype_v = KV_F16, .gpu_weights = BACKEND_GPU_NATIVE};
    struct backend *g = NULL;
    struct ho_ctx c = {.n_layer = m->hp.n_layer};
    CHECK(IG_DEV(gpu_backend_create)(m, &o, &g) == IG_OK);
    struct engine_opts eo = {.max_rows = 48, .share_prefixes = true,
                             .cb = {.on_layer = ho_layer, .on_done = ho_done, .user = &c}};
    CHECK(!g || engine_create(g, NULL, &eo, &c.e) == IG_OK);
    struct engine *e = c.e;
    int32_t ids[80];
    random_ids(m, ids, 80, 37);
    int32_t ids2[66];
    memcpy(ids2, ids, 64 * sizeof *ids2);
    ids2[64] = ids[70], ids2[65] = ids[71];
    struct ho_job jobs[2] = {0};
    const int32_t *toks[2] = {ids, ids2};
    int64_t lens[2] = {80, 66};
    for (int k = 0; e && k < 2; k++) {
        struct ho_job *j = &jobs[k];
        j->f = open_memstream(&j->buf, &j->bytes);
        j->r = (struct gen_request){.tokens = toks[k], .n_tokens = lens[k], .user = j,
                                    .params = {.n_predict = 1, .prompt_only = true,
                                               .handoff = true,
                                               .sp = {.temperature = 0, .top_k = 1,
                                                      .top_p = 1, .repeat_penalty = 1}}};
        CHECK(engine_submit(e, &j->r) == IG_OK);
        for (int n = 0; n < 8 && engine_pending(e) > 0; n++)
            CHECK(engine_step(e) == IG_OK);
        CHECKF(j->done == 1, "request %d ended %d times", k, j->done);
    }
    CHECKF(jobs[1].r.result.n_cached == 64 && jobs[1].n_steps == 1 && jobs[1].p0[0] == 0,
           "the second prompt: %lld cached, %lld steps, its first from %lld (expected 64, 1, "
           "0)", (long long)jobs[1].r.result.n_cached, (long long)jobs[1].n_steps,
           (long long)jobs[1].p0[0]);
    for (int k = 0; k < 2; k++) {
        if (jobs[k].f)
            fclose(jobs[k].f);
        free(jobs[k].buf);
    }
    engine_free(e);
    backend_free(g);
}

/* The hybrid: one step of two prompts (12 and 7 rows). */
static void hybrid_step(const char *path)
{
    struct model *m = NULL;
    CHECK(model_load(path, &m) == IG_OK);
    if (!m)
        return;
    bool dn = false;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        dn |= m->layers[l].mixer == LAYER_MIXER_DELTANET;
    CHECKF(dn && m->hp.n_layer <= MAX_LAYERS, "%s: not a small hybrid", path);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 128, .max_rows = 80,
                             .n_slots = 2, .n_blocks = 4, .kv_dtype = KV_F16,
                             .kv_dtype_v = KV_F16, .gpu_weights = BACKEND_GPU_NATIVE};
    struct backend *g = NULL, *g0 = NULL;
    if (create_twins(m, &o, &g, &g0) && dn && m->hp.n_layer <= MAX_LAYERS) {
        int32_t tokens[19], ta[1] = {2}, tb[1] = {0};
        random_ids(m, tokens, 19, 31);
        struct backend_seq s[2] = {{.table = ta, .slot = 1, .row0 = 0, .n_rows = 12},
                                   {.table = tb, .slot = 0, .row0 = 12, .n_rows = 7}};
        int64_t from[2] = {0, 0};
        float *logits = malloc((size_t)(2 * m->hp.n_vocab) * sizeof *logits);
        struct backend_batch b = {.tokens = tokens, .n_rows = 19, .seqs = s, .n_seqs = 2,
                                  .logits = logits, .layer_from = from};
        step_and_check(g, &b, "qwen35 tiny", NULL);
        same_as_one_process(g, g0, &b, 2, "qwen35 tiny");
        /* a row of each: the decode route, the states after it */
        s[0] = (struct backend_seq){.table = ta, .slot = 1, .row0 = 0, .n_rows = 1, .pos0 = 12};
        s[1] = (struct backend_seq){.table = tb, .slot = 0, .row0 = 1, .n_rows = 1, .pos0 = 7};
        int64_t from2[2] = {12, 7};
        b = (struct backend_batch){.tokens = tokens + 3, .n_rows = 2, .seqs = s, .n_seqs = 2,
                                   .logits = logits, .layer_from = from2};
        step_and_check(g, &b, "qwen35 tiny, a row each", NULL);
        same_as_one_process(g, g0, &b, 2, "qwen35 tiny, a row each");
        free(logits);
    }
    backend_free(g0);
    backend_free(g);
    model_free(m);
}

int main(int argc, char **argv)
{
#if !defined(IG_EMU_BACKEND) /* tests/gpu's test_backend_pd_gpu */
    if (IG_DEV(gpu_device_count)() == 0) {
        fprintf(stderr, "test_backend_pd_gpu: skipped (no CUDA device)\n");
        return 77;
    }
#endif
    struct model *m = NULL;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q8_0", &m) == IG_OK);
    if (m) {
        llama_steps(m, KV_F16);
        llama_steps(m, KV_Q8_0);
        device_hook_step(m);
        engine_handoffs(m);
    }
    model_free(m);
    if (argc > 1)
        hybrid_step(argv[1]);
    return test_summary("test_backend_pd");
}
