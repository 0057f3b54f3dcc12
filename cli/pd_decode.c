/* cli/pd_decode.c: a decode rank of batch --pd (cli/pd.h): each cache from
 * a prefill rank read as a history (--load-kv's path) with its line parsed
 * again, run decode-only; the text, figures and token times back to rank
 * 0; its room told to the prefill ranks. Covered by tests/tp/test_pd_cli.py. */
#include "cli/pd_impl.h"

#include "core/status.h"
#include "core/timer.h"
#include "grammar/grammar.h"
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void djob_free(struct djob *j)
{
    if (!j)
        return;
    batch_request_free(&j->in);
    grammar_free(j->grammar);
    free(j->tokens);
    free(j->logits);
    kv_store_free(j->kv);
    free(j->text);
    free(j->times);
    free(j->toks);
    free(j);
}

void pd_decode_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns)
{
    struct djob *j = r->user;
    (void)user;
    if (j->n_times == j->cap_times) {
        int64_t cap = j->cap_times ? 2 * j->cap_times : 64;
        int64_t *t = realloc(j->times, (size_t)cap * sizeof *t);
        if (t)
            j->times = t;
        int32_t *k = t ? realloc(j->toks, (size_t)cap * sizeof *k) : NULL;
        if (k)
            j->toks = k;
        if (!t || !k)
            return; /* (the times are for a benchmark's inter-token latencies) */
        j->cap_times = cap;
    }
    j->times[j->n_times] = t_ns;
    j->toks[j->n_times++] = token;
}

int pd_decode_text(void *user, struct gen_request *r, const char *text, size_t len)
{
    struct djob *j = r->user;
    (void)user;
    return cli_text_append(&j->text, &j->len, &j->cap, text, len);
}

void pd_decode_done(void *user, struct gen_request *r)
{
    struct pd *pd = user;
    struct djob *j = r->user;
    struct gen_result res = r->result;
    pd->stats.decode_rows += res.n_decode;
    pd->stats.prompt_rows += res.n_prompt; /* 0: a decode rank runs no prompt rows */
    /* the figures of the whole trip: the prompt's from the prefill rank; the
     * queue: waiting for a prefill rank and a slot there, then for a slot here */
    double before_ms = (double)(j->t_recv_ns - r->t_arrival_ns) / 1e6 + j->pack_ms;
    res.queue_ms = j->h.queue_ms + (res.queue_ms > before_ms ? res.queue_ms - before_ms : 0);
    res.n_prompt = j->h.n_prompt;
    res.n_cached = j->h.n_cached;
    res.prefill_ms = j->h.prefill_ms;
    struct pd_transfer t = {.prefill_rank = j->prefill_rank, .decode_rank = pd->rank,
                            .kv_bytes = j->h.kv_bytes, .pack_ms = j->h.pack_ms + j->pack_ms,
                            .transfer_ms = j->transfer_ms};
    pd_send_done(pd, j->h.seq, &res, j->text, j->len,
              res.status != IG_OK ? ig_status_name(res.status) : NULL, &t, j);
    pd->live_need -= j->h.need;
    pd->live_n--;
    djob_free(j);
}

/* A cache from a prefill rank: the line parsed again, the cache read as a
 * history, the request into this rank's engine. */
static int take_cache(struct pd *pd, struct djob *j, const char *buf, size_t bytes)
{
    if (bytes < sizeof j->h)
        return ig_error(IG_E_INTERNAL, "a cache message of the wrong size");
    memcpy(&j->h, buf, sizeof j->h);
    pd->stats.kv_bytes += j->h.kv_bytes;
    const char *line = buf + sizeof j->h, *kv = line + j->h.line_len;
    if (sizeof j->h + (size_t)j->h.line_len + (size_t)j->h.kv_bytes != bytes)
        return ig_error(IG_E_INTERNAL, "a cache message of the wrong size");
    int64_t t0 = ig_now_ns();
    if (j->h.line_len) { /* batch: the line's stop strings, constraint, ... */
        int st = batch_request_parse(line, (size_t)j->h.line_len, pd->o.plain, pd->o.defaults,
                                     &j->in);
        if (st == IG_OK)
            st = batch_request_grammar(&j->in, j->h.line_no, &j->grammar);
        if (st != IG_OK)
            return st;
        j->in.opts.sp.seed = j->h.sp.seed;
        batch_request_params(&j->in, j->grammar, pd->o.grammar, &j->r.params);
    } else { /* bench: its length and greedy sampling */
        j->r.params = (struct gen_params){.n_predict = j->h.n_predict,
                                          .ignore_eog = j->h.ignore_eog, .sp = j->h.sp};
    }
    j->r.params.special_text = j->h.special_text; /* rank 0's channels read the markers */
    int st;
    FILE *f = fmemopen((void *)kv, (size_t)j->h.kv_bytes, "rb");
    if (!f)
        return ig_error(IG_E_NOMEM, "out of memory reading a cache");
    struct kv_file_reader rd;
    st = kv_file_read_header(&rd, f, "'the cache received'", pd->layers, pd->o.m->hp.n_vocab,
                             pd->model_id);
    if (st == IG_OK &&
        (!(j->tokens = malloc((size_t)rd.hdr.n_tokens * sizeof *j->tokens)) ||
         !(j->logits = malloc((size_t)pd->o.m->hp.n_vocab * sizeof *j->logits))))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)rd.hdr.n_tokens);
    if (st == IG_OK)
        st = kv_file_read_body(&rd, &j->kv, j->tokens, j->logits);
    fclose(f);
    if (st != IG_OK)
        return st;
    j->hist = (struct gen_history){.tokens = j->tokens, .n = rd.hdr.n_tokens,
                                   .logits = rd.hdr.n_vocab > 0 ? j->logits : NULL, .kv = j->kv};
    j->pack_ms = (double)(ig_now_ns() - t0) / 1e6;
    j->r.history = &j->hist;
    j->r.user = j;
    /* arrival on rank 0, on this rank's clock (the time before this rank is
     * the sum of each rank's part, the transfer's included) */
    j->r.t_arrival_ns = j->t_recv_ns - (int64_t)((j->h.ago_ms + j->transfer_ms) * 1e6);
    return engine_submit(pd->e, &j->r);
}

void pd_receive_cache(struct pd *pd, size_t bytes, int from)
{
    struct djob *j = calloc(1, sizeof *j);
    if (!j)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a request");
    int64_t t0 = ig_now_ns();
    char *buf = pd_take(pd, bytes, from, TAG_KV);
    j->t_recv_ns = ig_now_ns();
    j->transfer_ms = (double)(j->t_recv_ns - t0) / 1e6;
    j->prefill_rank = from;
    pd->stats.caches++;
    pd->stats.transfer_ms += j->transfer_ms;
    char err[1024] = "";
    ig_error_capture(err, sizeof err);
    int st = take_cache(pd, j, buf, bytes);
    ig_error_capture(NULL, 0);
    free(buf);
    if (st != IG_OK) {
        pd_send_error(pd, j->h.seq, st, err);
        djob_free(j);
        return;
    }
    pd->live_need += j->h.need;
    pd->live_n++;
}

/* Tells every prefill rank this rank's room where it changed. */
void pd_tell_room(struct pd *pd)
{
    struct room_msg m = {.blocks = pd->n_blocks - pd->live_need, .slots = pd->n_slots - pd->live_n,
                         .total = pd->n_blocks};
    if (pd->told_once && !memcmp(&m, &pd->told, sizeof m))
        return;
    pd->told = m;
    pd->told_once = true;
    for (int p = 0; p < pd->o.n_prefill; p++)
        pd_post_copy(pd, &m, sizeof m, p, TAG_ROOM);
}

