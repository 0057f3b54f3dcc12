/* tests/cpu/test_exp_row.c: ops_exp_row (ops/exp_row.c) against the
 * C library's expf, element by element: a sweep of floats from -110 to +90
 * (every 61st bit pattern, about 30 million values: both fast-path ends, the
 * subnormal results, the overflow), the special values (+-0, +-inf, NaN,
 * subnormal inputs), a maximum subtracted before the exponential, and row
 * lengths 0..11 (the vector body and its scalar tail). With glibc 2.27 or
 * later the vector lanes must be expf bit for bit (the same algorithm; the
 * attention's results then do not change); with another C library, within
 * one unit in the last place. The gates that use it (ops_swiglu, ops_geglu)
 * against their scalar formulas with expf, the same way. On AVX-512 the
 * eight-lane form runs (ctest runs this again under IGNITE_SIMD=avx2).
 * The int8 path's polynomial (ops_exp_row_fused) against fp64's exp, and
 * the gates through it against their formulas in fp64. */
#include "ops/exp_row.h"
#include "ops/ops.h"
#include "tests/test.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 27))
#define EXP_BITWISE 1
#else
#define EXP_BITWISE 0
#endif

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Same float, or (without glibc) one ulp apart; NaN matches NaN. */
static bool same(float got, float want)
{
    if (isnan(want))
        return isnan(got);
    if (EXP_BITWISE)
        return bits_of(got) == bits_of(want);
    int64_t d = (int64_t)bits_of(got) - (int64_t)bits_of(want);
    return signbit(got) == signbit(want) && d >= -1 && d <= 1;
}

/* The int8 path's gate value against fp64: NaN for NaN, the same infinity,
 * else within 5e-7 relative (the polynomial's 2 ulp and the division's and
 * product's roundings) or 1e-30 absolute (a sigmoid the polynomial's +inf
 * saturates to 0 is under 1e-36 there). */
static bool near(float got, double want)
{
    if (isnan(want) || isinf(want))
        return isnan(want) ? isnan(got) : (double)got == want;
    return fabs((double)got - want) <= 5e-7 * fabs(want) + 1e-30;
}

/* Runs ops_exp_row on x[0..n) - mx and checks each element. */
static int check_row(const float *x, int64_t n, float mx, float *buf)
{
    memcpy(buf, x, (size_t)n * sizeof *buf);
    ops_exp_row(buf, n, mx);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = expf(x[i] - mx);
        if (!same(buf[i], want)) {
            if (bad < 5)
                fprintf(stderr, "x %a - %a: got %a, expf %a\n", (double)x[i], (double)mx,
                        (double)buf[i], (double)want);
            bad++;
        }
    }
    return bad;
}

/* Units in the last place between got and e^x in double, measured in the
 * ulp of the float nearest e^x. */
static double ulps(float got, double want)
{
    int e;
    frexp(want, &e);
    return fabs((double)got - want) / ldexp(1.0, e - 24);
}

/* ops_exp_row_fused on every 61st float from 0 to `end` (of end's sign, end
 * itself last), in rows of `chunk`: the elements over 2 ulp of fp64's e^x
 * (expf's where it falls back) counted, the worst kept. */
static int sweep_fused(float *x, float *buf, int64_t chunk, float end, double *worst)
{
    const uint32_t sign = bits_of(end) & 0x80000000u, top = bits_of(end) & 0x7fffffffu;
    int bad = 0;
    int64_t n = 0;
    for (uint32_t u = 0;; u += 61) {
        bool last = u + 61 >= top;
        x[n++] = last ? end : of_bits(sign | u);
        if (n < chunk && !last)
            continue;
        memcpy(buf, x, (size_t)n * sizeof *buf);
        ops_exp_row_fused(buf, n, 0.0f);
        for (int64_t i = 0; i < n; i++) {
            double d = ulps(buf[i], exp((double)x[i]));
            *worst = d > *worst ? d : *worst;
            if (d > 2.0 && bad++ < 5)
                fprintf(stderr, "fused e^%a = %a, %.2f ulp\n", (double)x[i], (double)buf[i], d);
        }
        n = 0;
        if (last)
            return bad;
    }
}

/* ops_exp_row_fused: every 61st float of [-86, 0] (the softmax's arguments)
 * and of [0, 88] (the gates') within 2 ulp of fp64's e^x, 0 below -86 (-inf
 * too; or expf), +inf above 88, NaN for NaN; in rows of 0..19 elements, each
 * element what its value gives in a whole vector (the padded tail
 * included), nothing written past the row. */
static int check_fused(float *x, float *buf, int64_t chunk)
{
    double worst = 0;
    int bad = sweep_fused(x, buf, chunk, -86.0f, &worst);
    bad += sweep_fused(x, buf, chunk, 88.0f, &worst);
    fprintf(stderr, "int8 path's exponential: worst %.3f ulp on [-86, 88]\n", worst);

    /* Above 88: +inf from the polynomial, expf's value where expf runs. */
    const float high[] = {88.01f, 88.5f, 100.0f, 1e30f, INFINITY, 1.0f, 87.9f, 0.5f};
    memcpy(buf, high, sizeof high);
    ops_exp_row_fused(buf, 8, 0.0f);
    for (int i = 0; i < 5; i++)
        bad += buf[i] != INFINITY && bits_of(buf[i]) != bits_of(expf(high[i]));
    for (int i = 5; i < 8; i++)
        bad += ulps(buf[i], exp((double)high[i])) > 2.0;

    /* Below -86: 0 from the polynomial, expf's value where expf runs. */
    const float low[] = {-86.01f, -87.5f, -100.0f, -1e30f, -INFINITY, NAN, 0.0f, -1.0f};
    memcpy(buf, low, sizeof low);
    ops_exp_row_fused(buf, 8, 0.0f);
    for (int i = 0; i < 5; i++)
        bad += buf[i] != 0.0f && bits_of(buf[i]) != bits_of(expf(low[i]));
    bad += !isnan(buf[5]) + (buf[6] != 1.0f) + (ulps(buf[7], exp(-1.0)) > 2.0);

    uint64_t st = 0x9e3779b97f4a7c15ull;
    float whole[8];
    for (int64_t len = 0; len <= 19; len++) {
        for (int64_t i = 0; i < len; i++)
            x[i] = 40.0f * test_rand_f(&st);
        float mx = 41.0f;
        memcpy(buf, x, (size_t)len * sizeof *buf);
        buf[len] = 12345.0f;
        ops_exp_row_fused(buf, len, mx);
        bad += buf[len] != 12345.0f;
        for (int64_t i = 0; i < len; i++) { /* x[i] in lane 0 of a whole vector */
            for (int j = 0; j < 8; j++)
                whole[j] = x[i];
            ops_exp_row_fused(whole, 8, mx);
            bad += bits_of(whole[0]) != bits_of(buf[i]);
        }
    }
    return bad;
}

int main(void)
{
    enum { CHUNK = 4099 };
    float *x = malloc(CHUNK * sizeof *x), *buf = malloc(CHUNK * sizeof *buf);
    CHECK(x && buf);
    if (!x || !buf)
        return 1;

    /* The sweep: negative floats from -110 up to -0, then +0 up to 90. */
    int bad = 0;
    int64_t n = 0, total = 0;
    const uint32_t step = 61;
    for (uint32_t u = bits_of(-110.0f); u >= 0x80000000u && u > step; u -= step) {
        x[n++] = of_bits(u);
        if (n == CHUNK)
            bad += check_row(x, n, 0.0f, buf), total += n, n = 0;
    }
    for (uint32_t u = 0; u <= bits_of(90.0f); u += step) {
        x[n++] = of_bits(u);
        if (n == CHUNK)
            bad += check_row(x, n, 0.0f, buf), total += n, n = 0;
    }
    bad += check_row(x, n, 0.0f, buf), total += n;
    CHECKF(bad == 0, "%d of %lld swept values differ from expf", bad, (long long)total);

    /* Special values in every lane position, and rows of 0..11 elements. */
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f,
                             -87.5f, -88.8f, -103.5f, -104.0f, 88.7f, 88.8f, -0.5f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int shift = 0; shift < 4; shift++) {
        for (int i = 0; i < ns; i++)
            x[(i + shift) % ns] = special[i];
        CHECK(check_row(x, ns, 0.0f, buf) == 0);
    }
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (int64_t len = 0; len <= 11; len++) {
        for (int64_t i = 0; i < len; i++)
            x[i] = 20.0f * test_rand_f(&st);
        float mx = len ? x[0] : 0.0f;
        for (int64_t i = 1; i < len; i++)
            mx = x[i] > mx ? x[i] : mx;
        memcpy(buf, x, (size_t)len * sizeof *buf);
        buf[len] = 12345.0f; /* a guard: nothing past n is written */
        ops_exp_row(buf, len, mx);
        CHECK(buf[len] == 12345.0f);
        CHECKF(check_row(x, len, mx, buf) == 0, "row of %lld", (long long)len);
    }

    bad = check_fused(x, buf, CHUNK);
    CHECKF(bad == 0, "%d values of the int8 path's exponential out of bounds", bad);

    /* The rows forms (the attention's tiles): every row as its own call,
     * bit for bit, on both paths, and nothing between the rows written.
     * Rows of 0..13 elements, 16 apart, maxima 3 apart. */
    for (int fused = 0; fused < 2; fused++)
        for (int64_t n_el = 0; n_el <= 13; n_el++) {
            enum { ROWS = 5, STRIDE = 16 };
            float rows[ROWS * STRIDE], one[ROWS * STRIDE], mx[3 * ROWS];
            for (int64_t i = 0; i < ROWS * STRIDE; i++)
                rows[i] = one[i] = 12.0f * test_rand_f(&st);
            for (int r = 0; r < 3 * ROWS; r++)
                mx[r] = 6.0f * test_rand_f(&st);
            rows[STRIDE + 1] = NAN, rows[2 * STRIDE] = -INFINITY;
            one[STRIDE + 1] = NAN, one[2 * STRIDE] = -INFINITY;
            if (fused)
                ops_exp_rows_fused(rows, n_el, ROWS, STRIDE, mx, 3);
            else
                ops_exp_rows(rows, n_el, ROWS, STRIDE, mx, 3);
            for (int r = 0; r < ROWS; r++) {
                if (fused)
                    ops_exp_row_fused(one + r * STRIDE, n_el, mx[3 * r]);
                else
                    ops_exp_row(one + r * STRIDE, n_el, mx[3 * r]);
            }
            int diff = 0;
            for (int64_t i = 0; i < ROWS * STRIDE; i++)
                diff += !same(rows[i], one[i]);
            CHECKF(diff == 0, "rows of %lld (%s): %d values differ from one call a row",
                   (long long)n_el, fused ? "int8 path" : "exact", diff);
        }

    /* The gates through it (ops/norm_rope.c) against their scalar formulas
     * with expf, bit for bit (the exact path), and through the polynomial
     * (the int8 path) within 5e-7 of the formulas in fp64: lengths across
     * the gates' 256-element chunks, and gate values where the sigmoid
     * saturates, overflows and is NaN. */
    const int64_t len = 700;
    float *g = malloc(len * sizeof *g), *up = malloc(len * sizeof *up);
    float *sw = malloc(len * sizeof *sw), *ge = malloc(len * sizeof *ge);
    float *fsw = malloc(len * sizeof *fsw), *fge = malloc(len * sizeof *fge);
    CHECK(g && up && sw && ge && fsw && fge);
    if (!g || !up || !sw || !ge || !fsw || !fge)
        return 1;
    for (int64_t i = 0; i < len; i++) {
        g[i] = 30.0f * test_rand_f(&st);
        up[i] = test_rand_f(&st);
    }
    g[3] = -100.0f, g[4] = 100.0f, g[5] = INFINITY, g[6] = -INFINITY, g[7] = NAN, g[8] = -0.0f;
    const float k2 = 2.0f * 0.7978845608028654f;
    for (int64_t n_el = 1; n_el <= len; n_el += n_el < 20 ? 1 : 97) {
        memcpy(sw, g, (size_t)n_el * sizeof *sw);
        memcpy(ge, g, (size_t)n_el * sizeof *ge);
        memcpy(fsw, g, (size_t)n_el * sizeof *fsw);
        memcpy(fge, g, (size_t)n_el * sizeof *fge);
        ops_swiglu(sw, up, n_el, true);
        ops_geglu(ge, up, n_el, true);
        ops_swiglu(fsw, up, n_el, false);
        ops_geglu(fge, up, n_el, false);
        int bad_gate = 0, bad_fused = 0;
        for (int64_t i = 0; i < n_el; i++) {
            float v = g[i];
            bad_gate += !same(sw[i], v / (1.0f + expf(-v)) * up[i]);
            bad_gate += !same(ge[i], v / (1.0f + expf(-k2 * (v + 0.044715f * v * v * v))) * up[i]);
            /* fp64 from the gate's own f32 argument (GeGLU's cubic in f32
             * moves e^z by up to |z| f32 roundings, on both paths alike) */
            double dv = v, z = -k2 * (v + 0.044715f * v * v * v);
            bad_fused += !near(fsw[i], dv / (1.0 + exp(-dv)) * up[i]);
            bad_fused += !near(fge[i], dv / (1.0 + exp(z)) * up[i]);
        }
        CHECKF(bad_gate == 0, "%d gate values of %lld differ from the scalar formula", bad_gate,
               (long long)n_el);
        CHECKF(bad_fused == 0, "%d int8-path gate values of %lld off the fp64 formula", bad_fused,
               (long long)n_el);
    }
    free(fge);
    free(fsw);
    free(ge);
    free(sw);
    free(up);
    free(g);
    free(x);
    free(buf);
    return test_summary("test_exp_row");
}
