/* kvcache/kvcache.h: K and V of every layer for the whole context.
 *
 * Layout (host memory, one contiguous buffer each for K and V):
 *   k[layer][kv_head][pos][head_dim], likewise v, elements of `dtype`.
 * A KV head's positions are contiguous so attention streams them as tiles.
 * K is stored after RoPE. Covered by tests/cpu/. */
#ifndef IGNITE_KVCACHE_KVCACHE_H
#define IGNITE_KVCACHE_KVCACHE_H

#include "models/model.h"

#include <stddef.h>
#include <stdint.h>

enum kv_dtype { KV_F32, KV_F16 };

struct kv_cache {
    enum kv_dtype dtype;
    int64_t n_layer, n_head_kv, head_dim;
    int64_t n_ctx;   /* positions the cache can hold */
    int64_t n_pos;   /* positions filled so far (0..n_ctx) */
    void *k, *v;     /* see the layout above; owned */
};

/* Allocates a cache for n_ctx positions of the model `hp`. Returns IG_OK, or
 * IG_E_NOMEM (naming the bytes it needed) when it does not fit. */
int kv_cache_create(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype,
                    struct kv_cache **out);

void kv_cache_free(struct kv_cache *kv);

/* Bytes held by K and V together. */
size_t kv_cache_bytes(const struct kv_cache *kv);

/* Bytes of one element of `dtype` (4 or 2). */
size_t kv_dtype_bytes(enum kv_dtype dtype);

/* Element offset of k[layer][kv_head][0][0] (the same for v). */
int64_t kv_cache_head_offset(const struct kv_cache *kv, int64_t layer, int64_t kv_head);

/* Stores the K and V of n_tokens tokens at positions pos0.. of `layer`,
 * converting to the cache's dtype. k and v are [n_tokens, n_head_kv *
 * head_dim] f32 (K after RoPE). Requires pos0 + n_tokens <= n_ctx; does not
 * touch n_pos (the forward that fills every layer sets it). */
void kv_cache_write(struct kv_cache *kv, int64_t layer, int64_t pos0, int64_t n_tokens,
                    const float *k, const float *v);

#endif
