/* ops/exp_row.c: e^(s_c - max) over a row, for the online softmax of
 * prefill/attn_tiled.c and the gates of ops/norm_rope.c. Scalar expf cost a
 * tenth of a long prefill's time (one call per score); here, on CPUs with AVX2 and FMA,
 * four lanes run the algorithm of the C library's expf (glibc 2.28 and
 * later, and musl: the ARM optimized-routines expf, which glibc's ifunc runs
 * with FMA on exactly these CPUs) in the same double operations, fused the
 * same way, so every lane is bit for bit what expf returns there and the
 * attention's and the gates' results do not change. Lanes with |x| >= 85 or so (overflow,
 * underflow, inf, NaN: the library's special cases) are sent to expf
 * itself. Where ignite runs AVX-512 (its VNNI level), eight lanes in a zmm
 * of doubles, the table taken from registers instead of gathered.
 * Elsewhere the loop calls expf. That is the exact path's softmax and the
 * gates'; the int8 path's attention and gates take ops_exp_row_fused, a
 * polynomial in eight float lanes at a third of the cost (no longer expf's
 * bits).
 * Covered by tests/cpu/test_exp_row.c (against expf on every float of a
 * range and on the special values; the polynomial against fp64). */
#include "ops/exp_row.h"

#include "ops/qmatmul.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static void exp_row_scalar(float *s, int64_t n, float mx)
{
    for (int64_t c = 0; c < n; c++)
        s[c] = expf(s[c] - mx);
}

static void exp_rows_scalar(float *s, int64_t n, int64_t rows, int64_t s_stride,
                            const float *mx, int64_t mx_stride)
{
    for (int64_t r = 0; r < rows; r++)
        exp_row_scalar(s + r * s_stride, n, mx[r * mx_stride]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define EXP_AVX2 __attribute__((target("avx2,fma")))

/* The library's table: bits of 2^(i/32) less i << 47, and its constants
 * (x * 32 / ln 2; the cubic in r of 2^(r/32); the rounding shift 1.5 * 2^52). */
static const uint64_t exp_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
#define EXP_INVLN2N 0x40471547652b82feULL
#define EXP_C0 0x3ebc6af84b912394ULL
#define EXP_C1 0x3f2ebfce50fac4f3ULL
#define EXP_C2 0x3f962e42ff0c52d6ULL
#define EXP_SHIFT 0x4338000000000000ULL

EXP_AVX2 static inline __m256d bits_pd(uint64_t u)
{
    return _mm256_castsi256_pd(_mm256_set1_epi64x((long long)u));
}

/* e^x of 4 floats whose magnitude's top 12 bits are at most 0x42a (|x| <
 * 2^7 * 1.33, the library's fast path), as the library computes it. */
EXP_AVX2 static inline __m128 exp4(__m128 x)
{
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d inv = bits_pd(EXP_INVLN2N), shift = bits_pd(EXP_SHIFT);
    __m256d kd = _mm256_fmadd_pd(xd, inv, shift); /* round(x * 32 / ln 2) in the low bits */
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64((const long long *)(const void *)exp_tab, idx, 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    __m256d sc = _mm256_castsi256_pd(t);
    __m256d z = _mm256_fmadd_pd(bits_pd(EXP_C0), r, bits_pd(EXP_C1));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, bits_pd(EXP_C2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, sc);
    return _mm256_cvtpd_ps(y);
}

/* es[j] = expf(xs[j]) for the lanes j < n outside the fast path (the
 * library's special cases: overflow, underflow, inf, NaN); the others keep
 * the vector's e^x. Cold: only the vector loops' rare slow branch calls it,
 * and GCC then lays their common path out straight. */
__attribute__((cold)) static void exp_special_lanes(const float *xs, float *es, int n)
{
    for (int j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &xs[j], sizeof u);
        if ((u & 0x7fffffffu) >= 0x42b00000u)
            es[j] = expf(xs[j]);
    }
}

EXP_AVX2 static void exp_row_avx2(float *s, int64_t n, float mx)
{
    __m128 m = _mm_set1_ps(mx);
    /* the library's fast path: (bits >> 20 & 0x7ff) <= 0x42a */
    __m128i lim = _mm_set1_epi32(0x42b00000), absmask = _mm_set1_epi32(0x7fffffff);
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
        __m128 x = _mm_sub_ps(_mm_loadu_ps(s + c), m);
        __m128i a = _mm_and_si128(_mm_castps_si128(x), absmask);
        int slow = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(lim, a))) != 0xf;
        __m128 e = exp4(x);
        if (slow) { /* the library's special cases, lane by lane */
            float xs[4], es[4];
            _mm_storeu_ps(xs, x);
            _mm_storeu_ps(es, e);
            exp_special_lanes(xs, es, 4);
            e = _mm_loadu_ps(es);
        }
        _mm_storeu_ps(s + c, e);
    }
    for (; c < n; c++)
        s[c] = expf(s[c] - mx);
}

#define EXP_AVX512 __attribute__((target("avx512f,avx2,fma")))

/* exp4 on eight lanes in one zmm of doubles, the same operations per lane;
 * the table from registers (two two-table permutes and a blend on bit 4 of
 * the index) where exp4 gathers. */
EXP_AVX512 static inline __m256 exp8(__m256 x)
{
    __m512d xd = _mm512_cvtps_pd(x);
    __m512d inv = _mm512_castsi512_pd(_mm512_set1_epi64((long long)EXP_INVLN2N));
    __m512d shift = _mm512_castsi512_pd(_mm512_set1_epi64((long long)EXP_SHIFT));
    __m512d kd = _mm512_fmadd_pd(xd, inv, shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i *tab = (const __m512i *)(const void *)exp_tab;
    __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab), idx, _mm512_loadu_si512(tab + 1));
    __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab + 2), idx,
                                           _mm512_loadu_si512(tab + 3));
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    __m512d sc = _mm512_castsi512_pd(t);
    __m512d c0 = _mm512_castsi512_pd(_mm512_set1_epi64((long long)EXP_C0));
    __m512d c1 = _mm512_castsi512_pd(_mm512_set1_epi64((long long)EXP_C1));
    __m512d c2 = _mm512_castsi512_pd(_mm512_set1_epi64((long long)EXP_C2));
    __m512d z = _mm512_fmadd_pd(c0, r, c1);
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, c2, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    y = _mm512_mul_pd(y, sc);
    return _mm512_cvtpd_ps(y);
}

/* exp_row_avx2 eight lanes at a time; the rest (under 8) to exp_row_avx2. */
EXP_AVX512 static void exp_row_avx512(float *s, int64_t n, float mx)
{
    __m256 m = _mm256_set1_ps(mx);
    __m256i lim = _mm256_set1_epi32(0x42b00000), absmask = _mm256_set1_epi32(0x7fffffff);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + c), m);
        __m256i a = _mm256_and_si256(_mm256_castps_si256(x), absmask);
        int slow = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, a))) != 0xff;
        __m256 e = exp8(x);
        if (slow) { /* the library's special cases, lane by lane */
            float xs[8], es[8];
            _mm256_storeu_ps(xs, x);
            _mm256_storeu_ps(es, e);
            exp_special_lanes(xs, es, 8);
            e = _mm256_loadu_ps(es);
        }
        _mm256_storeu_ps(s + c, e);
    }
    if (c < n)
        exp_row_avx2(s + c, n - c, mx);
}

/* ---- the int8 path's softmax: a polynomial in float ------------------------- */

/* e^x in eight float lanes for softmax arguments (x <= 0) and the gates'
 * (any x): x = n ln 2 + r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2
 * in two parts, so n ln 2 is exact enough), e^r by Cephes's degree-7
 * polynomial (its expf's coefficients: 1 + r + r^2 (1/2 + r/6 + ..)), and
 * 2^n added to the exponent bits. Lanes below -86 (2^n would leave the
 * normal range; e^-86 < 5e-38, nothing next to the softmax's 1) give 0,
 * lanes above 88 (2^n near the top of the range) +inf (a gate's
 * g / (1 + e^x) is then 0 where it is under 1e-36), NaN stays NaN. Within 2
 * ulp of e^x (tests/cpu/test_exp_row.c: every 61st float of [-86, 88]
 * against fp64). */
EXP_AVX2 static inline __m256 expf8_poly(__m256 x)
{
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    __m256 y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-86.0f), _CMP_LT_OQ), y);
    return _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY),
                            _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
}

/* Every element through expf8_poly, the last few in a padded vector: an
 * element's result depends on its value alone, never on where it falls in
 * the row (a decode row gives what it gives inside a prompt chunk). */
EXP_AVX2 static inline void exp_row_poly(float *s, int64_t n, float mx)
{
    __m256 m = _mm256_set1_ps(mx);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        _mm256_storeu_ps(s + c, expf8_poly(_mm256_sub_ps(_mm256_loadu_ps(s + c), m)));
    if (c < n) {
        float t[8] = {0};
        memcpy(t, s + c, (size_t)(n - c) * sizeof *s);
        _mm256_storeu_ps(t, expf8_poly(_mm256_sub_ps(_mm256_loadu_ps(t), m)));
        memcpy(s + c, t, (size_t)(n - c) * sizeof *s);
    }
}

/* exp_row_poly over rows, its constants set up once. */
EXP_AVX2 static void exp_rows_poly(float *s, int64_t n, int64_t rows, int64_t s_stride,
                                   const float *mx, int64_t mx_stride)
{
    for (int64_t r = 0; r < rows; r++)
        exp_row_poly(s + r * s_stride, n, mx[r * mx_stride]);
}

/* 2: AVX-512 (ignite's VNNI level: not where IGNITE_SIMD caps it), 1: AVX2
 * and FMA, 0: neither; -1 until asked. */
static int exp_isa = -1;

static int exp_isa_here(void)
{
    int isa = __atomic_load_n(&exp_isa, __ATOMIC_RELAXED);
    if (isa < 0) {
        __builtin_cpu_init();
        isa = ops_qmm_best_isa() == QMM_VNNI                                 ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                : 0;
        __atomic_store_n(&exp_isa, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

void ops_exp_row(float *s, int64_t n, float mx)
{
    int isa = exp_isa_here();
    if (isa == 2)
        exp_row_avx512(s, n, mx);
    else if (isa == 1)
        exp_row_avx2(s, n, mx);
    else
        exp_row_scalar(s, n, mx);
}

void ops_exp_row_fused(float *s, int64_t n, float mx)
{
    if (exp_isa_here() >= 1)
        exp_row_poly(s, n, mx);
    else
        exp_row_scalar(s, n, mx);
}

void ops_exp_rows_fused(float *s, int64_t n, int64_t rows, int64_t s_stride, const float *mx,
                        int64_t mx_stride)
{
    if (exp_isa_here() >= 1)
        exp_rows_poly(s, n, rows, s_stride, mx, mx_stride);
    else
        exp_rows_scalar(s, n, rows, s_stride, mx, mx_stride);
}

#else

void ops_exp_row(float *s, int64_t n, float mx)
{
    exp_row_scalar(s, n, mx);
}

void ops_exp_row_fused(float *s, int64_t n, float mx)
{
    exp_row_scalar(s, n, mx);
}

void ops_exp_rows_fused(float *s, int64_t n, int64_t rows, int64_t s_stride, const float *mx,
                        int64_t mx_stride)
{
    exp_rows_scalar(s, n, rows, s_stride, mx, mx_stride);
}

#endif

void ops_exp_rows(float *s, int64_t n, int64_t rows, int64_t s_stride, const float *mx,
                  int64_t mx_stride)
{
    for (int64_t r = 0; r < rows; r++) /* (expf's bits: each row's call as alone) */
        ops_exp_row(s + r * s_stride, n, mx[r * mx_stride]);
}
