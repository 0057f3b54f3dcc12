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
 *     matching receives into a device staging store, then copies it into
 *     its sequence's blocks (3, 4: one copy) on the device; the prompt's logits over
 *     MPI;
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
 * still equal. Mutants (tests/emu/mutate.cmake, built with
 * -DIGNITE_PD_MUTANTS=ON): a send of half a block, a layer's send reading
 * the layer before's K, a receive posted for another count, the import of
 * a run of blocks copying its first block's K alone.
 * tests/gpu/CMakeLists.txt builds the same source with the CUDA entry points
 * (pd_nccl_gpu: each rank its GPU, real NCCL; run by hand on a machine with
 * 2: mpirun -np 2 build/tests/gpu/pd_nccl_gpu). Label emu. */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "backend/gpu_p2p.h"
#include "core/coll.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tests/emu/kv_export_bytes.h"
#include "tests/test.h"

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
    int st = IG_DEV(gpu_kv_send_layer)(s->g, p2p, 1, s->table, layer, s->p0, s->p1);
    CHECKF(st == IG_OK, "layer %lld's send failed", (long long)layer);
    s->failed |= st != IG_OK;
}

/* A message of unknown size: its size, then its bytes. */
static void send_blob(const void *buf, size_t bytes)
{
    int64_t n = (int64_t)bytes;
    ig_coll_send(&n, sizeof n, 1, TAG_PART);
    ig_coll_send(buf, bytes, 1, TAG_PART);
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
    CHECKF(!g || IG_DEV(gpu_kv_p2p_fits)(g, why, sizeof why), "no NCCL path: %s", why);
    float *logits = malloc((size_t)model->hp.n_vocab * sizeof *logits);
    int32_t table[2] = {5, 2};
    /* the NCCL path */
    struct sender s = {.g = g, .table = table};
    if (g)
        prefill(g, ids, table, 0, send_nccl, &s, true, logits);
    struct layer_hdr end = {-1, 0, 0};
    ig_coll_send(&end, sizeof end, 1, TAG_HDR);
    ig_coll_send(logits, (size_t)model->hp.n_vocab * sizeof *logits, 1, TAG_LOGITS);
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
    send_blob(buf, bytes);
    free(buf);
    free(logits);
    backend_free(g);
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
    /* the NCCL path: headers, then the receives into the staging store */
    struct gpu_kv_stage *stage = NULL;
    CHECK(IG_DEV(gpu_kv_stage_create)(g, N_PROMPT, &stage) == IG_OK);
    int64_t n_parts = 0;
    for (;;) {
        struct layer_hdr h;
        ig_coll_recv(&h, sizeof h, 0, TAG_HDR);
        if (h.layer < 0)
            break;
        n_parts++;
        int st = stage ? IG_DEV(gpu_kv_recv_layer)(g, p2p, 0, stage, h.layer, h.p0, h.p1) : -1;
        CHECKF(st == IG_OK, "%s: layer %lld's rows %lld..%lld not received", name,
               (long long)h.layer, (long long)h.p0, (long long)h.p1);
    }
    CHECKF(n_parts == 2 * model->hp.n_layer, "%s: %lld parts", name, (long long)n_parts);
    ig_coll_recv(logits, (size_t)nv * sizeof *logits, 0, TAG_LOGITS);
    CHECK(stage && IG_DEV(gpu_kv_stage_import)(g, stage, &seqs[0], N_PROMPT) == IG_OK);
    IG_DEV(gpu_kv_stage_free)(g, stage);
    receive_host(g, &seqs[1], ids);
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
    CHECK(gpu_p2p_nccl_open(HOST_MEMORY, &p2p) == IG_OK);
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
    }
    gpu_p2p_free(p2p);
    model_free(m);
    char name[32];
    snprintf(name, sizeof name, "pd_nccl_emu rank %d", ig_coll_rank());
    st = test_summary(name);
    ig_coll_finish();
    return st;
}
