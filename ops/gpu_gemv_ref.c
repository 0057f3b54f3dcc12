/* ops/gpu_gemv_ref.c: the CPU twin of ops/gpu_gemv.cu (gk_gemv_f16_ref),
 * the definition of its result: f64 sums of the f16 products, rounded once
 * to f32. Covered by tests/emu/test_gemv_emu.c. */
#include <stddef.h> /* gpu_ops.h uses size_t without including it */

#include "ops/gpu_ops.h"

#include "core/half.h"

void gk_gemv_f16_ref(const uint16_t *w, const uint16_t *x, float *y, int64_t rows, int64_t cols,
                     float beta)
{
    for (int64_t r = 0; r < rows; r++) {
        double acc = 0;
        for (int64_t c = 0; c < cols; c++)
            acc += (double)ig_f16_to_f32(w[r * cols + c]) * ig_f16_to_f32(x[c]);
        if (beta != 0)
            acc += (double)beta * y[r];
        y[r] = (float)acc;
    }
}
