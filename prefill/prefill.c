/* prefill/prefill.c: the batched forward over a block of prompt tokens.
 *
 * Every weight is applied to the whole token block at once (the block is
 * ops/layer.c; ops_matmul reads each stored row once per block), attention
 * is the tiled kernel of prefill/attn_tiled.c over the cache, and only the
 * last position goes through the output head. Chunking a long prompt into blocks of max_batch
 * is the caller's loop (pos0 carries on where the cache ends).
 * Covered by tests/cpu/ (numpy reference; prefill vs decode). */
#include "prefill/prefill.h"

#include "core/status.h"
#include "ops/layer.h"
#include "prefill/attn_tiled.h"

_Static_assert(KV_BLOCK % ATTN_TILE_K == 0, "a key tile never straddles a cache block");

#include <math.h>

/* Prefill's attention step (ops_attention_fn): the tiled kernel over the
 * cache, all n queries at once. */
static void prefill_attention(struct ops_ctx *ctx, struct kv_cache *kv, int64_t il, int64_t n,
                              int64_t pos0)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t q_dim = hp->n_head * hp->head_dim;
    struct attn_params ap = {
        .q = b->q,
        .q_tok_stride = q_dim,
        .k_blocks = kv_cache_k_table(kv, il),
        .v_blocks = kv_cache_v_table(kv, il),
        .block_size = KV_BLOCK,
        .kv_dtype = kv->dtype,
        .kv_head_stride = KV_BLOCK * kv->head_dim,
        .out = b->att,
        .out_tok_stride = q_dim,
        .n_tokens = n,
        .pos0 = pos0,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .scale = (float)hp->attn_scale,
        .window = ops_ctx_model(ctx)->layers[il].window,
        .softcap = (float)hp->attn_softcap,
    };
    attn_tiled_run(&ap, ops_ctx_pool(ctx), ops_ctx_scratch(ctx, 0), ops_ctx_scratch_floats(ctx));
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
    int st = kv_cache_reserve(kv, pos0 + n);
    if (st != IG_OK)
        return st;
    if ((st = ops_embed(m, tokens, n, b->x)) != IG_OK) /* [n, n_embd] */
        return st;

    ops_rope_prepare(ctx, pos0, n);
    for (int64_t il = 0; il < hp->n_layer; il++)
        ops_layer_forward(ctx, kv, il, n, pos0, prefill_attention);
    kv->n_pos = pos0 + n;

    ops_output_head(ctx, b->x + (n - 1) * hp->n_embd, logits); /* the last position only */
    return IG_OK;
}
