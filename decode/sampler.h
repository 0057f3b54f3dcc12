/* decode/sampler.h: picks the next token from a row of logits.
 *
 * The order of operations is llama.cpp's default chain:
 *
 *   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * top-p and min-p therefore judge the probabilities at temperature 1 (the
 * model's own distribution); temperature only reshapes the survivors. At
 * temperature 0 the sampler is greedy: the argmax after the penalty (lowest id
 * on ties); nothing else applies and no random number is drawn.
 *
 *   penalty  each DISTINCT token among the last repeat_last_n accepted tokens:
 *            logit / penalty when the logit is > 0, logit * penalty otherwise.
 *   top-k    the k highest logits (ties by lower id); 0 = off.
 *   top-p    the shortest prefix, by descending probability, whose mass
 *            reaches top_p (the token that crosses it is kept); 1 = off.
 *   min-p    tokens with p >= min_p * p_max; 0 = off.
 *
 * Non-finite logits are tamed first: NaN counts as -inf, +inf as the
 * largest float; when nothing is above -inf the argmax (id 0) is returned.
 * A token at -inf is never drawn while any token is above it.
 *
 * A mask hook (sampler_set_mask), when installed, runs before everything
 * else: it sets the logits of the tokens a constraint (a grammar) forbids to
 * -inf, so the penalty, top-k, top-p, min-p and temperature work among the
 * allowed tokens only, with their usual meaning.
 *
 * The random numbers come from our own xoshiro256** seeded by splitmix64, so
 * a seed gives the same tokens on every machine. All buffers are allocated
 * once by sampler_create: nothing is allocated per token.
 * Covered by tests/unit/test_sampler.c. */
#ifndef IGNITE_DECODE_SAMPLER_H
#define IGNITE_DECODE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct sampler_params {
    double temperature;    /* 0 = greedy; > 0 scales logits by 1/temperature */
    int64_t top_k;         /* keep the k best; 0 = off */
    double top_p;          /* nucleus mass in (0, 1]; 1 = off */
    double min_p;          /* in [0, 1]; 0 = off */
    double repeat_penalty; /* >= 1 in practice; 1 = off */
    int64_t repeat_last_n; /* tokens of history the penalty looks at; 0 = off */
    uint64_t seed;         /* PRNG seed */
};

/* The defaults documented in docs/cli.md (seed 0; the CLI picks a seed). */
struct sampler_params sampler_default_params(void);

struct sampler;

/* Allocates a sampler for a vocabulary of n_vocab tokens. Returns IG_OK and
 * *out (free with sampler_free), IG_E_USAGE for parameters out of range
 * (naming the one), or IG_E_NOMEM. */
int sampler_create(const struct sampler_params *p, int64_t n_vocab, struct sampler **out);
void sampler_free(struct sampler *s);

/* Appends `token` to the penalty history (prompt tokens count too, as in
 * llama.cpp). Only the last repeat_last_n are kept. */
void sampler_accept(struct sampler *s, int32_t token);

/* Applies the repetition penalty to logits[0..n_vocab) in place. Called by
 * sampler_sample; exposed for tests. */
void sampler_apply_penalty(struct sampler *s, float *logits);

/* Runs the mask hook, penalty, top-k, top-p, min-p and temperature on
 * `logits` (modified in place by the hook and the penalty) and returns the number of candidates left. Their ids
 * go to *ids and their final probabilities (summing to 1, descending) to
 * *probs: both point into the sampler's own buffers, valid until the next
 * call. Greedy (temperature 0) yields the one argmax with probability 1. */
int64_t sampler_candidates(struct sampler *s, float *logits, const int32_t **ids,
                           const float **probs);

/* The greedy token of logits[0..n) by the rule above (NaN last, +inf as the
 * largest float, the lower id on ties, 0 when nothing is above -inf), the
 * logits untouched: what temperature 0 picks after the mask and penalty.
 * The CUDA backend's gk_greedy_rows (decode/greedy.h) computes the same. */
int32_t sampler_greedy(const float *logits, int64_t n);

/* Whether s picks sampler_greedy of the raw logits: temperature 0, no mask
 * hook, no repetition penalty (a backend may then return the token alone). */
bool sampler_greedy_only(const struct sampler *s);

/* Picks the next token from logits[0..n_vocab) (modified in place). Does not
 * accept it: call sampler_accept with the token actually used. */
int32_t sampler_sample(struct sampler *s, float *logits);

/* A constraint on the next token: sets logits[id] = -inf for each token id
 * in [0, n_vocab) that may not come next. */
typedef void (*sampler_mask_fn)(void *user, float *logits, int64_t n_vocab);

/* Installs the mask hook sampler_candidates (and so sampler_sample) calls
 * first, with `user`; fn NULL removes it. */
void sampler_set_mask(struct sampler *s, sampler_mask_fn fn, void *user);

/* A uniform double in [0, 1) from the sampler's generator (53 random bits). */
double sampler_uniform(struct sampler *s);

#endif
