/* backend/gpu_cache.c: a sequence's blocks of the device KV pool (and its
 * recurrent layers' states) to and from host memory (--save-kv downloads
 * them into a host kv_store, --load-kv uploads one), one block of one
 * layer's K or V per copy: a device block [n_head_kv][KV_BLOCK][head_dim]
 * f16 is laid out as a host f16 store's block, so the copy needs no
 * reordering; a layer sharing another's KV has nothing of its own. Covered by
 * tests/emu/test_backend_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "kvcache/kv_devq.h"

#include <stdlib.h>
#include <string.h>

/* A quantized array's (q8_0, fp8) block i between the device's regions
 * (kvcache/kv_devq.h: each KV head's quants, then its scales; dev holds
 * the block's bytes) and the host store's ggml blocks (d, then 32 quants:
 * base, block i of an identity table): the same bytes, reordered. */
static void kvq_block_copy(const struct kv_layout *L, void *base, const int32_t *ids, int64_t i,
                           int64_t n_head_kv, unsigned char *dev, bool to_host)
{
    const int64_t hd = L->head_dim;
    for (int64_t h = 0; h < n_head_kv; h++)
        for (int64_t r = 0; r < KV_BLOCK; r++) {
            unsigned char *row = kv_row(L, base, ids, h, i * KV_BLOCK + r);
            unsigned char *region = dev + kvq_region(h * L->head_stride);
            for (int64_t b = 0; b < hd / 32; b++) {
                unsigned char *d = region + kvq_scale_at(hd, r, 32 * b);
                unsigned char *q = region + kvq_quant_at(hd, r, 32 * b);
                if (to_host) {
                    memcpy(row + 34 * b, d, 2);
                    memcpy(row + 34 * b + 2, q, 32);
                } else {
                    memcpy(d, row + 34 * b, 2);
                    memcpy(q, row + 34 * b + 2, 32);
                }
            }
        }
}

int IG_DEV(gpu_kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n,
                          const struct kv_store **out, const int32_t **table, int64_t *slot)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct kv_memory *mem = b->kv_mem;
    int64_t nb = kv_blocks_for(n);
    *out = NULL;
    kv_store_free(g->host_kv);
    g->host_kv = NULL;
    int32_t *ids = realloc(g->host_table, (size_t)nb * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    g->host_table = ids;
    kv_identity_table(ids, nb);
    int st = kv_store_create(mem, nb, kv_memory_states_for(mem, 1), NULL, &g->host_kv);
    for (int64_t l = 0; l < mem->n_layer && st == IG_OK; l++) {
        const struct kv_layer_mem *Lm = &mem->layers[l];
        if (Lm->kind == KV_RECURRENT) { /* the slot's state into host slot 0 */
            st = IG_DEV(dev_download)(g->dev, kv_store_state(g->host_kv, l, 0),
                                      g->layers[l].state + (size_t)seq->slot * Lm->state_bytes,
                                      Lm->state_bytes);
            continue;
        }
        if (Lm->kind == KV_SHARED) /* its rows are its source's */
            continue;
        struct kv_layout L = kv_store_layout(g->host_kv, l);
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            const enum kv_dtype dt = kv_i ? L.dtype_v : L.dtype;
            const size_t block = kv_dtype_row_bytes(dt, L.block_stride);
            const unsigned char *src = kv_i ? (void *)g->layers[l].v_cache
                                            : (void *)g->layers[l].k_cache;
            unsigned char *dst = kv_i ? L.v : L.k;
            unsigned char *tmp = kv_dtype_quantized(dt) ? malloc(block) : NULL;
            if (kv_dtype_quantized(dt) && !tmp)
                st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
            for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                IG_ASSERT(seq->table[i] >= 0 && seq->table[i] < g->n_blocks);
                st = IG_DEV(dev_download)(g->dev, tmp ? tmp : dst + i * block,
                                          src + (size_t)seq->table[i] * block, block);
                if (st == IG_OK && tmp) /* regions -> ggml blocks */
                    kvq_block_copy(&L, dst, ids, i, Lm->n_head_kv, tmp, true);
            }
            free(tmp);
        }
    }
    if (st == IG_OK) {
        *out = g->host_kv;
        *table = ids;
        *slot = 0;
    }
    return st;
}

int IG_DEV(gpu_kv_import)(struct backend *b, const struct backend_seq *seq,
                          const struct kv_store *src, int64_t n)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct kv_memory *mem = b->kv_mem;
    IG_ASSERT(n <= g->n_ctx && kv_memory_same_layers(src->memory, mem));
    int64_t nb = kv_blocks_for(n);
    int32_t *ids = malloc((size_t)nb * sizeof *ids);
    int st = ids ? IG_OK : ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    if (ids)
        kv_identity_table(ids, nb);
    for (int64_t l = 0; l < mem->n_layer && st == IG_OK; l++) {
        const struct kv_layer_mem *Lm = &mem->layers[l];
        if (Lm->kind == KV_RECURRENT) { /* host slot 0 into the sequence's slot */
            st = IG_DEV(dev_upload)(g->dev,
                                    g->layers[l].state + (size_t)seq->slot * Lm->state_bytes,
                                    kv_store_state(src, l, 0), Lm->state_bytes);
            continue;
        }
        if (Lm->kind == KV_SHARED)
            continue;
        int64_t hd = Lm->head_dim, block_elems = kv_layer_block_elems(Lm);
        struct kv_layout L = kv_store_layout(src, l);
        if (kv_dtype_quantized(mem->dtype) || kv_dtype_quantized(mem->dtype_v)) {
            /* a quantized pool takes its own type's blocks only, reordered */
            if (L.dtype != mem->dtype || L.dtype_v != mem->dtype_v) {
                st = ig_error(IG_E_USAGE, "the saved KV cache is %s/%s but the CUDA pool is "
                              "%s/%s (--cache-type-k/-v)", kv_dtype_name(L.dtype),
                              kv_dtype_name(L.dtype_v), kv_dtype_name(mem->dtype),
                              kv_dtype_name(mem->dtype_v));
                break;
            }
            for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
                const enum kv_dtype dt = kv_i ? L.dtype_v : L.dtype;
                const size_t block = kv_dtype_row_bytes(dt, L.block_stride);
                unsigned char *dst = kv_i ? (void *)g->layers[l].v_cache
                                          : (void *)g->layers[l].k_cache;
                unsigned char *tmp = calloc(1, block);
                if (!tmp)
                    st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
                for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                    IG_ASSERT(seq->table[i] >= 0 && seq->table[i] < g->n_blocks);
                    if (kv_dtype_quantized(dt))
                        kvq_block_copy(&L, kv_i ? L.v : L.k, ids, i, Lm->n_head_kv, tmp, false);
                    else
                        memcpy(tmp, (unsigned char *)(kv_i ? L.v : L.k) + i * block, block);
                    st = IG_DEV(dev_upload)(g->dev, dst + (size_t)seq->table[i] * block, tmp,
                                            block);
                }
                free(tmp);
            }
            continue;
        }
        uint16_t *blk = malloc((size_t)block_elems * sizeof *blk);
        float *f = malloc((size_t)hd * sizeof *f);
        if (!blk || !f)
            st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            uint16_t *dst = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                /* positions past n in the last block stay zero */
                int64_t rows = n - i * KV_BLOCK < KV_BLOCK ? n - i * KV_BLOCK : KV_BLOCK;
                memset(blk, 0, (size_t)block_elems * sizeof *blk);
                for (int64_t h = 0; h < Lm->n_head_kv; h++)
                    for (int64_t r = 0; r < rows; r++) {
                        kv_row_to_f32(kv_i ? L.dtype_v : L.dtype,
                                      kv_row(&L, kv_i ? L.v : L.k, ids, h, i * KV_BLOCK + r),
                                      hd, f);
                        for (int64_t d = 0; d < hd; d++)
                            blk[h * L.head_stride + r * hd + d] = ig_f32_to_f16(f[d]);
                    }
                IG_ASSERT(seq->table[i] >= 0 && seq->table[i] < g->n_blocks);
                st = IG_DEV(dev_upload)(g->dev, dst + seq->table[i] * block_elems, blk,
                                        (size_t)block_elems * sizeof *blk);
            }
        }
        free(blk);
        free(f);
    }
    free(ids);
    return st;
}
