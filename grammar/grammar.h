/* grammar/grammar.h: constrained generation. A GBNF grammar (llama.cpp's
 * syntax, docs/grammar.md) or a JSON schema is compiled once into a
 * byte-level pushdown automaton; each sequence being generated gets a
 * matcher that says which tokens may come next and follows the tokens
 * actually chosen.
 *
 *   struct grammar          the compiled rules: immutable, shared freely
 *                           (across sequences and threads)
 *   struct grammar_vocab    the vocabulary's token bytes as a trie, with the
 *                           end-of-generation ids: one per model, immutable
 *   struct grammar_matcher  one sequence: where it is in the grammar, and
 *                           the caches its masks are computed from; cheap to
 *                           create (the caches grow as it runs); one thread
 *                           at a time
 *
 * The generation loop, per token:
 *
 *   grammar_matcher_mask(m, logits)     disallowed tokens' logits -> -inf
 *                                       (or install grammar_mask_hook in the
 *                                       sampler: it calls this first)
 *   tok = sample(logits)
 *   grammar_matcher_accept(m, tok)      follow it
 *   grammar_matcher_done(m)             stop: the grammar is complete and
 *                                       nothing more may follow
 *
 * What a token stands for is the bytes it prints in generated text
 * (tok_piece without special tokens, and the stream's first-token rule for
 * SentencePiece's space prefix). Special tokens never match text; the
 * model's end-of-generation tokens are allowed exactly when the text so far
 * is complete. A token may span several grammar symbols or end inside a
 * UTF-8 character: the matcher works on bytes.
 *
 * Covered by tests/grammar/. */
#ifndef IGNITE_GRAMMAR_GRAMMAR_H
#define IGNITE_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grammar;
struct grammar_vocab;
struct grammar_matcher;
struct tok_vocab;

/* ---- compiling ---------------------------------------------------------- */

/* Compiles GBNF text of len bytes. `source` names it in messages (a file
 * path, "--grammar"). Returns IG_OK and *out (free with grammar_free), or
 * IG_E_USAGE after one line "SOURCE:LINE:COL: problem" (syntax, an undefined
 * rule, no root, a rule that can match nothing, left recursion, a size
 * limit), or IG_E_NOMEM. */
int grammar_from_gbnf(const char *text, size_t len, const char *source, struct grammar **out);

/* Converts a JSON schema (len bytes of JSON text) to GBNF, as
 * docs/grammar.md describes, and compiles it. Returns IG_OK and *out,
 * IG_E_USAGE after one line naming SOURCE and the JSON pointer of the
 * problem (an unsupported keyword, a bad value, an unresolved $ref), or
 * IG_E_NOMEM. */
int grammar_from_json_schema(const char *json, size_t len, const char *source,
                             struct grammar **out);

/* The grammar of any one JSON value (`--format json`). */
int grammar_any_json(struct grammar **out);

/* The GBNF text a JSON schema converts to, malloc'd in *gbnf (NUL
 * terminated). Same returns as grammar_from_json_schema. */
int grammar_schema_to_gbnf(const char *json, size_t len, const char *source, char **gbnf);

void grammar_free(struct grammar *g);

/* ---- the vocabulary ------------------------------------------------------ */

/* Builds the token trie of a vocabulary. Returns IG_OK and *out, or
 * IG_E_NOMEM. */
int grammar_vocab_build(const struct tok_vocab *v, struct grammar_vocab **out);
void grammar_vocab_free(struct grammar_vocab *gv);
int64_t grammar_vocab_n_tokens(const struct grammar_vocab *gv);

/* ---- one sequence -------------------------------------------------------- */

/* A matcher at the start of g over gv's tokens (both must outlive it).
 * allow_eog false: end-of-generation tokens are never allowed (the run
 * ignores them). Returns IG_OK and *out, or IG_E_NOMEM. */
int grammar_matcher_create(const struct grammar *g, const struct grammar_vocab *gv,
                           bool allow_eog, struct grammar_matcher **out);
void grammar_matcher_free(struct grammar_matcher *m);

/* Sets logits[id] to -inf for every token id in [0, n_tokens) the grammar
 * does not allow next. Returns the number of tokens allowed (0: no token of
 * the vocabulary can continue the text), or -1 after one line when out of
 * memory (the logits are then all -inf). */
int64_t grammar_matcher_mask(struct grammar_matcher *m, float *logits);

/* The same as a sampler hook (decode/sampler.h's sampler_mask_fn); user is
 * the matcher. */
void grammar_mask_hook(void *user, float *logits, int64_t n_logits);

/* Follows token `token`. Returns IG_OK, or IG_E_INPUT after one line when
 * the grammar does not allow it (the state is unchanged), or IG_E_NOMEM.
 * An end-of-generation token is allowed only when complete; it leaves the
 * state as it is. */
int grammar_matcher_accept(struct grammar_matcher *m, int32_t token);

/* Follows raw bytes (tests, prefilled text). IG_OK, IG_E_INPUT when s is
 * not a continuation the grammar allows (state unchanged), IG_E_NOMEM. */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t n);

/* True when the text so far is a whole sentence of the grammar. */
bool grammar_matcher_complete(const struct grammar_matcher *m);

/* True when complete and no byte may follow: generation should stop. */
bool grammar_matcher_done(const struct grammar_matcher *m);

/* The most bytes the matcher's caches may hold before it drops them and
 * rebuilds from its state (512 MiB unless set; an engine with many
 * sequences gives each a share). */
void grammar_matcher_set_budget(struct grammar_matcher *m, size_t bytes);

/* Tokens the matcher allowed in its last mask (for reports). */
int64_t grammar_matcher_last_allowed(const struct grammar_matcher *m);

#endif
