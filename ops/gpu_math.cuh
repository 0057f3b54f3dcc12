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

} /* namespace */

#endif
