/* ops/gpu_arch_ref.c: the CPU twins (_ref) of ops/gpu_arch.cu, the kernels
 * Qwen 3 and Gemma 3 add (head norms, post norms into the residual,
 * scaling, soft-capping): plain loops over host pointers that define each
 * kernel's result. The sums of squares are added in the kernels' order (a
 * lane's or thread's strided partial sums, then the shuffle butterfly, then
 * the warps in order), and every f32 operation is rounded on its own (built
 * without FMA contraction), so the emulated kernels match bit for bit.
 * Covered by tests/emu/test_gpu_ops_emu.c (against the emulated kernels and
 * double-precision formulas). */
#include "ops/gpu_ops.h"

#include "core/half.h"

#include <math.h>

/* What the xor butterfly over 32 lanes leaves in every lane (IEEE addition
 * is commutative, so all lanes agree). */
static float butterfly32(float v[32])
{
    for (int m = 16; m > 0; m >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++)
            t[l] = v[l] + v[l ^ m];
        for (int l = 0; l < 32; l++)
            v[l] = t[l];
    }
    return v[0];
}

/* The sum of squares of y[0..dim) as a block of `threads` threads adds it:
 * thread i over i, i + threads, ...; each warp's butterfly; warps in order. */
static float block_sum_squares(const float *y, int64_t dim, int threads)
{
    float s = 0;
    for (int w = 0; w < threads / 32; w++) {
        float v[32];
        for (int l = 0; l < 32; l++) {
            v[l] = 0;
            for (int64_t i = w * 32 + l; i < dim; i += threads)
                v[l] = v[l] + y[i] * y[i];
        }
        s += butterfly32(v);
    }
    return s;
}

void gk_head_rmsnorm_ref(float *x, int64_t ld_x, int64_t n, int64_t n_heads, int64_t head_dim,
                         const float *w, float eps)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + t * ld_x + h * head_dim;
            const float r =
                1.0f / sqrtf(block_sum_squares(v, head_dim, 32) / (float)head_dim + eps);
            for (int64_t d = 0; d < head_dim; d++)
                v[d] = w ? v[d] * r * w[d] : v[d] * r;
        }
}

void gk_to_f16_ref(const float *x, int64_t n, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = ig_f32_to_f16(x[i]);
}

void gk_ple_combine_ref(const float *p, const float *e, int64_t n, int64_t n_layer, int64_t d,
                        int64_t ld_rows, float tok_scale, float in_scale, float *out)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t l = 0; l < n_layer; l++)
            for (int64_t i = 0; i < d; i++) {
                int64_t k = t * n_layer * d + l * d + i;
                out[(l * ld_rows + t) * 2 * d + d + i] = (p[k] + e[k] * tok_scale) * in_scale;
            }
}

void gk_rmsnorm_add_ref(float *x, int64_t ld_x, const float *y, int64_t ld_y, const float *w,
                        int64_t n, int64_t dim, float eps)
{
    const int threads = dim >= 256 ? 256 : (int)((dim + 31) / 32 * 32);
    for (int64_t t = 0; t < n; t++) {
        const float *yr = y + t * ld_y;
        float *xr = x + t * ld_x;
        const float r = 1.0f / sqrtf(block_sum_squares(yr, dim, threads) / (float)dim + eps);
        for (int64_t i = 0; i < dim; i++)
            xr[i] = xr[i] + yr[i] * r * w[i];
    }
}

void gk_scale_f32_ref(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * s;
}

void gk_add_rows_f32_ref(float *x, int64_t ld_x, const float *b, int64_t n, int64_t dim)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < dim; i++)
            x[t * ld_x + i] = x[t * ld_x + i] + b[i];
}

void gk_softcap_ref(float *x, int64_t n, float cap)
{
    const float inv = (float)(1.0 / (double)cap);
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] * inv);
}
