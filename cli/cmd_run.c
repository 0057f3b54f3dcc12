/* cli/cmd_run.c: `ignite run` (also what `ignite -p ...` means): options,
 * then model -> tokenizer -> optional chat template -> backend -> the
 * generation engine with one request, streaming text to stdout. Owns the
 * signals: SIGINT stops the request (stats still printed, exit 130),
 * SIGPIPE is ignored and EPIPE on stdout ends the run quietly with status 0.
 * The report is run_report.c; the saved-cache options live here.
 * Covered by tests/cli/test_run_args.sh, test_run_model.sh and tests/kvcache/test_kv_cli.py. */
#include "cli/cli.h"
#include "cli/run.h"

#include "core/status.h"
#include "core/timer.h"
#include "generate/generate.h"
#include "grammar/grammar.h"
#include "models/model.h"
#include "backend/backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OPT_JSON = 300, OPT_PROMPT_ONLY, OPT_SAVE_KV, OPT_LOAD_KV };

/* The one table: getopt_long and --help both come from it. Keep the
 * defaults in step with gen_cli_defaults() and docs/cli.md. */
static const struct cli_option run_options[] = {
    {"prompt", 'p', required_argument, "TEXT", "prompt text", NULL},
    {"file", 'f', required_argument, "FILE", "read the prompt from FILE ('-' = stdin)", NULL},
    GEN_CLI_OPTIONS,
    {"prompt-only", OPT_PROMPT_ONLY, no_argument, NULL, "prefill the prompt, generate nothing (with --save-kv)", NULL},
    {"save-kv", OPT_SAVE_KV, required_argument, "FILE", "with --prompt-only: write the KV cache to FILE ('-' = stdout)", NULL},
    {"load-kv", OPT_LOAD_KV, required_argument, "FILE", "start from a saved KV cache ('-' = stdin); -p/-f add text", NULL},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON object with text and stats on stdout", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char run_usage[] = "ignite [run] [options] -p TEXT | -f FILE";
static const char run_summary[] =
    "Generates text from a prompt: the text streams to stdout, one stats line goes to stderr.\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O, 4 bad model, 5 out of memory,\n"
    "6 bad prompt, 7 device, 8 bad KV cache file, 130 interrupted.";

struct run_opts {
    struct gen_cli g;
    const char *prompt;  /* -p */
    const char *file;    /* -f, "-" = stdin */
    const char *save_kv; /* --save-kv FILE, "-" = stdout; needs prompt_only */
    const char *load_kv; /* --load-kv FILE, "-" = stdin */
    bool json, prompt_only;
};

/* ---- options ------------------------------------------------------------- */

static int set_option(struct run_opts *o, int key, const char *arg)
{
    int st = gen_cli_set(&o->g, key, arg);
    if (st != 1)
        return st;
    switch (key) {
    case 'p': o->prompt = arg; return IG_OK;
    case 'f': o->file = arg; return IG_OK;
    case OPT_PROMPT_ONLY: o->prompt_only = true; return IG_OK;
    case OPT_SAVE_KV: o->save_kv = arg; return IG_OK;
    case OPT_LOAD_KV: o->load_kv = arg; return IG_OK;
    case OPT_JSON: o->json = true; return IG_OK;
    }
    return ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
}

/* Returns IG_OK to run, -1 after --help/--version (exit 0), or IG_E_USAGE. */
static int parse_args(int argc, char **argv, struct run_opts *o)
{
    struct cli_parser parser;
    cli_parser_init(&parser, run_options);
    if (cli_check_args("run", argc, argv, run_options) != IG_OK)
        return IG_E_USAGE;
    optind = 1;
    opterr = 0;
    int key;
    while ((key = getopt_long(argc, argv, parser.shortopts, parser.longopts, NULL)) != -1) {
        if (key == 'h') {
            cli_print_help(stdout, run_usage, run_summary, run_options);
            return -1;
        }
        if (key == 'V') {
            cli_print_version();
            return -1;
        }
        if (key == '?' || key == ':')
            return cli_option_error("run", key, argv);
        if (set_option(o, key, optarg) != IG_OK)
            return IG_E_USAGE;
    }
    if (optind < argc) {
        ig_error(IG_E_USAGE, "unexpected argument '%s' (quote the prompt and pass it with -p)",
                 argv[optind]);
        return cli_usage_error("run");
    }
    if (gen_cli_check(&o->g) != IG_OK)
        return IG_E_USAGE;
    if (o->save_kv && !o->prompt_only)
        return ig_error(IG_E_USAGE, "--save-kv needs --prompt-only (the cache is saved after "
                                    "the prompt)");
    if (o->save_kv && !strcmp(o->save_kv, "-") && o->json)
        return ig_error(IG_E_USAGE, "--save-kv - and --json both want stdout");
    if (o->load_kv && !strcmp(o->load_kv, "-") && o->file && !strcmp(o->file, "-"))
        return ig_error(IG_E_USAGE, "--load-kv - and -f - both want stdin");
    if (o->load_kv && o->g.chat)
        return ig_error(IG_E_USAGE, "--chat cannot continue a loaded cache (the template "
                                    "renders a whole conversation); pass the text with -p");
    const char *stdin_user = o->file && !strcmp(o->file, "-") ? "-f"
                             : o->load_kv && !strcmp(o->load_kv, "-") ? "--load-kv" : NULL;
    return gen_cli_check_grammar(&o->g, stdin_user, o->prompt_only);
}

/* ---- signals and output ---------------------------------------------------- */

static volatile sig_atomic_t run_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    run_interrupted = 1;
}

/* SIGINT sets the flag (a second Ctrl-C kills: SA_RESETHAND); SA_RESTART
 * keeps a write blocked on a slow reader (`| less`) from failing with EINTR.
 * SIGPIPE is ignored so a closed stdout shows up as EPIPE from write. */
static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The run in progress, as the engine's callbacks see it. */
struct run_state {
    const struct run_opts *o;
    const struct model *m;
    struct engine *engine;
    bool to_buffer;   /* --json: the text is kept for the object */
    char *buf;
    size_t len, cap;
    int write_errno;  /* errno of a failed stdout write, 0 if none */
    bool wrote;       /* anything reached stdout */
    float *logits;    /* --prompt-only: the logits after the prompt */
    size_t kv_bytes;  /* the cache the request held at most */
    double save_ms;
    int save_status;
};

/* on_text: stdout with a flush per token, or the buffer of --json. */
static int on_text(void *user, struct gen_request *r, const char *text, size_t len)
{
    struct run_state *rs = user;
    (void)r;
    if (rs->to_buffer) {
        if (rs->len + len + 1 > rs->cap) {
            size_t cap = (rs->len + len + 1) * 2;
            char *b = realloc(rs->buf, cap);
            if (!b) {
                rs->write_errno = ENOMEM;
                return 1;
            }
            rs->buf = b;
            rs->cap = cap;
        }
        memcpy(rs->buf + rs->len, text, len);
        rs->len += len;
        return 0;
    }
    errno = 0;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        rs->write_errno = errno ? errno : EIO;
        return 1;
    }
    rs->wrote = true;
    return 0;
}

/* ---- saved caches ---------------------------------------------------------- */

/* What --load-kv read: the history and the host store holding its rows. */
struct loaded_cache {
    struct gen_history h;
    int32_t *tokens;
    float *logits;
    struct kv_store *kv;
};

static void loaded_free(struct loaded_cache *lc)
{
    free(lc->tokens);
    free(lc->logits);
    kv_store_free(lc->kv);
    *lc = (struct loaded_cache){0};
}

/* Reads --load-kv (its tokens must fit n_ctx). Returns IG_OK, IG_E_IO,
 * IG_E_KVFILE, IG_E_INPUT (more tokens than the context) or IG_E_NOMEM. */
static int load_cache(const char *file, const struct model *m, int64_t n_ctx,
                      struct loaded_cache *lc)
{
    bool is_stdin = !strcmp(file, "-");
    char name[4096]; /* as messages show it (kvcache/ prints it as given) */
    snprintf(name, sizeof name, "'%s'", is_stdin ? "stdin" : file);
    FILE *f = is_stdin ? stdin : fopen(file, "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s: %s", name, strerror(errno));
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    struct kv_file_reader r;
    int st = kv_file_read_header(&r, f, name, &m->hp, id);
    if (st == IG_OK && r.hdr.n_tokens > n_ctx)
        st = ig_error(IG_E_INPUT, "%s holds %lld tokens but the context holds %lld (raise "
                      "-c/--ctx-size)", name, (long long)r.hdr.n_tokens, (long long)n_ctx);
    struct kv_shape shape = kv_shape_of(&m->hp, r.hdr.dtype);
    if (st == IG_OK)
        st = kv_store_create(&shape, kv_blocks_for(r.hdr.n_tokens), NULL, &lc->kv);
    if (st == IG_OK &&
        (!(lc->tokens = malloc((size_t)r.hdr.n_tokens * sizeof *lc->tokens)) ||
         !(lc->logits = malloc((size_t)m->hp.n_vocab * sizeof *lc->logits))))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)r.hdr.n_tokens);
    if (st == IG_OK && (st = kv_file_read_body(&r, lc->kv, lc->tokens, lc->logits)) == IG_OK)
        lc->h = (struct gen_history){.tokens = lc->tokens, .n = r.hdr.n_tokens,
                                     .logits = r.hdr.n_vocab > 0 ? lc->logits : NULL,
                                     .kv = lc->kv};
    if (!is_stdin)
        fclose(f);
    return st;
}

/* True when `path` itself (not a link's target) is a regular file: only
 * such a file is removed after a failed save, never a device such as
 * /dev/full, a FIFO or a symlink the user pointed --save-kv at. */
static bool is_plain_file(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* --save-kv must not name the model: opening it for writing would truncate
 * the weights the run has mapped (and still reads for the model id). */
static int check_save_path(const char *save, const char *model)
{
    struct stat a, b;
    if (!save || !strcmp(save, "-") || stat(save, &a) != 0 || stat(model, &b) != 0 ||
        a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return IG_OK;
    return ig_error(IG_E_USAGE, "--save-kv '%s' is the model file; name another file", save);
}

/* Writes the request's cache (in the engine still) to --save-kv. A regular
 * file that cannot be completed is removed. Returns IG_OK or IG_E_IO. */
static int save_cache(struct run_state *rs, const struct gen_request *r)
{
    const char *file = rs->o->save_kv;
    const struct kv_store *kv;
    const int32_t *table, *tokens;
    int64_t n;
    int st = engine_export(rs->engine, r, &kv, &table, &tokens, &n);
    if (st != IG_OK)
        return st;
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(rs->m, id); /* before the file is opened: it reads the mapped weights */
    bool is_stdout = !strcmp(file, "-");
    char name[4096]; /* as messages show it (kvcache/ prints it as given) */
    snprintf(name, sizeof name, "'%s'", is_stdout ? "stdout" : file);
    FILE *f = is_stdout ? stdout : fopen(file, "wb");
    if (!f)
        return ig_error(IG_E_IO, "cannot create %s: %s", name, strerror(errno));
    st = kv_file_write(f, name, kv, table, n, id, tokens, rs->logits, rs->m->hp.n_vocab);
    if (!is_stdout) {
        if (fclose(f) != 0 && st == IG_OK)
            st = ig_error(IG_E_IO, "cannot write %s: %s", name, strerror(errno));
        if (st != IG_OK && is_plain_file(file))
            remove(file);
    }
    return st;
}

/* on_done: the cache is still the request's here, so it is saved now. */
static void on_done(void *user, struct gen_request *r)
{
    struct run_state *rs = user;
    if (r->result.stop == GEN_STOP_PROMPT && rs->o->save_kv) {
        int64_t t = ig_now_ns();
        rs->save_status = save_cache(rs, r);
        rs->save_ms = (double)(ig_now_ns() - t) / 1e6;
    }
}

/* ---- the run ------------------------------------------------------------------ */

/* --system becomes part of the prompt, so it passes the prompt's UTF-8
 * check (exit 6 naming the offset). */
static int check_system(const char *system)
{
    size_t bad;
    if (!system || cli_utf8_valid(system, strlen(system), &bad))
        return IG_OK;
    return ig_error(IG_E_INPUT, "--system is not valid UTF-8 (byte 0x%02x at offset %zu)",
                    (unsigned char)system[bad], bad);
}

/* The user's text: -p or -f, or nothing (an empty string) after --load-kv
 * without them: the saved prompt continues as it is. */
static int read_user_text(const struct run_opts *o, char **user)
{
    if (o->load_kv && !o->prompt && !o->file)
        return (*user = calloc(1, 1)) ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
    size_t len;
    return cli_read_prompt(o->prompt, o->file, user, &len);
}

/* Runs the one request to its end and reports it. */
static int generate(const struct run_opts *o, struct model *m, struct tok_vocab *vocab,
                    struct backend *be, int64_t n_ctx, struct loaded_cache *lc,
                    const char *prompt, const struct grammar *grammar, double load_ms)
{
    struct run_state rs = {.o = o, .m = m, .to_buffer = o->json};
    struct tok_ids ids = {0};
    struct engine *engine = NULL;
    struct gen_request r = {.history = lc->kv ? &lc->h : NULL};
    int st = IG_OK;
    if (o->prompt_only && !(rs.logits = malloc((size_t)m->hp.n_vocab * sizeof *rs.logits)))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld logits", (long long)m->hp.n_vocab);
    struct engine_opts eo = {
        .max_rows = be->o.max_rows, .interrupt = &run_interrupted,
        .cb = {.on_text = on_text, .on_done = on_done, .user = &rs},
    };
    if (st == IG_OK)
        st = engine_create(be, vocab, &eo, &engine);
    rs.engine = engine;
    install_signals();
    /* TTFT starts here: the model is loaded, the prompt is text. */
    r.t_arrival_ns = ig_now_ns();
    unsigned flags = run_encode_flags(&o->g) & (lc->kv ? ~(unsigned)TOK_ENC_ADD_BOS : ~0u);
    if (st == IG_OK && *prompt)
        st = tok_encode(vocab, prompt, strlen(prompt), flags, &ids);
    r.result.tokenize_ms = (double)(ig_now_ns() - r.t_arrival_ns) / 1e6;
    r.tokens = ids.ids;
    r.n_tokens = ids.n;
    r.params = (struct gen_params){.n_predict = o->g.n_predict, .sp = o->g.sp,
                                   .ignore_eog = o->g.ignore_eos, .prompt_only = o->prompt_only,
                                   .stop = o->g.stop, .n_stop = o->g.n_stop, .grammar = grammar};
    r.logits_out = rs.logits;
    if (st == IG_OK)
        st = engine_submit(engine, &r);
    while (st == IG_OK && engine_pending(engine))
        st = engine_step(engine);
    const struct gen_result *res = &r.result;
    if (engine)
        rs.kv_bytes = (size_t)kv_pool_peak(engine_pool(engine)) * backend_block_bytes(be);
    if (st == IG_OK)
        st = res->status != IG_OK ? res->status : rs.save_status;
    if (st == IG_OK && res->stop == GEN_STOP_OUTPUT && rs.write_errno != EPIPE)
        st = ig_error(rs.write_errno == ENOMEM ? IG_E_NOMEM : IG_E_IO,
                      "cannot write the output: %s", strerror(rs.write_errno));
    if (st == IG_OK && res->stop == GEN_STOP_INTERRUPT)
        st = IG_E_INTERRUPTED;
    if (res->stop == GEN_STOP_CONTEXT)
        ig_warn("the context is full (%lld positions): generation stopped (raise -c)",
                (long long)n_ctx);
    if (res->grammar && res->stop != GEN_STOP_NONE && !res->grammar_complete)
        ig_warn(res->stop == GEN_STOP_GRAMMAR
                    ? "no token of the model's vocabulary can continue the grammar here: the "
                      "output is incomplete"
                    : "the output is incomplete: generation stopped (%s) before the grammar "
                      "was complete", gen_stop_name(res->stop));
    if (rs.wrote && res->stop != GEN_STOP_OUTPUT && fputc('\n', stdout) != EOF)
        fflush(stdout);
    if (res->stop != GEN_STOP_NONE || st == IG_E_INTERRUPTED) {
        struct kv_shape shape = backend_kv_shape(be);
        struct run_report rep = {
            .res = res, .sp = &o->g.sp, .device = be->device, .threads = be->threads,
            .n_ctx = n_ctx, .kv_bytes = rs.kv_bytes,
            .kv_max_bytes = kv_bytes_for_blocks(&shape, kv_blocks_for(n_ctx)),
            .kv_load_ms = load_ms, .kv_save_ms = rs.save_ms,
            .text = rs.buf, .len = rs.len, .status = st,
        };
        if (!o->g.quiet)
            run_print_stats(&rep);
        if (o->json) {
            int js = run_print_json(&rep);
            st = st == IG_OK ? js : st;
        }
    }
    engine_free(engine);
    tok_ids_free(&ids);
    free(rs.logits);
    free(rs.buf);
    return st;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {0};
    gen_cli_defaults(&o.g);
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    struct backend_device dev;
    if ((st = backend_parse_device(o.g.device, &dev)) != IG_OK ||
        (st = backend_resolve_device(&dev)) != IG_OK)
        return st;
    o.g.sp.seed = gen_cli_pick_seed(o.g.seed);

    char path[4096], *user = NULL, *prompt = NULL;
    struct grammar *grammar = NULL;
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    struct backend *be = NULL;
    struct loaded_cache lc = {0};
    /* The prompt and the grammar come before the model: bad ones cost no load. */
    if ((st = read_user_text(&o, &user)) != IG_OK || (st = check_system(o.g.system)) != IG_OK ||
        (st = gen_cli_compile_grammar(&o.g, &grammar)) != IG_OK ||
        (st = cli_model_path(o.g.model, path, sizeof path)) != IG_OK ||
        (st = check_save_path(o.save_kv, path)) != IG_OK)
        goto done;
    if (cli_stderr_is_tty() && !o.g.quiet)
        fprintf(stderr, "loading %s\n", path);
    if ((st = run_load_model(path, &m, &vocab)) != IG_OK)
        goto done;
    gen_cli_model_defaults(&o.g, m);
    if ((st = run_render_prompt(m, o.g.chat, o.g.no_think, o.g.system, user, &prompt)) != IG_OK)
        goto done;
    int64_t n_ctx = gen_cli_context(&o.g, m->hp.n_ctx_train);
    int64_t t_load = ig_now_ns();
    if (o.load_kv && (st = load_cache(o.load_kv, m, n_ctx, &lc)) != IG_OK)
        goto done;
    double load_ms = o.load_kv ? (double)(ig_now_ns() - t_load) / 1e6 : 0;
    struct backend_opts bo = {
        .device = dev, .n_threads = (int)o.g.n_threads, .n_ctx = n_ctx, .n_slots = 1,
        .max_rows = o.g.n_batch < n_ctx ? o.g.n_batch : n_ctx,
        .kv_dtype = lc.kv ? lc.kv->shape.dtype : o.g.kv_dtype, /* a loaded cache keeps its type */
    };
    if ((st = backend_create(m, &bo, &be)) != IG_OK)
        goto done;
    st = generate(&o, m, vocab, be, n_ctx, &lc, prompt, grammar, load_ms);
done:
    grammar_free(grammar);
    loaded_free(&lc);
    backend_free(be);
    tok_vocab_free(vocab);
    model_free(m);
    free(prompt);
    free(user);
    return st;
}
