/* ops/gpu_gemv.cu: y = W x + beta y for one token (decode), W f16 row-major,
 * x f16, y f32 (semantics in ops/gpu_ops.h, section gpu_gemv). The decode
 * step's memory-bound core: W is streamed once with 16-byte loads.
 *
 * Block of 8 warps, each warp owns 2 rows. x is converted once per block to
 * f32 in shared memory (cols * 4 bytes), while the first W loads are in
 * flight. A lane walks its rows' 16-byte chunks lane, lane + 32, ... with
 * kUnroll chunks of each row in flight (2 * kUnroll independent loads), f32
 * FMAs, one butterfly reduction per row at the end; no atomics, each row
 * written by one lane. gk_gemv_f16_glu: the warp's rows are a gate row and
 * its up row, and the lane writes their SwiGLU/GeGLU (one launch, not two).
 * gk_gemv_f16_norm (a residual add): the last block to finish normalizes the
 * finished residual into the next product's f16 input (gk_norm_tail). Limits: cols <= kMaxCols (x must fit shared memory
 * on sm_80 too), x 16-byte aligned like the rows of W.
 *
 * Built twice: nvcc (gk_gemv_f16_cuda) and the emulator through
 * ops/gpu_gemv_emu.cc (gk_gemv_f16_emu). Covered by tests/emu/test_gemv_emu.c
 * and bench/bench_decode_kernels.c. */
#include "devkit/intrinsics.cuh"
#include "ops/gpu_math.cuh"
#include "ops/gpu_ops.h"
#include "ops/gpu_rope.cuh"

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kUnroll = 4;              /* chunks per row per lane in flight */
constexpr int64_t kMaxCols = 40 * 1024; /* x in shared memory: 160 KiB (A100: 163) */
/* At least the kernel's static shared memory (the norm tail's): with x's it
 * must fit the 48 KiB a block has unless the launch raises the limit. */
constexpr size_t kStaticSmem = 1024;

struct alignas(16) float4s {
    float v[4];
};

/* acc += the 8 halves of c times xs[0..7]. */
__device__ __forceinline__ float dot8(const gk_u32x4 &c, const float4s &x0, const float4s &x1,
                                      float acc)
{
    acc = fmaf(gk_f16_bits_to_f32(c.w[0] & 0xffffu), x0.v[0], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[0] >> 16), x0.v[1], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[1] & 0xffffu), x0.v[2], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[1] >> 16), x0.v[3], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[2] & 0xffffu), x1.v[0], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[2] >> 16), x1.v[1], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[3] & 0xffffu), x1.v[2], acc);
    acc = fmaf(gk_f16_bits_to_f32(c.w[3] >> 16), x1.v[3], acc);
    return acc;
}

/* glu (enum gk_glu) GK_GLU_NONE: y = W x + beta y. Else the warp's two rows
 * are gate row i and up row i + rows / 2 of output i, and h[i] gets their
 * activation (y unused). */
__global__ void __launch_bounds__(kThreads)
gemv_f16_kernel(const uint16_t *__restrict__ w, const uint16_t *__restrict__ x,
                float *__restrict__ y, const int64_t rows, const int64_t cols, const float beta,
                const int glu, uint16_t *__restrict__ h, const float *__restrict__ norm_w,
                const float norm_eps, uint16_t *__restrict__ xn, uint32_t *ticket,
                const bool norm_vec, const int norm_nt, const gk_qkv_params rope,
                const bool rope_on)
{
    IG_DYN_SHARED(float4s, xs); /* [cols / 4] */
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int64_t n_chunks = cols / 8;
    const int64_t out = (int64_t)blockIdx.x * kWarps + warp; /* a GLU's output, a RoPE slot */
    const bool pairs = glu || rope_on; /* the warp's rows are out's two */
    int64_t r0 = pairs ? out : out * kRowsPerWarp;
    /* A missing second row reads the first again and is not written. */
    int64_t r1 = pairs ? out + rows / 2 : r0 + 1 < rows ? r0 + 1 : r0;
    if (rope_on && out < rows / 2)
        gk_rope_rows(rope, out, &r0, &r1);
    const bool live = pairs ? out < rows / 2 : r0 < rows; /* else this warp only helps stage x */
    const uint16_t *w0 = w + (live ? r0 : 0) * cols, *w1 = w + (live ? r1 : 0) * cols;

    /* The first loads of W go out before x is staged, hiding its latency. */
    gk_u32x4 a[kUnroll], b[kUnroll];
    auto load = [&](int64_t c) {
        for (int u = 0; u < kUnroll; u++) {
            const int64_t cc = c + 32 * u;
            if (cc < n_chunks) {
                a[u] = gk_ld_stream16(w0 + cc * 8);
                b[u] = gk_ld_stream16(w1 + cc * 8);
            }
        }
    };
    if (live)
        load(lane);
    /* Launched with IG_LAUNCH_DEP, the next kernel may start once our last
     * blocks are here; x (and y, with beta) may be the previous kernel's,
     * so every block waits for it before staging x, dead warps too. */
    ig_launch_dependents();
    ig_grid_dependency_wait();

    for (int64_t c = threadIdx.x; c < n_chunks; c += kThreads) {
        const gk_u32x4 v = *(const gk_u32x4 *)(x + c * 8);
        float4s lo, hi;
        for (int i = 0; i < 2; i++) {
            lo.v[2 * i] = gk_f16_bits_to_f32(v.w[i] & 0xffffu);
            lo.v[2 * i + 1] = gk_f16_bits_to_f32(v.w[i] >> 16);
            hi.v[2 * i] = gk_f16_bits_to_f32(v.w[2 + i] & 0xffffu);
            hi.v[2 * i + 1] = gk_f16_bits_to_f32(v.w[2 + i] >> 16);
        }
        ig_sts(&xs[2 * c], lo);
        ig_sts(&xs[2 * c + 1], hi);
    }
    ig_syncthreads();

    float acc0 = 0, acc1 = 0;
    for (int64_t c = live ? lane : n_chunks; c < n_chunks; c += 32 * kUnroll) {
        if (c != lane)
            load(c);
        for (int u = 0; u < kUnroll; u++) {
            const int64_t cc = c + 32 * u;
            if (cc < n_chunks) {
                const float4s x0 = ig_lds(&xs[2 * cc]), x1 = ig_lds(&xs[2 * cc + 1]);
                acc0 = dot8(a[u], x0, x1, acc0);
                acc1 = dot8(b[u], x0, x1, acc1);
            }
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        acc0 += ig_shfl_xor_f32(acc0, off);
        acc1 += ig_shfl_xor_f32(acc1, off);
    }
    if (lane == 0 && live && rope_on) {
        gk_rope_epilogue(rope, 0, (int)out, acc0, acc1);
    } else if (lane == 0 && live && glu) {
        h[out] = gk_f32_to_f16(glu == GK_GLU_GELU ? gk_gelu_mul(acc0, acc1)
                                                : gk_silu_mul(acc0, acc1));
    } else if (lane == 0 && live) {
        y[r0] = beta != 0 ? acc0 + beta * y[r0] : acc0;
        if (r1 != r0)
            y[r1] = beta != 0 ? acc1 + beta * y[r1] : acc1;
    }
    if (norm_w)
        gk_norm_tail(y, rows, 1, rows, norm_w, norm_eps, xn, ticket, norm_vec, norm_nt);
}

} /* namespace */

/* The norm tail's arguments (gk_gemv_f16_norm), or none. */
struct norm_tail {
    const float *w;
    float eps;
    uint16_t *xn;
    uint32_t *ticket;
};

static int launch(const uint16_t *w, const uint16_t *x, float *y, int64_t rows, int64_t cols,
                  float beta, int glu, uint16_t *h, const norm_tail &nm, void *stream,
                  const gk_qkv_params *rope = NULL)
{
    if (!w || !x || !(glu ? (void *)h : rope ? (void *)rope->q : (void *)y) || rows < 1 ||
        cols < 8 || cols % 8 ||
        cols > kMaxCols || (rows + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffff ||
        (glu && (rows % 2 || (glu != GK_GLU_SILU && glu != GK_GLU_GELU))))
        return ig_error(IG_E_INTERNAL, "gemv: unsupported sizes %lld x %lld%s", (long long)rows,
                        (long long)cols, glu ? " (gate|up with its activation)" : "");
    const size_t smem = (size_t)cols * sizeof(float);
    /* The 48 KiB default covers the norm tail's static slots too (gk_norm_tail,
     * gk_block_sum: 48 bytes by ptxas): x alone at 48 KiB (cols 12288) needs the raise. */
    if (smem + kStaticSmem > 48 * 1024)
        IG_SMEM_OPTIN(&gemv_f16_kernel, smem);
    /* A GLU's warp holds one output's two rows: as many blocks either way. */
    const int64_t outs = glu || rope ? rows / 2 : (rows + kRowsPerWarp - 1) / kRowsPerWarp;
    const dim3 grid((unsigned)((outs + kWarps - 1) / kWarps)), block(kThreads);
    /* the norm tail's vector path and threads: gk_rmsnorm's for the row */
    const bool vec = rows % 4 == 0 && gk_aligned(y, 16) && gk_aligned(nm.w, 16) &&
                     gk_aligned(nm.xn, 8);
    const int nt = gk_rmsnorm_threads(vec ? rows / 4 : rows);
    const gk_qkv_params r = rope ? *rope : gk_qkv_params{};
    return IG_LAUNCH_DEP(gemv_f16_kernel, grid, block, smem, (cudaStream_t)stream, w, x, y, rows,
                         cols, beta, glu, h, nm.w, nm.eps, nm.xn, nm.ticket, vec, nt, r,
                         rope != NULL);
}

extern "C" int IG_DEV(gk_gemv_f16)(const uint16_t *w, const uint16_t *x, float *y, int64_t rows,
                                   int64_t cols, float beta, void *stream)
{
    return launch(w, x, y, rows, cols, beta, GK_GLU_NONE, NULL, norm_tail{}, stream);
}

extern "C" int IG_DEV(gk_gemv_f16_glu)(const uint16_t *w, const uint16_t *x, uint16_t *h,
                                       int64_t rows, int64_t cols, int act, void *stream)
{
    return launch(w, x, NULL, rows, cols, 0.0f, act, h, norm_tail{}, stream);
}

extern "C" int IG_DEV(gk_gemv_f16_rope)(const uint16_t *w, const uint16_t *x, int64_t rows,
                                        int64_t cols, const struct gk_qkv_params *rope,
                                        void *stream)
{
    if (!rope || rope->n != 1 || rope->head_dim < 2 || rope->head_dim % 2 ||
        rope->n_rot < 0 || rope->n_rot % 2 || rope->n_rot > rope->head_dim ||
        (rope->n_head + 2 * rope->n_head_kv) * rope->head_dim != rows || !rope->pos ||
        (rope->n_rot && !rope->inv_freq) ||
        (rope->rope_style != ROPE_ADJACENT && rope->rope_style != ROPE_HALF_SPLIT) ||
        (rope->k ? !rope->v
                 : !rope->k_cache || !rope->v_cache || !rope->block_table ||
                       rope->table_stride < 1))
        return ig_error(IG_E_INTERNAL, "gemv: the Q|K|V product's RoPE epilogue does not fit "
                        "its %lld rows", (long long)rows);
    return launch(w, x, NULL, rows, cols, 0.0f, GK_GLU_NONE, NULL, norm_tail{}, stream, rope);
}

extern "C" int IG_DEV(gk_gemv_f16_norm)(const uint16_t *w, const uint16_t *x, float *y,
                                        int64_t rows, int64_t cols, const float *norm_w,
                                        float eps, uint16_t *xn, uint32_t *ticket, void *stream)
{
    if (!norm_w || !xn || !ticket)
        return ig_error(IG_E_INTERNAL, "gemv: the norm tail needs its weights, output and "
                        "ticket");
    return launch(w, x, y, rows, cols, 1.0f, GK_GLU_NONE, NULL,
                  norm_tail{norm_w, eps, xn, ticket}, stream);
}
