/* ops/gpu_qgemm.cu: y = W x + beta y on the tensor cores over quantized
 * weights, for more activation rows than the GEMV takes (batches, short
 * prefill chunks): the weights are read in their blocks and dequantized in
 * front of mma.sync (f16 in, f32 accumulate), the way Marlin keeps weights
 * compressed up to the tensor cores. Semantics in ops/gpu_qmm.h (the f16
 * GEMM of the dequantized matrix); the twin is gk_qmma_ref.
 *
 * A block of 4 warps computes a 64-row x 64-token tile of y, each warp 32 x
 * 32 (2 m16 x 4 n8 mma tiles), over k-tiles of 64 columns. Per k-tile every
 * thread dequantizes one 32-element block of one weight row (qb_values32:
 * the values of gk_qdequant_f16, bit for bit) into an f16 tile in shared
 * memory, and 16-byte cp.async bring the 64 tokens' x; tiles are swizzled
 * (16-byte chunk ^ row % 8 in 128-byte rows) so ldmatrix reads them without
 * bank conflicts. Two stages: while the tensor cores run on k-tile t, the
 * copies of t + 1 are in flight and its weight bytes sit in registers, to
 * be dequantized into the other stage after the mma; one barrier per
 * k-tile. Rows, tokens and columns past the ends are zeros in the tiles.
 *
 * Built twice: nvcc (gk_qmma_cuda) and the emulator through
 * ops/gpu_qgemm_emu.cc (gk_qmma_emu). Covered by tests/emu/test_qmm_emu.c
 * and tests/gpu/test_qmm_gpu.c. */
#include "ops/gpu_qblocks.cuh"

namespace {

constexpr int kBM = 64, kBN = 64, kBK = 64; /* weight rows, tokens, columns per tile */
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = kBM * kBK; /* f16 elements of one W (or x) tile */
static_assert(kBM == kBN, "W and x tiles share the swizzle and size");
static_assert(kBM * (kBK / 32) == kThreads, "one 32-element weight block per thread");

/* Element offset of (row, col) in a [64][64] tile: 16-byte chunks XORed
 * with row % 8 (col % 8 == 0 for every caller). */
__device__ __forceinline__ int swz(int row, int col)
{
    return row * kBK + ((((col / 8) ^ row) & 7) << 3) + (col & 7);
}

template <int TYPE>
__global__ void __launch_bounds__(kThreads)
qmma_kernel(const gk_qmat w, const uint16_t *__restrict__ x, const int64_t ld_x, const int64_t n,
            float *__restrict__ y, const int64_t ld_y, const float beta)
{
    IG_DYN_SHARED(uint16_t, smem); /* W[2][tile], X[2][tile] */
    uint16_t *ws = smem, *xs = smem + 2 * kTile;
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t m0 = (int64_t)blockIdx.x * kBM, n0 = (int64_t)blockIdx.y * kBN;
    const int64_t n_xb = w.cols / 32, k_tiles = (w.cols + kBK - 1) / kBK;

    /* this thread's weight block: row, which 32 columns of the k-tile */
    const int my_row = tid / 2, my_half = tid % 2;
    const bool row_ok = m0 + my_row < w.rows;
    qraw raw;
    auto load_w = [&](int64_t kt) {
        const int64_t xb = kt * 2 + my_half;
        if (row_ok && xb < n_xb)
            raw = qb_load32<TYPE>(w, m0 + my_row, xb);
    };
    auto store_w = [&](int64_t kt, uint16_t *dst) {
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
    };
    auto load_x = [&](int64_t kt, uint16_t *dst) {
        for (int c = tid; c < kBN * kBK / 8; c += kThreads) {
            const int tok = c / (kBK / 8), col = (c % (kBK / 8)) * 8;
            const int64_t gc = kt * kBK + col;
            const bool ok = n0 + tok < n && gc < w.cols;
            ig_cp_async16(&dst[swz(tok, col)], ok ? x + (n0 + tok) * ld_x + gc : x, ok);
        }
        ig_cp_async_commit();
    };

    float acc[2][4][4];
    IG_UNROLL
    for (int mt = 0; mt < 2; mt++)
        IG_UNROLL
        for (int nt = 0; nt < 4; nt++)
            IG_UNROLL
            for (int i = 0; i < 4; i++)
                acc[mt][nt][i] = 0;
    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 rows and 32 tokens */

    load_x(0, xs);
    load_w(0);
    store_w(0, ws);
    for (int64_t kt = 0; kt < k_tiles; kt++) {
        const int cur = (int)(kt % 2), nxt = cur ^ 1;
        ig_cp_async_wait<0>();
        ig_syncthreads(); /* stage cur complete; stage nxt no longer read */
        const bool more = kt + 1 < k_tiles;
        if (more) {
            load_x(kt + 1, xs + nxt * kTile);
            load_w(kt + 1); /* in registers across the mma */
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

    /* C fragment: c0, c1 at (row g, tokens 2q, 2q + 1), c2, c3 at row g + 8 */
    const int g = lane / 4, q = lane % 4;
    IG_UNROLL
    for (int mt = 0; mt < 2; mt++)
        IG_UNROLL
        for (int nt = 0; nt < 4; nt++)
            IG_UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t row = m0 + wm * 32 + mt * 16 + g + 8 * (i / 2);
                const int64_t tok = n0 + wn * 32 + nt * 8 + 2 * q + i % 2;
                if (row < w.rows && tok < n) {
                    float *p = &y[tok * ld_y + row];
                    *p = beta != 0 ? acc[mt][nt][i] + beta * *p : acc[mt][nt][i];
                }
            }
}

} /* namespace */

extern "C" int IG_DEV(gk_qmma)(const struct gk_qgemv_params *p, void *stream)
{
    struct gk_qlayout l;
    const bool ok = gk_qlayout_of(p->w.type, &l) && p->w.type != QUANT_MXFP4 /* experts' */ &&
                    p->w.rows >= 1 && p->w.cols >= l.block &&
                    p->w.cols % l.block == 0 && p->n >= 1 && p->w.q && p->w.s &&
                    (!l.h || p->w.h) && p->x && p->y && p->ld_x >= p->w.cols &&
                    p->ld_x % 8 == 0 && gk_aligned(p->x, 16) && p->ld_y >= p->w.rows &&
                    (p->beta == 0 || p->beta == 1) &&
                    (p->w.rows + kBM - 1) / kBM <= 0x7fffffff && (p->n + kBN - 1) / kBN <= 65535;
    if (!ok)
        return ig_error(IG_E_INTERNAL, "gk_qmma: unsupported %s %lld x %lld, n %lld, ld_x %lld "
                        "(or a NULL or misaligned pointer)",
                        quant_type_name((uint32_t)p->w.type), (long long)p->w.rows,
                        (long long)p->w.cols, (long long)p->n, (long long)p->ld_x);
    const gk_qgemv_params q = *p;
    const dim3 grid((unsigned)((q.w.rows + kBM - 1) / kBM), (unsigned)((q.n + kBN - 1) / kBN));
    const size_t smem = 4 * kTile * sizeof(uint16_t); /* 32 KiB */
    return qtype_dispatch(q.w.type, [&](auto tag) {
        auto *kernel = qmma_kernel<decltype(tag)::value>;
        return IG_LAUNCH(kernel, grid, dim3(kThreads), smem, (cudaStream_t)stream, q.w, q.x,
                         q.ld_x, q.n, q.y, q.ld_y, q.beta);
    });
}
