/* core/half.c: rows of f16 <-> f32 at the hardware's speed: F16C's eight at
 * a time where the CPU has it (picked at run time, the binary stays
 * baseline), the portable conversions otherwise. f16 -> f32 is exact and
 * f32 -> f16 rounds to nearest even both ways, so they agree bit for bit.
 * Covered by tests/unit/test_core.c (every f16 pattern, both ways; f32
 * patterns across every exponent, ties and NaNs included). */
#include "core/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void f16_row_f16c(const ig_f16 *src, float *dst,
                                                               int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = ig_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void f32_row_f16c(const float *src, ig_f16 *dst,
                                                               int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = ig_f32_to_f16(src[i]);
}

/* Every AVX2 CPU has F16C (and clang knows no "f16c" to ask about). */
static int has_f16c(void)
{
    return __builtin_cpu_supports("avx2");
}
#endif

void ig_f16_to_f32_row_portable(const ig_f16 *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f16_to_f32(src[i]);
}

void ig_f16_to_f32_row(const ig_f16 *src, float *dst, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_f16c()) {
        f16_row_f16c(src, dst, n);
        return;
    }
#endif
    ig_f16_to_f32_row_portable(src, dst, n);
}

void ig_f32_to_f16_row_portable(const float *src, ig_f16 *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f32_to_f16(src[i]);
}

void ig_f32_to_f16_row(const float *src, ig_f16 *dst, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_f16c()) {
        f32_row_f16c(src, dst, n);
        return;
    }
#endif
    ig_f32_to_f16_row_portable(src, dst, n);
}
