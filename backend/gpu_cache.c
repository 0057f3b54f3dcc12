/* backend/gpu_cache.c: a sequence's blocks of the device KV pool to and from
 * host memory (--save-kv downloads them into a host kv_store, --load-kv
 * uploads one), one block of one layer's K or V per copy: a device block
 * [n_head_kv][KV_BLOCK][head_dim] f16 is laid out as a host f16 store's
 * block, so the copy needs no reordering. Covered by
 * tests/emu/test_backend_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

int IG_DEV(gpu_kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n,
                          const struct kv_store **out, const int32_t **table)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct model_hparams *hp = &g->m->hp;
    int64_t nb = kv_blocks_for(n);
    size_t block = (size_t)g->block_stride * sizeof(uint16_t);
    *out = NULL;
    kv_store_free(g->host_kv);
    g->host_kv = NULL;
    int32_t *ids = realloc(g->host_table, (size_t)nb * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    g->host_table = ids;
    kv_identity_table(ids, nb);
    struct kv_shape shape = kv_shape_of(hp, KV_F16);
    int st = kv_store_create(&shape, nb, NULL, &g->host_kv);
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        struct kv_layout L = kv_store_layout(g->host_kv, l);
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            const uint16_t *src = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            uint16_t *dst = kv_i ? L.v : L.k;
            for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                IG_ASSERT(seq->table[i] >= 0 && seq->table[i] < g->n_blocks);
                st = IG_DEV(dev_download)(g->dev, dst + i * L.block_stride,
                                          src + seq->table[i] * g->block_stride, block);
            }
        }
    }
    if (st == IG_OK) {
        *out = g->host_kv;
        *table = ids;
    }
    return st;
}

int IG_DEV(gpu_kv_import)(struct backend *b, const struct backend_seq *seq,
                          const struct kv_store *src, int64_t n)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    const struct model_hparams *hp = &g->m->hp;
    IG_ASSERT(n <= g->n_ctx && src->shape.head_dim == hp->head_dim &&
              src->shape.n_head_kv == hp->n_head_kv && src->shape.n_layer == hp->n_layer);
    int64_t nb = kv_blocks_for(n), hd = hp->head_dim;
    int32_t *ids = malloc((size_t)nb * sizeof *ids);
    uint16_t *blk = malloc((size_t)g->block_stride * sizeof *blk);
    float *f = malloc((size_t)hd * sizeof *f);
    int st = ids && blk && f ? IG_OK : ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    if (ids)
        kv_identity_table(ids, nb);
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        struct kv_layout L = kv_store_layout(src, l);
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            uint16_t *dst = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            for (int64_t i = 0; i < nb && st == IG_OK; i++) {
                /* positions past n in the last block stay zero */
                int64_t rows = n - i * KV_BLOCK < KV_BLOCK ? n - i * KV_BLOCK : KV_BLOCK;
                memset(blk, 0, (size_t)g->block_stride * sizeof *blk);
                for (int64_t h = 0; h < hp->n_head_kv; h++)
                    for (int64_t r = 0; r < rows; r++) {
                        kv_row_to_f32(L.dtype, kv_row(&L, kv_i ? L.v : L.k, ids, h,
                                                      i * KV_BLOCK + r), hd, f);
                        for (int64_t d = 0; d < hd; d++)
                            blk[h * g->head_stride + r * hd + d] = ig_f32_to_f16(f[d]);
                    }
                IG_ASSERT(seq->table[i] >= 0 && seq->table[i] < g->n_blocks);
                st = IG_DEV(dev_upload)(g->dev, dst + seq->table[i] * g->block_stride, blk,
                                        (size_t)g->block_stride * sizeof *blk);
            }
        }
    }
    free(ids);
    free(blk);
    free(f);
    return st;
}
