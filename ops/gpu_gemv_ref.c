/* ops/gpu_gemv_ref.c: the CPU twin of ops/gpu_gemv.cu (gk_gemv_f16_ref),
 * the definition of its result: f64 sums of the f16 products, rounded once
 * to f32. Covered by tests/emu/test_gemv_emu.c. */
#include <stddef.h> /* gpu_ops.h uses size_t without including it */

#include "ops/gpu_ops.h"

#include "core/half.h"
#include "core/status.h"

#include <pthread.h>
#include <stdlib.h>

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

void gk_gemv_f16_glu_ref(const uint16_t *w, const uint16_t *x, uint16_t *h, int64_t rows,
                         int64_t cols, int act)
{
    float *y = malloc((size_t)rows * sizeof *y);
    IG_ASSERT(y);
    gk_gemv_f16_ref(w, x, y, rows, cols, 0.0f);
    if (act == GK_GLU_GELU)
        gk_geglu_ref(y, 1, rows / 2, h);
    else
        gk_swiglu_ref(y, 1, rows / 2, h);
    free(y);
}
