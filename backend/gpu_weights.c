/* backend/gpu_weights.c: the model's weights onto the device, as
 * backend/gpu_plan.h plans them: Q|K|V and gate|up as one matrix each, in
 * parts of one device type; a quantized part in its blocks (the file's rows
 * copied to a staging buffer, repacked into the planes on the device,
 * ops/gpu_qmm.h), an f16 part dequantized on the device from the file's
 * blocks where a kernel reads the type (ops/gpu_ops.h) and on the host
 * otherwise; random values made on the device for a shapes-only synthetic
 * model. Norms (Qwen 3's and Gemma 3's head and post norms too) and biases
 * f32. Then the matmul scratch for max_batch rows.
 * Covered by tests/emu/test_backend_emu.c, test_backend_qemu.c and
 * tests/gpu/test_backend_gpu.c. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "ops/gpu_ops.h"

#include <math.h>
#include <stdlib.h>

/* Per-weight seed for synthetic weights: distinct and stable. */
static uint64_t weight_seed(int64_t layer, int which)
{
    return 0x9E3779B97F4A7C15ULL * (uint64_t)(layer * 16 + which + 1);
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
    int st = IG_DEV(dev_upload)(g->dev, staging, w->data, (size_t)w->rows * w->row_bytes);
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
        for (int i = pp->first; i < pp->first + pp->count && st == IG_OK; i++) {
            struct gk_qmat rows = gk_qmat_rows(&m->part[p], r, ws[i]->rows);
            st = pp->type == QUANT_F16
                     ? put_f16(g, ws[i], (uint16_t *)rows.q, staging, seeds[i])
                     : put_native(g, ws[i], &rows, staging, seeds[i]);
            r += ws[i]->rows;
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
    IG_ASSERT(w->type == QUANT_F32 && w->rows * w->cols == n);
    return IG_DEV(dev_upload)(g->dev, dst, w->data, (size_t)n * sizeof(float));
}

static size_t raw_bytes(const struct model_weight *w)
{
    return w->data ? (size_t)w->rows * w->row_bytes : 0;
}

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

static int put_layer(struct gpu_backend *g, int64_t l, void *staging)
{
    const struct model_layer *L = &g->m->layers[l];
    struct gpu_layer *G = &g->layers[l];
    int64_t e = g->m->hp.n_embd;
    size_t *wb = &g->weight_bytes;
    const struct model_weight *qkv[] = {&L->w[LAYER_WQ], &L->w[LAYER_WK], &L->w[LAYER_WV]}, *gu[] = {&L->w[LAYER_FFN_GATE], &L->w[LAYER_FFN_UP]};
    const struct model_weight *wo[] = {&L->w[LAYER_WO]}, *down[] = {&L->w[LAYER_FFN_DOWN]};
    const uint64_t s_qkv[] = {weight_seed(l, 0), weight_seed(l, 1), weight_seed(l, 2)};
    const uint64_t s_gu[] = {weight_seed(l, 4), weight_seed(l, 5)};
    const uint64_t s_wo = weight_seed(l, 3), s_down = weight_seed(l, 6);
    int st;
    if ((st = put_matrix(g, &G->wqkv, qkv, 3, s_qkv, staging)) ||
        (st = put_matrix(g, &G->wo, wo, 1, &s_wo, staging)) ||
        (st = put_matrix(g, &G->wgu, gu, 2, s_gu, staging)) ||
        (st = put_matrix(g, &G->wdown, down, 1, &s_down, staging)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->attn_norm, wb)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->ffn_norm, wb)) ||
        (st = put_vector(g, &L->w[LAYER_ATTN_NORM], G->attn_norm, e, 1.0f, weight_seed(l, 7))) ||
        (st = put_vector(g, &L->w[LAYER_FFN_NORM], G->ffn_norm, e, 1.0f, weight_seed(l, 8))))
        return st;
    /* Qwen 3 / Gemma 3: the head norms, Gemma 3's post norms. */
    int64_t hd = g->m->hp.head_dim;
    if (g->m->hp.has_qk_norm &&
        ((st = IG_DEV(gpu_alloc)(g, (size_t)hd * 4, &G->q_norm, wb)) ||
         (st = IG_DEV(gpu_alloc)(g, (size_t)hd * 4, &G->k_norm, wb)) ||
         (st = put_vector(g, &L->w[LAYER_Q_NORM], G->q_norm, hd, 1.0f, weight_seed(l, 12))) ||
         (st = put_vector(g, &L->w[LAYER_K_NORM], G->k_norm, hd, 1.0f, weight_seed(l, 13)))))
        return st;
    if (g->m->hp.has_post_norms &&
        ((st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->attn_post_norm, wb)) ||
         (st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->ffn_post_norm, wb)) ||
         (st = put_vector(g, &L->w[LAYER_ATTN_POST_NORM], G->attn_post_norm, e, 1.0f,
                          weight_seed(l, 14))) ||
         (st = put_vector(g, &L->w[LAYER_FFN_POST_NORM], G->ffn_post_norm, e, 1.0f,
                          weight_seed(l, 15)))))
        return st;
    if (!g->m->hp.has_qkv_bias)
        return IG_OK;
    if ((st = IG_DEV(gpu_alloc)(g, (size_t)g->qkv_rows * 4, &G->bqkv, wb)) ||
        (st = put_vector(g, &L->w[LAYER_BQ], G->bqkv, g->q_dim, 0.0f, weight_seed(l, 9))) ||
        (st = put_vector(g, &L->w[LAYER_BK], G->bqkv + g->q_dim, g->kv_dim, 0.0f, weight_seed(l, 10))))
        return st;
    return put_vector(g, &L->w[LAYER_BV], G->bqkv + g->q_dim + g->kv_dim, g->kv_dim, 0.0f,
                      weight_seed(l, 11));
}

int IG_DEV(gpu_upload_weights)(struct gpu_backend *g)
{
    const struct model *m = g->m;
    const struct model_hparams *hp = &m->hp;
    int st = IG_DEV(gpu_matmul_setup)(g);
    if (st != IG_OK)
        return st;
    size_t staging_bytes = max_size(raw_bytes(&m->w[MODEL_TOK_EMBD]), raw_bytes(&m->w[MODEL_OUTPUT]));
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *ws[] = {&L->w[LAYER_WQ], &L->w[LAYER_WK], &L->w[LAYER_WV], &L->w[LAYER_WO], &L->w[LAYER_FFN_GATE], &L->w[LAYER_FFN_UP],
                                           &L->w[LAYER_FFN_DOWN]};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            staging_bytes = max_size(raw_bytes(ws[i]), staging_bytes);
    }
    void *staging = NULL;
    if ((st = IG_DEV(dev_alloc)(g->dev, staging_bytes ? staging_bytes : 16, &staging)) != IG_OK)
        return st;

    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++)
        st = put_layer(g, l, staging);
    const struct model_weight *emb[] = {&m->w[MODEL_TOK_EMBD]}, *out[] = {&m->w[MODEL_OUTPUT]};
    const uint64_t s_emb = weight_seed(-1, 0), s_out = weight_seed(-1, 2);
    if (st == IG_OK && !(st = put_matrix(g, &g->tok_embd, emb, 1, &s_emb, staging)) &&
        !(st = IG_DEV(gpu_alloc)(g, (size_t)hp->n_embd * 4, &g->output_norm, &g->weight_bytes)))
        st = put_vector(g, &m->w[MODEL_OUTPUT_NORM], g->output_norm, hp->n_embd, 1.0f, weight_seed(-1, 1));
    if (st == IG_OK) {
        if (hp->tied_embeddings)
            g->output = g->tok_embd;
        else
            st = put_matrix(g, &g->output, out, 1, &s_out, staging);
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
