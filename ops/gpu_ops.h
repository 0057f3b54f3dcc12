/* ops/gpu_ops.h: the CUDA kernels of the primitives both stages use on the
 * GPU, each with a CPU twin (the same name with _ref, plain C, host
 * pointers) that defines its result. Activations: the residual stream and
 * every GEMM output are f32; what feeds a GEMM or attention is f16 (raw
 * IEEE binary16 bits, uint16_t), as are the weights and the KV cache.
 *
 * Launchers take device pointers and a cudaStream_t (`stream`) and return
 * IG_OK, IG_E_INTERNAL for unsupported sizes (reported), or IG_E_DEVICE for
 * a launch failure. They only queue work: nothing synchronizes, nothing is
 * allocated, so a captured decode step replays them. Positions come from
 * device memory (`pos`) for the same reason.
 *
 * Every .cu compiles twice (devkit/dev_entry.h): name_cuda for the GPU,
 * name_emu under the emulator. Covered by tests/emu/test_gpu_ops_emu.c (each
 * emulated kernel against its twin) and tests/gpu/ (on a GPU). */
#ifndef IGNITE_OPS_GPU_OPS_H
#define IGNITE_OPS_GPU_OPS_H

#include "devkit/dev_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops/gpu_elementwise.cu -------------------------------------------- */

/* x[t][i] = table[tokens[t] - v0][i] for t < n, i < n_embd: table f16
 * [n_v][n_embd], the vocabulary rows [v0, v0 + n_v) (the whole table: 0,
 * n_vocab); a token outside them gets a row of zeros (a tensor-parallel
 * rank's part); tokens int32 [n] (checked by the caller), x f32. */
int IG_DEV(gk_embed)(const uint16_t *table, const int32_t *tokens, int64_t n, int64_t n_embd,
                     int64_t v0, int64_t n_v, float *x, void *stream);
void gk_embed_ref(const uint16_t *table, const int32_t *tokens, int64_t n, int64_t n_embd,
                  int64_t v0, int64_t n_v, float *x);

/* y[t] = f16(x[t] * w / sqrt(mean(x[t]^2) + eps)) for t < n: x f32 [n][dim]
 * (row stride ld_x), w f32 [dim], y f16 [n][dim] (contiguous). Sums in f32. */
int IG_DEV(gk_rmsnorm)(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                       float eps, uint16_t *y, void *stream);
void gk_rmsnorm_ref(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                    float eps, uint16_t *y);
/* gk_rmsnorm, then y's int8 blocks: xq [n][dim] int8 and xqd [n][dim / 32]
 * (d, s) float pairs (dim % 32 == 0, 8-byte aligned), quantized as the
 * quantized GEMV quantizes its x (ops_qmm_quantize's bits), so a quantized
 * GEMV of y loads them (gk_qgemv_params.xq) instead of quantizing y in
 * every block: a decode step's norm launch (layer 0's). xq NULL: gk_rmsnorm.
 * The twin quantizes its own y (gk_quantize_rows_ref). */
int IG_DEV(gk_rmsnorm_xq)(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                          float eps, uint16_t *y, int8_t *xq, float *xqd, void *stream);
void gk_rmsnorm_xq_ref(const float *x, int64_t ld_x, const float *w, int64_t n, int64_t dim,
                       float eps, uint16_t *y, int8_t *xq, float *xqd);

/* After the fused QKV GEMM: bias, RoPE, conversion to f16, and where K and V
 * go. Row t is at its own position pos[t] (the rows of a step may belong to
 * several sequences); pos[t] < 0 marks a padding row (a graph bucket's
 * unused rows): its q row (and, in block mode, its k and v rows) is written
 * as zeros and nothing of it reaches the cache. */
struct gk_qkv_params {
    const float *qkv;        /* [n][(n_head + 2 * n_head_kv) * head_dim]: q | k | v */
    const float *bias;       /* the same width (one row), or NULL */
    const double *inv_freq;  /* [n_rot / 2]: rope_base^(-2i / n_rot) */
    const int32_t *pos;      /* [n]: each row's position (device memory for the kernel,
                                host for _ref) */
    int64_t n, n_head, n_head_kv, head_dim, n_rot;
    int rope_style;          /* enum rope_style (models/model.h) */
    uint16_t *q;             /* out [n][n_head][head_dim], rotated */
    /* K (rotated) and V out, either to the block's buffers
     *   k, v: [n][n_head_kv][head_dim]
     * or, when k is NULL, straight into the KV pool (decode): k_cache, v_cache
     * are the layer's pool bases (kvcache/kvcache.h), row t written at
     *   block_table[t * table_stride + pos[t] / 64] * block_stride
     *     + h * head_stride + (pos[t] % 64) * head_dim
     * (kv_row_offset through row t's table). A row whose pos[t] / 64 is
     * past table_stride, or whose table entry is negative, writes nothing
     * (the caller's bug: never write outside). */
    uint16_t *k, *v;
    uint16_t *k_cache, *v_cache;
    const int32_t *block_table; /* [n][table_stride] int32 block ids (device memory for the
                                   kernel, host for _ref) */
    int64_t table_stride, block_stride, head_stride; /* elements (struct kv_layout's) */
    double mscale;           /* cos and sin multiplied by it (YaRN's attention factor,
                                rope.scaling.attn_factor); 0 is taken as 1 */
};
/* Angles in double, as the CPU path (ops_rope_prepare): the pair (a, b) at
 * dims per rope_style becomes (a cos - b sin, a sin + b cos), theta =
 * pos * inv_freq[i], cos and sin rounded to f32 after the mscale product;
 * dims >= n_rot pass through. */
int IG_DEV(gk_qkv_rope)(const struct gk_qkv_params *p, void *stream);
void gk_qkv_rope_ref(const struct gk_qkv_params *p);

/* The gate|up product's activation where a GEMV applies it in its
 * epilogue (gk_qgemv_params.glu, gk_gemv_f16_glu): GK_GLU_NONE writes the
 * product itself. */
enum gk_glu { GK_GLU_NONE = 0, GK_GLU_SILU = 1, GK_GLU_GELU = 2 };

/* h[t][i] = f16(silu(g) * u), g = gate_up[t][i], u = gate_up[t][n_ff + i]:
 * gate_up f32 [n][2 * n_ff] (the fused gate|up GEMM), h f16 [n][n_ff]. */
int IG_DEV(gk_swiglu)(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h, void *stream);
void gk_swiglu_ref(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h);

/* The same with GELU's tanh form (Gemma's GeGLU), as ops_geglu computes it:
 * h = f16(g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u). */
int IG_DEV(gk_geglu)(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h, void *stream);
void gk_geglu_ref(const float *gate_up, int64_t n, int64_t n_ff, uint16_t *h);

/* ---- ops/gpu_arch.cu: what Qwen 3 and Gemma 3 add (f32, in place) -------- */

/* RMSNorm of each head before RoPE: for t < n, h < n_heads, the head_dim
 * elements at x + t * ld_x + h * head_dim become v r w, r = 1 / sqrt(mean(v^2)
 * + eps): x f32 (the QKV GEMM's output, q or k heads), w f32 [head_dim], or
 * NULL: v r (Gemma 4's V heads). */
int IG_DEV(gk_head_rmsnorm)(float *x, int64_t ld_x, int64_t n, int64_t n_heads,
                            int64_t head_dim, const float *w, float eps, void *stream);
void gk_head_rmsnorm_ref(float *x, int64_t ld_x, int64_t n, int64_t n_heads, int64_t head_dim,
                         const float *w, float eps);

/* y[i] = f16(x[i]) for i < n (Gemma 4's per-layer embedding gate reads the
 * residual itself, not its norm). */
int IG_DEV(gk_to_f16)(const float *x, int64_t n, uint16_t *y, void *stream);
void gk_to_f16_ref(const float *x, int64_t n, uint16_t *y);

/* Gemma 4's per-layer inputs of a step's n rows (llama.cpp's
 * project_per_layer_inputs): for t < n, l < n_layer, i < d, k = t n_layer d +
 * l d + i,
 *   out[(l ld_rows + t) 2d + d + i] = (p[k] + e[k] tok_scale) in_scale
 * p the normed projection and e the tokens' rows, f32 [n][n_layer d]; out
 * f32, per layer [ld_rows][2d] (n <= ld_rows), the first d of a row left for
 * the layer's gate (gk_geglu then reads gate | input). */
int IG_DEV(gk_ple_combine)(const float *p, const float *e, int64_t n, int64_t n_layer,
                           int64_t d, int64_t ld_rows, float tok_scale, float in_scale,
                           float *out, void *stream);
void gk_ple_combine_ref(const float *p, const float *e, int64_t n, int64_t n_layer, int64_t d,
                        int64_t ld_rows, float tok_scale, float in_scale, float *out);

/* The post-attention / post-FFN norm and the residual add: x[t] += y[t] r w,
 * r = 1 / sqrt(mean(y[t]^2) + eps), for t < n: x, y f32 rows of dim (strides
 * ld_x, ld_y), w f32 [dim]. */
int IG_DEV(gk_rmsnorm_add)(float *x, int64_t ld_x, const float *y, int64_t ld_y,
                           const float *w, int64_t n, int64_t dim, float eps, void *stream);
void gk_rmsnorm_add_ref(float *x, int64_t ld_x, const float *y, int64_t ld_y, const float *w,
                        int64_t n, int64_t dim, float eps);

/* x[i] *= s for i < n (Gemma's embeddings: s = sqrt(n_embd) in f32). */
int IG_DEV(gk_scale_f32)(float *x, int64_t n, float s, void *stream);
void gk_scale_f32_ref(float *x, int64_t n, float s);

/* x[t][i] += b[i] for t < n, i < dim: x f32 rows of stride ld_x >= dim, b
 * f32 [dim] (gpt-oss's wo bias, added after the product's residual add). */
int IG_DEV(gk_add_rows_f32)(float *x, int64_t ld_x, const float *b, int64_t n, int64_t dim,
                            void *stream);
void gk_add_rows_f32_ref(float *x, int64_t ld_x, const float *b, int64_t n, int64_t dim);

/* x[i] = cap tanh(x[i] / cap) for i < n, cap > 0 (final logit soft-capping;
 * 1 / cap rounded to f32 once, as ops_softcap). */
int IG_DEV(gk_softcap)(float *x, int64_t n, float cap, void *stream);
void gk_softcap_ref(float *x, int64_t n, float cap);

/* ---- ops/gpu_weights.cu: weights onto the device -------------------------- */

/* Whether gk_dequant_f16 reads `type` (enum quant_type): F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1. Others are dequantized on the host by the caller. */
bool gk_dequant_supported(int type);

/* dst[r][c] = f16(value of stored weight row r, column c) for rows x cols:
 * src holds rows * row_bytes bytes in the GGUF block format of `type` (the
 * same values as quant_dequantize_row, rounded once to f16). */
int IG_DEV(gk_dequant_f16)(int type, const void *src, int64_t rows, int64_t cols,
                           size_t row_bytes, uint16_t *dst, void *stream);
void gk_dequant_f16_ref(int type, const void *src, int64_t rows, int64_t cols,
                        size_t row_bytes, uint16_t *dst);

/* dst[i] = f16(center + scale * u(seed, i)), u uniform in [-1, 1) from a
 * counter-based hash (the same on host and device, any launch shape): random
 * weights made on the device for synthetic models. */
int IG_DEV(gk_random_f16)(uint16_t *dst, int64_t n, uint64_t seed, float center, float scale,
                          void *stream);
void gk_random_f16_ref(uint16_t *dst, int64_t n, uint64_t seed, float center, float scale);
/* The same in f32 (norm weights). */
int IG_DEV(gk_random_f32)(float *dst, int64_t n, uint64_t seed, float center, float scale,
                          void *stream);
void gk_random_f32_ref(float *dst, int64_t n, uint64_t seed, float center, float scale);

/* ---- ops/gpu_gemv.cu: one-token matrix-vector product (decode) ----------- */

/* y[r] = sum_c w[r][c] * x[c] + beta * y[r] for r < rows: w f16 [rows][cols]
 * (cols a multiple of 8 and at most 40960: x is staged in shared memory;
 * rows 16-byte aligned), x f16 [cols] 16-byte aligned, y f32; f32 sums.
 * beta 0 (y not read) or 1. Streams w once with 16-byte loads: it is
 * the decode step's memory-bound core. */
int IG_DEV(gk_gemv_f16)(const uint16_t *w, const uint16_t *x, float *y, int64_t rows,
                        int64_t cols, float beta, void *stream);
void gk_gemv_f16_ref(const uint16_t *w, const uint16_t *x, float *y, int64_t rows, int64_t cols,
                     float beta);

/* The gate|up product with its activation in the epilogue (one launch for
 * what gk_gemv_f16 and gk_swiglu / gk_geglu did in two): w's rows [0, n_ff)
 * are the gate, [n_ff, 2 n_ff) the up rows (rows = 2 n_ff), and
 * h[i] = f16(act(gate_i . x) * (up_i . x)) for i < n_ff, each dot product
 * the f32 that gk_gemv_f16 would write (the same bits). act GK_GLU_SILU or
 * GK_GLU_GELU. The twin: gk_gemv_f16_ref, then gk_swiglu_ref / gk_geglu_ref. */
int IG_DEV(gk_gemv_f16_glu)(const uint16_t *w, const uint16_t *x, uint16_t *h, int64_t rows,
                            int64_t cols, int act, void *stream);
void gk_gemv_f16_glu_ref(const uint16_t *w, const uint16_t *x, uint16_t *h, int64_t rows,
                         int64_t cols, int act);

/* The Q|K|V product of one row with gk_qkv_rope's work in its epilogue
 * (rope->n 1; rope->qkv unused): nothing in f32, the rotated q and K/V out
 * as gk_qkv_rope would write them from gk_gemv_f16's product (the same
 * bits; ops/gpu_rope.cuh). The twin: gk_gemv_f16_ref, then gk_qkv_rope_ref. */
int IG_DEV(gk_gemv_f16_rope)(const uint16_t *w, const uint16_t *x, int64_t rows, int64_t cols,
                             const struct gk_qkv_params *rope, void *stream);

/* y += W x (a residual add), then xn = f16(RMSNorm(y) norm_w) (gk_rmsnorm's
 * bits, xn [rows]) by the last block to finish: the next product's input
 * with no norm launch. ticket: one counter, 0 before the launch and left
 * 0. The twin: gk_gemv_f16_ref, then gk_rmsnorm_ref. */
int IG_DEV(gk_gemv_f16_norm)(const uint16_t *w, const uint16_t *x, float *y, int64_t rows,
                             int64_t cols, const float *norm_w, float eps, uint16_t *xn,
                             uint32_t *ticket, void *stream);

#ifdef __cplusplus
}
#endif

#endif
