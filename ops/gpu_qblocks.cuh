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

#include <string.h>

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
template <> struct qtraits<QUANT_MXFP4> { static constexpr int kBlock = 32, kQ = 16, kH = 0, kS = 1; };

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

/* qtype_dispatch's types and MXFP4: the launchers of the kernels that read
 * expert matrices (gk_qmm_native_experts) or load them (ops/gpu_qweights.cu). */
template <class F> inline int qtype_dispatch_experts(int type, F &&f)
{
    if (type == QUANT_MXFP4)
        return f(qtype_tag<QUANT_MXFP4>());
    return qtype_dispatch(type, f);
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

/* Q4_K/Q5_K: scale and min of sub-block j from the 12 packed bytes (words
 * s[0..2]), as models/quant.h's quant_k4_scale_min: bytes j, j + 4 (and j + 8
 * for j >= 4) sit at the same shift in consecutive words. */
__device__ __forceinline__ void qb_scale_min(const uint32_t s[3], int j, int &sc, int &mn)
{
    const int sh = 8 * (j % 4);
    const int a = (int)((s[0] >> sh) & 0xffu), b = (int)((s[1] >> sh) & 0xffu),
              c = (int)((s[2] >> sh) & 0xffu);
    if (j < 4) {
        sc = a & 63;
        mn = b & 63;
    } else {
        sc = (c & 15) | (a >> 6) << 4;
        mn = (c >> 4) | (b >> 6) << 4;
    }
}

/* The bytes of one 32-element activation block of a row, loaded with
 * aligned vector loads (what qb_values32 needs, per type):
 *   32-element types: q0 (q1: Q8_0) quants, h0 high bits, s0 = d | m << 16;
 *   Q4_K/Q5_K: q0, q1 the 32 quant bytes of the sub-block's pair, h0 its
 *     high-bit word, s[0..3] the 16-byte record;
 *   Q6_K: q0, q1 the 32 low-bit bytes, h0, h1 the two high-bit words,
 *     s[0] = d, s[1] the two 16-element scales. */
struct qraw {
    gk_u32x4 q0, q1;
    uint32_t h0, h1;
    uint32_t s[4];
};

template <int TYPE>
__device__ __forceinline__ qraw qb_load32(const gk_qmat &w, int64_t row, int64_t xb)
{
    using T = qtraits<TYPE>;
    qraw r;
    const int64_t nb = w.cols / T::kBlock;
    if (T::kBlock == 32) {
        const int64_t i = row * nb + xb;
        r.q0 = *(const gk_u32x4 *)(w.q + i * T::kQ);
        if (T::kQ == 32)
            r.q1 = *(const gk_u32x4 *)(w.q + i * T::kQ + 16);
        if (T::kH)
            r.h0 = qb_u32(w.h + i * T::kH);
        r.s[0] = T::kS == 4   ? qb_u32(w.s + i * T::kS)
                 : T::kS == 2 ? (uint32_t)qb_u16(w.s + i * T::kS)
                              : (uint32_t)w.s[i]; /* MXFP4's E8M0 byte */
        return r;
    }
    const int64_t sb = row * nb + xb / 8;
    const int j = (int)(xb % 8);
    if (TYPE == QUANT_Q6_K) {
        const int half = j / 4, quarter = j % 4;
        const uint8_t *ql = w.q + sb * T::kQ;
        const int k = 2 * half + quarter % 2; /* the 32-byte chunk of the file's ql */
        r.q0 = *(const gk_u32x4 *)(ql + GK_KQ_OFF(k, 0));
        r.q1 = *(const gk_u32x4 *)(ql + GK_KQ_OFF(k, 1));
        const uint8_t *h = w.h + sb * T::kH + 16 * (2 * half + quarter % 2) + 8 * (quarter / 2);
        r.h0 = qb_u32(h);
        r.h1 = qb_u32(h + 4);
        const uint8_t *s = w.s + sb * T::kS;
        r.s[0] = qb_u16(s);
        r.s[1] = qb_u16(s + 4 + 8 * half + 2 * quarter);
        return r;
    }
    const uint8_t *q = w.q + sb * T::kQ;
    r.q0 = *(const gk_u32x4 *)(q + GK_KQ_OFF(j / 2, 0));
    r.q1 = *(const gk_u32x4 *)(q + GK_KQ_OFF(j / 2, 1));
    if (T::kH)
        r.h0 = qb_u32(w.h + sb * T::kH + 4 * j);
    const gk_u32x4 s = *(const gk_u32x4 *)(w.s + sb * T::kS);
    for (int k = 0; k < 4; k++)
        r.s[k] = s.w[k];
    return r;
}

/* models/quant.h's quant_mxfp4_value (the E2M1 value doubled) from bits:
 * magnitudes 0, 1, 2, 3, 4, 6, 8, 12 are (2 + m) 2^(x - 1) for exponent
 * field x >= 1, m for x = 0; bit 3 the sign. No table in local memory. */
__device__ __forceinline__ int qb_mxfp4_value(int q)
{
    const int x = (q >> 1) & 3, m = q & 1;
    const int mag = x == 0 ? m : (2 + m) << (x - 1);
    return q & 8 ? -mag : mag;
}

/* models/quant.h's quant_e8m0_half (ggml's GGML_E8M0_TO_FP32_HALF):
 * 2^(e - 128), subnormal for e < 2. */
__device__ __forceinline__ float qb_e8m0_half(uint32_t e)
{
    const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

/* Quant byte l (0..31) of q0 | q1. */
__device__ __forceinline__ int qb_qbyte(const qraw &r, int l)
{
    const uint32_t w = l < 16 ? r.q0.w[l / 4] : r.q1.w[(l - 16) / 4];
    return (int)((w >> (8 * (l % 4))) & 0xffu);
}

/* y[0..31] = the values of the activation block loaded in r (j: its index
 * within a super-block, K types): bit for bit models/quant.c's. */
template <int TYPE>
__device__ __forceinline__ void qb_values32(const qraw &r, int j, float y[32])
{
    using T = qtraits<TYPE>;
    if (TYPE == QUANT_Q8_0) {
        const float d = gk_f16_bits_to_f32(r.s[0]);
        IG_UNROLL
        for (int l = 0; l < 32; l++)
            y[l] = gk_mul((float)(int8_t)qb_qbyte(r, l), d);
        return;
    }
    if (TYPE == QUANT_MXFP4) { /* quant_mxfp4_value(q) 2^(e - 128): exact in f32 */
        const float d = qb_e8m0_half(r.s[0]);
        IG_UNROLL
        for (int l = 0; l < 16; l++) {
            const int b = qb_qbyte(r, l);
            y[l] = gk_mul((float)qb_mxfp4_value(b & 15), d);
            y[l + 16] = gk_mul((float)qb_mxfp4_value(b >> 4), d);
        }
        return;
    }
    if (T::kBlock == 32) {
        const float d = gk_f16_bits_to_f32(r.s[0]), m = gk_f16_bits_to_f32(r.s[0] >> 16);
        IG_UNROLL
        for (int l = 0; l < 16; l++) {
            const int b = qb_qbyte(r, l);
            int x0 = b & 15, x1 = b >> 4;
            if (T::kH) {
                x0 |= qb_hi1(r.h0, l) << 4;
                x1 |= qb_hi1(r.h0, l + 16) << 4;
            }
            if (TYPE == QUANT_Q4_0 || TYPE == QUANT_Q5_0) {
                const int off = TYPE == QUANT_Q4_0 ? 8 : 16;
                y[l] = gk_mul((float)(x0 - off), d);
                y[l + 16] = gk_mul((float)(x1 - off), d);
            } else { /* Q4_1, Q5_1: q d + m */
                y[l] = gk_add(gk_mul((float)x0, d), m);
                y[l + 16] = gk_add(gk_mul((float)x1, d), m);
            }
        }
        return;
    }
    if (TYPE == QUANT_Q6_K) {
        const int quarter = j % 4;
        const float d = gk_f16_bits_to_f32(r.s[0]);
        const float d0 = gk_mul(d, (float)(int8_t)(r.s[1] & 0xffu));
        const float d1 = gk_mul(d, (float)(int8_t)(r.s[1] >> 8));
        IG_UNROLL
        for (int l = 0; l < 32; l++) {
            const int b = qb_qbyte(r, l);
            const int v = ((quarter < 2 ? b & 15 : b >> 4) | qb_hi2(r.h0, r.h1, l) << 4) - 32;
            y[l] = gk_mul(l < 16 ? d0 : d1, (float)v);
        }
        return;
    }
    /* Q4_K, Q5_K: d sc q - dmin mn */
    int sc, mn;
    qb_scale_min(r.s + 1, j, sc, mn);
    const float d1 = gk_mul(gk_f16_bits_to_f32(r.s[0]), (float)sc);
    const float m1 = gk_mul(gk_f16_bits_to_f32(r.s[0] >> 16), (float)mn);
    IG_UNROLL
    for (int l = 0; l < 32; l++) {
        int v = (qb_qbyte(r, l) >> (4 * (j % 2))) & 15;
        if (T::kH)
            v |= qb_hi1(r.h0, l) << 4;
        y[l] = gk_sub(gk_mul(d1, (float)v), m1);
    }
}

/* y[0..31] = the values of activation block `xb` (32 columns from 32 xb)
 * of row `row`. */
template <int TYPE>
__device__ __forceinline__ void qb_decode32(const gk_qmat &w, int64_t row, int64_t xb,
                                            float y[32])
{
    qb_values32<TYPE>(qb_load32<TYPE>(w, row, xb), (int)(xb % 8), y);
}

} /* namespace */

#endif
