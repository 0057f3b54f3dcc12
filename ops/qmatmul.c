/* ops/qmatmul.c: the int8 matmul path: quantize the token block once
 * (struct qmm_q8, split by tokens over the pool when it is large; or the
 * caller's step has, row by row: ops_qmatmul_multi_q8), then
 * split the output rows of one or more weights over the pool (one job, rows
 * handed out in groups of 8). Each thread walks its rows against token
 * blocks that fit in L2. A weight the context holds in the packed layout
 * (every quantized type the path takes, on AVX2 and both VNNI sets; ops/packed.h)
 * is read only there: with many
 * tokens 8 rows at a time through the GEMM (16, two groups, on AVX512-VNNI:
 * ops/qmatmul_zmm.h), otherwise (decode, leftover
 * rows) through the packed GEMV, one sequential stream for 8 rows; both give
 * a token the same sums. Other weights: the repacking GEMM on stored rows
 * where the format has one, else register tiles of QMM_MR rows x QMM_NT
 * tokens, which for one token stream every weight row once. The kernels are in
 * ops/qmatmul_scalar.c, ops/qmatmul_avx2.c, ops/qmatmul_avxvnni.c and
 * ops/qmatmul_vnni.c (bodies in ops/qmatmul_x86.h); the ISA is picked once
 * per process from the CPU.
 * Covered by tests/cpu/test_qmatmul.c and tests/cpu/test_fast_forward.py. */
#include "ops/qmatmul.h"

#include "core/status.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/simd.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

/* Tokens per pass over a thread's rows: as many quantized tokens as fit in
 * a quarter of the core's L2 (x_block_bytes; they stay there while the rows
 * stream past, and each 8-row repack is used for all of them), within
 * [16, 512]. 256 KiB where the L2's size is unknown. */
#define QMM_X_BLOCK_BYTES_DEFAULT (256 << 10)
/* Row chunks per thread, for balance; a chunk is a multiple of QMM_MR rows. */
#define QMM_CHUNKS_PER_THREAD 4
/* Token blocks at least this long go through the 8-row GEMM (repacking 8
 * rows costs about as much as 2 tokens' worth of tiles). */
#define QMM_GEMM8_MIN_TOKENS 8
/* Quantizing fewer tokens than this stays on the calling thread. */
#define QMM_PAR_QUANT_TOKENS 8

/* ---- the ISA ---------------------------------------------------------------- */

static enum qmm_isa best_isa = QMM_SCALAR;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4, where sub-leaf 0's EAX says
 * sub-leaf 1 exists (Intel SDM vol. 2A, CPUID; read directly: clang 14's
 * __builtin_cpu_supports does not know it). Its ymm state is AVX2's, which
 * __builtin_cpu_supports("avx2") has checked the OS saves. */
static bool cpu_has_avxvnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && a >= 1 &&
           __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
#endif

bool ops_qmm_isa_runs(enum qmm_isa isa)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    /* every AVX2 CPU has F16C */
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    switch (isa) {
    case QMM_SCALAR: return true;
    case QMM_AVX2: return avx2 && ops_qmm_tile_avx2(QUANT_Q4_0) != NULL;
    case QMM_AVXVNNI:
        return avx2 && cpu_has_avxvnni() && ops_qmm_tile_avxvnni(QUANT_Q4_0) != NULL;
    case QMM_VNNI:
        return avx2 && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni") &&
               ops_qmm_tile_vnni(QUANT_Q4_0) != NULL;
    default: return false;
    }
#else
    return isa == QMM_SCALAR;
#endif
}

/* IGNITE_SIMD's cap: a set's name (ops_qmm_isa_name), or QMM_N_ISA where
 * the value names none (ops_qmm_check_env reports it); unset or empty: no
 * cap. */
static enum qmm_isa simd_cap(void)
{
    const char *env = getenv("IGNITE_SIMD");
    if (!env || !*env)
        return QMM_VNNI;
    for (int isa = QMM_SCALAR; isa < QMM_N_ISA; isa++)
        if (strcmp(env, ops_qmm_isa_name((enum qmm_isa)isa)) == 0)
            return (enum qmm_isa)isa;
    return QMM_N_ISA;
}

int ops_qmm_check_env(void)
{
    if (simd_cap() == QMM_N_ISA)
        return ig_error(IG_E_USAGE,
                        "IGNITE_SIMD: expected scalar, avx2, avxvnni or avx512vnni, got '%s'",
                        getenv("IGNITE_SIMD"));
    /* ops_ctx_create reads it: a misspelt "exact" would run the int8 path
     * unsaid ("fast", the tests' name for the int8 path, is kept) */
    const char *mm = getenv("IGNITE_MATMUL");
    if (mm && *mm && strcmp(mm, "exact") && strcmp(mm, "int8") && strcmp(mm, "fast"))
        return ig_error(IG_E_USAGE, "IGNITE_MATMUL: expected exact or int8, got '%s'", mm);
    return IG_OK;
}

/* The last set this CPU runs up to IGNITE_SIMD's cap (none where the value
 * names no set: the backend has refused it by then): AVX512-VNNI before
 * AVX-VNNI where a CPU has both (the same sums, and its attention and
 * exponentials take AVX-512 forms too). */
static void detect_isa(void)
{
    enum qmm_isa cap = simd_cap();
    cap = cap == QMM_N_ISA ? QMM_VNNI : cap;
    for (int isa = QMM_SCALAR; isa <= (int)cap; isa++)
        if (ops_qmm_isa_runs((enum qmm_isa)isa))
            best_isa = (enum qmm_isa)isa;
}

static int64_t x_block = QMM_X_BLOCK_BYTES_DEFAULT;
static pthread_once_t x_block_once = PTHREAD_ONCE_INIT;

static void detect_x_block(void)
{
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); /* 0 or -1 where unknown */
    if (l2 >= 4 * (long)QMM_X_BLOCK_BYTES_DEFAULT)
        x_block = l2 / 4;
#endif
}

static int64_t x_block_bytes(void)
{
    pthread_once(&x_block_once, detect_x_block);
    return x_block;
}

enum qmm_isa ops_qmm_best_isa(void)
{
    pthread_once(&isa_once, detect_isa);
    return best_isa;
}

const char *ops_qmm_isa_name(enum qmm_isa isa)
{
    return isa == QMM_VNNI      ? "avx512vnni"
         : isa == QMM_AVXVNNI ? "avxvnni"
         : isa == QMM_AVX2    ? "avx2"
                              : "scalar";
}

qmm_gemm8_fn ops_qmm_gemm8(enum quant_type type, enum qmm_isa isa)
{
    switch (isa) {
    case QMM_VNNI: return ops_qmm_gemm8_vnni(type);
    case QMM_AVXVNNI: return ops_qmm_gemm8_avxvnni(type);
    case QMM_AVX2: return ops_qmm_gemm8_avx2(type);
    default: return NULL;
    }
}

static bool is_float_type(enum quant_type type)
{
    return type == QUANT_F32 || type == QUANT_F16 || type == QUANT_BF16;
}

qmm_fgemm8_fn ops_qmm_fgemm8(enum quant_type type)
{
    return is_float_type(type) && ops_qmm_best_isa() != QMM_SCALAR ? ops_qmm_fgemm8_avx2()
                                                                    : NULL;
}

qmm_gemm8_fn ops_qmm_gemm8_packed(enum quant_type type, enum qmm_isa isa)
{
    switch (isa) {
    case QMM_VNNI: return ops_qmm_gemm8_packed_vnni(type);
    case QMM_AVXVNNI: return ops_qmm_gemm8_packed_avxvnni(type);
    case QMM_AVX2: return ops_qmm_gemm8_packed_avx2(type);
    default: return NULL;
    }
}

qmm_fgemm16_fn ops_qmm_fgemm16(enum quant_type type)
{
    return is_float_type(type) && ops_qmm_best_isa() == QMM_VNNI ? ops_qmm_fgemm16_vnni()
                                                                  : NULL;
}

qmm_fgemm_packed_fn ops_qmm_fgemm_packed(enum quant_type type)
{
    if (!is_float_type(type) || ops_qmm_best_isa() == QMM_SCALAR)
        return NULL;
    return ops_qmm_best_isa() == QMM_VNNI ? ops_qmm_fgemm_packed_vnni()
                                           : ops_qmm_fgemm_packed_avx2();
}

qmm_gemm16_fn ops_qmm_gemm16_packed(enum quant_type type, enum qmm_isa isa)
{
    return isa == QMM_VNNI ? ops_qmm_gemm16_packed_vnni(type) : NULL;
}

qmm_gemv8_fn ops_qmm_gemv8(enum quant_type type, enum qmm_isa isa)
{
    switch (isa) {
    case QMM_VNNI: return ops_qmm_gemv8_vnni(type);
    case QMM_AVXVNNI: return ops_qmm_gemv8_avxvnni(type);
    case QMM_AVX2: return ops_qmm_gemv8_avx2(type);
    default: return ops_qmm_gemv8_scalar(type);
    }
}

/* An ISA without a tile for the type takes the scalar one: for Q2_K, Q3_K,
 * IQ4_NL and IQ4_XS, whose SIMD kernels are packed ones only (a model's
 * weights always have their packed copy there; the tile serves only rows
 * without one). */
qmm_tile_fn ops_qmm_tile(enum quant_type type, enum qmm_isa isa)
{
    qmm_tile_fn f = isa == QMM_VNNI    ? ops_qmm_tile_vnni(type)
                  : isa == QMM_AVXVNNI ? ops_qmm_tile_avxvnni(type)
                  : isa == QMM_AVX2    ? ops_qmm_tile_avx2(type)
                                       : NULL;
    return f ? f : ops_qmm_tile_scalar(type);
}

/* ---- activations -------------------------------------------------------------- */

/* Plain C, cloned for AVX2; both clones round the same way (to nearest
 * even), so they agree. GCC keeps its loops scalar (the max and the finite
 * test as written are not reductions it may reorder): the AVX2 build's
 * ops_qmm_quantize_avx2 does the same work eight lanes at a time. */
OPS_SIMD_CLONES
void ops_qmm_quantize_c(const float *x, int64_t cols, struct qmm_q8 *out)
{
    for (int64_t b = 0; b < cols / QMM_QK; b++) {
        const float *xb = x + b * QMM_QK;
        float amax = 0;
        int finite = 1;
        for (int j = 0; j < QMM_QK; j++) {
            float a = xb[j] < 0 ? -xb[j] : xb[j];
            amax = amax > a ? amax : a;
            finite &= a <= FLT_MAX; /* 0 for inf and NaN (which amax can skip) */
        }
        if (!finite) {
            /* An inf or NaN would reach the int conversion (undefined) and
             * could vanish from the result; the f32 product is NaN, so is this. */
            memset(out[b].qs, 0, sizeof out[b].qs);
            out[b].d = out[b].s = NAN;
            out[b].dhs[0] = out[b].dhs[1] = NAN;
            out[b].sum8 = out[b].sum16 = 0;
            out[b].sum16_pairs[0] = out[b].sum16_pairs[1] = 0;
            continue;
        }
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        if (id > FLT_MAX)
            id = 0.0f; /* d < 2^-128: 1/d overflows (x * id would be inf, its int
                          conversion undefined); such a block's values are far below
                          any product's precision, so its quants are 0 */
        int32_t sum0 = 0, sum1 = 0, pairs[2] = {0, 0};
        for (int j = 0; j < QMM_QK / 2; j++) {
            int32_t q = (int32_t)__builtin_rintf(xb[j] * id);
            out[b].qs[j] = (int8_t)q;
            sum0 += q;
            pairs[j / 2 % 2] += q;
        }
        for (int j = QMM_QK / 2; j < QMM_QK; j++) {
            int32_t q = (int32_t)__builtin_rintf(xb[j] * id);
            out[b].qs[j] = (int8_t)q;
            sum1 += q;
            pairs[j / 2 % 2] += q;
        }
        out[b].d = d;
        out[b].s = d * (float)(sum0 + sum1);
        out[b].dhs[0] = d * (float)sum0;
        out[b].dhs[1] = d * (float)sum1;
        out[b].sum8 = 8 * (sum0 + sum1);
        out[b].sum16 = 16 * (sum0 + sum1);
        out[b].sum16_pairs[0] = (int16_t)(16 * pairs[0]);
        out[b].sum16_pairs[1] = (int16_t)(16 * pairs[1]);
    }
}

void ops_qmm_quantize(const float *x, int64_t cols, struct qmm_q8 *out)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        ops_qmm_quantize_avx2(x, cols, out);
        return;
    }
#endif
    ops_qmm_quantize_c(x, cols, out);
}

/* ---- the driver ------------------------------------------------------------------ */

/* Up to this many weights share one job (Q, K, V). */
#define QMM_MAX_WEIGHTS 4

/* n weights with the same cols applied to one quantized input; their rows
 * are numbered one after the other, each weight's padded to a multiple of
 * QMM_MR so that every chunk starts on a tile boundary. */
struct qmm_job {
    int n;
    const struct model_weight *const *w;
    float *const *y;                   /* y[i] is [n_tokens, w[i]->rows] */
    qmm_tile_fn tile[QMM_MAX_WEIGHTS];
    qmm_gemm8_fn gemm8[QMM_MAX_WEIGHTS]; /* NULL: tiles only */
    qmm_gemm16_fn gemm16[QMM_MAX_WEIGHTS]; /* NULL: 8 rows at a time */
    qmm_fgemm8_fn fgemm8[QMM_MAX_WEIGHTS]; /* float weights: x itself, no tiles */
    qmm_fgemm16_fn fgemm16[QMM_MAX_WEIGHTS]; /* NULL: 8 rows at a time */
    qmm_fgemm_packed_fn fgemmp[QMM_MAX_WEIGHTS]; /* float weights' packed copy */
    qmm_gemv8_fn gemv8[QMM_MAX_WEIGHTS]; /* NULL: no packed copy, tiles */
    const uint8_t *packed[QMM_MAX_WEIGHTS];  /* the packed copy of w[i] the context reads */
    struct ops_ctx *ctx;
    int64_t cols;
    const float *x;                    /* [n_tokens, cols] */
    struct qmm_q8 *xq;                 /* [n_tokens, cols / QMM_QK] */
    int64_t n_tokens;
};

/* Rows are handed out in multiples of this: whole 8-row GEMM groups. */
#define QMM_ROW_ALIGN 8
_Static_assert(QMM_ROW_ALIGN % QMM_MR == 0 && QMM_ROW_ALIGN % QMM_PR == 0,
               "chunks hold whole tiles and packed groups");

static int64_t padded_rows(const struct model_weight *w)
{
    return (w->rows + QMM_ROW_ALIGN - 1) / QMM_ROW_ALIGN * QMM_ROW_ALIGN;
}

static void quant_task(void *arg, int64_t t0, int64_t t1, int thread)
{
    const struct qmm_job *job = arg;
    ops_qmatmul_quantize_rows(job->ctx, job->x + t0 * job->cols, job->cols, t0, t1);
}

/* Rows [r0, r1) of weight i, r0 a multiple of QMM_MR. */
static void weight_rows(const struct qmm_job *job, int i, int64_t r0, int64_t r1, int thread)
{
    const struct model_weight *w = job->w[i];
    int64_t nb = job->cols / QMM_QK, rows = w->rows, n = job->n_tokens;
    const uint8_t *data = w->data;
    float *y = job->y[i];
    if (job->fgemm8[i]) {
        int64_t cols = job->cols;
        int64_t ftb = x_block_bytes() / (cols * (int64_t)sizeof(float));
        ftb = ftb < 16 ? 16 : ftb > 256 ? 256 : ftb & ~(int64_t)7;
        float *pack = (float *)(void *)ops_ctx_qpack(job->ctx, thread);
        for (int64_t t0 = 0; t0 < n; t0 += ftb) {
            int64_t t1 = t0 + ftb < n ? t0 + ftb : n;
            if (job->fgemmp[i]) { /* the copy, the stored rows cold */
                job->fgemmp[i](w->type, job->packed[i], cols, r0, r1, job->x + t0 * cols, cols,
                               t1 - t0, y + t0 * rows + r0, rows, pack);
                continue;
            }
            int64_t r = r0;
            if (job->fgemm16[i])
                for (; r + 16 <= r1; r += 16)
                    job->fgemm16[i](w->type, data + (size_t)r * w->row_bytes, w->row_bytes, cols,
                                    job->x + t0 * cols, cols, t1 - t0, y + t0 * rows + r, rows,
                                    pack);
            for (; r < r1; r += 8)
                job->fgemm8[i](w->type, data + (size_t)r * w->row_bytes, w->row_bytes,
                               r1 - r < 8 ? (int)(r1 - r) : 8, cols, job->x + t0 * cols, cols,
                               t1 - t0, y + t0 * rows + r, rows, pack);
        }
        return;
    }
    int64_t tb = x_block_bytes() / (nb * (int64_t)sizeof(struct qmm_q8));
    tb = tb < 16 ? 16 : tb > 512 ? 512 : tb & ~(int64_t)3;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        int64_t t1 = t0 + tb < n ? t0 + tb : n;
        int64_t r = r0;
        if (job->gemm8[i] && t1 - t0 >= QMM_GEMM8_MIN_TOKENS) {
            struct qmm_pack8 *pack = ops_ctx_qpack(job->ctx, thread);
            /* 8 stored rows, or one packed group */
            size_t step = job->packed[i] ? (size_t)nb * ops_qmm_packed_block_bytes(w->type)
                                         : 8 * w->row_bytes;
            const uint8_t *base = job->packed[i] ? job->packed[i] : data;
            if (job->gemm16[i])
                for (; r + 16 <= r1; r += 16)
                    job->gemm16[i](base + (size_t)(r / 8) * step, step, nb, job->xq + t0 * nb,
                                   nb, t1 - t0, y + t0 * rows + r, rows, pack);
            for (; r + 8 <= r1; r += 8)
                job->gemm8[i](base + (size_t)(r / 8) * step, w->row_bytes, nb,
                              job->xq + t0 * nb, nb, t1 - t0, y + t0 * rows + r, rows, pack);
        }
        if (job->gemv8[i]) { /* the packed copy, 8 rows at a time */
            size_t group_bytes = (size_t)nb * ops_qmm_packed_block_bytes(w->type);
            for (; r < r1; r += QMM_PR)
                job->gemv8[i](job->packed[i] + (size_t)(r / QMM_PR) * group_bytes, nb,
                              job->xq + t0 * nb, nb, t1 - t0,
                              r1 - r < QMM_PR ? (int)(r1 - r) : QMM_PR, y + t0 * rows + r,
                              rows);
        }
        for (; r < r1; r += QMM_MR) {
            int mr = r1 - r < QMM_MR ? (int)(r1 - r) : QMM_MR;
            const uint8_t *wr = data + (size_t)r * w->row_bytes;
            for (int64_t t = t0; t < t1; t += QMM_NT) {
                int nt = t1 - t < QMM_NT ? (int)(t1 - t) : QMM_NT;
                job->tile[i](wr, w->row_bytes, nb, job->xq + t * nb, nb, mr, nt,
                             y + t * rows + r, rows);
            }
        }
    }
}

static void rows_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct qmm_job *job = arg;
    int64_t base = 0;
    for (int i = 0; i < job->n && r0 < r1; i++) {
        int64_t pr = padded_rows(job->w[i]);
        if (r0 < base + pr) {
            int64_t end = r1 < base + pr ? r1 : base + pr;
            int64_t a = r0 - base, b = end - base;
            if (b > job->w[i]->rows)
                b = job->w[i]->rows;
            if (a < b)
                weight_rows(job, i, a, b, thread);
            r0 = end;
        }
        base += pr;
    }
}

bool ops_qmatmul_handles(const struct ops_ctx *ctx, const struct model_weight *w,
                         int64_t n_tokens)
{
    if (ops_ctx_exact(ctx) || w->cols % QMM_QK != 0 || n_tokens > ops_ctx_max_batch(ctx))
        return false;
    /* Float weights: the FMA GEMM for any number of tokens, decode too, so
     * a token's sums run in one order whatever shares its step (the exact
     * path, ops/matmul.c, flushes into f64 in another) */
    if (is_float_type(w->type))
        return ops_qmm_fgemm8(w->type) != NULL;
    if ((w->type == QUANT_Q2_K || w->type == QUANT_Q3_K || w->type == QUANT_Q4_K ||
         w->type == QUANT_Q5_K || w->type == QUANT_Q6_K || w->type == QUANT_IQ4_XS) &&
        w->cols % QK_K != 0)
        return false;
    return ops_qmm_tile(w->type, ops_qmm_best_isa()) != NULL;
}

bool ops_qmatmul_handles_all(const struct ops_ctx *ctx, int n,
                             const struct model_weight *const *w, int64_t n_tokens)
{
    if (n < 1 || n > QMM_MAX_WEIGHTS)
        return false;
    for (int i = 0; i < n; i++)
        if (w[i]->cols != w[0]->cols || !ops_qmatmul_handles(ctx, w[i], n_tokens))
            return false;
    return true;
}

bool ops_qmatmul_quantizes(const struct ops_ctx *ctx, int n,
                           const struct model_weight *const *w, int64_t n_tokens)
{
    if (!ops_qmatmul_handles_all(ctx, n, w, n_tokens))
        return false;
    for (int i = 0; i < n; i++)
        if (!ops_qmm_fgemm8(w[i]->type))
            return true;
    return false;
}

void ops_qmatmul_quantize_rows(struct ops_ctx *ctx, const float *x, int64_t cols, int64_t t0,
                               int64_t t1)
{
    IG_ASSERT(cols % QMM_QK == 0 && t1 <= ops_ctx_max_batch(ctx));
    struct qmm_q8 *xq = ops_ctx_qbuf(ctx);
    int64_t nb = cols / QMM_QK;
    for (int64_t t = t0; t < t1; t++)
        ops_qmm_quantize(x + (t - t0) * cols, cols, xq + t * nb);
}

/* ops_qmatmul_multi; quantized: x's int8 form is in the context's buffer
 * already (ops_qmatmul_quantize_rows). */
static void qmatmul_multi(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                          const float *x, int64_t n_tokens, float *const *y, bool quantized)
{
    IG_ASSERT(n >= 1 && n <= QMM_MAX_WEIGHTS && n_tokens <= ops_ctx_max_batch(ctx));
    struct qmm_job job = {.n = n, .w = w, .y = y, .ctx = ctx, .cols = w[0]->cols, .x = x,
                          .xq = ops_ctx_qbuf(ctx), .n_tokens = n_tokens}; /* kernels NULL */
    int64_t total = 0;
    bool quantize = false, pairs = false;
    for (int i = 0; i < n; i++) {
        job.fgemm8[i] = ops_qmm_fgemm8(w[i]->type);
        job.fgemm16[i] = ops_qmm_fgemm16(w[i]->type);
        pairs |= job.fgemm16[i] != NULL && n_tokens >= QMM_GEMM8_MIN_TOKENS;
        if (job.fgemm8[i]) {
            job.packed[i] = ops_packed_find(ops_ctx_packed(ctx), w[i]);
            if (job.packed[i]) { /* whole 16-row groups, decode too */
                job.fgemmp[i] = ops_qmm_fgemm_packed(w[i]->type);
                pairs = true;
            }
        } else {
            job.tile[i] = ops_qmm_tile(w[i]->type, ops_qmm_best_isa());
            job.gemm8[i] = ops_qmm_gemm8(w[i]->type, ops_qmm_best_isa());
            job.packed[i] = ops_packed_find(ops_ctx_packed(ctx), w[i]);
            if (job.packed[i]) { /* the packed copy only: the stored rows stay cold */
                job.gemv8[i] = ops_qmm_gemv8(w[i]->type, ops_qmm_best_isa());
                job.gemm8[i] = ops_qmm_gemm8_packed(w[i]->type, ops_qmm_best_isa());
                job.gemm16[i] = ops_qmm_gemm16_packed(w[i]->type, ops_qmm_best_isa());
                pairs |= job.gemm16[i] != NULL && n_tokens >= QMM_GEMM8_MIN_TOKENS;
            }
            quantize = !quantized;
        }
        total += padded_rows(w[i]);
    }
    struct ops_pool *pool = ops_ctx_pool(ctx);
    int threads = ops_ctx_threads(ctx);
    /* (float weights read x as it is) */
    if (quantize && n_tokens < QMM_PAR_QUANT_TOKENS)
        quant_task(&job, 0, n_tokens, 0);
    else if (quantize)
        ops_pool_run(pool, n_tokens, (n_tokens + 2 * threads - 1) / (2 * threads), quant_task,
                     &job);
    int64_t chunks = (int64_t)threads * QMM_CHUNKS_PER_THREAD;
    int64_t grain = (total + chunks - 1) / chunks;
    /* chunks of whole 16-row pairs where the 512-bit GEMM runs (a lone
     * group takes the 8-row one); else of 8 rows, the more of them */
    int64_t align = pairs ? 2 * QMM_ROW_ALIGN : QMM_ROW_ALIGN;
    grain = (grain + align - 1) / align * align;
    ops_pool_run(pool, total, grain, rows_task, &job);
}

void ops_qmatmul_multi(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                       const float *x, int64_t n_tokens, float *const *y)
{
    qmatmul_multi(ctx, n, w, x, n_tokens, y, false);
}

void ops_qmatmul_multi_q8(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                          const float *x, int64_t n_tokens, float *const *y)
{
    IG_ASSERT(ops_qmatmul_quantizes(ctx, n, w, n_tokens));
    qmatmul_multi(ctx, n, w, x, n_tokens, y, true);
}

void ops_qmatmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                 int64_t n_tokens, float *y)
{
    ops_qmatmul_multi(ctx, 1, &w, x, n_tokens, &y);
}
