/* models/tp.c: a model's split across tensor-parallel ranks (models/tp.h):
 * each rank's heads, KV heads, FFN columns and vocabulary rows, and the
 * rank's part as a model of its own. Covered by tests/tp/. */
#include "models/tp.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* [*at, *at + *n) of n_all things split over ranks as evenly as they go,
 * the lower ranks taking one more. */
static void even(int64_t n_all, int rank, int n_ranks, int64_t *at, int64_t *n)
{
    int64_t q = n_all / n_ranks, rest = n_all % n_ranks;
    *at = rank * q + (rank < rest ? rank : rest);
    *n = q + (rank < rest);
}

/* A share of heads that read shared heads (attention's query heads and
 * their KV head, DeltaNet's value heads and their key head): of n_kv shared
 * heads of gs readers each, whole groups per rank where there are at least
 * as many as ranks ([*kv0, + *n_kv) and every reader of theirs), else one
 * shared head per rank (replicated) and readers [*g0, + *n_g) of its group.
 * Whole groups go `unit` shared heads at a time where the heads divide so
 * into at least as many units as ranks. `what` and `readers` name them in
 * the refusal. */
static int group_share(int64_t kv, int64_t gs, int64_t unit, int64_t il, const char *what,
                       const char *readers, int rank, int n_ranks, int64_t *kv0,
                       int64_t *n_kv, int64_t *g0, int64_t *n_g)
{
    if (kv >= n_ranks) {
        /* in units of `unit` shared heads where there are enough of those */
        unit = kv % unit == 0 && kv / unit >= n_ranks ? unit : 1;
        even(kv / unit, rank, n_ranks, kv0, n_kv);
        *kv0 *= unit;
        *n_kv *= unit;
        *g0 = 0;
        *n_g = gs;
        return IG_OK;
    }
    /* shared head g's ranks: those r with r * kv / n_ranks == g */
    int64_t g = (int64_t)rank * kv / n_ranks, first = -1, count = 0;
    for (int r = 0; r < n_ranks; r++)
        if ((int64_t)r * kv / n_ranks == g) {
            first = first < 0 ? r : first;
            count++;
        }
    if (count > gs)
        return ig_error(IG_E_USAGE, "--tp %d: layer %lld's %s %lld has %lld %s for %lld "
                        "ranks (at most %lld ranks share a %s's %s)", n_ranks, (long long)il,
                        what, (long long)g, (long long)gs, readers, (long long)count,
                        (long long)gs, what, readers);
    even(gs, rank - (int)first, (int)count, g0, n_g);
    *kv0 = g;
    *n_kv = 1;
    return IG_OK;
}

/* The attention's share: query heads with the KV heads they read, KV heads
 * in units whose query heads' wo columns are whole blocks of its type (Q4_K's
 * 256 are four heads of 64) where there are enough of those units. */
static int attention_share(const struct model_layer *L, int64_t il, int rank, int n_ranks,
                           struct model_tp_layer *s)
{
    int64_t gs = L->n_head / L->n_head_kv, g0, n_g, unit = 1;
    int64_t b = quant_traits_of(L->w[LAYER_WO].type)->block_elems;
    while (unit * gs * L->head_dim % b)
        unit++;
    int st = group_share(L->n_head_kv, gs, unit, il, "KV head", "query heads", rank, n_ranks,
                         &s->kv0, &s->n_kv, &g0, &n_g);
    s->q0 = s->kv0 * gs + g0;
    s->n_q = s->n_kv * n_g;
    return st;
}

int64_t model_tp_dn_head(const struct model_layer *L, const struct model_tp_layer *s, int64_t h)
{
    int64_t gs = L->dn_v_heads / L->dn_k_heads;
    if (L->dn_grouped) /* key head k's values at k * gs .. */
        return (s->dk0 + h / s->n_dg) * gs + s->dg0 + h % s->n_dg;
    return (s->dg0 + h / s->n_dk) * L->dn_k_heads + s->dk0 + h % s->n_dk; /* tiled */
}

/* A run of units [at, at + n) along one dimension. */
struct seg {
    int64_t at, n;
};

/* The units along DeltaNet dimension d (the convolution's channels, value
 * dims, value heads) that share s holds, in the part's order, as runs merged
 * where they meet: returns their count and writes them to segs (NULL: just
 * counts; at most 2 x key heads + value heads). */
static int64_t dn_segs(const struct model_layer *L, const struct model_tp_layer *s,
                       enum tensor_dim d, struct seg *segs)
{
    IG_ASSERT(d == TENSOR_DIM_DN_CONV || d == TENSOR_DIM_DN_V || d == TENSOR_DIM_DN_VHEADS);
    bool conv = d == TENSOR_DIM_DN_CONV;
    int64_t D = d == TENSOR_DIM_DN_VHEADS ? 1 : L->dn_head_dim, nk = s->n_dk;
    int64_t n_qk = conv ? 2 * nk : 0, v0 = conv ? 2 * L->dn_k_heads * D : 0, k = 0;
    struct seg cur = {0, 0};
    for (int64_t u = 0; u < n_qk + nk * s->n_dg; u++) {
        /* the convolution's q and k channels of the key heads, then the
         * value heads' */
        int64_t at = u < n_qk ? (u / nk * L->dn_k_heads + s->dk0 + u % nk) * D
                              : v0 + model_tp_dn_head(L, s, u - n_qk) * D;
        if (cur.n && cur.at + cur.n == at) {
            cur.n += D;
            continue;
        }
        if (cur.n && segs)
            segs[k] = cur;
        k += cur.n > 0;
        cur = (struct seg){at, D};
    }
    if (cur.n && segs)
        segs[k] = cur;
    return k + (cur.n > 0);
}

/* The DeltaNet share: value heads with the key heads they read, and a
 * check that the output projection's columns split on its blocks. */
static int deltanet_share(const struct model_layer *L, int64_t il, int rank, int n_ranks,
                          struct model_tp_layer *s)
{
    /* key heads in units whose value heads' ssm_out columns are whole blocks
     * (Q4_K's 256 are two heads of 128): a rank's runs of them then are */
    const struct model_weight *o = &L->w[LAYER_DN_OUT];
    int64_t b = quant_traits_of(o->type)->block_elems, unit = 1;
    while (unit * L->dn_head_dim % b)
        unit++;
    int st = group_share(L->dn_k_heads, L->dn_v_heads / L->dn_k_heads, unit, il,
                         "DeltaNet key head", "value heads", rank, n_ranks, &s->dk0, &s->n_dk,
                         &s->dg0, &s->n_dg);
    if (st != IG_OK)
        return st;
    int64_t n = dn_segs(L, s, TENSOR_DIM_DN_V, NULL);
    struct seg *segs = malloc((size_t)n * sizeof *segs);
    if (!segs)
        return ig_error(IG_E_NOMEM, "out of memory");
    dn_segs(L, s, TENSOR_DIM_DN_V, segs);
    for (int64_t i = 0; i < n && st == IG_OK; i++)
        if (segs[i].at % b || segs[i].n % b)
            st = ig_error(IG_E_USAGE, "--tp %d: layer %lld's DeltaNet output (%s, blocks of "
                          "%lld) cannot split at rank %d's value heads (columns %lld..%lld; a "
                          "rank holds whole heads, and a block's columns are one rank's)",
                          n_ranks, (long long)il, quant_type_name(o->type), (long long)b, rank,
                          (long long)segs[i].at, (long long)(segs[i].at + segs[i].n - 1));
    free(segs);
    return st;
}

/* Columns of a column split of a weight of `type` that stay together: its
 * blocks (32 or 256 columns quantized), and for float types 8, the CUDA
 * kernels' multiple (backend/gpu.c's check), so a part runs on either
 * backend alike; 1 where the width itself is no multiple of 8 (the CUDA
 * backend refuses such a model whole). */
static int64_t col_unit(enum quant_type type, int64_t width)
{
    int64_t b = quant_traits_of(type)->block_elems;
    return b == 1 && width % MODEL_TP_FLOAT_UNIT == 0 ? MODEL_TP_FLOAT_UNIT : b;
}

/* A dense FFN's share of layer L: of its width columns, whole units of its
 * down projection (role `down`, col_unit) as evenly as they go ([*ff0,
 * + *n_ff)): uneven where they do not divide, and a rank past the last unit
 * (fewer units than ranks) holds none (n_ff 0: it adds zeros to the
 * reduce, running no product). */
static void ff_share(const struct model_layer *L, int64_t width, enum layer_role down, int rank,
                     int n_ranks, int64_t *ff0, int64_t *n_ff)
{
    int64_t u = col_unit(L->w[down].type, width);
    even(width / u, rank, n_ranks, ff0, n_ff);
    *ff0 *= u;
    *n_ff *= u;
}

int model_tp_part(const struct model *m, int rank, int n_ranks, struct model_tp_part *out)
{
    const struct model_hparams *hp = &m->hp;
    *out = (struct model_tp_part){.rank = rank, .n_ranks = n_ranks};
    if (n_ranks < 1 || n_ranks > MODEL_TP_MAX_RANKS || rank < 0 || rank >= n_ranks)
        return ig_error(IG_E_USAGE, "--tp %d: expected 1..%d ranks", n_ranks,
                        MODEL_TP_MAX_RANKS);
    out->layers = calloc((size_t)hp->n_layer, sizeof *out->layers);
    if (!out->layers)
        return ig_error(IG_E_NOMEM, "out of memory");
    even(hp->n_vocab, rank, n_ranks, &out->v0, &out->n_v);
    /* what the split knows: attention layers with their own Q/K/V and the
     * Llama block's additions (biases on Q/K/V, head norms, post norms, an
     * output gate), gated DeltaNet layers, dense FFNs, experts and a dense
     * FFN beside them (qwen35moe's shared expert, Gemma 4's MLP) */
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        struct model_tp_layer *s = &out->layers[il];
        bool rec = L->mixer == LAYER_MIXER_DELTANET;
        int st = rec ? deltanet_share(L, il, rank, n_ranks, s)
                    : attention_share(L, il, rank, n_ranks, s);
        if (st != IG_OK) {
            model_tp_part_free(out);
            return st;
        }
        /* a layer reading an earlier layer's K/V (gemma4) reads this rank's
         * heads of it: the two must split alike */
        const struct model_tp_layer *src = L->kv_shared ? &out->layers[L->kv_source] : s;
        if (src->kv0 != s->kv0 || src->n_kv != s->n_kv) {
            model_tp_part_free(out);
            return ig_error(IG_E_USAGE, "--tp %d: layer %lld reads layer %lld's KV heads, "
                            "which split otherwise", n_ranks, (long long)il,
                            (long long)L->kv_source);
        }
        /* wo's columns start at the rank's first query head: on a block
         * (a DeltaNet layer has no wo: its output's split is checked above) */
        const struct quant_traits *wo = quant_traits_of(L->w[LAYER_WO].type);
        int64_t bo = wo->block_elems;
        if (!rec && ((s->q0 * L->head_dim) % bo || (s->n_q * L->head_dim) % bo)) {
            model_tp_part_free(out);
            return ig_error(IG_E_USAGE, "--tp %d: layer %lld's attention output (%s, blocks of "
                            "%lld) cannot split at rank %d's heads %lld..%lld of %lld values "
                            "(a rank holds whole heads, and a block's columns are one rank's)",
                            n_ranks, (long long)il, quant_type_name(L->w[LAYER_WO].type),
                            (long long)bo, rank, (long long)s->q0,
                            (long long)(s->q0 + s->n_q - 1), (long long)L->head_dim);
        }
        if (L->ffn == LAYER_FFN_MOE) { /* whole experts per rank, each at its full width */
            if (L->n_expert < n_ranks) {
                model_tp_part_free(out);
                return ig_error(IG_E_USAGE, "--tp %d: layer %lld has %lld experts, fewer than "
                                "the ranks (a rank holds whole experts, at least one)",
                                n_ranks, (long long)il, (long long)L->n_expert);
            }
            even(L->n_expert, rank, n_ranks, &s->e0, &s->n_e);
            s->ff0 = 0;
            s->n_ff = L->n_ff;
            /* the dense FFN beside them by its columns, as a dense layer's */
            bool shexp = L->n_ff_shexp > 0;
            if (L->n_ff_mlp || shexp)
                ff_share(L, shexp ? L->n_ff_shexp : L->n_ff_mlp,
                         shexp ? LAYER_FFN_DOWN_SHEXP : LAYER_FFN_DOWN, rank, n_ranks, &s->mf0,
                         &s->n_mf);
        } else {
            ff_share(L, L->n_ff, LAYER_FFN_DOWN, rank, n_ranks, &s->ff0, &s->n_ff);
        }
    }
    return IG_OK;
}

int64_t model_tp_table_rows(const struct model_weight *w, const struct model_tp_part *p)
{
    return p->rank == p->n_ranks - 1 ? w->rows - p->v0 : p->n_v;
}

void model_tp_part_free(struct model_tp_part *p)
{
    free(p->layers);
    p->layers = NULL;
}

/* ---- the part as a model ---------------------------------------------------- */

struct shard {
    struct model m; /* first: the shard is handed out as this */
    void **copies;  /* the column-split matrices' copies */
    int64_t n_copies;
};

/* The range of a split dimension this part holds: [*at, *at + *n). */
static void dim_range(const struct model_layer *L, const struct model_tp_layer *s,
                      enum tensor_dim d, int64_t *at, int64_t *n)
{
    switch (d) {
    case TENSOR_DIM_Q_ROWS: /* q_proj's rows: each head's query, then its output gate */
        *at = s->q0 * L->head_dim * (L->attn_gate ? 2 : 1);
        *n = s->n_q * L->head_dim * (L->attn_gate ? 2 : 1);
        return;
    case TENSOR_DIM_Q:
        *at = s->q0 * L->head_dim, *n = s->n_q * L->head_dim;
        return;
    case TENSOR_DIM_KV:
        *at = s->kv0 * L->head_dim, *n = s->n_kv * L->head_dim;
        return;
    case TENSOR_DIM_HEADS: /* one value a query head (gpt-oss's sinks) */
        *at = s->q0, *n = s->n_q;
        return;
    case TENSOR_DIM_FF: /* a mixture of experts': the dense MLP beside them (gemma4) */
        if (L->ffn == LAYER_FFN_MOE)
            *at = s->mf0, *n = s->n_mf;
        else
            *at = s->ff0, *n = s->n_ff;
        return;
    case TENSOR_DIM_FF_SHEXP:
        *at = s->mf0, *n = s->n_mf;
        return;
    default:
        IG_ASSERT(!"a split along a dimension tensor parallelism does not split");
    }
}

/* w's rows [r0, r0 + n): a view into the same memory (none: data NULL, an
 * empty share that nothing reads). */
static struct model_weight rows_of(const struct model_weight *w, int64_t r0, int64_t n)
{
    struct model_weight v = *w;
    v.data = w->data && n ? (const char *)w->data + (size_t)r0 * w->row_bytes : NULL;
    v.rows = n;
    return v;
}

/* w's experts [e0, e0 + n): a view (a folder's experts by their pointers). */
static struct model_weight experts_of(const struct model_weight *w, int64_t e0, int64_t n)
{
    struct model_weight v = *w;
    v.n_expert = n;
    if (w->expert_data) {
        v.expert_data = w->expert_data + e0;
        v.data = v.expert_data[0];
    } else {
        v.data = (const char *)w->data + (size_t)e0 * (size_t)w->rows * w->row_bytes;
    }
    return v;
}

/* A bias's elements [c0, c0 + n) (f32): a view. */
static struct model_weight bias_of(const struct model_weight *w, int64_t c0, int64_t n)
{
    struct model_weight v = *w;
    IG_ASSERT(w->type == QUANT_F32 && w->rows == 1);
    v.data = (const float *)w->data + c0;
    v.cols = n;
    v.row_bytes = (size_t)n * sizeof(float);
    return v;
}

/* Bytes of a row of w's columns [c0, c0 + n) (whole blocks). */
static size_t cols_bytes(const struct model_weight *w, int64_t n)
{
    return quant_row_bytes(w->type, n);
}

/* w's columns [c0, c0 + n) of every row, copied into *copy (owned by the
 * caller); copy NULL, or no columns (an empty share): the shape alone (data
 * NULL). */
static int cols_of(const struct model_weight *w, int64_t c0, int64_t n, struct model_weight *out,
                   void **copy)
{
    size_t rb = cols_bytes(w, n), skip = quant_row_bytes(w->type, c0);
    IG_ASSERT((rb > 0 || n == 0) && (c0 == 0 || skip > 0));
    if (!copy || n == 0) {
        *out = *w;
        out->data = NULL;
        out->cols = n;
        out->row_bytes = rb;
        return IG_OK;
    }
    char *d = malloc((size_t)w->rows * rb);
    if (!d)
        return ig_error(IG_E_NOMEM, "out of memory for a %lld x %lld part of a weight",
                        (long long)w->rows, (long long)n);
    for (int64_t r = 0; r < w->rows; r++)
        memcpy(d + (size_t)r * rb, (const char *)w->data + (size_t)r * w->row_bytes + skip, rb);
    *out = *w;
    out->data = d;
    out->cols = n;
    out->row_bytes = rb;
    *copy = d;
    return IG_OK;
}

/* Share t's rows of w, table row `row`'s weight of DeltaNet layer L (where
 * its rows are per head), else its columns (A and dt's entries, ssm_out's
 * inputs), gathered in the part's order: a copy into *copy (owned by the
 * caller), or copy NULL: the shape alone (data NULL). */
static int dn_gather(const struct model_layer *L, const struct model_tp_layer *t,
                     const struct model_tensor *row, const struct model_weight *w,
                     struct model_weight *out, void **copy)
{
    bool by_rows = row->rows != TENSOR_DIM_ONE && row->rows != TENSOR_DIM_EMBD;
    enum tensor_dim d = by_rows ? row->rows : row->cols;
    int64_t n_seg = dn_segs(L, t, d, NULL), n = 0;
    struct seg *segs = malloc((size_t)n_seg * sizeof *segs);
    if (!segs)
        return ig_error(IG_E_NOMEM, "out of memory");
    dn_segs(L, t, d, segs);
    for (int64_t i = 0; i < n_seg; i++)
        n += segs[i].n;
    *out = *w;
    if (by_rows)
        out->rows = n;
    else {
        out->cols = n;
        out->row_bytes = cols_bytes(w, n);
    }
    size_t bytes = (size_t)out->rows * out->row_bytes;
    char *buf = copy ? malloc(bytes ? bytes : 1) : NULL;
    out->data = buf;
    if (!copy) {
        free(segs);
        return IG_OK;
    }
    if (!buf) {
        free(segs);
        return ig_error(IG_E_NOMEM, "out of memory for a %lld x %lld part of a weight",
                        (long long)out->rows, (long long)out->cols);
    }
    const char *src = w->data;
    char *at = buf;
    for (int64_t r = 0; r < (by_rows ? 1 : w->rows); r++)
        for (int64_t i = 0; i < n_seg; i++) {
            size_t b = by_rows ? (size_t)segs[i].n * w->row_bytes : cols_bytes(w, segs[i].n);
            size_t off = by_rows ? (size_t)segs[i].at * w->row_bytes
                                 : (size_t)r * w->row_bytes +
                                       quant_row_bytes(w->type, segs[i].at);
            memcpy(at, src + off, b);
            at += b;
        }
    free(segs);
    *copy = buf;
    return IG_OK;
}

void model_tp_shard_free(struct model *shard)
{
    if (!shard)
        return;
    struct shard *s = (struct shard *)shard;
    for (int64_t i = 0; i < s->n_copies; i++)
        free(s->copies[i]);
    free(s->copies);
    free(s->m.layers);
    free(s);
}

/* The shard of part p; without copies, its column-split matrices are shapes
 * alone. */
static int shard_of(const struct model *m, const struct model_tp_part *p, bool copies,
                    struct model **out)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct shard *s = calloc(1, sizeof *s);
    if (!s)
        return ig_error(IG_E_NOMEM, "out of memory");
    s->m = *m;
    s->m.gguf = NULL; /* m's: read through m */
    s->m.hf = NULL;
    s->m.layers = malloc((size_t)hp->n_layer * sizeof *s->m.layers);
    /* copies: a layer's wo and down, or a DeltaNet layer's eight gathered
     * weights and down (a shared expert's, its down beside the experts) */
    s->copies = calloc((size_t)hp->n_layer * 9, sizeof *s->copies);
    if (!s->m.layers || !s->copies) {
        model_tp_shard_free(&s->m);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    s->m.w[MODEL_OUTPUT] = rows_of(&m->w[MODEL_OUTPUT], p->v0, p->n_v);
    /* the embedding table by the same rows (a tied head's are these), the
     * last rank any past the vocabulary: a rank looks up its own tokens */
    const struct model_weight *E = &m->w[MODEL_TOK_EMBD];
    s->m.w[MODEL_TOK_EMBD] = rows_of(E, p->v0, model_tp_table_rows(E, p));
    /* Gemma 4's per-layer table (the file's largest) likewise: by vocabulary
     * rows, not by its n_layer * n_embd_per_layer columns, as those would
     * split each layer's per-layer input and its projection's sum, an
     * all-reduce a layer where the rows take one a step */
    const struct model_weight *P = &m->w[MODEL_PLE_TOK_EMBD];
    if (hp->has_ple)
        s->m.w[MODEL_PLE_TOK_EMBD] = rows_of(P, p->v0, model_tp_table_rows(P, p));
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct model_tp_layer *t = &p->layers[il];
        struct model_layer *S = &s->m.layers[il];
        *S = *L;
        S->n_head = t->n_q;
        S->n_head_kv = t->n_kv;
        S->n_ff = t->n_ff;
        S->n_ff_mlp = L->n_ff_mlp ? t->n_mf : 0;
        S->n_ff_shexp = L->n_ff_shexp ? t->n_mf : 0;
        S->expert0 = t->e0;
        S->dn_k_heads = t->n_dk;
        S->dn_v_heads = t->n_dk * t->n_dg;
        struct model_tensor_it it;
        model_tensors_begin_layer(&it, m, il, MODEL_TENSORS_LAYERS);
        while (model_tensors_next(&it)) {
            const struct model_weight *w = it.w;
            struct model_weight *o = &S->w[it.t->role];
            int64_t at, n;
            if (!w->data || it.t->split == TENSOR_SPLIT_NONE)
                continue;
            if (it.t->split == TENSOR_SPLIT_ROWS && it.t->kind == TENSOR_BIAS) {
                dim_range(L, t, it.t->cols, &at, &n);
                *o = bias_of(w, at, n);
            } else if (it.t->split == TENSOR_SPLIT_ROWS) {
                dim_range(L, t, it.t->rows, &at, &n);
                *o = rows_of(w, at, n);
            } else if (it.t->split == TENSOR_SPLIT_COLS) {
                dim_range(L, t, it.t->cols, &at, &n);
                int st = cols_of(w, at, n, o, copies ? &s->copies[s->n_copies] : NULL);
                if (st != IG_OK) {
                    model_tp_shard_free(&s->m);
                    return st;
                }
                s->n_copies++;
            } else if (it.t->split == TENSOR_SPLIT_EXPERTS) {
                *o = experts_of(w, t->e0, t->n_e);
            } else if (it.t->split == TENSOR_SPLIT_HEADS_GATHERED) {
                int st = dn_gather(L, t, it.t, w, o, copies ? &s->copies[s->n_copies] : NULL);
                if (st != IG_OK) {
                    model_tp_shard_free(&s->m);
                    return st;
                }
                s->n_copies++;
            } else if (p->rank != 0) { /* TENSOR_SPLIT_ONCE */
                *o = (struct model_weight){0};
            }
        }
    }
    *out = &s->m;
    return IG_OK;
}

size_t model_tp_part_bytes(const struct model *m, const struct model_tp_part *p)
{
    size_t bytes = (size_t)p->n_v * m->w[MODEL_OUTPUT].row_bytes;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        const struct model_weight *w = it.w;
        if (it.layer < 0 || !w->data)
            continue;
        const struct model_layer *L = &m->layers[it.layer];
        const struct model_tp_layer *t = &p->layers[it.layer];
        int64_t at, n;
        if (it.t->split == TENSOR_SPLIT_NONE) {
            bytes += model_weight_size(w);
        } else if (it.t->split == TENSOR_SPLIT_ROWS && it.t->kind == TENSOR_BIAS) {
            dim_range(L, t, it.t->cols, &at, &n);
            bytes += (size_t)n * sizeof(float);
        } else if (it.t->split == TENSOR_SPLIT_ROWS) {
            dim_range(L, t, it.t->rows, &at, &n);
            bytes += (size_t)n * w->row_bytes;
        } else if (it.t->split == TENSOR_SPLIT_COLS) {
            dim_range(L, t, it.t->cols, &at, &n);
            bytes += (size_t)w->rows * cols_bytes(w, n);
        } else if (it.t->split == TENSOR_SPLIT_EXPERTS) {
            bytes += (size_t)t->n_e * (size_t)w->rows * w->row_bytes;
        } else if (it.t->split == TENSOR_SPLIT_HEADS_GATHERED) {
            struct model_weight part;
            if (dn_gather(L, t, it.t, w, &part, NULL) == IG_OK)
                bytes += (size_t)part.rows * part.row_bytes;
        } else if (it.t->split == TENSOR_SPLIT_ONCE && p->rank == 0) {
            bytes += model_weight_size(w);
        }
    }
    /* the per-model norms */
    bytes += model_weight_size(&m->w[MODEL_OUTPUT_NORM]);
    return bytes;
}

int model_tp_shard(const struct model *m, const struct model_tp_part *p, struct model **out)
{
    return shard_of(m, p, true, out);
}

int model_tp_shard_shapes(const struct model *m, const struct model_tp_part *p,
                          struct model **out)
{
    return shard_of(m, p, false, out);
}
