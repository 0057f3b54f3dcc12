/* decode/generate.c: continue from the cache's history, tokenize, prefill in
 * chunks, then sample/stream/decode until a stop condition, timing each
 * phase (definitions and the resume rule in decode/generate.h).
 * Leaves the forward math to prefill/ and decode/decode.c, the choice of
 * token to the sampler and all output to the caller's emit callback.
 * Covered by tests/cli/ (through `ignite run`). */
#include "decode/generate.h"

#include "core/status.h"
#include "core/timer.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

const char *generate_stop_name(enum generate_stop stop)
{
    switch (stop) {
    case GEN_STOP_EOG: return "eog";
    case GEN_STOP_LIMIT: return "limit";
    case GEN_STOP_CONTEXT: return "context";
    case GEN_STOP_INTERRUPT: return "interrupted";
    case GEN_STOP_OUTPUT: return "output_closed";
    case GEN_STOP_PROMPT: return "prompt_only";
    case GEN_STOP_GRAMMAR: return "grammar";
    default: return "none";
    }
}

static double ms_since(int64_t t0) { return (double)(ig_now_ns() - t0) / 1e6; }

static int interrupted(const struct generate_params *p)
{
    return p->interrupt && *p->interrupt;
}

int generate_history_init(struct generate_history *h, int64_t n_vocab)
{
    *h = (struct generate_history){0};
    h->logits = malloc((size_t)n_vocab * sizeof *h->logits);
    if (!h->logits)
        return ig_error(IG_E_NOMEM, "out of memory for %lld logits", (long long)n_vocab);
    return IG_OK;
}

void generate_history_free(struct generate_history *h)
{
    free(h->tokens);
    free(h->logits);
    *h = (struct generate_history){0};
}

/* Tokenizes the prompt (BOS only at the start of the cache) and checks it
 * against the context. */
static int encode_prompt(struct tok_vocab *vocab, const char *prompt, size_t len,
                         const struct generate_params *p, const struct backend *be,
                         const struct generate_history *hist, struct tok_ids *ids)
{
    unsigned flags = p->encode_flags & (hist->n ? ~(unsigned)TOK_ENC_ADD_BOS : ~0u);
    int st = len || !hist->n ? tok_encode(vocab, prompt, len, flags, ids) : IG_OK;
    if (st != IG_OK)
        return st;
    if (ids->n == 0 && !hist->have_logits)
        return ig_error(IG_E_INPUT, hist->n ? "nothing to continue from: the cache has no "
                                              "logits and the prompt encodes to no tokens"
                                            : "the prompt encodes to no tokens");
    if (hist->n + ids->n > backend_n_ctx(be))
        return ig_error(IG_E_INPUT,
                        "the prompt is %lld tokens but the context holds %lld "
                        "(raise -c/--ctx-size or shorten the prompt)",
                        (long long)(hist->n + ids->n), (long long)backend_n_ctx(be));
    return IG_OK;
}

/* Appends the prompt's ids to the history. */
static int extend_history(struct generate_history *hist, const struct tok_ids *ids)
{
    if (!ids->n)
        return IG_OK;
    int32_t *t = realloc(hist->tokens, (size_t)(hist->n + ids->n) * sizeof *t);
    if (!t)
        return ig_error(IG_E_NOMEM, "out of memory for %lld token ids",
                        (long long)(hist->n + ids->n));
    for (int64_t i = 0; i < ids->n; i++)
        t[hist->n + i] = ids->ids[i];
    hist->tokens = t;
    hist->n += ids->n;
    return IG_OK;
}

/* Runs the prompt through prefill in chunks after what the cache holds;
 * logits of the last token. Activation memory is bounded by the chunk.
 * *n_done: the tokens prefilled, fewer than ids->n after an interrupt. */
static int prefill_prompt(struct backend *be, const struct tok_ids *ids,
                          const struct generate_params *p, float *logits, int64_t *n_done)
{
    int64_t pos0 = backend_n_pos(be);
    *n_done = 0;
    for (int64_t i = 0; i < ids->n; i += p->max_batch) {
        if (interrupted(p))
            return IG_E_INTERRUPTED;
        int64_t n = ids->n - i < p->max_batch ? ids->n - i : p->max_batch;
        int st = backend_prefill(be, ids->ids + i, n, pos0 + i, logits);
        if (st != IG_OK)
            return st;
        *n_done = i + n;
    }
    return IG_OK;
}

/* Hands one piece of text to the caller; 1 when it asked to stop. */
static int emit_text(const struct generate_params *p, const char *text, size_t len)
{
    return len && p->emit ? p->emit(p->emit_user, text, len) != 0 : 0;
}

int generate_run(struct backend *be, struct tok_vocab *vocab,
                 struct sampler *smp, const char *prompt, size_t len,
                 const struct generate_params *p, struct generate_history *hist,
                 struct generate_stats *stats)
{
    *stats = (struct generate_stats){0};
    IG_ASSERT(p->max_batch >= 1 && (p->n_predict >= 1 || p->n_predict == -1));
    IG_ASSERT(hist->n == backend_n_pos(be) && hist->logits);
    struct tok_ids ids = {0};
    struct tok_stream stream;
    tok_stream_init(&stream, vocab, p->print_special);
    float *logits = hist->logits;
    int st;

    /* TTFT starts here: the model is loaded, the prompt is text. */
    int64_t t0 = ig_now_ns();
    st = encode_prompt(vocab, prompt, len, p, be, hist, &ids);
    stats->tokenize_ms = ms_since(t0);
    if (st != IG_OK)
        goto done;
    stats->n_cached = hist->n;
    for (int64_t i = 0; i < hist->n; i++)
        sampler_accept(smp, hist->tokens[i]);
    for (int64_t i = 0; i < ids.n; i++)
        sampler_accept(smp, ids.ids[i]);

    int64_t t_prefill = ig_now_ns();
    if (ids.n)
        hist->have_logits = false; /* until the prefill completes */
    st = prefill_prompt(be, &ids, p, logits, &stats->n_prompt);
    stats->prefill_ms = ms_since(t_prefill);
    if (st == IG_E_INTERRUPTED) {
        stats->stop = GEN_STOP_INTERRUPT;
        st = IG_OK;
        goto done;
    }
    if (st != IG_OK || (st = extend_history(hist, &ids)) != IG_OK)
        goto done;
    hist->have_logits = true;
    if (p->prompt_only) {
        stats->ttft_ms = ms_since(t0);
        stats->stop = GEN_STOP_PROMPT;
        goto done;
    }

    hist->have_logits = false; /* the sampler works on them in place */
    int32_t tok = sampler_sample(smp, logits);
    int64_t t_first = ig_now_ns();
    stats->ttft_ms = (double)(t_first - t0) / 1e6;
    stats->n_gen = 1;
    const char *text;
    size_t n;
    for (;;) {
        sampler_accept(smp, tok);
        /* grammar: a mask that allowed nothing leaves a meaningless token */
        if (p->grammar && grammar_matcher_last_allowed(p->grammar) == 0) {
            stats->n_gen--;
            stats->stop = GEN_STOP_GRAMMAR;
            break;
        }
        if (p->grammar && (st = grammar_matcher_accept(p->grammar, tok)) != IG_OK)
            goto done;
        if (!p->ignore_eog && tok_is_eog(vocab, tok)) {
            stats->stop = GEN_STOP_EOG;
            break;
        }
        if ((st = tok_stream_push(&stream, tok, &text, &n)) != IG_OK)
            goto done;
        if (emit_text(p, text, n)) {
            stats->stop = GEN_STOP_OUTPUT;
            break;
        }
        if (p->grammar && grammar_matcher_done(p->grammar)) { /* grammar: nothing may follow */
            stats->stop = GEN_STOP_GRAMMAR;
            break;
        }
        if (interrupted(p)) {
            stats->stop = GEN_STOP_INTERRUPT;
            break;
        }
        if (p->n_predict > 0 && stats->n_gen >= p->n_predict) {
            stats->stop = GEN_STOP_LIMIT;
            break;
        }
        if (backend_n_pos(be) >= backend_n_ctx(be)) {
            stats->stop = GEN_STOP_CONTEXT;
            break;
        }
        if ((st = backend_decode(be, tok, backend_n_pos(be), logits)) != IG_OK)
            goto done;
        stats->n_decode++;
        tok = sampler_sample(smp, logits);
        stats->n_gen++;
    }
    stats->decode_ms = ms_since(t_first);
    /* An incomplete UTF-8 sequence at the very end still goes out. */
    if (stats->stop != GEN_STOP_OUTPUT && (st = tok_stream_flush(&stream, &text, &n)) == IG_OK &&
        emit_text(p, text, n))
        stats->stop = GEN_STOP_OUTPUT;
done:
    if (p->grammar)
        stats->grammar_complete = grammar_matcher_complete(p->grammar);
    tok_stream_free(&stream);
    tok_ids_free(&ids);
    return st;
}
