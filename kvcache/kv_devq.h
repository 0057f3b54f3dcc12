/* kvcache/kv_devq.h: the CUDA pool's quantized K/V (q8_0, fp8 e4m3), one
 * definition for the kernels (both builds), their CPU twins and the host
 * copies of backend/gpu_cache.c.
 *
 * Both types are blocks of 32 values and an f16 scale d: 34 bytes, ggml's
 * q8_0 size, so kv_dtype_row_bytes and every byte count hold for both.
 * q8_0 is ggml's quantize_row_q8_0_ref (d = amax / 127, q = round(x / d)),
 * fp8 is e4m3 (d = amax / 448, q = e4m3(x / d), nearest even, saturating).
 * Why 32 values a scale for fp8: the same block as q8_0 (one layout, one
 * load path, the same bytes); vLLM's per-tensor or per-head scales need a
 * calibration ignite has no pass for, and K after RoPE has outlier channels
 * a per-head scale would flatten the rest of the head for.
 *
 * The layout in the pool differs from ggml's interleaved blocks: a (block,
 * KV head) region of KV_BLOCK rows holds the rows' quants first,
 * [KV_BLOCK][head_dim] bytes, then their scales, [KV_BLOCK][head_dim / 32]
 * f16. The same bytes (34 / 32 a value) in an order the kernels load in
 * 16-, 8- and 4-byte aligned pieces (a ggml block's quants start 2 bytes
 * into it). A region starts at element offset e (kv_row_offset's, of its
 * row 0) times 34 / 32 bytes: e is a multiple of KV_BLOCK x head_dim. Saved
 * caches are ggml's layout (backend/gpu_cache.c reorders, byte for byte). */
#ifndef IGNITE_KVCACHE_KV_DEVQ_H
#define IGNITE_KVCACHE_KV_DEVQ_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(IG_EMU)
#define KVQ_FN static __host__ __device__ __forceinline__
#else
#define KVQ_FN static inline
#endif

/* The pool's element types as the kernels name them (decode_attn_params'
 * k_dtype, v_dtype; prefill_attn_params' cache_q). */
enum { KVQ_F16 = 0, KVQ_Q8_0 = 1, KVQ_FP8 = 2 };

/* Byte offset of the region whose row 0 is at element offset e (a
 * multiple of 32): e x 34 / 32. */
KVQ_FN int64_t kvq_region(int64_t e)
{
    return e + (e >> 4);
}

/* Byte offset, from a region, of row r's quant d and of its scale for d. */
KVQ_FN int64_t kvq_quant_at(int64_t head_dim, int64_t r, int64_t d)
{
    return r * head_dim + d;
}
KVQ_FN int64_t kvq_scale_at(int64_t head_dim, int64_t r, int64_t d)
{
    return 64 * head_dim + (r * (head_dim / 32) + d / 32) * 2;
}

/* e4m3 bits (sign, 4 exponent bits biased 7, 3 mantissa bits; 0x7f NaN)
 * to f32. */
KVQ_FN float kvq_fp8_to_f32(uint32_t b)
{
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) {
        v = (float)m * 0.001953125f; /* m x 2^-9 */
    } else {
        union { uint32_t u; float f; } c;
        c.u = ((e + 120u) << 23) | (m << 20);
        v = c.f;
    }
    return (b & 0x80u) ? -v : v;
}

/* f32 to e4m3 bits, nearest even, |x| past 448 saturated (NaN as 0). */
KVQ_FN uint32_t kvq_f32_to_fp8(float x)
{
    union { float f; uint32_t u; } c;
    c.f = x;
    const uint32_t sign = (c.u >> 24) & 0x80u;
    c.u &= 0x7fffffffu;
    if (!(c.f == c.f))
        return 0;
    uint32_t b;
    if (c.f >= 448.0f) {
        b = 0x7eu;
    } else if (c.f < 0.015625f) { /* below 2^-6: subnormal steps of 2^-9, 8 = the least normal */
        b = (uint32_t)rintf(c.f * 512.0f);
    } else { /* keep 3 mantissa bits, nearest even; exponent re-biased 127 -> 7 */
        const uint32_t r = (c.u + 0x7ffffu + ((c.u >> 20) & 1u)) >> 20;
        b = r - (120u << 3);
        b = b > 0x7eu ? 0x7eu : b;
    }
    return sign | b;
}

/* Quantizes x[0..31] (f32) as type (KVQ_Q8_0 / KVQ_FP8): q[32] and the
 * f16 bits of d (to_f16: the caller's f32 -> f16, nearest even). q8_0
 * operation for operation ggml's quantize_row_q8_0_ref (models/quant.c). */
#define KVQ_QUANTIZE_BLOCK(type, x, q, d_bits, to_f16)                                      \
    do {                                                                                   \
        float amax_ = 0.0f;                                                                \
        for (int j_ = 0; j_ < 32; j_++)                                                    \
            amax_ = fabsf((x)[j_]) > amax_ ? fabsf((x)[j_]) : amax_;                       \
        const float d_ = amax_ / ((type) == KVQ_Q8_0 ? 127.0f : 448.0f);                   \
        const float id_ = d_ ? 1.0f / d_ : 0.0f;                                           \
        (d_bits) = to_f16(d_);                                                             \
        for (int j_ = 0; j_ < 32; j_++) {                                                  \
            if ((type) == KVQ_Q8_0) {                                                      \
                const float v_ = roundf((x)[j_] * id_);                                    \
                (q)[j_] = (uint8_t)(int8_t)(v_ == v_ ? v_ : 0.0f);                         \
            } else {                                                                       \
                (q)[j_] = (uint8_t)kvq_f32_to_fp8((x)[j_] * id_);                          \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* Value of quant byte qb of type (KVQ_Q8_0 / KVQ_FP8) with scale d. */
KVQ_FN float kvq_value(int type, uint32_t qb, float d)
{
    return d * (type == KVQ_Q8_0 ? (float)(int8_t)(uint8_t)qb : kvq_fp8_to_f32(qb));
}

#endif
