/* decode/sampler.c: repetition penalty, top-k, top-p, min-p, temperature and
 * the seeded draw (the order and the exact rules are in decode/sampler.h).
 * Leaves the logits to the forward pass and the loop to generate.c.
 * Covered by tests/unit/test_sampler.c. */
#include "decode/sampler.h"

#include "core/status.h"
#include "ops/simd.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
    struct sampler_params p;
    int64_t n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    int32_t *history;  /* ring of the last repeat_last_n accepted tokens */
    int64_t hist_len;  /* entries filled, <= repeat_last_n */
    int64_t hist_next; /* ring slot the next token goes to */
    uint32_t *seen;    /* [n_vocab] stamp per token: penalise each token once */
    uint32_t stamp;
    int32_t *ids;      /* [n_vocab] candidate ids */
    int32_t *scratch;  /* [n_vocab] partial selections for top-p */
    float *probs;      /* [n_vocab] candidate probabilities */
    sampler_mask_fn mask; /* a constraint's hook, or NULL */
    void *mask_user;
};

struct sampler_params sampler_default_params(void)
{
    return (struct sampler_params){
        .temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05,
        .repeat_penalty = 1.0, .repeat_last_n = 64, .seed = 0,
    };
}

/* ---- the generator: splitmix64 seeds xoshiro256** ------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double sampler_uniform(struct sampler *s)
{
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

/* ---- life cycle ------------------------------------------------------------ */

static int check_params(const struct sampler_params *p)
{
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return ig_error(IG_E_USAGE, "temperature must be >= 0, got %g", p->temperature);
    if (p->top_k < 0)
        return ig_error(IG_E_USAGE, "top-k must be >= 0, got %lld", (long long)p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return ig_error(IG_E_USAGE, "top-p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return ig_error(IG_E_USAGE, "min-p must be in [0, 1], got %g", p->min_p);
    if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty))
        return ig_error(IG_E_USAGE, "repeat penalty must be > 0, got %g", p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return ig_error(IG_E_USAGE, "repeat-last-n must be >= 0, got %lld",
                        (long long)p->repeat_last_n);
    return IG_OK;
}

int sampler_create(const struct sampler_params *p, int64_t n_vocab, struct sampler **out)
{
    *out = NULL;
    int st = check_params(p);
    if (st != IG_OK)
        return st;
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return ig_error(IG_E_INTERNAL, "sampler: bad vocabulary size %lld", (long long)n_vocab);
    struct sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto fail;
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->history = malloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->history);
    s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->scratch = malloc((size_t)n_vocab * sizeof *s->scratch);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    if (!s->history || !s->seen || !s->ids || !s->scratch || !s->probs)
        goto fail;
    *out = s;
    return IG_OK;
fail:
    sampler_free(s);
    return ig_error(IG_E_NOMEM, "sampler: out of memory for a vocabulary of %lld",
                    (long long)n_vocab);
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->probs);
    free(s->scratch);
    free(s->ids);
    free(s->seen);
    free(s->history);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t token)
{
    int64_t n = s->p.repeat_last_n;
    if (n == 0)
        return;
    s->history[s->hist_next] = token;
    s->hist_next = (s->hist_next + 1) % n;
    if (s->hist_len < n)
        s->hist_len++;
}

void sampler_set_mask(struct sampler *s, sampler_mask_fn fn, void *user)
{
    s->mask = fn;
    s->mask_user = fn ? user : NULL;
}

/* ---- the chain --------------------------------------------------------------- */

void sampler_apply_penalty(struct sampler *s, float *logits)
{
    if (s->p.repeat_penalty == 1.0 || s->hist_len == 0)
        return;
    if (++s->stamp == 0) { /* wrapped: forget old stamps */
        memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    float pen = (float)s->p.repeat_penalty;
    for (int64_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab || s->seen[t] == s->stamp)
            continue;
        s->seen[t] = s->stamp;
        logits[t] = logits[t] > 0 ? logits[t] / pen : logits[t] * pen;
    }
}

/* True when token a ranks before token b: higher logit, then lower id. */
static int ranks_before(const float *logits, int32_t a, int32_t b)
{
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

/* Sift-down in a heap whose root is the WORST kept candidate. */
static void heap_sift(int32_t *h, int64_t n, int64_t i, const float *logits)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_before(logits, h[w], h[l]))
            w = l;
        if (r < n && ranks_before(logits, h[w], h[r]))
            w = r;
        if (w == i)
            return;
        int32_t t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* Puts the k best of the n ids src[0..n) (src NULL: the ids 0..n-1), best
 * first, in ids[0..k): a bounded heap, O(n log k). */
static void select_best(const float *logits, const int32_t *src, int64_t n, int64_t k,
                        int32_t *ids)
{
    for (int64_t i = 0; i < k; i++)
        ids[i] = src ? src[i] : (int32_t)i;
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        heap_sift(ids, k, i, logits);
    for (int64_t i = k; i < n; i++) {
        int32_t t = src ? src[i] : (int32_t)i;
        if (ranks_before(logits, t, ids[0])) {
            ids[0] = t;
            heap_sift(ids, k, 0, logits);
        }
    }
    /* Heap sort: repeatedly move the worst to the end. */
    for (int64_t end = k - 1; end > 0; end--) {
        int32_t t = ids[0]; ids[0] = ids[end]; ids[end] = t;
        heap_sift(ids, end, 0, logits);
    }
}

/* The largest of x[0..n) ignoring NaN (-inf when there is nothing else):
 * sixteen lanes of `v > m ? v : m`, the form the compiler makes a vector
 * max of (maxps keeps m when v is NaN). */
OPS_SIMD_CLONES static float max_above_nan(const float *x, int64_t n)
{
    float lane[16];
    for (int j = 0; j < 16; j++)
        lane[j] = -INFINITY;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float m = -INFINITY;
    for (int j = 0; j < 16; j++)
        m = lane[j] > m ? lane[j] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* The first i with x[i] == v (v in x), sixteen at a time. */
OPS_SIMD_CLONES static int64_t first_equal(const float *x, int64_t n, float v)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        int hit = 0;
        for (int j = 0; j < 16; j++)
            hit |= x[i + j] == v;
        if (hit)
            break;
    }
    while (x[i] != v)
        i++;
    return i;
}

/* Two vectorized passes where a loop taming every logit first cost a batch
 * of 256 rows of Llama 3's 128256 logits 74 ms a step (these: 12). */
int32_t sampler_greedy(const float *logits, int64_t n)
{
    float top = max_above_nan(logits, n);
    if (top == INFINITY) { /* +inf counts as FLT_MAX: the first of either */
        int64_t i = 0;
        while (logits[i] != INFINITY && logits[i] != FLT_MAX)
            i++;
        return (int32_t)i;
    }
    return top > -INFINITY ? (int32_t)first_equal(logits, n, top) : 0;
}

bool sampler_greedy_only(const struct sampler *s)
{
    return s->p.temperature <= 0 && !s->mask &&
           (s->p.repeat_penalty == 1.0 || s->p.repeat_last_n == 0);
}

int64_t sampler_candidates(struct sampler *s, float *logits, const int32_t **ids,
                           const float **probs)
{
    const struct sampler_params *p = &s->p;
    int64_t n = s->n_vocab;
    int32_t *cand = s->ids;
    float *pr = s->probs;
    *ids = cand;
    *probs = pr;

    if (s->mask)
        s->mask(s->mask_user, logits, n);
    sampler_apply_penalty(s, logits);
    if (p->temperature <= 0) { /* the logits stay as they are */
        cand[0] = sampler_greedy(logits, n);
        pr[0] = 1.0f;
        return 1;
    }
    /* A broken forward must not break the sampler: NaN ranks last, +inf
     * becomes the largest finite value. */
    int64_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(logits[i]))
            logits[i] = -INFINITY;
        else if (logits[i] == INFINITY)
            logits[i] = FLT_MAX;
        if (logits[i] > logits[best])
            best = i;
    }
    if (logits[best] == -INFINITY) {
        cand[0] = (int32_t)best;
        pr[0] = 1.0f;
        return 1;
    }

    /* top-k, or the whole vocabulary. */
    int64_t cnt = n;
    int sorted = 0;
    /* Tokens at -inf (masked, or NaN) are no candidates: a draw that lands
     * in the rounding slack must not pick one. */
    if (p->top_k > 0 && p->top_k < n) {
        cnt = p->top_k;
        select_best(logits, NULL, n, cnt, cand);
        while (cnt > 1 && logits[cand[cnt - 1]] == -INFINITY)
            cnt--;
        sorted = 1;
    } else {
        cnt = 0;
        for (int64_t i = 0; i < n; i++)
            if (logits[i] > -INFINITY)
                cand[cnt++] = (int32_t)i;
    }
    double m = logits[best]; /* the best token always survives top-k */
    double z = 0;
    for (int64_t i = 0; i < cnt; i++)
        z += exp(logits[cand[i]] - m);

    /* min-p before sorting: its set is a prefix of the sorted order and
     * p_i / p_max does not depend on normalisation, so cutting it first and
     * then running top-p with the pre-cut mass z keeps exactly what top-p
     * followed by min-p keeps, while sorting far fewer candidates. */
    if (p->min_p > 0) {
        double floor_logit = m + log(p->min_p);
        int64_t kept = 0;
        for (int64_t i = 0; i < cnt; i++)
            if (logits[cand[i]] >= floor_logit)
                cand[kept++] = cand[i];
        cnt = kept;
    }
    /* top-p needs only the best few: select growing prefixes until one
     * holds the mass, and sort everything only when none does. */
    for (int64_t k = 128; !sorted && p->top_p < 1 && k < cnt; k *= 8) {
        if ((double)k / z < p->top_p) /* k tokens of p <= p_max = 1/z cannot hold it */
            continue;
        select_best(logits, cand, cnt, k, s->scratch);
        double cum = 0;
        for (int64_t i = 0; i < k && cum < p->top_p; i++)
            cum += exp(logits[s->scratch[i]] - m) / z;
        if (cum >= p->top_p) {
            memcpy(cand, s->scratch, (size_t)k * sizeof *cand);
            cnt = k;
            sorted = 1;
        }
    }
    if (!sorted && cnt > 1) { /* a full heap sort: no qsort, whose comparator has no context */
        select_best(logits, cand, cnt, cnt, s->scratch);
        memcpy(cand, s->scratch, (size_t)cnt * sizeof *cand);
    }

    if (p->top_p < 1) {
        double cum = 0;
        for (int64_t i = 0; i < cnt; i++) {
            cum += exp(logits[cand[i]] - m) / z;
            if (cum >= p->top_p) {
                cnt = i + 1;
                break;
            }
        }
    }

    /* Temperature, then normalise over the survivors. */
    double sum = 0, inv_t = 1.0 / p->temperature;
    for (int64_t i = 0; i < cnt; i++) {
        double e = exp((logits[cand[i]] - m) * inv_t);
        pr[i] = (float)e;
        sum += e;
    }
    for (int64_t i = 0; i < cnt; i++)
        pr[i] = (float)(pr[i] / sum);
    return cnt;
}

int32_t sampler_sample(struct sampler *s, float *logits)
{
    const int32_t *ids;
    const float *probs;
    int64_t cnt = sampler_candidates(s, logits, &ids, &probs);
    if (cnt == 1)
        return ids[0];
    double u = sampler_uniform(s), cum = 0;
    for (int64_t i = 0; i < cnt; i++) {
        cum += probs[i];
        if (u < cum)
            return ids[i];
    }
    return ids[cnt - 1]; /* u landed in the rounding slack above the last sum */
}
