/* backend/gpu_gemma4.c: what Gemma 4 adds to the CUDA backend's attention
 * block (gpu_forward.c calls in at one line each): the RMSNorm of each V
 * head without a weight (after the K norm, before the pool write), and a
 * layer's output scale (layer_output_scale, after the FFN). The CPU rules
 * are backend/cpu_attention.c's qk_rows and cpu_ple.c's cpu_out_scale.
 * V = K layers take K's rows again as V's in their Q|K|V matrix
 * (gpu_plan_group). Still refused (backend_gpu_missing): per-layer
 * embeddings, layers that read another's K/V.
 *
 * Compiled twice like gpu.c (backend/gpu.h). Covered by
 * tests/emu/test_backend_arch_emu.c (and its mutants, tests/emu/mutate.cmake). */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_ops.h"

#include <string.h>

int IG_DEV(gpu_gemma4_v_norm)(struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct model_layer *ML = &g->m->layers[l];
    if (!g->m->hp.has_v_norm)
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
