/* ops/gpu_arch.cu: the element-wise kernels the architectures after Llama
 * add to a block on the GPU (Qwen 3, Gemma 3, Gemma 4): RMSNorm of each Q
 * and K head in place before RoPE (and Gemma 4's V heads, without a weight), the post-attention and post-FFN norms folded into
 * the residual add, scaling (Gemma's embeddings), soft-capping (final
 * logits), a bias added to rows (gpt-oss's wo bias, after the residual
 * add). Contracts in ops/gpu_ops.h, results defined by the CPU twins in
 * ops/gpu_arch_ref.c.
 *
 * Head norms: one warp per head (head_dim / 32 elements a lane, shuffles),
 * 4 heads a block. Row norms: one block per row as gk_rmsnorm. The rest:
 * one thread per element. Every f32 operation is rounded on its own
 * (gk_mul, gk_add: no FMA contraction), so the twins match bit for bit
 * where the order is the same; the sums of squares are the one place it is
 * not.
 *
 * Under IGNITE_PDL=1 each goes out with IG_LAUNCH_DEP and starts with
 * gk_dep_start (ops/gpu_math.cuh): it waits, then lets the next kernel start.
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator through
 * ops/gpu_arch_emu.cc (name_emu). Covered by tests/emu/test_gpu_ops_emu.c
 * and tests/gpu/. */
#include "ops/gpu_math.cuh"
#include "ops/gpu_ops.h"

namespace {

constexpr int kThreads = 256;
constexpr int kHeadWarps = 4; /* heads per block of the head norm */

/* Block (t, group of kHeadWarps heads); warp w normalizes head
 * blockIdx.y * kHeadWarps + w of row t in place. */
__global__ void __launch_bounds__(32 * kHeadWarps)
head_rmsnorm_kernel(float *__restrict__ x, int64_t ld_x, int64_t n_heads, int64_t head_dim,
                    const float *__restrict__ w, float eps)
{
    gk_dep_start();
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int64_t h = (int64_t)blockIdx.y * kHeadWarps + warp;
    if (h >= n_heads) /* whole warps leave: the shuffles below are per warp */
        return;
    float *v = x + (int64_t)blockIdx.x * ld_x + h * head_dim;
    float ss = 0;
    for (int64_t d = lane; d < head_dim; d += 32)
        ss = gk_add(ss, gk_mul(v[d], v[d]));
    for (int m = 16; m > 0; m >>= 1)
        ss = gk_add(ss, ig_shfl_xor_f32(ss, m));
    const float r = 1.0f / sqrtf(ss / (float)head_dim + eps);
    for (int64_t d = lane; d < head_dim; d += 32) /* w NULL: Gemma 4's V, no weight */
        v[d] = w ? gk_mul(gk_mul(v[d], r), w[d]) : gk_mul(v[d], r);
}

/* One block per row: x[t] += y[t] r w, r = 1 / sqrt(mean(y[t]^2) + eps). */
__global__ void __launch_bounds__(kThreads)
rmsnorm_add_kernel(float *__restrict__ x, int64_t ld_x, const float *__restrict__ y,
                   int64_t ld_y, const float *__restrict__ w, int64_t dim, float eps)
{
    gk_dep_start();
    const int64_t t = blockIdx.x;
    const float *yr = y + t * ld_y;
    float *xr = x + t * ld_x;
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    float ss = 0;
    for (int64_t i = tid; i < dim; i += nt)
        ss = gk_add(ss, gk_mul(yr[i], yr[i]));
    ss = gk_block_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int64_t i = tid; i < dim; i += nt)
        xr[i] = gk_add(xr[i], gk_mul(gk_mul(yr[i], r), w[i]));
}

__global__ void __launch_bounds__(kThreads) scale_kernel(float *__restrict__ x, int64_t n, float s)
{
    gk_dep_start();
    const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (i < n)
        x[i] = gk_mul(x[i], s);
}

/* x[t][i] += b[i]: one thread per element of the n x dim rows. */
__global__ void __launch_bounds__(kThreads)
add_rows_kernel(float *__restrict__ x, int64_t ld_x, const float *__restrict__ b, int64_t n,
                int64_t dim)
{
    gk_dep_start();
    const int64_t k = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (k < n * dim)
        x[k / dim * ld_x + k % dim] = gk_add(x[k / dim * ld_x + k % dim], b[k % dim]);
}

__global__ void __launch_bounds__(kThreads)
softcap_kernel(float *__restrict__ x, int64_t n, float cap, float inv)
{
    gk_dep_start();
    const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (i < n)
        x[i] = gk_mul(cap, tanhf(gk_mul(x[i], inv)));
}

__global__ void __launch_bounds__(kThreads)
to_f16_kernel(const float *__restrict__ x, int64_t n, uint16_t *__restrict__ y)
{
    gk_dep_start();
    const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (i < n)
        y[i] = gk_f32_to_f16(x[i]);
}

/* Element i of row t's n_layer * d: layer l = i / d's input, into the second
 * half of its row of out (ld_rows rows a layer, 2 d floats a row). */
__global__ void __launch_bounds__(kThreads)
ple_combine_kernel(const float *__restrict__ p, const float *__restrict__ e, int64_t n,
                   int64_t all, int64_t d, int64_t ld_rows, float tok_scale, float in_scale,
                   float *__restrict__ out)
{
    gk_dep_start();
    const int64_t k = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (k >= n * all)
        return;
    const int64_t t = k / all, i = k % all, l = i / d;
    out[(l * ld_rows + t) * 2 * d + d + i % d] =
        gk_mul(gk_add(p[k], gk_mul(e[k], tok_scale)), in_scale);
}

/* Blocks of kThreads for n elements; 0 when more than the grid's x holds. */
unsigned flat_blocks(int64_t n)
{
    const int64_t b = (n + kThreads - 1) / kThreads;
    return b > 0x7fffffff ? 0 : (unsigned)b;
}

} /* namespace */

extern "C" {

int IG_DEV(gk_head_rmsnorm)(float *x, int64_t ld_x, int64_t n, int64_t n_heads,
                            int64_t head_dim, const float *w, float eps, void *stream_)
{
    if (n < 0 || n > 0x7fffffff || n_heads < 1 || head_dim < 1 || ld_x < n_heads * head_dim ||
        (n_heads + kHeadWarps - 1) / kHeadWarps > 65535 || !x)
        return ig_error(IG_E_INTERNAL, "gk_head_rmsnorm: bad sizes (n %lld, heads %lld, "
                        "head_dim %lld, ld_x %lld) or NULL", (long long)n, (long long)n_heads,
                        (long long)head_dim, (long long)ld_x);
    if (n == 0)
        return IG_OK;
    dim3 grid((unsigned)n, (unsigned)((n_heads + kHeadWarps - 1) / kHeadWarps));
    return IG_LAUNCH_DEP(head_rmsnorm_kernel, grid, dim3(32 * kHeadWarps), 0,
                         (cudaStream_t)stream_, x, ld_x, n_heads, head_dim, w, eps);
}

int IG_DEV(gk_to_f16)(const float *x, int64_t n, uint16_t *y, void *stream_)
{
    const unsigned blocks = flat_blocks(n);
    if (n < 0 || (n > 0 && !blocks) || !x || !y)
        return ig_error(IG_E_INTERNAL, "gk_to_f16: bad size %lld or NULL", (long long)n);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(to_f16_kernel, dim3(blocks), dim3(kThreads), 0, (cudaStream_t)stream_,
                         x, n, y);
}

int IG_DEV(gk_ple_combine)(const float *p, const float *e, int64_t n, int64_t n_layer,
                           int64_t d, int64_t ld_rows, float tok_scale, float in_scale,
                           float *out, void *stream_)
{
    const unsigned blocks = flat_blocks(n * n_layer * d);
    if (n < 0 || n > ld_rows || n_layer < 1 || d < 1 || (n > 0 && !blocks) || !p || !e || !out)
        return ig_error(IG_E_INTERNAL, "gk_ple_combine: bad sizes (n %lld, layers %lld, d %lld, "
                        "ld_rows %lld) or NULL", (long long)n, (long long)n_layer, (long long)d,
                        (long long)ld_rows);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(ple_combine_kernel, dim3(blocks), dim3(kThreads), 0,
                         (cudaStream_t)stream_, p, e, n, n_layer * d, d, ld_rows, tok_scale,
                         in_scale, out);
}

int IG_DEV(gk_rmsnorm_add)(float *x, int64_t ld_x, const float *y, int64_t ld_y,
                           const float *w, int64_t n, int64_t dim, float eps, void *stream_)
{
    if (n < 0 || n > 0x7fffffff || dim < 1 || ld_x < dim || ld_y < dim || !x || !y || !w)
        return ig_error(IG_E_INTERNAL, "gk_rmsnorm_add: bad sizes (n %lld, dim %lld, ld %lld "
                        "%lld) or NULL", (long long)n, (long long)dim, (long long)ld_x,
                        (long long)ld_y);
    if (n == 0)
        return IG_OK;
    const int threads = dim >= kThreads ? kThreads : (int)((dim + 31) / 32 * 32);
    return IG_LAUNCH_DEP(rmsnorm_add_kernel, dim3((unsigned)n), dim3((unsigned)threads), 0,
                         (cudaStream_t)stream_, x, ld_x, y, ld_y, w, dim, eps);
}

int IG_DEV(gk_scale_f32)(float *x, int64_t n, float s, void *stream_)
{
    if (n < 0 || (n && (!x || flat_blocks(n) == 0)))
        return ig_error(IG_E_INTERNAL, "gk_scale_f32: bad size %lld or NULL", (long long)n);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(scale_kernel, dim3(flat_blocks(n)), dim3(kThreads), 0,
                         (cudaStream_t)stream_, x, n, s);
}

int IG_DEV(gk_add_rows_f32)(float *x, int64_t ld_x, const float *b, int64_t n, int64_t dim,
                            void *stream_)
{
    if (n < 0 || dim < 0 || ld_x < dim ||
        (n * dim > 0 && (!x || !b || flat_blocks(n * dim) == 0)))
        return ig_error(IG_E_INTERNAL, "gk_add_rows_f32: bad size %lld x %lld (ld %lld) or NULL",
                        (long long)n, (long long)dim, (long long)ld_x);
    if (n * dim == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(add_rows_kernel, dim3(flat_blocks(n * dim)), dim3(kThreads), 0,
                         (cudaStream_t)stream_, x, ld_x, b, n, dim);
}

int IG_DEV(gk_softcap)(float *x, int64_t n, float cap, void *stream_)
{
    if (n < 0 || !(cap > 0) || (n && (!x || flat_blocks(n) == 0)))
        return ig_error(IG_E_INTERNAL, "gk_softcap: bad size %lld, cap %g or NULL",
                        (long long)n, (double)cap);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(softcap_kernel, dim3(flat_blocks(n)), dim3(kThreads), 0,
                         (cudaStream_t)stream_, x, n, cap, (float)(1.0 / (double)cap));
}

} /* extern "C" */
