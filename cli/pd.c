/* cli/pd.c: prefill and decode on different ranks (cli/pd.h): the checks
 * of the job, sending, rank 0's part (hand-outs, results) and the round
 * every rank runs; a prefill rank's part is pd_prefill.c, a decode rank's
 * pd_decode.c. Covered by tests/tp/test_pd_cli.py. */
#include "cli/pd_impl.h"

#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the job and its checks ------------------------------------------------------ */

bool cli_pd_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--pd") || !strncmp(argv[i], "--pd=", 5))
            return true;
    return false;
}

int pd_parse(const char *arg, int *p, int *d)
{
    char buf[32];
    const char *colon = strchr(arg, ':');
    int64_t a = 0, b = 0;
    bool ok = colon && (size_t)(colon - arg) < sizeof buf;
    if (ok) { /* each side a count as cli_scan_i64 reads one */
        memcpy(buf, arg, (size_t)(colon - arg));
        buf[colon - arg] = '\0';
        ok = cli_scan_i64(buf, &a) && cli_scan_i64(colon + 1, &b) && a >= 1 && a <= 1024 &&
             b >= 1 && b <= 1024;
    }
    if (!ok)
        return ig_error(IG_E_USAGE, "--pd: expected P:D, prefill and decode ranks (each 1 or "
                        "more, such as 1:1), got '%s'", arg);
    *p = (int)a;
    *d = (int)b;
    return IG_OK;
}

int pd_check_job(const char *cmd, int p, int d)
{
    int size = ig_coll_size();
    if (!ig_coll_available())
        return ig_error(IG_E_USAGE, "--pd %d:%d needs MPI: this ignite was built without it "
                        "(install libopenmpi-dev and openmpi-bin, rebuild)", p, d);
    if (size == 1)
        return ig_error(IG_E_USAGE, "--pd %d:%d: start the ranks with MPI: mpirun -np %d ignite "
                        "%s --pd %d:%d ...", p, d, p + d, cmd, p, d);
    if (size != p + d)
        return ig_error(IG_E_USAGE, "--pd %d:%d needs %d ranks, but mpirun started %d", p, d,
                        p + d, size);
    return IG_OK;
}

int pd_agree(int st, const char *msg)
{
    /* the largest status, the lowest rank with it */
    enum { RANKS = 4096 }; /* more than --pd's 1024 + 1024 */
    int64_t v = st == IG_OK ? -1 : (int64_t)st * RANKS + RANKS - 1 - ig_coll_rank();
    ig_coll_allreduce_max(&v);
    if (v < 0)
        return IG_OK;
    int bad = RANKS - 1 - (int)(v % RANKS), status = (int)(v / RANKS);
    char line[512];
    snprintf(line, sizeof line, "%s", msg ? msg : "");
    ig_coll_bcast(line, sizeof line, bad);
    if (ig_coll_rank() == 0 && bad != 0) /* rank 0's own line is out already */
        ig_error(status, "rank %d of %d: %s", bad, ig_coll_size(), line);
    return status;
}

const struct engine *pd_engine(const struct pd *pd)
{
    return pd->e;
}

const char *pd_role_name(const struct pd *pd, int rank)
{
    return rank < pd->o.n_prefill ? "prefill" : "decode";
}

/* A rank other than 0 cannot go on: one line naming it, every rank ends. */
_Noreturn void pd_fatal(const struct pd *pd, int st, const char *what)
{
    fprintf(stderr, "ignite: rank %d of %d (%s): %s\n", pd->rank, pd->size,
            pd_role_name(pd, pd->rank), what);
    ig_coll_abort(st);
}

/* ---- sending ------------------------------------------------------------------------ */

/* Sends buf (owned from here; freed once sent) to `to`. */
void pd_post(struct pd *pd, void *buf, size_t bytes, int to, int tag)
{
    if (pd->n_outs == pd->cap_outs) {
        int64_t cap = pd->cap_outs ? 2 * pd->cap_outs : 16;
        struct out *o = realloc(pd->outs, (size_t)cap * sizeof *o);
        if (!o)
            pd_fatal(pd, IG_E_NOMEM, "out of memory for a message");
        pd->outs = o;
        pd->cap_outs = cap;
    }
    pd->outs[pd->n_outs++] = (struct out){buf, ig_coll_isend(buf, bytes, to, tag)};
}

void pd_post_copy(struct pd *pd, const void *v, size_t bytes, int to, int tag)
{
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a message");
    memcpy(buf, v, bytes);
    pd_post(pd, buf, bytes, to, tag);
}

bool pd_progress(struct pd *pd)
{
    int64_t k = 0;
    for (int64_t i = 0; i < pd->n_outs; i++) {
        if (ig_coll_sent(pd->outs[i].req))
            free(pd->outs[i].buf);
        else
            pd->outs[k++] = pd->outs[i];
    }
    pd->n_outs = k;
    return k > 0;
}

/* Receives the message ig_coll_poll announced into a new buffer. */
char *pd_take(struct pd *pd, size_t bytes, int from, int tag)
{
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a message");
    ig_coll_recv(buf, bytes, from, tag);
    return buf;
}

/* A request's end to rank 0: its result, text and error line. */
void pd_send_done(struct pd *pd, int64_t seq, const struct gen_result *res, const char *text,
                      size_t len, const char *err, const struct pd_transfer *t,
                      const struct djob *j)
{
    int64_t now = ig_now_ns();
    size_t n_err = err ? strlen(err) : 0;
    int64_t n_times = j ? j->n_times : 0;
    size_t tb = (size_t)n_times * (sizeof(int64_t) + sizeof(int32_t));
    struct done_hdr h = {
        .seq = seq, .status = res->status, .stop = res->stop, .n_prompt = res->n_prompt,
        .n_cached = res->n_cached, .n_gen = res->n_gen, .n_decode = res->n_decode,
        .ttft_set = res->ttft_set, .grammar = res->grammar,
        .grammar_complete = res->grammar_complete, .text_len = (int64_t)len,
        .err_len = (int64_t)n_err, .prefill_rank = t ? t->prefill_rank : pd->rank,
        .kv_bytes = t ? t->kv_bytes : 0, .has_first = res->t_first_ns != 0,
        .queue_ms = res->queue_ms, .prefill_ms = res->prefill_ms, .ttft_ms = res->ttft_ms,
        .decode_ms = res->decode_ms,
        .first_ago_ms = res->t_first_ns ? (double)(now - res->t_first_ns) / 1e6 : 0,
        .last_ago_ms = res->t_last_ns ? (double)(now - res->t_last_ns) / 1e6 : 0,
        .pack_ms = t ? t->pack_ms : 0, .transfer_ms = t ? t->transfer_ms : 0,
        .n_times = n_times,
    };
    char *buf = malloc(sizeof h + len + n_err + tb + 1);
    if (!buf)
        pd_fatal(pd, IG_E_NOMEM, "out of memory for a result");
    memcpy(buf, &h, sizeof h);
    if (len)
        memcpy(buf + sizeof h, text, len);
    if (n_err)
        memcpy(buf + sizeof h + len, err, n_err);
    char *ago = buf + sizeof h + len + n_err; /* (unaligned: copied byte-wise) */
    for (int64_t i = 0; i < n_times; i++) {
        int64_t a = now - j->times[i];
        memcpy(ago + (size_t)i * sizeof a, &a, sizeof a);
    }
    if (n_times)
        memcpy(buf + sizeof h + len + n_err + (size_t)n_times * sizeof(int64_t), j->toks,
               (size_t)n_times * sizeof(int32_t));
    pd_post(pd, buf, sizeof h + len + n_err + tb, 0, TAG_DONE);
}

/* A request that failed before any result: its status and line. */
void pd_send_error(struct pd *pd, int64_t seq, int st, const char *err)
{
    struct gen_result res = {.status = st};
    pd_send_done(pd, seq, &res, NULL, 0, err[0] ? err : ig_status_name(st), NULL, NULL);
}

/* ---- rank 0 -------------------------------------------------------------------------- */

int pd_submit(struct pd *pd, struct gen_request *r, const char *line, size_t len,
              int64_t line_no)
{
    if (pd->n_seq == pd->cap_waiting) {
        int64_t cap = pd->cap_waiting ? 2 * pd->cap_waiting : 256;
        struct gen_request **w = realloc(pd->waiting, (size_t)cap * sizeof *w);
        if (!w)
            return ig_error(IG_E_NOMEM, "out of memory");
        pd->waiting = w;
        pd->cap_waiting = cap;
    }
    struct pjob *q = calloc(1, sizeof *q);
    size_t tb = (size_t)r->n_tokens * sizeof(int32_t);
    if (!q || !(q->msg = malloc(sizeof q->h + tb + len))) {
        free(q);
        return ig_error(IG_E_NOMEM, "out of memory");
    }
    int64_t n_ctx = pd->o.be->o.n_ctx, n = r->n_tokens;
    /* the engine's promise: the last sampled token is never fed back */
    int64_t max_pos = n + (r->params.n_predict > 0 ? r->params.n_predict - 1 : n_ctx);
    q->h = (struct req_hdr){.seq = pd->n_seq, .sp = r->params.sp,
                            .n_predict = r->params.n_predict,
                            .ignore_eog = r->params.ignore_eog,
                            .special_text = r->params.special_text,
                            .line_no = line_no, .n_tokens = n, .line_len = (int64_t)len,
                            .need = kv_blocks_for(max_pos < n_ctx ? max_pos : n_ctx),
                            .tokenize_ms = r->result.tokenize_ms};
    q->r.t_arrival_ns = r->t_arrival_ns;
    if (tb) /* (no tokens: the prefill rank's engine refuses it, as one process's) */
        memcpy(q->msg + sizeof q->h, r->tokens, tb);
    if (len)
        memcpy(q->msg + sizeof q->h + tb, line, len);
    q->msg_bytes = sizeof q->h + tb + len;
    pd->waiting[pd->n_seq++] = r;
    pd->n_pending++;
    if (pd->queue_tail)
        pd->queue_tail->next = q;
    else
        pd->queue = q;
    pd->queue_tail = q;
    return IG_OK;
}

int64_t pd_pending(const struct pd *pd)
{
    return pd->n_pending;
}

/* Hands queued requests to the prefill ranks with the fewest in hand. */
static bool hand_out(struct pd *pd)
{
    bool any = false;
    while (pd->queue) {
        int p = 0;
        for (int i = 1; i < pd->o.n_prefill; i++)
            if (pd->in_hand[i] < pd->in_hand[p])
                p = i;
        if (pd->in_hand[p] >= pd->n_slots)
            break;
        struct pjob *q = pd->queue;
        q->h.ago_ms = (double)(ig_now_ns() - q->r.t_arrival_ns) / 1e6;
        memcpy(q->msg, &q->h, sizeof q->h);
        pd_post(pd, q->msg, q->msg_bytes, p, TAG_REQ);
        pd->in_hand[p]++;
        pd->queue = q->next;
        if (!pd->queue)
            pd->queue_tail = NULL;
        free(q);
        any = true;
    }
    return any;
}

/* A request's end on rank 0: its result as one process fills it. */
static void take_done(struct pd *pd, const char *buf, size_t bytes, int from)
{
    struct done_hdr h;
    memcpy(&h, buf, sizeof h);
    size_t tb = (size_t)h.n_times * (sizeof(int64_t) + sizeof(int32_t));
    if (sizeof h + (size_t)h.text_len + (size_t)h.err_len + tb != bytes || h.seq < 0 ||
        h.seq >= pd->n_seq || !pd->waiting[h.seq])
        pd_fatal(pd, IG_E_INTERNAL, "a result message that fits no request");
    if (from < pd->o.n_prefill)
        pd->in_hand[from]--; /* it failed there */
    struct gen_request *r = pd->waiting[h.seq];
    pd->waiting[h.seq] = NULL;
    pd->n_pending--;
    int64_t now = ig_now_ns();
    r->result = (struct gen_result){
        .stop = (enum gen_stop)h.stop, .status = (int)h.status, .n_prompt = h.n_prompt,
        .n_cached = h.n_cached, .n_gen = h.n_gen, .n_decode = h.n_decode,
        .tokenize_ms = r->result.tokenize_ms, .queue_ms = h.queue_ms,
        .prefill_ms = h.prefill_ms, .ttft_ms = h.ttft_ms, .decode_ms = h.decode_ms,
        .ttft_set = h.ttft_set, .grammar = h.grammar, .grammar_complete = h.grammar_complete,
        .t_first_ns = h.has_first ? now - (int64_t)(h.first_ago_ms * 1e6) : 0,
        .t_last_ns = h.has_first ? now - (int64_t)(h.last_ago_ms * 1e6) : 0,
    };
    char err[1024] = "";
    if (h.err_len)
        snprintf(err, sizeof err, "%.*s", (int)h.err_len, buf + sizeof h + h.text_len);
    struct pd_transfer t = {.prefill_rank = (int)h.prefill_rank, .decode_rank = from,
                            .kv_bytes = h.kv_bytes, .pack_ms = h.pack_ms,
                            .transfer_ms = h.transfer_ms, .path = pd->nccl ? "nccl" : "host"};
    const char *at = buf + sizeof h + h.text_len + h.err_len;
    for (int64_t i = 0; pd->o.on_token && i < h.n_times; i++) { /* on this rank's clock */
        int64_t ago;
        int32_t tok;
        memcpy(&ago, at + (size_t)i * sizeof ago, sizeof ago);
        memcpy(&tok, at + (size_t)h.n_times * sizeof ago + (size_t)i * sizeof tok, sizeof tok);
        pd->o.on_token(pd->o.user, r, tok, now - ago);
    }
    pd->o.on_result(pd->o.user, r, buf + sizeof h, (size_t)h.text_len, err,
                    from >= pd->o.n_prefill ? &t : NULL);
}

/* ---- every rank's round ---------------------------------------------------------------- */

/* Takes every message there is. Returns whether there was any. */
static bool receive(struct pd *pd)
{
    int from, tag;
    size_t bytes;
    bool any = false;
    while (ig_coll_poll(&from, &tag, &bytes)) {
        any = true;
        if (pd->heard_ns)
            pd->heard_ns[from] = ig_now_ns();
        if (tag == TAG_KV || tag == TAG_KV_HEAD || tag == TAG_KV_ROWS || tag == TAG_KV_DROP) {
            pd_receive_part(pd, bytes, from, tag); /* into its request */
            continue;
        }
        char *buf = pd_take(pd, bytes, from, tag);
        switch (tag) {
        case TAG_REQ: pd_take_request(pd, buf, bytes); break;
        case TAG_ROOM: {
            int d = from - pd->o.n_prefill;
            if (d >= 0 && d < pd->o.n_decode && bytes == sizeof pd->room[d]) {
                memcpy(&pd->room[d], buf, bytes);
                pd->room_known[d] = true;
            }
            break;
        }
        case TAG_SHIPPED: pd->in_hand[from]--; break;
        case TAG_DONE: take_done(pd, buf, bytes, from); break;
        case TAG_STOP: pd->stop = true; break;
        default: break; /* TAG_ALIVE: only that it came */
        }
        free(buf);
    }
    return any;
}

/* Rank 0 while requests wait: a rank silent for the watchdog's limit is
 * stopped or stuck (a killed one ends the job through MPI). */
static void watch(struct pd *pd)
{
    if (pd->watch_s <= 0 || !pd->n_pending)
        return;
    int64_t now = ig_now_ns();
    for (int r = 1; r < pd->size; r++)
        if ((double)(now - pd->heard_ns[r]) / 1e9 > pd->watch_s) {
            fprintf(stderr, "ignite: rank %d of %d (%s) sent nothing in %.0f s while requests "
                    "waited (stopped or stuck; IGNITE_TP_WATCHDOG sets the limit): ending the "
                    "job\n", r, pd->size, pd_role_name(pd, r), pd->watch_s);
            ig_coll_abort(IG_E_DEVICE);
        }
}

/* One round of this rank's roles. Returns whether anything happened. */
static bool round_once(struct pd *pd, int *st)
{
    int64_t t0 = ig_now_ns();
    bool busy = receive(pd);
    if (pd->rank == 0)
        busy |= hand_out(pd);
    if (pd->decode)
        pd_tell_room(pd);
    /* a prefill rank admits a prompt only where a decode rank has room for
     * it: the others wait, none is dropped */
    if (pd->prefill)
        busy |= pd_admit(pd);
    bool stepped = pd->e && engine_pending(pd->e);
    if (stepped) {
        int64_t s0 = ig_now_ns();
        *st = engine_step(pd->e);
        busy = true;
        if (pd->prefill)
            pd->stats.compute_ms += (double)(ig_now_ns() - s0) / 1e6;
    }
    /* the transfers queued so far go on meanwhile: a GPU's transfer stream on
     * its own, the emulator's here (its host is the device), before this rank
     * idles or blocks while a peer waits on them */
    int xst = pd->nccl ? backend_p2p_progress(pd->o.be) : IG_OK;
    if (xst != IG_OK)
        pd_fatal(pd, xst, "a transfer by NCCL failed (above)");
    bool sending = pd_progress(pd);
    int64_t now = ig_now_ns();
    if (pd->rank != 0 && !pd->stop && now - pd->alive_ns > 1000000000LL) {
        pd_post_copy(pd, &pd->rank, sizeof pd->rank, 0, TAG_ALIVE);
        pd->alive_ns = now;
    }
    if (pd->rank == 0)
        watch(pd);
    if (!busy)
        usleep(200); /* nothing came: leave the core to the ranks working beside */
    if (pd->prefill && !stepped) { /* idle: on a decode rank's room, or on the sends */
        double ms = (double)(ig_now_ns() - t0) / 1e6;
        if (pd->outbox)
            pd->stats.room_wait_ms += ms;
        else if (sending)
            pd->stats.send_wait_ms += ms;
    }
    return busy;
}

int pd_step(struct pd *pd)
{
    int st = IG_OK;
    round_once(pd, &st);
    return st;
}

int pd_serve(struct pd *pd)
{
    while (!pd->stop) {
        int st = IG_OK; /* an engine's error ended the requests in flight with it, each
                         * reported to rank 0: the rank goes on with the next */
        round_once(pd, &st);
    }
    while (pd_progress(pd)) /* everything sent before the last word */
        receive(pd);
    ig_coll_send(&pd->stats, sizeof pd->stats, 0, TAG_STATS);
    return IG_OK;
}

void pd_finish(struct pd *pd, bool quiet)
{
    for (int r = 1; r < pd->size; r++)
        pd_post_copy(pd, "", 1, r, TAG_STOP);
    struct stats_msg *all = calloc((size_t)pd->size, sizeof *all);
    int left = pd->size - 1;
    while (left > 0) {
        int from, tag;
        size_t bytes;
        pd_progress(pd);
        if (!ig_coll_poll(&from, &tag, &bytes)) {
            usleep(200);
            continue;
        }
        char *buf = pd_take(pd, bytes, from, tag);
        if (tag == TAG_STATS && bytes == sizeof *all) {
            if (all)
                memcpy(&all[from], buf, bytes);
            left--;
        }
        free(buf);
    }
    while (pd_progress(pd))
        usleep(200);
    if (all)
        all[0] = pd->stats;
    for (int r = 0; all && !quiet && r < pd->size; r++)
        if (r < pd->o.n_prefill)
            fprintf(stderr, "pd: rank %d (prefill): %lld prompt rows, %lld decode rows, %lld "
                    "caches sent (%.2f MiB), %lld waited for a decode rank's room; %.0f ms "
                    "computing, %.0f ms sending %lld parts%s, idle %.0f ms on the sends, %.0f "
                    "ms on room\n", r,
                    (long long)all[r].prompt_rows, (long long)all[r].decode_rows,
                    (long long)all[r].caches, (double)all[r].kv_bytes / 1048576.0,
                    (long long)all[r].waited, all[r].compute_ms, all[r].pack_ms,
                    (long long)all[r].messages,
                    pd->whole  ? " (whole)"
                    : pd->nccl ? " (layer by layer, the rows by NCCL)"
                               : " (layer by layer)",
                    all[r].send_wait_ms, all[r].room_wait_ms);
        else
            fprintf(stderr, "pd: rank %d (decode): %lld prompt rows, %lld decode rows, %lld "
                    "caches received (%.2f MiB in %.1f ms)\n", r,
                    (long long)all[r].prompt_rows, (long long)all[r].decode_rows,
                    (long long)all[r].caches, (double)all[r].kv_bytes / 1048576.0,
                    all[r].transfer_ms);
    pd->all = all;
}

bool pd_ranks_json(const struct pd *pd, cJSON *j)
{
    cJSON *o = cJSON_AddObjectToObject(j, "pd");
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "ranks") : NULL;
    if (!arr)
        return false;
    cJSON_AddNumberToObject(o, "prefill_ranks", pd->o.n_prefill);
    cJSON_AddNumberToObject(o, "decode_ranks", pd->o.n_decode);
    cJSON_AddStringToObject(o, "transfer", pd->whole ? "whole" : "layers");
    cJSON_AddStringToObject(o, "path", pd->nccl ? "nccl" : "host");
    if (pd->xfer_why[0]) /* auto took the host path: why */
        cJSON_AddStringToObject(o, "path_why", pd->xfer_why);
    for (int r = 0; pd->all && r < pd->size; r++) {
        const struct stats_msg *s = &pd->all[r];
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return false;
        }
        cJSON_AddNumberToObject(e, "rank", r);
        cJSON_AddStringToObject(e, "role", pd_role_name(pd, r));
        cJSON_AddNumberToObject(e, "prompt_rows", (double)s->prompt_rows);
        cJSON_AddNumberToObject(e, "decode_rows", (double)s->decode_rows);
        cJSON_AddNumberToObject(e, "caches", (double)s->caches);
        cJSON_AddNumberToObject(e, "kv_bytes", (double)s->kv_bytes);
        cJSON_AddNumberToObject(e, "messages", (double)s->messages);
        if (r < pd->o.n_prefill) {
            cJSON_AddNumberToObject(e, "waited", (double)s->waited);
            /* the overlap: computing, writing and posting the parts (inside the
             * steps, layer by layer), idle with sends in flight, idle on room */
            cJSON_AddNumberToObject(e, "compute_ms", s->compute_ms);
            cJSON_AddNumberToObject(e, "pack_ms", s->pack_ms);
            cJSON_AddNumberToObject(e, "send_wait_ms", s->send_wait_ms);
            cJSON_AddNumberToObject(e, "room_wait_ms", s->room_wait_ms);
        } else {
            cJSON_AddNumberToObject(e, "transfer_ms", s->transfer_ms);
        }
    }
    return true;
}

/* ---- life ----------------------------------------------------------------------------- */

int pd_create(const struct pd_opts *o, struct pd **out)
{
    struct pd *pd = calloc(1, sizeof *pd);
    if (!pd)
        return ig_error(IG_E_NOMEM, "out of memory");
    pd->o = *o;
    pd->rank = ig_coll_rank();
    pd->size = ig_coll_size();
    pd->prefill = pd->rank < o->n_prefill;
    pd->decode = !pd->prefill;
    pd->n_slots = o->be->o.n_slots;
    pd->n_blocks = o->be->o.n_blocks;
    kv_model_id(o->m, pd->model_id);
    const char *whole = getenv("IGNITE_PD_WHOLE");
    pd->whole = whole && *whole && strcmp(whole, "0") != 0;
    const char *w = getenv("IGNITE_TP_WATCHDOG");
    pd->watch_s = w ? atof(w) : 600;
    pd->alive_ns = ig_now_ns();
    pd->eo = (struct engine_opts){
        .max_rows = o->be->o.max_rows, .share_prefixes = true,
        .interrupt = pd->rank == 0 ? o->interrupt : NULL,
        .cb = {.on_done = pd->prefill ? pd_prefill_done : pd_decode_done,
               .on_text = pd->prefill ? NULL : pd_decode_text,
               .on_layer = pd->prefill ? pd_prefill_layer : NULL,
               .on_token = pd->prefill || !o->want_times ? NULL : pd_decode_token,
               .user = pd}};
    int st = kv_memory_of(o->m, KV_F32, KV_F32, &pd->layers);
    if (st == IG_OK && pd->rank == 0 &&
        (!(pd->in_hand = calloc((size_t)o->n_prefill, sizeof *pd->in_hand)) ||
         !(pd->heard_ns = calloc((size_t)pd->size, sizeof *pd->heard_ns))))
        st = ig_error(IG_E_NOMEM, "out of memory");
    if (st == IG_OK && pd->prefill &&
        (!(pd->room = calloc((size_t)o->n_decode, sizeof *pd->room)) ||
         !(pd->room_known = calloc((size_t)o->n_decode, sizeof *pd->room_known))))
        st = ig_error(IG_E_NOMEM, "out of memory");
    /* every rank has the same options, so each decode rank's pool is this
     * rank's: prompts start before the decode ranks first speak */
    for (int i = 0; pd->room && i < o->n_decode; i++) {
        pd->room[i] = (struct room_msg){.blocks = pd->n_blocks, .slots = pd->n_slots,
                                        .total = pd->n_blocks};
        pd->room_known[i] = true;
    }
    for (int r = 0; pd->heard_ns && r < pd->size; r++)
        pd->heard_ns[r] = ig_now_ns();
    if (st != IG_OK) {
        pd_free(pd);
        return st;
    }
    *out = pd;
    return IG_OK;
}

void pd_free(struct pd *pd)
{
    if (!pd)
        return;
    engine_free(pd->e); /* before the jobs it may still hold */
    while (pd->outbox) {
        struct pjob *j = pd->outbox;
        pd->outbox = j->next;
        pd_pjob_free(j);
    }
    while (pd->queue) {
        struct pjob *j = pd->queue;
        pd->queue = j->next;
        pd_pjob_free(j);
    }
    while (pd->arriving) {
        struct djob *j = pd->arriving;
        pd->arriving = j->next;
        pd_djob_free(j);
    }
    for (int64_t i = 0; i < pd->n_outs; i++)
        free(pd->outs[i].buf); /* (only after the job ended: nothing reads them) */
    free(pd->outs);
    kv_memory_free(pd->layers);
    free(pd->waiting);
    free(pd->in_hand);
    free(pd->heard_ns);
    free(pd->room);
    free(pd->room_known);
    free(pd->all);
    backend_p2p_free(pd->p2p);
    free(pd);
}

/* ---- the caches' path ------------------------------------------------------------------ */

/* Every rank's ok, agreed: false on every rank where any rank's is, `why`
 * then the lowest such rank's. */
static bool all_ok(bool ok, char *why, size_t cap)
{
    int size = ig_coll_size();
    int64_t bad = ok ? -1 : size - 1 - ig_coll_rank();
    ig_coll_allreduce_max(&bad);
    if (bad < 0)
        return true;
    char line[256];
    snprintf(line, sizeof line, "%s", why);
    ig_coll_bcast(line, sizeof line, size - 1 - (int)bad);
    snprintf(why, cap, "%s", line);
    return false;
}

/* Whether the caches can move by NCCL (every rank agreeing: a CUDA
 * backend, the same pool), else why.
 * Not with several prefill and several decode ranks: each rank's transfers
 * are one queue (the transfer stream), an NCCL send or receive holds it
 * until the peer's match (NCCL user guide, api/p2p.html: "blocking for the
 * GPU"), and a decode rank queues its receives in the order it reads the
 * headers from any prefill rank (ig_coll_poll), which two decode ranks may
 * read in orders that cross: prefill rank A's queue [to 1, to 2], B's
 * [to 2, to 1], decode rank 1's [from B, from A], 2's [from A, from B] wait
 * on each other for ever. With one prefill or one decode rank, every queue
 * takes one rank's transfers in that rank's order (MPI's, per sender). */
static bool nccl_fits(const struct pd *pd, bool asked, char *why, size_t cap)
{
    const char *no = !asked      ? "IGNITE_PD_XFER=host"
                     : pd->whole ? "IGNITE_PD_WHOLE=1 sends the cache after the prompt, "
                                   "through host memory"
                     : pd->o.n_prefill > 1 && pd->o.n_decode > 1
                         ? "several prefill and several decode ranks could deadlock on the "
                           "transfer streams (one prefill or one decode rank only)"
                         : NULL;
    bool ok = !no && backend_p2p_fits(pd->o.be, why, cap);
    const struct kv_memory *mem = backend_kv_memory(pd->o.be);
    /* the pool's types and the window rule (the same blocks on both sides) */
    int64_t hi = mem ? ((int64_t)mem->dtype * 64 + mem->dtype_v) * 2 +
                           (pd->o.be->o.n_window_blocks > 0)
                     : -1,
            lo = -hi;
    ig_coll_allreduce_max(&hi);
    ig_coll_allreduce_max(&lo);
    if (ok && hi != -lo) { /* (every rank has the same options: a guard) */
        no = "the ranks' caches are of different types, or not all under the window rule";
        ok = false;
    }
    /* A decode rank reserves at a cache's head what its slots bound (a state slot, a
     * slot's window blocks); each prefill rank spends a decode rank's whole room as
     * told (cli/pd.h), so two could promise one slot twice: the host path waits. */
    if (ok && pd->o.n_prefill > 1 &&
        (kv_memory_states_for(mem, 1) > 0 || pd->o.be->o.n_window_blocks > 0)) {
        no = "with more than one prefill rank a decode rank's slot could be promised twice, "
             "and a hybrid's states or a window model's window blocks need one at a cache's "
             "head";
        ok = false;
    }
    if (no)
        snprintf(why, cap, "%s", no);
    return all_ok(ok, why, cap);
}

int pd_connect(struct pd *pd)
{
    const char *x = getenv("IGNITE_PD_XFER");
    bool nccl = x && !strcmp(x, "nccl"), host = x && !strcmp(x, "host");
    char msg[512] = "";
    if (pd->rank != 0) /* rank 0's lines go out; the others' go to it (pd_agree) */
        ig_error_capture(msg, sizeof msg);
    int st = IG_OK;
    if (x && *x && !nccl && !host && strcmp(x, "auto"))
        st = ig_error(IG_E_USAGE, "IGNITE_PD_XFER: expected nccl, host or auto, got '%s'", x);
    ig_error_capture(NULL, 0);
    if ((st = pd_agree(st, msg)) != IG_OK)
        return st;
    char why[256] = "";
    bool fits = nccl_fits(pd, !host, why, sizeof why);
    if (fits) { /* collective: the line of a rank that cannot, rank 0's */
        msg[0] = 0;
        ig_error_capture(msg, sizeof msg);
        st = backend_p2p_open(pd->o.be, &pd->p2p);
        ig_error_capture(NULL, 0);
        if (st != IG_OK) {
            fits = false;
            snprintf(why, sizeof why, "%s", msg[0] ? msg : "NCCL did not load");
        }
    }
    if (nccl && !fits) { /* asked for: never a silent fall-back */
        st = st != IG_OK ? st : IG_E_USAGE;
        if (pd->rank == 0)
            ig_error(st, "IGNITE_PD_XFER=nccl: the caches cannot move by NCCL: %s "
                     "(IGNITE_PD_XFER=host or auto take the host path)", why);
        return st;
    }
    pd->nccl = fits;
    if (!fits && !host)
        snprintf(pd->xfer_why, sizeof pd->xfer_why, "%s", why);
    pd->eo.layer_device = fits;
    msg[0] = 0;
    if (pd->rank != 0)
        ig_error_capture(msg, sizeof msg);
    st = engine_create(pd->o.be, pd->o.vocab, &pd->eo, &pd->e);
    ig_error_capture(NULL, 0);
    return pd_agree(st, msg);
}

