/* ops/gpu_random.h: the counter-based random numbers of gk_random_f16/f32
 * (ops/gpu_ops.h), one definition for the kernel (ops/gpu_weights.cu) and its
 * CPU twin (ops/gpu_ops_ref.c), and of gk_qrandom (ops/gpu_qweights.cu,
 * twin in ops/gpu_qmm_ref.c): element i of stream `seed` is a pure function
 * of (seed, i), so any launch shape and the host produce the same array.
 * Covered by tests/emu/test_gpu_ops_emu.c. */
#ifndef IGNITE_OPS_GPU_RANDOM_H
#define IGNITE_OPS_GPU_RANDOM_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define GK_HOST_DEVICE __host__ __device__
#else
#define GK_HOST_DEVICE
#endif

/* splitmix64's finalizer on seed ^ i * golden ratio: uniform in [-1, 1) on a
 * 2^-23 grid (24 random bits, exact in f32). */
static inline GK_HOST_DEVICE float gk_random_unit(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(uint32_t)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* 32 random bits of element i of stream `seed` (the same finalizer): the
 * bytes of random quantized blocks (gk_qrandom, ops/gpu_qmm.h). */
static inline GK_HOST_DEVICE uint32_t gk_random_u32(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

/* center + scale * u with one rounding (fmaf), the same on every compiler. */
static inline GK_HOST_DEVICE float gk_random_value(uint64_t seed, uint64_t i, float center,
                                                   float scale)
{
    return fmaf(scale, gk_random_unit(seed, i), center);
}

#endif
