/* backend/gpu_forward.c: the CUDA backend's forward: the one layer loop, the
 * mixers and FFNs it calls by the layer's kind (struct model_layer's mixer
 * and ffn, set at load from models/arch.c), the embeddings and the output
 * head. backend/gpu.c keeps the memory, the step's inputs and the decode
 * graphs, and calls in here. Each layer is
 *
 *   mixers[L.mixer]  reduce  ffns[L.ffn]  reduce
 *
 * with the residual adds in the products (the GEMMs' beta = 1, or through a
 * post norm: Gemma 3). The attention mixer: RMSNorm -> Q|K|V GEMM -> [head
 * norms] -> bias+RoPE at each row's position -> attention over each
 * sequence's blocks (prefill: the fused flash kernel, one variable-length
 * launch for several sequences, writing the rows' K/V, and a mixed step's
 * one-row sequences through the split-KV kernel, their K/V written by
 * RoPE; decode: K/V written by the RoPE kernel into the pool, the split-KV
 * kernel of the bucket) ->
 * wo GEMM += x. The dense FFN: RMSNorm -> gate|up GEMM -> SwiGLU or GeGLU
 * -> down GEMM += x. Every size is the layer's own (heads, KV heads, head
 * dim, window, RoPE variant, scale, FFN width); the buffers are sized for
 * the largest (gpu.c). A decode step's launches are captured as a graph
 * (gpu.c): this file decides their order, one pass per bucket. Fused
 * (IGNITE_GPU_FUSE=1, the default; docs/gpu.md "A decode step's launches"):
 * the Q|K|V GEMV does bias, RoPE and the pool write in its epilogue
 * (qkv_rope_fused), the split-KV kernel combines in its last split, the
 * gate|up GEMV applies the activation, and wo's and down's GEMVs write the
 * next RMSNorm (and its int8 blocks) in their last block (add_product's
 * next_norm; norm_rows then launches nothing): 5 launches a layer where
 * there were 10.
 *
 * Compiled twice like gpu.c (backend/gpu.h). Covered by
 * tests/emu/test_backend_emu.c, test_backend_qemu.c,
 * test_backend_arch_emu.c, test_backend_batch_emu.c and tests/gpu/. */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "decode/decode_attn.h"
#include "decode/greedy.h"
#include "ops/gpu_deltanet.h"
#include "ops/gpu_kvq.h"
#include "ops/gpu_ops.h"
#include "prefill/flash_attn_pool.h"

/* One pass over the layers: the step's rows and, for a decode step, its
 * bucket. */
struct gpu_pass {
    struct gpu_backend *g;
    int64_t n;      /* rows */
    int bucket;     /* a decode step's bucket (n = 2^bucket rows, one per sequence, or
                       g->q_len a sequence in a verify step, read from the fixed
                       buffers), or -1: a prefill step */
    int64_t n_seqs; /* a prefill step's sequences (g->h_seqs, staged) */
    int64_t n_single; /* of which the last, one row each and the step's last rows,
                         go through decode_attn (a mixed step: mixed_attention) */
};

/* A mixer (enum layer_mixer): layer l over the pass's rows; its output is
 * added into the residual rows from `row0` on (the last layer of a prefill
 * step: the rows before the first that wants logits are never read again;
 * none when row0 == n). */
typedef int (*gpu_mixer_fn)(const struct gpu_pass *p, int64_t l, int64_t row0);

/* An FFN (enum layer_ffn): layer l over the residual rows row0 .. n. */
typedef int (*gpu_ffn_fn)(const struct gpu_pass *p, int64_t l, int64_t row0);

/* ---- shared steps ------------------------------------------------------------ */

/* g->xn = RMSNorm(x rows) with weights w, the next product's input: one
 * launch, or none where the product that finished x left it there
 * (g->xn_of, a decode step's fused launches). A fused decode step's launch
 * (layer 0's, or where no product's tail could) also writes xn's int8
 * blocks (g->norm_blocks) for the quantized GEMVs of xn. */
static int norm_rows(struct gpu_backend *g, const float *x, int64_t rows, const float *w)
{
    const struct model_hparams *hp = &g->m->hp;
    bool ready = g->xn_of == w;
    g->xn_of = NULL;
    if (ready)
        return IG_OK; /* and xq_ready as that product's tail left it */
    g->xq_ready = g->norm_blocks; /* a launch rewrites xn: its blocks are stale, or anew */
    return IG_DEV(gk_rmsnorm_xq)(x, hp->n_embd, w, rows, hp->n_embd, (float)hp->norm_eps, g->xn,
                                 g->norm_blocks ? g->xq : NULL, g->norm_blocks ? g->xqd : NULL,
                                 g->stream);
}

/* x[rows] += w in (in: f16 rows of ld_in): the GEMM's beta = 1, or with a
 * post norm (Gemma 3) the product into g->proj and its norm added. With
 * next_norm (a decode step) and a fusable product, its last block also
 * leaves RMSNorm(x) by next_norm in g->xn for the next product (norm_rows
 * then launches nothing). */
static int add_product(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *in,
                       int64_t ld_in, int64_t rows, float *x, const float *post_norm,
                       const float *next_norm)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd;
    g->xn_of = NULL;
    g->xq_ready = false; /* this product's input is not xn; its tail may refill both */
    if (g->tp) /* a rank's partial sum, for reduce */
        return IG_DEV(gpu_tp_partial)(g, w, in, ld_in, rows, x, post_norm);
    if (!post_norm && next_norm && IG_DEV(gpu_matmul_norm_ok)(g, w, rows)) {
        g->xn_of = next_norm;
        return IG_DEV(gpu_matmul_norm)(g, w, in, ld_in, rows, x, e, next_norm,
                                       (float)hp->norm_eps, g->xn);
    }
    if (!post_norm)
        return IG_DEV(gpu_matmul)(g, w, in, ld_in, rows, x, e, 1.0f);
    int st = IG_DEV(gpu_matmul)(g, w, in, ld_in, rows, g->proj, e, 0.0f);
    return st != IG_OK ? st
                       : IG_DEV(gk_rmsnorm_add)(x, e, g->proj, e, post_norm, rows, e,
                                                (float)hp->norm_eps, g->stream);
}

/* The step's residuals from the embedding table (scaled for Gemma); a
 * tensor-parallel rank's rows of its own tokens (zeros for the others',
 * scaled still zeros), summed over the ranks before layer 0. */
static int embed(struct gpu_backend *g, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    int st = IG_DEV(gpu_embed)(g, g->tokens, n, g->x);
    if (st == IG_OK && hp->embd_scale != 1.0)
        st = IG_DEV(gk_scale_f32)(g->x, n * hp->n_embd, (float)hp->embd_scale, g->stream);
    if (st == IG_OK && g->tp)
        st = IG_DEV(gpu_tp_embedded)(g, g->x, n);
    return st;
}

/* ---- the attention mixer ------------------------------------------------------- */

/* Everything before RoPE in layer l, for n rows: norm, the QKV GEMM and,
 * for Qwen 3 / Gemma 3, the RMSNorm of each Q and K head. */
static int qkv_block(struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    int64_t e = hp->n_embd, qkv_rows = gpu_layer_qkv_rows(ML);
    float eps = (float)hp->norm_eps;
    const struct gpu_matrix *wqkv = &L->mat[LAYER_WQ]; /* Q|K|V */
    const float *q_norm = L->vec[LAYER_Q_NORM], *k_norm = L->vec[LAYER_K_NORM];
    int st;
    if ((st = norm_rows(g, g->x, n, L->vec[LAYER_ATTN_NORM])) ||
        (st = ML->attn_gate ? IG_DEV(gpu_gated_qkv)(g, l, n) /* gpu_deltanet.c */
                            : IG_DEV(gpu_matmul)(g, wqkv, g->xn, e, n, g->qkv, qkv_rows, 0.0f)) ||
        (st = IG_DEV(gpu_gemma4_v_norm)(g, l, n)) || !q_norm)
        return st;
    if (ML->kv_shared) /* Q alone: K and V are another layer's */
        return IG_DEV(gk_head_rmsnorm)(g->qkv, qkv_rows, n, ML->n_head, ML->head_dim, q_norm,
                                       eps, g->stream);
    st = IG_DEV(gk_head_rmsnorm)(g->qkv, qkv_rows, n, ML->n_head, ML->head_dim, q_norm, eps,
                                 g->stream);
    return st != IG_OK ? st
                       : IG_DEV(gk_head_rmsnorm)(g->qkv + ML->n_head * ML->head_dim, qkv_rows,
                                                 n, ML->n_head_kv, ML->head_dim, k_norm, eps,
                                                 g->stream);
}

/* The params of bias and RoPE of layer l's n rows at their positions
 * g->pos; K and V to the step's buffers (k16, v16) or, with to_pool, into
 * the pool through the row's table (one per row: a decode step; a window
 * layer's under the window rule, gpu_layer_tables). */
static struct gk_qkv_params rope_params(struct gpu_backend *g, int64_t l, int64_t n,
                                        bool to_pool)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    struct gk_qkv_params qp = {
        .qkv = g->qkv, .bias = L->vec[LAYER_BQ] /* Q|K|V biases */,
        .inv_freq = g->inv_freq[ML->rope], .pos = g->pos,
        .n = n, .n_head = ML->n_head, .n_head_kv = ML->n_head_kv, .head_dim = ML->head_dim,
        .n_rot = model_rope_dims(hp, ML->rope), .rope_style = (int)hp->rope_style, .q = g->q16,
        .mscale = g->mscale[ML->rope],
    };
    if (to_pool) {
        struct kv_layout lay = gpu_layer_layout(g, l);
        qp.k_cache = L->k_cache;
        qp.v_cache = L->v_cache;
        qp.block_table = gpu_layer_tables(g, l); /* a window layer's: the window tables */
        qp.table_stride = g->table_stride;
        qp.block_stride = lay.block_stride;
        qp.head_stride = lay.head_stride;
    } else if (ML->kv_shared) { /* no K/V of its own: the scratch, never read */
        qp.k = g->k16;
        qp.v = g->v16;
    } else {
        qp.k = IG_DEV(gpu_gemma4_kv_rows)(g, l, 0);
        qp.v = IG_DEV(gpu_gemma4_kv_rows)(g, l, 1);
    }
    return qp;
}

/* gk_qkv_rope over rope_params. */
static int rope_rows(struct gpu_backend *g, int64_t l, int64_t n, bool to_pool)
{
    struct gk_qkv_params qp = rope_params(g, l, n, to_pool);
    return IG_DEV(gk_qkv_rope)(&qp, g->stream);
}

/* Whether layer l's pool is quantized (q8_0 / fp8, kvcache/kv_devq.h):
 * then RoPE writes the step's buffers and gk_kvq_write the pool. */
static bool pool_quantized(const struct gpu_backend *g, int64_t l)
{
    const struct kv_layout lay = gpu_layer_layout(g, l);
    return kv_dtype_quantized(lay.dtype) || kv_dtype_quantized(lay.dtype_v);
}

/* A quantized pool's write of the step's K/V rows of layer l (where its
 * RoPE left them: k16 and v16, or a Gemma 4 source's kv_keep), rotated and
 * quantized (ops/gpu_kvq.h), then the queries rotated by K's rotation:
 * decode rows through their own tables, a prefill step's sequences through
 * theirs. A layer sharing another's K/V (kv_shared) writes nothing: its
 * layout is its source's (type, strides, rotation), whose blocks its
 * source wrote this step; its queries are rotated alike. */
static int kvq_write_rows(struct gpu_backend *g, int64_t l, int64_t n, int64_t n_seqs,
                          bool decode)
{
    const struct model_layer *ML = &g->m->layers[l];
    const struct kv_layout lay = gpu_layer_layout(g, l);
    struct gk_kvq_params kp = {
        .k = IG_DEV(gpu_gemma4_kv_rows)(g, l, 0), .v = IG_DEV(gpu_gemma4_kv_rows)(g, l, 1),
        .n = n, .n_head_kv = ML->n_head_kv, .head_dim = ML->head_dim,
        .pos = g->pos, .block_table = gpu_layer_tables(g, l), .table_stride = g->table_stride,
        .block_stride = lay.block_stride, .head_stride = lay.head_stride,
        .k_cache = lay.k, .v_cache = lay.v, .k_dtype = gpu_kvq_type(lay.dtype),
        .v_dtype = gpu_kvq_type(lay.dtype_v),
        .rot_k = kv_rotation(lay.dtype, ML->head_dim, false),
        .rot_v = kv_rotation(lay.dtype_v, ML->head_dim, true),
    };
    if (!decode && n_seqs == 1)
        kp.table_stride = 0; /* one sequence: every row through its table */
    else if (!decode) {
        kp.seqs = (const int32_t *)g->seqs;
        kp.n_seqs = n_seqs;
    }
    int st = ML->kv_shared ? IG_OK : IG_DEV(gk_kvq_write)(&kp, g->stream);
    if (st == IG_OK && kp.rot_k)
        st = IG_DEV(gk_hadamard_f16)(g->q16, n * ML->n_head, ML->head_dim, kp.rot_k, g->stream);
    return st;
}

/* Whether a decode step's layer l takes qkv_rope_fused: no head norms
 * (they need whole heads before RoPE), a Q|K|V GEMV that can. */
static bool qkv_rope_fusable(const struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct gpu_layer *L = &g->layers[l];
    return !L->vec[LAYER_Q_NORM] && !g->m->layers[l].attn_gate && !g->m->hp.has_v_norm &&
           !pool_quantized(g, l) &&
           IG_DEV(gpu_matmul_rope_ok)(g, &L->mat[LAYER_WQ], n);
}

/* A decode step's norm, then the Q|K|V GEMV with bias, RoPE and the pool
 * write in its epilogue: one launch where qkv_block and rope_rows took two. */
static int qkv_rope_fused(struct gpu_backend *g, int64_t l, int64_t n)
{
    const struct gpu_layer *L = &g->layers[l];
    const struct gpu_matrix *wqkv = &L->mat[LAYER_WQ];
    struct gk_qkv_params qp = rope_params(g, l, n, true);
    int st = norm_rows(g, g->x, n, L->vec[LAYER_ATTN_NORM]);
    return st != IG_OK ? st
                       : IG_DEV(gpu_matmul_rope)(g, wqkv, g->xn, g->m->hp.n_embd, n, &qp);
}

/* Layer l's attention over a prefill step's sequences (host copy h_seqs,
 * n_seqs): one sequence through its table alone (any kernel that reads the
 * pool), several as one variable-length launch. The kernel writes the
 * rows' K/V into their blocks. */
static int prefill_attention(struct gpu_backend *g, int64_t l, int64_t n_seqs)
{
    const struct model_layer *ML = &g->m->layers[l];
    int64_t hd = ML->head_dim, q_dim = ML->n_head * hd, kv_dim = ML->n_head_kv * hd;
    struct prefill_attn_params ap = {
        .q = g->q16, .k = IG_DEV(gpu_gemma4_kv_rows)(g, l, 0),
        .v = IG_DEV(gpu_gemma4_kv_rows)(g, l, 1), .o = g->att16, .lse = NULL,
        .n_head = ML->n_head, .n_head_kv = ML->n_head_kv, .head_dim = hd,
        .q_row_stride = q_dim, .q_head_stride = hd,
        .k_row_stride = kv_dim, .k_head_stride = hd,
        .v_row_stride = kv_dim, .v_head_stride = hd,
        .o_row_stride = q_dim, .o_head_stride = hd,
        .window = ML->window, .scale = (float)ML->attn_scale,
        .dtype = PREFILL_ATTN_F16, .sinks = g->layers[l].vec[LAYER_ATTN_SINKS],
        .tile_counter = g->attn_tiles, /* the ws kernel's dynamic schedule */
    };
    struct kv_layout lay = gpu_layer_layout(g, l);
    int st;
    if (n_seqs == 1) {
        ap.n_tokens = g->h_seqs[0].n_rows;
        ap.pos0 = g->h_seqs[0].pos0;
        st = prefill_attn_use_pool(&ap, &lay, gpu_layer_tables(g, l), g->table_stride,
                                   gpu_layer_blocks(g, l));
    } else {
        st = prefill_attn_use_pool_varlen(&ap, &lay, gpu_layer_tables(g, l), g->table_stride,
                                          gpu_layer_blocks(g, l), g->seqs, g->h_seqs, n_seqs);
    }
    IG_ASSERT(st == 0);
    return IG_DEV(prefill_attn)(&ap, g->stream);
}

/* A mixed prefill step's one-row sequences in layer l (the step's last
 * p->n_single rows; their tables after the other sequences'): bias and
 * RoPE with K/V written into the pool through each row's table, as a
 * decode step's rope_rows, for mixed_attention to read there. */
static int rope_single_rows(struct gpu_backend *g, const struct gpu_pass *p, int64_t l)
{
    const struct model_layer *ML = &g->m->layers[l];
    const int64_t d0 = p->n - p->n_single;
    struct gk_qkv_params qp = rope_params(g, l, p->n_single, true);
    qp.qkv += d0 * gpu_layer_qkv_rows(ML);
    qp.pos += d0;
    qp.q += d0 * ML->n_head * ML->head_dim;
    qp.block_table += (p->n_seqs - p->n_single) * g->table_stride;
    return IG_DEV(gk_qkv_rope)(&qp, g->stream);
}

/* Layer l's attention over a mixed prefill step's one-row sequences: the
 * split-KV kernel over them as over a bucket of that many (no padding),
 * each row's q, position and output at its own row of the step, its K/V
 * already in the pool (rope_single_rows, or gk_kvq_write for a quantized
 * pool; a layer sharing another's K/V reads what its source wrote there).
 * Splits by decode_attn_choose_splits for these sequences, fewer where the
 * work buffer (sized for the buckets) would not hold them. */
static int mixed_attention(struct gpu_backend *g, const struct gpu_pass *p, int64_t l)
{
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    const int64_t d0 = p->n - p->n_single, q_dim = ML->n_head * ML->head_dim;
    struct decode_attn_params ap = gpu_bucket_attn(g, 0, l);
    ap.n_seqs = p->n_single;
    ap.n_splits = decode_attn_choose_splits(g->n_ctx, ap.n_seqs, ap.n_head_kv, g->info.n_sm);
    while (ap.n_splits > 1 && decode_attn_work_floats(&ap) > g->attn_work_floats)
        ap.n_splits--;
    ap.q = g->q16 + d0 * q_dim;
    ap.k_cache = L->k_cache;
    ap.v_cache = L->v_cache;
    ap.block_table = gpu_layer_tables(g, l) + (p->n_seqs - p->n_single) * g->table_stride;
    ap.pos = g->pos + d0;
    ap.o = g->att16 + d0 * q_dim;
    ap.work = g->attn_work;
    ap.tickets = g->fuse ? g->attn_tickets : NULL;
    ap.q_len = 1;
    return IG_DEV(decode_attn)(&ap, g->stream);
}

/* Layer l's attention over a decode step's bucket: one row per sequence
 * (q_len in a verify step) over the pool, K/V already there (rope_rows);
 * with blocks, o's int8 blocks too, for the wo GEMV (g->oq_ready). */
static int decode_attention(struct gpu_backend *g, int64_t l, int bucket, bool blocks)
{
    const struct gpu_layer *L = &g->layers[l];
    struct decode_attn_params ap = gpu_bucket_attn(g, bucket, l);
    ap.q = g->q16;
    ap.k_cache = L->k_cache;
    ap.v_cache = L->v_cache;
    ap.block_table = gpu_layer_tables(g, l);
    ap.pos = g->pos;
    ap.o = g->att16;
    ap.work = g->attn_work;
    ap.tickets = g->fuse ? g->attn_tickets : NULL; /* the combine in the last split */
    ap.q_len = g->q_len > 1 ? g->q_len : 1;       /* a verify step's rows a sequence */
    ap.table_stride *= ap.q_len; /* a table staged a row: the sequence's first row's */
    if (blocks) {
        ap.oq = g->oq;
        ap.oqd = g->oqd;
        g->oq_ld = ap.n_head * ap.head_dim;
        g->oq_ready = true;
    }
    return IG_DEV(decode_attn)(&ap, g->stream);
}

/* The norm the first product of layer l's FFN (after_mixer) or of layer l + 1
 * (or the output head past the last) reads: what a decode step's residual
 * product before it may leave ready (add_product's next_norm). */
static const float *next_norm(const struct gpu_pass *p, int64_t l, bool after_mixer)
{
    const struct gpu_backend *g = p->g;
    if (p->bucket < 0)
        return NULL; /* a prefill step: the rows of the last layer and the head differ */
    if (!after_mixer && (g->m->hp.has_out_scale || g->m->hp.has_ple))
        return NULL; /* more comes after the product: its norm would be stale */
    if (after_mixer) /* LAYER_FFN_DENSE, the only FFN */
        return g->layers[l].vec[LAYER_FFN_NORM];
    if (l + 1 < g->m->hp.n_layer) /* LAYER_MIXER_ATTENTION, the only mixer */
        return g->layers[l + 1].vec[LAYER_ATTN_NORM];
    return g->vec[MODEL_OUTPUT_NORM];
}

/* LAYER_MIXER_ATTENTION. */
static int attention(const struct gpu_pass *p, int64_t l, int64_t row0)
{
    struct gpu_backend *g = p->g;
    const struct model_layer *ML = &g->m->layers[l];
    bool decode = p->bucket >= 0;
    int64_t e = g->m->hp.n_embd, q_dim = ML->n_head * ML->head_dim;
    int st;
    const bool quant = pool_quantized(g, l); /* a shared layer's: its source's */
    /* a mixed step's one-row sequences' K/V into the pool by RoPE, the
     * others' by the prefill kernel (quantized: gk_kvq_write, every row) */
    const bool single_rope = p->n_single && !ML->kv_shared && !quant;
    /* o's int8 blocks for wo where nothing changes o after the attention (a
     * quantized pool's rotation back, Qwen3.5's gate): a fused decode step */
    const bool o_blocks = decode && g->fuse && g->oq && !quant && !ML->attn_gate;
    g->oq_ready = false; /* att16 becomes this layer's */
    if (decode && qkv_rope_fusable(g, l, p->n))
        st = qkv_rope_fused(g, l, p->n);
    else if ((st = qkv_block(g, l, p->n)) == IG_OK) /* a shared layer writes no K/V */
        st = rope_rows(g, l, single_rope ? p->n - p->n_single : p->n,
                       decode && !ML->kv_shared && !quant);
    if (st == IG_OK && single_rope)
        st = rope_single_rows(g, p, l);
    if (st == IG_OK && quant)
        st = kvq_write_rows(g, l, p->n, p->n_seqs, decode);
    if (st != IG_OK ||
        (st = decode ? decode_attention(g, l, p->bucket, o_blocks)
                     : prefill_attention(g, l, p->n_seqs - p->n_single)) ||
        (p->n_single && (st = mixed_attention(g, p, l))))
        return st;
    const int64_t rot_v = quant ? kv_rotation(gpu_layer_layout(g, l).dtype_v, ML->head_dim, true)
                                : 0;
    if (rot_v && (st = IG_DEV(gk_hadamard_f16)(g->att16, p->n * ML->n_head, ML->head_dim, rot_v,
                                               g->stream)))
        return st; /* the output rotated back: V's rows were stored rotated */
    if (ML->attn_gate && (st = IG_DEV(gk_gate_apply)(g->att16, g->gate, p->n * q_dim, g->stream)))
        return st; /* Qwen3.5: times sigmoid(gate) before wo */
    if (row0 == p->n)
        return IG_OK;
    const struct gpu_layer *L = &g->layers[l];
    /* gpt-oss's wo bias joins the residual after the product: the product
     * then leaves no next norm (it would be of x without the bias). A
     * tensor-parallel rank but 0 holds none (TENSOR_SPLIT_ONCE). */
    const float *bo = L->vec[LAYER_BO];
    st = add_product(g, &L->mat[LAYER_WO], g->att16 + row0 * q_dim, q_dim, p->n - row0,
                     g->x + row0 * e, L->vec[LAYER_ATTN_POST_NORM],
                     bo ? NULL : next_norm(p, l, true));
    return st != IG_OK || !bo ? st
                              : IG_DEV(gk_add_rows_f32)(g->x + row0 * e, e, bo, p->n - row0, e,
                                                        g->stream);
}

/* ---- the dense FFN ------------------------------------------------------------- */

/* LAYER_FFN_DENSE: norm, gate|up GEMM, SwiGLU or GeGLU, down GEMM into the
 * residual (through the post-FFN norm). Fused (IGNITE_GPU_FUSE, a GEMV's row
 * count, gate and up of one type): the activation in the gate|up GEMV. */
static int ffn_dense(const struct gpu_pass *p, int64_t l, int64_t row0)
{
    struct gpu_backend *g = p->g;
    const struct model_hparams *hp = &g->m->hp;
    const struct gpu_layer *L = &g->layers[l];
    int64_t e = hp->n_embd, ff = g->m->layers[l].n_ff, rows = p->n - row0;
    float *x = g->x + row0 * e;
    const struct gpu_matrix *gu = &L->mat[LAYER_FFN_GATE];
    bool gelu = hp->ffn_act == MODEL_ACT_GELU_TANH;
    if (ff == 0) /* a tensor-parallel rank's empty share (models/tp.c): its part zeros */
        return add_product(g, &L->mat[LAYER_FFN_DOWN], g->h16, ff, rows, x,
                           L->vec[LAYER_FFN_POST_NORM], NULL);
    int st = norm_rows(g, x, rows, L->vec[LAYER_FFN_NORM]);
    if (st != IG_OK)
        return st;
    if (IG_DEV(gpu_matmul_glu_ok)(g, gu, rows)) /* the activation in the GEMV's epilogue */
        st = IG_DEV(gpu_matmul_glu)(g, gu, g->xn, e, rows, gelu ? GK_GLU_GELU : GK_GLU_SILU,
                                    g->h16, ff);
    else if ((st = IG_DEV(gpu_matmul)(g, gu, g->xn, e, rows, g->gu, 2 * ff, 0.0f)) == IG_OK)
        st = gelu ? IG_DEV(gk_geglu)(g->gu, rows, ff, g->h16, g->stream)
                  : IG_DEV(gk_swiglu)(g->gu, rows, ff, g->h16, g->stream);
    if (st != IG_OK)
        return st;
    return add_product(g, &L->mat[LAYER_FFN_DOWN], g->h16, ff, rows, x,
                       L->vec[LAYER_FFN_POST_NORM], next_norm(p, l, false));
}

/* LAYER_FFN_MOE: backend/gpu_moe.c. */
static int ffn_moe(const struct gpu_pass *p, int64_t l, int64_t row0)
{
    return IG_DEV(gpu_ffn_moe)(p->g, l, row0, p->n);
}

/* ---- gated DeltaNet ---------------------------------------------------------------- */

/* LAYER_MIXER_DELTANET: its input norm, the mixer (gpu_deltanet.c: a
 * decode bucket's rows are its sequences), ssm_out into the residual. */
static int deltanet(const struct gpu_pass *p, int64_t l, int64_t row0)
{
    struct gpu_backend *g = p->g;
    const struct gpu_layer *L = &g->layers[l];
    const struct model_layer *ML = &g->m->layers[l];
    int64_t e = g->m->hp.n_embd, vd = ML->dn_v_heads * ML->dn_head_dim;
    int st = norm_rows(g, g->x, p->n, L->vec[LAYER_ATTN_NORM]);
    if (st == IG_OK)
        st = IG_DEV(gpu_deltanet_mix)(g, l, p->n, p->bucket >= 0 ? p->n : p->n_seqs);
    if (st != IG_OK || row0 == p->n)
        return st;
    return add_product(g, &L->mat[LAYER_DN_OUT], g->dn_out16 + row0 * vd, vd, p->n - row0,
                       g->x + row0 * e, NULL, next_norm(p, l, true));
}

/* ---- the loop -------------------------------------------------------------------- */

/* By enum layer_mixer. */
static const gpu_mixer_fn mixers[] = {
    [LAYER_MIXER_ATTENTION] = attention,
    [LAYER_MIXER_DELTANET] = deltanet,
};

/* By enum layer_ffn. */
static const gpu_ffn_fn ffns[] = {
    [LAYER_FFN_DENSE] = ffn_dense,
    [LAYER_FFN_MOE] = ffn_moe,
};

/* Sums a block's output over the ranks that each computed a part of it
 * (backend/gpu_tp.c: add_product left a rank's partial sum): nothing in one
 * process, where it launches nothing (a decode graph keeps its nodes). */
static int reduce(const struct gpu_pass *p, int64_t row0)
{
    (void)row0;
    return p->g->tp ? IG_DEV(gpu_tp_reduce)(p->g) : IG_OK;
}

/* Every layer; in the last, only rows want0.. go on past the mixing. */
static int layers(const struct gpu_pass *p, int64_t want0)
{
    const struct model *m = p->g->m;
    int st = IG_OK;
    for (int64_t l = 0; l < m->hp.n_layer && st == IG_OK; l++) {
        const struct model_layer *ML = &m->layers[l];
        int64_t row0 = l == m->hp.n_layer - 1 ? want0 : 0;
        IG_ASSERT((size_t)ML->mixer < sizeof mixers / sizeof mixers[0] && mixers[ML->mixer]);
        IG_ASSERT((size_t)ML->ffn < sizeof ffns / sizeof ffns[0] && ffns[ML->ffn]);
        /* (the step's K/V or state of the layer are written: they may leave,
         * backend_batch.on_layer; nothing in a captured decode step, which
         * never has the hook: gpu.c's run_bucket) */
        if ((st = mixers[ML->mixer](p, l, row0)) || (st = IG_DEV(gpu_layer_out)(p->g, l)) ||
            (st = reduce(p, row0)) || row0 == p->n)
            continue;
        if ((st = ffns[ML->ffn](p, l, row0)) == IG_OK)
            st = reduce(p, row0);
        if (st == IG_OK)
            st = IG_DEV(gpu_gemma4_ple_layer)(p->g, l, row0, p->n - row0);
        if (st == IG_OK)
            st = IG_DEV(gpu_gemma4_out_scale)(p->g, l, p->g->x + row0 * m->hp.n_embd,
                                              p->n - row0);
    }
    return st;
}

int IG_DEV(gpu_forward_prefill)(struct gpu_backend *g, int64_t n, int64_t n_seqs,
                                int64_t n_single, int64_t want0)
{
    struct gpu_pass p = {g, n, -1, n_seqs, n_single};
    g->xn_of = NULL;
    g->xq_ready = false;
    g->norm_blocks = false;
    int st = embed(g, n);
    if (st == IG_OK)
        st = IG_DEV(gpu_gemma4_ple_inputs)(g, n);
    return st != IG_OK ? st : layers(&p, want0);
}

int IG_DEV(gpu_forward_decode)(struct gpu_backend *g, int bucket)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t rows = ((int64_t)1 << bucket) * (g->q_len > 1 ? g->q_len : 1), e = hp->n_embd;
    struct gpu_pass p = {g, rows, bucket, rows, 0};
    g->xn_of = NULL;
    g->xq_ready = false;
    g->norm_blocks = g->fuse && g->xq; /* a norm launch leaves xn's blocks too */
    int st = embed(g, rows);
    if (st == IG_OK)
        st = IG_DEV(gpu_gemma4_ple_inputs)(g, rows);
    if (st == IG_OK)
        st = layers(&p, 0);
    if (st == IG_OK)
        st = norm_rows(g, g->x, rows, g->vec[MODEL_OUTPUT_NORM]);
    if (st == IG_OK)
        st = IG_DEV(gpu_matmul)(g, &g->mat[MODEL_OUTPUT], g->xn, e, rows, g->logits,
                                hp->n_vocab, 0.0f);
    if (st == IG_OK && hp->final_softcap > 0)
        st = IG_DEV(gk_softcap)(g->logits, rows * hp->n_vocab, (float)hp->final_softcap,
                                g->stream);
    return st;
}

/* ---- the output head ------------------------------------------------------------- */

int IG_DEV(gpu_head_rows)(struct gpu_backend *g, const int64_t *want, int64_t k, float *logits,
                          int32_t *greedy)
{
    const struct model_hparams *hp = &g->m->hp;
    int64_t e = hp->n_embd, nv = hp->n_vocab;
    float eps = (float)hp->norm_eps;
    const float *norm = g->vec[MODEL_OUTPUT_NORM];
    int st = IG_OK;
    g->xn_of = NULL; /* xn is gathered anew here */
    g->xq_ready = false;
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
