/* tests/emu/pd_nccl_emu.c: batch --pd's cache between CUDA ranks by NCCL
 * (backend/gpu_kv_p2p.c, backend/gpu_p2p.h) on the emulated backend, run
 * by mpirun with 2 ranks through the tests' NCCL stand-in
 * (IGNITE_NCCL_LIB=libignite_nccl_standin.so): rank 0 a prefill rank,
 * rank 1 a decode rank, as cli/pd_prefill.c and pd_decode.c would run them
 * (the ignite binary cannot run the emulated backend). Synthetic
 * Llama-tiny, a prompt of 70 tokens in two steps (rows 0..39, 40..69: the
 * block holding rows 0..63 goes twice, the second time whole) into blocks
 * 5 and 2, on an f16 and a q8_0 pool:
 *   - the NCCL path: each layer's header (layer, rows) over MPI, then the
 *     layer's blocks by ncclSend in one group from the step's on_layer hook
 *     (backend_batch.layer_device: no host copy); rank 1 posts the
 *     matching receives straight into its sequence's blocks (3, 4); the
 *     prompt's logits over MPI;
 *   - the host path: the cache exported after the prompt (a download),
 *     written as the PD sender writes its parts (kv_file_write_head,
 *     _layer, _tokens; IGNITE_PD_WHOLE=1's parts) and sent over MPI, read
 *     and imported on rank 1 (--load-kv's path) into blocks 1, 0 (the
 *     layer by layer host path's parts are test_backend_pd_emu's);
 *   - on the f16 pool, one process's: rank 1 runs the same two steps
 *     itself into blocks 6, 7, while rank 0 runs them.
 * The caches, exported, are equal byte for byte, as are rank 0's logits
 * and rank 1's own; then 3 greedy decode steps of the sequences in one
 * batch: the same tokens and the same logits, bit for bit, and the caches
 * still equal. Those calls go through the backend table (backend_kv_send_
 * layer, backend_kv_recv_layer: what cli/ reaches). Then, on the f16 pool,
 * through the engines as cli/pd_*.c wire them: rank 0's engine runs the
 * prompt as a prompt-only handoff request in steps of 40 rows with
 * engine_opts.layer_device (its on_layer hook given no store, the
 * sequence's device table: the header, then backend_kv_send_layer of the
 * rows not sent yet); rank 1's engine reserves the blocks in its pool
 * (engine_history_reserve), rank 1 receives into them and the engine
 * admits a request with that history (gen_history.blocks, adopted at
 * admission: no copy), then one process's request of the prompt, both greedy and
 * kept: the same 4 tokens, the same logits after the last bit for bit;
 * rank 0's engine meanwhile runs a prompt of other tokens into the blocks
 * the handed-off one freed.
 * The transfers run on the emulated transfer stream, late (device_emu.cc:
 * where that stream is waited on, or backend_p2p_progress): rank 0's next
 * step waits for its sends (gpu_kv_p2p_fence), rank 1 runs a chunk's
 * receives before it blocks on the next chunk's headers and the last
 * chunk's at its wait before the first read (backend_p2p_wait, an
 * admission's), so a missing wait reads unreceived blocks, and a send
 * not after the main stream's work sends 0xff (scripts/mutants.py's
 * p2p-send-no-main-wait, p2p-no-step-fence, p2p-admit-no-wait).
 * Mutants (tests/emu/mutate.cmake, built with
 * -DIGNITE_PD_MUTANTS=ON): a send of half a block, a layer's send reading
 * the layer before's K, a receive posted for another count, a layer's
 * receive into the layer before's K.
 * tests/gpu/CMakeLists.txt builds the same source with the CUDA entry points
 * (pd_nccl_gpu: each rank its GPU, real NCCL; run by hand on a machine with
 * 2: mpirun -np 2 build/tests/gpu/pd_nccl_gpu). Label emu. */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "backend/gpu_p2p.h"
#include "core/coll.h"
#include "core/status.h"
#include "device/device.h"
#include "generate/generate.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tests/emu/kv_export_bytes.h"
#include "tests/test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPT 70
#define CHUNK 40
#define N_DECODE 3
enum { TAG_HDR = 700, TAG_LOGITS, TAG_PART };

static const struct model *model;
static struct gpu_p2p *p2p;

struct layer_hdr {
    int64_t layer, p0, p1; /* layer -1: the prompt's last */
};

/* Built as tests/gpu's pd_nccl_gpu too (the CUDA entry points): each rank on
 * its own GPU, real NCCL (libnccl.so.2), the device's memory. */
#if defined(IG_EMU_BACKEND)
#define RANK_DEVICE 0
#define HOST_MEMORY true
#else
#define RANK_DEVICE ig_coll_rank()
#define HOST_MEMORY false
#endif

static struct backend_opts opts_of(enum kv_dtype dt)
{
    return (struct backend_opts){.device = {.kind = BACKEND_CUDA, .index = RANK_DEVICE},
                                 .n_ctx = 256,
                                 .max_rows = 64, .n_slots = 3, .n_blocks = 8, .kv_dtype = dt,
                                 .kv_dtype_v = dt, .gpu_weights = BACKEND_GPU_NATIVE};
}

/* ---- rank 0: the prefill rank ------------------------------------------------ */

/* A step's hook: what it sends and how. */
struct sender {
    struct backend *g;
    const int32_t *table;
    int64_t p0, p1;
    int failed;
};

/* The NCCL path: the header, then the layer's blocks from the device. */
static void send_nccl(void *user, int64_t layer, const struct kv_store *kv,
                      const struct backend_layer_seq *seqs)
{
    struct sender *s = user;
    CHECK(kv == NULL && seqs == NULL);
    struct layer_hdr h = {layer, s->p0, s->p1};
    ig_coll_send(&h, sizeof h, 1, TAG_HDR);
    int st = backend_kv_send_layer(s->g, p2p, 1, s->table, layer, s->p0, s->p1);
    CHECKF(st == IG_OK, "layer %lld's send failed", (long long)layer);
    s->failed |= st != IG_OK;
}

/* Rank 0's messages after a prompt go without waiting (ig_coll_isend) and
 * are waited for after its backend is freed, which runs the sends still
 * queued on its transfer stream: a GPU runs them on its own while the host
 * blocks, the emulator only where the host says so, and rank 1 may be
 * running the matching receives only after these messages. */
struct posted {
    struct ig_coll_send_req *req[4];
    int n;
};

static void post(struct posted *q, const void *buf, size_t bytes, int tag)
{
    IG_ASSERT(q->n < 4);
    q->req[q->n++] = ig_coll_isend(buf, bytes, 1, tag);
}

static void posted_wait(struct posted *q)
{
    for (int k = 0; k < q->n; k++)
        while (!ig_coll_sent(q->req[k]))
            ;
    q->n = 0;
}

static char *recv_blob(size_t *bytes)
{
    int64_t n = 0;
    ig_coll_recv(&n, sizeof n, 0, TAG_PART);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf)
        abort();
    ig_coll_recv(buf, (size_t)n, 0, TAG_PART);
    *bytes = (size_t)n;
    return buf;
}

/* The prompt's two steps on g, sequence (table, slot), each step's layers
 * to hook (NULL: none); the last row's logits into logits. */
static void prefill(struct backend *g, const int32_t *ids, int32_t *table, int64_t slot,
                    void (*hook)(void *, int64_t, const struct kv_store *,
                                 const struct backend_layer_seq *),
                    struct sender *s, bool device, float *logits)
{
    for (int64_t p0 = 0; p0 < N_PROMPT; p0 += CHUNK) {
        int64_t n = N_PROMPT - p0 < CHUNK ? N_PROMPT - p0 : CHUNK, from = p0;
        struct backend_seq seq = {.table = table, .slot = slot, .n_rows = n, .pos0 = p0};
        struct backend_batch b = {.tokens = ids + p0, .n_rows = n, .seqs = &seq, .n_seqs = 1,
                                  .logits = logits, .on_layer = hook, .layer_user = s,
                                  .layer_from = hook ? &from : NULL, .layer_device = device};
        if (s)
            s->p0 = p0, s->p1 = p0 + n;
        CHECK(backend_step(g, &b) == IG_OK);
    }
}

static void prefill_rank(enum kv_dtype dt, const int32_t *ids)
{
    struct backend_opts o = opts_of(dt);
    struct backend *g = NULL;
    CHECK(IG_DEV(gpu_backend_create)(model, &o, &g) == IG_OK);
    char why[200] = "";
    CHECKF(!g || backend_p2p_fits(g, why, sizeof why), "no NCCL path: %s", why);
    float *logits = malloc((size_t)model->hp.n_vocab * sizeof *logits);
    int32_t table[2] = {5, 2};
    /* the NCCL path */
    struct sender s = {.g = g, .table = table};
    if (g)
        prefill(g, ids, table, 0, send_nccl, &s, true, logits);
    struct layer_hdr end = {-1, 0, 0};
    struct posted q = {0};
    post(&q, &end, sizeof end, TAG_HDR);
    post(&q, logits, (size_t)model->hp.n_vocab * sizeof *logits, TAG_LOGITS);
    /* the host path: the cache exported, as a saved cache's parts */
    const struct kv_store *kv = NULL;
    const int32_t *ktable = NULL;
    int64_t kslot = 0;
    struct backend_seq seq = {.table = table};
    CHECK(g && backend_kv_export(g, &seq, N_PROMPT, &kv, &ktable, &kslot) == IG_OK);
    char *buf = NULL;
    size_t bytes = 0;
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(model, id);
    FILE *f = open_memstream(&buf, &bytes);
    CHECK(f && g && kv_file_write_head(f, "'the head'", backend_kv_memory(g), N_PROMPT, id,
                                       model->hp.n_vocab) == IG_OK);
    for (int64_t l = 0; f && kv && l < model->hp.n_layer; l++)
        CHECK(kv_file_write_layer(f, "'the part'", kv, ktable, NULL, kslot, l, 0, N_PROMPT) ==
              IG_OK);
    CHECK(f && kv_file_write_tokens(f, "'the tokens'", ids, N_PROMPT, logits,
                                    model->hp.n_vocab) == IG_OK);
    if (f)
        fclose(f);
    int64_t n_bytes = (int64_t)bytes; /* (a message of unknown size: its size first) */
    post(&q, &n_bytes, sizeof n_bytes, TAG_PART);
    post(&q, buf, bytes, TAG_PART);
    backend_free(g);
    posted_wait(&q);
    free(buf);
    free(logits);
}

/* ---- rank 1: the decode rank ------------------------------------------------- */

/* The sequences of the decode rank: the NCCL path's, the host path's and
 * one process's (the f16 pool's only). */
static const char *const path_name[3] = {"NCCL", "host", "one process's"};

/* Sequences 1.. 's caches equal to 0's (the NCCL path's). */
static void same_caches(struct backend *g, const struct backend_seq *seqs, int n_seqs, int64_t n,
                        const char *what)
{
    size_t want_bytes = 0;
    char *want = kv_export_bytes(g, &seqs[0], n, &want_bytes);
    for (int k = 1; k < n_seqs; k++) {
        size_t bytes = 0;
        char *got = kv_export_bytes(g, &seqs[k], n, &bytes);
        CHECKF(want && got && bytes == want_bytes && memcmp(got, want, bytes) == 0,
               "%s: the %s path's cache of %lld positions (%zu bytes) is not the NCCL path's "
               "(%zu)", what, path_name[k], (long long)n, bytes, want_bytes);
        free(got);
    }
    free(want);
}

/* The host path's parts into a store, imported as sequence seq. */
static void receive_host(struct backend *g, const struct backend_seq *seq, const int32_t *ids)
{
    const int64_t nv = model->hp.n_vocab;
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(model, id);
    struct kv_memory *want = NULL;
    struct kv_store *st = NULL;
    struct kv_file_reader rd = {0};
    size_t bytes = 0;
    char *buf = recv_blob(&bytes);
    int32_t got[N_PROMPT];
    float *logits = malloc((size_t)nv * sizeof *logits);
    CHECK(kv_memory_of(model, KV_F32, KV_F32, &want) == IG_OK);
    FILE *f = fmemopen(buf, bytes, "rb");
    CHECK(f && want && kv_file_read_header(&rd, f, "'the cache'", want, nv, id) == IG_OK);
    rd.no_crc = true;
    rd.f = f;
    CHECK(f && kv_file_new_store(&rd, &st) == IG_OK);
    for (int64_t l = 0; st && l < model->hp.n_layer; l++)
        CHECK(kv_file_read_layer(&rd, st, l, 0, N_PROMPT) == IG_OK);
    CHECK(st && logits && kv_file_read_tokens(&rd, got, logits) == IG_OK);
    if (f)
        fclose(f);
    free(buf);
    CHECK(memcmp(got, ids, sizeof got) == 0);
    CHECK(st && backend_kv_import(g, seq, st, N_PROMPT) == IG_OK);
    free(logits);
    kv_store_free(st);
    kv_memory_free(want);
}

/* The NCCL path's decode side: each layer header from rank 0, then that
 * layer's receives straight into the blocks of `table`, queued on the
 * transfer stream, until the end header; every paged layer's part once a
 * chunk (two chunks). A chunk's receives run (backend_p2p_progress) before
 * this rank blocks on the next chunk's headers, which rank 0's next step
 * sends only once its fence has seen the chunk's sends go (a GPU's transfer
 * stream runs on its own; the emulated one where the host would block). The
 * last chunk's stay queued: the caller's wait (an admission's) runs them,
 * so a reader that does not wait reads the blocks unreceived. */
static void receive_layers(struct backend *g, const int32_t *table, const char *name)
{
    int64_t n_parts = 0;
    for (;;) {
        struct layer_hdr h;
        ig_coll_recv(&h, sizeof h, 0, TAG_HDR);
        if (h.layer < 0)
            break;
        n_parts++;
        int st = backend_kv_recv_layer(g, p2p, 0, table, h.layer, h.p0, h.p1);
        CHECKF(st == IG_OK, "%s: layer %lld's rows %lld..%lld not received", name,
               (long long)h.layer, (long long)h.p0, (long long)h.p1);
        if (h.layer == model->hp.n_layer - 1 && h.p1 < N_PROMPT)
            CHECK(backend_p2p_progress(g) == IG_OK);
    }
    CHECKF(n_parts == 2 * model->hp.n_layer, "%s: %lld parts", name, (long long)n_parts);
}

static void decode_rank(enum kv_dtype dt, const int32_t *ids, bool own)
{
    const char *name = kv_dtype_name(dt);
    const int64_t nv = model->hp.n_vocab;
    const int n_seqs = own ? 3 : 2;
    struct backend_opts o = opts_of(dt);
    struct backend *g = NULL;
    CHECK(IG_DEV(gpu_backend_create)(model, &o, &g) == IG_OK);
    if (!g)
        return;
    int32_t tables[3][2] = {{3, 4}, {1, 0}, {6, 7}}; /* (the NCCL path's a run: one copy) */
    struct backend_seq seqs[3];
    for (int k = 0; k < 3; k++)
        seqs[k] = (struct backend_seq){.table = tables[k], .slot = k};
    float *logits = malloc((size_t)(3 * nv) * sizeof *logits);
    if (own) /* (while rank 0 runs the same) */
        prefill(g, ids, tables[2], 2, NULL, NULL, false, logits + 2 * nv);
    /* the NCCL path: headers, then the receives straight into sequence 0's blocks */
    receive_layers(g, tables[0], name);
    ig_coll_recv(logits, (size_t)nv * sizeof *logits, 0, TAG_LOGITS);
    receive_host(g, &seqs[1], ids);
    CHECK(backend_p2p_wait(g) == IG_OK); /* (before the first read of the blocks) */
    memcpy(logits + nv, logits, (size_t)nv * sizeof *logits); /* (the same prompt's) */
    CHECKF(!own || memcmp(logits, logits + 2 * nv, (size_t)nv * sizeof *logits) == 0,
           "%s: the prefill rank's logits are not one process's", name);
    char what[64];
    snprintf(what, sizeof what, "%s, the prompt", name);
    same_caches(g, seqs, n_seqs, N_PROMPT, what);
    /* greedy decode steps of the sequences at once */
    for (int64_t t = 0; t < N_DECODE; t++) {
        int32_t tok[3];
        for (int k = 0; k < n_seqs; k++) {
            tok[k] = test_argmax(logits + k * nv, nv);
            seqs[k].row0 = k, seqs[k].n_rows = 1, seqs[k].pos0 = N_PROMPT + t;
            CHECKF(tok[k] == tok[0], "%s: decode step %lld: the %s path's token %d, the NCCL "
                   "path's %d", name, (long long)t, path_name[k], tok[k], tok[0]);
        }
        struct backend_batch b = {.tokens = tok, .n_rows = n_seqs, .seqs = seqs,
                                  .n_seqs = n_seqs, .logits = logits};
        CHECK(backend_step(g, &b) == IG_OK);
        for (int k = 1; k < n_seqs; k++)
            CHECKF(memcmp(logits, logits + k * nv, (size_t)nv * sizeof *logits) == 0,
                   "%s: decode step %lld: the %s path's logits are not the NCCL path's", name,
                   (long long)t, path_name[k]);
    }
    snprintf(what, sizeof what, "%s, after decoding", name);
    same_caches(g, seqs, n_seqs, N_PROMPT + N_DECODE, what);
    free(logits);
    backend_free(g);
}

/* ---- through the engines (cli/pd_prefill.c's and pd_decode.c's wiring) ------- */

/* Rank 0's engine: a prompt-only handoff request, its layers sent from the
 * on_layer hook on the device (engine_opts.layer_device), what was not
 * sent yet as pd_prefill.c does; the logits at its end. */
struct eng_sender {
    struct backend *g;
    struct engine *e;
    int64_t sent;
    float *logits;
};

static void eng_layer(void *user, struct gen_request *r, int64_t layer,
                      const struct gen_layer_rows *rows)
{
    struct eng_sender *c = user;
    if (r->user) /* (the prompt after, which stays) */
        return;
    CHECK(rows->kv == NULL && rows->table != NULL);
    struct layer_hdr h = {layer, c->sent, rows->n_pos};
    ig_coll_send(&h, sizeof h, 1, TAG_HDR);
    CHECKF(backend_kv_send_layer(c->g, p2p, 1, rows->table, layer, h.p0, h.p1) == IG_OK,
           "engine: layer %lld's send failed", (long long)layer);
    if (layer == model->hp.n_layer - 1)
        c->sent = rows->n_pos;
}

static void eng_done(void *user, struct gen_request *r)
{
    struct eng_sender *c = user;
    struct gen_handoff ho = {0}; /* (left as it is where the handoff fails) */
    if (r->user)
        return;
    bool ended = r->result.status == IG_OK && r->result.stop == GEN_STOP_PROMPT;
    CHECK(ended);
    CHECK(ended && engine_handoff(c->e, r, false, &ho) == IG_OK && ho.n_pos == N_PROMPT &&
          ho.logits);
    if (ho.logits)
        memcpy(c->logits, ho.logits, (size_t)model->hp.n_vocab * sizeof *c->logits);
}

/* Then, in a pool of 3 blocks, a prompt of 130 other tokens (3 blocks): its
 * steps write into the 2 blocks the handed-off prompt freed, whose last
 * sends are still queued (the emulator runs them late), so the fence at a
 * step's start (gpu_kv_p2p_fence) is what keeps rank 1's cache right. Its
 * end header and logits go before it without waiting. */
#define N_REUSE 130

static void engine_prefill_rank(const int32_t *ids)
{
    struct backend_opts o = opts_of(KV_F16);
    o.n_blocks = 3;
    struct backend *g = NULL;
    CHECK(IG_DEV(gpu_backend_create)(model, &o, &g) == IG_OK);
    struct eng_sender c = {.g = g, .logits = calloc((size_t)model->hp.n_vocab, sizeof(float))};
    struct engine_opts eo = {.max_rows = CHUNK, .layer_device = true,
                             .cb = {.on_layer = eng_layer, .on_done = eng_done, .user = &c}};
    CHECK(g && engine_create(g, NULL, &eo, &c.e) == IG_OK);
    struct gen_request r = {.tokens = ids, .n_tokens = N_PROMPT,
                            .params = {.n_predict = 1, .prompt_only = true, .handoff = true,
                                       .sp = {.temperature = 0, .top_k = 1, .top_p = 1,
                                              .repeat_penalty = 1}}};
    CHECK(c.e && engine_submit(c.e, &r) == IG_OK);
    for (int n = 0; c.e && n < 8 && engine_pending(c.e) > 0; n++)
        CHECK(engine_step(c.e) == IG_OK);
    struct layer_hdr end = {-1, 0, 0};
    struct posted q = {0};
    post(&q, &end, sizeof end, TAG_HDR);
    post(&q, c.logits, (size_t)model->hp.n_vocab * sizeof *c.logits, TAG_LOGITS);
    int32_t other[N_REUSE];
    uint64_t seed = 43;
    for (int i = 0; i < N_REUSE; i++)
        other[i] = (int32_t)(test_rand_u64(&seed) % (uint64_t)model->hp.n_vocab);
    struct gen_request r2 = {.tokens = other, .n_tokens = N_REUSE, .user = (void *)1,
                             .params = r.params};
    r2.params.handoff = false;
    CHECK(c.e && engine_submit(c.e, &r2) == IG_OK);
    for (int n = 0; c.e && n < 8 && engine_pending(c.e) > 0; n++)
        CHECK(engine_step(c.e) == IG_OK);
    CHECK(r2.result.status == IG_OK && r2.result.n_prompt == N_REUSE);
    engine_free(c.e);
    backend_free(g);
    posted_wait(&q);
    free(c.logits);
}

/* Rank 1's engine: its pool's blocks reserved, the receives into them as
 * the headers come, then a request with that history (gen_history.blocks:
 * adopted at admission), then one process's request of the same prompt, greedy,
 * kept: the same tokens and the same logits after the last, bit for bit. */
struct eng_toks {
    int32_t tok[2][N_DECODE + 1];
    int n[2];
};

static void eng_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns)
{
    struct eng_toks *t = user;
    int k = (int)(intptr_t)r->user;
    (void)t_ns;
    if (t->n[k] < N_DECODE + 1)
        t->tok[k][t->n[k]++] = token;
}

static void engine_decode_rank(const int32_t *ids)
{
    const int64_t nv = model->hp.n_vocab;
    struct backend_opts o = opts_of(KV_F16);
    struct backend *g = NULL;
    CHECK(IG_DEV(gpu_backend_create)(model, &o, &g) == IG_OK);
    if (!g)
        return;
    struct eng_toks t = {0};
    /* one request at a time: each prompt cut as rank 0's (40, 30), each
     * decode step of one row */
    struct engine_opts eo = {.max_rows = CHUNK, .cb = {.on_token = eng_token, .user = &t}};
    struct engine *e = NULL;
    CHECK(engine_create(g, NULL, &eo, &e) == IG_OK);
    struct kv_seq blocks = {0};
    int slot = -1;
    CHECK(e && engine_history_reserve(e, N_PROMPT, N_PROMPT + N_DECODE + 1, &blocks, &slot) ==
                   IG_OK);
    CHECK(blocks.table != NULL);
    if (blocks.table)
        receive_layers(g, blocks.table, "engine");
    float *logits = malloc((size_t)nv * sizeof *logits);
    ig_coll_recv(logits, (size_t)nv * sizeof *logits, 0, TAG_LOGITS);
    CHECK(backend_p2p_wait(g) == IG_OK); /* (cli/pd_decode.c's before admission) */
    struct gen_history hist = {.tokens = ids, .n = N_PROMPT, .logits = logits,
                               .blocks = &blocks};
    struct gen_params gp = {.n_predict = N_DECODE + 1, .keep = true,
                            .sp = {.temperature = 0, .top_k = 1, .top_p = 1,
                                   .repeat_penalty = 1}};
    struct gen_request r[2] = {{.history = &hist, .params = gp, .user = (void *)0},
                               {.tokens = ids, .n_tokens = N_PROMPT, .params = gp,
                                .user = (void *)1}};
    for (int k = 0; e && k < 2; k++) {
        CHECK(engine_submit(e, &r[k]) == IG_OK);
        for (int n = 0; n < 16 && engine_pending(e) > 0; n++)
            CHECK(engine_step(e) == IG_OK);
    }
    CHECKF(t.n[0] == N_DECODE + 1 && t.n[1] == t.n[0] &&
           memcmp(t.tok[0], t.tok[1], sizeof t.tok[0]) == 0,
           "engine: the NCCL path's %d tokens are not one process's %d", t.n[0], t.n[1]);
    const float *lg[2] = {NULL, NULL};
    for (int k = 0; e && k < 2; k++) {
        const int32_t *kt;
        int64_t kn = 0;
        CHECK(r[k].result.kept && engine_kept(e, r[k].result.kept, &kt, &kn, &lg[k]) == IG_OK);
        CHECKF(kn == N_PROMPT + N_DECODE + 1, "engine: %lld positions kept", (long long)kn);
    }
    CHECKF(lg[0] && lg[1] && memcmp(lg[0], lg[1], (size_t)nv * sizeof *lg[0]) == 0,
           "engine: the NCCL path's logits after its last token are not one process's");
    if (e)
        engine_history_release(e, &blocks);
    engine_free(e);
    free(logits);
    backend_free(g);
}

int main(int argc, char **argv)
{
    int st = ig_coll_start(&argc, &argv);
    if (st != IG_OK)
        return st;
    if (ig_coll_size() != 2) {
        fprintf(stderr, "pd_nccl_emu: run it with mpirun -np 2\n");
        ig_coll_finish();
        return 2;
    }
    if (IG_DEV(gpu_device_count)() < (HOST_MEMORY ? 1 : 2)) {
        fprintf(stderr, "SKIP: pd_nccl: a GPU a rank, 2, is needed\n");
        ig_coll_finish();
        return 77;
    }
    struct model *m = NULL;
    CHECK(model_synthetic_spec("synthetic:Llama-tiny:Q8_0", &m) == IG_OK);
    /* The rank's device first (cudaSetDevice, in dev_open): ncclCommInitRank
     * binds the communicator to the thread's current device, and both ranks
     * left on device 0 fail or hang (gpu_p2p.h). Open until the end: the
     * backends below select the same device on this thread. */
    struct dev *dev = NULL;
    CHECK(IG_DEV(dev_open)(RANK_DEVICE, &dev) == IG_OK);
    CHECK(dev && gpu_p2p_nccl_open(HOST_MEMORY, &p2p) == IG_OK);
    if (m && p2p) {
        model = m;
        int32_t ids[N_PROMPT];
        uint64_t r = 41;
        for (int i = 0; i < N_PROMPT; i++)
            ids[i] = (int32_t)(test_rand_u64(&r) % (uint64_t)m->hp.n_vocab);
        static const enum kv_dtype types[2] = {KV_F16, KV_Q8_0};
        for (int k = 0; k < 2; k++) {
            if (ig_coll_rank() == 0)
                prefill_rank(types[k], ids);
            else
                decode_rank(types[k], ids, types[k] == KV_F16);
        }
        if (ig_coll_rank() == 0)
            engine_prefill_rank(ids);
        else
            engine_decode_rank(ids);
    }
    gpu_p2p_free(p2p);
    IG_DEV(dev_close)(dev);
    model_free(m);
    char name[32];
    snprintf(name, sizeof name, "pd_nccl_emu rank %d", ig_coll_rank());
    st = test_summary(name);
    ig_coll_finish();
    return st;
}
