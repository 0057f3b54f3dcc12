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

#endif
