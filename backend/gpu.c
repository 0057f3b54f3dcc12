/* backend/gpu.c: the CUDA backend's orchestration: what lives in device
 * memory, and the order of launches for a prefill block and a decode step.
 *
 * Device memory: weights in their quantized blocks or f16 (gpu_plan.c), Q|K|V
 * and gate|up concatenated so each is one product (gpu_matmul.c); norms and
 * biases f32; the KV cache f16, per layer and slot
 * [n_head_kv][n_ctx][head_dim] (the layout both attention kernels read);
 * activations for max_batch tokens. A step runs its sequences one after the
 * other (backend/gpu.h). Per block of n tokens at pos0:
 *   embed -> per layer { rmsnorm -> QKV GEMM -> bias+RoPE -> fused flash
 *   attention (writes the cache) -> wo GEMM += x -> rmsnorm -> gate|up GEMM
 *   -> SwiGLU -> down GEMM += x } -> final rmsnorm of the rows that want
 *   logits -> output head (a GEMV for one row, GEMMs of up to GPU_HEAD_ROWS
 *   rows for several: `ignite perplexity` wants half a window's) -> logits.
 * The residual adds are the GEMMs' beta = 1. Qwen 3 and Gemma 3 add steps
 * (ops/gpu_arch.cu): the head norms between the QKV GEMM and RoPE, Gemma's
 * embedding scale, GeGLU for SwiGLU, the post norms (the GEMM into g->proj,
 * its norm added to x), the final soft-cap; per layer the RoPE variant
 * (local layers' base), the attention scale from the file and the sliding
 * window of the local layers, in both attention kernels. In the last layer
 * only the rows from the first that wants logits go on past attention: no
 * earlier row's output is ever read.
 * A sequence's lone row at the end of its cache is a decode step: the same
 * with GEMVs and split-KV attention, the position and token read from device
 * memory so the step is captured once per slot as a graph and replayed. The
 * decode kernels read and write the slot's region as a pool through the
 * slot table (gpu_slot_layout in gpu_impl.h).
 *
 * Weights go up in gpu_weights.c, the cache to and from the host in
 * gpu_cache.c. Compiled twice (backend/gpu.h): over the CUDA device layer and
 * over the emulated one. Covered by tests/emu/test_backend_emu.c,
 * test_backend_qemu.c, test_backend_arch_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "decode/decode_attn.h"
#include "ops/gpu_ops.h"
#include "ops/ops.h"
#include "prefill/flash_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- memory ------------------------------------------------------------------- */

int IG_DEV(gpu_alloc)(struct gpu_backend *g, size_t bytes, void *out, size_t *account)
{
    void **p = out;
    *p = NULL;
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? 2 * g->cap_allocs : 64;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a)
            return ig_error(IG_E_NOMEM, "out of memory");
        g->allocs = a;
        g->cap_allocs = cap;
    }
    int st = IG_DEV(dev_alloc)(g->dev, bytes ? bytes : 16, p);
    if (st != IG_OK)
        return st;
    g->allocs[g->n_allocs++] = *p;
    g->device_bytes += bytes;
    if (account)
        *account += bytes;
    return IG_OK;
}

struct gpu_sizes {
    double weights, kv, acts;
};

/* Rows the logits buffer holds. */
static int64_t head_cap(const struct gpu_backend *g)
{
    return g->max_batch < GPU_HEAD_ROWS ? g->max_batch : GPU_HEAD_ROWS;
}

static void plan_sizes(const struct gpu_backend *g, struct gpu_sizes *s)
{
    const struct model_hparams *hp = &g->m->hp;
    double e = hp->n_embd, ff = hp->n_ff, B = (double)g->max_batch;
    s->weights = (double)backend_gpu_weight_bytes(g->m, g->weights_mode);
    s->kv = 2.0 * 2.0 * hp->n_layer * hp->n_head_kv * (double)g->n_ctx * hp->head_dim *
            g->n_slots;
    s->acts = B * (4.0 * e + 2.0 * e + 4.0 * g->qkv_rows + 2.0 * (2 * g->q_dim + 2 * g->kv_dim) +
                   4.0 * 2 * ff + 2.0 * ff + (hp->has_post_norms ? 4.0 * e : 0.0)) +
              4.0 * hp->n_vocab * (double)head_cap(g) + 4.0 * B +
              (double)gpu_plan_scratch_bytes(g->m, g->weights_mode, g->max_batch);
}

/* ---- setup ------------------------------------------------------------------------ */

static int check_model(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->head_dim != 64 && hp->head_dim != 128 && hp->head_dim != 256)
        return ig_error(IG_E_MODEL, "the CUDA backend supports head_dim 64, 128 and 256; '%s' "
                        "has %lld (use --device cpu)", m->path, (long long)hp->head_dim);
    if (hp->n_head / hp->n_head_kv > 8)
        return ig_error(IG_E_MODEL, "the CUDA backend supports up to 8 query heads per KV head; "
                        "'%s' has %lld (use --device cpu)", m->path,
                        (long long)(hp->n_head / hp->n_head_kv));
    if (hp->n_embd % 8 || hp->n_ff % 8)
        return ig_error(IG_E_MODEL, "the CUDA backend needs widths that are multiples of 8");
    if (hp->n_ff > 40960 || hp->n_embd > 40960 || hp->n_head * hp->head_dim > 40960)
        return ig_error(IG_E_MODEL, "the CUDA backend's decode GEMV takes inputs of at most "
                        "40960 elements; '%s' is wider (use --device cpu)", m->path);
    /* What the Llama block, Qwen 3 and Gemma 3 use runs; what no
     * architecture ignite loads has together, or Gemma 2's attention
     * soft-capping, does not. */
    const char *missing = hp->attn_softcap > 0 ? "attention logit soft-capping"
                          : hp->has_qk_norm && hp->has_qkv_bias ? "Q/K head norms with QKV biases"
                          : hp->ffn_act != MODEL_ACT_SILU && hp->ffn_act != MODEL_ACT_GELU_TANH
                              ? "its FFN activation"
                              : NULL;
    if (missing)
        return ig_error(IG_E_MODEL, "the CUDA backend does not run %s models yet (%s); use "
                        "--device cpu", hp->arch, missing);
    return IG_OK;
}

/* Refuses up front, with the numbers, a model that does not fit; `hint`
 * (backend_opts.oom_hint) ends the line. */
static int check_fits(const struct gpu_backend *g, const char *hint)
{
    struct gpu_sizes s;
    plan_sizes(g, &s);
    double need = s.weights + s.kv + s.acts, slack = 512.0 * 1024 * 1024; /* cuBLAS, context */
    if (g->info.mem_free == 0 || need + slack <= (double)g->info.mem_free)
        return IG_OK;
    return ig_error(IG_E_NOMEM, "the model needs %.2f GiB on cuda:%d (weights %.2f, KV cache "
                    "%.2f for %d x %lld positions, activations %.2f) but %s has %.2f GiB free "
                    "(%s)", (need + slack) / GIB, g->info.index, s.weights / GIB, s.kv / GIB,
                    g->n_slots, (long long)g->n_ctx, s.acts / GIB, g->info.name,
                    (double)g->info.mem_free / GIB,
                    hint ? hint : "lower -c/--ctx-size or --chunk, or use --device cpu");
}

static int alloc_state(struct gpu_backend *g)
{
    const struct model_hparams *hp = &g->m->hp;
    size_t B = (size_t)g->max_batch, e = (size_t)hp->n_embd, ff = (size_t)hp->n_ff;
    size_t cache = (size_t)(hp->n_head_kv * g->n_ctx * hp->head_dim) * 2 * (size_t)g->n_slots;
    int st;
    for (int64_t l = 0; l < hp->n_layer; l++)
        if ((st = IG_DEV(gpu_alloc)(g, cache, &g->layers[l].k_cache, &g->kv_bytes)) ||
            (st = IG_DEV(gpu_alloc)(g, cache, &g->layers[l].v_cache, &g->kv_bytes)))
            return st;
    struct decode_attn_params ap = {.n_seqs = 1, .n_head = hp->n_head,
                                    .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                    .n_ctx = g->n_ctx, .n_splits = g->n_splits};
    if ((st = IG_DEV(gpu_alloc)(g, B * e * 4, &g->x, NULL)) || (st = IG_DEV(gpu_alloc)(g, B * e * 2, &g->xn, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->qkv_rows * 4, &g->qkv, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->q16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->k16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->v16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->att16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 2 * ff * 4, &g->gu, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * ff * 2, &g->h16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)(hp->n_vocab * head_cap(g)) * 4, &g->logits, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 4, &g->tokens, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (B > 4 ? B : 4) * 4, &g->pos, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)gpu_slot_table_len(g) * 4, &g->slot_table, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, decode_attn_work_floats(&ap) * 4, &g->attn_work, NULL)))
        return st;
    if (hp->has_post_norms && (st = IG_DEV(gpu_alloc)(g, B * e * 4, &g->proj, NULL)))
        return st;
    /* Each RoPE variant's frequencies and cos/sin factor (Gemma 3's local
     * layers have their own base). */
    size_t half = (size_t)(hp->n_rot / 2);
    double *inv = malloc((half ? half : 1) * sizeof *inv);
    if (!inv)
        return ig_error(IG_E_NOMEM, "out of memory");
    for (int r = 0; r < 2 && st == IG_OK; r++) {
        ops_rope_freqs(&hp->rope[r], hp->n_rot, inv, &g->mscale[r]);
        st = IG_DEV(gpu_alloc)(g, (half ? half : 1) * sizeof *inv, &g->inv_freq[r], NULL);
        if (st == IG_OK)
            st = IG_DEV(dev_upload)(g->dev, g->inv_freq[r], inv, half * sizeof *inv);
    }
    free(inv);
    /* The slot table: 0, 1, 2, ... (gpu_slot_layout) */
    int32_t *ids = st == IG_OK ? malloc((size_t)gpu_slot_table_len(g) * sizeof *ids) : NULL;
    if (st == IG_OK && !ids)
        st = ig_error(IG_E_NOMEM, "out of memory");
    if (st == IG_OK) {
        kv_identity_table(ids, gpu_slot_table_len(g));
        st = IG_DEV(dev_upload)(g->dev, g->slot_table, ids,
                                (size_t)gpu_slot_table_len(g) * sizeof *ids);
    }
    free(ids);
    if (st == IG_OK)
        st = IG_DEV(dev_alloc_host)(g->dev, 2 * sizeof(int32_t), (void **)&g->step);
    return st;
}

int IG_DEV(gpu_device_count)(void)
{
    return IG_DEV(dev_count)();
}

static const struct backend_ops gpu_ops;

int IG_DEV(gpu_backend_create)(const struct model *m, const struct backend_opts *o,
                               struct backend **out)
{
    *out = NULL;
    int st = check_model(m);
    if (st != IG_OK)
        return st;
    struct gpu_backend *g = calloc(1, sizeof *g);
    if (!g || !(g->layers = calloc((size_t)m->hp.n_layer, sizeof *g->layers)) ||
        !(g->n_pos = calloc((size_t)o->n_slots, sizeof *g->n_pos)) ||
        !(g->graphs = calloc((size_t)o->n_slots, sizeof *g->graphs))) {
        if (g) {
            free(g->n_pos);
            free(g->layers);
        }
        free(g);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    const struct model_hparams *hp = &m->hp;
    g->base = (struct backend){.ops = &gpu_ops, .m = m, .o = *o, .threads = 1};
    g->m = m;
    g->n_ctx = o->n_ctx;
    g->max_batch = o->max_rows;
    g->n_slots = o->n_slots;
    g->weights_mode = o->gpu_weights;
    g->q_dim = hp->n_head * hp->head_dim;
    g->kv_dim = hp->n_head_kv * hp->head_dim;
    g->qkv_rows = g->q_dim + 2 * g->kv_dim;
    if ((st = IG_DEV(dev_open)(o->device.index, &g->dev)) == IG_OK) {
        IG_DEV(dev_get_info)(g->dev, &g->info);
        g->stream = IG_DEV(dev_stream)(g->dev);
        g->n_splits = decode_attn_choose_splits(g->n_ctx, 1, hp->n_head_kv, g->info.n_sm);
        st = check_fits(g, o->oom_hint);
    }
    if (st == IG_OK && (st = IG_DEV(gpu_upload_weights)(g)) == IG_OK)
        st = alloc_state(g);
    if (st != IG_OK) {
        gpu_ops.destroy(&g->base);
        return st;
    }
    g->base.weight_bytes = g->weight_bytes;
    snprintf(g->base.device, sizeof g->base.device, "cuda:%d", g->info.index);
    snprintf(g->base.device_name, sizeof g->base.device_name, "%s", g->info.name);
    *out = &g->base;
    return IG_OK;
}

static void gpu_destroy(struct backend *b)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (g->dev) {
        for (int i = 0; i < g->n_slots; i++)
            IG_DEV(dev_graph_free)(g->graphs[i]);
        for (size_t i = 0; i < g->n_allocs; i++)
            IG_DEV(dev_free)(g->dev, g->allocs[i]);
        IG_DEV(dev_free_host)(g->dev, g->step);
        IG_DEV(dev_close)(g->dev);
    }
    kv_store_free(g->host_kv);
    free(g->host_table);
    free(g->graphs);
    free(g->n_pos);
    free(g->allocs);
    free(g->layers);
    free(g);
}

/* ---- the forwards ------------------------------------------------------------------ */

/* Final norm of residual row x and the output head into g->logits. */
static int head(struct gpu_backend *g, const float *x)
{
    const struct model_hparams *hp = &g->m->hp;
    int st = IG_DEV(gk_rmsnorm)(x, hp->n_embd, g->output_norm, 1, hp->n_embd,
                                (float)hp->norm_eps, g->xn, g->stream);
    if (st == IG_OK)
        st = IG_DEV(gpu_matmul)(g, &g->output, g->xn, hp->n_embd, 1, g->logits, hp->n_vocab,
                                0.0f);
    if (st == IG_OK && hp->final_softcap > 0)
        st = IG_DEV(gk_softcap)(g->logits, hp->n_vocab, (float)hp->final_softcap, g->stream);
    return st;
}

/* Logits of the block's rows [r0, r0 + k) (residuals in g->x) into host
 * `logits` [k][n_vocab]: final norm and the output head as one GEMM per
 * GPU_HEAD_ROWS rows, each downloaded before the next reuses the buffer. */
static int head_rows(struct gpu_backend *g, int64_t r0, int64_t k, float *logits)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, nv = hp->n_vocab, cap = head_cap(g);
    int st = IG_OK;
    for (int64_t i = 0; i < k && st == IG_OK; i += cap) {
        int64_t n = k - i < cap ? k - i : cap;
        if ((st = IG_DEV(gk_rmsnorm)(g->x + (r0 + i) * e, e, g->output_norm, n, e,
                                     (float)hp->norm_eps, g->xn, g->stream)) ||
            (st = IG_DEV(gpu_matmul)(g, &g->output, g->xn, e, n, g->logits, nv, 0.0f)) ||
            (hp->final_softcap > 0 &&
             (st = IG_DEV(gk_softcap)(g->logits, n * nv, (float)hp->final_softcap, g->stream))))
            break;
        st = IG_DEV(dev_download)(g->dev, logits + i * nv, g->logits, (size_t)(n * nv) * 4);
    }
    return st;
}

/* x[rows] += w in (in: f16 rows of ld_in): the GEMM's beta = 1, or with a
 * post norm (Gemma 3) the product into g->proj and its norm added. */
static int add_product(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *in,
                       int64_t ld_in, int64_t rows, float *x, const float *post_norm)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd;
    if (!post_norm)
        return IG_DEV(gpu_matmul)(g, w, in, ld_in, rows, x, e, 1.0f);
    int st = IG_DEV(gpu_matmul)(g, w, in, ld_in, rows, g->proj, e, 0.0f);
    return st != IG_OK ? st
                       : IG_DEV(gk_rmsnorm_add)(x, e, g->proj, e, post_norm, rows, e,
                                                (float)hp->norm_eps, g->stream);
}

/* Everything after attention in one layer, for `rows` rows starting at
 * `row`: wo GEMM into the residual (through the post-attention norm where
 * there is one), norm, gate|up GEMM, SwiGLU or GeGLU, down GEMM into the
 * residual (through the post-FFN norm). */
static int ffn_block(struct gpu_backend *g, const struct gpu_layer *L, int64_t row, int64_t rows)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, ff = hp->n_ff;
    float *x = g->x + row * e;
    const uint16_t *att = g->att16 + row * g->q_dim;
    int st;
    if ((st = add_product(g, &L->wo, att, g->q_dim, rows, x, L->attn_post_norm)) ||
        (st = IG_DEV(gk_rmsnorm)(x, e, L->ffn_norm, rows, e, (float)hp->norm_eps, g->xn,
                                 g->stream)) ||
        (st = IG_DEV(gpu_matmul)(g, &L->wgu, g->xn, e, rows, g->gu, 2 * ff, 0.0f)) ||
        (st = hp->ffn_act == MODEL_ACT_GELU_TANH
                  ? IG_DEV(gk_geglu)(g->gu, rows, ff, g->h16, g->stream)
                  : IG_DEV(gk_swiglu)(g->gu, rows, ff, g->h16, g->stream)))
        return st;
    return add_product(g, &L->wdown, g->h16, ff, rows, x, L->ffn_post_norm);
}

/* Qwen 3 / Gemma 3: RMSNorm of each Q and K head of the block's n rows of
 * g->qkv, before RoPE (no-op for the others). */
static int head_norms(struct gpu_backend *g, const struct gpu_layer *L, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    if (!L->q_norm)
        return IG_OK;
    float eps = (float)hp->norm_eps;
    int st = IG_DEV(gk_head_rmsnorm)(g->qkv, g->qkv_rows, n, hp->n_head, hp->head_dim,
                                     L->q_norm, eps, g->stream);
    return st != IG_OK ? st
                       : IG_DEV(gk_head_rmsnorm)(g->qkv + g->q_dim, g->qkv_rows, n,
                                                 hp->n_head_kv, hp->head_dim, L->k_norm, eps,
                                                 g->stream);
}

/* The block's residuals from the embedding table (scaled for Gemma). */
static int embed(struct gpu_backend *g, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    int st = IG_DEV(gpu_embed)(g, g->tokens, n, g->x);
    if (st == IG_OK && hp->embd_scale != 1.0)
        st = IG_DEV(gk_scale_f32)(g->x, n * hp->n_embd, (float)hp->embd_scale, g->stream);
    return st;
}

/* Layer l over the block's n rows; in the last layer only rows keep0.. go on
 * past attention. */
static int prefill_layer(struct gpu_backend *g, int slot, int64_t l, int64_t n, int64_t pos0,
                         int64_t keep0)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    int64_t e = hp->n_embd, hd = hp->head_dim;
    int st;
    if ((st = IG_DEV(gk_rmsnorm)(g->x, e, L->attn_norm, n, e, (float)hp->norm_eps, g->xn,
                                 g->stream)) ||
        (st = IG_DEV(gpu_matmul)(g, &L->wqkv, g->xn, e, n, g->qkv, g->qkv_rows, 0.0f)) ||
        (st = head_norms(g, L, n)))
        return st;
    struct gk_qkv_params qp = {
        .qkv = g->qkv, .bias = L->bqkv, .inv_freq = g->inv_freq[ML->rope], .pos = g->pos,
        .n = n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .n_rot = hp->n_rot, .rope_style = (int)hp->rope_style, .q = g->q16, .k = g->k16,
        .v = g->v16, .mscale = g->mscale[ML->rope],
    };
    if ((st = IG_DEV(gk_qkv_rope)(&qp, g->stream)))
        return st;
    struct prefill_attn_params ap = {
        .q = g->q16, .k = g->k16, .v = g->v16, .k_cache = L->k_cache + gpu_slot_offset(g, slot),
        .v_cache = L->v_cache + gpu_slot_offset(g, slot), .o = g->att16, .lse = NULL, .n_tokens = n, .pos0 = pos0, .n_ctx = g->n_ctx,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .q_row_stride = g->q_dim, .q_head_stride = hd,
        .k_row_stride = g->kv_dim, .k_head_stride = hd,
        .v_row_stride = g->kv_dim, .v_head_stride = hd,
        .o_row_stride = g->q_dim, .o_head_stride = hd,
        .cache_row_stride = hd, .cache_head_stride = g->n_ctx * hd,
        .window = ML->window, .scale = (float)hp->attn_scale, .dtype = PREFILL_ATTN_F16,
    };
    if ((st = IG_DEV(prefill_attn)(&ap, g->stream)))
        return st;
    /* Past attention, the last layer matters for the rows that want logits. */
    bool last = l == hp->n_layer - 1;
    return ffn_block(g, L, last ? keep0 : 0, last ? n - keep0 : n);
}

static int check_tokens(const struct gpu_backend *g, const int32_t *tokens, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->m->hp.n_vocab)
            return ig_error(IG_E_INPUT, "token id %d is outside the vocabulary (0..%lld)",
                            tokens[i], (long long)g->m->hp.n_vocab - 1);
    return IG_OK;
}

/* Whether row i of a block of n wants logits (want NULL: the last row). */
static bool row_wanted(const bool *want, int64_t i, int64_t n)
{
    return want ? want[i] : i == n - 1;
}

/* Tokens [0, n) of slot `slot` at positions pos0..: the logits of the rows
 * that want them (row_wanted), in row order, into host `logits`; *n_out
 * says how many. One row goes through the decode GEMV as it always has;
 * each run of consecutive rows through head_rows. */
static int prefill_seq(struct gpu_backend *g, int slot, const int32_t *tokens, int64_t n,
                       int64_t pos0, const bool *want, float *logits, int64_t *n_out)
{
    IG_ASSERT(n >= 1 && n <= g->max_batch);
    int64_t keep0 = n - 1, n_want = 0, e = g->m->hp.n_embd, nv = g->m->hp.n_vocab;
    for (int64_t i = n - 1; i >= 0; i--)
        if (row_wanted(want, i, n)) {
            keep0 = i;
            n_want++;
        }
    *n_out = 0;
    int st = check_tokens(g, tokens, n);
    int32_t *pos = st == IG_OK ? malloc((size_t)n * sizeof *pos) : NULL; /* each row's */
    if (st == IG_OK && !pos)
        st = ig_error(IG_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n && pos; i++)
        pos[i] = (int32_t)(pos0 + i);
    if (st == IG_OK && !(st = IG_DEV(dev_upload)(g->dev, g->tokens, tokens, (size_t)n * 4)) &&
        !(st = IG_DEV(dev_upload)(g->dev, g->pos, pos, (size_t)n * sizeof *pos)))
        st = embed(g, n);
    free(pos);
    for (int64_t l = 0; l < g->m->hp.n_layer && st == IG_OK; l++)
        st = prefill_layer(g, slot, l, n, pos0, keep0);
    if (st != IG_OK || n_want == 0)
        return st;
    if (n_want == 1) {
        if (!(st = head(g, g->x + keep0 * e)))
            st = IG_DEV(dev_download)(g->dev, logits, g->logits, (size_t)nv * 4);
        *n_out = st == IG_OK;
        return st;
    }
    for (int64_t i = keep0; i < n && st == IG_OK;) {
        int64_t k = 0;
        while (i + k < n && row_wanted(want, i + k, n))
            k++;
        if (k) {
            st = head_rows(g, i, k, logits + *n_out * nv);
            *n_out += st == IG_OK ? k : 0;
        }
        i += k ? k : 1;
    }
    return st;
}

/* One token's forward, reading token and position from device memory (so
 * a graph of it replays at any position). */
static int decode_step(struct gpu_backend *g, int slot)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, hd = hp->head_dim;
    float eps = (float)hp->norm_eps;
    int st = embed(g, 1);
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        const struct gpu_layer *L = &g->layers[l];
        const struct model_layer *ML = &g->m->layers[l];
        /* The slot's region as a pool through the slot table (gpu_slot_layout). */
        const struct kv_layout kl = gpu_slot_layout(g);
        struct gk_qkv_params qp = {
            .qkv = g->qkv, .bias = L->bqkv, .inv_freq = g->inv_freq[ML->rope], .pos = g->pos,
            .n = 1, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
            .n_rot = hp->n_rot, .rope_style = (int)hp->rope_style, .q = g->q16,
            .k_cache = L->k_cache + gpu_slot_offset(g, slot),
            .v_cache = L->v_cache + gpu_slot_offset(g, slot), .block_table = g->slot_table,
            .table_stride = gpu_slot_table_len(g), .block_stride = kl.block_stride,
            .head_stride = kl.head_stride, .mscale = g->mscale[ML->rope],
        };
        struct decode_attn_params ap = {
            .q = g->q16, .k_cache = L->k_cache + gpu_slot_offset(g, slot),
            .v_cache = L->v_cache + gpu_slot_offset(g, slot), .block_table = g->slot_table,
            .table_stride = gpu_slot_table_len(g), .block_stride = kl.block_stride,
            .head_stride = kl.head_stride, .pos = g->pos, .o = g->att16,
            .work = g->attn_work, .n_seqs = 1, .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv, .head_dim = hd, .n_ctx = g->n_ctx,
            .n_splits = g->n_splits, .scale = (float)hp->attn_scale, .window = ML->window,
        };
        if ((st = IG_DEV(gk_rmsnorm)(g->x, e, L->attn_norm, 1, e, eps, g->xn, g->stream)) ||
            (st = IG_DEV(gpu_matmul)(g, &L->wqkv, g->xn, e, 1, g->qkv, g->qkv_rows, 0.0f)) ||
            (st = head_norms(g, L, 1)) || (st = IG_DEV(gk_qkv_rope)(&qp, g->stream)) ||
            (st = IG_DEV(decode_attn)(&ap, g->stream)))
            break;
        st = ffn_block(g, L, 0, 1);
    }
    return st == IG_OK ? head(g, g->x) : st;
}

/* Runs slot's decode step: the first call captures it as a graph where the
 * device layer can, later calls replay it. */
static int run_decode_step(struct gpu_backend *g, int slot)
{
    if (g->graphs[slot])
        return IG_DEV(dev_graph_launch)(g->dev, g->graphs[slot]);
    if (g->no_graph || IG_DEV(dev_graph_begin)(g->dev) != IG_OK) {
        g->no_graph = true;
        return decode_step(g, slot);
    }
    int st = decode_step(g, slot);
    struct dev_graph *graph = NULL;
    int st_end = IG_DEV(dev_graph_end)(g->dev, &graph);
    if (st != IG_OK || st_end != IG_OK) {
        IG_DEV(dev_graph_free)(graph);
        return st != IG_OK ? st : st_end;
    }
    g->graphs[slot] = graph;
    return IG_DEV(dev_graph_launch)(g->dev, g->graphs[slot]);
}

static int decode_seq(struct gpu_backend *g, int slot, int32_t token, int64_t pos, float *logits)
{
    int st = check_tokens(g, &token, 1);
    if (st != IG_OK)
        return st;
    g->step[0] = token;
    g->step[1] = (int32_t)pos;
    if ((st = IG_DEV(dev_upload_async)(g->dev, g->tokens, &g->step[0], 4)) ||
        (st = IG_DEV(dev_upload_async)(g->dev, g->pos, &g->step[1], 4)) ||
        (st = run_decode_step(g, slot)))
        return st;
    if (logits)
        st = IG_DEV(dev_download)(g->dev, logits, g->logits, (size_t)g->m->hp.n_vocab * 4);
    else
        st = IG_DEV(dev_sync)(g->dev);
    return st;
}

/* ---- the step: one sequence at a time ---------------------------------------------- */

static int gpu_step(struct backend *b, const struct backend_batch *batch)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    float *logits = batch->logits;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        IG_ASSERT(s->slot >= 0 && s->slot < g->n_slots && s->n_rows >= 1);
        if (s->pos0 > g->n_pos[s->slot] || s->pos0 + s->n_rows > g->n_ctx)
            return ig_error(IG_E_INPUT, "%lld tokens at position %lld: slot %d holds %lld of "
                            "%lld positions", (long long)s->n_rows, (long long)s->pos0, s->slot,
                            (long long)g->n_pos[s->slot], (long long)g->n_ctx);
        const bool *want = batch->want_logits ? batch->want_logits + s->row0 : NULL;
        const int32_t *tokens = batch->tokens + s->row0;
        int64_t n_out = 0;
        int st;
        if (s->n_rows == 1) {
            n_out = row_wanted(want, 0, 1);
            st = decode_seq(g, s->slot, tokens[0], s->pos0, n_out ? logits : NULL);
        } else {
            st = prefill_seq(g, s->slot, tokens, s->n_rows, s->pos0, want, logits, &n_out);
        }
        /* a failed block leaves what came before */
        g->n_pos[s->slot] = st == IG_OK ? s->pos0 + s->n_rows : s->pos0;
        if (st != IG_OK)
            return st;
        logits += n_out * g->m->hp.n_vocab;
    }
    return IG_OK;
}

/* ---- state ---------------------------------------------------------------------------- */

static size_t gpu_device_bytes(const struct backend *b)
{
    return ((const struct gpu_backend *)b)->device_bytes;
}

void IG_DEV(gpu_get_info)(const struct backend *b, struct gpu_backend_info *info)
{
    const struct gpu_backend *g = (const struct gpu_backend *)b;
    *info = (struct gpu_backend_info){.kv_bytes = g->kv_bytes, .weight_bytes = g->weight_bytes};
    for (int i = 0; i < g->n_slots; i++)
        info->graphs += g->graphs[i] != NULL;
}

static const struct backend_ops gpu_ops = {
    .step = gpu_step,
    .kv_export = IG_DEV(gpu_kv_export),
    .kv_import = IG_DEV(gpu_kv_import),
    .device_bytes = gpu_device_bytes,
    .destroy = gpu_destroy,
};
