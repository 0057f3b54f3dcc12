/* cli/pd.h: prefill and decode on different ranks of an MPI job (`mpirun
 * -np P+D ignite batch --pd P:D`), private to cli/.
 *
 * Ranks 0 .. P-1 prefill, ranks P .. P+D-1 decode; rank 0 also reads the
 * requests and writes the results (cmd_batch.c, as one process does).
 *   rank 0      hands each request (its line, seed and prompt tokens) to the
 *               prefill rank with the fewest in hand (at most -P each);
 *   prefill     starts a prompt once the decode rank with the most free
 *               blocks has room for the request's blocks and a slot (where
 *               none has, the prompt waits; nothing is dropped), runs
 *               prompts only (the engine's prompt_only + handoff: chunked,
 *               prompt blocks shared as in one process) and sends the cache
 *               in a saved cache's parts (kvcache/'s format) as it is
 *               written: the head, each layer's new rows as the layer loop
 *               writes them (gen_callbacks.on_layer; a recurrent state once
 *               it is the prompt's), the tokens and logits after the prompt;
 *   decode      assembles the parts, parses the line again, loads the
 *               cache as a history
 *               (--load-kv's path) and runs decode-only continuous
 *               batching: the first token is sampled here from the logits
 *               that came with the cache, by the request's own sampler and
 *               seed, so greedy and seeded outputs are one process's;
 *               the text and figures go back to rank 0.
 * Messages are MPI point to point (core/coll.h), sent without waiting
 * (ig_coll_isend) and taken as they come (ig_coll_poll), so no two ranks
 * wait for each other. A rank killed ends the job (MPI's handler: mpirun
 * names it); a rank alive but silent for IGNITE_TP_WATCHDOG seconds (600)
 * while rank 0 waits for work is named by rank 0, exit 7.
 * Covered by tests/tp/test_pd_cli.py. */
#ifndef IGNITE_CLI_PD_H
#define IGNITE_CLI_PD_H

#include "cli/gen_opts.h"
#include "generate/generate.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct grammar;
struct model;
struct tok_vocab;

/* A request's trip between ranks, in its result. */
struct pd_transfer {
    int prefill_rank, decode_rank;
    int64_t kv_bytes;    /* the cache as sent */
    double pack_ms;      /* writing it (prefill rank) and reading it (decode rank) */
    double transfer_ms;  /* receiving it on the decode rank */
    const char *path;    /* which way it moved: "host" (device -> host, MPI, host -> device)
                          * or "nccl" (device to device between CUDA ranks: pd_connect) */
};

struct pd_opts {
    int n_prefill, n_decode;
    struct backend *be;            /* this rank's (borrowed) */
    struct tok_vocab *vocab;
    const struct model *m;
    const struct gen_cli *defaults; /* a line's defaults (decode ranks parse lines again) */
    bool plain;                    /* --lines */
    const struct grammar *grammar; /* the command line's constraint, or NULL */
    volatile sig_atomic_t *interrupt;
    /* rank 0: each token of r (its time on rank 0's clock), before on_result;
     * NULL: none. want_times (every rank): the decode ranks keep the times */
    void (*on_token)(void *user, struct gen_request *r, int32_t token, int64_t t_ns);
    bool want_times;
    /* rank 0: request r ended (r->result filled); `err` its error line where
     * r->result.status is not IG_OK */
    void (*on_result)(void *user, struct gen_request *r, const char *text, size_t len,
                      const char *err, const struct pd_transfer *t);
    void *user;
};

struct pd;

/* True where argv asks for --pd (main.c: then every rank runs the command). */
bool cli_pd_asked(int argc, char **argv);

/* "P:D" (each 1..) into *p, *d; IG_E_USAGE after one line. */
int pd_parse(const char *arg, int *p, int *d);

/* --pd P:D against the job: MPI in the build, mpirun's ranks P + D.
 * IG_E_USAGE after one line (rank 0's). */
int pd_check_job(const char *cmd, int p, int d);

/* Collective: every rank's set-up status; IG_OK where all went well, else
 * the failing rank's, which rank 0 names in one line with its message. */
int pd_agree(int st, const char *msg);

/* This rank's part. IG_OK or IG_E_NOMEM. */
int pd_create(const struct pd_opts *o, struct pd **out);
void pd_free(struct pd *pd);

/* Collective, every rank after pd_create agreed: the way the caches move
 * (IGNITE_PD_XFER=nccl|host|auto, auto by default: NCCL where every rank's
 * backend is CUDA (backend_p2p_fits: any model, its recurrent states and
 * window layers too), the pools are of one type (and all under the window
 * rule or none), one prefill rank where a decode rank must hold a slot at
 * a cache's head (a hybrid's states, a window model's window blocks: more
 * than one could promise a slot twice, each spending a decode rank's whole
 * room as told) and NCCL loads on every rank (IGNITE_NCCL_LIB as for
 * --tp), its communicator then open; else host memory) and this rank's
 * engine. The same status on every rank: IG_OK; IG_E_USAGE for a bad
 * value or `nccl` where the backend or the options cannot take it
 * (IGNITE_PD_WHOLE=1), IG_E_DEVICE where NCCL cannot load, each after one
 * line (rank 0's) naming why; IG_E_NOMEM. */
int pd_connect(struct pd *pd);

/* This rank's engine (its pool's figures). */
const struct engine *pd_engine(const struct pd *pd);

/* Rank 0: queues r (its tokens, params with the seed picked, arrival;
 * borrowed until on_result) with its line as read (batch: the decode rank
 * parses it again for the rest of its parameters), or none (len 0, bench:
 * r's n_predict, ignore_eog and sampler alone). */
int pd_submit(struct pd *pd, struct gen_request *r, const char *line, size_t len,
              int64_t line_no);
/* Rank 0: requests submitted and not yet ended. */
int64_t pd_pending(const struct pd *pd);
/* Rank 0: one round (messages, hand-outs, this rank's prefill step). IG_OK,
 * or a status that ends the batch. */
int pd_step(struct pd *pd);

/* Ranks but 0: serve until rank 0 ends the batch. */
int pd_serve(struct pd *pd);

/* Rank 0: lets the others go and prints each rank's prompt and decode rows
 * (unless quiet). */
void pd_finish(struct pd *pd, bool quiet);

/* Rank 0, after pd_finish: j's "pd" member, every rank's rows, caches and
 * bytes (bench's JSON). False when out of memory. */
struct cJSON;
bool pd_ranks_json(const struct pd *pd, struct cJSON *j);

#endif
