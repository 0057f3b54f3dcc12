/* ops/gpu_gemv_ref.c: the CPU twin of ops/gpu_gemv.cu (gk_gemv_f16_ref),
 * the definition of its result: f64 sums of the f16 products, rounded once
 * to f32. Covered by tests/emu/test_gemv_emu.c. */
#include <stddef.h> /* gpu_ops.h uses size_t without including it */

#include "ops/gpu_ops.h"

#include "core/half.h"

#include <pthread.h>

/* f16 -> f32 of all 65536 codes: the twin also stands in for the kernel in
 * the emulated backend (backend/gpu.c), where it runs on every decode step. */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void fill_table(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        f16_table[i] = ig_f16_to_f32((ig_f16)i);
}

void gk_gemv_f16_ref(const uint16_t *w, const uint16_t *x, float *y, int64_t rows, int64_t cols,
                     float beta)
{
    pthread_once(&f16_once, fill_table);
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *wr = w + r * cols;
        double acc = 0;
        for (int64_t c = 0; c < cols; c++)
            acc += (double)f16_table[wr[c]] * f16_table[x[c]];
        if (beta != 0)
            acc += (double)beta * y[r];
        y[r] = (float)acc;
    }
}
