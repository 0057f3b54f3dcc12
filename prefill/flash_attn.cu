/* prefill/flash_attn.cu: the fused causal prefill attention kernel
 * (FlashAttention-2 structure) and its launcher; semantics, cache layout and
 * params in prefill/flash_attn.h.
 *
 * One block per (query tile of PREFILL_ATTN_BLOCK_M rows, query head); each of its
 * warps owns 16 query rows. K/V tiles of PREFILL_ATTN_BLOCK_N keys stream through
 * shared memory with cp.async, double-buffered (tile t+1 loads while tile t
 * computes). S = Q K^T and O += P V run on tensor cores (mma.m16n8k16, fp32
 * accumulate) fed by ldmatrix; the online softmax lives in registers, its
 * row reductions are quad shuffles, exp2 with the scale folded in. Tiles past
 * the diagonal are never visited, 16-key slices past a warp's last row are
 * skipped, and the mask is applied only to tiles that cross the warp's
 * diagonal or the end of the keys. Shared tiles use the 128-byte XOR swizzle
 * (16-byte chunk index ^ row % 8), conflict-free for cp.async and ldmatrix.
 * The first query head of each KV group also copies its rows of the chunk's
 * K and V into the cache (blocks read only cache rows < pos0, so no block
 * depends on another's writes).
 *
 * Built twice: by nvcc for sm_80/sm_90 (prefill_attn_cuda) and, as plain C++
 * through tests/emu/flash_attn_emu.cc, for the CPU emulator
 * (prefill_attn_emu). Covered by tests/emu/test_flash_attn_emu.c and
 * tests/gpu/test_flash_attn_gpu.c. */
#include "devkit/intrinsics.cuh"
#include "prefill/flash_attn.h"

namespace {

constexpr int kWarps = PREFILL_ATTN_WARPS;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = PREFILL_ATTN_BLOCK_M; /* query rows per block */
constexpr int kBlockN = PREFILL_ATTN_BLOCK_N; /* keys per K/V tile */
static_assert(kBlockM == 16 * kWarps, "each warp owns 16 query rows (one m16 tile)");
static_assert(kBlockN % 16 == 0, "keys come in k16 steps of the P.V mma");

/* 16-byte-aligned chunk of 8 elements, for global-to-global copies. */
struct alignas(16) chunk16 {
    uint32_t w[4];
};

/* Element offset of (row, col) in a swizzled [rows][HD] tile: columns come in
 * 64-wide pages of 128-byte rows; within a row the 16-byte chunks are
 * permuted by XOR with row % 8 (cute::Swizzle<3,3,3>). col % 8 == 0 for
 * every caller, so a chunk stays contiguous. */
template <int HD, int ROWS>
__device__ __forceinline__ int swz(int row, int col)
{
    return (col / 64) * ROWS * 64 + row * 64 + ((((col / 8) & 7) ^ (row & 7)) << 3) + (col & 7);
}

/* Issues the cp.async of a [ROWS][HD] tile whose row r comes from src(r)
 * (NULL = past the end: zero-filled). */
template <int HD, int ROWS, class Src>
__device__ __forceinline__ void load_tile(uint16_t *tile, const uint16_t *any, Src src)
{
    constexpr int kChunks = ROWS * HD / 8;
    for (int c = (int)threadIdx.x; c < kChunks; c += kThreads) {
        int r = c / (HD / 8), col = (c % (HD / 8)) * 8;
        const uint16_t *row = src(r);
        ig_cp_async16(&tile[swz<HD, ROWS>(r, col)], row ? row + col : any, row != nullptr);
    }
}

template <class T, int HD>
__global__ void __launch_bounds__(kThreads)
flash_attn_kernel(const prefill_attn_params p, const float scale_log2)
{
    IG_DYN_SHARED(uint16_t, smem);
    uint16_t *sQ = smem;                         /* [kBlockM][HD] */
    uint16_t *sK = sQ + kBlockM * HD;            /* [2][kBlockN][HD] */
    uint16_t *sV = sK + 2 * kBlockN * HD;        /* [2][kBlockN][HD] */

    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    /* Heaviest tiles (most keys) first: better tail balance. */
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kBlockM;
    const int64_t h = blockIdx.y, group = p.n_head / p.n_head_kv, hk = h / group;
    const int64_t n = p.n_tokens, pos0 = p.pos0, kv_len = pos0 + n;
    const uint16_t *q = (const uint16_t *)p.q + h * p.q_head_stride;
    const uint16_t *kc = (const uint16_t *)p.k_cache + hk * p.cache_head_stride;
    const uint16_t *vc = (const uint16_t *)p.v_cache + hk * p.cache_head_stride;
    const uint16_t *kn = (const uint16_t *)p.k + hk * p.k_head_stride;
    const uint16_t *vn = (const uint16_t *)p.v + hk * p.v_head_stride;

    /* Fused cache write: this block's rows of the chunk, by one head per group. */
    if (h % group == 0) {
        const int64_t rows = n - q0 < kBlockM ? n - q0 : kBlockM;
        for (int64_t c = threadIdx.x; c < rows * (HD / 8); c += kThreads) {
            int64_t i = q0 + c / (HD / 8), col = (c % (HD / 8)) * 8;
            int64_t dst = (pos0 + i) * p.cache_row_stride + col;
            *(chunk16 *)((uint16_t *)p.k_cache + hk * p.cache_head_stride + dst) =
                *(const chunk16 *)(kn + i * p.k_row_stride + col);
            *(chunk16 *)((uint16_t *)p.v_cache + hk * p.cache_head_stride + dst) =
                *(const chunk16 *)(vn + i * p.v_row_stride + col);
        }
    }

    /* Keys of the last query of the tile bound the tiles to visit. */
    const int64_t q_last = (q0 + kBlockM < n ? q0 + kBlockM : n) - 1;
    const int n_tiles = (int)((pos0 + q_last) / kBlockN + 1);

    auto load_kv = [&](int tile, int stage) {
        const int64_t j0 = (int64_t)tile * kBlockN;
        auto row_of = [&](const uint16_t *cache, const uint16_t *chunk, int64_t stride) {
            return [=](int r) -> const uint16_t * {
                int64_t pos = j0 + r;
                if (pos < pos0)
                    return cache + pos * p.cache_row_stride;
                return pos < kv_len ? chunk + (pos - pos0) * stride : nullptr;
            };
        };
        load_tile<HD, kBlockN>(sK + stage * kBlockN * HD, kc,
                               row_of(kc, kn, p.k_row_stride));
        load_tile<HD, kBlockN>(sV + stage * kBlockN * HD, vc,
                               row_of(vc, vn, p.v_row_stride));
    };

    load_tile<HD, kBlockM>(sQ, q, [&](int r) -> const uint16_t * {
        return q0 + r < n ? q + (q0 + r) * p.q_row_stride : nullptr;
    });
    load_kv(0, 0);
    ig_cp_async_commit();

    uint32_t qf[HD / 16][4];      /* this warp's 16 query rows, A fragments */
    float o[HD / 8][4];           /* O accumulator, C fragments (rows g, g+8) */
    float m[2] = {-INFINITY, -INFINITY}; /* running max of rows g, g+8 (raw scores) */
    float l[2] = {0, 0};          /* this lane's part of the running sums */
    for (int d = 0; d < HD / 8; d++)
        o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0;

    const int64_t row0 = q0 + warp * 16;     /* first query row of this warp */
    for (int tile = 0; tile < n_tiles; tile++) {
        const int stage = tile & 1;
        if (tile + 1 < n_tiles) {
            load_kv(tile + 1, stage ^ 1);
            ig_cp_async_commit();
            ig_cp_async_wait<1>();
        } else {
            ig_cp_async_wait<0>();
        }
        ig_syncthreads();
        if (tile == 0)
            for (int kk = 0; kk < HD / 16; kk++)
                ig_ldmatrix_x4(qf[kk], &sQ[swz<HD, kBlockM>(warp * 16 + lane % 16,
                                                            kk * 16 + 8 * (lane / 16))]);

        /* Tile-relative limits in 32 bits (cheap registers): key k of the tile
         * is visible to the warp's row r when k <= diag + r and k < n_keys. */
        const int64_t j0 = (int64_t)tile * kBlockN;
        const int64_t diag64 = pos0 + row0 - j0;
        const int diag = diag64 > kBlockN ? kBlockN : (diag64 < -16 ? -16 : (int)diag64);
        const int n_keys = kv_len - j0 > kBlockN ? kBlockN : (int)(kv_len - j0);
        /* 16-key slices no row of the warp sees hold only masked scores:
         * their mma are skipped, in S and in P.V (a warp-uniform branch). */
        const int live_keys = diag + 16 < n_keys ? diag + 16 : n_keys;
        const int live = live_keys <= 0 ? 0 : (live_keys + 15) / 16;

        /* S = Q K^T for 16 rows x kBlockN keys. */
        const uint16_t *k_s = sK + stage * kBlockN * HD;
        float s[kBlockN / 8][4];
        for (int j = 0; j < kBlockN / 8; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
        for (int nn = 0; nn < kBlockN / 16; nn++) {
            if (nn >= live)
                continue;
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t kb[4];
                ig_ldmatrix_x4(kb, &k_s[swz<HD, kBlockN>(nn * 16 + lane % 8 + 8 * (lane / 16),
                                                         kk * 16 + 8 * ((lane / 8) % 2))]);
                ig_mma_16816<T>(s[2 * nn], qf[kk], &kb[0], s[2 * nn]);
                ig_mma_16816<T>(s[2 * nn + 1], qf[kk], &kb[2], s[2 * nn + 1]);
            }
        }

        /* Mask only where the tile crosses this warp's diagonal or the end. */
        if (diag < kBlockN - 1 || n_keys < kBlockN) {
            for (int j = 0; j < kBlockN / 8; j++)
                for (int e = 0; e < 4; e++) {
                    int key = j * 8 + 2 * t + (e & 1), row = g + 8 * (e / 2);
                    if (key > diag + row || key >= n_keys)
                        s[j][e] = -INFINITY;
                }
        }

        /* Online softmax; rows g (r = 0) and g + 8 (r = 1) of the warp. */
        for (int r = 0; r < 2; r++) {
            float mx = m[r];
            for (int j = 0; j < kBlockN / 8; j++)
                mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mx = fmaxf(mx, ig_shfl_xor_f32(mx, 1));
            mx = fmaxf(mx, ig_shfl_xor_f32(mx, 2));
            /* A row with every key masked so far keeps a zero offset (no NaN). */
            const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
            const float corr = ig_exp2(m[r] * scale_log2 - base);
            m[r] = mx;
            l[r] *= corr;
            for (int d = 0; d < HD / 8; d++) {
                o[d][2 * r] *= corr;
                o[d][2 * r + 1] *= corr;
            }
            for (int j = 0; j < kBlockN / 8; j++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[j][e] = ig_exp2(s[j][e] * scale_log2 - base);
                    l[r] += s[j][e];
                }
        }

        /* O += P V: the S accumulators of n-tiles 2kk, 2kk+1 are exactly the
         * A fragment of k-step kk once rounded to T. */
        const uint16_t *v_s = sV + stage * kBlockN * HD;
        for (int kk = 0; kk < kBlockN / 16; kk++) {
            if (kk >= live)
                continue;
            uint32_t pa[4] = {ig_pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                              ig_pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              ig_pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              ig_pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int dn = 0; dn < HD / 16; dn++) {
                uint32_t vb[4];
                ig_ldmatrix_x4_trans(vb, &v_s[swz<HD, kBlockN>(kk * 16 + lane % 16,
                                                               dn * 16 + 8 * (lane / 16))]);
                ig_mma_16816<T>(o[2 * dn], pa, &vb[0], o[2 * dn]);
                ig_mma_16816<T>(o[2 * dn + 1], pa, &vb[2], o[2 * dn + 1]);
            }
        }
        ig_syncthreads(); /* the next iteration's cp.async overwrites this stage */
    }

    /* O / l, rounded to T; the log-sum-exp in natural log. */
    for (int r = 0; r < 2; r++) {
        l[r] += ig_shfl_xor_f32(l[r], 1);
        l[r] += ig_shfl_xor_f32(l[r], 2);
        const int64_t row = row0 + g + 8 * r;
        if (row >= n)
            continue;
        const float inv = 1.0f / l[r];
        uint16_t *out = (uint16_t *)p.o + row * p.o_row_stride + h * p.o_head_stride;
        for (int d = 0; d < HD / 8; d++)
            *(uint32_t *)&out[d * 8 + 2 * t] = ig_pack2<T>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
        if (p.lse && t == 0)
            p.lse[h * p.lse_head_stride + row] =
                (m[r] * scale_log2 + log2f(l[r])) * 0.6931471805599453f;
    }
}

template <class T, int HD>
int launch(const prefill_attn_params &p, const prefill_attn_tile &tile, cudaStream_t stream)
{
    const float scale_log2 = p.scale * 1.4426950408889634f;
    dim3 grid((unsigned)tile.n_q_tiles, (unsigned)p.n_head), block(kThreads);
#if defined(__CUDACC__)
    IG_CUDA_CHECK(cudaFuncSetAttribute(&flash_attn_kernel<T, HD>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)tile.smem_bytes));
#endif
    auto *flash_attn = flash_attn_kernel<T, HD>;
    return IG_LAUNCH(flash_attn, grid, block, tile.smem_bytes, stream, p, scale_log2);
}

} /* namespace */

#if defined(IG_EMU)
#define PREFILL_ATTN_ENTRY prefill_attn_emu
extern "C" int PREFILL_ATTN_ENTRY(const struct prefill_attn_params *p)
{
    cudaStream_t stream = nullptr;
#else
#define PREFILL_ATTN_ENTRY prefill_attn_cuda
extern "C" int PREFILL_ATTN_ENTRY(const struct prefill_attn_params *p, void *stream_)
{
    cudaStream_t stream = (cudaStream_t)stream_;
#endif
    prefill_attn_tile tile;
    int st = prefill_attn_choose(p, &tile);
    if (st)
        return st;
    if (tile.block_m != kBlockM || tile.block_n != kBlockN || tile.warps != kWarps)
        return ig_error(IG_E_INTERNAL, "flash attention: chooser and kernel disagree on tiles");
    const bool bf16 = p->dtype == PREFILL_ATTN_BF16;
    if (p->head_dim == 64)
        return bf16 ? launch<ig_bf16_t, 64>(*p, tile, stream) : launch<ig_f16_t, 64>(*p, tile, stream);
    return bf16 ? launch<ig_bf16_t, 128>(*p, tile, stream) : launch<ig_f16_t, 128>(*p, tile, stream);
}
