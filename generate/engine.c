/* generate/engine.c: the scheduler of generate/generate.h: the queue, the
 * slots, admission over the KV pool, the batch of each step, sampling,
 * streaming through stop strings, the end of each request, and sequences
 * kept across requests (conversations), and speculation's verify steps and
 * rollback (what to draft and the acceptance rule are generate/spec.h's).
 * Leaves the forward to the backend, the choice of token to each request's
 * sampler and all output to the caller's callbacks.
 * Covered by tests/generate/ and tests/cli/ (run, batch, bench --requests). */
#include "generate/generate.h"

#include "core/status.h"
#include "core/timer.h"
#include "generate/spec.h"
#include "generate/stop.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

const char *gen_stop_name(enum gen_stop stop)
{
    switch (stop) {
    case GEN_STOP_EOG: return "eog";
    case GEN_STOP_LIMIT: return "limit";
    case GEN_STOP_CONTEXT: return "context";
    case GEN_STOP_INTERRUPT: return "interrupted";
    case GEN_STOP_OUTPUT: return "output_closed";
    case GEN_STOP_PROMPT: return "prompt_only";
    case GEN_STOP_STRING: return "stop";
    case GEN_STOP_GRAMMAR: return "grammar";
    default: return "none";
    }
}

/* ---- state ---------------------------------------------------------------------- */

enum seq_phase {
    SEQ_FREE,     /* the slot is empty */
    SEQ_PREFILL,  /* prompt tokens left to run */
    SEQ_DECODE,   /* a sampled token to feed back */
    SEQ_CLOSING,  /* params.keep: the last sampled token to feed, then the request ends */
    SEQ_KEPT,     /* no request: a kept sequence waiting to be continued */
};

struct seq {
    enum seq_phase phase;
    struct gen_request *r;
    /* SEQ_FREE: the history whose blocks engine_history_reserve reserved
     * with this slot where the model has recurrent states (its request
     * alone is admitted here; the caller fills the slot's states); else NULL */
    const struct kv_seq *held;
    int64_t order;           /* admission number: prefill goes in this order */
    struct kv_seq kv;
    struct sampler *smp;
    struct grammar_matcher *grammar; /* NULL without a constraint */
    struct tok_stream stream;
    struct stop_matcher stop;
    int32_t *tokens;         /* [n_ctx] the history, the prompt, then sampled tokens */
    int64_t n_tokens;        /* tokens known (in the cache or to be fed) */
    int64_t n_all_prompt;    /* history + prompt */
    int64_t max_pos;         /* positions the request may use */
    int32_t next;            /* SEQ_DECODE: the token to feed */
    int64_t step_row0, step_rows; /* this step's rows, 0 when none */
    int64_t logits_row;      /* this step's logits row, -1 when none */
    bool stopped;            /* a stop reason was found while handling text */
    /* conversations (params.keep) */
    int64_t kept_id;         /* the id it is (or will be) kept under, 0 none yet */
    int64_t n_kept;          /* tokens kept before the request in flight */
    float *kept_logits;      /* [n_vocab] after the last token fed (or the prompt's) */
    bool logits_taken;       /* the request in flight has overwritten kept_logits */
    bool logits_stale;       /* kept_logits are not after the last token (a rewind) */
    enum gen_stop closing;   /* SEQ_CLOSING: how the request ends */
    /* speculation (generate/spec.h) */
    struct spec_len len;     /* how many tokens to draft next */
    int32_t *draft;          /* [spec_max] this step's drafted tokens */
    int64_t n_draft;         /* of them in this step's rows */
    struct sampler *dsmp;    /* a sampled draft model's sampler, else NULL */
    float *q;                /* [spec_max, n_vocab] its distributions, where dsmp is set */
};

struct engine {
    struct backend *be;
    struct tok_vocab *vocab;
    struct engine_opts o;
    struct kv_pool *pool;
    int n_slots;
    int64_t n_ctx, n_vocab, max_rows;
    struct seq *seqs;        /* [n_slots] */
    struct grammar_vocab *gvocab; /* the vocabulary's trie, built for the first grammar */
    /* the queue: a ring of requests not admitted yet */
    struct gen_request **queue;
    int64_t q_head, q_len, q_cap;
    int64_t n_admitted;
    int64_t n_kept_ids;      /* kept sequences so far: ids are 1, 2, ... */
    /* the step */
    int32_t *tokens;         /* [max_rows] */
    bool *want;              /* [max_rows] */
    struct backend_seq *bseqs; /* [n_slots] */
    struct seq **order;      /* [n_slots] the sequences of the step */
    int64_t *layer_from;     /* [n_slots] backend_batch.layer_from of a step with on_layer */
    int step_seqs;           /* of them, in the step running */
    float *logits;           /* [n_slots, n_vocab] a row per sequence at most */
    int32_t *greedy;         /* [logits_rows] a greedy step's tokens, in the logits' order */
    int64_t logits_rows;     /* rows of logits a step may return: n_slots, and the
                              * drafted rows of verify steps */
    struct spec_draft *draft;/* the draft model, or NULL */
    struct spec_draft_job *jobs; /* [n_slots] */
    struct spec_cost cost;   /* what steps and drafts cost (the draft length's measure) */
};

static double ms_between(int64_t a, int64_t b) { return (double)(b - a) / 1e6; }

int engine_create(struct backend *be, struct tok_vocab *vocab, const struct engine_opts *o,
                  struct engine **out)
{
    *out = NULL;
    struct engine *e = calloc(1, sizeof *e);
    if (!e)
        return ig_error(IG_E_NOMEM, "out of memory");
    e->be = be;
    e->vocab = vocab;
    e->o = *o;
    e->n_slots = be->o.n_slots;
    e->n_ctx = be->o.n_ctx;
    e->n_vocab = be->m->hp.n_vocab;
    e->max_rows = o->max_rows < be->o.max_rows ? o->max_rows : be->o.max_rows;
    e->cost.fixed = o->spec_fixed_cost;
    IG_ASSERT(e->max_rows >= e->n_slots); /* room for every decode row */
    /* A rejected draft is trimmed off the KV blocks; a recurrent state has
     * taken it in and cannot give it back. */
    if (be->n_states && (o->spec_max > 0 || o->draft)) {
        free(e);
        return ig_error(IG_E_USAGE, "speculative decoding (--lookup, -md) does not run with "
                        "%s models: their recurrent state cannot roll a rejected draft back",
                        be->m->hp.arch);
    }
    /* A recurrent layer's state has a slot per sequence in flight: the
     * backend's n_states are the engine's slots (0 without such layers). */
    /* The window rule (the backend's window side): a sequence's window table
     * holds what its rows can still see, at most w_cap blocks. */
    const struct kv_memory *mem = be->kv_mem;
    int64_t nw = be->o.n_window_blocks;
    int st = kv_pool_create_windowed(
        be->o.n_blocks, be->n_states, o->share_prefixes && be->shares_blocks, nw,
        nw ? kv_memory_window_span(mem) : 0,
        nw ? kv_memory_window_cap(mem, be->o.n_ctx, be->o.max_rows) : 0, &e->pool);
    size_t ns = (size_t)e->n_slots;
    e->seqs = calloc(ns, sizeof *e->seqs);
    e->tokens = malloc((size_t)e->max_rows * sizeof *e->tokens);
    e->want = malloc((size_t)e->max_rows * sizeof *e->want);
    e->bseqs = malloc(ns * sizeof *e->bseqs);
    e->order = malloc(ns * sizeof *e->order);
    e->layer_from = malloc(ns * sizeof *e->layer_from);
    /* A verify step returns a row of logits per drafted token too. */
    int64_t spec_rows = o->spec_max * e->n_slots;
    e->logits_rows = e->n_slots + (spec_rows < e->max_rows ? spec_rows : e->max_rows);
    e->greedy = malloc((size_t)e->logits_rows * sizeof *e->greedy);
    e->logits = be->host_logits && !o->spec_max
                    ? be->host_logits
                    : malloc((size_t)e->logits_rows * (size_t)e->n_vocab * sizeof *e->logits);
    if (st == IG_OK && (!e->seqs || !e->tokens || !e->want || !e->bseqs || !e->order ||
                        !e->layer_from || !e->greedy || !e->logits))
        st = ig_error(IG_E_NOMEM, "out of memory for %d sequences", e->n_slots);
    for (int i = 0; i < e->n_slots && st == IG_OK; i++) {
        struct seq *s = &e->seqs[i];
        if ((st = kv_seq_init(&s->kv, e->n_ctx)) == IG_OK &&
            !(s->tokens = malloc((size_t)e->n_ctx * sizeof *s->tokens)))
            st = ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)e->n_ctx);
        if (st == IG_OK && o->spec_max &&
            !(s->draft = malloc((size_t)o->spec_max * sizeof *s->draft)))
            st = ig_error(IG_E_NOMEM, "out of memory for drafted tokens");
    }
    if (st == IG_OK && o->draft) {
        IG_ASSERT(o->draft->o.n_slots == e->n_slots && o->draft->o.n_ctx == e->n_ctx);
        if ((st = spec_draft_create(o->draft, e->n_slots, o->spec_max, &e->draft)) == IG_OK &&
            !(e->jobs = calloc(ns, sizeof *e->jobs)))
            st = ig_error(IG_E_NOMEM, "out of memory for the draft model");
    }
    if (st != IG_OK) {
        engine_free(e);
        return st;
    }
    *out = e;
    return IG_OK;
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    for (int i = 0; e->seqs && i < e->n_slots; i++) {
        struct seq *s = &e->seqs[i];
        if (s->phase != SEQ_FREE && s->phase != SEQ_KEPT) {
            sampler_free(s->smp);
            grammar_matcher_free(s->grammar);
            if (e->vocab)
                tok_stream_free(&s->stream);
            stop_free(&s->stop);
            sampler_free(s->dsmp);
        }
        free(s->tokens);
        free(s->draft);
        free(s->q);
        free(s->kept_logits);
        kv_seq_destroy(&s->kv);
    }
    free(e->seqs);
    free(e->queue);
    free(e->tokens);
    free(e->want);
    free(e->bseqs);
    free(e->order);
    free(e->layer_from);
    free(e->greedy);
    spec_draft_free(e->draft);
    free(e->jobs);
    if (e->logits != e->be->host_logits)
        free(e->logits);
    grammar_vocab_free(e->gvocab);
    kv_pool_free(e->pool);
    free(e);
}

/* ---- the queue ------------------------------------------------------------------ */

/* The slot of kept sequence `id`, or NULL. */
static struct seq *kept_seq(const struct engine *e, int64_t id)
{
    for (int i = 0; id > 0 && i < e->n_slots; i++)
        if (e->seqs[i].phase == SEQ_KEPT && e->seqs[i].kept_id == id)
            return &e->seqs[i];
    return NULL;
}

/* Tokens in the cache before r's prompt: its history or the kept sequence
 * it follows (checked by engine_submit). */
static int64_t history_len(const struct engine *e, const struct gen_request *r)
{
    const struct seq *k = r->follows ? kept_seq(e, r->follows) : NULL;
    return r->history ? r->history->n : k ? k->kv.n_pos : 0;
}

/* Positions a request may use: its history, its prompt and, but for the
 * last sampled token (fed back only to be kept), its most generated tokens. */
static int64_t max_positions(const struct engine *e, const struct gen_request *r)
{
    int64_t n = history_len(e, r) + r->n_tokens;
    const struct gen_params *p = &r->params;
    int64_t more = p->prompt_only ? 0 : p->n_predict > 0 ? p->n_predict - !p->keep : e->n_ctx;
    return n + more < e->n_ctx ? n + more : e->n_ctx;
}

/* The checks of r->follows: a kept sequence no queued request follows. */
static int check_follows(const struct engine *e, const struct gen_request *r)
{
    if (!r->follows)
        return IG_OK;
    if (r->history)
        return ig_error(IG_E_USAGE, "a request cannot both follow a kept sequence and "
                                    "bring a history");
    const struct seq *k = kept_seq(e, r->follows);
    if (!k)
        return ig_error(IG_E_USAGE, "no sequence %lld is kept to continue",
                        (long long)r->follows);
    if (k->logits_stale && r->n_tokens == 0)
        return ig_error(IG_E_INPUT, "sequence %lld was cut back: a request continuing it "
                        "needs tokens", (long long)r->follows);
    /* A turn interrupted in its prefill goes back to its start, whose window
     * the window rule has given back (ignite chat keeps every block). */
    if (kv_pool_window_blocks(e->pool))
        return ig_error(IG_E_USAGE, "a kept sequence cannot be continued under the window "
                        "rule (the backend was made with free_window_blocks)");
    for (int64_t i = 0; i < e->q_len; i++)
        if (e->queue[(e->q_head + i) % e->q_cap]->follows == r->follows)
            return ig_error(IG_E_USAGE, "another queued request already continues sequence "
                            "%lld", (long long)r->follows);
    return IG_OK;
}

/* The checks of a request's speculation against the engine's. */
static int check_spec(const struct engine *e, const struct gen_spec *sp)
{
    if (!sp->lookup && !sp->draft)
        return IG_OK;
    if (sp->lookup && sp->draft)
        return ig_error(IG_E_USAGE, "a request drafts with prompt lookup or a draft model, "
                        "not both");
    if (sp->draft && !e->draft)
        return ig_error(IG_E_USAGE, "the request asks for a draft model but none is loaded "
                        "(-md FILE)");
    if (sp->n_max < 1 || sp->n_max > e->o.spec_max)
        return ig_error(IG_E_USAGE, "the most drafted tokens a step is %lld; it must be in "
                        "[1, %lld]", (long long)sp->n_max, (long long)e->o.spec_max);
    if (sp->n_min < 0 || sp->n_min > sp->n_max)
        return ig_error(IG_E_USAGE, "the fewest drafted tokens a step is %lld; it must be in "
                        "[0, %lld] (the most)", (long long)sp->n_min, (long long)sp->n_max);
    if (!(sp->p_min >= 0 && sp->p_min <= 1))
        return ig_error(IG_E_USAGE, "the draft's minimum probability is %g; it must be in "
                        "[0, 1]", sp->p_min);
    if (sp->lookup && (sp->ngram_min < 1 || sp->ngram_max < sp->ngram_min))
        return ig_error(IG_E_USAGE, "lookup n-gram sizes %lld..%lld: they must be >= 1 and "
                        "min <= max", (long long)sp->ngram_min, (long long)sp->ngram_max);
    return IG_OK;
}

int engine_submit(struct engine *e, struct gen_request *r)
{
    r->result = (struct gen_result){.tokenize_ms = r->result.tokenize_ms};
    int st = check_follows(e, r);
    if (st != IG_OK)
        return st;
    int64_t n_hist = history_len(e, r);
    if (r->n_tokens == 0 && !(r->history && r->history->logits) && !r->follows)
        return ig_error(IG_E_INPUT, n_hist ? "nothing to continue from: the cache has no "
                                             "logits and the prompt encodes to no tokens"
                                           : "the prompt encodes to no tokens");
    if (n_hist + r->n_tokens > e->n_ctx)
        return ig_error(IG_E_INPUT, "the prompt is %lld tokens but the context holds %lld "
                        "(raise -c/--ctx-size or shorten the prompt)",
                        (long long)(n_hist + r->n_tokens), (long long)e->n_ctx);
    int64_t blocks = kv_blocks_for(max_positions(e, r));
    if (blocks > kv_pool_n_blocks(e->pool))
        return ig_error(IG_E_NOMEM, "the request may use %lld positions (%lld KV blocks of %d) "
                        "but the KV pool holds %lld blocks (raise --kv-mem, or lower -n)",
                        (long long)max_positions(e, r), (long long)blocks, KV_BLOCK,
                        (long long)kv_pool_n_blocks(e->pool));
    for (int64_t i = 0; i < r->n_tokens; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= e->n_vocab)
            return ig_error(IG_E_INPUT, "token id %d at index %lld is outside the vocabulary "
                            "[0, %lld)", r->tokens[i], (long long)i, (long long)e->n_vocab);
    if (r->params.grammar && !e->vocab)
        return ig_error(IG_E_USAGE, "a grammar needs the model's vocabulary");
    if ((st = check_spec(e, &r->params.spec)) != IG_OK)
        return st;
    struct sampler *probe = NULL; /* the parameters are checked now, not at admission */
    st = sampler_create(&r->params.sp, e->n_vocab, &probe);
    sampler_free(probe);
    if (st != IG_OK)
        return st;
    if (e->q_len == e->q_cap) {
        int64_t cap = e->q_cap ? 2 * e->q_cap : 64;
        struct gen_request **q = malloc((size_t)cap * sizeof *q);
        if (!q)
            return ig_error(IG_E_NOMEM, "out of memory queueing a request");
        for (int64_t i = 0; i < e->q_len; i++)
            q[i] = e->queue[(e->q_head + i) % e->q_cap];
        free(e->queue);
        e->queue = q;
        e->q_head = 0;
        e->q_cap = cap;
    }
    e->queue[(e->q_head + e->q_len++) % e->q_cap] = r;
    return IG_OK;
}

int64_t engine_pending(const struct engine *e)
{
    return e->q_len + engine_running(e);
}

int engine_running(const struct engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        n += e->seqs[i].phase != SEQ_FREE && e->seqs[i].phase != SEQ_KEPT;
    return n;
}

const struct kv_pool *engine_pool(const struct engine *e)
{
    return e->pool;
}

static int slot_of(const struct engine *e, const struct seq *s)
{
    return (int)(s - e->seqs);
}

/* The free slot history blocks s reserved (held), or with s NULL any free
 * slot none holds; NULL where none. */
static struct seq *free_slot(struct engine *e, const struct kv_seq *s)
{
    for (int i = 0; i < e->n_slots; i++)
        if (e->seqs[i].phase == SEQ_FREE && e->seqs[i].held == s)
            return &e->seqs[i];
    return NULL;
}

int engine_history_reserve(struct engine *e, int64_t n_pos, int64_t max_pos, struct kv_seq *s,
                           int *slot)
{
    IG_ASSERT(n_pos >= 1 && n_pos <= max_pos && max_pos <= e->n_ctx);
    /* A slot where states must be filled before admission; else any at admission. */
    struct seq *q = e->be->n_states ? free_slot(e, NULL) : NULL;
    *slot = -1;
    if (e->be->n_states && !q)
        return ig_error(IG_E_NOMEM, "none of the engine's %d slots is free now for a "
                        "sequence's recurrent states", e->n_slots);
    int st = kv_seq_init(s, e->n_ctx); /* (the slots' capacity: adopted by one) */
    if (st != IG_OK)
        return st;
    if (kv_pool_admit(e->pool, s, NULL, 0, max_pos) != IG_OK) {
        kv_seq_destroy(s);
        long long want = (long long)kv_blocks_for(max_pos);
        long long avail = (long long)kv_pool_available(e->pool);
        int64_t nw = kv_pool_window_blocks(e->pool);
        if (nw) /* (or the window side's promise is what is short) */
            return ig_error(IG_E_NOMEM, "the KV pool cannot promise %lld blocks now (%lld "
                            "available, and %lld of the window side's %lld not promised)",
                            want, avail, (long long)(nw - kv_pool_window_promised(e->pool)),
                            (long long)nw);
        return ig_error(IG_E_NOMEM, "the KV pool cannot promise %lld blocks now (%lld "
                        "available)", want, avail);
    }
    kv_pool_grow_loaded(e->pool, s, n_pos);
    if (q) {
        q->held = s;
        *slot = slot_of(e, q);
    }
    return IG_OK;
}

void engine_history_release(struct engine *e, struct kv_seq *s)
{
    struct seq *q = free_slot(e, s); /* (none once adopted) */
    if (q)
        q->held = NULL;
    kv_pool_release(e->pool, s);
    kv_seq_destroy(s);
}

/* ---- the end of a request --------------------------------------------------------- */

static struct backend_seq seq_view(const struct engine *e, const struct seq *s)
{
    return (struct backend_seq){.table = s->kv.table, .wtable = s->kv.wtable,
                                .slot = slot_of(e, s)};
}

int engine_kept(const struct engine *e, int64_t id, const int32_t **tokens, int64_t *n,
                const float **logits)
{
    const struct seq *s = kept_seq(e, id);
    if (!s)
        return ig_error(IG_E_USAGE, "no sequence %lld is kept", (long long)id);
    *tokens = s->tokens;
    *n = s->kv.n_pos;
    *logits = s->kept_logits;
    return IG_OK;
}

int engine_kept_export(struct engine *e, int64_t id, const struct kv_store **st,
                       const int32_t **table, int64_t *slot)
{
    struct seq *s = kept_seq(e, id);
    if (!s)
        return ig_error(IG_E_USAGE, "no sequence %lld is kept", (long long)id);
    struct backend_seq v = seq_view(e, s);
    return backend_kv_export(e->be, &v, s->kv.n_pos, st, table, slot);
}

int engine_kept_rewind(struct engine *e, int64_t id, int64_t n)
{
    struct seq *s = kept_seq(e, id);
    if (!s)
        return ig_error(IG_E_USAGE, "no sequence %lld is kept", (long long)id);
    if (n <= 0 || n > s->kv.n_pos)
        return ig_error(IG_E_USAGE, "cannot cut sequence %lld of %lld tokens back to %lld",
                        (long long)id, (long long)s->kv.n_pos, (long long)n);
    if (s->kv.has_state)
        return ig_error(IG_E_USAGE, "a recurrent layer's state cannot go back %lld tokens",
                        (long long)(s->kv.n_pos - n));
    kv_pool_shrink(e->pool, &s->kv, n);
    s->n_tokens = n;
    s->logits_stale = true;
    return IG_OK;
}

int engine_handoff(struct engine *e, const struct gen_request *r, bool with_kv,
                   struct gen_handoff *out)
{
    struct seq *s = NULL;
    for (int i = 0; i < e->n_slots && !s; i++)
        if (e->seqs[i].r == r)
            s = &e->seqs[i];
    if (!s || !r->params.handoff || r->result.stop != GEN_STOP_PROMPT)
        return ig_error(IG_E_INTERNAL, "engine_handoff: not a finished handoff request");
    struct backend_seq v = seq_view(e, s);
    *out = (struct gen_handoff){.tokens = s->tokens, .n_pos = s->kv.n_pos,
                                .logits = s->kept_logits};
    if (!with_kv)
        return IG_OK;
    return backend_kv_export(e->be, &v, s->kv.n_pos, &out->kv, &out->table, &out->slot);
}

void engine_drop(struct engine *e, int64_t id)
{
    struct seq *s = kept_seq(e, id);
    if (!s)
        return;
    kv_pool_release(e->pool, &s->kv);
    s->kept_id = 0;
    s->phase = SEQ_FREE;
}

struct emit_ctx {
    struct engine *e;
    struct seq *s;
};

static int emit_text(void *user, const char *text, size_t len)
{
    struct emit_ctx *c = user;
    const struct gen_callbacks *cb = &c->e->o.cb;
    return cb->on_text ? cb->on_text(cb->user, c->s->r, text, len) : 0;
}

/* Ends the request of s: the text held back goes out (unless output or a
 * stop string ended it), the caller hears on_done, the slot and its blocks
 * are free again, or kept (params.keep: the whole prompt is in the cache),
 * or, for a continuation that sampled nothing, kept as they were before it
 * (generate.h, "Conversations"). */
static void finish(struct engine *e, struct seq *s, enum gen_stop stop, int status)
{
    struct gen_request *r = s->r;
    struct gen_result *res = &r->result;
    res->stop = stop;
    res->status = status;
    if (stop != GEN_STOP_OUTPUT && stop != GEN_STOP_STRING && status == IG_OK) {
        const char *text;
        size_t n;
        struct emit_ctx c = {e, s};
        /* An incomplete UTF-8 sequence at the very end still goes out. */
        if (e->vocab && tok_stream_flush(&s->stream, &text, &n) == IG_OK &&
            stop_push(&s->stop, text, n, emit_text, &c) == -1)
            res->stop = GEN_STOP_OUTPUT;
        else if (stop_finish(&s->stop, emit_text, &c) == -1)
            res->stop = GEN_STOP_OUTPUT;
    }
    if (res->t_first_ns)
        res->decode_ms = ms_between(res->t_first_ns, res->t_last_ns);
    if (s->grammar)
        res->grammar_complete = grammar_matcher_complete(s->grammar);
    /* What becomes of the sequence is decided before on_done, which may free
     * r (ignite batch frees its job there): r is not touched after it. */
    bool keep = r->params.keep && status == IG_OK && stop != GEN_STOP_NONE &&
                s->kv.n_pos >= s->n_all_prompt;
    bool restore = !keep && s->kept_id && !s->logits_taken;
    if (keep && !s->kept_id)
        s->kept_id = ++e->n_kept_ids;
    else if (!keep && !restore)
        s->kept_id = 0;
    res->kept = s->kept_id;
    if (e->o.cb.on_done)
        e->o.cb.on_done(e->o.cb.user, r);
    sampler_free(s->smp);
    grammar_matcher_free(s->grammar);
    if (e->vocab)
        tok_stream_free(&s->stream);
    stop_free(&s->stop);
    sampler_free(s->dsmp);
    spec_draft_release(e->draft, slot_of(e, s));
    s->smp = NULL;
    s->dsmp = NULL;
    s->grammar = NULL;
    s->r = NULL;
    s->phase = SEQ_FREE;
    if (keep) {
        /* the whole prompt is in the cache and kept_logits are after it */
        s->n_tokens = s->kv.n_pos; /* (a last token with no position left is not) */
        kv_pool_shrink(e->pool, &s->kv, s->kv.n_pos); /* the unused promise goes back */
    } else if (restore) {
        /* a continuation that sampled nothing: the kept sequence as it was */
        kv_pool_shrink(e->pool, &s->kv, s->n_kept);
        s->n_tokens = s->n_kept;
    } else {
        kv_pool_release(e->pool, &s->kv);
    }
    if (s->kept_id)
        s->phase = SEQ_KEPT;
}

/* Ends r's request with `stop` after a sampled token that is real (it is in
 * s->tokens' future): a kept request feeds it first (SEQ_CLOSING), when a
 * position is left for it. */
static void end_request(struct engine *e, struct seq *s, int32_t tok, enum gen_stop stop)
{
    if (!s->r->params.keep || s->kv.n_pos >= e->n_ctx) {
        finish(e, s, stop, IG_OK);
        return;
    }
    s->tokens[s->n_tokens++] = tok;
    s->next = tok;
    s->closing = stop;
    s->phase = SEQ_CLOSING;
}

/* ---- admission -------------------------------------------------------------------- */

static void sample(struct engine *e, struct seq *s, float *logits, int32_t greedy);

/* The matcher of r's grammar for sequence s, its mask installed in the
 * sampler. The vocabulary's trie is built once, for the first grammar. */
static int attach_grammar(struct engine *e, struct seq *s, struct gen_request *r)
{
    int st = e->gvocab ? IG_OK : grammar_vocab_build(e->vocab, &e->gvocab);
    if (st == IG_OK)
        st = grammar_matcher_create(r->params.grammar, e->gvocab, !r->params.ignore_eog,
                                    &s->grammar);
    if (st != IG_OK)
        return st;
    /* The matchers of the slots share what one would hold alone. */
    grammar_matcher_set_budget(s->grammar, ((size_t)512 << 20) / (size_t)e->n_slots);
    sampler_set_mask(s->smp, grammar_mask_hook, s->grammar);
    r->result.grammar = true;
    return IG_OK;
}

/* s's speculation: the draft length and, for a draft model that samples,
 * the draft's own sampler (the request's chain without penalty or mask, a
 * stream of its own) and room for its distributions. */
static int attach_spec(struct engine *e, struct seq *s, struct gen_request *r)
{
    const struct gen_spec *sp = &r->params.spec;
    s->n_draft = 0;
    spec_len_init(&s->len, sp->draft);
    r->result.spec = sp->lookup || sp->draft;
    if (!sp->draft || r->params.sp.temperature <= 0)
        return IG_OK;
    struct sampler_params dp = r->params.sp;
    dp.repeat_penalty = 1;
    dp.repeat_last_n = 0;
    dp.seed = r->params.sp.seed ^ 0x9e3779b97f4a7c15ull;
    int st = sampler_create(&dp, e->n_vocab, &s->dsmp);
    if (st != IG_OK)
        return st;
    if (!s->q && !(s->q = malloc((size_t)e->o.spec_max * (size_t)e->n_vocab * sizeof *s->q)))
        return ig_error(IG_E_NOMEM, "out of memory for the draft's distributions");
    return IG_OK;
}

/* Starts r in the free slot s: its blocks (shared or reserved), the cached
 * history, its sampler. IG_E_NOMEM (no message) when the pool cannot take
 * it now; another error ends r. */
static int admit(struct engine *e, struct seq *s, struct gen_request *r)
{
    const struct gen_history *h = r->history;
    bool cont = s->phase == SEQ_KEPT; /* r follows it */
    int64_t n_hist = cont ? s->kv.n_pos : h ? h->n : 0;
    int64_t max_pos = max_positions(e, r), n_shared = 0;
    int st;
    if (cont) {
        if ((st = kv_pool_reserve(e->pool, &s->kv, max_pos)) != IG_OK)
            return st;
    } else {
        s->n_tokens = 0;
        if (n_hist)
            memcpy(s->tokens, h->tokens, (size_t)n_hist * sizeof *s->tokens);
    }
    if (r->n_tokens) /* none after --load-kv without a prompt */
        memcpy(s->tokens + n_hist, r->tokens, (size_t)r->n_tokens * sizeof *s->tokens);
    s->n_all_prompt = n_hist + r->n_tokens;
    s->max_pos = max_pos;
    if (!cont) {
        /* Blocks computed here before may be shared, but never the one with
         * the last prompt token: its logits must be computed. A loaded
         * history is not this process's forward: nothing is shared then. */
        n_shared = h ? 0 : kv_pool_match(e->pool, s->tokens, s->n_all_prompt,
                                         (s->n_all_prompt - 1) / KV_BLOCK);
        if (h && h->blocks) { /* its rows already in these blocks: adopted, no copy */
            if ((st = kv_pool_reserve(e->pool, h->blocks, s->max_pos)) != IG_OK)
                return st;
            struct kv_seq empty = s->kv;
            s->kv = *h->blocks;
            *h->blocks = empty;
            s->held = NULL;
        } else if ((st = kv_pool_admit(e->pool, &s->kv, s->tokens, n_shared, s->max_pos)) !=
                   IG_OK) {
            return st;
        }
        s->kept_id = 0;
        s->logits_stale = false;
        if (r->params.keep) /* it may go back and write its blocks again */
            s->kv.n_registered = s->kv.max_blocks;
    }
    s->r = r;
    s->n_kept = n_hist;
    s->logits_taken = false;
    s->n_tokens = s->n_all_prompt;
    s->order = e->n_admitted++;
    s->phase = SEQ_PREFILL;
    s->stopped = false;
    r->result.n_cached = n_hist + n_shared * KV_BLOCK;
    r->result.queue_ms = ms_between(r->t_arrival_ns, ig_now_ns());
    if (e->vocab)
        tok_stream_init(&s->stream, e->vocab, e->o.print_special || r->params.special_text);
    stop_init(&s->stop, r->params.stop, r->params.n_stop);
    if ((r->params.keep || r->params.handoff) && !s->kept_logits &&
        !(s->kept_logits = malloc((size_t)e->n_vocab * sizeof *s->kept_logits)))
        return ig_error(IG_E_NOMEM, "out of memory for %lld logits", (long long)e->n_vocab);
    if ((st = sampler_create(&r->params.sp, e->n_vocab, &s->smp)) != IG_OK ||
        (r->params.grammar && (st = attach_grammar(e, s, r)) != IG_OK) ||
        (st = attach_spec(e, s, r)) != IG_OK)
        return st;
    for (int64_t i = 0; i < s->n_all_prompt; i++)
        sampler_accept(s->smp, s->tokens[i]);
    if (h && !cont) {
        if (!h->blocks) {
            kv_pool_grow_loaded(e->pool, &s->kv, n_hist); /* (the window's rows only) */
            struct backend_seq v = seq_view(e, s);
            if ((st = backend_kv_import(e->be, &v, h->kv, n_hist)) != IG_OK)
                return st;
        }
        s->kv.n_pos = n_hist;
        s->kv.n_registered = s->kv.max_blocks; /* loaded rows are never shared */
    }
    return IG_OK;
}

static void admit_waiting(struct engine *e)
{
    while (e->q_len) {
        struct gen_request *r = e->queue[e->q_head];
        const struct kv_seq *held = r->history ? r->history->blocks : NULL;
        /* a kept sequence's, the one held with a history's blocks, or any free one */
        struct seq *s = r->follows ? kept_seq(e, r->follows) : held ? free_slot(e, held) : NULL;
        IG_ASSERT(!held || !e->be->n_states || s);
        if (!s && !r->follows)
            s = free_slot(e, NULL);
        if (!s)
            return;
        int st = admit(e, s, r);
        if (st == IG_E_NOMEM && !s->r)
            return; /* the pool cannot promise its blocks yet: it waits, and so do later ones */
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        if (st != IG_OK) {
            if (!s->r) { /* nothing was taken */
                r->result.stop = GEN_STOP_NONE;
                r->result.status = st;
                if (e->o.cb.on_done)
                    e->o.cb.on_done(e->o.cb.user, r);
            } else {
                finish(e, s, GEN_STOP_NONE, st);
            }
            continue;
        }
        if (s->n_all_prompt == s->kv.n_pos) {
            /* Nothing to prefill: the history's (or the kept) logits give the
             * first token (the step's logits are free until the batch is
             * built; sample() may overwrite kept_logits). */
            memcpy(e->logits, r->follows ? s->kept_logits : r->history->logits,
                   (size_t)e->n_vocab * sizeof *e->logits);
            sample(e, s, e->logits, 0);
        }
    }
}

/* ---- after a forward ------------------------------------------------------------------- */

/* Handles a sampled token of s: the stop conditions and the text. */
static void take_token(struct engine *e, struct seq *s, int32_t tok, int64_t t_ns)
{
    struct gen_request *r = s->r;
    struct gen_result *res = &r->result;
    if (!res->t_first_ns) {
        res->t_first_ns = t_ns;
        res->ttft_ms = ms_between(r->t_arrival_ns, t_ns);
        res->ttft_set = true;
    }
    res->t_last_ns = t_ns;
    res->n_gen++;
    if (e->o.cb.on_token)
        e->o.cb.on_token(e->o.cb.user, r, tok, t_ns);
    sampler_accept(s->smp, tok);
    if (s->grammar) {
        /* a mask that allowed nothing leaves a meaningless token */
        if (grammar_matcher_last_allowed(s->grammar) == 0) {
            res->n_gen--;
            finish(e, s, GEN_STOP_GRAMMAR, IG_OK);
            return;
        }
        int st = grammar_matcher_accept(s->grammar, tok);
        if (st != IG_OK) {
            finish(e, s, GEN_STOP_NONE, st);
            return;
        }
    }
    if (!r->params.ignore_eog && e->vocab && tok_is_eog(e->vocab, tok)) {
        end_request(e, s, tok, GEN_STOP_EOG);
        return;
    }
    const char *text = "";
    size_t n = 0;
    int st = e->vocab ? tok_stream_push(&s->stream, tok, &text, &n) : IG_OK;
    if (st != IG_OK) {
        finish(e, s, GEN_STOP_NONE, st);
        return;
    }
    struct emit_ctx c = {e, s};
    int found = stop_push(&s->stop, text, n, emit_text, &c);
    if (found == -2) {
        finish(e, s, GEN_STOP_NONE, ig_error(IG_E_NOMEM, "out of memory matching stop strings"));
        return;
    }
    if (found) {
        end_request(e, s, tok, found == 1 ? GEN_STOP_STRING : GEN_STOP_OUTPUT);
        return;
    }
    if (s->grammar && grammar_matcher_done(s->grammar)) { /* nothing may follow */
        end_request(e, s, tok, GEN_STOP_GRAMMAR);
        return;
    }
    if (e->o.interrupt && *e->o.interrupt) {
        end_request(e, s, tok, GEN_STOP_INTERRUPT);
        return;
    }
    if (r->params.n_predict > 0 && res->n_gen >= r->params.n_predict) {
        end_request(e, s, tok, GEN_STOP_LIMIT);
        return;
    }
    if (s->kv.n_pos >= e->n_ctx) {
        finish(e, s, GEN_STOP_CONTEXT, IG_OK);
        return;
    }
    s->tokens[s->n_tokens++] = tok;
    s->next = tok;
    s->phase = SEQ_DECODE;
}

/* The logits of s are ready (its last prompt row, its decode row, or the
 * history's): the prompt-only end, or a sample. NULL logits: the backend
 * returned the greedy token `greedy` instead (a greedy step). */
static void sample(struct engine *e, struct seq *s, float *logits, int32_t greedy)
{
    struct gen_request *r = s->r;
    if (r->params.keep || r->params.handoff) { /* the logits after the last token fed */
        IG_ASSERT(logits);
        memcpy(s->kept_logits, logits, (size_t)e->n_vocab * sizeof *logits);
        s->logits_taken = true;
        s->logits_stale = false;
    }
    if (s->phase == SEQ_CLOSING) {
        finish(e, s, s->closing, IG_OK);
        return;
    }
    if (r->params.prompt_only) {
        r->result.ttft_ms = ms_between(r->t_arrival_ns, ig_now_ns());
        r->result.ttft_set = true;
        finish(e, s, GEN_STOP_PROMPT, IG_OK);
        return;
    }
    int32_t tok = logits ? sampler_sample(s->smp, logits) : greedy;
    take_token(e, s, tok, ig_now_ns());
}

/* ---- the step ----------------------------------------------------------------------------- */

/* Appends s's rows for this step: its decode row, or up to `room` prompt
 * tokens. Returns the rows added. */
/* The rows of s's prompt that go into a step with room rows free: all that
 * fit, but a hybrid model's prompt cut short ends at a multiple of
 * BACKEND_STATE_CHUNK positions, where its recurrent layers end a chunk, so
 * the state's bits are those of the prompt in one step whatever shares the
 * steps (batch invariance). Where the room does not reach the next multiple
 * (under a chunk left) the prompt waits a step (0) if another prompt's chunk
 * took the rest, else is cut where the room ends: a row budget -b under the
 * chunk, or decode rows filling the step; the backend then keeps a
 * checkpoint and runs the chunk again whole in the prompt's next step (the
 * same bits; docs/kvcache.md). */
static int64_t prompt_rows(const struct engine *e, const struct seq *s, int64_t room,
                           bool first_prompt)
{
    int64_t pos0 = s->kv.n_pos, left = s->n_all_prompt - pos0;
    if (left <= room || !e->be->n_states)
        return left < room ? left : room;
    int64_t cut = (pos0 + room) / BACKEND_STATE_CHUNK * BACKEND_STATE_CHUNK - pos0;
    if (cut > 0)
        return cut;
    if (!first_prompt)
        return 0;
    /* a cut inside the chunk takes the pool's one checkpoint: only where no
     * other prompt still being fed holds it (in this engine the first prompt
     * is the holder where one is live; the rule keeps it so whatever
     * schedules). A slot's new request that has run no step is not the
     * holder: its first step gives the checkpoint back (backend_step). */
    int h = e->be->ckpt_holder - 1;
    bool live = h >= 0 && h < e->n_slots && e->seqs[h].phase == SEQ_PREFILL &&
                e->seqs[h].kv.n_pos > 0 && e->seqs[h].kv.n_pos < e->seqs[h].n_all_prompt;
    return backend_prompt_rows(e->be, slot_of(e, s), pos0, room, left, live);
}

static int64_t add_rows(struct engine *e, struct seq *s, int64_t row0, int64_t room,
                        bool first_prompt, int64_t *n_logits)
{
    int64_t pos0 = s->kv.n_pos, n;
    bool fed = s->phase == SEQ_DECODE || s->phase == SEQ_CLOSING;
    if (fed) { /* the token to feed, then this step's drafts, every row wanting logits */
        n = 1 + s->n_draft;
        e->tokens[row0] = s->next;
        if (s->n_draft)
            memcpy(e->tokens + row0 + 1, s->draft, (size_t)s->n_draft * sizeof *e->tokens);
    } else {
        n = prompt_rows(e, s, room, first_prompt);
        memcpy(e->tokens + row0, s->tokens + pos0, (size_t)n * sizeof *e->tokens);
    }
    kv_pool_grow(e->pool, &s->kv, pos0 + n);
    for (int64_t i = 0; i < n; i++)
        e->want[row0 + i] = fed;
    bool logits = fed || pos0 + n == s->n_all_prompt;
    e->want[row0 + n - 1] = logits;
    s->logits_row = logits ? *n_logits : -1;
    *n_logits += logits ? (fed ? n : 1) : 0;
    s->step_row0 = row0;
    s->step_rows = n;
    return n;
}

/* Ends every request in flight and in the queue (Ctrl-C, a failed step).
 * After Ctrl-C a kept request still feeds its last token (SEQ_CLOSING): the
 * text the user saw is what is kept. Returns the requests left closing. */
static int end_all(struct engine *e, enum gen_stop stop, int status)
{
    int closing = 0;
    for (int i = 0; i < e->n_slots; i++) {
        struct seq *s = &e->seqs[i];
        if (s->phase == SEQ_DECODE && s->r->params.keep && status == IG_OK) {
            s->closing = stop; /* s->next is in s->tokens already */
            s->phase = SEQ_CLOSING;
        }
        if (s->phase == SEQ_CLOSING && status == IG_OK)
            closing++;
        else if (s->phase != SEQ_FREE && s->phase != SEQ_KEPT)
            finish(e, s, stop, status);
    }
    e->q_len = 0; /* queued requests never started: nothing to report */
    return closing;
}

/* This step's drafts of the decoding sequences that speculate, within the
 * rows and logits the step has left beside every sequence's decode row:
 * prompt lookup's at once, the draft model's in its own steps first. */
static int plan_drafts(struct engine *e, int64_t n_fed)
{
    int64_t room = e->max_rows - n_fed, lroom = e->logits_rows - e->n_slots;
    room = room < lroom ? room : lroom;
    int n_jobs = 0, n_dec = 0, n_run = engine_running(e);
    for (int i = 0; i < e->n_slots; i++)
        n_dec += e->seqs[i].phase == SEQ_DECODE;
    for (int i = 0; i < e->n_slots; i++) {
        struct seq *s = &e->seqs[i];
        s->n_draft = 0;
        if (s->phase == SEQ_PREFILL && s->r->params.spec.draft &&
            spec_len_best(&s->len, &e->cost, s->r->params.spec.n_max, n_run, n_run)) {
            /* the draft model reads the prompt while the model does (TTFT, not
             * decode), where drafting is to pay when it decodes beside the others */
            e->jobs[n_jobs++] = (struct spec_draft_job){
                .slot = i, .tokens = s->tokens, .n_tokens = s->n_all_prompt,
                .max_pos = s->max_pos, .k = 0, .draft = s->draft};
            continue;
        }
        if (s->phase != SEQ_DECODE)
            continue;
        const struct gen_params *p = &s->r->params;
        if (!p->spec.lookup && !p->spec.draft)
            continue;
        int64_t k = spec_len_next(&s->len, &e->cost, p->spec.n_max, n_fed, n_dec);
        int64_t left_pos = s->max_pos - s->kv.n_pos - 1; /* the drafts' rows need positions */
        int64_t left_gen = p->n_predict > 0 ? p->n_predict - s->r->result.n_gen - 1 : k;
        k = k < left_pos ? k : left_pos;
        k = k < left_gen ? k : left_gen;
        k = k < room ? k : room;
        if (k < 1 || k < p->spec.n_min)
            continue;
        if (p->spec.lookup) {
            s->n_draft = spec_lookup(s->tokens, s->n_tokens, p->spec.ngram_min,
                                     p->spec.ngram_max, k, s->draft);
            room -= s->n_draft;
        } else {
            e->jobs[n_jobs++] = (struct spec_draft_job){
                .slot = i, .tokens = s->tokens, .n_tokens = s->n_tokens, .max_pos = s->max_pos,
                .k = k, .p_min = p->spec.p_min, .smp = s->dsmp, .draft = s->draft, .q = s->q};
            room -= k;
        }
    }
    if (n_jobs) {
        int64_t t0 = ig_now_ns();
        int st = spec_draft_run(e->draft, e->jobs, n_jobs);
        if (st != IG_OK)
            return st;
        double ms = ms_between(t0, ig_now_ns());
        int64_t n_drafted = 0;
        for (int j = 0; j < n_jobs; j++) {
            struct seq *s = &e->seqs[e->jobs[j].slot];
            s->n_draft = e->jobs[j].n_draft;
            if (e->jobs[j].k) /* (a prompt's catch-up is the prefill's) */
                s->r->result.draft_ms += ms;
            n_drafted += e->jobs[j].k ? e->jobs[j].n_draft : 0;
        }
        if (n_drafted)
            spec_cost_draft(&e->cost, n_drafted, ms);
    }
    for (int i = 0; i < e->n_slots; i++) {
        struct seq *s = &e->seqs[i];
        if (s->n_draft && s->n_draft < s->r->params.spec.n_min)
            s->n_draft = 0;
    }
    return IG_OK;
}

/* After a verify step of s (its fed token and n_draft drafts, each row's
 * logits from logits_row on): the rows in order, each through the
 * acceptance rule and take_token, up to the first rejected draft (whose
 * row has given the model's own token instead) or the end of the request.
 * The cache keeps the rows of accepted tokens only: the prefix index and
 * the draft model hear of no other. */
static void verify(struct engine *e, struct seq *s, bool greedy, double step_ms)
{
    struct gen_result *res = &s->r->result;
    int64_t k = s->n_draft, acc = 0;
    bool keep = s->r->params.keep;
    res->n_verify++;
    res->verify_ms += step_ms;
    res->n_drafted += k;
    res->n_decode++;
    s->kv.n_pos++; /* the fed row */
    for (int64_t i = 0; i <= k; i++) {
        int64_t row = s->logits_row + i;
        float *l = greedy ? NULL : e->logits + row * e->n_vocab;
        if (keep) { /* the logits after the last token in the cache */
            memcpy(s->kept_logits, l, (size_t)e->n_vocab * sizeof *l);
            s->logits_taken = true;
            s->logits_stale = false;
        }
        int32_t d = i < k ? s->draft[i] : -1;
        bool ok;
        int32_t tok = greedy ? e->greedy[row]
                             : spec_accept(s->smp, l, d, s->q ? s->q + i * e->n_vocab : NULL, &ok);
        if (greedy)
            ok = tok == d;
        if (ok) {
            res->n_accepted++;
            res->n_decode++;
        }
        take_token(e, s, tok, ig_now_ns()); /* may end the request: res is gone then */
        if (s->phase != SEQ_DECODE || !ok)
            break;
        acc++;
        s->kv.n_pos++; /* the accepted draft's row holds it */
    }
    if (s->phase != SEQ_DECODE && s->phase != SEQ_CLOSING)
        return; /* finish() has freed (or kept, trimmed) the blocks */
    kv_pool_trim(e->pool, &s->kv, s->kv.n_pos);
    kv_pool_register(e->pool, &s->kv, s->tokens);
    spec_len_update(&s->len, k, acc);
    if (e->draft)
        spec_draft_rollback(e->draft, slot_of(e, s), s->kv.n_pos);
}

/* Whether s's rows of the step go to gen_callbacks.on_layer. */
static bool hands_off(const struct seq *s)
{
    return s->phase == SEQ_PREFILL && s->r->params.handoff;
}

/* The first position of s the step's on_layer gives (backend_batch.
 * layer_from): the whole prompt so far on its first step (prefix blocks
 * shared at admission were never given), then this step's rows. */
static int64_t layer_from(const struct seq *s)
{
    return s->kv.n_pos == s->r->result.n_cached ? 0 : s->kv.n_pos;
}

/* backend_batch.on_layer: each handoff prompt's rows of the layer to the
 * caller, through the backend's store (bseqs: where it holds each sequence
 * when not at its own table and slot). */
static void layer_written(void *user, int64_t layer, const struct kv_store *kv,
                          const struct backend_layer_seq *bseqs)
{
    struct engine *e = user;
    for (int i = 0; i < e->step_seqs; i++) {
        struct seq *s = e->order[i];
        if (!hands_off(s))
            continue;
        int64_t end = s->kv.n_pos + s->step_rows;
        struct gen_layer_rows rows = {
            .kv = kv, .table = bseqs ? bseqs[i].table : s->kv.table,
            .wtable = !bseqs && e->be->o.n_window_blocks ? s->kv.wtable : NULL,
            .slot = bseqs ? bseqs[i].slot : slot_of(e, s), .from = e->layer_from[i],
            .pos0 = s->kv.n_pos, .n_pos = end, .final = end == s->n_all_prompt};
        e->o.cb.on_layer(e->o.cb.user, s->r, layer, &rows);
    }
}

int engine_step(struct engine *e)
{
    bool interrupted = e->o.interrupt && *e->o.interrupt;
    if (interrupted && !end_all(e, GEN_STOP_INTERRUPT, IG_OK))
        return IG_OK;
    for (int i = 0; i < e->n_slots; i++)
        e->seqs[i].step_rows = 0, e->seqs[i].logits_row = -1, e->seqs[i].n_draft = 0;
    if (!interrupted)
        admit_waiting(e);

    int64_t n_fed = 0;
    for (int i = 0; i < e->n_slots; i++)
        n_fed += e->seqs[i].phase == SEQ_DECODE || e->seqs[i].phase == SEQ_CLOSING;
    if (e->o.spec_max && !interrupted) {
        int st = plan_drafts(e, n_fed);
        if (st != IG_OK) {
            end_all(e, GEN_STOP_NONE, st);
            return st;
        }
    }

    /* The batch: decode rows (and drafts), then prompt chunks in admission order. */
    int n_seqs = 0;
    int64_t rows = 0, n_logits = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->seqs[i].phase == SEQ_DECODE || e->seqs[i].phase == SEQ_CLOSING) {
            e->order[n_seqs++] = &e->seqs[i];
            rows += add_rows(e, &e->seqs[i], rows, 1 + e->seqs[i].n_draft, false, &n_logits);
        }
    const int n_fed_seqs = n_seqs;
    for (;;) {
        struct seq *next = NULL;
        for (int i = 0; i < e->n_slots; i++) {
            struct seq *s = &e->seqs[i];
            if (s->phase == SEQ_PREFILL && !s->step_rows && s->kv.n_pos < s->n_all_prompt &&
                (!next || s->order < next->order))
                next = s;
        }
        bool first = n_seqs == n_fed_seqs;
        if (!next || rows == e->max_rows || !prompt_rows(e, next, e->max_rows - rows, first))
            break;
        e->order[n_seqs++] = next;
        rows += add_rows(e, next, rows, e->max_rows - rows, first, &n_logits);
    }
    if (!rows)
        return IG_OK;

    for (int i = 0; i < n_seqs; i++) {
        struct seq *s = e->order[i];
        e->bseqs[i] = (struct backend_seq){.table = s->kv.table, .wtable = s->kv.wtable,
                                           .slot = slot_of(e, s),
                                           .row0 = s->step_row0, .n_rows = s->step_rows,
                                           .pos0 = s->kv.n_pos,
                                           .prompt = s->phase == SEQ_PREFILL,
                                           .more = s->phase == SEQ_PREFILL &&
                                                   s->kv.n_pos + s->step_rows < s->n_all_prompt};
    }
    /* Where every row wanting logits picks greedily from them as they are,
     * the backend returns its token instead (on a GPU the logits then stay
     * there: a token a row crosses the bus, not 128256 floats). */
    bool greedy = n_logits > 0;
    for (int i = 0; i < n_seqs && greedy; i++) {
        const struct seq *s = e->order[i];
        if (s->logits_row >= 0)
            greedy = !s->r->params.keep && !s->r->params.handoff && sampler_greedy_only(s->smp);
    }
    struct backend_batch batch = {.tokens = e->tokens, .want_logits = e->want, .n_rows = rows,
                                  .seqs = e->bseqs, .n_seqs = n_seqs,
                                  .logits = e->logits, .greedy = greedy ? e->greedy : NULL};
    e->step_seqs = n_seqs;
    for (int i = 0; i < n_seqs && e->o.cb.on_layer; i++) {
        e->layer_from[i] = hands_off(e->order[i]) ? layer_from(e->order[i]) : -1;
        if (e->layer_from[i] >= 0) {
            batch.on_layer = layer_written;
            batch.layer_user = e;
            batch.layer_from = e->layer_from;
            batch.layer_device = e->o.layer_device;
        }
    }
    int64_t t0 = ig_now_ns();
    int st = backend_step(e->be, &batch);
    double step_ms = ms_between(t0, ig_now_ns());
    bool decode_only = true;
    for (int i = 0; i < n_seqs; i++)
        decode_only = decode_only && e->order[i]->phase != SEQ_PREFILL;
    if (e->o.spec_max && decode_only)
        spec_cost_step(&e->cost, rows, step_ms);
    if (st != IG_OK) {
        end_all(e, GEN_STOP_NONE, st);
        return st;
    }
    for (int i = 0; i < n_seqs; i++) {
        struct seq *s = e->order[i];
        struct gen_result *res = &s->r->result;
        bool prefill = s->phase == SEQ_PREFILL;
        if (s->phase == SEQ_DECODE && s->n_draft) {
            verify(e, s, greedy, step_ms);
            continue;
        }
        s->kv.n_pos += s->step_rows;
        kv_pool_register(e->pool, &s->kv, s->tokens);
        if (prefill) {
            res->n_prompt += s->step_rows;
            res->prefill_ms += step_ms;
        } else if (s->phase == SEQ_DECODE) { /* (a closing row is no decode step) */
            res->n_decode++;
        }
        if (s->logits_row >= 0)
            sample(e, s, greedy ? NULL : e->logits + s->logits_row * e->n_vocab,
                   greedy ? e->greedy[s->logits_row] : 0);
    }
    return IG_OK;
}
