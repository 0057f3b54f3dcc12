/* backend/cpu.c: the CPU backend: a step is embeddings of every row, the
 * transformer blocks of ops/layer.c over all rows at once (each weight read
 * once per step), attention per sequence over its blocks of a host kv_store
 * (prefill/attn_tiled.c: prompt chunks and decode rows alike), and the
 * output head for the rows that want logits (after attention in the last
 * layer only those rows go on).
 * Covered by tests/cpu/ (numpy reference; one step vs many), tests/kvcache/
 * and everything that runs `ignite` on the CPU. */
#include "backend/cpu.h"

#include "core/status.h"
#include "decode/sampler.h"
#include "ops/gpu_qmm.h"
#include "ops/layer.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"
#include "prefill/attn_tiled.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct cpu_backend {
    struct backend base;
    struct ops_ctx *ops;
    struct kv_store *kv;
    /* per step, sized for max_rows rows and n_slots sequences */
    int64_t *pos;          /* [max_rows] position of each row */
    int64_t *keep;         /* [max_rows] rows that want logits */
    struct attn_seq *attn; /* [n_slots] */
    int64_t *attn_items;   /* [n_slots + 1] */
    const struct backend_batch *batch; /* the step in progress */
    float *greedy_logits;  /* [greedy_rows, n_vocab] a greedy step's logits, where the
                            * caller lends no buffer */
    int64_t greedy_rows;
};

/* ---- the attention step ---------------------------------------------------------- */

/* ops_attention.run: the rows' K/V into their sequences' blocks, then the
 * tiled attention of every sequence's rows as one job on the pool. */
static void attention(void *user, int64_t layer, int64_t n)
{
    struct cpu_backend *c = user;
    const struct backend_batch *batch = c->batch;
    const struct model_hparams *hp = &c->base.m->hp;
    struct ops_buffers *b = ops_ctx_buffers(c->ops);
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    IG_ASSERT(n == batch->n_rows);
    /* A layer that shares another's K/V reads the source's rows and writes
     * none (kv_store_layout resolves it). */
    bool writes = c->kv->memory->layers[layer].kind != KV_SHARED;
    struct attn_params ap = {
        .kv = kv_store_layout(c->kv, layer),
        .seqs = c->attn,
        .n_seqs = batch->n_seqs,
        .item_offsets = c->attn_items,
        .q_tok_stride = q_dim,
        .out_tok_stride = q_dim,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .scale = (float)hp->attn_scale,
        .window = c->base.m->layers[layer].window,
        .softcap = (float)hp->attn_softcap,
        .fused = !ops_ctx_exact(c->ops),
    };
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        if (writes)
            kv_write_rows(&ap.kv, s->table, hp->n_head_kv, s->pos0, s->n_rows,
                          b->k + s->row0 * kv_dim, b->v + s->row0 * kv_dim);
        c->attn[i] = (struct attn_seq){
            .q = b->q + s->row0 * q_dim, .out = b->att + s->row0 * q_dim, .table = s->table,
            .n_tokens = s->n_rows, .pos0 = s->pos0,
        };
    }
    attn_tiled_run(&ap, ops_ctx_pool(c->ops), ops_ctx_scratch(c->ops, 0),
                   ops_ctx_scratch_floats(c->ops));
}

/* ---- the step --------------------------------------------------------------------- */

static int cpu_step(struct backend *base, const struct backend_batch *batch)
{
    struct cpu_backend *c = (struct cpu_backend *)base;
    const struct model *m = base->m;
    const struct model_hparams *hp = &m->hp;
    struct ops_buffers *b = ops_ctx_buffers(c->ops);
    int st = backend_check_step(base, batch);
    if (st != IG_OK)
        return st;
    int64_t n = batch->n_rows, n_keep = 0;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++)
            c->pos[s->row0 + r] = s->pos0 + r;
    }
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = s->row0; r < s->row0 + s->n_rows; r++)
            if (batch->want_logits ? batch->want_logits[r] : r == s->row0 + s->n_rows - 1)
                c->keep[n_keep++] = r;
    }
    if ((st = ops_embed(m, batch->tokens, n, b->x)) != IG_OK) /* [n, n_embd] */
        return st;

    ops_rope_prepare(c->ops, c->pos, n);
    c->batch = batch;
    struct ops_attention attn = {attention, c};
    for (int64_t il = 0; il < hp->n_layer; il++) {
        bool last = il == hp->n_layer - 1;
        ops_layer_forward(c->ops, il, n, &attn, last ? c->keep : NULL, n_keep);
    }
    c->batch = NULL;
    if (!n_keep)
        return IG_OK;
    /* the kept rows are at the front of x now */
    if (!batch->greedy) {
        ops_output_head(c->ops, b->x, n_keep, batch->logits);
        return IG_OK;
    }
    /* greedy tokens from logits computed here: into the caller's buffer where
     * it lends one, else the backend's own */
    float *out = batch->logits;
    if (!out && n_keep > c->greedy_rows) {
        float *p = realloc(c->greedy_logits, (size_t)(n_keep * hp->n_vocab) * sizeof *p);
        if (!p)
            return ig_error(IG_E_NOMEM, "out of memory for %lld rows of logits",
                            (long long)n_keep);
        c->greedy_logits = p;
        c->greedy_rows = n_keep;
    }
    out = out ? out : c->greedy_logits;
    ops_output_head(c->ops, b->x, n_keep, out);
    for (int64_t k = 0; k < n_keep; k++)
        batch->greedy[k] = sampler_greedy(out + k * hp->n_vocab, hp->n_vocab);
    return IG_OK;
}

/* ---- the cache, for files --------------------------------------------------------- */

static int cpu_kv_export(struct backend *base, const struct backend_seq *seq, int64_t n_pos,
                         const struct kv_store **st, const int32_t **table, int64_t *slot)
{
    (void)n_pos;
    *st = ((struct cpu_backend *)base)->kv;
    *table = seq->table;
    *slot = seq->slot;
    return IG_OK;
}

static int cpu_kv_import(struct backend *base, const struct backend_seq *seq,
                         const struct kv_store *src, int64_t n_pos)
{
    struct cpu_backend *c = (struct cpu_backend *)base;
    int32_t *ids = malloc((size_t)kv_blocks_for(n_pos) * sizeof *ids);
    if (!ids)
        return ig_error(IG_E_NOMEM, "out of memory loading the KV cache");
    kv_identity_table(ids, kv_blocks_for(n_pos));
    kv_copy_seq(c->kv, seq->table, seq->slot, src, ids, 0, n_pos);
    free(ids);
    return IG_OK;
}

static size_t cpu_device_bytes(const struct backend *b)
{
    (void)b;
    return 0;
}

static void cpu_destroy(struct backend *base)
{
    struct cpu_backend *c = (struct cpu_backend *)base;
    free(c->greedy_logits);
    free(c->attn_items);
    free(c->attn);
    free(c->keep);
    free(c->pos);
    kv_store_free(c->kv);
    kv_memory_free(c->base.kv_mem);
    ops_ctx_free(c->ops);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .step = cpu_step,
    .kv_export = cpu_kv_export,
    .kv_import = cpu_kv_import,
    .device_bytes = cpu_device_bytes,
    .destroy = cpu_destroy,
};

int backend_cpu_create(const struct model *m, const struct backend_opts *o, struct backend **out)
{
    *out = NULL;
    struct cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return ig_error(IG_E_NOMEM, "out of memory");
    c->base = (struct backend){.ops = &cpu_ops, .m = m, .o = *o, .shares_blocks = true};
    int st = ops_qmm_check_env();
    if (st == IG_OK) /* CUDA's, but an unknown value is refused wherever it is set */
        st = gk_qmm_check_env();
    if (st == IG_OK)
        st = kv_memory_of(m, o->kv_dtype, &c->base.kv_mem);
    if (st == IG_OK) {
        c->base.n_states = kv_memory_states_for(c->base.kv_mem, o->n_slots);
        st = kv_store_create(c->base.kv_mem, o->n_blocks, c->base.n_states, o->oom_hint,
                             &c->kv);
    }
    if (st == IG_OK)
        st = ops_ctx_create(m, o->n_threads, o->max_rows, &c->ops);
    if (st == IG_OK && o->exact) /* else the context's default (IGNITE_MATMUL) */
        ops_ctx_set_exact(c->ops, true);
    if (st == IG_OK) {
        c->pos = malloc((size_t)o->max_rows * sizeof *c->pos);
        c->keep = malloc((size_t)o->max_rows * sizeof *c->keep);
        c->attn = malloc((size_t)o->n_slots * sizeof *c->attn);
        c->attn_items = malloc((size_t)(o->n_slots + 1) * sizeof *c->attn_items);
        if (!c->pos || !c->keep || !c->attn || !c->attn_items)
            st = ig_error(IG_E_NOMEM, "out of memory for steps of %lld rows",
                          (long long)o->max_rows);
    }
    if (st != IG_OK) {
        cpu_destroy(&c->base);
        return st;
    }
    c->base.threads = ops_ctx_threads(c->ops);
    snprintf(c->base.device, sizeof c->base.device, "cpu");
    snprintf(c->base.device_name, sizeof c->base.device_name, "cpu (%s)",
             ops_qmm_isa_name(ops_qmm_best_isa()));
    *out = &c->base;
    return IG_OK;
}
