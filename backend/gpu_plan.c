/* backend/gpu_plan.c: the CUDA backend's weight plan on the host (see
 * backend/gpu_plan.h): device types, parts of the fused matrices, bytes.
 * Built into every ignite (no device code), so `ignite info` reports what
 * a model takes on a GPU on any machine.
 * Covered by tests/unit/test_gpu_plan.c, tests/emu/test_backend_qemu.c (the
 * bytes the emulated backend allocates equal the plan's) and
 * tests/models/test_info.py. */
#include "backend/gpu_plan.h"

#include "core/status.h"
#include "ops/gpu_qmm.h"

#include <string.h>

int backend_parse_gpu_weights(const char *spec, enum backend_gpu_weights *out)
{
    if (!strcmp(spec, "native")) {
        *out = BACKEND_GPU_NATIVE;
        return IG_OK;
    }
    if (!strcmp(spec, "f16")) {
        *out = BACKEND_GPU_F16;
        return IG_OK;
    }
    return ig_error(IG_E_USAGE, "--gpu-weights: expected native or f16, got '%s'", spec);
}

const char *backend_gpu_weights_name(enum backend_gpu_weights mode)
{
    return mode == BACKEND_GPU_F16 ? "f16" : "native";
}

int gpu_plan_type(const struct model_weight *w, enum backend_gpu_weights mode)
{
    if (mode == BACKEND_GPU_NATIVE && gk_qmm_native((int)w->type, w->rows, w->cols))
        return (int)w->type;
    return QUANT_F16;
}

int gpu_plan_parts(const struct model_weight *const *ws, int n, enum backend_gpu_weights mode,
                   struct gpu_plan_part parts[GPU_PLAN_MAX_PARTS])
{
    IG_ASSERT(n >= 1 && n <= GPU_PLAN_MAX_PARTS);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int type = gpu_plan_type(ws[i], mode);
        if (k > 0 && parts[k - 1].type == type) {
            parts[k - 1].rows += ws[i]->rows;
            parts[k - 1].count++;
        } else {
            parts[k++] = (struct gpu_plan_part){type, ws[i]->rows, i, 1};
        }
    }
    return k;
}

/* Calls f(ctx, parts, n_parts, cols) for every matrix the backend holds:
 * per layer Q|K|V, wo, gate|up, down, then the embedding (unless
 * products_only and it is not also the output head) and the output head. */
typedef void (*matrix_fn)(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols);

static void each_matrix(const struct model *m, enum backend_gpu_weights mode, bool products_only,
                        matrix_fn f, void *ctx)
{
    struct gpu_plan_part parts[GPU_PLAN_MAX_PARTS];
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *qkv[] = {&L->w[LAYER_WQ], &L->w[LAYER_WK], &L->w[LAYER_WV]};
        const struct model_weight *gu[] = {&L->w[LAYER_FFN_GATE], &L->w[LAYER_FFN_UP]};
        const struct model_weight *wo[] = {&L->w[LAYER_WO]}, *down[] = {&L->w[LAYER_FFN_DOWN]};
        f(ctx, parts, gpu_plan_parts(qkv, 3, mode, parts), L->w[LAYER_WQ].cols);
        f(ctx, parts, gpu_plan_parts(wo, 1, mode, parts), L->w[LAYER_WO].cols);
        f(ctx, parts, gpu_plan_parts(gu, 2, mode, parts), L->w[LAYER_FFN_GATE].cols);
        f(ctx, parts, gpu_plan_parts(down, 1, mode, parts), L->w[LAYER_FFN_DOWN].cols);
    }
    const struct model_weight *emb[] = {&m->w[MODEL_TOK_EMBD]}, *out[] = {&m->w[MODEL_OUTPUT]};
    if (!products_only || m->hp.tied_embeddings)
        f(ctx, parts, gpu_plan_parts(emb, 1, mode, parts), m->w[MODEL_TOK_EMBD].cols);
    if (!m->hp.tied_embeddings)
        f(ctx, parts, gpu_plan_parts(out, 1, mode, parts), m->w[MODEL_OUTPUT].cols);
}

static void add_bytes(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols)
{
    for (int i = 0; i < n; i++)
        *(size_t *)ctx += gk_qmat_bytes(parts[i].type, parts[i].rows, cols);
}

/* The weights' bytes, with (all) or without an untied embedding table. */
static size_t weight_bytes(const struct model *m, enum backend_gpu_weights mode, bool all)
{
    const struct model_hparams *hp = &m->hp;
    size_t bytes = 0;
    each_matrix(m, mode, !all, add_bytes, &bytes);
    int64_t qkv_rows = (hp->n_head + 2 * hp->n_head_kv) * hp->head_dim;
    bytes += (size_t)hp->n_layer * ((size_t)(2 * hp->n_embd) * 4 +
                                    (hp->has_qkv_bias ? (size_t)qkv_rows * 4 : 0) +
                                    (hp->has_qk_norm ? (size_t)(2 * hp->head_dim) * 4 : 0) +
                                    (hp->has_post_norms ? (size_t)(2 * hp->n_embd) * 4 : 0));
    return bytes + (size_t)hp->n_embd * 4; /* output norm */
}

size_t backend_gpu_weight_bytes(const struct model *m, enum backend_gpu_weights mode)
{
    return weight_bytes(m, mode, true);
}

size_t backend_gpu_step_bytes(const struct model *m, enum backend_gpu_weights mode)
{
    return weight_bytes(m, mode, false);
}

struct scratch_ctx {
    int64_t max_n;
    size_t bytes;
};

static void max_scratch(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols)
{
    struct scratch_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct gk_qmm_plan p;
        /* The path only moves towards DEQUANT as n grows: the plan for the
         * largest n is the one that needs the most. */
        if (parts[i].type != QUANT_F16 &&
            gk_qmm_choose(parts[i].type, parts[i].rows, cols, c->max_n, &p) == IG_OK &&
            p.scratch_bytes > c->bytes)
            c->bytes = p.scratch_bytes;
    }
}

size_t gpu_plan_scratch_bytes(const struct model *m, enum backend_gpu_weights mode,
                              int64_t max_n)
{
    struct scratch_ctx c = {max_n, 0};
    each_matrix(m, mode, true, max_scratch, &c);
    return c.bytes;
}
