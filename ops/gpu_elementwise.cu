/* ops/gpu_elementwise.cu: the element-wise kernels of a Llama block on the
 * GPU (embedding lookup, RMSNorm, QKV bias + RoPE + K/V placement, SwiGLU,
 * and Gemma's GeGLU beside it) and their launchers; contracts in
 * ops/gpu_ops.h, results defined by the CPU twins in ops/gpu_ops_ref.c.
 *
 * All are memory-bound: rows are read and written once, with 16-byte (or
 * 8-byte) accesses where the row length and pointers allow, consecutive
 * threads on consecutive chunks. RMSNorm is one block per row (warp shuffles,
 * then one shared slot per warp, summed in a fixed order). RoPE is one block
 * per (token, range of heads): the token's cos/sin are computed once per
 * block, in double as on the CPU, into shared memory, at the row's own
 * position (a step's rows may be of several sequences); in cache mode K and V
 * go to the KV pool through the row's block table.
 *
 * Under IGNITE_PDL=1 each goes out as a programmatic dependent launch
 * (IG_LAUNCH_DEP) and starts with gk_dep_start: nothing of theirs can run
 * before their inputs, so they only wait and let the next kernel start.
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator through
 * ops/gpu_elementwise_emu.cc (name_emu). Covered by
 * tests/emu/test_gpu_ops_emu.c and tests/gpu/. */
#include "ops/gpu_math.cuh"
#include "ops/gpu_ops.h"
#include "ops/gpu_rope.cuh"

#include "models/model.h"
extern "C" {
#include "kvcache/kvcache.h"
}

namespace {

constexpr int kThreads = 256;      /* embed, swiglu, rmsnorm (at most) */
constexpr int kRopeThreads = 128;
constexpr int kRopeSlotsPerThread = 4; /* pairs per thread; a block covers 512 pairs */

/* ---- embedding ------------------------------------------------------------ */

/* Block (t, chunk range): VEC moves 8 elements per thread (16-byte f16 load,
 * two 16-byte f32 stores); otherwise one element. The table holds the
 * vocabulary rows [v0, v0 + n_v); a token outside them gets zeros (a
 * tensor-parallel rank's part: the all-reduce adds the other ranks' rows). */
template <bool VEC>
__global__ void __launch_bounds__(kThreads)
embed_kernel(const uint16_t *__restrict__ table, const int32_t *__restrict__ tokens,
             int64_t n_embd, int64_t v0, int64_t n_v, float *__restrict__ x)
{
    gk_dep_start(); /* the tokens may be the greedy kernel's */
    const int64_t t = blockIdx.x;
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)tokens[t] - v0;
    const uint16_t *src = table + row * n_embd;
    float *dst = x + t * n_embd;
    if (row < 0 || row >= n_v) { /* another rank's token */
        if (VEC && c < n_embd / 8) {
            ((gk_f32x4 *)dst)[2 * c] = gk_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
            ((gk_f32x4 *)dst)[2 * c + 1] = gk_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
        } else if (!VEC && c < n_embd) {
            dst[c] = 0.0f;
        }
        return;
    }
    if (VEC) {
        if (c >= n_embd / 8)
            return;
        const gk_u32x4 h = ((const gk_u32x4 *)src)[c];
        gk_f32x4 lo, hi;
        lo.x = gk_f16_to_f32((uint16_t)h.w[0]), lo.y = gk_f16_to_f32((uint16_t)(h.w[0] >> 16));
        lo.z = gk_f16_to_f32((uint16_t)h.w[1]), lo.w = gk_f16_to_f32((uint16_t)(h.w[1] >> 16));
        hi.x = gk_f16_to_f32((uint16_t)h.w[2]), hi.y = gk_f16_to_f32((uint16_t)(h.w[2] >> 16));
        hi.z = gk_f16_to_f32((uint16_t)h.w[3]), hi.w = gk_f16_to_f32((uint16_t)(h.w[3] >> 16));
        ((gk_f32x4 *)dst)[2 * c] = lo;
        ((gk_f32x4 *)dst)[2 * c + 1] = hi;
    } else if (c < n_embd) {
        dst[c] = gk_f16_to_f32(src[c]);
    }
}

/* ---- RMSNorm ---------------------------------------------------------------- */

/* One block per row (gk_rmsnorm_row, which a GEMV's tail shares). VEC: 4
 * elements per access (f32x4 in, 4 f16 out); the row is read twice, the
 * second time from L1/L2. XQ (gk_rmsnorm_xq): then the row's int8 blocks,
 * one thread a block of 32 (gk_quantize32, as the GEMVs' norm tail); a
 * kernel of its own, so the plain norm keeps its registers (22, not 52). */
template <bool VEC, bool XQ>
__global__ void __launch_bounds__(kThreads)
rmsnorm_kernel(const float *__restrict__ x, int64_t ld_x, const float *__restrict__ w,
               int64_t dim, float eps, uint16_t *__restrict__ y, int8_t *__restrict__ xq,
               gk_f32x2 *__restrict__ xqd)
{
    gk_dep_start(); /* x: the previous product's */
    const int64_t t = blockIdx.x;
    gk_rmsnorm_row<VEC, false>(x + t * ld_x, w, dim, eps, y + t * dim, (int)blockDim.x);
    if (!XQ)
        return;
    ig_syncthreads(); /* the row's y, read back through L1 */
    for (int64_t i = threadIdx.x; i < dim / 32; i += blockDim.x)
        gk_quantize32(y + t * dim + 32 * i, xq + t * dim + 32 * i, xqd + t * (dim / 32) + i);
}

/* ---- QKV: bias, RoPE, f16, K/V placement ------------------------------------ */

/* Block (t, slot range): slot s of the token is head s / (head_dim / 2), pair
 * s % (head_dim / 2); heads are q | k | v as in the GEMM output. The pair's
 * arithmetic and store are gk_rope_store's (ops/gpu_rope.cuh), which the
 * Q|K|V GEMVs' fused epilogue shares. */
__global__ void __launch_bounds__(kRopeThreads) qkv_rope_kernel(const gk_qkv_params p)
{
    IG_DYN_SHARED(float, cs); /* [n_rot / 2] cos, then [n_rot / 2] sin */
    gk_dep_start(); /* qkv: the Q|K|V product's */
    const int64_t t = blockIdx.x;
    const int64_t pos = p.pos[t];
    const bool pad = pos < 0; /* a padding row: zeros out, nothing to the cache */
    const int half = (int)(p.n_rot / 2), hd = (int)p.head_dim, pairs = hd / 2;
    const int n_heads = (int)(p.n_head + 2 * p.n_head_kv);
    for (int i = (int)threadIdx.x; i < half && !pad; i += kRopeThreads) {
        float c, sn;
        gk_rope_cs(p, pos, i, &c, &sn);
        ig_sts(&cs[i], c);
        ig_sts(&cs[half + i], sn);
    }
    ig_syncthreads();
    const int64_t blk = gk_rope_block(p, t, pos);
    const int64_t width = (int64_t)n_heads * hd;
    const float *row = p.qkv + t * width;
    const int s_end = n_heads * pairs;
    const int s0 = (int)blockIdx.y * kRopeThreads * kRopeSlotsPerThread + (int)threadIdx.x;
    for (int k = 0; k < kRopeSlotsPerThread; k++) {
        const int s = s0 + k * kRopeThreads;
        if (s >= s_end)
            break;
        const int h = s / pairs, j = s % pairs;
        const rope_slot sl = gk_rope_slot(j, half, p.rope_style);
        const int e0 = h * hd + sl.e0, e1 = e0 + sl.gap;
        float a, b;
        if (sl.gap == 1) {
            const gk_f32x2 v = *(const gk_f32x2 *)(row + e0);
            a = v.x, b = v.y;
        } else {
            a = row[e0], b = row[e1];
        }
        const bool turn = !pad && sl.rotate;
        gk_rope_store(p, t, pos, blk, s, a, b, turn ? ig_lds(&cs[j]) : 0.0f,
                      turn ? ig_lds(&cs[half + j]) : 0.0f);
    }
}

/* ---- SwiGLU, GeGLU ------------------------------------------------------------ */

template <bool GELU>
__device__ __forceinline__ float act_mul(float g, float u)
{
    return GELU ? gk_gelu_mul(g, u) : gk_silu_mul(g, u);
}

/* Block (t, chunk range): VEC does 4 elements (two f32x4 loads, 8-byte store).
 * GELU: GeGLU, else SwiGLU. */
template <bool VEC, bool GELU = false>
__global__ void __launch_bounds__(kThreads)
swiglu_kernel(const float *__restrict__ gate_up, int64_t n_ff, uint16_t *__restrict__ h)
{
    gk_dep_start(); /* gate_up: the gate|up product's */
    const int64_t t = blockIdx.x;
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const float *gr = gate_up + t * 2 * n_ff, *ur = gr + n_ff;
    uint16_t *hr = h + t * n_ff;
    if (VEC) {
        if (c >= n_ff / 4)
            return;
        const gk_f32x4 g = ((const gk_f32x4 *)gr)[c], u = ((const gk_f32x4 *)ur)[c];
        gk_u32x2 o;
        o.lo = ig_pack2<ig_f16_t>(act_mul<GELU>(g.x, u.x), act_mul<GELU>(g.y, u.y));
        o.hi = ig_pack2<ig_f16_t>(act_mul<GELU>(g.z, u.z), act_mul<GELU>(g.w, u.w));
        ((gk_u32x2 *)hr)[c] = o;
    } else if (c < n_ff) {
        hr[c] = gk_f32_to_f16(act_mul<GELU>(gr[c], ur[c]));
    }
}

/* Threads per block for rows of `items` vector items: whole warps, at most
 * kThreads, so short rows (decode) do not launch idle warps. */
int threads_for(int64_t items)
{
    return items >= kThreads ? kThreads : (int)((items + 31) / 32 * 32);
}

/* Blocks for a row's items on the grid's y; 0 past CUDA's 65535 (the
 * launcher reports such a row as unsupported). */
unsigned blocks_for(int64_t items, int64_t per_block)
{
    const int64_t b = (items + per_block - 1) / per_block;
    return b > 65535 ? 0 : (unsigned)b;
}

} /* namespace */

extern "C" {

int IG_DEV(gk_embed)(const uint16_t *table, const int32_t *tokens, int64_t n, int64_t n_embd,
                     int64_t v0, int64_t n_v, float *x, void *stream_)
{
    if (n < 0 || n_embd < 1 || n > 0x7fffffff || v0 < 0 || n_v < 0 || !table || !tokens || !x)
        return ig_error(IG_E_INTERNAL, "gk_embed: bad sizes (n %lld, n_embd %lld, rows %lld "
                        "from %lld) or NULL", (long long)n, (long long)n_embd, (long long)n_v,
                        (long long)v0);
    if (n == 0)
        return IG_OK;
    const bool vec = n_embd % 8 == 0 && gk_aligned(table, 16) && gk_aligned(x, 16);
    const int64_t items = vec ? n_embd / 8 : n_embd;
    const int threads = threads_for(items);
    dim3 grid((unsigned)n, blocks_for(items, threads)), block((unsigned)threads);
    if (grid.y == 0)
        return ig_error(IG_E_INTERNAL, "gk_embed: n_embd %lld too wide", (long long)n_embd);
    auto *kernel = vec ? embed_kernel<true> : embed_kernel<false>;
    return IG_LAUNCH_DEP(kernel, grid, block, 0, (cudaStream_t)stream_, table, tokens, n_embd, v0,
                         n_v, x);
}

int IG_DEV(gk_rmsnorm)(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                       float eps, uint16_t *y, void *stream_)
{
    return IG_DEV(gk_rmsnorm_xq)(x, ld_x, w, n, dim, eps, y, NULL, NULL, stream_);
}

int IG_DEV(gk_rmsnorm_xq)(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                          float eps, uint16_t *y, int8_t *xq, float *xqd, void *stream_)
{
    if (n < 0 || dim < 1 || ld_x < dim || n > 0x7fffffff || !x || !w || !y)
        return ig_error(IG_E_INTERNAL, "gk_rmsnorm: bad sizes (n %lld, dim %lld, ld_x %lld) "
                        "or NULL", (long long)n, (long long)dim, (long long)ld_x);
    if (xq && (dim % 32 || !xqd || !gk_aligned(xqd, 8)))
        return ig_error(IG_E_INTERNAL, "gk_rmsnorm_xq: int8 blocks of a row of %lld (not a "
                        "multiple of 32) or without 8-byte aligned (d, s) pairs",
                        (long long)dim);
    if (n == 0)
        return IG_OK;
    const bool vec = dim % 4 == 0 && ld_x % 4 == 0 && gk_aligned(x, 16) && gk_aligned(w, 16) &&
                     gk_aligned(y, 8);
    const int64_t items = vec ? dim / 4 : dim;
    const int threads = gk_rmsnorm_threads(items); /* the GEMVs' norm tail uses as many */
    dim3 grid((unsigned)n), block((unsigned)threads);
    auto *kernel = xq ? (vec ? rmsnorm_kernel<true, true> : rmsnorm_kernel<false, true>)
                      : (vec ? rmsnorm_kernel<true, false> : rmsnorm_kernel<false, false>);
    return IG_LAUNCH_DEP(kernel, grid, block, 0, (cudaStream_t)stream_, x, ld_x, w, dim, eps, y,
                         xq, (gk_f32x2 *)xqd);
}

int IG_DEV(gk_qkv_rope)(const struct gk_qkv_params *p, void *stream_)
{
    const int64_t n_heads = p->n_head + 2 * p->n_head_kv;
    const bool to_cache = p->k == NULL;
    if (p->n < 0 || p->n > 0x7fffffff || p->n_head < 1 || p->n_head_kv < 1 ||
        p->head_dim < 2 || p->head_dim % 2 || p->n_rot < 0 || p->n_rot % 2 ||
        p->n_rot > p->head_dim || n_heads * p->head_dim > 0x7fffffff ||
        (p->rope_style != ROPE_ADJACENT && p->rope_style != ROPE_HALF_SPLIT) ||
        (to_cache && (p->table_stride < 1 || p->block_stride < 0 || p->head_stride < 0 ||
                      p->head_stride % 2 || p->block_stride % 2)))
        return ig_error(IG_E_INTERNAL, "gk_qkv_rope: bad sizes (n %lld, heads %lld/%lld, "
                        "head_dim %lld, n_rot %lld, style %d, table stride %lld, block "
                        "stride %lld, head stride %lld)", (long long)p->n,
                        (long long)p->n_head, (long long)p->n_head_kv, (long long)p->head_dim,
                        (long long)p->n_rot, p->rope_style, (long long)p->table_stride,
                        (long long)p->block_stride, (long long)p->head_stride);
    const void *outs[] = {p->q, to_cache ? p->k_cache : p->k, to_cache ? p->v_cache : p->v};
    if (!p->qkv || !p->pos || (p->n_rot && !p->inv_freq) || (to_cache && !p->block_table) ||
        !gk_aligned(p->qkv, 8) ||
        (p->bias && !gk_aligned(p->bias, 8)))
        return ig_error(IG_E_INTERNAL, "gk_qkv_rope: qkv, pos, inv_freq or block_table "
                        "NULL, or qkv/bias not 8-byte aligned");
    for (const void *o : outs)
        if (!o || !gk_aligned(o, 4))
            return ig_error(IG_E_INTERNAL, "gk_qkv_rope: an output is NULL or not 4-byte "
                            "aligned");
    if (p->n == 0)
        return IG_OK;
    const int64_t slots = n_heads * (p->head_dim / 2);
    dim3 grid((unsigned)p->n, blocks_for(slots, kRopeThreads * kRopeSlotsPerThread));
    dim3 block(kRopeThreads);
    if (grid.y == 0)
        return ig_error(IG_E_INTERNAL, "gk_qkv_rope: %lld heads too many", (long long)n_heads);
    const size_t smem = (size_t)(p->n_rot > 0 ? p->n_rot : 1) * sizeof(float);
    return IG_LAUNCH_DEP(qkv_rope_kernel, grid, block, smem, (cudaStream_t)stream_, *p);
}

/* SwiGLU (gelu false) or GeGLU over n rows. */
static int glu(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h, bool gelu,
               void *stream_)
{
    if (n < 0 || n_ff < 1 || n > 0x7fffffff || !gate_up || !h)
        return ig_error(IG_E_INTERNAL, "gk_%s: bad sizes (n %lld, n_ff %lld) or NULL",
                        gelu ? "geglu" : "swiglu", (long long)n, (long long)n_ff);
    if (n == 0)
        return IG_OK;
    const bool vec = n_ff % 4 == 0 && gk_aligned(gate_up, 16) && gk_aligned(h, 8);
    const int64_t items = vec ? n_ff / 4 : n_ff;
    const int threads = threads_for(items);
    dim3 grid((unsigned)n, blocks_for(items, threads)), block((unsigned)threads);
    if (grid.y == 0)
        return ig_error(IG_E_INTERNAL, "gk_%s: n_ff %lld too wide", gelu ? "geglu" : "swiglu",
                        (long long)n_ff);
    auto *kernel = gelu ? (vec ? swiglu_kernel<true, true> : swiglu_kernel<false, true>)
                        : (vec ? swiglu_kernel<true> : swiglu_kernel<false>);
    return IG_LAUNCH_DEP(kernel, grid, block, 0, (cudaStream_t)stream_, gate_up, n_ff, h);
}

int IG_DEV(gk_swiglu)(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h, void *stream_)
{
    return glu(gate_up, n, n_ff, h, false, stream_);
}

int IG_DEV(gk_geglu)(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h, void *stream_)
{
    return glu(gate_up, n, n_ff, h, true, stream_);
}

} /* extern "C" */
