/* ops/gpu_moe.h: the mixture-of-experts kernels of the CUDA backend
 * (backend/gpu_moe.c runs them in this order), after llama.cpp's
 * mul_mat_id: the routing and the expert-indexed products stay on the
 * device, so a step never waits for the host and a decode graph replays
 * for any routing.
 *
 *   gk_moe_route    each row's router logits (its own RMSNorm of the
 *                   residual, f32 weights), top-k, softmax, renormalization:
 *                   sel [n][k] (ascending expert), wts [n][k];
 *   gk_moe_sort     the n k (row, slot) pairs grouped by expert (stable) and
 *                   cut into tiles of at most GK_MOE_TILE pairs of one expert
 *                   (GK_MOE_MMA_TILE for gk_moe_mma); a tensor-parallel
 *                   rank's: its experts' pairs alone;
 *   gk_moe_gemv     one launch over every tile: each expert's weight rows
 *                   read once per tile for its pairs (the gate|up product
 *                   with the activation, or the down product);
 *   gk_moe_mma      the same products on the tensor cores, for prefill
 *                   steps (gk_moe_choose picks one of the two);
 *   gk_moe_combine  x[t] += sum over t's slots (a rank's: of its experts),
 *                   ascending expert, w y.
 *
 * The expert matrices are one gk_qmat of n_expert * rows rows (expert e's
 * rows from e * rows: ops/gpu_qmm.h's planes are row-major), in the file's
 * block type or f16. The product dequantizes each weight block to the CPU's
 * f32 values (ops/gpu_qblocks.cuh) and sums w x in f32 with x read as f16;
 * the twins (_ref, ops/gpu_moe_ref.c) sum the same terms in f64.
 * Covered by tests/emu/test_moe_emu.c (each kernel against its twin) and
 * tests/emu/test_backend_moe_emu.c (the backend against the CPU's). */
#ifndef IGNITE_OPS_GPU_MOE_H
#define IGNITE_OPS_GPU_MOE_H

#include "ops/gpu_qmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most experts a layer has (models/model.h's MODEL_MAX_EXPERTS). */
#define GK_MOE_MAX_EXPERTS 1024

/* Pairs of one expert a tile holds: the weights are read once for them. */
#define GK_MOE_TILE 8

/* Pairs of one expert a tile of the tensor-core product (gk_moe_mma) holds:
 * its x tile's 64 rows. */
#define GK_MOE_MMA_TILE 64

/* The most tiles of at most `tile` pairs n_pairs pairs over n_expert
 * experts cut into: a grid's fixed size (blocks past the step's count exit). */
static inline int64_t gk_moe_max_tiles_of(int64_t n_pairs, int64_t n_expert, int64_t tile)
{
    int64_t t = (n_pairs + tile - 1) / tile + n_expert;
    return t < n_pairs ? t : n_pairs;
}

/* The same for GK_MOE_TILE, the most of any tile size (buffers are sized by it). */
static inline int64_t gk_moe_max_tiles(int64_t n_pairs, int64_t n_expert)
{
    return gk_moe_max_tiles_of(n_pairs, n_expert, GK_MOE_TILE);
}

/* gk_moe_mma takes a step when its pairs average at least this many per
 * expert: below, a 64-pair tile is mostly zeros and the GEMV reads the same
 * weight bytes. A first guess, not yet measured on a GPU (docs/gpu.md). */
#define GK_MOE_MMA_MIN_PAIRS 4

/* The one chooser of a MoE layer's expert products for a step of n_pairs
 * pairs over n_expert experts, gate|up of `type` and down of `down_type`:
 * GK_MOE_MMA_TILE (sort into tiles of 64, both products gk_moe_mma) or
 * GK_MOE_TILE (tiles of 8, gk_moe_gemv: decode steps, and a type the
 * device keeps no experts in). Every expert type takes the tensor cores:
 * the block types, MXFP4 (gpt-oss's) and f16. In ops/gpu_moe_ref.c. */
int64_t gk_moe_choose(int type, int down_type, int64_t n_pairs, int64_t n_expert);

struct gk_moe_route_params {
    const float *x;       /* f32 [n][ld_x] residual rows */
    int64_t ld_x;
    const float *norm_w;  /* f32 [n_embd] the FFN norm (gemma4: ffn_gate_inp.scale) */
    float eps;
    float in_scale;       /* gemma4: the normed row times in_scale (1 / sqrt(n_embd)) before
                             norm_w, as llama.cpp's gemma4.cpp; 0: norm_w alone */
    const float *router;  /* f32 [n_expert][n_embd] */
    const float *bias;    /* f32 [n_expert] router bias (gpt-oss), or NULL */
    int64_t n, n_embd, n_expert, k;
    int norm_topk;        /* 1: the k weights renormalized to sum 1 (of all: 0) */
    int32_t *sel;         /* out [n][k]: the k largest logits' experts, ascending (ties:
                             the lower index wins) */
    float *wts;           /* out [n][k]: their softmax weights */
    const float *shexp_gate; /* f32 [n_embd] qwen35moe's shared expert gate, or NULL */
    float *shexp_w;       /* with it, out [n]: sigmoid(shexp_gate . the normed row) */
};

/* Routing of n rows (struct gk_moe_route_params). One block a row; with
 * shexp_gate, also each row's shared expert weight from the same f32 norm. */
int IG_DEV(gk_moe_route)(const struct gk_moe_route_params *p, void *stream);
void gk_moe_route_ref(const struct gk_moe_route_params *p);

struct gk_moe_sort_params {
    const int32_t *sel;   /* [n_pairs] each pair's expert (pair = row k + slot) */
    int64_t n_pairs;
    int64_t expert0, n_expert; /* the experts grouped: [expert0, expert0 + n_expert) of sel's
                             (a tensor-parallel rank's; 0 and all in one process), the
                             others' pairs left out; tiles name them from 0 (expert0's) */
    int64_t tile;         /* pairs a tile at most: GK_MOE_TILE (also 0) or GK_MOE_MMA_TILE */
    int32_t *order;       /* out [n_pairs]: pair ids, by expert, ascending within one */
    int32_t *tiles;       /* out [gk_moe_max_tiles_of(.., tile)][3]: (expert - expert0, first
                             in order, count) */
    int32_t *n_tiles;     /* out [1] */
};

/* Groups the pairs by expert (one block). */
int IG_DEV(gk_moe_sort)(const struct gk_moe_sort_params *p, void *stream);
void gk_moe_sort_ref(const struct gk_moe_sort_params *p);

struct gk_moe_gemv_params {
    struct gk_qmat w;     /* [n_expert * rows][cols]: the gate (glu) or down experts */
    struct gk_qmat w2;    /* glu: the up experts, same shape and type */
    int64_t rows;         /* rows of one expert */
    const float *bias, *bias2; /* f32 [n_expert][rows] w's and w2's (gpt-oss), or NULL */
    const uint16_t *x;    /* f16: pair p reads row p / x_div (ld_x) */
    int64_t ld_x, x_div;
    const int32_t *order, *tiles, *n_tiles; /* gk_moe_sort's: tiles of GK_MOE_TILE
                             (gk_moe_gemv) or GK_MOE_MMA_TILE (gk_moe_mma) */
    int64_t max_tiles;    /* the grid's tiles (gk_moe_max_tiles_of the tile) */
    int glu;              /* GK_GLU_SILU, GK_GLU_GELU (gemma4's GeGLU) or GK_MOE_GLU_OAI:
                             h[p][i] = f16(act(w_i x, w2_i x)); 0: y[p][i] = w_i x */
    const float *scale;   /* no glu: f32 [n_expert], y[p][i] = scale[expert] (w_i x) (gemma4's
                             per-expert down scale), or NULL */
    uint16_t *h;          /* glu: out [pairs][ld_h] */
    int64_t ld_h;
    float *y;             /* no glu: out [pairs][ld_y] */
    int64_t ld_y;
};

/* gpt-oss's clamped SwiGLU (GptOssExperts: alpha 1.702, limit 7):
 * g = min(g, 7), u = clamp(u, -7, 7), out = (u + 1) g sigmoid(1.702 g).
 * A value beside enum gk_glu's. */
#define GK_MOE_GLU_OAI 16

/* The expert-indexed product over every tile (struct gk_moe_gemv_params). */
int IG_DEV(gk_moe_gemv)(const struct gk_moe_gemv_params *p, void *stream);
void gk_moe_gemv_ref(const struct gk_moe_gemv_params *p);

/* The same product on the tensor cores (mma.sync m16n8k16, f16 in, f32
 * accumulate) over tiles of up to GK_MOE_MMA_TILE pairs: each weight block
 * dequantized once per tile in registers and stored to shared memory as
 * f16 (as gk_qmma's; f16 experts copied as they are), x gathered by the
 * tile's pairs. Every expert type: gk_qmm_native's, MXFP4 and f16. Its twin
 * is gk_moe_gemv_ref: it differs from the twin by the weights' f16 rounding
 * (at most 2^-11 of each |w x| term, or 2^-25 |x| where a weight falls
 * below f16's normals) and f32 sums: |y - y_ref| <= 2^-10 sum_c |w_c x_c| +
 * 2^-24 sum_c |x_c| (tests/emu/test_moe_emu.c checks that bound). MXFP4's
 * values v 2^(e - 128) (v the doubled E2M1 level, at most 2 significant
 * bits) are exact in f16 for E8M0 bytes e in [104, 140]; below, they round
 * to f16's subnormals (the 2^-24 term); from 141 on, values of 2^16 and
 * more overflow to inf (weights of 2^16: no trained model's come near;
 * backend_create refuses such a file on CUDA, model_check_mxfp4). */
int IG_DEV(gk_moe_mma)(const struct gk_moe_gemv_params *p, void *stream);

/* Which of a row's k slots gk_moe_combine adds: those whose expert sel[t k + j]
 * lies in [expert0, expert0 + n_expert) (a tensor-parallel rank's, whose y alone
 * the products wrote: gk_moe_sort's range); sel NULL: every slot. */
struct gk_moe_part {
    const int32_t *sel;
    int64_t expert0, n_expert;
};

/* x[t][d] += sum_j wts[t][j] y[t k + j][d] (j ascending, the slots of part) for t < n,
 * d < dim. */
int IG_DEV(gk_moe_combine)(float *x, int64_t ld_x, const float *y, int64_t ld_y,
                           const float *wts, struct gk_moe_part part, int64_t n, int64_t k,
                           int64_t dim, void *stream);
void gk_moe_combine_ref(float *x, int64_t ld_x, const float *y, int64_t ld_y, const float *wts,
                        struct gk_moe_part part, int64_t n, int64_t k, int64_t dim);

#ifdef __cplusplus
}
#endif

#endif
