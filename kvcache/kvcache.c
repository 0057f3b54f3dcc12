/* kvcache/kvcache.c: host memory for K and V of every layer, in the layout
 * kvcache.h describes, and the one function that stores new positions.
 * Attention reads the layout directly (prefill/attn_tiled.c, decode/).
 * Covered by tests/cpu/ (prefill vs decode, the numpy reference). */
#include "kvcache/kvcache.h"

#include "core/half.h"
#include "core/status.h"

#include <stdlib.h>

size_t kv_dtype_bytes(enum kv_dtype dtype)
{
    return dtype == KV_F16 ? 2 : 4;
}

int kv_cache_create(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype,
                    struct kv_cache **out)
{
    *out = NULL;
    if (n_ctx < 1 || hp->n_layer < 1 || hp->n_head_kv < 1 || hp->head_dim < 1)
        return ig_error(IG_E_INTERNAL, "KV cache: bad shape (n_ctx %lld, %lld layers)",
                        (long long)n_ctx, (long long)hp->n_layer);
    /* Elements of K (or V): bounded so the byte count cannot overflow. */
    double elems_d = (double)hp->n_layer * (double)hp->n_head_kv * (double)n_ctx *
                     (double)hp->head_dim;
    if (elems_d * 2 * (double)kv_dtype_bytes(dtype) > (double)(SIZE_MAX / 4))
        return ig_error(IG_E_NOMEM, "KV cache for %lld positions is too large", (long long)n_ctx);
    int64_t elems = hp->n_layer * hp->n_head_kv * n_ctx * hp->head_dim;
    size_t bytes = (size_t)elems * kv_dtype_bytes(dtype);

    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return ig_error(IG_E_NOMEM, "out of memory allocating the KV cache");
    kv->dtype = dtype;
    kv->n_layer = hp->n_layer;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim = hp->head_dim;
    kv->n_ctx = n_ctx;
    kv->n_pos = 0;
    kv->k = malloc(bytes);
    kv->v = malloc(bytes);
    if (!kv->k || !kv->v) {
        kv_cache_free(kv);
        return ig_error(IG_E_NOMEM, "KV cache needs %.1f MiB for %lld positions; "
                        "try a smaller context", 2.0 * (double)bytes / 1048576.0,
                        (long long)n_ctx);
    }
    *out = kv;
    return IG_OK;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    free(kv->v);
    free(kv->k);
    free(kv);
}

size_t kv_cache_bytes(const struct kv_cache *kv)
{
    return 2 * (size_t)(kv->n_layer * kv->n_head_kv * kv->n_ctx * kv->head_dim) *
           kv_dtype_bytes(kv->dtype);
}

int64_t kv_cache_head_offset(const struct kv_cache *kv, int64_t layer, int64_t kv_head)
{
    return ((layer * kv->n_head_kv) + kv_head) * kv->n_ctx * kv->head_dim;
}

/* One [head_dim] vector into the cache at element offset `off`. */
static void store(const struct kv_cache *kv, void *base, int64_t off, const float *src)
{
    if (kv->dtype == KV_F32) {
        float *d = (float *)base + off;
        for (int64_t i = 0; i < kv->head_dim; i++)
            d[i] = src[i];
    } else {
        ig_f16 *d = (ig_f16 *)base + off;
        for (int64_t i = 0; i < kv->head_dim; i++)
            d[i] = ig_f32_to_f16(src[i]);
    }
}

void kv_cache_write(struct kv_cache *kv, int64_t layer, int64_t pos0, int64_t n_tokens,
                    const float *k, const float *v)
{
    IG_ASSERT(layer >= 0 && layer < kv->n_layer);
    IG_ASSERT(pos0 >= 0 && n_tokens >= 0 && pos0 + n_tokens <= kv->n_ctx);
    int64_t kv_dim = kv->n_head_kv * kv->head_dim;
    for (int64_t h = 0; h < kv->n_head_kv; h++) {
        int64_t base = kv_cache_head_offset(kv, layer, h);
        for (int64_t t = 0; t < n_tokens; t++) {
            int64_t off = base + (pos0 + t) * kv->head_dim;
            store(kv, kv->k, off, k + t * kv_dim + h * kv->head_dim);
            store(kv, kv->v, off, v + t * kv_dim + h * kv->head_dim);
        }
    }
}
