/* ops/gpu_qmma_tile.cuh: the tensor-core main loop over quantized weights
 * that gk_qmma (ops/gpu_qgemm.cu) and gk_moe_mma (ops/gpu_moe.cu) share.
 * A block of 4 warps accumulates a 64-row W tile times 64 rows of x (tokens,
 * or an expert's pairs), each warp 32 x 32 (2 m16 x 4 n8 mma.sync tiles,
 * f16 in, f32 accumulate), over k-tiles of 64 columns. Per k-tile every
 * thread dequantizes one 32-element block of its weight row (qb_values32:
 * gk_qdequant_f16's values, bit for bit; MXFP4's too) into the swizzled f16
 * W tile (f16 weights: copied by cp.async as they are), and
 * the caller's load_x brings x's tile by 16-byte cp.async. Two stages: while
 * the tensor cores run on k-tile t, the copies of t + 1 are in flight and
 * its weight bytes sit in registers, to be dequantized into the other stage
 * after the mma; one barrier a k-tile. Which weight row a thread reads and
 * which rows of x the tile holds are the kernel's, as is the epilogue.
 * Covered by tests/emu/test_qmm_emu.c and tests/emu/test_moe_emu.c. */
#ifndef IGNITE_OPS_GPU_QMMA_TILE_CUH
#define IGNITE_OPS_GPU_QMMA_TILE_CUH

#include "ops/gpu_qblocks.cuh"

namespace {
namespace qmma_tile {

constexpr int kBM = 64, kBN = 64, kBK = 64; /* weight rows, x rows, columns per tile */
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = kBM * kBK;                             /* f16 elements of one tile */
constexpr size_t kSmemBytes = 4 * kTile * sizeof(uint16_t); /* W[2], X[2]: 32 KiB */
static_assert(kBM == kBN, "W and x tiles share the swizzle and size");
static_assert(kBM * (kBK / 32) == kThreads, "one 32-element weight block per thread");

/* Element offset of (row, col) in a [64][64] tile: 16-byte chunks XORed
 * with row % 8 (col % 8 == 0 for every caller), so ldmatrix reads the
 * tiles without bank conflicts. */
__device__ __forceinline__ int swz(int row, int col)
{
    return row * kBK + ((((col / 8) ^ row) & 7) << 3) + (col & 7);
}

/* acc = the warp's 32 W rows (warp % 2) x 32 x rows (warp / 2) of W x^T
 * over `cols` columns (the block's, the same for every thread). This
 * thread's weight block each k-tile: row wrow of w (zeros where !row_ok or
 * past cols), stored at tile row threadIdx.x / 2, columns 32 (threadIdx.x %
 * 2). load_x(kt, dst): issues and commits the cp.async of k-tile kt's x
 * tile into dst (x row r, column c at swz(r, c); zeros past the ends).
 * smem: kSmemBytes of dynamic shared memory. start(): called once in every
 * thread after the first k-tile's weight loads are issued and before the
 * first load_x (a dependent launch's wait: gk_qmma's). Ends with no copy in
 * flight; the caller's barrier precedes any reuse of smem. */
template <int TYPE, class LoadX, class Start>
__device__ __forceinline__ void mainloop(const gk_qmat &w, const int64_t wrow, const bool row_ok,
                                         const int64_t cols, uint16_t *smem, const LoadX &load_x,
                                         const Start &start, float (&acc)[2][4][4])
{
    uint16_t *ws = smem, *xs = smem + 2 * kTile;
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t n_xb = cols / 32, k_tiles = (cols + kBK - 1) / kBK;
    const int my_row = tid / 2, my_half = tid % 2;
    qraw raw;
    /* f16 weights (gk_moe_mma's f16 experts) need no dequantization: load_w
     * copies the block's 64 bytes straight into stage dst by cp.async (its
     * own commit group, which the loop's wait covers) and store_w has
     * nothing left to do. The block types: load_w brings the bytes into
     * registers, store_w writes their f16 values into dst. */
    auto load_w = [&](int64_t kt, uint16_t *dst) {
        const int64_t xb = kt * 2 + my_half;
        if constexpr (TYPE == QUANT_F16) {
            const bool ok = row_ok && xb < n_xb;
            const uint16_t *src = (const uint16_t *)w.q + (ok ? wrow * cols + 32 * xb : 0);
            IG_UNROLL
            for (int c = 0; c < 4; c++)
                ig_cp_async16(&dst[swz(my_row, 32 * my_half + 8 * c)], ok ? src + 8 * c : src,
                              ok);
            ig_cp_async_commit();
        } else {
            (void)dst;
            if (row_ok && xb < n_xb)
                raw = qb_load32<TYPE>(w, wrow, xb);
        }
    };
    auto store_w = [&](int64_t kt, uint16_t *dst) {
        if constexpr (TYPE != QUANT_F16) {
            const int64_t xb = kt * 2 + my_half;
            float v[32];
            if (row_ok && xb < n_xb) {
                qb_values32<TYPE>(raw, (int)(xb % 8), v);
            } else {
                IG_UNROLL
                for (int i = 0; i < 32; i++)
                    v[i] = 0;
            }
            IG_UNROLL
            for (int c = 0; c < 4; c++) {
                gk_u32x4 o;
                IG_UNROLL
                for (int k = 0; k < 4; k++)
                    o.w[k] = ig_pack2<ig_f16_t>(v[8 * c + 2 * k], v[8 * c + 2 * k + 1]);
                ig_sts((gk_u32x4 *)&dst[swz(my_row, 32 * my_half + 8 * c)], o);
            }
        } else {
            (void)kt, (void)dst;
        }
    };

    IG_UNROLL
    for (int mt = 0; mt < 2; mt++)
        IG_UNROLL
        for (int nt = 0; nt < 4; nt++)
            IG_UNROLL
            for (int i = 0; i < 4; i++)
                acc[mt][nt][i] = 0;
    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 W rows and 32 x rows */

    load_w(0, ws); /* the weights are no earlier kernel's: before start */
    start();
    load_x(0, xs);
    store_w(0, ws);
    for (int64_t kt = 0; kt < k_tiles; kt++) {
        const int cur = (int)(kt % 2), nxt = cur ^ 1;
        ig_cp_async_wait<0>();
        ig_syncthreads(); /* stage cur complete; stage nxt no longer read */
        const bool more = kt + 1 < k_tiles;
        if (more) {
            load_x(kt + 1, xs + nxt * kTile);
            load_w(kt + 1, ws + nxt * kTile); /* in registers across the mma (f16: copied) */
        }
        const uint16_t *wt = ws + cur * kTile, *xt = xs + cur * kTile;
        IG_UNROLL
        for (int ks = 0; ks < kBK / 16; ks++) {
            uint32_t a[2][4], b[4][2];
            const int mi = lane / 8, ri = lane % 8;
            IG_UNROLL
            for (int mt = 0; mt < 2; mt++) {
                const int r = wm * 32 + mt * 16 + (mi % 2) * 8 + ri;
                ig_ldmatrix_x4(a[mt], &wt[swz(r, ks * 16 + (mi / 2) * 8)]);
            }
            IG_UNROLL
            for (int np = 0; np < 2; np++) {
                uint32_t r4[4];
                const int t = wn * 32 + np * 16 + (mi / 2) * 8 + ri;
                ig_ldmatrix_x4(r4, &xt[swz(t, ks * 16 + (mi % 2) * 8)]);
                b[2 * np][0] = r4[0], b[2 * np][1] = r4[1];
                b[2 * np + 1][0] = r4[2], b[2 * np + 1][1] = r4[3];
            }
            IG_UNROLL
            for (int mt = 0; mt < 2; mt++)
                IG_UNROLL
                for (int nt = 0; nt < 4; nt++)
                    ig_mma_16816<ig_f16_t>(acc[mt][nt], a[mt], b[nt], acc[mt][nt]);
        }
        if (more)
            store_w(kt + 1, ws + nxt * kTile);
    }
}

} /* namespace qmma_tile */
} /* namespace */

#endif
