/* backend/gpu_gemma4.c: what Gemma 4 adds to the CUDA backend's layers
 * (gpu_forward.c calls in at one line each): the RMSNorm of each V head
 * without a weight (after the K norm, before the pool write), the per-layer
 * embeddings, and a layer's output scale (layer_output_scale, after the FFN
 * and the per-layer input). The CPU rules
 * are backend/cpu_attention.c's qk_rows and cpu_ple.c's cpu_out_scale.
 * V = K layers take K's rows again as V's in their Q|K|V matrix
 * (gpu_plan_group). A layer reading another's K/V (kv_shared) has no
 * blocks (gpu.c points its pool at its source's), writes no K/V and, in a
 * prefill step, attends over the rows its source's RoPE left in kv_keep
 * (which the flash kernel writes again into the same blocks: the same
 * values); in decode over the pool, its source having written the step's
 * row. A quantized pool (q8_0 / fp8): the source's gk_kvq_write takes its
 * rows from kv_keep, and the sharing layer reads the source's blocks in
 * every step (its queries rotated by the source's K rotation). Per-layer embeddings (cpu_ple.c's rule): once a step, each row's
 * token row of the table (kept in its type, gathered as token_embd is)
 * beside the projection of its embedding, normed per layer, into each
 * layer's gate | input rows (ple_gu); after a layer's FFN, the gate of the
 * residual, GeGLU, the projection back, its norm added.
 *
 * Compiled twice like gpu.c (backend/gpu.h). Covered by
 * tests/emu/test_backend_arch_emu.c (and its mutants, tests/emu/mutate.cmake). */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_ops.h"
#include "ops/gpu_qmm.h"

#include <math.h>
#include <string.h>

/* Whether some layer reads layer l's K/V. */
static bool is_source(const struct model *m, int64_t l)
{
    for (int64_t i = l + 1; i < m->hp.n_layer; i++)
        if (m->layers[i].kv_shared && m->layers[i].kv_source == l)
            return true;
    return false;
}

int IG_DEV(gpu_gemma4_alloc)(struct gpu_backend *g)
{
    const struct model *m = g->m;
    size_t bytes = (size_t)(g->max_batch * g->kv_dim) * 2;
    int st = IG_OK;
    if (m->hp.has_ple) { /* the step's per-layer inputs */
        size_t all = (size_t)(g->max_batch * m->hp.n_layer * m->hp.n_embd_per_layer) * 4;
        if ((st = IG_DEV(gpu_alloc)(g, all, &g->ple_tok, NULL)) ||
            (st = IG_DEV(gpu_alloc)(g, all, &g->ple_proj, NULL)) ||
            (st = IG_DEV(gpu_alloc)(g, 2 * all, &g->ple_gu, NULL)))
            return st;
    }
    for (int64_t l = 0; l < m->hp.n_layer && st == IG_OK; l++) {
        if (!is_source(m, l))
            continue;
        uint16_t **keep = g->kv_keep[m->layers[l].window > 0];
        IG_ASSERT(!keep[0]); /* one source of each kind (models/model.c's rule) */
        if ((st = IG_DEV(gpu_alloc)(g, bytes, &keep[0], NULL)) == IG_OK)
            st = IG_DEV(gpu_alloc)(g, bytes, &keep[1], NULL);
    }
    return st;
}

uint16_t *IG_DEV(gpu_gemma4_kv_rows)(const struct gpu_backend *g, int64_t l, int v)
{
    const struct model_layer *ML = &g->m->layers[l];
    int64_t src = ML->kv_shared ? ML->kv_source : l;
    if (ML->kv_shared || is_source(g->m, l))
        return g->kv_keep[g->m->layers[src].window > 0][v];
    return v ? g->v16 : g->k16;
}

int IG_DEV(gpu_gemma4_v_norm)(struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct model_layer *ML = &g->m->layers[l];
    if (!g->m->hp.has_v_norm || ML->kv_shared)
        return IG_OK;
    int64_t hd = ML->head_dim, v0 = (ML->n_head + ML->n_head_kv) * hd;
    return IG_DEV(gk_head_rmsnorm)(g->qkv + v0, gpu_layer_qkv_rows(ML), n, ML->n_head_kv, hd,
                                   NULL, (float)g->m->hp.norm_eps, g->stream);
}

int IG_DEV(gpu_gemma4_ple_inputs)(struct gpu_backend *g, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    if (!hp->has_ple)
        return IG_OK;
    int64_t e = hp->n_embd, d = hp->n_embd_per_layer, all = hp->n_layer * d;
    const struct gk_qmat *E = &g->mat[MODEL_PLE_TOK_EMBD].part[0];
    /* a tensor-parallel rank's table is its vocabulary rows (vocab0 on, as
     * token_embd's): zeros for the other ranks' tokens, the rows summed */
    int st = E->type == QUANT_F16
                 ? IG_DEV(gk_embed)((const uint16_t *)E->q, g->tokens, n, E->cols, g->vocab0,
                                    E->rows, g->ple_tok, g->stream)
                 : IG_DEV(gk_qembed)(E, g->tokens, n, g->vocab0, g->ple_tok, g->stream);
    if (st == IG_OK && g->tp)
        st = IG_DEV(gpu_tp_ple_rows)(g, g->ple_tok, n);
    g->xn_of = NULL; /* xn becomes the scaled embeddings in f16 */
    g->xq_ready = false;
    if (st == IG_OK)
        st = IG_DEV(gk_to_f16)(g->x, n * e, g->xn, g->stream);
    if (st == IG_OK)
        st = IG_DEV(gpu_matmul)(g, &g->mat[MODEL_PLE_PROJ], g->xn, e, n, g->ple_proj, all, 0.0f);
    if (st == IG_OK)
        st = IG_DEV(gk_scale_f32)(g->ple_proj, n * all, (float)(1.0 / sqrt((double)e)),
                                  g->stream);
    if (st == IG_OK) /* each layer's d values normed */
        st = IG_DEV(gk_head_rmsnorm)(g->ple_proj, all, n, hp->n_layer, d,
                                     g->vec[MODEL_PLE_PROJ_NORM], (float)hp->norm_eps,
                                     g->stream);
    if (st == IG_OK)
        st = IG_DEV(gk_ple_combine)(g->ple_proj, g->ple_tok, n, hp->n_layer, d, g->max_batch,
                                    (float)sqrt((double)d), (float)(1.0 / sqrt(2.0)),
                                    g->ple_gu, g->stream);
    return st;
}

int IG_DEV(gpu_gemma4_ple_layer)(struct gpu_backend *g, int64_t l, int64_t row0, int64_t rows)
{
    const struct model_hparams *hp = &g->m->hp;
    if (!hp->has_ple || rows == 0)
        return IG_OK;
    const struct gpu_layer *L = &g->layers[l];
    int64_t e = hp->n_embd, d = hp->n_embd_per_layer;
    float *x = g->x + row0 * e, *gu = g->ple_gu + (l * g->max_batch + row0) * 2 * d;
    IG_ASSERT(d <= g->n_ff); /* h16 holds [rows][d] */
    g->xn_of = NULL; /* xn becomes x in f16: the gate reads the residual itself */
    g->xq_ready = false;
    int st = IG_DEV(gk_to_f16)(x, rows * e, g->xn, g->stream);
    if (st == IG_OK) /* gate | input, then gelu(gate) * input */
        st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_PLE_GATE], g->xn, e, rows, gu, 2 * d, 0.0f);
    if (st == IG_OK)
        st = IG_DEV(gk_geglu)(gu, rows, d, g->h16, g->stream);
    if (st == IG_OK)
        st = IG_DEV(gpu_matmul)(g, &L->mat[LAYER_PLE_PROJ], g->h16, d, rows, g->proj, e, 0.0f);
    return st != IG_OK ? st
                       : IG_DEV(gk_rmsnorm_add)(x, e, g->proj, e, L->vec[LAYER_PLE_POST_NORM],
                                                rows, e, (float)hp->norm_eps, g->stream);
}

int IG_DEV(gpu_gemma4_out_scale)(struct gpu_backend *g, int64_t l, float *x, int64_t rows)
{
    const struct model_weight *w = &g->m->layers[l].w[LAYER_OUT_SCALE];
    if (!g->m->hp.has_out_scale || rows == 0)
        return IG_OK;
    float c; /* the host's f32 copy (a GGUF's [1] F32, a folder's widened) */
    memcpy(&c, w->data, sizeof c);
    return IG_DEV(gk_scale_f32)(x, rows * g->m->hp.n_embd, c, g->stream);
}
