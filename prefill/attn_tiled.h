/* prefill/attn_tiled.h: causal attention of the rows of a step (prompt
 * chunks and decode tokens of several sequences alike) against each
 * sequence's KV blocks, FlashAttention-style on the CPU: query tiles against
 * K/V tiles with an online softmax, no n x n buffer. The CPU twin of the
 * CUDA prefill kernel, and its reference. Covered by
 * tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_TILED_H
#define IGNITE_PREFILL_ATTN_TILED_H

#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdbool.h>
#include <stdint.h>

/* Query tokens per tile; a work item is one KV head's whole GQA group of
 * query heads over one query tile, so each K/V tile is loaded once for
 * n_head / n_head_kv heads. */
#define ATTN_TILE_Q 16
/* Keys per K/V tile: one cache block. */
#define ATTN_TILE_K KV_BLOCK

/* One sequence's query rows in a call. */
struct attn_seq {
    const float *q;         /* [n_tokens, n_head, head_dim] after RoPE, q_tok_stride apart */
    float *out;             /* [n_tokens, n_head, head_dim], out_tok_stride apart */
    const int32_t *table;   /* its block table: positions 0 .. pos0 + n_tokens - 1 backed */
    int64_t n_tokens;       /* query rows */
    int64_t pos0;           /* position of row 0; row i sees keys 0 .. pos0 + i */
};

struct attn_params {
    struct kv_layout kv;    /* this layer's K/V blocks (kvcache.h) */
    const struct attn_seq *seqs;
    int64_t n_seqs;
    int64_t *item_offsets;  /* [n_seqs + 1] the caller's scratch (no allocation per call) */
    int64_t q_tok_stride;   /* elements between consecutive rows of q */
    int64_t out_tok_stride; /* elements between consecutive rows of out */
    int64_t n_head, n_head_kv, head_dim;
    float scale;            /* softmax scale: the model's (1 / sqrt(head_dim) for most) */
    int64_t window;         /* sliding window: a row at position p sees only keys
                               p - window + 1 .. p; 0 = no window */
    float softcap;          /* scores (after scale) become softcap * tanh(s / softcap); 0 = off */
    const float *sinks;     /* [n_head] a logit per query head that joins each of its rows'
                               softmax denominators, no value (gpt-oss); NULL = none */
    bool fused;             /* the int8 path's attention: FMA and a polynomial exp
                               (prefill/attn_fused.h); false: the exact path's bits */
};

/* Floats of per-thread scratch attn_tiled_run needs for these shapes. */
int64_t attn_tiled_scratch_floats(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/* out = softmax(scale * Q K^T + causal mask) V for every query head of
 * every sequence, with query head h reading KV head h / (n_head / n_head_kv);
 * with a window the mask also hides keys window or more positions back, and
 * the blocks no row of a query tile can see are not read. The keys and values
 * of each sequence's positions max(0, pos0 - window + 1) .. pos0 + n_tokens - 1
 * must be in its blocks (a table's entries for blocks wholly before that are
 * never read). Work is split over the pool by (sequence, KV head,
 * query tile); thread t uses scratch + t * scratch_stride (at least
 * attn_tiled_scratch_floats floats). A row's result depends only on its
 * position and the keys it sees, never on the other rows of the call: a
 * token attends the same way in a prompt chunk of any size and as a lone
 * decode row, bit for bit (fused or not). */
void attn_tiled_run(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                    int64_t scratch_stride);

/* attn_tiled_run's fused build, where it sends p->fused (prefill/attn_fused.h). */
void attn_tiled_run_fused(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                          int64_t scratch_stride);

#endif
