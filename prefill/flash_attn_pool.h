/* prefill/flash_attn_pool.h: points one prefill attention call (prefill/flash_attn.h)
 * at a sequence's K and V in the batch engine's KV pool (kvcache/kvcache.h: one
 * layer's kv_layout and the sequence's block table), so the kernels read and write
 * the pool exactly as kv_row_offset addresses it; or one call at the sequences
 * of a batch step, each through its own table (variable length). The paged path
 * runs on the mma.sync variants and the ws variants of whole-block tiles,
 * variable length on the mma.sync ones and those ws ones at head dims 64 and
 * 128 (the chooser refuses the others).
 *
 * Covered by tests/emu/test_flash_attn_emu.c and tests/gpu/test_flash_attn_gpu.c,
 * whose paged cases (tests/emu/attn_case.h) lay out their pool with kv_row_offset
 * and set their params here. */
#ifndef IGNITE_PREFILL_FLASH_ATTN_POOL_H
#define IGNITE_PREFILL_FLASH_ATTN_POOL_H

#include "prefill/flash_attn.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kvcache/kvcache.h"
#ifdef __cplusplus
}
#endif

/* Sets p's caches to layer layout L (K at L->k, V at L->v: host memory for the
 * CPU twin, device memory for the CUDA kernel) through `table` (n_table block
 * ids, in the memory the kernel reads: device memory for CUDA) of a pool of
 * n_blocks blocks; n_ctx becomes the positions the table covers. The kernels
 * read 2-byte elements as p->dtype says (the engine's pool is KV_F16, so
 * PREFILL_ATTN_F16 there; the tests also read a pool of bf16 bits). Returns 0,
 * or -1 (nothing set) for a pool of f32 (the CPU backend's exact path). */
static inline int prefill_attn_use_pool(struct prefill_attn_params *p, const struct kv_layout *L,
                                        const int32_t *table, int64_t n_table, int64_t n_blocks)
{
    /* a quantized pool (q8_0 / fp8, kvcache/kv_devq.h's regions): the
     * mma.sync kernel's dequantizing loads */
    const int kt = L->dtype == KV_Q8_0 ? 1 : L->dtype == KV_FP8 ? 2 : 0;
    const int vt = L->dtype_v == KV_Q8_0 ? 1 : L->dtype_v == KV_FP8 ? 2 : 0;
    if ((L->dtype != KV_F16 && !kt) || (L->dtype_v != KV_F16 && !vt))
        return -1;
    p->cache_k_dtype = kt;
    p->cache_v_dtype = vt;
    p->k_cache = L->k;
    p->v_cache = L->v;
    p->n_ctx = n_table * KV_BLOCK;
    p->cache_row_stride = L->head_dim;
    p->cache_head_stride = L->head_stride;
    p->block_table = table;
    p->block_rows = KV_BLOCK;
    p->cache_block_stride = L->block_stride;
    p->n_blocks = n_blocks;
    return 0;
}

/* Variable length: sets p's caches to layer layout L for n_seqs sequences
 * `seqs` ([n_seqs], in the memory the kernel reads), sequence s's block
 * table at tables + s * table_stride (n_blocks blocks in the pool); n_ctx
 * becomes table_stride * KV_BLOCK. host_seqs is a host copy of seqs (the same
 * pointer for the CPU twin): p->n_tokens becomes the largest n_rows (the
 * launch's shape) and p->pos0 the largest pos0. Returns 0, or -1 (nothing
 * set) for a pool of f32 or no sequences. */
static inline int prefill_attn_use_pool_varlen(struct prefill_attn_params *p,
                                               const struct kv_layout *L, const int32_t *tables,
                                               int64_t table_stride, int64_t n_blocks,
                                               const struct prefill_attn_seq *seqs,
                                               const struct prefill_attn_seq *host_seqs,
                                               int64_t n_seqs)
{
    if (n_seqs < 1 || prefill_attn_use_pool(p, L, tables, table_stride, n_blocks) != 0)
        return -1;
    p->seqs = seqs;
    p->n_seqs = n_seqs;
    p->table_stride = table_stride;
    p->n_tokens = p->pos0 = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        if (host_seqs[s].n_rows > p->n_tokens)
            p->n_tokens = host_seqs[s].n_rows;
        if (host_seqs[s].pos0 > p->pos0)
            p->pos0 = host_seqs[s].pos0;
    }
    return 0;
}

#endif
