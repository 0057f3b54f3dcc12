/* backend/cpu_forward.c: the CPU backend's one layer loop and the output
 * head. Each layer calls its mixer and its FFN through the tables below,
 * indexed by the layer's kind (struct model_layer's mixer and ffn, set at
 * load from models/arch.c), each followed by a reduce of its output and
 * the residual add:
 *
 *   for each layer L:  mixers[L.mixer]  reduce  x += post_norm(proj)
 *                      ffns[L.ffn]      reduce  x += post_norm(proj)
 *
 * (gemma4's MoE reduces inside, before its norms: cpu_ffn_reduces).
 *
 * A new kind of layer is a function in a table here (and one in the CUDA
 * backend's, backend/gpu_forward.c): docs/design.md, "How to add a layer
 * kind". Covered by tests/cpu/ (numpy reference; chunked vs one-row
 * steps). */
#include "backend/cpu_layer.h"

#include "core/coll.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* By enum layer_mixer. */
static const cpu_mixer_fn mixers[] = {
    [LAYER_MIXER_ATTENTION] = cpu_attention,
    [LAYER_MIXER_DELTANET] = cpu_deltanet,
};

/* By enum layer_ffn. */
static const cpu_ffn_fn ffns[] = {
    [LAYER_FFN_DENSE] = cpu_ffn_dense,
    [LAYER_FFN_MOE] = cpu_ffn_moe,
};

/* Sums a block's output y [n, w] over the ranks that each computed a part
 * of it: nothing in one process; across tensor-parallel ranks the
 * all-reduce of the column-split matrices' partial sums (backend/tp.c). */
static void reduce(struct cpu_step *s, float *y, int64_t n, int64_t w)
{
    if (s->tp)
        ig_coll_allreduce_sum(y, n * w);
}

/* x += post_norm(proj) (the norm where the model has it: Gemma 3's). */
static void residual_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    const struct model_hparams *hp = &ops_ctx_model(job->ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t n = r1 - r0, e = hp->n_embd;
    float *proj = b->proj + r0 * e;
    if (hp->has_post_norms)
        ops_rmsnorm(proj, &job->L->w[job->role], n, e, hp->norm_eps, proj);
    ops_add(b->x + r0 * e, proj, n * e);
}

void cpu_forward_layers(struct cpu_step *s, int64_t n, const int64_t *want, int64_t n_want)
{
    const struct model *m = ops_ctx_model(s->ops);
    struct ops_buffers *b = ops_ctx_buffers(s->ops);
    int64_t e = m->hp.n_embd;
    if (m->hp.has_ple)
        cpu_ple_inputs(s, n);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        bool last = il == m->hp.n_layer - 1;
        IG_ASSERT((size_t)L->mixer < sizeof mixers / sizeof mixers[0] && mixers[L->mixer]);
        IG_ASSERT((size_t)L->ffn < sizeof ffns / sizeof ffns[0] && ffns[L->ffn]);
        n = mixers[L->mixer](s, il, n, last ? want : NULL, n_want);
        if (s->batch && s->batch->on_layer) /* the layer's K/V are written: they may leave */
            s->batch->on_layer(s->batch->layer_user, il, s->kv, NULL);
        reduce(s, b->proj, n, e);
        cpu_rows_run(s->ops, L, residual_rows, LAYER_ATTN_POST_NORM, n, false);
        ffns[L->ffn](s, il, n);
        if (!cpu_ffn_reduces(m, L))
            reduce(s, b->proj, n, e);
        cpu_rows_run(s->ops, L, residual_rows, LAYER_FFN_POST_NORM, n, false);
        if (m->hp.has_ple)
            cpu_ple_layer(s, il, n, last ? want : NULL);
        if (m->hp.has_out_scale)
            cpu_out_scale(s, il, n);
    }
}

/* Logits soft-capped a slice of SOFTCAP_ITEM an item over the pool: a
 * tanhf each, 262144 a row in Gemma's vocabularies, which on one thread
 * while the others waited were the longest serial stretch of a decode step. */
#define SOFTCAP_ITEM 4096
struct softcap_job {
    float *logits; /* [n] */
    int64_t n;
    double cap;
};

static void softcap_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct softcap_job *job = arg;
    (void)thread;
    int64_t a = i0 * SOFTCAP_ITEM, e = i1 * SOFTCAP_ITEM < job->n ? i1 * SOFTCAP_ITEM : job->n;
    ops_softcap(job->logits + a, e - a, job->cap);
}

void cpu_output_head(struct ops_ctx *ctx, const float *x, int64_t n, float *logits)
{
    const struct model *m = ops_ctx_model(ctx);
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    ops_rmsnorm(x, &m->w[MODEL_OUTPUT_NORM], n, m->hp.n_embd, m->hp.norm_eps, b->xn);
    ops_matmul(ctx, &m->w[MODEL_OUTPUT], b->xn, n, logits); /* [n, n_vocab] */
    if (m->hp.final_softcap > 0) { /* (a tensor-parallel rank's head has its rows only) */
        struct softcap_job job = {logits, n * m->w[MODEL_OUTPUT].rows, m->hp.final_softcap};
        ops_pool_run(ops_ctx_pool(ctx), (job.n + SOFTCAP_ITEM - 1) / SOFTCAP_ITEM, 1,
                     softcap_task, &job);
    }
}

void cpu_output_head_tp(struct cpu_step *s, const float *x, int64_t n, float *logits)
{
    struct cpu_tp *tp = s->tp;
    if (n > tp->rows) { /* (every rank alike: the same step) */
        float *p = realloc(tp->part, (size_t)(n * tp->n_v[tp->rank]) * sizeof *p);
        if (p)
            tp->part = p;
        float *a = p && tp->rank == 0 ? realloc(tp->all, (size_t)(n * tp->n_vocab) * sizeof *a)
                                      : tp->all;
        if (!p || (tp->rank == 0 && !a))
            ig_coll_abort(ig_error(IG_E_NOMEM, "rank %d: out of memory for %lld rows of logits",
                                   tp->rank, (long long)n));
        tp->all = a;
        tp->rows = n;
    }
    cpu_output_head(s->ops, x, n, tp->part); /* [n, n_v[rank]] */
    int64_t at = 0;
    for (int r = 0; r < tp->n_ranks; r++) {
        tp->cnt[r] = n * tp->n_v[r];
        tp->at[r] = at;
        at += tp->cnt[r];
    }
    ig_coll_gatherv(tp->part, n * tp->n_v[tp->rank], tp->all, tp->cnt, tp->at, 0);
    if (tp->rank != 0)
        return;
    /* rank r's [n, n_v[r]] block into columns v0[r].. of each row */
    for (int r = 0; r < tp->n_ranks; r++)
        for (int64_t i = 0; i < n; i++)
            memcpy(logits + i * tp->n_vocab + tp->v0[r], tp->all + tp->at[r] + i * tp->n_v[r],
                   (size_t)tp->n_v[r] * sizeof *logits);
}
