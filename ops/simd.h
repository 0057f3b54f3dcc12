/* ops/simd.h: compile a scalar kernel twice, for the baseline ISA and for
 * AVX2 + FMA (x86-64-v3), and let the loader pick per machine (an ifunc).
 * The kernels are plain C written so the compiler vectorizes them; this
 * doubles their vector width on machines that have AVX2 without giving up
 * the baseline binary. Hand-written SIMD kernels can replace a clone later.
 * Define IGNITE_NO_SIMD_CLONES to build the baseline only. */
#ifndef IGNITE_OPS_SIMD_H
#define IGNITE_OPS_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__linux__) && !defined(IGNITE_NO_SIMD_CLONES)
#define OPS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
/* The same with an AVX-512 clone first (x86-64-v4), for a kernel written
 * with 64-byte vectors (GCC's vector extension), element by element the
 * same operations in every clone: two 512-bit FP pipes (Xeons, Zen 5) run
 * them at twice the AVX2 clone's rate. */
#define OPS_SIMD_CLONES_V4                                                                   \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define OPS_SIMD_CLONES_ON 1
#else
#define OPS_SIMD_CLONES
#define OPS_SIMD_CLONES_V4
#define OPS_SIMD_CLONES_ON 0
#endif

#endif
