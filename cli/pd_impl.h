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


/* Message kinds (MPI tags). */
enum { TAG_REQ = 900, TAG_KV, TAG_ROOM, TAG_SHIPPED, TAG_DONE, TAG_STOP, TAG_STATS, TAG_ALIVE };

/* rank 0 → prefill: then tokens[n_tokens] (int32), the line */
struct req_hdr {
    int64_t seq, line_no, n_tokens, line_len, need, n_predict, ignore_eog;
    int64_t special_text;       /* a harmony chat's: its text keeps the channel markers */
    struct sampler_params sp;   /* the seed picked */
    double ago_ms, tokenize_ms; /* since arrival, on rank 0's clock */
};

/* prefill → decode: then the line, then the saved cache */
struct kv_hdr {
    int64_t seq, line_no, line_len, kv_bytes, need, n_prompt, n_cached, n_predict, ignore_eog;
    int64_t special_text;
    struct sampler_params sp;
    double ago_ms, queue_ms, prefill_ms, pack_ms;
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
    int64_t prompt_rows, decode_rows, caches, kv_bytes, waited;
    double transfer_ms;
};

struct out { /* a send in flight and its buffer */
    void *buf;
    struct ig_coll_send_req *req;
};

/* A prompt on a prefill rank, then its cache waiting for a decode rank. */
struct pjob {
    struct gen_request r;
    struct req_hdr h;
    int32_t *tokens;
    char *line;
    char *msg;         /* kv_hdr + line + cache, once prefilled */
    size_t msg_bytes;
    struct pjob *next; /* the outbox */
    bool waited;       /* no decode rank had room for it when it was ready */
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
    int64_t t_recv_ns;
    double transfer_ms, pack_ms;
};

struct pd {
    struct pd_opts o;
    int rank, size;
    bool prefill, decode;     /* this rank's role */
    struct engine *e;
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
    struct pjob *outbox, *outbox_tail;
    struct room_msg *room;    /* [n_decode] each decode rank's, as last heard and spent */
    bool *room_known;
    /* decode ranks */
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
bool pd_ship(struct pd *pd); /* whether a cache went */
void pd_pjob_free(struct pjob *j);

/* pd_decode.c */
void pd_decode_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns);
int pd_decode_text(void *user, struct gen_request *r, const char *text, size_t len);
void pd_decode_done(void *user, struct gen_request *r);
void pd_receive_cache(struct pd *pd, size_t bytes, int from);
void pd_tell_room(struct pd *pd);

#endif
