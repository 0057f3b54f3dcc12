/* ops/layer.h: one transformer block and the output head over the rows of a
 * step (prompt chunks and decode tokens of any number of sequences: every
 * row is just a token at a position). The attention step is the caller's,
 * which knows where each sequence's cache is (backend/cpu.c).
 * Covered by tests/cpu/ (numpy reference; chunked vs one-row steps). */
#ifndef IGNITE_OPS_LAYER_H
#define IGNITE_OPS_LAYER_H

#include "ops/ops.h"

#include <stdint.h>

/* The attention step of block `layer` for the step's n rows: stores the
 * rows' K (after RoPE) and V from ops_buffers.k / .v
 * [n, n_head_kv * head_dim] in the cache, then writes ops_buffers.att
 * [n, n_head * head_dim] from the post-RoPE queries ops_buffers.q. */
struct ops_attention {
    void (*run)(void *user, int64_t layer, int64_t n);
    void *user;
};

/* Block `layer` over n rows: updates the residual stream ops_buffers.x
 * [n, n_embd] in place. ops_rope_prepare must have run for the rows'
 * positions. When keep is not NULL, only rows keep[0..n_keep) (ascending)
 * matter after attention: they are moved to the front of x and the rest of
 * the block runs on them alone (the last layer, where only rows that want
 * logits go on). */
void ops_layer_forward(struct ops_ctx *ctx, int64_t layer, int64_t n,
                       const struct ops_attention *attn, const int64_t *keep, int64_t n_keep);

/* Final RMSNorm and output head of n residual rows x [n, n_embd] into
 * logits [n, n_vocab]. */
void ops_output_head(struct ops_ctx *ctx, const float *x, int64_t n, float *logits);

#endif
