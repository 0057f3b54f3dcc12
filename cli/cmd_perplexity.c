/* cli/cmd_perplexity.c: `ignite perplexity`, the quality meter, with
 * llama-perplexity's conventions (ppl/ppl.h, docs/perplexity.md): the text
 * in windows of -c tokens, each run from an empty cache with every row of
 * its second half wanting logits (backend_step returns them all, on the
 * CPU and on CUDA), those rows scored against the token after them.
 * --kl-divergence-base FILE alone writes every scored row's log-probabilities
 * to FILE (beside it first, renamed at the end; created before any work);
 * with --kl-divergence a later run reads them back and reports the KL
 * divergence and top-1 agreement of this run against that one.
 * On a terminal a progress line (windows, tokens/s, time left) on stderr
 * (cli/progress.c), erased before each window's line and any diagnostic.
 * Ctrl-C ends after the step in progress: the windows done are reported
 * (and kept in the base file), the status is 130.
 * Covered by tests/cli/test_perplexity.py (the progress line: test_tty.py). */
#include "cli/cli.h"
#include "cli/device.h"
#include "cli/ppl_report.h"
#include "cli/run.h"

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/timer.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "ops/ops.h"
#include "ppl/ppl.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    OPT_CHUNKS = 256, OPT_UBATCH, OPT_BATCH_SIZE, OPT_DEVICE, OPT_CACHE_TYPE, OPT_CACHE_TYPE_K, OPT_CACHE_TYPE_V, OPT_EXACT,
    OPT_KL_BASE, OPT_KL, OPT_JSON, OPT_NGL, OPT_FA, OPT_MLOCK, OPT_NO_MMAP
};

static const struct cli_option ppl_options[] = {
    {"model", 'm', required_argument, "PATH", "GGUF model file or Hugging Face model folder", "the fetched default model"},
    {"file", 'f', required_argument, "FILE", "the text to score ('-' = stdin)", NULL},
    {"ctx-size", 'c', required_argument, "N", "tokens per window; the second half of each is scored", "512"},
    {"chunks", OPT_CHUNKS, required_argument, "K", "score at most K windows, -1 = every whole window", "-1"},
    {"chunk", 'b', required_argument, "N", "rows per forward step (bounds activation memory)", "512"},
    {"ubatch", OPT_UBATCH, required_argument, "N", "the same as --chunk", NULL},
    {"batch-size", OPT_BATCH_SIZE, required_argument, "N", "the same as --chunk", NULL},
    {"threads", 't', required_argument, "N", "CPU threads, 0 = one per core", "0"},
    {"device", OPT_DEVICE, required_argument, "DEV", "auto, cpu or cuda[:N]", "auto"},
    {"n-gpu-layers", OPT_NGL, required_argument, "N", "llama.cpp's -ngl: 0 = --device cpu, N > 0 = the GPU (every layer) where usable, else the CPU", NULL},
    {"flash-attn", OPT_FA, required_argument, "on|off", "llama.cpp's -fa, taken: ignite always uses its fused attention", NULL},
    {"mlock", OPT_MLOCK, no_argument, NULL, "lock the model's weights in memory (a warning where the system refuses)", NULL},
    {"no-mmap", OPT_NO_MMAP, no_argument, NULL, "read the model file into memory instead of mapping it", NULL},
    {"cache-type", OPT_CACHE_TYPE, required_argument, "T", "KV cache element type, K and V: f32, f16, q8_0 or q4_0 (CUDA: f16)", "f32"},
    {"cache-type-k", OPT_CACHE_TYPE_K, required_argument, "T", "llama.cpp's -ctk: K's type alone", "f32"},
    {"cache-type-v", OPT_CACHE_TYPE_V, required_argument, "T", "llama.cpp's -ctv: V's type alone", "f32"},
    {"exact", OPT_EXACT, no_argument, NULL, "exact f32 matmuls instead of int8 activations (CPU)", NULL},
    {"kl-divergence-base", OPT_KL_BASE, required_argument, "FILE", "alone: write this run's log-probabilities to FILE; with --kl-divergence: read them", NULL},
    {"kl-divergence", OPT_KL, no_argument, NULL, "compare this run with the one that wrote --kl-divergence-base", NULL},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON object at the end instead of the table", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char ppl_usage[] =
    "ignite perplexity [-m MODEL] -f TEXT [-c N] [--chunks K] [--kl-divergence-base FILE "
    "[--kl-divergence]]";
static const char ppl_summary[] =
    "Scores a text as llama-perplexity does: windows of -c tokens, the second half of each\n"
    "scored, perplexity with its standard error. --kl-divergence-base FILE writes the run's\n"
    "log-probabilities (llama.cpp's file format); a later run with --kl-divergence reads\n"
    "them and reports KL divergence and top-1 agreement against that run (then -f is\n"
    "optional: the tokens are in FILE). Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O,\n"
    "4 bad model, 5 out of memory, 6 bad text or base file, 7 device, 130 interrupted.";

struct ppl_opts {
    const char *model, *file, *base;
    int64_t n_ctx, chunks, n_batch, n_threads;
    int64_t n_gpu_layers; /* -ngl, CLI_NGL_UNSET when not given */
    bool n_ctx_given, kl, exact, json;
    struct backend_device device;
    struct cli_cache_types kv;
};

/* ---- options ------------------------------------------------------------------ */

static int set_option(struct ppl_opts *o, int key, const char *arg)
{
    switch (key) {
    case 'm': o->model = arg; return IG_OK;
    case 'f': o->file = arg; return IG_OK;
    case 'c':
        o->n_ctx_given = true;
        return cli_parse_i64("--ctx-size", arg, PPL_MIN_CTX, (int64_t)1 << 22, &o->n_ctx);
    case OPT_CHUNKS: return cli_parse_i64("--chunks", arg, -1, INT32_MAX, &o->chunks);
    case 'b':
    case OPT_UBATCH:
    case OPT_BATCH_SIZE: return cli_parse_i64("--chunk", arg, 1, 1 << 20, &o->n_batch);
    case 't': return cli_parse_i64("--threads", arg, 0, OPS_POOL_MAX_THREADS, &o->n_threads);
    case OPT_DEVICE: return backend_parse_device(arg, &o->device);
    case OPT_NGL: return cli_parse_ngl(arg, false, &o->n_gpu_layers);
    case OPT_FA: return cli_parse_flash_attn(arg, false);
    case OPT_MLOCK: cli_load_mode(IG_MAP_LOCK); return IG_OK;
    case OPT_NO_MMAP: cli_load_mode(IG_MAP_READ); return IG_OK;
    case OPT_CACHE_TYPE: return cli_parse_cache_type(CLI_CACHE_KV, arg, &o->kv);
    case OPT_CACHE_TYPE_K: return cli_parse_cache_type(CLI_CACHE_K, arg, &o->kv);
    case OPT_CACHE_TYPE_V: return cli_parse_cache_type(CLI_CACHE_V, arg, &o->kv);
    case OPT_EXACT: o->exact = true; return IG_OK;
    case OPT_KL_BASE:
        if (!*arg) /* else the whole run, then no file to rename to */
            return ig_error(IG_E_USAGE, "--kl-divergence-base: the file name is empty");
        o->base = arg;
        return IG_OK;
    case OPT_KL: o->kl = true; return IG_OK;
    case OPT_JSON: o->json = true; return IG_OK;
    }
    return ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
}

/* Returns IG_OK to run, -1 after --help/--version, or IG_E_USAGE / IG_E_DEVICE. */
static int parse_args(int argc, char **argv, struct ppl_opts *o)
{
    *o = (struct ppl_opts){.n_ctx = 512, .chunks = -1, .n_batch = 512,
                           .device = {.is_auto = true}, .n_gpu_layers = CLI_NGL_UNSET,
                           .kv = {KV_F32, KV_F32, false}};
    struct cli_parser parser;
    const struct cli_command cmd = {"perplexity", ppl_usage, ppl_summary, ppl_options};
    int st = cli_options_begin(&parser, &cmd, argc, argv);
    if (st != IG_OK)
        return st;
    int key;
    while ((key = cli_options_next(&parser, &cmd, argc, argv)) >= 0) {
        if ((st = set_option(o, key, optarg)) != IG_OK)
            return st;
    }
    if (key != CLI_OPTS_DONE)
        return key == CLI_OPTS_EXIT ? -1 : IG_E_USAGE;
    if (optind < argc)
        return cli_unexpected_argument("perplexity", argv[optind],
                                       "the text goes in a file: -f FILE");
    if (o->kl && !o->base)
        return ig_error(IG_E_USAGE, "--kl-divergence needs --kl-divergence-base FILE (the "
                                    "file a run without --kl-divergence wrote)");
    if (!o->kl && !o->file)
        return ig_error(IG_E_USAGE, "no text: give one with -f FILE (- for stdin)");
    if (o->chunks == 0)
        return ig_error(IG_E_USAGE, "--chunks: 0 scores nothing; use -1 or K >= 1");
    return cli_resolve_device(&o->device, o->n_gpu_layers);
}

/* ---- the text ------------------------------------------------------------------- */

/* Tokenizes the text as llama-perplexity does: BOS first when the
 * vocabulary adds one, special-token text read as plain text. */
static int tokenize_text(struct tok_vocab *v, const char *text, size_t len, struct tok_ids *ids)
{
    return tok_encode(v, text, len, TOK_ENC_ADD_BOS, ids);
}

/* ---- signals and progress ---------------------------------------------------------- */


/* The progress line (cli/progress.c): the window, tokens done of the
 * text's, the rate and the time left. */
static void progress(struct cli_progress *pg, int64_t done_tok, int64_t total_tok, int64_t w,
                     int64_t n_w, double secs)
{
    if (!cli_progress_due(pg))
        return;
    double rate = secs > 0 ? (double)done_tok / secs : 0;
    if (rate > 0)
        cli_progress_draw(pg, "perplexity: window %lld/%lld, %lld/%lld tokens, %.0f tokens/s, "
                          "%.0f s left", (long long)w + 1, (long long)n_w, (long long)done_tok,
                          (long long)total_tok, rate, (double)(total_tok - done_tok) / rate);
    else
        cli_progress_draw(pg, "perplexity: window %lld/%lld, %lld/%lld tokens", (long long)w + 1,
                          (long long)n_w, (long long)done_tok, (long long)total_tok);
}

/* A diagnostic starts on a line of its own: the progress line goes first. */
static void clear_progress(void *pg)
{
    cli_progress_clear(pg);
}

/* ---- the run ------------------------------------------------------------------------- */

struct ppl_run {
    const struct ppl_opts *o;
    const struct model *m;
    struct backend *be;
    struct ppl_plan plan;
    int64_t n_vocab;          /* the tokenizer's: the scored width of a row */
    const int32_t *tokens;    /* the text's */
    int32_t *window;          /* [n_ctx] */
    int32_t *table;           /* the one sequence's blocks: 0, 1, ... */
    bool *want;               /* [n_ctx] */
    float *logits;            /* [max_rows][hp.n_vocab] */
    uint16_t *recs;           /* [n_scored][record words]: a window's records */
    FILE *base;               /* the base file read or written, or NULL */
    const char *base_name;    /* quoted */
    struct ppl_file_header fh;
    struct ppl_window *windows; /* [n_chunk] */
    struct ppl_acc total;
    float *kl_values;         /* [n_chunk * n_scored] */
    int64_t n_done;
    double seconds;
};

/* Scores the rows of step [r0, r0 + n) of window w that want logits (they
 * came back in order). */
static void score_step(struct ppl_run *r, int64_t w, int64_t r0, int64_t n)
{
    const struct ppl_plan *p = &r->plan;
    struct ppl_window *win = &r->windows[w];
    int64_t nv = ppl_record_words(r->n_vocab), k = 0;
    for (int64_t row = r0; row < r0 + n; row++) {
        if (!r->want[row])
            continue;
        const float *l = r->logits + k++ * r->m->hp.n_vocab;
        int32_t target = r->window[row + 1];
        uint16_t *rec = r->recs + (row - p->first) * nv;
        if (r->o->kl) {
            struct ppl_kl_row kr;
            ppl_kl_row(l, r->n_vocab, rec, target, &kr);
            r->kl_values[win->kl0 + win->acc.count] = (float)kr.kl;
            ppl_acc_add_kl(&win->acc, &kr);
        } else if (r->base) {
            ppl_acc_add_nll(&win->acc, ppl_encode_record(l, r->n_vocab, target, rec));
        } else {
            ppl_acc_add_nll(&win->acc, ppl_nll(l, r->n_vocab, target));
        }
    }
}

/* Runs window w in steps of max_rows; false when interrupted before its
 * end (what it did is dropped). */
static int run_window(struct ppl_run *r, int64_t w, bool *complete, struct cli_progress *pg,
                      int64_t t0)
{
    const struct ppl_plan *p = &r->plan;
    int64_t rows = r->be->o.max_rows;
    *complete = false;
    ppl_window_tokens(p, r->tokens, w, r->window);
    r->windows[w] = (struct ppl_window){.kl0 = w * p->n_scored};
    int st = IG_OK;
    if (r->o->kl && (st = ppl_file_read_chunk(r->base, r->base_name, &r->fh, w, r->recs)))
        return st;
    for (int64_t r0 = 0; r0 < p->n_ctx; r0 += rows) {
        if (cli_interrupted)
            return IG_OK;
        int64_t n = p->n_ctx - r0 < rows ? p->n_ctx - r0 : rows;
        struct backend_seq seq = {.table = r->table, .slot = 0, .row0 = 0, .n_rows = n,
                                  .pos0 = r0};
        struct backend_batch b = {.tokens = r->window + r0, .want_logits = r->want + r0,
                                  .n_rows = n, .seqs = &seq, .n_seqs = 1, .logits = r->logits};
        if ((st = backend_step(r->be, &b)) != IG_OK)
            return st;
        score_step(r, w, r0, n);
        double secs = (double)(ig_now_ns() - t0) / 1e9;
        progress(pg, w * p->n_ctx + r0 + n, p->n_chunk * p->n_ctx, w, p->n_chunk, secs);
    }
    if (r->base && !r->o->kl)
        st = ppl_file_write_records(r->base, r->base_name, &r->fh, r->recs, p->n_scored);
    *complete = st == IG_OK;
    return st;
}

static int run_windows(struct ppl_run *r, struct ppl_report *rep)
{
    struct cli_progress pg;
    int64_t t0 = ig_now_ns();
    int st = IG_OK;
    ppl_report_head(rep, r->o->json);
    cli_progress_start(&pg, true);
    ig_set_diag_hook(clear_progress, &pg);
    /* A reader that has gone (or a full disk) ends the run after the line
     * that found it. */
    for (int64_t w = 0; w < r->plan.n_chunk && st == IG_OK && !cli_interrupted &&
                        cli_stdout_ok(false); w++) {
        bool complete;
        st = run_window(r, w, &complete, &pg, t0);
        if (!complete)
            break;
        r->n_done = w + 1;
        ppl_acc_merge(&r->total, &r->windows[w].acc);
        cli_progress_clear(&pg);
        ppl_report_window(rep, w, r->o->json);
    }
    cli_progress_clear(&pg);
    ig_set_diag_hook(NULL, NULL);
    r->seconds = (double)(ig_now_ns() - t0) / 1e9;
    return st;
}

/* The buffers of a run over plan (backend made). */
static int alloc_run(struct ppl_run *r)
{
    const struct ppl_plan *p = &r->plan;
    int64_t rows = r->be->o.max_rows;
    r->window = malloc((size_t)p->n_ctx * sizeof *r->window);
    r->table = malloc((size_t)kv_blocks_for(p->n_ctx) * sizeof *r->table);
    r->want = malloc((size_t)p->n_ctx * sizeof *r->want);
    r->logits = malloc((size_t)(rows * r->m->hp.n_vocab) * sizeof *r->logits);
    r->windows = calloc((size_t)p->n_chunk, sizeof *r->windows);
    r->recs = r->base ? malloc((size_t)(p->n_scored * ppl_record_words(r->n_vocab)) *
                               sizeof *r->recs)
                      : NULL;
    r->kl_values = r->o->kl ? malloc((size_t)(p->n_chunk * p->n_scored) * sizeof *r->kl_values)
                            : NULL;
    if (!r->window || !r->table || !r->want || !r->logits || !r->windows ||
        (r->base && !r->recs) || (r->o->kl && !r->kl_values))
        return ig_error(IG_E_NOMEM, "out of memory for windows of %lld tokens over %lld-token "
                        "rows (lower -c or -b)", (long long)p->n_ctx, (long long)r->n_vocab);
    kv_identity_table(r->table, kv_blocks_for(p->n_ctx));
    for (int64_t i = 0; i < p->n_ctx; i++)
        r->want[i] = ppl_row_scored(p, i);
    return IG_OK;
}

static void free_run(struct ppl_run *r)
{
    free(r->kl_values);
    free(r->recs);
    free(r->windows);
    free(r->logits);
    free(r->want);
    free(r->table);
    free(r->window);
}

/* ---- the base file ------------------------------------------------------------------ */

/* The text's tokens must be those the base file holds (when -f is given
 * with --kl-divergence). */
static int check_tokens(const struct ppl_run *r, const struct tok_ids *text)
{
    int64_t n = r->plan.n_chunk * r->plan.n_ctx;
    for (int64_t i = 0; i < n; i++)
        if (i >= text->n || text->ids[i] != r->tokens[i])
            return ig_error(IG_E_INPUT, "-f: the text's token %lld is %s%d, %s's is %d: another "
                            "text, or a tokenizer that reads it otherwise", (long long)i,
                            i >= text->n ? "past its end, not " : "",
                            i >= text->n ? 0 : text->ids[i], r->base_name, r->tokens[i]);
    return IG_OK;
}

/* A file beside `path` the records go to before the rename. */
static int open_partial(const char *path, char *tmp, size_t cap, FILE **f)
{
    snprintf(tmp, cap, "%s.partial-%ld", path, (long)getpid());
    *f = fopen(tmp, "w+b");
    if (!*f)
        return ig_error(IG_E_IO, "cannot create '%s' (for --kl-divergence-base '%s'): %s", tmp,
                        path, strerror(errno));
    return IG_OK;
}

/* Ends a written base file: cut to the windows done (an interrupted run),
 * renamed over `path`; nothing is left when no window was done or writing
 * failed. */
static int finish_partial(struct ppl_run *r, const char *tmp, const char *path, int st)
{
    if (st == IG_OK && r->n_done && r->n_done < r->fh.n_chunk)
        st = ppl_file_keep_chunks(r->base, r->base_name, &r->fh, r->n_done);
    if (fclose(r->base) && st == IG_OK)
        st = ig_error(IG_E_IO, "cannot write %s: %s", r->base_name, strerror(errno));
    r->base = NULL;
    if (st == IG_OK && r->n_done && rename(tmp, path))
        st = ig_error(IG_E_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != IG_OK || !r->n_done)
        unlink(tmp);
    return st;
}

/* ---- the command -------------------------------------------------------------------------- */

int cmd_perplexity(int argc, char **argv)
{
    struct ppl_opts o;
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    char path[4096], tmp[4200] = "", base_name[4200] = "";
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    struct tok_ids text = {0};
    char *raw = NULL;
    size_t raw_len = 0;
    int32_t *file_tokens = NULL;
    struct ppl_run r = {.o = &o};
    if ((st = cli_model_path(o.model, path, sizeof path)) != IG_OK)
        return st;
    if (o.base) {
        snprintf(base_name, sizeof base_name, "'%s'", o.base);
        r.base_name = base_name;
        if (o.kl) {
            r.base = fopen(o.base, "rb");
            if (!r.base)
                return ig_error(IG_E_IO, "cannot open '%s': %s", o.base, strerror(errno));
        } else if ((st = open_partial(o.base, tmp, sizeof tmp, &r.base)) != IG_OK) {
            return st; /* before any work */
        }
    }
    /* the text before the model: a bad one is refused at once */
    if (o.file && (st = cli_read_text(o.file, "the text", &raw, &raw_len)) != IG_OK)
        goto done;
    if ((st = run_load_model(path, &m, &vocab)) != IG_OK)
        goto done;
    r.m = m;
    r.n_vocab = tok_n_tokens(vocab);
    int32_t bos = tok_adds_bos(vocab) ? tok_bos(vocab) : -1;
    if (raw && (st = tokenize_text(vocab, raw, raw_len, &text)) != IG_OK)
        goto done;
    free(raw);
    raw = NULL;
    if (o.kl) {
        if ((st = ppl_file_read_head(r.base, r.base_name, r.n_vocab, &r.fh, &file_tokens)))
            goto done;
        if (o.n_ctx_given && o.n_ctx != r.fh.n_ctx) {
            st = ig_error(IG_E_USAGE, "-c %lld: %s was written with -c %lld (leave -c out)",
                          (long long)o.n_ctx, r.base_name, (long long)r.fh.n_ctx);
            goto done;
        }
        r.tokens = file_tokens;
        st = ppl_plan_windows(r.fh.n_chunk * r.fh.n_ctx, r.fh.n_ctx, o.chunks, bos, &r.plan);
        if (st == IG_OK && o.file)
            st = check_tokens(&r, &text);
    } else {
        r.tokens = text.ids;
        st = ppl_plan_windows(text.n, o.n_ctx, o.chunks, bos, &r.plan);
        r.fh = (struct ppl_file_header){.n_ctx = r.plan.n_ctx, .n_vocab = r.n_vocab,
                                        .n_chunk = r.plan.n_chunk};
        if (st == IG_OK && r.base)
            st = ppl_file_write_head(r.base, r.base_name, &r.fh, r.tokens);
    }
    if (st != IG_OK)
        goto done;

    bool cuda = o.device.kind == BACKEND_CUDA;
    const char *env = getenv("IGNITE_MATMUL");
    struct backend_opts bo = {
        .device = o.device, .n_threads = (int)o.n_threads, .n_ctx = r.plan.n_ctx,
        .max_rows = o.n_batch < r.plan.n_ctx ? o.n_batch : r.plan.n_ctx, .n_slots = 1,
        .kv_dtype = o.kv.k, .kv_dtype_v = o.kv.v, .exact = o.exact,
        .oom_hint = cuda ? "lower -c or -b, or use --device cpu" : "lower -c or -b"};
    if ((st = backend_create(m, &bo, &r.be)) != IG_OK || (st = alloc_run(&r)) != IG_OK)
        goto done;
    struct ppl_report rep = {
        .model = path, .device = r.be->device, .device_name = r.be->device_name,
        .matmul = cuda ? "f16" : o.exact || (env && !strcmp(env, "exact")) ? "exact" : "int8",
        .type_k = kv_dtype_name(backend_kv_memory(r.be)->dtype),
        .type_v = kv_dtype_name(backend_kv_memory(r.be)->dtype_v),
        .threads = r.be->threads, .plan = &r.plan,
        .n_text = o.kl ? r.fh.n_chunk * r.fh.n_ctx : text.n, .base = o.base, .kl = o.kl,
        .windows = r.windows, .total = &r.total, .kl_values = r.kl_values,
    };
    cli_catch_sigint(true); /* checked between steps */
    st = run_windows(&r, &rep);
    if (st == IG_OK && o.kl && r.n_done == r.fh.n_chunk)
        st = ppl_file_read_end(r.base, r.base_name);
    if (r.base && !o.kl)
        st = finish_partial(&r, tmp, o.base, st);
    rep.n_done = r.n_done;
    rep.seconds = r.seconds;
    rep.interrupted = cli_interrupted;
    if (!cli_stdout_ok(false)) {
        st = st != IG_OK ? st : cli_flush_stdout(); /* 0 when the reader went away */
    } else if (st == IG_OK || cli_interrupted) {
        int out = ppl_report_end(&rep, o.json);
        out = out == IG_OK ? cli_flush_stdout() : out;
        st = st != IG_OK ? st : out != IG_OK ? out : cli_interrupted ? IG_E_INTERRUPTED : IG_OK;
    }
done:
    if (r.base && !o.kl) /* an error before the windows: nothing is left */
        finish_partial(&r, tmp, o.base, st);
    else if (r.base)
        fclose(r.base);
    free_run(&r);
    backend_free(r.be);
    free(file_tokens);
    tok_ids_free(&text);
    free(raw);
    tok_vocab_free(vocab);
    model_free(m);
    return st;
}
