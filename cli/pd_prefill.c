/* cli/pd_prefill.c: a prefill rank of batch --pd (cli/pd.h): requests
 * from rank 0 into its engine, prompt only; each finished prompt's cache
 * written as a saved cache and sent to the decode rank with the most room,
 * or held, and no prompt run, until one has room. Covered by
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

/* The prompt is in the cache: its message to a decode rank (header, line,
 * the saved cache: kvcache/'s format, written as --save-kv writes it). */
static int pack(struct pd *pd, struct pjob *j)
{
    int64_t t0 = ig_now_ns();
    struct gen_handoff ho;
    int st = engine_handoff(pd->e, &j->r, &ho);
    if (st != IG_OK)
        return st;
    char *buf = NULL;
    size_t bytes = 0;
    FILE *f = open_memstream(&buf, &bytes);
    if (!f)
        return ig_error(IG_E_NOMEM, "out of memory for the request's cache");
    struct kv_hdr h = {0};
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 &&
              fwrite(j->line, 1, (size_t)j->h.line_len, f) == (size_t)j->h.line_len;
    st = ok ? kv_file_write(f, "'the cache sent'", ho.kv, ho.table, ho.slot, ho.n_pos,
                            pd->model_id, ho.tokens, ho.logits, pd->o.m->hp.n_vocab)
            : ig_error(IG_E_NOMEM, "out of memory for the request's cache");
    if (fclose(f) != 0 && st == IG_OK)
        st = ig_error(IG_E_NOMEM, "out of memory for the request's cache");
    if (st == IG_OK && bytes > IG_COLL_MESSAGE_MAX)
        st = ig_error(IG_E_NOMEM, "the request's cache is %.0f MiB, over the %.0f MiB one "
                      "transfer holds", (double)bytes / 1048576.0,
                      (double)IG_COLL_MESSAGE_MAX / 1048576.0);
    if (st != IG_OK) {
        free(buf);
        return st;
    }
    const struct gen_result *res = &j->r.result;
    h = (struct kv_hdr){
        .seq = j->h.seq, .line_no = j->h.line_no, .line_len = j->h.line_len,
        .n_predict = j->h.n_predict, .ignore_eog = j->h.ignore_eog, .sp = j->h.sp,
        .special_text = j->h.special_text,
        .kv_bytes = (int64_t)(bytes - sizeof h - (size_t)j->h.line_len), .need = j->h.need,
        .n_prompt = res->n_prompt, .n_cached = res->n_cached, .queue_ms = res->queue_ms,
        .prefill_ms = res->prefill_ms, .pack_ms = (double)(ig_now_ns() - t0) / 1e6,
    };
    memcpy(buf, &h, sizeof h);
    j->msg = buf;
    j->msg_bytes = bytes;
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
        st = pack(pd, j);
        ig_error_capture(NULL, 0);
        if (st == IG_OK) {
            free(j->tokens);
            j->tokens = NULL;
            j->next = NULL;
            if (pd->outbox_tail)
                pd->outbox_tail->next = j;
            else
                pd->outbox = j;
            pd->outbox_tail = j;
            return;
        }
        pd_send_error(pd, j->h.seq, st, err);
    } else if (st != IG_OK) {
        pd_send_error(pd, j->h.seq, st, "");
    } else { /* ended otherwise (interrupted): the result as it is */
        pd_send_done(pd, j->h.seq, &r->result, NULL, 0, NULL, NULL, NULL);
    }
    pd_pjob_free(j);
}

/* A request from rank 0 into this rank's engine, prompt only. */
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
    j->r = (struct gen_request){
        .tokens = j->tokens, .n_tokens = j->h.n_tokens, .user = j,
        .t_arrival_ns = ig_now_ns() - (int64_t)(j->h.ago_ms * 1e6),
        .params = {.n_predict = 1, .prompt_only = true, .handoff = true,
                   .sp = {.temperature = 0, .top_k = 1, .top_p = 1, .repeat_penalty = 1}},
    };
    j->r.result.tokenize_ms = j->h.tokenize_ms;
    char err[1024] = "";
    ig_error_capture(err, sizeof err);
    int st = engine_submit(pd->e, &j->r);
    ig_error_capture(NULL, 0);
    if (st != IG_OK) {
        pd_send_error(pd, j->h.seq, st, err);
        pd_pjob_free(j);
    }
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

/* Sends the waiting caches in order while a decode rank has room; the
 * first that finds none holds back the rest (prefill then waits). */
bool pd_ship(struct pd *pd)
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
        struct kv_hdr h;
        memcpy(&h, j->msg, sizeof h);
        h.ago_ms = (double)(ig_now_ns() - j->r.t_arrival_ns) / 1e6;
        memcpy(j->msg, &h, sizeof h);
        pd->room[d].blocks -= j->h.need;
        pd->room[d].slots--;
        pd->stats.caches++;
        pd->stats.kv_bytes += h.kv_bytes;
        pd_post(pd, j->msg, j->msg_bytes, pd->o.n_prefill + d, TAG_KV);
        j->msg = NULL;
        pd_post_copy(pd, &j->h.seq, sizeof j->h.seq, 0, TAG_SHIPPED);
        pd->outbox = j->next;
        if (!pd->outbox)
            pd->outbox_tail = NULL;
        pd_pjob_free(j);
        any = true;
    }
    return any;
}

