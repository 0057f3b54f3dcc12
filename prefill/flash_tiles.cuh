/* prefill/flash_tiles.cuh: what both prefill attention kernels (the
 * mma.sync one, prefill/flash_attn.cu, and the wgmma one,
 * prefill/flash_attn_wgmma.cu) do the same way: the swizzled shared-memory
 * tile layout, issuing the cp.async of Q and K/V tiles, and the fused write
 * of the chunk's K and V into the cache. Device code only; included once
 * per kernel source (internal linkage). Covered by the kernels' tests. */
#ifndef IGNITE_PREFILL_FLASH_TILES_CUH
#define IGNITE_PREFILL_FLASH_TILES_CUH

#include "devkit/intrinsics.cuh"
#include "prefill/flash_attn.h"

/* Full unrolling keeps fragment arrays in registers (a loop left rolled
 * indexes them at run time and moves them to the stack). */
#if defined(__CUDACC__)
#define IG_UNROLL _Pragma("unroll")
#else
#define IG_UNROLL
#endif

namespace {

/* The variant table as compile-time constants: variant<V>::block_m etc. */
template <int V> struct variant;
#define IG_FLASH_VARIANT_(id, name_, bm, bn, w, mt, qhd, hds, minb, isa_, st)   \
    template <> struct variant<PREFILL_ATTN_##id> {                             \
        static constexpr int block_m = bm, block_n = bn, warps = w, m_tiles = mt; \
        static constexpr int q_regs_max_hd = qhd, head_dims = hds, min_blocks = minb; \
        static constexpr int isa = isa_, stages = st;                           \
    };
PREFILL_ATTN_VARIANTS(IG_FLASH_VARIANT_)
#undef IG_FLASH_VARIANT_

/* 16-byte-aligned chunk of 8 elements, for global-to-global copies. */
struct alignas(16) chunk16 {
    uint32_t w[4];
};

/* Element offset of (row, col) in a swizzled [ROWS][HD] tile: columns come in
 * 64-wide pages of 128-byte rows (page p at p * ROWS * 64); within a row the
 * 16-byte chunks are permuted by XOR with row % 8 (cute::Swizzle<3,3,3>).
 * col % 8 == 0 for every caller, so a chunk stays contiguous. With the tile
 * at a multiple of 1024 bytes of shared address and ROWS % 8 == 0 this is
 * also wgmma's 128-byte swizzle (K-major for row-wise operands, MN-major for
 * V), so both kernels share it. */
template <int HD, int ROWS>
__device__ __forceinline__ int swz(int row, int col)
{
    return (col / 64) * ROWS * 64 + row * 64 + ((((col / 8) & 7) ^ (row & 7)) << 3) + (col & 7);
}

/* Issues the cp.async of a [ROWS][HD] tile whose row r comes from src(r)
 * (NULL = past the end: zero-filled). The general case (tiles that straddle
 * the cache and the chunk, or run past the end): a per-chunk source choice,
 * a few dozen instructions per 16 bytes. Full tiles take load_rows. */
template <int HD, int ROWS, int THREADS, class Src>
__device__ __forceinline__ void load_tile(uint16_t *tile, const uint16_t *any, Src src)
{
    constexpr int kChunks = ROWS * HD / 8;
    for (int c = ig_thread_index_fresh(); c < kChunks; c += THREADS) {
        int r = c / (HD / 8), col = (c % (HD / 8)) * 8;
        const uint16_t *row = src(r);
        ig_cp_async16(&tile[swz<HD, ROWS>(r, col)], row ? row + col : any, row != nullptr);
    }
}

/* Issues the cp.async of a full [ROWS][HD] tile whose row r is
 * base + r * stride. Each thread copies one column chunk of rows r0,
 * r0 + kRows, ...: kRows is a multiple of 8, so the swizzle is the same for
 * all of them and both addresses advance by constants (an add and the copy
 * per 16 bytes). */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_rows(uint16_t *tile, const uint16_t *base, int stride)
{
    constexpr int kChunksPerRow = HD / 8, kRows = THREADS / kChunksPerRow;
    static_assert(THREADS % kChunksPerRow == 0 && kRows % 8 == 0 && ROWS % kRows == 0,
                  "every thread copies the same column of rows kRows apart");
    const int tid = ig_thread_index_fresh();
    const int r0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * 8;
    /* 32-bit offsets (the chooser bounds rows * stride below 2^31): fewer
     * registers live across the K/V loop than 64-bit ones. */
    const uint16_t *src = base + (r0 * stride + col);
    uint16_t *dst = &tile[swz<HD, ROWS>(r0, col)];
    IG_UNROLL
    for (int i = 0; i < ROWS / kRows; i++, src += kRows * stride)
        ig_cp_async16(dst + i * kRows * 64, src, true);
}

/* Issues the cp.async of this block's query rows q0 .. q0 + ROWS - 1 of head
 * h (rows past n zero-filled). */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_q(const prefill_attn_params &p, uint16_t *sQ, int h, int q0)
{
    const uint16_t *q = (const uint16_t *)p.q + h * p.q_head_stride;
    const int n = (int)p.n_tokens;
    if (q0 + ROWS <= n)
        load_rows<HD, ROWS, THREADS>(sQ, q + (int64_t)q0 * p.q_row_stride, (int)p.q_row_stride);
    else
        load_tile<HD, ROWS, THREADS>(sQ, q, [&](int r) -> const uint16_t * {
            return q0 + r < n ? q + (q0 + r) * p.q_row_stride : nullptr;
        });
}

/* Issues the cp.async of keys/values j0 .. j0 + ROWS - 1 of KV head hk into
 * k_dst and v_dst: positions < pos0 from the cache, the rest from the
 * chunk, past the end (kv_len = pos0 + n_tokens) zero-filled. Bases are recomputed from p (constant
 * bank) at each call rather than kept live through the K/V loop: registers
 * go to the accumulators. */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_kv(const prefill_attn_params &p, uint16_t *k_dst,
                                        uint16_t *v_dst, int hk, int j0, int pos0, int kv_len)
{
    const int64_t cache_off = hk * p.cache_head_stride;
    if (j0 + ROWS <= pos0) { /* all from the cache */
        const int64_t off = cache_off + (int64_t)j0 * p.cache_row_stride;
        load_rows<HD, ROWS, THREADS>(k_dst, (const uint16_t *)p.k_cache + off,
                                     (int)p.cache_row_stride);
        load_rows<HD, ROWS, THREADS>(v_dst, (const uint16_t *)p.v_cache + off,
                                     (int)p.cache_row_stride);
        return;
    }
    if (j0 >= pos0 && j0 + ROWS <= kv_len) { /* all from the chunk */
        const int64_t i0 = j0 - pos0;
        load_rows<HD, ROWS, THREADS>(
            k_dst, (const uint16_t *)p.k + hk * p.k_head_stride + i0 * p.k_row_stride,
            (int)p.k_row_stride);
        load_rows<HD, ROWS, THREADS>(
            v_dst, (const uint16_t *)p.v + hk * p.v_head_stride + i0 * p.v_row_stride,
            (int)p.v_row_stride);
        return;
    }
    const uint16_t *kc = (const uint16_t *)p.k_cache + cache_off;
    const uint16_t *vc = (const uint16_t *)p.v_cache + cache_off;
    const uint16_t *kn = (const uint16_t *)p.k + hk * p.k_head_stride;
    const uint16_t *vn = (const uint16_t *)p.v + hk * p.v_head_stride;
    auto row_of = [&](const uint16_t *cache, const uint16_t *chunk, int64_t stride) {
        return [=](int r) -> const uint16_t * {
            int pos = j0 + r;
            if (pos < pos0)
                return cache + pos * p.cache_row_stride;
            return pos < kv_len ? chunk + (int64_t)(pos - pos0) * stride : nullptr;
        };
    };
    load_tile<HD, ROWS, THREADS>(k_dst, kc, row_of(kc, kn, p.k_row_stride));
    load_tile<HD, ROWS, THREADS>(v_dst, vc, row_of(vc, vn, p.v_row_stride));
}

/* The fused cache write: the chunk's K and V rows q0 .. q0 + ROWS - 1 (those
 * < n) of KV head hk into cache rows pos0 + i, by the first query head of
 * each group only. Blocks read only cache rows < pos0, so no block depends
 * on another's writes. */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void write_cache_rows(const prefill_attn_params &p, int h, int q0)
{
    const int group = (int)(p.n_head / p.n_head_kv), hk = h / group;
    if (h % group != 0)
        return;
    const uint16_t *kn = (const uint16_t *)p.k + hk * p.k_head_stride;
    const uint16_t *vn = (const uint16_t *)p.v + hk * p.v_head_stride;
    const int64_t n = p.n_tokens, rows = n - q0 < ROWS ? n - q0 : ROWS;
    for (int64_t c = threadIdx.x; c < rows * (HD / 8); c += THREADS) {
        int64_t i = q0 + c / (HD / 8), col = (c % (HD / 8)) * 8;
        int64_t dst = (p.pos0 + i) * p.cache_row_stride + col;
        *(chunk16 *)((uint16_t *)p.k_cache + hk * p.cache_head_stride + dst) =
            *(const chunk16 *)(kn + i * p.k_row_stride + col);
        *(chunk16 *)((uint16_t *)p.v_cache + hk * p.cache_head_stride + dst) =
            *(const chunk16 *)(vn + i * p.v_row_stride + col);
    }
}

} /* namespace */

#endif
