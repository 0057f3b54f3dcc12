/* backend/cpu.c: the CPU backend: a step is embeddings of every row, the
 * layer loop of backend/cpu_forward.c over all rows at once (each weight
 * read once per step; each layer's mixer and FFN by its kind, attention per
 * sequence over its blocks of a host kv_store), and the output head for the
 * rows that want logits (after attention in the last layer only those rows
 * go on). This file keeps the backend's state, its step's rows and the
 * cache to and from files.
 * Covered by tests/cpu/ (numpy reference; one step vs many), tests/kvcache/
 * and everything that runs `ignite` on the CPU. */
#include "backend/cpu.h"

#include "backend/cpu_layer.h"
#include "core/coll.h"
#include "core/status.h"
#include "decode/sampler.h"
#include "ops/gpu_qmm.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/qmatmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct cpu_backend {
    struct backend base;
    struct cpu_step step;  /* the run state, the cache, the attention's scratch */
    struct ops_packed *packed; /* the model's, lent to step.ops; NULL: IGNITE_MATMUL=exact */
    /* per step, sized for max_rows rows */
    int64_t *pos;          /* [max_rows] position of each row */
    int64_t *want;         /* [max_rows] rows that want logits */
    float *greedy_logits;  /* [greedy_rows, n_vocab] a greedy step's logits, where the
                            * caller lends no buffer */
    int64_t greedy_rows;
    /* under the window rule, a saved sequence's copy (cpu_kv_export) */
    struct kv_store *export_kv;
    int32_t *export_table;
};

/* ---- the step --------------------------------------------------------------------- */

/* The output head of the n wanted rows at the front of x into logits [n,
 * n_vocab]: a tensor-parallel rank's gathered on rank 0. */
static void head(struct cpu_backend *c, int64_t n, float *logits)
{
    struct ops_buffers *b = ops_ctx_buffers(c->step.ops);
    if (c->step.tp)
        cpu_output_head_tp(&c->step, b->x, n, logits);
    else
        cpu_output_head(c->step.ops, b->x, n, logits);
}

/* x [n, n_embd] = the tokens' rows of the embedding table. A tensor-parallel
 * rank's table is its vocabulary rows only (models/tp.h; a tied head's rows:
 * the bytes it holds anyway): it looks up the tokens there, zeros for the
 * others, and the all-reduce sums the ranks' rows (x + 0 is x: the same rows
 * as one process), so no rank pages in the whole table. */
static int embed(struct cpu_backend *c, const int32_t *tokens, int64_t n, float *x)
{
    const struct model *m = c->base.m;
    const struct cpu_tp *tp = c->step.tp;
    if (!tp)
        return ops_embed(m, tokens, n, x);
    int st = ops_embed_part(m, tokens, n, tp->v0[tp->rank], x);
    if (st == IG_OK)
        ig_coll_allreduce_sum(x, n * m->hp.n_embd);
    return st;
}

static int cpu_step(struct backend *base, const struct backend_batch *batch)
{
    struct cpu_backend *c = (struct cpu_backend *)base;
    const struct model *m = base->m;
    const struct model_hparams *hp = &m->hp;
    struct ops_ctx *ops = c->step.ops;
    struct ops_buffers *b = ops_ctx_buffers(ops);
    int st = backend_check_step(base, batch);
    if (st != IG_OK)
        return st;
    int64_t n = batch->n_rows, n_want = 0;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++)
            c->pos[s->row0 + r] = s->pos0 + r;
    }
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = s->row0; r < s->row0 + s->n_rows; r++)
            if (batch->want_logits ? batch->want_logits[r] : r == s->row0 + s->n_rows - 1)
                c->want[n_want++] = r;
    }
    if ((st = embed(c, batch->tokens, n, b->x)) != IG_OK) /* [n, n_embd] */
        return st;

    ops_rope_prepare(ops, c->pos, n);
    c->step.batch = batch;
    c->step.ckpt = &base->ckpt;
    cpu_forward_layers(&c->step, n, c->want, n_want);
    c->step.batch = NULL;
    if (!n_want)
        return IG_OK;
    /* the wanted rows are at the front of x now */
    if (!batch->greedy) {
        head(c, n_want, batch->logits);
        return IG_OK;
    }
    /* greedy tokens from logits computed here: into the caller's buffer where
     * it lends one, else the backend's own */
    float *out = batch->logits;
    if (!out && n_want > c->greedy_rows) {
        float *p = realloc(c->greedy_logits, (size_t)(n_want * hp->n_vocab) * sizeof *p);
        if (!p)
            return ig_error(IG_E_NOMEM, "out of memory for %lld rows of logits",
                            (long long)n_want);
        c->greedy_logits = p;
        c->greedy_rows = n_want;
    }
    out = out ? out : c->greedy_logits;
    head(c, n_want, out);
    for (int64_t k = 0; k < n_want; k++)
        batch->greedy[k] = sampler_greedy(out + k * hp->n_vocab, hp->n_vocab);
    return IG_OK;
}

/* ---- the cache, for files --------------------------------------------------------- */

static int cpu_kv_export(struct backend *base, const struct backend_seq *seq, int64_t n_pos,
                         const struct kv_store **st, const int32_t **table, int64_t *slot)
{
    struct cpu_backend *c = (struct cpu_backend *)base;
    if (!base->o.n_window_blocks) {
        *st = c->step.kv;
        *table = seq->table;
        *slot = seq->slot;
        return IG_OK;
    }
    /* Under the window rule one table no longer finds every layer's rows: the
     * sequence goes into a store of its own, blocks 0.. in order, the rows
     * its window layers gave back as zeros (no later row reads them). */
    kv_store_free(c->export_kv);
    free(c->export_table);
    c->export_kv = NULL;
    int64_t nb = kv_blocks_for(n_pos > 0 ? n_pos : 1);
    if (!(c->export_table = malloc((size_t)nb * sizeof *c->export_table)))
        return ig_error(IG_E_NOMEM, "out of memory saving the KV cache");
    int s = kv_store_create(c->step.kv->memory, nb, kv_memory_states_for(c->step.kv->memory, 1),
                            NULL, &c->export_kv);
    if (s != IG_OK)
        return s;
    kv_identity_table(c->export_table, nb);
    kv_copy_seq_windowed(c->export_kv, c->export_table, NULL, 0, c->step.kv, seq->table,
                         seq->wtable, seq->slot, n_pos);
    *st = c->export_kv;
    *table = c->export_table;
    *slot = 0;
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
    kv_copy_seq_windowed(c->step.kv, seq->table, base->o.n_window_blocks ? seq->wtable : NULL,
                         seq->slot, src, ids, NULL, 0, n_pos);
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
    free(c->step.ple);
    free(c->step.ple_tmp);
    free(c->step.moe_mlp);
    free(c->step.attn_items);
    free(c->step.attn);
    free(c->want);
    free(c->pos);
    kv_store_free(c->step.kv);
    kv_store_free(c->export_kv);
    free(c->export_table);
    kv_memory_free(c->base.kv_mem);
    ops_ctx_free(c->step.ops);
    ops_packed_free(c->packed); /* (after the context that borrowed them) */
    free(c);
}

static const struct backend_ops cpu_ops = {
    .step = cpu_step,
    .kv_export = cpu_kv_export,
    .kv_import = cpu_kv_import,
    .device_bytes = cpu_device_bytes,
    .destroy = cpu_destroy,
};

static int ple_alloc(struct cpu_step *s, const struct model *m, int64_t max_rows)
{
    int64_t all = m->hp.n_layer * m->hp.n_embd_per_layer;
    s->max_rows = max_rows;
    s->ple = malloc((size_t)(max_rows * all) * sizeof *s->ple);
    s->ple_tmp = malloc((size_t)(max_rows * all) * sizeof *s->ple_tmp);
    if (!s->ple || !s->ple_tmp)
        return ig_error(IG_E_NOMEM, "out of memory for the per-layer embeddings of %lld rows",
                        (long long)max_rows);
    return IG_OK;
}

int backend_cpu_create(const struct model *m, const struct backend_opts *o, struct backend **out)
{
    return backend_cpu_create_tp(m, o, NULL, out);
}

int backend_cpu_create_tp(const struct model *m, const struct backend_opts *o, struct cpu_tp *tp,
                          struct backend **out)
{
    *out = NULL;
    struct cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return ig_error(IG_E_NOMEM, "out of memory");
    c->base = (struct backend){.ops = &cpu_ops, .m = m, .o = *o, .shares_blocks = true};
    c->step.tp = tp;
    int st = ops_qmm_check_env();
    if (st == IG_OK) /* CUDA's, but an unknown value is refused wherever it is set */
        st = gk_qmm_check_env();
    if (st == IG_OK)
        st = kv_memory_of(m, o->kv_dtype, o->kv_dtype_v, &c->base.kv_mem);
    if (st == IG_OK) {
        c->base.n_states = kv_memory_states_for(c->base.kv_mem, o->n_slots);
        int64_t nw = tp ? 0 : backend_window_blocks(c->base.kv_mem, o);
        c->base.o.n_window_blocks = nw;
        c->step.window_rule = nw > 0;
        st = kv_store_create_windowed(c->base.kv_mem, o->n_blocks, nw ? nw : o->n_blocks,
                                      c->base.n_states, o->oom_hint, &c->step.kv);
    }
    if (st == IG_OK)
        st = ops_ctx_create(m, o->n_threads, o->max_rows, &c->step.ops);
    if (st == IG_OK) /* the attention borrows the matmuls' per-thread scratch */
        st = ops_ctx_reserve_scratch(c->step.ops, cpu_attention_scratch_floats(m));
    if (st == IG_OK) /* and so does the DeltaNet mixer */
        st = ops_ctx_reserve_scratch(c->step.ops, cpu_deltanet_scratch_floats(m));
    if (st == IG_OK && !ops_ctx_exact(c->step.ops)) /* (IGNITE_MATMUL=exact: no int8 path) */
        st = ops_packed_create(m, ops_ctx_pool(c->step.ops), &c->packed);
    if (st == IG_OK)
        ops_ctx_set_packed(c->step.ops, c->packed);
    if (st == IG_OK && o->exact) /* else the context's default (IGNITE_MATMUL) */
        ops_ctx_set_exact(c->step.ops, true);
    if (st == IG_OK) {
        c->pos = malloc((size_t)o->max_rows * sizeof *c->pos);
        c->want = malloc((size_t)o->max_rows * sizeof *c->want);
        c->step.attn = malloc((size_t)o->n_slots * sizeof *c->step.attn);
        c->step.attn_items = malloc((size_t)(o->n_slots + 1) * sizeof *c->step.attn_items);
        if (!c->pos || !c->want || !c->step.attn || !c->step.attn_items)
            st = ig_error(IG_E_NOMEM, "out of memory for steps of %lld rows",
                          (long long)o->max_rows);
    }
    c->step.max_rows = o->max_rows;
    if (st == IG_OK && m->hp.has_ple) /* per-layer embeddings of a step's rows */
        st = ple_alloc(&c->step, m, o->max_rows);
    /* gemma4's dense MLP output and the experts' sum beside it (one
     * all-reduce of both under --tp), or qwen35moe's shared expert's */
    int64_t moe_rows = (m->hp.has_moe_mlp ? 2 : 1) * o->max_rows;
    if (st == IG_OK && (m->hp.has_moe_mlp || m->hp.has_moe_shexp) &&
        !(c->step.moe_mlp = malloc((size_t)(moe_rows * m->hp.n_embd) * sizeof(float))))
        st = ig_error(IG_E_NOMEM, "out of memory for steps of %lld rows",
                      (long long)o->max_rows);
    if (st != IG_OK) {
        cpu_destroy(&c->base);
        return st;
    }
    c->base.threads = ops_ctx_threads(c->step.ops);
    snprintf(c->base.device, sizeof c->base.device, "cpu");
    snprintf(c->base.device_name, sizeof c->base.device_name, "cpu (%s)",
             ops_qmm_isa_name(ops_qmm_best_isa()));
    *out = &c->base;
    return IG_OK;
}

size_t backend_cpu_packed_bytes(const struct backend *b)
{
    return ops_packed_bytes(((const struct cpu_backend *)b)->packed);
}
