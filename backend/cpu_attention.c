/* backend/cpu_attention.c: the attention mixer of the CPU backend
 * (LAYER_MIXER_ATTENTION, backend/cpu_layer.h): RMSNorm, the Q/K/V
 * matmuls, the optional Q/K/V biases and Q/K head norms (models/arch.c says
 * which model has them), RoPE of the layer's variant at each row's
 * position, each sequence's K/V rows into its blocks of the host kv_store
 * (a quantized cache's rows rotated first, kvcache.h's kv_rotation),
 * the tiled attention of every sequence's rows over its blocks
 * (prefill/attn_tiled.c: prompt chunks and decode rows alike, the layer's
 * sliding window and scale, attention sinks), the output projection (and its
 * bias) into proj. Every size is
 * the layer's own (struct model_layer: heads, KV heads, head dim); Gemma 4's
 * layers may read another layer's K/V (computing q alone), take V from K's
 * projection and norm V without a weight.
 * Covered by tests/cpu/ (numpy reference; chunked vs one-row steps). */
#include "backend/cpu_layer.h"

#include "core/status.h"
#include "ops/exp_row.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include <math.h>
#include <string.h>

/* q_proj's rows [n, n_head, 2, head_dim] (each head's query, then its
 * output gate: Qwen3.5's gated attention) into the queries [n, n_head *
 * head_dim] at the front of q and the gates into `gate`. In row order, so
 * the queries move down over rows already read. */
static void split_gate(float *q, float *gate, int64_t n, int64_t n_head, int64_t hd)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < n_head; h++) {
            const float *src = q + (r * n_head + h) * 2 * hd;
            memcpy(gate + (r * n_head + h) * hd, src + hd, (size_t)hd * sizeof *q);
            memmove(q + (r * n_head + h) * hd, src, (size_t)hd * sizeof *q);
        }
}

/* Elements of the gate's exponentials a call (a stack buffer). */
#define GATE_CHUNK 256

/* att *= sigmoid(gate) over rows [r0, r1), att / (1 + expf(-gate)) element
 * by element: the expf's through ops_exp_row (its bits, several lanes a
 * call), the rows over the pool (on thread 0 alone, one expf call an
 * element, the other thread waited it out). */
OPS_SIMD_CLONES
static void attn_gate_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t q_dim = job->L->n_head * job->L->head_dim, n = (r1 - r0) * q_dim;
    float *att = b->att + r0 * q_dim;
    const float *gate = b->attn_gate + r0 * q_dim;
    float e[GATE_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += GATE_CHUNK) {
        int64_t m = n - i0 < GATE_CHUNK ? n - i0 : GATE_CHUNK;
        for (int64_t i = 0; i < m; i++)
            e[i] = -gate[i0 + i];
        ops_exp_row(e, m, 0.0f); /* (-g - 0 is -g) */
        for (int64_t i = 0; i < m; i++)
            att[i0 + i] = att[i0 + i] / (1.0f + e[i]);
    }
}

/* The biases, head norms and RoPE of q and k. */
static void qk_rows(const struct cpu_rows *job, int64_t r0, int64_t r1)
{
    const struct model_hparams *hp = &ops_ctx_model(job->ctx)->hp;
    const struct model_layer *L = job->L;
    struct ops_buffers *b = ops_ctx_buffers(job->ctx);
    int64_t n = r1 - r0, hd = L->head_dim;
    int64_t q_dim = L->n_head * hd, kv_dim = L->n_head_kv * hd;
    float *q = b->q + r0 * q_dim, *k = b->k + r0 * kv_dim, *v = b->v + r0 * kv_dim;
    if (hp->has_qkv_bias) {
        ops_add_bias(q, &L->w[LAYER_BQ], n, q_dim);
        ops_add_bias(k, &L->w[LAYER_BK], n, kv_dim);
        ops_add_bias(v, &L->w[LAYER_BV], n, kv_dim);
    }
    if (hp->has_qk_norm) { /* RMSNorm of each head: rows of head_dim */
        ops_rmsnorm(q, &L->w[LAYER_Q_NORM], n * L->n_head, hd, hp->norm_eps, q);
        if (!L->kv_shared)
            ops_rmsnorm(k, &L->w[LAYER_K_NORM], n * L->n_head_kv, hd, hp->norm_eps, k);
    }
    if (hp->has_v_norm && !L->kv_shared) /* Gemma 4: each V head normed, no weight */
        ops_rmsnorm(v, NULL, n * L->n_head_kv, hd, hp->norm_eps, v);
    ops_rope_rows(job->ctx, b->q, r0, r1, L->n_head, hd, L->rope);
    if (!L->kv_shared) /* a shared layer's keys are its source's, rotated there */
        ops_rope_rows(job->ctx, b->k, r0, r1, L->n_head_kv, hd, L->rope);
}

int64_t cpu_attention_scratch_floats(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    int64_t floats = attn_tiled_scratch_floats(hp->n_head, hp->n_head_kv, hp->head_dim);
    for (int64_t l = 0; m->layers && l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if (L->mixer != LAYER_MIXER_ATTENTION)
            continue;
        int64_t f = attn_tiled_scratch_floats(L->n_head, L->n_head_kv, L->head_dim);
        floats = f > floats ? f : floats;
    }
    return floats;
}

/* The rows' K/V into their sequences' blocks, then the tiled attention of
 * every sequence's rows as one job on the pool: att from q. */
static void attend(struct cpu_step *s, int64_t layer, int64_t n)
{
    const struct backend_batch *batch = s->batch;
    const struct model *m = ops_ctx_model(s->ops);
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(s->ops);
    int64_t q_dim = L->n_head * L->head_dim, kv_dim = L->n_head_kv * L->head_dim;
    IG_ASSERT(n == batch->n_rows);
    /* A layer that shares another's K/V reads the source's rows and writes
     * none (kv_store_layout resolves it). */
    bool writes = s->kv->memory->layers[layer].kind != KV_SHARED;
    struct attn_params ap = {
        .kv = kv_store_layout(s->kv, layer),
        .seqs = s->attn,
        .n_seqs = batch->n_seqs,
        .item_offsets = s->attn_items,
        .q_tok_stride = q_dim,
        .out_tok_stride = q_dim,
        .n_head = L->n_head,
        .n_head_kv = L->n_head_kv,
        .head_dim = L->head_dim,
        .scale = (float)L->attn_scale,
        .window = L->window,
        .softcap = (float)m->hp.attn_softcap,
        .sinks = m->hp.has_attn_sinks ? L->w[LAYER_ATTN_SINKS].data : NULL,
        .fused = !ops_ctx_exact(s->ops),
    };
    /* A quantized cache stores its rows rotated (kv_rotation, as llama.cpp
     * does): q and k by K's rotation (q.k unchanged), v by V's and the
     * output back by it after the attention. */
    int64_t rot_k = kv_rotation(ap.kv.dtype, L->head_dim, false);
    int64_t rot_v = kv_rotation(ap.kv.dtype_v, L->head_dim, true);
    if (rot_k) {
        ops_hadamard_rows(b->q, n * q_dim, rot_k);
        if (writes)
            ops_hadamard_rows(b->k, n * kv_dim, rot_k);
    }
    if (rot_v && writes)
        ops_hadamard_rows(b->v, n * kv_dim, rot_v);
    /* Under the window rule a sliding-window layer's rows are the window
     * side's, through the sequence's window table. */
    bool windowed = s->window_rule && kv_layer_windowed(s->kv->memory, layer);
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *q = &batch->seqs[i];
        IG_ASSERT(!windowed || q->wtable);
        const int32_t *table = windowed ? q->wtable : q->table;
        if (writes)
            kv_write_rows(&ap.kv, table, L->n_head_kv, q->pos0, q->n_rows,
                          b->k + q->row0 * kv_dim, b->v + q->row0 * kv_dim);
        s->attn[i] = (struct attn_seq){
            .q = b->q + q->row0 * q_dim, .out = b->att + q->row0 * q_dim, .table = table,
            .n_tokens = q->n_rows, .pos0 = q->pos0,
        };
    }
    attn_tiled_run(&ap, ops_ctx_pool(s->ops), ops_ctx_scratch(s->ops, 0),
                   ops_ctx_scratch_floats(s->ops));
    if (rot_v)
        ops_hadamard_rows(b->att, n * q_dim, rot_v);
}

/* Moves rows want[i] of the [n, w] array a to row i (want ascending). */
static void compact_rows(float *a, int64_t w, const int64_t *want, int64_t n_want)
{
    for (int64_t i = 0; i < n_want; i++)
        if (want[i] != i)
            memmove(a + i * w, a + want[i] * w, (size_t)w * sizeof *a);
}

int64_t cpu_attention(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want,
                      int64_t n_want)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    int64_t q_dim = L->n_head * L->head_dim;

    /* xn = norm(x); q, k, v = xn W^T; rotate q, k; cache k, v; attend. A
     * shared-KV layer computes q alone, a V = K layer q and k (v is k's
     * projection, before k's norm). */
    const struct model_weight *qkv_w[3] = {&L->w[LAYER_WQ], &L->w[LAYER_WK], &L->w[LAYER_WV]};
    float *qkv_y[3] = {b->q, b->k, b->v}; /* [n, n_head (or n_head_kv) * head_dim] */
    int n_w = L->kv_shared ? 1 : L->v_is_k ? 2 : 3;
    cpu_rows_then_matmul(ctx, L, cpu_norm_rows, LAYER_ATTN_NORM, n, m->hp.n_embd, n_w, qkv_w,
                         b->xn, qkv_y);
    if (L->attn_gate)
        split_gate(b->q, b->attn_gate, n, L->n_head, L->head_dim);
    if (L->v_is_k)
        memcpy(b->v, b->k, (size_t)(n * L->n_head_kv * L->head_dim) * sizeof *b->v);
    cpu_rows_run(ctx, L, qk_rows, 0, n, false);
    attend(s, layer, n);
    if (L->attn_gate)
        cpu_rows_run(ctx, L, attn_gate_rows, 0, n, false);

    if (want) { /* only these rows are read after this layer's attention */
        compact_rows(b->x, m->hp.n_embd, want, n_want);
        compact_rows(b->att, q_dim, want, n_want);
        n = n_want;
    }
    ops_matmul(ctx, &L->w[LAYER_WO], b->att, n, b->proj); /* [n, n_embd] */
    if (m->hp.has_o_bias && L->w[LAYER_BO].data) /* (a tensor-parallel rank but 0: none) */
        ops_add_bias(b->proj, &L->w[LAYER_BO], n, m->hp.n_embd);
    return n;
}
