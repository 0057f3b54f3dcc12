/* cli/cmd_run.c: `ignite run` (also what `ignite -p ...` means, and what
 * `cat prompt.txt | ignite` means): options, then model -> tokenizer ->
 * optional chat template -> backend -> the generation engine with one
 * request, streaming text to stdout (cli/stream.c). Owns the signals: SIGINT
 * stops the request (stats still printed, exit 130), SIGPIPE is ignored and
 * EPIPE on stdout ends the run quietly with status 0. Also the saved caches:
 * --load-kv before the prompt (a continued chat renders only its next turn)
 * and --save-kv after the prompt or the answer (the request keeps its
 * sequence, generate.h; the file is made before any work and renamed into
 * place at the end, cli/outfile.c). The report is run_report.c.
 * Covered by tests/cli/test_run_args.sh, test_run_model.sh, test_run_tiny.py,
 * test_tty.py, test_conversation.py and tests/kvcache/test_kv_cli.py. */
#include "cli/cli.h"
#include "cli/device.h"
#include "cli/run.h"

#include "core/status.h"
#include "core/timer.h"
#include "generate/generate.h"
#include "grammar/grammar.h"
#include "models/model.h"
#include "backend/backend.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OPT_JSON = 300, OPT_PROMPT_ONLY, OPT_SAVE_KV, OPT_LOAD_KV, OPT_VERBOSE_PROMPT };

/* The one table: getopt_long and --help both come from it. Keep the
 * defaults in step with gen_cli_defaults() and docs/cli.md. */
static const struct cli_option run_options[] = {
    {"prompt", 'p', required_argument, "TEXT", "prompt text", NULL},
    {"file", 'f', required_argument, "FILE", "read the prompt from FILE ('-' = stdin)", "stdin when it is piped"},
    GEN_CLI_OPTIONS("512"),
    GEN_CLI_PROMPT_OPTIONS,
    {"prompt-only", OPT_PROMPT_ONLY, no_argument, NULL, "prefill the prompt, generate nothing (with --save-kv)", NULL},
    {"save-kv", OPT_SAVE_KV, required_argument, "FILE", "write the KV cache (prompt and answer) to FILE at the end ('-' = stdout, with --prompt-only)", NULL},
    {"load-kv", OPT_LOAD_KV, required_argument, "FILE", "start from a saved KV cache ('-' = stdin); -p/-f add text (with --chat: the next turn)", NULL},
    {"verbose-prompt", OPT_VERBOSE_PROMPT, no_argument, NULL, "print the prompt as rendered and its token ids to stderr", NULL},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON object with text and stats on stdout", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char run_usage[] = "ignite [run] [options] -p TEXT | -f FILE | < FILE";
static const char run_summary[] =
    "Generates text from a prompt: the text streams to stdout, one stats line goes to stderr.\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O, 4 bad model, 5 out of memory,\n"
    "6 bad prompt, 7 device, 8 bad KV cache file, 130 interrupted.";

struct run_opts {
    struct gen_cli g;
    const char *prompt;  /* -p */
    const char *file;    /* -f, "-" = stdin */
    const char *save_kv; /* --save-kv FILE, "-" = stdout (with prompt_only) */
    const char *load_kv; /* --load-kv FILE, "-" = stdin */
    bool json, prompt_only, verbose_prompt;
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
    case OPT_SAVE_KV:
    case OPT_LOAD_KV:
        if (!*arg) /* else --save-kv '' runs the whole generation, then fails */
            return ig_error(IG_E_USAGE, "--%s: the file name is empty",
                            key == OPT_SAVE_KV ? "save-kv" : "load-kv");
        *(key == OPT_SAVE_KV ? &o->save_kv : &o->load_kv) = arg;
        return IG_OK;
    case OPT_VERBOSE_PROMPT: o->verbose_prompt = true; return IG_OK;
    case OPT_JSON: o->json = true; return IG_OK;
    }
    return ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
}

static bool is_dash(const char *s) { return s && !strcmp(s, "-"); }

/* The option that already reads stdin, or NULL. */
static const char *stdin_user(const struct run_opts *o)
{
    return is_dash(o->file) ? "-f" : is_dash(o->load_kv) ? "--load-kv"
           : is_dash(o->g.grammar_file) ? "--grammar-file"
           : is_dash(o->g.json_schema_file) ? "--json-schema-file" : NULL;
}

/* Returns IG_OK to run, -1 after --help/--version (exit 0), or IG_E_USAGE. */
static int parse_args(int argc, char **argv, struct run_opts *o)
{
    struct cli_parser parser;
    const struct cli_command cmd = {"run", run_usage, run_summary, run_options};
    if (cli_options_begin(&parser, &cmd, argc, argv) != IG_OK)
        return IG_E_USAGE;
    int key;
    while ((key = cli_options_next(&parser, &cmd, argc, argv)) >= 0) {
        if (set_option(o, key, optarg) != IG_OK)
            return IG_E_USAGE;
    }
    if (key != CLI_OPTS_DONE)
        return key == CLI_OPTS_EXIT ? -1 : IG_E_USAGE;
    if (optind < argc)
        return cli_unexpected_argument("run", argv[optind], "quote the prompt and pass it with -p");
    if (gen_cli_check(&o->g) != IG_OK)
        return IG_E_USAGE;
    if (is_dash(o->save_kv) && !o->prompt_only)
        return ig_error(IG_E_USAGE, "--save-kv - needs --prompt-only (the generated text goes "
                                    "to stdout)");
    if (is_dash(o->save_kv) && o->json)
        return ig_error(IG_E_USAGE, "--save-kv - and --json both want stdout");
    if (is_dash(o->load_kv) && is_dash(o->file))
        return ig_error(IG_E_USAGE, "--load-kv - and -f - both want stdin");
    if (o->load_kv && o->g.system)
        return ig_error(IG_E_USAGE, "--system with --load-kv: the system message belongs to "
                                    "the conversation's first turn, in the saved cache");
    const char *reader = is_dash(o->file) ? "-f" : is_dash(o->load_kv) ? "--load-kv" : NULL;
    return gen_cli_check_grammar(&o->g, reader, o->prompt_only);
}

/* ---- signals ------------------------------------------------------------------- */

/* Ctrl-C: cli_catch_sigint. SIGPIPE is ignored so a closed stdout shows up
 * as EPIPE from write. */
static void install_signals(void)
{
    cli_catch_sigint(true);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the run's output -------------------------------------------------------- */

/* The run in progress, as the engine's callbacks see it. */
struct run_state {
    const struct run_opts *o;
    struct run_stream out; /* stdout, the progress line */
    bool to_buffer;        /* --json: the text is kept for the object */
    struct ig_str text;    /* --json's text */
    int buf_errno;         /* ENOMEM growing it */
    struct run_channels ch; /* a harmony chat's channels (off: the text as it is) */
};

/* The answer's text (a harmony chat's final channel): stdout with a flush
 * per token, or the buffer of --json. */
static int on_final(void *user, const char *text, size_t len)
{
    struct run_state *rs = user;
    if (!rs->to_buffer)
        return run_stream_write(&rs->out, text, len);
    if (!ig_str_putn(&rs->text, text, len)) {
        rs->buf_errno = ENOMEM;
        return 1;
    }
    return 0;
}

/* on_text: through the harmony channels, when the chat has them. */
static int on_text(void *user, struct gen_request *r, const char *text, size_t len)
{
    struct run_state *rs = user;
    (void)r;
    return run_channels_text(&rs->ch, text, len);
}

/* on_token: the first token ends the prefill's progress line. */
static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns)
{
    struct run_state *rs = user;
    (void)r, (void)token, (void)t_ns;
    cli_progress_clear(&rs->out.progress);
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
    bool is_stdin = is_dash(file);
    char name[4096]; /* as messages show it (kvcache/ prints it as given) */
    snprintf(name, sizeof name, "'%s'", is_stdin ? "stdin" : file);
    FILE *f = is_stdin ? stdin : fopen(file, "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s: %s", name, strerror(errno));
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    struct kv_file_reader r;
    struct kv_memory *layers = NULL; /* what the file must hold (its dtype is the file's) */
    int st = kv_memory_of(m, KV_F32, KV_F32, &layers);
    if (st == IG_OK)
        st = kv_file_read_header(&r, f, name, layers, m->hp.n_vocab, id);
    if (st == IG_OK && r.hdr.n_tokens > n_ctx)
        st = ig_error(IG_E_INPUT, "%s holds %lld tokens but the context holds %lld (raise "
                      "-c/--ctx-size)", name, (long long)r.hdr.n_tokens, (long long)n_ctx);
    if (st == IG_OK &&
        (!(lc->tokens = malloc((size_t)r.hdr.n_tokens * sizeof *lc->tokens)) ||
         !(lc->logits = malloc((size_t)m->hp.n_vocab * sizeof *lc->logits))))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)r.hdr.n_tokens);
    if (st == IG_OK && (st = kv_file_read_body(&r, &lc->kv, lc->tokens, lc->logits)) == IG_OK)
        lc->h = (struct gen_history){.tokens = lc->tokens, .n = r.hdr.n_tokens,
                                     .logits = r.hdr.n_vocab > 0 ? lc->logits : NULL,
                                     .kv = lc->kv};
    kv_memory_free(layers);
    if (!is_stdin)
        fclose(f);
    return st;
}

/* --save-kv must not name the model: writing it would replace the weights
 * the run has mapped (and still reads for the model id). */
static int check_save_path(const char *save, const char *model)
{
    struct stat a, b;
    if (!save || is_dash(save) || stat(save, &a) != 0 || stat(model, &b) != 0 ||
        a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return IG_OK;
    return ig_error(IG_E_USAGE, "--save-kv '%s' is the model file; name another file", save);
}

/* Writes the kept sequence `id` (every token of prompt and answer, the
 * logits after the last) to the open --save-kv file and puts it in place.
 * Returns IG_OK or IG_E_IO. */
static int save_cache(struct engine *e, int64_t id, const struct model *m,
                      struct cli_outfile *out)
{
    const struct kv_store *kv;
    const int32_t *table, *tokens;
    const float *logits;
    int64_t n, slot;
    int st = engine_kept(e, id, &tokens, &n, &logits);
    if (st == IG_OK)
        st = engine_kept_export(e, id, &kv, &table, &slot);
    if (st != IG_OK)
        return st;
    unsigned char model_id[KV_MODEL_ID_BYTES];
    kv_model_id(m, model_id);
    const char *name = out->is_stdout ? "'stdout'" : out->name;
    st = kv_file_write(out->f, name, kv, table, slot, n, model_id, tokens, logits,
                       m->hp.n_vocab);
    return st == IG_OK ? cli_outfile_commit(out) : st;
}

/* ---- the prompt ---------------------------------------------------------------- */

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

/* The user's text: -p or -f; else stdin when it is piped and no other
 * option reads it; else, after --load-kv, nothing (an empty string: the
 * saved text continues as it is). An empty stdin is no prompt. */
static int read_user_text(const struct run_opts *o, char **user)
{
    size_t len;
    *user = NULL;
    if (!o->prompt && !o->file && !stdin_user(o) && cli_stdin_has_input()) {
        int st = cli_read_prompt_stdin(user, &len);
        if (st != IG_OK || *user)
            return st;
        if (!o->load_kv)
            return ig_error(IG_E_USAGE, "no prompt: stdin was empty (give one with -p TEXT "
                                        "or -f FILE)");
    }
    if (o->load_kv && !o->prompt && !o->file) {
        if (o->g.chat)
            return ig_error(IG_E_USAGE, "--chat with --load-kv needs the next message (-p, "
                                        "-f or stdin)");
        return (*user = calloc(1, 1)) ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
    }
    return cli_read_prompt(o->prompt, o->file, user, &len);
}

/* The text to encode: the user's, wrapped by the chat template (a continued
 * chat: only its next turn; a harmony one goes back to where the last answer
 * began, which is then written back as the template writes it: the history
 * is cut there). */
static int render(const struct run_opts *o, const struct run_chat *c, struct tok_vocab *v,
                  struct loaded_cache *lc, const char *user, char **prompt)
{
    if (o->g.chat && lc->kv && c->harmony && !lc->kv->n_states) {
        int64_t at;
        char *answer;
        int st = run_harmony_last_answer(v, lc->tokens, lc->h.n, &at, &answer);
        if (st == IG_OK && answer) {
            lc->h.n = at;
            lc->h.logits = NULL; /* those after the answer's start are not kept */
            st = chat_tmpl_next_answer(&c->t, NULL, answer, user, o->g.no_think, prompt);
        }
        free(answer);
        if (st != IG_OK || *prompt)
            return st;
    }
    if (o->g.chat && lc->kv)
        return run_render_next(c, v, lc->tokens[lc->h.n - 1], NULL, o->g.no_think, user, prompt);
    return run_render_prompt(c, o->g.chat, o->g.no_think, o->g.system, user, prompt);
}

/* ---- the run ------------------------------------------------------------------ */

/* The warnings of a request's end, after its text's line is ended. */
static void warn_end(const struct gen_result *res, int64_t n_ctx, bool saving)
{
    if (res->stop == GEN_STOP_CONTEXT)
        ig_warn("the context is full (%lld positions): generation stopped (raise -c)%s",
                (long long)n_ctx, saving ? "; the last token printed is not in the saved cache"
                                         : "");
    if (res->grammar && res->stop != GEN_STOP_NONE && !res->grammar_complete)
        ig_warn(res->stop == GEN_STOP_GRAMMAR
                    ? "no token of the model's vocabulary can continue the grammar here: the "
                      "output is incomplete"
                    : "the output is incomplete: generation stopped (%s) before the grammar "
                      "was complete", gen_stop_name(res->stop));
}

/* What generate() needs besides the options. */
struct run_inputs {
    struct model *m;
    const char *path;     /* the model as loaded, for --json */
    struct tok_vocab *vocab;
    struct backend *be;
    struct backend *draft; /* -md's, or NULL */
    int64_t n_ctx;
    struct loaded_cache *lc;
    const char *prompt;   /* the text to encode */
    const struct grammar *grammar;
    struct cli_outfile *save; /* --save-kv, open; NULL without */
    double load_ms;
    bool harmony;         /* --chat with a harmony template: the answer in channels */
};

/* Runs the one request to its end and reports it. */
static int generate(const struct run_opts *o, const struct run_inputs *in)
{
    struct run_state rs = {.o = o, .to_buffer = o->json};
    struct tok_ids ids = {0};
    struct engine *engine = NULL;
    struct loaded_cache *lc = in->lc;
    struct gen_request r = {.history = lc->kv ? &lc->h : NULL};
    double save_ms = 0;
    size_t kv_bytes = 0;
    run_channels_init(&rs.ch, in->harmony, o->g.verbose, on_final, &rs);
    struct engine_opts eo = {
        .max_rows = in->be->o.max_rows, .interrupt = &cli_interrupted,
        .cb = {.on_text = on_text, .on_token = on_token, .user = &rs},
        .spec_max = o->g.lookup || o->g.draft_model ? gen_cli_spec_max(&o->g) : 0,
        .draft = in->draft,
    };
    run_stream_init(&rs.out, !o->g.quiet);
    int st = engine_create(in->be, in->vocab, &eo, &engine);
    install_signals();
    /* TTFT starts here: the model is loaded, the prompt is text. */
    r.t_arrival_ns = ig_now_ns();
    unsigned flags = run_encode_flags(&o->g) & (lc->kv ? ~(unsigned)TOK_ENC_ADD_BOS : ~0u);
    if (st == IG_OK && *in->prompt)
        st = tok_encode(in->vocab, in->prompt, strlen(in->prompt), flags, &ids);
    r.result.tokenize_ms = (double)(ig_now_ns() - r.t_arrival_ns) / 1e6;
    if (st == IG_OK && o->verbose_prompt)
        run_print_prompt(in->vocab, in->prompt, ids.ids, ids.n);
    if (st == IG_OK)
        run_warn_train_ctx(in->m, lc->h.n + ids.n, in->n_ctx);
    r.tokens = ids.ids;
    r.n_tokens = ids.n;
    r.params = (struct gen_params){.n_predict = o->g.n_predict, .sp = o->g.sp,
                                   .ignore_eog = o->g.ignore_eos, .prompt_only = o->prompt_only,
                                   .keep = in->save != NULL, .stop = o->g.stop,
                                   .n_stop = o->g.n_stop, .grammar = in->grammar,
                                   .special_text = in->harmony};
    gen_cli_spec(&o->g, &r.params.spec);
    if (st == IG_OK)
        st = engine_submit(engine, &r);
    while (st == IG_OK && engine_pending(engine)) {
        st = engine_step(engine);
        run_stream_prefill(&rs.out, &r.result, r.n_tokens);
    }
    cli_progress_clear(&rs.out.progress);
    const struct gen_result *res = &r.result;
    if (res->stop != GEN_STOP_OUTPUT && run_channels_finish(&rs.ch))
        r.result.stop = GEN_STOP_OUTPUT;
    if (engine)
        kv_bytes = (size_t)kv_pool_peak_bytes(engine_pool(engine), backend_kv_memory(in->be));
    if (st == IG_OK)
        st = res->status;
    int write_errno = rs.out.write_errno ? rs.out.write_errno : rs.buf_errno;
    if (st == IG_OK && res->stop == GEN_STOP_OUTPUT && write_errno != EPIPE)
        st = ig_error(write_errno == ENOMEM ? IG_E_NOMEM : IG_E_IO,
                      "cannot write to stdout: %s", strerror(write_errno));
    if (st == IG_OK && res->stop == GEN_STOP_INTERRUPT)
        st = IG_E_INTERRUPTED;
    if (res->stop != GEN_STOP_OUTPUT)
        run_stream_end_line(&rs.out); /* diagnostics start on a line of their own */
    warn_end(res, in->n_ctx, in->save != NULL);
    /* Saved only after a request that ended well: Ctrl-C or an error leaves
     * the file as it was. */
    if (in->save && st == IG_E_INTERRUPTED)
        ig_warn("interrupted: nothing was written to '%s'",
                in->save->is_stdout ? "stdout" : in->save->path);
    if (in->save && st == IG_OK && res->kept) {
        int64_t t = ig_now_ns();
        st = save_cache(engine, res->kept, in->m, in->save);
        save_ms = (double)(ig_now_ns() - t) / 1e6;
    }
    if (res->stop != GEN_STOP_NONE || st == IG_E_INTERRUPTED) {
        struct run_report rep = {
            .res = res, .sp = &o->g.sp, .model_path = in->path, .m = in->m,
            .device = in->be->device, .threads = in->be->threads,
            .n_ctx = in->n_ctx, .kv_bytes = kv_bytes, .kv_mem = backend_kv_memory(in->be),
            .kv_max_bytes = backend_kv_bytes(in->be, kv_blocks_for(in->n_ctx),
                                             in->be->n_states ? 1 : 0),
            .kv_load_ms = in->load_ms, .kv_save_ms = save_ms,
            .device_bytes = backend_device_bytes(in->be),
            .weight_bytes = backend_weight_bytes(in->be),
            .gpu_weights = in->be->o.device.kind == BACKEND_CUDA
                               ? backend_gpu_weights_name(in->be->o.gpu_weights) : NULL,
            .text = rs.text.s, .len = rs.text.len, .status = st, .channels = &rs.ch,
            .write_failed = res->stop == GEN_STOP_OUTPUT && write_errno != EPIPE,
        };
        if (!o->g.quiet)
            run_print_stats(&rep);
        if (o->json) {
            int js = run_print_json(&rep);
            st = st == IG_OK ? js : st;
        }
    }
    run_stream_done(&rs.out);
    engine_free(engine);
    tok_ids_free(&ids);
    free(rs.text.s);
    run_channels_free(&rs.ch);
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
    enum backend_gpu_weights gpu_weights;
    if ((st = cli_choose_device(o.g.device, o.g.n_gpu_layers, o.g.gpu_weights, &dev, &gpu_weights)) != IG_OK)
        return st;
    o.g.sp.seed = gen_cli_pick_seed(o.g.seed);
    if ((st = gen_cli_check_spec(&o.g, dev.kind)) != IG_OK)
        return st;

    char path[4096], *user = NULL, *prompt = NULL;
    struct grammar *grammar = NULL;
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    struct backend *be = NULL, *draft = NULL;
    struct model *dm = NULL;
    struct loaded_cache lc = {0};
    struct cli_outfile save = {0};
    struct run_chat chat = {0};
    /* The prompt, the grammar and the file to save come before the model:
     * bad ones cost no load. */
    if ((st = read_user_text(&o, &user)) != IG_OK || (st = check_system(o.g.system)) != IG_OK ||
        (st = gen_cli_compile_grammar(&o.g, &grammar)) != IG_OK ||
        (st = cli_model_path(o.g.model, path, sizeof path)) != IG_OK ||
        (st = check_save_path(o.save_kv, path)) != IG_OK ||
        (o.save_kv && (st = cli_outfile_open(&save, o.save_kv, "--save-kv")) != IG_OK))
        goto done;
    if (cli_stderr_is_tty() && !o.g.quiet)
        fprintf(stderr, "loading %s\n", path);
    if ((st = run_load_model(path, &m, &vocab)) != IG_OK)
        goto done;
    gen_cli_model_defaults(&o.g, m);
    int64_t n_ctx = gen_cli_context(&o.g, m->hp.n_ctx_train);
    int64_t t_load = ig_now_ns();
    if (o.load_kv && (st = load_cache(o.load_kv, m, n_ctx, &lc)) != IG_OK)
        goto done;
    if (lc.kv && o.g.kv.given &&
        (lc.kv->memory->dtype != o.g.kv.k || lc.kv->memory->dtype_v != o.g.kv.v)) {
        /* converting would quantize again what was quantized (or lose
         * precision the file has): the cache is used as it was saved */
        st = ig_error(IG_E_USAGE, "--load-kv '%s' holds a KV cache of K %s, V %s, but K %s, V %s "
                      "was asked (leave the cache type out to use the file's)", o.load_kv,
                      kv_dtype_name(lc.kv->memory->dtype), kv_dtype_name(lc.kv->memory->dtype_v),
                      kv_dtype_name(o.g.kv.k), kv_dtype_name(o.g.kv.v));
        goto done;
    }
    double load_ms = o.load_kv ? (double)(ig_now_ns() - t_load) / 1e6 : 0;
    if ((st = run_chat_setup(&o.g, m, vocab, &chat)) != IG_OK ||
        (st = render(&o, &chat, vocab, &lc, user, &prompt)) != IG_OK)
        goto done;
    struct backend_opts bo = {
        .device = dev, .n_threads = (int)o.g.n_threads, .n_ctx = n_ctx, .n_slots = 1,
        .max_rows = o.g.n_batch < n_ctx ? o.g.n_batch : n_ctx, .exact = o.g.exact,
        /* a loaded cache keeps its types */
        .kv_dtype = lc.kv ? lc.kv->memory->dtype : o.g.kv.k,
        .kv_dtype_v = lc.kv ? lc.kv->memory->dtype_v : o.g.kv.v,
        .gpu_weights = gpu_weights,
        .free_window_blocks = true, /* the window rule (kvcache.h) */
    };
    if ((st = backend_create(m, &bo, &be)) != IG_OK ||
        (st = gen_cli_load_draft(&o.g, vocab, &be->o, &dm, &draft)) != IG_OK)
        goto done;
    struct run_inputs in = {.draft = draft, .m = m, .path = path, .vocab = vocab, .be = be, .n_ctx = n_ctx, .lc = &lc,
                            .prompt = prompt, .grammar = grammar,
                            .save = o.save_kv ? &save : NULL, .load_ms = load_ms,
                            .harmony = o.g.chat && chat.harmony};
    st = generate(&o, &in);
done:
    cli_outfile_abort(&save); /* (after a commit: nothing left to remove) */
    grammar_free(grammar);
    loaded_free(&lc);
    run_chat_free(&chat);
    backend_free(draft);
    model_free(dm);
    backend_free(be);
    tok_vocab_free(vocab);
    model_free(m);
    free(prompt);
    free(user);
    return st;
}
