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

#include <stdbool.h>
#include <string.h>

/* Moves rows keep[i] of the [n, w] array a to row i (keep ascending). */
static void compact_rows(float *a, int64_t w, const int64_t *keep, int64_t n_keep)
{
    for (int64_t i = 0; i < n_keep; i++)
        if (keep[i] != i)
            memmove(a + i * w, a + keep[i] * w, (size_t)w * sizeof *a);
}

/* The FFN's gate over rows [r0, r1) of a step: element-wise, so any split
 * over the pool gives the same bits; on one thread it was 3 % of a prefill
 * that the other thread waited out. */
struct gate_job {
    float *gate;
    const float *up;
    int64_t n_ff;
    bool gelu;
};

static void gate_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    (void)thread;
    const struct gate_job *job = arg;
    int64_t off = r0 * job->n_ff, len = (r1 - r0) * job->n_ff;
    if (job->gelu)
        ops_geglu(job->gate + off, job->up + off, len);
    else
        ops_swiglu(job->gate + off, job->up + off, len);
}

void ops_layer_forward(struct ops_ctx *ctx, int64_t il, int64_t n,
                       const struct ops_attention *attn, const int64_t *keep, int64_t n_keep)
{
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[il];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;

    /* attention: xn = norm(x); q, k, v = xn W^T; rotate q, k; cache k, v */
    ops_rmsnorm(b->x, &L->attn_norm, n, hp->n_embd, hp->norm_eps, b->xn);
    const struct model_weight *qkv_w[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_y[3] = {b->q, b->k, b->v}; /* [n, n_head (or n_head_kv) * head_dim] */
    ops_matmul_multi(ctx, 3, qkv_w, b->xn, n, qkv_y);
    if (hp->has_qkv_bias) {
        ops_add_bias(b->q, &L->bq, n, q_dim);
        ops_add_bias(b->k, &L->bk, n, kv_dim);
        ops_add_bias(b->v, &L->bv, n, kv_dim);
    }
    if (hp->has_qk_norm) { /* RMSNorm of each head: n * heads rows of head_dim */
        ops_rmsnorm(b->q, &L->q_norm, n * hp->n_head, hp->head_dim, hp->norm_eps, b->q);
        ops_rmsnorm(b->k, &L->k_norm, n * hp->n_head_kv, hp->head_dim, hp->norm_eps, b->k);
    }
    ops_rope_apply(ctx, b->q, n, hp->n_head, L->rope);
    ops_rope_apply(ctx, b->k, n, hp->n_head_kv, L->rope);
    attn->run(attn->user, il, n);

    if (keep) { /* only these rows are read after this block */
        compact_rows(b->x, hp->n_embd, keep, n_keep);
        compact_rows(b->att, q_dim, keep, n_keep);
        n = n_keep;
    }
    ops_matmul(ctx, &L->wo, b->att, n, b->proj); /* [n, n_embd] */
    if (hp->has_post_norms)
        ops_rmsnorm(b->proj, &L->attn_post_norm, n, hp->n_embd, hp->norm_eps, b->proj);
    ops_add(b->x, b->proj, n * hp->n_embd);

    /* feed-forward: x += W_down (act(xn W_gate^T) * (xn W_up^T)) */
    ops_rmsnorm(b->x, &L->ffn_norm, n, hp->n_embd, hp->norm_eps, b->xn);
    const struct model_weight *ff_w[2] = {&L->w_gate, &L->w_up};
    float *ff_y[2] = {b->gate, b->up}; /* [n, n_ff] */
    ops_matmul_multi(ctx, 2, ff_w, b->xn, n, ff_y);
    struct gate_job gj = {b->gate, b->up, hp->n_ff, hp->ffn_act == MODEL_ACT_GELU_TANH};
    ops_pool_run(ops_ctx_pool(ctx), n, 8, gate_task, &gj);
    ops_matmul(ctx, &L->w_down, b->gate, n, b->proj); /* [n, n_embd] */
    if (hp->has_post_norms)
        ops_rmsnorm(b->proj, &L->ffn_post_norm, n, hp->n_embd, hp->norm_eps, b->proj);
    ops_add(b->x, b->proj, n * hp->n_embd);
}

void ops_output_head(struct ops_ctx *ctx, const float *x, int64_t n, float *logits)
{
    const struct model *m = ops_ctx_model(ctx);
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    ops_rmsnorm(x, &m->output_norm, n, m->hp.n_embd, m->hp.norm_eps, b->xn);
    ops_matmul(ctx, &m->output, b->xn, n, logits); /* [n, n_vocab] */
    if (m->hp.final_softcap > 0)
        ops_softcap(logits, n * m->hp.n_vocab, m->hp.final_softcap);
}
