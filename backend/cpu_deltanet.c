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
 * recurrent step. Then o's RMSNorm per head times the norm weight (as
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
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a chunk of the chunked form (flash-linear-attention's and
 * llama.cpp's 64; the engine's prompt cuts fall on its multiples). */
#define DN_CHUNK BACKEND_STATE_CHUNK

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
 * inputs [W]. */
static int64_t conv_scratch_floats(int64_t K)
{
    return 2 * K * DN_CONV_W_MAX;
}

OPS_SIMD_CLONES
static void conv_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    int64_t W = j->conv_w, nblk = (j->C + W - 1) / W, K = j->K;
    const float *w = j->L->w[LAYER_DN_CONV].data; /* [C, K] */
    float *wt = ops_ctx_scratch(j->s->ops, thread); /* [K][W] */
    float *hist = wt + K * W;                       /* [K - 1][W] */
    float *in = hist + (K - 1) * W;                 /* [W] */
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
            memcpy(in, x, (size_t)nc * sizeof(float));
            for (int64_t c = 0; c < nc; c++)
                x[c] = wt[(K - 1) * W + c] * in[c];
            for (int64_t i = 0; i < K - 1; i++) { /* oldest first: hist[(t + i) % (K - 1)] */
                const float *h = hist + (t + i) % (K - 1) * W, *wi = wt + i * W;
                for (int64_t c = 0; c < nc; c++)
                    x[c] += wi[c] * h[c];
            }
            for (int64_t c = 0; c < nc; c++)
                x[c] = x[c] / (1.0f + expf(-x[c])); /* SiLU */
            if (K > 1)
                memcpy(hist + t % (K - 1) * W, in, (size_t)nc * sizeof(float));
        }
        for (int64_t i = 0; i < K - 1; i++)
            memcpy(st + i * j->C + c0, hist + (q->n_rows + i) % (K - 1) * W,
                   (size_t)nc * sizeof(float));
    }
}

/* ---- per row: L2 norms of q and k, beta and the decay ------------------------- */

static void l2norm(float *x, int64_t n, float scale)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    /* transformers' l2norm: x / sqrt(sum x^2 + 1e-6) */
    float r = (float)(1.0 / sqrt(ss + 1e-6)) * scale;
    for (int64_t i = 0; i < n; i++)
        x[i] *= r;
}

static void gates_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    (void)thread;
    const struct dn_job *j = arg;
    const float *dt = j->L->w[LAYER_DN_DT].data, *A = j->L->w[LAYER_DN_A].data;
    float qscale = 1.0f / sqrtf((float)j->D);
    for (int64_t r = r0; r < r1; r++) {
        float *row = j->qkv + r * j->C;
        for (int64_t h = 0; h < j->Hk; h++) {
            l2norm(row + h * j->D, j->D, qscale);
            l2norm(row + (j->Hk + h) * j->D, j->D, 1.0f);
        }
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

/* Eight floats at any alignment (GCC's vector extension: one AVX register
 * in the x86-64-v3 clone, two SSE ones in the baseline). */
typedef float dn_v8 __attribute__((vector_size(32), aligned(4)));
#define V8(p) (*(dn_v8 *)(void *)(p))
/* Sixteen: one AVX-512 register in chunk_rows's x86-64-v4 clone, two AVX
 * ones in the v3 clone. The element-wise steps below (axpy, scale,
 * gemm_acc) run 16 lanes, then 8, then one at a time: each element's
 * operations are the same in any lane or width, so every clone gives the
 * same bits. */
typedef float dn_v16 __attribute__((vector_size(64), aligned(4)));
#define V16(p) (*(dn_v16 *)(void *)(p))

/* a.b over n: eight lanes of partial sums, then the rest; the same order
 * of operations for any caller (the chunked form and the step alike). */
static inline float dot(const float *restrict a, const float *restrict b, int64_t n)
{
    dn_v8 acc = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc += V8(a + i) * V8(b + i);
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* dot() of a with four rows b[0..3] at once: four independent chains where
 * one dot's each add waits on the last (the chunk's q.k and k.k were bound
 * by that latency), each sum in dot()'s order of operations: its bits. */
static inline __attribute__((always_inline)) float dot_sum(dn_v8 x)
{
    return ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
}

static inline __attribute__((always_inline)) void
dot4(const float *restrict a, const float *b0, const float *b1, const float *b2,
     const float *b3, int64_t n, float out[4])
{
    /* four named sums: an array of them stayed in memory, each add a
     * store and a reload */
    dn_v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        dn_v8 av = V8(a + i);
        s0 += av * V8(b0 + i);
        s1 += av * V8(b1 + i);
        s2 += av * V8(b2 + i);
        s3 += av * V8(b3 + i);
    }
    float r0 = dot_sum(s0), r1 = dot_sum(s1), r2 = dot_sum(s2), r3 = dot_sum(s3);
    for (; i < n; i++) {
        r0 += a[i] * b0[i];
        r1 += a[i] * b1[i];
        r2 += a[i] * b2[i];
        r3 += a[i] * b3[i];
    }
    out[0] = r0, out[1] = r1, out[2] = r2, out[3] = r3;
}

/* dot(a, row m of the rows `stride` floats apart from b) for m < n, into out[m]. */
static inline __attribute__((always_inline)) void
dots(const float *restrict a, const float *b, int64_t stride, int64_t n, int64_t len,
     float *restrict out)
{
    int64_t m = 0;
    for (; m + 4 <= n; m += 4) {
        const float *b0 = b + m * stride;
        dot4(a, b0, b0 + stride, b0 + 2 * stride, b0 + 3 * stride, len, out + m);
    }
    for (; m < n; m++)
        out[m] = dot(a, b + m * stride, len);
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

/* y *= a over n. */
static inline void scale(float *y, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        V16(y + i) *= a;
    for (; i + 8 <= n; i += 8)
        V8(y + i) *= a;
    for (; i < n; i++)
        y[i] *= a;
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
 * copy ran slower than the AVX2 clone had). */
static inline __attribute__((always_inline)) void
gemm_acc(float *restrict Y, int64_t ldy, const float *A, int64_t a_rs, int64_t a_cs,
         const float *B, int64_t ldb, int64_t rows, int64_t inner, int64_t n)
{
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        float *y0 = Y + r * ldy, *y1 = y0 + ldy, *y2 = y1 + ldy, *y3 = y2 + ldy;
        const float *a0 = A + r * a_rs, *a1 = a0 + a_rs, *a2 = a1 + a_rs, *a3 = a2 + a_rs;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            dn_v16 s0 = V16(y0 + i), s1 = V16(y1 + i), s2 = V16(y2 + i), s3 = V16(y3 + i);
            for (int64_t k = 0; k < inner; k++) {
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
        for (int64_t k = 0; k < inner && i < n; k++) {
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
    for (; r < rows; r++)
        for (int64_t k = 0; k < inner; k++)
            axpy(Y + r * ldy, A[r * a_rs + k * a_cs], B + k * ldb, n);
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

/* Rows [t0, t0 + c) of head h as one chunk (c <= DN_CHUNK), from and into S.
 * sc: the thread's scratch of dn_scratch_floats. */
OPS_SIMD_CLONES_V4
static void chunk_rows(const struct dn_job *j, float *S, int64_t t0, int64_t c, int64_t h,
                       float *sc)
{
    int64_t D = j->D, kh = key_head(j, h), Hv = j->Hv;
    float *G = sc;                      /* [c] cumulative log decay */
    float *T = G + DN_CHUNK;            /* [c, c] (I + lower)^-1, then q.k decay */
    float *U = T + DN_CHUNK * DN_CHUNK; /* [c, D] T (beta v), then v_new */
    float *W = U + DN_CHUNK * D;        /* [c, D] T (beta e^G k) */
    float *X = W + DN_CHUNK * D;        /* [c, D] rows being combined */
    float *VB = X + DN_CHUNK * D;       /* [c, D] beta v */
    float *E = VB + DN_CHUNK * D;       /* [c, c] e^(G_i - G_m) for m <= i */
    float *KC = E + DN_CHUNK * DN_CHUNK; /* [c, D] the chunk's keys, side by side */
    float acc = 0;
    for (int64_t i = 0; i < c; i++) {
        acc += j->g[(t0 + i) * Hv + h];
        G[i] = acc;
    }
    /* the keys, read c times each below, copied out of their rows C floats
     * apart: a multiple of 4 KiB there, all c of them fell in the same few
     * L1 sets and evicted each other */
    for (int64_t m = 0; m < c; m++)
        memcpy(KC + m * D, KROW(j, t0 + m, kh), (size_t)D * sizeof *KC);
    /* T = (I - M)^-1 by forward substitution, M[i][m] = -beta_i k_i.k_m
     * e^(G_i - G_m) for m < i (transformers' loop over the rows) */
    for (int64_t i = 0; i < c; i++) {
        const float *ki = KC + i * D;
        float bi = j->beta[(t0 + i) * Hv + h];
        float *Ti = T + i * c, *Mi = X, *Ei = E + i * c; /* row i of M, then of T */
        dots(ki, KC, D, i, D, Mi);
        for (int64_t m = 0; m <= i; m++)
            Ei[m] = expf(G[i] - G[m]);
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
        float bm = j->beta[(t0 + m) * Hv + h];
        copy_scaled(VB + m * D, VROW(j, t0 + m, h), bm, D);
        copy_scaled(X + m * D, KC + m * D, bm * expf(G[m]), D);
    }
    memset(U, 0, (size_t)(c * D) * sizeof *U);
    memset(W, 0, (size_t)(c * D) * sizeof *W);
    gemm_acc(U, D, T, c, 1, VB, D, c, c, D);
    gemm_acc(W, D, T, c, 1, X, D, c, c, D);
    /* v_new = U - W S (into U) */
    memset(X, 0, (size_t)(c * D) * sizeof *X);
    gemm_acc(X, D, W, D, 1, S, D, c, D, D);
    for (int64_t i = 0; i < c; i++)
        axpy(U + i * D, -1.0f, X + i * D, D);
    /* o_i = e^(G_i) q_i S + sum_(m <= i) (q_i.k_m) e^(G_i - G_m) v_new_m */
    float *o0 = j->out + t0 * Hv * D + h * D;
    for (int64_t i = 0; i < c; i++)
        memset(o0 + i * Hv * D, 0, (size_t)D * sizeof *o0);
    gemm_acc(o0, Hv * D, QROW(j, t0, kh), j->C, 1, S, D, c, D, D);
    /* the chunk's own part: T := (q_i.k_m) e^(G_i - G_m) for m <= i, 0 above */
    for (int64_t i = 0; i < c; i++) {
        const float *qi = QROW(j, t0 + i, kh);
        scale(o0 + i * Hv * D, expf(G[i]), D);
        float *Ti = T + i * c;
        dots(qi, KC, D, i + 1, D, Ti);
        for (int64_t m = 0; m < c; m++)
            Ti[m] = m <= i ? Ti[m] * E[i * c + m] : 0.0f;
    }
    gemm_acc(o0, Hv * D, T, c, 1, U, D, c, c, D);
    /* S = e^(G_last) S + sum_m (e^(G_last - G_m) k_m) v_new_m^T */
    float last = G[c - 1], el = expf(last);
    scale(S, el, D * D);
    for (int64_t m = 0; m < c; m++) { /* X = the decayed keys [c, D] */
        copy_scaled(X + m * D, KC + m * D, expf(last - G[m]), D);
    }
    gemm_acc(S, D, X, 1, D, U, D, D, c, D);
}

static int64_t dn_scratch_floats(int64_t D)
{
    return DN_CHUNK + 2 * DN_CHUNK * DN_CHUNK + 5 * DN_CHUNK * D + D;
}

static void rule_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    float *sc = ops_ctx_scratch(j->s->ops, thread);
    for (int64_t it = i0; it < i1; it++) {
        const struct backend_seq *q = &j->s->batch->seqs[it / j->Hv];
        int64_t h = it % j->Hv;
        float *S = mat_state(j, q->slot, h);
        if (j->recurrent || q->n_rows == 1) {
            for (int64_t t = 0; t < q->n_rows; t++)
                step_row(j, S, q->row0 + t, h, sc);
            continue;
        }
        /* chunks end at multiples of DN_CHUNK positions: a prompt split
         * into steps at such multiples runs the same chunks, bit for bit */
        for (int64_t t = 0, c; t < q->n_rows; t += c) {
            c = DN_CHUNK - (q->pos0 + t) % DN_CHUNK;
            c = q->n_rows - t < c ? q->n_rows - t : c;
            chunk_rows(j, S, q->row0 + t, c, h, sc);
        }
    }
}

/* ---- the gated norm ------------------------------------------------------------ */

static void norm_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    (void)thread;
    const struct dn_job *j = arg;
    const float *w = j->L->w[LAYER_DN_NORM].data;
    float eps = (float)ops_ctx_model(j->s->ops)->hp.norm_eps;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t h = 0; h < j->Hv; h++) {
            float *o = j->out + (r * j->Hv + h) * j->D;
            const float *z = j->z + (r * j->Hv + h) * j->D;
            double ss = 0;
            for (int64_t i = 0; i < j->D; i++)
                ss += (double)o[i] * o[i];
            float rs = (float)(1.0 / sqrt(ss / (double)j->D + eps));
            for (int64_t i = 0; i < j->D; i++)
                o[i] = o[i] * rs * w[i] * (z[i] * sigmoidf(z[i]));
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
        bool rec = j->recurrent || q->n_rows == 1;
        int64_t end = q->pos0 + q->n_rows; /* chunks end at multiples of DN_CHUNK */
        long long chunks = (long long)((end + DN_CHUNK - 1) / DN_CHUNK - q->pos0 / DN_CHUNK);
        fprintf(stderr, "deltanet: layer %lld slot %d pos %lld rows %lld %s %lld\n",
                (long long)j->layer, q->slot, (long long)q->pos0, (long long)q->n_rows,
                rec ? "recurrent" : "chunked", rec ? (long long)q->n_rows : chunks);
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
    ops_pool_run(pool, n, 16, norm_task, &j);

    if (want) { /* only these rows are read after this layer's mixing */
        compact(b->x, m->hp.n_embd, want, n_want);
        compact(j.out, vd, want, n_want);
        n = n_want;
    }
    ops_matmul(ctx, &L->w[LAYER_DN_OUT], j.out, n, b->proj); /* [n, n_embd] */
    return n;
}
