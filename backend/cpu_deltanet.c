/* backend/cpu_deltanet.c: the gated DeltaNet mixer of the CPU backend
 * (LAYER_MIXER_DELTANET, backend/cpu_layer.h; Qwen3.5's linear attention,
 * transformers' Qwen3_5GatedDeltaNet as llama.cpp's converter stores it).
 *
 * Per row: RMSNorm, then q|k|v (attn_qkv), the gate z (attn_gate), beta and
 * alpha (one each per value head); a causal depthwise convolution of width
 * dn_conv over each channel of q|k|v, continuing the sequence's last inputs
 * (its conv state), and SiLU; q and k L2-normalized per head, q scaled by
 * 1/sqrt(head dim); beta = sigmoid(beta), the log decay g = A softplus(alpha
 * + dt) (A = -exp(A_log) as stored). Per value head h (reading key head
 * h % k_heads in the converter's tiled order; h / (v_heads / k_heads) in a
 * folder's grouped one, dn_grouped) the delta rule on its state S [head_dim
 * keys, head_dim values]:
 *
 *   S_t = e^(g_t) S_(t-1) + k_t (beta_t (v_t - e^(g_t) S_(t-1)^T k_t))^T,
 *   o_t = S_t^T q_t
 *
 * A prompt chunk runs in the chunked form (chunks of DN_CHUNK positions,
 * ending at multiples of DN_CHUNK: within
 * a chunk the WY / UT transform T = (I + strictly-lower(beta k k^T decay))^-1
 * makes the chunk's corrections at once, and the state is carried from one
 * chunk to the next: the Gated DeltaNet paper's form, transformers'
 * torch_chunk_gated_delta_rule); a decode row (one row of its sequence) the
 * recurrent step (a prompt's rows, however few, the chunked form; a
 * prompt cut inside a chunk keeps a checkpoint and runs that chunk again
 * whole in its next step: "the checkpoint" below). Then o's RMSNorm per
 * head times the norm weight (as
 * stored: the converter does not widen it) times silu(z), and ssm_out into
 * proj. A sequence whose rows start at position 0 starts from a zero state.
 *
 * The state of a sequence (kvcache's recurrent group, in its slot,
 * kv_deltanet_state_bytes): [dn_conv - 1, channels] the convolution's last
 * inputs, oldest first, then per value head S as [key i][value j].
 * IGNITE_DELTANET=recurrent runs every row in the recurrent form (a test's
 * second path); IGNITE_DELTANET_TRACE=1 says on stderr which form each
 * sequence's rows ran in. Covered by tests/cpu/test_deltanet.py (an fp64
 * numpy forward, token by token, from transformers' recurrent form). */
#include "backend/cpu_layer.h"

#include "core/status.h"
#include "ops/exp_row.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a chunk of the chunked form (flash-linear-attention's and
 * llama.cpp's 64; the engine's prompt cuts fall on its multiples). */
#define DN_CHUNK BACKEND_STATE_CHUNK
_Static_assert(DN_CHUNK == KV_DELTANET_CHUNK, "the checkpoint holds a chunk's rows");

/* What every job of a layer's step reads. */
struct dn_job {
    struct cpu_step *s;
    const struct model_layer *L;
    int64_t layer;
    int64_t n;                   /* the step's rows */
    int64_t C, Hk, Hv, D, K;     /* channels, key heads, value heads, head dim, kernel */
    int64_t conv_w;              /* channels of a convolution item (conv_width) */
    float *qkv, *z, *beta, *g, *out; /* [n, C], [n, Hv*D], [n, Hv], [n, Hv], [n, Hv*D] */
    bool recurrent;              /* every row by the recurrent step */
    bool ckpt;                   /* the store keeps a checkpoint (kv_deltanet_ckpt_bytes) */
    int ckpt_read, ckpt_take;    /* the step's slots continuing it and keeping it (backend.h,
                                  * struct backend_ckpt_plan; -1: none) */
    bool grouped;                /* value heads grouped by key head (struct model_layer) */
};

/* The key head value head h reads: tiled (a GGUF: h % Hk) or grouped (a
 * folder: h / (Hv / Hk)); the same pairs, the value heads numbered apart. */
static int64_t key_head(const struct dn_job *j, int64_t h)
{
    return j->grouped ? h / (j->Hv / j->Hk) : h % j->Hk;
}

static float *conv_state(const struct dn_job *j, int64_t slot)
{
    return kv_store_state(j->s->kv, j->layer, slot);
}

static float *mat_state(const struct dn_job *j, int64_t slot, int64_t h)
{
    return conv_state(j, slot) + (j->K - 1) * j->C + h * j->D * j->D;
}

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Eight floats at any alignment (GCC's vector extension: one AVX register
 * in the x86-64-v3 clone, two SSE ones in the baseline). */
typedef float dn_v8 __attribute__((vector_size(32), aligned(4)));
#define V8(p) (*(dn_v8 *)(void *)(p))
/* Sixteen: one AVX-512 register in the x86-64-v4 clones (OPS_SIMD_CLONES_V4:
 * the convolution, the row steps, chunk_rows), two AVX ones in the v3
 * clones. The element-wise steps below (conv_row, axpy, scale, gemm_acc)
 * run 16 lanes, then 8, then one at a time: each element's operations are
 * the same in any lane or width, so every clone gives the same bits. */
typedef float dn_v16 __attribute__((vector_size(64), aligned(4)));
#define V16(p) (*(dn_v16 *)(void *)(p))

/* ---- the convolution: items are (sequence, block of conv_w channels) --------- */

/* The widest block of channels a convolution item takes. An item walks its
 * sequence's rows, C floats apart (24 KiB on Qwen3.5-0.8B), and each row's
 * block starts on a new page: blocks of 64 channels (256 bytes) a row made
 * the walk wait on memory and TLB misses (the convolution was 14 % of a
 * pp4096 on Qwen3.5-0.8B, 2 threads), blocks of 512 take 8x fewer. */
#define DN_CONV_W_MAX 512

/* Channels of a convolution item: a multiple of 64 up to DN_CONV_W_MAX,
 * leaving at least four items a thread for a lone sequence. Each element's
 * operations are the same at any width: the same bits. */
static int64_t conv_width(int64_t C, int threads)
{
    int64_t w = (C + 63) / 64 / (4 * (int64_t)threads);
    w = w < 1 ? 1 : w > DN_CONV_W_MAX / 64 ? DN_CONV_W_MAX / 64 : w;
    return 64 * w;
}

/* Floats of a thread's scratch the convolution takes: the kernel
 * transposed [K][W], the ring of the last K - 1 inputs [K - 1][W], a row's
 * -outputs, then their exponentials [W]. */
static int64_t conv_scratch_floats(int64_t K)
{
    return 2 * K * DN_CONV_W_MAX;
}

/* One row's block of nc channels: x[c] = silu(w_(K-1) x[c] + sum_i w_i
 * hist_i[c]), the taps oldest first (ring slot (t + i) % (K - 1)), x's
 * inputs into the ring's oldest slot; 16 lanes, then 8, then one at a
 * time, each element's operations in that order in every width. The
 * SiLU's expf through ops_exp_row (its bits, several lanes a call): one
 * expf call an element was a third of the convolution's time. */
static inline __attribute__((always_inline)) void
conv_row(float *restrict x, const float *restrict wt, float *restrict hist, float *restrict e,
         int64_t t, int64_t K, int64_t W, int64_t nc)
{
    float *slot = K > 1 ? hist + t % (K - 1) * W : NULL; /* the oldest input, replaced */
    int64_t c = 0;
#define CONV_STEP(V, lanes)                                                                  \
    for (; c + (lanes) <= nc; c += (lanes)) {                                                \
        __typeof__(V(x)) in = V(x + c), acc = V(wt + (K - 1) * W + c) * in;                 \
        for (int64_t i = 0; i < K - 1; i++)                                                  \
            acc += V(wt + i * W + c) * V(hist + (t + i) % (K - 1) * W + c);                  \
        if (slot)                                                                            \
            V(slot + c) = in;                                                                \
        V(x + c) = acc;                                                                      \
        V(e + c) = -acc;                                                                     \
    }
    CONV_STEP(V16, 16)
    CONV_STEP(V8, 8)
#undef CONV_STEP
    for (; c < nc; c++) {
        float in = x[c], acc = wt[(K - 1) * W + c] * in;
        for (int64_t i = 0; i < K - 1; i++)
            acc += wt[i * W + c] * hist[(t + i) % (K - 1) * W + c];
        if (slot)
            slot[c] = in;
        x[c] = acc;
        e[c] = -acc;
    }
    ops_exp_row(e, nc, 0.0f); /* expf(-x) (-x - 0 is -x) */
    for (c = 0; c + 16 <= nc; c += 16)
        V16(x + c) = V16(x + c) / (1.0f + V16(e + c)); /* SiLU */
    for (; c < nc; c++)
        x[c] = x[c] / (1.0f + e[c]);
}

OPS_SIMD_CLONES_V4
static void conv_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    int64_t W = j->conv_w, nblk = (j->C + W - 1) / W, K = j->K;
    const float *w = j->L->w[LAYER_DN_CONV].data; /* [C, K] */
    float *wt = ops_ctx_scratch(j->s->ops, thread); /* [K][W] */
    float *hist = wt + K * W;                       /* [K - 1][W] */
    float *e = hist + (K - 1) * W;                  /* [W] */
    for (int64_t it = i0; it < i1; it++) {
        const struct backend_seq *q = &j->s->batch->seqs[it / nblk];
        int64_t c0 = it % nblk * W, nc = c0 + W < j->C ? W : j->C - c0;
        float *st = conv_state(j, q->slot);
        /* the last K - 1 inputs of the block's channels, oldest first, as a
         * ring (K <= 64: model.c) */
        for (int64_t i = 0; i < K - 1; i++)
            memcpy(hist + i * W, st + i * j->C + c0, (size_t)nc * sizeof(float));
        for (int64_t i = 0; i < K; i++)
            for (int64_t c = 0; c < nc; c++)
                wt[i * W + c] = w[(c0 + c) * K + i];
        for (int64_t t = 0; t < q->n_rows; t++) {
            float *x = j->qkv + (q->row0 + t) * j->C + c0;
            /* two rows ahead: the next page's lines on their way */
            if (t + 2 < q->n_rows)
                for (int64_t c = 0; c < nc; c += 16)
                    __builtin_prefetch(x + 2 * j->C + c, 1);
            conv_row(x, wt, hist, e, t, K, W, nc);
        }
        for (int64_t i = 0; i < K - 1; i++)
            memcpy(st + i * j->C + c0, hist + (q->n_rows + i) % (K - 1) * W,
                   (size_t)nc * sizeof(float));
    }
}

/* ---- per row: L2 norms of q and k, beta and the decay ------------------------- */

/* y *= a over n. */
static inline __attribute__((always_inline)) void scale(float *y, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        V16(y + i) *= a;
    for (; i + 8 <= n; i += 8)
        V8(y + i) *= a;
    for (; i < n; i++)
        y[i] *= a;
}

/* ss[k] = the sum of x_k[i]^2 in double, i ascending, for the four rows
 * x_k = x + k stride of n floats: four chains of adds side by side where
 * each row's one add waited on its last (the same sums, in the same order,
 * as a row alone). */
static inline __attribute__((always_inline)) void
sumsq4(const float *x, int64_t stride, int64_t n, double ss[4])
{
    const float *x0 = x, *x1 = x0 + stride, *x2 = x1 + stride, *x3 = x2 + stride;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += (double)x0[i] * x0[i];
        s1 += (double)x1[i] * x1[i];
        s2 += (double)x2[i] * x2[i];
        s3 += (double)x3[i] * x3[i];
    }
    ss[0] = s0, ss[1] = s1, ss[2] = s2, ss[3] = s3;
}

/* ss[h] = sumsq4's sum of row h of the n_rows rows of n floats, stride
 * apart, four at a time. */
static inline __attribute__((always_inline)) void
sumsq_rows(const float *x, int64_t stride, int64_t n_rows, int64_t n, double *ss)
{
    int64_t h = 0;
    for (; h + 4 <= n_rows; h += 4)
        sumsq4(x + h * stride, stride, n, ss + h);
    for (; h < n_rows; h++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)x[h * stride + i] * x[h * stride + i];
        ss[h] = s;
    }
}

/* The heads of q and k L2-normalized (2 Hk heads of D floats from row),
 * q's scaled by qscale: transformers' l2norm, x / sqrt(sum x^2 + 1e-6). */
static inline __attribute__((always_inline)) void
l2norm_heads(const struct dn_job *j, float *row, float qscale, double *ss)
{
    sumsq_rows(row, j->D, 2 * j->Hk, j->D, ss);
    for (int64_t h = 0; h < 2 * j->Hk; h++) {
        float r = (float)(1.0 / sqrt(ss[h] + 1e-6)) * (h < j->Hk ? qscale : 1.0f);
        scale(row + h * j->D, r, j->D);
    }
}

/* The thread's scratch as doubles past its first `floats` floats. */
static double *scratch_doubles(const struct dn_job *j, int thread, int64_t floats)
{
    return (double *)(void *)(ops_ctx_scratch(j->s->ops, thread) + (floats + 1) / 2 * 2);
}

OPS_SIMD_CLONES_V4
static void gates_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct dn_job *j = arg;
    double *ss = scratch_doubles(j, thread, 0); /* [2 Hk] */
    const float *dt = j->L->w[LAYER_DN_DT].data, *A = j->L->w[LAYER_DN_A].data;
    float qscale = 1.0f / sqrtf((float)j->D);
    for (int64_t r = r0; r < r1; r++) {
        l2norm_heads(j, j->qkv + r * j->C, qscale, ss);
        for (int64_t h = 0; h < j->Hv; h++) {
            float *b = j->beta + r * j->Hv + h, *g = j->g + r * j->Hv + h;
            *b = sigmoidf(*b);
            float a = *g + dt[h];
            float sp = a > 20.0f ? a : log1pf(expf(a)); /* softplus, as torch's threshold */
            *g = A[h] * sp;
        }
    }
}

/* ---- the delta rule: items are (sequence, value head) ------------------------- */

/* Row t's q, k (of key head kh) and v (of value head h). */
#define QROW(j, t, kh) ((j)->qkv + (t) * (j)->C + (kh) * (j)->D)
#define KROW(j, t, kh) ((j)->qkv + (t) * (j)->C + ((j)->Hk + (kh)) * (j)->D)
#define VROW(j, t, h) ((j)->qkv + (t) * (j)->C + (2 * (j)->Hk + (h)) * (j)->D)

/* out[m] = a.b_m for m < n, the rows b_m given transposed (the chunk's
 * keys): b_m's element d at bt[d ldt + m] (columns up to n rounded up to 16
 * readable, ldt >= that). Each a.b_m in one order of operations: eight
 * partial sums, element d into sum d % 8 (d ascending), combined as ((s0 +
 * s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)), then the elements past the
 * last multiple of 8 one at a time; the eight sums are the lanes of the
 * 8-lane dot these were before, so the same bits. 16 rows a vector: 16
 * multiply-adds an instruction where that dot's steps, four rows at a
 * time, had 8. */
static inline __attribute__((always_inline)) void
dots_t(const float *restrict a, const float *restrict bt, int64_t ldt, int64_t n, int64_t len,
       float *restrict out)
{
    for (int64_t m = 0; m < n; m += 16) {
        const float *b = bt + m;
        dn_v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
        int64_t d = 0;
        for (; d + 8 <= len; d += 8) {
            const float *bd = b + d * ldt;
            s0 += a[d] * V16(bd);
            s1 += a[d + 1] * V16(bd + ldt);
            s2 += a[d + 2] * V16(bd + 2 * ldt);
            s3 += a[d + 3] * V16(bd + 3 * ldt);
            s4 += a[d + 4] * V16(bd + 4 * ldt);
            s5 += a[d + 5] * V16(bd + 5 * ldt);
            s6 += a[d + 6] * V16(bd + 6 * ldt);
            s7 += a[d + 7] * V16(bd + 7 * ldt);
        }
        dn_v16 sum = ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7));
        for (; d < len; d++)
            sum += a[d] * V16(b + d * ldt);
        if (n - m >= 16)
            V16(out + m) = sum;
        else
            for (int64_t l = 0; l < n - m; l++)
                out[m + l] = sum[l];
    }
}

/* y += a x over n. */
static inline void axpy(float *restrict y, float a, const float *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        V16(y + i) += a * V16(x + i);
    for (; i + 8 <= n; i += 8)
        V8(y + i) += a * V8(x + i);
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* y = x a over n (a copy then scale(), in one pass). */
static inline void copy_scaled(float *restrict y, const float *restrict x, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        V16(y + i) = V16(x + i) * a;
    for (; i + 8 <= n; i += 8)
        V8(y + i) = V8(x + i) * a;
    for (; i < n; i++)
        y[i] = x[i] * a;
}

/* Y[r] += sum_k A[r a_rs + k a_cs] B[k] over rows r < rows, k < inner, each
 * row of Y and B n floats (ldy, ldb apart): four rows of Y at a time, so
 * each row of B is loaded once for four, 16 columns of them held in
 * registers over the whole sum (k ascending for every element, as axpy's
 * would add them one k at a time: the same bits). Inlined, so that each
 * clone of its caller has its own (an AVX-512 caller calling a baseline
 * copy ran slower than the AVX2 clone had). With tri >= 0, A is lower
 * triangular: row r's A is zero at every k > r + tri (the chunk's T, zero
 * above its diagonal, set so), and a group of four rows stops at the last
 * k its last row reads: half the multiply-adds of a chunk's T products.
 * What that leaves out is (+0) B added to a sum: the sum's bits unless it
 * is -0 or B is not finite. With zero true, Y's rows start from 0 (not
 * read): the sums 0 + ... as from rows set to zero, without the memset. */
static inline __attribute__((always_inline)) void
gemm_acc(float *restrict Y, int64_t ldy, const float *A, int64_t a_rs, int64_t a_cs,
         const float *B, int64_t ldb, int64_t rows, int64_t inner, int64_t n, int64_t tri,
         bool zero)
{
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        int64_t ks = tri >= 0 && r + 4 + tri < inner ? r + 4 + tri : inner;
        float *y0 = Y + r * ldy, *y1 = y0 + ldy, *y2 = y1 + ldy, *y3 = y2 + ldy;
        const float *a0 = A + r * a_rs, *a1 = a0 + a_rs, *a2 = a1 + a_rs, *a3 = a2 + a_rs;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            dn_v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
            if (!zero)
                s0 = V16(y0 + i), s1 = V16(y1 + i), s2 = V16(y2 + i), s3 = V16(y3 + i);
            for (int64_t k = 0; k < ks; k++) {
                dn_v16 bv = V16(B + k * ldb + i);
                s0 += a0[k * a_cs] * bv;
                s1 += a1[k * a_cs] * bv;
                s2 += a2[k * a_cs] * bv;
                s3 += a3[k * a_cs] * bv;
            }
            V16(y0 + i) = s0;
            V16(y1 + i) = s1;
            V16(y2 + i) = s2;
            V16(y3 + i) = s3;
        }
        if (zero)
            for (int64_t l = i; l < n; l++)
                y0[l] = y1[l] = y2[l] = y3[l] = 0.0f;
        for (int64_t k = 0; k < ks && i < n; k++) {
            const float *b = B + k * ldb;
            float c0 = a0[k * a_cs], c1 = a1[k * a_cs], c2 = a2[k * a_cs], c3 = a3[k * a_cs];
            for (int64_t l = i; l < n; l++) {
                y0[l] += c0 * b[l];
                y1[l] += c1 * b[l];
                y2[l] += c2 * b[l];
                y3[l] += c3 * b[l];
            }
        }
    }
    for (; r < rows; r++) {
        int64_t ks = tri >= 0 && r + 1 + tri < inner ? r + 1 + tri : inner;
        if (zero)
            memset(Y + r * ldy, 0, (size_t)n * sizeof *Y);
        for (int64_t k = 0; k < ks; k++)
            axpy(Y + r * ldy, A[r * a_rs + k * a_cs], B + k * ldb, n);
    }
}

/* One row t of head h by the recurrent step: S and o. */
OPS_SIMD_CLONES
static void step_row(const struct dn_job *j, float *S, int64_t t, int64_t h, float *kv)
{
    int64_t D = j->D, kh = key_head(j, h);
    const float *q = QROW(j, t, kh), *k = KROW(j, t, kh), *v = VROW(j, t, h);
    float decay = expf(j->g[t * j->Hv + h]), beta = j->beta[t * j->Hv + h];
    scale(S, decay, D * D);
    memset(kv, 0, (size_t)D * sizeof *kv); /* S^T k */
    for (int64_t i = 0; i < D; i++)
        axpy(kv, k[i], S + i * D, D);
    for (int64_t c = 0; c < D; c++)
        kv[c] = beta * (v[c] - kv[c]);
    for (int64_t i = 0; i < D; i++)
        axpy(S + i * D, k[i], kv, D);
    float *o = j->out + t * j->Hv * D + h * D;
    memset(o, 0, (size_t)D * sizeof *o);
    for (int64_t i = 0; i < D; i++)
        axpy(o, q[i], S + i * D, D);
}

/* A chunk's rows of one head as chunk_rows reads them: row i's q at
 * q + (i - p0) qs (rows from p0 on), its k at k + i ks, v at v + i vs, its
 * decay and beta at g[i gs], beta[i gs]; row i's output goes to
 * o + (i - p0) os. */
struct dn_rows {
    const float *q, *k, *v, *g, *beta;
    int64_t qs, ks, vs, gs;
    float *o;
    int64_t os;
};

/* Rows [0, c) of one head as one chunk (c <= DN_CHUNK), from and into S; the
 * outputs of rows [p0, c) only (the rows before p0 were a prompt's rows of
 * an earlier step, run again from its checkpoint for the state: each
 * output row's operations are the same whatever c and p0, so its bits are
 * those of the whole chunk; tests/cpu/test_deltanet.py). sc: the thread's
 * scratch of dn_scratch_floats. */
OPS_SIMD_CLONES_V4
static void chunk_rows(const struct dn_job *j, float *S, const struct dn_rows *r, int64_t c,
                       int64_t p0, float *sc)
{
    int64_t D = j->D;
    float *G = sc;                      /* [c] cumulative log decay */
    float *T = G + DN_CHUNK;            /* [c, c] (I + lower)^-1, then q.k decay */
    float *U = T + DN_CHUNK * DN_CHUNK; /* [c, D] T (beta v), then v_new */
    float *W = U + DN_CHUNK * D;        /* [c, D] T (beta e^G k) */
    float *X = W + DN_CHUNK * D;        /* [c, D] rows being combined */
    float *VB = X + DN_CHUNK * D;       /* [c, D] beta v */
    float *E = VB + DN_CHUNK * D;       /* [c, c] e^(G_i - G_m) for m <= i */
    float *KC = E + DN_CHUNK * DN_CHUNK; /* [c, D] the chunk's keys, side by side */
    float *KT = KC + DN_CHUNK * D;       /* [D, DN_CHUNK] and transposed (dots_t) */
    float acc = 0;
    for (int64_t i = 0; i < c; i++) {
        acc += r->g[i * r->gs];
        G[i] = acc;
    }
    /* the keys, read c times each below, copied out of their rows C floats
     * apart: a multiple of 4 KiB there, all c of them fell in the same few
     * L1 sets and evicted each other */
    for (int64_t m = 0; m < c; m++)
        memcpy(KC + m * D, r->k + m * r->ks, (size_t)D * sizeof *KC);
    /* KT's columns up to c rounded up to 16 (dots_t reads them; those past
     * c come out in lanes never stored) */
    int64_t c16 = (c + 15) / 16 * 16;
    for (int64_t d = 0; d < D; d++)
        for (int64_t m = 0; m < c16; m++)
            KT[d * DN_CHUNK + m] = m < c ? KC[m * D + d] : 0.0f;
    /* T = (I - M)^-1 by forward substitution, M[i][m] = -beta_i k_i.k_m
     * e^(G_i - G_m) for m < i (transformers' loop over the rows) */
    for (int64_t i = 0; i < c; i++) {
        const float *ki = KC + i * D;
        float bi = r->beta[i * r->gs];
        float *Ti = T + i * c, *Mi = X, *Ei = E + i * c; /* row i of M, then of T */
        dots_t(ki, KT, DN_CHUNK, i, D, Mi);
        for (int64_t m = 0; m <= i; m++)
            Ei[m] = G[i] - G[m];
        ops_exp_row(Ei, i + 1, 0.0f); /* expf's bits, several lanes a call */
        for (int64_t m = 0; m < i; m++)
            Mi[m] = -bi * Mi[m] * Ei[m];
        /* T_i = sum_(m < i) M_im T_m over the rows already solved (T_mm = 1);
         * row m of T is zero beyond m */
        for (int64_t p = 0; p < c; p++)
            Ti[p] = 0.0f;
        for (int64_t m = 0; m < i; m++)
            axpy(Ti, Mi[m], T + m * c, m + 1);
        Ti[i] = 1.0f;
    }
    /* U = T (beta v), W = T (beta e^G k): the scaled rows into VB and X
     * first, then the products (T's zeros above the diagonal included) */
    for (int64_t m = 0; m < c; m++) {
        float bm = r->beta[m * r->gs];
        copy_scaled(VB + m * D, r->v + m * r->vs, bm, D);
        copy_scaled(X + m * D, KC + m * D, bm * expf(G[m]), D);
    }
    gemm_acc(U, D, T, c, 1, VB, D, c, c, D, 0, true);
    gemm_acc(W, D, T, c, 1, X, D, c, c, D, 0, true);
    /* v_new = U - W S (into U) */
    gemm_acc(X, D, W, D, 1, S, D, c, D, D, -1, true);
    for (int64_t i = 0; i < c; i++)
        axpy(U + i * D, -1.0f, X + i * D, D);
    /* o_i = e^(G_i) q_i S + sum_(m <= i) (q_i.k_m) e^(G_i - G_m) v_new_m */
    int64_t n_out = c - p0;
    gemm_acc(r->o, r->os, r->q, r->qs, 1, S, D, n_out, D, D, -1, true);
    /* the chunk's own part: T := (q_i.k_m) e^(G_i - G_m) for m <= i, 0 above */
    for (int64_t i = p0; i < c; i++) {
        const float *qi = r->q + (i - p0) * r->qs;
        scale(r->o + (i - p0) * r->os, expf(G[i]), D);
        float *Ti = T + i * c;
        dots_t(qi, KT, DN_CHUNK, i + 1, D, Ti);
        for (int64_t m = 0; m < c; m++)
            Ti[m] = m <= i ? Ti[m] * E[i * c + m] : 0.0f;
    }
    gemm_acc(r->o, r->os, T + p0 * c, c, 1, U, D, n_out, c, D, p0, false);
    /* S = e^(G_last) S + sum_m (e^(G_last - G_m) k_m) v_new_m^T */
    float last = G[c - 1], el = expf(last);
    scale(S, el, D * D);
    for (int64_t m = 0; m < c; m++) { /* X = the decayed keys [c, D] */
        copy_scaled(X + m * D, KC + m * D, expf(last - G[m]), D);
    }
    gemm_acc(S, D, X, 1, D, U, D, D, c, D, -1, false);
}

/* Floats of chunk_rows's scratch. */
static int64_t dn_chunk_floats(int64_t D)
{
    return DN_CHUNK + 2 * DN_CHUNK * DN_CHUNK + 6 * DN_CHUNK * D + D;
}

/* and the rows of a chunk run again gathered after it: k, v [DN_CHUNK, D],
 * g, beta [DN_CHUNK] */
static int64_t dn_scratch_floats(int64_t D)
{
    return dn_chunk_floats(D) + 2 * DN_CHUNK * D + 2 * DN_CHUNK;
}

/* ---- the checkpoint of a prompt cut mid-chunk ---------------------------------
 *
 * A chunk's state is the whole chunk's only when its rows ran in one
 * chunk_rows. When a step ends a prompt's rows inside a chunk (a row budget
 * under 64, decode rows filling the step), the sequence's checkpoint keeps
 * S as it was where that chunk began and the chunk's rows so far (their
 * keys, values, decay and beta: what the state update reads); the prompt's
 * next step runs the whole chunk from there, those rows first with their
 * outputs not written (they are the same bits as they were: chunk_rows),
 * so every chunk's state is the bits of the prompt in one step whatever
 * cut it. S itself is always the state after the step's last row (a
 * decode row, a saved cache read it). The convolution needs nothing: each
 * of its rows is the same operations at any cut. */

/* The header of the checkpoint (KV_STATE_ALIGN bytes; zero: none): the
 * position of the chunk's first row, how many rows it holds, whose slot.
 * One checkpoint serves the pool: backend_step says which sequence of the
 * step continues it (ckpt_read) and which keeps a new one (ckpt_take);
 * no other sequence reads or touches it. */

_Static_assert(sizeof(struct kv_ckpt_head) <= KV_STATE_ALIGN, "the header fits its bytes");

/* Floats of a pending row: k [Hk D], v [Hv D], g [Hv], beta [Hv]. */
static int64_t ckpt_row_floats(const struct dn_job *j)
{
    return (j->Hk + j->Hv) * j->D + 2 * j->Hv;
}

static float *ckpt_mat(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t h)
{
    return (float *)(void *)((char *)ck + KV_STATE_ALIGN) + h * j->D * j->D;
}

static float *ckpt_row(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t i)
{
    return ckpt_mat(j, ck, j->Hv) + i * ckpt_row_floats(j);
}

/* The checkpoint where q's prompt continues or keeps it this step; else NULL. */
static struct kv_ckpt_head *seq_ckpt(const struct dn_job *j, const struct backend_seq *q)
{
    if (!j->ckpt || !q->prompt || (q->slot != j->ckpt_read && q->slot != j->ckpt_take))
        return NULL;
    return kv_store_ckpt(j->s->kv, j->layer);
}

/* Rows of q's unfinished chunk an earlier step ran (0: none): the
 * checkpoint's where it is q's slot's and ends where q's rows start. */
static int64_t ckpt_pending(const struct dn_job *j, const struct backend_seq *q)
{
    const struct kv_ckpt_head *ck = q->slot == j->ckpt_read ? seq_ckpt(j, q) : NULL;
    return ck && q->pos0 > 0 && ck->n > 0 && ck->slot == q->slot && ck->pos + ck->n == q->pos0
               ? ck->n
               : 0;
}

/* Rows [0, c) of head h's chunk whose first p rows are the checkpoint's,
 * gathered into g0 (the scratch after chunk_rows's), the rest the step's
 * from row t; rows p on output. */
static struct dn_rows gather_rows(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t p,
                                  int64_t t, int64_t c, int64_t h, float *g0)
{
    int64_t D = j->D, kh = key_head(j, h), kv = (j->Hk + j->Hv) * D;
    float *K = g0, *V = K + DN_CHUNK * D, *G = V + DN_CHUNK * D, *B = G + DN_CHUNK;
    for (int64_t i = 0; i < p; i++) {
        const float *row = ckpt_row(j, ck, i);
        memcpy(K + i * D, row + kh * D, (size_t)D * sizeof *K);
        memcpy(V + i * D, row + (j->Hk + h) * D, (size_t)D * sizeof *V);
        G[i] = row[kv + h];
        B[i] = row[kv + j->Hv + h];
    }
    for (int64_t i = p; i < c; i++) {
        int64_t r = t + i - p;
        memcpy(K + i * D, KROW(j, r, kh), (size_t)D * sizeof *K);
        memcpy(V + i * D, VROW(j, r, h), (size_t)D * sizeof *V);
        G[i] = j->g[r * j->Hv + h];
        B[i] = j->beta[r * j->Hv + h];
    }
    return (struct dn_rows){.q = QROW(j, t, kh), .qs = j->C, .k = K, .ks = D, .v = V, .vs = D,
                            .g = G, .beta = B, .gs = 1,
                            .o = j->out + t * j->Hv * D + h * D, .os = j->Hv * D};
}

/* Rows [t, t + c) of the step, head h. */
static struct dn_rows step_rows(const struct dn_job *j, int64_t t, int64_t h)
{
    int64_t kh = key_head(j, h);
    return (struct dn_rows){.q = QROW(j, t, kh), .k = KROW(j, t, kh), .v = VROW(j, t, h),
                            .qs = j->C, .ks = j->C, .vs = j->C,
                            .g = j->g + t * j->Hv + h, .beta = j->beta + t * j->Hv + h,
                            .gs = j->Hv, .o = j->out + t * j->Hv * j->D + h * j->D,
                            .os = j->Hv * j->D};
}

static void rule_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    float *sc = ops_ctx_scratch(j->s->ops, thread);
    int64_t D = j->D;
    for (int64_t it = i0; it < i1; it++) {
        const struct backend_seq *q = &j->s->batch->seqs[it / j->Hv];
        int64_t h = it % j->Hv;
        float *S = mat_state(j, q->slot, h);
        if (j->recurrent || (q->n_rows == 1 && !q->prompt)) {
            for (int64_t t = 0; t < q->n_rows; t++)
                step_row(j, S, q->row0 + t, h, sc);
            continue;
        }
        struct kv_ckpt_head *ck = seq_ckpt(j, q);
        int64_t p = ckpt_pending(j, q), end = q->pos0 + q->n_rows;
        if (p) /* the unfinished chunk again, from its start */
            memcpy(S, ckpt_mat(j, ck, h), (size_t)(D * D) * sizeof *S);
        /* chunks end at multiples of DN_CHUNK positions: a prompt split
         * into steps anywhere runs the same chunks, bit for bit */
        for (int64_t pos = q->pos0 - p, c; pos < end; pos += c) {
            c = DN_CHUNK - pos % DN_CHUNK;
            c = end - pos < c ? end - pos : c;
            if (ck && q->slot == j->ckpt_take && pos + c == end && end % DN_CHUNK &&
                pos >= q->pos0)
                memcpy(ckpt_mat(j, ck, h), S, (size_t)(D * D) * sizeof *S);
            int64_t t = q->row0 + pos - q->pos0;
            if (pos < q->pos0) {
                struct dn_rows r = gather_rows(j, ck, p, q->row0, c, h, sc + dn_chunk_floats(D));
                chunk_rows(j, S, &r, c, p, sc);
            } else {
                struct dn_rows r = step_rows(j, t, h);
                chunk_rows(j, S, &r, c, 0, sc);
            }
        }
    }
}

/* After the delta rule: the taker's checkpoint holds its unfinished
 * chunk's rows (rule_task wrote S at its start); a holder continuing it
 * and keeping none gives it back; no other sequence touches it. */
static void ckpt_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    (void)thread;
    const struct dn_job *j = arg;
    int64_t kv = (j->Hk + j->Hv) * j->D;
    for (int64_t i = i0; i < i1; i++) {
        const struct backend_seq *q = &j->s->batch->seqs[i];
        struct kv_ckpt_head *ck = seq_ckpt(j, q);
        if (!ck)
            continue;
        int64_t p = ckpt_pending(j, q), end = q->pos0 + q->n_rows;
        if (q->slot != j->ckpt_take || end % DN_CHUNK == 0) {
            *ck = (struct kv_ckpt_head){0};
            continue;
        }
        /* the chunk's first position: a multiple of DN_CHUNK, or where the
         * rows began (the checkpoint's, else the step's first) */
        int64_t first = end / DN_CHUNK * DN_CHUNK;
        first = first < q->pos0 - p ? q->pos0 - p : first;
        int64_t from = first > q->pos0 ? first - q->pos0 : 0; /* its first row of the step */
        int64_t at = first - (q->pos0 - p) > 0 ? 0 : p;        /* and where that row goes */
        for (int64_t t = from; t < q->n_rows; t++) {
            float *row = ckpt_row(j, ck, at + t - from);
            int64_t r = q->row0 + t;
            memcpy(row, KROW(j, r, 0), (size_t)kv * sizeof *row); /* k then v */
            memcpy(row + kv, j->g + r * j->Hv, (size_t)j->Hv * sizeof *row);
            memcpy(row + kv + j->Hv, j->beta + r * j->Hv, (size_t)j->Hv * sizeof *row);
        }
        *ck = (struct kv_ckpt_head){.pos = first, .n = (int32_t)(end - first), .slot = q->slot};
    }
}

/* ---- the gated norm ------------------------------------------------------------ */

/* o = rmsnorm(o) w silu(z) per value head of each row: the heads' sums of
 * squares four at a time (sumsq_rows), the row's sigmoids through
 * ops_exp_row into the thread's scratch (expf's bits, several lanes a
 * call), each element's operations as one at a time. */
OPS_SIMD_CLONES_V4
static void norm_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    const struct dn_job *j = arg;
    const float *w = j->L->w[LAYER_DN_NORM].data;
    float eps = (float)ops_ctx_model(j->s->ops)->hp.norm_eps;
    int64_t D = j->D, vd = j->Hv * D;
    float *e = ops_ctx_scratch(j->s->ops, thread); /* [Hv D] */
    double *ss = scratch_doubles(j, thread, vd);   /* [Hv] */
    for (int64_t r = r0; r < r1; r++) {
        float *orow = j->out + r * vd;
        const float *zrow = j->z + r * vd;
        for (int64_t i = 0; i < vd; i++)
            e[i] = -zrow[i];
        ops_exp_row(e, vd, 0.0f); /* expf(-z) */
        sumsq_rows(orow, D, j->Hv, D, ss);
        for (int64_t h = 0; h < j->Hv; h++) {
            float *o = orow + h * D;
            const float *z = zrow + h * D, *eh = e + h * D;
            float rs = (float)(1.0 / sqrt(ss[h] / (double)D + eps));
            int64_t i = 0;
            for (; i + 16 <= D; i += 16)
                V16(o + i) = V16(o + i) * rs * V16(w + i) *
                             (V16(z + i) * (1.0f / (1.0f + V16(eh + i))));
            for (; i < D; i++)
                o[i] = o[i] * rs * w[i] * (z[i] * (1.0f / (1.0f + eh[i])));
        }
    }
}

int64_t cpu_deltanet_scratch_floats(const struct model *m)
{
    int64_t floats = 0;
    for (int64_t l = 0; m->layers && l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET) {
            int64_t f = dn_scratch_floats(m->layers[l].dn_head_dim);
            int64_t fc = conv_scratch_floats(m->layers[l].dn_conv);
            f = fc > f ? fc : f;
            /* the gated norm's row and the sums of squares (norm_task,
             * gates_task) */
            int64_t hv = m->layers[l].dn_v_heads, hk = m->layers[l].dn_k_heads;
            int64_t fn = hv * m->layers[l].dn_head_dim + 2 + 2 * (hv > 2 * hk ? hv : 2 * hk);
            f = fn > f ? fn : f;
            floats = f > floats ? f : floats;
        }
    return floats;
}

/* Moves rows want[i] of the [n, w] array a to row i (want ascending). */
static void compact(float *a, int64_t w, const int64_t *want, int64_t n_want)
{
    for (int64_t i = 0; i < n_want; i++)
        if (want[i] != i)
            memmove(a + i * w, a + want[i] * w, (size_t)w * sizeof *a);
}

static void trace(const struct dn_job *j)
{
    const char *e = getenv("IGNITE_DELTANET_TRACE");
    if (!e || !*e || !strcmp(e, "0"))
        return;
    for (int64_t i = 0; i < j->s->batch->n_seqs; i++) {
        const struct backend_seq *q = &j->s->batch->seqs[i];
        bool rec = j->recurrent || (q->n_rows == 1 && !q->prompt);
        int64_t end = q->pos0 + q->n_rows; /* chunks end at multiples of DN_CHUNK */
        long long chunks = (long long)((end + DN_CHUNK - 1) / DN_CHUNK - q->pos0 / DN_CHUNK);
        /* then the rows of an unfinished chunk run again from its checkpoint */
        fprintf(stderr, "deltanet: layer %lld slot %d pos %lld rows %lld %s %lld again %lld\n",
                (long long)j->layer, q->slot, (long long)q->pos0, (long long)q->n_rows,
                rec ? "recurrent" : "chunked", rec ? (long long)q->n_rows : chunks,
                rec ? 0LL : (long long)ckpt_pending(j, q));
    }
}

int64_t cpu_deltanet(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want,
                     int64_t n_want)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    struct ops_pool *pool = ops_ctx_pool(ctx);
    const char *form = getenv("IGNITE_DELTANET");
    struct dn_job j = {.s = s, .L = L, .layer = layer, .n = n, .Hk = L->dn_k_heads,
                       .grouped = L->dn_grouped,
                       .Hv = L->dn_v_heads, .D = L->dn_head_dim, .K = L->dn_conv,
                       .recurrent = form && !strcmp(form, "recurrent")};
    j.ckpt = !j.recurrent && s->kv->memory->layers[layer].ckpt_bytes;
    j.ckpt_read = s->ckpt ? s->ckpt->read : -1;
    j.ckpt_take = s->ckpt ? s->ckpt->take : -1;
    j.C = (2 * j.Hk + j.Hv) * j.D;
    j.conv_w = conv_width(j.C, ops_pool_threads(pool));
    int64_t vd = j.Hv * j.D;
    j.qkv = b->dn;
    j.z = j.qkv + n * j.C;
    j.beta = j.z + n * vd;
    j.g = j.beta + n * j.Hv;
    j.out = j.g + n * j.Hv;
    IG_ASSERT(n == s->batch->n_rows);

    const struct model_weight *w[4] = {&L->w[LAYER_DN_QKV], &L->w[LAYER_DN_Z],
                                       &L->w[LAYER_DN_BETA], &L->w[LAYER_DN_ALPHA]};
    float *y[4] = {j.qkv, j.z, j.beta, j.g};
    cpu_rows_then_matmul(ctx, L, cpu_norm_rows, LAYER_ATTN_NORM, n, m->hp.n_embd, 4, w, b->xn,
                         y);
    /* a sequence that starts here starts from nothing */
    size_t bytes = kv_deltanet_state_bytes(L);
    for (int64_t i = 0; i < s->batch->n_seqs; i++)
        if (s->batch->seqs[i].pos0 == 0)
            memset(conv_state(&j, s->batch->seqs[i].slot), 0, bytes);
    trace(&j);
    ops_pool_run(pool, s->batch->n_seqs * ((j.C + j.conv_w - 1) / j.conv_w), 1, conv_task, &j);
    ops_pool_run(pool, n, 16, gates_task, &j);
    ops_pool_run(pool, s->batch->n_seqs * j.Hv, 1, rule_task, &j);
    ops_pool_run(pool, s->batch->n_seqs, 1, ckpt_task, &j);
    ops_pool_run(pool, n, 16, norm_task, &j);

    if (want) { /* only these rows are read after this layer's mixing */
        compact(b->x, m->hp.n_embd, want, n_want);
        compact(j.out, vd, want, n_want);
        n = n_want;
    }
    ops_matmul(ctx, &L->w[LAYER_DN_OUT], j.out, n, b->proj); /* [n, n_embd] */
    return n;
}
