/* ops/norm_rope.c: the element-wise primitives of a transformer block, in
 * the order a token meets them: embedding lookup (and Gemma's scale),
 * RMSNorm (of rows or of heads: the same call over more, shorter rows),
 * bias, RoPE, SwiGLU or GeGLU, residual add, soft-capping. A stored norm
 * weight is the multiplier as it is: Gemma's converter already wrote 1 + w.
 * Each runs on the calling thread over the rows it is given; the CPU
 * backend's layer steps (backend/cpu_rows.c) split a step's rows over the
 * pool. The matmuls are in ops/matmul.c.
 * Covered by tests/cpu/ (the forward against the numpy reference). */
#include "ops/matmul_kernels.h"
#include "ops/ops.h"

#include "ops/exp_row.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include "core/status.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

int ops_embed_part(const struct model *m, const int32_t *tokens, int64_t n_tokens, int64_t v0,
                   float *x)
{
    const struct model_weight *e = &m->w[MODEL_TOK_EMBD];
    const struct mm_format *f = ops_mm_format_of(e->type);
    IG_ASSERT(f != NULL);
    /* the whole table's ids: a part's last row, or the vocabulary */
    int64_t n_ids = v0 + e->rows > m->hp.n_vocab ? v0 + e->rows : m->hp.n_vocab;
    for (int64_t t = 0; t < n_tokens; t++) {
        if (tokens[t] < 0 || tokens[t] >= n_ids)
            return ig_error(IG_E_INPUT, "token id %ld at index %lld is outside the vocabulary [0, %lld)",
                            (long)tokens[t], (long long)t, (long long)n_ids);
    }
    float scale = (float)m->hp.embd_scale;
    for (int64_t t = 0; t < n_tokens; t++) {
        float *xt = x + t * e->cols;
        if (tokens[t] < v0 || tokens[t] >= v0 + e->rows) { /* another rank's */
            memset(xt, 0, (size_t)e->cols * sizeof *xt);
            continue;
        }
        const uint8_t *row = (const uint8_t *)e->data + (size_t)(tokens[t] - v0) * e->row_bytes;
        f->decode_row(e->type, row, xt, e->cols);
        if (scale != 1.0f)
            for (int64_t i = 0; i < e->cols; i++)
                xt[i] *= scale;
    }
    return IG_OK;
}

int ops_embed(const struct model *m, const int32_t *tokens, int64_t n_tokens, float *x)
{
    return ops_embed_part(m, tokens, n_tokens, 0, x);
}

/* Vectors for the loops -O2 leaves scalar (trip counts not known multiples
 * of the width): 8 floats, 4 doubles, unaligned. Macros, not functions: a
 * function passing 32-byte vectors has another ABI in the baseline clone. */
typedef float ops_v8 __attribute__((vector_size(32), aligned(4)));
typedef float ops_v4 __attribute__((vector_size(16), aligned(4)));
typedef double ops_d4 __attribute__((vector_size(32)));
#define OPS_V8(p) (*(ops_v8 *)(void *)(p))
#define OPS_V4D(p) __builtin_convertvector(*(const ops_v4 *)(const void *)(p), ops_d4)

/* Row x[0..n)'s sum of squares as ops_rmsnorm adds it: 8 double lanes, as
 * two vectors of 4 (the one sequential double sum was latency-bound), then
 * the lanes in order, then the tail one by one. SQ_STEP adds elements i..i+7
 * of a row into its pair of vectors, SQ_TOTAL finishes. */
#define SQ_STEP(xr, i, a0, a1)                                                               \
    do {                                                                                     \
        ops_d4 x0_ = OPS_V4D((xr) + (i)), x1_ = OPS_V4D((xr) + (i) + 4);                     \
        (a0) += x0_ * x0_;                                                                   \
        (a1) += x1_ * x1_;                                                                   \
    } while (0)
#define SQ_TOTAL(xr, n, i8, a0, a1, ss)                                                      \
    do {                                                                                     \
        (ss) = ((a0)[0] + (a0)[1]) + ((a0)[2] + (a0)[3]) +                                   \
               (((a1)[0] + (a1)[1]) + ((a1)[2] + (a1)[3]));                                  \
        for (int64_t i_ = (i8); i_ < (n); i_++)                                              \
            (ss) += (double)(xr)[i_] * (xr)[i_];                                             \
    } while (0)

static inline __attribute__((always_inline)) void
norm_row(const float *xt, const float *g, int64_t n, double ss, double eps, float *yt)
{
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    int64_t i = 0;
    if (!g) { /* no weight (Gemma 4's V) */
        for (; i + 8 <= n; i += 8)
            OPS_V8(yt + i) = OPS_V8(xt + i) * r;
        for (; i < n; i++)
            yt[i] = xt[i] * r;
        return;
    }
    for (; i + 8 <= n; i += 8)
        OPS_V8(yt + i) = OPS_V8(xt + i) * r * OPS_V8(g + i);
    for (; i < n; i++)
        yt[i] = xt[i] * r * g[i];
}

/* Four rows at a time: their eight chains of sums side by side, where one
 * row's two waited on each addition (the head norms' rows of 256 and the
 * norms of 576-640 were 1-2 % of a prefill); each row's sums in its own
 * order, so the same bits as a row alone. STEP is SQ_STEP or its AVX2 form,
 * V the accumulators' type. */
#define RMSNORM_ROWS(V, STEP)                                                                \
    do {                                                                                     \
        int64_t n8 = n / 8 * 8, t = 0;                                                       \
        for (; t + 4 <= n_tokens; t += 4) {                                                  \
            const float *x0 = x + t * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;           \
            V a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0}; \
            for (int64_t i = 0; i < n8; i += 8) {                                            \
                STEP(x0, i, a0, b0);                                                         \
                STEP(x1, i, a1, b1);                                                         \
                STEP(x2, i, a2, b2);                                                         \
                STEP(x3, i, a3, b3);                                                         \
            }                                                                                \
            double s0, s1, s2, s3;                                                           \
            SQ_TOTAL(x0, n, n8, a0, b0, s0);                                                 \
            SQ_TOTAL(x1, n, n8, a1, b1, s1);                                                 \
            SQ_TOTAL(x2, n, n8, a2, b2, s2);                                                 \
            SQ_TOTAL(x3, n, n8, a3, b3, s3);                                                 \
            norm_row(x0, g, n, s0, eps, y + t * n);                                          \
            norm_row(x1, g, n, s1, eps, y + (t + 1) * n);                                    \
            norm_row(x2, g, n, s2, eps, y + (t + 2) * n);                                    \
            norm_row(x3, g, n, s3, eps, y + (t + 3) * n);                                    \
        }                                                                                    \
        for (; t < n_tokens; t++) {                                                          \
            const float *xt = x + t * n;                                                     \
            V a0 = {0}, b0 = {0};                                                            \
            for (int64_t i = 0; i < n8; i += 8)                                              \
                STEP(xt, i, a0, b0);                                                         \
            double ss;                                                                       \
            SQ_TOTAL(xt, n, n8, a0, b0, ss);                                                 \
            norm_row(xt, g, n, ss, eps, y + t * n);                                          \
        }                                                                                    \
    } while (0)

static void rmsnorm_rows(const float *x, const float *g, int64_t n_tokens, int64_t n,
                         double eps, float *y)
{
    RMSNORM_ROWS(ops_d4, SQ_STEP);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SQ_STEP with one conversion instruction a vector: GCC lowers the generic
 * float-to-double conversion in 128-bit halves through the stack (most of
 * the norm's time). The same products and sums, so the same bits. */
#define SQ_STEP_AVX2(xr, i, a0, a1)                                                          \
    do {                                                                                     \
        __m256d x0_ = _mm256_cvtps_pd(_mm_loadu_ps((xr) + (i)));                             \
        __m256d x1_ = _mm256_cvtps_pd(_mm_loadu_ps((xr) + (i) + 4));                         \
        (a0) = _mm256_add_pd((a0), _mm256_mul_pd(x0_, x0_));                                 \
        (a1) = _mm256_add_pd((a1), _mm256_mul_pd(x1_, x1_));                                 \
    } while (0)

__attribute__((target("avx2"))) static void rmsnorm_rows_avx2(const float *x, const float *g,
                                                              int64_t n_tokens, int64_t n,
                                                              double eps, float *y)
{
    RMSNORM_ROWS(__m256d, SQ_STEP_AVX2);
}

#endif

void ops_rmsnorm(const float *x, const struct model_weight *w, int64_t n_tokens, int64_t n,
                 double eps, float *y)
{
    IG_ASSERT(!w || (w->type == QUANT_F32 && w->rows * w->cols == n));
    const float *g = w ? w->data : NULL;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ops_qmm_best_isa() != QMM_SCALAR) { /* AVX2 and up; IGNITE_SIMD=scalar: the C form */
        rmsnorm_rows_avx2(x, g, n_tokens, n, eps, y);
        return;
    }
#endif
    rmsnorm_rows(x, g, n_tokens, n, eps, y);
}

void ops_add_bias(float *x, const struct model_weight *bias, int64_t n_tokens, int64_t n)
{
    IG_ASSERT(bias->type == QUANT_F32 && bias->rows * bias->cols == n);
    const float *b = bias->data;
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < n; i++)
            x[t * n + i] += b[i];
}

void ops_rope_prepare(struct ops_ctx *ctx, const int64_t *pos, int64_t n_tokens)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t stride = model_rope_dims_max(hp) / 2, max_batch = ops_ctx_max_batch(ctx);
    IG_ASSERT(n_tokens <= max_batch);
    for (int r = 0; r < ops_ctx_n_rope(ctx); r++) {
        int64_t half = model_rope_dims(hp, r) / 2;
        double mscale;
        const double *inv = ops_ctx_rope_freqs(ctx, r, &mscale);
        float *cs = b->rope_cos + r * max_batch * stride;
        float *sn = b->rope_sin + r * max_batch * stride;
        for (int64_t t = 0; t < n_tokens; t++) {
            double p = (double)pos[t];
            for (int64_t i = 0; i < half; i++) {
                /* Angles in double: at pos 8000 an f32 angle would be off by ~1e-3. */
                double theta = p * inv[i];
                cs[t * stride + i] = (float)(cos(theta) * mscale);
                sn[t * stride + i] = (float)(sin(theta) * mscale);
            }
        }
    }
}

/* One head's pairs i < half rotated by (cs[i], sn[i]): a pair is dims 2i,
 * 2i + 1 (adjacent) or i, half + i. Eight lanes at a time where the
 * scalar loop was 1 % of a prefill: adjacent pairs as [x0 x1] lanes, the
 * swapped vector times [-s s] added (x0 c + x1 (-s) is x0 c - x1 s, x1 c +
 * x0 s is x0 s + x1 c: the same roundings), then the rest one by one. */
OPS_SIMD_CLONES
static void rope_head(float *v, const float *cs, const float *sn, int64_t half, bool adjacent)
{
    int64_t i = 0;
    if (adjacent)
        for (; i + 4 <= half; i += 4) {
            ops_v8 w = OPS_V8(v + 2 * i);
            ops_v4 c4 = *(const ops_v4 *)(const void *)(cs + i);
            ops_v4 s4 = *(const ops_v4 *)(const void *)(sn + i);
            ops_v8 c = __builtin_shufflevector(c4, c4, 0, 0, 1, 1, 2, 2, 3, 3);
            ops_v8 s = __builtin_shufflevector(s4, -s4, 4, 0, 5, 1, 6, 2, 7, 3);
            OPS_V8(v + 2 * i) = w * c + __builtin_shufflevector(w, w, 1, 0, 3, 2, 5, 4, 7, 6) * s;
        }
    else
        for (; i + 8 <= half; i += 8) {
            ops_v8 a = OPS_V8(v + i), b = OPS_V8(v + half + i);
            ops_v8 c = OPS_V8(cs + i), s = OPS_V8(sn + i);
            OPS_V8(v + i) = a * c - b * s;
            OPS_V8(v + half + i) = a * s + b * c;
        }
    int64_t gap = adjacent ? 1 : half, step = adjacent ? 2 : 1;
    for (; i < half; i++) {
        float *a = v + i * step, *c = a + gap;
        float x0 = *a, x1 = *c;
        *a = x0 * cs[i] - x1 * sn[i];
        *c = x0 * sn[i] + x1 * cs[i];
    }
}

void ops_rope_apply(struct ops_ctx *ctx, float *x, int64_t t0, int64_t t1, int64_t n_heads,
                    int rope)
{
    ops_rope_rows(ctx, x, t0, t1, n_heads, ops_ctx_model(ctx)->hp.head_dim, rope);
}

void ops_rope_rows(struct ops_ctx *ctx, float *x, int64_t t0, int64_t t1, int64_t n_heads,
                   int64_t hd, int rope)
{
    const struct model_hparams *hp = &ops_ctx_model(ctx)->hp;
    const struct ops_buffers *b = ops_ctx_buffers(ctx);
    IG_ASSERT(rope >= 0 && rope < ops_ctx_n_rope(ctx));
    IG_ASSERT(model_rope_dims(hp, rope) <= hd);
    int64_t half = model_rope_dims(hp, rope) / 2, stride = model_rope_dims_max(hp) / 2;
    const float *cos_t = b->rope_cos + rope * ops_ctx_max_batch(ctx) * stride;
    const float *sin_t = b->rope_sin + rope * ops_ctx_max_batch(ctx) * stride;
    bool adjacent = hp->rope_style == ROPE_ADJACENT;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < n_heads; h++)
            rope_head(x + (t * n_heads + h) * hd, cos_t + t * stride, sin_t + t * stride, half,
                      adjacent);
}

/* Elements per ops_exp_row call of the gates (a stack buffer). */
#define GATE_CHUNK 256

/* gate = gate * sigmoid(z) * up, z = gate (SwiGLU) or GELU's tanh form
 * 0.5 (1 + tanh(z)) = 1 / (1 + e^(-2z)) with z = sqrt(2 / pi) (g + 0.044715
 * g^3) (GeGLU; tanhf was a fifth of a prefill): one exponential per element,
 * several lanes at once (scalar expf was 4 % of a prefill): expf's bits
 * through ops_exp_row on the exact path, the int8 path's polynomial
 * (ops_exp_row_fused, a third of the cost) otherwise. */
OPS_SIMD_CLONES
static void gate_rows(float *gate, const float *up, int64_t n, bool gelu, bool exact)
{
    const float k2 = 2.0f * 0.7978845608028654f; /* 2 sqrt(2 / pi) */
    float e[GATE_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += GATE_CHUNK) {
        int64_t m = n - i0 < GATE_CHUNK ? n - i0 : GATE_CHUNK, i = 0;
        float *g = gate + i0;
        const float *u = up + i0;
        /* 8 lanes, then the rest one at a time: the same operations */
        for (; i + 8 <= m; i += 8)
            OPS_V8(e + i) = gelu ? -k2 * (OPS_V8(g + i) + 0.044715f * OPS_V8(g + i) *
                                                                OPS_V8(g + i) * OPS_V8(g + i))
                                 : -OPS_V8(g + i);
        for (; i < m; i++)
            e[i] = gelu ? -k2 * (g[i] + 0.044715f * g[i] * g[i] * g[i]) : -g[i];
        if (exact) /* x - 0.0f is x */
            ops_exp_row(e, m, 0.0f);
        else
            ops_exp_row_fused(e, m, 0.0f);
        for (i = 0; i + 8 <= m; i += 8)
            OPS_V8(g + i) = OPS_V8(g + i) / (1.0f + OPS_V8(e + i)) * OPS_V8(u + i);
        for (; i < m; i++)
            g[i] = g[i] / (1.0f + e[i]) * u[i];
    }
}

void ops_swiglu(float *gate, const float *up, int64_t n, bool exact)
{
    gate_rows(gate, up, n, false, exact);
}

void ops_geglu(float *gate, const float *up, int64_t n, bool exact)
{
    gate_rows(gate, up, n, true, exact);
}

void ops_swiglu_oai(float *gate, const float *up, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        /* std::min and std::clamp's comparisons: a NaN goes through */
        float g = limit < gate[i] ? limit : gate[i];
        float u = up[i] < -limit ? -limit : limit < up[i] ? limit : up[i];
        gate[i] = g / (1.0f + expf(alpha * -g)) * (u + 1.0f);
    }
}

void ops_softcap(float *x, int64_t n, double cap)
{
    float c = (float)cap, inv = (float)(1.0 / cap);
    for (int64_t i = 0; i < n; i++)
        x[i] = c * tanhf(x[i] * inv);
}

OPS_SIMD_CLONES
void ops_add(float *x, const float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        OPS_V8(x + i) = OPS_V8(x + i) + OPS_V8(y + i);
    for (; i < n; i++)
        x[i] += y[i];
}
