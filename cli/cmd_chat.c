/* cli/cmd_chat.c: `ignite chat`: a conversation, one user message a line
 * (a line ending in '\' goes on to the next), one answer each, streamed to
 * stdout. It is the generation engine with one request a turn, each kept
 * (generate.h, "Conversations") and continued by the next: the history
 * stays in the KV cache, so a turn prefills only its own tokens, rendered
 * as the template's next turn (tokenizer/chat_template.h). On a terminal a
 * "> " marker on stderr asks for each message; Ctrl-C stops the answer (or,
 * in its prefill, drops the message), Ctrl-C at the marker or Ctrl-D ends.
 * From a pipe it answers each line in turn. A summary line at the end.
 * Covered by tests/cli/test_chat.py (pseudo-terminal and pipe) and
 * tests/cli/test_conversation.py (turns against one whole prompt). */
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
#include <sys/select.h>
#include <unistd.h>

enum { OPT_VERBOSE_PROMPT = 300, OPT_NO_HISTORY };

static const struct cli_option chat_options[] = {
    GEN_CLI_OPTIONS("512"),
    {"verbose-prompt", OPT_VERBOSE_PROMPT, no_argument, NULL, "print each turn as rendered and its token ids to stderr", NULL},
    {"no-history", OPT_NO_HISTORY, no_argument, NULL, "on a terminal: neither read nor write the history file ($XDG_STATE_HOME/ignite/history)", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char chat_usage[] = "ignite chat [options]";
static const char chat_summary[] =
    "A conversation with a chat model: each line of stdin is a message (a line ending in '\\'\n"
    "goes on to the next), each answer streams to stdout. On a terminal: Ctrl-C stops an\n"
    "answer, Ctrl-D (or Ctrl-C at the '> ' marker) ends; the line can be edited (arrows,\n"
    "Ctrl-R) and earlier messages recalled (up arrow), also from earlier sessions (the\n"
    "history file, ~/.local/state/ignite/history). The template is the model's (--chat\n"
    "is implied) or --chat-template's / --chat-template-file's; the conversation stays in\n"
    "the KV cache, so a turn prefills only itself.\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O, 4 bad model, 5 out of memory,\n"
    "6 bad message (the last one that failed; the others were answered), 7 device,\n"
    "130 interrupted at the marker.";

struct chat_args {
    struct gen_cli g;
    bool verbose_prompt;
    bool no_history; /* --no-history: the history file is neither read nor written */
};

/* Returns IG_OK, -1 after --help/--version, or IG_E_USAGE. */
static int parse_args(int argc, char **argv, struct chat_args *o)
{
    struct cli_parser parser;
    const struct cli_command cmd = {"chat", chat_usage, chat_summary, chat_options};
    if (cli_options_begin(&parser, &cmd, argc, argv) != IG_OK)
        return IG_E_USAGE;
    int key;
    while ((key = cli_options_next(&parser, &cmd, argc, argv)) >= 0) {
        if (key == OPT_VERBOSE_PROMPT || key == OPT_NO_HISTORY) {
            *(key == OPT_VERBOSE_PROMPT ? &o->verbose_prompt : &o->no_history) = true;
            continue;
        }
        int st = gen_cli_set(&o->g, key, optarg);
        if (st != IG_OK)
            return st == 1 ? ig_error(IG_E_INTERNAL, "option key %d has no handler", key)
                           : IG_E_USAGE;
    }
    if (key != CLI_OPTS_DONE)
        return key == CLI_OPTS_EXIT ? -1 : IG_E_USAGE;
    if (optind < argc)
        return cli_unexpected_argument("chat", argv[optind], "chat reads the messages from stdin");
    o->g.chat = true;
    if (gen_cli_check(&o->g) != IG_OK)
        return IG_E_USAGE;
    if ((o->g.grammar_file && !strcmp(o->g.grammar_file, "-")) ||
        (o->g.json_schema_file && !strcmp(o->g.json_schema_file, "-")))
        return ig_error(IG_E_USAGE, "%s -: chat reads its messages from stdin",
                        o->g.grammar_file ? "--grammar-file" : "--json-schema-file");
    return gen_cli_check_grammar(&o->g, NULL, false);
}

/* ---- signals ------------------------------------------------------------------ */

/* While an answer runs: a first Ctrl-C stops it, a second kills; while a
 * line is read, Ctrl-C at the marker interrupts the read (cli_catch_sigint). */

/* ---- reading messages ------------------------------------------------------------ */

/* Waits for input on a terminal, or Ctrl-C. A Ctrl-C that lands after the
 * marker is printed but before a read blocks would otherwise go unseen (the
 * read waits for a line): SIGINT stays blocked here except inside pselect,
 * which unblocks it atomically with the wait. 1: input (or an error for
 * getline to report), 0: interrupted. A terminal hands over a line per read,
 * so nothing waits in stdin's buffer when this is called. */
static int wait_input(void)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    int ready = 0;
    while (!cli_interrupted) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(STDIN_FILENO, &r);
        int n = pselect(STDIN_FILENO + 1, &r, NULL, NULL, NULL, &old);
        if (n > 0 || (n < 0 && errno != EINTR)) {
            ready = 1;
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return ready;
}

/* read_message through the line editor (cli/line_edit.c): the marker is
 * its prompt, ". " a continuation's; the message joins the history. */
static int read_edited(char **msg, size_t *len)
{
    char *out = NULL, *line;
    size_t n = 0;
    int rc = 1;
    for (bool first = true;; first = false) {
        if (!cli_line_edit_read(first ? "> " : ". ", &line)) {
            rc = cli_interrupted ? -1 : n ? 1 : 0;
            break;
        }
        size_t got = strlen(line);
        bool more = got && line[got - 1] == '\\';
        char *b = realloc(out, n + got + 2);
        if (!b) {
            free(line);
            rc = -IG_E_NOMEM;
            break;
        }
        out = b;
        memcpy(out + n, line, got - more);
        n += got - more;
        free(line);
        if (!more)
            break;
        out[n++] = '\n';
    }
    if (rc != 1) {
        fputc('\n', stderr); /* the summary or message that follows starts a line of its own */
        free(out);
        return rc;
    }
    if (!out && !(out = malloc(1)))
        return -IG_E_NOMEM;
    out[n] = '\0';
    cli_line_edit_add(out);
    *msg = out;
    *len = n;
    return 1;
}

/* The next message into *msg (malloc'd, without the newline; a line
 * ending in '\' continues: joined with '\n'). Returns 1 with a message,
 * 0 at the end of input, -1 after Ctrl-C, IG_E_NOMEM / IG_E_IO negated. */
static int read_message(char **msg, size_t *len, bool marker)
{
    char *line = NULL, *out = NULL;
    size_t cap = 0, n = 0;
    int rc = 1;
    if (marker) {
        fputs("> ", stderr);
        fflush(stderr);
    }
    for (;;) {
        if (marker && !wait_input()) {
            rc = -1;
            break;
        }
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            rc = cli_interrupted ? -1 : ferror(stdin) && errno != EINTR ? -IG_E_IO
                 : n ? 1 : 0;
            break;
        }
        if (got && line[got - 1] == '\n')
            got--;
        if (got && line[got - 1] == '\r')
            got--;
        bool more = got && line[got - 1] == '\\';
        char *b = realloc(out, n + (size_t)got + 2);
        if (!b) {
            rc = -IG_E_NOMEM;
            break;
        }
        out = b;
        memcpy(out + n, line, (size_t)(got - more));
        n += (size_t)(got - more);
        if (!more)
            break;
        out[n++] = '\n';
        if (marker) {
            fputs(". ", stderr);
            fflush(stderr);
        }
    }
    free(line);
    if (rc != 1) {
        if (marker) /* the summary or message that follows starts a line of its own */
            fputc('\n', stderr);
        free(out);
        return rc;
    }
    if (!out && !(out = malloc(1)))
        return -IG_E_NOMEM;
    out[n] = '\0';
    *msg = out;
    *len = n;
    return 1;
}

/* A message must be UTF-8 without NUL bytes (one line naming the offset). */
static int check_message(const char *msg, size_t len)
{
    size_t bad;
    const char *nul = memchr(msg, '\0', len);
    if (nul)
        return ig_error(IG_E_INPUT, "the message contains a NUL byte (offset %zu); it was "
                        "skipped", (size_t)(nul - msg));
    if (!cli_utf8_valid(msg, len, &bad))
        return ig_error(IG_E_INPUT, "the message is not valid UTF-8 (byte 0x%02x at offset "
                        "%zu); it was skipped", (unsigned char)msg[bad], bad);
    return IG_OK;
}

/* ---- the conversation --------------------------------------------------------------- */

struct chat {
    const struct chat_args *o;
    struct model *m;
    struct tok_vocab *vocab;
    struct run_chat tmpl;   /* the chat template */
    struct backend *be;
    struct model *dm;            /* -md's model and backend, or NULL */
    struct backend *draft;
    struct engine *engine;
    const struct grammar *grammar;
    struct run_stream out;
    int64_t n_ctx, kept;         /* the conversation's kept sequence, 0 before the first */
    int64_t turns, n_prompt, n_gen;
    bool context_full;
    /* a harmony template: each answer's channels; the last answer as the
     * user saw it (its final channel) and where it began in the cache, for
     * the next turn to write it back as the template does */
    struct run_channels ch;
    struct ig_str answer;
    int64_t answer_at;           /* 0: no answer to write back */
    bool answer_nomem;
};

/* The answer's text (a harmony chat's final channel) to stdout. */
static int on_final(void *user, const char *text, size_t len)
{
    struct chat *c = user;
    if (c->tmpl.harmony && !ig_str_putn(&c->answer, text, len))
        c->answer_nomem = true;
    return run_stream_write(&c->out, text, len);
}

static int on_text(void *user, struct gen_request *r, const char *text, size_t len)
{
    struct chat *c = user;
    (void)r;
    return run_channels_text(&c->ch, text, len);
}

static void on_token(void *user, struct gen_request *r, int32_t token, int64_t t_ns)
{
    struct chat *c = user;
    (void)r, (void)token, (void)t_ns;
    cli_progress_clear(&c->out.progress);
}

/* The text of the next turn: the first renders the system message too
 * (and gets BOS as the model's metadata asks); later ones come after the
 * conversation kept in the cache. */
static int render_turn(struct chat *c, const char *msg, char **text)
{
    if (!c->kept)
        return run_render_prompt(&c->tmpl, true, c->o->g.no_think, c->o->g.system, msg, text);
    const int32_t *tokens;
    const float *logits;
    int64_t n;
    if (c->answer_at) { /* harmony: the cache goes back to where the answer began */
        int st = engine_kept_rewind(c->engine, c->kept, c->answer_at);
        return st != IG_OK ? st
                           : chat_tmpl_next_answer(&c->tmpl.t, c->o->g.system,
                                                   c->answer.s ? c->answer.s : "", msg,
                                                   c->o->g.no_think, text);
    }
    int st = engine_kept(c->engine, c->kept, &tokens, &n, &logits);
    return st != IG_OK ? st
                       : run_render_next(&c->tmpl, c->vocab, tokens[n - 1], c->o->g.system,
                                         c->o->g.no_think, msg, text);
}

/* One turn: the message in, the answer out. Returns IG_OK, IG_E_INPUT
 * (the message was refused: the conversation goes on), or an error that
 * ends it (a failed write, the backend). */
static int turn(struct chat *c, const char *msg)
{
    char *text = NULL;
    struct tok_ids ids = {0};
    struct gen_request r = {.follows = c->kept};
    int st = render_turn(c, msg, &text);
    r.t_arrival_ns = ig_now_ns();
    unsigned flags = run_encode_flags(&c->o->g) & (c->kept ? ~(unsigned)TOK_ENC_ADD_BOS : ~0u);
    if (st == IG_OK)
        st = tok_encode(c->vocab, text, strlen(text), flags, &ids);
    if (st == IG_OK && c->o->verbose_prompt)
        run_print_prompt(c->vocab, text, ids.ids, ids.n);
    int64_t n_kept = 0;
    if (st == IG_OK && c->kept) {
        const int32_t *t;
        const float *l;
        engine_kept(c->engine, c->kept, &t, &n_kept, &l);
    }
    /* a harmony answer: its channels split, the user's answer kept */
    run_channels_free(&c->ch);
    run_channels_init(&c->ch, c->tmpl.harmony, c->o->g.verbose, on_final, c);
    struct ig_str last = c->answer;
    c->answer = (struct ig_str){0};
    if (st == IG_OK)
        run_warn_train_ctx(c->m, n_kept + ids.n, c->n_ctx);
    r.tokens = ids.ids;
    r.n_tokens = ids.n;
    r.params = (struct gen_params){.n_predict = c->o->g.n_predict, .sp = c->o->g.sp,
                                   .ignore_eog = c->o->g.ignore_eos, .keep = true,
                                   .stop = c->o->g.stop, .n_stop = c->o->g.n_stop,
                                   .grammar = c->grammar, .special_text = c->tmpl.harmony};
    gen_cli_spec(&c->o->g, &r.params.spec);
    if (st == IG_OK)
        st = engine_submit(c->engine, &r); /* (a message too long for what is left: skipped) */
    if (st == IG_OK) {
        cli_progress_start(&c->out.progress, !c->o->g.quiet);
        cli_catch_sigint(true);
        while (st == IG_OK && engine_pending(c->engine)) {
            st = engine_step(c->engine);
            run_stream_prefill(&c->out, &r.result, r.n_tokens);
        }
        cli_progress_clear(&c->out.progress);
        struct gen_result *res = &r.result;
        if (res->stop != GEN_STOP_OUTPUT && run_channels_finish(&c->ch))
            res->stop = GEN_STOP_OUTPUT;
        if (st == IG_OK)
            st = res->status;
        if (st == IG_OK && c->answer_nomem)
            st = ig_error(IG_E_NOMEM, "out of memory keeping the answer");
        /* a harmony answer that went into the cache is written back next turn */
        if (c->tmpl.harmony && res->kept && res->ttft_set) {
            c->answer_at = n_kept + ids.n;
            free(last.s);
            last = c->answer;
            c->answer = (struct ig_str){0};
        }
        if (res->stop != GEN_STOP_OUTPUT)
            run_stream_end_line(&c->out);
        if (res->kept)
            c->kept = res->kept;
        c->turns += res->ttft_set; /* answered */
        c->n_prompt += res->n_prompt;
        c->n_gen += res->n_gen;
        if (st == IG_OK && res->stop == GEN_STOP_INTERRUPT && !res->ttft_set)
            ig_warn("interrupted before the answer: the message was dropped");
        if (st == IG_OK && res->stop == GEN_STOP_CONTEXT) {
            ig_warn("the context is full (%lld positions): the conversation cannot go on "
                    "(raise -c)", (long long)c->n_ctx);
            c->context_full = true;
        }
        if (st == IG_OK && res->stop == GEN_STOP_OUTPUT && c->out.write_errno != EPIPE)
            st = ig_error(IG_E_IO, "cannot write to stdout: %s", strerror(c->out.write_errno));
    }
    cli_interrupted = 0;
    free(c->answer.s);   /* an answer that did not go into the cache */
    c->answer = last;    /* the one whose tokens the cache holds */
    tok_ids_free(&ids);
    free(text);
    return st;
}

/* Reads and answers messages until the input ends. */
static int converse(struct chat *c)
{
    bool marker = isatty(STDIN_FILENO) && isatty(STDERR_FILENO);
    /* a terminal's lines are edited where libedit is built in */
    bool edit = marker && cli_line_edit_open(!c->o->no_history);
    int failed = IG_OK;
    for (;;) {
        cli_catch_sigint(false);
        char *msg = NULL;
        size_t len = 0;
        int rc = edit ? read_edited(&msg, &len) : read_message(&msg, &len, marker);
        if (rc <= 0) {
            if (marker && rc == 0)
                fputc('\n', stderr); /* Ctrl-D leaves the marker's line open */
            return rc == -1 ? IG_E_INTERRUPTED : rc < 0 ? ig_error(-rc, "cannot read stdin")
                                                        : failed;
        }
        int st = len ? check_message(msg, len) : IG_OK;
        if (st == IG_OK && len)
            st = turn(c, msg);
        free(msg);
        if (st == IG_E_INPUT || st == IG_E_USAGE) { /* this message only */
            failed = st;
            continue;
        }
        if (st != IG_OK)
            return st;
        if (c->out.write_errno == EPIPE || c->context_full)
            return failed;
    }
}

int cmd_chat(int argc, char **argv)
{
    struct chat_args o = {0};
    gen_cli_defaults(&o.g);
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    struct backend_device dev;
    enum backend_gpu_weights gpu_weights;
    if ((st = cli_choose_device(o.g.device, o.g.n_gpu_layers, o.g.gpu_weights, &dev, &gpu_weights)) != IG_OK ||
        (st = gen_cli_check_spec(&o.g, dev.kind)) != IG_OK)
        return st;
    o.g.sp.seed = gen_cli_pick_seed(o.g.seed);
    signal(SIGPIPE, SIG_IGN);

    char path[4096], *probe = NULL;
    struct grammar *grammar = NULL;
    struct chat c = {.o = &o};
    size_t bad;
    if (o.g.system && !cli_utf8_valid(o.g.system, strlen(o.g.system), &bad)) {
        st = ig_error(IG_E_INPUT, "--system is not valid UTF-8 (byte 0x%02x at offset %zu)",
                      (unsigned char)o.g.system[bad], bad);
        goto done;
    }
    if ((st = gen_cli_compile_grammar(&o.g, &grammar)) != IG_OK ||
        (st = cli_model_path(o.g.model, path, sizeof path)) != IG_OK)
        goto done;
    c.grammar = grammar;
    if (cli_stderr_is_tty() && !o.g.quiet)
        fprintf(stderr, "loading %s\n", path);
    if ((st = run_load_model(path, &c.m, &c.vocab)) != IG_OK)
        goto done;
    gen_cli_model_defaults(&o.g, c.m);
    /* the template is checked now, not at the first message */
    if ((st = run_chat_setup(&o.g, c.m, c.vocab, &c.tmpl)) != IG_OK ||
        (st = run_render_prompt(&c.tmpl, true, o.g.no_think, o.g.system, "", &probe)) != IG_OK)
        goto done;
    c.n_ctx = gen_cli_context(&o.g, c.m->hp.n_ctx_train);
    struct backend_opts bo = {
        .device = dev, .n_threads = (int)o.g.n_threads, .n_ctx = c.n_ctx, .n_slots = 1,
        .max_rows = o.g.n_batch < c.n_ctx ? o.g.n_batch : c.n_ctx, .exact = o.g.exact,
        .gpu_weights = gpu_weights,
        .kv_dtype = o.g.kv.k, .kv_dtype_v = o.g.kv.v,
    };
    if ((st = backend_create(c.m, &bo, &c.be)) != IG_OK ||
        (st = gen_cli_load_draft(&o.g, c.vocab, &c.be->o, &c.dm, &c.draft)) != IG_OK)
        goto done;
    struct engine_opts eo = {
        .max_rows = c.be->o.max_rows, .interrupt = &cli_interrupted,
        .cb = {.on_text = on_text, .on_token = on_token, .user = &c},
        .spec_max = o.g.lookup || o.g.draft_model ? gen_cli_spec_max(&o.g) : 0,
        .draft = c.draft,
    };
    if ((st = engine_create(c.be, c.vocab, &eo, &c.engine)) != IG_OK)
        goto done;
    run_stream_init(&c.out, !o.g.quiet);
    st = converse(&c);
    cli_line_edit_close();
    run_stream_done(&c.out);
    if (!o.g.quiet) {
        const struct kv_pool *pool = engine_pool(c.engine);
        double kv = kv_pool_peak_bytes(pool, backend_kv_memory(c.be)) /
                    1048576.0;
        fprintf(stderr, "chat: %lld turns | prompt %lld tok | gen %lld tok | device %s | "
                        "threads %d | kv %.1f MiB\n",
                (long long)c.turns, (long long)c.n_prompt, (long long)c.n_gen, c.be->device,
                c.be->threads, kv);
    }
done:
    run_channels_free(&c.ch);
    free(c.answer.s);
    engine_free(c.engine);
    grammar_free(grammar);
    backend_free(c.draft);
    model_free(c.dm);
    backend_free(c.be);
    run_chat_free(&c.tmpl);
    tok_vocab_free(c.vocab);
    model_free(c.m);
    free(probe);
    return st;
}
