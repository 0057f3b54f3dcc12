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

QMM_X86_TABLE(avx2)

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return fgemm8;
}

qmm_fgemm_packed_fn ops_qmm_fgemm_packed_avx2(void)
{
    return fgemm8_packed;
}

/* The quantizer's helpers: AVX2 alone, as ops_qmm_quantize checks (not the
 * kernels' AVX2 + FMA + F16C, which could not be inlined here). */
#define AVX2_QUANT __attribute__((target("avx2"), always_inline)) static inline

/* Block xb's quants from x * id (rounded to nearest even by vcvtps2dq, the
 * default rounding rintf uses), stored; their int32 sums over the first and
 * the second 16 elements, 8 lanes each, in h0 and h1, and in he those over
 * the elements 4k and 4k + 1 (lanes 0, 1, 4, 5 of both halves: 8 = 0 mod 4). */
AVX2_QUANT void quants_of(const float *xb, float id, struct qmm_q8 *out, __m256i *h0, __m256i *h1,
                          __m256i *he)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    UNROLL for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), idv));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                   _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)(void *)out->qs, _mm256_permutevar8x32_epi32(p, order));
    *h0 = _mm256_add_epi32(q[0], q[1]);
    *h1 = _mm256_add_epi32(q[2], q[3]);
    *he = _mm256_and_si256(_mm256_add_epi32(*h0, *h1),
                           _mm256_setr_epi32(-1, -1, 0, 0, -1, -1, 0, 0));
}

/* The sums' fields from the halves' sums and the sum over the quants 4k,
 * 4k + 1 (`even`; the others' is the rest). */
AVX2_QUANT void set_sums(float d, int32_t sum0, int32_t sum1, int32_t even, struct qmm_q8 *out)
{
    out->d = d;
    out->s = d * (float)(sum0 + sum1);
    out->dhs[0] = d * (float)sum0;
    out->dhs[1] = d * (float)sum1;
    out->sum8 = 8 * (sum0 + sum1);
    out->sum16 = 16 * (sum0 + sum1);
    out->sum16_pairs[0] = (int16_t)(16 * even);
    out->sum16_pairs[1] = (int16_t)(16 * (sum0 + sum1 - even));
}

/* Lane i of the result: the sum (or the maximum, op) of v[i]'s 8 lanes.
 * First [a0 b0 a1 b1] in each half for a, b = v[2i], v[2i + 1], then
 * v[4i]..v[4i + 3] in each half, then the halves together. */
#define REDUCE8(v, op)                                                                       \
    ({                                                                                       \
        __m256i h_[4];                                                                       \
        UNROLL for (int i_ = 0; i_ < 4; i_++)                                                \
            h_[i_] = op(_mm256_unpacklo_epi32(v[2 * i_], v[2 * i_ + 1]),                     \
                        _mm256_unpackhi_epi32(v[2 * i_], v[2 * i_ + 1]));                    \
        UNROLL for (int i_ = 0; i_ < 2; i_++)                                                \
            h_[i_] = op(_mm256_unpacklo_epi64(h_[2 * i_], h_[2 * i_ + 1]),                   \
                        _mm256_unpackhi_epi64(h_[2 * i_], h_[2 * i_ + 1]));                  \
        op(_mm256_permute2x128_si256(h_[0], h_[1], 0x20),                                    \
           _mm256_permute2x128_si256(h_[0], h_[1], 0x31));                                   \
    })

/* A block with an inf or NaN, as ops_qmm_quantize_c leaves it. */
AVX2_QUANT void quantize_nonfinite(struct qmm_q8 *out)
{
    memset(out->qs, 0, sizeof out->qs);
    out->d = out->s = NAN;
    out->dhs[0] = out->dhs[1] = NAN;
    out->sum8 = out->sum16 = 0;
    out->sum16_pairs[0] = out->sum16_pairs[1] = 0;
}

/* The bit patterns of block xb's |x|, 8 lanes of maxima. With the sign
 * cleared, integer order is float order, and an inf or NaN is above
 * FLT_MAX's 0x7f7fffff. */
AVX2_QUANT __m256i abs_max_bits(const float *xb)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    __m256i a[4];
    UNROLL for (int i = 0; i < 4; i++)
        a[i] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(xb + 8 * i)),
                                mag);
    return _mm256_max_epi32(_mm256_max_epi32(a[0], a[1]), _mm256_max_epi32(a[2], a[3]));
}

/* d from a finite block's amax, as ops_qmm_quantize_c: an all-zero block's
 * amax is its last element's zero (of either sign), not +0. */
AVX2_QUANT float block_d(const float *xb, float amax)
{
    if (amax == 0.0f)
        amax = xb[QMM_QK - 1] < 0 ? -xb[QMM_QK - 1] : xb[QMM_QK - 1];
    return amax / 127.0f;
}

/* 1 / d, 0 where d is 0 or 1 / d overflows (d < 2^-128: x * id would be inf,
 * its int conversion undefined; such a block's values are far below any
 * product's precision, so its quants are 0), as ops_qmm_quantize_c. */
AVX2_QUANT __m256 inverse_d(__m256 d)
{
    __m256 id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d),
                              _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_GT_OQ));
    return _mm256_andnot_ps(_mm256_cmp_ps(id, _mm256_set1_ps(FLT_MAX), _CMP_GT_OQ), id);
}

/* One block: the maximum across the 8 lanes, then its d and quants. */
AVX2_QUANT void quantize_block(const float *xb, struct qmm_q8 *out)
{
    __m256i mb = abs_max_bits(xb);
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(mb), _mm256_extracti128_si256(mb, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xb1));
    if (_mm_cvtsi128_si32(m) > 0x7f7fffff) {
        quantize_nonfinite(out);
        return;
    }
    float d = block_d(xb, _mm_cvtss_f32(_mm_castsi128_ps(m)));
    __m256i h0, h1, he;
    quants_of(xb, _mm_cvtss_f32(_mm256_castps256_ps128(inverse_d(_mm256_set1_ps(d)))), out,
              &h0, &h1, &he);
    __m128i t0 = _mm_add_epi32(_mm256_castsi256_si128(h0), _mm256_extracti128_si256(h0, 1));
    __m128i t1 = _mm_add_epi32(_mm256_castsi256_si128(h1), _mm256_extracti128_si256(h1, 1));
    __m128i te = _mm_add_epi32(_mm256_castsi256_si128(he), _mm256_extracti128_si256(he, 1));
    t0 = _mm_hadd_epi32(t0, t1); /* [h0 01, h0 23, h1 01, h1 23] */
    t0 = _mm_hadd_epi32(t0, t0);
    te = _mm_hadd_epi32(te, te);
    te = _mm_hadd_epi32(te, te);
    set_sums(d, _mm_cvtsi128_si32(t0), _mm_extract_epi32(t0, 1), _mm_cvtsi128_si32(te), out);
}

/* 8 blocks: their maxima and sums reduced 8 vectors at a time (lane i
 * block i's), their 8 d and 1 / d in one division each (a block at a time,
 * the horizontal steps and the two divisions were most of the work). */
AVX2_QUANT void quantize_8blocks(const float *x, struct qmm_q8 *out)
{
    __m256i m[8], h0[8], h1[8], he[8];
    UNROLL for (int i = 0; i < 8; i++)
        m[i] = abs_max_bits(x + i * QMM_QK);
    __m256i amax = REDUCE8(m, _mm256_max_epi32);
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(amax, _mm256_set1_epi32(0x7f7fffff)))) {
        for (int i = 0; i < 8; i++) /* an inf or NaN somewhere: block by block */
            quantize_block(x + i * QMM_QK, out + i);
        return;
    }
    float a[8], d[8], id[8];
    int32_t sum0[8], sum1[8], even[8];
    __m256 dv = _mm256_div_ps(_mm256_castsi256_ps(amax), _mm256_set1_ps(127.0f));
    _mm256_storeu_ps(a, _mm256_castsi256_ps(amax));
    _mm256_storeu_ps(d, dv);
    _mm256_storeu_ps(id, inverse_d(dv)); /* an all-zero block's d is +-0: id 0 either way */
    UNROLL for (int i = 0; i < 8; i++)
        quants_of(x + i * QMM_QK, id[i], out + i, &h0[i], &h1[i], &he[i]);
    _mm256_storeu_si256((__m256i *)(void *)sum0, REDUCE8(h0, _mm256_add_epi32));
    _mm256_storeu_si256((__m256i *)(void *)sum1, REDUCE8(h1, _mm256_add_epi32));
    _mm256_storeu_si256((__m256i *)(void *)even, REDUCE8(he, _mm256_add_epi32));
    UNROLL for (int i = 0; i < 8; i++)
        set_sums(a[i] == 0.0f ? block_d(x + i * QMM_QK, 0.0f) : d[i], sum0[i], sum1[i], even[i],
                 out + i);
}

/* ops_qmm_quantize_c's results, byte for byte, eight lanes at a time: |x|
 * by clearing the sign (which only an all-zero block's d can see: block_d),
 * the maximum in any order (a maximum of numbers does not depend on it),
 * the finite test on the maximum's bits (an inf or NaN sorts above every
 * finite value there), the same divisions, x * id rounded to nearest even
 * and integer sums. Checked against ops_qmm_quantize_c by
 * tests/cpu/test_qmatmul.c. */
__attribute__((target("avx2"))) void ops_qmm_quantize_avx2(const float *x, int64_t cols,
                                                          struct qmm_q8 *out)
{
    const int64_t n_blk = cols / QMM_QK;
    int64_t b = 0;
    for (; b + 8 <= n_blk; b += 8)
        quantize_8blocks(x + b * QMM_QK, out + b);
    for (; b < n_blk; b++)
        quantize_block(x + b * QMM_QK, out + b);
}

#else

void ops_qmm_quantize_avx2(const float *x, int64_t cols, struct qmm_q8 *out)
{
    ops_qmm_quantize_c(x, cols, out); /* never called here: no AVX2 */
}

QMM_EMPTY_TABLE(avx2)

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return NULL;
}

qmm_fgemm_packed_fn ops_qmm_fgemm_packed_avx2(void)
{
    return NULL;
}

#endif
