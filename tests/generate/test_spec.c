/* tests/generate/test_spec.c: speculative decoding in generate/ over fake
 * backends that need no model (their logits a function of the history the
 * blocks hold, so a row that reads a rolled-back or foreign token changes
 * the output):
 *   - spec_lookup and the draft length's choice at fixed costs on
 *     hand-worked cases;
 *   - greedy: every request's tokens with prompt lookup and with a draft
 *     model (a second fake that mostly agrees) are the tokens without a
 *     draft, in a busy batch (more requests than slots, shared prefixes, a
 *     small row budget, n_predict limits), with drafts both accepted and
 *     rejected (the draft model one sequence at a time: at the fixed
 *     costs it pays only alone); the pool's blocks all come back;
 *   - sampled: the distribution of three sampled tokens (top-k 4,
 *     temperature 1: 64 outcomes) over 12000 seeded requests, with lookup
 *     drafts (q one-hot) and with a draft model whose q differs from p,
 *     against the exact distribution computed here from the fake's logits
 *     (top 4, softmax): chi-square below the 0.001 critical value (63
 *     degrees of freedom: 103.4). A rule that keeps drafts with twice the
 *     probability it should fails it (lookup 704, draft model 203). */
#include "backend/backend.h"
#include "core/status.h"
#include "decode/sampler.h"
#include "generate/generate.h"
#include "generate/spec.h"
#include "tests/generate/fake_backend.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 16
#define N_BLOCKS 96
#define N_CTX 512

/* ---- the fake backends ------------------------------------------------------------- */

struct fake {
    struct backend base;
    int32_t shadow[N_BLOCKS][KV_BLOCK]; /* the token stored at each row; -1 none */
    uint64_t salt;   /* 0: the target; a draft's differs where noise says */
    int noise;       /* the draft: 1 in `noise` histories get other logits */
    double scale;    /* logits = value * scale */
    int64_t steps;
    int bad;
};

/* The target's logits after tokens[0..n): a hash of them, with a pull
 * towards last + 1 in two histories of three (so the text repeats and
 * lookup drafts are often right). */
static void target_logits(const int32_t *tokens, int64_t n, double scale, float *l)
{
    uint64_t h = 1;
    for (int64_t p = 0; p < n; p++)
        h = mix(h, (uint64_t)tokens[p]);
    for (int v = 0; v < VOCAB; v++)
        l[v] = (float)((double)(mix(h, (uint64_t)v) % 1000) * scale);
    if (h % 3)
        l[(tokens[n - 1] + 1) % VOCAB] += (float)(600 * scale);
}

static int fake_step(struct backend *b, const struct backend_batch *batch)
{
    struct fake *f = (struct fake *)b;
    f->steps++;
    if (batch->n_rows > b->o.max_rows || batch->n_seqs > b->o.n_slots)
        f->bad++;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
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
    int64_t n_logits = 0;
    int32_t hist[N_CTX];
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        for (int64_t r = 0; r < s->n_rows; r++) {
            int64_t row = s->row0 + r;
            if (batch->want_logits ? !batch->want_logits[row] : r != s->n_rows - 1)
                continue;
            int64_t n = s->pos0 + r + 1;
            for (int64_t p = 0; p < n; p++)
                hist[p] = f->shadow[s->table[p / KV_BLOCK]][p % KV_BLOCK];
            float tmp[VOCAB];
            float *l = batch->greedy ? tmp : batch->logits + n_logits * VOCAB;
            target_logits(hist, n, f->scale, l);
            uint64_t h = 7;
            for (int64_t p = 0; p < n; p++)
                h = mix(h, (uint64_t)hist[p]);
            if (f->salt && h % (uint64_t)f->noise == 0) /* the draft disagrees here */
                for (int v = 0; v < VOCAB; v++)
                    l[v] += (float)((double)(mix(h ^ f->salt, (uint64_t)v) % 1000) * f->scale);
            if (batch->greedy)
                batch->greedy[n_logits] = sampler_greedy(l, VOCAB);
            n_logits++;
        }
    }
    return IG_OK;
}

static const struct backend_ops fake_ops = FAKE_BACKEND_OPS(fake_step);

static struct model fake_model;

static void fake_init(struct fake *f, int n_slots, int64_t max_rows, uint64_t salt, int noise,
                      double scale)
{
    memset(f, 0, sizeof *f);
    memset(f->shadow, 0xff, sizeof f->shadow);
    fake_model.hp.n_vocab = VOCAB;
    f->salt = salt;
    f->noise = noise;
    f->scale = scale;
    f->base = (struct backend){.ops = &fake_ops, .m = &fake_model, .shares_blocks = true,
                               .o = {.n_ctx = N_CTX, .max_rows = max_rows, .n_slots = n_slots,
                                     .n_blocks = N_BLOCKS}};
}

/* ---- requests ---------------------------------------------------------------------- */

struct req {
    struct gen_request r;
    int32_t prompt[160];
    int32_t out[128];
    int64_t n_out;
};

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t)
{
    struct req *q = r->user;
    (void)user, (void)t;
    if (q->n_out < 128)
        q->out[q->n_out++] = token;
}

/* Runs n requests on a fresh engine over `target` (and `draft`, or NULL). */
static void run(struct req *q, int n, struct fake *target, struct fake *draft, int64_t max_rows,
                int64_t spec_max)
{
    struct engine *e = NULL;
    struct engine_opts o = {.max_rows = max_rows, .share_prefixes = true, .spec_max = spec_max,
                            .spec_fixed_cost = true,
                            .draft = draft ? &draft->base : NULL, .cb = {.on_token = on_token}};
    CHECK(engine_create(&target->base, NULL, &o, &e) == IG_OK);
    if (!e)
        return;
    for (int i = 0; i < n; i++) {
        q[i].n_out = 0;
        CHECK(engine_submit(e, &q[i].r) == IG_OK);
    }
    int64_t guard = 0;
    while (engine_pending(e) && guard++ < 10000000)
        CHECK(engine_step(e) == IG_OK);
    CHECK(!engine_pending(e));
    CHECK(kv_pool_used(engine_pool(e)) == 0); /* every block came back */
    engine_free(e);
    CHECK(target->bad == 0);
    CHECK(!draft || draft->bad == 0);
}

/* ---- the parts ------------------------------------------------------------------------ */

static void check_lookup(void)
{
    int32_t d[8];
    /* 1 2 3 9 1 2 3 | 1 2 3: the 3-gram "1 2 3" last seen at 4, followed by 1 2 3 */
    int32_t t[] = {1, 2, 3, 9, 1, 2, 3, 1, 2, 3};
    CHECK(spec_lookup(t, 10, 1, 3, 8, d) == 3);
    CHECK(d[0] == 1 && d[1] == 2 && d[2] == 3);
    CHECK(spec_lookup(t, 10, 1, 3, 2, d) == 2); /* k_max */
    /* the longest n-gram wins over a later shorter match */
    int32_t u[] = {5, 6, 7, 8, 0, 7, 4, 5, 6, 7};
    CHECK(spec_lookup(u, 10, 1, 3, 4, d) == 4); /* "5 6 7" at 0 -> 8 0 7 4 */
    CHECK(d[0] == 8 && d[1] == 0 && d[2] == 7 && d[3] == 4);
    CHECK(spec_lookup(u, 10, 1, 1, 3, d) == 3); /* "7" latest at 5 -> 4 5 6 */
    CHECK(d[0] == 4 && d[1] == 5 && d[2] == 6);
    int32_t w[] = {1, 2, 3, 4};
    CHECK(spec_lookup(w, 4, 1, 4, 4, d) == 0); /* nothing repeats */
    CHECK(spec_lookup(w, 1, 1, 4, 4, d) == 0);

    /* the draft length at the fixed costs a = 1, b = 0.3, a drafted token 0.44 */
    struct spec_cost c = {.fixed = true};
    struct spec_len l;
    spec_len_init(&l, false);
    CHECK(spec_len_next(&l, &c, 8, 1, 1) == 1); /* alpha 1/2: one pays, two do not */
    spec_len_update(&l, 4, 4);
    CHECK(spec_len_next(&l, &c, 8, 1, 1) == 4); /* alpha 5/6: 3.59 tok / 2.5 */
    CHECK(spec_len_next(&l, &c, 3, 1, 1) == 3); /* k_max */
    CHECK(spec_len_next(&l, &c, 8, 8, 8) == 1); /* 8 sequences pay for each row */
    for (int i = 0; i < 13; i++) /* alpha falls to 0.18: no draft pays */
        spec_len_update(&l, 1, 0);
    int64_t probes[6];
    for (int i = 0; i < 6; i++)
        probes[i] = spec_len_next(&l, &c, 8, 1, 1);
    CHECK(probes[0] == 1 && probes[1] == 0 && probes[2] == 1 && probes[3] == 0 &&
          probes[4] == 0 && probes[5] == 1); /* a probe after 1, 2 skipped steps */
    /* a draft model: prior alpha 0.8, a drafted token 0.44 more */
    spec_len_init(&l, true);
    CHECK(spec_len_next(&l, &c, 8, 1, 1) == 1); /* 1.8 tok / 2.04 beats 1 / 1.3 */
    CHECK(spec_len_best(&l, &c, 8, 8, 8) == 0); /* beside 7 others it does not pay */
    for (int i = 0; i < 3; i++) /* three failures: alpha 0.54, and no probe after */
        spec_len_update(&l, 1, 0);
    int64_t after = 0;
    for (int i = 0; i < 40; i++)
        after += spec_len_next(&l, &c, 8, 1, 1);
    CHECK(after == 0 && l.off);
    spec_len_init(&l, true); /* two idle steps (beside 7 others), then alone again: on */
    CHECK(spec_len_next(&l, &c, 8, 8, 8) == 0 && spec_len_next(&l, &c, 8, 8, 8) == 0);
    CHECK(spec_len_next(&l, &c, 8, 1, 1) == 1);
    for (int i = 0; i < 3; i++) /* three in a row: off for the request */
        CHECK(spec_len_next(&l, &c, 8, 8, 8) == 0);
    CHECK(spec_len_next(&l, &c, 8, 1, 1) == 0);
}

#define N_GREEDY 10

static void make_greedy(struct req *q, struct gen_spec sp, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < N_GREEDY; i++) {
        memset(&q[i], 0, sizeof q[i]);
        int64_t n = 3 + (int64_t)(test_rand_u64(&s) % 150);
        for (int64_t t = 0; t < n; t++) /* requests 0..4 share a 70-token prefix */
            q[i].prompt[t] = i < 5 && t < 70 ? (int32_t)(t * 7 % VOCAB)
                                             : (int32_t)(test_rand_u64(&s) % VOCAB);
        q[i].r.tokens = q[i].prompt;
        q[i].r.n_tokens = n;
        q[i].r.user = &q[i];
        q[i].r.params = (struct gen_params){
            .n_predict = 5 + (int64_t)(test_rand_u64(&s) % 100), .ignore_eog = true,
            .sp = {.temperature = 0, .top_k = 8, .top_p = 1, .repeat_penalty = 1,
                   .seed = (uint64_t)i},
            .spec = sp};
    }
}

static void check_greedy(void)
{
    static struct req ref[N_GREEDY], q[N_GREEDY];
    static struct fake target, draft;
    fake_init(&target, 3, 40, 0, 1, 1);
    make_greedy(ref, (struct gen_spec){0}, 5);
    run(ref, N_GREEDY, &target, NULL, 40, 0);
    struct gen_spec lookup = {.lookup = true, .n_max = 6, .ngram_min = 1, .ngram_max = 4};
    struct gen_spec model = {.draft = true, .n_max = 5};
    for (int pass = 0; pass < 2; pass++) {
        /* a draft model pays one sequence at a time at the fixed costs */
        fake_init(&target, pass ? 1 : 3, 40, 0, 1, 1);
        fake_init(&draft, pass ? 1 : 3, 40, 0x51, 5, 1);
        make_greedy(q, pass ? model : lookup, 5);
        run(q, N_GREEDY, &target, pass ? &draft : NULL, 40, 8);
        int64_t drafted = 0, accepted = 0, same = 0;
        for (int i = 0; i < N_GREEDY; i++) {
            drafted += q[i].r.result.n_drafted;
            accepted += q[i].r.result.n_accepted;
            same += q[i].n_out == ref[i].n_out &&
                    !memcmp(q[i].out, ref[i].out, (size_t)q[i].n_out * sizeof *q[i].out);
        }
        printf("greedy %s: %lld/%d requests the same, %lld of %lld drafted accepted\n",
               pass ? "draft model" : "lookup", (long long)same, N_GREEDY, (long long)accepted,
               (long long)drafted);
        CHECK(same == N_GREEDY);
        CHECK(accepted > 0 && accepted < drafted); /* both ways exercised */
    }
}

/* The exact probability of `out` [3] after prompt[0..n): top 4, softmax. */
static double exact_prob(const int32_t *prompt, int64_t n, const int32_t *out, double scale)
{
    int32_t h[64];
    memcpy(h, prompt, (size_t)n * sizeof *h);
    double p = 1;
    for (int t = 0; t < 3; t++) {
        float l[VOCAB];
        target_logits(h, n + t, scale, l);
        int order[VOCAB];
        for (int v = 0; v < VOCAB; v++)
            order[v] = v;
        for (int a = 0; a < VOCAB; a++) /* by descending logit, the lower id on ties */
            for (int b = a + 1; b < VOCAB; b++)
                if (l[order[b]] > l[order[a]] ||
                    (l[order[b]] == l[order[a]] && order[b] < order[a])) {
                    int x = order[a];
                    order[a] = order[b];
                    order[b] = x;
                }
        double z = 0, pv = 0;
        for (int a = 0; a < 4; a++)
            z += exp((double)l[order[a]] - (double)l[order[0]]);
        for (int a = 0; a < 4; a++)
            if (order[a] == out[t])
                pv = exp((double)l[order[a]] - (double)l[order[0]]) / z;
        p *= pv;
        h[n + t] = out[t];
    }
    return p;
}

#define N_DRAWS 12000

static double chi_square(struct req *q, const int32_t *prompt, int64_t n, double scale)
{
    /* outcomes: the top 4 at each step reach at most 4^3 sequences; map each
     * sequence seen to its count and sum over the ones with p > 0 */
    static int32_t seen[N_DRAWS][3];
    static int64_t count[N_DRAWS];
    int64_t n_seen = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        if (q[i].n_out != 3)
            return 1e9;
        int64_t j = 0;
        while (j < n_seen && memcmp(seen[j], q[i].out, sizeof seen[j]))
            j++;
        if (j == n_seen) {
            memcpy(seen[n_seen], q[i].out, sizeof seen[j]);
            count[n_seen++] = 0;
        }
        count[j]++;
    }
    double chi = 0, mass = 0;
    for (int64_t j = 0; j < n_seen; j++) {
        double e = exact_prob(prompt, n, seen[j], scale) * N_DRAWS;
        if (e <= 0)
            return 1e9; /* an outcome the model cannot produce */
        mass += e / N_DRAWS;
        chi += (count[j] - e) * (count[j] - e) / e;
    }
    chi += (1 - mass) * N_DRAWS; /* outcomes never drawn: (0 - e)^2 / e each */
    return chi;
}

static void check_sampled(void)
{
    static struct req q[N_DRAWS];
    static struct fake target, draft;
    /* every token follows another in the prompt: lookup always drafts */
    int32_t prompt[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 3, 9, 2};
    int64_t n = (int64_t)(sizeof prompt / sizeof *prompt);
    const double scale = 1.0 / 300, crit = 103.4; /* 63 degrees of freedom, p = 0.001 */
    for (int pass = 0; pass < 2; pass++) {
        struct gen_spec sp = pass == 1 ? (struct gen_spec){.draft = true, .n_max = 2}
                                       : (struct gen_spec){.lookup = true, .n_max = 2,
                                                           .ngram_min = 1, .ngram_max = 1};
        /* one at a time: beside others a draft would not pay at the fixed costs */
        fake_init(&target, 1, 64, 0, 1, scale);
        fake_init(&draft, 1, 64, 0x77, 1, scale); /* q is never p */
        for (int i = 0; i < N_DRAWS; i++) {
            memset(&q[i], 0, sizeof q[i]);
            memcpy(q[i].prompt, prompt, sizeof prompt);
            q[i].r.tokens = q[i].prompt;
            q[i].r.n_tokens = n;
            q[i].r.user = &q[i];
            q[i].r.params = (struct gen_params){
                .n_predict = 3, .ignore_eog = true,
                .sp = {.temperature = 1, .top_k = 4, .top_p = 1, .repeat_penalty = 1,
                       .seed = (uint64_t)i + 1},
                .spec = sp};
        }
        run(q, N_DRAWS, &target, pass == 1 ? &draft : NULL, 64, 2); /* (slots 1) */
        int64_t drafted = 0, accepted = 0;
        for (int i = 0; i < N_DRAWS; i++) {
            drafted += q[i].r.result.n_drafted;
            accepted += q[i].r.result.n_accepted;
        }
        double chi = chi_square(q, prompt, n, scale);
        printf("sampled %s: chi-square %.1f (critical %.1f), %lld of %lld drafted accepted\n",
               pass == 1 ? "draft model" : "lookup", chi, crit, (long long)accepted,
               (long long)drafted);
        CHECK(chi < crit);
        CHECK(accepted > 0 && accepted < drafted);
    }
}

int main(void)
{
    check_lookup();
    check_greedy();
    check_sampled();
    return test_summary("test_spec");
}
