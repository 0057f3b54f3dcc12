/* backend/cpu_rows.c: the element-wise steps between a layer's matmuls
 * (backend/cpu_layer.h), each over a range of the step's rows as one job on
 * the pool: row by row, so any split gives the same bits. On thread 0 alone
 * they were 5 % of a two-thread prefill that the other thread waited out
 * (the gate alone 3 %), and more of one on more threads. A decode step's
 * few rows stay on thread 0 (ops_pool_run runs a job of one grain inline).
 * Covered by tests/cpu/. */
#include "backend/cpu_layer.h"

#include "core/status.h"
#include "ops/qmatmul.h"

#define ROWS_GRAIN 8

static void rows_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    (void)thread;
    const struct cpu_rows *job = arg;
    job->fn(job, r0, r1);
}

void cpu_rows_run(struct ops_ctx *ctx, const struct model_layer *L, cpu_rows_fn fn, int role,
                  int64_t n, bool q8)
{
    struct cpu_rows job = {ctx, L, fn, role, q8};
    ops_pool_run(ops_ctx_pool(ctx), n, ROWS_GRAIN, rows_task, &job);
}

void cpu_rows_then_matmul(struct ops_ctx *ctx, const struct model_layer *L, cpu_rows_fn fn,
                          int role, int64_t n, int64_t cols, int nw,
                          const struct model_weight *const *w, const float *x, float *const *y)
{
    IG_ASSERT(w[0]->cols == cols); /* the step's width */
    bool q8 = ops_qmatmul_quantizes(ctx, nw, w, n);
    cpu_rows_run(ctx, L, fn, role, n, q8);
    if (q8)
        ops_qmatmul_multi_q8(ctx, nw, w, x, n, y);
    else
        ops_matmul_multi(ctx, nw, w, x, n, y);
}

void cpu_norm_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    const struct model_hparams *hp = &ops_ctx_model(job->ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t e = hp->n_embd;
    float *xn = b->xn + r0 * e;
    ops_rmsnorm(b->x + r0 * e, &job->L->w[job->role], r1 - r0, e, hp->norm_eps, xn);
    if (job->q8)
        ops_qmatmul_quantize_rows(job->ctx, xn, e, r0, r1);
}
