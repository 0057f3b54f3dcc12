/* cli/pd_prefill.c: a prefill rank of batch --pd (cli/pd.h): requests
 * from rank 0 held until a decode rank has room for them, then into its
 * engine, prompt only; each prompt's cache sent as it is written, in the
 * parts of a saved cache (kvcache/'s format, kv_file_write_head/_layer/
 * _tokens): the head when the prompt is admitted, each layer's new rows as
 * the layer loop writes them (the engine's on_layer, on the CPU or CUDA
 * backend, while the next layers and the next prompts run: the sends are
 * not waited for), the token ids and logits after the prompt. On the NCCL
 * path (pd_connect) a layer's part (its rows, or a recurrent state once
 * final) goes device to device instead, after its header. Covered by
 * tests/tp/test_pd_cli.py. */
#include "cli/pd_impl.h"

#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_pjob_free(struct pjob *j)
{
    if (!j)
        return;
    free(j->tokens);
    free(j->line);
    free(j->msg);
    free(j);
}

/* A message being written: a header, then what kv_file_write_* put. */
struct msg {
    FILE *f;
    char *buf;
    size_t bytes;
};

static bool msg_open(struct msg *m, const void *hdr, size_t n)
{
    *m = (struct msg){0};
    m->f = open_memstream(&m->buf, &m->bytes);
    return m->f && fwrite(hdr, 1, n, m->f) == n;
}

/* Sends the message (st: how its writing went) to decode rank j->to; its
 * bytes past `hdr` count as the cache's. A failure is kept in j. */
static void msg_post(struct pd *pd, struct pjob *j, struct msg *m, int st, size_t hdr, int tag)
{
    if (!m->f || fclose(m->f) != 0)
        st = ig_error(IG_E_NOMEM, "out of memory for the request's cache");
    if (st == IG_OK && m->bytes > IG_COLL_MESSAGE_MAX)
        st = ig_error(IG_E_NOMEM, "a part of the request's cache is %.0f MiB, over the %.0f MiB "
                      "one transfer holds", (double)m->bytes / 1048576.0,
                      (double)IG_COLL_MESSAGE_MAX / 1048576.0);
    if (st != IG_OK) {
        free(m->buf);
        if (!j->failed)
            j->failed = st;
        return;
    }
    j->kv_bytes += (int64_t)(m->bytes - hdr);
    pd->stats.messages++;
    pd_post(pd, m->buf, m->bytes, j->to, tag);
}

/* Whether layer `layer` has a part due past what was sent, up to n_pos
 * (final: the whole prompt), and its header: a paged layer's new rows; a
 * recurrent layer's state where final (the prompt's: rows 0 .. n_pos);
 * nothing for a shared layer. */
static bool part_due(const struct pd *pd, const struct pjob *j, int64_t layer, int64_t n_pos,
                     bool final, struct rows_hdr *h)
{
    enum kv_kind kind = backend_kv_memory(pd->o.be)->layers[layer].kind;
    bool state = kind == KV_RECURRENT;
    *h = (struct rows_hdr){.seq = j->h.seq, .layer = layer, .p0 = state ? 0 : j->sent,
                           .p1 = n_pos, .nccl = pd->nccl};
    return kind != KV_SHARED && (state ? final && !j->state_sent : n_pos > j->sent);
}

/* Layer `layer`'s part due (part_due), through host memory. */
static void send_layer(struct pd *pd, struct pjob *j, int64_t layer, const struct kv_store *kv,
                       const int32_t *table, const int32_t *wtable, int64_t slot, int64_t n_pos,
                       bool final)
{
    struct rows_hdr h;
    if (!part_due(pd, j, layer, n_pos, final, &h))
        return;
    struct msg m;
    int st = msg_open(&m, &h, sizeof h)
                 ? kv_file_write_layer(m.f, "'the cache sent'", kv, table, wtable, slot, layer,
                                       h.p0, h.p1)
                 : IG_E_NOMEM;
    msg_post(pd, j, &m, st, sizeof h, TAG_KV_ROWS);
}

/* The NCCL path (rows->kv NULL: the rows are in the pool, rows->table,
 * wtable and slot the sequence's own there): the header over MPI first,
 * marked, then layer `layer`'s part due (part_due) by NCCL on the transfer
 * stream (it goes once the decode rank, reading the header, has posted the
 * receives, while this rank's next layers run; its next step waits for
 * it): the blocks holding the rows, or the state from its slot. */
static void send_layer_nccl(struct pd *pd, struct pjob *j, int64_t layer,
                            const struct gen_layer_rows *rows)
{
    struct rows_hdr h;
    if (!part_due(pd, j, layer, rows->n_pos, rows->final, &h))
        return;
    pd->stats.messages++;
    pd_post_copy(pd, &h, sizeof h, j->to, TAG_KV_ROWS);
    struct backend_p2p_seq at = {.table = rows->table, .wtable = rows->wtable,
                                 .slot = rows->slot, .n_pos = j->h.n_tokens};
    int64_t bytes = 0;
    int st = backend_kv_send_part(pd->o.be, pd->p2p, j->to, &at, layer, h.p0, h.p1, &bytes);
    if (st != IG_OK) /* (the decode rank waits on these bytes: no going on) */
        pd_fatal(pd, st, "a layer's part could not go by NCCL (above)");
    j->kv_bytes += bytes;
}

/* The engine's on_layer: this step's rows of the layer leave now. */
void pd_prefill_layer(void *user, struct gen_request *r, int64_t layer,
                      const struct gen_layer_rows *rows)
{
    struct pd *pd = user;
    struct pjob *j = r->user;
    if (pd->whole || j->failed)
        return;
    int64_t t0 = ig_now_ns();
    char err[sizeof j->err] = "";
    ig_error_capture(err, sizeof err);
    if (!rows->kv)
        send_layer_nccl(pd, j, layer, rows);
    else if (rows->from > j->sent) /* (the store lacks rows not sent yet: never by the engine) */
        j->failed = ig_error(IG_E_INTERNAL, "layer %lld's rows from %lld were not sent, but "
                             "the cache holds them from %lld only", (long long)layer,
                             (long long)j->sent, (long long)rows->from);
    else
        send_layer(pd, j, layer, rows->kv, rows->table, rows->wtable, rows->slot, rows->n_pos,
                   rows->final);
    ig_error_capture(NULL, 0);
    if (j->failed && !j->err[0])
        memcpy(j->err, err, sizeof err);
    if (layer == pd->o.m->hp.n_layer - 1) { /* every layer has these rows now */
        j->sent = rows->n_pos;
        j->state_sent |= rows->final;
    }
    pd_progress(pd); /* (MPI moves the sends on inside its calls) */
    double ms = (double)(ig_now_ns() - t0) / 1e6;
    j->pack_ms += ms;
    pd->stats.pack_ms += ms;
}

/* The prompt is in the cache: what was not sent yet (every part where
 * IGNITE_PD_WHOLE), then the token ids, logits and figures (TAG_KV). */
static int finish(struct pd *pd, struct pjob *j)
{
    if (j->failed) /* a part could not be written */
        return j->failed;
    int64_t t0 = ig_now_ns();
    struct gen_handoff ho;
    bool rest = j->sent < j->h.n_tokens || !j->state_sent;
    if (rest && pd->nccl) /* (on_layer sent every row by NCCL: the engine's promise) */
        return ig_error(IG_E_INTERNAL, "a prompt of %lld tokens ended with %lld sent by NCCL",
                        (long long)j->h.n_tokens, (long long)j->sent);
    int st = engine_handoff(pd->e, &j->r, rest, &ho);
    if (st != IG_OK)
        return st;
    if (ho.n_pos != j->h.n_tokens || !ho.logits) /* (what the head announced) */
        return ig_error(IG_E_INTERNAL, "a prompt of %lld tokens left %lld positions%s",
                        (long long)j->h.n_tokens, (long long)ho.n_pos,
                        ho.logits ? "" : " and no logits");
    for (int64_t l = 0; rest && l < pd->o.m->hp.n_layer; l++)
        send_layer(pd, j, l, ho.kv, ho.table, NULL, ho.slot, ho.n_pos, true);
    if (j->failed)
        return j->failed;
    const struct gen_result *res = &j->r.result;
    struct kv_hdr h = {
        .seq = j->h.seq, .line_no = j->h.line_no, .line_len = j->h.line_len,
        .n_predict = j->h.n_predict, .ignore_eog = j->h.ignore_eog, .sp = j->h.sp,
        .special_text = j->h.special_text, .need = j->h.need,
        .n_prompt = res->n_prompt, .n_cached = res->n_cached, .queue_ms = res->queue_ms,
        .prefill_ms = res->prefill_ms,
        .ago_ms = (double)(ig_now_ns() - j->r.t_arrival_ns) / 1e6,
    };
    struct msg m;
    int64_t n_vocab = pd->o.m->hp.n_vocab;
    h.kv_bytes = j->kv_bytes + (ho.n_pos + n_vocab) * 4; /* the tokens' and logits' */
    double ms = (double)(ig_now_ns() - t0) / 1e6;
    h.pack_ms = j->pack_ms + ms;
    st = msg_open(&m, &h, sizeof h)
             ? kv_file_write_tokens(m.f, "'the cache sent'", ho.tokens, ho.n_pos, ho.logits,
                                    n_vocab)
             : IG_E_NOMEM;
    msg_post(pd, j, &m, st, sizeof h, TAG_KV);
    pd->stats.pack_ms += ms;
    if (j->failed)
        return j->failed;
    pd->stats.caches++;
    pd->stats.kv_bytes += h.kv_bytes;
    return IG_OK;
}

void pd_prefill_done(void *user, struct gen_request *r)
{
    struct pd *pd = user;
    struct pjob *j = r->user;
    pd->stats.prompt_rows += r->result.n_prompt;
    char err[1024] = "";
    int st = r->result.status;
    if (st == IG_OK && r->result.stop == GEN_STOP_PROMPT) {
        ig_error_capture(err, sizeof err);
        st = finish(pd, j);
        ig_error_capture(NULL, 0);
        if (st == IG_OK) {
            pd_post_copy(pd, &j->h.seq, sizeof j->h.seq, 0, TAG_SHIPPED);
            pd_pjob_free(j);
            return;
        }
        if (j->err[0]) /* a layer's part failed before */
            snprintf(err, sizeof err, "%s", j->err);
    }
    if (j->to >= 0) /* the decode rank lets the parts go */
        pd_post_copy(pd, &j->h.seq, sizeof j->h.seq, j->to, TAG_KV_DROP);
    if (st != IG_OK)
        pd_send_error(pd, j->h.seq, st, err);
    else /* ended otherwise (interrupted): the result as it is */
        pd_send_done(pd, j->h.seq, &r->result, NULL, 0, NULL, NULL, NULL);
    pd_pjob_free(j);
}

/* A request from rank 0: held until a decode rank has room (pd_admit). */
void pd_take_request(struct pd *pd, char *buf, size_t bytes)
{
    struct pjob *j = calloc(1, sizeof *j);
    if (!j || bytes < sizeof j->h)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a request");
    memcpy(&j->h, buf, sizeof j->h);
    size_t tb = (size_t)j->h.n_tokens * sizeof(int32_t);
    if (sizeof j->h + tb + (size_t)j->h.line_len != bytes)
        pd_fatal(pd, IG_E_INTERNAL, "a request message of the wrong size");
    j->tokens = malloc(tb ? tb : 1);
    j->line = malloc((size_t)j->h.line_len + 1);
    if (!j->tokens || !j->line)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a request");
    memcpy(j->tokens, buf + sizeof j->h, tb);
    memcpy(j->line, buf + sizeof j->h + tb, (size_t)j->h.line_len);
    j->to = -1;
    j->r = (struct gen_request){
        .tokens = j->tokens, .n_tokens = j->h.n_tokens, .user = j,
        .t_arrival_ns = ig_now_ns() - (int64_t)(j->h.ago_ms * 1e6),
        .params = {.n_predict = 1, .prompt_only = true, .handoff = true,
                   .sp = {.temperature = 0, .top_k = 1, .top_p = 1, .repeat_penalty = 1}},
    };
    j->r.result.tokenize_ms = j->h.tokenize_ms;
    if (pd->outbox_tail)
        pd->outbox_tail->next = j;
    else
        pd->outbox = j;
    pd->outbox_tail = j;
}

/* The decode rank with the most free blocks that has room for `need` and
 * a slot; -1 where none has. A request larger than any decode rank's pool
 * goes to the largest, whose engine refuses it as one process would. */
static int pick_decode(const struct pd *pd, int64_t need)
{
    int best = -1, largest = -1;
    for (int i = 0; i < pd->o.n_decode; i++) {
        if (!pd->room_known[i])
            return -1; /* not every decode rank has spoken yet */
        const struct room_msg *m = &pd->room[i];
        if (largest < 0 || m->total > pd->room[largest].total)
            largest = i;
        if (m->blocks >= need && m->slots > 0 && (best < 0 || m->blocks > pd->room[best].blocks))
            best = i;
    }
    if (best < 0 && largest >= 0 && need > pd->room[largest].total)
        best = largest;
    return best;
}

/* Into the engine, its cache's head to decode rank d (its room taken). */
static void admit(struct pd *pd, struct pjob *j, int d)
{
    char err[1024] = "";
    ig_error_capture(err, sizeof err);
    int st = engine_submit(pd->e, &j->r);
    ig_error_capture(NULL, 0);
    if (st != IG_OK) { /* nothing went to a decode rank */
        pd_send_error(pd, j->h.seq, st, err);
        pd_pjob_free(j);
        return;
    }
    pd->room[d].blocks -= j->h.need;
    pd->room[d].slots--;
    j->to = pd->o.n_prefill + d;
    struct kv_hdr h = {.seq = j->h.seq, .line_no = j->h.line_no, .line_len = j->h.line_len,
                       .need = j->h.need, .n_predict = j->h.n_predict,
                       .ignore_eog = j->h.ignore_eog, .special_text = j->h.special_text,
                       .sp = j->h.sp};
    struct msg m;
    int64_t t0 = ig_now_ns();
    ig_error_capture(j->err, sizeof j->err);
    st = msg_open(&m, &h, sizeof h) &&
                 fwrite(j->line, 1, (size_t)h.line_len, m.f) == (size_t)h.line_len
             ? kv_file_write_head(m.f, "'the cache sent'", backend_kv_memory(pd->o.be),
                                  j->h.n_tokens, pd->model_id, pd->o.m->hp.n_vocab)
             : IG_E_NOMEM;
    msg_post(pd, j, &m, st, sizeof h + (size_t)h.line_len, TAG_KV_HEAD);
    ig_error_capture(NULL, 0);
    if (j->failed) { /* no head went: the decode rank knows nothing of it */
        pd->room[d].blocks += j->h.need;
        pd->room[d].slots++;
        j->to = -1;
    }
    double ms = (double)(ig_now_ns() - t0) / 1e6;
    j->pack_ms += ms;
    pd->stats.pack_ms += ms;
}

bool pd_admit(struct pd *pd)
{
    bool any = false;
    while (pd->outbox) {
        struct pjob *j = pd->outbox;
        int d = pick_decode(pd, j->h.need);
        if (d < 0) {
            pd->stats.waited += !j->waited;
            j->waited = true;
            break;
        }
        pd->outbox = j->next;
        if (!pd->outbox)
            pd->outbox_tail = NULL;
        j->next = NULL;
        admit(pd, j, d);
        any = true;
    }
    return any;
}
