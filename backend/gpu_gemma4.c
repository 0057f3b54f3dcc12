/* backend/gpu_gemma4.c: what Gemma 4 adds to the CUDA backend's attention
 * block (gpu_forward.c calls in at one line each): the RMSNorm of each V
 * head without a weight (after the K norm, before the pool write), and a
 * layer's output scale (layer_output_scale, after the FFN). The CPU rules
 * are backend/cpu_attention.c's qk_rows and cpu_ple.c's cpu_out_scale.
 * V = K layers take K's rows again as V's in their Q|K|V matrix
 * (gpu_plan_group). A layer reading another's K/V (kv_shared) has no
 * blocks (gpu.c points its pool at its source's), writes no K/V and, in a
 * prefill step, attends over the rows its source's RoPE left in kv_keep
 * (which the flash kernel writes again into the same blocks: the same
 * values); in decode over the pool, its source having written the step's
 * row. Still refused (backend_gpu_missing): per-layer embeddings.
 *
 * Compiled twice like gpu.c (backend/gpu.h). Covered by
 * tests/emu/test_backend_arch_emu.c (and its mutants, tests/emu/mutate.cmake). */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_ops.h"

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

int IG_DEV(gpu_gemma4_out_scale)(struct gpu_backend *g, int64_t l, float *x, int64_t rows)
{
    const struct model_weight *w = &g->m->layers[l].w[LAYER_OUT_SCALE];
    if (!g->m->hp.has_out_scale || rows == 0)
        return IG_OK;
    float c; /* the host's f32 copy (a GGUF's [1] F32, a folder's widened) */
    memcpy(&c, w->data, sizeof c);
    return IG_DEV(gk_scale_f32)(x, rows * g->m->hp.n_embd, c, g->stream);
}
