/* generate/draft.c: the draft model of speculative decoding (generate/spec.h):
 * a second backend in the same process and on the same device, with its own
 * pool, a sequence per engine slot, run in steps of its own before the
 * target's verify step: the tokens its cache lacks, then one row a drafted
 * token, the sequences of a step together.
 * Leaves what to draft for (and when) to the engine, and the acceptance to
 * spec_accept.
 * Covered by tests/generate/test_spec.c (a fake draft backend) and
 * tests/cli/test_spec_model.py (SmolLM2 as its own draft). */
#include "generate/spec.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct spec_draft {
    struct backend *be;
    struct kv_pool *pool;
    int n_slots;
    int64_t n_vocab, max_rows;
    struct kv_seq *kv;        /* [n_slots] */
    bool *live;               /* [n_slots] admitted to the pool */
    int32_t *tokens;          /* [max_rows] a step's */
    bool *want;               /* [max_rows] */
    struct backend_seq *bseqs;/* [n_slots] */
    float *logits;            /* [n_slots, n_vocab] */
    int64_t *rows, *left;     /* [n_slots] per job: this step's rows, tokens left to catch up */
};

int spec_draft_create(struct backend *be, int n_slots, int64_t k_max, struct spec_draft **out)
{
    (void)k_max;
    *out = NULL;
    struct spec_draft *d = calloc(1, sizeof *d);
    if (!d)
        return ig_error(IG_E_NOMEM, "out of memory for the draft model");
    d->be = be;
    d->n_slots = n_slots;
    d->n_vocab = be->m->hp.n_vocab;
    d->max_rows = be->o.max_rows;
    size_t ns = (size_t)n_slots;
    int st = kv_pool_create(be->o.n_blocks, be->n_states, false, &d->pool);
    d->kv = calloc(ns, sizeof *d->kv);
    d->live = calloc(ns, sizeof *d->live);
    d->tokens = malloc((size_t)d->max_rows * sizeof *d->tokens);
    d->want = malloc((size_t)d->max_rows * sizeof *d->want);
    d->bseqs = malloc(ns * sizeof *d->bseqs);
    d->logits = malloc(ns * (size_t)d->n_vocab * sizeof *d->logits);
    d->rows = malloc(ns * sizeof *d->rows);
    d->left = malloc(ns * sizeof *d->left);
    if (st == IG_OK && (!d->kv || !d->live || !d->tokens || !d->want || !d->bseqs ||
                        !d->logits || !d->rows || !d->left))
        st = ig_error(IG_E_NOMEM, "out of memory for the draft model");
    for (int i = 0; i < n_slots && st == IG_OK; i++)
        st = kv_seq_init(&d->kv[i], be->o.n_ctx);
    if (st != IG_OK) {
        spec_draft_free(d);
        return st;
    }
    *out = d;
    return IG_OK;
}

void spec_draft_free(struct spec_draft *d)
{
    if (!d)
        return;
    for (int i = 0; d->kv && i < d->n_slots; i++)
        kv_seq_destroy(&d->kv[i]);
    kv_pool_free(d->pool);
    free(d->kv);
    free(d->live);
    free(d->tokens);
    free(d->want);
    free(d->bseqs);
    free(d->logits);
    free(d->rows);
    free(d->left);
    free(d);
}

void spec_draft_release(struct spec_draft *d, int slot)
{
    if (d && d->live[slot]) {
        kv_pool_release(d->pool, &d->kv[slot]);
        d->live[slot] = false;
    }
}

void spec_draft_rollback(struct spec_draft *d, int slot, int64_t n_pos)
{
    struct kv_seq *kv = &d->kv[slot];
    if (d->live[slot] && kv->n_pos > n_pos)
        kv_pool_trim(d->pool, kv, n_pos);
}

/* The draft's token from its logits row: greedy, or drawn by the job's
 * sampler with its distribution kept in q. Returns -1 when the draft's top
 * probability is below p_min (drafting stops there). */
static int32_t draft_pick(struct spec_draft *d, struct spec_draft_job *j, float *l)
{
    if (!j->smp) {
        int32_t t = sampler_greedy(l, d->n_vocab);
        if (j->p_min > 0) { /* the top token's probability at temperature 1 */
            double sum = 0;
            for (int64_t v = 0; v < d->n_vocab; v++)
                sum += isfinite(l[v]) ? exp((double)l[v] - (double)l[t]) : 0;
            if (1.0 / sum < j->p_min)
                return -1;
        }
        return t;
    }
    const int32_t *ids;
    const float *probs;
    int64_t n = sampler_candidates(j->smp, l, &ids, &probs);
    if (probs[0] < j->p_min)
        return -1;
    float *q = j->q + j->n_draft * d->n_vocab;
    memset(q, 0, (size_t)d->n_vocab * sizeof *q);
    for (int64_t i = 0; i < n; i++)
        q[ids[i]] = probs[i];
    double u = sampler_uniform(j->smp), cum = 0;
    for (int64_t i = 0; i < n; i++)
        if (u < (cum += probs[i]))
            return ids[i];
    return ids[n - 1];
}

int spec_draft_run(struct spec_draft *d, struct spec_draft_job *jobs, int n_jobs)
{
    for (int i = 0; i < n_jobs; i++) {
        struct spec_draft_job *j = &jobs[i];
        struct kv_seq *kv = &d->kv[j->slot];
        j->n_draft = 0;
        if (!d->live[j->slot]) {
            if (kv_pool_admit(d->pool, kv, NULL, 0, j->max_pos) != IG_OK)
                return ig_error(IG_E_INTERNAL, "the draft model's pool is full");
            d->live[j->slot] = true;
        }
        IG_ASSERT(kv->n_pos < j->n_tokens || !j->k);
        d->left[i] = j->n_tokens - kv->n_pos;
    }
    for (;;) {
        int64_t rows = 0, n_seqs = 0, n_logits = 0;
        for (int i = 0; i < n_jobs; i++) {
            struct spec_draft_job *j = &jobs[i];
            struct kv_seq *kv = &d->kv[j->slot];
            d->rows[i] = 0;
            if ((!d->left[i] && j->n_draft >= j->k) || d->left[i] < 0 || rows == d->max_rows)
                continue; /* (left < 0: it stopped drafting) */
            int64_t n = d->left[i] ? d->left[i] : 1;
            n = n < d->max_rows - rows ? n : d->max_rows - rows;
            if (d->left[i])
                memcpy(d->tokens + rows, j->tokens + kv->n_pos, (size_t)n * sizeof *d->tokens);
            else
                d->tokens[rows] = j->draft[j->n_draft - 1];
            for (int64_t r = 0; r < n; r++)
                d->want[rows + r] = false;
            bool logits = (n == d->left[i] || !d->left[i]) && j->k > 0;
            d->want[rows + n - 1] = logits;
            n_logits += logits;
            kv_pool_grow(d->pool, kv, kv->n_pos + n);
            d->bseqs[n_seqs++] = (struct backend_seq){.table = kv->table, .slot = j->slot,
                                                      .row0 = rows, .n_rows = n,
                                                      .pos0 = kv->n_pos};
            d->rows[i] = n;
            rows += n;
        }
        if (!rows)
            return IG_OK;
        struct backend_batch b = {.tokens = d->tokens, .want_logits = d->want, .n_rows = rows,
                                  .seqs = d->bseqs, .n_seqs = n_seqs, .logits = d->logits};
        int st = backend_step(d->be, &b);
        if (st != IG_OK)
            return st;
        int64_t row = 0;
        for (int i = 0; i < n_jobs; i++) {
            struct spec_draft_job *j = &jobs[i];
            int64_t n = d->rows[i];
            if (!n)
                continue;
            d->kv[j->slot].n_pos += n;
            bool caught_up = !d->left[i] || n == d->left[i];
            d->left[i] = d->left[i] ? d->left[i] - n : 0;
            if (!caught_up || !j->k)
                continue;
            int32_t t = draft_pick(d, j, d->logits + row++ * d->n_vocab);
            /* the next draft's row must fit in the positions the target may use */
            if (t < 0)
                d->left[i] = -1;
            else
                j->draft[j->n_draft++] = t;
            if (d->kv[j->slot].n_pos + 1 >= j->max_pos)
                d->left[i] = -1;
        }
        (void)n_logits;
    }
}
