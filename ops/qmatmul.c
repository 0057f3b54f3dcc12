/* ops/qmatmul.c: the int8 matmul path: quantize the token block once
 * (struct qmm_q8, split by tokens over the pool when it is large), then
 * split the weight's output rows over the pool; each thread walks its rows
 * QMM_MR at a time against token blocks of QMM_TOKEN_BLOCK, in register
 * tiles of QMM_MR x QMM_NT (prefill), or streams its rows once against the
 * single token (decode). The kernels are in ops/qmatmul_scalar.c and
 * ops/qmatmul_avx2.c, ops/qmatmul_vnni.c; the ISA is picked once per
 * process from the CPU.
 * Covered by tests/cpu/test_qmatmul.c and tests/cpu/test_fast_forward.py. */
#include "ops/qmatmul.h"

#include "core/status.h"
#include "ops/simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per pass over a thread's rows: 64 quantized tokens of n_ff 1536
 * are 120 KiB and stay in L2 while the rows stream past. */
#define QMM_TOKEN_BLOCK 64
/* Row chunks per thread, for balance; a chunk is a multiple of QMM_MR rows. */
#define QMM_CHUNKS_PER_THREAD 4
/* Quantizing fewer tokens than this stays on the calling thread. */
#define QMM_PAR_QUANT_TOKENS 8

/* ---- the ISA ---------------------------------------------------------------- */

static enum qmm_isa best_isa = QMM_SCALAR;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void detect_isa(void)
{
    const char *env = getenv("IGNITE_SIMD");
    if (env && strcmp(env, "scalar") == 0)
        return;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        ops_qmm_tile_avx2(QUANT_Q4_0) != NULL)
        best_isa = QMM_AVX2; /* every AVX2 CPU has F16C */
    if (best_isa == QMM_AVX2 && !(env && strcmp(env, "avx2") == 0) &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni") && ops_qmm_tile_vnni(QUANT_Q4_0) != NULL)
        best_isa = QMM_VNNI;
#endif
}

enum qmm_isa ops_qmm_best_isa(void)
{
    pthread_once(&isa_once, detect_isa);
    return best_isa;
}

const char *ops_qmm_isa_name(enum qmm_isa isa)
{
    return isa == QMM_VNNI ? "avx512vnni" : isa == QMM_AVX2 ? "avx2" : "scalar";
}

qmm_tile_fn ops_qmm_tile(enum quant_type type, enum qmm_isa isa)
{
    switch (isa) {
    case QMM_VNNI: return ops_qmm_tile_vnni(type);
    case QMM_AVX2: return ops_qmm_tile_avx2(type);
    default: return ops_qmm_tile_scalar(type);
    }
}

/* ---- activations -------------------------------------------------------------- */

/* Plain C the compiler vectorizes (no libm calls in the loops), cloned for
 * AVX2; both clones round the same way (to nearest even), so they agree. */
OPS_SIMD_CLONES
void ops_qmm_quantize(const float *x, int64_t cols, struct qmm_q8 *out)
{
    for (int64_t b = 0; b < cols / QMM_QK; b++) {
        const float *xb = x + b * QMM_QK;
        float amax = 0;
        for (int j = 0; j < QMM_QK; j++) {
            float a = xb[j] < 0 ? -xb[j] : xb[j];
            amax = amax > a ? amax : a;
        }
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < QMM_QK; j++) {
            int32_t q = (int32_t)__builtin_rintf(xb[j] * id);
            out[b].qs[j] = (int8_t)q;
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * (float)sum;
    }
}

/* ---- the driver ------------------------------------------------------------------ */

struct qmm_job {
    const struct model_weight *w;
    const float *x;          /* [n_tokens, cols] */
    struct qmm_q8 *xq;       /* [n_tokens, cols / QMM_QK] */
    int64_t n_tokens;
    float *y;                /* [n_tokens, rows] */
    qmm_tile_fn tile;
};

static void quant_task(void *arg, int64_t t0, int64_t t1, int thread)
{
    const struct qmm_job *job = arg;
    int64_t cols = job->w->cols, nb = cols / QMM_QK;
    for (int64_t t = t0; t < t1; t++)
        ops_qmm_quantize(job->x + t * cols, cols, job->xq + t * nb);
}

static void rows_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct qmm_job *job = arg;
    const struct model_weight *w = job->w;
    int64_t nb = w->cols / QMM_QK, rows = w->rows, n = job->n_tokens;
    const uint8_t *data = w->data;
    for (int64_t t0 = 0; t0 < n; t0 += QMM_TOKEN_BLOCK) {
        int64_t t1 = t0 + QMM_TOKEN_BLOCK < n ? t0 + QMM_TOKEN_BLOCK : n;
        for (int64_t r = r0; r < r1; r += QMM_MR) {
            int mr = r1 - r < QMM_MR ? (int)(r1 - r) : QMM_MR;
            const uint8_t *wr = data + (size_t)r * w->row_bytes;
            for (int64_t t = t0; t < t1; t += QMM_NT) {
                int nt = t1 - t < QMM_NT ? (int)(t1 - t) : QMM_NT;
                job->tile(wr, w->row_bytes, nb, job->xq + t * nb, nb, mr, nt,
                          job->y + t * rows + r, rows);
            }
        }
    }
}

bool ops_qmatmul_handles(const struct ops_ctx *ctx, const struct model_weight *w,
                         int64_t n_tokens)
{
    if (ops_ctx_exact(ctx) || w->cols % QMM_QK != 0 || n_tokens > ops_ctx_max_batch(ctx))
        return false;
    if ((w->type == QUANT_Q4_K || w->type == QUANT_Q6_K) && w->cols % QK_K != 0)
        return false;
    return ops_qmm_tile(w->type, ops_qmm_best_isa()) != NULL;
}

void ops_qmatmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                 int64_t n_tokens, float *y)
{
    IG_ASSERT(n_tokens <= ops_ctx_max_batch(ctx));
    struct qmm_job job = {w, x, ops_ctx_qbuf(ctx), n_tokens, y,
                          ops_qmm_tile(w->type, ops_qmm_best_isa())};
    struct ops_pool *pool = ops_ctx_pool(ctx);
    int threads = ops_ctx_threads(ctx);
    if (n_tokens < QMM_PAR_QUANT_TOKENS)
        quant_task(&job, 0, n_tokens, 0);
    else
        ops_pool_run(pool, n_tokens, (n_tokens + 2 * threads - 1) / (2 * threads), quant_task,
                     &job);
    int64_t chunks = (int64_t)threads * QMM_CHUNKS_PER_THREAD;
    int64_t grain = (w->rows + chunks - 1) / chunks;
    grain = (grain + QMM_MR - 1) / QMM_MR * QMM_MR;
    ops_pool_run(pool, w->rows, grain, rows_task, &job);
}
