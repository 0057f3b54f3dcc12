/* cli/bench_requests.c: `ignite bench --requests N --parallel P --input-len
 * MEAN[:SD] --output-len MEAN[:SD]`: N requests of random token ids (lengths
 * drawn from normal distributions, rounded and clipped to >= 1, or fixed
 * without :SD, like trtllm-bench's token-norm-dist), all arriving at once,
 * run by the generation engine with P in flight; every request generates
 * exactly its output length (end-of-generation tokens ignored, greedy).
 * Reports vLLM's serving metrics: request, output and total token
 * throughput; TTFT, TPOT, ITL and E2EL (mean, median, p99, ms); and tg_tok_s,
 * the decode phase's rate: the tokens after each request's first over the wall
 * time in which some request was between its first and its last token, so
 * that with P in flight it cannot exceed P / TPOT (llama-batched-bench's S_TG
 * when all requests are in flight at once; docs/benchmarks.md says how they
 * map). With --prompt-file every request's prompt is that text (its
 * output ends at an end-of-generation token or its length), and with
 * speculation (--lookup, -md) the report adds the acceptance, the mean
 * accepted length, the mean draft length k, the time of a verify step
 * (over a plain run's time a token: v) and of drafting a token. Ctrl-C stops the run and reports the requests done by
 * then, with "interrupted": true, exit 130. Covered by
 * tests/cli/test_bench_requests.py. */
#include "cli/bench_requests.h"

#include "cli/cli.h"
#include "cli/run.h"
#include "core/status.h"
#include "core/timer.h"
#include "generate/generate.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "ops/qmatmul.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


int bench_parse_len(const char *what, const char *arg, double *mean, double *sd)
{
    char buf[64];
    if (strlen(arg) >= sizeof buf)
        return ig_error(IG_E_USAGE, "%s: expected MEAN or MEAN:SD, got '%s'", what, arg);
    strcpy(buf, arg);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    if (cli_parse_f64(what, buf, 1, 1 << 20, mean) != IG_OK)
        return IG_E_USAGE;
    *sd = 0;
    if (colon && cli_parse_f64(what, colon + 1, 0, 1 << 20, sd) != IG_OK)
        return IG_E_USAGE;
    return IG_OK;
}

/* ---- the requests ------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A length from N(mean, sd), rounded, at least 1. */
static int64_t draw_len(uint64_t *s, double mean, double sd)
{
    double u1 = ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = (double)(splitmix(s) >> 11) * 0x1.0p-53;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
    double v = round(mean + sd * z);
    return v < 1 ? 1 : (int64_t)v;
}

struct bench_req {
    struct gen_request r;
    int32_t *tokens;
    int64_t n_in, n_out;
    int64_t t_first;     /* its first token's time; 0 before it */
    int64_t t_prev;      /* the previous token's time, for ITL */
    bool done;           /* it generated its whole output */
};

struct bench_state {
    struct bench_req *reqs;
    int64_t n;
    double *itl;         /* every inter-token latency, ms */
    int64_t n_itl, cap_itl;
    int64_t t_end;
    int failed;
};

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns)
{
    (void)token;
    struct bench_state *b = user;
    struct bench_req *q = r->user;
    if (q->t_prev) {
        if (b->n_itl < b->cap_itl)
            b->itl[b->n_itl++] = (double)(t_ns - q->t_prev) / 1e6;
    } else {
        q->t_first = t_ns;
    }
    q->t_prev = t_ns;
    b->t_end = t_ns > b->t_end ? t_ns : b->t_end;
}

static void on_done(void *user, struct gen_request *r)
{
    struct bench_state *b = user;
    struct bench_req *q = r->user;
    if (r->result.status != IG_OK ||
        (r->result.stop != GEN_STOP_LIMIT && (r->params.ignore_eog || r->result.stop != GEN_STOP_EOG)))
        b->failed++;
    else
        q->done = true;
}

/* ---- statistics ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct dist {
    double mean, median, p99;
};

/* Mean, median and 99th percentile (numpy's interpolation) of v[0..n); sorts v. */
static struct dist dist_of(double *v, int64_t n)
{
    struct dist d = {0};
    if (!n)
        return d;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    d.mean = sum / (double)n;
    double qs[2] = {0.5, 0.99}, *out[2] = {&d.median, &d.p99};
    for (int k = 0; k < 2; k++) {
        double at = qs[k] * (double)(n - 1);
        int64_t lo = (int64_t)at;
        *out[k] = lo + 1 < n ? v[lo] + (at - (double)lo) * (v[lo + 1] - v[lo]) : v[lo];
    }
    return d;
}

static int cmp_span(const void *a, const void *b)
{
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* The decode phase's wall time, ns: the length of the union of the spans
 * [first token, latest token] of the requests, in flight ones included. Its
 * tokens (every one after its request's first) over it cannot exceed the
 * number in flight over the mean TPOT, since at most that many spans overlap.
 * Returns -1 when out of memory. */
static int64_t decode_wall_ns(const struct bench_state *b)
{
    int64_t *span = malloc((size_t)(b->n ? b->n : 1) * 2 * sizeof *span), n = 0, total = 0;
    if (!span)
        return -1;
    for (int64_t i = 0; i < b->n; i++)
        if (b->reqs[i].t_first && b->reqs[i].t_prev > b->reqs[i].t_first) {
            span[2 * n] = b->reqs[i].t_first;
            span[2 * n++ + 1] = b->reqs[i].t_prev;
        }
    qsort(span, (size_t)n, 2 * sizeof *span, cmp_span);
    for (int64_t i = 0, lo = 0, hi = -1; i <= n; i++) {
        if (i < n && hi >= 0 && span[2 * i] <= hi) {
            hi = span[2 * i + 1] > hi ? span[2 * i + 1] : hi;
            continue;
        }
        if (hi >= 0)
            total += hi - lo;
        if (i < n)
            lo = span[2 * i], hi = span[2 * i + 1];
    }
    free(span);
    return total;
}

/* ---- the report ---------------------------------------------------------------------------- */

static void add_dist(cJSON *j, const char *name, struct dist d)
{
    char key[64];
    snprintf(key, sizeof key, "mean_%s_ms", name);
    cJSON_AddNumberToObject(j, key, d.mean);
    snprintf(key, sizeof key, "median_%s_ms", name);
    cJSON_AddNumberToObject(j, key, d.median);
    snprintf(key, sizeof key, "p99_%s_ms", name);
    cJSON_AddNumberToObject(j, key, d.p99);
}

static int print_report(const struct bench_requests_opts *o, cJSON *j)
{
    const char *fmt = o->format;
    if (!strcmp(fmt, "md")) {
        printf("| metric | value |\n| --- | ---: |\n");
        for (const cJSON *v = j->child; v; v = v->next) {
            if (cJSON_IsString(v) || cJSON_IsBool(v) || cJSON_IsNull(v))
                printf("| %s | %s |\n", v->string,
                       cJSON_IsString(v) ? v->valuestring
                       : cJSON_IsNull(v) ? "null"
                       : cJSON_IsTrue(v) ? "true" : "false");
            else if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
                printf("| %s | %.0f |\n", v->string, v->valuedouble);
            else
                printf("| %s | %.2f |\n", v->string, v->valuedouble);
        }
    } else if (!strcmp(fmt, "csv")) {
        for (const cJSON *v = j->child; v; v = v->next)
            printf("%s%c", v->string, v->next ? ',' : '\n');
        for (const cJSON *v = j->child; v; v = v->next) {
            if (cJSON_IsString(v))
                printf("\"%s\"", v->valuestring);
            else if (cJSON_IsBool(v))
                fputs(cJSON_IsTrue(v) ? "true" : "false", stdout);
            else if (cJSON_IsNull(v)) {
                /* an empty field */
            }
            else if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
                printf("%.0f", v->valuedouble);
            else
                printf("%.6f", v->valuedouble);
            putchar(v->next ? ',' : '\n');
        }
    } else {
        char *txt = cJSON_PrintUnformatted(j);
        if (!txt)
            return ig_error(IG_E_NOMEM, "out of memory");
        printf(!strcmp(fmt, "json") ? "[%s]\n" : "%s\n", txt);
        cJSON_free(txt);
    }
    return cli_flush_stdout();
}

/* ---- the run -------------------------------------------------------------------------------- */

static int load(const struct bench_requests_opts *o, const char *spec, struct model **m,
                struct tok_vocab **vocab, char *path, size_t cap)
{
    *vocab = NULL;
    if (spec && !strncmp(spec, "synthetic:", 10)) {
        snprintf(path, cap, "%s", spec);
        /* On CUDA the weights are made on the device: only shapes here. */
        return o->device.kind == BACKEND_CUDA ? model_synthetic_spec_shapes(spec, m)
                                              : model_synthetic_spec(spec, m);
    }
    int st = cli_model_path(spec, path, cap);
    if (st == IG_OK && (st = model_load(path, m)) == IG_OK)
        st = tok_load_model(*m, vocab);
    return st;
}

int bench_requests(const struct bench_requests_opts *o, const char *spec)
{
    char path[4096];
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    struct backend *be = NULL;
    struct engine *engine = NULL;
    struct bench_state b = {.n = o->n_requests};
    struct model *dm = NULL;
    struct backend *draft = NULL;
    struct run_chat chat = {0}; /* the model's template, for --prompt-file --chat */
    char *text = NULL, *rendered = NULL;
    struct tok_ids prompt = {0};
    size_t text_len = 0;
    int st = load(o, spec, &m, &vocab, path, sizeof path);
    if (st != IG_OK) /* a synthetic model has no vocabulary: the engine runs on ids alone */
        goto done;
    if (o->prompt_file) {
        if (!vocab) {
            st = ig_error(IG_E_USAGE, "--prompt-file needs a model with a vocabulary");
            goto done;
        }
        struct gen_cli enc;
        gen_cli_defaults(&enc);
        enc.chat = o->chat;
        if ((st = run_chat_setup(&enc, m, vocab, &chat)) != IG_OK ||
            (st = cli_read_file(o->prompt_file, &text, &text_len)) != IG_OK ||
            (st = run_render_prompt(&chat, o->chat, false, NULL, text, &rendered)) != IG_OK ||
            (st = tok_encode(vocab, rendered, strlen(rendered), run_encode_flags(&enc),
                             &prompt)) != IG_OK)
            goto done;
    }

    /* The requests, all known before the clock starts. */
    b.reqs = calloc((size_t)b.n, sizeof *b.reqs);
    uint64_t s = o->seed * 0x2545F4914F6CDD1Dull + 1;
    int64_t n_ctx = 1, total_in = 0, total_out = 0;
    for (int64_t i = 0; b.reqs && i < b.n && st == IG_OK; i++) {
        struct bench_req *q = &b.reqs[i];
        q->n_in = o->prompt_file ? prompt.n : draw_len(&s, o->in_mean, o->in_sd);
        q->n_out = draw_len(&s, o->out_mean, o->out_sd);
        if (!(q->tokens = malloc((size_t)q->n_in * sizeof *q->tokens)))
            break;
        for (int64_t t = 0; t < q->n_in; t++)
            q->tokens[t] = o->prompt_file ? prompt.ids[t]
                                          : (int32_t)(splitmix(&s) % (uint64_t)m->hp.n_vocab);
        n_ctx = q->n_in + q->n_out > n_ctx ? q->n_in + q->n_out : n_ctx;
        total_in += q->n_in;
        total_out += q->n_out;
    }
    b.cap_itl = total_out;
    b.itl = malloc((size_t)(total_out ? total_out : 1) * sizeof *b.itl);
    if (!b.reqs || !b.itl || (b.n && !b.reqs[b.n - 1].tokens)) {
        st = ig_error(IG_E_NOMEM, "out of memory for %lld requests", (long long)b.n);
        goto done;
    }

    struct backend_opts bo = {
        .device = o->device, .n_threads = o->n_threads, .n_ctx = n_ctx,
        .n_slots = (int)o->parallel, .kv_dtype = o->kv.k, .kv_dtype_v = o->kv.v, .exact = o->exact,
        .gpu_weights = o->gpu_weights,
        .max_rows = o->n_batch > o->parallel ? o->n_batch : o->parallel,
        .oom_hint = "lower --parallel, --input-len, --output-len or -b",
    };
    bool speculate = o->spec.lookup || o->spec.draft_model;
    if (speculate && !vocab) {
        st = ig_error(IG_E_USAGE, "speculation needs a model with a vocabulary (not synthetic)");
        goto done;
    }
    struct engine_opts eo = {.max_rows = bo.max_rows,
                             .cb = {.on_token = on_token, .on_done = on_done, .user = &b},
                             .spec_max = speculate ? gen_cli_spec_max(&o->spec) : 0};
    if ((st = backend_create(m, &bo, &be)) != IG_OK ||
        (st = gen_cli_load_draft(&o->spec, vocab, &be->o, &dm, &draft)) != IG_OK)
        goto done;
    eo.draft = draft;
    if ((st = engine_create(be, vocab, &eo, &engine)) != IG_OK)
        goto done;
    cli_catch_sigint(true); /* the step loop ends; the report covers what was done */
    int64_t t0 = ig_now_ns();
    for (int64_t i = 0; i < b.n && st == IG_OK; i++) {
        struct bench_req *q = &b.reqs[i];
        q->r = (struct gen_request){
            .tokens = q->tokens, .n_tokens = q->n_in, .t_arrival_ns = t0, .user = q,
            .params = {.n_predict = q->n_out, .ignore_eog = !o->prompt_file,
                       .sp = {.temperature = 0, .top_p = 1, .repeat_penalty = 1}},
        };
        gen_cli_spec(&o->spec, &q->r.params.spec);
        st = engine_submit(engine, &q->r);
    }
    while (st == IG_OK && engine_pending(engine) && !cli_interrupted)
        st = engine_step(engine);
    if (st != IG_OK)
        goto done;
    /* After Ctrl-C the report covers the requests that ended. */
    bool interrupted = cli_interrupted;
    int64_t n_done = 0;
    total_in = total_out = 0;
    struct gen_result sum = {0}; /* speculation's counts over the requests */
    for (int64_t i = 0; i < b.n; i++)
        if (b.reqs[i].done) {
            const struct gen_result *r = &b.reqs[i].r.result;
            total_in += b.reqs[i].n_in;
            total_out += r->n_gen;
            n_done++;
            sum.n_verify += r->n_verify;
            sum.n_drafted += r->n_drafted;
            sum.n_accepted += r->n_accepted;
            sum.verify_ms += r->verify_ms;
            sum.draft_ms += r->draft_ms;
        }
    if (b.failed) {
        st = ig_error(IG_E_INTERNAL, "%d of %lld requests did not complete", b.failed,
                      (long long)b.n);
        goto done;
    }

    /* to the last token (Ctrl-C before any: to now) */
    double secs = (double)((b.t_end ? b.t_end : ig_now_ns()) - t0) / 1e9;
    double *ttft = malloc((size_t)b.n * sizeof *ttft), *tpot = malloc((size_t)b.n * sizeof *tpot);
    double *e2el = malloc((size_t)b.n * sizeof *e2el);
    int64_t n_tpot = 0;
    for (int64_t i = 0, k = 0; ttft && tpot && e2el && i < b.n; i++) {
        const struct gen_result *r = &b.reqs[i].r.result;
        if (!b.reqs[i].done)
            continue;
        double e = (double)(r->t_last_ns - t0) / 1e6;
        ttft[k] = r->ttft_ms;
        e2el[k++] = e;
        if (r->n_gen > 1)
            tpot[n_tpot++] = (e - r->ttft_ms) / (double)(r->n_gen - 1);
    }
    cJSON *j = cJSON_CreateObject();
    if (!ttft || !tpot || !e2el || !j) {
        free(ttft), free(tpot), free(e2el), cJSON_Delete(j);
        st = ig_error(IG_E_NOMEM, "out of memory");
        goto done;
    }
    cJSON_AddStringToObject(j, "ignite_version", IGNITE_VERSION);
    cli_add_model_json(j, path, m);
    cJSON_AddStringToObject(j, "device", be->device);
    cJSON_AddStringToObject(j, "device_name", be->device_name);
    cJSON_AddStringToObject(j, "matmul", be->o.device.kind == BACKEND_CUDA
                                             ? backend_gpu_weights_name(o->gpu_weights)
                                         : o->exact ? "exact" : "int8");
    cJSON_AddNumberToObject(j, "n_threads", be->threads);
    cJSON_AddNumberToObject(j, "n_batch", (double)bo.max_rows);
    cJSON_AddNumberToObject(j, "parallel", (double)o->parallel);
    if (interrupted)
        cJSON_AddBoolToObject(j, "interrupted", true);
    cJSON_AddNumberToObject(j, "completed", (double)n_done);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)total_in);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)total_out);
    cJSON_AddNumberToObject(j, "duration_s", secs);
    cJSON_AddNumberToObject(j, "request_throughput", secs > 0 ? (double)n_done / secs : 0);
    cJSON_AddNumberToObject(j, "output_throughput", secs > 0 ? (double)total_out / secs : 0);
    cJSON_AddNumberToObject(j, "total_token_throughput",
                            secs > 0 ? (double)(total_in + total_out) / secs : 0);
    /* every token after its request's first (after Ctrl-C, in flight too: the
     * spans hold theirs); null where no request got a second token */
    int64_t tg_ns = decode_wall_ns(&b);
    if (tg_ns < 0) {
        free(ttft), free(tpot), free(e2el), cJSON_Delete(j);
        st = ig_error(IG_E_NOMEM, "out of memory");
        goto done;
    }
    if (tg_ns > 0)
        cJSON_AddNumberToObject(j, "tg_tok_s", (double)b.n_itl / ((double)tg_ns / 1e9));
    else
        cJSON_AddNullToObject(j, "tg_tok_s");
    if (speculate) { /* llama.cpp's acceptance: accepted / drafted */
        double nv = (double)sum.n_verify, nd = (double)sum.n_drafted;
        cJSON_AddStringToObject(j, "spec", o->spec.lookup ? "lookup" : "draft");
        cJSON_AddNumberToObject(j, "spec_verify_steps", nv);
        cJSON_AddNumberToObject(j, "spec_drafted", nd);
        cJSON_AddNumberToObject(j, "spec_accepted", (double)sum.n_accepted);
        cJSON_AddNumberToObject(j, "spec_acceptance", nd > 0 ? (double)sum.n_accepted / nd : 0);
        cJSON_AddNumberToObject(j, "spec_mean_accepted",
                                nv > 0 ? (double)sum.n_accepted / nv : 0);
        cJSON_AddNumberToObject(j, "spec_mean_k", nv > 0 ? nd / nv : 0);
        cJSON_AddNumberToObject(j, "spec_verify_ms", nv > 0 ? sum.verify_ms / nv : 0);
        cJSON_AddNumberToObject(j, "spec_draft_ms_per_token", nd > 0 ? sum.draft_ms / nd : 0);
    }
    add_dist(j, "ttft", dist_of(ttft, n_done));
    add_dist(j, "tpot", dist_of(tpot, n_tpot));
    add_dist(j, "itl", dist_of(b.itl, b.n_itl));
    add_dist(j, "e2el", dist_of(e2el, n_done));
    free(ttft);
    free(tpot);
    free(e2el);
    st = print_report(o, j);
    cJSON_Delete(j);
    if (st == IG_OK && interrupted)
        st = IG_E_INTERRUPTED;
done:
    engine_free(engine);
    backend_free(draft);
    model_free(dm);
    backend_free(be);
    tok_ids_free(&prompt);
    free(text);
    free(rendered);
    run_chat_free(&chat);
    for (int64_t i = 0; b.reqs && i < b.n; i++)
        free(b.reqs[i].tokens);
    free(b.reqs);
    free(b.itl);
    tok_vocab_free(vocab);
    model_free(m);
    return st;
}
