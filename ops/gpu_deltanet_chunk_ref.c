/* ops/gpu_deltanet_chunk_ref.c: the CPU twin of ops/gpu_deltanet_chunk.cu
 * (gk_dn_chunk_ref; contract in ops/gpu_deltanet.h): the kernel's phases on
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

/* Rows [t0, t0 + c) of value head h, columns [v0, v0 + BV), one chunk. */
static void chunk(const struct gk_dn_shape *s, struct blk *k, const float *qkv,
                  const float *beta, const float *g, float *out, int64_t t0, int c, int64_t h,
                  int64_t kh, int64_t v0)
{
    int64_t D = s->D, Hv = s->Hv;
    float acc = 0;
    for (int i = 0; i < CH; i++) {
        if (i < c)
            acc += g[(t0 + i) * Hv + h];
        k->G[i] = acc;
        k->B[i] = i < c ? beta[(t0 + i) * Hv + h] : 0.0f;
    }
    for (int64_t r = 0; r < CH; r++)
        for (int64_t d = 0; d < D; d++) {
            float kx = 0, qx = 0, kbx = 0;
            if (r < c) {
                const float *row = qkv + (t0 + r) * s->C;
                qx = row[kh * D + d];
                kx = row[(s->Hk + kh) * D + d];
                kbx = k->B[r] * expf(k->G[r]) * kx;
            }
            k->Kh[r * D + d] = ig_f32_to_f16(kx);
            k->Qh[r * D + d] = ig_f32_to_f16(qx);
            k->Kb[r * D + d] = ig_f32_to_f16(kbx);
        }
    for (int64_t r = 0; r < CH; r++)
        for (int64_t j = 0; j < BV; j++)
            k->Vb[r * BV + j] = ig_f32_to_f16(
                r < c ? k->B[r] * qkv[(t0 + r) * s->C + (2 * s->Hk + h) * D + v0 + j] : 0.0f);
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
                r < c ? expf(glast - k->G[r]) * qkv[(t0 + r) * s->C + (s->Hk + kh) * D + d]
                      : 0.0f);
    for (int64_t i = 0; i < c; i++) /* o */
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
        for (int64_t h = 0; h < s->Hv; h++)
            for (int64_t v0 = 0; v0 < D; v0 += BV) {
                int64_t kh = s->grouped ? h / (s->Hv / s->Hk) : h % s->Hk;
                float *S = s->state + (int64_t)q.slot * s->state_floats + (s->K - 1) * s->C +
                           h * D * D;
                for (int64_t e = 0; e < D * BV; e++) {
                    k.Sf[e] = q.pos0 == 0 ? 0.0f : S[e / BV * D + v0 + e % BV];
                    k.Sh[e] = ig_f32_to_f16(k.Sf[e]);
                }
                for (int32_t t = 0, c; t < q.n_rows; t += c) {
                    c = CH - (q.pos0 + t) % CH;
                    c = q.n_rows - t < c ? q.n_rows - t : c;
                    chunk(s, &k, qkv, beta, g, out, q.row0 + t, c, h, kh, v0);
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
