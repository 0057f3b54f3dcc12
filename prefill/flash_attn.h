/* prefill/flash_attn.h: fused causal attention for a chunk of prompt tokens
 * (FlashAttention-2 style), GQA, head_dim 64 or 128, bf16 or f16 inputs,
 * fp32 softmax and accumulation. The same call writes the chunk's K and V
 * into the KV cache.
 *
 * Semantics. The chunk holds the queries of positions pos0 .. pos0+n_tokens-1.
 * Query i attends to keys 0 .. pos0+i (bottom-right aligned causal mask):
 * keys < pos0 are read from the cache, keys >= pos0 from the chunk's k/v.
 * Query head h uses KV head h / (n_head / n_head_kv).
 *   O[i][h]  = sum_j softmax_j(scale * q_i . k_j) v_j    (rounded to dtype)
 *   lse[h][i] = ln sum_j exp(scale * q_i . k_j)           (fp32, natural log)
 * and cache rows pos0 .. pos0+n_tokens-1 of every KV head get the chunk's
 * K and V (no other cache row is touched).
 *
 * KV cache layout (per layer, K and V alike): [n_head_kv][n_ctx][head_dim],
 * element (hk, pos, d) at hk*cache_head_stride + pos*cache_row_stride + d.
 *
 * Two twins share the params struct: prefill_attn_ref (CPU, plain C, the
 * reference) and prefill_attn_cuda (prefill/flash_attn.cu, tensor cores).
 * The same .cu built for the CPU emulator gives prefill_attn_emu (tests).
 * Covered by tests/emu/test_flash_attn_emu.c and tests/gpu/test_flash_attn_gpu.c. */
#ifndef IGNITE_PREFILL_FLASH_ATTN_H
#define IGNITE_PREFILL_FLASH_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum prefill_attn_dtype { PREFILL_ATTN_BF16 = 0, PREFILL_ATTN_F16 = 1 };

/* One call's pointers, sizes and strides. Strides count elements (not bytes)
 * and are 64-bit. For the CUDA kernel every pointer is 16-byte aligned and
 * every stride a multiple of 8 (16-byte rows); prefill_attn_choose checks. */
struct prefill_attn_params {
    const void *q;     /* [n_tokens][n_head][head_dim], post-RoPE queries */
    const void *k;     /* [n_tokens][n_head_kv][head_dim], the chunk's post-RoPE keys */
    const void *v;     /* [n_tokens][n_head_kv][head_dim], the chunk's values */
    void *k_cache;     /* [n_head_kv][n_ctx][head_dim]: rows < pos0 read, chunk rows written */
    void *v_cache;     /* same layout and strides as k_cache */
    void *o;           /* [n_tokens][n_head][head_dim] out, dtype */
    float *lse;        /* [n_head][n_tokens] out (natural log), or NULL */

    int64_t n_tokens;  /* queries in the chunk, >= 1 */
    int64_t pos0;      /* position of the chunk's first token = cache rows before it */
    int64_t n_ctx;     /* cache rows per head; pos0 + n_tokens <= n_ctx */
    int64_t n_head;    /* query heads, a multiple of n_head_kv */
    int64_t n_head_kv; /* key/value heads */
    int64_t head_dim;  /* 64 or 128 */

    int64_t q_row_stride, q_head_stride; /* q: token, head */
    int64_t k_row_stride, k_head_stride; /* k: token, kv head */
    int64_t v_row_stride, v_head_stride; /* v: token, kv head */
    int64_t o_row_stride, o_head_stride; /* o: token, head */
    int64_t cache_row_stride;            /* caches: position */
    int64_t cache_head_stride;           /* caches: kv head */
    int64_t lse_head_stride;             /* lse: head (token stride is 1) */

    float scale;       /* softmax scale, usually 1/sqrt(head_dim) */
    int dtype;         /* enum prefill_attn_dtype of q, k, v, caches and o */
};

/* The CUDA kernel's tile configuration. */
struct prefill_attn_tile {
    int block_m;       /* query rows per block (16 per warp) */
    int block_n;       /* keys per K/V tile */
    int warps;         /* warps per block */
    int n_q_tiles;     /* blocks along the queries; grid = (n_q_tiles, n_head) */
    size_t smem_bytes; /* dynamic shared memory per block */
};

#define PREFILL_ATTN_BLOCK_M 64
#define PREFILL_ATTN_BLOCK_N 64
#define PREFILL_ATTN_WARPS 4

/* The one chooser: whether the CUDA kernel supports p and with which tiles.
 * Dispatch, shared-memory sizing and tests all ask it. Returns 0 and fills
 * *t, or IG_E_INTERNAL after printing what is unsupported. */
int prefill_attn_choose(const struct prefill_attn_params *p, struct prefill_attn_tile *t);

/* CPU reference. Returns 0, or IG_E_INTERNAL for inconsistent sizes. */
int prefill_attn_ref(const struct prefill_attn_params *p);

/* CUDA kernel on `stream` (a cudaStream_t; NULL = default). Pointers are
 * device pointers. Returns 0, IG_E_INTERNAL for unsupported parameters or
 * IG_E_DEVICE for a CUDA error (reported). Asynchronous. */
int prefill_attn_cuda(const struct prefill_attn_params *p, void *stream);

/* The same kernel source run by the CPU emulator (emu/), host pointers.
 * Only in test programs that link tests/emu/flash_attn_emu.cc. */
int prefill_attn_emu(const struct prefill_attn_params *p);

#ifdef __cplusplus
}
#endif

#endif
