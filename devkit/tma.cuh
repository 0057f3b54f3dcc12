/* devkit/tma.cuh: the Tensor Memory Accelerator for kernels: tensor maps
 * made on the host (tiled, 16-bit elements, the 128-byte swizzle or none),
 * loads of a box into shared memory completing on an mbarrier
 * (cp.async.bulk.tensor ... mbarrier::complete_tx::bytes) and stores of a box
 * from shared memory (cp.async.bulk.tensor ... bulk_group, with
 * cp.async.bulk.commit_group / wait_group[.read]).
 *
 * A map lives in kernel parameters (a `const __grid_constant__` argument,
 * 64-byte aligned). Dimensions are innermost first: for a [rows][cols]
 * matrix dim = {cols, rows}, the row stride in bytes. With the 128-byte
 * swizzle a box row is 128 bytes (64 elements) and lands in shared memory
 * as flash_tiles.cuh's swizzled tiles (and wgmma's) do: 16-byte chunk c of
 * row r at chunk c ^ (r % 8), the destination 1024-byte aligned. Elements
 * outside the tensor read as zero; a store writes only those inside.
 *
 * Device: the PTX instructions (sm_90; other device passes trap). Host:
 * cuTensorMapEncodeTiled through the runtime's driver entry point (no link
 * to libcuda). Emulator (IG_EMU): emu/tma.cc, which checks the map as the
 * driver does and the loads' and stores' hazards. Facts: docs/wgmma.md.
 * Covered by tests/emu/test_emu_sync.cc and the warp-specialized kernel's
 * tests. */
#ifndef IGNITE_DEVKIT_TMA_CUH
#define IGNITE_DEVKIT_TMA_CUH

#include "devkit/sync.cuh"

#if defined(__CUDACC__)
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

/* A CUtensorMap (device: 64-byte aligned, as TMA requires) or the
 * emulator's map (8: a 64-byte-aligned kernel argument would only change
 * the host ABI of passing it, which g++ notes at every kernel), by value. */
#if defined(__CUDACC__)
#define IG_TMA_MAP_ALIGN 64
#else
#define IG_TMA_MAP_ALIGN 8
#endif
struct alignas(IG_TMA_MAP_ALIGN) ig_tma_map {
    unsigned char bytes[128];
};

enum ig_tma_swizzle { IG_TMA_SWIZZLE_NONE = 0, IG_TMA_SWIZZLE_128B = 3 };

/* Makes *m describe a rank-dimensional tensor of 16-bit elements at base
 * (16-byte aligned): dim[i] elements along dimension i (0 innermost),
 * stride_bytes[i - 1] bytes between consecutive indices of dimension i >= 1
 * (multiples of 16), boxes of box[i] elements (<= 256; box[0] * 2 a
 * multiple of 16, exactly 128 with the 128-byte swizzle). Returns 0, or
 * IG_E_DEVICE (device) / IG_E_INTERNAL (emulator) after one line naming the
 * problem. Host code. */
static inline int ig_tma_encode(ig_tma_map *m, const void *base, int rank, const uint64_t *dim,
                                const uint64_t *stride_bytes, const uint32_t *box, int swizzle)
{
#if defined(__CUDACC__)
    typedef PFN_cuTensorMapEncodeTiled_v12000 encode_fn;
    static encode_fn encode = NULL;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &q);
#else
        cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault,
                                                &q);
#endif
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
            return ig_error(IG_E_DEVICE, "TMA: the driver has no cuTensorMapEncodeTiled (%s)",
                            cudaGetErrorString(e));
        encode = (encode_fn)fn;
    }
    cuuint32_t strides1[5] = {1, 1, 1, 1, 1};
    CUresult r = encode((CUtensorMap *)m, CU_TENSOR_MAP_DATA_TYPE_UINT16, (cuuint32_t)rank,
                        (void *)base, (const cuuint64_t *)dim, (const cuuint64_t *)stride_bytes,
                        (const cuuint32_t *)box, strides1, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle == IG_TMA_SWIZZLE_128B ? CU_TENSOR_MAP_SWIZZLE_128B
                                                       : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return ig_error(IG_E_DEVICE, "TMA: cuTensorMapEncodeTiled failed (error %d) for a rank-%d "
                        "tensor at %p, box %u x %u", (int)r, rank, base, box[0],
                        rank > 1 ? box[1] : 1u);
    return 0;
#else
    static_assert(sizeof(struct ig_emu_tma_map) <= sizeof(ig_tma_map), "map fits a CUtensorMap");
    if (ig_emu_tma_encode((struct ig_emu_tma_map *)m, base, rank, 2, dim, stride_bytes, box,
                          swizzle))
        return ig_error(IG_E_INTERNAL, "TMA: the emulator refused a rank-%d tensor map", rank);
    return 0;
#endif
}

#if IG_HAVE_SM90_SYNC
__device__ __forceinline__ uint64_t ig_tma_map_addr(const ig_tma_map *m)
{
    return (uint64_t)(uintptr_t)m;
}
#endif

/* Loads the box at coordinates c (innermost first) into shared memory at
 * dst (1024-byte aligned with the swizzle); the bytes count towards bar's
 * tx-count (arm it with ig_mbarrier_arrive_expect_tx). One thread issues. */
__device__ __forceinline__ void ig_tma_load_3d(const ig_tma_map *m, void *dst, ig_mbarrier *bar,
                                               int c0, int c1, int c2)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(ig_smem_addr(dst)),
                 "l"(ig_tma_map_addr(m)), "r"(c0), "r"(c1), "r"(c2), "r"(ig_smem_addr(bar))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)m, (void)dst, (void)bar, (void)c0, (void)c1, (void)c2;
    __trap();
#elif !defined(__CUDACC__)
    const int32_t c[3] = {c0, c1, c2};
    ig_emu_tma_load(m, dst, c, bar);
#endif
}

__device__ __forceinline__ void ig_tma_load_4d(const ig_tma_map *m, void *dst, ig_mbarrier *bar,
                                               int c0, int c1, int c2, int c3)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(ig_smem_addr(dst)),
                 "l"(ig_tma_map_addr(m)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "r"(ig_smem_addr(bar))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)m, (void)dst, (void)bar, (void)c0, (void)c1, (void)c2, (void)c3;
    __trap();
#elif !defined(__CUDACC__)
    const int32_t c[4] = {c0, c1, c2, c3};
    ig_emu_tma_load(m, dst, c, bar);
#endif
}

/* Stores the box at shared memory src (written with ig_fence_proxy_async
 * after the writes, and a barrier to the issuing thread) to coordinates c;
 * part of this thread's next bulk group. One thread issues. */
__device__ __forceinline__ void ig_tma_store_3d(const ig_tma_map *m, const void *src, int c0,
                                                int c1, int c2)
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
                 " [%0, {%1, %2, %3}], [%4];" ::"l"(ig_tma_map_addr(m)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(ig_smem_addr(src))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)m, (void)src, (void)c0, (void)c1, (void)c2;
    __trap();
#elif !defined(__CUDACC__)
    const int32_t c[3] = {c0, c1, c2};
    ig_emu_tma_store(m, src, c);
#endif
}

/* cp.async.bulk.commit_group: closes this thread's group of stores. */
__device__ __forceinline__ void ig_bulk_commit()
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_bulk_commit();
#endif
}

/* cp.async.bulk.wait_group.read N: at most N groups still read shared
 * memory (their boxes may be overwritten after it). */
template <int N> __device__ __forceinline__ void ig_bulk_wait_read()
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
    ig_emu_bulk_wait(N, 1);
#endif
}

/* cp.async.bulk.wait_group N: at most N groups not complete (written). */
template <int N> __device__ __forceinline__ void ig_bulk_wait()
{
#if IG_HAVE_SM90_SYNC
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
    ig_emu_bulk_wait(N, 0);
#endif
}

#endif
