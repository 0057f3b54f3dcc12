/* backend/gpu_matmul.c: the CUDA backend's one matrix product and its
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
#else
    (void)g;
#endif
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
    switch (plan.path) {
    case GK_QMM_GEMV_F16:
#if defined(IG_EMU_BACKEND)
        if (!g->emu_kernels) {
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

int IG_DEV(gpu_embed)(struct gpu_backend *g, const int32_t *tokens, int64_t n, float *x)
{
    const struct gk_qmat *t = &g->mat[MODEL_TOK_EMBD].part[0];
    if (t->type == QUANT_F16)
        return IG_DEV(gk_embed)((const uint16_t *)t->q, tokens, n, t->cols, x, g->stream);
    return IG_DEV(gk_qembed)(t, tokens, n, x, g->stream);
}
