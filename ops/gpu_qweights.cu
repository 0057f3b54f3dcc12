/* ops/gpu_qweights.cu: quantized weights on the device, whole rows at a
 * time: the repack from the file's blocks into the planes (load time),
 * dequantization of rows to f16 (the just-in-time slabs of the cuBLAS path),
 * the embedding lookup straight from the quantized table, and random blocks
 * for shapes-only synthetic models (MXFP4 too: expert matrices,
 * gk_qmm_native_experts). Contracts in ops/gpu_qmm.h; the twins
 * are gk_qrepack_ref (ops/gpu_qlayout.c) and ops/gpu_qmm_ref.c.
 *
 * One thread per block (repack, random) or per 32-element activation block
 * (dequantization, embedding), grid-stride loops: these are load-time work
 * or bandwidth-bound streams where plainness costs little (the dequantization
 * and the embedding are dependent launches under IGNITE_PDL=1). The values are
 * qb_decode32's (ops/gpu_qblocks.cuh), bit for bit models/quant.c's.
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator
 * through ops/gpu_qweights_emu.cc (name_emu). Covered by
 * tests/emu/test_qmm_emu.c and tests/gpu/test_qmm_gpu.c. */
#include "ops/gpu_qblocks.cuh"
#include "ops/gpu_random.h"

#include <stddef.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16; /* grid-stride beyond this */

unsigned grid_for(int64_t items)
{
    const int64_t b = (items + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

/* ---- repack ------------------------------------------------------------------ */

/* Output word of the one-bit layout: bit 8b + k is element 4k + b of `bits`
 * (the inverse walk of the host's spread1). */
__device__ __forceinline__ uint32_t reorder1(uint32_t bits)
{
    uint32_t out = 0;
    for (int b = 0; b < 4; b++)
        for (int k = 0; k < 8; k++)
            out |= ((bits >> (4 * k + b)) & 1u) << (8 * b + k);
    return out;
}

__device__ __forceinline__ uint32_t load_u32_bytes(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ __forceinline__ void store_u32(uint8_t *p, uint32_t v)
{
    *(uint32_t *)p = v;
}

/* Where a K type's quant byte k (the file's order) goes: GK_KQ_OFF. */
__device__ __forceinline__ int kq_dst(int k)
{
    return GK_KQ_OFF(k / 32, (k % 32) / 16) + k % 16;
}

template <int TYPE>
__global__ void __launch_bounds__(kThreads)
repack_kernel(gk_qmat w, const uint8_t *__restrict__ src, size_t row_bytes, size_t block_bytes)
{
    using T = qtraits<TYPE>;
    const int64_t nb = w.cols / T::kBlock, total = w.rows * nb;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        const uint8_t *b = src + (size_t)(i / nb) * row_bytes + (size_t)(i % nb) * block_bytes;
        uint8_t *q = w.q + i * T::kQ, *h = T::kH ? w.h + i * T::kH : nullptr;
        uint8_t *s = w.s + i * T::kS;
        int q_off = 0, s_len = 0;
        switch (TYPE) {
        case QUANT_Q4_0: q_off = 2, s_len = 2; break;
        case QUANT_Q4_1: q_off = 4, s_len = 4; break;
        case QUANT_Q5_0: q_off = 6, s_len = 2; store_u32(h, reorder1(load_u32_bytes(b + 2))); break;
        case QUANT_Q5_1: q_off = 8, s_len = 4; store_u32(h, reorder1(load_u32_bytes(b + 4))); break;
        case QUANT_Q8_0: q_off = 2, s_len = 2; break;
        case QUANT_MXFP4: q_off = 1, s_len = 1; break;
        case QUANT_Q4_K: q_off = 16, s_len = 16; break;
        case QUANT_Q5_K: {
            q_off = 48, s_len = 16;
            const uint8_t *qh = b + 16;
            for (int j = 0; j < 8; j++) {
                uint32_t bits = 0;
                for (int l = 0; l < 32; l++)
                    bits |= (uint32_t)((qh[l] >> j) & 1) << l;
                store_u32(h + 4 * j, reorder1(bits));
            }
            break;
        }
        default: { /* Q6_K: ql[128] qh[64] scales[16] d */
            const uint8_t *qh = b + 128;
            for (int c = 0; c < 4; c++)
                for (int piece = 0; piece < 2; piece++) {
                    const int shift = 4 * piece + 2 * (c % 2);
                    uint32_t wd[2] = {0, 0};
                    for (int p = 0; p < 2; p++)
                        for (int m = 0; m < 4; m++)
                            for (int bb = 0; bb < 4; bb++) {
                                const int e = 4 * (4 * p + m) + bb;
                                const uint32_t v = (qh[32 * (c / 2) + e] >> shift) & 3u;
                                wd[p] |= v << (8 * bb + 2 * m);
                            }
                    store_u32(h + 16 * c + 8 * piece, wd[0]);
                    store_u32(h + 16 * c + 8 * piece + 4, wd[1]);
                }
            s[0] = b[208], s[1] = b[209], s[2] = s[3] = 0;
            for (int k = 0; k < 16; k++)
                s[4 + k] = b[192 + k];
            for (int k = 0; k < 128; k++)
                q[kq_dst(k)] = b[k];
            continue;
        }
        }
        for (int k = 0; k < s_len; k++)
            s[k] = b[k];
        for (int k = 0; k < T::kQ; k++)
            q[T::kBlock == 256 ? kq_dst(k) : k] = b[q_off + k];
    }
}

/* ---- rows out: f16 (dequantization) and f32 (embedding) ------------------------------ */

/* One thread per (row, activation block): 32 values, four 16-byte stores.
 * A dependent launch under IGNITE_PDL=1: the first block's weights are
 * decoded (and packed: 16 registers across the wait) before the wait, which
 * comes before the first store (dst is the scratch the GEMM of the slab
 * before may still read). */
template <int TYPE>
__device__ __forceinline__ void dequant_block(const gk_qmat &w, int64_t row, int64_t xb,
                                              gk_u32x4 (&o)[4])
{
    float y[32];
    qb_decode32<TYPE>(w, row, xb, y);
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 4; k++)
            o[c].w[k] = ig_pack2<ig_f16_t>(y[8 * c + 2 * k], y[8 * c + 2 * k + 1]);
}

template <int TYPE>
__global__ void __launch_bounds__(kThreads)
dequant_kernel(gk_qmat w, int64_t r0, int64_t nr, uint16_t *__restrict__ dst)
{
    const int64_t nxb = w.cols / 32, total = nr * nxb;
    int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    gk_u32x4 o[4];
    if (i < total) /* the weights: no kernel of the step writes them */
        dequant_block<TYPE>(w, r0 + i / nxb, i % nxb, o);
    gk_dep_start();
    for (bool first = true; i < total; i += (int64_t)gridDim.x * kThreads, first = false) {
        if (!first)
            dequant_block<TYPE>(w, r0 + i / nxb, i % nxb, o);
        gk_u32x4 *out = (gk_u32x4 *)(dst + i * 32); /* = r * cols + 32 xb */
        for (int c = 0; c < 4; c++)
            out[c] = o[c];
    }
}

/* One thread per (token, activation block): 32 f32 values, eight 16-byte
 * stores (x rows are 16-byte aligned: cols is a multiple of 32). w holds
 * the vocabulary rows [v0, v0 + w.rows); a token outside them gets zeros (a
 * tensor-parallel rank's part: the all-reduce adds the other ranks' rows). */
template <int TYPE>
__global__ void __launch_bounds__(kThreads)
embed_kernel(gk_qmat w, const int32_t *__restrict__ tokens, int64_t n, int64_t v0,
             float *__restrict__ x)
{
    gk_dep_start(); /* the tokens may be the greedy kernel's (IG_LAUNCH_DEP) */
    const int64_t nxb = w.cols / 32, total = n * nxb;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        float y[32];
        const int64_t row = (int64_t)tokens[i / nxb] - v0;
        if (row >= 0 && row < w.rows) {
            qb_decode32<TYPE>(w, row, i % nxb, y);
        } else { /* another rank's token */
            for (int c = 0; c < 32; c++)
                y[c] = 0.0f;
        }
        gk_f32x4 *out = (gk_f32x4 *)(x + i * 32);
        for (int c = 0; c < 8; c++)
            out[c] = gk_f32x4{y[4 * c], y[4 * c + 1], y[4 * c + 2], y[4 * c + 3]};
    }
}

/* ---- random blocks ------------------------------------------------------------------- */

template <int TYPE>
__global__ void __launch_bounds__(kThreads)
random_kernel(gk_qmat w, uint64_t seed, uint32_t fixed)
{
    using T = qtraits<TYPE>;
    const int64_t total = w.rows * (w.cols / T::kBlock);
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        for (int k = 0; k < T::kQ / 4; k++)
            store_u32(w.q + i * T::kQ + 4 * k, gk_random_u32(seed, (uint64_t)(i * (T::kQ / 4) + k)));
        for (int k = 0; k < T::kH / 4; k++)
            store_u32(w.h + i * T::kH + 4 * k,
                      gk_random_u32(seed + 1, (uint64_t)(i * (T::kH / 4) + k)));
        uint8_t *s = w.s + i * T::kS;
        if (T::kS == 1) { /* MXFP4: the E8M0 byte */
            *s = (uint8_t)fixed;
            continue;
        }
        *(uint16_t *)s = (uint16_t)(fixed & 0xffffu);
        if (T::kS >= 4)
            *(uint16_t *)(s + 2) = (uint16_t)(fixed >> 16);
        for (int k = 0; 4 + 4 * k < T::kS; k++)
            store_u32(s + 4 + 4 * k, gk_random_u32(seed + 2, (uint64_t)(i * 4 + k)));
    }
}

/* ---- checks and launches ---------------------------------------------------------------- */

bool shape_ok(const gk_qmat &w, const char *what)
{
    struct gk_qlayout l;
    if (gk_qlayout_of(w.type, &l) && w.rows >= 0 && w.cols >= l.block && w.cols % l.block == 0 &&
        w.q && w.s && (!l.h || w.h))
        return true;
    ig_error(IG_E_INTERNAL, "%s: bad %s matrix %lld x %lld or a NULL plane", what,
             quant_type_name((uint32_t)w.type), (long long)w.rows, (long long)w.cols);
    return false;
}

} /* namespace */

extern "C" {

int IG_DEV(gk_qrepack)(const struct gk_qmat *w, const void *src, size_t row_bytes, void *stream)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)w->type);
    if (!shape_ok(*w, "gk_qrepack") || !src || (row_bytes % 2 && w->type != QUANT_MXFP4) ||
        row_bytes < (size_t)(w->cols / t->block_elems) * t->block_bytes)
        return ig_error(IG_E_INTERNAL, "gk_qrepack: bad source rows (row_bytes %zu)", row_bytes);
    if (w->rows == 0)
        return IG_OK;
    const gk_qmat m = *w;
    const uint8_t *s = (const uint8_t *)src;
    const size_t bb = t->block_bytes;
    return qtype_dispatch_experts(m.type, [&](auto tag) {
        auto *kernel = repack_kernel<decltype(tag)::value>;
        const dim3 grid(grid_for(m.rows * (m.cols / t->block_elems))), block(kThreads);
        return IG_LAUNCH(kernel, grid, block, 0, (cudaStream_t)stream, m, s, row_bytes, bb);
    });
}

int IG_DEV(gk_qdequant_f16)(const struct gk_qmat *w, int64_t r0, int64_t nr, uint16_t *dst,
                            void *stream)
{
    if (!shape_ok(*w, "gk_qdequant_f16") || r0 < 0 || nr < 0 || r0 + nr > w->rows ||
        (nr && !dst) || !gk_aligned(dst, 16))
        return ig_error(IG_E_INTERNAL, "gk_qdequant_f16: rows %lld + %lld of %lld or a "
                        "misaligned destination", (long long)r0, (long long)nr,
                        (long long)w->rows);
    if (nr == 0)
        return IG_OK;
    const gk_qmat m = *w;
    return qtype_dispatch_experts(m.type, [&](auto tag) {
        auto *kernel = dequant_kernel<decltype(tag)::value>;
        const dim3 grid(grid_for(nr * (m.cols / 32))), block(kThreads);
        return IG_LAUNCH_DEP(kernel, grid, block, 0, (cudaStream_t)stream, m, r0, nr, dst);
    });
}

int IG_DEV(gk_qembed)(const struct gk_qmat *w, const int32_t *tokens, int64_t n, int64_t v0,
                      float *x, void *stream)
{
    if (!shape_ok(*w, "gk_qembed") || n < 0 || v0 < 0 || (n && (!tokens || !x)) ||
        !gk_aligned(x, 16))
        return ig_error(IG_E_INTERNAL, "gk_qembed: %lld tokens, NULL or misaligned output",
                        (long long)n);
    if (n == 0)
        return IG_OK;
    const gk_qmat m = *w;
    return qtype_dispatch_experts(m.type, [&](auto tag) {
        auto *kernel = embed_kernel<decltype(tag)::value>;
        const dim3 grid(grid_for(n * (m.cols / 32))), block(kThreads);
        return IG_LAUNCH_DEP(kernel, grid, block, 0, (cudaStream_t)stream, m, tokens, n, v0, x);
    });
}

int IG_DEV(gk_qrandom)(const struct gk_qmat *w, uint64_t seed, void *stream)
{
    if (!shape_ok(*w, "gk_qrandom"))
        return IG_E_INTERNAL;
    if (w->rows == 0)
        return IG_OK;
    uint16_t fixed[2];
    gk_qrandom_fixed(w->type, w->cols, fixed);
    const uint32_t f = (uint32_t)fixed[0] | (uint32_t)fixed[1] << 16;
    const gk_qmat m = *w;
    struct gk_qlayout l;
    gk_qlayout_of(m.type, &l);
    return qtype_dispatch_experts(m.type, [&](auto tag) {
        auto *kernel = random_kernel<decltype(tag)::value>;
        const dim3 grid(grid_for(m.rows * (m.cols / l.block))), block(kThreads);
        return IG_LAUNCH(kernel, grid, block, 0, (cudaStream_t)stream, m, seed, f);
    });
}

} /* extern "C" */
