/* cli/args.c: every word of a command line is checked against the
 * command's option table before getopt_long sees it, so that nothing is
 * guessed. getopt reads "-ngl 99" as "-n gl" and "-hf x" as "-h -f x"; here
 * a word that starts with one dash must be a known short option on its own
 * ("-n"), or one that takes a value with a number attached ("-n64", "-s-1").
 * Anything else is refused with one line naming the word, and where the word
 * is llama.cpp's, what ignite has instead. An unknown long option, or a
 * mistyped command, gets "did you mean" by edit distance.
 * Values are skipped exactly as getopt takes them: the word after an option
 * that needs one is its value whatever it looks like ("-p -x", "-n -1").
 * Also the loop every command runs over its options (cli_options_begin,
 * cli_options_next: the check, --help, --version, the usage error).
 * Covered by tests/cli/test_args.sh. */
#include "cli/cli.h"

#include "core/status.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- llama.cpp's words ---------------------------------------------------------- */

/* Options of llama.cpp's tools (common/arg.cpp, llama-bench, llama-batched-
 * bench) that people bring along. `alt` is ignite's long option for the same
 * thing, named in the message when the command has it (with `note`, if
 * any, after it); without `alt`, `note` says what ignite does instead. */
struct foreign_word {
    const char *word;
    const char *alt;
    const char *note;
};

static const char NOTE_GPU[] = "ignite puts every layer on the GPU with --device cuda";
static const char NOTE_HF[] = "ignite downloads nothing: pass a local GGUF file with -m FILE";
static const char NOTE_CACHE_TYPE[] =
    "the KV cache's types are options of the commands that build a cache (run, chat, batch, "
    "bench, perplexity)";
static const char NOTE_ONE_DEVICE[] = "ignite runs a model on one device: --device cuda:N";
static const char NOTE_MMAP[] =
    "ignite maps the model file into memory; --no-mmap reads it, --mlock locks it";

static const struct foreign_word foreign_words[] = {
    {"-ngl", NULL, NOTE_GPU},
    {"--n-gpu-layers", NULL, NOTE_GPU},
    {"--gpu-layers", NULL, NOTE_GPU},
    {"-hf", NULL, NOTE_HF},
    {"-hfr", NULL, NOTE_HF},
    {"--hf-repo", NULL, NOTE_HF},
    {"-hff", NULL, NOTE_HF},
    {"--hf-file", NULL, NOTE_HF},
    {"-mu", NULL, NOTE_HF},
    {"--model-url", NULL, NOTE_HF},
    {"-cnv", "chat", "ignite answers one turn in the model's chat template with run --chat"},
    {"--conversation", "chat", "ignite answers one turn in the model's chat template with run --chat"},
    {"-no-cnv", NULL, "ignite run completes the prompt as it is unless --chat is given"},
    {"--no-conversation", NULL, "ignite run completes the prompt as it is unless --chat is given"},
    {"-i", NULL, "ignite has no interactive mode: one prompt per run"},
    {"--interactive", NULL, "ignite has no interactive mode: one prompt per run"},
    {"-if", NULL, "ignite has no interactive mode: one prompt per run"},
    {"-sys", "system", "the system message, with --chat"},
    {"--system-prompt", "system", "the system message, with --chat"},
    {"--jinja", NULL, "run, chat and batch take it: they render chat templates as Jinja"},
    {"-ctk", NULL, NOTE_CACHE_TYPE},
    {"--cache-type-k", NULL, NOTE_CACHE_TYPE},
    {"-ctv", NULL, NOTE_CACHE_TYPE},
    {"--cache-type-v", NULL, NOTE_CACHE_TYPE},
    {"-pg", NULL, "ignite bench times prefill and decode apart: -p N and -n N"},
    {"-fa", NULL, "ignite always uses its fused attention kernels: there is no switch"},
    {"--flash-attn", NULL, "ignite always uses its fused attention kernels: there is no switch"},
    {"-npp", NULL, "llama-batched-bench's prompt lengths are ignite bench's -p N,.. (or --input-len with --requests)"},
    {"-ntg", NULL, "llama-batched-bench's generated lengths are ignite bench's -n N,.. (or --output-len with --requests)"},
    {"-npl", NULL, "ignite bench --requests N --parallel P runs N sequences, P at a time"},
    {"-mg", NULL, "choose the GPU with --device cuda:N"},
    {"--main-gpu", NULL, "choose the GPU with --device cuda:N"},
    {"-sm", NULL, NOTE_ONE_DEVICE},
    {"--split-mode", NULL, NOTE_ONE_DEVICE},
    {"-ts", NULL, NOTE_ONE_DEVICE},
    {"--tensor-split", NULL, NOTE_ONE_DEVICE},
    {"-dev", "device", NULL},
    {"-co", NULL, "ignite prints no colours"},
    {"--color", NULL, "ignite prints no colours"},
    {"-ot", NULL, "ignite places every tensor on the device it runs on"},
    {"--override-tensor", NULL, "ignite places every tensor on the device it runs on"},
    {"-nkvo", NULL, "the KV cache stays on the device the model runs on"},
    {"--no-kv-offload", NULL, "the KV cache stays on the device the model runs on"},
    {"-mmp", NULL, NOTE_MMAP},
    {"--mmap", NULL, NOTE_MMAP},
    {"--no-mmap", NULL, NOTE_MMAP}, /* for the commands without it: info, tokenize */
    {"--mlock", NULL, NOTE_MMAP},
    {"-lm", NULL, NOTE_MMAP},
    {"--load-mode", NULL, NOTE_MMAP},
    {"-tb", "threads", "one thread count for prefill and decode"},
    {"--threads-batch", "threads", "one thread count for prefill and decode"},
    {"-ub", "batch-size", "the prompt tokens per prefill chunk"},
    {"--ubatch-size", "batch-size", "the prompt tokens per prefill chunk"},
    {"--predict", "n-predict", NULL},
    {"--max-tokens", "n-predict", "vLLM's and OpenAI's name for it"},
    {"--prompt-cache", "save-kv", "and --load-kv FILE to continue from it"},
    {"-e", NULL, "ignite takes -p as it is: write escapes with the shell's $'...'"},
    {"--escape", NULL, "ignite takes -p as it is: write escapes with the shell's $'...'"},
    {"--no-warmup", NULL, "ignite bench always runs one untimed warm-up"},
    {"--progress", NULL, "ignite bench draws its progress on stderr when it is a terminal"},
};

/* llama.cpp's words that name an option ignite has under another spelling
 * (run, chat, batch, bench, perplexity: -ngl, -fa, -ctk, -ctv). getopt would read "-ngl"
 * as "-n gl", so the word is rewritten to the long option before getopt sees
 * it; a command without the option refuses the word (foreign_words). */
static const struct {
    const char *word, *as;
} aliases[] = {
    {"-ngl", "--n-gpu-layers"},
    {"--gpu-layers", "--n-gpu-layers"},
    {"-fa", "--flash-attn"},
    {"-md", "--draft-model"},
    {"--model-draft", "--draft-model"},
    {"--spec-draft-model", "--draft-model"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
};

/* ---- the table ------------------------------------------------------------------ */

static const struct cli_option *find_short(const struct cli_option *table, int c)
{
    for (const struct cli_option *o = table; o->name; o++)
        if (o->key == c)
            return o;
    return NULL;
}

/* The option `name` (len bytes, no "--") names the way getopt_long finds it:
 * the exact name, else the one option it is a prefix of. *ambiguous is set
 * when it is a prefix of several. */
static const struct cli_option *find_long(const struct cli_option *table, const char *name,
                                          size_t len, bool *ambiguous)
{
    const struct cli_option *hit = NULL;
    *ambiguous = false;
    for (const struct cli_option *o = table; o->name; o++) {
        if (strncmp(o->name, name, len))
            continue;
        if (strlen(o->name) == len) { /* an exact name wins over the names it begins */
            *ambiguous = false;
            return o;
        }
        if (hit && hit->key != o->key)
            *ambiguous = true;
        hit = o;
    }
    return *ambiguous ? NULL : hit;
}

/* "-b, --batch-size" or "--ubatch" for a message. */
static void spell(const struct cli_option *o, char *buf, size_t cap)
{
    if (o->key > 0 && o->key < 256)
        snprintf(buf, cap, "-%c, --%s", o->key, o->name);
    else
        snprintf(buf, cap, "--%s", o->name);
}

/* ---- did you mean ------------------------------------------------------------------- */

/* Levenshtein distance, capped: strings longer than 63 bytes are far. */
static int edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    if (na > 63 || nb > 63)
        return 64;
    int row[64];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            best = best < up + 1 ? best : up + 1;
            best = best < row[j - 1] + 1 ? best : row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* How far `word` is from `cand`: the edit distance, or 1 when cand (3 bytes
 * or more) begins the word ("temperature" -> "temp"). */
static int word_distance(const char *word, size_t n, const char *cand)
{
    size_t nc = strlen(cand);
    int d = edit_distance(word, n, cand, nc);
    if (nc >= 3 && nc < n && !strncmp(word, cand, nc) && d > 1)
        d = 1;
    return d;
}

const char *cli_suggest(const char *word, size_t n, const char *const *cands, size_t n_cands)
{
    const char *best = NULL;
    int best_d = 0;
    for (size_t i = 0; i < n_cands; i++) {
        int d = word_distance(word, n, cands[i]);
        size_t nc = strlen(cands[i]);
        int limit = (int)((n < nc ? n : nc) / 3);
        if (d <= (limit > 1 ? limit : 1) && (!best || d < best_d)) {
            best = cands[i];
            best_d = d;
        }
    }
    return best;
}

/* The long option of `table` closest to name[0..n), or NULL. */
static const struct cli_option *suggest_long(const struct cli_option *table, const char *name,
                                             size_t n)
{
    const char *names[CLI_MAX_OPTIONS];
    size_t k = 0;
    for (const struct cli_option *o = table; o->name && k < CLI_MAX_OPTIONS; o++)
        names[k++] = o->name;
    const char *best = cli_suggest(name, n, names, k);
    for (const struct cli_option *o = table; best && o->name; o++)
        if (o->name == best)
            return o;
    return NULL;
}

/* ---- the checks --------------------------------------------------------------------- */

/* One line for an unknown word (word[0..n)): llama.cpp's hint, or the option
 * it is closest to. Returns IG_E_USAGE. */
static int unknown_word(const char *cmd, const struct cli_option *table, const char *word,
                        size_t n)
{
    char alt[96];
    for (size_t i = 0; i < sizeof foreign_words / sizeof foreign_words[0]; i++) {
        const struct foreign_word *f = &foreign_words[i];
        if (strlen(f->word) != n || strncmp(f->word, word, n))
            continue;
        bool amb;
        const struct cli_option *o = f->alt ? find_long(table, f->alt, strlen(f->alt), &amb)
                                            : NULL;
        if (o) {
            spell(o, alt, sizeof alt);
            return ig_error(IG_E_USAGE, "unknown option '%.*s': ignite's spelling is %s%s%s%s",
                            (int)n, word, alt, f->note ? " (" : "", f->note ? f->note : "",
                            f->note ? ")" : "");
        }
        if (!f->alt) /* notes of words with an ignite spelling go with that spelling */
            return ig_error(IG_E_USAGE, "unknown option '%.*s' (llama.cpp's): %s", (int)n, word,
                            f->note);
        break;
    }
    /* "--temperature", "-temp" and "--n_predict" are near a long name */
    const char *name = word + (word[1] == '-' ? 2 : 1);
    const struct cli_option *o = suggest_long(table, name, n - (size_t)(name - word));
    if (o) {
        spell(o, alt, sizeof alt);
        return ig_error(IG_E_USAGE, "unknown option '%.*s' (did you mean %s?)", (int)n, word, alt);
    }
    /* -fxyz: a known letter with a value that is not a number attached */
    const struct cli_option *s = word[1] != '-' ? find_short(table, (unsigned char)word[1]) : NULL;
    if (s && s->has_arg == required_argument && n > 2)
        return ig_error(IG_E_USAGE, "unknown option '%.*s' (a value goes after a space: -%c %.*s)",
                        (int)n, word, s->key, (int)(n - 2), word + 2);
    return ig_error(IG_E_USAGE, "unknown option '%.*s' (run 'ignite %s --help' for the options)",
                    (int)n, word, cmd);
}

/* True when an attached short-option value can only be a value: a number,
 * as in -n64, -s-1, -p512,1024, --temp is long so never here. Letters after
 * an option letter are a word of their own (-ngl), never its value. */
static bool numeric_value(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (*s == '.')
        s++;
    return isdigit((unsigned char)*s);
}

int cli_check_args(const char *cmd, int argc, char **argv, const struct cli_option *table)
{
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (!strcmp(w, "--"))
            return IG_OK; /* what follows is not options */
        if (w[0] != '-' || w[1] == '\0')
            continue; /* an operand: the command says whether it takes one */
        for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++) {
            bool amb;
            if (!strcmp(w, aliases[k].word) &&
                find_long(table, aliases[k].as + 2, strlen(aliases[k].as + 2), &amb))
                w = argv[i] = (char *)aliases[k].as; /* getopt never writes to argv's strings */
        }
        const struct cli_option *o;
        if (w[1] == '-') {
            const char *name = w + 2, *eq = strchr(name, '=');
            size_t n = eq ? (size_t)(eq - name) : strlen(name);
            bool ambiguous;
            o = find_long(table, name, n, &ambiguous);
            /* run's --json, where the prefix would name --json-schema */
            if (!o && n == 4 && !strncmp(name, "json", 4) &&
                (!strcmp(cmd, "batch") || !strcmp(cmd, "chat")))
                return ig_error(IG_E_USAGE, "unknown option '--json': %s",
                                !strcmp(cmd, "batch")
                                    ? "batch always writes JSON Lines, an object a request"
                                    : "chat writes text ('ignite run --json' and 'ignite batch' "
                                      "write JSON)");
            if (ambiguous) {
                char list[512] = "";
                for (const struct cli_option *p = table; p->name; p++)
                    if (!strncmp(p->name, name, n) && strlen(list) + strlen(p->name) + 5 < sizeof list)
                        snprintf(list + strlen(list), sizeof list - strlen(list), "%s--%s",
                                 *list ? ", " : "", p->name);
                return ig_error(IG_E_USAGE, "ambiguous option '--%.*s': %s", (int)n, name, list);
            }
            if (!o)
                return unknown_word(cmd, table, w, (size_t)(name + n - w));
            if (eq && o->has_arg == no_argument)
                return ig_error(IG_E_USAGE, "--%s takes no value, got '%s'", o->name, w);
            if (o->has_arg == required_argument && !eq && ++i == argc)
                return ig_error(IG_E_USAGE, "missing value for --%s (run 'ignite %s --help' "
                                "for the options)", o->name, cmd);
            continue;
        }
        o = find_short(table, (unsigned char)w[1]);
        if (o && w[2] == '\0') {
            if (o->has_arg == required_argument && ++i == argc)
                return ig_error(IG_E_USAGE, "missing value for -%c (run 'ignite %s --help' for "
                                "the options)", o->key, cmd);
            continue;
        }
        if (o && o->has_arg == required_argument && numeric_value(w + 2))
            continue;
        return unknown_word(cmd, table, w, strlen(w));
    }
    return IG_OK;
}

/* ---- the loop over a command's options ------------------------------------------ */

int cli_options_begin(struct cli_parser *p, const struct cli_command *c, int argc, char **argv)
{
    cli_parser_init(p, c->options);
    if (cli_check_args(c->name, argc, argv, c->options) != IG_OK)
        return IG_E_USAGE;
    optind = 1;
    opterr = 0;
    return IG_OK;
}

int cli_options_next(struct cli_parser *p, const struct cli_command *c, int argc, char **argv)
{
    int key = getopt_long(argc, argv, p->shortopts, p->longopts, NULL);
    if (key == -1)
        return CLI_OPTS_DONE;
    if (key == 'h') {
        cli_print_help(stdout, c->usage, c->summary, c->options);
        return CLI_OPTS_EXIT;
    }
    if (key == 'V') {
        cli_print_version();
        return CLI_OPTS_EXIT;
    }
    if (key == '?' || key == ':') {
        cli_option_error(c->name, key, argv);
        return CLI_OPTS_BAD;
    }
    return key;
}
