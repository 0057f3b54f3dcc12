/* ops/matmul.c: y = x W^T for a weight in its stored format and a block of
 * f32 token vectors, split by output rows over the thread pool.
 *
 * Two paths, both reading every weight row once per block of tokens:
 *  - few tokens (decode): the format's fused kernel reads the stored blocks
 *    and multiplies each decoded block with up to MM_NT tokens at once;
 *  - many tokens (prefill): each row is dequantized once into a per-thread
 *    buffer and multiplied with the tokens MM_NT at a time by the dense
 *    kernel below, over token blocks small enough to stay in cache.
 * Per-format block decoding lives in ops/matmul_quant.c.
 * Covered by tests/cpu/test_matmul.c. */
#include "ops/matmul_kernels.h"
#include "ops/ops.h"

#include "core/status.h"

#include <stdint.h>

/* Up to this many tokens, fused kernels are used (no row buffer). */
#define MM_FUSED_MAX_TOKENS MM_NT
/* Tokens per pass over a row range: a block of x ([64, n_ff] f32 = 384 KiB
 * at n_ff 1536) stays in L2 while the rows stream past it. */
#define MM_TOKEN_BLOCK 64
/* Row chunks handed to a thread: about this many per thread, for balance. */
#define MM_CHUNKS_PER_THREAD 4

_Static_assert(OPS_MATMUL_ROW_BUFS >= 1, "matmul needs a row buffer");

/* ---- the dense kernel: one f32 row times nt tokens ------------------------ */

/* NT is a compile-time constant at every call site, so acc lives in
 * registers and the lane loop vectorizes. */
static inline __attribute__((always_inline)) void
f32_tile(const float *w, int64_t cols, const float *x, int64_t ldx, const int nt, float *y,
         int64_t ldy)
{
    double dacc[MM_NT][MM_LANES] = {{0}};
    int64_t c = 0;
    while (c + MM_LANES <= cols) {
        int64_t end = c + MM_FLUSH_COLS < cols ? c + MM_FLUSH_COLS : cols;
        float acc[MM_NT][MM_LANES] = {{0}};
        for (; c + MM_LANES <= end; c += MM_LANES)
            for (int t = 0; t < nt; t++)
                for (int l = 0; l < MM_LANES; l++)
                    acc[t][l] += w[c + l] * x[t * ldx + c + l];
        for (int t = 0; t < nt; t++)
            for (int l = 0; l < MM_LANES; l++)
                dacc[t][l] += acc[t][l];
    }
    for (int t = 0; t < nt; t++) {
        double s = mm_sum_lanes_d(dacc[t]);
        for (int64_t cc = c; cc < cols; cc++)
            s += (double)(w[cc] * x[t * ldx + cc]);
        y[t * ldy] = (float)s;
    }
}

void ops_mm_f32_dot_tokens(const float *w, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                           float *y, int64_t ldy)
{
    int64_t t = 0;
    for (; t + MM_NT <= nt; t += MM_NT)
        f32_tile(w, cols, x + t * ldx, ldx, MM_NT, y + t * ldy, ldy);
    switch (nt - t) {
    case 3: f32_tile(w, cols, x + t * ldx, ldx, 3, y + t * ldy, ldy); break;
    case 2: f32_tile(w, cols, x + t * ldx, ldx, 2, y + t * ldy, ldy); break;
    case 1: f32_tile(w, cols, x + t * ldx, ldx, 1, y + t * ldy, ldy); break;
    default: break;
    }
}

/* ---- rows r0..r1 on the calling thread -------------------------------------- */

void ops_matmul_rows(const struct model_weight *w, int64_t r0, int64_t r1, const float *x,
                     int64_t n_tokens, float *y, float *row_buf)
{
    const struct mm_format *f = ops_mm_format_of(w->type);
    IG_ASSERT(f != NULL);
    const uint8_t *data = w->data;
    int64_t cols = w->cols, rows = w->rows;

    if (n_tokens <= MM_FUSED_MAX_TOKENS && f->dot_tokens) {
        for (int64_t r = r0; r < r1; r++)
            f->dot_tokens(data + (size_t)r * w->row_bytes, cols, x, cols, n_tokens, y + r, rows);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += MM_TOKEN_BLOCK) {
        int64_t nt = n_tokens - t0 < MM_TOKEN_BLOCK ? n_tokens - t0 : MM_TOKEN_BLOCK;
        for (int64_t r = r0; r < r1; r++) {
            const void *row = data + (size_t)r * w->row_bytes;
            const float *wr = row;
            if (w->type != QUANT_F32) {
                f->decode_row(w->type, row, row_buf, cols);
                wr = row_buf;
            }
            ops_mm_f32_dot_tokens(wr, cols, x + t0 * cols, cols, nt, y + t0 * rows + r, rows);
        }
    }
}

/* ---- the parallel driver ---------------------------------------------------- */

struct mm_job {
    struct ops_ctx *ctx;
    const struct model_weight *w;
    const float *x; /* [n_tokens, cols] */
    int64_t n_tokens;
    float *y;       /* [n_tokens, rows] */
};

static void mm_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct mm_job *job = arg;
    ops_matmul_rows(job->w, r0, r1, job->x, job->n_tokens, job->y,
                    ops_ctx_scratch(job->ctx, thread));
}

void ops_matmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                int64_t n_tokens, float *y)
{
    IG_ASSERT(ops_ctx_scratch_floats(ctx) >= w->cols);
    struct mm_job job = {ctx, w, x, n_tokens, y};
    int64_t chunks = (int64_t)ops_ctx_threads(ctx) * MM_CHUNKS_PER_THREAD;
    int64_t grain = (w->rows + chunks - 1) / chunks;
    ops_pool_run(ops_ctx_pool(ctx), w->rows, grain, mm_task, &job);
}
