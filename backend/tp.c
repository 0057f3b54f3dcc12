/* backend/tp.c: the tensor-parallel backend (backend/tp.h): rank 0's
 * backend, which broadcasts each call to the other ranks and runs its own
 * part, and the other ranks' loop, which runs theirs. Every rank's part is a
 * CPU backend over its part of the model (models/tp.h) whose layer loop
 * all-reduces and whose head gathers (backend/cpu_forward.c, struct
 * cpu_tp). Saved caches are the whole model's layout: a sequence's K/V
 * heads are gathered from the ranks that hold them (export) and sent to
 * them (import), so a cache saved at one TP size loads at any other.
 * Covered by tests/tp/. */
#include "backend/tp.h"

#include "backend/cpu.h"
#include "backend/cpu_layer.h"
#include "core/coll.h"
#include "core/status.h"
#include "models/tp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- what rank 0 broadcasts -------------------------------------------------- */

enum tp_cmd { TP_SETUP = 1, TP_STEP, TP_EXPORT, TP_IMPORT, TP_DESTROY, TP_END };

/* A command's header; its payload, where it has one, follows in a second
 * broadcast of v[0] bytes. */
struct tp_msg {
    int64_t cmd;
    int64_t v[6];
};

/* TP_SETUP's payload: what a rank needs to build its part. */
struct tp_setup {
    char path[4096];            /* the model (IGNITE_TP_MODEL overrides it on a rank) */
    size_t file_bytes;          /* the model rank 0 loaded, to check a rank's against */
    int64_t n_tensors;
    struct backend_opts o;      /* oom_hint NULL */
};

/* Tags of point-to-point messages (core/coll.h). */
#define TAG_KV 2

/* ---- a rank's part ---------------------------------------------------------- */

/* What every rank holds while a tensor-parallel backend lives. */
struct tp_rank {
    struct model_tp_part *parts; /* [n_ranks] every rank's share (the cache's heads) */
    struct model *shard;         /* this rank's part as a model */
    struct cpu_tp tp;
    struct backend *cpu;         /* the CPU backend over shard */
    struct kv_memory *part_mem;  /* shard's memory at a file's dtypes (import) */
    struct kv_store *staging;    /* the cache on its way to or from a file */
    int32_t *ids;                /* identity block table of staging */
    char *buf;                   /* messages */
    size_t buf_cap;
    int64_t steps;               /* steps run (IGNITE_TP_STATS) */
};

static bool made;  /* rank 0: a tensor-parallel backend exists */
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
    return ig_coll_size() > 1 && ig_coll_rank() == 0 && !made;
}

static int grow(struct tp_rank *r, size_t bytes)
{
    if (bytes <= r->buf_cap)
        return IG_OK;
    char *p = realloc(r->buf, bytes);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory for a message of %zu bytes", bytes);
    r->buf = p;
    r->buf_cap = bytes;
    return IG_OK;
}

static void rank_free(struct tp_rank *r)
{
    if (!r)
        return;
    backend_free(r->cpu);
    kv_store_free(r->staging);
    kv_memory_free(r->part_mem);
    model_tp_shard_free(r->shard);
    for (int i = 0; r->parts && i < r->tp.n_ranks; i++)
        model_tp_part_free(&r->parts[i]);
    free(r->parts);
    free(r->tp.v0);
    free(r->tp.n_v);
    free(r->tp.at);
    free(r->tp.cnt);
    free(r->tp.part);
    free(r->tp.all);
    free(r->ids);
    free(r->buf);
    free(r);
}

/* Setting up read whole pages of the file around the rank's part (the
 * column copies, the packing): they are dropped, so that what stays
 * resident is what the rank reads from now on, its part (the mapping is
 * private and read-only: a page read again comes from the file). */
static void drop_file_pages(const struct model *m)
{
    if (!m->gguf || !m->gguf->map.data || m->gguf->map.read || m->gguf->map.locked)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)m->gguf->map.data & ~(page - 1);
    uintptr_t e = (uintptr_t)m->gguf->map.data + m->gguf->map.size;
    madvise((void *)a, e - a, MADV_DONTNEED);
}

/* This rank's part of m and its CPU backend. */
static int rank_setup(const struct model *m, const struct backend_opts *o, struct tp_rank **out)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    *out = NULL;
    struct tp_rank *r = calloc(1, sizeof *r);
    if (!r)
        return ig_error(IG_E_NOMEM, "out of memory");
    r->tp = (struct cpu_tp){.rank = rank, .n_ranks = n, .n_vocab = m->hp.n_vocab};
    r->parts = calloc((size_t)n, sizeof *r->parts);
    r->tp.v0 = calloc((size_t)n, sizeof *r->tp.v0);
    r->tp.n_v = calloc((size_t)n, sizeof *r->tp.n_v);
    r->tp.at = calloc((size_t)n, sizeof *r->tp.at);
    r->tp.cnt = calloc((size_t)n, sizeof *r->tp.cnt);
    int st = r->parts && r->tp.v0 && r->tp.n_v && r->tp.at && r->tp.cnt
                 ? IG_OK
                 : ig_error(IG_E_NOMEM, "out of memory");
    for (int i = 0; st == IG_OK && i < n; i++) {
        st = model_tp_part(m, i, n, &r->parts[i]);
        if (st == IG_OK) {
            r->tp.v0[i] = r->parts[i].v0;
            r->tp.n_v[i] = r->parts[i].n_v;
        }
    }
    if (st == IG_OK)
        st = model_tp_shard(m, &r->parts[rank], &r->shard);
    if (st == IG_OK)
        st = backend_cpu_create_tp(r->shard, o, &r->tp, &r->cpu);
    if (st == IG_OK && r->cpu->n_states)
        st = ig_error(IG_E_USAGE, "tensor parallelism: recurrent layers do not split yet");
    if (st == IG_OK)
        drop_file_pages(m);
    if (st != IG_OK) {
        rank_free(r);
        return st;
    }
    *out = r;
    return IG_OK;
}

/* Every rank's setup status: IG_OK where all went well, else (on every
 * rank) the status of the failing rank, and on rank 0 one line naming it
 * with its message. */
static int agree(int st, const char *msg)
{
    int64_t v = st == IG_OK ? -1 : (int64_t)st * MODEL_TP_MAX_RANKS + ig_coll_rank();
    ig_coll_allreduce_max(&v);
    if (v < 0)
        return IG_OK;
    int bad = (int)(v % MODEL_TP_MAX_RANKS), status = (int)(v / MODEL_TP_MAX_RANKS);
    char line[512];
    snprintf(line, sizeof line, "%s", msg);
    ig_coll_bcast(line, sizeof line, bad);
    if (ig_coll_rank() == 0)
        ig_error(status, "rank %d of %d: %s", bad, ig_coll_size(), line);
    return status;
}

/* rank_setup with its one line captured for agree(). */
static int setup_agreed(const struct model *m, const struct backend_opts *o, int st_before,
                        const char *msg_before, struct tp_rank **out)
{
    char msg[512] = "";
    int st = st_before;
    *out = NULL;
    if (st == IG_OK) {
        ig_error_capture(msg, sizeof msg);
        st = rank_setup(m, o, out);
        ig_error_capture(NULL, 0);
    } else {
        snprintf(msg, sizeof msg, "%s", msg_before);
    }
    int all = agree(st, msg);
    if (all != IG_OK) {
        rank_free(*out);
        *out = NULL;
    }
    return all;
}

/* ---- a step's rows in a message ---------------------------------------------- */

/* The bytes of batch b's message: per sequence slot, row0, n_rows, pos0,
 * table length (int64); the tokens; the tables; want_logits. */
static size_t step_bytes(const struct backend_batch *b, int64_t *n_tab)
{
    *n_tab = 0;
    for (int64_t i = 0; i < b->n_seqs; i++)
        *n_tab += kv_blocks_for(b->seqs[i].pos0 + b->seqs[i].n_rows);
    return (size_t)b->n_seqs * 5 * sizeof(int64_t) + (size_t)(b->n_rows + *n_tab) * 4 +
           (b->want_logits ? (size_t)b->n_rows : 0);
}

static void step_pack(const struct backend_batch *b, char *p)
{
    int64_t *s = (int64_t *)p;
    for (int64_t i = 0; i < b->n_seqs; i++) {
        const struct backend_seq *q = &b->seqs[i];
        int64_t *e = s + 5 * i;
        e[0] = q->slot, e[1] = q->row0, e[2] = q->n_rows, e[3] = q->pos0;
        e[4] = kv_blocks_for(q->pos0 + q->n_rows);
    }
    int32_t *t = (int32_t *)(s + 5 * b->n_seqs);
    memcpy(t, b->tokens, (size_t)b->n_rows * 4);
    t += b->n_rows;
    for (int64_t i = 0; i < b->n_seqs; i++) {
        int64_t k = s[5 * i + 4];
        memcpy(t, b->seqs[i].table, (size_t)k * 4);
        t += k;
    }
    for (int64_t r = 0; b->want_logits && r < b->n_rows; r++)
        ((uint8_t *)t)[r] = b->want_logits[r];
}

/* ---- the cache's heads between the ranks -------------------------------------- */

/* Whether rank `rank` is the one that sends KV head h of layer l (the first
 * rank holding it). */
static bool sends_head(const struct tp_rank *r, int rank, int64_t l, int64_t h)
{
    for (int i = 0; i < rank; i++) {
        const struct model_tp_layer *s = &r->parts[i].layers[l];
        if (h >= s->kv0 && h < s->kv0 + s->n_kv)
            return false;
    }
    const struct model_tp_layer *s = &r->parts[rank].layers[l];
    return h >= s->kv0 && h < s->kv0 + s->n_kv;
}

/* The chunks of KV heads of `rank`'s share (all its heads, or only those it
 * sends) for blocks [0, nb), between the message p and store st (its heads
 * numbered from `first`: 0 in a whole-model store, the share's kv0 in a
 * part's; block ids from table). to_msg: store -> p, else p -> store.
 * Returns the bytes of p used (p NULL: just counts). */
static size_t heads_move(const struct tp_rank *r, int rank, bool only_sent, bool part_store,
                         const struct kv_store *st, const int32_t *table, int64_t nb, char *p,
                         bool to_msg)
{
    size_t used = 0;
    const struct kv_memory *mem = st->memory;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        if (mem->layers[l].kind == KV_SHARED)
            continue;
        const struct model_tp_layer *s = &r->parts[rank].layers[l];
        struct kv_layout L = kv_store_layout(st, l);
        size_t kb = kv_dtype_row_bytes(L.dtype, L.head_stride);
        size_t vb = kv_dtype_row_bytes(L.dtype_v, L.head_stride);
        for (int64_t h = s->kv0; h < s->kv0 + s->n_kv; h++) {
            if (only_sent && !sends_head(r, rank, l, h))
                continue;
            int64_t hl = part_store ? h - s->kv0 : h;
            for (int64_t i = 0; i < nb; i++) {
                int64_t e = (int64_t)table[i] * L.block_stride + hl * L.head_stride;
                char *k = (char *)L.k + kv_dtype_row_bytes(L.dtype, e);
                char *v = (char *)L.v + kv_dtype_row_bytes(L.dtype_v, e);
                if (p && to_msg) {
                    memcpy(p + used, k, kb);
                    memcpy(p + used + kb, v, vb);
                } else if (p) {
                    memcpy(k, p + used, kb);
                    memcpy(v, p + used + kb, vb);
                }
                used += kb + vb;
            }
        }
    }
    return used;
}

/* A staging store of nb blocks of mem (the previous one freed). */
static int staging(struct tp_rank *r, const struct kv_memory *mem, int64_t nb)
{
    kv_store_free(r->staging);
    r->staging = NULL;
    free(r->ids);
    r->ids = malloc((size_t)nb * sizeof *r->ids);
    if (!r->ids)
        return ig_error(IG_E_NOMEM, "out of memory");
    kv_identity_table(r->ids, nb);
    return kv_store_create(mem, nb, 0, NULL, &r->staging);
}

/* Every rank: its sent heads of the sequence (slot, table) to rank 0, which
 * puts them into its whole-model staging store `full` (rank 0's own too). */
static int export_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                        struct kv_store *full)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    const struct kv_store *own;
    const int32_t *table;
    int64_t slot, nb = kv_blocks_for(n_pos);
    int st = backend_kv_export(r->cpu, seq, n_pos, &own, &table, &slot);
    if (st != IG_OK)
        return st;
    size_t bytes = heads_move(r, rank, true, true, own, table, nb, NULL, true);
    if ((st = grow(r, bytes ? bytes : 1)) != IG_OK)
        return st;
    heads_move(r, rank, true, true, own, table, nb, r->buf, true);
    if (rank != 0) {
        ig_coll_send(r->buf, bytes, 0, TAG_KV);
        return IG_OK;
    }
    heads_move(r, 0, true, false, full, r->ids, nb, r->buf, false);
    for (int i = 1; i < n; i++) {
        size_t b = heads_move(r, i, true, false, full, r->ids, nb, NULL, false);
        if ((st = grow(r, b ? b : 1)) != IG_OK)
            return st;
        ig_coll_recv(r->buf, b, i, TAG_KV);
        heads_move(r, i, true, false, full, r->ids, nb, r->buf, false);
    }
    return IG_OK;
}

/* Every rank: its heads of a whole-model store (rank 0's `src`, blocks 0..)
 * into a part store of the same dtypes, then into its cache at seq. */
static int import_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                        const struct kv_store *src, enum kv_dtype dk, enum kv_dtype dv)
{
    int rank = ig_coll_rank(), n = ig_coll_size();
    int64_t nb = kv_blocks_for(n_pos);
    kv_memory_free(r->part_mem);
    r->part_mem = NULL;
    int st = kv_memory_of(r->shard, dk, dv, &r->part_mem);
    if (st == IG_OK)
        st = staging(r, r->part_mem, nb);
    if (st != IG_OK)
        return st;
    if (rank == 0) {
        for (int i = n - 1; i >= 0; i--) { /* rank 0's own last: its buffer stays */
            size_t b = heads_move(r, i, false, false, src, r->ids, nb, NULL, true);
            if ((st = grow(r, b ? b : 1)) != IG_OK)
                return st;
            heads_move(r, i, false, false, src, r->ids, nb, r->buf, true);
            if (i)
                ig_coll_send(r->buf, b, i, TAG_KV);
        }
    } else {
        size_t b = heads_move(r, rank, false, true, r->staging, r->ids, nb, NULL, false);
        if ((st = grow(r, b ? b : 1)) != IG_OK)
            return st;
        ig_coll_recv(r->buf, b, 0, TAG_KV);
    }
    heads_move(r, rank, false, true, r->staging, r->ids, nb, r->buf, false);
    return backend_kv_import(r->cpu, seq, r->staging, n_pos);
}

/* ---- what each rank spent (IGNITE_TP_STATS=1) ------------------------------------ */

/* This rank's resident memory, MiB (VmRSS; 0 where /proc is absent). */
static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atof(line + 6);
    if (f)
        fclose(f);
    return kib / 1024.0;
}

/* Every rank at the backend's end: its steps, seconds in collectives and
 * resident MiB to rank 0, which prints a line a rank where IGNITE_TP_STATS
 * is set (the cost of the all-reduces: docs/benchmarks.md). */
static void stats(struct tp_rank *r)
{
    int n = ig_coll_size();
    float mine[3] = {(float)r->steps, (float)ig_coll_seconds(), (float)rss_mib()};
    float all[3 * MODEL_TP_MAX_RANKS];
    int64_t cnt[MODEL_TP_MAX_RANKS], at[MODEL_TP_MAX_RANKS];
    for (int i = 0; i < n; i++)
        cnt[i] = 3, at[i] = 3 * i;
    ig_coll_gatherv(mine, 3, all, cnt, at, 0);
    if (ig_coll_rank() != 0 || !getenv("IGNITE_TP_STATS"))
        return;
    for (int i = 0; i < n; i++)
        fprintf(stderr, "tp: rank %d of %d: %.0f steps, %.3f s in collectives (%.3f ms a "
                "step), resident %.1f MiB\n", i, n, all[3 * i], all[3 * i + 1],
                all[3 * i] > 0 ? 1e3 * all[3 * i + 1] / all[3 * i] : 0.0, all[3 * i + 2]);
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
    if ((st = grow(t->r, bytes)) != IG_OK)
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
    int s = staging(t->r, base->kv_mem, nb);
    if (s == IG_OK)
        s = export_heads(t->r, seq, n_pos, t->r->staging);
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
    int s = import_heads(t->r, seq, n_pos, src, src->memory->dtype, src->memory->dtype_v);
    if (s != IG_OK)
        ig_coll_abort(s);
    return IG_OK;
}

static size_t tp_device_bytes(const struct backend *b)
{
    (void)b;
    return 0;
}

static void tp_destroy(struct backend *base)
{
    struct tp_backend *t = (struct tp_backend *)base;
    send_cmd(TP_DESTROY, 0, 0, 0, 0, 0);
    stats(t->r);
    rank_free(t->r);
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
    int st = setup_agreed(m, o, IG_OK, "", &r);
    if (st != IG_OK)
        return st;
    struct tp_backend *t = calloc(1, sizeof *t);
    if (!t) { /* the others hold their parts: let them go */
        send_cmd(TP_DESTROY, 0, 0, 0, 0, 0);
        stats(r);
        rank_free(r);
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
    snprintf(t->base.device, sizeof t->base.device, "cpu");
    snprintf(t->base.device_name, sizeof t->base.device_name, "%.90s x %d ranks",
             r->cpu->device_name, n);
    *out = &t->base;
    return IG_OK;
}

void backend_tp_end(void)
{
    if (ig_coll_size() > 1 && ig_coll_rank() == 0)
        send_cmd(TP_END, 0, 0, 0, 0, 0);
}

/* ---- the other ranks ------------------------------------------------------------ */

/* TP_SETUP on a rank: the model (loaded once; the same file as rank 0's),
 * its part. */
static int follow_setup(struct model **m, const struct tp_setup *su, struct tp_rank **r)
{
    char msg[512] = "";
    int st = IG_OK;
    const char *path = getenv("IGNITE_TP_MODEL") ? getenv("IGNITE_TP_MODEL") : su->path;
    if (!*m || strcmp((*m)->path, path)) {
        model_free(*m);
        *m = NULL;
        ig_error_capture(msg, sizeof msg);
        st = model_load(path, m);
        ig_error_capture(NULL, 0);
    }
    if (st == IG_OK && ((*m)->file_bytes != su->file_bytes || (*m)->n_tensors != su->n_tensors)) {
        snprintf(msg, sizeof msg, "%.300s is not rank 0's model (%zu bytes, %lld tensors; "
                 "rank 0's: %zu, %lld)", path, (*m)->file_bytes, (long long)(*m)->n_tensors,
                 su->file_bytes, (long long)su->n_tensors);
        st = IG_E_MODEL;
    }
    return setup_agreed(*m, &su->o, st, msg, r);
}

/* TP_STEP on a rank: the batch from its message, run on the rank's part. */
static void follow_step(struct tp_rank *r, const struct tp_msg *msg)
{
    int64_t n_rows = msg->v[1], n_seqs = msg->v[2], n_tab = msg->v[4];
    bool want = msg->v[3];
    size_t bytes = (size_t)msg->v[0];
    struct backend_seq *seqs = malloc((size_t)n_seqs * sizeof *seqs);
    int st = seqs ? grow(r, bytes) : ig_error(IG_E_NOMEM, "out of memory");
    if (st != IG_OK)
        ig_coll_abort(st);
    ig_coll_bcast(r->buf, bytes, 0);
    const int64_t *s = (const int64_t *)r->buf;
    const int32_t *tokens = (const int32_t *)(s + 5 * n_seqs);
    const int32_t *t = tokens + n_rows;
    for (int64_t i = 0; i < n_seqs; i++) {
        const int64_t *e = s + 5 * i;
        seqs[i] = (struct backend_seq){.table = t, .slot = (int)e[0], .row0 = e[1],
                                       .n_rows = e[2], .pos0 = e[3]};
        t += e[4];
    }
    IG_ASSERT(t == tokens + n_rows + n_tab);
    bool *w = NULL;
    if (want) {
        w = malloc((size_t)n_rows * sizeof *w);
        if (!w)
            ig_coll_abort(ig_error(IG_E_NOMEM, "out of memory"));
        for (int64_t i = 0; i < n_rows; i++)
            w[i] = ((const uint8_t *)t)[i];
    }
    struct backend_batch b = {.tokens = tokens, .want_logits = w, .n_rows = n_rows,
                              .seqs = seqs, .n_seqs = n_seqs};
    /* a step rank 0 refuses (a token out of range) every rank refuses alike */
    r->steps++;
    backend_step(r->cpu, &b);
    free(w);
    free(seqs);
}

/* TP_EXPORT or TP_IMPORT on a rank: the sequence's table, then its heads. */
static void follow_kv(struct tp_rank *r, const struct tp_msg *msg)
{
    size_t bytes = (size_t)msg->v[0];
    int32_t *table = malloc(bytes ? bytes : 1);
    if (!table)
        ig_coll_abort(ig_error(IG_E_NOMEM, "out of memory"));
    ig_coll_bcast(table, bytes, 0);
    struct backend_seq seq = {.table = table, .slot = (int)msg->v[2]};
    int st = msg->cmd == TP_EXPORT
                 ? export_heads(r, &seq, msg->v[1], NULL)
                 : import_heads(r, &seq, msg->v[1], NULL, (enum kv_dtype)msg->v[3],
                                (enum kv_dtype)msg->v[4]);
    free(table);
    if (st != IG_OK)
        ig_coll_abort(st);
}

int backend_tp_follow(void)
{
    struct model *m = NULL;
    struct tp_rank *r = NULL;
    for (;;) {
        struct tp_msg msg;
        ig_coll_bcast(&msg, sizeof msg, 0);
        switch (msg.cmd) {
        case TP_SETUP: {
            struct tp_setup su;
            IG_ASSERT(msg.v[0] == (int64_t)sizeof su && !r);
            ig_coll_bcast(&su, sizeof su, 0);
            follow_setup(&m, &su, &r); /* a failure: rank 0 says so and ends */
            break;
        }
        case TP_STEP:
            IG_ASSERT(r);
            follow_step(r, &msg);
            break;
        case TP_EXPORT:
        case TP_IMPORT:
            IG_ASSERT(r);
            follow_kv(r, &msg);
            break;
        case TP_DESTROY:
            if (r)
                stats(r);
            rank_free(r);
            r = NULL;
            break;
        case TP_END:
            rank_free(r);
            model_free(m);
            return IG_OK;
        default:
            ig_coll_abort(ig_error(IG_E_INTERNAL, "rank %d: unknown command %lld from rank 0",
                                   ig_coll_rank(), (long long)msg.cmd));
        }
    }
}
