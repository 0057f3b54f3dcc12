/* ops/gpu_math.cuh: the scalar helpers the ops kernels share, so that a
 * kernel computes bit for bit what its CPU twin (ops/gpu_ops_ref.c) does:
 * f16 <-> f32 conversions (round to nearest even in both builds) and f32
 * products/differences that nvcc may not fuse into an FMA (the twins, built
 * without FMA contraction, round after every operation). Also the vector
 * types of the 16- and 8-byte accesses.
 * Covered by tests/emu/test_gpu_ops_emu.c (emulated) and tests/gpu/. */
#ifndef IGNITE_OPS_GPU_MATH_CUH
#define IGNITE_OPS_GPU_MATH_CUH

#include "devkit/intrinsics.cuh"

#if !defined(IG_EMU)
#include <cuda_fp16.h>
#endif

namespace {

struct alignas(16) gk_f32x4 { float x, y, z, w; };   /* 4 f32, one 16-byte access */
struct alignas(8) gk_f32x2 { float x, y; };          /* 2 f32, one 8-byte access */
struct alignas(16) gk_u32x4 { uint32_t w[4]; };      /* 8 f16, one 16-byte access */
struct alignas(8) gk_u32x2 { uint32_t lo, hi; };     /* 4 f16, one 8-byte access */

/* The first statement of a kernel launched with IG_LAUNCH_DEP that has
 * nothing to do before its inputs: wait for the kernel before it (its
 * writes visible, and its reads of what this one overwrites done), then let
 * the next kernel's blocks take SMs as this one's last wave runs (docs/gpu.md,
 * "Programmatic dependent launch"). Every block, before any early exit. */
__device__ __forceinline__ void gk_dep_start()
{
    ig_grid_dependency_wait();
    ig_launch_dependents();
}

__device__ __forceinline__ float gk_f16_to_f32(uint16_t h)
{
#if defined(IG_EMU)
    return ig_f16_to_f32(h);
#else
    return __half2float(__ushort_as_half(h));
#endif
}

__device__ __forceinline__ uint16_t gk_f32_to_f16(float f)
{
#if defined(IG_EMU)
    return ig_f32_to_f16(f);
#else
    return __half_as_ushort(__float2half_rn(f));
#endif
}

/* The f16 in the low 16 bits of `bits` (one half of a packed pair). */
__device__ __forceinline__ float gk_f16_bits_to_f32(uint32_t bits)
{
    return gk_f16_to_f32((uint16_t)(bits & 0xffffu));
}

/* A 16-byte global load of data read once (no L1 allocation): the weight
 * and KV-cache streams of the decode kernels. */
__device__ __forceinline__ gk_u32x4 gk_ld_stream16(const uint16_t *p)
{
    gk_u32x4 c;
#if defined(__CUDA_ARCH__)
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(c.w[0]), "=r"(c.w[1]), "=r"(c.w[2]), "=r"(c.w[3])
        : "l"(p));
#else
    c = *(const gk_u32x4 *)p;
#endif
    return c;
}

/* a * b and a - b, each rounded: never contracted into an FMA on the device. */
__device__ __forceinline__ float gk_mul(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

__device__ __forceinline__ float gk_sub(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

__device__ __forceinline__ float gk_add(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* a / b and 1 / a, correctly rounded (IEEE), as the CPU computes them. */
__device__ __forceinline__ float gk_div(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

__device__ __forceinline__ float gk_rcp(float a)
{
#if defined(__CUDA_ARCH__)
    return __frcp_rn(a);
#else
    return 1.0f / a;
#endif
}

/* x rounded to the nearest integer, ties to even (rintf), as an int. */
__device__ __forceinline__ int gk_rint(float x)
{
#if defined(__CUDA_ARCH__)
    return __float2int_rn(x);
#else
    return (int)rintf(x);
#endif
}

/* SwiGLU's silu(g) u and GeGLU's gelu_tanh(g) u as ops_swiglu / ops_geglu:
 * GELU's tanh form as a logistic, 0.5 (1 + tanh(z)) = 1 / (1 + e^(-2z)), each
 * product rounded on its own (no FMA). The element-wise kernel and the
 * gate|up GEMVs' fused epilogue share them, so both give the same bits. */
__device__ __forceinline__ float gk_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ float gk_gelu_mul(float g, float u)
{
    const float k2 = 2.0f * 0.7978845608028654f;
    const float z = gk_add(g, gk_mul(gk_mul(gk_mul(0.044715f, g), g), g));
    return g / (1.0f + expf(gk_mul(-k2, z))) * u;
}

/* Launchers pick the vector path only for aligned pointers. */
inline bool gk_aligned(const void *p, uintptr_t bytes)
{
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* Sum over a block of at most 256 threads of every thread's v; every thread
 * gets the same value (the warps' sums added in warp order: deterministic,
 * as the RMSNorm twins sum). */
__device__ __forceinline__ float gk_block_sum(float v)
{
    IG_SHARED(float, part, [8]);
    for (int m = 16; m > 0; m >>= 1)
        v += ig_shfl_xor_f32(v, m);
    const int warp = (int)threadIdx.x / 32, n_warps = (int)blockDim.x / 32;
    if (threadIdx.x % 32 == 0)
        ig_sts(&part[warp], v);
    ig_syncthreads();
    float s = 0;
    for (int w = 0; w < n_warps; w++)
        s += ig_lds(&part[w]);
    return s;
}

/* Threads gk_rmsnorm gives a row of `items` vector items (whole warps, at
 * most 256): the stride of its sums, so a kernel that normalizes a row
 * with more threads gets the same bits by using this many. */
__host__ __device__ __forceinline__ int gk_rmsnorm_threads(int64_t items)
{
    return items >= 256 ? 256 : (int)((items + 31) / 32 * 32);
}

/* One row's RMSNorm, yr = f16(xr w / sqrt(mean(xr^2) + eps)), by threads
 * 0..nt-1 of a block of at most 256 (the others add nothing; every thread
 * of the block must call it: it has a barrier). VEC: 4 elements an access
 * (dim % 4 == 0, xr and w 16-byte aligned, yr 8-byte). CG: xr was written
 * by other blocks of this grid (read from L2). gk_rmsnorm's kernel is this
 * with nt = gk_rmsnorm_threads, as is a GEMV's tail that normalizes the
 * residual it finished (ops/gpu_qgemv.cu, ops/gpu_gemv.cu): the same bits. */
template <bool VEC, bool CG>
__device__ __forceinline__ void gk_rmsnorm_row(const float *xr, const float *w, int64_t dim,
                                               float eps, uint16_t *yr, int nt)
{
    const int tid = (int)threadIdx.x;
    auto ld = [&](int64_t i) { return CG ? ig_ld_cg_f32(xr + i) : xr[i]; };
    float ss = 0;
    if (tid < nt) {
        if (VEC) {
            for (int64_t c = tid; c < dim / 4; c += nt) {
                const gk_f32x4 v = CG ? gk_f32x4{ld(4 * c), ld(4 * c + 1), ld(4 * c + 2),
                                                 ld(4 * c + 3)}
                                      : ((const gk_f32x4 *)xr)[c];
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
        } else {
            for (int64_t i = tid; i < dim; i += nt)
                ss += ld(i) * ld(i);
        }
    }
    ss = gk_block_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    if (tid >= nt)
        return;
    if (VEC) {
        for (int64_t c = tid; c < dim / 4; c += nt) {
            const gk_f32x4 v = CG ? gk_f32x4{ld(4 * c), ld(4 * c + 1), ld(4 * c + 2),
                                             ld(4 * c + 3)}
                                  : ((const gk_f32x4 *)xr)[c];
            const gk_f32x4 g = ((const gk_f32x4 *)w)[c];
            gk_u32x2 o;
            o.lo = ig_pack2<ig_f16_t>(gk_mul(gk_mul(v.x, r), g.x), gk_mul(gk_mul(v.y, r), g.y));
            o.hi = ig_pack2<ig_f16_t>(gk_mul(gk_mul(v.z, r), g.z), gk_mul(gk_mul(v.w, r), g.w));
            ((gk_u32x2 *)yr)[c] = o;
        }
    } else {
        for (int64_t i = tid; i < dim; i += nt)
            yr[i] = gk_f32_to_f16(gk_mul(gk_mul(ld(i), r), w[i]));
    }
}

/* 32 f16 activations into int8 with their (d, s) as the quantized GEMV's
 * staging does (ops/gpu_qgemv.cu stage_x, ops_qmm_quantize's arithmetic):
 * d = max|x| / 127 (correctly rounded), q = rint(x / d) through the
 * correctly rounded reciprocal, s = d sum(q); a block holding inf or NaN
 * gets zeros and (NaN, NaN). One thread, the same bits as the four lanes. */
__device__ __forceinline__ void gk_quantize32(const uint16_t *x16, int8_t *q, gk_f32x2 *ds)
{
    float f[32], amax = 0;
    uint32_t finite = 1;
    for (int i = 0; i < 32; i++) {
        f[i] = gk_f16_to_f32(x16[i]);
        const float a = fabsf(f[i]);
        finite &= a <= 3.402823466e+38f ? 1u : 0u; /* FLT_MAX: 0 for inf and NaN */
        amax = a > amax ? a : amax;
    }
    const float d = gk_div(amax, 127.0f);
    float id = d > 0 ? gk_rcp(d) : 0.0f;
    if (id > 3.402823466e+38f)
        id = 0.0f; /* d < 2^-128: as ops_qmm_quantize, the block's quants are 0 */
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int v = finite ? gk_rint(gk_mul(f[i], id)) : 0;
        sum += v;
        q[i] = (int8_t)v;
    }
    *ds = finite ? gk_f32x2{d, gk_mul(d, (float)sum)} : gk_f32x2{NAN, NAN};
}

/* A GEMV's norm tail: the last block of the grid to get here normalizes the
 * n rows of y (the residual this grid finished: [n][ld_y], dim each) into xn
 * [n][dim] with gk_rmsnorm_row (nt threads, vec as gk_rmsnorm would pick),
 * the next product's input, so the norm costs no launch, and with xq its
 * int8 blocks (gk_quantize32: xq [n][dim], xqd [n][dim / 32], dim % 32 == 0)
 * for a quantized GEMV to load instead of quantizing xn in every block; then
 * it puts the ticket (0 between launches) back to 0. Every thread of every
 * block calls it, after its own writes to y. */
__device__ __forceinline__ void gk_norm_tail(const float *y, int64_t ld_y, int n, int64_t dim,
                                             const float *w, float eps, uint16_t *xn,
                                             uint32_t *ticket, bool vec, int nt,
                                             int8_t *xq = nullptr, gk_f32x2 *xqd = nullptr)
{
    IG_SHARED(uint32_t, drawn, [1]);
    ig_threadfence(); /* this thread's y before the ticket */
    ig_syncthreads();
    if (threadIdx.x == 0)
        ig_sts(&drawn[0], ig_atomic_add_u32(ticket, 1u));
    ig_syncthreads();
    if (ig_lds(&drawn[0]) != gridDim.x * gridDim.y * gridDim.z - 1)
        return;
    ig_threadfence(); /* the other blocks' y after their tickets */
    for (int t = 0; t < n; t++) {
        if (t)
            ig_syncthreads(); /* gk_block_sum's slots are free again */
        if (vec)
            gk_rmsnorm_row<true, true>(y + t * ld_y, w, dim, eps, xn + t * dim, nt);
        else
            gk_rmsnorm_row<false, true>(y + t * ld_y, w, dim, eps, xn + t * dim, nt);
    }
    if (xq) { /* and its int8 blocks, so the next quantized GEMV's blocks need not */
        ig_syncthreads(); /* xn, written by this block, is complete */
        const int64_t nb = dim / 32;
        for (int64_t i = threadIdx.x; i < n * nb; i += blockDim.x)
            gk_quantize32(xn + (i / nb) * dim + 32 * (i % nb), xq + 32 * i, xqd + i);
    }
    if (threadIdx.x == 0)
        *ticket = 0;
}

} /* namespace */

#endif
