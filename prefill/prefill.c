/* prefill/prefill.c: the batched forward over a block of prompt tokens.
 *
 * Every weight is applied to the whole token block at once (ops_matmul reads
 * each stored row once per block), attention is the tiled kernel of
 * prefill/attn_tiled.c over the cache, and only the last position goes
 * through the output head. Chunking a long prompt into blocks of max_batch
 * is the caller's loop (pos0 carries on where the cache ends).
 * Covered by tests/cpu/ (numpy reference; prefill vs decode). */
#include "prefill/prefill.h"

#include "core/status.h"
#include "prefill/attn_tiled.h"

#include <math.h>

/* One transformer block over n tokens; b->x holds the residual stream. */
static void layer_forward(struct ops_ctx *ctx, struct kv_cache *kv, int64_t il, int64_t n,
                          int64_t pos0)
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
    ops_rope_apply(ctx, b->q, n, hp->n_head);
    ops_rope_apply(ctx, b->k, n, hp->n_head_kv);
    kv_cache_write(kv, il, pos0, n, b->k, b->v);

    int64_t off = kv_cache_head_offset(kv, il, 0);
    size_t eb = kv_dtype_bytes(kv->dtype);
    struct attn_params ap = {
        .q = b->q,
        .q_tok_stride = q_dim,
        .k = (const char *)kv->k + (size_t)off * eb,
        .v = (const char *)kv->v + (size_t)off * eb,
        .kv_dtype = kv->dtype,
        .kv_head_stride = kv->n_ctx * kv->head_dim,
        .out = b->att,
        .out_tok_stride = q_dim,
        .n_tokens = n,
        .pos0 = pos0,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .scale = (float)(1.0 / sqrt((double)hp->head_dim)),
    };
    attn_tiled_run(&ap, ops_ctx_pool(ctx), ops_ctx_scratch(ctx, 0), ops_ctx_scratch_floats(ctx));

    ops_matmul(ctx, &L->wo, b->att, n, b->proj); /* [n, n_embd] */
    ops_add(b->x, b->proj, n * hp->n_embd);

    /* feed-forward: x += W_down (silu(xn W_gate^T) * (xn W_up^T)) */
    ops_rmsnorm(b->x, &L->ffn_norm, n, hp->n_embd, hp->norm_eps, b->xn);
    const struct model_weight *ff_w[2] = {&L->w_gate, &L->w_up};
    float *ff_y[2] = {b->gate, b->up}; /* [n, n_ff] */
    ops_matmul_multi(ctx, 2, ff_w, b->xn, n, ff_y);
    ops_swiglu(b->gate, b->up, n * hp->n_ff);
    ops_matmul(ctx, &L->w_down, b->gate, n, b->proj); /* [n, n_embd] */
    ops_add(b->x, b->proj, n * hp->n_embd);
}

int prefill_forward(struct ops_ctx *ctx, struct kv_cache *kv, const int32_t *tokens,
                    int64_t n, int64_t pos0, float *logits)
{
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);

    if (n < 1 || n > ops_ctx_max_batch(ctx))
        return ig_error(IG_E_INTERNAL, "prefill of %lld tokens: the batch holds 1..%lld",
                        (long long)n, (long long)ops_ctx_max_batch(ctx));
    if (pos0 < 0 || pos0 > kv->n_pos)
        return ig_error(IG_E_INTERNAL, "prefill at position %lld but the cache holds %lld",
                        (long long)pos0, (long long)kv->n_pos);
    if (pos0 + n > kv->n_ctx)
        return ig_error(IG_E_INPUT, "%lld tokens at position %lld exceed the context of %lld",
                        (long long)n, (long long)pos0, (long long)kv->n_ctx);
    int st = ops_embed(m, tokens, n, b->x); /* [n, n_embd] */
    if (st != IG_OK)
        return st;

    ops_rope_prepare(ctx, pos0, n);
    for (int64_t il = 0; il < hp->n_layer; il++)
        layer_forward(ctx, kv, il, n, pos0);
    kv->n_pos = pos0 + n;

    /* logits of the last position only */
    const float *last = b->x + (n - 1) * hp->n_embd;
    ops_rmsnorm(last, &m->output_norm, 1, hp->n_embd, hp->norm_eps, b->xn);
    ops_matmul(ctx, &m->output, b->xn, 1, logits); /* [n_vocab] */
    return IG_OK;
}
