/* backend/gpu_cache.c: a slot's device KV cache to and from host memory
 * (--save-kv downloads it into a host kv_store, --load-kv uploads one), one
 * KV head of one layer per copy. Covered by tests/emu/test_backend_emu.c
 * and tests/gpu/. */
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
    int64_t hd = hp->head_dim, slot = gpu_slot_offset(g, seq->slot);
    IG_ASSERT(n <= g->n_pos[seq->slot]);
    *out = NULL;
    kv_store_free(g->host_kv);
    g->host_kv = NULL;
    int32_t *ids = realloc(g->host_table, (size_t)kv_blocks_for(n) * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    g->host_table = ids;
    kv_identity_table(ids, kv_blocks_for(n));
    struct kv_shape shape = kv_shape_of(hp, KV_F16);
    int st = kv_store_create(&shape, kv_blocks_for(n), NULL, &g->host_kv);
    uint16_t *rows = malloc((size_t)(n * hd) * sizeof *rows);
    if (st == IG_OK && !rows)
        st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        struct kv_layout L = kv_store_layout(g->host_kv, l);
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            const uint16_t *src = (kv_i ? g->layers[l].v_cache : g->layers[l].k_cache) + slot;
            for (int64_t h = 0; h < hp->n_head_kv && st == IG_OK; h++) {
                st = IG_DEV(dev_download)(g->dev, rows, src + h * g->n_ctx * hd,
                                          (size_t)(n * hd) * sizeof *rows);
                for (int64_t p = 0; p < n && st == IG_OK; p += KV_BLOCK) {
                    int64_t run = n - p < KV_BLOCK ? n - p : KV_BLOCK;
                    memcpy(kv_row(&L, kv_i ? L.v : L.k, ids, h, p), rows + p * hd,
                           (size_t)(run * hd) * sizeof *rows);
                }
            }
        }
    }
    free(rows);
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
    int64_t hd = hp->head_dim, slot = gpu_slot_offset(g, seq->slot);
    int32_t *ids = malloc((size_t)kv_blocks_for(n) * sizeof *ids);
    uint16_t *rows = malloc((size_t)(n * hd) * sizeof *rows);
    float *f = malloc((size_t)hd * sizeof *f);
    int st = ids && rows && f ? IG_OK : ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    if (ids)
        kv_identity_table(ids, kv_blocks_for(n));
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        struct kv_layout L = kv_store_layout(src, l);
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            uint16_t *dst = (kv_i ? g->layers[l].v_cache : g->layers[l].k_cache) + slot;
            for (int64_t h = 0; h < hp->n_head_kv && st == IG_OK; h++) {
                for (int64_t p = 0; p < n; p++) {
                    kv_row_to_f32(L.dtype, kv_row(&L, kv_i ? L.v : L.k, ids, h, p), hd, f);
                    for (int64_t d = 0; d < hd; d++)
                        rows[p * hd + d] = ig_f32_to_f16(f[d]);
                }
                st = IG_DEV(dev_upload)(g->dev, dst + h * g->n_ctx * hd, rows,
                                        (size_t)(n * hd) * sizeof *rows);
            }
        }
    }
    free(ids);
    free(rows);
    free(f);
    if (st == IG_OK)
        g->n_pos[seq->slot] = n;
    return st;
}
