/* tests/cpu/test_attn_decode_quant.c: prefill/attn_decode_quant.c's
 * accumulation over a q8_0 or q4_0 V tile, dequantized in registers, against
 * an fp64 sum over the same quantized values (models/quant.c's
 * dequantization, the gguf package's twin: tests/models/test_dequant.py):
 * o = o corr + sum_c p_c v_c and the p sums, for 1 to 7 rows (blocks of
 * three, two and one), head dims 32 to 256, ragged column ranges, both
 * builds (exact and fused). The bound is flash-attention's rule: at most
 * twice a naive f32 loop's error against fp64, plus 1e-6 relative. The tile
 * is allocated to its last byte, so a sanitizer build catches a read past
 * it. Exits 77 (skipped) on a CPU without AVX2, FMA and F16C. ~0.1 s. */
#include "kvcache/kvcache.h"
#include "models/quant.h"
#include "prefill/attn_decode_quant.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NC 64 /* columns of a tile (KV_BLOCK) */

void attn_decode_accumulate_quant_fused(enum kv_dtype dtype, const float *s, int64_t s_stride,
                                        const float *corr, int64_t rows, const uint8_t *vt,
                                        int64_t lo, int64_t hi, int64_t hd, float *o, float *sum,
                                        const uint8_t *pf);

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float uniform(void) /* [0, 1) */
{
    return (float)((double)(test_rand_u64(&rng) >> 11) * 0x1.0p-53);
}

static double max_abs(const double *ref, const float *x, int64_t n, double *ref_max)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)x[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    *ref_max = m > 0 ? m : 1;
    return e;
}

static void run_case(enum kv_dtype dt, int64_t rows, int64_t hd, int64_t lo, int64_t hi,
                     bool fused)
{
    size_t rb = kv_dtype_row_bytes(dt, hd);
    enum quant_type qt = dt == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0;
    uint8_t *vt = malloc(rb * NC), *pf = malloc(rb * NC);
    float *vals = malloc((size_t)(NC * hd) * sizeof *vals), *row = malloc((size_t)hd * sizeof *row);
    float *s = malloc((size_t)(rows * NC) * sizeof *s), *o = malloc((size_t)(rows * hd) * sizeof *o);
    float *naive = malloc((size_t)(rows * hd) * sizeof *naive);
    double *ref = malloc((size_t)(rows * hd) * sizeof *ref);
    float corr[8], sum[8];
    for (int64_t c = 0; c < NC; c++) {
        for (int64_t d = 0; d < hd; d++)
            row[d] = 4.0f * uniform() - 2.0f;
        quant_quantize_row(qt, row, vt + c * rb, hd);
        quant_dequantize_row(qt, vt + c * rb, vals + c * hd, hd); /* the values stored */
    }
    memcpy(pf, vt, rb * NC);
    for (int64_t i = 0; i < rows * NC; i++)
        s[i] = uniform();
    for (int64_t r = 0; r < rows; r++) {
        corr[r] = 0.25f + 0.75f * uniform();
        for (int64_t d = 0; d < hd; d++)
            o[r * hd + d] = 8.0f * uniform() - 4.0f;
    }
    double usum[8]; /* the p sums */
    for (int64_t r = 0; r < rows; r++) {
        usum[r] = 0;
        for (int64_t c = lo; c < hi; c++)
            usum[r] += s[r * NC + c];
        for (int64_t d = 0; d < hd; d++) {
            double a = (double)o[r * hd + d] * corr[r];
            float f = o[r * hd + d] * corr[r];
            for (int64_t c = lo; c < hi; c++) {
                a += (double)s[r * NC + c] * vals[c * hd + d];
                f += s[r * NC + c] * vals[c * hd + d];
            }
            ref[r * hd + d] = a, naive[r * hd + d] = f;
        }
    }
    (fused ? attn_decode_accumulate_quant_fused : attn_decode_accumulate_quant)(
        dt, s, NC, corr, rows, vt, lo, hi, hd, o, sum, pf);

    double ref_max, naive_max;
    double err = max_abs(ref, o, rows * hd, &ref_max) / ref_max;
    double naive_err = max_abs(ref, naive, rows * hd, &naive_max) / ref_max;
    double bound = 2 * naive_err + 1e-6;
    CHECKF(err <= bound, "%s rows=%lld hd=%lld cols [%lld, %lld) %s: relative error %.3e > %.3e",
           kv_dtype_name(dt), (long long)rows, (long long)hd, (long long)lo, (long long)hi,
           fused ? "fused" : "exact", err, bound);
    for (int64_t r = 0; r < rows; r++)
        CHECKF(fabs(sum[r] - usum[r]) <= 1e-5 * (fabs(usum[r]) + 1), "%s rows=%lld: p sum %g, "
               "want %g", kv_dtype_name(dt), (long long)rows, (double)sum[r], usum[r]);
    free(vt), free(pf), free(vals), free(row), free(s), free(o), free(naive), free(ref);
}

int main(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c")) {
        fprintf(stderr, "test_attn_decode_quant: no AVX2/FMA/F16C here, skipped\n");
        return 77;
    }
#endif
    static const int64_t hds[] = {32, 64, 96, 128, 256};
    static const int64_t ranges[][2] = {{0, NC}, {5, 37}, {63, 64}, {0, 1}};
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++)
            for (int64_t rows = 1; rows <= 7; rows++)
                for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
                    for (size_t g = 0; g < sizeof ranges / sizeof ranges[0]; g++)
                        run_case(t ? KV_Q4_0 : KV_Q8_0, rows, hds[h], ranges[g][0],
                                 ranges[g][1], f == 1);
    return test_summary("test_attn_decode_quant");
}
