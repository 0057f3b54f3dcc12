/* backend/cpu_layer.h: the CPU backend's forward, layer by layer (private to
 * backend/): the one layer loop (cpu_forward.c), the mixers and FFNs it
 * calls by the layer's kind (struct model_layer's mixer and ffn), and the
 * element-wise row steps between their matmuls (cpu_rows.c).
 *
 * Every function works on all the rows of a step at once (prompt chunks and
 * decode rows of any number of sequences): each weight is read once per
 * step. The residual stream is ops_buffers.x [n, n_embd]; a mixer or an FFN
 * reads it and leaves its output in ops_buffers.proj [n, n_embd], which the
 * loop reduces (across tensor-parallel ranks: struct cpu_tp) and adds into x
 * through the layer's post norm. Covered by tests/cpu/ (numpy reference;
 * chunked vs one-row steps) and everything that runs `ignite` on the CPU. */
#ifndef IGNITE_BACKEND_CPU_LAYER_H
#define IGNITE_BACKEND_CPU_LAYER_H

#include "backend/backend.h"
#include "kvcache/kvcache.h"
#include "ops/ops.h"
#include "prefill/attn_tiled.h"

#include <stdbool.h>
#include <stdint.h>

/* A tensor-parallel rank's side of the forward (backend/tp.c): its model is
 * its part (models/tp.h), the reduces all-reduce, the head's logits are
 * gathered on rank 0. */
struct cpu_tp {
    int rank, n_ranks;
    int64_t n_vocab;   /* the whole model's */
    int64_t *v0, *n_v; /* [n_ranks] each rank's vocabulary rows */
    int64_t *at, *cnt; /* [n_ranks] scratch: the gather's offsets and counts */
    float *part;       /* [rows, n_v[rank]] this rank's logits */
    float *all;        /* rank 0: [rows, n_vocab] the ranks' parts in rank order */
    int64_t rows;      /* what part and all hold: grown to a step's rows wanting logits */
};

/* What a step's layer functions share: the run state, the cache and the
 * step in progress. */
struct cpu_step {
    struct ops_ctx *ops;
    struct kv_store *kv;
    bool window_rule;          /* the sliding-window layers' rows through the seqs' wtable */
    const struct backend_batch *batch; /* the step's rows and sequences */
    const struct backend_ckpt_plan *ckpt; /* the step's checkpoint holder (backend.h) */
    struct attn_seq *attn;             /* [n_slots] the attention's per-sequence scratch */
    int64_t *attn_items;               /* [n_slots + 1] */
    struct cpu_tp *tp;                 /* NULL in one process */

    /* per-layer embeddings (MODEL_FEAT_PLE; else NULL) */
    int64_t max_rows;
    float *ple;                        /* [n_layer, max_rows, n_embd_per_layer] the step's */
    float *ple_tmp;                    /* [max_rows, n_layer * n_embd_per_layer] the
                                          tokens' table rows, then the projection */
    float *moe_mlp;                    /* [max_rows, n_embd] MODEL_FEAT_MOE_SHEXP's gated
                                          shared expert's output; [2, max_rows, n_embd]
                                          MODEL_FEAT_MOE_MLP's dense MLP output and the
                                          experts' sum beside it (else NULL) */
};

/* ---- the loop (cpu_forward.c) --------------------------------------------- */

/* Every layer over the step's n rows (residuals in ops_buffers.x, from the
 * embeddings; ops_rope_prepare done for the rows' positions). Past the last
 * layer's mixer only rows want[0..n_want) (ascending) go on: they end at
 * the front of x. */
void cpu_forward_layers(struct cpu_step *s, int64_t n, const int64_t *want, int64_t n_want);

/* Final RMSNorm and output head (with the final soft-cap) of n residual
 * rows x [n, n_embd] into logits [n, n_vocab]. */
void cpu_output_head(struct ops_ctx *ctx, const float *x, int64_t n, float *logits);

/* cpu_output_head of a tensor-parallel rank: its vocabulary rows, gathered
 * into rank 0's logits [n, n_vocab] (logits unused on the other ranks). */
void cpu_output_head_tp(struct cpu_step *s, const float *x, int64_t n, float *logits);

/* ---- the kinds of layer ------------------------------------------------------ */

/* A mixer (enum layer_mixer): layer `layer` over the step's n rows; reads
 * x, leaves its output in proj. Where want is not NULL only rows
 * want[0..n_want) matter past the mixing (the last layer): they are moved
 * to the front of x and the output is theirs alone. Returns the rows of
 * its output (n, or n_want). */
typedef int64_t (*cpu_mixer_fn)(struct cpu_step *s, int64_t layer, int64_t n,
                                const int64_t *want, int64_t n_want);

/* An FFN (enum layer_ffn): layer `layer` over n rows; reads x, leaves its
 * output in proj. */
typedef void (*cpu_ffn_fn)(struct cpu_step *s, int64_t layer, int64_t n);

/* LAYER_MIXER_ATTENTION (cpu_attention.c): RMSNorm, Q/K/V, [biases, head
 * norms], RoPE of the layer's variant, K/V into each sequence's blocks,
 * tiled attention over them (the layer's window), output projection. */
int64_t cpu_attention(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want,
                      int64_t n_want);

/* Floats of per-thread scratch cpu_attention needs for every layer of m (the
 * tiled attention's, attn_tiled_scratch_floats, at each layer's shapes): it
 * borrows the run state's (ops_ctx_reserve_scratch). */
int64_t cpu_attention_scratch_floats(const struct model *m);

/* LAYER_MIXER_DELTANET (cpu_deltanet.c): RMSNorm, q|k|v, z, beta, alpha;
 * the causal convolution with the sequence's conv state; the delta rule
 * (chunked over a prompt chunk, the recurrent step for a decode row) on
 * the sequence's state; the gated norm; ssm_out. */
int64_t cpu_deltanet(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want,
                     int64_t n_want);

/* Floats of per-thread scratch cpu_deltanet needs for m's layers (0 without
 * DeltaNet layers): it borrows the run state's, as the attention does. */
int64_t cpu_deltanet_scratch_floats(const struct model *m);

/* LAYER_FFN_DENSE (cpu_ffn.c): RMSNorm, gate|up, SwiGLU or GeGLU, down. */
void cpu_ffn_dense(struct cpu_step *s, int64_t layer, int64_t n);

/* The same with the facts and weights of L (a copy of a layer's with the
 * width of gemma4's dense MLP beside its experts). */
void cpu_ffn_dense_of(struct cpu_step *s, const struct model_layer *L, int64_t n);

/* LAYER_FFN_MOE (cpu_moe.c): RMSNorm, the router (f32), softmax and top-k,
 * the used experts' gate|up, SwiGLU (GeGLU: the model's activation) and
 * down over the rows routed to each, summed by the routing weights; with
 * MODEL_FEAT_MOE_MLP (gemma4) a dense MLP beside them, the router fed by
 * its own scaled norm, each expert's output scale and the two outputs'
 * norms; with MODEL_FEAT_MOE_SHEXP (qwen35moe) a shared expert every row
 * runs, gated by its own sigmoid. */
void cpu_ffn_moe(struct cpu_step *s, int64_t layer, int64_t n);

/* Whether layer L's FFN sums its output over tensor-parallel ranks itself
 * (gemma4's MoE: before the norms of its two parts), so the loop does not. */
bool cpu_ffn_reduces(const struct model *m, const struct model_layer *L);

/* ---- Gemma 4's per-layer embeddings and output scale (cpu_ple.c) ----------- */

/* The step's per-layer inputs (s->ple) from the n rows' embeddings in x
 * and their tokens (a tensor-parallel rank: its table rows' share, summed
 * by an all-reduce every rank makes). */
void cpu_ple_inputs(struct cpu_step *s, int64_t n);

/* x += the layer's per-layer embedding block over n rows (after its FFN);
 * want: the last layer's kept rows (as cpu_attention moved x's), or NULL. */
void cpu_ple_layer(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want);

/* x *= the layer's output scale over n rows. */
void cpu_out_scale(struct cpu_step *s, int64_t layer, int64_t n);

/* ---- row steps (cpu_rows.c) ------------------------------------------------- */

struct cpu_rows;

/* The element-wise work of rows [r0, r1) of a step: norms, biases, RoPE,
 * gates. Row by row, so any split over the pool gives the same bits. */
typedef void (*cpu_rows_fn)(const struct cpu_rows *job, int64_t r0, int64_t r1);

struct cpu_rows {
    struct ops_ctx *ctx;
    const struct model_layer *L;
    cpu_rows_fn fn;
    int role; /* the step's weight (enum layer_role) where it takes one */
    bool q8;  /* quantize the step's output for the int8 matmul that reads it next */
};

/* xn = norm(x) with the norm weight job->role, quantized for the matmuls
 * that read it where they take int8 (a mixer's or an FFN's first step). */
void cpu_norm_rows(const struct cpu_rows *job, int64_t r0, int64_t r1);

/* fn over rows [0, n) as one job on the pool (a decode step's few rows
 * stay on the calling thread). */
void cpu_rows_run(struct ops_ctx *ctx, const struct model_layer *L, cpu_rows_fn fn, int role,
                  int64_t n, bool q8);

/* A row step that writes x [n, cols], then the matmuls of x by the nw
 * weights w into y: through int8 activations that the step quantized as it
 * wrote them (while the rows are still in cache), where the matmuls take
 * such. */
void cpu_rows_then_matmul(struct ops_ctx *ctx, const struct model_layer *L, cpu_rows_fn fn,
                          int role, int64_t n, int64_t cols, int nw,
                          const struct model_weight *const *w, const float *x, float *const *y);

#endif
