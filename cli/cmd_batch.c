/* cli/cmd_batch.c: `ignite batch`: requests as JSON Lines (or plain lines)
 * from a file or stdin, run by the generation engine with up to -P
 * sequences in flight over one KV pool, one JSON object per request on
 * stdout the moment it ends (or in input order with --ordered), a summary
 * line on stderr. A bad line gets an error object and loses nothing else.
 * Signals as run's: Ctrl-C ends the requests in flight ("interrupted"),
 * after everything finished was written (exit 130); a closed stdout ends
 * the run quietly. Formats and exit codes: docs/cli.md.
 * Covered by tests/cli/test_batch.py. */
#include "cli/batch_request.h"
#include "cli/cli.h"
#include "cli/device.h"
#include "cli/lines.h"
#include "cli/pd.h"
#include "cli/run.h"

#include "backend/backend.h"
#include "core/coll.h"
#include "core/status.h"
#include "core/timer.h"
#include "generate/generate.h"
#include "grammar/grammar.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BATCH_DEFAULT_PARALLEL 8

enum { OPT_LINES = 300, OPT_ORDERED, OPT_KV_MEM, OPT_PD };

static const struct cli_option batch_options[] = {
    {"file", 'f', required_argument, "FILE", "requests, one JSON object per line ('-' = stdin)", "-"},
    {"lines", OPT_LINES, no_argument, NULL, "each line is a prompt (plain text, not JSON)", NULL},
    {"parallel", 'P', required_argument, "N", "sequences in flight at once", "8"},
    {"kv-mem", OPT_KV_MEM, required_argument, "MIB", "KV cache memory, MiB (0 = -P full contexts)", "0"},
    {"ordered", OPT_ORDERED, no_argument, NULL, "write the results in input order", NULL},
    {"pd", OPT_PD, required_argument, "P:D", "prefill on P ranks, decode on D (mpirun -np P+D)", NULL},
    GEN_CLI_OPTIONS("512; on CUDA 2048"),
    GEN_CLI_PROMPT_OPTIONS,
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char batch_usage[] = "ignite batch [options] [-f FILE]";
static const char batch_summary[] =
    "Runs many requests at once (continuous batching): one JSON object per input line in,\n"
    "one JSON object per request out (stdout), a summary line on stderr. A line such as\n"
    "{\"prompt\": \"...\", \"id\": 1, \"n_predict\": 64, \"temperature\": 0} sets its own values;\n"
    "the keys it leaves out take the options below (docs/cli.md: the keys).\n"
    "Exit codes: 0 ok, 2 usage, 3 I/O, 4 bad model, 5 out of memory, 7 device,\n"
    "9 some requests failed (the others ran), 130 interrupted.";

struct batch_opts {
    struct gen_cli g;
    const char *file;
    int64_t parallel, kv_mem_mib;
    bool lines, ordered;
    int pd_p, pd_d;         /* --pd P:D; 0: one process */
};

static int parse_args(int argc, char **argv, struct batch_opts *o)
{
    struct cli_parser parser;
    const struct cli_command cmd = {"batch", batch_usage, batch_summary, batch_options};
    if (cli_options_begin(&parser, &cmd, argc, argv) != IG_OK)
        return IG_E_USAGE;
    int key;
    while ((key = cli_options_next(&parser, &cmd, argc, argv)) >= 0) {
        int st = gen_cli_set(&o->g, key, optarg);
        if (st == 1) {
            switch (key) {
            case 'f': o->file = optarg; st = IG_OK; break;
            case 'P': st = cli_parse_i64("--parallel", optarg, 1, 4096, &o->parallel); break;
            case OPT_KV_MEM: st = cli_parse_i64("--kv-mem", optarg, 0, (int64_t)1 << 30, &o->kv_mem_mib); break;
            case OPT_LINES: o->lines = true; st = IG_OK; break;
            case OPT_ORDERED: o->ordered = true; st = IG_OK; break;
            case OPT_PD: st = pd_parse(optarg, &o->pd_p, &o->pd_d); break;
            default: st = ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
            }
        }
        if (st != IG_OK)
            return IG_E_USAGE;
    }
    if (key != CLI_OPTS_DONE)
        return key == CLI_OPTS_EXIT ? -1 : IG_E_USAGE;
    if (optind < argc)
        return cli_unexpected_argument("batch", argv[optind],
                                       "requests come from -f FILE or stdin");
    if (gen_cli_check(&o->g) != IG_OK)
        return IG_E_USAGE;
    if (o->pd_p && (o->g.lookup || o->g.draft_model))
        return ig_error(IG_E_USAGE, "--pd does not take speculative decoding (--lookup, -md) yet");
    if (o->pd_p && pd_check_job("batch", o->pd_p, o->pd_d) != IG_OK)
        return IG_E_USAGE;
    return gen_cli_check_grammar(&o->g, strcmp(o->file, "-") ? NULL : "-f", false);
}

/* ---- signals ----------------------------------------------------------------------- */

static void install_signals(void)
{
    cli_catch_sigint(true);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- jobs: a request from its line to its output ------------------------------- */

struct job {
    int64_t seq;            /* 0-based order of the request among the lines */
    int64_t line;           /* 1-based line number */
    struct batch_request in;
    struct tok_ids ids;
    struct grammar *grammar; /* the line's own constraint, owned; NULL: the command line's */
    struct gen_request r;
    char *text;             /* generated text (a harmony chat's final channel) */
    size_t len, cap;
    char *out;              /* the finished JSON line (--ordered: until its turn) */
    struct run_channels ch; /* a harmony chat line's channels (off: the text as it is) */
};

struct batch {
    const struct batch_opts *o;
    const struct model *m;
    const struct run_chat *chat; /* the chat template the lines render with */
    const char *model_path; /* the model as loaded, named in each line */
    const struct kv_memory *kv; /* the pool's types, named in each line (NULL before it is made) */
    struct tok_vocab *vocab;
    struct engine *engine;
    struct pd *pd;          /* --pd: the ranks run the requests instead of engine */
    const struct pd_transfer *pd_t; /* the result being written came over these ranks */
    struct grammar *grammar; /* the command line's constraint, shared; NULL: none */
    struct job **jobs;      /* ring by seq: jobs not yet written */
    int64_t cap, next_seq, next_out;
    int64_t n_open;         /* jobs read and not yet written */
    char err[1024];         /* a request's error message (ig_error_capture) */
    int out_errno;          /* stdout failed: EPIPE ends quietly */
    /* the summary */
    int64_t n_done, n_failed, n_prompt, n_gen;
    int64_t n_interrupted;  /* of n_done, ended by Ctrl-C (stop "interrupted") */
    double *ttft, *tpot;    /* ms, for the quantiles */
    int64_t n_ttft, n_tpot, n_stats_cap;
};

static void job_free(struct job *j)
{
    if (!j)
        return;
    batch_request_free(&j->in);
    grammar_free(j->grammar);
    tok_ids_free(&j->ids);
    free(j->text);
    free(j->out);
    run_channels_free(&j->ch);
    free(j);
}

/* Writes the finished jobs whose turn has come and moves the ring's start
 * past them. The start stops at a job still running, in either order, so
 * the ring always holds every open job (it grows over a slow one). */
static void flush_jobs(struct batch *b)
{
    for (; b->next_out < b->next_seq; b->next_out++) {
        struct job *j = b->jobs[b->next_out % b->cap];
        if (!j)
            continue; /* written already (out of order) */
        if (!j->out)
            return;
        if (!b->out_errno) {
            errno = 0;
            if (fputs(j->out, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout))
                b->out_errno = errno ? errno : EIO;
        }
        b->jobs[b->next_out % b->cap] = NULL;
        job_free(j);
        b->n_open--;
    }
}

/* A job's output is ready: written now, or when its turn comes. */
static void job_finish(struct batch *b, struct job *j, cJSON *obj)
{
    if (j->in.id)
        cJSON_AddItemReferenceToObject(obj, "id", j->in.id);
    else
        cJSON_AddNumberToObject(obj, "id", (double)j->line);
    cJSON_AddNumberToObject(obj, "line", (double)j->line);
    if (b->m)
        cli_add_model_json(obj, b->model_path, b->m);
    cJSON *kvo = b->kv ? cJSON_AddObjectToObject(obj, "kv_cache") : NULL;
    if (kvo) {
        cJSON_AddStringToObject(kvo, "type_k", kv_dtype_name(b->kv->dtype));
        cJSON_AddStringToObject(kvo, "type_v", kv_dtype_name(b->kv->dtype_v));
    }
    /* "id" and "line" first, as people read them */
    cJSON *id = cJSON_DetachItemFromObject(obj, "id"), *line = cJSON_DetachItemFromObject(obj, "line");
    if (id && line) {
        line->next = obj->child;
        if (obj->child)
            obj->child->prev = line;
        id->next = line;
        line->prev = id;
        obj->child = id;
    }
    j->out = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!j->out)
        j->out = strdup("{\"error\": \"out of memory building the result\"}");
    if (!b->o->ordered) {
        if (!b->out_errno) {
            errno = 0;
            if (fputs(j->out, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout))
                b->out_errno = errno ? errno : EIO;
        }
        b->jobs[j->seq % b->cap] = NULL;
        job_free(j);
        b->n_open--;
    }
    flush_jobs(b);
}

/* The error object of a request that did not run (or failed). */
static void job_error(struct batch *b, struct job *j, int status)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "error", b->err[0] ? b->err : ig_status_name(status));
    cJSON_AddNumberToObject(obj, "status", status);
    b->err[0] = '\0';
    b->n_failed++;
    job_finish(b, j, obj);
}

/* The answer's text (a harmony chat's final channel) into the job's. */
static int on_final(void *user, const char *text, size_t len)
{
    struct job *j = user;
    return cli_text_append(&j->text, &j->len, &j->cap, text, len);
}

static int on_text(void *user, struct gen_request *r, const char *text, size_t len)
{
    struct job *j = r->user;
    (void)user;
    return run_channels_text(&j->ch, text, len);
}

static void on_done(void *user, struct gen_request *r)
{
    struct batch *b = user;
    struct job *j = r->user;
    const struct gen_result *res = &r->result;
    if (res->status != IG_OK) {
        job_error(b, j, res->status);
        return;
    }
    b->n_done++;
    b->n_interrupted += res->stop == GEN_STOP_INTERRUPT;
    b->n_prompt += res->n_prompt;
    b->n_gen += res->n_gen;
    if (res->t_first_ns)
        b->ttft[b->n_ttft++] = res->ttft_ms;
    if (res->n_gen >= 2)
        b->tpot[b->n_tpot++] = res->decode_ms / (double)(res->n_gen - 1);
    if (res->stop != GEN_STOP_OUTPUT)
        run_channels_finish(&j->ch); /* (into memory: it cannot fail) */
    cJSON *obj = run_result_json(res, &j->in.opts.sp, j->text, j->len,
                                 res->stop == GEN_STOP_INTERRUPT ? IG_E_INTERRUPTED : IG_OK);
    if (!obj) {
        job_error(b, j, ig_error(IG_E_NOMEM, "out of memory building the result"));
        return;
    }
    int cst = run_channels_json(obj, &j->ch);
    if (cst != IG_OK) {
        cJSON_Delete(obj);
        job_error(b, j, cst);
        return;
    }
    cJSON *pdo = b->pd_t ? cJSON_AddObjectToObject(obj, "pd") : NULL;
    if (pdo) { /* where the request ran and what its cache's trip cost */
        cJSON_AddNumberToObject(pdo, "prefill_rank", b->pd_t->prefill_rank);
        cJSON_AddNumberToObject(pdo, "decode_rank", b->pd_t->decode_rank);
        cJSON_AddNumberToObject(pdo, "kv_bytes", (double)b->pd_t->kv_bytes);
        cJSON_AddNumberToObject(pdo, "transfer_ms", b->pd_t->transfer_ms);
        cJSON_AddNumberToObject(pdo, "pack_ms", b->pd_t->pack_ms);
        cJSON_AddStringToObject(pdo, "path", b->pd_t->path ? b->pd_t->path : "host");
    }
    job_finish(b, j, obj);
}

/* --pd: a request ended on another rank (or failed on one): written as one
 * process writes it, with where it ran. */
static void on_pd_result(void *user, struct gen_request *r, const char *text, size_t len,
                         const char *err, const struct pd_transfer *t)
{
    struct batch *b = user;
    struct job *j = r->user;
    if (r->result.status != IG_OK) {
        snprintf(b->err, sizeof b->err, "%s", err);
        job_error(b, j, r->result.status);
        return;
    }
    if (len && on_text(b, r, text, len)) {
        job_error(b, j, ig_error(IG_E_NOMEM, "out of memory for the text"));
        return;
    }
    b->pd_t = t;
    on_done(b, r);
    b->pd_t = NULL;
}

/* Requests read and not yet ended. */
static int64_t batch_pending(const struct batch *b)
{
    return b->pd ? pd_pending(b->pd) : engine_pending(b->engine);
}

/* ---- reading ------------------------------------------------------------------------ */

/* A job for line `line_no` (the next request in order), in the ring. */
static int new_job(struct batch *b, int64_t line_no, struct job **out)
{
    *out = NULL;
    if (b->next_seq - b->next_out >= b->cap) { /* grow the ring, keeping positions by seq */
        int64_t cap = b->cap ? 2 * b->cap : 64;
        struct job **jobs = calloc((size_t)cap, sizeof *jobs);
        if (!jobs)
            return ig_error(IG_E_NOMEM, "out of memory");
        for (int64_t s = b->next_out; s < b->next_seq; s++)
            jobs[s % cap] = b->jobs[s % b->cap];
        free(b->jobs);
        b->jobs = jobs;
        b->cap = cap;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return ig_error(IG_E_NOMEM, "out of memory");
    j->seq = b->next_seq++;
    j->line = line_no;
    b->jobs[j->seq % b->cap] = j;
    b->n_open++;
    *out = j;
    return IG_OK;
}

/* Room in the summary's arrays for a result of every job made so far
 * (next_seq of them): the ones in flight finish later, each adding one. */
static int grow_stats(struct batch *b)
{
    if (b->n_stats_cap >= b->next_seq)
        return IG_OK;
    int64_t cap = b->n_stats_cap ? 2 * b->n_stats_cap : 256;
    double *t = realloc(b->ttft, (size_t)cap * sizeof *t);
    if (t)
        b->ttft = t;
    double *u = t ? realloc(b->tpot, (size_t)cap * sizeof *u) : NULL;
    if (u)
        b->tpot = u;
    if (!t || !u)
        return ig_error(IG_E_NOMEM, "out of memory");
    b->n_stats_cap = cap;
    return IG_OK;
}

/* The request of a parsed line: prompt rendered and tokenized, options. */
static int make_request(struct batch *b, struct job *j, const char *line, size_t len)
{
    const struct gen_cli *o = &j->in.opts;
    char *text = NULL;
    int st = batch_request_grammar(&j->in, j->line, &j->grammar);
    if (st == IG_OK)
        st = run_render_prompt(b->chat, o->chat, o->no_think, o->system, j->in.prompt, &text);
    if (st == IG_OK)
        st = tok_encode(b->vocab, text, strlen(text), run_encode_flags(o), &j->ids);
    free(text);
    j->r.result.tokenize_ms = (double)(ig_now_ns() - j->r.t_arrival_ns) / 1e6;
    j->r.tokens = j->ids.ids;
    j->r.n_tokens = j->ids.n;
    j->in.opts.sp.seed = gen_cli_pick_seed(o->seed);
    bool harmony = o->chat && b->chat->harmony;
    run_channels_init(&j->ch, harmony, false, on_final, j);
    batch_request_params(&j->in, j->grammar, b->grammar, &j->r.params);
    j->r.params.special_text = harmony;
    j->r.user = j;
    if (st == IG_OK)
        st = b->pd ? pd_submit(b->pd, &j->r, line, len, j->line) : engine_submit(b->engine, &j->r);
    return st;
}

/* A line: a request in the engine, or an error object. Blank lines are no
 * requests. Returns IG_OK, or IG_E_NOMEM when the batch cannot go on. */
static int take_line(struct batch *b, int64_t line_no, const char *line, size_t len,
                     bool too_long)
{
    if (line_no == 1 && len >= 3 && !memcmp(line, "\xef\xbb\xbf", 3))
        line += 3, len -= 3; /* the input's byte-order mark, as `run -f` drops it */
    size_t i = 0;
    while (!too_long && i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (!too_long && i == len)
        return IG_OK;
    struct job *j;
    int st = new_job(b, line_no, &j);
    if (st != IG_OK || (st = grow_stats(b)) != IG_OK)
        return st;
    j->r.t_arrival_ns = ig_now_ns();
    ig_error_capture(b->err, sizeof b->err);
    if (too_long)
        st = ig_error(IG_E_INPUT, "the line is longer than %u bytes", LINES_MAX);
    else if ((st = batch_request_parse(line, len, b->o->lines, &b->o->g, &j->in)) == IG_OK)
        st = make_request(b, j, line, len);
    ig_error_capture(NULL, 0);
    if (st != IG_OK)
        job_error(b, j, st);
    return IG_OK;
}

/* Reads what is there (waiting only when nothing else can go on) and turns
 * the whole lines into requests, keeping at most `ahead` requests open. */
static int read_requests(struct batch *b, struct line_reader *in, int64_t ahead)
{
    const char *line;
    size_t len;
    bool too_long;
    int st = IG_OK;
    while (st == IG_OK && b->n_open < ahead && !lines_done(in) && !cli_interrupted) {
        if (lines_next(in, &line, &len, &too_long)) {
            st = take_line(b, in->line_no, line, len, too_long);
            continue;
        }
        bool idle = batch_pending(b) == 0;
        size_t before = in->len - in->start;
        if ((st = lines_fill(in, idle)) != IG_OK || (!idle && in->len - in->start == before &&
                                                     !in->eof))
            break; /* nothing more for now: back to generating */
    }
    return st;
}

/* ---- the summary ----------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v[0..n), interpolated as numpy's default; sorts v. */
static double quantile(double *v, int64_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double at = q * (double)(n - 1);
    int64_t lo = (int64_t)at;
    return lo + 1 < n ? v[lo] + (at - (double)lo) * (v[lo + 1] - v[lo]) : v[lo];
}

/* Every request read is one of: finished (its whole output), failed (an error
 * object), cut short (started, then ended by Ctrl-C with stop "interrupted",
 * or left when stdout closed) or never started (no prompt row computed). */
static void print_summary(struct batch *b, double secs, const struct backend *be)
{
    double s = secs > 0 ? secs : 1e-9;
    const struct kv_pool *pool = engine_pool(b->pd ? pd_engine(b->pd) : b->engine);
    int64_t n_left = 0, n_unstarted = 0; /* still in the ring without a result */
    for (int64_t q = b->next_out; b->jobs && q < b->next_seq; q++) {
        const struct job *j = b->jobs[q % b->cap];
        if (j && !j->out) {
            n_left++;
            n_unstarted += j->r.result.n_prompt == 0 && j->r.result.n_cached == 0;
        }
    }
    fprintf(stderr,
            "batch: %lld read, %lld finished, %lld failed, %lld cut short, %lld never started "
            "in %.2f s | %.2f req/s | prompt %.1f tok/s | "
            "output %.1f tok/s | ttft median %.1f ms p99 %.1f ms | tpot median %.2f ms p99 "
            "%.2f ms | parallel %d | kv peak %.1f MiB (%s/%s), %lld blocks shared\n",
            (long long)b->next_seq, (long long)(b->n_done - b->n_interrupted),
            (long long)b->n_failed, (long long)(b->n_interrupted + n_left - n_unstarted),
            (long long)n_unstarted, secs,
            (double)b->n_done / s, (double)b->n_prompt / s, (double)b->n_gen / s,
            quantile(b->ttft, b->n_ttft, 0.5), quantile(b->ttft, b->n_ttft, 0.99),
            quantile(b->tpot, b->n_tpot, 0.5), quantile(b->tpot, b->n_tpot, 0.99),
            be->o.n_slots,
            kv_pool_peak_bytes(pool, backend_kv_memory(be)) / 1048576.0,
            kv_dtype_name(backend_kv_memory(be)->dtype),
            kv_dtype_name(backend_kv_memory(be)->dtype_v),
            (long long)kv_pool_hits(pool));
}

/* ---- the command ------------------------------------------------------------------------ */

/* Runs the requests of `in` to the end of input (or Ctrl-C, or a closed
 * stdout). Returns the batch's status before the per-request failures. */
static int run_batch(struct batch *b, struct backend *be, struct backend *draft,
                     int64_t spec_max, struct line_reader *in)
{
    struct engine_opts eo = {
        .max_rows = be->o.max_rows, .share_prefixes = true, .interrupt = &cli_interrupted,
        .cb = {.on_text = on_text, .on_done = on_done, .user = b},
        .spec_max = spec_max, .draft = draft,
    };
    int st = b->pd ? IG_OK : engine_create(be, b->vocab, &eo, &b->engine);
    if (st != IG_OK)
        return st;
    int64_t ahead = 2 * (int64_t)be->o.n_slots * (b->o->pd_p ? b->o->pd_p + b->o->pd_d : 1) + 64;
    while (st == IG_OK && !b->out_errno) {
        if (!cli_interrupted)
            st = read_requests(b, in, ahead);
        if (st != IG_OK)
            break;
        if (cli_interrupted || !batch_pending(b)) {
            if (cli_interrupted || lines_done(in)) {
                if (!b->pd)
                    st = engine_step(b->engine); /* ends what is in flight */
                break;
            }
            continue;
        }
        st = b->pd ? pd_step(b->pd) : engine_step(b->engine);
    }
    /* After Ctrl-C or a closed stdout the requests that never ended leave
     * gaps: the finished ones go out in order anyway. The jobs are freed
     * after the engine, which may still hold them. */
    for (int64_t s = b->next_out; s < b->next_seq && !b->out_errno; s++) {
        struct job *j = b->jobs[s % b->cap];
        errno = 0;
        if (j && j->out && (fputs(j->out, stdout) == EOF || fputc('\n', stdout) == EOF ||
                            fflush(stdout)))
            b->out_errno = errno ? errno : EIO;
    }
    return st;
}

/* --kv-mem as blocks of the pool, beside the state slot each of the -P
 * sequences has where the model has recurrent layers and, under the window
 * rule, the window side's blocks (a window's worth a sequence:
 * backend_window_blocks) (kvcache.h's one formula). The rule is dropped
 * (bo->free_window_blocks) where it would leave the full layers fewer
 * blocks than keeping every block gives all (a small --kv-mem beside large
 * steps: a window's blocks a sequence cost more than they save). IG_E_USAGE
 * when they hold no block. */
static int kv_mem_blocks(const struct model *m, const struct batch_opts *o,
                         struct backend_opts *bo, int64_t *n_blocks)
{
    struct kv_memory *mem = NULL;
    bool cuda = bo->device.kind == BACKEND_CUDA;
    /* the CUDA pool: f16, or q8_0 / fp8 as asked (backend/gpu.c) */
    enum kv_dtype k = cuda && !kv_dtype_quantized(o->g.kv.k) ? KV_F16 : o->g.kv.k;
    enum kv_dtype v = cuda && !kv_dtype_quantized(o->g.kv.v) ? KV_F16 : o->g.kv.v;
    int st = kv_memory_of(m, k, v, &mem);
    if (st != IG_OK)
        return st;
    int64_t n_states = kv_memory_states_for(mem, o->parallel);
    int64_t nw = backend_window_blocks(mem, bo);
    double bytes = (double)(o->kv_mem_mib << 20);
    *n_blocks = kv_memory_blocks_in(mem, bytes, n_states);
    if (nw && kv_memory_blocks_in_windowed(mem, bytes, nw, n_states) >= *n_blocks)
        *n_blocks = kv_memory_blocks_in_windowed(mem, bytes, nw, n_states);
    else
        nw = 0;
    bo->free_window_blocks = nw > 0;
    if (*n_blocks < 1)
        st = ig_error(IG_E_USAGE, "--kv-mem %lld MiB holds no block of %d positions (%.2f "
                      "MiB)%s", (long long)o->kv_mem_mib, KV_BLOCK,
                      kv_memory_bytes_windowed(mem, 1, nw ? 1 : 0, 0) / 1048576.0,
                      nw ? (n_states ? " beside the sequences' windows and recurrent state"
                                     : " beside the sequences' windows")
                         : n_states ? " beside the sequences' recurrent state" : "");
    kv_memory_free(mem);
    return st;
}

int cmd_batch(int argc, char **argv)
{
    struct batch_opts o = {.file = "-", .parallel = BATCH_DEFAULT_PARALLEL};
    gen_cli_defaults(&o.g);
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    struct backend_device dev;
    enum backend_gpu_weights gpu_weights;
    if ((st = cli_choose_device(o.g.device, o.g.n_gpu_layers, o.g.gpu_weights, &dev, &gpu_weights)) != IG_OK ||
        (st = gen_cli_check_spec(&o.g, dev.kind)) != IG_OK)
        return st;

    char path[4096];
    struct batch b = {.o = &o};
    struct run_chat chat = {0};
    struct model *m = NULL, *dm = NULL;
    struct backend *be = NULL, *draft = NULL;
    struct line_reader in;
    /* --pd: ranks but 0 serve (cli/pd.h); their set-up lines go to rank 0 */
    bool serves = o.pd_p && ig_coll_rank() != 0, agreed = !o.pd_p, finished = false;
    char setup_msg[512] = "";
    if (serves)
        ig_error_capture(setup_msg, sizeof setup_msg);
    bool is_stdin = !strcmp(o.file, "-");
    int fd = serves ? -1 : is_stdin ? 0 : open(o.file, O_RDONLY | O_CLOEXEC);
    lines_init(&in, fd, is_stdin ? "standard input" : o.file);
    struct stat fst;
    if (!serves && (fd < 0 || fstat(fd, &fst) != 0)) {
        if (is_stdin)
            st = ig_error(IG_E_IO, "cannot read standard input: %s", strerror(errno));
        else
            st = ig_error(IG_E_IO, "cannot open '%s': %s", o.file, strerror(errno));
        goto done;
    }
    if (!serves && S_ISDIR(fst.st_mode)) {
        st = ig_error(IG_E_IO, "cannot read '%s': %s", o.file, strerror(EISDIR));
        goto done;
    }
    if ((st = gen_cli_compile_grammar(&o.g, &b.grammar)) != IG_OK ||
        (st = cli_model_path(o.g.model, path, sizeof path)) != IG_OK)
        goto done;
    if (cli_stderr_is_tty() && !o.g.quiet)
        fprintf(stderr, "loading %s\n", path);
    if ((st = run_load_model(path, &m, &b.vocab)) != IG_OK)
        goto done;
    gen_cli_model_defaults(&o.g, m); /* the lines' defaults */
    if ((st = run_chat_setup(&o.g, m, b.vocab, &chat)) != IG_OK)
        goto done;
    b.chat = &chat;
    if (o.g.chat) { /* --chat with no template, or a --no-think it cannot take: the whole batch */
        char *probe;
        if ((st = run_render_prompt(&chat, true, o.g.no_think, o.g.system, "", &probe)) != IG_OK)
            goto done;
        free(probe);
    }
    b.m = m;
    b.model_path = path;
    int64_t n_ctx = gen_cli_context(&o.g, m->hp.n_ctx_train);
    int64_t rows = o.g.n_batch_given ? o.g.n_batch : backend_batch_rows_default(dev.kind);
    struct backend_opts bo = {
        .device = dev, .n_threads = (int)o.g.n_threads, .n_ctx = n_ctx,
        .n_slots = (int)o.parallel, .kv_dtype = o.g.kv.k, .kv_dtype_v = o.g.kv.v, .gpu_weights = gpu_weights,
        .exact = o.g.exact,
        /* every running sequence's decode row fits a step */
        .max_rows = rows > o.parallel ? rows : o.parallel,
        .oom_hint = o.kv_mem_mib ? "lower --kv-mem"
                                 : "lower -c/--ctx-size, -P/--parallel or -b, or give --kv-mem",
        .free_window_blocks = true, /* the window rule: --kv-mem holds more */
    };
    if (o.kv_mem_mib && (st = kv_mem_blocks(m, &o, &bo, &bo.n_blocks)) != IG_OK)
        goto done;
    if ((st = backend_create(m, &bo, &be)) != IG_OK ||
        (st = gen_cli_load_draft(&o.g, b.vocab, &be->o, &dm, &draft)) != IG_OK)
        goto done;
    b.kv = backend_kv_memory(be);
    if (o.pd_p) {
        struct pd_opts po = {.n_prefill = o.pd_p, .n_decode = o.pd_d, .be = be, .vocab = b.vocab,
                             .m = m, .defaults = &o.g, .plain = o.lines, .grammar = b.grammar,
                             .interrupt = &cli_interrupted, .on_result = on_pd_result,
                             .user = &b};
        st = pd_create(&po, &b.pd);
        ig_error_capture(NULL, 0);
        agreed = true;
        if ((st = pd_agree(st, setup_msg)) != IG_OK)
            goto done;
        if ((st = pd_connect(b.pd)) != IG_OK) { /* (every rank: nothing to finish) */
            pd_free(b.pd);
            b.pd = NULL;
            goto done;
        }
        if (serves) {
            st = pd_serve(b.pd);
            goto done;
        }
    }
    install_signals();
    int64_t t0 = ig_now_ns();
    /* a line may ask for up to 16 drafted tokens where the command line speculates */
    int64_t spec_max = !o.g.lookup && !o.g.draft_model ? 0
                       : gen_cli_spec_max(&o.g) > 16 ? gen_cli_spec_max(&o.g) : 16;
    st = run_batch(&b, be, draft, spec_max, &in);
    double secs = (double)(ig_now_ns() - t0) / 1e9;
    if (b.pd)
        pd_finish(b.pd, o.g.quiet);
    finished = true;
    if (!o.g.quiet)
        print_summary(&b, secs, be);
    if (st == IG_OK && b.out_errno && b.out_errno != EPIPE)
        st = ig_error(IG_E_IO, "cannot write to stdout: %s", strerror(b.out_errno));
    if (st == IG_OK && cli_interrupted)
        st = IG_E_INTERRUPTED;
    if (st == IG_OK && b.n_failed && b.out_errno != EPIPE)
        st = IG_E_PARTIAL;
done:
    if (!agreed) { /* a set-up that failed: every rank hears which */
        ig_error_capture(NULL, 0);
        st = pd_agree(st, setup_msg);
    } else if (b.pd && !serves && !finished) {
        pd_finish(b.pd, true); /* the others wait for rank 0's word */
    }
    pd_free(b.pd);
    engine_free(b.engine);
    for (int64_t s = b.next_out; b.jobs && s < b.next_seq; s++)
        job_free(b.jobs[s % b.cap]);
    free(b.jobs);
    grammar_free(b.grammar);
    free(b.ttft);
    free(b.tpot);
    backend_free(draft);
    model_free(dm);
    backend_free(be);
    run_chat_free(&chat);
    tok_vocab_free(b.vocab);
    model_free(m);
    if (fd > 0)
        close(fd);
    lines_free(&in);
    return st;
}
