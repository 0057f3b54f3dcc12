/* ops/gpu_kvq.h: the CUDA backend's quantized KV pool (q8_0, fp8: layout
 * and codecs in kvcache/kv_devq.h): the kernel that writes a step's K and V
 * rows into the pool, rotated and quantized, and the rotation of the
 * queries and of the attention's output (in place).
 *
 * A quantized cache stores its rows rotated, as the CPU backend's does
 * (backend/cpu_attention.c, kv_rotation): K's rows and the queries by the
 * Walsh-Hadamard matrix in chunks of rot_k (q.k unchanged), V's rows by
 * rot_v and the output back after the attention; 0: no rotation. Covered by
 * tests/emu/test_decode_attn_emu.c (kernels vs the twins, bit for bit) and
 * the emulated backend (tests/emu/test_backend_emu.c). */
#ifndef IGNITE_OPS_GPU_KVQ_H
#define IGNITE_OPS_GPU_KVQ_H

#include "devkit/dev_entry.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gk_kvq_params {
    const uint16_t *k, *v;      /* [n][n_head_kv][head_dim] f16 rows (after RoPE) */
    int64_t n, n_head_kv, head_dim; /* head_dim 64, 128, 256 or 512 */
    const int32_t *pos;         /* [n] each row's position; < 0: padding, nothing written */
    /* Row t's table: with seqs NULL at block_table + t * table_stride (a
     * decode step's rows; 0: one table for all); else sequence s's (the
     * one whose rows row0 .. row0 + n_rows hold t) at block_table + s *
     * table_stride. Device memory for the kernel, host for the twin. */
    const int32_t *block_table;
    int64_t table_stride, block_stride, head_stride; /* elements (struct kv_layout's) */
    const int32_t *seqs;        /* [n_seqs][4]: prefill_attn_seq's row0, n_rows, pos0, pad */
    int64_t n_seqs;
    void *k_cache, *v_cache;    /* the layer's pool bases */
    int k_dtype, v_dtype;       /* KVQ_F16, KVQ_Q8_0, KVQ_FP8 */
    int64_t rot_k, rot_v;       /* rotation chunks (kv_rotation), 0: none */
};

/* Writes every row's K and V of KV head h at its position through its
 * table: f16 as is, or rotated (f32 butterflies, ops_hadamard_rows' order)
 * and quantized a block of 32 at a time (KVQ_QUANTIZE_BLOCK's operations). */
int IG_DEV(gk_kvq_write)(const struct gk_kvq_params *p, void *stream);
void gk_kvq_write_ref(const struct gk_kvq_params *p);

/* x [n_vec][len] f16, len a multiple of rot (64, 128 or 256, <= 512):
 * each chunk of rot values rotated by H (f32 butterflies, then times
 * 1 / sqrt(rot)), rounded back to f16, in place. */
int IG_DEV(gk_hadamard_f16)(uint16_t *x, int64_t n_vec, int64_t len, int64_t rot, void *stream);
void gk_hadamard_f16_ref(uint16_t *x, int64_t n_vec, int64_t len, int64_t rot);

#ifdef __cplusplus
}
#endif

#endif
