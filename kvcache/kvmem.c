/* kvcache/kvmem.c: a model's memory described per group of layers
 * (kvcache.h's struct kv_memory): the layers' kinds and shapes grouped,
 * the one bytes formula, and the one place a model's layers become memory
 * (kv_memory_of). The store, the allocator and the file format read it;
 * they are kvcache.c's and kvfile.c's.
 * Covered by tests/kvcache/test_kvmem.c (synthetic layouts of every kind)
 * and tests/kvcache/test_kvcache.c. */
#include "kvcache/kvcache.h"

#include "core/status.h"
#include "models/quant.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t kv_dtype_bytes(enum kv_dtype dtype)
{
    return dtype == KV_F16 ? 2 : dtype == KV_F32 ? 4 : 0;
}

size_t kv_dtype_row_bytes(enum kv_dtype dtype, int64_t n)
{
    switch (dtype) {
    case KV_F32: return (size_t)n * 4;
    case KV_F16: return (size_t)n * 2;
    case KV_Q8_0: return (size_t)(n / KV_QBLOCK) * sizeof(struct block_q8_0);
    case KV_Q4_0: return (size_t)(n / KV_QBLOCK) * sizeof(struct block_q4_0);
    case KV_FP8: return (size_t)(n / KV_QBLOCK) * sizeof(struct block_q8_0); /* d, 32 x e4m3 */
    }
    return 0;
}

int64_t kv_rotation(enum kv_dtype dtype, int64_t head_dim, bool is_v)
{
    if (!kv_dtype_quantized(dtype) || head_dim % 64)
        return 0;
    if (is_v)
        return 64;
    int64_t n = 64;
    while (head_dim % (2 * n) == 0 && 2 * n <= KV_ROT_K_MAX)
        n *= 2;
    return n;
}

static const char *const dtype_names[KV_N_DTYPES] = {"f32", "f16", "q8_0", "q4_0", "fp8"};

const char *kv_dtype_name(enum kv_dtype dtype)
{
    return (unsigned)dtype < KV_N_DTYPES ? dtype_names[dtype] : "unknown";
}

int kv_dtype_parse(const char *what, const char *name, enum kv_dtype *out)
{
    for (int t = 0; t < KV_N_DTYPES; t++)
        if (!strcmp(name, dtype_names[t])) {
            *out = (enum kv_dtype)t;
            return IG_OK;
        }
    return ig_error(IG_E_USAGE, "%s: expected f32, f16, q8_0 or q4_0, got '%s'", what, name);
}

const char *kv_kind_name(enum kv_kind kind)
{
    switch (kind) {
    case KV_FULL: return "full attention";
    case KV_WINDOW: return "sliding window";
    case KV_SHARED: return "shared KV";
    case KV_RECURRENT: return "recurrent state";
    }
    return "unknown";
}

/* The most KV heads or head dim a layer may have: their product with
 * KV_BLOCK and a block count stays far inside int64_t. */
#define KV_MAX_DIM (INT64_C(1) << 20)

static bool is_paged(enum kv_kind kind)
{
    return kind == KV_FULL || kind == KV_WINDOW;
}

/* ---- building ------------------------------------------------------------------------ */

/* One line naming what is wrong with layer l, or IG_OK. */
static int check_layer(const struct kv_layer_mem *ls, int64_t n_layer, int64_t l)
{
    const struct kv_layer_mem *L = &ls[l];
    switch (L->kind) {
    case KV_FULL:
    case KV_WINDOW:
        if (L->n_head_kv < 1 || L->head_dim < 1 || L->n_head_kv > KV_MAX_DIM ||
            L->head_dim > KV_MAX_DIM || (L->kind == KV_WINDOW) != (L->window > 0))
            return ig_error(IG_E_INTERNAL, "KV memory: layer %lld (%s) has %lld KV heads of "
                            "%lld, window %lld", (long long)l, kv_kind_name(L->kind),
                            (long long)L->n_head_kv, (long long)L->head_dim,
                            (long long)L->window);
        return IG_OK;
    case KV_SHARED:
        if (L->source < 0 || L->source >= n_layer || L->source == l ||
            !is_paged(ls[L->source].kind))
            return ig_error(IG_E_INTERNAL, "KV memory: layer %lld shares the KV of layer %lld, "
                            "which is not a layer with blocks of its own", (long long)l,
                            (long long)L->source);
        return IG_OK;
    case KV_RECURRENT:
        if (L->state_bytes < 1)
            return ig_error(IG_E_INTERNAL, "KV memory: recurrent layer %lld has no state",
                            (long long)l);
        /* Every slot and every layer after it starts aligned for the widest
         * element a kernel loads from the store (16-byte vectors). */
        if (L->state_bytes % KV_STATE_ALIGN || L->ckpt_bytes % KV_STATE_ALIGN)
            return ig_error(IG_E_INTERNAL, "KV memory: recurrent layer %lld's state of %zu bytes "
                            "(or checkpoint) is not a multiple of %d bytes", (long long)l, L->state_bytes,
                            KV_STATE_ALIGN);
        return IG_OK;
    }
    return ig_error(IG_E_INTERNAL, "KV memory: layer %lld has an unknown kind %d", (long long)l,
                    (int)L->kind);
}

/* A quantized type stores a row as whole blocks: IG_OK, else one line. */
static int check_blocks(const struct kv_layer_mem *ls, int64_t n_layer, enum kv_dtype dtype,
                        const char *which)
{
    if (!kv_dtype_quantized(dtype))
        return IG_OK;
    for (int64_t l = 0; l < n_layer; l++)
        if ((ls[l].kind == KV_FULL || ls[l].kind == KV_WINDOW) && ls[l].head_dim % KV_QBLOCK)
            return ig_error(IG_E_USAGE, "a %s cache of %s needs a head dim that is a multiple "
                            "of %d, but layer %lld's is %lld", which, kv_dtype_name(dtype),
                            KV_QBLOCK, (long long)l, (long long)ls[l].head_dim);
    return IG_OK;
}

int kv_memory_build(const struct kv_layer_mem *layers, int64_t n_layer, enum kv_dtype dtype,
                    enum kv_dtype dtype_v, struct kv_memory **out)
{
    *out = NULL;
    if (n_layer < 1)
        return ig_error(IG_E_INTERNAL, "KV memory: %lld layers", (long long)n_layer);
    for (int64_t l = 0; l < n_layer; l++) {
        int st = check_layer(layers, n_layer, l);
        if (st != IG_OK)
            return st;
    }
    int bst = check_blocks(layers, n_layer, dtype, "K");
    if (bst == IG_OK)
        bst = check_blocks(layers, n_layer, dtype_v, "V");
    if (bst != IG_OK)
        return bst;
    struct kv_memory *mem = calloc(1, sizeof *mem);
    if (mem) {
        mem->layers = calloc((size_t)n_layer, sizeof *mem->layers);
        mem->groups = calloc((size_t)n_layer, sizeof *mem->groups); /* at most one a layer */
    }
    if (!mem || !mem->layers || !mem->groups) {
        kv_memory_free(mem);
        return ig_error(IG_E_NOMEM, "out of memory describing %lld layers' KV cache",
                        (long long)n_layer);
    }
    mem->dtype = dtype;
    mem->dtype_v = dtype_v;
    mem->n_layer = n_layer;
    for (int64_t l = 0; l < n_layer; l++) {
        struct kv_layer_mem *L = &mem->layers[l];
        *L = layers[l];
        if (L->kind == KV_SHARED) { /* reads rows of its source's shape */
            L->n_head_kv = layers[L->source].n_head_kv;
            L->head_dim = layers[L->source].head_dim;
        } else {
            L->source = -1;
        }
        if (L->kind != KV_WINDOW)
            L->window = 0;
        if (L->kind != KV_RECURRENT)
            L->state_bytes = L->ckpt_bytes = 0;
        else
            L->n_head_kv = L->head_dim = 0;
        /* its group: the first of its kind (and window), else a new one */
        int64_t g = 0;
        while (g < mem->n_groups &&
               (mem->groups[g].kind != L->kind || mem->groups[g].window != L->window))
            g++;
        if (g == mem->n_groups)
            mem->groups[mem->n_groups++] = (struct kv_group){.kind = L->kind,
                                                             .window = L->window};
        L->group = g;
        struct kv_group *G = &mem->groups[g];
        G->n_layers++;
        if (is_paged(L->kind))
            G->block_bytes += kv_dtype_row_bytes(dtype, kv_layer_block_elems(L)) +
                              kv_dtype_row_bytes(dtype_v, kv_layer_block_elems(L));
        G->state_bytes += L->state_bytes;
        G->ckpt_bytes += L->ckpt_bytes;
    }
    for (int64_t g = 0; g < mem->n_groups; g++) {
        const struct kv_group *G = &mem->groups[g];
        mem->block_bytes += G->block_bytes;
        mem->state_bytes += G->state_bytes;
        mem->ckpt_bytes += G->ckpt_bytes;
        if (G->kind == KV_WINDOW) {
            mem->window_bytes += G->block_bytes;
            mem->window_max = G->window > mem->window_max ? G->window : mem->window_max;
        }
    }
    *out = mem;
    return IG_OK;
}

size_t kv_deltanet_state_bytes(const struct model_layer *L)
{
    int64_t conv = (L->dn_conv - 1) * (2 * L->dn_k_heads + L->dn_v_heads) * L->dn_head_dim;
    int64_t mat = L->dn_v_heads * L->dn_head_dim * L->dn_head_dim;
    size_t bytes = (size_t)(conv + mat) * sizeof(float);
    return (bytes + KV_STATE_ALIGN - 1) / KV_STATE_ALIGN * KV_STATE_ALIGN;
}

size_t kv_deltanet_ckpt_bytes(const struct model_layer *L)
{
    int64_t D = L->dn_head_dim, Hv = L->dn_v_heads;
    int64_t row = (L->dn_k_heads + Hv) * D + 2 * Hv; /* k, v, g, beta */
    size_t bytes = (size_t)(Hv * D * D + (KV_DELTANET_CHUNK - 1) * row) * sizeof(float);
    return KV_STATE_ALIGN + (bytes + KV_STATE_ALIGN - 1) / KV_STATE_ALIGN * KV_STATE_ALIGN;
}

int kv_memory_of(const struct model *m, enum kv_dtype dtype, enum kv_dtype dtype_v,
                 struct kv_memory **out)
{
    const struct model_hparams *hp = &m->hp;
    *out = NULL;
    struct kv_layer_mem *ls = calloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1), sizeof *ls);
    if (!ls)
        return ig_error(IG_E_NOMEM, "out of memory describing the KV cache");
    /* A layer's memory by its mixer: attention keeps K/V of its own KV heads
     * and head dim in paged blocks (a windowed layer's as sliding-window),
     * or reads its source's (a shared-KV layer: no blocks of its own). */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        switch (L->mixer) {
        case LAYER_MIXER_ATTENTION:
            if (L->kv_shared) { /* Gemma 4's last layers: another layer's K/V */
                ls[l] = (struct kv_layer_mem){.kind = KV_SHARED, .source = L->kv_source};
                break;
            }
            ls[l] = (struct kv_layer_mem){.kind = L->window > 0 ? KV_WINDOW : KV_FULL,
                                          .n_head_kv = L->n_head_kv, .head_dim = L->head_dim,
                                          .window = L->window > 0 ? L->window : 0,
                                          .source = -1};
            break;
        case LAYER_MIXER_DELTANET: /* conv state and the delta rule's matrices */
            ls[l] = (struct kv_layer_mem){.kind = KV_RECURRENT, .source = -1,
                                          .state_bytes = kv_deltanet_state_bytes(L),
                                          .ckpt_bytes = kv_deltanet_ckpt_bytes(L)};
            break;
        }
    }
    int st = kv_memory_build(ls, hp->n_layer, dtype, dtype_v, out);
    free(ls);
    return st;
}

int kv_memory_uniform(enum kv_dtype dtype, int64_t n_layer, int64_t n_head_kv,
                      int64_t head_dim, struct kv_memory **out)
{
    *out = NULL;
    struct kv_layer_mem *ls = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *ls);
    if (!ls)
        return ig_error(IG_E_NOMEM, "out of memory describing the KV cache");
    for (int64_t l = 0; l < n_layer; l++)
        ls[l] = (struct kv_layer_mem){.kind = KV_FULL, .n_head_kv = n_head_kv,
                                      .head_dim = head_dim, .source = -1};
    int st = kv_memory_build(ls, n_layer, dtype, dtype, out);
    free(ls);
    return st;
}

int kv_memory_without_ckpt(const struct kv_memory *src, struct kv_memory **out)
{
    *out = NULL;
    struct kv_layer_mem *ls = malloc((size_t)(src->n_layer > 0 ? src->n_layer : 1) * sizeof *ls);
    if (!ls)
        return ig_error(IG_E_NOMEM, "out of memory describing the KV cache");
    for (int64_t l = 0; l < src->n_layer; l++) {
        ls[l] = src->layers[l];
        ls[l].ckpt_bytes = 0;
    }
    int st = kv_memory_build(ls, src->n_layer, src->dtype, src->dtype_v, out);
    free(ls);
    return st;
}

int kv_memory_copy(const struct kv_memory *src, enum kv_dtype dtype, enum kv_dtype dtype_v,
                   struct kv_memory **out)
{
    return kv_memory_build(src->layers, src->n_layer, dtype, dtype_v, out);
}

void kv_memory_free(struct kv_memory *mem)
{
    if (!mem)
        return;
    free(mem->groups);
    free(mem->layers);
    free(mem);
}

bool kv_memory_same_layers(const struct kv_memory *a, const struct kv_memory *b)
{
    if (a->n_layer != b->n_layer)
        return false;
    for (int64_t l = 0; l < a->n_layer; l++) {
        const struct kv_layer_mem *x = &a->layers[l], *y = &b->layers[l];
        if (x->kind != y->kind || x->n_head_kv != y->n_head_kv || x->head_dim != y->head_dim ||
            x->window != y->window || x->source != y->source ||
            x->state_bytes != y->state_bytes)
            return false;
    }
    return true;
}

/* ---- sizes ----------------------------------------------------------------------------- */

double kv_memory_bytes(const struct kv_memory *mem, int64_t n_blocks, int64_t n_states)
{
    return (double)n_blocks * (double)mem->block_bytes +
           (double)n_states * (double)mem->state_bytes +
           (n_states > 0 ? (double)mem->ckpt_bytes : 0.0);
}

double kv_memory_bytes_windowed(const struct kv_memory *mem, int64_t n_blocks,
                                int64_t n_wblocks, int64_t n_states)
{
    if (!n_wblocks)
        return kv_memory_bytes(mem, n_blocks, n_states);
    return (double)n_blocks * (double)(mem->block_bytes - mem->window_bytes) +
           (double)n_wblocks * (double)mem->window_bytes +
           (double)n_states * (double)mem->state_bytes +
           (n_states > 0 ? (double)mem->ckpt_bytes : 0.0);
}

int64_t kv_memory_window_cap(const struct kv_memory *mem, int64_t n_ctx, int64_t max_rows)
{
    if (!mem->window_max)
        return 0;
    /* rows pos0 .. pos0 + max_rows - 1 see back to pos0 - (window - 1):
     * window - 1 + max_rows positions, over at most one block more than
     * they fill */
    int64_t cap = kv_blocks_for(mem->window_max - 1 + max_rows) + 1;
    return cap < kv_blocks_for(n_ctx) ? cap : kv_blocks_for(n_ctx);
}

int64_t kv_memory_window_blocks(const struct kv_memory *mem, int n_slots, int64_t n_ctx,
                                int64_t max_rows)
{
    return (int64_t)n_slots * kv_memory_window_cap(mem, n_ctx, max_rows);
}

int64_t kv_memory_blocks_in_windowed(const struct kv_memory *mem, double bytes,
                                     int64_t n_wblocks, int64_t n_states)
{
    double left = bytes - kv_memory_bytes_windowed(mem, 0, n_wblocks, n_states);
    size_t full = mem->block_bytes - mem->window_bytes;
    if (left < 0)
        return 0;
    if (!full) /* every paged layer windowed: full ids cost nothing but the table */
        return INT32_MAX / 4;
    double n = left / (double)full;
    return n > INT32_MAX / 4 ? INT32_MAX / 4 : (int64_t)n;
}

int64_t kv_memory_states_for(const struct kv_memory *mem, int64_t n_slots)
{
    return mem->state_bytes ? n_slots : 0;
}

int64_t kv_memory_blocks_in(const struct kv_memory *mem, double bytes, int64_t n_states)
{
    double left = bytes - kv_memory_bytes(mem, 0, n_states);
    if (left < 0)
        return 0;
    if (!mem->block_bytes) /* no paged layer: ids cost nothing but the pool's table */
        return INT32_MAX / 4;
    double n = left / (double)mem->block_bytes;
    return n > INT32_MAX / 4 ? INT32_MAX / 4 : (int64_t)n;
}

int64_t kv_memory_kv_layer(const struct kv_memory *mem, int64_t layer)
{
    IG_ASSERT(layer >= 0 && layer < mem->n_layer);
    const struct kv_layer_mem *L = &mem->layers[layer];
    IG_ASSERT(L->kind != KV_RECURRENT);
    return L->kind == KV_SHARED ? L->source : layer;
}

bool kv_layer_windowed(const struct kv_memory *mem, int64_t layer)
{
    return mem->layers[kv_memory_kv_layer(mem, layer)].kind == KV_WINDOW;
}

struct kv_layout kv_memory_layout(const struct kv_memory *mem, int64_t layer, void *k, void *v)
{
    const struct kv_layer_mem *L = &mem->layers[kv_memory_kv_layer(mem, layer)];
    return (struct kv_layout){
        .k = k, .v = v, .dtype = mem->dtype, .dtype_v = mem->dtype_v,
        .block_stride = kv_layer_block_elems(L),
        .head_stride = KV_BLOCK * L->head_dim,
        .head_dim = L->head_dim,
    };
}

double kv_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                return (double)kib * 1024.0;
            }
        fclose(f);
    }
#ifdef _SC_AVPHYS_PAGES
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        return (double)pages * (double)page;
#endif
    return 0;
}
