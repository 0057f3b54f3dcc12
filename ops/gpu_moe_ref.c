/* ops/gpu_moe_ref.c: the CPU twins of the mixture-of-experts kernels
 * (ops/gpu_moe.h, ops/gpu_moe.cu), written for clarity: host pointers,
 * sums in f64, the weights' values through the file's blocks
 * (gk_qunpack_row_ref, quant_dequantize_row). Routing, grouping and the
 * choice of experts are the kernels' exactly; the sums differ by their
 * order only (gk_moe_mma's also by its f16 weights). And the chooser of the
 * two products, gk_moe_choose. Covered by tests/emu/test_moe_emu.c. */
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"

#include <math.h>
#include <stdlib.h>

/* A type the device keeps expert matrices in (gk_moe_mma reads them all). */
static bool expert_type(int type)
{
    return type == QUANT_F16 || gk_qlayout_of(type, NULL);
}

int64_t gk_moe_choose(int type, int down_type, int64_t n_pairs, int64_t n_expert)
{
    bool mma_type = expert_type(type) && expert_type(down_type);
    return mma_type && n_pairs >= GK_MOE_MMA_MIN_PAIRS * n_expert ? GK_MOE_MMA_TILE
                                                                  : GK_MOE_TILE;
}

void gk_moe_route_ref(const struct gk_moe_route_params *p)
{
    int64_t e_dim = p->n_embd, ne = p->n_expert, k = p->k;
    double *xn = malloc((size_t)e_dim * sizeof *xn);
    double *lg = malloc((size_t)ne * sizeof *lg);
    IG_ASSERT(xn && lg && ne <= GK_MOE_MAX_EXPERTS && k <= ne);
    for (int64_t t = 0; t < p->n; t++) {
        const float *xr = p->x + t * p->ld_x;
        double ss = 0;
        for (int64_t c = 0; c < e_dim; c++)
            ss += (double)xr[c] * xr[c];
        double r = 1.0 / sqrt(ss / (double)e_dim + p->eps);
        for (int64_t c = 0; c < e_dim; c++)
            xn[c] = (p->in_scale != 0.0f ? xr[c] * r * p->in_scale : xr[c] * r) * p->norm_w[c];
        for (int64_t e = 0; e < ne; e++) {
            double a = 0;
            for (int64_t c = 0; c < e_dim; c++)
                a += (double)p->router[e * e_dim + c] * xn[c];
            lg[e] = (float)a + (p->bias ? p->bias[e] : 0.0f);
        }
        if (p->shexp_gate) {
            double a = 0;
            for (int64_t c = 0; c < e_dim; c++)
                a += (double)p->shexp_gate[c] * xn[c];
            p->shexp_w[t] = (float)(1.0 / (1.0 + exp(-a)));
        }
        /* the largest first, the lower index on a tie */
        char taken[GK_MOE_MAX_EXPERTS] = {0};
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < ne; e++)
                if (!taken[e] && (best < 0 || lg[e] > lg[best]))
                    best = e;
            IG_ASSERT(best >= 0);
            taken[best] = 1;
        }
        double mx = -INFINITY, all = 0, chosen = 0;
        for (int64_t e = 0; e < ne; e++)
            mx = lg[e] > mx ? lg[e] : mx;
        for (int64_t e = 0; e < ne; e++)
            all += exp(lg[e] - mx);
        int32_t *sel = p->sel + t * k;
        int64_t j = 0;
        for (int64_t e = 0; e < ne; e++)
            if (taken[e]) {
                sel[j++] = (int32_t)e;
                chosen += exp(lg[e] - mx);
            }
        for (j = 0; j < k; j++)
            p->wts[t * k + j] = (float)(exp(lg[sel[j]] - mx) / (p->norm_topk ? chosen : all));
    }
    free(xn);
    free(lg);
}

void gk_moe_sort_ref(const struct gk_moe_sort_params *p)
{
    int32_t j = 0, t = 0, tile = p->tile ? (int32_t)p->tile : GK_MOE_TILE;
    for (int64_t e = 0; e < p->n_expert; e++) {
        int32_t s = j;
        for (int64_t i = 0; i < p->n_pairs; i++)
            if (p->sel[i] == p->expert0 + e)
                p->order[j++] = (int32_t)i;
        for (int32_t o = s; o < j; o += tile, t++) {
            p->tiles[3 * t] = (int32_t)e;
            p->tiles[3 * t + 1] = o;
            p->tiles[3 * t + 2] = j - o < tile ? j - o : tile;
        }
    }
    *p->n_tiles = t;
}

/* Row `row` of w as f32 values into f ([cols]); raw: a scratch row of the
 * file's blocks. */
static void weight_row(const struct gk_qmat *w, int64_t row, void *raw, float *f)
{
    if (w->type == QUANT_F16) {
        const uint16_t *h = (const uint16_t *)w->q + row * w->cols;
        for (int64_t c = 0; c < w->cols; c++)
            f[c] = ig_f16_to_f32(h[c]);
        return;
    }
    gk_qunpack_row_ref(w, row, raw);
    quant_dequantize_row((uint32_t)w->type, raw, f, w->cols);
}

static double dot_f16(const float *w, const uint16_t *x, int64_t n)
{
    double s = 0;
    for (int64_t c = 0; c < n; c++)
        s += (double)w[c] * ig_f16_to_f32(x[c]);
    return s;
}

void gk_moe_gemv_ref(const struct gk_moe_gemv_params *p)
{
    int64_t cols = p->w.cols;
    float *wa = malloc((size_t)cols * sizeof *wa), *wb = malloc((size_t)cols * sizeof *wb);
    void *raw = malloc((size_t)cols * 4 + 64);
    IG_ASSERT(wa && wb && raw);
    for (int32_t t = 0; t < *p->n_tiles; t++) {
        int32_t ex = p->tiles[3 * t], first = p->tiles[3 * t + 1], cnt = p->tiles[3 * t + 2];
        for (int64_t i = 0; i < p->rows; i++) {
            int64_t row = ex * p->rows + i;
            weight_row(&p->w, row, raw, wa);
            if (p->glu)
                weight_row(&p->w2, row, raw, wb);
            for (int32_t j = 0; j < cnt; j++) {
                int64_t pair = p->order[first + j];
                const uint16_t *x = p->x + (pair / p->x_div) * p->ld_x;
                float a = (float)dot_f16(wa, x, cols) + (p->bias ? p->bias[row] : 0.0f);
                if (!p->glu) {
                    p->y[pair * p->ld_y + i] = p->scale ? p->scale[ex] * a : a;
                    continue;
                }
                float b = (float)dot_f16(wb, x, cols) + (p->bias2 ? p->bias2[row] : 0.0f);
                if (p->glu == GK_MOE_GLU_OAI) {
                    float g = 7.0f < a ? 7.0f : a;
                    float u = b < -7.0f ? -7.0f : 7.0f < b ? 7.0f : b;
                    p->h[pair * p->ld_h + i] =
                        ig_f32_to_f16(g / (1.0f + expf(1.702f * -g)) * (u + 1.0f));
                } else { /* gk_swiglu's and gk_geglu's twins on the one pair */
                    float gu[2] = {a, b};
                    (p->glu == GK_GLU_GELU ? gk_geglu_ref : gk_swiglu_ref)(gu, 1, 1,
                                                                          p->h + pair * p->ld_h + i);
                }
            }
        }
    }
    free(wa);
    free(wb);
    free(raw);
}

void gk_moe_combine_ref(float *x, int64_t ld_x, const float *y, int64_t ld_y, const float *wts,
                        struct gk_moe_part part, int64_t n, int64_t k, int64_t dim)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t d = 0; d < dim; d++) {
            double s = 0;
            for (int64_t j = 0; j < k; j++) {
                int64_t e = part.sel ? part.sel[t * k + j] : 0;
                if (!part.sel || (e >= part.expert0 && e < part.expert0 + part.n_expert))
                    s += (double)wts[t * k + j] * y[(t * k + j) * ld_y + d];
            }
            x[t * ld_x + d] += (float)s;
        }
}
