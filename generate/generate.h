/* generate/generate.h: the generation engine: requests, the scheduler,
 * sequence state, stop strings and streaming, above the backends.
 *
 * A request is a prompt (token ids, already tokenized by the caller; maybe
 * after a history already in the cache, --load-kv) and how to continue it.
 * The engine keeps up to n_slots sequences in flight over one KV pool
 * (kvcache.h). Each step (engine_step) it
 *   - admits waiting requests in submission order while a slot is free and
 *     the pool can promise every block the request may grow into (prompt +
 *     n_predict); a request that must wait holds back every later one, so
 *     none waits for one that came after it; prompt blocks another sequence
 *     already computed (the same tokens from the start) are shared;
 *   - builds one batch: the decode row of every sequence that has a sampled
 *     token to feed back, then prompt chunks of admitted sequences in
 *     admission order within the row budget (max_rows, run's --chunk: the
 *     chunked prefill of Sarathi/vLLM);
 *   - runs it on the backend and, per sequence, samples (its own sampler and
 *     random stream: a request's tokens do not depend on the batch it ran in),
 *     streams text through the stop strings, and ends it on a stop reason,
 *     freeing its slot and blocks at once.
 * `ignite run` is this engine with one request; `ignite batch` and `ignite
 * bench --requests` with many.
 *
 * Timing (the definitions docs/cli.md documents), per request:
 *   arrival      when the request was read (set by the caller, before it
 *                tokenizes): TTFT counts from here, so queueing shows.
 *   TTFT         arrival to the moment the first token has been sampled.
 *   prefill      the steps that ran the request's prompt rows.
 *   decode       first sampled token to the last; decode ms/token = that /
 *                the number of rows fed back.
 *
 * Conversations (`ignite chat`, `run --save-kv` after generation): a request
 * with params.keep leaves its sequence in the engine when it ends. Its last
 * sampled token is fed first (one more row, not counted as decode), so the
 * cache holds every token and the logits after the last one; only at a full
 * context, where there is no position for it, is it left out. The kept
 * sequence holds its slot and blocks; result.kept names it. A later request
 * with `follows` = that id continues it: its prompt is prefilled after the
 * kept tokens (only the new tokens run), the kept logits give its first
 * token when the prompt is empty. A continued request that ends before its
 * prompt is all in the cache (Ctrl-C in the prefill) leaves the kept
 * sequence as it was: the turn is undone; one that fails after sampling
 * drops it. engine_kept / engine_kept_export read a kept sequence (to save
 * it), engine_drop frees it. A kept sequence never offers its blocks to
 * other requests (it may go back and write them again).
 * Covered by tests/generate/ and tests/cli/ (through `ignite run`, `batch`). */
#ifndef IGNITE_GENERATE_GENERATE_H
#define IGNITE_GENERATE_GENERATE_H

#include "backend/backend.h"
#include "decode/sampler.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tok_vocab;
struct grammar;

/* Why a request ended. */
enum gen_stop {
    GEN_STOP_NONE = 0,   /* it did not end (an error) */
    GEN_STOP_EOG,        /* the model produced an end-of-generation token */
    GEN_STOP_LIMIT,      /* n_predict tokens were generated */
    GEN_STOP_CONTEXT,    /* the context is full */
    GEN_STOP_INTERRUPT,  /* the interrupt flag was raised */
    GEN_STOP_OUTPUT,     /* on_text asked to stop (e.g. the reader closed the pipe) */
    GEN_STOP_PROMPT,     /* prompt_only: the prompt is in the cache, nothing sampled */
    GEN_STOP_STRING,     /* a stop string appeared in the text */
    GEN_STOP_GRAMMAR,    /* the grammar is complete and nothing may follow (or, with
                          * grammar_complete false, no token can continue it) */
};

/* "eog", "limit", "context", "interrupted", "output_closed", "prompt_only",
 * "stop", "grammar" ("none"). */
const char *gen_stop_name(enum gen_stop stop);

/* Speculative decoding (generate/spec.h): tokens guessed cheaply and
 * checked by the model in one step; the output is what the model alone
 * would sample (at temperature 0, the same tokens). */
struct gen_spec {
    bool lookup;                /* prompt lookup: drafts from earlier n-grams of the text */
    bool draft;                 /* the engine's draft model (engine_opts.draft) */
    int64_t n_max;              /* most tokens drafted for one step (<= engine_opts.spec_max) */
    int64_t n_min;              /* a draft shorter than this is not checked */
    double p_min;               /* draft model: drafting stops where its top token's
                                 * probability is below this */
    int64_t ngram_min, ngram_max; /* lookup: the n-gram sizes searched, longest first */
};

/* How to continue a prompt. */
struct gen_params {
    int64_t n_predict;          /* most tokens to generate (>= 1), or -1 for no limit */
    struct sampler_params sp;   /* sp.seed: this request's random stream */
    bool ignore_eog;            /* keep going past end-of-generation tokens */
    bool prompt_only;           /* stop after the prefill (GEN_STOP_PROMPT) */
    bool keep;                  /* keep the sequence when the request ends (above) */
    bool special_text;          /* its text writes control tokens out (a harmony chat's
                                 * channel markers, split by generate/harmony.h) */
    const char *const *stop;    /* stop strings (borrowed), n_stop of them */
    int n_stop;
    /* A constraint (grammar/grammar.h, borrowed), or NULL: each sequence gets
     * its own matcher, whose mask the sampler applies first; generation
     * stops when the grammar is done. */
    const struct grammar *grammar;
    struct gen_spec spec;       /* all zero: no speculation */
    /* With prompt_only: the caller takes the prefilled cache (and the logits
     * after the prompt) inside on_done, engine_handoff, to run the request
     * on elsewhere (prefill/decode separation, cli/pd.c); its blocks are
     * shared with later prompts as any prompt's are. */
    bool handoff;
};

/* What the cache holds before the prompt (--load-kv): its tokens and rows. */
struct gen_history {
    const int32_t *tokens;      /* [n] */
    int64_t n;
    const float *logits;        /* [n_vocab] after tokens[n - 1], or NULL */
    const struct kv_store *kv;  /* the rows, in blocks 0.. in order, and the recurrent
                                 * layers' state in slot 0 (kv_file_read_body) */
    /* Or (kv NULL) the rows already in the pool's blocks of this sequence
     * and the recurrent states in its slot (batch --pd's NCCL path:
     * engine_history_reserve at the cache's head, backend_kv_recv_part into
     * its tables and slot): adopted at admission into that slot, no copy;
     * it is left empty (engine_history_release it all the same). */
    struct kv_seq *blocks;
};

/* What happened to a request (filled by the engine as it goes). */
struct gen_result {
    enum gen_stop stop;
    int status;                 /* IG_OK, or the error that ended it */
    int64_t n_prompt;           /* prompt tokens prefilled by this request (BOS included;
                                 * after an interrupt in the prefill, the rows done) */
    int64_t n_cached;           /* tokens in the cache before it: history or shared blocks */
    int64_t n_gen;              /* tokens sampled, an end-of-generation token included */
    int64_t n_decode;           /* rows fed back */
    double tokenize_ms;         /* set by the caller */
    double queue_ms;            /* arrival to admission */
    double prefill_ms, ttft_ms, decode_ms;
    bool ttft_set;              /* ttft_ms was measured: a token was sampled (or a
                                 * prompt_only prefill ended); not after Ctrl-C in the
                                 * prefill. prefill_ms is measured when n_prompt > 0,
                                 * decode_ms when n_decode > 0. */
    int64_t kept;               /* params.keep: the kept sequence's id, 0 when none */
    int64_t t_first_ns, t_last_ns; /* first and last sampled token (ig_now_ns), 0 = none */
    bool grammar;               /* the request had a grammar ... */
    bool grammar_complete;      /* ... and its output is a whole sentence of it */
    /* speculation: steps that checked a draft, tokens drafted, drafted tokens
     * accepted (the mean accepted length is n_accepted / n_verify; a verify
     * step yields that + 1 tokens) */
    int64_t n_verify, n_drafted, n_accepted;
    double verify_ms;           /* wall time of the model's steps that verified its drafts */
    double draft_ms;            /* of the draft model's runs that drafted for it */
    bool spec;                  /* the request speculated (gen_spec) */
};

struct gen_request {
    /* in (the caller's; borrowed until on_done) */
    const int32_t *tokens;      /* [n_tokens] the prompt's ids (BOS included where wanted) */
    int64_t n_tokens;
    const struct gen_history *history; /* NULL: an empty cache */
    int64_t follows;            /* 0, or a kept sequence to continue (not with history) */
    struct gen_params params;
    int64_t t_arrival_ns;       /* ig_now_ns() when it was read */
    void *user;                 /* the caller's */
    /* out */
    struct gen_result result;
};

/* A prefilling sequence's cache after one layer of a step (on_layer):
 * positions [0, n_pos) of that layer are written, [pos0, n_pos) by this
 * step; final where n_pos is the whole prompt (a recurrent layer's state
 * is then the prompt's). The store, its table, the window table where the
 * backend keeps one (else NULL) and the state slot, valid during the call.
 * The store holds positions [from, n_pos) for sure (0 on the prompt's
 * first step, pos0 on the next: what earlier calls did not give): the
 * CPU's holds every position, the CUDA backend's host copy only these.
 * Under engine_opts.layer_device kv is NULL: table, wtable and slot are
 * the sequence's own in the backend's pool (the table every position [0,
 * n_pos), the window table what its window still reaches), which the hook
 * reads on the device (backend_kv_send_part). */
struct gen_layer_rows {
    const struct kv_store *kv;
    const int32_t *table, *wtable;
    int64_t slot, from, pos0, n_pos;
    bool final;
};

/* What the engine tells its caller. */
struct gen_callbacks {
    /* Text of request r, in order, as it becomes final (whole UTF-8, not
     * part of a possible stop string). Returns 0 to go on, non-zero to stop
     * r (GEN_STOP_OUTPUT). May be NULL. */
    int (*on_text)(void *user, struct gen_request *r, const char *text, size_t len);
    /* Token `token` of r was sampled at time t_ns (ig_now_ns). May be NULL. */
    void (*on_token)(void *user, struct gen_request *r, int32_t token, int64_t t_ns);
    /* Layer `layer` of params.handoff request r's prompt rows of a step is in
     * the cache (backend_batch.on_layer: the CPU's and the CUDA backend's
     * layer loops). May be NULL. */
    void (*on_layer)(void *user, struct gen_request *r, int64_t layer,
                     const struct gen_layer_rows *rows);
    /* r ended: r->result is complete (result.kept is set after it returns). */
    void (*on_done)(void *user, struct gen_request *r);
    void *user;
};

struct engine_opts {
    int64_t max_rows;           /* the row budget of a step (<= the backend's) */
    bool share_prefixes;        /* share prompt blocks between requests */
    bool print_special;         /* render control tokens' text */
    volatile sig_atomic_t *interrupt; /* may be NULL; non-zero ends everything soon */
    struct gen_callbacks cb;
    int64_t spec_max;           /* most tokens a request may draft a step (0: no
                                 * speculation); sizes the logits of verify steps */
    bool spec_fixed_cost;       /* the draft length from fixed step costs, not measured
                                 * ones (reproducible tests; generate/spec.h) */
    bool layer_device;          /* on_layer reads the rows on the device itself: no host
                                 * copy (backend_batch.layer_device; a CUDA backend's,
                                 * batch --pd's NCCL path) */
    struct backend *draft;      /* a draft model's backend (borrowed; its vocabulary
                                 * checked by spec_vocab_check, its n_slots and n_ctx
                                 * the engine's backend's), or NULL */
};

struct engine;

/* An engine over backend `be` (its slots, context and pool size) and the
 * model's vocabulary; without one (NULL: a synthetic model in a benchmark)
 * it runs on token ids alone: no text, no end-of-generation token. Returns
 * IG_OK or IG_E_NOMEM. */
int engine_create(struct backend *be, struct tok_vocab *vocab, const struct engine_opts *o,
                  struct engine **out);
void engine_free(struct engine *e);

/* Queues r (borrowed until its on_done). Refuses, with one line and without
 * queueing, a request that can never run: no tokens and nothing to continue
 * from, more tokens than the context holds (IG_E_INPUT), more KV blocks than
 * the whole pool has (IG_E_NOMEM), bad sampling parameters (IG_E_USAGE), a
 * grammar without a vocabulary (IG_E_USAGE), speculation the engine cannot
 * do (a draft model it has not, more drafted tokens than spec_max: IG_E_USAGE),
 * `follows` naming no kept
 * sequence or one another queued request follows, or with a history
 * (IG_E_USAGE). */
int engine_submit(struct engine *e, struct gen_request *r);

/* Runs one step (admission, one batch, sampling; requests that end get
 * on_done). Returns IG_OK, or the backend's error (every request in flight
 * then ends with it). */
int engine_step(struct engine *e);

/* Requests queued or in flight. */
int64_t engine_pending(const struct engine *e);
/* Requests in flight. */
int engine_running(const struct engine *e);

/* The kept sequence `id`: the token ids in its cache, how many, and the
 * logits after the last [n_vocab] (pointers valid until it is continued or
 * dropped). IG_OK, or IG_E_USAGE when no sequence of that id is kept. */
int engine_kept(const struct engine *e, int64_t id, const int32_t **tokens, int64_t *n,
                const float **logits);

/* Its cache as a host store, table and state slot (backend_kv_export), to
 * save it. */
int engine_kept_export(struct engine *e, int64_t id, const struct kv_store **st,
                       const int32_t **table, int64_t *slot);

/* Cuts the kept sequence `id` back to its first n tokens (0 < n <= what it
 * holds): a chat whose answer the template writes otherwise than the model
 * did (harmony drops the analysis) goes on from where the answer began.
 * Its logits are gone: the request that follows it must bring tokens. Only
 * for a model without recurrent layers (their state cannot go back).
 * IG_OK, or IG_E_USAGE (no such sequence, n out of range, a recurrent
 * state). */
int engine_kept_rewind(struct engine *e, int64_t id, int64_t n);

/* Inside on_done of a params.handoff request that ended GEN_STOP_PROMPT:
 * its cache (backend_kv_export: store, table, state slot, n_pos
 * positions; with_kv false: kv and table NULL, nothing exported, where
 * on_layer sent the rows already), its tokens [n_pos] and the logits after
 * the last [n_vocab], valid until on_done returns. IG_OK, or the backend's
 * error. */
struct gen_handoff {
    const struct kv_store *kv;
    const int32_t *table;
    int64_t slot, n_pos;
    const int32_t *tokens;
    const float *logits;
};
int engine_handoff(struct engine *e, const struct gen_request *r, bool with_kv,
                   struct gen_handoff *out);

/* Frees the kept sequence `id` (no-op when none is kept). */
void engine_drop(struct engine *e, int64_t id);

/* KV pool figures: blocks, the most in use at once, blocks shared. */
const struct kv_pool *engine_pool(const struct engine *e);

/* A history's blocks reserved in the pool ahead of its request (batch
 * --pd's decode rank, at a cache's head): room for max_pos positions, the
 * tables covering n_pos (the window table what a row at n_pos sees), and
 * where the model has recurrent layers a free slot held for it, *slot
 * (else -1: any free slot at admission), which its request alone takes at
 * admission; its rows and the recurrent layers' states in that slot are
 * the caller's to fill on the device, the request's gen_history.blocks.
 * IG_OK, or IG_E_NOMEM with one line when the pool cannot promise them or
 * no slot is free now. Release drops what it still holds (nothing once
 * adopted) and frees it. */
int engine_history_reserve(struct engine *e, int64_t n_pos, int64_t max_pos, struct kv_seq *s,
                           int *slot);
void engine_history_release(struct engine *e, struct kv_seq *s);

#endif
