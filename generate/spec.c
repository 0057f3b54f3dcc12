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
#define SPEC_COST_DECAY 0.97 /* per step: the fit follows the machine's load */
#define SPEC_LEN_DECAY 0.8   /* per verify step: alpha follows the text */

void spec_cost_step(struct spec_cost *c, int64_t rows, double ms)
{
    double x = (double)rows, d = SPEC_COST_DECAY;
    c->sw = c->sw * d + 1;
    c->sx = c->sx * d + x;
    c->sy = c->sy * d + ms;
    c->sxx = c->sxx * d + x * x;
    c->sxy = c->sxy * d + x * ms;
}

void spec_cost_draft(struct spec_cost *c, int64_t n_drafted, double ms)
{
    c->draft_ms = c->draft_ms * SPEC_COST_DECAY + ms;
    c->draft_n = c->draft_n * SPEC_COST_DECAY + (double)n_drafted;
}

/* a and b of a + b rows (ms), and a drafted token's time d. */
static void cost_fit(const struct spec_cost *c, double *a, double *b, double *d)
{
    *a = 1, *b = 0.3, *d = 0.44;
    if (c->fixed || c->sw < 1)
        return;
    double mx = c->sx / c->sw, my = c->sy / c->sw;
    double var = c->sxx / c->sw - mx * mx;
    *b = var > 0.05 ? (c->sxy / c->sw - mx * my) / var : 0.3 * my / mx;
    *a = my - *b * mx;
    if (*a <= 0 || *b < 0) { /* noise: a step's time split by the prior */
        *a = my / (1 + 0.3 * (mx - 1));
        *b = 0.3 * *a;
        *a -= *b; /* (a + b: one row) */
    }
    *d = c->draft_n > 0.5 ? c->draft_ms / c->draft_n : 0.44 * (*a + *b);
}

void spec_len_init(struct spec_len *l, bool draft_model)
{
    *l = (struct spec_len){.backoff = 1, .draft_model = draft_model};
}

int64_t spec_len_best(const struct spec_len *l, const struct spec_cost *c, int64_t k_max,
                      int64_t rows, int64_t n_seqs)
{
    double a, b, d;
    cost_fit(c, &a, &b, &d);
    /* prior: as 4 kept of 5 (a draft model), 1 of 2 (lookup) */
    double alpha = l->draft_model ? (l->kept + 4) / (l->kept + l->missed + 5)
                                  : (l->kept + 1) / (l->kept + l->missed + 2);
    double t = a + b * (double)rows, per = b + (l->draft_model ? d : 0);
    double best = (double)n_seqs / t, e = 1, p = 1;
    int64_t k_best = 0;
    for (int64_t k = 1; k <= k_max; k++) {
        p *= alpha;
        e += p;
        double g = ((double)n_seqs - 1 + e) / (t + per * (double)k);
        if (g > best)
            best = g, k_best = k;
    }
    return k_best;
}

int64_t spec_len_next(struct spec_len *l, const struct spec_cost *c, int64_t k_max,
                      int64_t rows, int64_t n_seqs)
{
    if (l->off)
        return 0;
    int64_t k_best = spec_len_best(l, c, k_max, rows, n_seqs);
    if (l->draft_model && !k_best && ++l->idle >= 3)
        l->off = true;
    if (k_best || l->draft_model) {
        l->idle = k_best ? 0 : l->idle;
        l->skip = 0;
        l->backoff = 1;
        return k_best;
    }
    if (l->skip > 0) {
        l->skip--;
        return 0;
    }
    l->skip = l->backoff;
    l->backoff = l->backoff * 2 < SPEC_SKIP_MAX ? l->backoff * 2 : SPEC_SKIP_MAX;
    return k_max ? 1 : 0;
}

void spec_len_update(struct spec_len *l, int64_t drafted, int64_t accepted)
{
    if (drafted <= 0)
        return;
    l->kept = l->kept * SPEC_LEN_DECAY + (double)accepted;
    l->missed = l->missed * SPEC_LEN_DECAY + (accepted < drafted);
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
