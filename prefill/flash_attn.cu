/* prefill/flash_attn.cu: the fused causal prefill attention kernel
 * (FlashAttention-2 structure) and its launcher; semantics, cache layout and
 * params in prefill/flash_attn.h.
 *
 * One block per (query tile of block_m rows, query head, sequence); each of
 * its warps owns m_tiles m16 tiles (16 or 32 query rows). Variable length
 * (p.seqs): the grid has the query tiles of the longest sequence, a block
 * past its sequence's rows exits at once, and everything below is per
 * sequence (its rows, its pos0, its block table). K/V tiles of block_n keys
 * stream through shared memory with cp.async in `stages` buffers (tiles
 * t+1 .. t+stages-1 load while tile t computes; one barrier per tile, see
 * kv_pipeline in flash_tiles.cuh). The tile sizes are a template parameter:
 * every variant of PREFILL_ATTN_VARIANTS (prefill/flash_attn.h) is compiled,
 * prefill_attn_choose picks one per call. S = Q K^T and O += P V run on
 * tensor cores (mma.m16n8k16, fp32 accumulate) fed by ldmatrix (Q kept in
 * registers, or reloaded from shared memory every k-step where registers are
 * short); the online softmax lives in registers, its row reductions are quad
 * shuffles, exp2 (the bare MUFU.EX2, ig_exp2_approx) with the scale folded
 * in. Tiles past the diagonal are never visited, 16-key slices past a warp's
 * last row are skipped, and the mask is applied only to tiles that cross the
 * warp's diagonal or the end of the keys. A sliding window (p.window)
 * starts the K/V loop at the first tile the block's first query sees
 * (tiles wholly behind every row's window are never loaded), skips the
 * 16-key slices behind the warp's first row's window, and masks the keys
 * behind each row's. Head dim 256 in the variants of one m16 tile per warp
 * (Q reloaded from shared memory); head dim 512 (m64w4n16) the same, each
 * block holding half of O's columns (attn_o_passes: blockIdx.y = 2 h +
 * half; both compute S over the whole head, the same bits, so the halves'
 * softmax agrees). Shared tiles use the 128-byte XOR swizzle
 * (16-byte chunk index ^ row % 8), conflict-free for cp.async and ldmatrix.
 * The first query head of each KV group also copies its rows of the chunk's
 * K and V into the cache (blocks read only cache rows < pos0, so no block
 * depends on another's writes). A paged cache (the batch engine's pool of
 * 64-position blocks) is read through the block table: a K/V tile within
 * one block as one run of rows, a 48-key tile across two blocks as two.
 *
 * Built twice: by nvcc for sm_80/sm_90 (prefill_attn_cuda) and, as plain C++
 * through tests/emu/flash_attn_emu.cc, for the CPU emulator
 * (prefill_attn_emu). Covered by tests/emu/test_flash_attn_emu.c and
 * tests/gpu/test_flash_attn_gpu.c. */
#include "devkit/intrinsics.cuh" /* first: it defines IG_EMU, which dev_entry.h reads */
#include "devkit/dev_entry.h"
#include "prefill/flash_attn.h"
#include "prefill/flash_tiles.cuh"

namespace {

/* ldmatrix addressing of 16x16 blocks: a lane addresses row rl (0..15) and
 * 8-column half cl (0/1) of each block. With z = swz(rl, 8 cl) (the lane's
 * offset in the first block), the block at row r16 and column c16
 * (multiples of 16, compile-time after unrolling, or warp-uniform) has
 *   swz(r16 + rl, c16 + 8 cl) = (c16 / 64) * ROWS * 64 + r16 * 64
 *                               + (z ^ (((c16 % 64) / 8) << 3))
 * since r16 % 8 == 0, z's chunk bits are cl ^ rl % 8 and an even chunk index
 * plus cl is the same as XOR with cl. One register and one XOR per
 * ldmatrix, instead of address math the compiler hoisted out of the K/V
 * loop (and spilled). */
template <int HD, int ROWS>
__device__ __forceinline__ int lane_swz(int rl, int cl)
{
    return swz<HD, ROWS>(rl, 8 * cl);
}

template <int ROWS>
__device__ __forceinline__ int blk_off(int z, int r16, int c16)
{
    return (c16 / 64) * ROWS * 64 + r16 * 64 + (z ^ (((c16 % 64) / 8) << 3));
}

template <class T, int HD, int V>
__global__ void __launch_bounds__(32 * variant<V>::warps, variant<V>::min_blocks)
flash_attn_kernel(const prefill_attn_params p, const float scale_log2)
{
    constexpr int kWarps = variant<V>::warps, kThreads = 32 * kWarps;
    constexpr int kBlockM = variant<V>::block_m; /* query rows per block */
    constexpr int kBlockN = variant<V>::block_n; /* keys per K/V tile */
    constexpr int kMT = variant<V>::m_tiles;     /* m16 tiles per warp */
    constexpr int kRowsW = 16 * kMT;             /* query rows per warp */
    constexpr bool kQRegs = HD <= variant<V>::q_regs_max_hd;
    constexpr int kHDO = HD / attn_o_passes(HD); /* O's columns a block computes */
    /* Fragments prefetched on full tiles (see "A full tile"): not for the
     * variants that force 2+ blocks per SM (min_blocks), short of registers,
     * nor at head dim 256 (its 64 unrolled steps per tile took a stack
     * frame at 253 registers). */
    constexpr bool kPrefetch = variant<V>::min_blocks <= 1 && HD <= 128;
    static_assert(kBlockM == kRowsW * kWarps, "the warps' m16 tiles make up the block's rows");
    static_assert(kBlockN % 16 == 0, "keys come in k16 steps of the P.V mma");
    static_assert(variant<V>::s_ahead == 0, "S one tile ahead is the wgmma kernel's");
    static_assert(
        (variant<V>::head_dims & (HD == 64 ? 1 : HD == 128 ? 2 : HD == 256 ? 4 : 8)) != 0,
        "variant not built for HD");

    constexpr int kStages = variant<V>::stages;  /* K/V tiles in shared memory */
    IG_DYN_SHARED(uint16_t, smem);
    uint16_t *sQ = smem;                         /* [kBlockM][HD] */
    uint16_t *sK = sQ + kBlockM * HD;            /* [kStages][kBlockN][HD] */
    uint16_t *sV = sK + kStages * kBlockN * HD;  /* [kStages][kBlockN][HD] */

    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    /* Positions fit in 32 bits (the chooser checks pos0 + n_tokens < 2^31):
     * 32-bit loop state leaves registers to the accumulators. Heaviest tiles
     * (most keys) first: better tail balance. */
    const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * kBlockM;
    const int h = (int)blockIdx.y / attn_o_passes(HD), group = (int)(p.n_head / p.n_head_kv);
    const int hk = h / group, col0 = (int)blockIdx.y % attn_o_passes(HD) * kHDO; /* O's */
    /* Launched with IG_LAUNCH_DEP (IGNITE_PDL=1): q, k, v, the sequences and
     * the tables may be the kernels' before; every block waits, then lets
     * the next kernel's blocks start. */
    ig_grid_dependency_wait();
    ig_launch_dependents();
    /* The block's sequence (blockIdx.z; the whole call without seqs): a
     * block past its rows has nothing to do (the grid has the query tiles
     * of the longest). Read again (attn_seq_at) where the K/V loop needs it
     * rather than held through it: without seqs its fields are the params'
     * (constant bank), with them a load after the tile's barrier, and four
     * registers held would spill m64w4n32 (three blocks per SM). */
    const attn_seq sq = attn_seq_at(p, (int)blockIdx.z);
    if (q0 >= sq.n)
        return;

    if (p.cache_k_dtype != KVQ_F16 || p.cache_v_dtype != KVQ_F16)
        ; /* a quantized pool holds the chunk's rows already (ops/gpu_kvq.h) */
    else if (col0 == 0 && p.block_table) /* head dim 512: the first half's block only */
        write_cache_rows<HD, kBlockM, kThreads, true>(p, h, q0, (int)threadIdx.x, sq);
    else if (col0 == 0)
        write_cache_rows<HD, kBlockM, kThreads>(p, h, q0, (int)threadIdx.x, sq);

    /* Keys of the last query of the tile bound the tiles to visit; with a
     * sliding window the first query's window edge too: tiles wholly behind
     * it are never loaded (a window at least as long as the keys is none). */
    const int q_last = (q0 + kBlockM < sq.n ? q0 + kBlockM : sq.n) - 1;
    const int n_tiles = (int)((sq.pos0 + q_last) / kBlockN + 1);
    const int window = p.window > 0 && p.window < sq.pos0 + sq.n ? (int)p.window : 0;
    const int q_first = sq.pos0 + q0; /* the first query's position */
    const int t_lo = window && q_first - window + 1 > 0 ? (q_first - window + 1) / kBlockN : 0;

    /* Q with the first K/V tile, then the next stages - 2 tiles; the
     * pipeline counts tiles from t_lo. */
    const auto kv = make_kv_pipeline<V>(n_tiles - t_lo, [&](int i, int stage) {
        uint16_t *k_dst = sK + stage * kBlockN * HD, *v_dst = sV + stage * kBlockN * HD;
        const attn_seq s = attn_seq_at(p, (int)blockIdx.z);
        if (p.cache_k_dtype != KVQ_F16 || p.cache_v_dtype != KVQ_F16)
            load_kv_quant<HD, kBlockN, kThreads>(p, k_dst, v_dst, hk, (t_lo + i) * kBlockN, s,
                                                 s.pos0 + s.n);
        else if (p.block_table)
            load_kv<HD, kBlockN, kThreads, true>(p, k_dst, v_dst, hk, (t_lo + i) * kBlockN, s,
                                                 s.pos0 + s.n);
        else
            load_kv<HD, kBlockN, kThreads>(p, k_dst, v_dst, hk, (t_lo + i) * kBlockN, s,
                                           s.pos0 + s.n);
    });
    load_q<HD, kBlockM, kThreads>(p, sQ, h, q0, sq);
    kv.start();

    /* This warp's query rows as A fragments: all of them (kQRegs), or one
     * k-step's worth reloaded from sQ each time. */
    uint32_t qf[kMT][kQRegs ? HD / 16 : 1][4];
    float o[kMT][kHDO / 8][4];    /* O accumulator, C fragments (rows g, g+8 of each m16) */
    float m[kMT][2];              /* running max of rows g, g+8 (raw scores) */
    float l[kMT][2];              /* this lane's part of the running sums */
    IG_UNROLL
    for (int mt = 0; mt < kMT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0;
        IG_UNROLL
        for (int d = 0; d < kHDO / 8; d++)
            o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0;
    }
    /* Lanes' ldmatrix rows: Q and V (rows lane % 16, column half lane / 16),
     * K (two n8 tiles: rows lane % 8 + 8 (lane / 16), column half (lane / 8) % 2).
     * Within the first 64 columns swz does not depend on ROWS, so one z serves
     * Q and V. */
    const int z_qv = lane_swz<HD, kBlockM>(lane % 16, lane / 16);
    const int z_k = lane_swz<HD, kBlockN>(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
    const uint16_t *sQw = sQ + warp * kRowsW * 64; /* this warp's rows, page 0 */
    auto q_frag = [&](uint32_t a[4], int mt, int kk) {
        ig_ldmatrix_x4(a, &sQw[blk_off<kBlockM>(z_qv, mt * 16, kk * 16)]);
    };

    const int row0 = q0 + warp * kRowsW; /* first query row of this warp */
    for (int tile = t_lo; tile < n_tiles; tile++) {
        const int stage = kv.land(tile - t_lo);
        const attn_seq s_now = attn_seq_at(p, (int)blockIdx.z); /* see sq */
        const int pos0 = s_now.pos0, kv_len = s_now.pos0 + s_now.n;
        if (kQRegs && tile == t_lo)
            for (int mt = 0; mt < kMT; mt++)
                for (int kk = 0; kk < (kQRegs ? HD / 16 : 0); kk++)
                    q_frag(qf[mt][kk], mt, kk);

        /* Tile-relative limits in 32 bits (cheap registers): key k of the tile
         * is visible to the warp's row r when k <= diag + r and k < n_keys. */
        const int j0 = tile * kBlockN;
        const int diag_raw = pos0 + row0 - j0;
        const int diag = diag_raw > kBlockN ? kBlockN : (diag_raw < -kRowsW ? -kRowsW : diag_raw);
        const int n_keys = kv_len - j0 > kBlockN ? kBlockN : kv_len - j0;
        /* With a window, row r sees keys >= wlo + r only (clamped: below
         * -kRowsW no row is cut, from kBlockN every key is). */
        int wlo = -kRowsW;
        if (window) {
            const int w = diag_raw - window + 1;
            wlo = w < -kRowsW ? -kRowsW : (w > kBlockN ? kBlockN : w);
        }
        /* 16-key slices no row of the warp sees hold only masked scores:
         * their mma are skipped, in S and in P.V (a warp-uniform branch):
         * those past the last row's diagonal, and those behind the first
         * row's window. */
        const int live_keys = diag + kRowsW < n_keys ? diag + kRowsW : n_keys;
        const int live = live_keys <= 0 ? 0 : (live_keys + 15) / 16;
        const int first_live = wlo <= 0 ? 0 : wlo / 16;

        /* S = Q K^T for kRowsW rows x kBlockN keys; each K fragment feeds kMT
         * m16 tiles. */
        const uint16_t *k_s = sK + stage * kBlockN * HD;
        float s[kMT][kBlockN / 8][4];
        IG_UNROLL
        for (int mt = 0; mt < kMT; mt++)
            for (int j = 0; j < kBlockN / 8; j++)
                s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0;
        auto qk_step = [&](int nn, int kk, const uint32_t (*a)[4]) {
            uint32_t kb[4];
            ig_ldmatrix_x4(kb, &k_s[blk_off<kBlockN>(z_k, nn * 16, kk * 16)]);
            IG_UNROLL
            for (int mt = 0; mt < kMT; mt++) {
                ig_mma_16816<T>(s[mt][2 * nn], a[mt], &kb[0], s[mt][2 * nn]);
                ig_mma_16816<T>(s[mt][2 * nn + 1], a[mt], &kb[2], s[mt][2 * nn + 1]);
            }
        };
        /* A full tile (no 16-key slice past the warp's rows): one straight
         * sequence of steps (kk major), each step's fragments loaded while
         * the previous step's mma run, so ldmatrix latency hides behind
         * tensor work. Diagonal tiles take the slice-skipping loops, and so
         * does every tile of a variant that forces 2+ blocks per SM: it has
         * no registers for a second set of fragments (m64w4n32 spilled) and
         * hides latency with more warps instead. */
        const bool full = kPrefetch && live == kBlockN / 16 && first_live == 0;
        if (full) {
            constexpr int kNN = kBlockN / 16, kSteps = kNN * (HD / 16);
            uint32_t kb[2][4];
            uint32_t qa[kQRegs ? 1 : 2][kMT][4];
            auto k_load = [&](uint32_t r[4], int i) { /* step i = kk * kNN + nn */
                ig_ldmatrix_x4(r, &k_s[blk_off<kBlockN>(z_k, (i % kNN) * 16, (i / kNN) * 16)]);
            };
            if constexpr (!kQRegs) {
                IG_UNROLL
                for (int mt = 0; mt < kMT; mt++)
                    q_frag(qa[0][mt], mt, 0);
            }
            k_load(kb[0], 0);
            IG_UNROLL
            for (int i = 0; i < kSteps; i++) {
                const int kk = i / kNN, nn = i % kNN;
                if (i + 1 < kSteps) {
                    if constexpr (!kQRegs) {
                        if ((i + 1) % kNN == 0) {
                            IG_UNROLL
                            for (int mt = 0; mt < kMT; mt++)
                                q_frag(qa[(kk + 1) & 1][mt], mt, kk + 1);
                        }
                    }
                    k_load(kb[(i + 1) & 1], i + 1);
                }
                IG_UNROLL
                for (int mt = 0; mt < kMT; mt++) {
                    const uint32_t *a;
                    if constexpr (kQRegs)
                        a = qf[mt][kk];
                    else
                        a = qa[kk & 1][mt];
                    ig_mma_16816<T>(s[mt][2 * nn], a, &kb[i & 1][0], s[mt][2 * nn]);
                    ig_mma_16816<T>(s[mt][2 * nn + 1], a, &kb[i & 1][2], s[mt][2 * nn + 1]);
                }
            }
        } else if constexpr (kQRegs) {
            IG_UNROLL
            for (int nn = 0; nn < kBlockN / 16; nn++) {
                if (nn >= live || nn < first_live)
                    continue;
                IG_UNROLL
                for (int kk = 0; kk < HD / 16; kk++) {
                    uint32_t a[kMT][4];
                    IG_UNROLL
                    for (int mt = 0; mt < kMT; mt++)
                        for (int i = 0; i < 4; i++)
                            a[mt][i] = qf[mt][kk][i];
                    qk_step(nn, kk, a);
                }
            }
        } else if (live > first_live) {
            IG_UNROLL
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t a[kMT][4];
                IG_UNROLL
                for (int mt = 0; mt < kMT; mt++)
                    q_frag(a[mt], mt, kk);
                IG_UNROLL
                for (int nn = 0; nn < kBlockN / 16; nn++)
                    if (nn < live && nn >= first_live)
                        qk_step(nn, kk, a);
            }
        }

        mask_scores<kMT, kBlockN>(s, diag, n_keys, g, t, wlo);
        online_softmax<kMT, kBlockN, kHDO>(s, o, m, l, scale_log2);

        /* O += P V; each V fragment feeds kMT m16 tiles. */
        uint32_t pa[kBlockN / 16][kMT][4];
        pack_p<T, kMT, kBlockN>(s, pa);
        /* This block's columns col0 .. of V: whole 64-column pages of the tile */
        const uint16_t *v_s = sV + stage * kBlockN * HD + col0 * kBlockN;
        if (full) { /* the same one-step-ahead fragment loads as in S */
            constexpr int kDN = kHDO / 16, kSteps = (kBlockN / 16) * kDN;
            uint32_t vb[2][4];
            auto v_load = [&](uint32_t r[4], int i) { /* step i = kk * kDN + dn */
                const int off = blk_off<kBlockN>(z_qv, (i / kDN) * 16, (i % kDN) * 16);
                ig_ldmatrix_x4_trans(r, &v_s[off]);
            };
            v_load(vb[0], 0);
            IG_UNROLL
            for (int i = 0; i < kSteps; i++) {
                const int kk = i / kDN, dn = i % kDN;
                if (i + 1 < kSteps)
                    v_load(vb[(i + 1) & 1], i + 1);
                IG_UNROLL
                for (int mt = 0; mt < kMT; mt++) {
                    ig_mma_16816<T>(o[mt][2 * dn], pa[kk][mt], &vb[i & 1][0], o[mt][2 * dn]);
                    ig_mma_16816<T>(o[mt][2 * dn + 1], pa[kk][mt], &vb[i & 1][2],
                                    o[mt][2 * dn + 1]);
                }
            }
        } else {
            IG_UNROLL
            for (int kk = 0; kk < kBlockN / 16; kk++) {
                if (kk >= live || kk < first_live)
                    continue;
                IG_UNROLL
                for (int dn = 0; dn < kHDO / 16; dn++) {
                    uint32_t vb[4];
                    ig_ldmatrix_x4_trans(vb, &v_s[blk_off<kBlockN>(z_qv, kk * 16, dn * 16)]);
                    IG_UNROLL
                    for (int mt = 0; mt < kMT; mt++) {
                        ig_mma_16816<T>(o[mt][2 * dn], pa[kk][mt], &vb[0], o[mt][2 * dn]);
                        ig_mma_16816<T>(o[mt][2 * dn + 1], pa[kk][mt], &vb[2],
                                        o[mt][2 * dn + 1]);
                    }
                }
            }
        }
    }

    store_rows<T, kMT, kHDO>(p, o, m, l, row0, h, g, t, scale_log2,
                             attn_seq_at(p, (int)blockIdx.z), col0);
}

/* One mma.sync variant: dtype and head_dim (only those the variant is built for). */
template <int V>
int launch_mma_variant(const prefill_attn_params &p, const prefill_attn_tile &tile,
                       cudaStream_t stream)
{
    if (tile.block_m != variant<V>::block_m || tile.block_n != variant<V>::block_n ||
        tile.warps != variant<V>::warps || tile.m_tiles != variant<V>::m_tiles ||
        tile.q_in_regs != (p.head_dim <= variant<V>::q_regs_max_hd))
        return ig_error(IG_E_INTERNAL, "flash attention: chooser and kernel disagree on tiles");
    return for_type_and_head_dim<V>(p, [&](auto type, auto hd) {
        return launch_attention(flash_attn_kernel<decltype(type), decltype(hd)::value, V>, p,
                                tile, stream);
    });
}

/* Whether this build has the wgmma kernel: always under the emulator; in
 * the CUDA build when nvcc could target sm_90a (CMakeLists.txt). */
#if defined(IG_EMU) || IGNITE_HAVE_SM90A
#define IG_FLASH_HAVE_WGMMA 1
#else
#define IG_FLASH_HAVE_WGMMA 0
#endif

/* One variant of any of the three kernels. */
template <int V>
int launch_variant(const prefill_attn_params &p, const prefill_attn_tile &tile,
                   cudaStream_t stream)
{
    if constexpr (variant<V>::isa == PREFILL_ATTN_ISA_WGMMA ||
                  variant<V>::isa == PREFILL_ATTN_ISA_WS) {
#if IG_FLASH_HAVE_WGMMA
        if constexpr (variant<V>::isa == PREFILL_ATTN_ISA_WS)
            return IG_DEV(prefill_attn_ws)(&p, &tile, stream);
        else
            return IG_DEV(prefill_attn_wgmma)(&p, &tile, stream);
#else
        (void)p, (void)tile, (void)stream; /* the entry refuses it (isa_runs_on) */
        return ig_error(IG_E_INTERNAL, "flash attention: no sm_90a kernels in this build");
#endif
    } else if constexpr (!IG_ATTN_BUILT(V)) {
        (void)p, (void)tile, (void)stream;
        return ig_error(IG_E_INTERNAL, "flash attention: %s is not built in this copy",
                        prefill_attn_variant_name(V));
    } else {
        return launch_mma_variant<V>(p, tile, stream);
    }
}

} /* namespace */

#if !defined(IG_EMU)
/* The current device's compute capability as major * 10 + minor (its
 * number in *dev), or -1 without a device. */
static int device_cc(int *dev)
{
    int major = 0, minor = 0;
    *dev = 0;
    if (cudaGetDevice(dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, *dev) != cudaSuccess) {
        cudaGetLastError(); /* nothing runs; the error is not left behind */
        return -1;
    }
    return major * 10 + minor;
}

extern "C" int prefill_attn_cuda_supports(int variant)
{
    int dev;
    const int cc = device_cc(&dev); /* -1 without a device; 0 would mean "any" */
    return cc > 0 && prefill_attn_isa_runs_on(prefill_attn_variant_isa(variant), cc,
                                              IG_FLASH_HAVE_WGMMA);
}
#endif

extern "C" int IG_DEV(prefill_attn)(const struct prefill_attn_params *p, void *stream_)
{
    cudaStream_t stream = (cudaStream_t)stream_;
    prefill_attn_tile tile;
#if defined(IG_EMU)
    int st = prefill_attn_choose(p, &tile); /* the emulator runs every variant */
    if (st)
        return st;
#else
    int dev;
    const int cc = device_cc(&dev);
    if (cc < 0)
        return ig_error(IG_E_DEVICE, "flash attention: no CUDA device");
    int st = prefill_attn_choose_for(p, cc, IG_FLASH_HAVE_WGMMA, &tile);
    if (st)
        return st;
    if (!prefill_attn_isa_runs_on(tile.isa, cc, IG_FLASH_HAVE_WGMMA))
        return ig_error(IG_E_DEVICE, "flash attention: variant %s cannot run on device %d "
                        "(compute capability %d.%d): %s", prefill_attn_variant_name(tile.variant),
                        dev, cc / 10, cc % 10,
                        tile.isa != PREFILL_ATTN_ISA_MMA
                            ? "wgmma and TMA need 9.0 and sm_90a code in the build"
                            : "mma.sync needs 8.0 or newer");
#endif
    switch (tile.variant) {
#define IG_FLASH_CASE_(id, ...)                                                 \
    case PREFILL_ATTN_##id:                                                     \
        return launch_variant<PREFILL_ATTN_##id>(*p, tile, stream);
        PREFILL_ATTN_VARIANTS(IG_FLASH_CASE_)
#undef IG_FLASH_CASE_
    default:
        return ig_error(IG_E_INTERNAL, "flash attention: no variant %d", tile.variant);
    }
}
