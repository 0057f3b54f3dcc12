/* cli/ppl_report.c: the output of `ignite perplexity` (cli/ppl_report.h).
 * Text: a heading, one line per window with that window's own figures (as
 * it completes; llama-perplexity's lines carry running figures instead),
 * then the figures over every window under llama.cpp's labels ("Final
 * estimate: PPL = ...", "Mean    KLD:", "99.0%   KLD:", "Same top p:") so
 * that the two tools' outputs read side by side. --json: one object at the
 * end (docs/perplexity.md). Covered by tests/cli/test_perplexity.py. */
#include "cli/ppl_report.h"

#include "cli/cli.h"
#include "core/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Window w's summary (its KL values sorted in place: they are its own). */
static void window_summary(const struct ppl_report *r, int64_t w, struct ppl_summary *s)
{
    const struct ppl_window *win = &r->windows[w];
    ppl_summarize(&win->acc, r->kl ? r->kl_values + win->kl0 : NULL, s);
}

void ppl_report_head(const struct ppl_report *r, bool json)
{
    if (json)
        return;
    const struct ppl_plan *p = r->plan;
    printf("# %s: %s, %s matmuls, KV cache K %s V %s, %lld windows of %lld tokens, %lld scored "
           "in each%s%s\n", r->model, r->device_name, r->matmul, r->type_k, r->type_v,
           (long long)p->n_chunk, (long long)p->n_ctx,
           (long long)p->n_scored, r->kl ? ", against " : "", r->kl ? r->base : "");
    if (r->kl)
        printf("%6s %11s %11s %10s %10s %8s\n", "window", "PPL", "PPL(base)", "KL mean",
               "KL 99%", "top-1");
    else
        printf("%6s %11s\n", "window", "PPL");
    fflush(stdout);
    cli_stdout_ok(false);
}

void ppl_report_window(const struct ppl_report *r, int64_t w, bool json)
{
    if (json)
        return;
    struct ppl_summary s;
    window_summary(r, w, &s);
    if (r->kl)
        printf("%6lld %11.4f %11.4f %10.6f %10.6f %7.2f%%\n", (long long)w + 1, s.ppl,
               s.ppl_base, s.kl_mean, s.kl_p99, 100 * s.top1);
    else
        printf("%6lld %11.4f\n", (long long)w + 1, s.ppl);
    fflush(stdout);
    cli_stdout_ok(false);
}

static void print_text(const struct ppl_report *r, const struct ppl_summary *s)
{
    const struct ppl_plan *p = r->plan;
    if (r->interrupted)
        printf("interrupted: %lld of %lld windows done\n", (long long)r->n_done,
               (long long)p->n_chunk);
    if (!r->n_done)
        return;
    printf("\n%lld tokens scored in %lld windows of %lld, %.1f s (%.0f tokens/s)\n",
           (long long)s->count, (long long)r->n_done, (long long)p->n_ctx, r->seconds,
           (double)(r->n_done * p->n_ctx) / (r->seconds > 0 ? r->seconds : 1e-9));
    printf("Final estimate: PPL = %.4f +/- %.5f\n", s->ppl, s->ppl_err);
    if (!r->kl)
        return;
    printf("Mean PPL(Q)   : %10.6f ± %10.6f\n", s->ppl, s->ppl_err);
    printf("Mean PPL(base): %10.6f ± %10.6f\n", s->ppl_base, s->ppl_base_err);
    printf("Mean    KLD: %10.6f ± %10.6f\n", s->kl_mean, s->kl_err);
    printf("Maximum KLD: %10.6f\n", s->kl_max);
    printf("99.0%%   KLD: %10.6f\n", s->kl_p99);
    printf("Median  KLD: %10.6f\n", s->kl_median);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * s->top1, 100 * s->top1_err);
}

/* The keys of a set of rows, into o. */
static bool add_summary(cJSON *o, const struct ppl_summary *s, bool kl)
{
    bool ok = cJSON_AddNumberToObject(o, "scored", (double)s->count) &&
              cJSON_AddNumberToObject(o, "ppl", s->ppl) &&
              cJSON_AddNumberToObject(o, "ppl_err", s->ppl_err);
    if (!kl || !ok)
        return ok;
    return cJSON_AddNumberToObject(o, "ppl_base", s->ppl_base) &&
           cJSON_AddNumberToObject(o, "ppl_base_err", s->ppl_base_err) &&
           cJSON_AddNumberToObject(o, "kl_mean", s->kl_mean) &&
           cJSON_AddNumberToObject(o, "kl_mean_err", s->kl_err) &&
           cJSON_AddNumberToObject(o, "kl_median", s->kl_median) &&
           cJSON_AddNumberToObject(o, "kl_p99", s->kl_p99) &&
           cJSON_AddNumberToObject(o, "kl_max", s->kl_max) &&
           cJSON_AddNumberToObject(o, "top1", s->top1) &&
           cJSON_AddNumberToObject(o, "top1_err", s->top1_err);
}

/* The windows' figures come first: each sorts its own KL values, which the
 * whole run's summary then sorts together. */
static int print_json(const struct ppl_report *r)
{
    const struct ppl_plan *p = r->plan;
    struct ppl_summary sum = {0}, *s = &sum;
    cJSON *o = cJSON_CreateObject(), *wins = cJSON_CreateArray();
    bool ok = o && wins && cJSON_AddStringToObject(o, "model", r->model) &&
              cJSON_AddStringToObject(o, "device", r->device) &&
              cJSON_AddStringToObject(o, "device_name", r->device_name) &&
              cJSON_AddStringToObject(o, "matmul", r->matmul) &&
              cJSON_AddStringToObject(o, "cache_type_k", r->type_k) &&
              cJSON_AddStringToObject(o, "cache_type_v", r->type_v) &&
              cJSON_AddNumberToObject(o, "threads", r->threads) &&
              cJSON_AddNumberToObject(o, "n_ctx", (double)p->n_ctx) &&
              cJSON_AddNumberToObject(o, "text_tokens", (double)r->n_text) &&
              cJSON_AddNumberToObject(o, "windows_planned", (double)p->n_chunk) &&
              cJSON_AddNumberToObject(o, "windows", (double)r->n_done) &&
              cJSON_AddNumberToObject(o, "scored_per_window", (double)p->n_scored) &&
              cJSON_AddBoolToObject(o, "bos", p->bos >= 0) &&
              (r->base ? cJSON_AddStringToObject(o, r->kl ? "kl_base" : "base_written", r->base)
                       : cJSON_AddNullToObject(o, "base_written")) &&
              cJSON_AddNumberToObject(o, "seconds", r->seconds) &&
              cJSON_AddBoolToObject(o, "interrupted", r->interrupted);
    for (int64_t w = 0; ok && w < r->n_done; w++) {
        struct ppl_summary ws;
        window_summary(r, w, &ws);
        cJSON *wo = cJSON_CreateObject();
        ok = wo && cJSON_AddItemToArray(wins, wo) &&
             cJSON_AddNumberToObject(wo, "window", (double)w + 1) && add_summary(wo, &ws, r->kl);
    }
    if (ok && r->n_done) {
        ppl_summarize(r->total, r->kl ? r->kl_values : NULL, s);
        ok = add_summary(o, s, r->kl);
    }
    if (ok)
        ok = cJSON_AddItemToObject(o, "per_window", wins);
    else
        cJSON_Delete(wins);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return ig_error(IG_E_NOMEM, "out of memory formatting JSON");
    puts(text);
    free(text);
    return IG_OK;
}

int ppl_report_end(const struct ppl_report *r, bool json)
{
    int st = IG_OK;
    if (json) {
        st = print_json(r);
    } else {
        /* the windows' lines have sorted their own values already */
        struct ppl_summary s = {0};
        if (r->n_done)
            ppl_summarize(r->total, r->kl ? r->kl_values : NULL, &s);
        print_text(r, &s);
    }
    cli_stdout_ok(true);
    return st;
}
