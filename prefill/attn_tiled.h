/* prefill/attn_tiled.h: causal attention of a block of query tokens against
 * the KV cache, FlashAttention-style on the CPU: query tiles against K/V
 * tiles with an online softmax, no n x n buffer. The CPU twin of the CUDA
 * prefill kernel, and its reference. Covered by tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_TILED_H
#define IGNITE_PREFILL_ATTN_TILED_H

#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdint.h>

/* Query tokens per tile; a work item is one KV head's whole GQA group of
 * query heads over one query tile, so each K/V tile is loaded once for
 * n_head / n_head_kv heads. */
#define ATTN_TILE_Q 16
/* Keys per K/V tile. */
#define ATTN_TILE_K 64

struct attn_params {
    const float *q;         /* [n_tokens, n_head, head_dim] after RoPE */
    int64_t q_tok_stride;   /* elements between consecutive tokens of q */
    void *const *k_blocks;  /* this layer's K block table: block b holds positions
                               b * block_size .., [n_head_kv, block_size, head_dim] (kvcache.h) */
    void *const *v_blocks;  /* this layer's V block table, same layout */
    int64_t block_size;     /* positions per block (KV_BLOCK for the cache) */
    enum kv_dtype kv_dtype; /* element type of the blocks */
    int64_t kv_head_stride; /* elements between KV heads in a block (block_size * head_dim) */
    float *out;             /* [n_tokens, n_head, head_dim] */
    int64_t out_tok_stride; /* elements between consecutive tokens of out */
    int64_t n_tokens;       /* query tokens */
    int64_t pos0;           /* position of query 0; query i sees keys 0 .. pos0 + i */
    int64_t n_head, n_head_kv, head_dim;
    float scale;            /* softmax scale: the model's (1 / sqrt(head_dim) for most) */
    int64_t window;         /* sliding window: query i sees only keys
                               pos0 + i - window + 1 .. pos0 + i; 0 = no window */
    float softcap;          /* scores (after scale) become softcap * tanh(s / softcap); 0 = off */
};

/* Floats of per-thread scratch attn_tiled_run needs for these shapes. */
int64_t attn_tiled_scratch_floats(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/* out = softmax(scale * Q K^T + causal mask) V for every query head, with
 * query head h reading KV head h / (n_head / n_head_kv); with a window the
 * mask also hides keys window or more positions back, and key tiles no query
 * of a tile can see are not read. Keys and values of positions
 * max(0, pos0 - window + 1) .. pos0 + n_tokens - 1 must be in k and v. Work is split over
 * the pool by (KV head, query tile); thread t uses scratch + t * scratch_stride
 * (at least attn_tiled_scratch_floats floats). */
void attn_tiled_run(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                    int64_t scratch_stride);

#endif
