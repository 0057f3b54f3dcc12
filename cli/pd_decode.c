/* cli/pd_decode.c: a decode rank of batch --pd (cli/pd.h): each cache from
 * a prefill rank assembled from its parts as they come (its head, each
 * layer's rows, the tokens and logits: kvcache/'s saved-cache parts), then
 * run as a history (--load-kv's path) with its line parsed again,
 * decode-only (on the NCCL path, pd_connect, the request's blocks, and for
 * a hybrid a slot, reserved in this rank's pool and engine at its head and
 * each layer's part, its rows or its recurrent state, received on the
 * device straight into them as its header comes, on the transfer stream;
 * the engine admits the request into that slot and adopts the blocks,
 * after the main stream's wait for them); the text, figures and
 * token times back to rank 0; its
 * room told to the prefill ranks. Covered by tests/tp/test_pd_cli.py. */
#include "cli/pd_impl.h"

#include "core/status.h"
#include "core/timer.h"
#include "grammar/grammar.h"
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_djob_free(struct djob *j)
{
    if (!j)
        return;
    free(j->line);
    free(j->got);
    batch_request_free(&j->in);
    grammar_free(j->grammar);
    free(j->tokens);
    free(j->logits);
    kv_store_free(j->kv);
    if (j->e) /* (nothing left to drop once the engine adopted them) */
        engine_history_release(j->e, &j->blocks);
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
                            .transfer_ms = j->transfer_ms, .path = pd->nccl ? "nccl" : "host"};
    pd_send_done(pd, j->h.seq, &res, j->text, j->len,
              res.status != IG_OK ? ig_status_name(res.status) : NULL, &t, j);
    pd->live_need -= j->h.need;
    pd->live_n--;
    pd_djob_free(j);
}

/* TAG_KV_HEAD: the request, its line and its cache's head; a store for the
 * rows to come, or on the NCCL path the pool's blocks for them: the room
 * the prefill rank counted for it (h.need, in pd->live_need from now), so
 * the pool can promise them. */
static int take_head(struct pd *pd, struct djob *j, const char *buf, size_t bytes)
{
    if (bytes < sizeof j->h)
        return ig_error(IG_E_INTERNAL, "a cache's head of the wrong size");
    memcpy(&j->h, buf, sizeof j->h);
    size_t rest = bytes - sizeof j->h;
    if (j->h.line_len < 0 || (size_t)j->h.line_len >= rest)
        return ig_error(IG_E_INTERNAL, "a cache's head of the wrong size");
    if (!(j->line = malloc((size_t)j->h.line_len + 1)) ||
        !(j->got = calloc((size_t)pd->layers->n_layer, sizeof *j->got)))
        return ig_error(IG_E_NOMEM, "out of memory for a request");
    memcpy(j->line, buf + sizeof j->h, (size_t)j->h.line_len);
    FILE *f = fmemopen((void *)(buf + sizeof j->h + j->h.line_len), rest - (size_t)j->h.line_len,
                       "rb");
    if (!f)
        return ig_error(IG_E_NOMEM, "out of memory reading a cache");
    int st = kv_file_read_header(&j->rd, f, "'the cache received'", pd->layers,
                                 pd->o.m->hp.n_vocab, pd->model_id);
    if (st == IG_OK && fgetc(f) != EOF)
        st = ig_error(IG_E_INTERNAL, "a cache's head of the wrong size");
    fclose(f);
    j->rd.f = NULL;
    j->rd.no_crc = true; /* the parts: MPI's messages, no checksum of their own */
    if (st == IG_OK && j->rd.hdr.n_vocab != pd->o.m->hp.n_vocab)
        st = ig_error(IG_E_INTERNAL, "a cache's head without logits");
    if (st != IG_OK || !pd->nccl)
        return st == IG_OK ? kv_file_new_store(&j->rd, &j->kv) : st;
    int64_t n_ctx = pd->o.be->o.n_ctx, max_pos = j->h.need * KV_BLOCK;
    max_pos = max_pos < n_ctx ? max_pos : n_ctx;
    if (j->rd.hdr.n_tokens > max_pos)
        return ig_error(IG_E_INTERNAL, "a cache of %lld positions in room for %lld",
                        (long long)j->rd.hdr.n_tokens, (long long)max_pos);
    st = engine_history_reserve(pd->e, j->rd.hdr.n_tokens, max_pos, &j->blocks, &j->slot);
    if (st == IG_OK)
        j->e = pd->e;
    return st;
}

/* Reads a part's bytes with `read` (the reader on them), all of them. */
static FILE *part(struct djob *j, const char *at, size_t bytes)
{
    FILE *f = bytes ? fmemopen((void *)at, bytes, "rb") : NULL;
    j->rd.f = f;
    return f;
}

static int part_end(struct djob *j, FILE *f, int st)
{
    if (st == IG_OK && fgetc(f) != EOF)
        st = ig_error(IG_E_INTERNAL, "a part of a cache of the wrong size");
    fclose(f);
    j->rd.f = NULL;
    return st;
}

/* TAG_KV_ROWS: a layer's next rows (or state) into the store, or on the
 * NCCL path into the blocks and slot reserved at the head. */
static int take_rows(struct pd *pd, struct djob *j, const char *buf, size_t bytes)
{
    struct rows_hdr h;
    if (bytes < sizeof h)
        return ig_error(IG_E_INTERNAL, "a part of a cache of the wrong size");
    memcpy(&h, buf, sizeof h);
    int64_t n = j->rd.hdr.n_tokens;
    bool state = h.layer >= 0 && h.layer < pd->layers->n_layer &&
                 pd->layers->layers[h.layer].kind == KV_RECURRENT;
    if (h.layer < 0 || h.layer >= pd->layers->n_layer || h.p0 != j->got[h.layer] ||
        h.p1 <= h.p0 || h.p1 > n || (state && h.p1 != n)) /* (a state: the prompt's) */
        return ig_error(IG_E_INTERNAL, "a part of a cache out of order (layer %lld, rows "
                        "%lld..%lld)", (long long)h.layer, (long long)h.p0, (long long)h.p1);
    if (h.nccl != pd->nccl || (h.nccl && bytes != sizeof h))
        return ig_error(IG_E_INTERNAL, "a part of a cache by %s on a rank taking them by %s",
                        h.nccl ? "NCCL" : "MPI", pd->nccl ? "NCCL" : "MPI");
    int st;
    if (h.nccl) { /* queued at once: the prefill rank's sends wait for them */
        struct backend_p2p_seq at = {.table = j->blocks.table, .wtable = j->blocks.wtable,
                                     .slot = j->slot, .n_pos = n};
        st = backend_kv_recv_part(pd->o.be, pd->p2p, j->prefill_rank, &at, h.layer, h.p0, h.p1,
                                  NULL);
    } else {
        FILE *f = part(j, buf + sizeof h, bytes - sizeof h);
        if (!f)
            return ig_error(IG_E_NOMEM, "out of memory reading a cache");
        st = part_end(j, f, kv_file_read_layer(&j->rd, j->kv, h.layer, h.p0, h.p1));
    }
    if (st == IG_OK)
        j->got[h.layer] = h.p1;
    return st;
}

/* TAG_KV: every layer arrived (else it is an error), the tokens and logits;
 * the line parsed again, the cache as a history, the request into this
 * rank's engine. */
static int take_cache(struct pd *pd, struct djob *j, const char *buf, size_t bytes)
{
    int64_t line_len = j->h.line_len;
    if (bytes < sizeof j->h)
        return ig_error(IG_E_INTERNAL, "a cache message of the wrong size");
    memcpy(&j->h, buf, sizeof j->h);
    j->h.line_len = line_len;
    /* arrival on rank 0, on this rank's clock (the time before this rank is
     * the sum of each rank's part, this last part's trip included) */
    j->r.t_arrival_ns = j->t_recv_ns - (int64_t)((j->h.ago_ms + j->last_ms) * 1e6);
    for (int64_t l = 0; l < pd->layers->n_layer; l++)
        if (pd->layers->layers[l].kind != KV_SHARED && j->got[l] != j->rd.hdr.n_tokens)
            return ig_error(IG_E_INTERNAL, "a cache ended with layer %lld's rows to %lld of "
                            "%lld", (long long)l, (long long)j->got[l],
                            (long long)j->rd.hdr.n_tokens);
    int64_t n = j->rd.hdr.n_tokens;
    if (!(j->tokens = malloc((size_t)n * sizeof *j->tokens)) ||
        !(j->logits = malloc((size_t)pd->o.m->hp.n_vocab * sizeof *j->logits)))
        return ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)n);
    FILE *f = part(j, buf + sizeof j->h, bytes - sizeof j->h);
    if (!f)
        return ig_error(IG_E_NOMEM, "out of memory reading a cache");
    int st = part_end(j, f, kv_file_read_tokens(&j->rd, j->tokens, j->logits));
    if (st != IG_OK)
        return st;
    int64_t t0 = ig_now_ns();
    if (line_len) { /* batch: the line's stop strings, constraint, ... */
        st = batch_request_parse(j->line, (size_t)line_len, pd->o.plain, pd->o.defaults, &j->in);
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
    j->hist = (struct gen_history){.tokens = j->tokens, .n = n, .logits = j->logits,
                                   .kv = j->kv, .blocks = j->e ? &j->blocks : NULL};
    j->pack_ms += (double)(ig_now_ns() - t0) / 1e6;
    j->r.history = &j->hist;
    j->r.user = j;
    /* Its receives before the step that admits it reads the blocks: the main
     * stream waits for the transfers queued so far (a request's last ones
     * came before its TAG_KV). The others queued since, of the requests still
     * arriving, are layers their prefill rank has queued, not always computed
     * (its hook runs as the layer is queued): on a GPU this rank's steps may
     * wait out the rest of that rank's step (docs/gpu.md, the review). */
    if (j->e && (st = backend_p2p_wait(pd->o.be)) != IG_OK)
        return st;
    return engine_submit(pd->e, &j->r);
}

/* The cache arriving from `from` for request seq (unlinked where `take`). */
static struct djob *arriving(struct pd *pd, int from, int64_t seq, bool take)
{
    for (struct djob **p = &pd->arriving; *p; p = &(*p)->next)
        if ((*p)->prefill_rank == from && (*p)->h.seq == seq) {
            struct djob *j = *p;
            if (take)
                *p = j->next;
            return j;
        }
    return NULL;
}

/* Its room back (a cache dropped or refused). Its blocks go back to the pool
 * after the receives into them: the main stream's next owner of them waits. */
static void forget(struct pd *pd, struct djob *j)
{
    int st = j->e ? backend_p2p_wait(pd->o.be) : IG_OK;
    if (st != IG_OK)
        pd_fatal(pd, st, "a dropped cache's receives (above)");
    pd->live_need -= j->h.need;
    pd->live_n--;
    pd_djob_free(j);
}

void pd_receive_part(struct pd *pd, size_t bytes, int from, int tag)
{
    int64_t t0 = ig_now_ns();
    char *buf = pd_take(pd, bytes, from, tag);
    int64_t t1 = ig_now_ns();
    double ms = (double)(t1 - t0) / 1e6;
    pd->stats.transfer_ms += ms;
    pd->stats.messages++;
    int64_t seq = -1;
    if (bytes >= sizeof seq)
        memcpy(&seq, buf, sizeof seq); /* (every part starts with it) */
    struct djob *j = tag == TAG_KV_HEAD ? calloc(1, sizeof *j)
                                        : arriving(pd, from, seq, tag != TAG_KV_ROWS);
    if (!j) {
        if (tag == TAG_KV_HEAD)
            pd_fatal(pd, IG_E_NOMEM, "out of memory for a request");
        pd_fatal(pd, IG_E_INTERNAL, "a part of a cache that fits no request");
    }
    j->transfer_ms += ms;
    if (tag == TAG_KV_DROP) { /* its prompt failed: the prefill rank tells rank 0 */
        free(buf);
        forget(pd, j);
        return;
    }
    int st = IG_OK;
    char err[sizeof j->err] = "";
    ig_error_capture(err, sizeof err);
    if (tag == TAG_KV_HEAD) {
        j->prefill_rank = from;
        st = take_head(pd, j, buf, bytes);
        if (j->h.need < 0 || bytes < sizeof j->h)
            pd_fatal(pd, IG_E_INTERNAL, "a cache's head of the wrong size");
        j->next = pd->arriving;
        pd->arriving = j;
        pd->live_need += j->h.need; /* its room, from now */
        pd->live_n++;
    } else if (!j->failed || (pd->nccl && tag == TAG_KV_ROWS)) {
        j->t_recv_ns = t1;
        j->last_ms = ms;
        st = tag == TAG_KV_ROWS ? take_rows(pd, j, buf, bytes) : take_cache(pd, j, buf, bytes);
    }
    ig_error_capture(NULL, 0);
    free(buf);
    /* The NCCL path: a prefill rank's sends wait on this rank's receives,
     * which a failed head or part cannot post: the job cannot go on. */
    if (pd->nccl && st != IG_OK && tag != TAG_KV)
        pd_fatal(pd, st, err);
    if (st != IG_OK && !j->failed) {
        j->failed = st;
        memcpy(j->err, err, sizeof err);
    }
    if (tag != TAG_KV)
        return;
    pd->stats.caches++;
    pd->stats.kv_bytes += j->h.kv_bytes;
    if (j->failed) {
        pd_send_error(pd, j->h.seq, j->failed, j->err);
        forget(pd, j);
    }
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

