/* tests/generate/test_engine.c: the scheduler of generate/engine.c over a
 * fake backend that needs no model. The fake remembers the token written at
 * every row of every block, checks at each step that what a sequence reads
 * (its positions below pos0, through its table) is exactly its own history
 * (so no other sequence wrote into its blocks, and shared prefix blocks hold
 * the right tokens), that steps respect the row budget and the slots, and
 * returns logits that are a hash of the sequence's whole history. Then:
 *   - every request's tokens in a busy batch (more requests than slots, a
 *     pool too small for all of them at once, shared prefixes, a budget
 *     smaller than the prompts) equal its tokens alone;
 *   - prefix blocks are shared (the pool counts hits), and a request that
 *     can never fit is refused at submission;
 *   - with one slot requests end in submission order;
 *   - stop reasons: limit, context, interrupt. */
#include "backend/backend.h"
#include "core/status.h"
#include "generate/generate.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB 16
#define N_BLOCKS 40
#define N_CTX 512

/* ---- the fake backend -------------------------------------------------------------- */

struct fake {
    struct backend base;
    int32_t shadow[N_BLOCKS][KV_BLOCK]; /* the token stored at each row; -1 none */
    int64_t steps, max_rows_seen;
    int bad;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static int fake_step(struct backend *b, const struct backend_batch *batch)
{
    struct fake *f = (struct fake *)b;
    f->steps++;
    if (batch->n_rows > b->o.max_rows || batch->n_seqs > b->o.n_slots)
        f->bad++;
    f->max_rows_seen = batch->n_rows > f->max_rows_seen ? batch->n_rows : f->max_rows_seen;
    int64_t n_logits = 0;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t j = 0; j < i; j++)
            f->bad += batch->seqs[j].slot == s->slot; /* a slot twice in a step */
        for (int64_t r = 0; r < s->n_rows; r++) {
            int64_t p = s->pos0 + r;
            int32_t blk = s->table[p / KV_BLOCK];
            if (blk < 0 || blk >= N_BLOCKS) {
                f->bad++;
                continue;
            }
            f->shadow[blk][p % KV_BLOCK] = batch->tokens[s->row0 + r];
        }
    }
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++) {
            int64_t row = s->row0 + r;
            if (batch->want_logits && !batch->want_logits[row])
                continue;
            if (!batch->want_logits && r != s->n_rows - 1)
                continue;
            /* the logits hash the history as the blocks hold it */
            uint64_t h = 1;
            for (int64_t p = 0; p <= s->pos0 + r; p++)
                h = mix(h, (uint64_t)f->shadow[s->table[p / KV_BLOCK]][p % KV_BLOCK]);
            float *l = batch->logits + n_logits++ * VOCAB;
            for (int v = 0; v < VOCAB; v++)
                l[v] = (float)(mix(h, (uint64_t)v) % 1000);
        }
    }
    return IG_OK;
}

static int fake_export(struct backend *b, const struct backend_seq *s, int64_t n,
                       const struct kv_store **st, const int32_t **t)
{
    (void)b, (void)s, (void)n, (void)st, (void)t;
    return IG_E_INTERNAL;
}

static int fake_import(struct backend *b, const struct backend_seq *s, const struct kv_store *src,
                       int64_t n)
{
    (void)b, (void)s, (void)src, (void)n;
    return IG_E_INTERNAL;
}

static size_t fake_bytes(const struct backend *b)
{
    (void)b;
    return 0;
}

static void fake_destroy(struct backend *b)
{
    (void)b;
}

static const struct backend_ops fake_ops = {fake_step, fake_export, fake_import, fake_bytes,
                                            fake_destroy};

static struct model fake_model;

static void fake_init(struct fake *f, int n_slots, int64_t max_rows, int64_t n_blocks)
{
    memset(f, 0, sizeof *f);
    memset(f->shadow, 0xff, sizeof f->shadow);
    fake_model.hp.n_vocab = VOCAB;
    f->base = (struct backend){.ops = &fake_ops, .m = &fake_model, .shares_blocks = true,
                               .o = {.n_ctx = N_CTX, .max_rows = max_rows, .n_slots = n_slots,
                                     .n_blocks = n_blocks}};
}

/* ---- requests ---------------------------------------------------------------------- */

#define N_REQ 12

struct req {
    struct gen_request r;
    int32_t prompt[200];
    int32_t out[300];
    int64_t n_out;
    int order; /* the order it ended in */
};

static int n_done;

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t)
{
    struct req *q = r->user;
    (void)user, (void)t;
    if (q->n_out < 300)
        q->out[q->n_out++] = token;
}

static void on_done(void *user, struct gen_request *r)
{
    (void)user;
    ((struct req *)r->user)->order = n_done++;
}

static void make_requests(struct req *q)
{
    uint64_t s = 99;
    for (int i = 0; i < N_REQ; i++) {
        memset(&q[i], 0, sizeof q[i]);
        int64_t n = 5 + (int64_t)(test_rand_u64(&s) % 150);
        for (int64_t t = 0; t < n; t++) /* requests 0..5 share a 130-token prefix */
            q[i].prompt[t] = i < 6 && t < 130 ? (int32_t)(t % VOCAB)
                                              : (int32_t)(test_rand_u64(&s) % VOCAB);
        q[i].r.tokens = q[i].prompt;
        q[i].r.n_tokens = n;
        q[i].r.user = &q[i];
        q[i].r.params = (struct gen_params){
            .n_predict = 3 + (int64_t)(test_rand_u64(&s) % 20), .ignore_eog = true,
            .sp = {.temperature = i % 2 ? 0.9 : 0, .top_k = 8, .top_p = 1, .repeat_penalty = 1,
                   .seed = (uint64_t)i}};
    }
}

/* Runs the requests on a fresh engine; their results stay in q. */
static void run(struct req *q, int n, int n_slots, int64_t max_rows, int64_t n_blocks,
                struct fake *f, int64_t *hits)
{
    fake_init(f, n_slots, max_rows, n_blocks);
    struct engine *e = NULL;
    struct engine_opts o = {.max_rows = max_rows, .share_prefixes = true,
                            .cb = {.on_token = on_token, .on_done = on_done}};
    CHECK(engine_create(&f->base, NULL, &o, &e) == IG_OK);
    if (!e)
        return;
    n_done = 0;
    for (int i = 0; i < n; i++)
        CHECK(engine_submit(e, &q[i].r) == IG_OK);
    int guard = 0;
    while (engine_pending(e) && guard++ < 100000)
        CHECK(engine_step(e) == IG_OK);
    CHECK(!engine_pending(e));
    *hits = kv_pool_hits(engine_pool(e));
    engine_free(e);
}

int main(void)
{
    static struct req alone[N_REQ], busy[N_REQ];
    static struct fake f;
    int64_t hits;
    make_requests(alone);
    make_requests(busy);
    for (int i = 0; i < N_REQ; i++) {
        run(&alone[i], 1, 1, 64, N_BLOCKS, &f, &hits);
        CHECK(f.bad == 0);
    }
    /* 12 requests, 4 slots, 8 blocks (two or three requests at a time), 48 rows a step */
    run(busy, N_REQ, 4, 48, 8, &f, &hits);
    CHECKF(f.bad == 0, "the fake backend saw %d violations", f.bad);
    CHECKF(f.max_rows_seen <= 48, "a step of %lld rows", (long long)f.max_rows_seen);
    CHECKF(hits > 0, "no prefix block was shared");
    for (int i = 0; i < N_REQ; i++) {
        const struct gen_result *a = &alone[i].r.result, *b = &busy[i].r.result;
        CHECKF(a->stop == GEN_STOP_LIMIT && b->stop == GEN_STOP_LIMIT && a->n_gen == b->n_gen,
               "request %d: stop %d/%d, %lld/%lld tokens", i, a->stop, b->stop,
               (long long)a->n_gen, (long long)b->n_gen);
        CHECKF(alone[i].n_out == busy[i].n_out &&
               !memcmp(alone[i].out, busy[i].out, (size_t)alone[i].n_out * sizeof(int32_t)),
               "request %d: its tokens in the batch differ from its tokens alone", i);
    }
    /* one slot: requests end in the order they came */
    for (int i = 0; i < N_REQ; i++)
        busy[i].n_out = 0;
    run(busy, N_REQ, 1, 64, N_BLOCKS, &f, &hits);
    int in_order = 1;
    for (int i = 0; i < N_REQ; i++)
        in_order &= busy[i].order == i;
    CHECK(in_order && f.bad == 0);

    /* a request that can never fit: refused at submission, one line */
    struct engine *e;
    fake_init(&f, 2, 64, 2);
    struct engine_opts o = {.max_rows = 64};
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    static struct req reqs[N_REQ];
    struct req *big = &reqs[0];
    make_requests(reqs);
    big->r.params.n_predict = 400;
    fprintf(stderr, "(an error line expected)\n");
    CHECK(engine_submit(e, &big->r) == IG_E_NOMEM);
    /* n_predict -1 runs until the context is full */
    big->r.params.n_predict = -1;
    big->r.n_tokens = 100;
    engine_free(e);
    fake_init(&f, 1, 64, N_CTX / KV_BLOCK);
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    CHECK(engine_submit(e, &big->r) == IG_OK);
    while (engine_pending(e))
        CHECK(engine_step(e) == IG_OK);
    CHECK(big->r.result.stop == GEN_STOP_CONTEXT && big->r.result.n_gen == N_CTX - 100 + 1);
    engine_free(e);

    /* Ctrl-C: the request in flight ends "interrupted", the queued one never starts */
    static volatile sig_atomic_t stop_now;
    fake_init(&f, 1, 64, N_CTX / KV_BLOCK);
    o.interrupt = &stop_now;
    o.cb.on_done = on_done;
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    struct req *two = reqs;
    make_requests(reqs);
    CHECK(engine_submit(e, &two[0].r) == IG_OK && engine_submit(e, &two[1].r) == IG_OK);
    n_done = 0;
    CHECK(engine_step(e) == IG_OK);
    stop_now = 1;
    CHECK(engine_step(e) == IG_OK);
    CHECK(two[0].r.result.stop == GEN_STOP_INTERRUPT && n_done == 1 && !engine_pending(e));
    engine_free(e);
    return test_summary("test_engine");
}
