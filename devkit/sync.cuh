/* devkit/sync.cuh: Hopper's synchronization for warp-specialized kernels:
 * named barriers (bar.sync / bar.arrive id, count), __syncwarp, mbarriers
 * (init, arrive, arrive.expect_tx, try_wait.parity, fence.mbarrier_init)
 * and setmaxnreg.
 *
 * Device: the PTX instructions (mbarrier's expect_tx and try_wait need
 * sm_90, setmaxnreg sm_90a: in other device passes those wrappers trap; a
 * kernel that uses them is built for sm_90a only). Emulator (IG_EMU): each
 * call is emu/sync.cc's, with the ISA's semantics and a fault for each
 * misuse the emulator can see (docs/wgmma.md lists them and their PTX ISA
 * sections); every barrier and mbarrier phase orders memory for the race
 * detector exactly as the ISA says, no more.
 * Covered by tests/emu/test_emu_sync.cc and the warp-specialized kernel's
 * tests. */
#ifndef IGNITE_DEVKIT_SYNC_CUH
#define IGNITE_DEVKIT_SYNC_CUH

#include "devkit/intrinsics.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define IG_HAVE_SM90_SYNC 1 /* mbarrier tx-count, try_wait, TMA */
#else
#define IG_HAVE_SM90_SYNC 0
#endif

/* ---- named barriers ------------------------------------------------------- */

/* bar.sync id, count: waits until `count` threads (a multiple of 32, the
 * same in every participant) have arrived at barrier id (1..15; 0 is
 * __syncthreads'), and orders every arriver's earlier memory accesses
 * before this thread's later ones. */
__device__ __forceinline__ void ig_named_barrier_sync_at(int id, int count, const char *file,
                                                         int line)
{
#if defined(__CUDA_ARCH__)
    (void)file, (void)line;
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
#elif defined(__CUDACC__)
    (void)id, (void)count, (void)file, (void)line;
#else
    ig_emu_named_barrier(id, count, 1, file, line);
#endif
}

/* bar.arrive id, count: counts this thread's arrival (its earlier accesses
 * are ordered before the waiters' later ones) and goes on. */
__device__ __forceinline__ void ig_named_barrier_arrive_at(int id, int count, const char *file,
                                                           int line)
{
#if defined(__CUDA_ARCH__)
    (void)file, (void)line;
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
#elif defined(__CUDACC__)
    (void)id, (void)count, (void)file, (void)line;
#else
    ig_emu_named_barrier(id, count, 0, file, line);
#endif
}

#define ig_named_barrier_sync(id, count) ig_named_barrier_sync_at(id, count, __FILE__, __LINE__)
#define ig_named_barrier_arrive(id, count) \
    ig_named_barrier_arrive_at(id, count, __FILE__, __LINE__)

/* __syncwarp() over the full warp. */
__device__ __forceinline__ void ig_syncwarp()
{
#if defined(__CUDA_ARCH__)
    __syncwarp();
#elif !defined(__CUDACC__)
    ig_emu_syncwarp();
#endif
}

/* ---- mbarriers ------------------------------------------------------------ */

/* One mbarrier object: 8 bytes of shared memory, 8-byte aligned. */
typedef uint64_t ig_mbarrier;

/* mbarrier.init: count arrivals per phase (1 .. 2^20 - 1), phase 0. Other
 * threads may use it only after a barrier that follows the init; the TMA
 * unit only after ig_fence_mbarrier_init by the initializing thread too. */
__device__ __forceinline__ void ig_mbarrier_init(ig_mbarrier *bar, uint32_t count)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(ig_smem_addr(bar)), "r"(count)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)bar, (void)count;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_mbarrier_init(bar, count);
#endif
}

/* fence.mbarrier_init.release.cluster: makes this thread's mbarrier.init
 * visible to the async proxy (the TMA's complete_tx). */
__device__ __forceinline__ void ig_fence_mbarrier_init()
{
#if IG_HAVE_SM90_SYNC
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_fence_mbarrier_init();
#endif
}

/* mbarrier.arrive (release): one arrival in the current phase. */
__device__ __forceinline__ void ig_mbarrier_arrive(ig_mbarrier *bar)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ig_smem_addr(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)bar;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_mbarrier_arrive(bar, 0);
#endif
}

/* mbarrier.arrive.expect_tx: the phase also waits for `bytes` of
 * asynchronous copies (TMA loads naming this mbarrier), then one arrival. */
__device__ __forceinline__ void ig_mbarrier_arrive_expect_tx(ig_mbarrier *bar, uint32_t bytes)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     ig_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)bar, (void)bytes;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_mbarrier_arrive(bar, bytes);
#endif
}

/* Waits (acquire) until the phase with this parity has completed: at once
 * when the current phase's parity differs. A consumer waits for fill k of a
 * buffer with parity k & 1, a producer for its release with (k & 1) ^ 1. */
__device__ __forceinline__ void ig_mbarrier_wait(ig_mbarrier *bar, uint32_t parity)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "IG_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra IG_MBAR_WAIT;\n"
                 "}\n" ::"r"(ig_smem_addr(bar)),
                 "r"(parity)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)bar, (void)parity;
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_mbarrier_wait(bar, parity);
#endif
}

/* ---- registers ------------------------------------------------------------ */

/* Registers per thread at launch of a kernel with __launch_bounds__(threads,
 * 1): what the setmaxnreg pool starts from (ptxas allocates exactly that
 * much when the kernel uses setmaxnreg; scripts/check_kernels.py checks). */
constexpr int ig_launch_regs(int threads)
{
    return (65536 / threads) / 8 * 8 > 255 ? 248 : (65536 / threads) / 8 * 8;
}

/* setmaxnreg.{inc,dec}.sync.aligned.u32 REGS, executed by all threads of a
 * warpgroup: the warpgroup's per-thread register count moves to REGS (24..256,
 * a multiple of 8); .inc waits until the CTA's pool has them, .dec returns
 * them. LAUNCH = ig_launch_regs(threads) of the kernel (the emulator's
 * pool). A barrier of the whole warpgroup must separate two of them. */
template <bool INC, int REGS, int LAUNCH> __device__ __forceinline__ void ig_setmaxnreg()
{
    static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg: 24..256, multiple of 8");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (INC)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
    else
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
#elif defined(__CUDA_ARCH__)
    __trap();
#elif !defined(__CUDACC__)
    ig_emu_setmaxnreg(INC, REGS, LAUNCH);
#endif
}

#endif
