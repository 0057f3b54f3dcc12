/* backend/gpu_weights.c: the model's weights onto the device, as
 * backend/gpu_plan.h plans them: Q|K|V and gate|up as one matrix each, in
 * parts of one device type; a quantized part in its blocks (the file's rows
 * copied to a staging buffer, repacked into the planes on the device,
 * ops/gpu_qmm.h), an f16 part dequantized on the device from the file's
 * blocks where a kernel reads the type (ops/gpu_ops.h) and on the host
 * otherwise; random values made on the device for a shapes-only synthetic
 * model. Norms (Qwen 3's and Gemma 3's head and post norms too) and biases
 * f32. Every weight of the table of tensors (models/tensors.h) the model
 * has, each fused group into one buffer. Then the matmul scratch for
 * max_batch rows.
 * Covered by tests/emu/test_backend_emu.c, test_backend_qemu.c and
 * tests/gpu/test_backend_gpu.c. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "ops/gpu_ops.h"
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>

/* Per-weight seed for synthetic weights: distinct and stable (`role`: the
 * weight's enum layer_role, or enum model_role at layer -1). */
static uint64_t weight_seed(int64_t layer, int role)
{
    return 0x9E3779B97F4A7C15ULL * (uint64_t)(layer * 16 + role + 1);
}

/* Writes weight w as f16 into dst ([rows][cols]): random on the device for a
 * shapes-only model, dequantized on the device for the common block types,
 * else on the host. `staging` holds any raw weight. */
static int put_f16(struct gpu_backend *g, const struct model_weight *w, uint16_t *dst,
                   void *staging, uint64_t seed)
{
    size_t raw = model_weight_size(w);
    if (!w->data)
        return IG_DEV(gk_random_f16)(dst, w->rows * w->cols, seed, 0.0f,
                                     1.0f / sqrtf((float)w->cols), g->stream);
    /* F16 rows are the layout already: gk_dequant_f16 would copy them bit
     * for bit (and the emulator a thread an element) */
    if (w->type == QUANT_F16 && w->row_bytes == (size_t)w->cols * 2)
        return IG_DEV(dev_upload)(g->dev, dst, w->data, raw);
    if (gk_dequant_supported((int)w->type)) {
        int st = IG_DEV(dev_upload)(g->dev, staging, w->data, raw);
        if (st == IG_OK)
            st = IG_DEV(gk_dequant_f16)((int)w->type, staging, w->rows, w->cols, w->row_bytes,
                                        dst, g->stream);
        return st;
    }
    /* Other block types: a few rows at a time through the host. */
    int64_t rows_per = ((int64_t)1 << 20) / w->cols; /* ~2 MiB of f16 per copy */
    rows_per = rows_per < 1 ? 1 : rows_per;
    float *f = malloc((size_t)w->cols * sizeof *f);
    uint16_t *h = malloc((size_t)(rows_per * w->cols) * sizeof *h);
    int st = f && h ? IG_OK : ig_error(IG_E_NOMEM, "out of memory converting weights");
    for (int64_t r0 = 0; r0 < w->rows && st == IG_OK; r0 += rows_per) {
        int64_t nr = w->rows - r0 < rows_per ? w->rows - r0 : rows_per;
        for (int64_t r = 0; r < nr; r++) {
            quant_dequantize_row(w->type, (const char *)w->data + (size_t)(r0 + r) * w->row_bytes,
                                 f, w->cols);
            for (int64_t c = 0; c < w->cols; c++)
                h[r * w->cols + c] = ig_f32_to_f16(f[c]);
        }
        st = IG_DEV(dev_upload)(g->dev, dst + r0 * w->cols, h,
                                (size_t)(nr * w->cols) * sizeof *h);
    }
    free(f);
    free(h);
    return st;
}

/* Writes weight w into its rows `dst` of a part of w's own block type:
 * random blocks for a shapes-only model, else the file's rows repacked. */
static int put_native(struct gpu_backend *g, const struct model_weight *w,
                      const struct gk_qmat *dst, void *staging, uint64_t seed)
{
    if (!w->data)
        return IG_DEV(gk_qrandom)(dst, seed, g->stream);
    int st = IG_DEV(dev_upload)(g->dev, staging, w->data, model_weight_size(w));
    return st == IG_OK ? IG_DEV(gk_qrepack)(dst, staging, w->row_bytes, g->stream) : st;
}

/* Allocates and fills the fused matrix of the n weights ws (rows stacked),
 * seeds[i] for weight i. */
static int put_matrix(struct gpu_backend *g, struct gpu_matrix *m,
                      const struct model_weight *const *ws, int n, const uint64_t *seeds,
                      void *staging)
{
    struct gpu_plan_part parts[GPU_PLAN_MAX_PARTS];
    *m = (struct gpu_matrix){.cols = ws[0]->cols,
                             .n_parts = gpu_plan_parts(ws, n, g->weights_mode, parts)};
    int st = IG_OK;
    for (int p = 0; p < m->n_parts && st == IG_OK; p++) {
        const struct gpu_plan_part *pp = &parts[p];
        void *base;
        st = IG_DEV(gpu_alloc)(g, gk_qmat_bytes(pp->type, pp->rows, m->cols), &base,
                               &g->weight_bytes);
        if (st != IG_OK)
            break;
        gk_qmat_carve(&m->part[p], pp->type, pp->rows, m->cols, base);
        m->row0[p] = m->rows;
        m->rows += pp->rows;
        int64_t r = 0;
        for (int i = pp->first; i < pp->first + pp->count && st == IG_OK; i++)
            for (int64_t e = 0; e < ws[i]->n_expert && st == IG_OK; e++) {
                /* an expert weight's matrices one after the other (each
                 * read through its own pointer: a folder's lie apart) */
                struct model_weight w = ops_weight_expert(ws[i], e);
                struct gk_qmat rows = gk_qmat_rows(&m->part[p], r, w.rows);
                uint64_t seed = seeds[i] + 0x51ED27ULL * (uint64_t)e;
                st = pp->type == QUANT_F16
                         ? put_f16(g, &w, (uint16_t *)rows.q, staging, seed)
                         : put_native(g, &w, &rows, staging, seed);
                r += w.rows;
            }
        /* The staging buffer is reused by the next weight's copy: stream
         * order keeps it behind this weight's kernels. */
    }
    return st;
}

/* An f32 vector weight (norm, bias) of n elements into dst. */
static int put_vector(struct gpu_backend *g, const struct model_weight *w, float *dst, int64_t n,
                      float center, uint64_t seed)
{
    if (!w->data)
        return IG_DEV(gk_random_f32)(dst, n, seed, center, center ? 0.1f : 0.02f, g->stream);
    IG_ASSERT(w->type == QUANT_F32 && w->n_expert * w->rows * w->cols == n);
    return IG_DEV(dev_upload)(g->dev, dst, w->data, (size_t)n * sizeof(float));
}

/* A router (gpu_plan_f32_matrix) as f32 [rows * cols] into a new *vec:
 * random for a shapes-only model, else its values (dequantized on the host
 * where the file's type is not F32). */
static int put_router(struct gpu_backend *g, const struct model_weight *w, float **vec,
                      uint64_t seed)
{
    int64_t n = w->rows * w->cols;
    int st = IG_DEV(gpu_alloc)(g, (size_t)n * 4, vec, &g->weight_bytes);
    if (st != IG_OK)
        return st;
    if (!w->data)
        return IG_DEV(gk_random_f32)(*vec, n, seed, 0.0f, 1.0f / sqrtf((float)w->cols),
                                     g->stream);
    if (w->type == QUANT_F32)
        return IG_DEV(dev_upload)(g->dev, *vec, w->data, (size_t)n * 4);
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return ig_error(IG_E_NOMEM, "out of memory converting weights");
    for (int64_t r = 0; r < w->rows; r++)
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes,
                             f + r * w->cols, w->cols);
    st = IG_DEV(dev_upload)(g->dev, *vec, f, (size_t)n * 4);
    /* the copy is synchronous from pageable memory: f may go */
    free(f);
    return st;
}

static size_t raw_bytes(const struct model_weight *w)
{
    return w->data ? model_weight_size(w) : 0;
}

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* The device buffer of the walk's weight and the rest of its fused group
 * (gpu_plan_group): a matrix in parts of one type each, or f32 vectors
 * end to end (the Q|K|V biases); nothing for a later member of a group. */
static int put_group(struct gpu_backend *g, const struct model_tensor_it *at,
                     struct gpu_matrix *mat, float **vec, void *staging)
{
    struct model_tensor_it group[GPU_PLAN_MAX_PARTS];
    const struct model_weight *ws[GPU_PLAN_MAX_PARTS];
    uint64_t seeds[GPU_PLAN_MAX_PARTS];
    int n = gpu_plan_group(at, group);
    if (!n)
        return IG_OK;
    int64_t len = 0;
    for (int i = 0; i < n; i++) {
        ws[i] = group[i].w;
        seeds[i] = weight_seed(at->layer, group[i].t->role);
        len += ws[i]->n_expert * ws[i]->rows * ws[i]->cols;
    }
    if (gpu_plan_f32_matrix(at->t)) /* alone in its group */
        return put_router(g, ws[0], vec, seeds[0]);
    if (!len) /* a tensor-parallel rank's none (TENSOR_SPLIT_ONCE: gpt-oss's wo bias on
                 rank 0 alone; an FFN's empty share, models/tp.c): NULL or a matrix of
                 no parts, which the forward skips (no empty allocation or launch) */
        return IG_OK;
    if (at->t->kind == TENSOR_MATRIX)
        return put_matrix(g, mat, ws, n, seeds, staging);
    /* norms near 1, biases near 0 for a shapes-only model */
    float center = at->t->kind == TENSOR_NORM ? 1.0f : 0.0f;
    int st = IG_DEV(gpu_alloc)(g, (size_t)len * 4, vec, &g->weight_bytes);
    int64_t off = 0;
    for (int i = 0; i < n && st == IG_OK; i++) {
        int64_t k = ws[i]->n_expert * ws[i]->rows * ws[i]->cols;
        st = put_vector(g, ws[i], *vec + off, k, center, seeds[i]);
        off += k;
    }
    return st;
}

int IG_DEV(gpu_upload_weights)(struct gpu_backend *g)
{
    const struct model *m = g->m;
    int st = IG_DEV(gpu_matmul_setup)(g);
    if (st != IG_OK)
        return st;
    size_t staging_bytes = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
        if (it.t->kind == TENSOR_MATRIX)
            staging_bytes = max_size(raw_bytes(it.w), staging_bytes);
    void *staging = NULL;
    if ((st = IG_DEV(dev_alloc)(g->dev, staging_bytes ? staging_bytes : 16, &staging)) != IG_OK)
        return st;

    /* layer by layer, then the model's own */
    for (int64_t l = 0; l < m->hp.n_layer && st == IG_OK; l++) {
        struct gpu_layer *G = &g->layers[l];
        for (model_tensors_begin_layer(&it, m, l, 0); st == IG_OK && model_tensors_next(&it);)
            st = put_group(g, &it, &G->mat[it.t->role], &G->vec[it.t->role], staging);
    }
    for (model_tensors_begin(&it, m, MODEL_TENSORS_MODEL | MODEL_TENSORS_TIED);
         st == IG_OK && model_tensors_next(&it);)
        if (model_tensor_present(it.t, it.features))
            st = put_group(g, &it, &g->mat[it.t->role], &g->vec[it.t->role], staging);
        else { /* the output head of tied embeddings: token_embd's matrix, its rows
                  the head's (a tensor-parallel rank's: its vocabulary rows) */
            struct gpu_matrix *h = &g->mat[it.t->role];
            *h = g->mat[MODEL_TOK_EMBD];
            IG_ASSERT(h->n_parts == 1 && it.w->rows <= h->rows);
            h->rows = h->part[0].rows = it.w->rows;
        }
    /* The f16 slabs the products of max_batch rows dequantize into. */
    g->mm_scratch_bytes = gpu_plan_scratch_bytes(m, g->weights_mode, g->max_batch);
    if (st == IG_OK && g->mm_scratch_bytes)
        st = IG_DEV(gpu_alloc)(g, g->mm_scratch_bytes, &g->mm_scratch, NULL);
    if (st == IG_OK)
        st = IG_DEV(dev_sync)(g->dev);
    IG_DEV(dev_free)(g->dev, staging);
    return st;
}
