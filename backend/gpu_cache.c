/* backend/gpu_cache.c: the device KV cache to and from a host kv_cache
 * (--save-kv downloads it, --load-kv uploads it), one KV head of one layer
 * per copy. Covered by tests/emu/test_backend_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

int IG_DEV(gpu_kv_download)(struct gpu_backend *g, struct kv_cache *kv)
{
    IG_ASSERT(kv->dtype == KV_F16 && kv->n_ctx >= g->n_pos);
    const struct model_hparams *hp = &g->m->hp;
    int64_t hd = hp->head_dim, n = g->n_pos;
    int st = kv_cache_reserve(kv, n);
    uint16_t *rows = malloc((size_t)((n ? n : 1) * hd) * sizeof *rows);
    if (!rows)
        st = ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++)
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            const uint16_t *src = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            void *const *table = kv_i ? kv_cache_v_table(kv, l) : kv_cache_k_table(kv, l);
            for (int64_t h = 0; h < hp->n_head_kv && st == IG_OK; h++) {
                st = IG_DEV(dev_download)(g->dev, rows, src + h * g->n_ctx * hd,
                                          (size_t)(n * hd) * sizeof *rows);
                for (int64_t p = 0; p < n && st == IG_OK; p += KV_BLOCK) {
                    int64_t run = n - p < KV_BLOCK ? n - p : KV_BLOCK;
                    memcpy(kv_cache_rows(kv, table, h, p), rows + p * hd,
                           (size_t)(run * hd) * sizeof *rows);
                }
            }
        }
    free(rows);
    if (st == IG_OK)
        kv->n_pos = n;
    return st;
}

int IG_DEV(gpu_kv_upload)(struct gpu_backend *g, const struct kv_cache *kv)
{
    const struct model_hparams *hp = &g->m->hp;
    IG_ASSERT(kv->n_pos <= g->n_ctx && kv->head_dim == hp->head_dim &&
              kv->n_head_kv == hp->n_head_kv && kv->n_layer == hp->n_layer);
    int64_t hd = hp->head_dim, n = kv->n_pos;
    uint16_t *rows = malloc((size_t)((n ? n : 1) * hd) * sizeof *rows);
    float *f = malloc((size_t)hd * sizeof *f);
    int st = rows && f ? IG_OK : ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++)
        for (int kv_i = 0; kv_i < 2 && st == IG_OK; kv_i++) {
            uint16_t *dst = kv_i ? g->layers[l].v_cache : g->layers[l].k_cache;
            void *const *table = kv_i ? kv_cache_v_table(kv, l) : kv_cache_k_table(kv, l);
            for (int64_t h = 0; h < hp->n_head_kv && st == IG_OK; h++) {
                for (int64_t p = 0; p < n; p++) {
                    kv_row_to_f32(kv->dtype, kv_cache_rows(kv, table, h, p), hd, f);
                    for (int64_t d = 0; d < hd; d++)
                        rows[p * hd + d] = ig_f32_to_f16(f[d]);
                }
                st = IG_DEV(dev_upload)(g->dev, dst + h * g->n_ctx * hd, rows,
                                        (size_t)(n * hd) * sizeof *rows);
            }
        }
    free(rows);
    free(f);
    if (st == IG_OK)
        g->n_pos = n;
    return st;
}
