/* devkit/wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async) for kernels:
 * shared-memory matrix descriptors, the asynchronous MMA (A from shared
 * memory or registers, B from shared memory, f32 accumulators), its
 * fence/commit/wait, and the proxy fence that makes ordinary shared-memory
 * writes (st.shared, cp.async) visible to it.
 *
 * Device: only sm_90a passes (__CUDA_ARCH_FEAT_SM90_ALL) have wgmma; in other
 * device passes the MMA wrappers trap. A kernel that uses them is launched
 * only on a compute capability 9.0 device from a binary built with sm_90a
 * code (its launcher checks). Emulator (IG_EMU): each call is a warpgroup
 * collective of emu/wgmma.cc with the PTX semantics (the MMA's operands are
 * read from shared memory and its results land in the accumulators at the
 * wgmma.wait_group that covers it, not at issue). Facts: docs/wgmma.md.
 * Covered by tests/emu/test_emu_wgmma.cc and the kernels' tests. */
#ifndef IGNITE_DEVKIT_WGMMA_CUH
#define IGNITE_DEVKIT_WGMMA_CUH

#include "devkit/intrinsics.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IG_HAVE_WGMMA 1 /* this device pass has the instructions */
#else
#define IG_HAVE_WGMMA 0
#endif

/* Swizzle modes of a matrix descriptor (bits 62-63). */
enum ig_wgmma_swizzle {
    IG_WGMMA_SWIZZLE_NONE = 0,
    IG_WGMMA_SWIZZLE_128B = 1,
    IG_WGMMA_SWIZZLE_64B = 2,
    IG_WGMMA_SWIZZLE_32B = 3,
};

/* The .shared::cta address of p: what descriptors carry and what the swizzle
 * patterns are computed from (a 128-byte swizzled tile starts on a multiple
 * of 1024). Emulated: p's offset in the block's dynamic shared memory plus
 * a per-launch base that is a multiple of 16 but never of 1024, so a kernel
 * that does not align its tiles reads the wrong bytes there too. */
__device__ __forceinline__ uint32_t ig_shared_address(const void *p)
{
#if defined(__CUDA_ARCH__)
    return (uint32_t)__cvta_generic_to_shared(p);
#elif defined(__CUDACC__)
    return 0;
#else
    return ig_emu_shared_address(p);
#endif
}

/* Matrix descriptor: start address, leading- and stride-dimension byte
 * offsets (multiples of 16; what they step over depends on the layout, see
 * docs/wgmma.md), base offset 0, swizzle mode. The same bits in both builds. */
__device__ __forceinline__ uint64_t ig_wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo,
                                                  int swizzle)
{
    return (uint64_t)((addr >> 4) & 0x3fffu) | (uint64_t)((lbo >> 4) & 0x3fffu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fffu) << 32 | (uint64_t)(swizzle & 3) << 62;
}

/* wgmma.fence: orders this warpgroup's earlier accesses of accumulator and
 * A registers before the wgmma that follow (needed before the first MMA on
 * registers written since; shared memory needs ig_fence_proxy_async). */
__device__ __forceinline__ void ig_wgmma_fence()
{
#if IG_HAVE_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_wgmma_fence();
#endif
}

/* Closes the group of this warpgroup's outstanding wgmma. */
__device__ __forceinline__ void ig_wgmma_commit()
{
#if IG_HAVE_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_wgmma_commit();
#endif
}

/* Waits until at most N groups are pending; their accumulators may be read
 * after it (and after ig_wgmma_fence_operand on them). */
template <int N> __device__ __forceinline__ void ig_wgmma_wait()
{
#if IG_HAVE_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
    ig_emu_wgmma_wait(N);
#endif
}

/* fence.proxy.async.shared::cta: this thread's ordinary shared-memory writes
 * become visible to the async proxy (wgmma operands); each writing thread,
 * before the barrier that precedes the MMA. */
__device__ __forceinline__ void ig_fence_proxy_async()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_fence_proxy_async();
#endif
}

/* Pins register operands in place: the compiler sees the wait (and
 * wgmma.fence) as touching memory only, so without this it could move an
 * access of an accumulator above the wait that completes it, or a write of
 * an accumulator or A register below the fence that must follow it. Used
 * after every wait on the accumulators it completes, and before every
 * ig_wgmma_fence on the registers written since the last one. */
template <int N> __device__ __forceinline__ void ig_wgmma_fence_operand(float (&d)[N])
{
#if defined(__CUDA_ARCH__)
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
#endif
}

template <int N, int M, int K>
__device__ __forceinline__ void ig_wgmma_fence_operand(uint32_t (&a)[N][M][K])
{
#if defined(__CUDA_ARCH__)
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < M; j++)
#pragma unroll
            for (int k = 0; k < K; k++)
                asm volatile("" : "+r"(a[i][j][k])::"memory");
#else
    (void)a;
#endif
}

/* The emulator's own tests define IG_WGMMA_EMU_ANY_N to 1 to try shapes no
 * kernel uses; kernels get only the N the device code has. */
#if defined(IG_WGMMA_EMU_ANY_N) && !defined(__CUDACC__)
#define IG_WGMMA_ANY_N_OK_ 1
#else
#define IG_WGMMA_ANY_N_OK_ 0
#endif

#if !defined(__CUDACC__)
static inline int ig_emu_wgmma_kind_of(ig_bf16_t *) { return IG_EMU_WGMMA_BF16; }
static inline int ig_emu_wgmma_kind_of(ig_f16_t *) { return IG_EMU_WGMMA_F16; }
#endif

#if IG_HAVE_WGMMA
template <class T, int N> struct ig_wgmma_op;
#include "devkit/wgmma_sm90a.inc"
#endif

/* D (64 x N, f32) = A (64 x 16) * B (16 x N) + (accumulate ? D : 0), for the
 * 128 threads of a warpgroup (4 consecutive warps starting at a multiple of
 * 4). d: this thread's N/2 accumulators, the mma.m16n8 C layout of its
 * warp's 16 rows repeated over N/8 column blocks (d[4j..4j+3]: rows g, g+8,
 * columns 8j + 2t, +1). ss: A and B from descriptors; TA, TB: 0 = K-major,
 * 1 = M-/N-major (transposed). N: 64, 128, 160 or 256, the shapes
 * scripts/gen_wgmma.py generates (the emulator's own hook takes any
 * multiple of 8 up to 256). */
template <class T, int N, int TA, int TB>
__device__ __forceinline__ void ig_wgmma_ss(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc,
                                            int accumulate)
{
    static_assert(N == 64 || N == 128 || N == 160 || N == 256 || IG_WGMMA_ANY_N_OK_,
                  "no device code for this N: add it to scripts/gen_wgmma.py");
#if IG_HAVE_WGMMA
    ig_wgmma_op<T, N>::template ss<TA, TB>(d, a_desc, b_desc, accumulate);
#elif defined(__CUDA_ARCH__)
    (void)d, (void)a_desc, (void)b_desc, (void)accumulate;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_wgmma(ig_emu_wgmma_kind_of((T *)0), N, d, a_desc, nullptr, b_desc, accumulate, TA, TB);
#endif
}

/* The same with A from registers: this thread's 4 registers of A in the
 * mma.m16n8k16 A layout of its warp's 16 rows (a[0]: row g, columns 2t, +1;
 * a[1]: row g+8; a[2], a[3]: columns + 8). */
template <class T, int N, int TB>
__device__ __forceinline__ void ig_wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                            uint64_t b_desc, int accumulate)
{
    static_assert(N == 64 || N == 128 || N == 160 || N == 256 || IG_WGMMA_ANY_N_OK_,
                  "no device code for this N: add it to scripts/gen_wgmma.py");
#if IG_HAVE_WGMMA
    ig_wgmma_op<T, N>::template rs<TB>(d, a, b_desc, accumulate);
#elif defined(__CUDA_ARCH__)
    (void)d, (void)a, (void)b_desc, (void)accumulate;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_wgmma(ig_emu_wgmma_kind_of((T *)0), N, d, 0, a, b_desc, accumulate, 0, TB);
#endif
}

#endif
