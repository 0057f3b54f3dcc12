/* ops/layer.c: one transformer block (RMSNorm, Q/K/V, the Q/K head norms,
 * RoPE with the layer's variant, the caller's attention, output projection,
 * the post-attention norm, SwiGLU or GeGLU FFN, the post-FFN norm,
 * residuals) and the output head (with final soft-capping), over every row
 * of a step at once: each weight is read once per step whatever mix of
 * sequences the rows belong to. Which of the optional steps run is the
 * model's (models/arch.c); what differs between layers (RoPE variant,
 * sliding window) is struct model_layer's, and the attention (window
 * included) is the caller's: backend/cpu.c through prefill/attn_tiled.c.
 * Covered by tests/cpu/ (numpy reference; chunked vs one-row steps). */
#include "ops/layer.h"

#include "core/status.h"
#include "ops/qmatmul.h"

#include <stdbool.h>
#include <string.h>

/* Moves rows keep[i] of the [n, w] array a to row i (keep ascending). */
static void compact_rows(float *a, int64_t w, const int64_t *keep, int64_t n_keep)
{
    for (int64_t i = 0; i < n_keep; i++)
        if (keep[i] != i)
            memmove(a + i * w, a + keep[i] * w, (size_t)w * sizeof *a);
}

/* The element-wise steps between a block's matmuls, each over a range of
 * the step's rows as one job on the pool: row by row, so any split gives
 * the same bits. On thread 0 alone they were 5 % of a two-thread prefill
 * that the other thread waited out (the gate alone 3 %), and more of one
 * on more threads. A decode step's few rows stay on thread 0
 * (ops_pool_run runs a job of one grain inline). */
enum rows_step {
    ROWS_ATTN_NORM,     /* xn = norm(x) */
    ROWS_QK,            /* biases, head norms, RoPE of q and k */
    ROWS_ATTN_RESIDUAL, /* x += post_norm(proj); xn = ffn_norm(x) */
    ROWS_GATE,          /* gate = act(gate) * up */
    ROWS_FFN_RESIDUAL,  /* x += post_norm(proj) */
};

#define ROWS_GRAIN 8

struct rows_job {
    struct ops_ctx *ctx;
    const struct model_layer *L;
    enum rows_step step;
    bool q8; /* quantize the step's output (xn, gate) for the int8 matmul next */
};

static void rows_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    (void)thread;
    const struct rows_job *job = arg;
    const struct model_hparams *hp = &ops_ctx_model(job->ctx)->hp;
    const struct model_layer *L = job->L;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t n = r1 - r0, e = hp->n_embd, hd = hp->head_dim;
    int64_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    float *x = b->x + r0 * e, *xn = b->xn + r0 * e, *proj = b->proj + r0 * e;
    switch (job->step) {
    case ROWS_ATTN_NORM:
        ops_rmsnorm(x, &L->w[LAYER_ATTN_NORM], n, e, hp->norm_eps, xn);
        if (job->q8)
            ops_qmatmul_quantize_rows(job->ctx, xn, e, r0, r1);
        break;
    case ROWS_QK: {
        float *q = b->q + r0 * q_dim, *k = b->k + r0 * kv_dim, *v = b->v + r0 * kv_dim;
        if (hp->has_qkv_bias) {
            ops_add_bias(q, &L->w[LAYER_BQ], n, q_dim);
            ops_add_bias(k, &L->w[LAYER_BK], n, kv_dim);
            ops_add_bias(v, &L->w[LAYER_BV], n, kv_dim);
        }
        if (hp->has_qk_norm) { /* RMSNorm of each head: rows of head_dim */
            ops_rmsnorm(q, &L->w[LAYER_Q_NORM], n * hp->n_head, hd, hp->norm_eps, q);
            ops_rmsnorm(k, &L->w[LAYER_K_NORM], n * hp->n_head_kv, hd, hp->norm_eps, k);
        }
        ops_rope_apply(job->ctx, b->q, r0, r1, hp->n_head, L->rope);
        ops_rope_apply(job->ctx, b->k, r0, r1, hp->n_head_kv, L->rope);
        break;
    }
    case ROWS_ATTN_RESIDUAL:
    case ROWS_FFN_RESIDUAL: {
        bool attn = job->step == ROWS_ATTN_RESIDUAL;
        if (hp->has_post_norms)
            ops_rmsnorm(proj, &L->w[attn ? LAYER_ATTN_POST_NORM : LAYER_FFN_POST_NORM], n, e,
                        hp->norm_eps, proj);
        ops_add(x, proj, n * e);
        if (attn)
            ops_rmsnorm(x, &L->w[LAYER_FFN_NORM], n, e, hp->norm_eps, xn);
        if (attn && job->q8)
            ops_qmatmul_quantize_rows(job->ctx, xn, e, r0, r1);
        break;
    }
    case ROWS_GATE: { /* a row at a time when quantized: still in L1 (6 KiB at n_ff 1536) */
        int64_t f = hp->n_ff, step = job->q8 ? 1 : n;
        bool exact = ops_ctx_exact(job->ctx);
        for (int64_t t = r0; t < r1; t += step) {
            float *g = b->gate + t * f;
            if (hp->ffn_act == MODEL_ACT_GELU_TANH)
                ops_geglu(g, b->up + t * f, step * f, exact);
            else
                ops_swiglu(g, b->up + t * f, step * f, exact);
            if (job->q8)
                ops_qmatmul_quantize_rows(job->ctx, g, f, t, t + 1);
        }
        break;
    }
    }
}

static void rows_run(struct ops_ctx *ctx, const struct model_layer *L, enum rows_step step,
                     int64_t n, bool q8)
{
    struct rows_job job = {ctx, L, step, q8};
    ops_pool_run(ops_ctx_pool(ctx), n, ROWS_GRAIN, rows_task, &job);
}

/* A rows step, then the matmuls of its output x: through int8 activations
 * that the step quantized as it wrote them, where the matmuls take such. */
static void rows_then_matmul(struct ops_ctx *ctx, const struct model_layer *L,
                             enum rows_step step, int64_t n, int nw,
                             const struct model_weight *const *w, const float *x,
                             float *const *y)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    IG_ASSERT(w[0]->cols == (step == ROWS_GATE ? hp->n_ff : hp->n_embd)); /* the step's width */
    bool q8 = ops_qmatmul_quantizes(ctx, nw, w, n);
    rows_run(ctx, L, step, n, q8);
    if (q8)
        ops_qmatmul_multi_q8(ctx, nw, w, x, n, y);
    else
        ops_matmul_multi(ctx, nw, w, x, n, y);
}

void ops_layer_forward(struct ops_ctx *ctx, int64_t il, int64_t n,
                       const struct ops_attention *attn, const int64_t *keep, int64_t n_keep)
{
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[il];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t q_dim = hp->n_head * hp->head_dim;

    /* attention: xn = norm(x); q, k, v = xn W^T; rotate q, k; cache k, v */
    const struct model_weight *qkv_w[3] = {&L->w[LAYER_WQ], &L->w[LAYER_WK], &L->w[LAYER_WV]};
    float *qkv_y[3] = {b->q, b->k, b->v}; /* [n, n_head (or n_head_kv) * head_dim] */
    rows_then_matmul(ctx, L, ROWS_ATTN_NORM, n, 3, qkv_w, b->xn, qkv_y);
    rows_run(ctx, L, ROWS_QK, n, false);
    attn->run(attn->user, il, n);

    if (keep) { /* only these rows are read after this block */
        compact_rows(b->x, hp->n_embd, keep, n_keep);
        compact_rows(b->att, q_dim, keep, n_keep);
        n = n_keep;
    }
    ops_matmul(ctx, &L->w[LAYER_WO], b->att, n, b->proj); /* [n, n_embd] */

    /* feed-forward: x += W_down (act(xn W_gate^T) * (xn W_up^T)) */
    const struct model_weight *ff_w[2] = {&L->w[LAYER_FFN_GATE], &L->w[LAYER_FFN_UP]};
    float *ff_y[2] = {b->gate, b->up}; /* [n, n_ff] */
    rows_then_matmul(ctx, L, ROWS_ATTN_RESIDUAL, n, 2, ff_w, b->xn, ff_y);
    const struct model_weight *down_w[1] = {&L->w[LAYER_FFN_DOWN]};
    float *down_y[1] = {b->proj}; /* [n, n_embd] */
    rows_then_matmul(ctx, L, ROWS_GATE, n, 1, down_w, b->gate, down_y);
    rows_run(ctx, L, ROWS_FFN_RESIDUAL, n, false);
}

void ops_output_head(struct ops_ctx *ctx, const float *x, int64_t n, float *logits)
{
    const struct model *m = ops_ctx_model(ctx);
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    ops_rmsnorm(x, &m->w[MODEL_OUTPUT_NORM], n, m->hp.n_embd, m->hp.norm_eps, b->xn);
    ops_matmul(ctx, &m->w[MODEL_OUTPUT], b->xn, n, logits); /* [n, n_vocab] */
    if (m->hp.final_softcap > 0)
        ops_softcap(logits, n * m->hp.n_vocab, m->hp.final_softcap);
}
