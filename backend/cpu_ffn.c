/* backend/cpu_ffn.c: the dense FFN of the CPU backend (LAYER_FFN_DENSE,
 * backend/cpu_layer.h): RMSNorm, the gate and up matmuls, SwiGLU or GeGLU
 * (the model's activation, models/arch.c), the down matmul into proj, at
 * the layer's own width n_ff (a tensor-parallel rank's columns, none in an
 * empty share: zeros). On the int8 path the norm and the gate
 * quantize their output for the matmul that reads it next while the rows
 * are still in cache. Covered by tests/cpu/. */
#include "backend/cpu_layer.h"

#include "ops/qmatmul.h"

#include <string.h>

/* gate = act(gate) * up: a row at a time when quantized, still in L1
 * (6 KiB at n_ff 1536). */
static void gate_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    const struct model_hparams *hp = &ops_ctx_model(job->ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t f = job->L->n_ff, step = job->q8 ? 1 : r1 - r0;
    bool exact = ops_ctx_exact(job->ctx);
    for (int64_t t = r0; t < r1; t += step) {
        float *g = b->gate + t * f;
        if (hp->ffn_act == MODEL_ACT_GELU_TANH)
            ops_geglu(g, b->up + t * f, step * f, exact);
        else
            ops_swiglu(g, b->up + t * f, step * f, exact);
        if (job->q8)
            ops_qmatmul_quantize_rows(job->ctx, g, f, t, t + 1);
    }
}

void cpu_ffn_dense(struct cpu_step *s, int64_t layer, int64_t n)
{
    cpu_ffn_dense_of(s, &ops_ctx_model(s->ops)->layers[layer], n);
}

void cpu_ffn_dense_of(struct cpu_step *s, const struct model_layer *L, int64_t n)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    /* proj = W_down (act(xn W_gate^T) * (xn W_up^T)), xn = norm(x) */
    const struct model_weight *ff_w[2] = {&L->w[LAYER_FFN_GATE], &L->w[LAYER_FFN_UP]};
    float *ff_y[2] = {b->gate, b->up}; /* [n, n_ff] */
    if (L->n_ff == 0) { /* a tensor-parallel rank's empty share (models/tp.c): xn still
                           (a shared expert's gate reads it), proj zeros for the reduce */
        cpu_rows_run(ctx, L, cpu_norm_rows, LAYER_FFN_NORM, n, false);
        memset(b->proj, 0, (size_t)(n * m->hp.n_embd) * sizeof *b->proj);
        return;
    }
    cpu_rows_then_matmul(ctx, L, cpu_norm_rows, LAYER_FFN_NORM, n, m->hp.n_embd, 2, ff_w, b->xn,
                         ff_y);
    const struct model_weight *down_w[1] = {&L->w[LAYER_FFN_DOWN]};
    float *down_y[1] = {b->proj}; /* [n, n_embd] */
    cpu_rows_then_matmul(ctx, L, gate_rows, 0, n, L->n_ff, 1, down_w, b->gate, down_y);
}
