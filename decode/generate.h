/* decode/generate.h: the generation loop.
 *
 * [the tokens already in the cache, e.g. loaded from a file] -> tokenize the
 * prompt -> prefill it (in chunks of max_batch) -> sample the first token ->
 * { hand its text to the caller, decode one token, sample } until a stop
 * condition, or stop after the prefill (prompt_only) for the caller to save
 * the cache. The caller owns output: text reaches it through `emit`, so
 * this library code never writes to stdout and works the same for a
 * terminal, a pipe or a --json buffer. Signals are the caller's too: it
 * passes the flag its SIGINT handler sets.
 *
 * Resuming: a run that starts from a history (tokens + the logits after the
 * last one) gives the sampler the same state an uninterrupted run has at its
 * first sample: it accepts the history's tokens, and the seeded generator
 * has drawn nothing yet in either case. So the same seed and sampling options
 * give the same tokens.
 *
 * Timing (the definitions docs/cli.md documents):
 *   TTFT         from the start of tokenization (the model is loaded) to the
 *                moment the first token has been sampled.
 *   prefill      the prefill forward calls alone: prefill tok/s = n_prompt /
 *                prefill time.
 *   decode       from the first sampled token to the last: decode ms/token =
 *                that time / the number of one-token forwards.
 * Covered by tests/cli/ (through `ignite run`).
 */
#ifndef IGNITE_DECODE_GENERATE_H
#define IGNITE_DECODE_GENERATE_H

#include "backend/backend.h"
#include "decode/sampler.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tok_vocab;
struct grammar_matcher;

/* Why the loop ended. */
enum generate_stop {
    GEN_STOP_NONE = 0,   /* it did not start (an error before the first token) */
    GEN_STOP_EOG,        /* the model produced an end-of-generation token */
    GEN_STOP_LIMIT,      /* n_predict tokens were generated */
    GEN_STOP_CONTEXT,    /* the context is full */
    GEN_STOP_INTERRUPT,  /* *interrupt became non-zero */
    GEN_STOP_OUTPUT,     /* emit asked to stop (e.g. the reader closed the pipe) */
    GEN_STOP_PROMPT,     /* prompt_only: the prompt is in the cache, nothing sampled */
    GEN_STOP_GRAMMAR,    /* the grammar is complete and nothing may follow (or, with
                          * grammar_complete false, no token can continue it) */
};

/* "eog", "limit", "context", "interrupted", "output_closed", "prompt_only",
 * "grammar" ("none"). */
const char *generate_stop_name(enum generate_stop stop);

struct generate_params {
    int64_t n_predict;      /* most tokens to generate (>= 1), or -1 for no limit */
    int64_t max_batch;      /* prefill chunk: <= the backend's max_batch */
    bool prompt_only;       /* stop after the prefill (GEN_STOP_PROMPT) */
    unsigned encode_flags;  /* TOK_ENC_* for the prompt */
    bool print_special;     /* render control tokens' text in the output */
    bool ignore_eog;        /* keep going past end-of-generation tokens */
    volatile sig_atomic_t *interrupt; /* may be NULL; non-zero = stop soon */
    /* Receives generated text in order as it becomes whole UTF-8. Returns 0
     * to go on, non-zero to stop (GEN_STOP_OUTPUT). */
    int (*emit)(void *user, const char *text, size_t len);
    void *emit_user;
    /* A constraint (grammar/grammar.h), or NULL. Its mask is the sampler's
     * hook (the caller installs it); the loop follows each token with it and
     * stops when it is done. */
    struct grammar_matcher *grammar;
};

struct generate_stats {
    int64_t n_prompt;       /* prompt tokens prefilled by this run (BOS included; after an
                             * interrupt in the prefill, the chunks done) */
    int64_t n_cached;       /* tokens that were already in the cache (history) */
    int64_t n_gen;          /* tokens sampled, an end-of-generation token included */
    int64_t n_decode;       /* one-token forwards run */
    double tokenize_ms;
    double prefill_ms;
    double ttft_ms;
    double decode_ms;
    enum generate_stop stop;
    bool grammar_complete;  /* with a grammar: the output is a whole sentence of it */
};

/* What the cache holds: its tokens and the logits after the last one. A run
 * starts from it (empty, or a loaded cache) and leaves the prompt's state in
 * it (to save with prompt_only). */
struct generate_history {
    int32_t *tokens;   /* [n] the tokens in the cache, in order; malloc'd, owned */
    int64_t n;         /* == the backend's n_pos */
    float *logits;     /* [n_vocab] malloc'd, owned; see have_logits */
    bool have_logits;  /* logits are those after tokens[n - 1] */
};

/* Allocates the logits of an empty history. Returns IG_OK or IG_E_NOMEM. */
int generate_history_init(struct generate_history *h, int64_t n_vocab);
void generate_history_free(struct generate_history *h);

/* Runs the loop for `prompt` (len bytes, already checked by the caller; may
 * be empty when the history has logits) after the tokens of `hist` already
 * in the backend's cache. BOS is added only when the history is empty. The sampler sees the
 * history, the prompt and every generated token. On return `hist` holds the
 * history plus the prompt, with the logits after it until the first sample
 * (have_logits is false once sampling has used them). *stats is filled as
 * far as the run got, also on error and on interrupt. Returns IG_OK
 * (whatever the stop reason), IG_E_INPUT for a prompt that tokenizes to
 * nothing (with nothing to continue from) or to more tokens than the context
 * holds (one line with both numbers), or the status of a failed forward. */
int generate_run(struct backend *be, struct tok_vocab *vocab,
                 struct sampler *smp, const char *prompt, size_t len,
                 const struct generate_params *p, struct generate_history *hist,
                 struct generate_stats *stats);

#endif
