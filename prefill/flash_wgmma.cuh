/* prefill/flash_wgmma.cuh: the wgmma view of flash_tiles.cuh's swizzled
 * tiles, shared by the two Hopper prefill kernels (prefill/flash_attn_wgmma.cu
 * and the warp-specialized prefill/flash_attn_ws.cu): the shared-memory
 * matrix descriptors of Q and K (K-major) and V (N-major), their k-steps,
 * and the accumulator view of a C-fragment array. Device code only;
 * included once per kernel source (internal linkage). Facts: docs/wgmma.md.
 * Covered by the kernels' tests. */
#ifndef IGNITE_PREFILL_FLASH_WGMMA_CUH
#define IGNITE_PREFILL_FLASH_WGMMA_CUH

#include "devkit/wgmma.cuh"

namespace {

/* Shared-memory descriptors of the tiles (flash_tiles.cuh's layout at a
 * 1024-byte-aligned shared address; docs/wgmma.md). A descriptor's start
 * address is its low 14 bits in 16-byte units and shared addresses stay
 * below 2^18, so stepping through a tile is adding a constant to the
 * descriptor made once (no carry can leave the field).
 *
 * K-major operands (Q as A, K as B; rows of a [ROWS][HD] tile): a row is
 * 128 bytes of a 64-column page, 8 rows make one 1024-byte swizzle atom (the
 * stride-dimension offset), the leading offset is unused; k-step kk moves 32
 * bytes along the row (the hardware swizzles the address, so a start inside
 * the atom is fine) and every 4 k-steps to the next page. */
__device__ __forceinline__ uint64_t k_major_desc(uint32_t addr)
{
    return ig_wgmma_desc(addr, 16, 1024, IG_WGMMA_SWIZZLE_128B);
}

template <int ROWS> __device__ __forceinline__ constexpr uint64_t k_step(int kk)
{
    return (uint64_t)(((kk / 4) * ROWS * 128 + (kk % 4) * 32) >> 4);
}

/* V as the N-major B operand of P V: 8 keys per 1024-byte atom (the
 * stride-dimension offset), 64 columns per page of ROWS * 128 bytes (the
 * leading-dimension offset); k-step kk (keys 16 kk ..) starts 16 rows on. */
template <int ROWS> __device__ __forceinline__ uint64_t n_major_desc(uint32_t addr)
{
    return ig_wgmma_desc(addr, ROWS * 128, 1024, IG_WGMMA_SWIZZLE_128B);
}

__device__ __forceinline__ constexpr uint64_t v_step(int kk)
{
    return (uint64_t)((kk * 16 * 128) >> 4);
}

/* One m16 tile of C fragments ([1][N/8][4], the shape of flash_tiles.cuh's
 * softmax and output steps) as the N/2 accumulators of a wgmma: the same
 * registers in the same order (d[4j + e] = block j, element e). */
template <int A> __device__ __forceinline__ float (&flat(float (&x)[1][A][4]))[4 * A]
{
    return reinterpret_cast<float (&)[4 * A]>(x);
}

} /* namespace */

#endif
