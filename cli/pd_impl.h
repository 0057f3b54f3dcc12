/* cli/pd_impl.h: what the files of batch --pd share (cli/pd.h): the
 * messages, a request on each kind of rank, a rank's state, and the calls
 * between pd.c (the checks, the sending, rank 0 and the round every rank
 * runs), pd_prefill.c (a prefill rank's part) and pd_decode.c (a decode
 * rank's). Private to them. */
#ifndef IGNITE_CLI_PD_IMPL_H
#define IGNITE_CLI_PD_IMPL_H

#include "cli/batch_request.h"
#include "cli/pd.h"
#include "kvcache/kvcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* Message kinds (MPI tags). A cache goes prefill → decode in parts, in
 * this order (MPI keeps one sender's order): TAG_KV_HEAD when its prompt
 * is admitted, TAG_KV_ROWS as each layer of a chunk is written (and where
 * the rank sent less, the rest after the prompt), TAG_KV last, or
 * TAG_KV_DROP where the prompt failed. */
enum { TAG_REQ = 900, TAG_KV, TAG_ROOM, TAG_SHIPPED, TAG_DONE, TAG_STOP, TAG_STATS, TAG_ALIVE,
       TAG_KV_HEAD, TAG_KV_ROWS, TAG_KV_DROP };

/* rank 0 → prefill: then tokens[n_tokens] (int32), the line */
struct req_hdr {
    int64_t seq, line_no, n_tokens, line_len, need, n_predict, ignore_eog;
    int64_t special_text;       /* a harmony chat's: its text keeps the channel markers */
    struct sampler_params sp;   /* the seed picked */
    double ago_ms, tokenize_ms; /* since arrival, on rank 0's clock */
};

/* prefill → decode: TAG_KV_HEAD's, then the line and the saved cache's head
 * (kv_file_write_head); TAG_KV's, with every figure, then the token ids and
 * logits (kv_file_write_tokens) */
struct kv_hdr {
    int64_t seq, line_no, line_len, kv_bytes, need, n_prompt, n_cached, n_predict, ignore_eog;
    int64_t special_text;
    struct sampler_params sp;
    double ago_ms, queue_ms, prefill_ms, pack_ms;
};

/* prefill → decode, TAG_KV_ROWS: then layer `layer`'s part, rows [p0, p1)
 * (kv_file_write_layer; a recurrent layer's state: 0, n_pos); or, marked
 * nccl, nothing: the layer's part follows by NCCL (backend_kv_send_part:
 * the blocks holding the rows, or the state), whose receives the decode
 * rank queues at once (both on the device's transfer stream) */
struct rows_hdr {
    int64_t seq, layer, p0, p1, nccl;
};

/* decode → prefill ranks: what a new request may still take */
struct room_msg {
    int64_t blocks, slots, total;
};

/* any → rank 0: a request ended (then its text, its error line, n_times
 * tokens' times (ns before the message, int64) and ids (int32)) */
struct done_hdr {
    int64_t seq, status, stop, n_prompt, n_cached, n_gen, n_decode, ttft_set, grammar,
        grammar_complete, text_len, err_len, prefill_rank, kv_bytes, has_first, n_times;
    double queue_ms, prefill_ms, ttft_ms, decode_ms, first_ago_ms, last_ago_ms, pack_ms,
        transfer_ms;
};

/* every rank → rank 0 at the end */
struct stats_msg {
    int64_t prompt_rows, decode_rows, caches, kv_bytes, waited, messages;
    double transfer_ms;
    /* a prefill rank's time: in the engine's steps (its layer hooks included),
     * writing and posting the caches' parts, with no prompt to run while its
     * sends were in flight, and with prompts held for a decode rank's room */
    double compute_ms, pack_ms, send_wait_ms, room_wait_ms;
};

struct out { /* a send in flight and its buffer */
    void *buf;
    struct ig_coll_send_req *req;
};

/* A request on rank 0's queue, or a prompt on a prefill rank: held until a
 * decode rank has room for it, then in the engine, its cache leaving layer
 * by layer. */
struct pjob {
    struct gen_request r;
    struct req_hdr h;
    int32_t *tokens;
    char *line;
    char *msg;         /* rank 0's queue: the request's message */
    size_t msg_bytes;
    struct pjob *next; /* rank 0's queue; a prefill rank's held ones */
    bool waited;       /* no decode rank had room for it when it came */
    int to;            /* the decode rank its cache goes to, once admitted; else -1 */
    int64_t sent;      /* positions of every layer sent */
    bool state_sent;   /* the recurrent layers' states (the prompt's last rows) */
    int64_t kv_bytes;  /* the cache's bytes sent so far */
    double pack_ms;
    int failed;        /* a part could not be written: the status */
    char err[256];
};

/* A request decoding on a decode rank. */
struct djob {
    struct gen_request r;
    struct kv_hdr h;
    int prefill_rank;
    struct batch_request in;
    struct grammar *grammar;
    struct gen_history hist;
    int32_t *tokens;
    float *logits;
    struct kv_store *kv;
    char *text;
    size_t len, cap;
    int64_t *times;          /* each token's time, where rank 0 asks (on_token) */
    int32_t *toks;
    int64_t n_times, cap_times;
    int64_t t_recv_ns;      /* its last part's arrival */
    double transfer_ms, pack_ms, last_ms;
    /* while its cache arrives (TAG_KV_HEAD .. TAG_KV) */
    char *line;
    struct kv_file_reader rd; /* the cache's head */
    int64_t *got;             /* [n_layer] positions of each layer arrived */
    int failed;               /* a part could not be read: the status, told at TAG_KV */
    char err[256];
    struct kv_seq blocks;     /* the NCCL path: its blocks reserved in this rank's pool at
                               * the head, the rows received into them (not kv); adopted
                               * by the engine at admission (gen_history.blocks) */
    int slot;                 /* and the engine's slot held with them, the recurrent
                               * layers' states received into it (-1: none, a model
                               * without such layers) */
    struct engine *e;         /* the pool's, where blocks were reserved */
    struct djob *next;        /* pd.arriving */
};

struct pd {
    struct pd_opts o;
    int rank, size;
    bool prefill, decode;     /* this rank's role */
    struct engine *e;
    struct engine_opts eo;    /* its options (pd_connect makes it) */
    bool nccl;                /* the caches move by NCCL (pd_connect) */
    struct gpu_p2p *p2p;      /* then the communicator of every rank */
    char xfer_why[256];       /* why the host path, where auto took it */
    int64_t n_slots, n_blocks;
    unsigned char model_id[KV_MODEL_ID_BYTES];
    struct kv_memory *layers; /* what a cache must hold */
    struct out *outs;
    int64_t n_outs, cap_outs;
    /* rank 0 */
    struct gen_request **waiting; /* by seq, until their result */
    int64_t n_seq, cap_waiting, n_pending;
    struct pjob *queue, *queue_tail; /* requests not yet handed to a prefill rank */
    int64_t *in_hand;         /* [n_prefill] requests each prefill rank holds */
    int64_t *heard_ns;        /* [size] the last message from each rank */
    double watch_s;
    /* prefill ranks */
    struct pjob *outbox, *outbox_tail; /* requests held for a decode rank's room */
    bool whole;               /* IGNITE_PD_WHOLE=1: every part after the prompt (A/B) */
    struct room_msg *room;    /* [n_decode] each decode rank's, as last heard and spent */
    bool *room_known;
    /* decode ranks */
    struct djob *arriving;    /* caches still arriving */
    int64_t live_need, live_n;
    struct room_msg told;     /* the last room sent */
    bool told_once;
    /* the end */
    bool stop;
    int64_t alive_ns;
    struct stats_msg stats;
    struct stats_msg *all;    /* rank 0, after pd_finish: every rank's */
};

/* pd.c */
const char *pd_role_name(const struct pd *pd, int rank);
/* A rank other than 0 cannot go on: one line naming it, every rank ends. */
_Noreturn void pd_fatal(const struct pd *pd, int st, const char *what);
/* Sends buf (owned from here; freed once sent) to `to`; or a copy of v. */
void pd_post(struct pd *pd, void *buf, size_t bytes, int to, int tag);
void pd_post_copy(struct pd *pd, const void *v, size_t bytes, int to, int tag);
/* Frees the sends that went. Returns whether any is still in flight. */
bool pd_progress(struct pd *pd);
/* Receives the message ig_coll_poll announced into a new buffer. */
char *pd_take(struct pd *pd, size_t bytes, int from, int tag);
/* A request's end to rank 0: its result, text, error line and (j) token times. */
void pd_send_done(struct pd *pd, int64_t seq, const struct gen_result *res, const char *text,
                  size_t len, const char *err, const struct pd_transfer *t,
                  const struct djob *j);
/* A request that failed before any result: its status and line. */
void pd_send_error(struct pd *pd, int64_t seq, int st, const char *err);

/* pd_prefill.c */
void pd_prefill_done(void *user, struct gen_request *r); /* the engine's on_done */
void pd_take_request(struct pd *pd, char *buf, size_t bytes);
/* Admits held requests while a decode rank has room. Whether any went. */
bool pd_admit(struct pd *pd);
void pd_pjob_free(struct pjob *j);
void pd_prefill_layer(void *user, struct gen_request *r, int64_t layer,
                      const struct gen_layer_rows *rows); /* the engine's on_layer */

/* pd_decode.c */
void pd_decode_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns);
int pd_decode_text(void *user, struct gen_request *r, const char *text, size_t len);
void pd_decode_done(void *user, struct gen_request *r);
/* A part of a cache (TAG_KV_HEAD, TAG_KV_ROWS, TAG_KV, TAG_KV_DROP). */
void pd_receive_part(struct pd *pd, size_t bytes, int from, int tag);
void pd_djob_free(struct djob *j);
void pd_tell_room(struct pd *pd);

#endif
