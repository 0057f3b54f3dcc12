/* kvcache/kvfile.c: saving one sequence's cache to a stream and reading it
 * back, and the model identity a saved cache is bound to. Sequential both
 * ways (no seeks), so `-` through a pipe works. The format, version 2
 * (docs/kvcache.md):
 *
 *   "IGNITEKV" | u32 version | u32 dtype | u8[32] model id |
 *   i64 n_layer, n_groups, n_tokens, n_vocab |
 *   groups: n_groups x (u32 kind, u32 0, i64 window, i64 n_layers) |
 *   layers: n_layer x (i64 group, n_head_kv, head_dim, source, state_bytes) |
 *   i32 tokens[n_tokens] | f32 logits[n_vocab] |
 *   for each layer: a paged one's rows (K then V, for KV head: n_tokens x
 *   head_dim of K's or V's type, a quantized one's rows as their blocks), a
 *   recurrent one's state (state_bytes), nothing for a shared one |
 *   u32 CRC-32C of every byte before it | end of the stream
 *
 * all little-endian. dtype: K's type (enum kv_dtype: 0 f32, 1 f16, 2 q8_0,
 * 3 q4_0) in the low 16 bits, V's plus one in the high 16 where it differs
 * (0: V is K's type; a file of one type reads as it always did). Version 1 (i64 n_layer, n_head_kv, head_dim, n_tokens,
 * n_vocab after the model id; no tables) is version 2's body for a model
 * whose layers are all paged with one shape, and still loads for such a
 * model. What the cache means for generation (the sampler, the prompt) is
 * generate/engine.c's; the CLI options are cli/cmd_run.c's.
 * The model id hashes the weights in the passes the table of tensors gives
 * them (models/tensors.h, enum tensor_id_pass).
 * Covered by tests/kvcache/test_kvcache.c (version 1 too),
 * tests/kvcache/test_kvmem.c (every kind of layer), tests/kvcache/test_kv_cli.py
 * and tests/models/test_tensor_table.py. */
#include "kvcache/kvcache.h"

#include "core/checksum.h"
#include "core/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the KV file stores rows in host order, which must be little-endian"
#endif

static const char kv_magic[8] = {'I', 'G', 'N', 'I', 'T', 'E', 'K', 'V'};
#define KV_V1_HEADER_BYTES 88 /* magic .. n_vocab */
#define KV_V2_HEADER_BYTES 80 /* magic .. n_vocab, before the tables */
#define KV_GROUP_BYTES 24     /* a group's entry in the table */
#define KV_LAYER_BYTES 40     /* a layer's */

/* ---- model identity ------------------------------------------------------------ */

static void hash_i64(struct ig_sha256 *s, int64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    ig_sha256_update(s, b, 8);
}

/* A weight's type, shape and samples of its bytes; an absent weight as
 * zeros. The expert count only where there are several, so every weight
 * before it keeps its bytes. */
static void hash_weight(struct ig_sha256 *s, const struct model_weight *w)
{
    hash_i64(s, w->type);
    hash_i64(s, w->rows);
    hash_i64(s, w->cols);
    if (w->n_expert > 1)
        hash_i64(s, w->n_expert);
    size_t bytes = w->data ? model_weight_size(w) : 0;
    hash_i64(s, (int64_t)bytes);
    if (!bytes)
        return;
    if (w->expert_data) { /* experts apart (a folder's): samples of each */
        size_t one = (size_t)w->rows * w->row_bytes, n = one < 64 ? one : 64;
        for (int64_t e = 0; e < w->n_expert; e++) {
            const unsigned char *p = w->expert_data[e];
            ig_sha256_update(s, p, n);
            ig_sha256_update(s, p + one - n, n);
        }
        return;
    }
    /* Samples, not the whole weight: a run must not read gigabytes to start. */
    size_t n = bytes < 64 ? bytes : 64;
    const unsigned char *p = w->data;
    ig_sha256_update(s, p, n);
    ig_sha256_update(s, p + (bytes - n) / 2, n);
    ig_sha256_update(s, p + bytes - n, n);
}

static void hash_f64(struct ig_sha256 *s, double v)
{
    int64_t bits;
    memcpy(&bits, &v, 8);
    hash_i64(s, bits);
}

/* The weights of pass `pass` in table order (models/tensors.h), those a
 * model does not have included as zeros, as the id has always hashed them:
 * of every layer with the model's first (layer -1), else of layer l. */
static void hash_pass(struct ig_sha256 *s, const struct model *m, int64_t l,
                      enum tensor_id_pass pass)
{
    struct model_tensor_it it;
    if (l < 0)
        model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_ABSENT);
    else
        model_tensors_begin_layer(&it, m, l, MODEL_TENSORS_ABSENT);
    while (model_tensors_next(&it))
        if (it.t->id_pass == pass)
            hash_weight(s, it.w);
}

/* What the architectures after Llama 2 and Qwen2 added (Q/K norms,
 * post-norms, windows, RoPE variants and scalings), hashed only where a
 * model has any of it, so a plain Llama or Qwen2 model keeps the id it had. */
static void kv_model_id_ext(struct ig_sha256 *s, const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_rope *g = &hp->rope[MODEL_ROPE_GLOBAL];
    if (!model_arch_id_ext(hp->arch_id) && g->scaling == ROPE_SCALING_NONE && !g->freq_factors &&
        g->attn_factor == 1.0)
        return;
    ig_sha256_update(s, "ext", 3);
    int64_t ints[] = {hp->arch_id, hp->has_qk_norm, hp->has_post_norms, hp->ffn_act,
                      hp->n_swa, hp->n_swa_layers};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        hash_i64(s, ints[i]);
    double fs[] = {hp->embd_scale, hp->attn_scale, hp->attn_softcap, hp->final_softcap};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        hash_f64(s, fs[i]);
    for (int r = 0; r < 2; r++) {
        const struct model_rope *rp = &hp->rope[r];
        hash_i64(s, rp->scaling);
        hash_i64(s, rp->orig_ctx);
        double rf[] = {rp->base, rp->factor, rp->attn_factor, rp->yarn_ext_factor,
                       rp->yarn_beta_fast, rp->yarn_beta_slow};
        for (size_t i = 0; i < sizeof rf / sizeof rf[0]; i++)
            hash_f64(s, rf[i]);
        if (rp->freq_factors)
            ig_sha256_update(s, rp->freq_factors, (size_t)(hp->n_rot / 2) * sizeof(float));
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        hash_i64(s, m->layers[l].window);
        hash_i64(s, m->layers[l].rope);
        hash_pass(s, m, l, TENSOR_ID_EXT);
    }
}

void kv_model_id(const struct model *m, unsigned char id[KV_MODEL_ID_BYTES])
{
    const struct model_hparams *hp = &m->hp;
    struct ig_sha256 s;
    ig_sha256_init(&s);
    ig_sha256_update(&s, "ignite-kv-model-id-1", 21);
    ig_sha256_update(&s, hp->arch, strnlen(hp->arch, sizeof hp->arch));
    int64_t ints[] = {hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                      hp->n_ff, hp->n_vocab, hp->n_rot, hp->rope_style, hp->tied_embeddings,
                      hp->has_qkv_bias};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        hash_i64(&s, ints[i]);
    int64_t bits;
    memcpy(&bits, &hp->rope_base, 8);
    hash_i64(&s, bits);
    memcpy(&bits, &hp->norm_eps, 8);
    hash_i64(&s, bits);
    hash_pass(&s, m, -1, TENSOR_ID_FIRST);
    kv_model_id_ext(&s, m);
    /* rows added since: each weight the model has, with its layer and role */
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
        if (it.t->id_pass == TENSOR_ID_PRESENT) {
            hash_i64(&s, it.layer);
            hash_i64(&s, (int64_t)it.t->scope << 16 | it.t->role);
            hash_weight(&s, it.w);
        }
    ig_sha256_final(&s, id);
}

/* ---- writing ---------------------------------------------------------------------- */

struct writer {
    FILE *f;
    const char *name;
    uint32_t crc;
    bool no_crc; /* a part (kv_file_write_head, _layer, _tokens): no checksum to end it */
    int failed;
};

static void put(struct writer *w, const void *p, size_t n)
{
    if (w->failed || !n)
        return;
    if (!w->no_crc) /* (byte by byte: the parts, whose bytes MPI checks, skip it) */
        w->crc = ig_crc32c(w->crc, p, n);
    if (fwrite(p, 1, n, w->f) != n)
        w->failed = errno ? errno : EIO;
}

static void put_u32(struct writer *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(w, b, 4);
}

static void put_i64(struct writer *w, int64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    put(w, b, 8);
}

/* The groups and layers tables: what the file holds, layer by layer. */
/* The header's element-type word: K's type in the low 16 bits, V's plus 1
 * in the high 16, 0 where V's is K's (so a cache of one type has the word
 * it always had: 0 f32, 1 f16). */
static uint32_t kv_file_dtype_word(enum kv_dtype k, enum kv_dtype v)
{
    return (uint32_t)k | (v == k ? 0u : ((uint32_t)v + 1) << 16);
}

static void put_layers(struct writer *w, const struct kv_memory *mem)
{
    for (int64_t g = 0; g < mem->n_groups; g++) {
        const struct kv_group *G = &mem->groups[g];
        put_u32(w, (uint32_t)G->kind);
        put_u32(w, 0);
        put_i64(w, G->window);
        put_i64(w, G->n_layers);
    }
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        put_i64(w, L->group);
        put_i64(w, L->n_head_kv);
        put_i64(w, L->head_dim);
        put_i64(w, L->source);
        put_i64(w, (int64_t)L->state_bytes);
    }
}

/* The head: magic .. n_vocab and the tables. */
static void put_head(struct writer *w, const struct kv_memory *mem, int64_t n_pos,
                     const unsigned char id[KV_MODEL_ID_BYTES], int64_t n_vocab)
{
    put(w, kv_magic, sizeof kv_magic);
    put_u32(w, KV_FILE_VERSION);
    put_u32(w, kv_file_dtype_word(mem->dtype, mem->dtype_v));
    put(w, id, KV_MODEL_ID_BYTES);
    put_i64(w, mem->n_layer);
    put_i64(w, mem->n_groups);
    put_i64(w, n_pos);
    put_i64(w, n_vocab);
    put_layers(w, mem);
}

/* Layer l's part: a recurrent layer's state; a paged layer's rows [p0, p1)
 * (K then V, by KV head, each a run of positions), block by block through
 * table, or wtable for a sliding-window layer where it is given (the window
 * rule: a block given back, below 0, is written as zeros, as
 * kv_copy_seq_windowed reads it); nothing for a shared layer. */
static void put_layer(struct writer *w, const struct kv_store *st, const int32_t *table,
                      const int32_t *wtable, int64_t slot, int64_t l, int64_t p0, int64_t p1)
{
    const struct kv_memory *mem = st->memory;
    const struct kv_layer_mem *Lm = &mem->layers[l];
    if (Lm->kind == KV_RECURRENT) {
        put(w, kv_store_state(st, l, slot), Lm->state_bytes);
        return;
    }
    if (Lm->kind == KV_SHARED) /* its rows are its source's, saved there */
        return;
    const int32_t *t = wtable && kv_layer_windowed(mem, l) ? wtable : table;
    struct kv_layout L = kv_store_layout(st, l);
    static const unsigned char zeros[4096];
    for (int kind = 0; kind < 2; kind++) {
        size_t row = kv_dtype_row_bytes(kind ? mem->dtype_v : mem->dtype, Lm->head_dim);
        for (int64_t h = 0; h < Lm->n_head_kv; h++)
            for (int64_t p = p0; p < p1;) {
                int64_t run = KV_BLOCK - p % KV_BLOCK;
                run = p1 - p < run ? p1 - p : run;
                if (t[p / KV_BLOCK] >= 0) {
                    put(w, kv_row(&L, kind ? L.v : L.k, t, h, p), (size_t)run * row);
                } else {
                    for (size_t left = (size_t)run * row; left;) {
                        size_t n = left < sizeof zeros ? left : sizeof zeros;
                        put(w, zeros, n);
                        left -= n;
                    }
                }
                p += run;
            }
    }
}

static int finish(struct writer *w, const char *name)
{
    if (!w->failed && fflush(w->f) != 0)
        w->failed = errno ? errno : EIO;
    if (w->failed)
        return ig_error(IG_E_IO, "cannot write the KV cache to %s: %s", name, strerror(w->failed));
    return IG_OK;
}

int kv_file_write(FILE *f, const char *name, const struct kv_store *st, const int32_t *table,
                  int64_t slot, int64_t n_pos, const unsigned char id[KV_MODEL_ID_BYTES],
                  const int32_t *tokens, const float *logits, int64_t n_vocab)
{
    IG_ASSERT(n_pos >= 1);
    const struct kv_memory *mem = st->memory;
    struct writer w = {.f = f, .name = name};
    errno = 0;
    put_head(&w, mem, n_pos, id, logits ? n_vocab : 0);
    put(&w, tokens, (size_t)n_pos * sizeof *tokens);
    if (logits)
        put(&w, logits, (size_t)n_vocab * sizeof *logits);
    for (int64_t l = 0; l < mem->n_layer; l++)
        put_layer(&w, st, table, NULL, slot, l, 0, n_pos);
    put_u32(&w, w.crc);
    return finish(&w, name);
}

int kv_file_write_head(FILE *f, const char *name, const struct kv_memory *mem, int64_t n_pos,
                       const unsigned char id[KV_MODEL_ID_BYTES], int64_t n_vocab)
{
    IG_ASSERT(n_pos >= 1);
    struct writer w = {.f = f, .name = name, .no_crc = true};
    errno = 0;
    put_head(&w, mem, n_pos, id, n_vocab);
    return finish(&w, name);
}

int kv_file_write_tokens(FILE *f, const char *name, const int32_t *tokens, int64_t n_pos,
                         const float *logits, int64_t n_vocab)
{
    struct writer w = {.f = f, .name = name, .no_crc = true};
    errno = 0;
    put(&w, tokens, (size_t)n_pos * sizeof *tokens);
    if (logits)
        put(&w, logits, (size_t)n_vocab * sizeof *logits);
    return finish(&w, name);
}

int kv_file_write_layer(FILE *f, const char *name, const struct kv_store *st,
                        const int32_t *table, const int32_t *wtable, int64_t slot, int64_t layer,
                        int64_t p0, int64_t p1)
{
    IG_ASSERT(layer >= 0 && layer < st->memory->n_layer && 0 <= p0 && p0 <= p1);
    struct writer w = {.f = f, .name = name, .no_crc = true};
    errno = 0;
    put_layer(&w, st, table, wtable, slot, layer, p0, p1);
    return finish(&w, name);
}

/* ---- reading ---------------------------------------------------------------------- */

/* Reads exactly n bytes; IG_E_KVFILE at a premature end, IG_E_IO on an error. */
static int get(struct kv_file_reader *r, void *p, size_t n)
{
    size_t got = fread(p, 1, n, r->f);
    if (!r->no_crc)
        r->crc = ig_crc32c(r->crc, p, got);
    r->n_read += got;
    if (got == n)
        return IG_OK;
    if (ferror(r->f))
        return ig_error(IG_E_IO, "cannot read %s: %s", r->name, strerror(errno ? errno : EIO));
    return ig_error(IG_E_KVFILE, "%s: truncated KV cache file (it ends after %llu bytes)",
                    r->name, (unsigned long long)r->n_read);
}

static uint32_t le_u32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int64_t le_i64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return (int64_t)v;
}

/* Version 1's head after the model id: one shape for every layer, which
 * must be every layer of the model's (all paged, the same heads). */
static int read_v1_shape(struct kv_file_reader *r, const unsigned char *b)
{
    struct kv_file_header *h = &r->hdr;
    const struct kv_memory *want = r->want;
    int64_t n_head_kv = le_i64(b + 56), head_dim = le_i64(b + 64);
    h->n_layer = le_i64(b + 48);
    h->n_groups = 1;
    h->n_tokens = le_i64(b + 72);
    h->n_vocab = le_i64(b + 80);
    const struct kv_layer_mem *L0 = &want->layers[0];
    if (h->n_layer != want->n_layer || n_head_kv != L0->n_head_kv || head_dim != L0->head_dim)
        return ig_error(IG_E_KVFILE, "%s: shape %lld x %lld x %lld does not match the model's "
                        "%lld x %lld x %lld", r->name, (long long)h->n_layer,
                        (long long)n_head_kv, (long long)head_dim, (long long)want->n_layer,
                        (long long)L0->n_head_kv, (long long)L0->head_dim);
    for (int64_t l = 0; l < want->n_layer; l++) {
        const struct kv_layer_mem *L = &want->layers[l];
        if ((L->kind != KV_FULL && L->kind != KV_WINDOW) || L->n_head_kv != n_head_kv ||
            L->head_dim != head_dim)
            return ig_error(IG_E_KVFILE, "%s is a version 1 KV cache file, which holds every "
                            "layer's K and V alike, but layer %lld of the model is %s (save it "
                            "again with this version)", r->name, (long long)l,
                            kv_kind_name(L->kind));
    }
    return IG_OK;
}

/* Version 2's tables, checked entry by entry against the model's layers. */
static int read_v2_layers(struct kv_file_reader *r)
{
    const struct kv_memory *want = r->want;
    unsigned char b[KV_LAYER_BYTES];
    int st;
    for (int64_t g = 0; g < want->n_groups; g++) {
        if ((st = get(r, b, KV_GROUP_BYTES)) != IG_OK)
            return st;
        const struct kv_group *G = &want->groups[g];
        uint32_t kind = le_u32(b);
        int64_t window = le_i64(b + 8), n_layers = le_i64(b + 16);
        if (kind != (uint32_t)G->kind || le_u32(b + 4) != 0 || window != G->window ||
            n_layers != G->n_layers)
            return ig_error(IG_E_KVFILE, "%s: group %lld holds %lld layers of kind %u (window "
                            "%lld) but the model's holds %lld of %s (window %lld)", r->name,
                            (long long)g, (long long)n_layers, kind, (long long)window,
                            (long long)G->n_layers, kv_kind_name(G->kind),
                            (long long)G->window);
    }
    for (int64_t l = 0; l < want->n_layer; l++) {
        if ((st = get(r, b, KV_LAYER_BYTES)) != IG_OK)
            return st;
        const struct kv_layer_mem *L = &want->layers[l];
        int64_t f[5] = {le_i64(b), le_i64(b + 8), le_i64(b + 16), le_i64(b + 24),
                        le_i64(b + 32)};
        if (f[0] != L->group || f[1] != L->n_head_kv || f[2] != L->head_dim ||
            f[3] != L->source || f[4] != (int64_t)L->state_bytes)
            return ig_error(IG_E_KVFILE, "%s: layer %lld is saved as group %lld, %lld KV heads "
                            "x %lld, source %lld, %lld state bytes; the model's is group %lld, "
                            "%lld x %lld, source %lld, %zu state bytes", r->name, (long long)l,
                            (long long)f[0], (long long)f[1], (long long)f[2], (long long)f[3],
                            (long long)f[4], (long long)L->group, (long long)L->n_head_kv,
                            (long long)L->head_dim, (long long)L->source, L->state_bytes);
    }
    return IG_OK;
}

int kv_file_read_header(struct kv_file_reader *r, FILE *f, const char *name,
                        const struct kv_memory *want, int64_t n_vocab,
                        const unsigned char id[KV_MODEL_ID_BYTES])
{
    *r = (struct kv_file_reader){.f = f, .name = name, .model_vocab = n_vocab, .want = want};
    unsigned char b[KV_V1_HEADER_BYTES];
    int st = get(r, b, 16);
    if (st != IG_OK)
        return st;
    if (memcmp(b, kv_magic, sizeof kv_magic) != 0)
        return ig_error(IG_E_KVFILE, "%s is not an ignite KV cache file (no IGNITEKV magic)",
                        name);
    struct kv_file_header *h = &r->hdr;
    h->version = le_u32(b + 8);
    if (h->version < 1 || h->version > KV_FILE_VERSION)
        return ig_error(IG_E_KVFILE, "%s is a version %u KV cache file; this ignite reads "
                        "versions 1 to %d (save it again with this version)",
                        name, h->version, KV_FILE_VERSION);
    size_t head = h->version == 1 ? KV_V1_HEADER_BYTES : KV_V2_HEADER_BYTES;
    if ((st = get(r, b + 16, head - 16)) != IG_OK)
        return st;
    uint32_t word = le_u32(b + 12), dtype = word & 0xffff, dtype_v = word >> 16;
    dtype_v = dtype_v ? dtype_v - 1 : dtype; /* 0: V as K */
    if (dtype >= KV_N_DTYPES || dtype_v >= KV_N_DTYPES || (h->version == 1 && dtype_v != dtype))
        return ig_error(IG_E_KVFILE, "%s: unknown cache element type %u", name, word);
    h->dtype = (enum kv_dtype)dtype;
    h->dtype_v = (enum kv_dtype)dtype_v;
    memcpy(h->model_id, b + 16, KV_MODEL_ID_BYTES);
    if (memcmp(h->model_id, id, KV_MODEL_ID_BYTES) != 0) {
        if (h->version == 1)
            return ig_error(IG_E_KVFILE, "%s was saved from another model (%lld layers, %lld "
                            "KV heads x %lld; model identity differs): load it with the model "
                            "that wrote it", name, (long long)le_i64(b + 48),
                            (long long)le_i64(b + 56), (long long)le_i64(b + 64));
        return ig_error(IG_E_KVFILE, "%s was saved from another model (%lld layers in %lld "
                        "groups; model identity differs): load it with the model that wrote "
                        "it", name, (long long)le_i64(b + 48), (long long)le_i64(b + 56));
    }
    if (h->version == 1) {
        if ((st = read_v1_shape(r, b)) != IG_OK)
            return st;
    } else {
        h->n_layer = le_i64(b + 48);
        h->n_groups = le_i64(b + 56);
        h->n_tokens = le_i64(b + 64);
        h->n_vocab = le_i64(b + 72);
        /* the counts first: they size the tables read next */
        if (h->n_layer != want->n_layer || h->n_groups != want->n_groups)
            return ig_error(IG_E_KVFILE, "%s: %lld layers in %lld groups do not match the "
                            "model's %lld in %lld", name, (long long)h->n_layer,
                            (long long)h->n_groups, (long long)want->n_layer,
                            (long long)want->n_groups);
    }
    if (h->n_tokens < 1 || h->n_tokens > (int64_t)1 << 40 ||
        (h->n_vocab != 0 && h->n_vocab != n_vocab))
        return ig_error(IG_E_KVFILE, "%s: bad header (%lld tokens, %lld logits)", name,
                        (long long)h->n_tokens, (long long)h->n_vocab);
    if (h->version != 1 && (st = read_v2_layers(r)) != IG_OK)
        return st;
    /* a quantized type's rows are whole blocks: a file that claims one for
     * other head dims is not one this model could have written */
    for (int64_t l = 0; l < want->n_layer; l++) {
        const struct kv_layer_mem *L = &want->layers[l];
        if ((L->kind == KV_FULL || L->kind == KV_WINDOW) && L->head_dim % KV_QBLOCK &&
            (kv_dtype_quantized(h->dtype) || kv_dtype_quantized(h->dtype_v)))
            return ig_error(IG_E_KVFILE, "%s holds %s/%s rows, but layer %lld's head dim %lld "
                            "is not whole blocks of %d", name, kv_dtype_name(h->dtype),
                            kv_dtype_name(h->dtype_v), (long long)l, (long long)L->head_dim,
                            KV_QBLOCK);
        /* before version 3 a quantized K was rotated by the whole power of two
         * dividing the head dim: rows this ignite would read rotated otherwise */
        int64_t rot = kv_rotation(h->dtype, L->head_dim, false);
        if (h->version < 3 && (L->kind == KV_FULL || L->kind == KV_WINDOW) && rot &&
            L->head_dim % (2 * rot) == 0)
            return ig_error(IG_E_KVFILE, "%s is a version %u file whose %s K rows are rotated "
                            "in chunks of more than %lld (layer %lld, head dim %lld); this "
                            "ignite rotates them in chunks of %lld: save it again with this "
                            "version", name, h->version, kv_dtype_name(h->dtype), (long long)rot,
                            (long long)l, (long long)L->head_dim, (long long)rot);
    }
    return IG_OK;
}

int kv_file_read_layer(struct kv_file_reader *r, struct kv_store *store, int64_t layer,
                       int64_t p0, int64_t p1)
{
    const struct kv_memory *mem = store->memory;
    IG_ASSERT(layer >= 0 && layer < mem->n_layer && 0 <= p0 && p0 <= p1 &&
              p1 <= store->n_blocks * KV_BLOCK);
    const struct kv_layer_mem *Lm = &mem->layers[layer];
    if (Lm->kind == KV_RECURRENT)
        return get(r, kv_store_state(store, layer, 0), Lm->state_bytes);
    if (Lm->kind == KV_SHARED)
        return IG_OK;
    struct kv_layout L = kv_store_layout(store, layer);
    int st;
    for (int kind = 0; kind < 2; kind++) {
        enum kv_dtype dt = kind ? L.dtype_v : L.dtype;
        size_t row = kv_dtype_row_bytes(dt, Lm->head_dim);
        for (int64_t hh = 0; hh < Lm->n_head_kv; hh++)
            for (int64_t p = p0; p < p1;) {
                int64_t run = KV_BLOCK - p % KV_BLOCK;
                run = p1 - p < run ? p1 - p : run;
                /* The store's blocks are the file's positions in order. */
                int64_t block = p / KV_BLOCK;
                void *dst = (char *)(kind ? L.v : L.k) +
                            kv_dtype_row_bytes(dt, block * L.block_stride + hh * L.head_stride +
                                                       (p % KV_BLOCK) * L.head_dim);
                if ((st = get(r, dst, (size_t)run * row)) != IG_OK)
                    return st;
                p += run;
            }
    }
    return IG_OK;
}

int kv_file_read_tokens(struct kv_file_reader *r, int32_t *tokens, float *logits)
{
    const struct kv_file_header *h = &r->hdr;
    int st = get(r, tokens, (size_t)h->n_tokens * sizeof *tokens);
    if (st != IG_OK)
        return st;
    for (int64_t i = 0; i < h->n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= r->model_vocab)
            return ig_error(IG_E_KVFILE, "%s: token %lld is id %d, outside the vocabulary",
                            r->name, (long long)i, tokens[i]);
    if (h->n_vocab && (st = get(r, logits, (size_t)h->n_vocab * sizeof *logits)) != IG_OK)
        return st;
    return IG_OK;
}

int kv_file_new_store(const struct kv_file_reader *r, struct kv_store **out)
{
    const struct kv_file_header *h = &r->hdr;
    struct kv_memory *mem = NULL;
    *out = NULL;
    int st = kv_memory_copy(r->want, h->dtype, h->dtype_v, &mem);
    if (st == IG_OK)
        st = kv_store_create(mem, kv_blocks_for(h->n_tokens), kv_memory_states_for(mem, 1),
                             NULL, out);
    kv_memory_free(mem);
    return st;
}

int kv_file_read_body(struct kv_file_reader *r, struct kv_store **out, int32_t *tokens,
                      float *logits)
{
    const struct kv_file_header *h = &r->hdr;
    *out = NULL;
    int st = kv_file_read_tokens(r, tokens, logits);
    if (st != IG_OK)
        return st;
    struct kv_store *store = NULL;
    st = kv_file_new_store(r, &store);
    for (int64_t l = 0; st == IG_OK && l < store->memory->n_layer; l++)
        st = kv_file_read_layer(r, store, l, 0, h->n_tokens);
    uint32_t want = r->crc;
    unsigned char b[4];
    if (st == IG_OK && (st = get(r, b, 4)) == IG_OK && le_u32(b) != want)
        st = ig_error(IG_E_KVFILE, "%s: checksum mismatch (stored %08x, computed %08x): the "
                      "file is corrupted", r->name, le_u32(b), want);
    /* The file ends at the checksum: bytes after it (two files joined with
     * cat) are not ours to ignore. Through a pipe this waits for the writer
     * to close it. */
    errno = 0;
    if (st == IG_OK && fgetc(r->f) != EOF)
        st = ig_error(IG_E_KVFILE, "%s: trailing bytes after the KV cache's checksum (at byte "
                      "%llu): not one KV cache file", r->name, (unsigned long long)r->n_read);
    if (st == IG_OK && ferror(r->f))
        st = ig_error(IG_E_IO, "cannot read %s: %s", r->name, strerror(errno ? errno : EIO));
    if (st != IG_OK) {
        kv_store_free(store);
        return st;
    }
    *out = store;
    return IG_OK;
}
