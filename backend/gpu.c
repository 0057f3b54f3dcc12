/* backend/gpu.c: the CUDA backend's orchestration: what lives in device
 * memory, and the order of launches for a step.
 *
 * Device memory: weights in their quantized blocks or f16 (gpu_plan.c), Q|K|V
 * and gate|up concatenated so each is one product (gpu_matmul.c); norms and
 * biases f32; the KV pool f16, per paged layer K and V each
 * [n_blocks][n_head_kv][KV_BLOCK][head_dim] (kvcache.h's layout from
 * kv_memory_of, allocated once for the engine's blocks; a layer sharing
 * another's KV points at its source's arrays, a recurrent layer has
 * [n_states][state_bytes]); activations for max_batch rows; the step's
 * tokens, positions and compacted block tables in fixed buffers.
 * A step runs all its rows at once, every weight read once:
 *   embed -> per layer { rmsnorm -> QKV GEMM -> bias+RoPE at each row's own
 *   position -> attention over each sequence's blocks -> wo GEMM += x ->
 *   rmsnorm -> gate|up GEMM -> SwiGLU -> down GEMM += x } -> final rmsnorm
 *   of the rows that want logits -> output head (GEMMs of up to logit_rows
 *   rows) -> logits, or for a greedy step (batch->greedy) each row's token
 *   (decode/greedy.h): a token crosses the bus, not the row.
 * Attention: a step whose sequences all have one row is a decode step
 * (the split-KV kernel, decode/decode_attn.h, K/V written by the RoPE
 * kernel), padded to its bucket and captured as a graph per bucket; any
 * other step is a prefill step (prefill/flash_attn.h over the pool, which
 * writes the rows' K/V). The residual adds are the GEMMs' beta = 1. Qwen 3
 * and Gemma 3 add steps (ops/gpu_arch.cu): the head norms between the QKV
 * GEMM and RoPE, Gemma's embedding scale, GeGLU for SwiGLU, the post norms
 * (the GEMM into g->proj, its norm added to x), the final soft-cap; per
 * layer the RoPE variant (local layers' base), the attention scale from the
 * file and the sliding window of the local layers, in both attention
 * kernels. In a prefill step's last layer only the rows from the first that
 * wants logits go on past attention: no earlier row's output is ever read.
 *
 * Weights go up in gpu_weights.c, the pool to and from the host in
 * gpu_cache.c. Compiled twice (backend/gpu.h): over the CUDA device layer and
 * over the emulated one. Covered by tests/emu/test_backend_emu.c,
 * test_backend_qemu.c, test_backend_arch_emu.c, test_backend_batch_emu.c and
 * tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/half.h"
#include "core/status.h"
#include "decode/decode_attn.h"
#include "decode/greedy.h"
#include "ops/gpu_ops.h"
#include "ops/ops.h"
#include "prefill/flash_attn_pool.h"

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

/* The decode attention of bucket i (2^i rows). */
static struct decode_attn_params bucket_attn(const struct gpu_backend *g, int i)
{
    const struct model_hparams *hp = &g->m->hp;
    return (struct decode_attn_params){
        .n_seqs = (int64_t)1 << i, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim, .n_ctx = g->n_ctx, .n_splits = g->n_splits[i],
        .table_stride = g->table_stride, .block_stride = g->block_stride,
        .head_stride = g->head_stride,
    };
}

/* Floats of the decode attention's work buffer: the most any bucket needs. */
static size_t attn_work_floats(const struct gpu_backend *g)
{
    size_t most = 1;
    for (int i = 0; i < g->n_buckets; i++) {
        struct decode_attn_params ap = bucket_attn(g, i);
        size_t f = decode_attn_work_floats(&ap);
        most = f > most ? f : most;
    }
    return most;
}

static void plan_sizes(const struct gpu_backend *g, struct gpu_sizes *s)
{
    const struct model_hparams *hp = &g->m->hp;
    double e = hp->n_embd, ff = hp->n_ff, B = (double)g->max_batch;
    s->weights = (double)backend_gpu_weight_bytes(g->m, g->weights_mode);
    s->kv = kv_memory_bytes(g->base.kv_mem, g->n_blocks, g->n_states);
    s->acts = B * (4.0 * e + 2.0 * e + 4.0 * g->qkv_rows + 2.0 * (2 * g->q_dim + 2 * g->kv_dim) +
                   4.0 * 2 * ff + 2.0 * ff + (hp->has_post_norms ? 4.0 * e : 0.0) + 8.0) +
              4.0 * hp->n_vocab * (double)g->logit_rows +
              4.0 * (double)(g->max_seqs * g->table_stride) + 4.0 * (double)attn_work_floats(g) +
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

/* The kernels read one K/V shape, the model's, and write every layer's
 * K/V: refused, in one line, a memory of other shapes, of layers that
 * share another's KV or of recurrent ones (no model ignite loads has them
 * yet; kv_memory_of). */
static int check_memory(const struct gpu_backend *g)
{
    const struct kv_memory *mem = g->base.kv_mem;
    const struct model_hparams *hp = &g->m->hp;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if ((L->kind != KV_FULL && L->kind != KV_WINDOW) || L->n_head_kv != hp->n_head_kv ||
            L->head_dim != hp->head_dim)
            return ig_error(IG_E_MODEL, "the CUDA backend runs layers of full or sliding-window "
                            "attention of one KV shape; layer %lld of '%s' is %s (%lld KV heads "
                            "x %lld): use --device cpu", (long long)l, g->m->path,
                            kv_kind_name(L->kind), (long long)L->n_head_kv,
                            (long long)L->head_dim);
    }
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
    return ig_error(IG_E_NOMEM, "the model needs %.2f GiB on cuda:%d (weights %.2f, KV pool "
                    "%.2f for %lld blocks of %d positions, activations %.2f) but %s has %.2f "
                    "GiB free (%s)", (need + slack) / GIB, g->info.index, s.weights / GIB,
                    s.kv / GIB, (long long)g->n_blocks, KV_BLOCK, s.acts / GIB, g->info.name,
                    (double)g->info.mem_free / GIB,
                    hint ? hint : "lower -c/--ctx-size or --chunk, or use --device cpu");
}

static int alloc_state(struct gpu_backend *g)
{
    const struct model_hparams *hp = &g->m->hp;
    size_t B = (size_t)g->max_batch, e = (size_t)hp->n_embd, ff = (size_t)hp->n_ff;
    const struct kv_memory *mem = g->base.kv_mem;
    size_t tables = (size_t)(g->max_seqs * g->table_stride) * sizeof(int32_t);
    int st;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        size_t pool = (size_t)(g->n_blocks * kv_layer_block_elems(L)) * 2;
        if (L->kind == KV_RECURRENT)
            st = IG_DEV(gpu_alloc)(g, (size_t)g->n_states * L->state_bytes, &g->layers[l].state,
                                   &g->kv_bytes);
        else if (L->kind == KV_SHARED) /* below: its source's arrays */
            st = IG_OK;
        else if ((st = IG_DEV(gpu_alloc)(g, pool, &g->layers[l].k_cache, &g->kv_bytes)) == IG_OK)
            st = IG_DEV(gpu_alloc)(g, pool, &g->layers[l].v_cache, &g->kv_bytes);
        if (st != IG_OK)
            return st;
    }
    for (int64_t l = 0; l < hp->n_layer; l++)
        if (mem->layers[l].kind == KV_SHARED) { /* the source's arrays, no blocks of its own */
            g->layers[l].k_cache = g->layers[mem->layers[l].source].k_cache;
            g->layers[l].v_cache = g->layers[mem->layers[l].source].v_cache;
        }
    if ((st = IG_DEV(gpu_alloc)(g, B * e * 4, &g->x, NULL)) || (st = IG_DEV(gpu_alloc)(g, B * e * 2, &g->xn, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->qkv_rows * 4, &g->qkv, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->q16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->k16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->kv_dim * 2, &g->v16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * (size_t)g->q_dim * 2, &g->att16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 2 * ff * 4, &g->gu, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * ff * 2, &g->h16, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)(hp->n_vocab * g->logit_rows) * 4, &g->logits, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, (size_t)g->logit_rows * 4, &g->greedy, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 4, &g->tokens, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, B * 4, &g->pos, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, tables, &g->tables, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, attn_work_floats(g) * 4, &g->attn_work, NULL)))
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
    size_t seqs = (size_t)g->max_seqs * sizeof *g->seqs;
    if (st == IG_OK)
        st = IG_DEV(gpu_alloc)(g, seqs, &g->seqs, NULL);
    /* the step's inputs staged in pinned memory: tokens, positions, tables,
     * sequences */
    if (st == IG_OK)
        st = IG_DEV(dev_alloc_host)(g->dev, 2 * B * 4 + tables + seqs, &g->h_stage);
    if (st == IG_OK) {
        g->h_tokens = g->h_stage;
        g->h_pos = g->h_tokens + B;
        g->h_tables = g->h_pos + B;
        g->h_seqs = (struct prefill_attn_seq *)(g->h_tables + g->max_seqs * g->table_stride);
        if (!(g->want = malloc(B * sizeof *g->want)) ||
            !(g->h_greedy = malloc((size_t)g->max_seqs * sizeof *g->h_greedy)))
            st = ig_error(IG_E_NOMEM, "out of memory");
    }
    /* Page-locked logits for the engine, up to a GiB (beyond, the engine's
     * own memory: a greedy step brings back tokens only anyway). */
    size_t logit_bytes = (size_t)(g->base.o.n_slots * hp->n_vocab) * 4;
    if (st == IG_OK && logit_bytes <= ((size_t)1 << 30))
        st = IG_DEV(dev_alloc_host)(g->dev, logit_bytes, &g->h_logits);
    g->base.host_logits = g->h_logits;
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
    IG_ASSERT(o->n_blocks >= 1 && o->n_slots >= 1 && o->max_rows >= 1);
    struct gpu_backend *g = calloc(1, sizeof *g);
    if (!g || !(g->layers = calloc((size_t)m->hp.n_layer, sizeof *g->layers))) {
        free(g);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    const struct model_hparams *hp = &m->hp;
    g->base = (struct backend){.ops = &gpu_ops, .m = m, .o = *o, .shares_blocks = true,
                               .threads = 1};
    g->m = m;
    g->n_ctx = o->n_ctx;
    g->max_rows = o->max_rows;
    g->n_slots = o->n_slots;
    g->weights_mode = o->gpu_weights;
    g->q_dim = hp->n_head * hp->head_dim;
    g->kv_dim = hp->n_head_kv * hp->head_dim;
    g->qkv_rows = g->q_dim + 2 * g->kv_dim;
    g->n_blocks = o->n_blocks;
    g->head_stride = KV_BLOCK * hp->head_dim;
    g->block_stride = hp->n_head_kv * g->head_stride;
    /* Room past n_ctx for the longest step, so that a varlen launch's
     * largest pos0 plus its longest sequence stays inside n_ctx. */
    g->table_stride = kv_blocks_for(g->n_ctx) + kv_blocks_for(g->max_rows);
    for (g->n_buckets = 1; ((int64_t)1 << (g->n_buckets - 1)) < g->n_slots; g->n_buckets++)
        ;
    IG_ASSERT(g->n_buckets <= GPU_MAX_BUCKETS);
    g->max_seqs = (int64_t)1 << (g->n_buckets - 1);
    g->max_batch = g->max_rows > g->max_seqs ? g->max_rows : g->max_seqs;
    g->logit_rows = g->max_rows < GPU_HEAD_ROWS ? g->max_rows : GPU_HEAD_ROWS;
    if (g->logit_rows < g->max_seqs)
        g->logit_rows = g->max_seqs;
    if ((st = kv_memory_of(m, KV_F16, &g->base.kv_mem)) == IG_OK &&
        (st = check_memory(g)) == IG_OK) {
        g->n_states = g->base.n_states = kv_memory_states_for(g->base.kv_mem, o->n_slots);
        st = IG_DEV(dev_open)(o->device.index, &g->dev);
    }
    if (st == IG_OK) {
        IG_DEV(dev_get_info)(g->dev, &g->info);
        g->stream = IG_DEV(dev_stream)(g->dev);
        for (int i = 0; i < g->n_buckets; i++)
            g->n_splits[i] = decode_attn_choose_splits(g->n_ctx, (int64_t)1 << i,
                                                       hp->n_head_kv, g->info.n_sm);
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
        for (int i = 0; i < g->n_buckets; i++)
            IG_DEV(dev_graph_free)(g->graphs[i]);
        for (size_t i = 0; i < g->n_allocs; i++)
            IG_DEV(dev_free)(g->dev, g->allocs[i]);
        IG_DEV(dev_free_host)(g->dev, g->h_stage);
        IG_DEV(dev_free_host)(g->dev, g->h_logits);
        IG_DEV(dev_close)(g->dev);
    }
    kv_store_free(g->host_kv);
    kv_memory_free(g->base.kv_mem);
    free(g->host_table);
    free(g->want);
    free(g->h_greedy);
    free(g->allocs);
    free(g->layers);
    free(g);
}

/* ---- the layers ------------------------------------------------------------------ */

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
    const struct gpu_matrix *wo = &L->mat[LAYER_WO], *wgu = &L->mat[LAYER_FFN_GATE];
    int st;
    if ((st = add_product(g, wo, att, g->q_dim, rows, x, L->vec[LAYER_ATTN_POST_NORM])) ||
        (st = IG_DEV(gk_rmsnorm)(x, e, L->vec[LAYER_FFN_NORM], rows, e, (float)hp->norm_eps,
                                 g->xn, g->stream)) ||
        (st = IG_DEV(gpu_matmul)(g, wgu, g->xn, e, rows, g->gu, 2 * ff, 0.0f)) ||
        (st = hp->ffn_act == MODEL_ACT_GELU_TANH
                  ? IG_DEV(gk_geglu)(g->gu, rows, ff, g->h16, g->stream)
                  : IG_DEV(gk_swiglu)(g->gu, rows, ff, g->h16, g->stream)))
        return st;
    return add_product(g, &L->mat[LAYER_FFN_DOWN], g->h16, ff, rows, x,
                       L->vec[LAYER_FFN_POST_NORM]);
}

/* Everything before RoPE in one layer, for the step's n rows: norm, the
 * QKV GEMM and, for Qwen 3 / Gemma 3, the RMSNorm of each Q and K head. */
static int qkv_block(struct gpu_backend *g, const struct gpu_layer *L, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd;
    float eps = (float)hp->norm_eps;
    const struct gpu_matrix *wqkv = &L->mat[LAYER_WQ]; /* Q|K|V */
    const float *q_norm = L->vec[LAYER_Q_NORM], *k_norm = L->vec[LAYER_K_NORM];
    int st;
    if ((st = IG_DEV(gk_rmsnorm)(g->x, e, L->vec[LAYER_ATTN_NORM], n, e, eps, g->xn, g->stream)) ||
        (st = IG_DEV(gpu_matmul)(g, wqkv, g->xn, e, n, g->qkv, g->qkv_rows, 0.0f)) || !q_norm)
        return st;
    st = IG_DEV(gk_head_rmsnorm)(g->qkv, g->qkv_rows, n, hp->n_head, hp->head_dim, q_norm, eps,
                                 g->stream);
    return st != IG_OK ? st
                       : IG_DEV(gk_head_rmsnorm)(g->qkv + g->q_dim, g->qkv_rows, n,
                                                 hp->n_head_kv, hp->head_dim, k_norm, eps,
                                                 g->stream);
}

/* Bias and RoPE of layer l's n rows at their positions g->pos; K and V to
 * the step's buffers (k16, v16) or, with to_pool, into the pool through
 * the row's table (g->tables, one per row: a decode step). */
static int rope_rows(struct gpu_backend *g, int64_t l, int64_t n, bool to_pool)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    struct gk_qkv_params qp = {
        .qkv = g->qkv, .bias = L->vec[LAYER_BQ] /* Q|K|V biases */,
        .inv_freq = g->inv_freq[ML->rope], .pos = g->pos,
        .n = n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .n_rot = hp->n_rot, .rope_style = (int)hp->rope_style, .q = g->q16,
        .mscale = g->mscale[ML->rope],
    };
    if (to_pool) {
        qp.k_cache = L->k_cache;
        qp.v_cache = L->v_cache;
        qp.block_table = g->tables;
        qp.table_stride = g->table_stride;
        qp.block_stride = g->block_stride;
        qp.head_stride = g->head_stride;
    } else {
        qp.k = g->k16;
        qp.v = g->v16;
    }
    return IG_DEV(gk_qkv_rope)(&qp, g->stream);
}

/* The step's residuals from the embedding table (scaled for Gemma). */
static int embed(struct gpu_backend *g, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    int st = IG_DEV(gpu_embed)(g, g->tokens, n, g->x);
    if (st == IG_OK && hp->embd_scale != 1.0)
        st = IG_DEV(gk_scale_f32)(g->x, n * hp->n_embd, (float)hp->embd_scale, g->stream);
    return st;
}

/* ---- a prefill step ----------------------------------------------------------------- */

/* Layer l's attention over the step's sequences (host copy h_seqs, n_seqs):
 * one sequence through its table alone (any kernel that reads the pool),
 * several as one variable-length launch. The kernel writes the rows' K/V
 * into their blocks. */
static int prefill_attention(struct gpu_backend *g, int64_t l, int64_t n_seqs)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t hd = hp->head_dim;
    struct prefill_attn_params ap = {
        .q = g->q16, .k = g->k16, .v = g->v16, .o = g->att16, .lse = NULL,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .q_row_stride = g->q_dim, .q_head_stride = hd,
        .k_row_stride = g->kv_dim, .k_head_stride = hd,
        .v_row_stride = g->kv_dim, .v_head_stride = hd,
        .o_row_stride = g->q_dim, .o_head_stride = hd,
        .window = g->m->layers[l].window, .scale = (float)hp->attn_scale,
        .dtype = PREFILL_ATTN_F16,
    };
    struct kv_layout lay = gpu_layer_layout(g, l);
    int st;
    if (n_seqs == 1) {
        ap.n_tokens = g->h_seqs[0].n_rows;
        ap.pos0 = g->h_seqs[0].pos0;
        st = prefill_attn_use_pool(&ap, &lay, g->tables, g->table_stride, g->n_blocks);
    } else {
        st = prefill_attn_use_pool_varlen(&ap, &lay, g->tables, g->table_stride, g->n_blocks,
                                          g->seqs, g->h_seqs, n_seqs);
    }
    IG_ASSERT(st == 0);
    return IG_DEV(prefill_attn)(&ap, g->stream);
}

/* The logits of rows want[0..k) (ascending; residuals in g->x) into host
 * `logits` [k][n_vocab], or with `greedy` their greedy tokens into it [k]:
 * per group of up to logit_rows rows, the final norm gathers them into
 * g->xn (one launch per run of consecutive rows), one output-head product,
 * one download. */
static int head_rows(struct gpu_backend *g, const int64_t *want, int64_t k, float *logits,
                     int32_t *greedy)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, nv = hp->n_vocab;
    float eps = (float)hp->norm_eps;
    const float *norm = g->vec[MODEL_OUTPUT_NORM];
    int st = IG_OK;
    for (int64_t i = 0; i < k && st == IG_OK; i += g->logit_rows) {
        int64_t n = k - i < g->logit_rows ? k - i : g->logit_rows;
        for (int64_t j = 0; j < n && st == IG_OK;) {
            int64_t run = 1;
            while (j + run < n && want[i + j + run] == want[i + j] + run)
                run++;
            st = IG_DEV(gk_rmsnorm)(g->x + want[i + j] * e, e, norm, run, e, eps, g->xn + j * e,
                                    g->stream);
            j += run;
        }
        if (st == IG_OK)
            st = IG_DEV(gpu_matmul)(g, &g->mat[MODEL_OUTPUT], g->xn, e, n, g->logits, nv, 0.0f);
        if (st == IG_OK && hp->final_softcap > 0)
            st = IG_DEV(gk_softcap)(g->logits, n * nv, (float)hp->final_softcap, g->stream);
        if (st == IG_OK && greedy) {
            if ((st = IG_DEV(gk_greedy_rows)(g->logits, nv, n, nv, g->greedy, g->stream)) ==
                IG_OK)
                st = IG_DEV(dev_download)(g->dev, greedy + i, g->greedy, (size_t)n * 4);
        } else if (st == IG_OK) {
            st = IG_DEV(dev_download)(g->dev, logits + i * nv, g->logits, (size_t)(n * nv) * 4);
        }
    }
    return st;
}

/* Whether row r of the step wants logits (NULL want: each sequence's last). */
static bool row_wanted(const struct backend_batch *batch, const struct backend_seq *s, int64_t r)
{
    return batch->want_logits ? batch->want_logits[r] : r == s->row0 + s->n_rows - 1;
}

/* Copies sequence s's table (the blocks of positions < n_pos) into row i of
 * the staged tables, the rest of the row -1. */
static void stage_table(struct gpu_backend *g, int64_t i, const int32_t *table, int64_t n_pos)
{
    int32_t *row = g->h_tables + i * g->table_stride;
    int64_t nb = kv_blocks_for(n_pos);
    if (nb)
        memcpy(row, table, (size_t)nb * sizeof *row);
    for (int64_t b = nb; b < g->table_stride; b++)
        row[b] = -1;
}

static int prefill_step(struct gpu_backend *g, const struct backend_batch *batch)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t n = batch->n_rows, ns = batch->n_seqs, n_want = 0, *want = g->want;
    for (int64_t i = 0; i < ns; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++) {
            g->h_pos[s->row0 + r] = (int32_t)(s->pos0 + r);
            if (row_wanted(batch, s, s->row0 + r))
                want[n_want++] = s->row0 + r;
        }
        g->h_seqs[i] = (struct prefill_attn_seq){
            .row0 = (int32_t)s->row0, .n_rows = (int32_t)s->n_rows, .pos0 = (int32_t)s->pos0};
        stage_table(g, i, s->table, s->pos0 + s->n_rows);
    }
    int st;
    if ((st = IG_DEV(dev_upload)(g->dev, g->tokens, batch->tokens, (size_t)n * 4)) ||
        (st = IG_DEV(dev_upload)(g->dev, g->pos, g->h_pos, (size_t)n * 4)) ||
        (st = IG_DEV(dev_upload)(g->dev, g->tables, g->h_tables,
                                 (size_t)(ns * g->table_stride) * 4)) ||
        (ns > 1 && (st = IG_DEV(dev_upload)(g->dev, g->seqs, g->h_seqs,
                                            (size_t)ns * sizeof *g->seqs))) ||
        (st = embed(g, n)))
        return st;
    /* Past attention, the last layer matters for the rows that want logits. */
    int64_t keep0 = n_want ? want[0] : n;
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        bool last = l == hp->n_layer - 1;
        if ((st = qkv_block(g, &g->layers[l], n)) || (st = rope_rows(g, l, n, false)) ||
            (st = prefill_attention(g, l, ns)))
            break;
        if (!last || keep0 < n)
            st = ffn_block(g, &g->layers[l], last ? keep0 : 0, last ? n - keep0 : n);
    }
    if (st == IG_OK && n_want)
        st = head_rows(g, want, n_want, batch->logits, batch->greedy);
    return st == IG_OK ? IG_DEV(dev_sync)(g->dev) : st;
}

/* ---- a decode step ----------------------------------------------------------------- */

/* Bucket i's forward: 2^i rows, one per sequence, tokens, positions (-1:
 * padding) and tables read from device memory, so a graph of it replays
 * for any batch of that size. Logits of every row into g->logits. */
static int decode_forward(struct gpu_backend *g, int bucket)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t rows = (int64_t)1 << bucket, e = hp->n_embd;
    int st = embed(g, rows);
    for (int64_t l = 0; l < hp->n_layer && st == IG_OK; l++) {
        const struct gpu_layer *L = &g->layers[l];
        struct decode_attn_params ap = bucket_attn(g, bucket);
        ap.q = g->q16;
        ap.k_cache = L->k_cache;
        ap.v_cache = L->v_cache;
        ap.block_table = g->tables;
        ap.pos = g->pos;
        ap.o = g->att16;
        ap.work = g->attn_work;
        ap.scale = (float)hp->attn_scale;
        ap.window = g->m->layers[l].window;
        if ((st = qkv_block(g, L, rows)) || (st = rope_rows(g, l, rows, true)) ||
            (st = IG_DEV(decode_attn)(&ap, g->stream)))
            break;
        st = ffn_block(g, L, 0, rows);
    }
    if (st == IG_OK)
        st = IG_DEV(gk_rmsnorm)(g->x, e, g->vec[MODEL_OUTPUT_NORM], rows, e, (float)hp->norm_eps,
                                g->xn, g->stream);
    if (st == IG_OK)
        st = IG_DEV(gpu_matmul)(g, &g->mat[MODEL_OUTPUT], g->xn, e, rows, g->logits,
                                hp->n_vocab, 0.0f);
    if (st == IG_OK && hp->final_softcap > 0)
        st = IG_DEV(gk_softcap)(g->logits, rows * hp->n_vocab, (float)hp->final_softcap,
                                g->stream);
    return st;
}

/* Runs bucket i's step: the first call captures it as a graph where the
 * device layer can, later calls replay it. */
static int run_bucket(struct gpu_backend *g, int bucket)
{
    if (g->graphs[bucket])
        return IG_DEV(dev_graph_launch)(g->dev, g->graphs[bucket]);
    if (g->no_graph || IG_DEV(dev_graph_begin)(g->dev) != IG_OK) {
        g->no_graph = true;
        return decode_forward(g, bucket);
    }
    int st = decode_forward(g, bucket);
    struct dev_graph *graph = NULL;
    int st_end = IG_DEV(dev_graph_end)(g->dev, &graph);
    if (st != IG_OK || st_end != IG_OK) {
        IG_DEV(dev_graph_free)(graph);
        return st != IG_OK ? st : st_end;
    }
    g->graphs[bucket] = graph;
    return IG_DEV(dev_graph_launch)(g->dev, g->graphs[bucket]);
}

/* A step of one row per sequence: padded to its bucket (padding rows token
 * 0 at position -1: nothing of them reaches the pool), the inputs uploaded
 * into the fixed buffers, the bucket's graph run, the wanted rows' logits
 * downloaded. */
static int decode_step(struct gpu_backend *g, const struct backend_batch *batch)
{
    int64_t ns = batch->n_seqs, nv = g->m->hp.n_vocab;
    int bucket = 0;
    while (((int64_t)1 << bucket) < ns)
        bucket++;
    int64_t rows = (int64_t)1 << bucket;
    for (int64_t i = 0; i < rows; i++) {
        const struct backend_seq *s = i < ns ? &batch->seqs[i] : NULL;
        g->h_tokens[i] = s ? batch->tokens[i] : 0;
        g->h_pos[i] = s ? (int32_t)s->pos0 : -1;
        stage_table(g, i, s ? s->table : NULL, s ? s->pos0 + 1 : 0);
    }
    int st;
    if ((st = IG_DEV(dev_upload_async)(g->dev, g->tokens, g->h_tokens, (size_t)rows * 4)) ||
        (st = IG_DEV(dev_upload_async)(g->dev, g->pos, g->h_pos, (size_t)rows * 4)) ||
        (st = IG_DEV(dev_upload_async)(g->dev, g->tables, g->h_tables,
                                       (size_t)(rows * g->table_stride) * 4)) ||
        (st = run_bucket(g, bucket)))
        return st;
    int64_t n_want = 0;
    for (int64_t i = 0; i < ns; i++)
        n_want += row_wanted(batch, &batch->seqs[i], i);
    if (batch->greedy) { /* a token a row comes back, not the row */
        int32_t *dst = n_want == ns ? batch->greedy : g->h_greedy;
        if ((st = IG_DEV(gk_greedy_rows)(g->logits, nv, ns, nv, g->greedy, g->stream)) ||
            (st = IG_DEV(dev_download)(g->dev, dst, g->greedy, (size_t)ns * 4)))
            return st;
        if (dst == g->h_greedy)
            for (int64_t i = 0, k = 0; i < ns; i++)
                if (row_wanted(batch, &batch->seqs[i], i))
                    batch->greedy[k++] = g->h_greedy[i];
        return IG_OK;
    }
    if (n_want == ns) /* the usual case: one download */
        return IG_DEV(dev_download)(g->dev, batch->logits, g->logits, (size_t)(ns * nv) * 4);
    float *out = batch->logits;
    for (int64_t i = 0; i < ns && st == IG_OK; i++)
        if (row_wanted(batch, &batch->seqs[i], i)) {
            st = IG_DEV(dev_download)(g->dev, out, g->logits + i * nv, (size_t)nv * 4);
            out += nv;
        }
    return st == IG_OK ? IG_DEV(dev_sync)(g->dev) : st;
}

/* ---- the step ------------------------------------------------------------------------ */

/* The step's shape (backend_check_step) and tables, then its tokens
 * (outside input: IG_E_INPUT). */
static int check_batch(const struct gpu_backend *g, const struct backend_batch *batch)
{
    int st = backend_check_step(&g->base, batch);
    if (st != IG_OK)
        return st;
    for (int64_t i = 0; i < batch->n_seqs; i++)
        if (!batch->seqs[i].table)
            return ig_error(IG_E_INTERNAL, "step sequence %lld has no block table",
                            (long long)i);
    for (int64_t i = 0; i < batch->n_rows; i++)
        if (batch->tokens[i] < 0 || batch->tokens[i] >= g->m->hp.n_vocab)
            return ig_error(IG_E_INPUT, "token id %d is outside the vocabulary (0..%lld)",
                            batch->tokens[i], (long long)g->m->hp.n_vocab - 1);
    return IG_OK;
}

static int gpu_step(struct backend *b, const struct backend_batch *batch)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    int st = check_batch(g, batch);
    if (st != IG_OK)
        return st;
    return batch->n_rows == batch->n_seqs ? decode_step(g, batch) : prefill_step(g, batch);
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
    for (int i = 0; i < g->n_buckets; i++)
        info->graphs += g->graphs[i] != NULL;
}

static const struct backend_ops gpu_ops = {
    .step = gpu_step,
    .kv_export = IG_DEV(gpu_kv_export),
    .kv_import = IG_DEV(gpu_kv_import),
    .device_bytes = gpu_device_bytes,
    .destroy = gpu_destroy,
};
