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
 *   - only whole, written blocks are shared: a request beside one whose
 *     block is half written shares the blocks before it and no more, one
 *     after it shares that block too, one that leaves it inside a block
 *     shares none of that block (n_cached, the pool's hits and peak);
 *   - with one slot requests end in submission order;
 *   - stop reasons: limit, context, interrupt;
 *   - conversations (params.keep, follows): a turn continuing a kept
 *     sequence prefills only its new tokens and samples what one request over
 *     the whole conversation samples; the kept tokens and logits are the
 *     history's (the last sampled token fed); Ctrl-C in a turn's prefill
 *     leaves the kept sequence as it was, in its answer keeps what was
 *     printed; a full context keeps no last token; bad `follows` refused. */
#include "backend/backend.h"
#include "core/status.h"
#include "decode/sampler.h"
#include "generate/generate.h"
#include "tests/generate/fake_backend.h"
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
    int64_t greedy_rows;  /* rows answered with a greedy token, not logits */
    int bad;
};

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
            float row_logits[VOCAB];
            float *l = batch->greedy ? row_logits : batch->logits + n_logits * VOCAB;
            for (int v = 0; v < VOCAB; v++)
                l[v] = (float)(mix(h, (uint64_t)v) % 1000);
            if (batch->greedy) /* a greedy step: the token, as a GPU returns it */
                batch->greedy[n_logits] = sampler_greedy(l, VOCAB);
            f->greedy_rows += batch->greedy != NULL;
            n_logits++;
        }
    }
    return IG_OK;
}

static const struct backend_ops fake_ops = FAKE_BACKEND_OPS(fake_step);

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
    int32_t out[600];
    int64_t n_out;
    int order; /* the order it ended in */
};

static int n_done;

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t)
{
    struct req *q = r->user;
    (void)user, (void)t;
    if (q->n_out < 600)
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

/* ---- the prefix index through the engine -------------------------------------------- */

/* Runs q (prompt tokens[0..n)) alone on a fresh engine: its tokens alone. */
static void run_alone(struct req *q, const int32_t *tokens, int64_t n)
{
    static struct fake f;
    int64_t hits;
    q->r.tokens = tokens;
    q->r.n_tokens = n;
    q->r.user = q;
    q->n_out = 0;
    run(q, 1, 1, 48, N_BLOCKS, &f, &hits);
}

static void prefix_req(struct req *q, const int32_t *tokens, int64_t n)
{
    memset(q, 0, sizeof *q);
    q->r.tokens = tokens;
    q->r.n_tokens = n;
    q->r.user = q;
    q->r.params = (struct gen_params){.n_predict = 4, .ignore_eog = true,
                                      .sp = {.temperature = 0, .top_k = 8, .top_p = 1,
                                             .repeat_penalty = 1, .seed = 1}};
}

/* Only whole blocks are shared, and only once written. A's prompt is 3
 * blocks and 10 tokens, prefilled 48 rows a step; B arrives while A's third
 * block is partly written, with A's first 3 blocks and 8 tokens of its own:
 * B shares exactly A's first two blocks (n_cached, the pool's hits, its
 * blocks in use) and computes the third itself. C, the same prompt as B
 * after A ended, shares all three (A's third block is full now); D, which
 * agrees with A for 22 tokens into the third block, shares two. Each one's
 * tokens equal its tokens alone (the fake's logits hash what its blocks
 * hold). Guards kv_pool_register's "full blocks only" and the engine's
 * register after each step; a mutant entering a partly written block fails
 * B's counts (docs/testing-mutants.md). */
static void check_prefix_blocks(void)
{
    enum { NA = 3 * KV_BLOCK + 10, NB = 3 * KV_BLOCK + 8 };
    static int32_t pa[NA], pb[NB], pd[NB];
    uint64_t rs = 5;
    for (int64_t i = 0; i < NA; i++)
        pa[i] = (int32_t)(test_rand_u64(&rs) % VOCAB);
    memcpy(pb, pa, 3 * KV_BLOCK * sizeof *pb);
    memcpy(pd, pa, (2 * KV_BLOCK + 22) * sizeof *pd);
    for (int64_t i = 3 * KV_BLOCK; i < NB; i++)
        pb[i] = (int32_t)((pa[i] + 1) % VOCAB); /* B leaves A after 3 blocks */
    for (int64_t i = 2 * KV_BLOCK + 22; i < NB; i++)
        pd[i] = (int32_t)((pa[i] + 1) % VOCAB); /* D inside the third */
    static struct req a, b, c, d, alone[4];
    prefix_req(&alone[0], pa, NA);
    prefix_req(&alone[1], pb, NB);
    prefix_req(&alone[3], pd, NB);
    run_alone(&alone[0], pa, NA);
    run_alone(&alone[1], pb, NB);
    run_alone(&alone[3], pd, NB);

    static struct fake f;
    fake_init(&f, 2, 48, N_BLOCKS);
    struct engine *e = NULL;
    struct engine_opts o = {.max_rows = 48, .share_prefixes = true,
                            .cb = {.on_token = on_token, .on_done = on_done}};
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    if (!e)
        return;
    const struct kv_pool *pool = engine_pool(e);
    prefix_req(&a, pa, NA);
    CHECK(engine_submit(e, &a.r) == IG_OK);
    for (int guard = 0; a.r.result.n_prompt <= 2 * KV_BLOCK && guard < 100; guard++)
        CHECK(engine_step(e) == IG_OK);
    /* the case's premise, checked rather than assumed: A's third block is
     * partly written and A holds exactly the blocks it wrote into */
    CHECKF(a.r.result.n_prompt > 2 * KV_BLOCK && a.r.result.n_prompt < 3 * KV_BLOCK &&
           kv_pool_used(pool) == 3,
           "premise: A prefilled %lld tokens, %lld blocks in use",
           (long long)a.r.result.n_prompt, (long long)kv_pool_used(pool));
    int64_t hits0 = kv_pool_hits(pool);
    prefix_req(&b, pb, NB);
    CHECK(engine_submit(e, &b.r) == IG_OK);
    CHECK(engine_step(e) == IG_OK);
    CHECKF(b.r.result.n_cached == 2 * KV_BLOCK && kv_pool_hits(pool) - hits0 == 2,
           "B beside A's partly written third block: %lld tokens cached, %lld blocks shared "
           "(want 128, 2)", (long long)b.r.result.n_cached,
           (long long)(kv_pool_hits(pool) - hits0));
    int guard = 0;
    while (engine_pending(e) && guard++ < 1000)
        CHECK(engine_step(e) == IG_OK);
    /* A took 4 blocks, B 4 of which 2 are A's: 6 at once at most */
    CHECKF(kv_pool_peak(pool) == 6 && kv_pool_used(pool) == 0,
           "blocks in use: peak %lld (want 6), %lld at the end", (long long)kv_pool_peak(pool),
           (long long)kv_pool_used(pool));

    /* after A: its third block is full and entered; D's third differs */
    hits0 = kv_pool_hits(pool);
    prefix_req(&c, pb, NB);
    CHECK(engine_submit(e, &c.r) == IG_OK);
    guard = 0;
    while (engine_pending(e) && guard++ < 1000)
        CHECK(engine_step(e) == IG_OK);
    CHECKF(c.r.result.n_cached == 3 * KV_BLOCK && kv_pool_hits(pool) - hits0 == 3,
           "C after A: %lld tokens cached, %lld blocks shared (want 192, 3)",
           (long long)c.r.result.n_cached, (long long)(kv_pool_hits(pool) - hits0));
    hits0 = kv_pool_hits(pool);
    prefix_req(&d, pd, NB);
    CHECK(engine_submit(e, &d.r) == IG_OK);
    guard = 0;
    while (engine_pending(e) && guard++ < 1000)
        CHECK(engine_step(e) == IG_OK);
    CHECKF(d.r.result.n_cached == 2 * KV_BLOCK && kv_pool_hits(pool) - hits0 == 2,
           "D: %lld tokens cached, %lld blocks shared (want 128, 2)",
           (long long)d.r.result.n_cached, (long long)(kv_pool_hits(pool) - hits0));
    CHECKF(f.bad == 0, "the fake backend saw %d violations", f.bad);

    struct req *got[4] = {&a, &b, &c, &d}, *want[4] = {&alone[0], &alone[1], &alone[1],
                                                       &alone[3]};
    for (int i = 0; i < 4; i++)
        CHECKF(got[i]->n_out == 4 && got[i]->n_out == want[i]->n_out &&
                   !memcmp(got[i]->out, want[i]->out, sizeof(int32_t) * 4),
               "request %c: its tokens beside the others differ from its tokens alone", 'A' + i);
    engine_free(e);
}

/* ---- conversations ---------------------------------------------------------------- */

/* The logits the fake gives after tokens[0..n) (its hash of the history). */
static void fake_logits(const int32_t *tokens, int64_t n, float *l)
{
    uint64_t h = 1;
    for (int64_t p = 0; p < n; p++)
        h = mix(h, (uint64_t)tokens[p]);
    for (int v = 0; v < VOCAB; v++)
        l[v] = (float)(mix(h, (uint64_t)v) % 1000);
}

struct turn {
    struct req q;
    int32_t all[N_CTX]; /* the whole conversation up to its answer */
    int64_t n_all;
};

/* Runs request q (after the conversation so far in conv[0..*n_conv), kept
 * as `follows`, 0 for none) to its end on e; appends its prompt and tokens
 * to conv. Returns the kept id. */
static int64_t run_turn(struct engine *e, struct req *q, int64_t follows, int32_t *conv,
                        int64_t *n_conv)
{
    q->r.follows = follows;
    q->n_out = 0;
    CHECK(engine_submit(e, &q->r) == IG_OK);
    int guard = 0;
    while (engine_pending(e) && guard++ < 10000)
        CHECK(engine_step(e) == IG_OK);
    memcpy(conv + *n_conv, q->r.tokens, (size_t)q->r.n_tokens * sizeof *conv);
    *n_conv += q->r.n_tokens;
    memcpy(conv + *n_conv, q->out, (size_t)q->n_out * sizeof *conv);
    *n_conv += q->n_out;
    return q->r.result.kept;
}

/* One fresh request over prompt[0..n) (the conversation as one prompt). */
static void run_whole(struct req *ref, const int32_t *prompt, int64_t n, const struct req *like)
{
    static struct fake f;
    *ref = *like;
    memcpy(ref->prompt, prompt, (size_t)n * sizeof *prompt); /* (n <= 200 here) */
    ref->r.tokens = ref->prompt;
    ref->r.n_tokens = n;
    ref->r.user = ref;
    ref->r.follows = 0;
    ref->r.params.keep = false;
    ref->n_out = 0;
    int64_t hits;
    run(ref, 1, 1, 64, N_BLOCKS, &f, &hits);
}

static void check_conversation(void)
{
    static struct fake f;
    static volatile sig_atomic_t stop_now;
    struct engine *e = NULL;
    fake_init(&f, 2, 64, N_BLOCKS);
    struct engine_opts o = {.max_rows = 64, .share_prefixes = true, .interrupt = &stop_now,
                            .cb = {.on_token = on_token, .on_done = on_done}};
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    if (!e)
        return;
    static struct req t[N_REQ], ref; /* (make_requests fills N_REQ) */
    make_requests(t);
    static int32_t conv[2 * N_CTX];
    int64_t n_conv = 0;
    for (int i = 0; i < 6; i++) {
        t[i].r.params.keep = true;
        t[i].r.params.n_predict = 4 + i;
        t[i].r.n_tokens = 20 + 7 * i;
    }
    /* turn 1: a fresh kept sequence; its answer's last token is fed */
    int64_t id = run_turn(e, &t[0], 0, conv, &n_conv);
    CHECKF(id > 0 && t[0].r.result.stop == GEN_STOP_LIMIT && t[0].n_out == 4, "turn 1: kept %lld, stop %d, %lld tokens", (long long)id, t[0].r.result.stop, (long long)t[0].n_out);
    CHECKF(t[0].r.result.n_decode == 3, "closing row counted as decode: %lld",
           (long long)t[0].r.result.n_decode);
    const int32_t *kt;
    const float *kl;
    int64_t kn = 0;
    float want[VOCAB];
    CHECK(engine_kept(e, id, &kt, &kn, &kl) == IG_OK && kn == n_conv &&
          !memcmp(kt, conv, (size_t)n_conv * sizeof *kt));
    fake_logits(conv, n_conv, want);
    CHECK(kl && !memcmp(kl, want, sizeof want));
    CHECK(!engine_pending(e) && engine_running(e) == 0);

    /* turn 2 continues it: only its own tokens are prefilled, and it samples
     * what one request over the whole conversation samples */
    int64_t before = n_conv;
    CHECK(run_turn(e, &t[1], id, conv, &n_conv) == id);
    CHECKF(t[1].r.result.n_cached == before && t[1].r.result.n_prompt == t[1].r.n_tokens,
           "turn 2: %lld cached, %lld prefilled", (long long)t[1].r.result.n_cached,
           (long long)t[1].r.result.n_prompt);
    run_whole(&ref, conv, before + t[1].r.n_tokens, &t[1]);
    CHECKF(ref.n_out == t[1].n_out && !memcmp(ref.out, t[1].out, (size_t)ref.n_out * 4),
           "turn 2 differs from the conversation run as one prompt");
    /* an empty turn samples its first token from the kept logits */
    t[2].r.n_tokens = 0;
    before = n_conv;
    CHECK(run_turn(e, &t[2], id, conv, &n_conv) == id && t[2].r.result.n_prompt == 0);
    run_whole(&ref, conv, before, &t[2]);
    CHECK(ref.n_out == t[2].n_out && !memcmp(ref.out, t[2].out, (size_t)ref.n_out * 4));

    /* another request runs beside the kept sequence in the second slot */
    static struct req other[N_REQ];
    make_requests(other);
    CHECK(engine_submit(e, &other[0].r) == IG_OK);
    while (engine_pending(e))
        CHECK(engine_step(e) == IG_OK);
    CHECK(other[0].r.result.stop == GEN_STOP_LIMIT && other[0].r.result.kept == 0);

    /* bad follows: unknown, with a history, twice in the queue */
    fprintf(stderr, "(three error lines expected)\n");
    t[3].r.follows = id + 7;
    CHECK(engine_submit(e, &t[3].r) == IG_E_USAGE);
    struct gen_history h = {.tokens = conv, .n = 1};
    t[3].r.follows = id;
    t[3].r.history = &h;
    CHECK(engine_submit(e, &t[3].r) == IG_E_USAGE);
    t[3].r.history = NULL;
    t[3].r.n_tokens = 200;
    t[4].r.follows = id;
    CHECK(engine_submit(e, &t[3].r) == IG_OK && engine_submit(e, &t[4].r) == IG_E_USAGE);
    /* Ctrl-C in t[3]'s prefill (200 tokens, 64 rows a step): the turn is undone */
    n_done = 0;
    CHECK(engine_step(e) == IG_OK);
    stop_now = 1;
    CHECK(engine_step(e) == IG_OK && !engine_pending(e));
    stop_now = 0;
    CHECK(t[3].r.result.stop == GEN_STOP_INTERRUPT && t[3].r.result.kept == id &&
          !t[3].r.result.ttft_set && t[3].r.result.n_prompt == 64);
    CHECK(engine_kept(e, id, &kt, &kn, &kl) == IG_OK && kn == n_conv &&
          !memcmp(kt, conv, (size_t)n_conv * sizeof *kt));
    fake_logits(conv, n_conv, want);
    CHECK(!memcmp(kl, want, sizeof want));
    /* the next turn writes over the undone rows and still sees the right history */
    before = n_conv;
    CHECK(run_turn(e, &t[4], id, conv, &n_conv) == id);
    run_whole(&ref, conv, before + t[4].r.n_tokens, &t[4]);
    CHECK(ref.n_out == t[4].n_out && !memcmp(ref.out, t[4].out, (size_t)ref.n_out * 4));
    /* Ctrl-C in the answer: what was sampled is kept, its last token fed */
    t[5].r.params.n_predict = -1;
    t[5].r.follows = id;
    t[5].n_out = 0;
    CHECK(engine_submit(e, &t[5].r) == IG_OK);
    for (int i = 0; i < 4; i++)
        CHECK(engine_step(e) == IG_OK);
    stop_now = 1;
    while (engine_pending(e))
        CHECK(engine_step(e) == IG_OK);
    stop_now = 0;
    memcpy(conv + n_conv, t[5].r.tokens, (size_t)t[5].r.n_tokens * 4);
    n_conv += t[5].r.n_tokens;
    memcpy(conv + n_conv, t[5].out, (size_t)t[5].n_out * 4);
    n_conv += t[5].n_out;
    CHECK(t[5].r.result.stop == GEN_STOP_INTERRUPT && t[5].n_out > 0 && t[5].r.result.kept == id);
    CHECK(engine_kept(e, id, &kt, &kn, &kl) == IG_OK && kn == n_conv &&
          !memcmp(kt, conv, (size_t)n_conv * sizeof *kt));
    fake_logits(conv, n_conv, want);
    CHECK(!memcmp(kl, want, sizeof want));
    engine_drop(e, id);
    fprintf(stderr, "(an error line expected)\n");
    CHECK(engine_kept(e, id, &kt, &kn, &kl) == IG_E_USAGE);
    engine_free(e);

    /* a full context: the last sampled token has no position and is not kept */
    fake_init(&f, 1, 64, N_CTX / KV_BLOCK);
    CHECK(engine_create(&f.base, NULL, &o, &e) == IG_OK);
    make_requests(t);
    t[0].r.params.keep = true;
    t[0].r.params.n_predict = -1;
    t[0].r.n_tokens = 100;
    n_conv = 0;
    id = run_turn(e, &t[0], 0, conv, &n_conv);
    CHECK(t[0].r.result.stop == GEN_STOP_CONTEXT && t[0].n_out == N_CTX - 100 + 1);
    CHECK(engine_kept(e, id, &kt, &kn, &kl) == IG_OK && kn == N_CTX &&
          !memcmp(kt, conv, N_CTX * sizeof *kt));
    fake_logits(conv, N_CTX, want);
    CHECK(!memcmp(kl, want, sizeof want));
    fprintf(stderr, "(an error line expected)\n");
    t[1].r.n_tokens = 1;
    t[1].r.follows = id;
    CHECK(engine_submit(e, &t[1].r) == IG_E_INPUT); /* no room left */
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
        /* temperature 0 asks the backend for tokens, 0.9 for logits */
        CHECKF((f.greedy_rows > 0) == (alone[i].r.params.sp.temperature == 0),
               "request %d (temperature %g): %lld greedy rows", i,
               alone[i].r.params.sp.temperature, (long long)f.greedy_rows);
    }
    /* 12 requests, 4 slots, 8 blocks (two or three requests at a time), 48 rows a step */
    run(busy, N_REQ, 4, 48, 8, &f, &hits);
    CHECKF(f.bad == 0, "the fake backend saw %d violations", f.bad);
    CHECKF(f.max_rows_seen <= 48, "a step of %lld rows", (long long)f.max_rows_seen);
    CHECKF(f.greedy_rows > 0, "no step of only greedy rows asked for tokens");
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

    check_prefix_blocks();
    check_conversation();
    return test_summary("test_engine");
}
