/* cli/cmd_run.c: `ignite run` (also what `ignite -p ...` means): options,
 * then model -> tokenizer -> optional chat template -> KV cache + run state
 * -> generate, streaming text to stdout. Owns the signals: SIGINT stops the
 * loop (stats still printed, exit 130), SIGPIPE is ignored and EPIPE on
 * stdout ends the run quietly with status 0. The report is run_report.c.
 * Covered by tests/cli/test_run_args.sh, test_run_model.sh and tests/kvcache/test_kv_cli.py. */
#include "cli/cli.h"
#include "cli/run.h"

#include "core/status.h"
#include "core/timer.h"
#include "decode/generate.h"
#include "models/model.h"
#include "backend/backend.h"
#include "ops/ops.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUN_DEFAULT_CTX 4096 /* -c 0: the model's context, capped here */

enum {
    OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N,
    OPT_CHAT, OPT_SYSTEM, OPT_DEVICE, OPT_JSON, OPT_NO_SPECIAL, OPT_IGNORE_EOS,
    OPT_UBATCH, OPT_BATCH_SIZE, OPT_PROMPT_ONLY, OPT_SAVE_KV, OPT_LOAD_KV, OPT_NO_THINK,
};

/* The one table: getopt_long and --help both come from it. Keep the
 * defaults here in step with run_defaults() and docs/cli.md. */
static const struct cli_option run_options[] = {
    {"model", 'm', required_argument, "FILE", "GGUF model file", "the fetched default model"},
    {"prompt", 'p', required_argument, "TEXT", "prompt text", NULL},
    {"file", 'f', required_argument, "FILE", "read the prompt from FILE ('-' = stdin)", NULL},
    {"n-predict", 'n', required_argument, "N", "tokens to generate, -1 = until EOS or context full", "256"},
    {"ctx-size", 'c', required_argument, "N", "context positions, 0 = the model's (at most 4096)", "0"},
    {"threads", 't', required_argument, "N", "CPU threads, 0 = one per core", "0"},
    {"chunk", 'b', required_argument, "N", "prompt tokens per prefill chunk (bounds activation memory)", "512"},
    {"ubatch", OPT_UBATCH, required_argument, "N", "the same as --chunk", NULL},
    {"batch-size", OPT_BATCH_SIZE, required_argument, "N", "the same as --chunk", NULL},
    {"temp", OPT_TEMP, required_argument, "T", "temperature, 0 = greedy", "0.8"},
    {"top-k", OPT_TOP_K, required_argument, "K", "keep the K most likely tokens, 0 = off", "40"},
    {"top-p", OPT_TOP_P, required_argument, "P", "nucleus: smallest set with mass >= P, 1 = off", "0.95"},
    {"min-p", OPT_MIN_P, required_argument, "P", "drop tokens below P * the top probability, 0 = off", "0.05"},
    {"repeat-penalty", OPT_REPEAT_PENALTY, required_argument, "X", "penalise recent tokens, 1 = off", "1.0"},
    {"repeat-last-n", OPT_REPEAT_LAST_N, required_argument, "N", "tokens the penalty looks back over", "64"},
    {"seed", 's', required_argument, "N", "sampling seed, -1 = random (reported)", "-1"},
    {"chat", OPT_CHAT, no_argument, NULL, "wrap the prompt in the model's chat template", NULL},
    {"system", OPT_SYSTEM, required_argument, "TEXT", "system message for --chat", "the template's"},
    {"no-think", OPT_NO_THINK, no_argument, NULL, "with --chat: turn the model's thinking off (Qwen3's enable_thinking)", NULL},
    {"device", OPT_DEVICE, required_argument, "DEV", "auto, cpu or cuda[:N]", "auto"},
    {"prompt-only", OPT_PROMPT_ONLY, no_argument, NULL, "prefill the prompt, generate nothing (with --save-kv)", NULL},
    {"save-kv", OPT_SAVE_KV, required_argument, "FILE", "with --prompt-only: write the KV cache to FILE ('-' = stdout)", NULL},
    {"load-kv", OPT_LOAD_KV, required_argument, "FILE", "start from a saved KV cache ('-' = stdin); -p/-f add text", NULL},
    {"ignore-eos", OPT_IGNORE_EOS, no_argument, NULL, "do not stop at end-of-generation tokens (benchmarks)", NULL},
    {"no-special", OPT_NO_SPECIAL, no_argument, NULL, "treat special-token text in the prompt as plain text (not with --chat)", NULL},
    {"quiet", 'q', no_argument, NULL, "no stats line", NULL},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON object with text and stats on stdout", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char run_usage[] = "ignite [run] [options] -p TEXT | -f FILE";
static const char run_summary[] =
    "Generates text from a prompt: the text streams to stdout, one stats line goes to stderr.\n"
    "Exit codes: 0 ok, 2 usage, 3 I/O, 4 bad model, 5 out of memory, 6 bad prompt,\n"
    "7 device, 8 bad KV cache file, 130 interrupted.";

static void run_defaults(struct run_opts *o)
{
    *o = (struct run_opts){.n_predict = 256, .n_batch = 512, .seed = -1, .device = "auto"};
    o->sp = sampler_default_params();
}

/* ---- options ------------------------------------------------------------- */

/* Parses one option's value into `o`. */
static int set_option(struct run_opts *o, int key, const char *arg)
{
    double d;
    switch (key) {
    case 'm': o->model = arg; return IG_OK;
    case 'p': o->prompt = arg; return IG_OK;
    case 'f': o->file = arg; return IG_OK;
    case 'n':
        if (cli_parse_i64("--n-predict", arg, -1, INT32_MAX, &o->n_predict) != IG_OK)
            return IG_E_USAGE;
        return o->n_predict ? IG_OK : ig_error(IG_E_USAGE, "--n-predict: 0 generates nothing; use -1 or N >= 1");
    case 'c': return cli_parse_i64("--ctx-size", arg, 0, (int64_t)1 << 30, &o->n_ctx);
    case 't': return cli_parse_i64("--threads", arg, 0, OPS_POOL_MAX_THREADS, &o->n_threads);
    case 'b':
    case OPT_UBATCH:
    case OPT_BATCH_SIZE: return cli_parse_i64("--chunk", arg, 1, 1 << 20, &o->n_batch);
    case OPT_PROMPT_ONLY: o->prompt_only = true; return IG_OK;
    case OPT_SAVE_KV: o->save_kv = arg; return IG_OK;
    case OPT_LOAD_KV: o->load_kv = arg; return IG_OK;
    case 's': return cli_parse_i64("--seed", arg, -1, UINT32_MAX, &o->seed);
    case OPT_TEMP: return cli_parse_f64("--temp", arg, 0, 1e6, &o->sp.temperature);
    case OPT_TOP_K: return cli_parse_i64("--top-k", arg, 0, INT32_MAX, &o->sp.top_k);
    case OPT_TOP_P:
        if (cli_parse_f64("--top-p", arg, 0, 1, &d) != IG_OK)
            return IG_E_USAGE;
        o->sp.top_p = d > 0 ? d : 1e-9; /* 0 means: only the best token */
        return IG_OK;
    case OPT_MIN_P: return cli_parse_f64("--min-p", arg, 0, 1, &o->sp.min_p);
    case OPT_REPEAT_PENALTY:
        return cli_parse_f64("--repeat-penalty", arg, 1e-3, 1e3, &o->sp.repeat_penalty);
    case OPT_REPEAT_LAST_N:
        return cli_parse_i64("--repeat-last-n", arg, 0, 1 << 20, &o->sp.repeat_last_n);
    case OPT_CHAT: o->chat = true; return IG_OK;
    case OPT_SYSTEM: o->system = arg; return IG_OK;
    case OPT_NO_THINK: o->no_think = true; return IG_OK;
    case OPT_DEVICE: o->device = arg; return IG_OK;
    case OPT_NO_SPECIAL: o->no_special = true; return IG_OK;
    case OPT_IGNORE_EOS: o->ignore_eos = true; return IG_OK;
    case 'q': o->quiet = true; return IG_OK;
    case OPT_JSON: o->json = true; return IG_OK;
    }
    return ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
}

/* Returns IG_OK to run, -1 after --help/--version (exit 0), or IG_E_USAGE. */
static int parse_args(int argc, char **argv, struct run_opts *o)
{
    struct cli_parser parser;
    cli_parser_init(&parser, run_options);
    optind = 1;
    opterr = 0;
    int key;
    while ((key = getopt_long(argc, argv, parser.shortopts, parser.longopts, NULL)) != -1) {
        if (key == 'h') {
            cli_print_help(stdout, run_usage, run_summary, run_options);
            return -1;
        }
        if (key == 'V') {
            printf("ignite %s\n", IGNITE_VERSION);
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
    if (o->system && !o->chat)
        return ig_error(IG_E_USAGE, "--system needs --chat");
    if (o->no_think && !o->chat)
        return ig_error(IG_E_USAGE, "--no-think needs --chat");
    if (o->save_kv && !o->prompt_only)
        return ig_error(IG_E_USAGE, "--save-kv needs --prompt-only (the cache is saved after "
                                    "the prompt)");
    if (o->save_kv && !strcmp(o->save_kv, "-") && o->json)
        return ig_error(IG_E_USAGE, "--save-kv - and --json both want stdout");
    if (o->load_kv && !strcmp(o->load_kv, "-") && o->file && !strcmp(o->file, "-"))
        return ig_error(IG_E_USAGE, "--load-kv - and -f - both want stdin");
    if (o->load_kv && o->chat)
        return ig_error(IG_E_USAGE, "--chat cannot continue a loaded cache (the template "
                                    "renders a whole conversation); pass the text with -p");
    return IG_OK;
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

/* Where generated text goes: stdout with a flush per token, or a buffer for
 * --json. */
struct run_output {
    bool to_buffer;
    char *buf;
    size_t len, cap;
    int write_errno;  /* errno of a failed stdout write, 0 if none */
    bool wrote;       /* anything reached stdout */
};

static int emit(void *user, const char *text, size_t len)
{
    struct run_output *out = user;
    if (out->to_buffer) {
        if (out->len + len + 1 > out->cap) {
            size_t cap = (out->len + len + 1) * 2;
            char *b = realloc(out->buf, cap);
            if (!b) {
                out->write_errno = ENOMEM;
                return 1;
            }
            out->buf = b;
            out->cap = cap;
        }
        memcpy(out->buf + out->len, text, len);
        out->len += len;
        return 0;
    }
    errno = 0;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        out->write_errno = errno ? errno : EIO;
        return 1;
    }
    out->wrote = true;
    return 0;
}

/* ---- the run ------------------------------------------------------------------ */

/* The prompt text the tokenizer sees: as given, or wrapped by the model's
 * chat template. Takes ownership of `user`; *text is malloc'd. */
static int build_prompt(const struct run_opts *o, const struct model *m, char *user,
                        char **text)
{
    if (!o->chat) {
        *text = user;
        return IG_OK;
    }
    struct gguf_str t = {0};
    int st;
    if (!gguf_get_str(m->gguf, "tokenizer.chat_template", &t) || !t.len)
        st = ig_error(IG_E_MODEL, "--chat: %s has no tokenizer.chat_template", m->path);
    else
        st = chat_render_opts(chat_detect(t.ptr, (size_t)t.len), t.ptr, (size_t)t.len,
                              o->system, user, &(struct chat_opts){.no_thinking = o->no_think},
                              text);
    free(user);
    return st;
}

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

static int64_t context_size(const struct run_opts *o, const struct model *m)
{
    if (o->n_ctx > 0) {
        if (m->hp.n_ctx_train > 0 && o->n_ctx > m->hp.n_ctx_train)
            ig_warn("--ctx-size %lld is beyond the %lld positions the model was trained on",
                    (long long)o->n_ctx, (long long)m->hp.n_ctx_train);
        return o->n_ctx;
    }
    int64_t n = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : RUN_DEFAULT_CTX;
    return n < RUN_DEFAULT_CTX ? n : RUN_DEFAULT_CTX;
}

static uint64_t pick_seed(int64_t seed)
{
    if (seed >= 0)
        return (uint64_t)seed;
    uint64_t x = (uint64_t)ig_now_ns() ^ ((uint64_t)getpid() << 32);
    x ^= x >> 29;
    return (x * 0x9e3779b97f4a7c15ull) >> 32; /* 32 bits: exact in JSON, easy to retype */
}

/* ---- saved caches ---------------------------------------------------------- */

/* Reads --load-kv into a new host cache of n_ctx positions (at least the
 * file's tokens) and the history. Returns IG_OK, IG_E_IO, IG_E_KVFILE,
 * IG_E_INPUT (the file holds more tokens than the context) or IG_E_NOMEM. */
static int load_cache(const char *file, const struct model *m, int64_t n_ctx,
                      struct kv_cache **kv, struct generate_history *hist)
{
    bool is_stdin = !strcmp(file, "-");
    const char *name = is_stdin ? "stdin" : file;
    FILE *f = is_stdin ? stdin : fopen(file, "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s: %s", file, strerror(errno));
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id);
    struct kv_file_reader r;
    int st = kv_file_read_header(&r, f, name, &m->hp, id);
    if (st == IG_OK && r.hdr.n_tokens > n_ctx)
        st = ig_error(IG_E_INPUT, "%s holds %lld tokens but the context holds %lld (raise "
                      "-c/--ctx-size)", name, (long long)r.hdr.n_tokens, (long long)n_ctx);
    if (st == IG_OK)
        st = kv_cache_create(&m->hp, n_ctx, r.hdr.dtype, NULL, kv);
    if (st == IG_OK && !(hist->tokens = malloc((size_t)r.hdr.n_tokens * sizeof *hist->tokens)))
        st = ig_error(IG_E_NOMEM, "out of memory for %lld token ids", (long long)r.hdr.n_tokens);
    if (st == IG_OK && (st = kv_file_read_body(&r, *kv, hist->tokens, hist->logits)) == IG_OK) {
        hist->n = r.hdr.n_tokens;
        hist->have_logits = r.hdr.n_vocab > 0;
    }
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
    return ig_error(IG_E_USAGE, "--save-kv %s is the model file; name another file", save);
}

/* Writes the cache and its history to --save-kv. A regular file that cannot
 * be completed is removed. Returns IG_OK or IG_E_IO. */
static int save_cache(const char *file, const struct model *m, struct backend *be,
                      const struct generate_history *hist)
{
    const struct kv_cache *kv;
    int st = backend_kv_export(be, &kv);
    if (st != IG_OK)
        return st;
    unsigned char id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id); /* before the file is opened: it reads the mapped weights */
    bool is_stdout = !strcmp(file, "-");
    FILE *f = is_stdout ? stdout : fopen(file, "wb");
    if (!f)
        return ig_error(IG_E_IO, "cannot create %s: %s", file, strerror(errno));
    st = kv_file_write(f, is_stdout ? "stdout" : file, kv, id, hist->tokens,
                           hist->have_logits ? hist->logits : NULL, m->hp.n_vocab);
    if (!is_stdout) {
        if (fclose(f) != 0 && st == IG_OK)
            st = ig_error(IG_E_IO, "cannot write %s: %s", file, strerror(errno));
        if (st != IG_OK && is_plain_file(file))
            remove(file);
    }
    return st;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    run_defaults(&o);
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    struct backend_device dev;
    if ((st = backend_parse_device(o.device, &dev)) != IG_OK ||
        (st = backend_resolve_device(&dev)) != IG_OK)
        return st;
    o.sp.seed = pick_seed(o.seed);

    char path[4096], *user = NULL, *prompt = NULL;
    size_t prompt_len;
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    struct sampler *smp = NULL;
    struct kv_cache *kv = NULL; /* --load-kv's cache, until the backend has it */
    struct backend *be = NULL;
    struct run_output out = {.to_buffer = o.json};
    struct generate_stats stats = {0};
    struct generate_history hist = {0};
    double load_ms = 0, save_ms = 0;

    if (o.load_kv && !o.prompt && !o.file) { /* continue the saved prompt as it is */
        user = calloc(1, 1);
        st = user ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
        prompt_len = 0;
    } else {
        st = cli_read_prompt(o.prompt, o.file, &user, &prompt_len);
    }
    if (st != IG_OK || (st = check_system(o.system)) != IG_OK ||
        (st = cli_model_path(o.model, path, sizeof path)) != IG_OK ||
        (st = check_save_path(o.save_kv, path)) != IG_OK)
        goto done;
    if (cli_stderr_is_tty() && !o.quiet)
        fprintf(stderr, "loading %s\n", path);
    if ((st = model_load(path, &m)) != IG_OK || (st = tok_load_gguf(m->gguf, &vocab)) != IG_OK)
        goto done;
    /* Output rows past the vocabulary are padding (some models round the
     * embedding up): the sampler only ever sees the first n_tokens logits. */
    int64_t n_tokens = tok_n_tokens(vocab);
    if (n_tokens > m->hp.n_vocab) {
        st = ig_error(IG_E_MODEL, "%s: the tokenizer has %lld tokens but the model has only "
                      "%lld embedding rows", path, (long long)n_tokens, (long long)m->hp.n_vocab);
        goto done;
    }
    st = build_prompt(&o, m, user, &prompt);
    user = NULL; /* build_prompt took it */
    if (st != IG_OK)
        goto done;
    int64_t n_ctx = context_size(&o, m);
    int64_t n_batch = o.n_batch < n_ctx ? o.n_batch : n_ctx;
    if ((st = sampler_create(&o.sp, n_tokens, &smp)) != IG_OK ||
        (st = generate_history_init(&hist, m->hp.n_vocab)) != IG_OK)
        goto done;
    int64_t t_load = ig_now_ns();
    if (o.load_kv && (st = load_cache(o.load_kv, m, n_ctx, &kv, &hist)) != IG_OK)
        goto done;
    struct backend_opts bo = {
        .device = dev, .n_threads = (int)o.n_threads, .n_ctx = n_ctx, .max_batch = n_batch,
        .kv_dtype = kv ? kv->dtype : KV_F32, /* a loaded cache keeps its type */
    };
    if ((st = backend_create(m, &bo, &be)) != IG_OK)
        goto done;
    if (kv) {
        st = backend_kv_import(be, kv);
        kv_cache_free(kv);
        kv = NULL;
        load_ms = (double)(ig_now_ns() - t_load) / 1e6;
        if (st != IG_OK)
            goto done;
    }

    struct generate_params gp = {
        .n_predict = o.n_predict,
        .max_batch = n_batch,
        .prompt_only = o.prompt_only,
        .encode_flags = TOK_ENC_ADD_BOS | (o.no_special && !o.chat ? 0 : TOK_ENC_PARSE_SPECIAL),
        .print_special = false,
        .ignore_eog = o.ignore_eos,
        .interrupt = &run_interrupted,
        .emit = emit,
        .emit_user = &out,
    };
    install_signals();
    st = generate_run(be, vocab, smp, prompt, strlen(prompt), &gp, &hist, &stats);
    if (st == IG_OK && stats.stop == GEN_STOP_PROMPT && o.save_kv) {
        int64_t t_save = ig_now_ns();
        st = save_cache(o.save_kv, m, be, &hist);
        save_ms = (double)(ig_now_ns() - t_save) / 1e6;
    }
    if (st == IG_OK && stats.stop == GEN_STOP_OUTPUT && out.write_errno != EPIPE)
        st = ig_error(out.write_errno == ENOMEM ? IG_E_NOMEM : IG_E_IO,
                      "cannot write the output: %s", strerror(out.write_errno));
    if (st == IG_OK && stats.stop == GEN_STOP_INTERRUPT)
        st = IG_E_INTERRUPTED;
    if (stats.stop == GEN_STOP_CONTEXT)
        ig_warn("the context is full (%lld positions): generation stopped (raise -c)",
                (long long)n_ctx);
    if (out.wrote && stats.stop != GEN_STOP_OUTPUT && fputc('\n', stdout) != EOF)
        fflush(stdout);
    if (stats.stop != GEN_STOP_NONE || st == IG_E_INTERRUPTED) {
        struct run_result r = {
            .stats = &stats, .device = backend_device(be), .threads = backend_threads(be),
            .n_ctx = n_ctx, .kv_bytes = backend_kv_bytes(be),
            .kv_max_bytes = backend_kv_max_bytes(be),
            .kv_load_ms = load_ms, .kv_save_ms = save_ms,
            .text = out.buf, .len = out.len, .status = st,
        };
        if (!o.quiet)
            run_print_stats(&o, &r);
        if (o.json) {
            int js = run_print_json(&o, &r);
            st = st == IG_OK ? js : st;
        }
    }
done:
    free(out.buf);
    generate_history_free(&hist);
    backend_free(be);
    kv_cache_free(kv);
    sampler_free(smp);
    tok_vocab_free(vocab);
    model_free(m);
    free(prompt);
    free(user);
    return st;
}
