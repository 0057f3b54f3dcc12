/* ops/gpu_qblocks.cuh: reading the device layout of quantized weights
 * (ops/gpu_qmm.h, ops/gpu_qlayout.c) inside kernels: the type list, plane
 * addresses, and the values of one 32-element block computed operation for
 * operation as models/quant.c does (each f32 product and difference rounded
 * on its own: gk_mul/gk_sub never fuse), so a dequantized weight is bit for
 * bit the CPU's. Shared by ops/gpu_qweights.cu (dequantization, embedding)
 * and ops/gpu_qgemm.cu (tensor cores).
 * Covered by tests/emu/test_qmm_emu.c. */
#ifndef IGNITE_OPS_GPU_QBLOCKS_CUH
#define IGNITE_OPS_GPU_QBLOCKS_CUH

#include "ops/gpu_math.cuh"
#include "ops/gpu_qmm.h"

extern "C" {
#include "models/quant.h"
}

namespace {

/* Per type: elements per block, bytes per block in each plane (the table
 * of ops/gpu_qlayout.c, which gk_qlayout_of returns on the host). */
template <int TYPE> struct qtraits;
template <> struct qtraits<QUANT_Q4_0> { static constexpr int kBlock = 32, kQ = 16, kH = 0, kS = 2; };
template <> struct qtraits<QUANT_Q4_1> { static constexpr int kBlock = 32, kQ = 16, kH = 0, kS = 4; };
template <> struct qtraits<QUANT_Q5_0> { static constexpr int kBlock = 32, kQ = 16, kH = 4, kS = 2; };
template <> struct qtraits<QUANT_Q5_1> { static constexpr int kBlock = 32, kQ = 16, kH = 4, kS = 4; };
template <> struct qtraits<QUANT_Q8_0> { static constexpr int kBlock = 32, kQ = 32, kH = 0, kS = 2; };
template <> struct qtraits<QUANT_Q4_K> { static constexpr int kBlock = 256, kQ = 128, kH = 0, kS = 16; };
template <> struct qtraits<QUANT_Q5_K> { static constexpr int kBlock = 256, kQ = 128, kH = 32, kS = 16; };
template <> struct qtraits<QUANT_Q6_K> { static constexpr int kBlock = 256, kQ = 128, kH = 64, kS = 20; };

/* Calls f(tag) for the runtime type, tag.value being the type as a
 * constant: f is a generic lambda (`[&](auto tag) {...}`); -1 for a type
 * without a device layout. */
template <int V> struct qtype_tag { static constexpr int value = V; };

template <class F> inline int qtype_dispatch(int type, F &&f) /* host: launchers */
{
    switch (type) {
    case QUANT_Q4_0: return f(qtype_tag<QUANT_Q4_0>());
    case QUANT_Q4_1: return f(qtype_tag<QUANT_Q4_1>());
    case QUANT_Q5_0: return f(qtype_tag<QUANT_Q5_0>());
    case QUANT_Q5_1: return f(qtype_tag<QUANT_Q5_1>());
    case QUANT_Q8_0: return f(qtype_tag<QUANT_Q8_0>());
    case QUANT_Q4_K: return f(qtype_tag<QUANT_Q4_K>());
    case QUANT_Q5_K: return f(qtype_tag<QUANT_Q5_K>());
    case QUANT_Q6_K: return f(qtype_tag<QUANT_Q6_K>());
    default: return -1;
    }
}

__device__ __forceinline__ uint16_t qb_u16(const uint8_t *p) /* p 2-byte aligned */
{
    return *(const uint16_t *)p;
}

__device__ __forceinline__ uint32_t qb_u32(const uint8_t *p) /* p 4-byte aligned */
{
    return *(const uint32_t *)p;
}

__device__ __forceinline__ float qb_f16(const uint8_t *p)
{
    return gk_f16_to_f32(qb_u16(p));
}

/* The one-bit high part of element e (0..31) of an activation block, from
 * its reordered word (bit 8 (e % 4) + e / 4). */
__device__ __forceinline__ int qb_hi1(uint32_t word, int e)
{
    return (int)((word >> (8 * (e % 4) + e / 4)) & 1u);
}

/* The two-bit high part of element e from Q6_K's two reordered words. */
__device__ __forceinline__ int qb_hi2(uint32_t w0, uint32_t w1, int e)
{
    const int k = e / 4, b = e % 4;
    return (int)((((k < 4) ? w0 : w1) >> (8 * b + 2 * (k % 4))) & 3u);
}

/* Q4_K/Q5_K: scale and min of sub-block j from the 12 packed bytes. */
__device__ __forceinline__ void qb_scale_min(const uint8_t *s, int j, int &sc, int &mn)
{
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* y[0..31] = the values of activation block `xb` (32 columns from 32 xb)
 * of row `row`: bit for bit models/quant.c's. */
template <int TYPE>
__device__ __forceinline__ void qb_decode32(const gk_qmat &w, int64_t row, int64_t xb,
                                            float y[32])
{
    using T = qtraits<TYPE>;
    const int64_t nb = w.cols / T::kBlock;
    if (T::kBlock == 32) {
        const int64_t i = row * nb + xb;
        const uint8_t *q = w.q + i * T::kQ, *s = w.s + i * T::kS;
        const float d = qb_f16(s);
        if (TYPE == QUANT_Q8_0) {
            for (int j = 0; j < 32; j++)
                y[j] = gk_mul((float)(int8_t)q[j], d);
            return;
        }
        const float m = T::kS == 4 ? qb_f16(s + 2) : 0.0f;
        const uint32_t hw = T::kH ? qb_u32(w.h + i * T::kH) : 0u;
        for (int j = 0; j < 16; j++) {
            int x0 = q[j] & 15, x1 = q[j] >> 4;
            if (T::kH) {
                x0 |= qb_hi1(hw, j) << 4;
                x1 |= qb_hi1(hw, j + 16) << 4;
            }
            if (TYPE == QUANT_Q4_0 || TYPE == QUANT_Q5_0) {
                const int off = TYPE == QUANT_Q4_0 ? 8 : 16;
                y[j] = gk_mul((float)(x0 - off), d);
                y[j + 16] = gk_mul((float)(x1 - off), d);
            } else { /* Q4_1, Q5_1: q d + m */
                y[j] = gk_add(gk_mul((float)x0, d), m);
                y[j + 16] = gk_add(gk_mul((float)x1, d), m);
            }
        }
        return;
    }
    const int64_t sb = row * nb + xb / 8;
    const int j = (int)(xb % 8); /* sub-block */
    const uint8_t *q = w.q + sb * T::kQ, *s = w.s + sb * T::kS;
    if (TYPE == QUANT_Q6_K) {
        const int half = j / 4, quarter = j % 4;
        const int c = 2 * half + quarter % 2, piece = quarter / 2; /* its chunk and piece */
        const uint8_t *h = w.h + sb * T::kH + 16 * c + 8 * piece;
        const uint32_t w0 = qb_u32(h), w1 = qb_u32(h + 4);
        const float d = qb_f16(s);
        const int8_t *sc = (const int8_t *)(s + 4);
        const uint8_t *ql = q + 64 * half + 32 * (quarter % 2);
        for (int l = 0; l < 32; l++) {
            const int lo = quarter < 2 ? ql[l] & 15 : ql[l] >> 4;
            const int v = (lo | qb_hi2(w0, w1, l) << 4) - 32;
            y[l] = gk_mul(gk_mul(d, (float)sc[8 * half + 2 * quarter + l / 16]), (float)v);
        }
        return;
    }
    /* Q4_K, Q5_K: d sc q - dmin mn */
    int sc, mn;
    qb_scale_min(s + 4, j, sc, mn);
    const float d1 = gk_mul(qb_f16(s), (float)sc), m1 = gk_mul(qb_f16(s + 2), (float)mn);
    const uint8_t *qs = q + 32 * (j / 2);
    const uint32_t hw = T::kH ? qb_u32(w.h + sb * T::kH + 4 * j) : 0u;
    for (int l = 0; l < 32; l++) {
        int v = (qs[l] >> (4 * (j % 2))) & 15;
        if (T::kH)
            v |= qb_hi1(hw, l) << 4;
        y[l] = gk_sub(gk_mul(d1, (float)v), m1);
    }
}

} /* namespace */

#endif
