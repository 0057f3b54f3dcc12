/* backend/gpu_plan.c: the CUDA backend's weight plan on the host (see
 * backend/gpu_plan.h): device types, parts of the fused matrices, bytes.
 * Built into every ignite (no device code), so `ignite info` reports what
 * a model takes on a GPU on any machine. Which weights there are, and which
 * fuse into one device matrix, is the table of tensors' (models/tensors.h).
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

const char *backend_gpu_missing(const struct model *m, int64_t *layer)
{
    const struct model_hparams *hp = &m->hp;
    *layer = -1;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        /* backend/gpu_moe.c runs the experts of the layer it holds (all, or
         * a tensor-parallel rank's part: the router over all), qwen35moe's
         * shared expert and Gemma 4's dense MLP beside GeGLU experts (its
         * own norms, the router's input scale, the per-expert scale); a
         * dense MLP beside other experts is no model's */
        /* the router's row and logits in 48 KiB of shared memory (gk_moe_route) */
        bool wide = L->ffn == LAYER_FFN_MOE && hp->n_embd + L->n_expert > 12 * 1024;
        bool beside_other = hp->has_moe_mlp && hp->ffn_act != MODEL_ACT_GELU_TANH;
        if (L->ffn != LAYER_FFN_DENSE &&
            (L->ffn != LAYER_FFN_MOE || beside_other || wide)) {
            *layer = l;
            return beside_other ? "a dense MLP beside experts other than GeGLU ones"
                   : wide         ? "a mixture of experts wider than 12288 (n_embd + experts)"
                                  : "a mixture-of-experts FFN";
        }
    }
    for (int64_t l = 0; l < hp->n_layer; l++) /* the attention kernels' */
        if (m->layers[l].mixer == LAYER_MIXER_ATTENTION && m->layers[l].head_dim != 64 &&
            m->layers[l].head_dim != 128 && m->layers[l].head_dim != 256 &&
            m->layers[l].head_dim != 512) {
            *layer = l;
            return "head dims other than 64, 128, 256 and 512";
        }
    /* The dense FFN's activations; gpt-oss's clamped SwiGLU runs in its
     * experts (backend/gpu_moe.c), never in a dense FFN */
    bool act_ok = hp->ffn_act == MODEL_ACT_SILU || hp->ffn_act == MODEL_ACT_GELU_TANH ||
                  hp->ffn_act == MODEL_ACT_SWIGLU_OAI;
    for (int64_t l = 0; l < hp->n_layer && hp->ffn_act == MODEL_ACT_SWIGLU_OAI; l++)
        act_ok &= m->layers[l].ffn != LAYER_FFN_DENSE;
    /* What no architecture ignite loads has together, or Gemma 2's
     * attention soft-capping, or Gemma 4's additions (gpt-oss's sinks run:
     * the decode and the mma.sync prefill attention take them) */
    return hp->attn_softcap > 0 ? "attention logit soft-capping"
           : hp->has_qk_norm && hp->has_qkv_bias ? "Q/K head norms with QKV biases"
           : !act_ok ? "its FFN activation"
                     : NULL;
}

int gpu_plan_check_model(const struct model *m)
{
    int64_t l;
    const char *missing = backend_gpu_missing(m, &l);
    if (!missing)
        return IG_OK;
    if (l >= 0)
        return ig_error(IG_E_MODEL, "the CUDA backend does not run %s models yet (%s in layer "
                        "%lld); use --device cpu", m->hp.arch, missing, (long long)l);
    return ig_error(IG_E_MODEL, "the CUDA backend does not run %s models yet (%s); use "
                    "--device cpu", m->hp.arch, missing);
}

const char *backend_gpu_weights_name(enum backend_gpu_weights mode)
{
    return mode == BACKEND_GPU_F16 ? "f16" : "native";
}

int gpu_plan_type(const struct model_weight *w, enum backend_gpu_weights mode)
{
    /* experts are read by the expert-indexed product alone, which takes
     * MXFP4 (gpt-oss's) as well: their bytes are the file's */
    bool native = w->n_expert > 1 ? gk_qmm_native_experts((int)w->type, w->rows, w->cols)
                                  : gk_qmm_native((int)w->type, w->rows, w->cols);
    if (mode == BACKEND_GPU_NATIVE && native)
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
        int64_t rows = ws[i]->n_expert * ws[i]->rows; /* experts' matrices stacked */
        if (k > 0 && parts[k - 1].type == type) {
            parts[k - 1].rows += rows;
            parts[k - 1].count++;
        } else {
            parts[k++] = (struct gpu_plan_part){type, rows, i, 1};
        }
    }
    return k;
}

bool gpu_plan_f32_matrix(const struct model_tensor *t)
{
    return t->scope == TENSOR_PER_LAYER && t->role == LAYER_FFN_GATE_INP;
}

int gpu_plan_group(const struct model_tensor_it *at,
                   struct model_tensor_it group[GPU_PLAN_MAX_PARTS])
{
    if (at->t->fuse == TENSOR_FUSE_NONE) {
        group[0] = *at;
        return 1;
    }
    struct model_tensor_it it;
    if (at->layer < 0)
        model_tensors_begin(&it, at->m, MODEL_TENSORS_MODEL);
    else
        model_tensors_begin_layer(&it, at->m, at->layer, 0);
    int n = 0;
    while (model_tensors_next(&it)) {
        if (it.t->fuse != at->t->fuse || it.t->kind != at->t->kind)
            continue;
        if (n == 0 && it.t != at->t)
            return 0; /* a later member: its group's first holds it */
        IG_ASSERT(n < GPU_PLAN_MAX_PARTS);
        group[n++] = it;
    }
    /* Gemma 4's V = K layers have no V weight: K's rows again where V's
     * would be, so the Q|K|V product's V is K's projection (V = K before
     * K's norm and RoPE, as the CPU's copy) */
    const struct model_layer *L = at->layer >= 0 ? &at->m->layers[at->layer] : NULL;
    if (L && L->v_is_k && at->t->fuse == TENSOR_FUSE_QKV && at->t->kind == TENSOR_MATRIX)
        for (int i = 0; i < n; i++)
            if (group[i].t->role == LAYER_WK) {
                IG_ASSERT(n < GPU_PLAN_MAX_PARTS);
                group[n++] = group[i];
                break;
            }
    return n;
}

/* Calls f(ctx, parts, n_parts, cols, w) for every matrix the backend holds
 * in parts (not the f32 router: gpu_plan_f32_matrix), walking the table of
 * tensors: each fused group (Q|K|V, gate|up) once, every other matrix
 * alone (w: the group's first weight); with products_only the matrices
 * products read (the output head, token_embd's matrix when tied, but not
 * the embedding table, whose rows are looked up), else every matrix stored
 * once (not the tied head). */
typedef void (*matrix_fn)(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols,
                          const struct model_tensor_it *w);

static void each_matrix(const struct model *m, enum backend_gpu_weights mode, bool products_only,
                        matrix_fn f, void *ctx)
{
    struct gpu_plan_part parts[GPU_PLAN_MAX_PARTS];
    struct model_tensor_it it, group[GPU_PLAN_MAX_PARTS];
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_TIED);
         model_tensors_next(&it);) {
        bool tied = !model_tensor_present(it.t, it.features);
        if (it.t->kind != TENSOR_MATRIX || (products_only ? it.t->gathered : tied) ||
            gpu_plan_f32_matrix(it.t))
            continue;
        const struct model_weight *ws[GPU_PLAN_MAX_PARTS];
        int n = gpu_plan_group(&it, group);
        int64_t elems = 0;
        for (int i = 0; i < n; i++) {
            ws[i] = group[i].w;
            elems += ws[i]->n_expert * ws[i]->rows * ws[i]->cols;
        }
        if (elems) /* (none: a tensor-parallel rank's empty share, not uploaded) */
            f(ctx, parts, gpu_plan_parts(ws, n, mode, parts), ws[0]->cols, &it);
    }
}

struct bytes_ctx {
    size_t bytes;
    bool step;    /* a step's: of an expert matrix the experts a row uses */
    bool experts; /* the weights with an expert dimension alone */
};

static bool counted(const struct bytes_ctx *c, const struct model_tensor *t)
{
    return !c->experts || t->n_expert == TENSOR_DIM_EXPERT;
}

static void add_bytes(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols,
                      const struct model_tensor_it *w)
{
    struct bytes_ctx *c = ctx;
    if (!counted(c, w->t))
        return;
    int64_t ne = w->w->n_expert, used = w->layer >= 0 ? w->m->layers[w->layer].n_expert_used : 0;
    for (int i = 0; i < n; i++) {
        size_t b = gk_qmat_bytes(parts[i].type, parts[i].rows, cols);
        c->bytes += c->step && ne > 1 && used > 0 ? b / (size_t)ne * (size_t)used : b;
    }
}

/* The weights' bytes, with (all) or without an untied embedding table and
 * the experts a row does not use (a step's), or of the experts alone: the
 * matrices as planned, the norms, biases and routers f32. */
static size_t weight_bytes(const struct model *m, enum backend_gpu_weights mode, bool all,
                           bool experts)
{
    struct bytes_ctx c = {0, !all, experts};
    each_matrix(m, mode, !all, add_bytes, &c);
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
        if ((it.t->kind != TENSOR_MATRIX || gpu_plan_f32_matrix(it.t)) && counted(&c, it.t))
            c.bytes += (size_t)(it.w->n_expert * it.w->rows * it.w->cols) * 4;
    return c.bytes;
}

size_t backend_gpu_weight_bytes(const struct model *m, enum backend_gpu_weights mode)
{
    return weight_bytes(m, mode, true, false);
}

size_t backend_gpu_step_bytes(const struct model *m, enum backend_gpu_weights mode)
{
    return weight_bytes(m, mode, false, false);
}

size_t backend_gpu_expert_bytes(const struct model *m, enum backend_gpu_weights mode)
{
    return weight_bytes(m, mode, true, true);
}

struct scratch_ctx {
    int64_t max_n;
    size_t bytes;
};

static void max_scratch(void *ctx, const struct gpu_plan_part *parts, int n, int64_t cols,
                        const struct model_tensor_it *w)
{
    struct scratch_ctx *c = ctx;
    if (w->w->n_expert > 1)
        return; /* the experts' own product (backend/gpu_moe.c) needs none */
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
