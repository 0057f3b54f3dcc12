/* ops/layer.h: one transformer block and the output head, shared by prefill
 * (a block of n tokens) and decode (one token). Only the attention step
 * differs between the stages, so each passes its own.
 * Covered by tests/cpu/ (numpy reference; prefill vs decode). */
#ifndef IGNITE_OPS_LAYER_H
#define IGNITE_OPS_LAYER_H

#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdint.h>

/* The attention step of block `layer`: reads the post-RoPE queries in
 * ops_buffers.q [n, n_head * head_dim] and the cache, which already holds
 * this block's K/V for positions pos0 .. pos0+n-1, and writes
 * ops_buffers.att [n, n_head * head_dim]. */
typedef void (*ops_attention_fn)(struct ops_ctx *ctx, struct kv_cache *kv, int64_t layer,
                                 int64_t n, int64_t pos0);

/* Block `layer` over n tokens at positions pos0..: updates the residual
 * stream ops_buffers.x [n, n_embd] in place and writes the tokens' K (after
 * RoPE) and V into the cache. ops_rope_prepare(ctx, pos0, n) must have run. */
void ops_layer_forward(struct ops_ctx *ctx, struct kv_cache *kv, int64_t layer, int64_t n,
                       int64_t pos0, ops_attention_fn attention);

/* Final RMSNorm and output head of one residual row x [n_embd] into
 * logits [n_vocab]. */
void ops_output_head(struct ops_ctx *ctx, const float *x, float *logits);

#endif
