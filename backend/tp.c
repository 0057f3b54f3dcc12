/* backend/tp.c: the tensor-parallel backend (backend/tp.h), rank 0's side:
 * each call (a step's rows and block tables, a cache's export or import,
 * the backend's life) is broadcast as a command to the other ranks
 * (backend/tp_follow.c), then run on rank 0's own part. Every rank's part
 * is a CPU backend over its part of the model (models/tp.h, set up in
 * backend/tp_rank.c) whose layer loop all-reduces and whose head gathers
 * (backend/cpu_forward.c, struct cpu_tp). Saved caches are the whole
 * model's layout (backend/tp_kv.c), so a cache saved at one TP size loads
 * at any other. Covered by tests/tp/. */
#include "backend/tp_impl.h"

#include "core/coll.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool made;  /* rank 0: a tensor-parallel backend exists */
static bool off;   /* backend_tp_off: the ranks do something else */
static int asked;  /* --tp N */

void backend_tp_set_asked(int n)
{
    asked = n;
}

int backend_tp_asked(void)
{
    return asked;
}

bool backend_tp_wanted(void)
{
    return ig_coll_size() > 1 && ig_coll_rank() == 0 && !made && !off;
}

void backend_tp_off(void)
{
    off = true;
}

/* ---- a step's rows in a message ---------------------------------------------- */

/* The bytes of batch b's message: per sequence TP_SEQ_FIELDS int64; the
 * tokens; the tables; want_logits. */
static size_t step_bytes(const struct backend_batch *b, int64_t *n_tab)
{
    *n_tab = 0;
    for (int64_t i = 0; i < b->n_seqs; i++)
        *n_tab += kv_blocks_for(b->seqs[i].pos0 + b->seqs[i].n_rows);
    return (size_t)b->n_seqs * TP_SEQ_FIELDS * sizeof(int64_t) + (size_t)(b->n_rows + *n_tab) * 4 +
           (b->want_logits ? (size_t)b->n_rows : 0);
}

static void step_pack(const struct backend_batch *b, char *p)
{
    int64_t *s = (int64_t *)p;
    for (int64_t i = 0; i < b->n_seqs; i++) {
        const struct backend_seq *q = &b->seqs[i];
        int64_t *e = s + TP_SEQ_FIELDS * i;
        e[0] = q->slot, e[1] = q->row0, e[2] = q->n_rows, e[3] = q->pos0, e[4] = q->prompt | q->more << 1; /* flags */
        e[5] = kv_blocks_for(q->pos0 + q->n_rows);
    }
    int32_t *t = (int32_t *)(s + TP_SEQ_FIELDS * b->n_seqs);
    memcpy(t, b->tokens, (size_t)b->n_rows * 4);
    t += b->n_rows;
    for (int64_t i = 0; i < b->n_seqs; i++) {
        int64_t k = s[TP_SEQ_FIELDS * i + 5];
        memcpy(t, b->seqs[i].table, (size_t)k * 4);
        t += k;
    }
    for (int64_t r = 0; b->want_logits && r < b->n_rows; r++)
        ((uint8_t *)t)[r] = b->want_logits[r];
}

/* ---- rank 0's backend ---------------------------------------------------------- */

struct tp_backend {
    struct backend base; /* m: the whole model; kv_mem: its memory (what files hold) */
    struct tp_rank *r;
    struct kv_store *full; /* a sequence's cache in the whole model's layout */
};

static void send_cmd(int64_t cmd, int64_t v0, int64_t v1, int64_t v2, int64_t v3, int64_t v4)
{
    struct tp_msg msg = {.cmd = cmd, .v = {v0, v1, v2, v3, v4, 0}};
    ig_coll_bcast(&msg, sizeof msg, 0);
}

static int tp_step(struct backend *base, const struct backend_batch *batch)
{
    struct tp_backend *t = (struct tp_backend *)base;
    int st = backend_check_step(base, batch);
    if (st != IG_OK)
        return st;
    int64_t n_tab;
    size_t bytes = step_bytes(batch, &n_tab);
    if ((st = tp_grow(t->r, bytes)) != IG_OK)
        ig_coll_abort(st); /* the others would wait for this step */
    step_pack(batch, t->r->buf);
    send_cmd(TP_STEP, (int64_t)bytes, batch->n_rows, batch->n_seqs, batch->want_logits != NULL,
             n_tab);
    ig_coll_bcast(t->r->buf, bytes, 0);
    t->r->steps++;
    return backend_step(t->r->cpu, batch);
}

static int tp_kv_export(struct backend *base, const struct backend_seq *seq, int64_t n_pos,
                        const struct kv_store **st, const int32_t **table, int64_t *slot)
{
    struct tp_backend *t = (struct tp_backend *)base;
    int64_t nb = kv_blocks_for(n_pos);
    send_cmd(TP_EXPORT, (int64_t)(nb * 4), n_pos, seq->slot, 0, 0);
    ig_coll_bcast((void *)seq->table, (size_t)nb * 4, 0);
    int s = tp_staging(t->r, base->kv_mem, nb);
    if (s == IG_OK)
        s = tp_export_heads(t->r, seq, n_pos, t->r->staging);
    if (s != IG_OK)
        ig_coll_abort(s); /* the others are sending */
    *st = t->r->staging;
    *table = t->r->ids;
    *slot = 0;
    return IG_OK;
}

static int tp_kv_import(struct backend *base, const struct backend_seq *seq,
                        const struct kv_store *src, int64_t n_pos)
{
    struct tp_backend *t = (struct tp_backend *)base;
    int64_t nb = kv_blocks_for(n_pos);
    send_cmd(TP_IMPORT, (int64_t)(nb * 4), n_pos, seq->slot, src->memory->dtype,
             src->memory->dtype_v);
    ig_coll_bcast((void *)seq->table, (size_t)nb * 4, 0);
    int s = tp_import_heads(t->r, seq, n_pos, src, src->memory->dtype, src->memory->dtype_v);
    if (s != IG_OK)
        ig_coll_abort(s);
    return IG_OK;
}

/* Rank 0's device memory (each rank holds about as much). */
static size_t tp_device_bytes(const struct backend *b)
{
    return backend_device_bytes(((const struct tp_backend *)b)->r->cpu);
}

static void tp_destroy(struct backend *base)
{
    struct tp_backend *t = (struct tp_backend *)base;
    send_cmd(TP_DESTROY, 0, 0, 0, 0, 0);
    tp_stats(t->r);
    tp_rank_free(t->r);
    kv_memory_free(base->kv_mem);
    free(t);
    made = false;
}

static const struct backend_ops tp_ops = {
    .step = tp_step,
    .kv_export = tp_kv_export,
    .kv_import = tp_kv_import,
    .device_bytes = tp_device_bytes,
    .destroy = tp_destroy,
};

int backend_tp_create(const struct model *m, const struct backend_opts *o, struct backend **out)
{
    *out = NULL;
    int n = ig_coll_size();
    if (!m->path[0] || m->virtual_weights)
        return ig_error(IG_E_USAGE, "tensor parallelism: the model must be a file every rank "
                        "can open (not one built in memory)");
    struct tp_setup su = {.file_bytes = m->file_bytes, .n_tensors = m->n_tensors, .o = *o};
    snprintf(su.path, sizeof su.path, "%s", m->path);
    su.o.oom_hint = NULL;
    send_cmd(TP_SETUP, (int64_t)sizeof su, 0, 0, 0, 0);
    ig_coll_bcast(&su, sizeof su, 0);
    struct tp_rank *r;
    int st = tp_setup_agreed(m, o, IG_OK, "", &r);
    if (st != IG_OK)
        return st;
    struct tp_backend *t = calloc(1, sizeof *t);
    if (!t) { /* the others hold their parts: let them go */
        send_cmd(TP_DESTROY, 0, 0, 0, 0, 0);
        tp_stats(r);
        tp_rank_free(r);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    t->r = r;
    t->base = (struct backend){.ops = &tp_ops, .m = m, .o = *o, .shares_blocks = true,
                               .threads = r->cpu->threads};
    made = true;
    if ((st = kv_memory_of(m, o->kv_dtype, o->kv_dtype_v, &t->base.kv_mem)) != IG_OK) {
        tp_destroy(&t->base);
        return st;
    }
    snprintf(t->base.device, sizeof t->base.device, "%s", r->cpu->device);
    t->base.weight_bytes = r->cpu->weight_bytes; /* rank 0's part */
    t->base.n_states = r->cpu->n_states;         /* a slot each, as the ranks' */
    snprintf(t->base.device_name, sizeof t->base.device_name, "%.90s x %d ranks",
             r->cpu->device_name, n);
    *out = &t->base;
    return IG_OK;
}

void backend_tp_end(void)
{
    if (ig_coll_size() > 1 && ig_coll_rank() == 0 && !off)
        send_cmd(TP_END, 0, 0, 0, 0, 0);
}

