/* ops/gpu_qgemv.cu: y = W x + beta y over quantized weights for 1 to
 * GK_QGEMV_MAX_N activation rows (decode, small batches): the weights are
 * streamed once for all rows. Semantics in ops/gpu_qmm.h; the twin is
 * gk_qgemv_ref (ops/gpu_qmm_ref.c).
 *
 * A block of 8 warps owns 16 weight rows, each warp 2 of them. First the
 * block quantizes x into shared memory, per 32 elements to int8 with an f32
 * scale d and s = d * sum(q) (ops_qmm_quantize's arithmetic, bit for bit:
 * correctly rounded division and reciprocal, round-to-nearest-even): four
 * lanes per 32-element block, 8 elements and one 16-byte load each, the
 * group's max and sum by two shuffles. x wider than the shared budget (40
 * KiB: 32768 columns for 1 row, 4096 for 8) is taken in slabs, quantized
 * one after the other. Then a lane walks its rows in chunks (a 32-element
 * block, or two 32-element sub-blocks of a K type's super-block), lane,
 * lane + 32, ..., through a ring of two stages of U chunks of both rows in
 * registers: the next stage's loads (16-byte loads that bypass L1, whole
 * sectors across the warp: ops/gpu_qmm.h's GK_KQ_OFF for the K types) are
 * issued before the current stage is reduced, so loads are always out, not
 * a burst and then none. Each chunk's quants widened to bytes with masks and shifts
 * (high bits: one shift of the reordered word per 4 elements) and
 * multiplied with the activations' int8 by dp4a, 4 products per
 * instruction; the integer sums are scaled in f32 per block (scale, and the
 * min times s for the types with one). One butterfly reduction per row and
 * activation row at the end; no atomics. The first loads go out before the
 * quantization of x so its latency hides theirs. With glu (the gate|up
 * product) a warp's two rows are output i's gate and up rows and its lane 0
 * writes their SwiGLU/GeGLU as f16: one launch where there were two. With
 * norm_w (a residual product, beta 1) the last block to finish (a ticket)
 * normalizes the residual rows into the next product's f16 input
 * (gk_norm_tail, gk_rmsnorm's bits): no norm launch, and with qn its int8
 * blocks, which the next quantized GEMV loads (xq: stage_xq) instead of
 * quantizing x in each of its blocks.
 *
 * Built twice: nvcc (gk_qgemv_cuda) and the emulator through
 * ops/gpu_qgemv_emu.cc (gk_qgemv_emu). Covered by tests/emu/test_qmm_emu.c
 * and tests/gpu/test_qmm_gpu.c. */
#include "ops/gpu_qblocks.cuh"
#include "ops/gpu_ops.h"
#include "ops/gpu_rope.cuh"

#include <float.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerBlock = 2 * kWarps;
constexpr int64_t kSmemBudget = 40 * 1024;

/* Columns per slab for NMAX activation rows: 1 byte of quants and 8 of
 * (d, s) per 32 columns and row, within the budget, whole super-blocks. */
template <int NMAX> constexpr int64_t slab_max()
{
    return kSmemBudget * 4 / (5 * NMAX) / 256 * 256;
}

/* ---- quantizing x into shared memory ------------------------------------------ */

/* Rows t < n, columns [s0, s0 + len) of x into xq ([NMAX][slab] int8) and
 * xds ([NMAX][slab / 32] (d, s)). Every lane of a warp runs the same
 * iterations (the shuffles are full-warp). */
template <int NMAX>
__device__ __forceinline__ void stage_x(const uint16_t *__restrict__ x, int64_t ld_x, int n,
                                        int64_t s0, int64_t len, int64_t slab, int8_t *xq,
                                        gk_f32x2 *xds)
{
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, part = lane % 4;
    const int64_t nxb = len / 32, total = (int64_t)n * nxb;
    for (int64_t it = (int64_t)warp * 8; it < total; it += kWarps * 8) {
        const int64_t item = it + lane / 4;
        const bool valid = item < total;
        const int64_t t = valid ? item / nxb : 0, xb = valid ? item % nxb : 0;
        float f[8];
        if (valid) {
            const gk_u32x4 v = *(const gk_u32x4 *)(x + t * ld_x + s0 + 32 * xb + 8 * part);
            for (int i = 0; i < 4; i++) {
                f[2 * i] = gk_f16_bits_to_f32(v.w[i] & 0xffffu);
                f[2 * i + 1] = gk_f16_bits_to_f32(v.w[i] >> 16);
            }
        } else {
            for (int i = 0; i < 8; i++)
                f[i] = 0;
        }
        float amax = 0;
        uint32_t finite = 1;
        for (int i = 0; i < 8; i++) {
            const float a = fabsf(f[i]);
            finite &= a <= FLT_MAX ? 1u : 0u; /* 0 for inf and NaN */
            amax = a > amax ? a : amax;
        }
        for (int m = 1; m <= 2; m <<= 1) {
            const float o = ig_shfl_xor_f32(amax, m);
            amax = o > amax ? o : amax;
            finite &= ig_shfl_xor(finite, m);
        }
        const float d = gk_div(amax, 127.0f);
        float id = d > 0 ? gk_rcp(d) : 0.0f;
        if (id > FLT_MAX)
            id = 0.0f; /* d < 2^-128: as ops_qmm_quantize, the block's quants are 0 */
        int sum = 0;
        uint32_t packed[2] = {0, 0};
        for (int i = 0; i < 8; i++) {
            const int q = finite ? gk_rint(gk_mul(f[i], id)) : 0;
            sum += q;
            packed[i / 4] |= (uint32_t)(q & 0xff) << (8 * (i % 4));
        }
        sum += (int)ig_shfl_xor((uint32_t)sum, 1);
        sum += (int)ig_shfl_xor((uint32_t)sum, 2);
        if (valid) {
            ig_sts((gk_u32x2 *)(xq + t * slab + 32 * xb + 8 * part), gk_u32x2{packed[0], packed[1]});
            if (part == 0) {
                const float nan = NAN;
                ig_sts(&xds[t * (slab / 32) + xb],
                       finite ? gk_f32x2{d, gk_mul(d, (float)sum)} : gk_f32x2{nan, nan});
            }
        }
    }
}

/* The same from x's int8 blocks made by the kernel that wrote x (a norm
 * tail: gk_quantize32, the same bits): copied into shared memory as they
 * are, no arithmetic. xq [n][ld] int8, xqd [n][ld / 32] (d, s). */
template <int NMAX>
__device__ __forceinline__ void stage_xq(const int8_t *__restrict__ xq,
                                         const gk_f32x2 *__restrict__ xqd, int64_t ld, int n,
                                         int64_t s0, int64_t len, int64_t slab, int8_t *xs,
                                         gk_f32x2 *xds)
{
    const int64_t n16 = len / 16, nb = len / 32;
    for (int64_t i = threadIdx.x; i < (int64_t)n * n16; i += kThreads) {
        const int64_t t = i / n16, c = i % n16;
        ig_sts((gk_u32x4 *)(xs + t * slab + 16 * c),
               *(const gk_u32x4 *)(xq + t * ld + s0 + 16 * c));
    }
    for (int64_t i = threadIdx.x; i < (int64_t)n * nb; i += kThreads) {
        const int64_t t = i / nb, b = i % nb;
        ig_sts(&xds[t * (slab / 32) + b], xqd[t * (ld / 32) + s0 / 32 + b]);
    }
}

/* ---- one chunk of weights -------------------------------------------------------- */

/* Elements per chunk, and chunks of each row in one stage of the load ring
 * (two stages in registers: the next stage's loads are out while this one
 * is reduced) for one row of x: 2 of the 16-byte 4/5-bit blocks, 1 of the
 * larger chunks, so a warp has 4 or 2 chunks a row in flight while it waits,
 * as many registers as the single burst of twice that before the ring. With
 * NMAX rows of x a chunk does NMAX times the work, so fewer loads in flight
 * cover the same latency: the stage is divided by NMAX (at least 1), which
 * also keeps every instance's code about the same size. */
template <int TYPE, int NMAX> struct qchunk_shape {
    static constexpr int kElems = qtraits<TYPE>::kBlock == 256 ? 64 : 32;
    static constexpr int kBase = TYPE == QUANT_Q4_0 || TYPE == QUANT_Q4_1 ||
                                         TYPE == QUANT_Q5_0 || TYPE == QUANT_Q5_1
                                     ? 4
                                     : 2;
    static constexpr int kUnroll = kBase / 2 / NMAX > 1 ? kBase / 2 / NMAX : 1;
    /* Two stages, except for the K types at 8 rows of x: there the second
     * stage spilled Q5_K and Q6_K (128 registers), and a chunk's eight rows
     * of work already cover much of a load's latency. */
    static constexpr int kStages = kElems == 64 && NMAX >= 8 ? 1 : 2;
};

/* The registers of one chunk of one row (the union of what the types need;
 * unused members cost nothing once the compiler sees them unread). */
struct qchunk {
    gk_u32x4 q0, q1;   /* quants: 16 bytes, or 32 (Q8_0, K types) */
    gk_u32x4 h;        /* high bits: Q5_0/Q5_1 h.w[0]; Q5_K w[0..1]; Q6_K all 4 */
    gk_u32x4 s;        /* scales: d (| m << 16); K: the 16-byte record; Q6_K d, A, B words */
};

__device__ __forceinline__ gk_u32x4 ld16(const uint8_t *p)
{
    return gk_ld_stream16((const uint16_t *)p);
}

template <int TYPE>
__device__ __forceinline__ qchunk load_chunk(const gk_qmat &w, int64_t row, int64_t c)
{
    using T = qtraits<TYPE>;
    qchunk k;
    const int64_t nb = w.cols / T::kBlock;
    if (T::kBlock == 32) {
        const int64_t i = row * nb + c;
        k.q0 = ld16(w.q + i * T::kQ);
        if (T::kQ == 32)
            k.q1 = ld16(w.q + i * T::kQ + 16);
        if (T::kH)
            k.h.w[0] = qb_u32(w.h + i * T::kH);
        k.s.w[0] = T::kS == 4 ? qb_u32(w.s + i * T::kS) : (uint32_t)qb_u16(w.s + i * T::kS);
        return k;
    }
    const int64_t sb = row * nb + c / 4;
    const int p = (int)(c % 4);
    k.q0 = ld16(w.q + sb * T::kQ + GK_KQ_OFF(p, 0)); /* whole sectors across the warp */
    k.q1 = ld16(w.q + sb * T::kQ + GK_KQ_OFF(p, 1));
    if (TYPE == QUANT_Q6_K) {
        k.h = ld16(w.h + sb * T::kH + 16 * p);
        const uint8_t *s = w.s + sb * T::kS;
        k.s.w[0] = qb_u16(s);
        k.s.w[1] = qb_u32(s + 4 + 8 * (p / 2));     /* scales 8 half .. + 3: A's */
        k.s.w[2] = qb_u32(s + 4 + 8 * (p / 2) + 4); /* B's */
        return k;
    }
    if (TYPE == QUANT_Q5_K) {
        k.h.w[0] = qb_u32(w.h + sb * T::kH + 8 * p);
        k.h.w[1] = qb_u32(w.h + sb * T::kH + 8 * p + 4);
    }
    k.s = *(const gk_u32x4 *)(w.s + sb * T::kS);
    return k;
}

/* One stage of the load ring: chunks c, c + 32, ..., c + 32 (U - 1) of rows
 * ra and rb, those below `end`; the others zero (never reduced). */
template <int TYPE, int U>
__device__ __forceinline__ void load_stage(const gk_qmat &w, int64_t ra, int64_t rb, int64_t c,
                                           int64_t end, qchunk ka[U], qchunk kb[U])
{
    IG_UNROLL
    for (int u = 0; u < U; u++) {
        if (c + 32 * u < end) {
            ka[u] = load_chunk<TYPE>(w, ra, c + 32 * u);
            kb[u] = load_chunk<TYPE>(w, rb, c + 32 * u);
        } else {
            ka[u] = kb[u] = qchunk{};
        }
    }
}

/* One activation row's quants and scales for one chunk (from shared memory). */
struct xchunk {
    gk_u32x4 a0, a1;  /* the first activation block: elements 0..15, 16..31 */
    gk_u32x4 b0, b1;  /* the second (64-element chunks) */
    gk_f32x2 da, db;  /* (d, s) of each */
};

template <int TYPE>
__device__ __forceinline__ xchunk load_x(const int8_t *xq, const gk_f32x2 *xds, int64_t cx)
{
    xchunk x;
    int64_t xa = cx, xb = cx; /* activation blocks of slab-relative chunk cx */
    if (TYPE == QUANT_Q4_K || TYPE == QUANT_Q5_K) {
        xa = 2 * cx, xb = 2 * cx + 1;
    } else if (TYPE == QUANT_Q6_K) {
        const int64_t p = cx % 4;
        xa = 8 * (cx / 4) + 4 * (p / 2) + p % 2, xb = xa + 2;
    }
    x.a0 = ig_lds((const gk_u32x4 *)(xq + 32 * xa));
    x.a1 = ig_lds((const gk_u32x4 *)(xq + 32 * xa + 16));
    x.da = ig_lds(&xds[xa]);
    if (qtraits<TYPE>::kBlock == 256) { /* 64-element chunks */
        x.b0 = ig_lds((const gk_u32x4 *)(xq + 32 * xb));
        x.b1 = ig_lds((const gk_u32x4 *)(xq + 32 * xb + 16));
        x.db = ig_lds(&xds[xb]);
    }
    return x;
}

constexpr uint32_t kLo4 = 0x0f0f0f0fu, kBit0 = 0x01010101u, kBits01 = 0x03030303u;

__device__ __forceinline__ float f16lo(uint32_t v) { return gk_f16_bits_to_f32(v & 0xffffu); }
__device__ __forceinline__ float f16hi(uint32_t v) { return gk_f16_bits_to_f32(v >> 16); }

/* Q4_K/Q5_K: scales and mins of sub-blocks 2p (A) and 2p + 1 (B) from the
 * three words of packed 6-bit values (models/quant.h's quant_k4_scale_min). */
__device__ __forceinline__ void k_scales(const gk_u32x4 &s, int p, float &scA, float &scB,
                                         float &mA, float &mB)
{
    const int sh = 16 * (p % 2);
    const uint32_t a = (s.w[1] >> sh) & 0xffffu, b = (s.w[2] >> sh) & 0xffffu,
                   c = (s.w[3] >> sh) & 0xffffu;
    uint32_t sa, sb_, ma, mb;
    if (p < 2) {
        sa = a & 63, sb_ = (a >> 8) & 63, ma = b & 63, mb = (b >> 8) & 63;
    } else {
        sa = (c & 15) | ((a >> 6) & 3) << 4;
        sb_ = ((c >> 8) & 15) | ((a >> 14) & 3) << 4;
        ma = ((c >> 4) & 15) | ((b >> 6) & 3) << 4;
        mb = ((c >> 12) & 15) | ((b >> 14) & 3) << 4;
    }
    scA = (float)sa, scB = (float)sb_, mA = (float)ma, mB = (float)mb;
}

/* The chunk's contribution to one output: sum of w . x over its elements. */
template <int TYPE>
__device__ __forceinline__ float dot_chunk(const qchunk &k, const xchunk &x, int p)
{
    if (TYPE == QUANT_Q8_0) {
        int is = 0;
        for (int i = 0; i < 4; i++) {
            is = ig_dp4a((int)k.q0.w[i], (int)x.a0.w[i], is);
            is = ig_dp4a((int)k.q1.w[i], (int)x.a1.w[i], is);
        }
        return f16lo(k.s.w[0]) * (x.da.x * (float)is);
    }
    if (qtraits<TYPE>::kBlock == 32) { /* 4- and 5-bit: low nibbles 0..15, high 16..31 */
        int is = 0;
        for (int i = 0; i < 4; i++) {
            uint32_t lo = k.q0.w[i] & kLo4, hi = (k.q0.w[i] >> 4) & kLo4;
            if (qtraits<TYPE>::kH) {
                lo |= ((k.h.w[0] >> i) & kBit0) << 4;
                hi |= ((k.h.w[0] >> (i + 4)) & kBit0) << 4;
            }
            is = ig_dp4a((int)lo, (int)x.a0.w[i], is);
            is = ig_dp4a((int)hi, (int)x.a1.w[i], is);
        }
        const float d = f16lo(k.s.w[0]);
        if (TYPE == QUANT_Q4_0 || TYPE == QUANT_Q5_0)
            return d * (x.da.x * (float)is - (TYPE == QUANT_Q4_0 ? 8.0f : 16.0f) * x.da.y);
        return d * (x.da.x * (float)is) + f16hi(k.s.w[0]) * x.da.y;
    }
    if (TYPE == QUANT_Q6_K) { /* low nibbles: block A, high: block B; 16-element scales */
        int ia0 = 0, ia1 = 0, ib0 = 0, ib1 = 0;
        for (int i = 0; i < 8; i++) {
            const uint32_t q = i < 4 ? k.q0.w[i] : k.q1.w[i - 4];
            const int sh = 2 * (i % 4);
            const uint32_t ha = ((k.h.w[i / 4] >> sh) & kBits01) << 4;
            const uint32_t hb = ((k.h.w[2 + i / 4] >> sh) & kBits01) << 4;
            const int va = (int)ig_vsub4((q & kLo4) | ha, 0x20202020u);
            const int vb = (int)ig_vsub4(((q >> 4) & kLo4) | hb, 0x20202020u);
            const int xa = (int)(i < 4 ? x.a0.w[i] : x.a1.w[i - 4]);
            const int xb = (int)(i < 4 ? x.b0.w[i] : x.b1.w[i - 4]);
            if (i < 4) {
                ia0 = ig_dp4a(va, xa, ia0);
                ib0 = ig_dp4a(vb, xb, ib0);
            } else {
                ia1 = ig_dp4a(va, xa, ia1);
                ib1 = ig_dp4a(vb, xb, ib1);
            }
        }
        const int sh = 16 * (p % 2); /* scales 2 sub, 2 sub + 1 of each word */
        const float sa0 = (float)(int8_t)(k.s.w[1] >> sh), sa1 = (float)(int8_t)(k.s.w[1] >> (sh + 8));
        const float sb0 = (float)(int8_t)(k.s.w[2] >> sh), sb1 = (float)(int8_t)(k.s.w[2] >> (sh + 8));
        return f16lo(k.s.w[0]) * (x.da.x * (sa0 * (float)ia0 + sa1 * (float)ia1) +
                                  x.db.x * (sb0 * (float)ib0 + sb1 * (float)ib1));
    }
    /* Q4_K, Q5_K: low nibbles sub-block 2p (A), high 2p + 1 (B) */
    int ia = 0, ib = 0;
    for (int i = 0; i < 8; i++) {
        const uint32_t q = i < 4 ? k.q0.w[i] : k.q1.w[i - 4];
        uint32_t lo = q & kLo4, hi = (q >> 4) & kLo4;
        if (TYPE == QUANT_Q5_K) {
            lo |= ((k.h.w[0] >> i) & kBit0) << 4;
            hi |= ((k.h.w[1] >> i) & kBit0) << 4;
        }
        ia = ig_dp4a((int)lo, (int)(i < 4 ? x.a0.w[i] : x.a1.w[i - 4]), ia);
        ib = ig_dp4a((int)hi, (int)(i < 4 ? x.b0.w[i] : x.b1.w[i - 4]), ib);
    }
    float scA, scB, mA, mB;
    k_scales(k.s, p, scA, scB, mA, mB);
    return f16lo(k.s.w[0]) * (scA * (x.da.x * (float)ia) + scB * (x.db.x * (float)ib)) -
           f16hi(k.s.w[0]) * (mA * x.da.y + mB * x.db.y);
}

/* ---- h's int8 blocks (the gate|up product) ---------------------------------------------- */

/* With glu a block writes kWarps outputs of h, so 32 outputs (one int8
 * block of h, what the down product's GEMV loads) are 4 blocks' work: the
 * last of the 4 to get here (tickets[group]) quantizes those 32 outputs of
 * every row of x (gk_quantize32: the bits stage_x would give) and puts the
 * ticket back to 0. Every thread of every block calls it, after its own
 * writes to h. */
constexpr int kGroupBlocks = 32 / kWarps;

__device__ __forceinline__ void glu_quant_tail(const uint16_t *h, int64_t ld_h, int n,
                                               uint32_t *tickets, int8_t *hq, gk_f32x2 *hqd)
{
    IG_SHARED(uint32_t, drawn, [1]);
    const int64_t group = blockIdx.x / kGroupBlocks;
    ig_threadfence(); /* this block's h before its ticket */
    ig_syncthreads();
    if (threadIdx.x == 0)
        ig_sts(&drawn[0], ig_atomic_add_u32(&tickets[group], 1u));
    ig_syncthreads();
    if (ig_lds(&drawn[0]) != kGroupBlocks - 1)
        return;
    ig_threadfence(); /* the other 3 blocks' h after their tickets */
    for (int t = (int)threadIdx.x; t < n; t += kThreads)
        gk_quantize32(h + t * ld_h + 32 * group, hq + t * ld_h + 32 * group,
                      hqd + t * (ld_h / 32) + group);
    if (threadIdx.x == 0)
        tickets[group] = 0;
}

/* ---- the kernel ------------------------------------------------------------------------- */

/* 2 blocks (16 warps) an SM: up to 128 registers (ptxas, left alone, aimed at
 * 64 for some instances and spilled). */
template <int TYPE, int NMAX>
__global__ void __launch_bounds__(kThreads, 2)
qgemv_kernel(const gk_qmat w, const uint16_t *__restrict__ x, const int64_t ld_x, const int n,
             float *__restrict__ y, const int64_t ld_y, const float beta, const int64_t slab,
             const int glu, uint16_t *__restrict__ h, const int64_t ld_h,
             const float *__restrict__ norm_w, const float norm_eps, uint16_t *__restrict__ xn,
             uint32_t *ticket, const bool norm_vec, const int norm_nt,
             int8_t *__restrict__ qn, gk_f32x2 *__restrict__ qnd,
             const int8_t *__restrict__ xq, const gk_f32x2 *__restrict__ xqd,
             const gk_qkv_params rope, const bool rope_on)
{
    constexpr int E = qchunk_shape<TYPE, NMAX>::kElems, U = qchunk_shape<TYPE, NMAX>::kUnroll;
    constexpr bool kRing = qchunk_shape<TYPE, NMAX>::kStages == 2;
    IG_DYN_SHARED(int8_t, smem);
    int8_t *xs = smem;                              /* [NMAX][slab] */
    gk_f32x2 *xds = (gk_f32x2 *)(smem + NMAX * slab); /* [NMAX][slab / 32] */
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    /* A warp's rows: r0 and r0 + 1; with glu output i's gate row i and its
     * up row i + rows / 2; with rope slot i's pair (gk_rope_rows). */
    const int64_t i = (int64_t)blockIdx.x * kWarps + warp, half = w.rows / 2;
    int64_t r0 = glu ? i : 2 * i, r1 = glu ? i + half : r0 + 1;
    if (rope_on && i < half)
        gk_rope_rows(rope, i, &r0, &r1);
    const bool live = glu || rope_on ? i < half : r0 < w.rows;
    const bool two = glu || rope_on ? live : r0 + 1 < w.rows;
    const int64_t ra = live ? r0 : 0;
    const int64_t rb = two ? r1 : ra; /* rb = ra: read, not written */

    float acc_a[NMAX], acc_b[NMAX];
    IG_UNROLL
    for (int t = 0; t < NMAX; t++)
        acc_a[t] = acc_b[t] = 0;
    qchunk ka[U], kb[U]; /* the stage being reduced */
    if (live) /* the first stage is in flight while x is quantized */
        load_stage<TYPE, U>(w, ra, rb, lane, (slab < w.cols ? slab : w.cols) / E, ka, kb);

    /* The next kernel (launched with IG_LAUNCH_PDL) may start loading its
     * weights once our last blocks are here; it waits for our end. */
    ig_launch_dependents();
    /* x (and y, with beta) may come from the previous kernel: launched with
     * IG_LAUNCH_PDL, this grid may have started before it ended. Every block
     * waits, dead warps too (devkit/intrinsics.cuh: completion stays
     * transitive). */
    ig_grid_dependency_wait();
    for (int64_t s0 = 0; s0 < w.cols; s0 += slab) {
        const int64_t len = w.cols - s0 < slab ? w.cols - s0 : slab;
        if (s0)
            ig_syncthreads(); /* everyone is done with the last slab */
        if (xq)
            stage_xq<NMAX>(xq, xqd, ld_x, n, s0, len, slab, xs, xds);
        else
            stage_x<NMAX>(x, ld_x, n, s0, len, slab, xs, xds);
        ig_syncthreads();
        if (!live)
            continue;
        const int64_t cs0 = s0 / E, cs1 = (s0 + len) / E;
        if (s0 != 0) /* this slab's first stage (the first slab's went out before x) */
            load_stage<TYPE, U>(w, ra, rb, cs0 + lane, cs1, ka, kb);
        for (int64_t c0 = cs0 + lane; c0 < cs1; c0 += 32 * U) {
            /* The ring's second stage: the next U chunks are in flight while
             * this stage's are reduced, so a warp always has loads out. */
            qchunk na[U], nb[U];
            if (kRing)
                load_stage<TYPE, U>(w, ra, rb, c0 + 32 * U, cs1, na, nb);
            IG_UNROLL
            for (int u = 0; u < U; u++) {
                const int64_t c = c0 + 32 * u;
                IG_UNROLL
                for (int t = 0; t < NMAX; t++) {
                    if (c < cs1 && t < n) {
                        const xchunk xc =
                            load_x<TYPE>(xs + t * slab, xds + t * (slab / 32), c - cs0);
                        acc_a[t] += dot_chunk<TYPE>(ka[u], xc, (int)(c % 4));
                        acc_b[t] += dot_chunk<TYPE>(kb[u], xc, (int)(c % 4));
                    }
                }
            }
            if (kRing) {
                IG_UNROLL
                for (int u = 0; u < U; u++)
                    ka[u] = na[u], kb[u] = nb[u];
            } else { /* one stage: the next loads go out once this one is reduced */
                load_stage<TYPE, U>(w, ra, rb, c0 + 32 * U, cs1, ka, kb);
            }
        }
    }
    IG_UNROLL
    for (int t = 0; t < NMAX; t++) {
        if (!live) /* the warp's: the shuffles below are whole */
            break;
        float a = acc_a[t], b = acc_b[t];
        for (int m = 16; m > 0; m >>= 1) {
            a += ig_shfl_xor_f32(a, m);
            b += ig_shfl_xor_f32(b, m);
        }
        if (lane == 0 && t < n && rope_on) {
            gk_rope_epilogue(rope, t, (int)i, a, b);
        } else if (lane == 0 && t < n && glu) {
            h[t * ld_h + i] = gk_f32_to_f16(glu == GK_GLU_GELU ? gk_gelu_mul(a, b)
                                                               : gk_silu_mul(a, b));
        } else if (lane == 0 && t < n) {
            float *ya = y + t * ld_y + r0;
            *ya = beta != 0 ? a + beta * *ya : a;
            if (two)
                ya[1] = beta != 0 ? b + beta * ya[1] : b;
        }
    }
    if (norm_w)
        gk_norm_tail(y, ld_y, n, w.rows, norm_w, norm_eps, xn, ticket, norm_vec, norm_nt, qn,
                     qnd);
    else if (glu && qn)
        glu_quant_tail(h, ld_h, n, ticket, qn, qnd);
}

template <int TYPE, int NMAX>
int launch(const gk_qgemv_params &p, cudaStream_t stream)
{
    const int64_t slab = slab_max<NMAX>() < p.w.cols ? slab_max<NMAX>() : p.w.cols;
    const size_t smem = (size_t)(NMAX * slab) + (size_t)(NMAX * (slab / 32)) * sizeof(gk_f32x2);
    /* A GLU's or RoPE pair's warp holds two rows: as many blocks either way. */
    const int64_t outs = p.glu || p.rope ? p.w.rows / 2 : (p.w.rows + 1) / 2;
    const dim3 grid((unsigned)((outs + kWarps - 1) / kWarps)), block(kThreads);
    auto *kernel = qgemv_kernel<TYPE, NMAX>;
    /* the norm tail's vector path and threads: gk_rmsnorm's for the row */
    const bool vec = p.w.rows % 4 == 0 && p.ld_y % 4 == 0 && gk_aligned(p.y, 16) &&
                     gk_aligned(p.norm_w, 16) && gk_aligned(p.xn, 8);
    const int nt = gk_rmsnorm_threads(vec ? p.w.rows / 4 : p.w.rows);
    gk_f32x2 *qnd = (gk_f32x2 *)p.qnd;
    const gk_f32x2 *xqd = (const gk_f32x2 *)p.xqd;
    const gk_qkv_params rope = p.rope ? *p.rope : gk_qkv_params{};
    const bool rope_on = p.rope != NULL;
    if (ig_pdl_on()) /* the first weight loads under the previous kernel's tail */
        return IG_LAUNCH_PDL(kernel, grid, block, smem, stream, p.w, p.x, p.ld_x, (int)p.n, p.y,
                             p.ld_y, p.beta, slab, p.glu, p.h, p.ld_h, p.norm_w, p.norm_eps,
                             p.xn, p.ticket, vec, nt, p.qn, qnd, p.xq, xqd, rope, rope_on);
    return IG_LAUNCH(kernel, grid, block, smem, stream, p.w, p.x, p.ld_x, (int)p.n, p.y, p.ld_y,
                     p.beta, slab, p.glu, p.h, p.ld_h, p.norm_w, p.norm_eps, p.xn, p.ticket, vec,
                     nt, p.qn, qnd, p.xq, xqd, rope, rope_on);
}

template <int TYPE> int launch_n(const gk_qgemv_params &p, cudaStream_t stream)
{
    static_assert(GK_QGEMV_MAX_N == 8, "instances for 1, 2, 4, 8 rows");
    if (p.n <= 1)
        return launch<TYPE, 1>(p, stream);
    if (p.n <= 2)
        return launch<TYPE, 2>(p, stream);
    if (p.n <= 4)
        return launch<TYPE, 4>(p, stream);
    return launch<TYPE, 8>(p, stream);
}

} /* namespace */

/* A Q|K|V product with gk_qkv_rope's work in its epilogue: the matrix is
 * the heads' rows, beta 0, nothing else fused, and rope's own contract. */
static bool rope_fits(const gk_qgemv_params *p)
{
    const gk_qkv_params *r = p->rope;
    return p->beta == 0 && !p->norm_w && r->n == p->n && r->head_dim >= 2 &&
           r->head_dim % 2 == 0 && r->n_rot >= 0 && r->n_rot % 2 == 0 &&
           r->n_rot <= r->head_dim && r->n_head >= 1 && r->n_head_kv >= 1 &&
           (r->n_head + 2 * r->n_head_kv) * r->head_dim == p->w.rows && r->q && r->pos &&
           (r->n_rot == 0 || r->inv_freq) &&
           (r->rope_style == ROPE_ADJACENT || r->rope_style == ROPE_HALF_SPLIT) &&
           (r->k ? r->v != NULL
                 : r->k_cache && r->v_cache && r->block_table && r->table_stride >= 1);
}

extern "C" int IG_DEV(gk_qgemv)(const struct gk_qgemv_params *p, void *stream)
{
    struct gk_qlayout l;
    const bool ok = gk_qlayout_of(p->w.type, &l) && p->w.type != QUANT_MXFP4 /* experts' */ &&
                    p->w.rows >= 1 && p->w.cols >= l.block &&
                    p->w.cols % l.block == 0 && p->n >= 1 && p->n <= GK_QGEMV_MAX_N &&
                    p->w.q && p->w.s && (!l.h || p->w.h) && p->x &&
                    p->ld_x >= p->w.cols && p->ld_x % 8 == 0 && gk_aligned(p->x, 16) &&
                    (p->glu == GK_GLU_NONE
                         ? (p->rope ? rope_fits(p) : p->y && p->ld_y >= p->w.rows &&
                                                          (p->beta == 0 || p->beta == 1))
                         : (p->glu == GK_GLU_SILU || p->glu == GK_GLU_GELU) && p->h &&
                               p->w.rows % 2 == 0 && p->ld_h >= p->w.rows / 2 &&
                               p->beta == 0) &&
                    (!p->norm_w || (p->glu == GK_GLU_NONE && p->beta == 1 && p->xn &&
                                    p->ticket)) &&
                    (!p->qn || (p->norm_w && p->qnd && p->w.rows % 32 == 0 &&
                                gk_aligned(p->qnd, 8)) ||
                     (p->glu != GK_GLU_NONE && p->qnd && p->ticket && p->w.rows % 64 == 0 &&
                      p->ld_h % 32 == 0 && gk_aligned(p->qnd, 8))) &&
                    (!p->xq || (p->xqd && p->ld_x % 32 == 0 && gk_aligned(p->xq, 16) &&
                                gk_aligned(p->xqd, 8))) &&
                    (p->w.rows + kRowsPerBlock - 1) / kRowsPerBlock <= 0x7fffffff;
    if (!ok)
        return ig_error(IG_E_INTERNAL, "gk_qgemv: unsupported %s %lld x %lld, n %lld, ld_x %lld "
                        "(or a NULL or misaligned pointer)",
                        quant_type_name((uint32_t)p->w.type), (long long)p->w.rows,
                        (long long)p->w.cols, (long long)p->n, (long long)p->ld_x);
    const gk_qgemv_params q = *p;
    return qtype_dispatch(q.w.type, [&](auto tag) {
        return launch_n<decltype(tag)::value>(q, (cudaStream_t)stream);
    });
}
