/* ops/gpu_deltanet_chunk_ref.c: the CPU twin of ops/gpu_deltanet_chunk.cu
 * (gk_dn_chunk_ref and the checkpoint's gk_dn_ckpt_ref; contract in
 * ops/gpu_deltanet.h): the kernel's phases on
 * the same arrays, each f32 operation rounded on its own (built without FMA
 * contraction), each mma.sync as the emulator computes it (16 products of
 * f16 values added in double to the f32 accumulator, rounded once per 16),
 * so the emulated kernel matches it bit for bit. Covered by
 * tests/emu/test_deltanet_emu.c. */
#include "ops/gpu_deltanet.h"

#include "core/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CH GK_DN_CHUNK
#define BV 64

/* acc + sum over k < K of A(k) B(k), A(k) at a[k as], B(k) at b[k bs], f16,
 * as mma.sync steps of 16 (emu/warp.cc). */
static float mma_dot(float acc, const uint16_t *a, int64_t as, const uint16_t *b, int64_t bs,
                     int64_t K)
{
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
        double sum = acc;
        for (int64_t k = k0; k < k0 + 16; k++)
            sum += (double)ig_f16_to_f32(a[k * as]) * (double)ig_f16_to_f32(b[k * bs]);
        acc = (float)sum;
    }
    return acc;
}

/* The kernel's shared arrays of one block. */
struct blk {
    float *Sf, *Af, *Tf, G[CH], B[CH];
    uint16_t *Sh, *Kh, *Qh, *Kb, *Ph, *Vb, *VN, *Th;
};

/* Where a chunk's rows come from: rows [0, pp) the checkpoint's rows
 * (ckrows, a row ckr floats: k, v, g, beta; their k as q, no output), row
 * i >= pp the step's row t0 + i. */
struct src {
    const float *qkv, *beta, *g, *ckrows;
    int64_t t0, ckr;
    int pp;
};

/* Row r's k (then v: s->Hk + h heads on) and its decay and beta. */
static const float *kv_row(const struct gk_dn_shape *s, const struct src *x, int64_t r)
{
    return r < x->pp ? x->ckrows + r * x->ckr : x->qkv + (x->t0 + r) * s->C + s->Hk * s->D;
}

static float row_g(const struct gk_dn_shape *s, const struct src *x, int64_t r, int64_t h)
{
    return r < x->pp ? x->ckrows[r * x->ckr + (s->Hk + s->Hv) * s->D + h]
                     : x->g[(x->t0 + r) * s->Hv + h];
}

static float row_beta(const struct gk_dn_shape *s, const struct src *x, int64_t r, int64_t h)
{
    return r < x->pp ? x->ckrows[r * x->ckr + (s->Hk + s->Hv) * s->D + s->Hv + h]
                     : x->beta[(x->t0 + r) * s->Hv + h];
}

/* Rows [0, c) of value head h, columns [v0, v0 + BV), one chunk; the
 * outputs of rows [pp, c) to out. */
static void chunk(const struct gk_dn_shape *s, struct blk *k, const struct src *x, float *out,
                  int c, int64_t h, int64_t kh, int64_t v0)
{
    int64_t D = s->D, Hv = s->Hv, t0 = x->t0;
    float acc = 0;
    for (int i = 0; i < CH; i++) {
        if (i < c)
            acc += row_g(s, x, i, h);
        k->G[i] = acc;
        k->B[i] = i < c ? row_beta(s, x, i, h) : 0.0f;
    }
    for (int64_t r = 0; r < CH; r++)
        for (int64_t d = 0; d < D; d++) {
            float kx = 0, qx = 0, kbx = 0;
            if (r < c) {
                /* a kept row's q is its k (its output is not written) */
                qx = (r < x->pp ? kv_row(s, x, r) : x->qkv + (t0 + r) * s->C)[kh * D + d];
                kx = kv_row(s, x, r)[kh * D + d];
                kbx = k->B[r] * expf(k->G[r]) * kx;
            }
            k->Kh[r * D + d] = ig_f32_to_f16(kx);
            k->Qh[r * D + d] = ig_f32_to_f16(qx);
            k->Kb[r * D + d] = ig_f32_to_f16(kbx);
        }
    for (int64_t r = 0; r < CH; r++)
        for (int64_t j = 0; j < BV; j++)
            k->Vb[r * BV + j] = ig_f32_to_f16(
                r < c ? k->B[r] * kv_row(s, x, r)[(s->Hk + h) * D + v0 + j] : 0.0f);
    for (int i = 0; i < CH; i++) /* M and P */
        for (int m = 0; m < CH; m++) {
            float dec = expf(k->G[i] - k->G[m]);
            float kk = mma_dot(0.0f, k->Kh + i * D, 1, k->Kh + m * D, 1, D);
            float qk = mma_dot(0.0f, k->Qh + i * D, 1, k->Kh + m * D, 1, D);
            k->Af[i * CH + m] = m < i ? -k->B[i] * kk * dec : 0.0f;
            k->Ph[i * CH + m] = ig_f32_to_f16(m <= i ? qk * dec : 0.0f);
        }
    for (int i = 0; i < c; i++) /* T */
        for (int p = 0; p < CH; p++) {
            float v = p == i ? 1.0f : 0.0f;
            for (int m = p; m < i; m++)
                v += k->Af[i * CH + m] * k->Tf[m * CH + p];
            k->Tf[i * CH + p] = v;
        }
    for (int e = 0; e < CH * CH; e++)
        k->Th[e] = e / CH < c ? ig_f32_to_f16(k->Tf[e]) : 0;
    uint16_t *Wn = k->Kh;
    for (int64_t i = 0; i < CH; i++) /* -W */
        for (int64_t d = 0; d < D; d++)
            Wn[i * D + d] = ig_f32_to_f16(-mma_dot(0.0f, k->Th + i * CH, 1, k->Kb + d, D, CH));
    for (int64_t i = 0; i < CH; i++) /* v_new */
        for (int64_t j = 0; j < BV; j++) {
            float v = mma_dot(0.0f, k->Th + i * CH, 1, k->Vb + j, BV, CH);
            v = mma_dot(v, Wn + i * D, 1, k->Sh + j, BV, D);
            k->VN[i * BV + j] = ig_f32_to_f16(v);
        }
    float glast = k->G[c - 1];
    for (int64_t r = 0; r < CH; r++)
        for (int64_t d = 0; d < D; d++)
            k->Kb[r * D + d] = ig_f32_to_f16(
                r < c ? expf(glast - k->G[r]) * kv_row(s, x, r)[kh * D + d] : 0.0f);
    for (int64_t i = x->pp; i < c; i++) /* o */
        for (int64_t j = 0; j < BV; j++) {
            float o = mma_dot(0.0f, k->Qh + i * D, 1, k->Sh + j, BV, D) * expf(k->G[i]);
            out[((t0 + i) * Hv + h) * D + v0 + j] =
                mma_dot(o, k->Ph + i * CH, 1, k->VN + j, BV, CH);
        }
    float el = expf(glast);
    for (int64_t i = 0; i < D; i++) /* S */
        for (int64_t j = 0; j < BV; j++)
            k->Sf[i * BV + j] =
                mma_dot(k->Sf[i * BV + j] * el, k->Kb + i, D, k->VN + j, BV, CH);
    for (int64_t e = 0; e < D * BV; e++)
        k->Sh[e] = ig_f32_to_f16(k->Sf[e]);
}

void gk_dn_chunk_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                     const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs)
{
    int64_t D = s->D;
    struct blk k;
    k.Sf = malloc((size_t)(D * BV) * sizeof(float));
    k.Af = malloc(CH * CH * sizeof(float));
    k.Tf = malloc(CH * CH * sizeof(float));
    uint16_t *h16 = malloc((size_t)(D * BV + 3 * CH * D + 2 * CH * CH + 2 * CH * BV) * 2);
    if (!k.Sf || !k.Af || !k.Tf || !h16)
        abort();
    k.Sh = h16, k.Kh = k.Sh + D * BV, k.Qh = k.Kh + CH * D, k.Kb = k.Qh + CH * D;
    k.Ph = k.Kb + CH * D, k.Th = k.Ph + CH * CH, k.Vb = k.Th + CH * CH, k.VN = k.Vb + CH * BV;
    for (int64_t i = 0; i < n_seqs; i++) {
        struct gk_dn_seq q = seqs[i];
        if (q.n_rows <= 0 || (s->split && !q.chunked))
            continue;
        float *ck = s->ckpt && q.ckpt ? s->ckpt : NULL;
        int32_t p = gk_dn_ckpt_pending(ck, &q), end = q.pos0 + q.n_rows;
        for (int64_t h = 0; h < s->Hv; h++)
            for (int64_t v0 = 0; v0 < D; v0 += BV) {
                int64_t kh = s->grouped ? h / (s->Hv / s->Hk) : h % s->Hk;
                float *S = s->state + (int64_t)q.slot * s->state_floats + (s->K - 1) * s->C +
                           h * D * D;
                float *ckS = ck ? ck + GK_DN_CKPT_HEAD + h * D * D : NULL;
                for (int64_t e = 0; e < D * BV; e++) {
                    k.Sf[e] = p ? ckS[e / BV * D + v0 + e % BV]
                                : q.pos0 == 0 ? 0.0f : S[e / BV * D + v0 + e % BV];
                    k.Sh[e] = ig_f32_to_f16(k.Sf[e]);
                }
                for (int32_t pos = q.pos0 - p, c; pos < end; pos += c) {
                    c = CH - pos % CH;
                    c = end - pos < c ? end - pos : c;
                    struct src x = {.qkv = qkv, .beta = beta, .g = g, .t0 = q.row0 + pos - q.pos0,
                                    .ckr = (s->Hk + s->Hv) * D + 2 * s->Hv,
                                    .pp = pos < q.pos0 ? p : 0};
                    x.ckrows = ck ? ck + GK_DN_CKPT_HEAD + s->Hv * D * D : NULL;
                    if (ck && (q.ckpt & GK_DN_CKPT_KEEP) && pos + c == end && end % CH &&
                        pos >= q.pos0) /* S where it began */
                        for (int64_t e = 0; e < D * BV; e++)
                            ckS[e / BV * D + v0 + e % BV] = k.Sf[e];
                    chunk(s, &k, &x, out, c, h, kh, v0);
                }
                for (int64_t e = 0; e < D * BV; e++)
                    S[e / BV * D + v0 + e % BV] = k.Sf[e];
            }
    }
    free(k.Sf);
    free(k.Af);
    free(k.Tf);
    free(h16);
}

void gk_dn_ckpt_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                    const float *g, const struct gk_dn_seq *seqs, int64_t n_seqs)
{
    int64_t kvw = (s->Hk + s->Hv) * s->D, ckr = kvw + 2 * s->Hv;
    for (int64_t i = 0; i < n_seqs; i++) {
        struct gk_dn_seq q = seqs[i];
        if (q.n_rows <= 0 || !q.ckpt) /* not this sequence's */
            continue;
        float *ck = s->ckpt;
        int64_t *head = (int64_t *)(void *)ck;
        int32_t p = gk_dn_ckpt_pending(ck, &q), end = q.pos0 + q.n_rows;
        if (!(q.ckpt & GK_DN_CKPT_KEEP) || end % CH == 0) { /* given back */
            head[0] = head[1] = 0;
            continue;
        }
        int32_t first = end / CH * CH > q.pos0 - p ? end / CH * CH : q.pos0 - p;
        int32_t from = first > q.pos0 ? first - q.pos0 : 0, at = first > q.pos0 - p ? 0 : p;
        for (int32_t t = from; t < q.n_rows; t++) {
            float *row = ck + GK_DN_CKPT_HEAD + s->Hv * s->D * s->D + (at + t - from) * ckr;
            int64_t r = q.row0 + t;
            memcpy(row, qkv + r * s->C + s->Hk * s->D, (size_t)kvw * sizeof *row);
            memcpy(row + kvw, g + r * s->Hv, (size_t)s->Hv * sizeof *row);
            memcpy(row + kvw + s->Hv, beta + r * s->Hv, (size_t)s->Hv * sizeof *row);
        }
        head[0] = first;
        ((int32_t *)(void *)ck)[2] = end - first, ((int32_t *)(void *)ck)[3] = q.slot;
    }
}
