/* backend/gpu_weights.c: the model's weights onto the device as f16 (Q|K|V
 * and gate|up concatenated), norms and biases as f32: dequantized on the
 * device from the file's blocks where a kernel reads the type, on the host
 * otherwise, random on the device for a shapes-only synthetic model.
 * Covered by tests/emu/test_backend_emu.c and tests/gpu/test_backend_gpu.c. */
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
static int put_weight(struct gpu_backend *g, const struct model_weight *w, uint16_t *dst,
                      void *staging, uint64_t seed)
{
    size_t raw = (size_t)w->rows * w->row_bytes;
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

int IG_DEV(gpu_upload_weights)(struct gpu_backend *g)
{
    const struct model *m = g->m;
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, ff = hp->n_ff;
    size_t staging_bytes = raw_bytes(&m->tok_embd) > raw_bytes(&m->output)
                               ? raw_bytes(&m->tok_embd) : raw_bytes(&m->output);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                           &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            staging_bytes = raw_bytes(ws[i]) > staging_bytes ? raw_bytes(ws[i]) : staging_bytes;
    }
    void *staging = NULL;
    int st = IG_DEV(dev_alloc)(g->dev, staging_bytes ? staging_bytes : 16, &staging);
    if (st != IG_OK)
        return st;

    size_t *wb = &g->weight_bytes;
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        const struct model_layer *L = &m->layers[l];
        struct gpu_layer *G = &g->layers[l];
        if ((st = IG_DEV(gpu_alloc)(g, (size_t)(g->qkv_rows * e) * 2, &G->wqkv, wb)) ||
            (st = IG_DEV(gpu_alloc)(g, (size_t)(e * g->q_dim) * 2, &G->wo, wb)) ||
            (st = IG_DEV(gpu_alloc)(g, (size_t)(2 * ff * e) * 2, &G->wgu, wb)) ||
            (st = IG_DEV(gpu_alloc)(g, (size_t)(e * ff) * 2, &G->wdown, wb)) ||
            (st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->attn_norm, wb)) ||
            (st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &G->ffn_norm, wb)))
            break;
        if ((st = put_weight(g, &L->wq, G->wqkv, staging, weight_seed(l, 0))) ||
            (st = put_weight(g, &L->wk, G->wqkv + g->q_dim * e, staging, weight_seed(l, 1))) ||
            (st = put_weight(g, &L->wv, G->wqkv + (g->q_dim + g->kv_dim) * e, staging,
                             weight_seed(l, 2))) ||
            (st = put_weight(g, &L->wo, G->wo, staging, weight_seed(l, 3))) ||
            (st = put_weight(g, &L->w_gate, G->wgu, staging, weight_seed(l, 4))) ||
            (st = put_weight(g, &L->w_up, G->wgu + ff * e, staging, weight_seed(l, 5))) ||
            (st = put_weight(g, &L->w_down, G->wdown, staging, weight_seed(l, 6))) ||
            (st = put_vector(g, &L->attn_norm, G->attn_norm, e, 1.0f, weight_seed(l, 7))) ||
            (st = put_vector(g, &L->ffn_norm, G->ffn_norm, e, 1.0f, weight_seed(l, 8))))
            break;
        if (hp->has_qkv_bias) {
            if ((st = IG_DEV(gpu_alloc)(g, (size_t)g->qkv_rows * 4, &G->bqkv, wb)) ||
                (st = put_vector(g, &L->bq, G->bqkv, g->q_dim, 0.0f, weight_seed(l, 9))) ||
                (st = put_vector(g, &L->bk, G->bqkv + g->q_dim, g->kv_dim, 0.0f,
                                 weight_seed(l, 10))) ||
                (st = put_vector(g, &L->bv, G->bqkv + g->q_dim + g->kv_dim, g->kv_dim, 0.0f,
                                 weight_seed(l, 11))))
                break;
        }
        /* The staging buffer is reused by the next layer's copies: stream
         * order keeps them behind this layer's dequantization kernels. */
    }
    if (st == IG_OK && !(st = IG_DEV(gpu_alloc)(g, (size_t)(hp->n_vocab * e) * 2, &g->tok_embd, wb)) &&
        !(st = put_weight(g, &m->tok_embd, g->tok_embd, staging, weight_seed(-1, 0))) &&
        !(st = IG_DEV(gpu_alloc)(g, (size_t)e * 4, &g->output_norm, wb)))
        st = put_vector(g, &m->output_norm, g->output_norm, e, 1.0f, weight_seed(-1, 1));
    if (st == IG_OK) {
        if (hp->tied_embeddings) {
            g->output = g->tok_embd;
        } else if (!(st = IG_DEV(gpu_alloc)(g, (size_t)(hp->n_vocab * e) * 2, &g->output, wb))) {
            st = put_weight(g, &m->output, g->output, staging, weight_seed(-1, 2));
        }
    }
    if (st == IG_OK)
        st = IG_DEV(dev_sync)(g->dev);
    IG_DEV(dev_free)(g->dev, staging);
    return st;
}
