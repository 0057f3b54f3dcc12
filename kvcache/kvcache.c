/* kvcache/kvcache.c: the host store of blocks and states, the one function
 * that writes new rows, and the allocator of blocks (with its prefix index)
 * and state slots (kvcache.h). The memory's description and sizes are
 * kvmem.c's; attention reads the blocks through kv_layout
 * (prefill/attn_tiled.c, the CUDA kernels); the file format is kvfile.c.
 * Covered by tests/kvcache/test_kvcache.c, test_kvmem.c, tests/cpu/ and (the
 * prefix index through the engine) tests/generate/test_engine.c. */
#include "kvcache/kvcache.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kv_devq.h"
#include "models/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- rows ------------------------------------------------------------------------- */

/* The ggml type of a quantized cache type. */
static enum quant_type quant_of(enum kv_dtype dtype)
{
    return dtype == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0;
}

/* One [head_dim] vector into the cache at `dst` (F16C where the CPU has
 * it: the scalar rounding was 0.8 % of a two-thread prefill; a quantized
 * type's blocks from the row alone, so a row's bytes never depend on its
 * neighbours). */
static uint16_t f16_bits(float x)
{
    return ig_f32_to_f16(x);
}

/* fp8 blocks (kvcache/kv_devq.h's quantizer) laid out as q8_0's: d, then
 * the 32 e4m3 bytes. */
static void fp8_row(uint8_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i += KV_QBLOCK, dst += 34) {
        uint16_t d;
        KVQ_QUANTIZE_BLOCK(KVQ_FP8, src + i, dst + 2, d, f16_bits);
        memcpy(dst, &d, 2);
    }
}

static void store_row(enum kv_dtype dtype, void *dst, const float *src, int64_t n)
{
    if (dtype == KV_FP8)
        fp8_row(dst, src, n);
    else if (dtype == KV_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else if (dtype == KV_F16)
        ig_f32_to_f16_row(src, dst, n);
    else
        quant_quantize_row(quant_of(dtype), src, dst, n);
}

void kv_write_rows(const struct kv_layout *L, const int32_t *table, int64_t n_head_kv,
                   int64_t pos0, int64_t n, const float *k, const float *v)
{
    IG_ASSERT(pos0 >= 0 && n >= 0);
    int64_t kv_dim = n_head_kv * L->head_dim;
    for (int64_t h = 0; h < n_head_kv; h++)
        for (int64_t t = 0; t < n; t++) {
            const float *ks = k + t * kv_dim + h * L->head_dim;
            const float *vs = v + t * kv_dim + h * L->head_dim;
            store_row(L->dtype, kv_row(L, L->k, table, h, pos0 + t), ks, L->head_dim);
            store_row(L->dtype_v, kv_row(L, L->v, table, h, pos0 + t), vs, L->head_dim);
        }
}

void kv_row_to_f32(enum kv_dtype dtype, const void *src, int64_t n, float *dst)
{
    if (dtype == KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
    if (dtype == KV_FP8) {
        const uint8_t *b = src;
        for (int64_t i = 0; i < n; i += KV_QBLOCK, b += 34) {
            const float d = ig_f16_to_f32((ig_f16)(b[0] | b[1] << 8));
            for (int j = 0; j < KV_QBLOCK; j++)
                dst[i + j] = kvq_value(KVQ_FP8, b[2 + j], d);
        }
        return;
    }
    if (kv_dtype_quantized(dtype)) {
        quant_dequantize_row(quant_of(dtype), src, dst, n);
        return;
    }
    const ig_f16 *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f16_to_f32(h[i]);
}

/* ---- the host store ------------------------------------------------------------------ */

int kv_store_create(const struct kv_memory *mem, int64_t n_blocks, int64_t n_states,
                    const char *hint, struct kv_store **out)
{
    return kv_store_create_windowed(mem, n_blocks, n_blocks, n_states, hint, out);
}

/* Blocks of layer L's arrays in st: a sliding-window layer's the window side's. */
static int64_t layer_blocks(const struct kv_store *st, const struct kv_layer_mem *L)
{
    return L->kind == KV_WINDOW ? st->n_wblocks : st->n_blocks;
}

int kv_store_create_windowed(const struct kv_memory *mem, int64_t n_blocks, int64_t n_wblocks,
                             int64_t n_states, const char *hint, struct kv_store **out)
{
    *out = NULL;
    if (n_blocks < 1 || n_wblocks < 1 || n_states < 0 || (mem->state_bytes && n_states < 1))
        return ig_error(IG_E_INTERNAL, "KV cache: bad size (%lld blocks, %lld window blocks, "
                        "%lld state slots)", (long long)n_blocks, (long long)n_wblocks,
                        (long long)n_states);
    double need = kv_memory_bytes_windowed(mem, n_blocks, n_wblocks == n_blocks ? 0 : n_wblocks,
                                           n_states),
           avail = kv_mem_available();
    if (need > (double)(SIZE_MAX / 4) || (avail > 0 && need > avail))
        /* in blocks, as allocated: positions would name a rounded -c (or -P
         * times it) that the user never gave */
        return ig_error(IG_E_NOMEM,
                        "the KV cache's %lld blocks of %d positions need %.1f MiB but %.1f "
                        "MiB of memory is available (%s)", (long long)n_blocks, KV_BLOCK,
                        need / 1048576.0, avail / 1048576.0, hint ? hint : "lower -c/--ctx-size");
    struct kv_store *st = calloc(1, sizeof *st);
    int s = st ? kv_memory_copy(mem, mem->dtype, mem->dtype_v, &st->memory) : IG_E_NOMEM;
    if (s == IG_OK && !(st->offset = malloc((size_t)mem->n_layer * sizeof *st->offset)))
        s = IG_E_NOMEM;
    if (s != IG_OK) {
        kv_store_free(st);
        return ig_error(IG_E_NOMEM, "out of memory allocating the KV cache");
    }
    st->n_blocks = n_blocks;
    st->n_wblocks = n_wblocks;
    st->n_states = n_states;
    /* Paged layers' K then V arrays and recurrent layers' states, in layer
     * order; a shared layer points at its source's. */
    size_t at = 0;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if (L->kind == KV_SHARED)
            continue;
        st->offset[l] = at;
        int64_t nb = layer_blocks(st, L);
        at += L->kind == KV_RECURRENT
                  ? (size_t)n_states * L->state_bytes + (n_states ? L->ckpt_bytes : 0)
                  : kv_dtype_row_bytes(mem->dtype, nb * kv_layer_block_elems(L)) +
                        kv_dtype_row_bytes(mem->dtype_v, nb * kv_layer_block_elems(L));
    }
    for (int64_t l = 0; l < mem->n_layer; l++)
        if (mem->layers[l].kind == KV_SHARED)
            st->offset[l] = st->offset[mem->layers[l].source];
    st->bytes = at ? at : 1;
    /* Reserved, not committed: a page costs memory when a row is first written. */
    void *base = mmap(NULL, st->bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        st->bytes = 0;
        kv_store_free(st);
        return ig_error(IG_E_NOMEM, "cannot reserve %.1f MiB of address space for the KV cache",
                        need / 1048576.0);
    }
    st->base = base;
    *out = st;
    return IG_OK;
}

void kv_store_free(struct kv_store *st)
{
    if (!st)
        return;
    if (st->base)
        munmap(st->base, st->bytes);
    free(st->offset);
    kv_memory_free(st->memory);
    free(st);
}

struct kv_layout kv_store_layout(const struct kv_store *st, int64_t layer)
{
    const struct kv_memory *mem = st->memory;
    IG_ASSERT(layer >= 0 && layer < mem->n_layer);
    const struct kv_layer_mem *L = &mem->layers[kv_memory_kv_layer(mem, layer)];
    size_t array = kv_dtype_row_bytes(mem->dtype, layer_blocks(st, L) * kv_layer_block_elems(L));
    char *k = st->base + st->offset[layer];
    return kv_memory_layout(mem, layer, k, k + array);
}

void *kv_store_state(const struct kv_store *st, int64_t layer, int64_t slot)
{
    const struct kv_memory *mem = st->memory;
    IG_ASSERT(layer >= 0 && layer < mem->n_layer && slot >= 0 && slot < st->n_states);
    const struct kv_layer_mem *L = &mem->layers[layer];
    IG_ASSERT(L->kind == KV_RECURRENT);
    return st->base + st->offset[layer] + (size_t)slot * L->state_bytes;
}

void *kv_store_ckpt(const struct kv_store *st, int64_t layer)
{
    const struct kv_memory *mem = st->memory;
    IG_ASSERT(layer >= 0 && layer < mem->n_layer && st->n_states > 0);
    const struct kv_layer_mem *L = &mem->layers[layer];
    IG_ASSERT(L->kind == KV_RECURRENT);
    if (!L->ckpt_bytes)
        return NULL;
    return st->base + st->offset[layer] + (size_t)st->n_states * L->state_bytes;
}

void kv_copy_seq(const struct kv_store *dst, const int32_t *dst_table, int64_t dst_slot,
                 const struct kv_store *src, const int32_t *src_table, int64_t src_slot,
                 int64_t n_pos)
{
    kv_copy_seq_windowed(dst, dst_table, NULL, dst_slot, src, src_table, NULL, src_slot, n_pos);
}

void kv_copy_seq_windowed(const struct kv_store *dst, const int32_t *dst_table,
                          const int32_t *dst_wtable, int64_t dst_slot,
                          const struct kv_store *src, const int32_t *src_table,
                          const int32_t *src_wtable, int64_t src_slot, int64_t n_pos)
{
    const struct kv_memory *mem = src->memory;
    IG_ASSERT(kv_memory_same_layers(dst->memory, mem));
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if (L->kind == KV_RECURRENT) {
            memcpy(kv_store_state(dst, l, dst_slot), kv_store_state(src, l, src_slot),
                   L->state_bytes);
            struct kv_ckpt_head *ck = kv_store_ckpt(dst, l);
            if (ck && ck->n && ck->slot == dst_slot) /* no step of a prompt there left it */
                memset(ck, 0, KV_STATE_ALIGN);
            continue;
        }
        if (L->kind == KV_SHARED) /* its source's rows are copied with the source */
            continue;
        float *row = malloc((size_t)L->head_dim * sizeof *row);
        IG_ASSERT(row != NULL);
        struct kv_layout ls = kv_store_layout(src, l), ld = kv_store_layout(dst, l);
        bool win = L->kind == KV_WINDOW;
        const int32_t *stab = win && src_wtable ? src_wtable : src_table;
        const int32_t *dtab = win && dst_wtable ? dst_wtable : dst_table;
        for (int kind = 0; kind < 2; kind++) {
            void *sb = kind ? ls.v : ls.k, *db = kind ? ld.v : ld.k;
            enum kv_dtype st = kv_base_dtype(&ls, sb), dt = kv_base_dtype(&ld, db);
            size_t bytes = kv_dtype_row_bytes(st, L->head_dim);
            for (int64_t h = 0; h < L->n_head_kv; h++)
                for (int64_t p = 0; p < n_pos; p++) {
                    if (dtab[p / KV_BLOCK] < 0) /* given back: nothing to write */
                        continue;
                    void *to = kv_row(&ld, db, dtab, h, p);
                    if (stab[p / KV_BLOCK] < 0) { /* given back: no later row reads it */
                        memset(to, 0, kv_dtype_row_bytes(dt, L->head_dim));
                        continue;
                    }
                    const void *from = kv_row(&ls, sb, stab, h, p);
                    if (st == dt) { /* the bytes: quantizing again could move a scale */
                        memcpy(to, from, bytes);
                        continue;
                    }
                    kv_row_to_f32(st, from, L->head_dim, row);
                    store_row(dt, to, row, L->head_dim);
                }
        }
        free(row);
    }
}

void kv_identity_table(int32_t *table, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        table[i] = (int32_t)i;
}

/* ---- the allocator --------------------------------------------------------------------- */

/* A free list of block ids, least recently freed first (-1 ends). */
struct free_list {
    int32_t *prev, *next; /* [blocks] */
    int32_t head, tail;
    int64_t n_free;
};

/* A prefix index entry is keyed by the block's tokens and the block before it
 * in the chain (id and generation: a block handed out again or rewritten in
 * place (kv_pool_shrink) gets a new generation, so entries that hang off its
 * old content never match). */
struct kv_pool {
    int64_t n_blocks;
    bool share;
    int32_t *refs;        /* [n_blocks] sequences holding the block */
    struct free_list fl;  /* blocks with refs == 0 */
    int64_t reserved;     /* blocks promised to admitted sequences, not yet taken */
    int64_t used, peak, hits;
    int64_t n_states;     /* recurrent state slots; 0: sequences need none */
    int64_t states_used, states_peak;
    /* prefix index */
    uint32_t *gen;        /* [n_blocks] bumped when a block is handed out anew */
    int32_t *parent;      /* [n_blocks] the indexed block's predecessor, -1 for the first */
    uint32_t *parent_gen; /* [n_blocks] */
    int32_t *tokens;      /* [n_blocks][KV_BLOCK] the indexed block's tokens */
    bool *indexed;        /* [n_blocks] */
    int32_t *slots;       /* [n_slots] block ids by hash, -1 empty; linear probing */
    int64_t n_slots;      /* a power of two >= 2 n_blocks */
    /* the window side (n_wblocks > 0): the sliding-window layers' blocks */
    int64_t n_wblocks, w_span, w_cap;
    int32_t *wrefs;       /* [n_wblocks] */
    uint32_t *wgen;       /* [n_wblocks] bumped when handed out anew or rewritten */
    struct free_list wfl;
    int64_t w_promised;   /* the admitted sequences' w_need summed (<= n_wblocks) */
    int64_t wused, wpeak, wfreed;
    /* twins: full block id -> the window block written beside it, valid while
     * both generations are the ones recorded (a shared prefix's window rows) */
    int32_t *twin;        /* [n_blocks] -1: none */
    uint32_t *twin_gen, *twin_wgen; /* [n_blocks] */
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t block_key(int32_t parent, uint32_t parent_gen, const int32_t *tokens)
{
    uint64_t h = mix(0x243f6a8885a308d3ull, (uint64_t)(uint32_t)parent << 32 | parent_gen);
    for (int i = 0; i < KV_BLOCK; i++)
        h = mix(h, (uint32_t)tokens[i]);
    return h ^ (h >> 29);
}

static bool entry_is(const struct kv_pool *p, int32_t id, int32_t parent, uint32_t parent_gen,
                     const int32_t *tokens)
{
    return p->parent[id] == parent && p->parent_gen[id] == parent_gen &&
           !memcmp(p->tokens + (int64_t)id * KV_BLOCK, tokens, KV_BLOCK * sizeof *tokens);
}

/* The indexed block holding `tokens` after (parent, parent_gen), or -1. */
static int32_t index_find(const struct kv_pool *p, int32_t parent, uint32_t parent_gen,
                          const int32_t *tokens)
{
    uint64_t mask = (uint64_t)p->n_slots - 1;
    for (uint64_t i = block_key(parent, parent_gen, tokens) & mask;; i = (i + 1) & mask) {
        int32_t id = p->slots[i];
        if (id < 0)
            return -1;
        if (entry_is(p, id, parent, parent_gen, tokens))
            return id;
    }
}

static uint64_t slot_home(const struct kv_pool *p, int32_t id)
{
    return block_key(p->parent[id], p->parent_gen[id], p->tokens + (int64_t)id * KV_BLOCK) &
           ((uint64_t)p->n_slots - 1);
}

static void index_insert(struct kv_pool *p, int32_t id, int32_t parent, uint32_t parent_gen,
                         const int32_t *tokens)
{
    p->parent[id] = parent;
    p->parent_gen[id] = parent_gen;
    memcpy(p->tokens + (int64_t)id * KV_BLOCK, tokens, KV_BLOCK * sizeof *tokens);
    uint64_t mask = (uint64_t)p->n_slots - 1, i = slot_home(p, id);
    while (p->slots[i] >= 0)
        i = (i + 1) & mask;
    p->slots[i] = id;
    p->indexed[id] = true;
}

/* Removes block id from the index (backward-shift deletion keeps every
 * remaining entry reachable from its home slot). */
static void index_remove(struct kv_pool *p, int32_t id)
{
    uint64_t mask = (uint64_t)p->n_slots - 1, i = slot_home(p, id);
    while (p->slots[i] != id)
        i = (i + 1) & mask;
    for (uint64_t j = (i + 1) & mask; p->slots[j] >= 0; j = (j + 1) & mask) {
        uint64_t home = slot_home(p, p->slots[j]);
        /* Move entry j into the hole at i unless its home lies in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            p->slots[i] = p->slots[j];
            i = j;
        }
    }
    p->slots[i] = -1;
    p->indexed[id] = false;
}

static void fl_unlink(struct free_list *l, int32_t id)
{
    if (l->prev[id] >= 0)
        l->next[l->prev[id]] = l->next[id];
    else
        l->head = l->next[id];
    if (l->next[id] >= 0)
        l->prev[l->next[id]] = l->prev[id];
    else
        l->tail = l->prev[id];
    l->prev[id] = l->next[id] = -1;
    l->n_free--;
}

static void fl_append(struct free_list *l, int32_t id)
{
    l->prev[id] = l->tail;
    l->next[id] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = id;
    else
        l->head = id;
    l->tail = id;
    l->n_free++;
}

/* n ids, all free in order; IG_OK or IG_E_NOMEM. */
static int fl_init(struct free_list *l, int64_t n)
{
    l->prev = malloc((size_t)n * sizeof *l->prev);
    l->next = malloc((size_t)n * sizeof *l->next);
    if (!l->prev || !l->next)
        return IG_E_NOMEM;
    l->head = l->tail = -1;
    l->n_free = 0;
    for (int64_t b = 0; b < n; b++)
        fl_append(l, (int32_t)b);
    return IG_OK;
}

static void fl_free(struct free_list *l)
{
    free(l->prev);
    free(l->next);
}

static void list_unlink(struct kv_pool *p, int32_t id) { fl_unlink(&p->fl, id); }
static void list_append(struct kv_pool *p, int32_t id) { fl_append(&p->fl, id); }

int kv_pool_create(int64_t n_blocks, int64_t n_states, bool share_prefixes,
                   struct kv_pool **out)
{
    return kv_pool_create_windowed(n_blocks, n_states, share_prefixes, 0, 0, 0, out);
}

int kv_pool_create_windowed(int64_t n_blocks, int64_t n_states, bool share_prefixes,
                            int64_t n_wblocks, int64_t w_span, int64_t w_cap,
                            struct kv_pool **out)
{
    *out = NULL;
    IG_ASSERT(n_blocks >= 1 && n_blocks <= INT32_MAX / 4 && n_states >= 0);
    IG_ASSERT(n_wblocks >= 0 && n_wblocks <= INT32_MAX / 4 && w_span >= 0 &&
              (!n_wblocks || (w_cap >= 1 && w_cap <= n_wblocks)));
    struct kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory for the KV block table");
    p->n_blocks = n_blocks;
    p->n_states = n_states;
    /* A recurrent state after a shared prefix would have to be that
     * prefix's state: blocks alone cannot give it. */
    share_prefixes = share_prefixes && n_states == 0;
    p->share = share_prefixes;
    p->n_slots = 2;
    while (p->n_slots < 2 * n_blocks)
        p->n_slots *= 2;
    size_t n = (size_t)n_blocks;
    p->refs = calloc(n, sizeof *p->refs);
    int fst = fl_init(&p->fl, n_blocks);
    p->gen = calloc(n, sizeof *p->gen);
    p->parent = malloc(n * sizeof *p->parent);
    p->parent_gen = calloc(n, sizeof *p->parent_gen);
    p->indexed = calloc(n, sizeof *p->indexed);
    p->tokens = share_prefixes ? malloc(n * KV_BLOCK * sizeof *p->tokens) : NULL;
    p->slots = malloc((size_t)p->n_slots * sizeof *p->slots);
    bool wok = true;
    if (n_wblocks) {
        p->n_wblocks = n_wblocks;
        p->w_span = w_span;
        p->w_cap = w_cap;
        p->wrefs = calloc((size_t)n_wblocks, sizeof *p->wrefs);
        p->wgen = calloc((size_t)n_wblocks, sizeof *p->wgen);
        p->twin = malloc(n * sizeof *p->twin);
        p->twin_gen = calloc(n, sizeof *p->twin_gen);
        p->twin_wgen = calloc(n, sizeof *p->twin_wgen);
        wok = fl_init(&p->wfl, n_wblocks) == IG_OK && p->wrefs && p->wgen && p->twin &&
              p->twin_gen && p->twin_wgen;
        if (p->twin)
            memset(p->twin, 0xff, n * sizeof *p->twin);
    }
    if (!p->refs || fst != IG_OK || !p->gen || !p->parent || !p->parent_gen ||
        !p->indexed || (share_prefixes && !p->tokens) || !p->slots || !wok) {
        kv_pool_free(p);
        return ig_error(IG_E_NOMEM, "out of memory for the KV block table (%lld blocks)",
                        (long long)n_blocks);
    }
    memset(p->slots, 0xff, (size_t)p->n_slots * sizeof *p->slots);
    *out = p;
    return IG_OK;
}

void kv_pool_free(struct kv_pool *p)
{
    if (!p)
        return;
    free(p->slots);
    free(p->tokens);
    free(p->indexed);
    free(p->parent_gen);
    free(p->parent);
    free(p->gen);
    fl_free(&p->fl);
    free(p->refs);
    free(p->wrefs);
    free(p->wgen);
    fl_free(&p->wfl);
    free(p->twin);
    free(p->twin_gen);
    free(p->twin_wgen);
    free(p);
}

int64_t kv_pool_n_blocks(const struct kv_pool *p) { return p->n_blocks; }
int64_t kv_pool_available(const struct kv_pool *p) { return p->fl.n_free - p->reserved; }
int64_t kv_pool_used(const struct kv_pool *p) { return p->used; }
int64_t kv_pool_peak(const struct kv_pool *p) { return p->peak; }
int64_t kv_pool_hits(const struct kv_pool *p) { return p->hits; }
int64_t kv_pool_n_states(const struct kv_pool *p) { return p->n_states; }
int64_t kv_pool_states_used(const struct kv_pool *p) { return p->states_used; }
int64_t kv_pool_states_peak(const struct kv_pool *p) { return p->states_peak; }
int64_t kv_pool_window_blocks(const struct kv_pool *p) { return p->n_wblocks; }
int64_t kv_pool_window_used(const struct kv_pool *p) { return p->wused; }
int64_t kv_pool_window_promised(const struct kv_pool *p) { return p->w_promised; }
int64_t kv_pool_window_peak(const struct kv_pool *p) { return p->wpeak; }
int64_t kv_pool_window_freed(const struct kv_pool *p) { return p->wfreed; }

double kv_pool_peak_bytes(const struct kv_pool *p, const struct kv_memory *mem)
{
    return kv_memory_bytes_windowed(mem, p->peak, p->n_wblocks ? p->wpeak : 0, p->states_peak);
}

int kv_seq_init(struct kv_seq *s, int64_t max_pos)
{
    *s = (struct kv_seq){.max_blocks = kv_blocks_for(max_pos > 0 ? max_pos : 1)};
    s->table = malloc((size_t)s->max_blocks * sizeof *s->table);
    s->wtable = malloc((size_t)s->max_blocks * sizeof *s->wtable);
    if (!s->table || !s->wtable) {
        free(s->table);
        free(s->wtable);
        *s = (struct kv_seq){0};
        return ig_error(IG_E_NOMEM, "out of memory for a block table of %lld entries",
                        (long long)kv_blocks_for(max_pos > 0 ? max_pos : 1));
    }
    return IG_OK;
}

void kv_seq_destroy(struct kv_seq *s)
{
    free(s->table);
    free(s->wtable);
    *s = (struct kv_seq){0};
}

/* ---- the window side ----------------------------------------------------------------- */

/* Window blocks a sequence of max_pos positions may hold at once. */
static int64_t w_need(const struct kv_pool *p, int64_t max_pos)
{
    int64_t n = kv_blocks_for(max_pos);
    return n < p->w_cap ? n : p->w_cap;
}

/* The first block a row at position `pos` can see. */
static int64_t w_first(const struct kv_pool *p, int64_t pos)
{
    return kv_window_first(p->w_span, pos);
}

/* Whether full block f's twin still holds the window rows written beside it. */
static bool twin_valid(const struct kv_pool *p, int32_t f)
{
    int32_t w = p->twin[f];
    return w >= 0 && p->twin_gen[f] == p->gen[f] && p->twin_wgen[f] == p->wgen[w];
}

static void w_hold(struct kv_pool *p, int32_t w)
{
    if (p->wrefs[w]++ == 0) {
        fl_unlink(&p->wfl, w);
        p->wused++;
        p->wpeak = p->wused > p->wpeak ? p->wused : p->wpeak;
    }
}

static void w_drop(struct kv_pool *p, int32_t w)
{
    IG_ASSERT(p->wrefs[w] > 0);
    if (--p->wrefs[w] == 0) {
        fl_append(&p->wfl, w);
        p->wused--;
    }
}

/* A new window block for entry i of s's window table. The promises keep
 * the blocks held at most n_wblocks: one is free. */
static void w_take(struct kv_pool *p, struct kv_seq *s, int64_t i)
{
    int32_t w = p->wfl.head;
    IG_ASSERT(w >= 0);
    p->wgen[w]++; /* its rows are written anew: twins recorded on it are gone */
    w_hold(p, w);
    s->wtable[i] = w;
}

/* Gives back the window blocks of s before entry `lo`. */
static void w_slide(struct kv_pool *p, struct kv_seq *s, int64_t lo)
{
    for (int64_t i = s->w_lo; i < lo && i < s->n_blocks; i++)
        if (s->wtable[i] >= 0) {
            w_drop(p, s->wtable[i]);
            s->wtable[i] = -1;
            p->wfreed++;
        }
    s->w_lo = lo > s->w_lo ? lo : s->w_lo;
}

/* Window blocks s holds now. */
static int64_t w_held(const struct kv_seq *s)
{
    int64_t n = 0;
    for (int64_t i = s->w_lo; i < s->n_blocks; i++)
        n += s->wtable[i] >= 0;
    return n;
}

/* ---- the full side and the prefix index ------------------------------------------------ */

/* Walks the index along tokens: ids[i] for the first blocks found, at most
 * max_blocks; returns how many. ids may be NULL. */
static int64_t walk(const struct kv_pool *p, const int32_t *tokens, int64_t n, int64_t max_blocks,
                    int32_t *ids)
{
    if (!p->share)
        return 0;
    int32_t parent = -1;
    uint32_t parent_gen = 0;
    int64_t i = 0;
    for (; i < max_blocks && (i + 1) * KV_BLOCK <= n; i++) {
        int32_t id = index_find(p, parent, parent_gen, tokens + i * KV_BLOCK);
        if (id < 0)
            break;
        if (ids)
            ids[i] = id;
        parent = id;
        parent_gen = p->gen[id];
    }
    return i;
}

int64_t kv_pool_match(const struct kv_pool *p, const int32_t *tokens, int64_t n,
                      int64_t max_blocks)
{
    if (!p->n_wblocks)
        return walk(p, tokens, n, max_blocks, NULL);
    /* With a window side, a prefix of k blocks is shared only where the
     * window blocks beside its last ones, those a row at k * KV_BLOCK sees,
     * still hold their rows. */
    int32_t *ids = malloc((size_t)(max_blocks > 0 ? max_blocks : 1) * sizeof *ids);
    if (!ids)
        return 0; /* (nothing shared: computed again) */
    int64_t k = walk(p, tokens, n, max_blocks, ids);
    for (; k > 0; k--) {
        int64_t i = w_first(p, k * KV_BLOCK);
        while (i < k && twin_valid(p, ids[i]))
            i++;
        if (i == k)
            break;
    }
    free(ids);
    return k;
}

/* Blocks an admission takes off the free list: the new ones it reserves and
 * the shared ones nobody holds now. */
static int64_t admission_cost(const struct kv_pool *p, const int32_t *tokens, int64_t n_shared,
                              int64_t max_pos)
{
    int64_t need = kv_blocks_for(max_pos);
    IG_ASSERT(n_shared >= 0 && n_shared <= need);
    int64_t cost = need - n_shared;
    int32_t parent = -1;
    uint32_t parent_gen = 0;
    for (int64_t i = 0; i < n_shared; i++) {
        int32_t id = index_find(p, parent, parent_gen, tokens + i * KV_BLOCK);
        IG_ASSERT(id >= 0); /* n_shared came from kv_pool_match */
        cost += p->refs[id] == 0;
        parent = id;
        parent_gen = p->gen[id];
    }
    return cost;
}

bool kv_pool_can_admit(const struct kv_pool *p, const int32_t *tokens, int64_t n_shared,
                       int64_t max_pos)
{
    if (p->n_states && p->states_used == p->n_states)
        return false;
    /* The window side promises each sequence the blocks it may hold at
     * once: shared or not, the blocks held never outnumber the promises. */
    if (p->n_wblocks && w_need(p, max_pos) > p->n_wblocks - p->w_promised)
        return false;
    return admission_cost(p, tokens, n_shared, max_pos) <= kv_pool_available(p);
}

int kv_pool_admit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int64_t n_shared,
                  int64_t max_pos)
{
    IG_ASSERT(s->n_blocks == 0 && s->reserved == 0 && !s->has_state &&
              kv_blocks_for(max_pos) <= s->max_blocks);
    if (!kv_pool_can_admit(p, tokens, n_shared, max_pos))
        return IG_E_NOMEM;
    int64_t got = walk(p, tokens, n_shared * KV_BLOCK, n_shared, s->table);
    IG_ASSERT(got == n_shared);
    for (int64_t i = 0; i < n_shared; i++) {
        int32_t id = s->table[i];
        if (p->refs[id]++ == 0) {
            list_unlink(p, id);
            p->used++;
        }
    }
    p->hits += n_shared;
    s->n_blocks = s->n_registered = n_shared;
    s->n_pos = n_shared * KV_BLOCK;
    s->reserved = kv_blocks_for(max_pos) - n_shared;
    p->reserved += s->reserved;
    p->peak = p->used > p->peak ? p->used : p->peak;
    if (p->n_wblocks) {
        s->w_lo = w_first(p, s->n_pos);
        for (int64_t i = 0; i < n_shared; i++) {
            s->wtable[i] = i < s->w_lo ? -1 : p->twin[s->table[i]];
            if (i >= s->w_lo) {
                IG_ASSERT(twin_valid(p, s->table[i])); /* kv_pool_match checked it */
                w_hold(p, s->wtable[i]);
            }
        }
        s->w_reserved = w_need(p, max_pos);
        p->w_promised += s->w_reserved;
    }
    if (p->n_states) {
        s->has_state = true;
        p->states_used++;
        p->states_peak = p->states_used > p->states_peak ? p->states_used : p->states_peak;
    }
    return IG_OK;
}

/* Grows s's tables to n_pos positions, its window table from entry `w_from`. */
static void grow_to(struct kv_pool *p, struct kv_seq *s, int64_t n_pos, int64_t w_from)
{
    if (p->n_wblocks)
        w_slide(p, s, w_from);
    while (s->n_blocks * KV_BLOCK < n_pos) {
        IG_ASSERT(s->reserved > 0 && p->fl.head >= 0 && s->n_blocks < s->max_blocks);
        int32_t id = p->fl.head;
        list_unlink(p, id);
        if (p->indexed[id])
            index_remove(p, id);
        p->gen[id]++;
        p->refs[id] = 1;
        p->used++;
        if (p->n_wblocks) {
            s->wtable[s->n_blocks] = -1;
            if (s->n_blocks >= s->w_lo)
                w_take(p, s, s->n_blocks);
        }
        s->table[s->n_blocks++] = id;
        s->reserved--;
        p->reserved--;
    }
    p->peak = p->used > p->peak ? p->used : p->peak;
    IG_ASSERT(!p->n_wblocks || w_held(s) <= s->w_reserved); /* within its promise */
}

void kv_pool_grow(struct kv_pool *p, struct kv_seq *s, int64_t n_pos)
{
    /* the rows from s->n_pos on see back to s->n_pos - w_span */
    grow_to(p, s, n_pos, p->n_wblocks ? w_first(p, s->n_pos) : 0);
}

void kv_pool_grow_loaded(struct kv_pool *p, struct kv_seq *s, int64_t n_pos)
{
    grow_to(p, s, n_pos, p->n_wblocks ? w_first(p, n_pos) : 0);
}

void kv_pool_register(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens)
{
    if (!p->share)
        return;
    for (int64_t i = s->n_registered; (i + 1) * KV_BLOCK <= s->n_pos && i < s->n_blocks; i++) {
        int32_t parent = i ? s->table[i - 1] : -1;
        uint32_t parent_gen = i ? p->gen[parent] : 0;
        const int32_t *t = tokens + i * KV_BLOCK;
        if (index_find(p, parent, parent_gen, t) >= 0) {
            /* Another sequence entered the same block first: later blocks of
             * this one hang off a block the index does not know. */
            s->n_registered = s->max_blocks;
            return;
        }
        index_insert(p, s->table[i], parent, parent_gen, t);
        if (p->n_wblocks) { /* the window rows written beside it */
            int32_t f = s->table[i], w = i >= s->w_lo ? s->wtable[i] : -1;
            p->twin[f] = w;
            p->twin_gen[f] = p->gen[f];
            p->twin_wgen[f] = w >= 0 ? p->wgen[w] : 0;
        }
        s->n_registered = i + 1;
    }
}

void kv_pool_release(struct kv_pool *p, struct kv_seq *s)
{
    /* The last blocks go back first, so they are handed out again before the
     * prefix blocks that other requests are likelier to share. */
    for (int64_t i = s->n_blocks - 1; i >= 0; i--) {
        int32_t id = s->table[i];
        IG_ASSERT(p->refs[id] > 0);
        if (--p->refs[id] == 0) {
            list_append(p, id);
            p->used--;
        }
        if (p->n_wblocks && i >= s->w_lo && s->wtable[i] >= 0)
            w_drop(p, s->wtable[i]);
    }
    p->reserved -= s->reserved;
    p->w_promised -= s->w_reserved;
    s->reserved = s->n_blocks = s->n_pos = s->n_registered = 0;
    s->w_reserved = s->w_lo = 0;
    if (s->has_state) {
        p->states_used--;
        s->has_state = false;
    }
}

void kv_pool_shrink(struct kv_pool *p, struct kv_seq *s, int64_t n_pos)
{
    IG_ASSERT(n_pos >= 0 && n_pos <= s->n_pos);
    int64_t keep = kv_blocks_for(n_pos);
    /* A window side cannot give back rows it no longer holds: a row at
     * n_pos must still see its window (the engine never shrinks further
     * back where the pool has one: generate/engine.c). */
    IG_ASSERT(!p->n_wblocks || keep == 0 || s->w_lo <= w_first(p, n_pos));
    for (int64_t i = s->n_blocks - 1; i >= keep; i--) {
        int32_t id = s->table[i];
        IG_ASSERT(p->refs[id] == 1); /* written by this sequence alone */
        p->refs[id] = 0;
        list_append(p, id);
        p->used--;
        if (p->n_wblocks && s->wtable[i] >= 0)
            w_drop(p, s->wtable[i]);
    }
    s->n_blocks = keep;
    if (n_pos % KV_BLOCK) {
        int32_t id = s->table[keep - 1];
        IG_ASSERT(p->refs[id] == 1);
        if (p->indexed[id])
            index_remove(p, id);
        /* Its content changes in place: entries that hung off it (the blocks
         * just freed stay indexed) must never match after it is entered
         * again with its new tokens. */
        p->gen[id]++;
        if (p->n_wblocks && s->wtable[keep - 1] >= 0)
            p->wgen[s->wtable[keep - 1]]++;
    }
    if (s->n_registered > n_pos / KV_BLOCK && s->n_registered < s->max_blocks)
        s->n_registered = n_pos / KV_BLOCK; /* (max_blocks: never registers) */
    p->reserved -= s->reserved;
    s->reserved = 0;
    if (p->n_wblocks) { /* the promise is what it holds, until kv_pool_reserve */
        p->w_promised -= s->w_reserved - w_held(s);
        s->w_reserved = w_held(s);
    }
    s->n_pos = n_pos;
}

void kv_pool_trim(struct kv_pool *p, struct kv_seq *s, int64_t n_pos)
{
    IG_ASSERT(n_pos >= 0 && n_pos <= s->n_blocks * KV_BLOCK);
    /* (n_registered == max_blocks: a sequence that never registers) */
    IG_ASSERT(s->n_registered * KV_BLOCK <= n_pos || s->n_registered >= s->max_blocks);
    int64_t keep = kv_blocks_for(n_pos);
    /* the window side still holds what a row at n_pos sees: the blocks behind
     * were given back before the step, from its first row's position on */
    IG_ASSERT(!p->n_wblocks || keep == 0 || s->w_lo <= w_first(p, n_pos));
    for (int64_t i = s->n_blocks - 1; i >= keep; i--) {
        int32_t id = s->table[i];
        IG_ASSERT(p->refs[id] == 1 && !p->indexed[id]); /* grown for the rows rolled back */
        p->refs[id] = 0;
        list_append(p, id);
        p->used--;
        s->reserved++; /* still promised: the sequence may grow into it again */
        p->reserved++;
        if (p->n_wblocks && s->wtable[i] >= 0) {
            IG_ASSERT(p->wrefs[s->wtable[i]] == 1);
            w_drop(p, s->wtable[i]);
            s->wtable[i] = -1;
        }
    }
    s->n_blocks = keep;
    s->n_pos = n_pos;
}

int kv_pool_reserve(struct kv_pool *p, struct kv_seq *s, int64_t max_pos)
{
    IG_ASSERT(kv_blocks_for(max_pos) <= s->max_blocks);
    int64_t need = kv_blocks_for(max_pos) - s->n_blocks - s->reserved;
    int64_t wmore = p->n_wblocks ? w_need(p, max_pos) - s->w_reserved : 0;
    if (need > kv_pool_available(p) || wmore > p->n_wblocks - p->w_promised)
        return IG_E_NOMEM;
    if (need > 0) {
        s->reserved += need;
        p->reserved += need;
    }
    if (wmore > 0) {
        s->w_reserved += wmore;
        p->w_promised += wmore;
    }
    return IG_OK;
}
