/* ops/gpu_rope.cuh: one pair of a Q|K|V row after its product: bias, RoPE at
 * the row's position, f16, and where it goes (q, the step's K/V buffers or
 * the KV pool through the row's table). The one definition of that
 * arithmetic, shared by gk_qkv_rope's kernel (ops/gpu_elementwise.cu) and the
 * Q|K|V GEMVs that apply it in their epilogue (ops/gpu_qgemv.cu,
 * ops/gpu_gemv.cu; a decode step's fused launches), so both give the same
 * bits. Contract: struct gk_qkv_params (ops/gpu_ops.h). Covered by
 * tests/emu/test_gpu_ops_emu.c, test_qmm_emu.c and test_gemv_emu.c. */
#ifndef IGNITE_OPS_GPU_ROPE_CUH
#define IGNITE_OPS_GPU_ROPE_CUH

#include "ops/gpu_math.cuh"
#include "ops/gpu_ops.h"

#include "models/model.h"
extern "C" {
#include "kvcache/kvcache.h"
}

namespace {

/* Where the pair (e0, e0 + gap) of slot j lives and whether it turns: each
 * head has head_dim / 2 slots; the first n_rot / 2 are rotated pairs (angle
 * j), the rest pass through as adjacent pairs after the rotated dims. */
struct rope_slot {
    int e0, gap;
    bool rotate;
};

__device__ __forceinline__ rope_slot gk_rope_slot(int j, int half, int rope_style)
{
    rope_slot s;
    s.rotate = j < half;
    if (!s.rotate) {
        s.e0 = 2 * half + 2 * (j - half);
        s.gap = 1;
    } else if (rope_style == ROPE_ADJACENT) {
        s.e0 = 2 * j;
        s.gap = 1;
    } else {
        s.e0 = j;
        s.gap = half;
    }
    return s;
}

/* cos and sin of angle j at pos, as f32 after the mscale product; the angle
 * in double (at pos 8000 an f32 angle would be off by ~1e-3). */
__device__ __forceinline__ void gk_rope_cs(const gk_qkv_params &p, int64_t pos, int j,
                                           float *c, float *sn)
{
    const double ms = p.mscale != 0 ? p.mscale : 1.0;
    double s, co;
    sincos((double)pos * p.inv_freq[j], &s, &co);
    *c = (float)(co * ms);
    *sn = (float)(s * ms);
}

/* Row t's block in the pool for its position (cache mode), or -1 where the
 * row writes nothing there (padding, past its table, a negative id). */
__device__ __forceinline__ int64_t gk_rope_block(const gk_qkv_params &p, int64_t t, int64_t pos)
{
    if (p.k || pos < 0 || pos / KV_BLOCK >= p.table_stride)
        return -1;
    const int32_t b = p.block_table[t * p.table_stride + pos / KV_BLOCK];
    return b >= 0 ? b : -1;
}

/* Slot s (head s / (head_dim / 2), pair s % (head_dim / 2)) of row t: a, b
 * the product's values at the pair's elements; c, sn its angle's (read only
 * where the pair turns); blk gk_rope_block's. */
__device__ __forceinline__ void gk_rope_store(const gk_qkv_params &p, int64_t t, int64_t pos,
                                              int64_t blk, int s, float a, float b, float c,
                                              float sn)
{
    const int half = (int)(p.n_rot / 2), hd = (int)p.head_dim, pairs = hd / 2;
    const int h = s / pairs, j = s % pairs;
    const rope_slot sl = gk_rope_slot(j, half, p.rope_style);
    const int e0 = h * hd + sl.e0, e1 = e0 + sl.gap;
    if (p.bias) {
        if (sl.gap == 1) {
            const gk_f32x2 v = *(const gk_f32x2 *)(p.bias + e0);
            a += v.x, b += v.y;
        } else {
            a += p.bias[e0], b += p.bias[e1];
        }
    }
    if (pos < 0) {
        a = b = 0;
    } else if (sl.rotate && h < p.n_head + p.n_head_kv) {
        const float a2 = gk_sub(gk_mul(a, c), gk_mul(b, sn));
        b = gk_add(gk_mul(a, sn), gk_mul(b, c));
        a = a2;
    }
    uint16_t *dst; /* this head's row of head_dim outputs */
    if (h < p.n_head) {
        dst = p.q + (t * p.n_head + h) * hd;
    } else {
        const int64_t kh = h < p.n_head + p.n_head_kv ? h - p.n_head
                                                      : h - p.n_head - p.n_head_kv;
        const bool is_k = h < p.n_head + p.n_head_kv;
        if (p.k) {
            dst = (is_k ? p.k : p.v) + (t * p.n_head_kv + kh) * hd;
        } else {
            if (blk < 0) /* padding, or the caller's bug: never write outside */
                return;
            dst = (is_k ? p.k_cache : p.v_cache) + blk * p.block_stride + kh * p.head_stride +
                  (pos % KV_BLOCK) * hd;
        }
    }
    const int d0 = sl.e0;
    if (sl.gap == 1) {
        *(uint32_t *)(dst + d0) = ig_pack2<ig_f16_t>(a, b);
    } else {
        dst[d0] = gk_f32_to_f16(a);
        dst[d0 + sl.gap] = gk_f32_to_f16(b);
    }
}

/* A Q|K|V GEMV's warp that applies this in its epilogue owns slot s: its
 * two rows are the pair's elements (ra, rb). */
__device__ __forceinline__ void gk_rope_rows(const gk_qkv_params &p, int64_t s, int64_t *ra,
                                             int64_t *rb)
{
    const int hd = (int)p.head_dim, pairs = hd / 2;
    const rope_slot sl = gk_rope_slot((int)(s % pairs), (int)(p.n_rot / 2), p.rope_style);
    *ra = s / pairs * hd + sl.e0;
    *rb = *ra + sl.gap;
}

/* The epilogue: slot s of row t from its two products a, b (what the plain
 * GEMV would write into qkv), as gk_qkv_rope's kernel would store it. */
__device__ __forceinline__ void gk_rope_epilogue(const gk_qkv_params &p, int64_t t, int s,
                                                 float a, float b)
{
    const int64_t pos = p.pos[t];
    const int half = (int)(p.n_rot / 2), j = s % (int)(p.head_dim / 2);
    float c = 0, sn = 0;
    if (pos >= 0 && j < half)
        gk_rope_cs(p, pos, j, &c, &sn);
    gk_rope_store(p, t, pos, gk_rope_block(p, t, pos), s, a, b, c, sn);
}

} /* namespace */

#endif
