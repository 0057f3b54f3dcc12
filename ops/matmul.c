/* ops/matmul.c: y = x W^T for a weight in its stored format and a block of
 * f32 token vectors, split by output rows over the thread pool.
 *
 * Two paths, both reading every weight row once per block of tokens:
 *  - few tokens (decode): the format's fused kernel reads the stored blocks
 *    and multiplies each decoded block with up to MM_NT tokens at once;
 *  - many tokens (prefill): rows are dequantized MM_MR at a time into a
 *    per-thread buffer and multiplied with the tokens in MM_MR x MM_NT
 *    register tiles by the dense kernel below, over token blocks small
 *    enough to stay in cache.
 * Dot products run in f32 lanes that are added into f64 every MM_FLUSH_COLS
 * columns (see matmul_kernels.h for why). Kernels are plain C that the
 * compiler vectorizes, cloned for AVX2 (ops/simd.h). Per-format block
 * decoding lives in ops/matmul_quant.c.
 * Covered by tests/cpu/test_matmul.c. */
#include "ops/matmul_kernels.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include "core/status.h"

#include <stdint.h>

/* Up to this many tokens, fused kernels are used (no row buffer). */
#define MM_FUSED_MAX_TOKENS MM_NT
/* Tokens per pass over a row range: a block of x ([64, n_ff] f32 = 384 KiB
 * at n_ff 1536) stays in L2 while the rows stream past it. */
#define MM_TOKEN_BLOCK 64
/* Row chunks handed to a thread: about this many per thread, for balance. */
#define MM_CHUNKS_PER_THREAD 4

_Static_assert(OPS_MATMUL_ROW_BUFS >= MM_MR, "matmul decodes MM_MR rows at a time");

/* ---- the dense kernel: MR f32 rows times nt tokens ------------------------ */

/* mr and nt are compile-time constants at every call site, so acc lives in
 * registers and the lane loop vectorizes: each loaded weight is used nt
 * times and each loaded token value mr times. */
static inline __attribute__((always_inline)) void
f32_tile(const float *const *w, const int mr, int64_t cols, const float *x, int64_t ldx,
         const int nt, float *y, int64_t ldy)
{
    double dacc[MM_MR][MM_NT][MM_LANES] = {{{0}}};
    int64_t c = 0;
    while (c + MM_LANES <= cols) {
        int64_t end = c + MM_FLUSH_COLS < cols ? c + MM_FLUSH_COLS : cols;
        float acc[MM_MR][MM_NT][MM_LANES] = {{{0}}};
        for (; c + MM_LANES <= end; c += MM_LANES)
            MM_UNROLL for (int r = 0; r < mr; r++)
                MM_UNROLL for (int t = 0; t < nt; t++)
                    for (int l = 0; l < MM_LANES; l++)
                        acc[r][t][l] += w[r][c + l] * x[t * ldx + c + l];
        for (int r = 0; r < mr; r++)
            for (int t = 0; t < nt; t++)
                for (int l = 0; l < MM_LANES; l++)
                    dacc[r][t][l] += acc[r][t][l];
    }
    for (int r = 0; r < mr; r++)
        for (int t = 0; t < nt; t++) {
            double s = mm_sum_lanes_d(dacc[r][t]);
            for (int64_t cc = c; cc < cols; cc++)
                s += (double)(w[r][cc] * x[t * ldx + cc]);
            y[t * ldy + r] = (float)s;
        }
}

static inline __attribute__((always_inline)) void
f32_rows(const float *const *w, const int mr, int64_t cols, const float *x, int64_t ldx,
         int64_t nt, float *y, int64_t ldy)
{
    int64_t t = 0;
    for (; t + MM_NT <= nt; t += MM_NT)
        f32_tile(w, mr, cols, x + t * ldx, ldx, MM_NT, y + t * ldy, ldy);
    switch (nt - t) {
    case 3: f32_tile(w, mr, cols, x + t * ldx, ldx, 3, y + t * ldy, ldy); break;
    case 2: f32_tile(w, mr, cols, x + t * ldx, ldx, 2, y + t * ldy, ldy); break;
    case 1: f32_tile(w, mr, cols, x + t * ldx, ldx, 1, y + t * ldy, ldy); break;
    default: break;
    }
}
_Static_assert(MM_NT == 4 && MM_MR == 2, "f32_rows and ops_matmul_rows instantiate these");

OPS_SIMD_CLONES
void ops_mm_f32_dot_tokens(const float *w, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                           float *y, int64_t ldy)
{
    f32_rows(&w, 1, cols, x, ldx, nt, y, ldy);
}

/* Two rows at once: y[t * ldy + r] for r < 2. */
OPS_SIMD_CLONES
static void f32_dot_tokens2(const float *w0, const float *w1, int64_t cols, const float *x,
                            int64_t ldx, int64_t nt, float *y, int64_t ldy)
{
    const float *w[2] = {w0, w1};
    f32_rows(w, 2, cols, x, ldx, nt, y, ldy);
}

/* ---- rows r0..r1 on the calling thread -------------------------------------- */

/* Row r as f32: the stored row itself for F32 weights, else decoded into buf. */
static const float *f32_row(const struct model_weight *w, const struct mm_format *f, int64_t r,
                            float *buf)
{
    const void *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    if (w->type == QUANT_F32)
        return row;
    f->decode_row(w->type, row, buf, w->cols);
    return buf;
}

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
        const float *xt = x + t0 * cols;
        float *yt = y + t0 * rows;
        int64_t r = r0;
        for (; r + MM_MR <= r1; r += MM_MR) {
            const float *w0 = f32_row(w, f, r, row_buf);
            const float *w1 = f32_row(w, f, r + 1, row_buf + cols);
            f32_dot_tokens2(w0, w1, cols, xt, cols, nt, yt + r, rows);
        }
        if (r < r1)
            ops_mm_f32_dot_tokens(f32_row(w, f, r, row_buf), cols, xt, cols, nt, yt + r, rows);
    }
}

/* ---- the parallel driver ---------------------------------------------------- */

/* Several weights applied to the same input in one pool job: their output
 * rows are numbered one after the other, and a chunk that crosses from one
 * weight into the next is split there. */
struct mm_job {
    struct ops_ctx *ctx;
    int n;                             /* weights */
    const struct model_weight *const *w;
    float *const *y;                   /* y[i] is [n_tokens, w[i]->rows] */
    const float *x;                    /* [n_tokens, cols], shared */
    int64_t n_tokens;
};

static void mm_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct mm_job *job = arg;
    int64_t base = 0; /* first global row of weight i */
    for (int i = 0; i < job->n && r0 < r1; i++) {
        int64_t rows = job->w[i]->rows;
        if (r0 < base + rows) {
            int64_t end = r1 < base + rows ? r1 : base + rows;
            ops_matmul_rows(job->w[i], r0 - base, end - base, job->x, job->n_tokens, job->y[i],
                            ops_ctx_scratch(job->ctx, thread));
            r0 = end;
        }
        base += rows;
    }
}

void ops_matmul_multi(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                      const float *x, int64_t n_tokens, float *const *y)
{
    if (ops_qmatmul_handles_all(ctx, n, w, n_tokens)) { /* int8 path unless exact */
        ops_qmatmul_multi(ctx, n, w, x, n_tokens, y);
        return;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        IG_ASSERT(w[i]->cols == w[0]->cols);
        IG_ASSERT(ops_ctx_scratch_floats(ctx) >= OPS_MATMUL_ROW_BUFS * w[i]->cols);
        total += w[i]->rows;
    }
    struct mm_job job = {ctx, n, w, y, x, n_tokens};
    int64_t chunks = (int64_t)ops_ctx_threads(ctx) * MM_CHUNKS_PER_THREAD;
    int64_t grain = (total + chunks - 1) / chunks;
    ops_pool_run(ops_ctx_pool(ctx), total, grain, mm_task, &job);
}

void ops_matmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                int64_t n_tokens, float *y)
{
    ops_matmul_multi(ctx, 1, &w, x, n_tokens, &y);
}
