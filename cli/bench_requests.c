/* cli/bench_requests.c: `ignite bench --requests N --parallel P --input-len
 * MEAN[:SD] --output-len MEAN[:SD]`: N requests of random token ids (lengths
 * drawn from normal distributions, rounded and clipped to >= 1, or fixed
 * without :SD, like trtllm-bench's token-norm-dist; uniform within
 * --range-ratio as vLLM's random dataset; or read from --requests-file),
 * arriving all at once or over time (--request-rate, --burstiness: vLLM's
 * schedule, cli/bench_schedule.c; none is submitted before its time, and
 * its latencies count from that time), run by the generation engine with P
 * in flight; every request generates exactly its output length
 * (end-of-generation tokens ignored, greedy). Reports vLLM's serving
 * metrics: request, output and total token throughput; request_goodput
 * under --goodput's objectives; TTFT, TPOT, ITL and E2EL (mean, median,
 * p50, p90, p99, ms), with json's per-request timings; and tg_tok_s,
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
 * tests/cli/test_bench_requests.py and test_bench_arrivals.py. */
#include "cli/bench_requests.h"

#include "cli/bench_reqfile.h"
#include "cli/cli.h"
#include "cli/pd.h"
#include "cli/run.h"
#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"
#include "generate/generate.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "ops/qmatmul.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


int bench_parse_len(const char *what, const char *arg, double *mean, double *sd)
{
    char buf[64];
    if (strlen(arg) >= sizeof buf)
        return ig_error(IG_E_USAGE, "%s: expected MEAN or MEAN:SD, got '%s'", what, arg);
    strcpy(buf, arg);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    int64_t tokens; /* a length is a count; its spread may be fractional */
    if (cli_parse_i64(what, buf, 1, 1 << 20, &tokens) != IG_OK)
        return IG_E_USAGE;
    *mean = (double)tokens;
    *sd = 0;
    if (colon && cli_parse_f64(what, colon + 1, 0, 1 << 20, sd) != IG_OK)
        return IG_E_USAGE;
    return IG_OK;
}

/* ---- the requests ------------------------------------------------------------------ */

/* A length from N(mean, sd), rounded, at least 1. */
static int64_t draw_len(uint64_t *s, double mean, double sd)
{
    double u1 = ((double)(bench_rand(s) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = (double)(bench_rand(s) >> 11) * 0x1.0p-53;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
    double v = round(mean + sd * z);
    return v < 1 ? 1 : (int64_t)v;
}

struct bench_req {
    struct gen_request r;
    struct pd_transfer pd; /* --pd: its ranks and its cache's trip */
    int32_t *tokens;
    int64_t n_in, n_out;
    double at_s;         /* its arrival, seconds after the start */
    int64_t t_submit;    /* when it was handed to the engine (>= its arrival) */
    int64_t *times;      /* [n_out] its tokens' times, n_times of them so far */
    int64_t n_times;
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
    if (q->n_times < q->n_out)
        q->times[q->n_times++] = t_ns;
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
    double mean, p50, p90, p99;
};

/* Mean and 50th, 90th, 99th percentiles (numpy's default, linear
 * interpolation) of v[0..n); sorts v. */
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
    double qs[3] = {0.5, 0.9, 0.99}, *out[3] = {&d.p50, &d.p90, &d.p99};
    for (int k = 0; k < 3; k++) {
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
    cJSON_AddNumberToObject(j, key, d.p50);
    double p[3] = {d.p50, d.p90, d.p99};
    const char *pn[3] = {"p50", "p90", "p99"};
    for (int k = 0; k < 3; k++) { /* vLLM's names for --metric-percentiles 50,90,99 */
        snprintf(key, sizeof key, "%s_%s_ms", pn[k], name);
        cJSON_AddNumberToObject(j, key, p[k]);
    }
}

static int print_report(const struct bench_requests_opts *o, cJSON *j)
{
    const char *fmt = o->format;
    if (!strcmp(fmt, "md")) {
        printf("| metric | value |\n| --- | ---: |\n");
        for (const cJSON *v = j->child; v; v = v->next) {
            if (cJSON_IsArray(v)) /* the per-request timings: json and jsonl only */
                continue;
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
        cJSON_DeleteItemFromObject(j, "requests"); /* json and jsonl only */
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
    if (st == IG_OK && (st = model_load(path, m)) == IG_OK) {
        /* A GGUF without a vocabulary (bench/random_gguf.py's at full size) runs
         * random ids alone, as a synthetic model; texts then need one (the caller) */
        const struct gguf_file *g = (*m)->gguf;
        if (!g || gguf_find_kv(g, "tokenizer.ggml.tokens"))
            st = tok_load_model(*m, vocab);
    }
    return st;
}

/* The text of a prompt as the model reads it (--chat: in its template). */
static int encode_text(const struct bench_requests_opts *o, const struct run_chat *chat,
                       struct tok_vocab *vocab, const char *text, struct tok_ids *ids)
{
    struct gen_cli enc;
    gen_cli_defaults(&enc);
    enc.chat = o->chat;
    char *rendered = NULL;
    int st = run_render_prompt(chat, o->chat, false, NULL, text, &rendered);
    if (st == IG_OK)
        st = tok_encode(vocab, rendered, strlen(rendered), run_encode_flags(&enc), ids);
    free(rendered);
    return st;
}

/* A length: uniform within --range-ratio, else normal (fixed without :SD). */
static int64_t draw_one(const struct bench_requests_opts *o, uint64_t *s, double mean, double sd)
{
    return o->range_ratio > 0 ? bench_draw_range(s, mean, o->range_ratio) : draw_len(s, mean, sd);
}

/* b->reqs[0..b->n): their prompts, output lengths and arrival times, all
 * known before the clock starts. `prompt`: --prompt-file's ids (n 0: none);
 * `lines`: --requests-file's. Sets *n_ctx to the longest request. */
static int make_requests(const struct bench_requests_opts *o, const struct model *m,
                         struct tok_vocab *vocab, const struct run_chat *chat,
                         const struct tok_ids *prompt, const struct bench_line *lines,
                         struct bench_state *b, int64_t *n_ctx)
{
    b->reqs = calloc((size_t)b->n, sizeof *b->reqs);
    double *at = malloc((size_t)b->n * sizeof *at);
    if (!b->reqs || !at) {
        free(at);
        return ig_error(IG_E_NOMEM, "out of memory for %lld requests", (long long)b->n);
    }
    bench_arrivals(b->n, o->rate, o->burstiness, o->seed, at);
    uint64_t s = o->seed * 0x2545F4914F6CDD1Dull + 1;
    int64_t total_out = 0;
    int st = IG_OK;
    *n_ctx = 1;
    for (int64_t i = 0; i < b->n && st == IG_OK; i++) {
        struct bench_req *q = &b->reqs[i];
        const struct bench_line *l = lines ? &lines[i] : NULL;
        struct tok_ids text = {0};
        q->at_s = at[i];
        if (l && l->prompt && (st = encode_text(o, chat, vocab, l->prompt, &text)) != IG_OK)
            break;
        q->n_in = l ? (l->prompt ? text.n : l->input_len)
                : o->prompt_file ? prompt->n : draw_one(o, &s, o->in_mean, o->in_sd);
        q->n_out = l && l->output_len ? l->output_len : draw_one(o, &s, o->out_mean, o->out_sd);
        if (!q->n_in)
            st = ig_error(IG_E_INPUT, "%s: the prompt encodes to no tokens",
                          o->prompt_file ? o->prompt_file : o->requests_file);
        else if (!(q->tokens = malloc((size_t)q->n_in * sizeof *q->tokens)) ||
                 !(q->times = malloc((size_t)q->n_out * sizeof *q->times)))
            st = ig_error(IG_E_NOMEM, "out of memory for %lld requests", (long long)b->n);
        for (int64_t t = 0; st == IG_OK && t < q->n_in; t++)
            q->tokens[t] = text.n ? text.ids[t] : o->prompt_file ? prompt->ids[t]
                                  : (int32_t)(bench_rand(&s) % (uint64_t)m->hp.n_vocab);
        tok_ids_free(&text);
        *n_ctx = q->n_in + q->n_out > *n_ctx ? q->n_in + q->n_out : *n_ctx;
        total_out += q->n_out;
    }
    free(at);
    b->cap_itl = total_out;
    if (st == IG_OK && !(b->itl = malloc((size_t)(total_out ? total_out : 1) * sizeof *b->itl)))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld requests", (long long)b->n);
    return st;
}

/* Sleeps until `until` (ig_now_ns) or 50 ms, whichever is first, so that
 * Ctrl-C is seen soon. */
static void nap_until(int64_t until)
{
    int64_t ns = until - ig_now_ns();
    if (ns <= 0)
        return;
    ns = ns > 50000000 ? 50000000 : ns;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ns};
    nanosleep(&ts, NULL);
}

/* Steps the engine from t0, handing each request to it at its arrival time,
 * never before; with nothing to run until the next arrival, waits for it. */
static int run_requests(const struct bench_requests_opts *o, struct engine *engine,
                        struct pd *pd, struct bench_state *b, int64_t t0)
{
    int st = IG_OK;
    int64_t next = 0;
    while (st == IG_OK && !cli_interrupted &&
           (next < b->n || (pd ? pd_pending(pd) : engine_pending(engine)))) {
        int64_t now = ig_now_ns();
        for (; st == IG_OK && next < b->n; next++) {
            struct bench_req *q = &b->reqs[next];
            int64_t t_arrival = t0 + (int64_t)llround(q->at_s * 1e9);
            if (t_arrival > now)
                break;
            q->t_submit = now;
            q->r = (struct gen_request){
                .tokens = q->tokens, .n_tokens = q->n_in, .t_arrival_ns = t_arrival, .user = q,
                .params = {.n_predict = q->n_out, .ignore_eog = !o->prompt_file,
                           .sp = {.temperature = 0, .top_p = 1, .repeat_penalty = 1}},
            };
            gen_cli_spec(&o->spec, &q->r.params.spec);
            st = pd ? pd_submit(pd, &q->r, NULL, 0, next + 1) : engine_submit(engine, &q->r);
        }
        if (st != IG_OK)
            break;
        if (pd && pd_pending(pd))
            st = pd_step(pd);
        else if (!pd && engine_pending(engine))
            st = engine_step(engine);
        else if (next < b->n)
            nap_until(t0 + (int64_t)llround(b->reqs[next].at_s * 1e9));
    }
    return st;
}

/* TPOT as vLLM counts it: the time after the first token over the tokens
 * after it; 0 for one token (goodput's convention). */
static double tpot_ms(const struct bench_req *q)
{
    const struct gen_result *r = &q->r.result;
    return r->n_gen > 1 ? (double)(r->t_last_ns - r->t_first_ns) / 1e6 / (double)(r->n_gen - 1)
                        : 0;
}

/* E2EL: arrival to last token, ms. */
static double e2el_ms(const struct bench_req *q)
{
    return (double)(q->r.result.t_last_ns - q->r.t_arrival_ns) / 1e6;
}

/* A finished request met every objective (vLLM's test: value <= objective). */
static bool meets_slo(const struct bench_slo *slo, const struct bench_req *q)
{
    return (slo->ttft_ms < 0 || q->r.result.ttft_ms <= slo->ttft_ms) &&
           (slo->tpot_ms < 0 || tpot_ms(q) <= slo->tpot_ms) &&
           (slo->e2el_ms < 0 || e2el_ms(q) <= slo->e2el_ms);
}

/* "requests": each finished request's timings, for scripts that compute
 * their own statistics: arrival and submission (s after the start), queue
 * (arrival to admission), TTFT, E2EL and every inter-token gap, ms. */
static int add_timings(cJSON *j, const struct bench_state *b, int64_t t0, bool pd)
{
    cJSON *arr = cJSON_AddArrayToObject(j, "requests");
    for (int64_t i = 0; arr && i < b->n; i++) {
        const struct bench_req *q = &b->reqs[i];
        if (!q->done)
            continue;
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return ig_error(IG_E_NOMEM, "out of memory");
        }
        cJSON_AddNumberToObject(o, "index", (double)i);
        cJSON_AddNumberToObject(o, "arrival_s", q->at_s);
        cJSON_AddNumberToObject(o, "submitted_s", (double)(q->t_submit - t0) / 1e9);
        cJSON_AddNumberToObject(o, "queue_ms", q->r.result.queue_ms);
        cJSON_AddNumberToObject(o, "input_len", (double)q->n_in);
        cJSON_AddNumberToObject(o, "output_len", (double)q->r.result.n_gen);
        cJSON_AddNumberToObject(o, "ttft_ms", q->r.result.ttft_ms);
        cJSON_AddNumberToObject(o, "e2el_ms", e2el_ms(q));
        cJSON *po = pd ? cJSON_AddObjectToObject(o, "pd") : NULL;
        if (po) {
            cJSON_AddNumberToObject(po, "prefill_rank", q->pd.prefill_rank);
            cJSON_AddNumberToObject(po, "decode_rank", q->pd.decode_rank);
            cJSON_AddNumberToObject(po, "kv_bytes", (double)q->pd.kv_bytes);
            cJSON_AddNumberToObject(po, "transfer_ms", q->pd.transfer_ms);
            cJSON_AddNumberToObject(po, "pack_ms", q->pd.pack_ms);
            cJSON_AddStringToObject(po, "path", q->pd.path ? q->pd.path : "host");
        }
        cJSON *itl = cJSON_AddArrayToObject(o, "itl_ms");
        if (!itl)
            return ig_error(IG_E_NOMEM, "out of memory");
        for (int64_t t = 1; t < q->n_times; t++) {
            double gap_ms = (double)(q->times[t] - q->times[t - 1]) / 1e6;
            if (!cJSON_AddItemToArray(itl, cJSON_CreateNumber(gap_ms)))
                return ig_error(IG_E_NOMEM, "out of memory");
        }
    }
    return arr ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
}

/* --pd: a request ended on the decode ranks (its tokens' times came first). */
static void on_pd_result(void *user, struct gen_request *r, const char *text, size_t len,
                         const char *err, const struct pd_transfer *t)
{
    (void)text, (void)len, (void)err;
    struct bench_req *q = r->user;
    if (t)
        q->pd = *t;
    on_done(user, r);
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
    struct run_chat chat = {0}; /* the model's template, for --chat */
    char *text = NULL;
    struct tok_ids prompt = {0};
    struct bench_line *lines = NULL;
    int64_t n_lines = 0;
    size_t text_len = 0;
    int st = IG_OK;
    /* --pd: ranks but 0 serve (cli/pd.h); their set-up lines go to rank 0 */
    struct pd *pd = NULL;
    bool serves = o->pd_p && ig_coll_rank() != 0, agreed = !o->pd_p, finished = false;
    char setup_msg[512] = "";
    if (serves)
        ig_error_capture(setup_msg, sizeof setup_msg);
    if (o->requests_file) {
        if ((st = bench_read_requests(o->requests_file, &lines, &n_lines)) != IG_OK)
            goto done;
        if (b.n > n_lines) {
            st = ig_error(IG_E_USAGE, "--requests %lld: %s holds %lld requests",
                          (long long)b.n, o->requests_file, (long long)n_lines);
            goto done;
        }
        b.n = b.n ? b.n : n_lines;
    }
    if ((st = bench_check_schedule(b.n, o->rate)) != IG_OK)
        goto done;
    bool texts = o->prompt_file;
    for (int64_t i = 0; i < b.n && lines; i++)
        texts |= lines[i].prompt != NULL;
    if ((st = load(o, spec, &m, &vocab, path, sizeof path)) != IG_OK)
        goto done; /* a synthetic model has no vocabulary: the engine runs on ids alone */
    if (texts && !vocab) {
        st = ig_error(IG_E_USAGE, "%s needs a model with a vocabulary",
                      o->prompt_file ? "--prompt-file" : "a \"prompt\" in --requests-file");
        goto done;
    }
    if (texts) {
        struct gen_cli enc;
        gen_cli_defaults(&enc);
        enc.chat = o->chat;
        if ((st = run_chat_setup(&enc, m, vocab, &chat)) != IG_OK)
            goto done;
    }
    if (o->prompt_file &&
        ((st = cli_read_file(o->prompt_file, &text, &text_len)) != IG_OK ||
         (st = encode_text(o, &chat, vocab, text, &prompt)) != IG_OK))
        goto done;

    int64_t n_ctx = 1;
    if ((st = make_requests(o, m, vocab, &chat, &prompt, lines, &b, &n_ctx)) != IG_OK)
        goto done;
    struct backend_opts bo = {
        .device = o->device, .n_threads = o->n_threads, .n_ctx = n_ctx,
        .n_slots = (int)o->parallel, .kv_dtype = o->kv.k, .kv_dtype_v = o->kv.v, .exact = o->exact,
        .gpu_weights = o->gpu_weights,
        .max_rows = o->n_batch > o->parallel ? o->n_batch : o->parallel,
        .oom_hint = "lower --parallel, --input-len, --output-len or -b",
        .free_window_blocks = true, /* the window rule (kvcache.h), as batch */
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
    if (o->pd_p) {
        struct gen_cli defaults;
        gen_cli_defaults(&defaults);
        struct pd_opts po = {.n_prefill = o->pd_p, .n_decode = o->pd_d, .be = be, .vocab = vocab,
                             .m = m, .defaults = &defaults, .interrupt = &cli_interrupted,
                             .on_token = on_token, .want_times = true,
                             .on_result = on_pd_result, .user = &b};
        st = pd_create(&po, &pd);
        ig_error_capture(NULL, 0);
        agreed = true;
        if ((st = pd_agree(st, setup_msg)) != IG_OK)
            goto done;
        if ((st = pd_connect(pd)) != IG_OK) { /* (every rank: nothing to finish) */
            pd_free(pd);
            pd = NULL;
            goto done;
        }
        if (serves) {
            st = pd_serve(pd);
            goto done;
        }
    } else if ((st = engine_create(be, vocab, &eo, &engine)) != IG_OK) {
        goto done;
    }
    cli_catch_sigint(true); /* the step loop ends; the report covers what was done */
    int64_t t0 = ig_now_ns();
    st = run_requests(o, engine, pd, &b, t0);
    if (pd)
        pd_finish(pd, false);
    finished = true;
    if (st != IG_OK)
        goto done;
    /* After Ctrl-C the report covers the requests that ended. */
    bool interrupted = cli_interrupted;
    int64_t n_done = 0, n_good = 0, total_in = 0, total_out = 0;
    struct gen_result sum = {0}; /* speculation's counts over the requests */
    for (int64_t i = 0; i < b.n; i++)
        if (b.reqs[i].done) {
            const struct gen_result *r = &b.reqs[i].r.result;
            total_in += b.reqs[i].n_in;
            total_out += r->n_gen;
            n_done++;
            n_good += meets_slo(&o->slo, &b.reqs[i]);
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
        const struct bench_req *q = &b.reqs[i];
        if (!q->done)
            continue;
        ttft[k] = q->r.result.ttft_ms;
        e2el[k++] = e2el_ms(q);
        if (q->r.result.n_gen > 1)
            tpot[n_tpot++] = tpot_ms(q);
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
    if (isinf(o->rate)) /* as vLLM writes it */
        cJSON_AddStringToObject(j, "request_rate", "inf");
    else
        cJSON_AddNumberToObject(j, "request_rate", o->rate);
    if (isinf(o->burstiness))
        cJSON_AddStringToObject(j, "burstiness", "inf");
    else
        cJSON_AddNumberToObject(j, "burstiness", o->burstiness);
    if (interrupted)
        cJSON_AddBoolToObject(j, "interrupted", true);
    cJSON_AddNumberToObject(j, "completed", (double)n_done);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)total_in);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)total_out);
    cJSON_AddNumberToObject(j, "duration_s", secs);
    cJSON_AddNumberToObject(j, "request_throughput", secs > 0 ? (double)n_done / secs : 0);
    bool slo = o->slo.ttft_ms >= 0 || o->slo.tpot_ms >= 0 || o->slo.e2el_ms >= 0;
    if (slo) {
        const double v[3] = {o->slo.ttft_ms, o->slo.tpot_ms, o->slo.e2el_ms};
        const char *k[3] = {"slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms"};
        for (int i = 0; i < 3; i++)
            if (v[i] >= 0)
                cJSON_AddNumberToObject(j, k[i], v[i]);
        cJSON_AddNumberToObject(j, "good_requests", (double)n_good);
        cJSON_AddNumberToObject(j, "request_goodput", secs > 0 ? (double)n_good / secs : 0);
    }
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
    if (pd && !pd_ranks_json(pd, j)) {
        free(ttft), free(tpot), free(e2el), cJSON_Delete(j);
        st = ig_error(IG_E_NOMEM, "out of memory");
        goto done;
    }
    free(ttft);
    free(tpot);
    free(e2el);
    if ((!strcmp(o->format, "json") || !strcmp(o->format, "jsonl")) &&
        (st = add_timings(j, &b, t0, pd != NULL)) != IG_OK) {
        cJSON_Delete(j);
        goto done;
    }
    st = print_report(o, j);
    cJSON_Delete(j);
    if (st == IG_OK && interrupted)
        st = IG_E_INTERRUPTED;
done:
    if (!agreed) { /* a set-up that failed: every rank hears which */
        ig_error_capture(NULL, 0);
        st = pd_agree(st, setup_msg);
    } else if (pd && !serves && !finished) {
        pd_finish(pd, true); /* the others wait for rank 0's word */
    }
    pd_free(pd);
    engine_free(engine);
    backend_free(draft);
    model_free(dm);
    backend_free(be);
    tok_ids_free(&prompt);
    free(text);
    run_chat_free(&chat);
    for (int64_t i = 0; b.reqs && i < b.n; i++) {
        free(b.reqs[i].tokens);
        free(b.reqs[i].times);
    }
    free(b.reqs);
    free(b.itl);
    bench_lines_free(lines, n_lines);
    tok_vocab_free(vocab);
    model_free(m);
    return st;
}
