/* backend/gpu_matmul.c: the CUDA backend's one matrix product (and, for a
 * decode step's fused launches, the gate|up product with its activation,
 * gpu_matmul_glu, and a residual product with the next norm, gpu_matmul_norm)
 * and its
 * embedding lookup over struct gpu_matrix: for each part of one type,
 * gk_qmm_choose (ops/gpu_qlayout.c) names the path for the number of rows
 * and this file launches it:
 *   f16 weights: gk_gemv_f16 for one row, the device GEMM (cuBLAS) for more;
 *   quantized:   gk_qgemv up to GK_QGEMV_MAX_N rows, gk_qmma above, and for
 *                many rows the part dequantized in slabs of rows into the f16
 *                scratch (gk_qdequant_f16), each slab through the GEMM.
 * Everything is queued on the backend's stream, nothing allocated, so a
 * decode step that calls it is captured as a graph.
 *
 * Emulated build (IG_EMU_BACKEND): the products run on the CPU through the
 * kernels' twins (the device GEMM is a CPU loop there too), as emulating
 * every thread of a real model's products would take minutes per token;
 * IGNITE_EMU_MATMUL=kernels runs the emulated kernels instead, for the small
 * synthetic models of tests/emu/test_backend_qemu.c. The embedding lookup is
 * always the emulated kernel (a few rows).
 * Covered by tests/emu/test_backend_emu.c, test_backend_qemu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_ops.h"

#include <stdlib.h>
#include <string.h>

int IG_DEV(gpu_matmul_setup)(struct gpu_backend *g)
{
#if defined(IG_EMU_BACKEND)
    const char *e = getenv("IGNITE_EMU_MATMUL");
    g->emu_kernels = e && !strcmp(e, "kernels");
#endif
    const char *f = getenv("IGNITE_GPU_FUSE");
    if (f && strcmp(f, "0") && strcmp(f, "1"))
        return ig_error(IG_E_USAGE, "IGNITE_GPU_FUSE is '%s': it takes 0 (a decode step's "
                        "launches one by one) or 1 (fused, the default)", f);
    g->fuse = !f || !strcmp(f, "1");
    return gk_qmm_check_env();
}

#if defined(IG_EMU_BACKEND)
/* The twin of a quantized product on the CPU: QGEMV by gk_qgemv_ref, the
 * others (whose result is the f16 GEMM of the dequantized rows) by
 * dequantizing into a host buffer and the emulated device GEMM. */
static int twin_product(struct gpu_backend *g, enum gk_qmm_path path,
                        const struct gk_qgemv_params *p)
{
    if (path == GK_QMM_QGEMV) {
        IG_DEV(dev_note_launch)(g->dev); /* the kernel it stands for */
        gk_qgemv_ref(p);
        return IG_OK;
    }
    uint16_t *w16 = malloc((size_t)(p->w.rows * p->w.cols) * sizeof *w16);
    if (!w16)
        return ig_error(IG_E_NOMEM, "out of memory dequantizing a weight (emulated device)");
    gk_qdequant_f16_ref(&p->w, 0, p->w.rows, w16);
    int st = IG_DEV(dev_gemm_f16)(g->dev, w16, p->x, p->y, p->w.rows, p->w.cols, p->n, p->ld_x,
                                  p->ld_y, p->beta);
    free(w16);
    return st;
}
#endif

/* Where x is g->xn and a norm tail (or a decode step's norm launch) left
 * its int8 blocks (g->xq_ready), the quantized GEMV loads them instead of
 * quantizing x again in every block; likewise where x is g->att16 and the
 * decode attention left o's (g->oq_ready: wo), and where x is g->h16 and
 * the gate|up GEMV's tail left its blocks (g->hq_ready). A product of
 * anything else ends hq_ready: only gpu_matmul_glu sets it, and the
 * unfused FFN's gate|up product, which comes before its activation
 * rewrites h16, clears it. */
static void x_blocks(struct gpu_backend *g, struct gk_qgemv_params *p)
{
    if (g->xq_ready && p->x == g->xn && p->ld_x == g->m->hp.n_embd) {
        p->xq = g->xq;
        p->xqd = g->xqd;
    }
    if (g->oq_ready && p->x == g->att16 && p->ld_x == g->oq_ld) {
        p->xq = g->oq;
        p->xqd = g->oqd;
    }
    if (p->x != g->h16)
        g->hq_ready = false;
    else if (g->hq_ready && p->ld_x == g->hq_ld) {
        p->xq = g->hq;
        p->xqd = g->hqd;
    }
}

/* One part: y (already offset to the part's first row) for n rows. */
static int part_product(struct gpu_backend *g, const struct gk_qmat *w, const uint16_t *x,
                        int64_t ld_x, int64_t n, float *y, int64_t ld_y, float beta)
{
    struct gk_qmm_plan plan;
    int st = gk_qmm_choose(w->type, w->rows, w->cols, n, &plan);
    if (st != IG_OK)
        return st;
    const uint16_t *w16 = (const uint16_t *)w->q;
    struct gk_qgemv_params p = {.w = *w, .x = x, .ld_x = ld_x, .n = n, .y = y, .ld_y = ld_y,
                                .beta = beta};
    x_blocks(g, &p);
    switch (plan.path) {
    case GK_QMM_GEMV_F16:
#if defined(IG_EMU_BACKEND)
        if (!g->emu_kernels) {
            IG_DEV(dev_note_launch)(g->dev);
            gk_gemv_f16_ref(w16, x, y, w->rows, w->cols, beta);
            return IG_OK;
        }
#endif
        return IG_DEV(gk_gemv_f16)(w16, x, y, w->rows, w->cols, beta, g->stream);
    case GK_QMM_GEMM_F16:
        return IG_DEV(dev_gemm_f16)(g->dev, w16, x, y, w->rows, w->cols, n, ld_x, ld_y, beta);
    default:
        break;
    }
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels)
        return twin_product(g, plan.path, &p);
#endif
    if (plan.path == GK_QMM_QGEMV)
        return IG_DEV(gk_qgemv)(&p, g->stream);
    if (plan.path == GK_QMM_QMMA)
        return IG_DEV(gk_qmma)(&p, g->stream);
    /* GK_QMM_DEQUANT: slabs of rows through the f16 scratch */
    if (plan.scratch_bytes > g->mm_scratch_bytes)
        return ig_error(IG_E_INTERNAL, "gpu_matmul: the plan needs %zu bytes of scratch, %zu "
                        "were allocated", plan.scratch_bytes, g->mm_scratch_bytes);
    for (int64_t r0 = 0; r0 < w->rows && st == IG_OK; r0 += plan.slab_rows) {
        int64_t nr = w->rows - r0 < plan.slab_rows ? w->rows - r0 : plan.slab_rows;
        if ((st = IG_DEV(gk_qdequant_f16)(w, r0, nr, g->mm_scratch, g->stream)) == IG_OK)
            st = IG_DEV(dev_gemm_f16)(g->dev, g->mm_scratch, x, y + r0, nr, w->cols, n, ld_x,
                                      ld_y, beta);
    }
    return st;
}

int IG_DEV(gpu_matmul)(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *x,
                       int64_t ld_x, int64_t n, float *y, int64_t ld_y, float beta)
{
    int st = IG_OK;
    for (int i = 0; i < w->n_parts && st == IG_OK; i++)
        st = part_product(g, &w->part[i], x, ld_x, n, y + w->row0[i], ld_y, beta);
    return st;
}

/* Whether w's product of n rows is one GEMV launch with an epilogue of
 * ours: fused steps (g->fuse), one part, a GEMV path. */
static bool one_gemv(const struct gpu_backend *g, const struct gpu_matrix *w, int64_t n)
{
    struct gk_qmm_plan plan;
    if (!g->fuse || w->n_parts != 1 ||
        gk_qmm_choose(w->part[0].type, w->rows, w->cols, n, &plan) != IG_OK)
        return false;
    return plan.path == GK_QMM_QGEMV || plan.path == GK_QMM_GEMV_F16;
}

bool IG_DEV(gpu_matmul_glu_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                               int64_t n)
{
    return w->rows % 2 == 0 && one_gemv(g, w, n);
}

bool IG_DEV(gpu_matmul_norm_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                                int64_t n)
{
    return one_gemv(g, w, n);
}

bool IG_DEV(gpu_matmul_rope_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                                int64_t n)
{
    return w->rows % 2 == 0 && one_gemv(g, w, n);
}

int IG_DEV(gpu_matmul_rope)(struct gpu_backend *g, const struct gpu_matrix *w,
                            const uint16_t *x, int64_t ld_x, int64_t n,
                            const struct gk_qkv_params *rope)
{
    struct gk_qmm_plan plan;
    const struct gk_qmat *p0 = &w->part[0];
    int st = gk_qmm_choose(p0->type, p0->rows, p0->cols, n, &plan);
    if (st != IG_OK)
        return st;
    struct gk_qgemv_params p = {.w = *p0, .x = x, .ld_x = ld_x, .n = n, .rope = rope};
    x_blocks(g, &p);
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels) { /* the product's twin (one launch) into qkv, then RoPE's */
        IG_DEV(dev_note_launch)(g->dev);
        struct gk_qkv_params r = *rope;
        r.qkv = g->qkv;
        if (plan.path == GK_QMM_GEMV_F16)
            gk_gemv_f16_ref((const uint16_t *)p0->q, x, g->qkv, p0->rows, p0->cols, 0.0f);
        else
            gk_qgemv_ref(&(struct gk_qgemv_params){.w = *p0, .x = x, .ld_x = ld_x, .n = n,
                                                   .y = g->qkv, .ld_y = p0->rows});
        gk_qkv_rope_ref(&r);
        return IG_OK;
    }
#endif
    if (plan.path == GK_QMM_GEMV_F16)
        return IG_DEV(gk_gemv_f16_rope)((const uint16_t *)p0->q, x, p0->rows, p0->cols, rope,
                                        g->stream);
    IG_ASSERT(plan.path == GK_QMM_QGEMV);
    return IG_DEV(gk_qgemv)(&p, g->stream);
}

int IG_DEV(gpu_matmul_norm)(struct gpu_backend *g, const struct gpu_matrix *w,
                            const uint16_t *x, int64_t ld_x, int64_t n, float *y, int64_t ld_y,
                            const float *norm_w, float eps, uint16_t *xn)
{
    struct gk_qmm_plan plan;
    const struct gk_qmat *p0 = &w->part[0];
    int st = gk_qmm_choose(p0->type, p0->rows, p0->cols, n, &plan);
    if (st != IG_OK)
        return st;
    struct gk_qgemv_params p = {.w = *p0, .x = x, .ld_x = ld_x, .n = n, .y = y, .ld_y = ld_y,
                                .beta = 1.0f, .norm_w = norm_w, .norm_eps = eps, .xn = xn,
                                .ticket = g->norm_ticket};
    x_blocks(g, &p);
    /* the quantized tail also leaves xn's int8 blocks (the f16 GEMV has no use for them) */
    g->xq_ready = false;
    if (plan.path == GK_QMM_QGEMV && g->xq && xn == g->xn && p0->rows == g->m->hp.n_embd) {
        p.qn = g->xq;
        p.qnd = g->xqd;
        g->xq_ready = true;
    }
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels) { /* the product's twin (one launch), then the norm's */
        IG_DEV(dev_note_launch)(g->dev);
        if (plan.path == GK_QMM_GEMV_F16) {
            gk_gemv_f16_ref((const uint16_t *)p0->q, x, y, p0->rows, p0->cols, 1.0f);
            gk_rmsnorm_ref(y, ld_y, norm_w, n, p0->rows, eps, xn);
        } else {
            gk_qgemv_ref(&p);
        }
        return IG_OK;
    }
#endif
    if (plan.path == GK_QMM_GEMV_F16)
        return IG_DEV(gk_gemv_f16_norm)((const uint16_t *)p0->q, x, y, p0->rows, p0->cols,
                                        norm_w, eps, xn, g->norm_ticket, g->stream);
    IG_ASSERT(plan.path == GK_QMM_QGEMV);
    return IG_DEV(gk_qgemv)(&p, g->stream);
}

int IG_DEV(gpu_matmul_glu)(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *x,
                           int64_t ld_x, int64_t n, int act, uint16_t *h, int64_t ld_h)
{
    struct gk_qmm_plan plan;
    const struct gk_qmat *p0 = &w->part[0];
    int st = gk_qmm_choose(p0->type, p0->rows, p0->cols, n, &plan);
    if (st != IG_OK)
        return st;
    if (plan.path == GK_QMM_GEMV_F16) {
#if defined(IG_EMU_BACKEND)
        if (!g->emu_kernels) {
            IG_DEV(dev_note_launch)(g->dev);
            gk_gemv_f16_glu_ref((const uint16_t *)p0->q, x, h, p0->rows, p0->cols, act);
            return IG_OK;
        }
#endif
        return IG_DEV(gk_gemv_f16_glu)((const uint16_t *)p0->q, x, h, p0->rows, p0->cols, act,
                                       g->stream);
    }
    IG_ASSERT(plan.path == GK_QMM_QGEMV);
    struct gk_qgemv_params p = {.w = *p0, .x = x, .ld_x = ld_x, .n = n, .glu = act, .h = h,
                                .ld_h = ld_h};
    x_blocks(g, &p);
    /* the tail also leaves h's int8 blocks for the down GEMV */
    if (g->hq && h == g->h16 && ld_h % 32 == 0 && p0->rows % 64 == 0) {
        p.qn = g->hq;
        p.qnd = g->hqd;
        p.ticket = g->glu_tickets;
        g->hq_ld = ld_h;
        g->hq_ready = true;
    }
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels) {
        IG_DEV(dev_note_launch)(g->dev);
        gk_qgemv_ref(&p);
        return IG_OK;
    }
#endif
    return IG_DEV(gk_qgemv)(&p, g->stream);
}

int IG_DEV(gpu_embed)(struct gpu_backend *g, const int32_t *tokens, int64_t n, float *x)
{
    const struct gk_qmat *t = &g->mat[MODEL_TOK_EMBD].part[0];
    if (t->type == QUANT_F16)
        return IG_DEV(gk_embed)((const uint16_t *)t->q, tokens, n, t->cols, g->vocab0, t->rows,
                                x, g->stream);
    return IG_DEV(gk_qembed)(t, tokens, n, g->vocab0, x, g->stream);
}
