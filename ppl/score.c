/* ppl/score.c: what a scored row contributes (ppl/ppl.h), with the
 * definitions and the order of work of llama.cpp's perplexity tool, so that
 * the figures mean the same: a row's negative log-likelihood (float
 * exponentials of each logit less the largest, summed in double), its
 * log-probabilities as a 16-bit record, its KL divergence from a base
 * record, and the statistics over rows (mean with the standard error of the
 * mean, top-1 agreement with its binomial error, quantiles by linear
 * interpolation).
 * Covered by tests/unit/test_ppl.c and tests/cli/test_perplexity.py. */
#include "ppl/ppl.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- one row ------------------------------------------------------------- */

/* The largest logit, the first index holding it, and log(sum(exp(l - max))). */
static float row_max(const float *l, int64_t n, int64_t *imax)
{
    float mx = l[0];
    int64_t im = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > mx) {
            mx = l[i];
            im = i;
        }
    if (imax)
        *imax = im;
    return mx;
}

static double row_sum_exp(const float *l, int64_t n, float mx)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += expf(l[i] - mx);
    return sum;
}

double ppl_nll(const float *logits, int64_t n_vocab, int32_t target)
{
    IG_ASSERT(n_vocab >= 1 && target >= 0 && target < n_vocab);
    float mx = row_max(logits, n_vocab, NULL);
    return (double)mx + log(row_sum_exp(logits, n_vocab, mx)) - (double)logits[target];
}

int64_t ppl_record_words(int64_t n_vocab)
{
    return 2 * ((n_vocab + 1) / 2) + 4;
}

/* The record's two header floats (words 0-1, 2-3). */
static void record_header(const uint16_t *rec, float *scale, float *min_lp)
{
    memcpy(scale, rec, sizeof *scale);
    memcpy(min_lp, rec + 2, sizeof *min_lp);
}

double ppl_encode_record(const float *logits, int64_t n_vocab, int32_t target, uint16_t *rec)
{
    IG_ASSERT(n_vocab >= 1 && target >= 0 && target < n_vocab);
    float mx = logits[0], mn = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) {
        mx = fmaxf(mx, logits[i]);
        mn = fminf(mn, logits[i]);
    }
    mn = fmaxf(mn, mx - 16); /* log-probabilities 16 below the top are 0 words */
    float lse = (float)log(row_sum_exp(logits, n_vocab, mx));
    float min_lp = mn - mx - lse;
    float scale = (mx - mn) / 65535.f;
    memcpy(rec, &scale, sizeof scale);
    memcpy(rec + 2, &min_lp, sizeof min_lp);
    uint16_t *q = rec + 4;
    int64_t words = ppl_record_words(n_vocab) - 4;
    memset(q, 0, (size_t)words * sizeof *q);
    if (scale > 0) {
        float inv = 1 / scale;
        for (int64_t i = 0; i < n_vocab; i++)
            if (logits[i] > mn) {
                long v = lrintf(inv * (logits[i] - mn)); /* nearest, ties to even */
                q[i] = (uint16_t)(v > 65535 ? 65535 : v);
            }
    }
    return (double)(mx + lse - logits[target]);
}

double ppl_record_logprob(const uint16_t *rec, int64_t i)
{
    float scale, min_lp;
    record_header(rec, &scale, &min_lp);
    return (double)(scale * rec[4 + i] + min_lp);
}

void ppl_kl_row(const float *logits, int64_t n_vocab, const uint16_t *rec, int32_t target,
                struct ppl_kl_row *out)
{
    IG_ASSERT(n_vocab >= 1 && target >= 0 && target < n_vocab);
    int64_t imax;
    float mx = row_max(logits, n_vocab, &imax);
    float lse = (float)log(row_sum_exp(logits, n_vocab, mx));
    float scale, min_lp;
    record_header(rec, &scale, &min_lp);
    const uint16_t *q = rec + 4;
    out->nll = (double)(mx + lse - logits[target]);
    out->nll_base = -(double)(scale * q[target] + min_lp);
    float norm = mx + lse; /* log p_i = logits[i] - norm */
    double sum = 0;
    uint16_t q_top = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        q_top = q[i] > q_top ? q[i] : q_top;
        float lp_base = scale * q[i] + min_lp;
        if (lp_base > -16.f)
            sum += expf(lp_base) * (lp_base - logits[i] + norm);
    }
    out->kl = sum;
    /* Two tokens whose words tie are equally likely as far as the base can
     * say: either agrees with it (llama.cpp takes the first). */
    out->same_top = q[imax] == q_top;
}

/* ---- many rows ------------------------------------------------------------- */

void ppl_acc_add_nll(struct ppl_acc *a, double nll)
{
    a->count++;
    a->sum_nll += nll;
    a->sum_nll2 += nll * nll;
}

void ppl_acc_add_kl(struct ppl_acc *a, const struct ppl_kl_row *r)
{
    ppl_acc_add_nll(a, r->nll);
    a->sum_nll_base += r->nll_base;
    a->sum_nll_base2 += r->nll_base * r->nll_base;
    a->sum_kl += r->kl;
    a->sum_kl2 += r->kl * r->kl;
    a->n_same_top += r->same_top;
}

void ppl_acc_merge(struct ppl_acc *into, const struct ppl_acc *from)
{
    into->count += from->count;
    into->sum_nll += from->sum_nll;
    into->sum_nll2 += from->sum_nll2;
    into->sum_nll_base += from->sum_nll_base;
    into->sum_nll_base2 += from->sum_nll_base2;
    into->sum_kl += from->sum_kl;
    into->sum_kl2 += from->sum_kl2;
    into->n_same_top += from->n_same_top;
}

void ppl_mean_err(double sum, double sum2, int64_t n, double *mean, double *err)
{
    *mean = n > 0 ? sum / (double)n : 0;
    *err = 0;
    if (n >= 2) {
        double var = sum2 / (double)n - *mean * *mean;
        if (var > 0)
            *err = sqrt(var / (double)(n - 1));
    }
}

double ppl_quantile(const float *v, int64_t n, double q)
{
    IG_ASSERT(n >= 1);
    if (q <= 0)
        return v[0];
    if (q >= 1)
        return v[n - 1];
    double p = q * (double)(n - 1);
    int64_t i = (int64_t)p;
    p -= (double)i;
    int64_t j = i + 1 < n ? i + 1 : n - 1;
    return (1 - p) * v[i] + p * v[j];
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void ppl_summarize(const struct ppl_acc *a, float *kl, struct ppl_summary *s)
{
    *s = (struct ppl_summary){.count = a->count};
    double mean, err;
    ppl_mean_err(a->sum_nll, a->sum_nll2, a->count, &mean, &err);
    s->ppl = exp(mean);
    s->ppl_err = s->ppl * err;
    if (!kl || a->count < 1)
        return;
    ppl_mean_err(a->sum_nll_base, a->sum_nll_base2, a->count, &mean, &err);
    s->ppl_base = exp(mean);
    s->ppl_base_err = s->ppl_base * err;
    ppl_mean_err(a->sum_kl, a->sum_kl2, a->count, &s->kl_mean, &s->kl_err);
    qsort(kl, (size_t)a->count, sizeof *kl, cmp_float);
    s->kl_median = ppl_quantile(kl, a->count, 0.5);
    s->kl_p99 = ppl_quantile(kl, a->count, 0.99);
    s->kl_max = kl[a->count - 1];
    double f = (double)a->n_same_top / (double)a->count;
    s->top1 = f;
    s->top1_err = a->count >= 2 ? sqrt(f * (1 - f) / (double)(a->count - 1)) : 0;
}
