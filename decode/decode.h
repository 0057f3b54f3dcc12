/* decode/decode.h: the one-token forward against the KV cache.
 * Sampling and the generation loop are in decode/sampler.h and generate.h.
 * Covered by tests/cpu/. */
#ifndef IGNITE_DECODE_DECODE_H
#define IGNITE_DECODE_DECODE_H

#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdint.h>

/* Runs `token` at position `pos` (== kv->n_pos, < kv->n_ctx), appends its K/V
 * to the cache (growing it by a block when needed) and writes
 * logits[0..n_vocab). Same weights path as prefill. Returns IG_OK or an error
 * status (IG_E_NOMEM when the cache cannot grow). */
int decode_forward(struct ops_ctx *ctx, struct kv_cache *kv, int32_t token, int64_t pos,
                   float *logits);

#endif
