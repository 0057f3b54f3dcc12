/* decode/generate.c: tokenize, prefill, then sample/stream/decode until a
 * stop condition, timing each phase (definitions in decode/generate.h).
 * Leaves the forward math to prefill/ and decode/decode.c, the choice of
 * token to the sampler and all output to the caller's emit callback.
 * Covered by tests/cli/ (through `ignite run`). */
#include "decode/generate.h"

#include "core/status.h"
#include "core/timer.h"
#include "decode/decode.h"
#include "prefill/prefill.h"
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
    default: return "none";
    }
}

static double ms_since(int64_t t0) { return (double)(ig_now_ns() - t0) / 1e6; }

static int interrupted(const struct generate_params *p)
{
    return p->interrupt && *p->interrupt;
}

/* Tokenizes and checks the prompt against the context. */
static int encode_prompt(struct tok_vocab *vocab, const char *prompt, size_t len,
                         const struct generate_params *p, const struct kv_cache *kv,
                         struct tok_ids *ids)
{
    int st = tok_encode(vocab, prompt, len, p->encode_flags, ids);
    if (st != IG_OK)
        return st;
    if (ids->n == 0)
        return ig_error(IG_E_INPUT, "the prompt encodes to no tokens");
    if (ids->n > kv->n_ctx)
        return ig_error(IG_E_INPUT,
                        "the prompt is %lld tokens but the context holds %lld "
                        "(raise -c/--ctx-size or shorten the prompt)",
                        (long long)ids->n, (long long)kv->n_ctx);
    return IG_OK;
}

/* Runs the prompt through prefill in chunks; logits of the last token. */
static int prefill_prompt(struct ops_ctx *ops, struct kv_cache *kv, const struct tok_ids *ids,
                          const struct generate_params *p, float *logits)
{
    for (int64_t pos = 0; pos < ids->n; pos += p->max_batch) {
        if (interrupted(p))
            return IG_E_INTERRUPTED;
        int64_t n = ids->n - pos < p->max_batch ? ids->n - pos : p->max_batch;
        int st = prefill_forward(ops, kv, ids->ids + pos, n, pos, logits);
        if (st != IG_OK)
            return st;
    }
    return IG_OK;
}

/* Hands one piece of text to the caller; 1 when it asked to stop. */
static int emit_text(const struct generate_params *p, const char *text, size_t len)
{
    return len && p->emit ? p->emit(p->emit_user, text, len) != 0 : 0;
}

int generate_run(struct ops_ctx *ops, struct kv_cache *kv, struct tok_vocab *vocab,
                 struct sampler *smp, int64_t n_vocab, const char *prompt, size_t len,
                 const struct generate_params *p, struct generate_stats *stats)
{
    *stats = (struct generate_stats){0};
    IG_ASSERT(p->max_batch >= 1 && (p->n_predict >= 1 || p->n_predict == -1));
    struct tok_ids ids = {0};
    struct tok_stream stream;
    tok_stream_init(&stream, vocab, p->print_special);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int st = IG_E_NOMEM;
    if (!logits) {
        ig_error(IG_E_NOMEM, "out of memory for %lld logits", (long long)n_vocab);
        goto done;
    }

    /* TTFT starts here: the model is loaded, the prompt is text. */
    int64_t t0 = ig_now_ns();
    st = encode_prompt(vocab, prompt, len, p, kv, &ids);
    stats->tokenize_ms = ms_since(t0);
    if (st != IG_OK)
        goto done;
    stats->n_prompt = ids.n;
    for (int64_t i = 0; i < ids.n; i++)
        sampler_accept(smp, ids.ids[i]);

    int64_t t_prefill = ig_now_ns();
    st = prefill_prompt(ops, kv, &ids, p, logits);
    stats->prefill_ms = ms_since(t_prefill);
    if (st == IG_E_INTERRUPTED) {
        stats->stop = GEN_STOP_INTERRUPT;
        st = IG_OK;
        goto done;
    }
    if (st != IG_OK)
        goto done;

    int32_t tok = sampler_sample(smp, logits);
    int64_t t_first = ig_now_ns();
    stats->ttft_ms = (double)(t_first - t0) / 1e6;
    stats->n_gen = 1;
    const char *text;
    size_t n;
    for (;;) {
        sampler_accept(smp, tok);
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
        if (interrupted(p)) {
            stats->stop = GEN_STOP_INTERRUPT;
            break;
        }
        if (p->n_predict > 0 && stats->n_gen >= p->n_predict) {
            stats->stop = GEN_STOP_LIMIT;
            break;
        }
        if (kv->n_pos >= kv->n_ctx) {
            stats->stop = GEN_STOP_CONTEXT;
            break;
        }
        if ((st = decode_forward(ops, kv, tok, kv->n_pos, logits)) != IG_OK)
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
    tok_stream_free(&stream);
    tok_ids_free(&ids);
    free(logits);
    return st;
}
