/* ops/gpu_moe.cu: the mixture-of-experts kernels (contracts in
 * ops/gpu_moe.h; results defined by the twins in ops/gpu_moe_ref.c).
 *
 * Routing: one block a row normalizes the residual row in f32 into shared
 * memory, a warp per expert takes its router dot product (f32 weights, as
 * the CPU's exact router: an f16 router would flip near choices), then one
 * thread picks the top k (the lower index on a tie), softmaxes in f64 and
 * writes the k experts in ascending order with their weights (qwen35moe:
 * warp 0 also takes the shared expert gate's dot product, sigmoid).
 *
 * Sorting: one block; a thread per expert counts its pairs, one thread lays
 * out the experts' starts and tile numbers, then each expert's thread
 * writes its pairs (in pair order) and tiles. Deterministic: the tile a pair
 * lands in never depends on the order of atomics (there are none). A
 * tensor-parallel rank groups its own experts' pairs alone (expert0 on), its
 * tiles naming them from 0: the rows of its part of the expert matrices; the
 * combine then adds those slots alone.
 *
 * The product: grid (output rows / 8, tiles; 65535 tiles a launch, more
 * launched after), 8 warps of a block each own
 * one output row of the tile's expert (glu: its gate and up rows) for the
 * tile's up to GK_MOE_TILE pairs: lane l walks 32-element blocks l, l + 32,
 * ..., dequantizes each once (ops/gpu_qblocks.cuh, the CPU's values; MXFP4's
 * 16 quant bytes one aligned load, its E8M0 byte a second) and
 * multiplies it with each pair's x (f16 to f32), f32 sums, one butterfly per
 * pair at the end. So an expert's rows are read once per tile: a decode row
 * reads its k experts only, a prefill step each used expert once per 8 rows
 * routed to it. Blocks of tiles past the step's count exit at once. What it
 * lacks against the dense path: int8 activations with dp4a (ops/gpu_qgemv.cu).
 *
 * The product on the tensor cores (prefill steps, gk_moe_choose): gk_qmma's
 * main loop (ops/gpu_qmma_tile.cuh) over one tile of up to 64 pairs of one expert,
 * the W tile from that expert's rows (any expert type: the block types,
 * MXFP4 dequantized in registers as the GEMV's, f16 copied), x's rows
 * gathered by the tile's pairs (mma_kernel below).
 *
 * Dependent launches under IGNITE_PDL=1 (IG_LAUNCH_DEP): every kernel starts
 * with gk_dep_start, as what it reads first (the row, the routing, the
 * tiles that name the expert) is the kernel before's.
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator
 * through ops/gpu_moe_emu.cc (name_emu). Covered by tests/emu/test_moe_emu.c. */
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"
#include "ops/gpu_qmma_tile.cuh"

#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = GK_MOE_TILE;

/* ---- routing ------------------------------------------------------------------ */

__global__ void __launch_bounds__(kThreads) route_kernel(const gk_moe_route_params p)
{
    gk_dep_start(); /* x: the residual the layer's attention wrote */
    IG_DYN_SHARED(float, route_smem);
    float *xn = route_smem;            /* [n_embd] the normed row */
    float *lg = route_smem + p.n_embd; /* [n_expert] its router logits */
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const float *xr = p.x + (int64_t)blockIdx.x * p.ld_x;
    float ss = 0;
    for (int64_t c = threadIdx.x; c < p.n_embd; c += kThreads)
        ss += xr[c] * xr[c];
    ss = gk_block_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)p.n_embd + p.eps);
    for (int64_t c = threadIdx.x; c < p.n_embd; c += kThreads) /* gemma4: times in_scale */
        ig_sts(&xn[c], (p.in_scale != 0.0f ? xr[c] * r * p.in_scale : xr[c] * r) * p.norm_w[c]);
    ig_syncthreads();
    for (int64_t e = warp; e < p.n_expert; e += kWarps) {
        const float *wr = p.router + e * p.n_embd;
        float a = 0;
        for (int64_t c = lane; c < p.n_embd; c += 32)
            a += wr[c] * ig_lds(&xn[c]);
        for (int m = 16; m > 0; m >>= 1)
            a += ig_shfl_xor_f32(a, m);
        if (lane == 0)
            ig_sts(&lg[e], p.bias ? a + p.bias[e] : a);
    }
    if (p.shexp_gate && warp == 0) { /* the shared expert's gate, from the same f32 row */
        float a = 0;
        for (int64_t c = lane; c < p.n_embd; c += 32)
            a += p.shexp_gate[c] * ig_lds(&xn[c]);
        for (int m = 16; m > 0; m >>= 1)
            a += ig_shfl_xor_f32(a, m);
        if (lane == 0)
            p.shexp_w[blockIdx.x] = 1.0f / (1.0f + expf(-a));
    }
    ig_syncthreads();
    if (threadIdx.x != 0)
        return;
    /* top k: the largest first, the lower index on a tie (torch.topk's and
     * llama.cpp's argsort order) */
    uint32_t taken[(GK_MOE_MAX_EXPERTS + 31) / 32] = {0};
    for (int64_t j = 0; j < p.k; j++) {
        int64_t best = -1;
        float bv = 0;
        for (int64_t e = 0; e < p.n_expert; e++) {
            const float v = ig_lds(&lg[e]);
            if (!(taken[e / 32] >> (e % 32) & 1u) && (best < 0 || v > bv))
                best = e, bv = v;
        }
        taken[best / 32] |= 1u << (best % 32);
    }
    double mx = -INFINITY, all = 0, chosen = 0;
    for (int64_t e = 0; e < p.n_expert; e++)
        mx = fmax(mx, (double)ig_lds(&lg[e]));
    for (int64_t e = 0; e < p.n_expert; e++)
        all += exp((double)ig_lds(&lg[e]) - mx);
    int32_t *sel = p.sel + (int64_t)blockIdx.x * p.k;
    int64_t j = 0;
    for (int64_t e = 0; e < p.n_expert; e++)
        if (taken[e / 32] >> (e % 32) & 1u) {
            sel[j++] = (int32_t)e;
            chosen += exp((double)ig_lds(&lg[e]) - mx);
        }
    const double denom = p.norm_topk ? chosen : all;
    for (j = 0; j < p.k; j++)
        p.wts[(int64_t)blockIdx.x * p.k + j] =
            (float)(exp((double)ig_lds(&lg[sel[j]]) - mx) / denom);
}

/* ---- grouping by expert -------------------------------------------------------- */

__global__ void __launch_bounds__(kThreads) sort_kernel(const gk_moe_sort_params p)
{
    gk_dep_start(); /* sel: the routing's */
    IG_DYN_SHARED(int32_t, sort_smem);
    const int32_t tile = p.tile ? (int32_t)p.tile : kTile;
    int32_t *cnt = sort_smem, *start = sort_smem + p.n_expert, *tile0 = sort_smem + 2 * p.n_expert;
    for (int64_t e = threadIdx.x; e < p.n_expert; e += kThreads) {
        int32_t c = 0;
        for (int64_t i = 0; i < p.n_pairs; i++)
            c += p.sel[i] == p.expert0 + e;
        ig_sts(&cnt[e], c);
    }
    ig_syncthreads();
    if (threadIdx.x == 0) {
        int32_t s = 0, t = 0;
        for (int64_t e = 0; e < p.n_expert; e++) {
            const int32_t c = ig_lds(&cnt[e]);
            ig_sts(&start[e], s);
            ig_sts(&tile0[e], t);
            s += c;
            t += (c + tile - 1) / tile;
        }
        *p.n_tiles = t;
    }
    ig_syncthreads();
    for (int64_t e = threadIdx.x; e < p.n_expert; e += kThreads) {
        const int32_t s = ig_lds(&start[e]), c = ig_lds(&cnt[e]);
        int32_t j = s, t = ig_lds(&tile0[e]);
        for (int64_t i = 0; i < p.n_pairs; i++)
            if (p.sel[i] == p.expert0 + e)
                p.order[j++] = (int32_t)i;
        for (int32_t o = 0; o < c; o += tile, t++) {
            p.tiles[3 * t] = (int32_t)e;
            p.tiles[3 * t + 1] = s + o;
            p.tiles[3 * t + 2] = c - o < tile ? c - o : tile;
        }
    }
}

/* ---- the expert-indexed product ---------------------------------------------------- */

/* y[0..31] = the values of 32-element block xb of row `row` of w: the
 * file's block types through gpu_qblocks.cuh, f16 as it is. */
template <int TYPE> struct decode {
    static __device__ __forceinline__ void block(const gk_qmat &w, int64_t row, int64_t xb,
                                                 float y[32])
    {
        qb_decode32<TYPE>(w, row, xb, y);
    }
};

template <> struct decode<QUANT_F16> {
    static __device__ __forceinline__ void block(const gk_qmat &w, int64_t row, int64_t xb,
                                                 float y[32])
    {
        const gk_u32x4 *s = (const gk_u32x4 *)((const uint16_t *)w.q + row * w.cols + 32 * xb);
        IG_UNROLL
        for (int i = 0; i < 4; i++) {
            const gk_u32x4 v = s[i];
            IG_UNROLL
            for (int k = 0; k < 4; k++) {
                y[8 * i + 2 * k] = gk_f16_bits_to_f32(v.w[k] & 0xffffu);
                y[8 * i + 2 * k + 1] = gk_f16_bits_to_f32(v.w[k] >> 16);
            }
        }
    }
};

/* sum over 32 of w[l] x[l], x the f16 row's block at xs (16-byte aligned). */
__device__ __forceinline__ float dot32(const float w[32], const uint16_t *xs)
{
    float s = 0;
    IG_UNROLL
    for (int i = 0; i < 4; i++) {
        const gk_u32x4 v = ((const gk_u32x4 *)xs)[i];
        IG_UNROLL
        for (int k = 0; k < 4; k++) {
            s += w[8 * i + 2 * k] * gk_f16_bits_to_f32(v.w[k] & 0xffffu);
            s += w[8 * i + 2 * k + 1] * gk_f16_bits_to_f32(v.w[k] >> 16);
        }
    }
    return s;
}

__device__ __forceinline__ float glu_oai(float g, float u)
{
    g = 7.0f < g ? 7.0f : g; /* std::min / std::clamp: a NaN goes through */
    u = u < -7.0f ? -7.0f : 7.0f < u ? 7.0f : u;
    return g / (1.0f + expf(1.702f * -g)) * (u + 1.0f);
}

/* (kThreads, 1): with the bound alone ptxas spilled 8-12 bytes in some
 * instances (sm_80) at 80-100 registers. */
template <int TYPE, bool GLU>
__global__ void __launch_bounds__(kThreads, 1) gemv_kernel(const gk_moe_gemv_params p,
                                                            const int64_t tile0)
{
    gk_dep_start(); /* the tiles (the sort's) and x (the norm's or gate|up's) */
    const int64_t tile = tile0 + blockIdx.y; /* a launch's tiles: launch_tiles */
    if (tile >= *p.n_tiles) /* the whole block: no barriers below */
        return;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int64_t i = (int64_t)blockIdx.x * kWarps + warp; /* output row within the expert */
    if (i >= p.rows) /* whole warps: the shuffles are per warp */
        return;
    const int32_t ex = p.tiles[3 * tile], first = p.tiles[3 * tile + 1],
                  cnt = p.tiles[3 * tile + 2];
    int32_t pair[kTile];
    IG_UNROLL
    for (int j = 0; j < kTile; j++)
        pair[j] = j < cnt ? p.order[first + j] : 0;
    const int64_t row = (int64_t)ex * p.rows + i;
    float acc[kTile], acc2[kTile];
    IG_UNROLL
    for (int j = 0; j < kTile; j++)
        acc[j] = acc2[j] = 0;
    for (int xb = lane; xb < (int)(p.w.cols / 32); xb += 32) {
        /* one weight block in registers at a time (gate, then up): two
         * spilled at 128 registers */
        IG_UNROLL
        for (int m = 0; m < (GLU ? 2 : 1); m++) {
            float wv[32];
            decode<TYPE>::block(m ? p.w2 : p.w, row, xb, wv);
            IG_UNROLL
            for (int j = 0; j < kTile; j++) {
                if (j < cnt) {
                    const float d =
                        dot32(wv, p.x + (int64_t)(pair[j] / p.x_div) * p.ld_x + 32 * xb);
                    if (m)
                        acc2[j] += d;
                    else
                        acc[j] += d;
                }
            }
        }
    }
    IG_UNROLL
    for (int j = 0; j < kTile; j++) {
        float a = acc[j], b = acc2[j];
        for (int m = 16; m > 0; m >>= 1) {
            a += ig_shfl_xor_f32(a, m);
            if (GLU)
                b += ig_shfl_xor_f32(b, m);
        }
        if (lane != 0 || j >= cnt)
            continue;
        if (p.bias)
            a += p.bias[row];
        if (GLU && p.bias2)
            b += p.bias2[row];
        if (GLU)
            p.h[(int64_t)pair[j] * p.ld_h + i] =
                gk_f32_to_f16(p.glu == GK_MOE_GLU_OAI ? glu_oai(a, b)
                              : p.glu == GK_GLU_GELU  ? gk_gelu_mul(a, b)
                                                      : gk_silu_mul(a, b));
        else /* gemma4's per-expert scale, before the combine's weight */
            p.y[(int64_t)pair[j] * p.ld_y + i] = p.scale ? p.scale[ex] * a : a;
    }
}

/* ---- the expert-indexed product on the tensor cores ------------------------------------ */

/* gk_qmma's main loop (ops/gpu_qmma_tile.cuh) over one tile of an expert's pairs: a
 * block of 4 warps takes a 64-row W tile x the tile's (up to) 64 pairs'
 * rows of x, over k-tiles of 64 columns, each warp 32 rows x 32 pairs (2 m16
 * x 4 n8 mma tiles). The glu product's W tile holds 32 output rows twice:
 * tile rows 32 a + b (b < 16) are gate row 16 a + b, rows 32 a + 16 + b its
 * up row, so a warp's two m16 tiles are the gate and up of the same 16
 * rows and the activation needs no exchange. */
constexpr int kMmaThreads = qmma_tile::kThreads;
constexpr int kMM = qmma_tile::kBM, kMN = qmma_tile::kBN, kMK = qmma_tile::kBK;
static_assert(kMN == GK_MOE_MMA_TILE, "a tile's pairs are the x rows of the main loop");

template <int TYPE, bool GLU>
__global__ void __launch_bounds__(kMmaThreads) mma_kernel(const gk_moe_gemv_params p,
                                                          const int64_t tile0)
{
    gk_dep_start(); /* the tiles name the expert: nothing to load before */
    const int64_t tile = tile0 + blockIdx.y; /* a launch's tiles: launch_tiles */
    if (tile >= *p.n_tiles) /* the whole block: before any barrier */
        return;
    IG_DYN_SHARED(uint16_t, mma_smem); /* W[2][tile], X[2][tile] */
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int32_t ex = p.tiles[3 * tile], first = p.tiles[3 * tile + 1],
                  cnt = p.tiles[3 * tile + 2];
    constexpr int kRows = GLU ? kMM / 2 : kMM; /* output rows of the expert a block */
    const int64_t i0 = (int64_t)blockIdx.x * kRows; /* its first, within the expert */

    /* this thread's weight block: its tile row's (tid / 2) matrix and row */
    const int my_row = tid / 2;
    const bool my_up = GLU && (my_row / 16) % 2;
    const int64_t my_i = GLU ? i0 + (my_row / 32) * 16 + my_row % 16 : i0 + my_row;
    /* this thread's x chunks: pairs tid / 8 + 16 j (j < 4), columns 8 (tid % 8) */
    constexpr int kXPer = kMN * kMK / 8 / kMmaThreads;
    const int x_col = (tid % (kMK / 8)) * 8;
    const uint16_t *xrow[kXPer];
    IG_UNROLL
    for (int j = 0; j < kXPer; j++) {
        const int pr = tid / (kMK / 8) + j * (kMmaThreads / (kMK / 8));
        xrow[j] = pr < cnt ? p.x + (int64_t)(p.order[first + pr] / p.x_div) * p.ld_x : NULL;
    }
    auto load_x = [&](int64_t kt, uint16_t *dst) {
        const int64_t gc = kt * kMK + x_col;
        IG_UNROLL
        for (int j = 0; j < kXPer; j++) {
            const int pr = tid / (kMK / 8) + j * (kMmaThreads / (kMK / 8));
            const bool ok = xrow[j] && gc < p.w.cols;
            ig_cp_async16(&dst[qmma_tile::swz(pr, x_col)], ok ? xrow[j] + gc : p.x, ok);
        }
        ig_cp_async_commit();
    };
    const int64_t wrow = (int64_t)ex * p.rows + my_i;
    float acc[2][4][4];
    qmma_tile::mainloop<TYPE>(my_up ? p.w2 : p.w, wrow, my_i < p.rows, p.w.cols, mma_smem, load_x,
                              [] {}, acc);
    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 tile rows and 32 pairs */

    /* C fragment: c0, c1 at (row g, pairs 2q, 2q + 1), c2, c3 at row g + 8;
     * glu: acc[0] the gate, acc[1] the up of the same rows */
    const int g = lane / 4, q = lane % 4;
    IG_UNROLL
    for (int nt = 0; nt < 4; nt++)
        IG_UNROLL
        for (int c = 0; c < 2; c++) {
            const int pr = wn * 32 + nt * 8 + 2 * q + c;
            if (pr >= cnt)
                continue;
            const int64_t pair = p.order[first + pr];
            IG_UNROLL
            for (int mt = 0; mt < (GLU ? 1 : 2); mt++)
                IG_UNROLL
                for (int hr = 0; hr < 2; hr++) {
                    const int64_t i =
                        GLU ? i0 + wm * 16 + g + 8 * hr : i0 + wm * 32 + mt * 16 + g + 8 * hr;
                    if (i >= p.rows)
                        continue;
                    const int64_t row = (int64_t)ex * p.rows + i;
                    float a = acc[mt][nt][2 * hr + c];
                    if (p.bias)
                        a += p.bias[row];
                    if (GLU) {
                        float b = acc[1][nt][2 * hr + c];
                        if (p.bias2)
                            b += p.bias2[row];
                        p.h[pair * p.ld_h + i] =
                            gk_f32_to_f16(p.glu == GK_MOE_GLU_OAI ? glu_oai(a, b)
                                          : p.glu == GK_GLU_GELU  ? gk_gelu_mul(a, b)
                                                                  : gk_silu_mul(a, b));
                    } else { /* gemma4's per-expert scale, before the combine's weight */
                        p.y[pair * p.ld_y + i] = p.scale ? p.scale[ex] * a : a;
                    }
                }
        }
}

/* The types the product reads: the file's block types (MXFP4 too) and f16. */
template <class F> int moe_type_dispatch(int type, F &&f)
{
    if (type == QUANT_F16)
        return f(qtype_tag<QUANT_F16>());
    return qtype_dispatch_experts(type, f);
}

/* ---- the weighted sum into the residual ---------------------------------------------- */

__global__ void __launch_bounds__(kThreads)
combine_kernel(float *x, int64_t ld_x, const float *y, int64_t ld_y, const float *wts,
               const gk_moe_part part, int64_t k, int64_t dim)
{
    gk_dep_start(); /* y: the down product's; x: the residual */
    /* rows on x: a prefill step's 2^20 pass grid.y's 65535 */
    const int64_t t = blockIdx.x, d = (int64_t)blockIdx.y * kThreads + threadIdx.x;
    if (d >= dim)
        return;
    float s = 0;
    for (int64_t j = 0; j < k; j++) {
        /* another rank's expert: its y was not written here (that rank adds it) */
        if (part.sel && (uint64_t)(part.sel[t * k + j] - part.expert0) >= (uint64_t)part.n_expert)
            continue;
        s += wts[t * k + j] * y[(t * k + j) * ld_y + d];
    }
    x[t * ld_x + d] += s;
}

/* Launches `launch(tile0, tiles)` over max_tiles tiles, grid.y's 65535
 * (IG_GRID_Y_MAX) at a time (a prefill step of 65535 rows of 8 slots has
 * 65535 tiles of 8 pairs and more), in stream order: the next launch's
 * first tile after the last's. */
template <class F> int launch_tiles(int64_t max_tiles, F &&launch)
{
    const int64_t most = IG_GRID_Y_MAX;
    for (int64_t t0 = 0; t0 < max_tiles; t0 += most) {
        const int64_t n = max_tiles - t0 < most ? max_tiles - t0 : most;
        const int st = launch(t0, (unsigned)n);
        if (st != IG_OK)
            return st;
    }
    return IG_OK;
}

} /* namespace */

extern "C" {

int IG_DEV(gk_moe_route)(const struct gk_moe_route_params *p, void *stream)
{
    if (p->n < 0 || p->n > 0x7fffffff || p->n_embd < 1 || p->ld_x < p->n_embd ||
        p->n_expert < 1 || p->n_expert > GK_MOE_MAX_EXPERTS || p->k < 1 || p->k > p->n_expert ||
        (p->n_embd + p->n_expert) * 4 > 48 * 1024 /* the default dynamic shared memory */ ||
        !p->x || !p->norm_w || !p->router || !p->sel || !p->wts ||
        (p->shexp_gate && !p->shexp_w))
        return ig_error(IG_E_INTERNAL, "gk_moe_route: bad sizes (n %lld, n_embd %lld, %lld "
                        "experts, k %lld) or NULL", (long long)p->n, (long long)p->n_embd,
                        (long long)p->n_expert, (long long)p->k);
    if (p->n == 0)
        return IG_OK;
    const size_t smem = (size_t)(p->n_embd + p->n_expert) * sizeof(float);
    /* The 48 KiB default covers gk_block_sum's static slots too (32 bytes, a
     * KiB left for ptxas's own): near 48 KiB of the row and logits it needs the raise. */
    if (smem + 1024 > 48 * 1024)
        IG_SMEM_OPTIN(&route_kernel, smem);
    return IG_LAUNCH_DEP(route_kernel, dim3((unsigned)p->n), dim3(kThreads), smem,
                         (cudaStream_t)stream, *p);
}

int IG_DEV(gk_moe_sort)(const struct gk_moe_sort_params *p, void *stream)
{
    if (p->n_pairs < 1 || p->n_pairs > 0x7fffffff || p->n_expert < 1 ||
        p->n_expert > GK_MOE_MAX_EXPERTS || p->expert0 < 0 ||
        p->expert0 + p->n_expert > GK_MOE_MAX_EXPERTS || !p->sel || !p->order || !p->tiles ||
        !p->n_tiles ||
        (p->tile != 0 && p->tile != GK_MOE_TILE && p->tile != GK_MOE_MMA_TILE))
        return ig_error(IG_E_INTERNAL, "gk_moe_sort: bad sizes (%lld pairs, %lld experts, "
                        "tile %lld) or NULL", (long long)p->n_pairs, (long long)p->n_expert,
                        (long long)p->tile);
    const size_t smem = (size_t)(3 * p->n_expert) * sizeof(int32_t);
    return IG_LAUNCH_DEP(sort_kernel, dim3(1), dim3(kThreads), smem, (cudaStream_t)stream, *p);
}

int IG_DEV(gk_moe_gemv)(const struct gk_moe_gemv_params *p, void *stream)
{
    const bool glu = p->glu != GK_GLU_NONE;
    const bool ok =
        p->rows >= 1 && p->w.rows % p->rows == 0 && p->w.cols >= 32 && p->w.cols % 32 == 0 &&
        p->w.q && (p->w.type == QUANT_F16 || gk_qmm_native_experts(p->w.type, p->w.rows, p->w.cols)) &&
        p->x && p->ld_x >= p->w.cols && p->ld_x % 8 == 0 && gk_aligned(p->x, 16) &&
        p->x_div >= 1 && p->order && p->tiles && p->n_tiles && p->max_tiles >= 1 &&
        p->max_tiles <= 0x7fffffff && (p->rows + kWarps - 1) / kWarps <= 0x7fffffff &&
        (glu ? (p->glu == GK_GLU_SILU || p->glu == GK_GLU_GELU || p->glu == GK_MOE_GLU_OAI) &&
                   p->h && !p->scale &&
                   p->ld_h >= p->rows && p->w2.q && p->w2.type == p->w.type &&
                   p->w2.rows == p->w.rows && p->w2.cols == p->w.cols
             : p->y && p->ld_y >= p->rows);
    if (!ok)
        return ig_error(IG_E_INTERNAL, "gk_moe_gemv: unsupported %s %lld x %lld (%lld a expert), "
                        "ld_x %lld, %lld tiles (or a NULL or misaligned pointer)",
                        quant_type_name((uint32_t)p->w.type), (long long)p->w.rows,
                        (long long)p->w.cols, (long long)p->rows, (long long)p->ld_x,
                        (long long)p->max_tiles);
    const gk_moe_gemv_params q = *p;
    const unsigned blocks = (unsigned)((q.rows + kWarps - 1) / kWarps);
    return moe_type_dispatch(q.w.type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        auto *kernel = glu ? gemv_kernel<T, true> : gemv_kernel<T, false>;
        return launch_tiles(q.max_tiles, [&](int64_t t0, unsigned n) {
            return IG_LAUNCH_DEP(kernel, dim3(blocks, n), dim3(kThreads), 0,
                                 (cudaStream_t)stream, q, t0);
        });
    });
}

int IG_DEV(gk_moe_mma)(const struct gk_moe_gemv_params *p, void *stream)
{
    const bool glu = p->glu != GK_GLU_NONE;
    /* f16 experts: 32-column blocks copied as they are (16-byte aligned rows) */
    const bool f16 = p->w.type == QUANT_F16;
    struct gk_qlayout l = {};
    l.block = 32;
    const bool ok =
        (f16 || (gk_qlayout_of(p->w.type, &l) &&
                 gk_qmm_native_experts(p->w.type, p->w.rows, p->w.cols))) &&
        p->rows >= 1 && p->w.rows % p->rows == 0 && p->w.cols >= l.block &&
        p->w.cols % l.block == 0 && p->w.q && gk_aligned(p->w.q, 16) &&
        (f16 || (p->w.s && (!l.h || p->w.h))) &&
        p->x && p->ld_x >= p->w.cols && p->ld_x % 8 == 0 && gk_aligned(p->x, 16) &&
        p->x_div >= 1 && p->order && p->tiles && p->n_tiles && p->max_tiles >= 1 &&
        p->max_tiles <= 0x7fffffff && (p->rows + kMM - 1) / (kMM / 2) <= 0x7fffffff &&
        (glu ? (p->glu == GK_GLU_SILU || p->glu == GK_GLU_GELU || p->glu == GK_MOE_GLU_OAI) &&
                   p->h && !p->scale && p->ld_h >= p->rows && p->w2.q &&
                   gk_aligned(p->w2.q, 16) && (f16 || (p->w2.s && (!l.h || p->w2.h))) &&
                   p->w2.type == p->w.type && p->w2.rows == p->w.rows && p->w2.cols == p->w.cols
             : p->y && p->ld_y >= p->rows);
    if (!ok)
        return ig_error(IG_E_INTERNAL, "gk_moe_mma: unsupported %s %lld x %lld (%lld a expert), "
                        "ld_x %lld, %lld tiles (or a NULL or misaligned pointer)",
                        quant_type_name((uint32_t)p->w.type), (long long)p->w.rows,
                        (long long)p->w.cols, (long long)p->rows, (long long)p->ld_x,
                        (long long)p->max_tiles);
    const gk_moe_gemv_params q = *p;
    const int64_t per = glu ? kMM / 2 : kMM; /* output rows a block (mma_kernel's kRows) */
    const unsigned blocks = (unsigned)((q.rows + per - 1) / per);
    const size_t smem = qmma_tile::kSmemBytes;
    return moe_type_dispatch(q.w.type, [&](auto tag) {
        constexpr int T = decltype(tag)::value;
        auto *kernel = glu ? mma_kernel<T, true> : mma_kernel<T, false>;
        return launch_tiles(q.max_tiles, [&](int64_t t0, unsigned n) {
            return IG_LAUNCH_DEP(kernel, dim3(blocks, n), dim3(kMmaThreads), smem,
                                 (cudaStream_t)stream, q, t0);
        });
    });
}

int IG_DEV(gk_moe_combine)(float *x, int64_t ld_x, const float *y, int64_t ld_y,
                           const float *wts, struct gk_moe_part part, int64_t n, int64_t k,
                           int64_t dim, void *stream)
{
    if (n < 0 || n > 0x7fffffff || k < 1 || dim < 1 || (dim + kThreads - 1) / kThreads > IG_GRID_Y_MAX ||
        ld_x < dim || ld_y < dim || !x || !y || !wts ||
        (part.sel && (part.expert0 < 0 || part.n_expert < 0)))
        return ig_error(IG_E_INTERNAL, "gk_moe_combine: bad sizes (n %lld, k %lld, dim %lld) "
                        "or NULL", (long long)n, (long long)k, (long long)dim);
    if (n == 0)
        return IG_OK;
    const dim3 grid((unsigned)n, (unsigned)((dim + kThreads - 1) / kThreads));
    return IG_LAUNCH_DEP(combine_kernel, grid, dim3(kThreads), 0, (cudaStream_t)stream, x, ld_x,
                         y, ld_y, wts, part, k, dim);
}

} /* extern "C" */
