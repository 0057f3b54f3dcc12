/* ops/ops.h: the run state shared by prefill and decode, and the primitives
 * both stages use (matmul over stored-format weights, RMSNorm, RoPE, SwiGLU).
 * The CPU implementation is the reference; the CUDA one sits behind the same
 * table later. Covered by tests/cpu/. */
#ifndef IGNITE_OPS_OPS_H
#define IGNITE_OPS_OPS_H

#include "models/model.h"

#include <stdint.h>

/* Run state: the model (borrowed), a thread pool, and scratch buffers for
 * batches of up to max_batch tokens. Nothing is allocated on the hot path. */
struct ops_ctx;

/* Creates the run state. n_threads <= 0 means one per core. Returns IG_OK or
 * IG_E_NOMEM. */
int ops_ctx_create(const struct model *m, int n_threads, int64_t max_batch,
                   struct ops_ctx **out);
void ops_ctx_free(struct ops_ctx *ctx);

/* Threads the context actually uses. */
int ops_ctx_threads(const struct ops_ctx *ctx);

#endif
