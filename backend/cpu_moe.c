/* backend/cpu_moe.c: the mixture-of-experts FFN of the CPU backend
 * (LAYER_FFN_MOE, backend/cpu_layer.h), as transformers' Qwen3MoeSparseMoeBlock
 * and llama.cpp's build_moe_ffn compute it:
 *
 *   xn = norm(x); logits = xn W_router^T (f32); p = softmax(logits);
 *   the k largest p (ties: the lower expert index, as torch.topk and
 *   llama.cpp's argsort), their weights renormalized to sum 1 (the layer's
 *   moe_norm_topk); proj = sum over them of w_e down_e(silu(gate_e xn) * up_e xn).
 *
 * gpt-oss (llama.cpp's build_moe_ffn with SOFTMAX_WEIGHT and SWIGLU_OAI,
 * transformers' GptOssMLP) adds biases (MODEL_FEAT_MOE_BIAS: the router's
 * to its logits, each expert's to its gate, up and down outputs), picks the
 * top k of the logits and softmaxes them (the renormalized softmax: the
 * same weights), and gates with the clamped SwiGLU (MODEL_ACT_SWIGLU_OAI).
 *
 * qwen35moe (llama.cpp's qwen35moe.cpp build_layer_ffn, transformers'
 * Qwen3_5MoeSparseMoeBlock) adds a shared expert every row runs
 * (MODEL_FEAT_MOE_SHEXP: a dense SwiGLU FFN on the same normed input),
 * its output times sigmoid(ffn_gate_inp_shexp . xn), added to the routed
 * experts' sum.
 *
 * The step's rows are grouped by expert (a counting sort: within an expert
 * the rows keep their order), and each used expert's matrices are read once
 * per step by the same matmuls as the dense FFN's (ops_matmul_multi: the
 * int8 path or the exact one) over that expert's rows gathered; an expert no
 * row picked is not read, so a decode row reads its k experts only. A row's
 * output depends on its own routing alone: the matmuls give a row the same
 * bits whatever rows share the call (ops/qmatmul.h), the router runs on the
 * exact f32 path on either path (an int8 or GEMM rounding that changed with
 * the step's row count could flip a near choice), and proj's sum runs over
 * the row's experts in ascending index whatever the step holds.
 * A tensor-parallel rank runs the experts its part holds (whole experts,
 * models/tp.c) for the rows routed to them, and its columns of a shared
 * expert or a dense MLP beside them; the layer loop's reduce sums the ranks'
 * outputs, except gemma4's, whose two parts are summed over the ranks here
 * before their norms (beside_sum: one all-reduce of twice the rows). Covered by tests/cpu/test_moe.py (fp64 numpy
 * reference, chunked = whole, 1 thread = 2), with the shared expert
 * tests/cpu/test_deltanet.py, across ranks tests/tp/test_tp_logits.py. */
#include "backend/cpu_layer.h"

#include "core/coll.h"
#include "core/status.h"
#include "ops/qmatmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Routing of rows [r0, r1): each row's k experts (ascending index) and
 * their weights, from the router's logits. */
static void route_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    const struct model_layer *L = job->L;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t ne = L->n_expert, k = L->n_expert_used;
    for (int64_t t = r0; t < r1; t++) {
        const float *lg = b->moe_logits + t * ne;
        int32_t *sel = b->moe_sel + t * k;
        float *w = b->moe_w + t * k;
        /* top-k of the logits (the softmax keeps their order): the largest
         * first, the lower index on a tie */
        uint64_t taken[(MODEL_MAX_EXPERTS + 63) / 64] = {0};
        IG_ASSERT(ne <= MODEL_MAX_EXPERTS && k <= ne);
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < ne; e++)
                if (!(taken[e / 64] >> (e % 64) & 1) && (best < 0 || lg[e] > lg[best]))
                    best = e;
            taken[best / 64] |= UINT64_C(1) << (best % 64);
        }
        /* softmax in double: the chosen ones' share of all (renormalized:
         * of the chosen alone), in ascending expert order */
        double mx = -INFINITY, all = 0, chosen = 0;
        for (int64_t e = 0; e < ne; e++)
            mx = lg[e] > mx ? lg[e] : mx;
        for (int64_t e = 0; e < ne; e++)
            all += exp((double)lg[e] - mx);
        int64_t j = 0;
        for (int64_t e = 0; e < ne; e++)
            if (taken[e / 64] >> (e % 64) & 1) {
                sel[j++] = (int32_t)e;
                chosen += exp((double)lg[e] - mx);
            }
        double denom = L->moe_norm_topk ? chosen : all;
        for (j = 0; j < k; j++)
            w[j] = (float)(exp((double)lg[sel[j]] - mx) / denom);
    }
}

/* gpt-oss's SwiGLU constants (GptOssExperts: alpha, limit). */
#define OAI_ALPHA 1.702f
#define OAI_LIMIT 7.0f

/* gate = act(gate) * up over rows [r0, r1) of an expert's (its width; the
 * model's activation: SwiGLU, gemma4's GeGLU or gpt-oss's clamped SwiGLU). */
static void expert_gate_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t f = job->L->n_ff;
    bool exact = ops_ctx_exact(job->ctx);
    enum model_act act = ops_ctx_model(job->ctx)->hp.ffn_act;
    if (act == MODEL_ACT_SWIGLU_OAI)
        ops_swiglu_oai(b->gate + r0 * f, b->up + r0 * f, (r1 - r0) * f, OAI_ALPHA, OAI_LIMIT);
    else if (act == MODEL_ACT_GELU_TANH)
        ops_geglu(b->gate + r0 * f, b->up + r0 * f, (r1 - r0) * f, exact);
    else
        ops_swiglu(b->gate + r0 * f, b->up + r0 * f, (r1 - r0) * f, exact);
}

/* The router's logits of n rows of `in` on the exact f32 path, whatever the
 * context's (see the header). */
static void router_logits(struct ops_ctx *ctx, const struct model_layer *L, const float *in,
                          int64_t n)
{
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    bool exact = ops_ctx_exact(ctx);
    ops_ctx_set_exact(ctx, true);
    ops_matmul(ctx, &L->w[LAYER_FFN_GATE_INP], in, n, b->moe_logits); /* [n, n_expert] */
    ops_ctx_set_exact(ctx, exact);
    if (ops_ctx_model(ctx)->hp.has_moe_bias)
        ops_add_bias(b->moe_logits, &L->w[LAYER_FFN_GATE_INP_B], n, L->n_expert);
}

/* gemma4's router input of n rows into moe_x: rmsnorm(x) (no weight) /
 * sqrt(n_embd) * ffn_gate_inp.scale (llama.cpp's gemma4.cpp). */
static void router_input(struct ops_ctx *ctx, const struct model_layer *L, int64_t n)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t e = hp->n_embd;
    const float *sc = L->w[LAYER_FFN_GATE_INP_SCALE].data;
    float inv = (float)(1.0 / sqrt((double)e));
    ops_rmsnorm(b->x, NULL, n, e, hp->norm_eps, b->moe_x);
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < e; i++)
            b->moe_x[t * e + i] = b->moe_x[t * e + i] * inv * sc[i];
}

/* gemma4's dense MLP beside the experts into s->moe_mlp: the dense FFN
 * (ffn_norm, gate|up, GeGLU, down) at its own width, not yet normed (a
 * tensor-parallel rank's is a partial sum). */
static void dense_beside(struct cpu_step *s, const struct model_layer *L, int64_t n)
{
    const struct model_hparams *hp = &ops_ctx_model(s->ops)->hp;
    struct ops_buffers *b = ops_ctx_buffers(s->ops);
    struct model_layer D = *L;
    D.n_ff = L->n_ff_mlp;
    cpu_ffn_dense_of(s, &D, n);
    memcpy(s->moe_mlp, b->proj, (size_t)(n * hp->n_embd) * sizeof *s->moe_mlp);
}

/* gemma4: proj = post_norm_2(the experts' sum in proj) + post_norm_1(the
 * dense MLP's in s->moe_mlp). A norm of a partial sum is not a part of the
 * norm, so a tensor-parallel rank first sums both over the ranks: one
 * all-reduce of the two side by side, in place of the layer loop's. */
static void beside_sum(struct cpu_step *s, const struct model_layer *L, int64_t n)
{
    const struct model_hparams *hp = &ops_ctx_model(s->ops)->hp;
    struct ops_buffers *b = ops_ctx_buffers(s->ops);
    int64_t e = hp->n_embd;
    float *mlp = s->moe_mlp, *experts = s->moe_mlp + n * e; /* [2, n, n_embd] */
    if (s->tp) {
        memcpy(experts, b->proj, (size_t)(n * e) * sizeof *experts);
        ig_coll_allreduce_sum(mlp, 2 * n * e);
        memcpy(b->proj, experts, (size_t)(n * e) * sizeof *experts);
    }
    ops_rmsnorm(b->proj, &L->w[LAYER_FFN_POST_NORM_2], n, e, hp->norm_eps, b->proj);
    ops_rmsnorm(mlp, &L->w[LAYER_FFN_POST_NORM_1], n, e, hp->norm_eps, mlp);
    ops_add(b->proj, mlp, n * e);
}

bool cpu_ffn_reduces(const struct model *m, const struct model_layer *L)
{
    return L->ffn == LAYER_FFN_MOE && m->hp.has_moe_mlp;
}

/* qwen35moe's shared expert into s->moe_mlp: the dense FFN (ffn_norm,
 * gate|up, SwiGLU, down) at the shared width on the shared expert's
 * weights, each row times sigmoid(ffn_gate_inp_shexp . xn) (one logit a
 * row, in f32 on either path as llama.cpp's F32 product is). */
static void shared_expert(struct cpu_step *s, const struct model_layer *L, int64_t n)
{
    const struct model_hparams *hp = &ops_ctx_model(s->ops)->hp;
    struct ops_buffers *b = ops_ctx_buffers(s->ops);
    int64_t e = hp->n_embd;
    struct model_layer D = *L;
    D.n_ff = L->n_ff_shexp; /* (a tensor-parallel rank's columns of it) */
    D.w[LAYER_FFN_GATE] = L->w[LAYER_FFN_GATE_SHEXP];
    D.w[LAYER_FFN_UP] = L->w[LAYER_FFN_UP_SHEXP];
    D.w[LAYER_FFN_DOWN] = L->w[LAYER_FFN_DOWN_SHEXP];
    cpu_ffn_dense_of(s, &D, n); /* proj = the expert's output; xn = norm(x) */
    const float *g = L->w[LAYER_FFN_GATE_INP_SHEXP].data; /* [n_embd] */
    for (int64_t t = 0; t < n; t++) {
        const float *xn = b->xn + t * e;
        float dot = 0;
        for (int64_t i = 0; i < e; i++)
            dot += xn[i] * g[i];
        float gate = 1.0f / (1.0f + expf(-dot));
        for (int64_t i = 0; i < e; i++)
            s->moe_mlp[t * e + i] = gate * b->proj[t * e + i];
    }
}

/* IGNITE_MOE_TRACE=1: a line on stderr per row of the step (its index
 * among the rows the layer runs: past the last layer's mixer only the wanted
 * ones) with its experts and the router's logits, for
 * bench/kl_vs_fp64.py to compare the routing with a reference's. */
static void trace_routes(const struct model_layer *L, int64_t layer, int64_t n,
                         const struct ops_buffers *b)
{
    const char *e = getenv("IGNITE_MOE_TRACE");
    if (!e || !*e || !strcmp(e, "0"))
        return;
    for (int64_t t = 0; t < n; t++) {
        fprintf(stderr, "moe: layer %lld row %lld experts", (long long)layer, (long long)t);
        for (int64_t j = 0; j < L->n_expert_used; j++)
            fprintf(stderr, " %d", b->moe_sel[t * L->n_expert_used + j]);
        fputs(" logits", stderr);
        for (int64_t x = 0; x < L->n_expert; x++)
            fprintf(stderr, " %.9g", b->moe_logits[t * L->n_expert + x]);
        fputc('\n', stderr);
    }
}

void cpu_ffn_moe(struct cpu_step *s, int64_t layer, int64_t n)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t e_dim = m->hp.n_embd, ne = L->n_expert, k = L->n_expert_used;

    bool beside = m->hp.has_moe_mlp, shared = m->hp.has_moe_shexp;
    if (beside)
        dense_beside(s, L, n);
    if (shared)
        shared_expert(s, L, n);
    cpu_rows_run(ctx, L, cpu_norm_rows, beside ? LAYER_FFN_PRE_NORM_2 : LAYER_FFN_NORM, n, false);
    if (beside)
        router_input(ctx, L, n);
    router_logits(ctx, L, beside ? b->moe_x : b->xn, n);
    cpu_rows_run(ctx, L, route_rows, 0, n, false);
    trace_routes(L, layer, n, b);
    const float *down_scale = beside ? L->w[LAYER_FFN_DOWN_EXPS_SCALE].data : NULL;

    /* group the (row, slot) pairs by expert: counts, starts, then the pairs
     * in row order within each expert */
    int64_t *start = b->moe_start;
    memset(start, 0, (size_t)(ne + 1) * sizeof *start);
    for (int64_t i = 0; i < n * k; i++)
        start[b->moe_sel[i] + 1]++;
    for (int64_t e = 0; e < ne; e++)
        start[e + 1] += start[e];
    for (int64_t i = 0; i < n * k; i++) /* start[e] walks to the next expert's start */
        b->moe_rows[start[b->moe_sel[i]]++] = (int32_t)i;
    for (int64_t e = ne; e > 0; e--) /* back to the starts */
        start[e] = start[e - 1];
    start[0] = 0;

    /* a tensor-parallel rank holds experts [e0, e1) (models/tp.c): the other
     * ranks' sum the rest into the reduce that follows */
    int64_t e0 = L->expert0, e1 = e0 + L->w[LAYER_FFN_GATE_EXPS].n_expert;
    memset(b->proj, 0, (size_t)(n * e_dim) * sizeof *b->proj);
    for (int64_t e = e0; e < e1; e++) {
        int64_t c = start[e + 1] - start[e];
        if (!c)
            continue; /* not read */
        const int32_t *pairs = b->moe_rows + start[e];
        for (int64_t i = 0; i < c; i++)
            memcpy(b->moe_x + i * e_dim, b->xn + (pairs[i] / k) * e_dim,
                   (size_t)e_dim * sizeof(float));
        struct model_weight gate = ops_weight_expert(&L->w[LAYER_FFN_GATE_EXPS], e - e0);
        struct model_weight up = ops_weight_expert(&L->w[LAYER_FFN_UP_EXPS], e - e0);
        struct model_weight down = ops_weight_expert(&L->w[LAYER_FFN_DOWN_EXPS], e - e0);
        const struct model_weight *gu_w[2] = {&gate, &up};
        float *gu_y[2] = {b->gate, b->up}; /* [c, n_ff] */
        ops_matmul_multi(ctx, 2, gu_w, b->moe_x, c, gu_y);
        if (m->hp.has_moe_bias) {
            struct model_weight gb = ops_weight_expert(&L->w[LAYER_FFN_GATE_EXPS_B], e - e0);
            struct model_weight ub = ops_weight_expert(&L->w[LAYER_FFN_UP_EXPS_B], e - e0);
            ops_add_bias(b->gate, &gb, c, L->n_ff);
            ops_add_bias(b->up, &ub, c, L->n_ff);
        }
        cpu_rows_run(ctx, L, expert_gate_rows, 0, c, false);
        ops_matmul(ctx, &down, b->gate, c, b->moe_y); /* [c, n_embd] */
        if (m->hp.has_moe_bias) {
            struct model_weight db = ops_weight_expert(&L->w[LAYER_FFN_DOWN_EXPS_B], e - e0);
            ops_add_bias(b->moe_y, &db, c, e_dim);
        }
        /* proj[row] += w * y (gemma4: w * (s_e * y)): a row's experts come in
         * ascending order */
        for (int64_t i = 0; i < c; i++) {
            float w = b->moe_w[pairs[i]];
            float *dst = b->proj + (pairs[i] / k) * e_dim;
            const float *y = b->moe_y + i * e_dim;
            if (down_scale)
                for (int64_t d = 0; d < e_dim; d++)
                    dst[d] += w * (down_scale[e] * y[d]);
            else
                for (int64_t d = 0; d < e_dim; d++)
                    dst[d] += w * y[d];
        }
    }
    if (beside)
        beside_sum(s, L, n);
    /* proj = the routed experts' + the gated shared expert's (a rank's: its
     * experts' and its columns' of the shared one, the gate every rank's
     * own whole one: the loop's reduce sums the parts) */
    if (shared)
        ops_add(b->proj, s->moe_mlp, n * e_dim);
}
