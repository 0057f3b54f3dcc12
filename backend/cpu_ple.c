/* backend/cpu_ple.c: Gemma 4's per-layer embeddings on the CPU backend
 * (MODEL_FEAT_PLE; llama.cpp's gemma4.cpp build_inp_per_layer,
 * project_per_layer_inputs and the per-layer step of its layer loop):
 *
 *   step:  ple[l][t] = (rmsnorm(P x_t / sqrt(n_embd))_l + E[tok_t]_l sqrt(d)) / sqrt(2)
 *   layer: x += post_norm(W_proj (gelu(W_gate x) * ple[l])), after the FFN
 *
 * (P per_layer_model_proj, E per_layer_token_embd, d n_embd_per_layer,
 * x_t the scaled token embedding, norm per layer's d values). E stays in
 * the mapped file in its stored type: a step dequantizes the row of each
 * of its tokens only. A tensor-parallel rank's E is its vocabulary rows
 * (models/tp.h): zeros for the others' tokens, summed by one all-reduce a
 * step. Then a layer's output scale (layer_output_scale).
 * Covered by tests/cpu/test_gemma4.py (fp64 numpy reference) and
 * tests/tp/test_tp_logits.py (ranks against one process). */
#include "backend/cpu_layer.h"

#include "core/coll.h"
#include "core/status.h"
#include "ops/qmatmul.h"

#include <math.h>
#include <string.h>

/* rows [n, n_layer * d] = the step's tokens' rows of E. A tensor-parallel
 * rank looks up the tokens of its rows, zeros for the others', and the
 * all-reduce sums the ranks' rows (e + 0 is e: one process's rows), so no
 * rank pages in the whole table. */
static void token_rows(struct cpu_step *s, int64_t n, float *rows)
{
    const struct model_weight *E = &ops_ctx_model(s->ops)->w[MODEL_PLE_TOK_EMBD];
    int64_t all = E->cols, v0 = s->tp ? s->tp->v0[s->tp->rank] : 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t r = s->batch->tokens[t] - v0; /* the id checked by ops_embed */
        if (r < 0 || r >= E->rows)            /* another rank's */
            memset(rows + t * all, 0, (size_t)all * sizeof *rows);
        else
            quant_dequantize_row(E->type, (const char *)E->data + (size_t)r * E->row_bytes,
                                 rows + t * all, all);
    }
    if (s->tp)
        ig_coll_allreduce_sum(rows, n * all);
}

void cpu_ple_inputs(struct cpu_step *s, int64_t n)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t d = hp->n_embd_per_layer, all = hp->n_layer * d;
    float proj_scale = (float)(1.0 / sqrt((double)hp->n_embd));
    float tok_scale = (float)sqrt((double)d), in_scale = (float)(1.0 / sqrt(2.0));
    token_rows(s, n, s->ple_tmp); /* [n, n_layer * d], then scaled into ple */
    for (int64_t t = 0; t < n; t++)
        for (int64_t l = 0; l < hp->n_layer; l++) {
            float *dst = s->ple + (l * s->max_rows + t) * d;
            const float *e = s->ple_tmp + t * all + l * d;
            for (int64_t i = 0; i < d; i++)
                dst[i] = e[i] * tok_scale;
        }
    ops_matmul(ctx, &m->w[MODEL_PLE_PROJ], b->x, n, s->ple_tmp); /* [n, n_layer * d] */
    for (int64_t t = 0; t < n; t++) {
        float *p = s->ple_tmp + t * all;
        for (int64_t i = 0; i < all; i++)
            p[i] *= proj_scale;
        ops_rmsnorm(p, &m->w[MODEL_PLE_PROJ_NORM], hp->n_layer, d, hp->norm_eps, p);
        for (int64_t l = 0; l < hp->n_layer; l++) {
            float *dst = s->ple + (l * s->max_rows + t) * d;
            for (int64_t i = 0; i < d; i++)
                dst[i] = (p[l * d + i] + dst[i]) * in_scale;
        }
    }
}

void cpu_ple_layer(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t d = hp->n_embd_per_layer, e = hp->n_embd;
    float *in = s->ple + layer * s->max_rows * d; /* [n, d] this layer's inputs */
    for (int64_t i = 0; want && i < n; i++) /* the last layer's rows, as x's were moved */
        if (want[i] != i)
            memmove(in + i * d, in + want[i] * d, (size_t)d * sizeof *in);
    float *g = s->ple_tmp; /* [n, d] */
    ops_matmul(ctx, &L->w[LAYER_PLE_GATE], b->x, n, g);
    ops_geglu(g, in, n * d, ops_ctx_exact(ctx)); /* gelu(gate) * input */
    ops_matmul(ctx, &L->w[LAYER_PLE_PROJ], g, n, b->proj); /* [n, n_embd] */
    ops_rmsnorm(b->proj, &L->w[LAYER_PLE_POST_NORM], n, e, hp->norm_eps, b->proj);
    ops_add(b->x, b->proj, n * e);
}

void cpu_out_scale(struct cpu_step *s, int64_t layer, int64_t n)
{
    const struct model *m = ops_ctx_model(s->ops);
    const struct model_weight *w = &m->layers[layer].w[LAYER_OUT_SCALE];
    float c;
    memcpy(&c, w->data, sizeof c);
    float *x = ops_ctx_buffers(s->ops)->x;
    for (int64_t i = 0; i < n * m->hp.n_embd; i++)
        x[i] *= c;
}
