/* ops/hadamard.c: the orthonormal Walsh-Hadamard rotation of a quantized
 * KV cache's rows (ops_hadamard_rows, ops/ops.h): llama.cpp rotates Q and K
 * (and V, the attention's output back) by it before a quantized cache
 * stores them, so that a block's values share their outliers and its
 * scale fits them better; q.k and the weighted sum of V are unchanged in
 * exact arithmetic (H is symmetric and H H = I). Which rows, and when, is
 * the caller's (backend/cpu_attention.c, kvcache.h's kv_rotation).
 * Covered by tests/cpu/test_ops_numpy.py (numpy's Sylvester matrix). */
#include "ops/ops.h"

#include "core/status.h"

#include <math.h>

void ops_hadamard_rows(float *x, int64_t n, int64_t nrot)
{
    IG_ASSERT(nrot >= 2 && (nrot & (nrot - 1)) == 0 && n % nrot == 0);
    float scale = 1.0f / sqrtf((float)nrot);
    for (int64_t c = 0; c < n; c += nrot) {
        float *v = x + c;
        /* butterflies of growing span: H_2n = [[H_n, H_n], [H_n, -H_n]],
         * the order ggml_gen_hadamard builds its matrix in */
        for (int64_t s = 1; s < nrot; s *= 2)
            for (int64_t i = 0; i < nrot; i += 2 * s)
                for (int64_t j = i; j < i + s; j++) {
                    float a = v[j], b = v[j + s];
                    v[j] = a + b;
                    v[j + s] = a - b;
                }
        for (int64_t j = 0; j < nrot; j++)
            v[j] *= scale;
    }
}
