/* tests/unit/test_gpu_plan.c: the CUDA backend's weight plan on the host
 * (backend/gpu_plan.c; no device needed): each weight's device type, the
 * split of fused matrices into parts of one type (Q|K in Q4_K then V in
 * Q6_K; a type without a device layout, Q3_K, going f16 between two
 * quantized ones; everything f16 in f16 mode), the weights' bytes against
 * the layout's formula summed by hand, a decode step's bytes (all but an
 * untied embedding table), and the matmul scratch (none for a decode-sized
 * batch, the f16 slab of the largest part for a long prefill chunk), and
 * the refusal of what the device does not run (a dense MLP beside SwiGLU
 * experts; a tensor-parallel rank's part of the experts runs).
 * Label unit. */
#include "backend/gpu_plan.h"
#include "core/status.h"
#include "models/synthetic.h"
#include "ops/gpu_qmm.h"
#include "tests/test.h"

#include <stdlib.h>

static struct model_weight mat(enum quant_type t, int64_t rows, int64_t cols)
{
    return (struct model_weight){.type = t, .rows = rows, .cols = cols,
                                 .row_bytes = quant_row_bytes(t, cols), .n_expert = 1};
}

static void test_parts(void)
{
    struct gpu_plan_part p[GPU_PLAN_MAX_PARTS];
    struct model_weight q = mat(QUANT_Q4_K, 512, 256), k = mat(QUANT_Q4_K, 128, 256),
                        v = mat(QUANT_Q6_K, 128, 256), k3 = mat(QUANT_Q3_K, 128, 256);
    const struct model_weight *qkv[] = {&q, &k, &v};
    int n = gpu_plan_parts(qkv, 3, BACKEND_GPU_NATIVE, p);
    CHECK(n == 2 && p[0].type == QUANT_Q4_K && p[0].rows == 640 && p[0].first == 0 &&
          p[0].count == 2 && p[1].type == QUANT_Q6_K && p[1].rows == 128 && p[1].first == 2);
    const struct model_weight *mixed[] = {&q, &k3, &q};
    n = gpu_plan_parts(mixed, 3, BACKEND_GPU_NATIVE, p);
    CHECK(n == 3 && p[0].type == QUANT_Q4_K && p[1].type == QUANT_F16 && p[1].rows == 128 &&
          p[2].type == QUANT_Q4_K && p[2].first == 2);
    n = gpu_plan_parts(qkv, 3, BACKEND_GPU_F16, p);
    CHECK(n == 1 && p[0].type == QUANT_F16 && p[0].rows == 768 && p[0].count == 3);
    struct model_weight f32 = mat(QUANT_F32, 64, 256), bf = mat(QUANT_BF16, 64, 256);
    CHECK(gpu_plan_type(&f32, BACKEND_GPU_NATIVE) == QUANT_F16);
    CHECK(gpu_plan_type(&bf, BACKEND_GPU_NATIVE) == QUANT_F16);
    CHECK(gpu_plan_type(&v, BACKEND_GPU_NATIVE) == QUANT_Q6_K);
    /* MXFP4: native as experts (gpt-oss's; the expert product reads it),
     * their device bytes the file's 17 a block up to two planes' padding;
     * f16 as a dense matrix, which no dense kernel reads */
    struct model_weight mx = mat(QUANT_MXFP4, 64, 2880), mxe = mx;
    mxe.n_expert = 32;
    CHECK(gpu_plan_type(&mx, BACKEND_GPU_NATIVE) == QUANT_F16);
    CHECK(gpu_plan_type(&mxe, BACKEND_GPU_NATIVE) == QUANT_MXFP4);
    CHECK(gpu_plan_type(&mxe, BACKEND_GPU_F16) == QUANT_F16);
    size_t file = (size_t)(mxe.n_expert * mxe.rows) * mxe.row_bytes,
           dev = gk_qmat_bytes(QUANT_MXFP4, mxe.n_expert * mxe.rows, mxe.cols);
    CHECKF(dev >= file && dev < file + 512, "MXFP4 experts: %zu device bytes, file %zu", dev,
           file);
}

static void test_bytes(const char *spec)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec_shapes(spec, &m) == IG_OK);
    if (!m)
        return;
    const struct model_hparams *hp = &m->hp;
    for (int mode = 0; mode < 2; mode++) {
        size_t want = 0, embd = 0;
        for (int64_t l = 0; l < hp->n_layer; l++) {
            const struct model_layer *L = &m->layers[l];
            const struct model_weight *wq = &L->w[LAYER_WQ], *wo = &L->w[LAYER_WO];
            const struct model_weight *gate = &L->w[LAYER_FFN_GATE], *down = &L->w[LAYER_FFN_DOWN];
            const struct model_weight *qkv[] = {wq, &L->w[LAYER_WK], &L->w[LAYER_WV]};
            const struct model_weight *gu[] = {gate, &L->w[LAYER_FFN_UP]};
            /* one allocation per part: Q|K|V and gate|up merge when of one type */
            struct gpu_plan_part p[GPU_PLAN_MAX_PARTS];
            int n = gpu_plan_parts(qkv, 3, (enum backend_gpu_weights)mode, p);
            for (int i = 0; i < n; i++)
                want += gk_qmat_bytes(p[i].type, p[i].rows, wq->cols);
            want += gk_qmat_bytes(gpu_plan_type(wo, mode), wo->rows, wo->cols);
            n = gpu_plan_parts(gu, 2, (enum backend_gpu_weights)mode, p);
            for (int i = 0; i < n; i++)
                want += gk_qmat_bytes(p[i].type, p[i].rows, gate->cols);
            want += gk_qmat_bytes(gpu_plan_type(down, mode), down->rows, down->cols);
            want += (size_t)(2 * hp->n_embd) * 4; /* norms */
        }
        const struct model_weight *emb = &m->w[MODEL_TOK_EMBD], *out = &m->w[MODEL_OUTPUT];
        embd = gk_qmat_bytes(gpu_plan_type(emb, mode), hp->n_vocab, hp->n_embd);
        want += embd + (size_t)hp->n_embd * 4;
        if (!hp->tied_embeddings)
            want += gk_qmat_bytes(gpu_plan_type(out, mode), hp->n_vocab, hp->n_embd);
        size_t got = backend_gpu_weight_bytes(m, (enum backend_gpu_weights)mode);
        size_t step = backend_gpu_step_bytes(m, (enum backend_gpu_weights)mode);
        CHECKF(got == want, "%s mode %d: %zu bytes, want %zu", spec, mode, got, want);
        CHECKF(step == (hp->tied_embeddings ? want : want - embd), "%s mode %d: step %zu",
               spec, mode, step);
        if (mode == BACKEND_GPU_NATIVE)
            CHECKF((double)got <= 1.05 * (double)model_weight_bytes(m),
                   "%s: %zu device bytes, the model's tensors %zu", spec, got,
                   model_weight_bytes(m));
    }
    /* scratch: none while every product takes a kernel over the blocks; a
     * long chunk dequantizes the largest part (gate|up) into one f16 slab */
    CHECK(gpu_plan_scratch_bytes(m, BACKEND_GPU_NATIVE, 8) == 0);
    CHECK(gpu_plan_scratch_bytes(m, BACKEND_GPU_F16, 4096) == 0);
    struct gk_qmm_plan plan;
    CHECK(gk_qmm_choose((int)m->layers[0].w[LAYER_FFN_GATE].type, 2 * hp->n_ff, hp->n_embd, 4096, &plan) ==
          IG_OK);
    CHECK(gpu_plan_scratch_bytes(m, BACKEND_GPU_NATIVE, 4096) >= plan.scratch_bytes &&
          plan.scratch_bytes > 0);
    model_free(m);
}

/* A model whose second layer is a mixture of experts runs (qwen3moe's,
 * backend/gpu_moe.c), a part of its experts too (a tensor-parallel rank's),
 * with a shared expert beside the routed ones (qwen35moe's), and a dense
 * MLP beside GeGLU experts (Gemma 4's); with a dense MLP beside SwiGLU
 * experts it is refused (exit 4, a bad model for the device). */
static void test_check_model(void)
{
    struct model_layer layers[2] = {{.ffn = LAYER_FFN_DENSE, .head_dim = 64},
                                    {.ffn = LAYER_FFN_DENSE, .head_dim = 64}};
    struct model m = {.hp = {.arch = "qwen3moe", .n_layer = 2}, .layers = layers};
    CHECK(gpu_plan_check_model(&m) == IG_OK);
    layers[1].ffn = LAYER_FFN_MOE;
    layers[1].n_expert = 8;
    layers[1].w[LAYER_FFN_GATE_EXPS].n_expert = 8;
    CHECK(gpu_plan_check_model(&m) == IG_OK);
    layers[1].w[LAYER_FFN_GATE_EXPS].n_expert = 4; /* a tensor-parallel rank's half */
    layers[1].expert0 = 4;
    CHECK(gpu_plan_check_model(&m) == IG_OK);
    layers[1].expert0 = 0;
    layers[1].w[LAYER_FFN_GATE_EXPS].n_expert = 8;
    m.hp.has_moe_shexp = true;
    CHECK(gpu_plan_check_model(&m) == IG_OK);
    m.hp.has_moe_shexp = false;
    m.hp.has_moe_mlp = true; /* beside SwiGLU experts: no model's */
    CHECK(gpu_plan_check_model(&m) == IG_E_MODEL);
    m.hp.ffn_act = MODEL_ACT_GELU_TANH; /* beside GeGLU ones: Gemma 4's, run */
    CHECK(gpu_plan_check_model(&m) == IG_OK);
}

int main(void)
{
    test_check_model();
    test_parts();
    test_bytes("synthetic:Llama-tiny:Q4_K_M");
    test_bytes("synthetic:SmolLM2-135M:Q4_1");
    test_bytes("synthetic:Llama-3-8B:Q4_K_M");
    test_bytes("synthetic:Llama-3.2-1B:Q8_0");
    return test_summary("test_gpu_plan");
}
