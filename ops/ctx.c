/* ops/ctx.c: the run state of a forward pass: the borrowed model, the thread
 * pool and every buffer a pass needs, allocated once here so that prefill
 * and decode never allocate. What the buffers hold is the stages' business.
 * The packed copies of the weights that the int8 matmul reads are the
 * model's, not the run's (ops/packed.h): the context only borrows them.
 * Covered by tests/cpu/. */
#include "ops/ops.h"

#include "core/status.h"
#include "ops/qmatmul.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct ops_ctx {
    const struct model *m;
    struct ops_pool *pool;
    int64_t max_batch;
    struct ops_buffers buf;
    float *scratch;          /* [n_threads, scratch_floats] */
    int64_t scratch_floats;  /* per thread, a multiple of 16 (64 bytes) */
    struct qmm_q8 *qbuf;     /* [max_batch, widest row / QMM_QK] int8 activations */
    struct qmm_pack8 *qpack; /* [n_threads, qpack_n] repacked weight rows */
    int64_t qpack_n;
    bool exact;              /* every matmul on the exact f32 path */
    int n_rope;              /* RoPE variants the layers use: 1, or 2 with local layers */
    double *rope_inv;        /* [n_rope, n_rot / 2] inverse frequencies (ops_rope_freqs) */
    double rope_mscale[2];   /* cos/sin scale of each variant */
    const struct ops_packed *packed; /* borrowed: the model's packed weights, or NULL */
};

/* Arrays of this many bytes or more start on a 2 MiB boundary. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

/* 64-byte aligned, zeroed array of n floats, or NULL. One of 2 MiB or more
 * is asked for in transparent huge pages (madvise: refused, 4 KiB pages as
 * before): a prefill's rows are walked a column block at a time, rows tens
 * of KiB apart (Qwen3.5's DeltaNet rows 24 KiB: its convolution and each
 * head's chunks read a page, and a TLB entry, a row), and in 2 MiB pages
 * the chunked rule's time on Qwen3.5-0.8B's shapes was 0.9x. */
static float *alloc_floats(int64_t n)
{
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    bool huge = bytes >= HUGE_PAGE_BYTES;
    if (huge)
        bytes = (bytes + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    float *p = aligned_alloc(huge ? HUGE_PAGE_BYTES : 64, bytes);
#ifdef MADV_HUGEPAGE
    if (p && huge)
        madvise(p, bytes, MADV_HUGEPAGE); /* a request, before the pages are touched */
#endif
    if (p)
        memset(p, 0, bytes);
    return p;
}

static int64_t max_i64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* n rounded up to 16 floats (64 bytes): each thread's slice stays aligned. */
static int64_t round16(int64_t n)
{
    return (n + 15) & ~(int64_t)15;
}

/* Widest matrix row of the table of tensors (models/tensors.h) at m's
 * sizes: the matmul row buffer must hold one dequantized row. */
static int64_t max_weight_cols(const struct model *m)
{
    int n;
    const struct model_tensor *t = model_tensor_table(&n);
    int64_t cols = 1;
    /* from the hyper-parameters (tests size a context with no weights and
     * no layers), and each layer's own sizes where there are layers */
    for (int i = 0; i < n; i++) {
        bool per_layer = t[i].scope == TENSOR_PER_LAYER;
        if (t[i].kind != TENSOR_MATRIX)
            continue;
        cols = max_i64(cols, model_tensor_dim(&m->hp, per_layer ? 0 : -1, t[i].cols));
        for (int64_t l = 0; per_layer && m->layers && l < m->hp.n_layer; l++)
            cols = max_i64(cols, model_layer_dim(m, l, t[i].cols));
    }
    return cols;
}

int ops_ctx_create(const struct model *m, int n_threads, int64_t max_batch,
                   struct ops_ctx **out)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (max_batch < 1)
        max_batch = 1;
    struct ops_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return ig_error(IG_E_NOMEM, "out of memory creating the run state");
    ctx->m = m;
    ctx->max_batch = max_batch;
    int st = ops_pool_create(n_threads, &ctx->pool);
    if (st != IG_OK) {
        free(ctx);
        return st;
    }

    /* buffers that hold any layer's rows: the largest layer's sizes */
    struct model_layer_max mx;
    model_layers_max(m, &mx);
    /* each variant's angles in a row of the most any variant rotates */
    int64_t half_rot = model_rope_dims_max(hp) / 2 > 0 ? model_rope_dims_max(hp) / 2 : 1;
    ctx->n_rope = 1;
    for (int64_t l = 0; m->layers && l < hp->n_layer; l++)
        if (m->layers[l].rope == MODEL_ROPE_LOCAL)
            ctx->n_rope = 2;
    ctx->rope_inv = malloc((size_t)(ctx->n_rope * half_rot) * sizeof *ctx->rope_inv);
    if (ctx->rope_inv)
        for (int r = 0; r < ctx->n_rope; r++)
            ops_rope_freqs(&hp->rope[r], model_rope_dims(hp, r), ctx->rope_inv + r * half_rot,
                           &ctx->rope_mscale[r]);
    struct ops_buffers *b = &ctx->buf;
    b->x = alloc_floats(max_batch * hp->n_embd);
    b->xn = alloc_floats(max_batch * hp->n_embd);
    b->proj = alloc_floats(max_batch * hp->n_embd);
    b->q = alloc_floats(max_batch * max_i64(mx.q_dim, mx.q_rows)); /* [query | gate] rows */
    b->attn_gate = alloc_floats(mx.q_rows > mx.q_dim ? max_batch * mx.q_dim : 1);
    b->dn = alloc_floats(mx.dn_conv_dim ? max_batch * (mx.dn_conv_dim + 2 * mx.dn_v_dim +
                                                       2 * mx.dn_v_heads) : 1);
    b->k = alloc_floats(max_batch * mx.kv_dim);
    b->v = alloc_floats(max_batch * mx.kv_dim);
    b->att = alloc_floats(max_batch * mx.q_dim);
    b->gate = alloc_floats(max_batch * mx.n_ff);
    b->up = alloc_floats(max_batch * mx.n_ff);
    b->rope_cos = alloc_floats(ctx->n_rope * max_batch * half_rot);
    b->rope_sin = alloc_floats(ctx->n_rope * max_batch * half_rot);
    int64_t moe_embd = mx.n_expert ? hp->n_embd : 1, moe_k = mx.n_expert_used;
    b->moe_x = alloc_floats(max_batch * moe_embd);
    b->moe_y = alloc_floats(max_batch * moe_embd);
    b->moe_logits = alloc_floats(max_batch * mx.n_expert);
    b->moe_w = alloc_floats(max_batch * moe_k);
    b->moe_sel = (int32_t *)alloc_floats(max_batch * moe_k);
    b->moe_rows = (int32_t *)alloc_floats(max_batch * moe_k);
    b->moe_start = (int64_t *)alloc_floats(2 * (mx.n_expert + 1));

    /* the matmuls' own; a kernel from outside ops/ asks for more
     * (ops_ctx_reserve_scratch) */
    ctx->scratch_floats = round16(max_weight_cols(m) * OPS_MATMUL_ROW_BUFS);
    ctx->scratch = alloc_floats(ctx->scratch_floats * ops_pool_threads(ctx->pool));
    int64_t qbytes = max_batch * (max_weight_cols(m) / QMM_QK + 1) * (int64_t)sizeof(struct qmm_q8);
    ctx->qbuf = (struct qmm_q8 *)alloc_floats(qbytes / (int64_t)sizeof(float));
    /* the widest scratch: 16 rows of f32 columns (ops_qmm_fgemm16), 64 bytes
     * a column in entries of 320 */
    ctx->qpack_n = 8 * (max_weight_cols(m) / QMM_QK + 1);
    ctx->qpack = aligned_alloc(64, (size_t)(ctx->qpack_n * ops_pool_threads(ctx->pool)) *
                                       sizeof(struct qmm_pack8));
    const char *mode = getenv("IGNITE_MATMUL");
    ctx->exact = mode && strcmp(mode, "exact") == 0;

    if (!b->x || !b->xn || !b->proj || !b->q || !b->k || !b->v || !b->att || !b->gate ||
        !b->up || !b->attn_gate || !b->dn || !b->rope_cos || !b->rope_sin || !b->moe_x || !b->moe_y || !b->moe_logits ||
        !b->moe_w || !b->moe_sel || !b->moe_rows || !b->moe_start || !ctx->rope_inv ||
        !ctx->scratch ||
        !ctx->qbuf || !ctx->qpack) {
        ops_ctx_free(ctx);
        return ig_error(IG_E_NOMEM, "out of memory allocating buffers for batches of %lld tokens",
                        (long long)max_batch);
    }
    *out = ctx;
    return IG_OK;
}

void ops_ctx_free(struct ops_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->qpack);
    free(ctx->qbuf);
    free(ctx->scratch);
    free(ctx->rope_inv);
    struct ops_buffers *b = &ctx->buf;
    free(b->moe_start);
    free(b->moe_rows);
    free(b->moe_sel);
    free(b->moe_w);
    free(b->moe_logits);
    free(b->moe_y);
    free(b->moe_x);
    free(b->rope_sin);
    free(b->rope_cos);
    free(b->up);
    free(b->gate);
    free(b->att);
    free(b->v);
    free(b->k);
    free(b->q);
    free(b->dn);
    free(b->attn_gate);
    free(b->proj);
    free(b->xn);
    free(b->x);
    ops_pool_free(ctx->pool);
    free(ctx);
}

int ops_ctx_n_rope(const struct ops_ctx *ctx)
{
    return ctx->n_rope;
}

const double *ops_ctx_rope_freqs(const struct ops_ctx *ctx, int rope, double *mscale)
{
    IG_ASSERT(rope >= 0 && rope < ctx->n_rope);
    int64_t rot = model_rope_dims_max(&ctx->m->hp), half = rot / 2 > 0 ? rot / 2 : 1;
    *mscale = ctx->rope_mscale[rope];
    return ctx->rope_inv + rope * half;
}

int ops_ctx_threads(const struct ops_ctx *ctx)
{
    return ops_pool_threads(ctx->pool);
}

const struct model *ops_ctx_model(const struct ops_ctx *ctx)
{
    return ctx->m;
}

int64_t ops_ctx_max_batch(const struct ops_ctx *ctx)
{
    return ctx->max_batch;
}

struct ops_buffers *ops_ctx_buffers(struct ops_ctx *ctx)
{
    return &ctx->buf;
}

struct ops_pool *ops_ctx_pool(struct ops_ctx *ctx)
{
    return ctx->pool;
}

float *ops_ctx_scratch(struct ops_ctx *ctx, int thread)
{
    IG_ASSERT(thread >= 0 && thread < ops_pool_threads(ctx->pool));
    return ctx->scratch + (int64_t)thread * ctx->scratch_floats;
}

int64_t ops_ctx_scratch_floats(const struct ops_ctx *ctx)
{
    return ctx->scratch_floats;
}

int ops_ctx_reserve_scratch(struct ops_ctx *ctx, int64_t floats)
{
    if (floats <= ctx->scratch_floats)
        return IG_OK;
    int64_t per_thread = round16(floats);
    float *p = alloc_floats(per_thread * ops_pool_threads(ctx->pool));
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory for %d threads' scratch of %lld floats",
                        ops_pool_threads(ctx->pool), (long long)per_thread);
    free(ctx->scratch);
    ctx->scratch = p;
    ctx->scratch_floats = per_thread;
    return IG_OK;
}

struct qmm_q8 *ops_ctx_qbuf(struct ops_ctx *ctx)
{
    return ctx->qbuf;
}

void ops_ctx_set_exact(struct ops_ctx *ctx, bool exact)
{
    ctx->exact = exact;
}

bool ops_ctx_exact(const struct ops_ctx *ctx)
{
    return ctx->exact;
}

struct qmm_pack8 *ops_ctx_qpack(struct ops_ctx *ctx, int thread)
{
    IG_ASSERT(thread >= 0 && thread < ops_pool_threads(ctx->pool));
    return ctx->qpack + (int64_t)thread * ctx->qpack_n;
}

void ops_ctx_set_packed(struct ops_ctx *ctx, const struct ops_packed *packed)
{
    ctx->packed = packed;
}

const struct ops_packed *ops_ctx_packed(const struct ops_ctx *ctx)
{
    return ctx->packed;
}
