/* generate/spec.h: the parts of speculative decoding the engine calls
 * (private to generate/): prompt lookup's drafts, the draft length that
 * adapts, the acceptance rule, the vocabulary check of a draft model, and
 * the draft model itself (a second backend with its own slots and pool).
 *
 * A sequence with k drafted tokens d0..d(k-1) runs k+1 rows in one step: the
 * token it feeds anyway and the drafts, every row wanting logits. Row i's
 * logits are the target's distribution after d0..d(i-1); the engine walks
 * the rows in order, asks spec_accept for each and stops at the first
 * rejection, where the rule has already drawn the target's own token. So
 * the engine's sampler, grammar matcher and stop strings follow accepted
 * tokens only, and the cache is trimmed back to them (kv_pool_trim).
 *
 * Covered by tests/generate/test_spec.c (lookup, adaptation, the rule's
 * distribution by chi-square, greedy identity over a fake backend) and
 * tests/cli/test_spec_model.py (the real model: byte-identical greedy output with
 * --lookup and with -md, a grammar, the refused vocabulary). */
#ifndef IGNITE_GENERATE_SPEC_H
#define IGNITE_GENERATE_SPEC_H

#include "backend/backend.h"
#include "decode/sampler.h"

#include <stdbool.h>
#include <stdint.h>

struct tok_vocab;

/* ---- prompt lookup ---------------------------------------------------------- */

/* Prompt lookup (llama.cpp's draftless n-gram idea): for n from ngram_max
 * down to ngram_min, the last n of tokens[0..n_tokens) are searched for
 * earlier in the same tokens, the latest occurrence first; the tokens that
 * followed the first match found (at most k_max) are the draft. Returns its
 * length (0: no match). */
int64_t spec_lookup(const int32_t *tokens, int64_t n_tokens, int64_t ngram_min,
                    int64_t ngram_max, int64_t k_max, int32_t *draft);

/* ---- the draft length ----------------------------------------------------------- */

/* What steps cost, the engine's measure for every sequence: a step's wall
 * time against its rows, a + b rows, fitted by least squares over the
 * recent steps that decoded only (exponentially forgotten), and the draft
 * model's time a drafted token. Until the steps vary enough to fit b, and
 * with `fixed` (reproducible tests), the priors: b = 0.3 a, a drafted token
 * 0.44 a (a 0.5B draft's bytes over a 1.5B model's). */
struct spec_cost {
    double sw, sx, sy, sxx, sxy; /* the decayed sums of 1, rows, ms, rows^2, rows ms */
    double draft_ms, draft_n;    /* the decayed draft time and tokens */
    bool fixed;
};

void spec_cost_step(struct spec_cost *c, int64_t rows, double ms);
void spec_cost_draft(struct spec_cost *c, int64_t n_drafted, double ms);

/* How many tokens a sequence drafts next. Each drafted token costs a row
 * of the verify step (b) and, with a draft model, its drafting; it gains
 * tokens where it is kept. With alpha the sequence's recent acceptance (a
 * drafted token kept, given the ones before it were: decayed counts, prior
 * 1/2), k drafts yield E(k) = 1 + alpha + .. + alpha^k tokens, and the
 * length is the k in [0, k_max] that makes the most tokens a millisecond
 * of the whole step, (n_seqs - 1 + E(k)) / (a + b rows + (b + draft) k).
 * Where that is 0, a probe of one token is drafted after 1, 2, 4 .. 16
 * skipped steps (doubling while it stays 0), so alpha keeps up with the
 * text at a cost of a few percent where drafts fail. A draft model does not
 * probe: every token it skips it must read again before its next draft
 * (its own prefill), so a probe would cost as much as the steps skipped; it
 * drafts where its acceptance (prior 0.8: a smaller model of the same
 * family) makes it pay, and stops for the request once failures or a busy
 * batch (where each verify row delays every sequence) make it not pay for 3
 * steps in a row (a gap it can still catch up cheaply). */
struct spec_len {
    double kept, missed; /* decayed: drafted tokens kept, rejections */
    int64_t skip;        /* steps left without a draft */
    int64_t backoff;     /* the next skip */
    bool draft_model;    /* the prior and the rule above */
    int64_t idle;        /* a draft model: decode steps in a row where no k paid */
    bool off;            /* a draft model: after 3 such steps, no more drafts (it
                          * would have to read every token it skipped) */
};

void spec_len_init(struct spec_len *l, bool draft_model);
/* The k that pays best now, without probing or counting (0: none). */
int64_t spec_len_best(const struct spec_len *l, const struct spec_cost *c, int64_t k_max,
                      int64_t rows, int64_t n_seqs);
/* The length to draft this step (0: none), counting a skipped step: `rows`
 * the step's rows before this sequence's drafts, n_seqs the sequences
 * decoding in it, draft_model whether drafting costs time. */
int64_t spec_len_next(struct spec_len *l, const struct spec_cost *c, int64_t k_max,
                      int64_t rows, int64_t n_seqs);
/* After a verify step of `drafted` tokens of which `accepted` were kept. */
void spec_len_update(struct spec_len *l, int64_t drafted, int64_t accepted);

/* ---- the acceptance rule ---------------------------------------------------------- */

/* The token of one verify row: `logits` [n_vocab] the target's (modified
 * in place: the sampler's mask and penalty), `draft` the drafted token
 * there (-1 on the last row, which drafts nothing), q [n_vocab] the
 * distribution the draft was drawn from (NULL: the draft was certain, as
 * prompt lookup's and a greedy draft model's are). With p the target's
 * distribution after smp's chain (sampler_candidates), the draft is kept
 * with probability min(1, p(d) / q(d)); otherwise the token is drawn from
 * the normalized residual max(0, p - q) (Leviathan et al. 2023), so the
 * token has distribution p whatever the draft was. At temperature 0, p is
 * the argmax: the draft is kept exactly when it is the greedy token, and no
 * random number is drawn. *accepted says whether the draft was kept (the
 * returned token is then the draft). */
int32_t spec_accept(struct sampler *smp, float *logits, int32_t draft, const float *q,
                    bool *accepted);

/* ---- the draft model ---------------------------------------------------------------- */

/* Whether a draft model's vocabulary can serve the target's, by llama.cpp's
 * rule (common/speculative.cpp): the same tokenizer model, the same BOS
 * setting and id, the same EOS id, sizes within 128 of each other, and the
 * same text for every token id from 5 below the smaller size. IG_OK, or
 * IG_E_USAGE after one line naming the first difference (the token id and
 * both texts where a token differs). */
int spec_vocab_check(const struct tok_vocab *target, const struct tok_vocab *draft);

struct spec_draft;

/* A draft model over backend `be` (borrowed), for n_slots sequences of up to
 * n_ctx positions: its pool holds a whole context per slot (the backend's
 * own default), so a draft never waits for blocks. IG_OK or IG_E_NOMEM. */
int spec_draft_create(struct backend *be, int n_slots, int64_t k_max, struct spec_draft **out);
void spec_draft_free(struct spec_draft *d);

/* What one sequence asks of the draft model in a step. */
struct spec_draft_job {
    int slot;                 /* the engine's slot */
    const int32_t *tokens;    /* [n_tokens] the sequence's tokens, the last one not yet in
                               * the target's cache */
    int64_t n_tokens;
    int64_t max_pos;          /* positions the sequence may use */
    int64_t k;                /* most tokens to draft; 0: only catch up (a prompt
                               * the target is prefilling) */
    double p_min;             /* stop below this probability of the draft's top token */
    struct sampler *smp;      /* NULL: greedy drafts; else draws from it (q kept) */
    int32_t *draft;           /* out: [k] */
    float *q;                 /* out: [k, n_vocab] where smp is set */
    int64_t n_draft;          /* out */
};

/* Runs the draft model for the jobs together: each sequence's tokens the
 * draft's cache lacks (the whole prompt the first time), then one row a
 * token drafted. IG_OK, or the backend's error. */
int spec_draft_run(struct spec_draft *d, struct spec_draft_job *jobs, int n_jobs);

/* The target kept n_pos positions of slot `slot`: the draft forgets its
 * positions past them. */
void spec_draft_rollback(struct spec_draft *d, int slot, int64_t n_pos);

/* Slot `slot`'s request ended: its draft blocks go back. */
void spec_draft_release(struct spec_draft *d, int slot);

#endif
