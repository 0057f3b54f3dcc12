/* ppl/ppl.h: the quality meter behind `ignite perplexity`, with
 * llama.cpp's llama-perplexity conventions so that figures can be put side
 * by side (docs/perplexity.md):
 *
 * - windows (ppl/window.c): a text's tokens (BOS first when the vocabulary
 *   adds one) cut into non-overlapping windows of n_ctx tokens, each run
 *   from an empty cache with its first token replaced by BOS (when the
 *   vocabulary adds one); the rows of the window's second half predict the
 *   token after them and are scored: rows first = n_ctx / 2 .. n_ctx - 2;
 * - scoring (ppl/score.c): a row's negative log-likelihood, perplexity
 *   exp(mean) with its standard error; a row's log-probabilities in
 *   llama.cpp's 16-bit record; a row's KL divergence from such a record and
 *   whether the two top tokens agree; the statistics over many rows;
 * - the base file (ppl/klfile.c): llama.cpp's `_logits_` file of records,
 *   byte for byte, so that either tool reads the other's.
 *
 * No I/O but the base file's, no backend: cli/cmd_perplexity.c runs the
 * model. Covered by tests/unit/test_ppl.c (hand-computed cases),
 * tests/cli/test_perplexity.py (numpy fp64 references, the file format,
 * refusals) and tests/fuzz/fuzz_klfile.c. */
#ifndef IGNITE_PPL_PPL_H
#define IGNITE_PPL_PPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- windows (ppl/window.c) ---------------------------------------------- */

/* The shortest window: its second half must score at least one token. */
#define PPL_MIN_CTX 3

struct ppl_plan {
    int64_t n_ctx;    /* tokens per window */
    int64_t n_chunk;  /* windows run */
    int64_t first;    /* n_ctx / 2: the first scored row of a window */
    int64_t n_scored; /* rows scored per window: n_ctx - 1 - first */
    int32_t bos;      /* replaces each window's first token; -1: none */
};

/* Plans the windows over n_tokens tokens: n_tokens / n_ctx of them, at most
 * max_chunks (<= 0: no limit). `bos` is the vocabulary's BOS when it adds
 * one, else -1. Returns IG_OK, or IG_E_INPUT (one line) when the text is
 * shorter than one window. n_ctx >= PPL_MIN_CTX. */
int ppl_plan_windows(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks, int32_t bos,
                     struct ppl_plan *p);

/* The n_ctx tokens window c feeds the model, into out: tokens[c * n_ctx ..]
 * with the first replaced by BOS (when p->bos >= 0). */
void ppl_window_tokens(const struct ppl_plan *p, const int32_t *tokens, int64_t c, int32_t *out);

/* True when row r (0 <= r < n_ctx) of a window is scored: its logits are
 * wanted and predict the window's token r + 1. */
bool ppl_row_scored(const struct ppl_plan *p, int64_t r);

/* ---- scoring (ppl/score.c) ----------------------------------------------- */

/* -log softmax(logits)[target] over n_vocab logits: exp of each logit less
 * the largest summed in double (llama.cpp's order of work). */
double ppl_nll(const float *logits, int64_t n_vocab, int32_t target);

/* uint16 words of one record (llama.cpp's nv): f32 scale and f32 smallest
 * log-probability, then one word per token, padded to an even count. */
int64_t ppl_record_words(int64_t n_vocab);

/* Encodes the row's log-probabilities as llama.cpp does: those within 16 of
 * the largest logit as round((logit - lo) / scale) with scale = (max - lo) /
 * 65535, lo = max(min, max - 16), the others 0; the header holds scale and
 * the log-probability of lo. Returns the row's nll for `target`. */
double ppl_encode_record(const float *logits, int64_t n_vocab, int32_t target, uint16_t *rec);

/* The log-probability record word i stands for (i < n_vocab). */
double ppl_record_logprob(const uint16_t *rec, int64_t i);

/* One row scored against a base record. */
struct ppl_kl_row {
    double nll;      /* this run's */
    double nll_base; /* the base's, from its record */
    double kl;       /* KL(base || this run): sum over tokens with a base
                      * log-probability above -16 of p_base (log p_base - log p) */
    bool same_top;   /* this run's most likely token is the base's (a token
                      * whose record word ties the base's largest counts) */
};

/* Scores a row's logits against its base record (llama.cpp's definitions). */
void ppl_kl_row(const float *logits, int64_t n_vocab, const uint16_t *rec, int32_t target,
                struct ppl_kl_row *out);

/* Sums over scored rows; zero-initialise. */
struct ppl_acc {
    int64_t count;
    double sum_nll, sum_nll2;
    double sum_nll_base, sum_nll_base2; /* with a base */
    double sum_kl, sum_kl2;
    int64_t n_same_top;
};

void ppl_acc_add_nll(struct ppl_acc *a, double nll);
void ppl_acc_add_kl(struct ppl_acc *a, const struct ppl_kl_row *r);
void ppl_acc_merge(struct ppl_acc *into, const struct ppl_acc *from);

/* Mean of n values and the standard error of the mean from the sums of the
 * values and of their squares: sqrt((mean(x^2) - mean^2) / (n - 1)); the
 * error is 0 when n < 2 or the variance is not positive. */
void ppl_mean_err(double sum, double sum2, int64_t n, double *mean, double *err);

/* The fraction-quantile of sorted values v[0..n) by linear interpolation
 * between v[floor(q (n - 1))] and the next (llama.cpp's percentile). */
double ppl_quantile(const float *v, int64_t n, double q);

/* What is reported over a set of rows. */
struct ppl_summary {
    int64_t count;
    double ppl, ppl_err;           /* exp(mean nll) and ppl * its standard error */
    double ppl_base, ppl_base_err; /* the base's, with a base */
    double kl_mean, kl_err;        /* mean KL divergence and its standard error */
    double kl_median, kl_p99, kl_max;
    double top1, top1_err;         /* fraction of rows whose top tokens agree, its error
                                    * sqrt(f (1 - f) / (n - 1)) */
};

/* Summarizes `a`; `kl` holds its a->count KL values (sorted here), or NULL
 * without a base. */
void ppl_summarize(const struct ppl_acc *a, float *kl, struct ppl_summary *s);

/* ---- the base file (ppl/klfile.c; format in docs/perplexity.md) ---------- */

#define PPL_FILE_MAGIC "_logits_"

struct ppl_file_header {
    int64_t n_ctx;   /* window length of the run that wrote it */
    int64_t n_vocab; /* tokens of the vocabulary (the record width) */
    int64_t n_chunk; /* windows recorded */
};

/* Bytes of the header and tokens, and of one window's records. */
uint64_t ppl_file_head_bytes(const struct ppl_file_header *h);
uint64_t ppl_file_chunk_bytes(const struct ppl_file_header *h);

/* Writes the header and the n_chunk * n_ctx text tokens (as tokenized, no
 * BOS replaced). `name` is quoted for messages. Returns IG_OK or IG_E_IO. */
int ppl_file_write_head(FILE *f, const char *name, const struct ppl_file_header *h,
                        const int32_t *tokens);

/* Appends n records of ppl_record_words(h->n_vocab) words. */
int ppl_file_write_records(FILE *f, const char *name, const struct ppl_file_header *h,
                           const uint16_t *recs, int64_t n);

/* Cuts a file written for h->n_chunk windows down to its first `keep`
 * (an interrupted run): the header rewritten, the records moved up over the
 * tokens of the windows left out, the file truncated. `f` is open for
 * reading and writing on a regular file. Returns IG_OK or IG_E_IO. */
int ppl_file_keep_chunks(FILE *f, const char *name, const struct ppl_file_header *h,
                         int64_t keep);

/* Reads and checks the header and tokens: the magic, sizes in range, a
 * vocabulary of model_vocab tokens (0: any), token ids below it, and (for a
 * regular file) a length of exactly the header's windows. *tokens is
 * malloc'd (n_chunk * n_ctx ids). Returns IG_OK or IG_E_INPUT / IG_E_IO /
 * IG_E_NOMEM after one line naming the problem. */
int ppl_file_read_head(FILE *f, const char *name, int64_t model_vocab,
                       struct ppl_file_header *h, int32_t **tokens);

/* Reads window `chunk`'s records (n_scored of them) into recs and checks
 * each header (finite scale >= 0, finite log-probability <= 0). Returns
 * IG_OK or IG_E_INPUT (truncated, corrupted) / IG_E_IO. */
int ppl_file_read_chunk(FILE *f, const char *name, const struct ppl_file_header *h,
                        int64_t chunk, uint16_t *recs);

/* Checks that nothing follows the last window (a stream: read to its end).
 * Returns IG_OK or IG_E_INPUT (trailing bytes) / IG_E_IO. */
int ppl_file_read_end(FILE *f, const char *name);

#endif
