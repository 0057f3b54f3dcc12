/* ops/gpu_qgemm.cu: y = W x + beta y on the tensor cores over quantized
 * weights, for more activation rows than the GEMV takes (batches, short
 * prefill chunks): the weights are read in their blocks and dequantized in
 * front of mma.sync (f16 in, f32 accumulate), the way Marlin keeps weights
 * compressed up to the tensor cores. Semantics in ops/gpu_qmm.h (the f16
 * GEMM of the dequantized matrix); the twin is gk_qmma_ref.
 *
 * A block of 4 warps computes a 64-row x 64-token tile of y by the main
 * loop of ops/gpu_qmma_tile.cuh (shared with gk_moe_mma): 64-column
 * k-tiles, each thread dequantizing one 32-element weight block into a
 * swizzled f16 tile, cp.async bringing the tokens' x, two stages. Rows,
 * tokens and columns past the ends are zeros in the tiles. A dependent
 * launch under IGNITE_PDL=1: each block issues its first weight loads,
 * then triggers and waits, before x is copied (docs/gpu.md).
 *
 * Built twice: nvcc (gk_qmma_cuda) and the emulator through
 * ops/gpu_qgemm_emu.cc (gk_qmma_emu). Covered by tests/emu/test_qmm_emu.c
 * and tests/gpu/test_qmm_gpu.c. */
#include "ops/gpu_qmma_tile.cuh"

namespace {

using qmma_tile::kBK;
using qmma_tile::kBM;
using qmma_tile::kBN;
using qmma_tile::kThreads;
using qmma_tile::swz;

/* The tile loop is ops/gpu_qmma_tile.cuh's (gk_moe_mma's too): this
 * thread's weight row is tile row tid / 2 of the block's 64, x's tile the
 * block's 64 tokens. */
template <int TYPE>
__global__ void __launch_bounds__(kThreads)
qmma_kernel(const gk_qmat w, const uint16_t *__restrict__ x, const int64_t ld_x, const int64_t n,
            float *__restrict__ y, const int64_t ld_y, const float beta)
{
    IG_DYN_SHARED(uint16_t, smem); /* W[2][tile], X[2][tile] */
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t m0 = (int64_t)blockIdx.x * kBM, n0 = (int64_t)blockIdx.y * kBN;
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
    const int my_row = tid / 2;
    /* IG_LAUNCH_DEP: the first k-tile's weights are loading when the block
     * lets the next kernel start and waits for x and y (the kernels' before) */
    auto start = [] {
        ig_launch_dependents();
        ig_grid_dependency_wait();
    };
    qmma_tile::mainloop<TYPE>(w, m0 + my_row, m0 + my_row < w.rows, w.cols, smem, load_x, start,
                              acc);
    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 rows and 32 tokens */

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
    const size_t smem = qmma_tile::kSmemBytes;
    return qtype_dispatch(q.w.type, [&](auto tag) {
        auto *kernel = qmma_kernel<decltype(tag)::value>;
        return IG_LAUNCH_DEP(kernel, grid, dim3(kThreads), smem, (cudaStream_t)stream, q.w,
                             q.x, q.ld_x, q.n, q.y, q.ld_y, q.beta);
    });
}
