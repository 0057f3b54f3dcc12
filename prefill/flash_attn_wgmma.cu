/* prefill/flash_attn_wgmma.cu: the fused causal prefill attention kernel on
 * Hopper's warpgroup MMA (wgmma, sm_90a); semantics, cache layout and params
 * in prefill/flash_attn.h, the variants (isa PREFILL_ATTN_ISA_WGMMA) in its
 * PREFILL_ATTN_VARIANTS table, which prefill_attn_cuda dispatches here.
 *
 * Same structure as the mma.sync kernel (prefill/flash_attn.cu): one block
 * per (query tile, head), K/V tiles through `stages` shared-memory buffers
 * with cp.async (flash_tiles.cuh's kv_pipeline; the s_ahead variants also
 * issue the next tile's S before this tile's softmax, so the tensor cores
 * and the warpgroup's ALUs overlap), online softmax in registers, tiles
 * past the diagonal never visited, the fused cache write; the shared parts are in
 * prefill/flash_tiles.cuh. What differs is the MMA: each warpgroup (4 warps)
 * owns 64 query rows and computes S = Q K^T with wgmma reading Q and K
 * straight from shared memory (no ldmatrix, no fragment registers), then
 * O += P V with P from registers (the S accumulators rounded, the same
 * layout trick as FlashAttention-2) and V from shared memory, N-major (the
 * tile as loaded, no transpose). The tiles keep flash_tiles.cuh's swizzled
 * layout, which at a 1024-byte-aligned shared address is wgmma's 128-byte
 * swizzle (docs/wgmma.md).
 *
 * Not yet, of FlashAttention-3: TMA loads, warp specialization (a producer
 * warpgroup) and ping-pong between warpgroups (one's softmax during the
 * other's MMA).
 *
 * Built for sm_90a only (ignite_gpu_sm90a in CMakeLists.txt) and, as plain
 * C++, for the CPU emulator, which implements wgmma (emu/wgmma.cc). Covered
 * by tests/emu/test_flash_attn_emu.c (--variant wg...) and
 * tests/gpu/test_flash_attn_gpu.c. */
#include "devkit/wgmma.cuh" /* first: it defines IG_EMU, which dev_entry.h reads */
#include "devkit/dev_entry.h"
#include "prefill/flash_attn.h"
#include "prefill/flash_tiles.cuh"
#include "prefill/flash_wgmma.cuh"

#if defined(__CUDA_ARCH__) && !IG_HAVE_WGMMA
#error "prefill/flash_attn_wgmma.cu is for sm_90a only: -gencode=arch=compute_90a,code=sm_90a"
#endif

namespace {

template <class T, int HD, int V>
__global__ void __launch_bounds__(32 * variant<V>::warps, variant<V>::min_blocks)
flash_attn_wgmma_kernel(const prefill_attn_params p, const float scale_log2)
{
    constexpr int kThreads = 32 * variant<V>::warps;
    constexpr int kBlockM = variant<V>::block_m; /* query rows per block */
    constexpr int kBlockN = variant<V>::block_n; /* keys per K/V tile */
    constexpr int kStages = variant<V>::stages;  /* K/V tiles in shared memory */
    static_assert(kThreads % 128 == 0 && kBlockM == 64 * (kThreads / 128),
                  "a warpgroup per 64 query rows");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma N for S = Q K^T");
    static_assert((variant<V>::head_dims & (HD == 64 ? 1 : 2)) != 0, "variant not built for HD");

    /* Tiles at a multiple of 1024 bytes of shared address: the swizzle
     * pattern's period (the chooser adds the slack). */
    IG_DYN_SHARED(uint16_t, smem_raw);
    const uint32_t raw = ig_shared_address(smem_raw);
    const uint32_t pad = (1024u - raw % 1024u) % 1024u;
    uint16_t *sQ = smem_raw + pad / 2;           /* [kBlockM][HD] */
    uint16_t *sK = sQ + kBlockM * HD;            /* [kStages][kBlockN][HD] */
    uint16_t *sV = sK + kStages * kBlockN * HD;  /* [kStages][kBlockN][HD] */
    const uint32_t aQ = raw + pad;
    const uint32_t aK = aQ + kBlockM * HD * 2, aV = aK + kStages * kBlockN * HD * 2;

    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4, wg = warp / 4;
    /* Heaviest tiles (most keys) first: better tail balance. */
    const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * kBlockM;
    const int h = (int)blockIdx.y, hk = h / (int)(p.n_head / p.n_head_kv);
    const int n = (int)p.n_tokens, pos0 = (int)p.pos0, kv_len = pos0 + n;

    ig_grid_dependency_wait(); /* IG_LAUNCH_DEP: q, k, v may be the kernels' before */
    ig_launch_dependents();
    write_cache_rows<HD, kBlockM, kThreads>(p, h, q0, (int)threadIdx.x, attn_seq_whole(p));

    /* Tiles the block visits (its last row's keys) and the ones this
     * warpgroup computes (its own last row's; none for rows past n). */
    const int q_last = (q0 + kBlockM < n ? q0 + kBlockM : n) - 1;
    const int n_tiles = (pos0 + q_last) / kBlockN + 1;
    const int wg_row0 = q0 + 64 * wg, wg_last = wg_row0 + 63 < n ? wg_row0 + 63 : n - 1;
    const int wg_tiles = wg_row0 < n ? (pos0 + wg_last) / kBlockN + 1 : 0;
    const int row0 = wg_row0 + 16 * (warp % 4); /* this warp's first row */

    /* Tile t lives in stage t % kStages (flash_tiles.cuh's kv_pipeline). */
    const auto kv = make_kv_pipeline<V>(n_tiles, [&](int tile, int stage) {
        load_kv<HD, kBlockN, kThreads>(p, sK + stage * kBlockN * HD, sV + stage * kBlockN * HD, hk,
                                       tile * kBlockN, attn_seq_whole(p), kv_len);
    });
    /* Between a thread's copies landing and the barrier: the fence that
     * makes them visible to wgmma (the async proxy). After the barrier,
     * every wgmma on the stage the next copies overwrite has been waited
     * for. */
    const auto to_async_proxy = [] { ig_fence_proxy_async(); };
    /* This warpgroup's Q rows; stage 0 of K and V (a stage further on is
     * a constant away). */
    const uint64_t dq = k_major_desc(aQ + (uint32_t)(64 * wg * 128));
    const uint64_t dk = k_major_desc(aK), dv = n_major_desc<kBlockN>(aV);
    auto stage_step = [&](int tile) {
        return (uint64_t)((tile % kStages) * (kBlockN * HD * 2 / 16));
    };

    /* This thread's part of the warpgroup's 64 x HD O, its running row
     * maxima (raw scores) and its part of the row sums: rows g and g + 8 of
     * its warp's 16. */
    float o[1][HD / 8][4];
    float m[1][2] = {{-INFINITY, -INFINITY}};
    float l[1][2] = {{0, 0}};
    IG_UNROLL
    for (int d = 0; d < HD / 8; d++)
        o[0][d][0] = o[0][d][1] = o[0][d][2] = o[0][d][3] = 0;

    /* S = Q K^T of a tile, 64 rows x kBlockN keys in HD / 16 k-steps:
     * issued and committed, not waited for. */
    auto issue_s = [&](float (&s)[1][kBlockN / 8][4], int tile) {
        const uint64_t st = stage_step(tile);
        ig_wgmma_fence();
        IG_UNROLL
        for (int kk = 0; kk < HD / 16; kk++)
            ig_wgmma_ss<T, kBlockN, 0, 0>(flat(s), dq + k_step<kBlockM>(kk),
                                          dk + st + k_step<kBlockN>(kk), kk > 0);
        ig_wgmma_commit();
    };

    /* A tile's mask, online softmax and P, from S (waited for) to the A
     * registers of the P V k-steps. */
    auto softmax = [&](float (&s)[1][kBlockN / 8][4], uint32_t (&pa)[kBlockN / 16][1][4],
                       int tile) {
        const int j0 = tile * kBlockN;
        const int n_keys = kv_len - j0 > kBlockN ? kBlockN : kv_len - j0;
        mask_scores<1, kBlockN>(s, pos0 + row0 - j0, n_keys, g, t);
        online_softmax<1, kBlockN, HD>(s, o, m, l, scale_log2);
        pack_p<T, 1, kBlockN>(s, pa);
    };

    /* O += P V of a tile: kBlockN / 16 k-steps of 64 rows x HD columns;
     * issued and committed, not waited for. */
    auto issue_pv = [&](uint32_t (&pa)[kBlockN / 16][1][4], int tile) {
        const uint64_t st = stage_step(tile);
        /* O was rescaled and P written by ordinary instructions: pinned
         * above the fence, which orders them before the MMAs. */
        ig_wgmma_fence_operand(flat(o));
        ig_wgmma_fence_operand(pa);
        ig_wgmma_fence();
        IG_UNROLL
        for (int kk = 0; kk < kBlockN / 16; kk++)
            ig_wgmma_rs<T, HD, 1>(flat(o), pa[kk][0], dv + st + v_step(kk), 1);
        ig_wgmma_commit();
    };

    /* S of a tile, waited for and ready for the softmax. */
    auto compute_s = [&](float (&s)[1][kBlockN / 8][4], int tile) {
        issue_s(s, tile);
        ig_wgmma_wait<0>();
        ig_wgmma_fence_operand(flat(s));
    };

    /* The rest of a tile once its S is in: softmax, P, O += P V, waited
     * for (P's registers stay untouched until then). */
    /* P's A fragments (named: g++ 12 crashes on the array spelled out in
     * the lambda below) */
    using p_frags = uint32_t[kBlockN / 16][1][4];
    auto softmax_pv = [&](float (&s)[1][kBlockN / 8][4], int tile) {
        p_frags pa;
        softmax(s, pa, tile);
        issue_pv(pa, tile);
        ig_wgmma_wait<0>();
        ig_wgmma_fence_operand(flat(o));
        ig_wgmma_fence_operand(pa);
    };

    load_q<HD, kBlockM, kThreads>(p, sQ, h, q0, attn_seq_whole(p));
    kv.start();

    if constexpr (!variant<V>::s_ahead) {
        for (int tile = 0; tile < n_tiles; tile++) {
            kv.land(tile, to_async_proxy);
            if (tile >= wg_tiles) /* warpgroup-uniform: past all of its rows' keys */
                continue;
            float s[1][kBlockN / 8][4];
            compute_s(s, tile);
            softmax_pv(s, tile);
        }
    } else {
        /* S of the first tile computed before the loop; at the top of tile
         * t, tile t + 1 is resident too. */
        kv.template wait_tile<0>(to_async_proxy);
        float s[1][kBlockN / 8][4];
        if (0 < wg_tiles)
            compute_s(s, 0);
        for (int tile = 0; tile < n_tiles; tile++) {
            kv.land(tile, to_async_proxy);
            if (tile >= wg_tiles) /* warpgroup-uniform: past all of its rows' keys */
                continue;
            /* The next tile's S runs on the tensor cores while this one's
             * softmax runs on the warpgroup's ALUs. */
            const bool ahead = tile + 1 < wg_tiles;
            float s_next[1][kBlockN / 8][4];
            if (ahead)
                issue_s(s_next, tile + 1);
            softmax_pv(s, tile);
            if (ahead) {
                ig_wgmma_fence_operand(flat(s_next));
                IG_UNROLL
                for (int i = 0; i < kBlockN / 2; i++)
                    flat(s)[i] = flat(s_next)[i];
            }
        }
    }

    store_rows<T, 1, HD>(p, o, m, l, row0, h, g, t, scale_log2, attn_seq_whole(p));
}

/* One wgmma variant: dtype and head_dim (only those the variant is built for). */
template <int V>
int launch_wgmma_variant(const prefill_attn_params &p, const prefill_attn_tile &tile,
                         cudaStream_t stream)
{
    if constexpr (variant<V>::isa != PREFILL_ATTN_ISA_WGMMA || !IG_ATTN_BUILT(V)) {
        return ig_error(IG_E_INTERNAL, "flash attention: %s is not a wgmma variant of this build",
                        prefill_attn_variant_name(V));
    } else {
        if (tile.block_m != variant<V>::block_m || tile.block_n != variant<V>::block_n ||
            tile.warps != variant<V>::warps)
            return ig_error(IG_E_INTERNAL,
                            "flash attention: chooser and kernel disagree on tiles");
        return for_type_and_head_dim<V>(p, [&](auto type, auto hd) {
            return launch_attention(flash_attn_wgmma_kernel<decltype(type), decltype(hd)::value, V>,
                                    p, tile, stream);
        });
    }
}

} /* namespace */

extern "C" int IG_DEV(prefill_attn_wgmma)(const struct prefill_attn_params *p,
                                          const struct prefill_attn_tile *t, void *stream_)
{
    cudaStream_t stream = (cudaStream_t)stream_;
    switch (t->variant) {
#define IG_WGMMA_CASE_(id, ...)                                                 \
    case PREFILL_ATTN_##id:                                                     \
        return launch_wgmma_variant<PREFILL_ATTN_##id>(*p, *t, stream);
        PREFILL_ATTN_VARIANTS(IG_WGMMA_CASE_)
#undef IG_WGMMA_CASE_
    default:
        return ig_error(IG_E_INTERNAL, "flash attention: no variant %d", t->variant);
    }
}
