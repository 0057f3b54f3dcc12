/* prefill/prefill.h: the batched forward over prompt tokens.
 *
 * One pass over n tokens at positions pos0..pos0+n-1: embeddings, then per
 * layer RMSNorm, Q/K/V GEMMs over the token block, RoPE, tiled causal
 * attention with an online softmax (no n x n buffer) that writes K/V into the
 * cache, output GEMM, RMSNorm, SwiGLU FFN GEMMs, and finally logits for the
 * LAST position only. Covered by tests/cpu/. */
#ifndef IGNITE_PREFILL_PREFILL_H
#define IGNITE_PREFILL_PREFILL_H

#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdint.h>

/* Runs tokens[0..n) at positions pos0.. against `kv` (which must already hold
 * positions 0..pos0-1) and writes the logits of the last token to
 * logits[0..n_vocab). Requires pos0 + n <= kv->n_ctx and n <= the context's
 * max_batch (a longer prompt is prefilled in chunks, pos0 advancing by n).
 * pos0 below kv->n_pos rewrites the positions from pos0 on. Sets kv->n_pos =
 * pos0 + n. Returns IG_OK or an error status (IG_E_INPUT for a token id out
 * of range or a block past the context). */
int prefill_forward(struct ops_ctx *ctx, struct kv_cache *kv, const int32_t *tokens,
                    int64_t n, int64_t pos0, float *logits);

#endif
