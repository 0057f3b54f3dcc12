/* tests/unit/test_sampler.c: decode/sampler.c against brute-force references
 * written here: greedy = argmax, the penalty arithmetic, the exact candidate
 * sets of top-k / top-p / min-p, the final probabilities, empirical draw
 * frequencies (fixed seed, so the chi-square bound cannot flake), and the
 * generator's first outputs against an independent Python implementation. */
#include "core/status.h"
#include "decode/sampler.h"
#include "tests/test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct sampler_params off(void)
{
    return (struct sampler_params){.temperature = 1, .top_k = 0, .top_p = 1, .min_p = 0,
                                   .repeat_penalty = 1, .repeat_last_n = 0, .seed = 1};
}

static struct sampler *make(struct sampler_params p, int64_t n)
{
    struct sampler *s;
    IG_ASSERT(sampler_create(&p, n, &s) == IG_OK);
    return s;
}

/* Logits whose softmax at temperature 1 is exactly `probs` (up to rounding). */
static void logits_from_probs(const double *probs, int64_t n, float *logits)
{
    for (int64_t i = 0; i < n; i++)
        logits[i] = (float)log(probs[i]);
}

static void test_generator_known_answers(void)
{
    /* From a Python big-integer implementation of splitmix64 + xoshiro256**. */
    static const double want0[3] = {0.6012629994179048, 0.7477740925472398, 0.10301998939503632};
    static const double want42[3] = {0.08386297105988216, 0.3789802506626686, 0.6800434110281394};
    struct sampler_params p = off();
    p.seed = 0;
    struct sampler *a = make(p, 4);
    p.seed = 42;
    struct sampler *b = make(p, 4);
    for (int i = 0; i < 3; i++) {
        double x = sampler_uniform(a), y = sampler_uniform(b);
        CHECKF(x == want0[i], "seed 0 draw %d: %.17g != %.17g", i, x, want0[i]);
        CHECKF(y == want42[i], "seed 42 draw %d: %.17g != %.17g", i, y, want42[i]);
    }
    sampler_free(a);
    sampler_free(b);
}

static void test_greedy_is_argmax(void)
{
    enum { N = 1000 };
    static float logits[N];
    struct sampler_params p = off();
    p.temperature = 0;
    p.top_k = 3; /* ignored when greedy */
    struct sampler *s = make(p, N);
    srand(7);
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < N; i++)
            logits[i] = (float)rand() / RAND_MAX * 20 - 10;
        CHECKF(sampler_sample(s, logits) == test_argmax(logits, N), "trial %d", trial);
    }
    for (int i = 0; i < N; i++)
        logits[i] = 1.0f;
    logits[500] = logits[900] = 3.0f;
    CHECKF(sampler_sample(s, logits) == 500, "ties go to the lower id");
    sampler_free(s);
}

static void test_penalty_math(void)
{
    float logits[8] = {2.0f, -2.0f, 0.0f, 4.0f, -1.0f, 1.0f, 3.0f, -3.0f};
    float orig[8];
    memcpy(orig, logits, sizeof logits);
    struct sampler_params p = off();
    p.repeat_penalty = 2.0;
    p.repeat_last_n = 4;
    struct sampler *s = make(p, 8);
    /* Token 3 enters first and falls out of the window of 4. */
    int32_t hist[] = {3, 0, 1, 1, 2};
    for (size_t i = 0; i < sizeof hist / sizeof hist[0]; i++)
        sampler_accept(s, hist[i]);
    sampler_apply_penalty(s, logits);
    CHECKF(logits[0] == 1.0f, "positive logit divided: %g", logits[0]);
    CHECKF(logits[1] == -4.0f, "negative logit multiplied once, not per occurrence: %g", logits[1]);
    CHECKF(logits[2] == 0.0f, "zero stays zero: %g", logits[2]);
    CHECKF(logits[3] == orig[3], "token out of the window untouched: %g", logits[3]);
    for (int i = 4; i < 8; i++)
        CHECKF(logits[i] == orig[i], "token %d untouched", i);
    sampler_free(s);

    /* Greedy with a penalty picks the argmax of the penalised logits. */
    float l2[3] = {5.0f, 4.0f, 0.0f};
    p = off();
    p.temperature = 0;
    p.repeat_penalty = 1.5;
    p.repeat_last_n = 64;
    s = make(p, 3);
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, l2) == 1); /* 5/1.5 < 4 */
    sampler_free(s);
}

/* Reference order: logit descending, id ascending; a plain insertion sort. */
static void ref_order(const float *logits, int64_t n, int32_t *ord)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i;
        while (j > 0 && (logits[ord[j - 1]] < logits[i] ||
                         (logits[ord[j - 1]] == logits[i] && ord[j - 1] > i))) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = (int32_t)i;
    }
}

/* Checks the candidate set against the expected ids (in order) and that the
 * probabilities are the temperature softmax over exactly that set. */
static void check_set(const char *what, struct sampler *s, const float *logits_in, int64_t n,
                      const int32_t *want, int64_t n_want, double temp)
{
    float *logits = malloc((size_t)n * sizeof *logits);
    memcpy(logits, logits_in, (size_t)n * sizeof *logits);
    const int32_t *ids;
    const float *probs;
    int64_t cnt = sampler_candidates(s, logits, &ids, &probs);
    CHECKF(cnt == n_want, "%s: %lld candidates, want %lld", what, (long long)cnt,
           (long long)n_want);
    double z = 0;
    for (int64_t i = 0; i < n_want; i++)
        z += exp((double)logits_in[want[i]] / temp);
    for (int64_t i = 0; i < cnt && i < n_want; i++) {
        CHECKF(ids[i] == want[i], "%s: candidate %lld is %d, want %d", what, (long long)i,
               ids[i], want[i]);
        double pw = exp((double)logits_in[want[i]] / temp) / z;
        CHECKF(fabs(probs[i] - pw) < 1e-6, "%s: p[%lld] %g, want %g", what, (long long)i,
               probs[i], pw);
    }
    free(logits);
}

static void test_filters_keep_the_right_set(void)
{
    /* p = .4 .3 .15 .1 .05, scrambled over ids; no cut sits near a boundary. */
    static const double probs[5] = {0.1, 0.4, 0.05, 0.3, 0.15};
    float logits[5];
    logits_from_probs(probs, 5, logits);
    struct sampler_params p = off();
    struct sampler *s;

    int32_t all[5] = {1, 3, 4, 0, 2};
    s = make(p, 5);
    check_set("no filter", s, logits, 5, all, 5, 1.0);
    sampler_free(s);

    p = off(); p.top_k = 2;
    s = make(p, 5);
    check_set("top-k 2", s, logits, 5, all, 2, 1.0);
    sampler_free(s);

    p = off(); p.top_p = 0.8; /* .4 + .3 = .7 < .8; + .15 crosses: 3 kept */
    s = make(p, 5);
    check_set("top-p 0.8", s, logits, 5, all, 3, 1.0);
    sampler_free(s);

    p = off(); p.top_p = 0.3; /* the first token alone crosses */
    s = make(p, 5);
    check_set("top-p 0.3", s, logits, 5, all, 1, 1.0);
    sampler_free(s);

    p = off(); p.min_p = 0.3; /* p >= .12: .4 .3 .15 */
    s = make(p, 5);
    check_set("min-p 0.3", s, logits, 5, all, 3, 1.0);
    sampler_free(s);

    p = off(); p.min_p = 0.2; p.top_p = 0.6; /* top-p keeps 2, min-p (>= .08) keeps 4 */
    s = make(p, 5);
    check_set("top-p then min-p", s, logits, 5, all, 2, 1.0);
    sampler_free(s);

    /* Temperature acts after the cuts: top-p judged at T = 1 keeps 3 even
     * though at T = 0.5 the first two alone would exceed 0.8. */
    p = off(); p.top_p = 0.8; p.temperature = 0.5;
    s = make(p, 5);
    check_set("top-p at T=0.5", s, logits, 5, all, 3, 0.5);
    sampler_free(s);

    p = off(); p.top_k = 4; p.top_p = 0.9; p.min_p = 0.3; p.temperature = 2;
    s = make(p, 5);
    check_set("k4 p.9 min.3 T2", s, logits, 5, all, 3, 2.0);
    sampler_free(s);
}

/* Random large vocabularies against the brute-force reference. */
static void test_filters_random(void)
{
    enum { N = 5000 };
    static float logits[N];
    static int32_t ord[N];
    srand(11);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < N; i++)
            logits[i] = (float)((double)rand() / RAND_MAX * (trial % 5 < 2 ? 60.0 : 12.0));
        logits[rand() % N] = logits[rand() % N]; /* a tie */
        ref_order(logits, N, ord);
        struct sampler_params p = off();
        p.top_k = trial % 3 == 0 ? 0 : 1 + rand() % 200;
        p.top_p = trial % 2 ? 0.5 + 0.5 * rand() / RAND_MAX : 1.0;
        p.min_p = trial % 4 == 1 ? 0.0 : 0.2 * rand() / RAND_MAX;
        p.temperature = 0.3 + 1.5 * rand() / RAND_MAX;

        int64_t k = p.top_k ? p.top_k : N;
        double m = logits[ord[0]], z = 0, cum = 0;
        for (int64_t i = 0; i < k; i++)
            z += exp(logits[ord[i]] - m);
        int64_t n_p = k;
        if (p.top_p < 1)
            for (int64_t i = 0; i < k; i++) {
                cum += exp(logits[ord[i]] - m) / z;
                if (cum >= p.top_p) { n_p = i + 1; break; }
            }
        int64_t n_keep = 0;
        while (n_keep < n_p && exp(logits[ord[n_keep]] - m) >= p.min_p)
            n_keep++;
        struct sampler *s = make(p, N);
        char what[64];
        snprintf(what, sizeof what, "random trial %d", trial);
        check_set(what, s, logits, N, ord, n_keep, p.temperature);
        sampler_free(s);
    }
}

/* Chi-square of draw counts vs the expected probabilities. The seed is
 * fixed, so the statistic is one deterministic number: the bound (about 4x
 * the degrees of freedom plus a margin) catches a wrong distribution, never
 * chance. Filtered-out tokens must never be drawn. */
static void test_draw_frequencies(void)
{
    static const double probs[6] = {0.05, 0.25, 0.02, 0.35, 0.13, 0.20};
    float logits[6], work[6];
    logits_from_probs(probs, 6, logits);
    struct sampler_params p = off();
    p.top_k = 5;       /* drops id 2 (.02) */
    p.min_p = 0.2;     /* keeps p >= .07: drops id 0 (.05) too */
    p.temperature = 0.7;
    p.seed = 1234;
    struct sampler *s = make(p, 6);
    enum { DRAWS = 200000 };
    long count[6] = {0};
    for (int i = 0; i < DRAWS; i++) {
        memcpy(work, logits, sizeof work);
        count[sampler_sample(s, work)]++;
    }
    CHECKF(count[0] == 0 && count[2] == 0, "filtered tokens drawn: %ld %ld", count[0], count[2]);
    int keep[4] = {1, 3, 4, 5};
    double z = 0, chi2 = 0;
    for (int i = 0; i < 4; i++)
        z += pow(probs[keep[i]], 1 / p.temperature);
    for (int i = 0; i < 4; i++) {
        double e = DRAWS * pow(probs[keep[i]], 1 / p.temperature) / z;
        chi2 += (count[keep[i]] - e) * (count[keep[i]] - e) / e;
    }
    CHECKF(chi2 < 20.0, "chi-square %g over 3 degrees of freedom", chi2);
    sampler_free(s);
}

static void test_seed_repeatability(void)
{
    enum { N = 300, STEPS = 200 };
    static float base[N], w1[N], w2[N];
    for (int i = 0; i < N; i++)
        base[i] = (float)sin(i * 0.37) * 3;
    struct sampler_params p = sampler_default_params();
    p.seed = 99;
    p.repeat_penalty = 1.1;
    struct sampler *a = make(p, N), *b = make(p, N);
    p.seed = 100;
    struct sampler *c = make(p, N);
    int same_as_c = 0;
    for (int t = 0; t < STEPS; t++) {
        memcpy(w1, base, sizeof base);
        memcpy(w2, base, sizeof base);
        int32_t x = sampler_sample(a, w1), y = sampler_sample(b, w2);
        CHECKF(x == y, "step %d: %d != %d with the same seed", t, x, y);
        memcpy(w2, base, sizeof base);
        same_as_c += sampler_sample(c, w2) == x;
        sampler_accept(a, x);
        sampler_accept(b, y);
        sampler_accept(c, x);
    }
    CHECKF(same_as_c < STEPS, "a different seed gave the same %d tokens", STEPS);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

static void mask_thirds(void *user, float *logits, int64_t n);

/* Greedy over rows of every length up to 70 and Llama 3's 128256, drawn from
 * few values (ties) with NaN, +inf, -inf and FLT_MAX among them, against the
 * rule spelled out (test_greedy_rule); which samplers may hand greedy to a
 * backend (sampler_greedy_only). */
static void test_greedy_non_finite_rows(void)
{
    static const float pool[] = {NAN, INFINITY, -INFINITY, FLT_MAX, 1.0f, 2.0f, -3.0f, 0.0f};
    static float row[128256], copy[128256];
    struct sampler_params p = off();
    p.temperature = 0;
    srand(23);
    int checks = 0;
    for (int64_t n = 1; n <= 128256; n = n < 70 ? n + 1 : n == 70 ? 128256 : n + 1) {
        for (int trial = 0; trial < 40; trial++) {
            /* which values this row may hold: a random subset of the pool */
            int allowed = rand() & 255;
            for (int64_t i = 0; i < n; i++) {
                int k;
                do
                    k = rand() % 8;
                while (!(allowed >> k & 1) && allowed);
                row[i] = pool[k];
            }
            if (trial % 4 == 0) /* one large finite value anywhere in the row */
                row[n - 1 - rand() % n] = 5.0f;
            memcpy(copy, row, (size_t)n * sizeof *row);
            struct sampler *s = make(p, n);
            int want = test_greedy_rule(copy, n);
            CHECKF(sampler_greedy(row, n) == want && !memcmp(row, copy, (size_t)n * 4),
                   "sampler_greedy, n %lld trial %d", (long long)n, trial);
            CHECKF(sampler_sample(s, row) == want, "n %lld trial %d", (long long)n, trial);
            sampler_free(s);
            checks++;
        }
    }
    CHECK(checks == 71 * 40); /* the lengths 1 to 70 and 128256 all ran */
    p.repeat_penalty = 1.1;
    p.repeat_last_n = 64;
    struct sampler *s = make(p, 8);
    CHECK(!sampler_greedy_only(s)); /* a penalty reads the history */
    sampler_free(s);
    p.repeat_last_n = 0;
    s = make(p, 8);
    CHECK(sampler_greedy_only(s)); /* ... unless it keeps none */
    sampler_free(s);
    p.repeat_penalty = 1;
    p.temperature = 0.5;
    s = make(p, 8);
    CHECK(!sampler_greedy_only(s));
    sampler_free(s);
    p.temperature = 0;
    s = make(p, 8);
    CHECK(sampler_greedy_only(s));
    sampler_set_mask(s, mask_thirds, NULL);
    CHECK(!sampler_greedy_only(s));
    sampler_free(s);
}

/* NaN and infinite logits never yield an id out of range. */
static void test_non_finite(void)
{
    enum { N = 64 };
    float l[N];
    struct sampler_params p = sampler_default_params();
    p.top_k = 0;
    struct sampler *s = make(p, N);
    for (int i = 0; i < N; i++)
        l[i] = NAN;
    CHECK(sampler_sample(s, l) == 0);
    for (int i = 0; i < N; i++)
        l[i] = i == 9 ? 1.0f : NAN;
    CHECK(sampler_sample(s, l) == 9);
    for (int i = 0; i < N; i++)
        l[i] = i % 2 ? -INFINITY : NAN;
    CHECK(sampler_sample(s, l) == 0);
    for (int i = 0; i < N; i++)
        l[i] = i == 33 ? INFINITY : (float)i;
    CHECK(sampler_sample(s, l) == 33);
    sampler_free(s);
}

/* The mask hook: every third token allowed. */
static void mask_thirds(void *user, float *logits, int64_t n)
{
    (void)user;
    for (int64_t i = 0; i < n; i++)
        if (i % 3)
            logits[i] = -INFINITY;
}

/* With a mask hook the samplers work among the allowed tokens: top-k keeps
 * the k best allowed ones, min-p judges against the best allowed one, and no
 * draw (greedy or not, whatever u) returns a masked token. References are
 * brute force over the allowed ids. */
static void test_mask_hook(void)
{
    enum { N = 300 };
    float base[N], l[N];
    uint64_t seed = 77;
    for (int i = 0; i < N; i++)
        base[i] = 4 * test_rand_f(&seed);
    struct sampler_params p = off();
    p.top_k = 5;
    struct sampler *s = make(p, N);
    sampler_set_mask(s, mask_thirds, NULL);
    const int32_t *ids;
    const float *probs;
    memcpy(l, base, sizeof l);
    int64_t cnt = sampler_candidates(s, l, &ids, &probs);
    CHECK(cnt == 5);
    for (int64_t k = 0; k < cnt; k++) { /* the k-th best allowed, by brute force */
        int better = 0;
        for (int j = 0; j < N; j += 3)
            better += base[j] > base[ids[k]];
        CHECKF(ids[k] % 3 == 0 && better == k, "top-k candidate %lld: id %d", (long long)k, ids[k]);
    }
    sampler_free(s);

    p = off();
    p.min_p = 0.2;
    s = make(p, N);
    sampler_set_mask(s, mask_thirds, NULL);
    memcpy(l, base, sizeof l);
    cnt = sampler_candidates(s, l, &ids, &probs);
    float best = -INFINITY;
    for (int j = 0; j < N; j += 3)
        best = base[j] > best ? base[j] : best;
    int want = 0;
    for (int j = 0; j < N; j += 3)
        want += exp((double)base[j] - best) >= 0.2;
    CHECKF(cnt == want, "min-p among allowed: %lld candidates, want %d", (long long)cnt, want);
    for (int64_t k = 0; k < cnt; k++)
        CHECK(ids[k] % 3 == 0);
    sampler_free(s);

    for (int t = 0; t < 3; t++) { /* no candidate filter at all, greedy, defaults */
        p = t == 0 ? off() : sampler_default_params();
        p.temperature = t == 1 ? 0 : p.temperature;
        s = make(p, N);
        sampler_set_mask(s, mask_thirds, NULL);
        int bad = 0;
        for (int d = 0; d < 2000; d++) {
            memcpy(l, base, sizeof l);
            bad += sampler_sample(s, l) % 3 != 0;
        }
        CHECKF(bad == 0, "setting %d: %d draws of masked tokens", t, bad);
        sampler_free(s);
    }
}

static void test_bad_params(void)
{
    struct sampler *s;
    struct sampler_params p = off();
    p.top_p = 0;
    CHECK(sampler_create(&p, 10, &s) == IG_E_USAGE && !s);
    p = off();
    p.temperature = -1;
    CHECK(sampler_create(&p, 10, &s) == IG_E_USAGE);
    p = off();
    p.min_p = 1.5;
    CHECK(sampler_create(&p, 10, &s) == IG_E_USAGE);
}

int main(void)
{
    test_generator_known_answers();
    test_greedy_is_argmax();
    test_penalty_math();
    test_filters_keep_the_right_set();
    test_filters_random();
    test_draw_frequencies();
    test_seed_repeatability();
    test_non_finite();
    test_greedy_non_finite_rows();
    test_mask_hook();
    test_bad_params();
    return test_summary("test_sampler");
}
