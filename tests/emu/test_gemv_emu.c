/* tests/emu/test_gemv_emu.c: the decode GEMV kernel (ops/gpu_gemv.cu) run by
 * the CPU emulator against its CPU twin (gk_gemv_f16_ref), and the twin
 * against an independent f64 sum: rows 1, 7, 33, 576 x cols 8, 64, 576,
 * 1544, 4104 (not multiples of the 256-column warp step), beta 0 (y poisoned
 * with NaN: never read) and 1. Guard elements after y must stay untouched.
 * Tolerance: f32 summation order, 2e-6 * cols^(1/2)... bounded by
 * 1e-5 * sum |w x|. Label emu. */
#include <stddef.h> /* gpu_ops.h uses size_t without including it */

#include "ops/gpu_ops.h"
#include "tests/test.h"

#include "core/half.h"

#include <stdlib.h>
#include <string.h>

enum { GUARD = 8 };
static const float guard_value = 12345.5f;

static void run_case(int64_t rows, int64_t cols, float beta, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 7;
    uint16_t *w = aligned_alloc(16, (size_t)(rows * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    float *y = malloc((size_t)(rows + GUARD) * sizeof(float));
    float *y0 = malloc((size_t)rows * sizeof(float)), *y_ref = malloc((size_t)rows * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t r = 0; r < rows; r++)
        y0[r] = beta != 0 ? 4.0f * test_rand_f(&rng) : NAN;
    memcpy(y, y0, (size_t)rows * sizeof(float));
    memcpy(y_ref, y0, (size_t)rows * sizeof(float));
    for (int i = 0; i < GUARD; i++)
        y[rows + i] = guard_value;

    CHECKF(gk_gemv_f16_emu(w, x, y, rows, cols, beta, NULL) == 0, "rows=%lld cols=%lld: launch",
           (long long)rows, (long long)cols);
    gk_gemv_f16_ref(w, x, y_ref, rows, cols, beta);

    int bad_kernel = 0, bad_ref = 0, bad_guard = 0;
    for (int64_t r = 0; r < rows; r++) {
        double exact = beta != 0 ? (double)y0[r] : 0, mag = beta != 0 ? fabs(y0[r]) : 0;
        for (int64_t c = 0; c < cols; c++) {
            const double t = (double)ig_f16_to_f32(w[r * cols + c]) * ig_f16_to_f32(x[c]);
            exact += t;
            mag += fabs(t);
        }
        if (!(fabs((double)y[r] - y_ref[r]) <= 1e-5 * mag + 1e-30) && bad_kernel++ < 3)
            fprintf(stderr, "rows=%lld cols=%lld beta=%g: y[%lld] kernel %.9g ref %.9g\n",
                    (long long)rows, (long long)cols, beta, (long long)r, y[r], y_ref[r]);
        if (!(fabs((double)y_ref[r] - exact) <= 1e-7 * fabs(exact) + 1e-30) && bad_ref++ < 3)
            fprintf(stderr, "rows=%lld cols=%lld: ref %.9g exact %.12g\n", (long long)rows,
                    (long long)cols, y_ref[r], exact);
    }
    for (int i = 0; i < GUARD; i++)
        bad_guard += y[rows + i] != guard_value;
    CHECKF(bad_kernel == 0, "rows=%lld cols=%lld beta=%g: %d rows off the twin", (long long)rows,
           (long long)cols, beta, bad_kernel);
    CHECKF(bad_ref == 0, "rows=%lld cols=%lld: %d twin rows off f64", (long long)rows,
           (long long)cols, bad_ref);
    CHECKF(bad_guard == 0, "rows=%lld cols=%lld: wrote past y", (long long)rows, (long long)cols);
    free(w), free(x), free(y), free(y0), free(y_ref);
}

int main(void)
{
    static const int64_t rows[] = {1, 7, 33, 576};
    static const int64_t cols[] = {8, 64, 576, 1544, 4104};
    uint64_t seed = 1;
    for (int ri = 0; ri < 4; ri++)
        for (int ci = 0; ci < 5; ci++)
            for (int b = 0; b < 2; b++)
                run_case(rows[ri], cols[ci], (float)b, seed++);
    /* Unsupported sizes are refused, not launched. */
    CHECK(gk_gemv_f16_emu(NULL, NULL, NULL, 4, 12, 0, NULL) != 0);
    return test_summary("test_gemv_emu");
}
