/* ops/gpu_qmm.h: block-quantized weights on the GPU and the matrix products
 * that read them where they lie (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
 * Q6_K; MXFP4 for expert matrices only, gk_qmm_native_experts; weights of
 * other types go to the device as f16, ops/gpu_ops.h).
 *
 * A matrix is held in its own blocks, split into planes (struct gk_qmat):
 * quants, high bits, scales, each row-major over the blocks of a row, so a
 * lane's 16- or 32-byte quant chunk is aligned and the bytes on the device
 * are those of the file (docs/gpu.md, "Quantized weights", has the table).
 * The high bits of Q5_0/Q5_1/Q5_K/Q6_K are reordered at load so a kernel
 * gets 4 elements' bits with one shift and mask.
 *
 * Products (y = W x + beta y, y f32, x f16 activations):
 *   - gk_qgemv (ops/gpu_qgemv.cu): 1..GK_QGEMV_MAX_N activation rows, the
 *     weights streamed once for all of them; x quantized per 32 elements
 *     to int8 (d = max|x| / 127, as the CPU's ops_qmm_quantize) in shared
 *     memory, integer dot products (dp4a) per block, scales in f32;
 *   - gk_qdequant_f16 + the device GEMM (cuBLAS): rows of W dequantized
 *     just in time into an f16 scratch, for many activation rows;
 *   - gk_qmma (ops/gpu_qgemm.cu): tensor cores over the quantized blocks
 *     (dequantized to f16 in shared memory in front of mma.sync).
 * gk_qmm_choose (ops/gpu_qlayout.c) is the one place that picks among them
 * for a row count; dispatch, buffer sizing and support checks all ask it.
 *
 * Every kernel has a CPU twin (_ref, ops/gpu_qmm_ref.c and
 * ops/gpu_qlayout.c) that defines its result; launchers compile twice
 * (devkit/dev_entry.h) and return IG_OK, IG_E_INTERNAL for sizes they do not
 * take (reported) or IG_E_DEVICE. They only queue work on `stream`.
 * Covered by tests/emu/test_qmm_emu.c (every kernel, every type, under the
 * emulator) and tests/gpu/test_qmm_gpu.c. */
#ifndef IGNITE_OPS_GPU_QMM_H
#define IGNITE_OPS_GPU_QMM_H

#include "devkit/dev_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gk_qkv_params; /* ops/gpu_ops.h */

/* ---- layouts (ops/gpu_qlayout.c) ----------------------------------------- */

/* A weight matrix on the device: rows x cols of `type` (enum quant_type).
 * For QUANT_F16, q is the [rows][cols] f16 matrix and h, s are NULL. For a
 * block type, with nb = cols / block blocks per row (struct gk_qlayout):
 *   q [rows][nb][layout.q]  quants, as in the file's blocks (K types:
 *                           halves of chunks reordered, GK_KQ_OFF)
 *   h [rows][nb][layout.h]  high bits, reordered (NULL when layout.h is 0)
 *   s [rows][nb][layout.s]  scales (and mins) */
struct gk_qmat {
    int type;
    int64_t rows, cols;
    uint8_t *q, *h, *s;
};

/* K types (Q4_K, Q5_K, Q6_K): a super-block's 128 quant bytes are four GEMV
 * chunks of 32 (chunk k: the file's bytes 32k .. 32k + 31). On the device
 * the first 16 bytes of every chunk come first, then the second 16: half h
 * (0, 1) of chunk k lies at GK_KQ_OFF(k, h). A warp's lanes walk
 * consecutive chunks, so each of their two 16-byte loads reads whole 32-byte
 * sectors (in the file's order every load used half of each sector it
 * touched, the other half coming in again with the next load). */
#define GK_KQ_OFF(k, h) (64 * (h) + 16 * (k))

struct gk_qlayout {
    int64_t block;  /* elements per block (32, or 256 for the K types) */
    int64_t chunk;  /* elements per GEMV chunk (32, or 64 for the K types) */
    uint32_t q, h, s; /* bytes per block in each plane */
};

/* The device layout of `type`; false for a type kept as f16 on the device. */
bool gk_qlayout_of(int type, struct gk_qlayout *out);

/* Bytes of one allocation holding all planes of a rows x cols matrix of
 * `type` (F16 too), each plane starting on a 256-byte boundary. 0 when cols
 * is not a multiple of the type's block. */
size_t gk_qmat_bytes(int type, int64_t rows, int64_t cols);

/* Sets w's type, shape and plane pointers inside `base` (gk_qmat_bytes). */
void gk_qmat_carve(struct gk_qmat *w, int type, int64_t rows, int64_t cols, void *base);

/* Rows [r0, r0 + nr) of w as a matrix of their own (planes are row-major,
 * so the view shares w's memory). */
struct gk_qmat gk_qmat_rows(const struct gk_qmat *w, int64_t r0, int64_t nr);

/* The twin of gk_qrepack: fills w's planes (host memory) from rows of the
 * file's blocks (`src`, rows x row_bytes). */
void gk_qrepack_ref(const struct gk_qmat *w, const void *src, size_t row_bytes);

/* The inverse: row `row` of w back in the file's block format (row_bytes =
 * nb * the GGUF block size). The twins read weights through it and
 * quant_dequantize_row. */
void gk_qunpack_row_ref(const struct gk_qmat *w, int64_t row, void *dst);

/* ---- the chooser (ops/gpu_qlayout.c) ------------------------------------- */

enum gk_qmm_path {
    GK_QMM_UNSUPPORTED = 0,
    GK_QMM_GEMV_F16,   /* f16 weights, 1 row: gk_gemv_f16 */
    GK_QMM_GEMM_F16,   /* f16 weights, several rows: the device GEMM */
    GK_QMM_QGEMV,      /* quantized weights, up to GK_QGEMV_MAX_N rows: gk_qgemv */
    GK_QMM_QMMA,       /* quantized weights, tensor cores: gk_qmma */
    GK_QMM_DEQUANT,    /* quantized weights dequantized into f16 slabs + the GEMM */
};

#define GK_QGEMV_MAX_N 8

/* What gk_qmm_choose decided for one product. */
struct gk_qmm_plan {
    enum gk_qmm_path path;
    int64_t slab_rows;    /* GK_QMM_DEQUANT: weight rows dequantized per GEMM */
    size_t scratch_bytes; /* GK_QMM_DEQUANT: f16 scratch it needs (slab_rows * cols * 2) */
};

/* The path for y = W x with W rows x cols of `type` and n activation rows.
 * For a given type and shape the path only moves along the enum's order as
 * n grows (GEMV, then QMMA, then DEQUANT), so the plan for the largest n a
 * caller will pass tells it every buffer it needs. IGNITE_QMM_PATH=qgemv|
 * qmma|dequant forces a quantized path where it is supported (benchmarks,
 * tests). Returns IG_OK, or IG_E_INTERNAL (reported) for a shape no path
 * takes (plan->path GK_QMM_UNSUPPORTED). */
int gk_qmm_choose(int type, int64_t rows, int64_t cols, int64_t n, struct gk_qmm_plan *plan);

/* "qgemv", "dequant", ... */
const char *gk_qmm_path_name(enum gk_qmm_path path);

/* Whether the device layout and the kernels take a rows x cols weight of
 * `type` (the loader keeps it native, else it converts it to f16). */
bool gk_qmm_native(int type, int64_t rows, int64_t cols);

/* The same for an expert matrix, read by the expert-indexed product alone
 * (ops/gpu_moe.h): gk_qmm_native's types and MXFP4 (gpt-oss's experts;
 * planes q 16 bytes, s the E8M0 byte, repacked, dequantized and made random
 * by ops/gpu_qweights.cu as the others, but read by no dense product). */
bool gk_qmm_native_experts(int type, int64_t rows, int64_t cols);

/* IG_OK, or IG_E_USAGE naming the accepted values when IGNITE_QMM_PATH holds
 * something else (checked once when a backend is made). */
int gk_qmm_check_env(void);

/* ---- ops/gpu_qweights.cu: loading and reading whole rows --------------------- */

/* Fills w's planes (device) from rows x row_bytes of the file's blocks at
 * `src` (device). The twin is gk_qrepack_ref. */
int IG_DEV(gk_qrepack)(const struct gk_qmat *w, const void *src, size_t row_bytes,
                       void *stream);

/* dst[r][c] = f16(value of row r0 + r, column c) for r < nr: the values of
 * quant_dequantize_row, rounded once to f16. dst 16-byte aligned. */
int IG_DEV(gk_qdequant_f16)(const struct gk_qmat *w, int64_t r0, int64_t nr, uint16_t *dst,
                            void *stream);
void gk_qdequant_f16_ref(const struct gk_qmat *w, int64_t r0, int64_t nr, uint16_t *dst);

/* x[t][c] = value of row tokens[t] - v0, column c (f32, bit for bit
 * quant_dequantize_row's) for t < n: the embedding lookup, w holding the
 * vocabulary rows [v0, v0 + w->rows) (the whole table: v0 = 0); a token
 * outside them gets a row of zeros (a tensor-parallel rank's part). */
int IG_DEV(gk_qembed)(const struct gk_qmat *w, const int32_t *tokens, int64_t n, int64_t v0,
                      float *x, void *stream);
void gk_qembed_ref(const struct gk_qmat *w, const int32_t *tokens, int64_t n, int64_t v0,
                   float *x);

/* Random blocks for a shapes-only synthetic model: quant and high-bit bytes
 * from a counter hash of (seed, byte), scales fixed per type (K types'
 * sub-block scales random too) so that |weight| <~ 1/sqrt(cols), as
 * models/synthetic.c makes them on the host. */
int IG_DEV(gk_qrandom)(const struct gk_qmat *w, uint64_t seed, void *stream);
void gk_qrandom_ref(const struct gk_qmat *w, uint64_t seed);
/* The fixed f16 fields of gk_qrandom's scale records for `type` and `cols`
 * (fixed[0] d, fixed[1] m or dmin or 0; MXFP4: fixed[0] the E8M0 byte), one
 * computation for both builds. */
void gk_qrandom_fixed(int type, int64_t cols, uint16_t fixed[2]);

/* ---- ops/gpu_qgemv.cu: few activation rows ------------------------------- */

struct gk_qgemv_params {
    struct gk_qmat w;   /* a block type */
    const uint16_t *x;  /* f16 [n][ld_x], rows 16-byte aligned (ld_x % 8 == 0) */
    int64_t ld_x;
    int64_t n;          /* activation rows, 1..GK_QGEMV_MAX_N */
    float *y;           /* f32 [n][ld_y]: y[t][r] for r < w.rows */
    int64_t ld_y;
    float beta;         /* 0 (y not read) or 1 (y += W x: a residual add) */
    /* gk_qgemv only: glu (enum gk_glu of ops/gpu_ops.h) GK_GLU_SILU or
     * GK_GLU_GELU makes it the gate|up product with its activation in the
     * epilogue: W's rows [0, rows / 2) the gate, the rest the up rows, and
     * h[t][i] = f16(act(gate_i . x[t]) * (up_i . x[t])) (ld_h >= rows / 2)
     * instead of y (unused; beta 0). 0: y as above. */
    int glu;
    uint16_t *h;
    int64_t ld_h;
    /* gk_qgemv only, beta 1 (y the residual), glu 0: with norm_w, the last
     * block to finish also writes xn[t] = f16(RMSNorm(y[t]) norm_w) for
     * t < n (xn [n][rows]; gk_rmsnorm's bits), the next product's input, so
     * the norm needs no launch of its own; ticket: one counter, 0 before
     * the launch and left 0. NULL: no norm. */
    const float *norm_w;
    float norm_eps;
    uint16_t *xn;
    uint32_t *ticket;
    /* gk_qgemv only. With norm_w: where non-NULL, the tail also writes xn's
     * int8 blocks into qn ([n][rows] int8) and qnd ([n][rows / 32] (d, s)
     * float pairs; rows % 32 == 0), quantized as the GEMV quantizes x.
     * With glu: where qn is non-NULL, h's int8 blocks go to qn ([n][ld_h])
     * and qnd ([n][ld_h / 32]; rows / 2 and ld_h multiples of 32), each 32
     * outputs' block written by the last of the 4 blocks of the grid that
     * computed them (ticket: (rows / 2) / 32 counters, 0 before the launch
     * and left 0), so the down product loads h's blocks (xq) instead of
     * quantizing h in every one of its blocks. As input: xq/xqd, where non-NULL, are x's int8 blocks in that layout
     * (row stride ld_x, a multiple of 32), which the kernel loads instead of
     * quantizing x itself (the same bits); x is still required (the twin
     * reads it). */
    int8_t *qn;
    float *qnd;
    const int8_t *xq;
    const float *xqd;
    /* gk_qgemv only, beta 0, glu 0, no norm: W is a layer's Q|K|V
     * (rows = (n_head + 2 n_head_kv) head_dim) and the epilogue does what
     * gk_qkv_rope would do with the product (ops/gpu_ops.h; rope->qkv
     * unused): bias, RoPE, f16, q and K/V out; y is not written. A warp
     * holds a rotating pair's two rows. NULL: y as above. */
    const struct gk_qkv_params *rope;
};

/* y[t][r] = sum over the 32-element blocks b of row r of
 *   (block b of row r) . (x[t] block b quantized to int8) + beta y[t][r],
 * each block's integer dot product scaled in f32 (struct gk_qgemv_params).
 * The quantization of x is ops_qmm_quantize's, bit for bit; the twin sums
 * the same block terms in f64. */
int IG_DEV(gk_qgemv)(const struct gk_qgemv_params *p, void *stream);
void gk_qgemv_ref(const struct gk_qgemv_params *p);

/* Rows t < n of x (f16, dim columns, row stride ld) as the quantized GEMV
 * quantizes its x (ops_qmm_quantize): q [n][ld] int8, qd [n][ld / 32]
 * (d, s) pairs (dim and ld multiples of 32): the twin of the kernels'
 * gk_quantize32 tails (x's int8 blocks written where x is made). */
void gk_quantize_rows_ref(const uint16_t *x, int64_t ld, int64_t n, int64_t dim, int8_t *q,
                          float *qd);

/* ---- ops/gpu_qgemm.cu: tensor cores over quantized weights ------------------- */

/* Same params as the GEMV, any n >= 1: y[t][r] = sum_c f16(W[r][c]) x[t][c]
 * + beta y[t][r] with f32 accumulation; the weights are the values
 * gk_qdequant_f16 gives, x is not quantized (the result is the f16 GEMM's on
 * the dequantized matrix, up to the order of the sums). */
int IG_DEV(gk_qmma)(const struct gk_qgemv_params *p, void *stream);
void gk_qmma_ref(const struct gk_qgemv_params *p);

#ifdef __cplusplus
}
#endif

#endif
