/* ops/gpu_qmm_ref.c: the CPU twins of the quantized-weight kernels
 * (ops/gpu_qmm.h): plain loops over host planes that define each kernel's
 * result. Weights are read back in the file's format (gk_qunpack_row_ref)
 * and dequantized by models/quant.c, activations quantized by ops/'s
 * ops_qmm_quantize, so the twins share no code with the kernels but these
 * references. They also stand in for the product kernels in the emulated
 * backend (backend/gpu_matmul.c), where emulating every thread would be
 * too slow for a real model.
 * Covered by tests/emu/test_qmm_emu.c. */
#include "ops/gpu_qmm.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"
#include "ops/gpu_ops.h"
#include "ops/gpu_random.h"
#include "ops/qmatmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A row of w in the file's format (malloc'd, row_bytes of the type). */
static uint8_t *unpack_row(const struct gk_qmat *w, int64_t row, uint8_t *buf)
{
    gk_qunpack_row_ref(w, row, buf);
    return buf;
}

static size_t file_row_bytes(const struct gk_qmat *w)
{
    return quant_row_bytes((enum quant_type)w->type, w->cols);
}

/* ---- whole rows ---------------------------------------------------------------- */

void gk_qdequant_f16_ref(const struct gk_qmat *w, int64_t r0, int64_t nr, uint16_t *dst)
{
    uint8_t *row = malloc(file_row_bytes(w));
    float *f = malloc((size_t)w->cols * sizeof *f);
    IG_ASSERT(row && f);
    for (int64_t r = 0; r < nr; r++) {
        quant_dequantize_row((enum quant_type)w->type, unpack_row(w, r0 + r, row), f, w->cols);
        for (int64_t c = 0; c < w->cols; c++)
            dst[r * w->cols + c] = ig_f32_to_f16(f[c]);
    }
    free(row);
    free(f);
}

void gk_qembed_ref(const struct gk_qmat *w, const int32_t *tokens, int64_t n, int64_t v0,
                   float *x)
{
    uint8_t *row = malloc(file_row_bytes(w));
    IG_ASSERT(row);
    for (int64_t t = 0; t < n; t++) {
        int64_t r = (int64_t)tokens[t] - v0;
        if (r >= 0 && r < w->rows)
            quant_dequantize_row((enum quant_type)w->type, unpack_row(w, r, row),
                                 x + t * w->cols, w->cols);
        else /* another rank's token */
            memset(x + t * w->cols, 0, (size_t)w->cols * sizeof *x);
    }
    free(row);
}

/* ---- random blocks ---------------------------------------------------------------- */

void gk_qrandom_fixed(int type, int64_t cols, uint16_t fixed[2])
{
    float a = 1.0f / sqrtf((float)cols), d = 0, m = 0;
    switch (type) {
    case QUANT_Q4_0: d = a / 8; break;                       /* d (q - 8), |q - 8| <= 8 */
    case QUANT_Q4_1: d = 2 * a / 15, m = -a; break;          /* d q + m */
    case QUANT_Q5_0: d = a / 16; break;
    case QUANT_Q5_1: d = 2 * a / 31, m = -a; break;
    case QUANT_Q8_0: d = a / 127; break;
    case QUANT_Q4_K: d = 2 * a / (15 * 63), m = a / 63; break; /* d sc q - dmin mn */
    case QUANT_Q5_K: d = 2 * a / (31 * 63), m = a / 63; break;
    case QUANT_Q6_K: d = a / (32 * 128); break;              /* d sc (q - 32) */
    case QUANT_MXFP4: /* the E8M0 byte e: 12 2^(e - 128) <= a, |value| <= 12 */
        fixed[0] = (uint16_t)(128 + (int)floorf(log2f(a / 12)));
        fixed[1] = 0;
        return;
    default: break;
    }
    fixed[0] = ig_f32_to_f16(d);
    fixed[1] = ig_f32_to_f16(m);
}

void gk_qrandom_ref(const struct gk_qmat *w, uint64_t seed)
{
    struct gk_qlayout l;
    IG_ASSERT(gk_qlayout_of(w->type, &l));
    size_t blocks = (size_t)(w->rows * (w->cols / l.block));
    uint16_t fixed[2];
    gk_qrandom_fixed(w->type, w->cols, fixed);
    for (size_t i = 0; i < blocks * l.q / 4; i++) {
        uint32_t v = gk_random_u32(seed, i);
        memcpy(w->q + 4 * i, &v, 4);
    }
    for (size_t i = 0; i < blocks * l.h / 4; i++) {
        uint32_t v = gk_random_u32(seed + 1, i);
        memcpy(w->h + 4 * i, &v, 4);
    }
    for (size_t b = 0; b < blocks; b++) {
        uint8_t *s = w->s + b * l.s;
        if (l.s == 1) { /* MXFP4's E8M0 byte */
            s[0] = (uint8_t)fixed[0];
            continue;
        }
        memcpy(s, &fixed[0], 2);
        if (l.s >= 4)
            memcpy(s + 2, &fixed[1], 2);
        for (uint32_t k = 0; 4 + 4 * k < l.s; k++) { /* K types: the scale bytes */
            uint32_t v = gk_random_u32(seed + 2, b * 4 + k);
            memcpy(s + 4 + 4 * k, &v, 4);
        }
    }
}

/* ---- the GEMV's block terms --------------------------------------------------------- */

/* Activation block b (32 elements) of a weight row in the file's format:
 * weight i = alpha[i / 16] * u[i] + beta, with u[i] an integer and alpha,
 * beta the f32 values the kernel scales the integer dot products with. */
struct wterms {
    int u[32];
    float alpha[2];
    float beta;
};

static void block_terms(int type, const uint8_t *row, int64_t b, struct wterms *t)
{
    const struct quant_traits *tr = quant_traits_of((uint32_t)type);
    memset(t, 0, sizeof *t);
    if (tr->block_elems == 32) {
        const uint8_t *blk = row + (size_t)b * tr->block_bytes;
        const uint8_t *qs = NULL;
        uint32_t qh = 0;
        int off = 0;
        t->alpha[0] = ig_f16_at(blk);
        switch (type) {
        case QUANT_Q4_0: qs = blk + 2, off = 8; break;
        case QUANT_Q4_1: qs = blk + 4, t->beta = ig_f16_at(blk + 2); break;
        case QUANT_Q5_0: memcpy(&qh, blk + 2, 4), qs = blk + 6, off = 16; break;
        case QUANT_Q5_1: memcpy(&qh, blk + 4, 4), qs = blk + 8, t->beta = ig_f16_at(blk + 2); break;
        default: /* Q8_0 */
            for (int i = 0; i < 32; i++)
                t->u[i] = (int8_t)blk[2 + i];
            t->alpha[1] = t->alpha[0];
            return;
        }
        for (int i = 0; i < 32; i++) {
            int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
            t->u[i] = q + (int)(((qh >> i) & 1u) << 4) - off;
        }
        t->alpha[1] = t->alpha[0];
        return;
    }
    const uint8_t *blk = row + (size_t)(b / 8) * tr->block_bytes;
    int j = (int)(b % 8); /* the 32-element sub-block within the super-block */
    if (type == QUANT_Q6_K) {
        const uint8_t *ql = blk + offsetof(struct block_q6_K, ql);
        const uint8_t *qh = blk + offsetof(struct block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(blk + offsetof(struct block_q6_K, scales));
        float d = ig_f16_at(blk + offsetof(struct block_q6_K, d));
        int half = j / 4, quarter = j % 4;
        for (int l = 0; l < 32; l++) {
            int lo = ql[64 * half + 32 * (quarter % 2) + l];
            int q = (quarter < 2 ? lo & 15 : lo >> 4) |
                    ((qh[32 * half + l] >> (2 * quarter)) & 3) << 4;
            t->u[l] = q - 32;
        }
        t->alpha[0] = d * (float)sc[8 * half + 2 * quarter];
        t->alpha[1] = d * (float)sc[8 * half + 2 * quarter + 1];
        return;
    }
    /* Q4_K, Q5_K */
    float d = ig_f16_at(blk), dmin = ig_f16_at(blk + 2);
    int sc, mn;
    quant_k4_scale_min(blk + 4, j, &sc, &mn);
    const uint8_t *qs = blk + (type == QUANT_Q4_K ? offsetof(struct block_q4_K, qs)
                                                  : offsetof(struct block_q5_K, qs));
    for (int l = 0; l < 32; l++) {
        int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        if (type == QUANT_Q5_K)
            q |= ((blk[offsetof(struct block_q5_K, qh) + l] >> j) & 1) << 4;
        t->u[l] = q;
    }
    t->alpha[0] = t->alpha[1] = d * (float)sc;
    t->beta = -(dmin * (float)mn);
}

/* ops_qmm_quantize a row at a time, copied into the kernels' layout. */
void gk_quantize_rows_ref(const uint16_t *x, int64_t ld, int64_t n, int64_t dim, int8_t *q,
                          float *qd)
{
    int64_t nb = dim / 32;
    float *f = malloc((size_t)dim * sizeof *f);
    struct qmm_q8 *b = malloc((size_t)nb * sizeof *b);
    IG_ASSERT(f && b);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t c = 0; c < dim; c++)
            f[c] = ig_f16_to_f32(x[t * ld + c]);
        ops_qmm_quantize(f, dim, b);
        for (int64_t i = 0; i < nb; i++) {
            memcpy(q + t * ld + 32 * i, b[i].qs, 32);
            qd[2 * (t * (ld / 32) + i)] = b[i].d;
            qd[2 * (t * (ld / 32) + i) + 1] = b[i].s;
        }
    }
    free(b);
    free(f);
}

void gk_qgemv_ref(const struct gk_qgemv_params *p)
{
    if (p->rope) { /* the product, then gk_qkv_rope's twin over it */
        struct gk_qgemv_params q = *p;
        float *y = malloc((size_t)(p->n * p->w.rows) * sizeof *y);
        IG_ASSERT(y);
        q.rope = NULL, q.y = y, q.ld_y = p->w.rows, q.beta = 0;
        gk_qgemv_ref(&q);
        struct gk_qkv_params r = *p->rope;
        r.qkv = y;
        gk_qkv_rope_ref(&r);
        free(y);
        return;
    }
    if (p->glu != GK_GLU_NONE) { /* the product, then the activation's twin (and h's blocks) */
        struct gk_qgemv_params q = *p;
        float *y = malloc((size_t)(p->n * p->w.rows) * sizeof *y);
        IG_ASSERT(y);
        q.glu = GK_GLU_NONE, q.y = y, q.ld_y = p->w.rows, q.beta = 0;
        q.qn = NULL, q.qnd = NULL, q.ticket = NULL;
        gk_qgemv_ref(&q);
        for (int64_t t = 0; t < p->n; t++) {
            if (p->glu == GK_GLU_GELU)
                gk_geglu_ref(y + t * p->w.rows, 1, p->w.rows / 2, p->h + t * p->ld_h);
            else
                gk_swiglu_ref(y + t * p->w.rows, 1, p->w.rows / 2, p->h + t * p->ld_h);
        }
        free(y);
        if (p->qn)
            gk_quantize_rows_ref(p->h, p->ld_h, p->n, p->w.rows / 2, p->qn, p->qnd);
        return;
    }
    const struct gk_qmat *w = &p->w;
    int64_t nb = w->cols / 32;
    struct qmm_q8 *xq = malloc((size_t)(p->n * nb) * sizeof *xq);
    float *xf = malloc((size_t)w->cols * sizeof *xf);
    uint8_t *row = malloc(file_row_bytes(w));
    struct wterms *terms = malloc((size_t)nb * sizeof *terms);
    IG_ASSERT(xq && xf && row && terms);
    for (int64_t t = 0; t < p->n; t++) {
        for (int64_t c = 0; c < w->cols; c++)
            xf[c] = ig_f16_to_f32(p->x[t * p->ld_x + c]);
        ops_qmm_quantize(xf, w->cols, xq + t * nb);
    }
    for (int64_t r = 0; r < w->rows; r++) {
        unpack_row(w, r, row);
        for (int64_t b = 0; b < nb; b++)
            block_terms(w->type, row, b, &terms[b]);
        for (int64_t t = 0; t < p->n; t++) {
            double acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                const struct qmm_q8 *xb = &xq[t * nb + b];
                const struct wterms *wt = &terms[b];
                int64_t isum[2] = {0, 0};
                for (int i = 0; i < 32; i++)
                    isum[i / 16] += (int64_t)wt->u[i] * xb->qs[i];
                acc += (double)xb->d * ((double)wt->alpha[0] * (double)isum[0] +
                                        (double)wt->alpha[1] * (double)isum[1]) +
                       (double)wt->beta * (double)xb->s;
            }
            float *y = &p->y[t * p->ld_y + r];
            if (p->beta != 0)
                acc += (double)p->beta * *y;
            *y = (float)acc;
        }
    }
    free(terms);
    free(row);
    free(xf);
    free(xq);
    if (p->norm_w) /* the norm tail's twin */
        gk_rmsnorm_ref(p->y, p->ld_y, p->norm_w, p->n, w->rows, p->norm_eps, p->xn);
    if (p->qn) /* and its int8 blocks, as the GEMV quantizes x */
        gk_quantize_rows_ref(p->xn, w->rows, p->n, w->rows, p->qn, p->qnd);
}

/* ---- the tensor-core kernel's result ------------------------------------------------- */

void gk_qmma_ref(const struct gk_qgemv_params *p)
{
    const struct gk_qmat *w = &p->w;
    uint16_t *wr = malloc((size_t)w->cols * sizeof *wr);
    float *xf = malloc((size_t)(p->n * w->cols) * sizeof *xf);
    float *wf = malloc((size_t)w->cols * sizeof *wf);
    IG_ASSERT(wr && xf && wf);
    for (int64_t t = 0; t < p->n; t++)
        for (int64_t c = 0; c < w->cols; c++)
            xf[t * w->cols + c] = ig_f16_to_f32(p->x[t * p->ld_x + c]);
    for (int64_t r = 0; r < w->rows; r++) {
        gk_qdequant_f16_ref(w, r, 1, wr);
        for (int64_t c = 0; c < w->cols; c++)
            wf[c] = ig_f16_to_f32(wr[c]);
        for (int64_t t = 0; t < p->n; t++) {
            const float *xt = xf + t * w->cols;
            double acc = 0; /* products of f16 values are exact */
            for (int64_t c = 0; c < w->cols; c++)
                acc += (double)(wf[c] * xt[c]);
            float *y = &p->y[t * p->ld_y + r];
            if (p->beta != 0)
                acc += (double)p->beta * *y;
            *y = (float)acc;
        }
    }
    free(wf);
    free(xf);
    free(wr);
}
