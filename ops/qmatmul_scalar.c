/* ops/qmatmul_scalar.c: the portable integer kernels of the int8 path: one
 * weight row times one quantized token, block by block, with an int32 dot
 * product per block and one f32 scale per block. Every ISA's kernels must
 * agree with these (tests/cpu/test_qmatmul.c); the driver is ops/qmatmul.c. */
#include "ops/qmatmul.h"

#include "core/half.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Sum over the block of q4 (low or high nibbles of qs[0..15]) * x. */
static int32_t dot_q4_block(const uint8_t *qs, const int8_t *x)
{
    int32_t s = 0;
    for (int j = 0; j < 16; j++)
        s += (qs[j] & 0x0f) * x[j] + (qs[j] >> 4) * x[j + 16];
    return s;
}

/* Q4_0: w = d * (q - 8), so dot = d * (dx * sum(q x) - 8 * s). */
static float row_q4_0(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_q4_0 *blk = (const struct block_q4_0 *)w + b;
        float d = ig_f16_to_f32(blk->d);
        acc += d * x[b].d * (float)dot_q4_block(blk->qs, x[b].qs) - 8.0f * d * x[b].s;
    }
    return acc;
}

/* Q4_1: w = d * q + m, so dot = d * dx * sum(q x) + m * s. */
static float row_q4_1(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_q4_1 *blk = (const struct block_q4_1 *)w + b;
        float d = ig_f16_to_f32(blk->d), m = ig_f16_to_f32(blk->m);
        acc += d * x[b].d * (float)dot_q4_block(blk->qs, x[b].qs) + m * x[b].s;
    }
    return acc;
}

/* Sum over a 5-bit block of q * x: element j < 16 is the low nibble of
 * qs[j] with bit j of qh as its fifth bit, element j + 16 the high nibble
 * with bit j + 16 (ggml's Q5_0/Q5_1 layout). */
static int32_t dot_q5_block(const uint8_t *qh4, const uint8_t *qs, const int8_t *x)
{
    uint32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    int32_t s = 0;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0x0f) | ((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        s += lo * x[j] + hi * x[j + 16];
    }
    return s;
}

/* Q5_0: w = d * (q - 16), so dot = d * (dx * sum(q x) - 16 * s). */
static float row_q5_0(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_q5_0 *blk = (const struct block_q5_0 *)w + b;
        float d = ig_f16_to_f32(blk->d);
        acc += d * x[b].d * (float)dot_q5_block(blk->qh, blk->qs, x[b].qs) - 16.0f * d * x[b].s;
    }
    return acc;
}

/* Q5_1: w = d * q + m. */
static float row_q5_1(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_q5_1 *blk = (const struct block_q5_1 *)w + b;
        float d = ig_f16_to_f32(blk->d), m = ig_f16_to_f32(blk->m);
        acc += d * x[b].d * (float)dot_q5_block(blk->qh, blk->qs, x[b].qs) + m * x[b].s;
    }
    return acc;
}

static float row_q8_0(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_q8_0 *blk = (const struct block_q8_0 *)w + b;
        int32_t s = 0;
        for (int j = 0; j < QMM_QK; j++)
            s += blk->qs[j] * x[b].qs[j];
        acc += ig_f16_to_f32(blk->d) * x[b].d * (float)s;
    }
    return acc;
}

/* The dot product of 32 IQ4 quants (16 bytes of nibbles, as
 * models/quant.h lays them out) with a token block's quants. */
static int32_t iq4_sum32(const uint8_t *qs, const int8_t *xq)
{
    int32_t s = 0;
    for (int j = 0; j < QMM_QK / 2; j++)
        s += quant_iq4_value(qs[j] & 0x0f) * xq[j] +
             quant_iq4_value(qs[j] >> 4) * xq[j + QMM_QK / 2];
    return s;
}

/* IQ4_NL: w = d * quant_iq4_value(q), a 4-bit index into 16 int8 levels. */
static float row_iq4_nl(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_iq4_nl *blk = (const struct block_iq4_nl *)w + b;
        acc += ig_f16_to_f32(blk->d) * x[b].d * (float)iq4_sum32(blk->qs, x[b].qs);
    }
    return acc;
}

/* MXFP4: w = 2^(e - 128) * quant_mxfp4_value(q), IQ4_NL's nibbles. */
static float row_mxfp4(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t b = 0; b < n_blk; b++) {
        const struct block_mxfp4 *blk = (const struct block_mxfp4 *)(const void *)w + b;
        int32_t s = 0;
        for (int j = 0; j < QMM_QK / 2; j++)
            s += quant_mxfp4_value(blk->qs[j] & 0x0f) * x[b].qs[j] +
                 quant_mxfp4_value(blk->qs[j] >> 4) * x[b].qs[j + QMM_QK / 2];
        acc += quant_e8m0_half(blk->e) * x[b].d * (float)s;
    }
    return acc;
}

/* IQ4_XS: 8 sub-blocks of 32, w = d * sc_j * quant_iq4_value(q). */
static float row_iq4_xs(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const uint8_t *blk = w + (size_t)sb * sizeof(struct block_iq4_xs);
        const uint8_t *qs = blk + offsetof(struct block_iq4_xs, qs);
        float d = ig_f16_to_f32(((const struct block_iq4_xs *)(const void *)blk)->d);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            acc += d * (float)quant_iq4_xs_scale(blk, j) * xb->d *
                   (float)iq4_sum32(qs + 16 * j, xb->qs);
        }
    }
    return acc;
}

/* Q4_K: 8 sub-blocks of 32, w = d * sc_j * q - dmin * m_j. Sub-blocks 2i and
 * 2i + 1 are the low and high nibbles of qs[32 i .. 32 i + 31]. */
static float row_q4_K(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const struct block_q4_K *blk = (const struct block_q4_K *)w + sb;
        float d = ig_f16_to_f32(blk->d), dmin = ig_f16_to_f32(blk->dmin);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            const uint8_t *q = blk->qs + 32 * (j / 2);
            int32_t s = 0;
            for (int l = 0; l < 32; l++)
                s += (j % 2 ? q[l] >> 4 : q[l] & 0x0f) * xb->qs[l];
            int sc, mn;
            quant_k4_scale_min(blk->scales, j, &sc, &mn);
            acc += d * (float)sc * xb->d * (float)s - dmin * (float)mn * xb->s;
        }
    }
    return acc;
}

/* Q5_K: Q4_K with a fifth bit: bit j of qh[l] for element l of sub-block j. */
static float row_q5_K(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const struct block_q5_K *blk = (const struct block_q5_K *)w + sb;
        float d = ig_f16_to_f32(blk->d), dmin = ig_f16_to_f32(blk->dmin);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            const uint8_t *q = blk->qs + 32 * (j / 2);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                int u = (j % 2 ? q[l] >> 4 : q[l] & 0x0f) | ((blk->qh[l] >> j) & 1) << 4;
                s += u * xb->qs[l];
            }
            int sc, mn;
            quant_k4_scale_min(blk->scales, j, &sc, &mn);
            acc += d * (float)sc * xb->d * (float)s - dmin * (float)mn * xb->s;
        }
    }
    return acc;
}

/* The 6-bit quant of element e (0..255) of a Q6_K super-block, 0..63. */
static int q6_at(const struct block_q6_K *blk, int e)
{
    int n = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t *ql = blk->ql + 64 * n, *qh = blk->qh + 32 * n;
    int lo = (k % 2 ? ql[l + 32] : ql[l]);
    lo = k < 2 ? lo & 0x0f : lo >> 4;
    return lo | ((qh[l] >> (2 * k)) & 3) << 4;
}

/* Q6_K: 16 sub-blocks of 16, w = d * sc_i * (q - 32). */
static float row_q6_K(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const struct block_q6_K *blk = (const struct block_q6_K *)w + sb;
        float d = ig_f16_to_f32(blk->d);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            int32_t s = 0;
            for (int h = 0; h < 2; h++) {
                int32_t sh = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++)
                    sh += (q6_at(blk, 32 * j + l) - 32) * xb->qs[l];
                s += blk->scales[2 * j + h] * sh;
            }
            acc += d * xb->d * (float)s;
        }
    }
    return acc;
}

/* Q2_K: 16 sub-blocks of 16, w = d * sc_i * q - dmin * mn_i. */
static float row_q2_K(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const struct block_q2_K *blk = (const struct block_q2_K *)w + sb;
        float d = ig_f16_to_f32(blk->d), dmin = ig_f16_to_f32(blk->dmin);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            for (int h = 0; h < 2; h++) {
                int sc = blk->scales[2 * j + h];
                int32_t sh = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++)
                    sh += quant_k2_value(blk->qs, 32 * j + l) * xb->qs[l];
                /* (dmin mn) (dx hs), grouped as the packed kernels group it */
                acc += d * (float)(sc & 0x0f) * xb->d * (float)sh -
                       dmin * (float)(sc >> 4) * xb->dhs[h];
            }
        }
    }
    return acc;
}

/* Q3_K: 16 sub-blocks of 16, w = d * sc_i * v with v = quant_k3_value (-4..3). */
static float row_q3_K(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n_blk / 8; sb++) {
        const struct block_q3_K *blk = (const struct block_q3_K *)w + sb;
        float d = ig_f16_to_f32(blk->d);
        for (int j = 0; j < 8; j++) {
            const struct qmm_q8 *xb = &x[sb * 8 + j];
            int32_t s = 0;
            for (int h = 0; h < 2; h++) {
                int32_t sh = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++)
                    sh += quant_k3_value(blk->qs, blk->hmask, 32 * j + l) * xb->qs[l];
                s += quant_k3_scale(blk->scales, 2 * j + h) * sh;
            }
            acc += d * xb->d * (float)s;
        }
    }
    return acc;
}

typedef float (*row_fn)(const uint8_t *w, int64_t n_blk, const struct qmm_q8 *x);

static inline void tile(row_fn f, const uint8_t *w, size_t row_bytes, int64_t n_blk,
                        const struct qmm_q8 *x, int64_t ldx, int mr, int nt, float *y,
                        int64_t ldy)
{
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < mr; r++)
            y[t * ldy + r] = f(w + (size_t)r * row_bytes, n_blk, x + t * ldx);
}

#define SCALAR_TILE(name)                                                                    \
    static void tile_##name(const uint8_t *w, size_t row_bytes, int64_t n_blk,              \
                            const struct qmm_q8 *x, int64_t ldx, int mr, int nt, float *y,  \
                            int64_t ldy)                                                    \
    {                                                                                       \
        tile(row_##name, w, row_bytes, n_blk, x, ldx, mr, nt, y, ldy);                      \
    }
SCALAR_TILE(q4_0)
SCALAR_TILE(q4_1)
SCALAR_TILE(q5_0)
SCALAR_TILE(q5_1)
SCALAR_TILE(q8_0)
SCALAR_TILE(iq4_nl)
SCALAR_TILE(iq4_xs)
SCALAR_TILE(mxfp4)
SCALAR_TILE(q2_K)
SCALAR_TILE(q3_K)
SCALAR_TILE(q4_K)
SCALAR_TILE(q5_K)
SCALAR_TILE(q6_K)

qmm_tile_fn ops_qmm_tile_scalar(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return tile_q4_0;
    case QUANT_Q4_1: return tile_q4_1;
    case QUANT_Q5_0: return tile_q5_0;
    case QUANT_Q5_1: return tile_q5_1;
    case QUANT_Q8_0: return tile_q8_0;
    case QUANT_IQ4_NL: return tile_iq4_nl;
    case QUANT_Q2_K: return tile_q2_K;
    case QUANT_Q3_K: return tile_q3_K;
    case QUANT_Q4_K: return tile_q4_K;
    case QUANT_Q5_K: return tile_q5_K;
    case QUANT_Q6_K: return tile_q6_K;
    case QUANT_IQ4_XS: return tile_iq4_xs;
    case QUANT_MXFP4: return tile_mxfp4;
    default: return NULL;
    }
}

/* ---- the packed decode layout (ops/qmatmul.h) ------------------------------ */

/* Row j's quant e of a packed block's quants q. */
static int packed_quant(enum quant_type type, const uint8_t *q, int j, int e)
{
    if (type == QUANT_Q8_0)
        return q[32 * (e / 4) + 4 * j + e % 4];
    int v = e / 8, i = e % 8;
    uint8_t byte = q[32 * v + 4 * j + i % 4];
    int u = i < 4 ? byte & 0x0f : byte >> 4;
    /* 5-bit formats: the bit plane after the nibbles */
    if (type == QUANT_Q5_0 || type == QUANT_Q5_1 || type == QUANT_Q5_K)
        u |= (q[128 + 4 * j + e % 4] >> (e / 4) & 1) << 4;
    return u;
}

/* Q6_K's packed blocks: w = d_h (u - 32) on each 16-element half h, so
 * dot = sum_h d_h dx sum_h(u x) - 32 sum_h d_h dhs_h, the -32 applied once
 * at the end (a power of two: the same bits as on every term). */
static void gemv8_packed_q6_K(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,
                              int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)
{
    for (int64_t t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++) {
            float acc = 0, add = 0;
            for (int64_t b = 0; b < n_blk; b++) {
                const uint8_t *blk = qmm_k6_block(p, b);
                const struct qmm_q8 *xb = x + t * ldx + b;
                uint16_t dh;
                memcpy(&dh, qmm_k6_head(p, b) + 2 * j, sizeof dh);
                const uint8_t *plane = blk + 2 * QMM_PR + QMM_PR * QMM_QK / 2;
                for (int h = 0; h < 2; h++) {
                    float d = ig_f16_to_f32(dh) * (float)(int8_t)blk[QMM_PR * h + j];
                    int32_t s = 0;
                    for (int e = 16 * h; e < 16 * h + 16; e++) {
                        int top = plane[32 * (e / 16) + 4 * j + e % 4] >> (2 * (e / 4 % 4)) & 3;
                        int u = packed_quant(QUANT_Q4_0, blk + 2 * QMM_PR, j, e) | top << 4;
                        s += u * xb->qs[e];
                    }
                    acc += d * xb->d * (float)s;
                    add += d * xb->dhs[h];
                }
            }
            y[t * ldy + j] = acc + -32.0f * add;
        }
}

/* Q2_K's packed blocks: w = d sc_h u - dmin mn_h on each 16-element half h,
 * so dot = sum_h d sc_h dx sum_h(u x) - dmin mn_h dhs_h. */
static void gemv8_packed_q2_K(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,
                              int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)
{
    for (int64_t t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++) {
            float acc = 0, add = 0;
            for (int64_t b = 0; b < n_blk; b++) {
                const uint8_t *blk = qmm_k2_block(p, b), *head = qmm_k2_head(p, b);
                const struct qmm_q8 *xb = x + t * ldx + b;
                uint16_t dh, mh;
                memcpy(&dh, head + 2 * j, sizeof dh);
                memcpy(&mh, head + 2 * QMM_PR + 2 * j, sizeof mh);
                const uint8_t *q = blk + 4 * QMM_PR;
                for (int h = 0; h < 2; h++) {
                    int32_t s = 0;
                    for (int e = 16 * h; e < 16 * h + 16; e++)
                        s += (q[32 * (e / 16) + 4 * j + e % 4] >> (2 * (e / 4 % 4)) & 3) *
                             xb->qs[e];
                    acc += ig_f16_to_f32(dh) * (float)blk[QMM_PR * h + j] * xb->d * (float)s;
                    add += -ig_f16_to_f32(mh) * (float)blk[QMM_PR * (2 + h) + j] *
                           xb->dhs[h];
                }
            }
            y[t * ldy + j] = acc + add;
        }
}

/* w = d u + m, so dot = d dx sum(u x) + m s. */
static void gemv8_packed(enum quant_type type, const uint8_t *p, int64_t n_blk,
                         const struct qmm_q8 *x, int64_t ldx, int64_t nt, int nr, float *y,
                         int64_t ldy)
{
    size_t pb = ops_qmm_packed_block_bytes(type);
    bool k4 = type == QUANT_Q4_K || type == QUANT_Q5_K; /* super-blocks, Q4_K's scales */
    bool xs = type == QUANT_IQ4_XS;                     /* super-blocks, i8 scales */
    bool mx = type == QUANT_MXFP4;                      /* IQ4_NL's, MXFP4's levels */
    bool iq4 = type == QUANT_IQ4_NL || xs || mx;        /* nibbles index the levels */
    for (int64_t t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++) {
            float acc = 0, add = 0;
            for (int64_t b = 0; b < n_blk; b++) {
                const uint8_t *blk = type == QUANT_Q4_K ? qmm_k4_block(p, b)
                                   : type == QUANT_Q5_K ? qmm_k5_block(p, b)
                                   : xs                 ? qmm_xs_block(p, b)
                                                        : p + (size_t)b * pb;
                const struct qmm_q8 *xb = x + t * ldx + b;
                bool has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1 || k4;
                /* f16 d and m in the block, or for Q4_K and Q5_K the
                 * super-block's d and dmin in its head with the block's sc and mn */
                const uint8_t *dm = type == QUANT_Q4_K ? qmm_k4_head(p, b)
                                  : type == QUANT_Q5_K ? qmm_k5_head(p, b)
                                  : xs                 ? qmm_xs_head(p, b)
                                                       : blk;
                uint16_t dh, mh = 0;
                memcpy(&dh, dm + 2 * j, sizeof dh);
                if (has_m)
                    memcpy(&mh, dm + 2 * QMM_PR + 2 * j, sizeof mh);
                float d = ig_f16_to_f32(dh);
                if (xs)
                    d *= (float)(int8_t)blk[j];
                float m = k4                 ? -ig_f16_to_f32(mh) * (float)blk[QMM_PR + j]
                        : has_m              ? ig_f16_to_f32(mh)
                        : type == QUANT_Q4_0 ? -8.0f * d
                        : type == QUANT_Q5_0 ? -16.0f * d
                                             : -128.0f * d;
                if (k4)
                    d *= (float)blk[j];
                const uint8_t *q = blk + (xs ? 1 : has_m && !k4 ? 4 : 2) * QMM_PR;
                int32_t s = 0;
                for (int e = 0; e < QMM_QK; e++) {
                    int u = packed_quant(type, q, j, e);
                    int v = mx ? quant_mxfp4_value(u) + 128 : iq4 ? quant_iq4_value(u) + 128 : u;
                    s += v * xb->qs[e]; /* IQ4, MXFP4: m -128 d */
                }
                acc += d * xb->d * (float)s;
                add += m * xb->s;
            }
            y[t * ldy + j] = acc + add;
        }
}

#define SCALAR_GEMV8(name, type)                                                             \
    static void gemv8_##name(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,       \
                             int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy)       \
    {                                                                                       \
        gemv8_packed(type, p, n_blk, x, ldx, nt, nr, y, ldy);                               \
    }
SCALAR_GEMV8(q4_0, QUANT_Q4_0)
SCALAR_GEMV8(q4_1, QUANT_Q4_1)
SCALAR_GEMV8(q5_0, QUANT_Q5_0)
SCALAR_GEMV8(q5_1, QUANT_Q5_1)
SCALAR_GEMV8(q8_0, QUANT_Q8_0)
SCALAR_GEMV8(iq4_nl, QUANT_IQ4_NL)
SCALAR_GEMV8(iq4_xs, QUANT_IQ4_XS)
SCALAR_GEMV8(mxfp4, QUANT_MXFP4)
SCALAR_GEMV8(q4_K, QUANT_Q4_K)
SCALAR_GEMV8(q5_K, QUANT_Q5_K)

qmm_gemv8_fn ops_qmm_gemv8_scalar(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return gemv8_q4_0;
    case QUANT_Q4_1: return gemv8_q4_1;
    case QUANT_Q5_0: return gemv8_q5_0;
    case QUANT_Q5_1: return gemv8_q5_1;
    case QUANT_Q8_0: return gemv8_q8_0;
    case QUANT_IQ4_NL: return gemv8_iq4_nl;
    case QUANT_Q4_K: return gemv8_q4_K;
    case QUANT_Q5_K: return gemv8_q5_K;
    case QUANT_Q2_K: return gemv8_packed_q2_K;
    case QUANT_Q3_K: /* packed as Q6_K (ops/qmatmul.h) */
    case QUANT_Q6_K: return gemv8_packed_q6_K;
    case QUANT_IQ4_XS: return gemv8_iq4_xs;
    case QUANT_MXFP4: return gemv8_mxfp4;
    default: return NULL;
    }
}
