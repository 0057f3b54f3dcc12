/* core/half.h: IEEE binary16 and bfloat16 <-> float conversions.
 *
 * Exact and portable (no F16C needed): f16 -> f32 and bf16 -> f32 are exact,
 * f32 -> f16/bf16 round to nearest even, NaN stays NaN. The SIMD kernels may
 * use hardware conversions; these are the reference. The _row forms
 * convert a row with F16C where the CPU has it (core/half.c).
 * Covered by tests/unit/test_core.c. */
#ifndef IGNITE_CORE_HALF_H
#define IGNITE_CORE_HALF_H

#include <stdint.h>
#include <string.h>

typedef uint16_t ig_f16;  /* raw IEEE binary16 bits */
typedef uint16_t ig_bf16; /* raw bfloat16 bits (top half of a float) */

static inline float ig_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t ig_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ig_f16_to_f32(ig_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN; a NaN comes out quiet, as F16C makes it */
        return ig_bits_to_f32(sign | 0x7f800000u | (man ? 0x400000u : 0) | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return ig_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return ig_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline ig_f16 ig_f32_to_f16(float f)
{
    uint32_t u = ig_f32_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: keep it quiet and non-zero */
        return (ig_f16)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (ig_f16)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal: subnormal or 0 */
        /* Adding 0.5 lets the FPU do the round-to-nearest-even for us. */
        float v = ig_bits_to_f32(abs) + 0.5f;
        return (ig_f16)(sign | (ig_f32_to_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round */
    return (ig_f16)(sign | (abs >> 13));
}

/* The f16 stored at p, which may be unaligned: the scales inside quantized
 * blocks sit at any byte offset. Stored little-endian, as GGUF is, on the
 * little-endian hosts ignite builds for. The one reader of a block's f16
 * fields: ig_f16_at converts it as ig_f16_to_f32 does (models/quant.c, the
 * CPU twins ops/gpu_ops_ref.c and ops/gpu_qmm_ref.c); the x86 kernels convert
 * the bits with F16C (ops/qmatmul_x86.h), the same float. */
static inline ig_f16 ig_f16_load(const void *p)
{
    ig_f16 h;
    memcpy(&h, p, sizeof h);
    return h;
}

static inline float ig_f16_at(const void *p)
{
    return ig_f16_to_f32(ig_f16_load(p));
}

/* dst[0..n) = src[0..n) as floats: F16C where the CPU has it, else
 * ig_f16_to_f32 (the _portable one always); exact either way (core/half.c). */
void ig_f16_to_f32_row(const ig_f16 *src, float *dst, int64_t n);
void ig_f16_to_f32_row_portable(const ig_f16 *src, float *dst, int64_t n);

/* dst[0..n) = src[0..n) rounded to f16 as ig_f32_to_f16 rounds (F16C where
 * the CPU has it, the same bits). */
void ig_f32_to_f16_row(const float *src, ig_f16 *dst, int64_t n);
void ig_f32_to_f16_row_portable(const float *src, ig_f16 *dst, int64_t n);

static inline float ig_bf16_to_f32(ig_bf16 h)
{
    return ig_bits_to_f32((uint32_t)h << 16);
}

static inline ig_bf16 ig_f32_to_bf16(float f)
{
    uint32_t u = ig_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ig_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ig_bf16)(u >> 16);
}

#endif
