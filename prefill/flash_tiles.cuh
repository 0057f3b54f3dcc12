/* prefill/flash_tiles.cuh: what both prefill attention kernels (the
 * mma.sync one, prefill/flash_attn.cu, and the wgmma one,
 * prefill/flash_attn_wgmma.cu) do the same way: the swizzled shared-memory
 * tile layout, a block's sequence (variable length), issuing the cp.async
 * of Q and K/V tiles (contiguous or paged caches), the fused write of
 * the chunk's K and V into the cache, and the per-thread softmax and output
 * steps on accumulators in the mma C-fragment layout (both kernels' S and O
 * are in it: rows g and g+8 of each 16-row tile, columns 2t, 2t+1 of each
 * 8-column block). Device code only; included once per kernel source
 * (internal linkage). Covered by the kernels' tests. */
#ifndef IGNITE_PREFILL_FLASH_TILES_CUH
#define IGNITE_PREFILL_FLASH_TILES_CUH

#include "devkit/intrinsics.cuh"
#include "prefill/flash_attn.h"
#include "kvcache/kv_devq.h"

#include <type_traits>

/* Full unrolling keeps fragment arrays in registers (a loop left rolled
 * indexes them at run time and moves them to the stack). */
#if defined(__CUDACC__)
#define IG_UNROLL _Pragma("unroll")
#else
#define IG_UNROLL
#endif

namespace {

/* The variants a build of the kernel sources instantiates: every one, except
 * in the mutant copies tests/emu/mutate.cmake writes, which define it to
 * build only the variants their test runs (a fifth of the compile or less).
 * A launcher of a variant left out refuses it. */
#ifndef IG_ATTN_BUILT
#define IG_ATTN_BUILT(variant) true
#endif
/* Likewise the head dims and element types (bf16: true, f16: false) a copy
 * builds (for_type_and_head_dim); every one in a build of the sources. */
#ifndef IG_ATTN_BUILT_HD
#define IG_ATTN_BUILT_HD(head_dim, bf16) true
#endif

/* The variant table as compile-time constants: variant<V>::block_m etc. */
template <int V> struct variant;
#define IG_FLASH_VARIANT_(id, name_, bm, bn, w, mt, qhd, hds, minb, isa_, st, sa) \
    template <> struct variant<PREFILL_ATTN_##id> {                             \
        static constexpr int block_m = bm, block_n = bn, warps = w, m_tiles = mt; \
        static constexpr int q_regs_max_hd = qhd, head_dims = hds, min_blocks = minb; \
        static constexpr int isa = isa_, stages = st, s_ahead = sa;             \
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
    static_assert(THREADS % kChunksPerRow == 0 && kRows % 2 == 0 && ROWS % kRows == 0,
                  "every thread copies the same column of rows kRows apart");
    const int tid = ig_thread_index_fresh();
    const int r0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * 8;
    /* 32-bit offsets (the chooser bounds rows * stride below 2^31): fewer
     * registers live across the K/V loop than 64-bit ones. */
    const uint16_t *src = base + (r0 * stride + col);
    uint16_t *dst = &tile[swz<HD, ROWS>(r0, col)];
    if constexpr (kRows % 8 == 0) {
        IG_UNROLL
        for (int i = 0; i < ROWS / kRows; i++, src += kRows * stride)
            ig_cp_async16(dst + i * kRows * 64, src, true);
    } else if constexpr (kRows % 4 != 0) { /* 2 rows apart (head dim 512, 4 warps) */
        IG_UNROLL
        for (int i = 0; i < ROWS / kRows; i++, src += kRows * stride)
            ig_cp_async16(&tile[swz<HD, ROWS>(r0 + i * kRows, col)], src, true);
    } else { /* 4 rows apart (head dim 256, 4 warps): two swizzles, alternating */
        uint16_t *dst2 = &tile[swz<HD, ROWS>(r0 + kRows, col)];
        IG_UNROLL
        for (int i = 0; i < ROWS / kRows; i++, src += kRows * stride)
            ig_cp_async16((i % 2 ? dst2 + (i - 1) * kRows * 64 : dst + i * kRows * 64), src,
                          true);
    }
}

/* Issues the cp.async of a [ROWS][HD] tile whose rows r < split are
 * a + r * stride and the others b + (r - split) * stride: a paged cache's
 * tile across two blocks (block_n 48). */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_rows_split(uint16_t *tile, const uint16_t *a,
                                                const uint16_t *b, int split, int stride)
{
    constexpr int kChunksPerRow = HD / 8, kRows = THREADS / kChunksPerRow;
    static_assert(THREADS % kChunksPerRow == 0 && ROWS % kRows == 0,
                  "every thread copies the same column of rows kRows apart");
    const int tid = ig_thread_index_fresh();
    const int r0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * 8;
    IG_UNROLL
    for (int i = 0; i < ROWS / kRows; i++) {
        const int r = r0 + i * kRows;
        const uint16_t *src = r < split ? a + (r * stride + col) : b + ((r - split) * stride + col);
        ig_cp_async16(&tile[swz<HD, ROWS>(r, col)], src, true);
    }
}

/* The sequence a block works on: its first row of the step's q, k, v, o
 * and lse, its rows, the position of its first row and its index (its
 * block table at block_table + s * table_stride). Positions and rows fit in
 * 32 bits (the chooser checks n_ctx). */
struct attn_seq {
    int row0, n, pos0, s;
};

/* The whole call as one sequence (params without seqs). */
__device__ __forceinline__ attn_seq attn_seq_whole(const prefill_attn_params &p)
{
    return attn_seq{0, (int)p.n_tokens, (int)p.pos0, 0};
}

/* Sequence s of a variable-length call (p.seqs, device memory), or the
 * whole call. */
__device__ __forceinline__ attn_seq attn_seq_at(const prefill_attn_params &p, int s)
{
    if (!p.seqs)
        return attn_seq_whole(p);
    const prefill_attn_seq q = p.seqs[s];
    return attn_seq{q.row0, q.n_rows, q.pos0, s};
}

/* Issues the cp.async of this block's query rows q0 .. q0 + ROWS - 1 of head
 * h of sequence sq (rows past its n zero-filled). */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_q(const prefill_attn_params &p, uint16_t *sQ, int h, int q0,
                                       const attn_seq &sq)
{
    const uint16_t *q = (const uint16_t *)p.q + h * p.q_head_stride + sq.row0 * p.q_row_stride;
    const int n = sq.n;
    if (q0 + ROWS <= n)
        load_rows<HD, ROWS, THREADS>(sQ, q + (int64_t)q0 * p.q_row_stride, (int)p.q_row_stride);
    else
        load_tile<HD, ROWS, THREADS>(sQ, q, [&](int r) -> const uint16_t * {
            return q0 + r < n ? q + (q0 + r) * p.q_row_stride : nullptr;
        });
}

/* Issues the cp.async of keys/values j0 .. j0 + ROWS - 1 of KV head hk of
 * sequence sq into k_dst and v_dst: positions < its pos0 from the cache
 * (PAGED: through its block table, blocks of 64 positions), the rest from
 * its rows of the chunk, past the end (kv_len = pos0 + n) zero-filled.
 * Bases are recomputed from p (constant bank) at each call rather than kept
 * live through the K/V loop: registers go to the accumulators. */
template <int HD, int ROWS, int THREADS, bool PAGED = false>
__device__ __forceinline__ void load_kv(const prefill_attn_params &p, uint16_t *k_dst,
                                        uint16_t *v_dst, int hk, int j0, const attn_seq &sq,
                                        int kv_len)
{
    const int pos0 = sq.pos0;
    const int64_t cache_off = hk * p.cache_head_stride;
    const int32_t *table = PAGED ? p.block_table + sq.s * p.table_stride : nullptr;
    if (j0 + ROWS <= pos0) { /* all from the cache */
        int64_t off = cache_off + (int64_t)(PAGED ? j0 % 64 : j0) * p.cache_row_stride;
        if constexpr (PAGED) {
            off += (int64_t)table[j0 / 64] * p.cache_block_stride;
            if constexpr (64 % ROWS != 0) { /* tiles of 48 keys may straddle two blocks */
                const int split = 64 - j0 % 64;
                if (split < ROWS) {
                    const int64_t off2 = cache_off + (int64_t)table[j0 / 64 + 1] *
                                                         p.cache_block_stride;
                    load_rows_split<HD, ROWS, THREADS>(
                        k_dst, (const uint16_t *)p.k_cache + off,
                        (const uint16_t *)p.k_cache + off2, split, (int)p.cache_row_stride);
                    load_rows_split<HD, ROWS, THREADS>(
                        v_dst, (const uint16_t *)p.v_cache + off,
                        (const uint16_t *)p.v_cache + off2, split, (int)p.cache_row_stride);
                    return;
                }
            }
        }
        load_rows<HD, ROWS, THREADS>(k_dst, (const uint16_t *)p.k_cache + off,
                                     (int)p.cache_row_stride);
        load_rows<HD, ROWS, THREADS>(v_dst, (const uint16_t *)p.v_cache + off,
                                     (int)p.cache_row_stride);
        return;
    }
    if (j0 >= pos0 && j0 + ROWS <= kv_len) { /* all from the chunk */
        const int64_t i0 = (int64_t)sq.row0 + (j0 - pos0);
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
            if (pos < pos0) {
                if constexpr (PAGED)
                    return cache + (int64_t)table[pos / 64] * p.cache_block_stride +
                           (pos % 64) * p.cache_row_stride;
                return cache + pos * p.cache_row_stride;
            }
            return pos < kv_len ? chunk + ((int64_t)sq.row0 + (pos - pos0)) * stride : nullptr;
        };
    };
    load_tile<HD, ROWS, THREADS>(k_dst, kc, row_of(kc, kn, p.k_row_stride));
    load_tile<HD, ROWS, THREADS>(v_dst, vc, row_of(vc, vn, p.v_row_stride));
}

/* 8 quants of a quantized pool, one 8-byte load. */
struct alignas(8) kvq_u32x2 {
    uint32_t x, y;
};

/* f16 bits to f32 (a quantized pool's scale). */
__device__ __forceinline__ float kvq_half(uint32_t h)
{
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#elif defined(__CUDACC__)
    return 0.0f; /* host pass of nvcc: never called */
#else
    return ig_f16_to_f32((uint16_t)h);
#endif
}

/* Columns col .. col + 7 of row r of the (block, KV head) region at
 * element offset e of a pool of `type` (kvcache/kv_devq.h) as 8 f16:
 * f16 as is, quantized as f16(d q). */
template <int HD>
__device__ __forceinline__ chunk16 kvq_chunk(const void *cache, int type, int64_t e, int r,
                                             int col)
{
    if (type == KVQ_F16)
        return *(const chunk16 *)((const uint16_t *)cache + e + r * HD + col);
    const unsigned char *region = (const unsigned char *)cache + kvq_region(e);
    const kvq_u32x2 qs = *(const kvq_u32x2 *)(region + kvq_quant_at(HD, r, col));
    const float d = kvq_half(*(const uint16_t *)(region + kvq_scale_at(HD, r, col)));
    chunk16 c;
    for (int i = 0; i < 4; i++) {
        const uint32_t w = i < 2 ? qs.x : qs.y, sh = 16 * (i % 2);
        c.w[i] = ig_pack2<ig_f16_t>(kvq_value(type, (w >> sh) & 0xffu, d),
                                    kvq_value(type, (w >> (sh + 8)) & 0xffu, d));
    }
    return c;
}

/* A quantized pool's K/V tile (p.cache_k_dtype / cache_v_dtype): keys
 * j0 .. j0 + ROWS - 1 of KV head hk of sequence sq, every one from the pool
 * through its block table (the chunk's rows are there already: ops/gpu_kvq.h),
 * dequantized to f16 on the way into the swizzled tile; past kv_len zeros.
 * Plain loads and shared stores, not cp.async (the bytes change on the way):
 * the pipeline's barriers order them as they order the copies. */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_kv_quant(const prefill_attn_params &p, uint16_t *k_dst,
                                              uint16_t *v_dst, int hk, int j0,
                                              const attn_seq &sq, int kv_len)
{
    const int32_t *table = p.block_table + sq.s * p.table_stride;
    constexpr int kChunks = ROWS * HD / 8;
    for (int c = ig_thread_index_fresh(); c < kChunks; c += THREADS) {
        const int r = c / (HD / 8), col = (c % (HD / 8)) * 8, pos = j0 + r;
        chunk16 kc = {}, vc = {};
        if (pos < kv_len) {
            const int64_t e = (int64_t)table[pos / 64] * p.cache_block_stride +
                              hk * p.cache_head_stride;
            kc = kvq_chunk<HD>(p.k_cache, p.cache_k_dtype, e, pos % 64, col);
            vc = kvq_chunk<HD>(p.v_cache, p.cache_v_dtype, e, pos % 64, col);
        }
        ig_sts((chunk16 *)&k_dst[swz<HD, ROWS>(r, col)], kc);
        ig_sts((chunk16 *)&v_dst[swz<HD, ROWS>(r, col)], vc);
    }
}

/* The K/V tiles' way through shared memory, the same in both kernels:
 * variant<V>::stages buffers, tile t in stage t % stages; while tile t
 * computes, tiles up to t + stages - 1 are loading, so stages - 1 - s_ahead
 * tiles of copies hide behind compute (s_ahead: tile t + 1 must be resident
 * as well, for its S issued during tile t). One barrier per tile: at the top
 * of tile t, once this thread's copies of tile t (and t + s_ahead) have
 * landed, the barrier makes everyone's visible and shows that no warp still
 * reads tile t - 1's stage, which the copies issued right after refill with
 * tile t + stages - 1. Every step commits a group, empty past the last
 * tile, so the wait counts stay constant. */
template <int V, class Load> struct kv_pipeline {
    static constexpr int kStages = variant<V>::stages, kAhead = variant<V>::s_ahead;
    static_assert(kStages >= 2 + kAhead && kStages <= 4, "stages: 2..4, one more for s_ahead");
    int n_tiles;
    Load load; /* load(tile, stage): the tile's cp.async, not committed */

    /* Before the loop, after the Q copies (which join tile 0's group):
     * tiles 0 .. stages - 2. */
    __device__ __forceinline__ void start() const
    {
        IG_UNROLL
        for (int t = 0; t < kStages - 1; t++) {
            if (t < n_tiles)
                load(t, t);
            ig_cp_async_commit();
        }
    }

    /* With tile t current (tiles up to t + stages - 2 issued): waits until
     * this thread's copies up to tile t + kMore have landed, runs landed()
     * (the wgmma kernel's proxy fence), then the barrier. */
    template <int kMore, class Landed>
    __device__ __forceinline__ void wait_tile(Landed landed) const
    {
        ig_cp_async_wait<kStages - 2 - kMore>();
        landed();
        ig_syncthreads();
    }

    /* The top of tile t: tile t (and t + s_ahead) resident for every thread,
     * tile t + stages - 1 issued into tile t - 1's stage. Returns t's stage. */
    template <class Landed> __device__ __forceinline__ int land(int tile, Landed landed) const
    {
        const int stage = (int)((unsigned)tile % kStages);
        wait_tile<kAhead>(landed);
        if (tile + kStages - 1 < n_tiles) /* into tile - 1's stage */
            load(tile + kStages - 1, stage == 0 ? kStages - 1 : stage - 1);
        ig_cp_async_commit();
        return stage;
    }
    __device__ __forceinline__ int land(int tile) const
    {
        return land(tile, [] {});
    }
};

template <int V, class Load>
__device__ __forceinline__ kv_pipeline<V, Load> make_kv_pipeline(int n_tiles, Load load)
{
    return kv_pipeline<V, Load>{n_tiles, load};
}

/* The fused cache write: sequence sq's K and V rows q0 .. q0 + ROWS - 1
 * (those < its n) of KV head hk into cache rows pos0 + i (through its
 * block table: PAGED), by the first query head of each group only, THREADS
 * threads numbered tid. Blocks read only cache rows < pos0, so no block
 * depends on another's writes. */
template <int HD, int ROWS, int THREADS, bool PAGED = false>
__device__ __forceinline__ void write_cache_rows(const prefill_attn_params &p, int h, int q0,
                                                 int tid, const attn_seq &sq)
{
    const int group = (int)(p.n_head / p.n_head_kv), hk = h / group;
    if (h % group != 0)
        return;
    const uint16_t *kn = (const uint16_t *)p.k + hk * p.k_head_stride + sq.row0 * p.k_row_stride;
    const uint16_t *vn = (const uint16_t *)p.v + hk * p.v_head_stride + sq.row0 * p.v_row_stride;
    const int64_t n = sq.n, rows = n - q0 < ROWS ? n - q0 : ROWS;
    for (int64_t c = tid; c < rows * (HD / 8); c += THREADS) {
        int64_t i = q0 + c / (HD / 8), col = (c % (HD / 8)) * 8, pos = sq.pos0 + i;
        int64_t dst = hk * p.cache_head_stride + col;
        if constexpr (PAGED)
            dst += (int64_t)p.block_table[sq.s * p.table_stride + pos / p.block_rows] *
                       p.cache_block_stride +
                   (pos % p.block_rows) * p.cache_row_stride;
        else
            dst += pos * p.cache_row_stride;
        *(chunk16 *)((uint16_t *)p.k_cache + dst) = *(const chunk16 *)(kn + i * p.k_row_stride + col);
        *(chunk16 *)((uint16_t *)p.v_cache + dst) = *(const chunk16 *)(vn + i * p.v_row_stride + col);
    }
}

/* Calls launch(T{}, std::integral_constant<int, HD>{}) for p's element type
 * and head dim, those variant V is built for (the launchers' instantiation
 * of their kernel templates); a head dim V lacks is an internal error. */
template <int V, class Launch>
int for_type_and_head_dim(const prefill_attn_params &p, Launch &&launch)
{
    const bool bf16 = p.dtype == PREFILL_ATTN_BF16;
    if constexpr ((variant<V>::head_dims & 1) != 0) {
        if constexpr (IG_ATTN_BUILT_HD(64, true))
            if (p.head_dim == 64 && bf16)
                return launch(ig_bf16_t{}, std::integral_constant<int, 64>{});
        if constexpr (IG_ATTN_BUILT_HD(64, false))
            if (p.head_dim == 64 && !bf16)
                return launch(ig_f16_t{}, std::integral_constant<int, 64>{});
    }
    if constexpr ((variant<V>::head_dims & 2) != 0) {
        if constexpr (IG_ATTN_BUILT_HD(128, true))
            if (p.head_dim == 128 && bf16)
                return launch(ig_bf16_t{}, std::integral_constant<int, 128>{});
        if constexpr (IG_ATTN_BUILT_HD(128, false))
            if (p.head_dim == 128 && !bf16)
                return launch(ig_f16_t{}, std::integral_constant<int, 128>{});
    }
    if constexpr ((variant<V>::head_dims & 4) != 0) {
        if constexpr (IG_ATTN_BUILT_HD(256, true))
            if (p.head_dim == 256 && bf16)
                return launch(ig_bf16_t{}, std::integral_constant<int, 256>{});
        if constexpr (IG_ATTN_BUILT_HD(256, false))
            if (p.head_dim == 256 && !bf16)
                return launch(ig_f16_t{}, std::integral_constant<int, 256>{});
    }
    if constexpr ((variant<V>::head_dims & 8) != 0 && /* f16 only (the chooser's rule) */
                  IG_ATTN_BUILT_HD(512, false))
        if (p.head_dim == 512 && !bf16)
            return launch(ig_f16_t{}, std::integral_constant<int, 512>{});
    return ig_error(IG_E_INTERNAL, "flash attention: variant %s not built for head_dim %lld (%s)",
                    prefill_attn_variant_name(V), (long long)p.head_dim, bf16 ? "bf16" : "f16");
}

/* Blocks a query tile and head: head dim 512 splits O's columns in two
 * halves (an accumulator of 512 columns does not fit a warp's registers),
 * each block computing S over the whole head (the mma.sync kernel). */
__host__ __device__ constexpr int attn_o_passes(int64_t head_dim)
{
    return head_dim > 256 ? 2 : 1;
}

/* Launches an attention kernel (an instantiation of either kernel, taking
 * the params and scale * log2 e) on tile's grid and block with its dynamic
 * shared memory, raising the kernel's limit past the 48 KB default first on
 * the device. */
template <class Kernel>
int launch_attention(Kernel *flash_attn, const prefill_attn_params &p,
                     const prefill_attn_tile &tile, cudaStream_t stream)
{
    const float scale_log2 = p.scale * 1.4426950408889634f;
    dim3 grid((unsigned)tile.n_q_tiles, (unsigned)(p.n_head * attn_o_passes(p.head_dim)),
              p.seqs ? (unsigned)p.n_seqs : 1u);
    dim3 block(32u * (unsigned)tile.warps);
#if defined(__CUDACC__)
    IG_CUDA_CHECK(cudaFuncSetAttribute(flash_attn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)tile.smem_bytes));
#endif
    return IG_LAUNCH_DEP(flash_attn, grid, block, tile.smem_bytes, stream, p, scale_log2);
}

/* Masks the scores a row may not see, where the tile crosses this warp's
 * diagonal, the end of the keys or (wlo) a sliding window's edge: key k of
 * the tile is visible to the warp's row r when k <= diag + r, k < n_keys
 * and k >= wlo + r (wlo <= -16 kMT: no window edge in the tile).
 * s[mt][j][e]: row 16 mt + g + 8 (e / 2), key 8 j + 2 t + e % 2. */
template <int kMT, int kBlockN>
__device__ __forceinline__ void mask_scores(float (&s)[kMT][kBlockN / 8][4], int diag,
                                            int n_keys, int g, int t, int wlo = -16 * kMT)
{
    if (diag >= kBlockN - 1 && n_keys >= kBlockN && wlo + 16 * kMT - 1 <= 0)
        return;
    IG_UNROLL
    for (int mt = 0; mt < kMT; mt++)
        for (int j = 0; j < kBlockN / 8; j++)
            for (int e = 0; e < 4; e++) {
                int key = j * 8 + 2 * t + (e & 1), row = mt * 16 + g + 8 * (e / 2);
                if (key > diag + row || key >= n_keys || key < wlo + row)
                    s[mt][j][e] = -INFINITY;
            }
}

/* One tile's online softmax step on this thread's rows g (r = 0) and g + 8
 * (r = 1) of each m16 tile: the new row maxima m, O and the sums l
 * rescaled, and the scores s replaced by exp2(s * scale_log2 - offset) with
 * their sums added to l (this lane's part; the quad's parts are summed at
 * the end). O and l are rescaled only when one of the warp's rows has a new
 * maximum (else every factor is exactly 1), which past the first tiles of a
 * long row is the rare case. A row with every key masked so far keeps a
 * zero offset (no NaN). */
template <int kMT, int kBlockN, int HD>
__device__ __forceinline__ void online_softmax(float (&s)[kMT][kBlockN / 8][4],
                                               float (&o)[kMT][HD / 8][4], float (&m)[kMT][2],
                                               float (&l)[kMT][2], float scale_log2)
{
    float mx[kMT][2];
    bool grew = false;
    IG_UNROLL
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            float x = m[mt][r];
            IG_UNROLL
            for (int j = 0; j < kBlockN / 8; j++)
                x = fmaxf(x, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
            x = fmaxf(x, ig_shfl_xor_f32(x, 1));
            x = fmaxf(x, ig_shfl_xor_f32(x, 2));
            mx[mt][r] = x;
            grew |= x != m[mt][r];
        }
    auto offset = [&](float row_max) { return row_max == -INFINITY ? 0.0f : row_max * scale_log2; };
    if (ig_vote_any(grew)) {
        IG_UNROLL
        for (int mt = 0; mt < kMT; mt++)
            for (int r = 0; r < 2; r++) {
                const float corr = ig_exp2_approx(m[mt][r] * scale_log2 - offset(mx[mt][r]));
                l[mt][r] *= corr;
                IG_UNROLL
                for (int d = 0; d < HD / 8; d++) {
                    o[mt][d][2 * r] *= corr;
                    o[mt][d][2 * r + 1] *= corr;
                }
            }
    }
    IG_UNROLL
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            m[mt][r] = mx[mt][r];
            const float base = offset(mx[mt][r]);
            IG_UNROLL
            for (int j = 0; j < kBlockN / 8; j++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[mt][j][e] = ig_exp2_approx(s[mt][j][e] * scale_log2 - base);
                    l[mt][r] += s[mt][j][e];
                }
        }
}

/* P (the exponentials left in s) rounded to T and packed as the A operand
 * of the P V k-steps: the accumulators of n8 blocks 2kk and 2kk+1 are
 * exactly k-step kk's A fragment (mma.m16n8k16 and wgmma's A-in-registers
 * share the layout), at half the registers of S. */
template <class T, int kMT, int kBlockN>
__device__ __forceinline__ void pack_p(const float (&s)[kMT][kBlockN / 8][4],
                                       uint32_t (&pa)[kBlockN / 16][kMT][4])
{
    IG_UNROLL
    for (int kk = 0; kk < kBlockN / 16; kk++)
        for (int mt = 0; mt < kMT; mt++) {
            pa[kk][mt][0] = ig_pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[kk][mt][1] = ig_pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[kk][mt][2] = ig_pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[kk][mt][3] = ig_pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
}

/* The epilogue: O / l rounded to T into the rows of this warp (from row0
 * of sequence sq) that exist, columns col0 .. col0 + HD - 1 (head dim 512:
 * a half, its lse from the first half's block), and their log-sum-exp in
 * natural log. With
 * gpt-oss's sinks, head h's sink joins l here, once a row (the running
 * state and the sink brought to their common max: no overflow). */
template <class T, int kMT, int HD>
__device__ __forceinline__ void store_rows(const prefill_attn_params &p,
                                           const float (&o)[kMT][HD / 8][4],
                                           const float (&m)[kMT][2], const float (&l)[kMT][2],
                                           int row0, int h, int g, int t, float scale_log2,
                                           const attn_seq &sq, int col0 = 0)
{
    IG_UNROLL
    for (int mt = 0; mt < kMT; mt++)
        for (int r = 0; r < 2; r++) {
            float lr = l[mt][r];
            lr += ig_shfl_xor_f32(lr, 1);
            lr += ig_shfl_xor_f32(lr, 2);
            const int row = row0 + mt * 16 + g + 8 * r;
            if (row >= sq.n)
                continue;
            float base = m[mt][r] == -INFINITY ? 0.0f : m[mt][r] * scale_log2, keep = 1.0f;
            if (p.sinks) {
                const float sink = p.sinks[h] * 1.4426950408889634f, top = fmaxf(base, sink);
                keep = ig_exp2_approx(base - top);
                lr = lr * keep + ig_exp2_approx(sink - top);
                base = top;
            }
            const float inv = keep / lr;
            const int64_t srow = (int64_t)sq.row0 + row; /* the step's row */
            uint16_t *out = (uint16_t *)p.o + srow * p.o_row_stride + h * p.o_head_stride + col0;
            IG_UNROLL
            for (int d = 0; d < HD / 8; d++)
                *(uint32_t *)&out[d * 8 + 2 * t] =
                    ig_pack2<T>(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
            if (p.lse && t == 0 && col0 == 0)
                p.lse[(int64_t)h * p.lse_head_stride + srow] =
                    (base + log2f(lr)) * 0.6931471805599453f;
        }
}

} /* namespace */

#endif
