/* generate/spec.c: speculative decoding's rules (generate/spec.h): prompt
 * lookup, the adaptive draft length, the acceptance rule and the draft
 * vocabulary check. Holds no state of its own: the engine keeps each
 * sequence's, the draft model lives in draft.c.
 * Covered by tests/generate/test_spec.c and tests/cli/test_spec_model.py. */
#include "generate/spec.h"

#include "core/status.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

/* ---- prompt lookup ------------------------------------------------------------------ */

int64_t spec_lookup(const int32_t *tokens, int64_t n_tokens, int64_t ngram_min,
                    int64_t ngram_max, int64_t k_max, int32_t *draft)
{
    for (int64_t n = ngram_max; n >= ngram_min && n >= 1; n--) {
        if (n >= n_tokens)
            continue;
        const int32_t *tail = tokens + n_tokens - n;
        /* the latest earlier occurrence: text repeats what was said last */
        for (int64_t at = n_tokens - n - 1; at >= 0; at--) {
            if (tokens[at] != tail[0] || memcmp(tokens + at, tail, (size_t)n * sizeof *tokens))
                continue;
            int64_t from = at + n, k = n_tokens - from < k_max ? n_tokens - from : k_max;
            memcpy(draft, tokens + from, (size_t)k * sizeof *draft);
            return k;
        }
    }
    return 0;
}

/* ---- the draft length --------------------------------------------------------------- */

#define SPEC_SKIP_MAX 16

void spec_len_init(struct spec_len *l, int64_t n_max)
{
    *l = (struct spec_len){.k = n_max, .skip = 0, .backoff = 1};
}

int64_t spec_len_next(struct spec_len *l)
{
    if (l->skip > 0) {
        l->skip--;
        return 0;
    }
    return l->k;
}

void spec_len_update(struct spec_len *l, int64_t n_max, int64_t drafted, int64_t accepted)
{
    if (drafted <= 0)
        return;
    if (accepted == drafted) {
        l->k = l->k + 2 < n_max ? l->k + 2 : n_max;
        l->backoff = 1;
    } else if (accepted > 0) {
        l->k = accepted + 1 < n_max ? accepted + 1 : n_max;
        l->backoff = 1;
    } else {
        l->k = 1;
        l->skip = l->backoff;
        l->backoff = l->backoff * 2 < SPEC_SKIP_MAX ? l->backoff * 2 : SPEC_SKIP_MAX;
    }
}

/* ---- the acceptance rule ------------------------------------------------------------ */

int32_t spec_accept(struct sampler *smp, float *logits, int32_t draft, const float *q,
                    bool *accepted)
{
    const int32_t *ids;
    const float *probs;
    int64_t n = sampler_candidates(smp, logits, &ids, &probs);
    *accepted = false;
    if (n == 1) { /* greedy, or one candidate left: no random number */
        *accepted = ids[0] == draft;
        return ids[0];
    }
    if (draft < 0) { /* the last row: a plain draw from p */
        double u = sampler_uniform(smp), cum = 0;
        for (int64_t i = 0; i < n; i++)
            if (u < (cum += probs[i]))
                return ids[i];
        return ids[n - 1];
    }
    double p_d = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == draft)
            p_d = probs[i];
    double q_d = q ? q[draft] : 1.0;
    if (p_d > 0 && sampler_uniform(smp) * q_d < p_d) {
        *accepted = true;
        return draft;
    }
    /* the residual max(0, p - q), over p's candidates (p is 0 elsewhere) */
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double qi = q ? q[ids[i]] : ids[i] == draft;
        sum += probs[i] > qi ? probs[i] - qi : 0;
    }
    double u = sampler_uniform(smp) * sum, cum = 0;
    int32_t last = ids[0];
    for (int64_t i = 0; i < n; i++) {
        double qi = q ? q[ids[i]] : ids[i] == draft;
        double w = sum > 0 ? (probs[i] > qi ? probs[i] - qi : 0) : probs[i];
        if (w <= 0)
            continue;
        last = ids[i];
        if (u < (cum += w))
            return ids[i];
    }
    return last; /* u in the rounding slack above the last sum */
}

/* ---- the draft vocabulary ------------------------------------------------------------ */

#define SPEC_VOCAB_MAX_DIFF 128  /* llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE */
#define SPEC_VOCAB_CHECK_FROM 5  /* and SPEC_VOCAB_CHECK_START_TOKEN_ID */

int spec_vocab_check(const struct tok_vocab *t, const struct tok_vocab *d)
{
    if (tok_model_of(t) != tok_model_of(d))
        return ig_error(IG_E_USAGE, "the draft model's tokenizer is '%s', the model's '%s': "
                        "speculation needs one vocabulary",
                        tok_model_name(tok_model_of(d)), tok_model_name(tok_model_of(t)));
    if (tok_adds_bos(t) != tok_adds_bos(d) || (tok_adds_bos(t) && tok_bos(t) != tok_bos(d)))
        return ig_error(IG_E_USAGE, "the draft model's BOS (%s, id %d) is not the model's "
                        "(%s, id %d): speculation needs one vocabulary",
                        tok_adds_bos(d) ? "added" : "not added", tok_bos(d),
                        tok_adds_bos(t) ? "added" : "not added", tok_bos(t));
    if (tok_eos(t) != tok_eos(d))
        return ig_error(IG_E_USAGE, "the draft model's EOS id %d is not the model's %d: "
                        "speculation needs one vocabulary", tok_eos(d), tok_eos(t));
    int64_t nt = tok_n_tokens(t), nd = tok_n_tokens(d);
    if (nt - nd > SPEC_VOCAB_MAX_DIFF || nd - nt > SPEC_VOCAB_MAX_DIFF)
        return ig_error(IG_E_USAGE, "the draft model has %lld tokens, the model %lld (more "
                        "than %d apart): speculation needs one vocabulary", (long long)nd,
                        (long long)nt, SPEC_VOCAB_MAX_DIFF);
    for (int64_t i = SPEC_VOCAB_CHECK_FROM; i < (nt < nd ? nt : nd); i++) {
        struct tok_str a = tok_token_text(t, (int32_t)i), b = tok_token_text(d, (int32_t)i);
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len))
            return ig_error(IG_E_USAGE, "the draft model's token %lld is '%.*s', the model's "
                            "'%.*s': speculation needs one vocabulary", (long long)i,
                            (int)(b.len > 64 ? 64 : b.len), b.ptr,
                            (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    return IG_OK;
}
