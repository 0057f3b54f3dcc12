/* backend/tp_follow.c: the loop of every rank but 0 (backend/tp.h's
 * backend_tp_follow): each command rank 0 broadcasts (backend/tp.c), run
 * on this rank's part: set up (the model loaded once, checked against rank
 * 0's), a step's rows, a cache's heads, the end. Covered by tests/tp/. */
#include "backend/tp_impl.h"

#include "core/coll.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return tp_setup_agreed(*m, &su->o, st, msg, r);
}

/* TP_STEP on a rank: the batch from its message, run on the rank's part. */
static void follow_step(struct tp_rank *r, const struct tp_msg *msg)
{
    int64_t n_rows = msg->v[1], n_seqs = msg->v[2], n_tab = msg->v[4];
    bool want = msg->v[3];
    size_t bytes = (size_t)msg->v[0];
    struct backend_seq *seqs = malloc((size_t)n_seqs * sizeof *seqs);
    int st = seqs ? tp_grow(r, bytes) : ig_error(IG_E_NOMEM, "out of memory");
    if (st != IG_OK)
        ig_coll_abort(st);
    ig_coll_bcast(r->buf, bytes, 0);
    const int64_t *s = (const int64_t *)r->buf;
    const int32_t *tokens = (const int32_t *)(s + TP_SEQ_FIELDS * n_seqs);
    const int32_t *t = tokens + n_rows;
    for (int64_t i = 0; i < n_seqs; i++) {
        const int64_t *e = s + TP_SEQ_FIELDS * i;
        seqs[i] = (struct backend_seq){.table = t, .slot = (int)e[0], .row0 = e[1],
                                       .n_rows = e[2], .pos0 = e[3], .prompt = e[4] & 1,
                                       .more = (e[4] & 2) != 0};
        t += e[5];
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
                 ? tp_export_heads(r, &seq, msg->v[1], NULL)
                 : tp_import_heads(r, &seq, msg->v[1], NULL, (enum kv_dtype)msg->v[3],
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
                tp_stats(r);
            tp_rank_free(r);
            r = NULL;
            break;
        case TP_END:
            tp_rank_free(r);
            model_free(m);
            return IG_OK;
        default:
            ig_coll_abort(ig_error(IG_E_INTERNAL, "rank %d: unknown command %lld from rank 0",
                                   ig_coll_rank(), (long long)msg.cmd));
        }
    }
}

