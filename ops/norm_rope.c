/* ops/norm_rope.c: the element-wise primitives of a Llama block, in the
 * order a token meets them: embedding lookup, RMSNorm, bias, RoPE, SwiGLU,
 * residual add. All run on the calling thread (they are a few percent of a
 * forward pass); the matmuls are in ops/matmul.c.
 * Covered by tests/cpu/ (the forward against the numpy reference). */
#include "ops/matmul_kernels.h"
#include "ops/ops.h"

#include "core/status.h"

#include <math.h>

int ops_embed(const struct model *m, const int32_t *tokens, int64_t n_tokens, float *x)
{
    const struct model_weight *e = &m->tok_embd;
    const struct mm_format *f = ops_mm_format_of(e->type);
    IG_ASSERT(f != NULL);
    for (int64_t t = 0; t < n_tokens; t++) {
        if (tokens[t] < 0 || tokens[t] >= e->rows)
            return ig_error(IG_E_INPUT, "token id %ld at index %lld is outside the vocabulary [0, %lld)",
                            (long)tokens[t], (long long)t, (long long)e->rows);
    }
    for (int64_t t = 0; t < n_tokens; t++) {
        const uint8_t *row = (const uint8_t *)e->data + (size_t)tokens[t] * e->row_bytes;
        f->decode_row(e->type, row, x + t * e->cols, e->cols);
    }
    return IG_OK;
}

void ops_rmsnorm(const float *x, const struct model_weight *w, int64_t n_tokens, int64_t n,
                 double eps, float *y)
{
    IG_ASSERT(w->type == QUANT_F32 && w->rows * w->cols == n);
    const float *g = w->data;
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *xt = x + t * n;
        float *yt = y + t * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)xt[i] * xt[i];
        float r = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t i = 0; i < n; i++)
            yt[i] = xt[i] * r * g[i];
    }
}

void ops_add_bias(float *x, const struct model_weight *bias, int64_t n_tokens, int64_t n)
{
    IG_ASSERT(bias->type == QUANT_F32 && bias->rows * bias->cols == n);
    const float *b = bias->data;
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < n; i++)
            x[t * n + i] += b[i];
}

void ops_rope_prepare(struct ops_ctx *ctx, const int64_t *pos, int64_t n_tokens)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t half = hp->n_rot / 2;
    IG_ASSERT(n_tokens <= ops_ctx_max_batch(ctx));
    for (int64_t t = 0; t < n_tokens; t++) {
        for (int64_t i = 0; i < half; i++) {
            /* Angles in double: at pos 8000 an f32 angle would be off by ~1e-3. */
            double theta = (double)pos[t] *
                           pow(hp->rope_base, -2.0 * (double)i / (double)hp->n_rot);
            b->rope_cos[t * half + i] = (float)cos(theta);
            b->rope_sin[t * half + i] = (float)sin(theta);
        }
    }
}

void ops_rope_apply(struct ops_ctx *ctx, float *x, int64_t n_tokens, int64_t n_heads)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    const struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t half = hp->n_rot / 2, hd = hp->head_dim;
    /* Distance between the two dims of a pair, and between pairs. */
    int64_t pair_gap = hp->rope_style == ROPE_ADJACENT ? 1 : half;
    int64_t pair_step = hp->rope_style == ROPE_ADJACENT ? 2 : 1;
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *cs = b->rope_cos + t * half, *sn = b->rope_sin + t * half;
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + (t * n_heads + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                float *a = v + i * pair_step, *c = a + pair_gap;
                float x0 = *a, x1 = *c;
                *a = x0 * cs[i] - x1 * sn[i];
                *c = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

void ops_swiglu(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void ops_add(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}
