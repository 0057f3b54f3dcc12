/* ops/qmatmul_avx2.c: the AVX2 (+FMA, F16C) int8 tile kernels. The
 * functions carry target attributes, so the rest of the binary stays
 * baseline x86-64; ops/qmatmul.c calls them only when the CPU has AVX2, FMA
 * and F16C. Elsewhere (other architectures, other compilers) the table is
 * empty and the scalar kernels run. The kernel bodies are in
 * ops/qmatmul_x86.h. Covered by tests/cpu/test_qmatmul.c. */
#include "ops/qmatmul.h"

#include "core/half.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QMM_X86_TARGET __attribute__((target("avx2,fma,f16c")))
#define QMM_X86_VNNI 0
#include "ops/qmatmul_x86.h"

qmm_tile_fn ops_qmm_tile_avx2(enum quant_type type)
{
    return tile_of(type);
}

qmm_gemm8_fn ops_qmm_gemm8_avx2(enum quant_type type)
{
    return gemm8_of(type);
}

qmm_gemv8_fn ops_qmm_gemv8_avx2(enum quant_type type)
{
    return gemv8_of(type);
}

qmm_gemm8_fn ops_qmm_gemm8_packed_avx2(enum quant_type type)
{
    return gemm8p_of(type);
}

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return fgemm8;
}

/* ops_qmm_quantize_c's steps eight lanes at a time, each with the same
 * result: |x| as `x < 0 ? -x : x` (so -0 stays -0), the running max as
 * `m > a ? m : a` per lane and then across lanes (a max does not depend on
 * the order, except that an all-zero block's is the last element's zero, as
 * the scalar loop leaves it), the finite test per element, x * id rounded to
 * nearest even by vcvtps2dq (the default rounding rintf uses), and integer
 * sums. Checked against ops_qmm_quantize_c by tests/cpu/test_qmatmul.c. */
__attribute__((target("avx2"))) void ops_qmm_quantize_avx2(const float *x, int64_t cols,
                                                          struct qmm_q8 *out)
{
    const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < cols / QMM_QK; b++) {
        const float *xb = x + b * QMM_QK;
        __m256 v[4], m = zero, ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            __m256 a = _mm256_blendv_ps(v[i], _mm256_xor_ps(v[i], sign),
                                        _mm256_cmp_ps(v[i], zero, _CMP_LT_OQ));
            m = _mm256_blendv_ps(a, m, _mm256_cmp_ps(m, a, _CMP_GT_OQ));
            ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, big, _CMP_LE_OQ));
        }
        if (_mm256_movemask_ps(ok) != 0xff) {
            memset(out[b].qs, 0, sizeof out[b].qs);
            out[b].d = out[b].s = NAN;
            out[b].hs[0] = out[b].hs[1] = 0;
            continue;
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        if (amax == 0.0f) /* every element a zero: the scalar loop keeps the last one's */
            amax = xb[QMM_QK - 1] < 0 ? -xb[QMM_QK - 1] : xb[QMM_QK - 1];
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        if (id > FLT_MAX)
            id = 0.0f; /* as ops_qmm_quantize_c: 1/d overflows, the quants are 0 */
        __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                       _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(void *)out[b].qs, _mm256_permutevar8x32_epi32(p, order));
        __m256i s0 = _mm256_add_epi32(q[0], q[1]), s1 = _mm256_add_epi32(q[2], q[3]);
        __m128i t0 = _mm_add_epi32(_mm256_castsi256_si128(s0), _mm256_extracti128_si256(s0, 1));
        __m128i t1 = _mm_add_epi32(_mm256_castsi256_si128(s1), _mm256_extracti128_si256(s1, 1));
        t0 = _mm_hadd_epi32(t0, t1); /* [s0 01, s0 23, s1 01, s1 23] */
        t0 = _mm_hadd_epi32(t0, t0);
        int32_t sum0 = _mm_cvtsi128_si32(t0), sum1 = _mm_extract_epi32(t0, 1);
        out[b].d = d;
        out[b].s = d * (float)(sum0 + sum1);
        out[b].hs[0] = (int16_t)sum0;
        out[b].hs[1] = (int16_t)sum1;
    }
}

#else

void ops_qmm_quantize_avx2(const float *x, int64_t cols, struct qmm_q8 *out)
{
    ops_qmm_quantize_c(x, cols, out); /* never called here: no AVX2 */
}

qmm_tile_fn ops_qmm_tile_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemm8_fn ops_qmm_gemm8_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemv8_fn ops_qmm_gemv8_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemm8_fn ops_qmm_gemm8_packed_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return NULL;
}

#endif
