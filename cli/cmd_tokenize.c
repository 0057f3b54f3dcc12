/* cli/cmd_tokenize.c: `ignite tokenize`: text (argument, file or stdin) ->
 * the model's token ids, one per line, or as JSON, with each token's text or
 * only the count. Reads only the GGUF's metadata or a folder's tokenizer
 * files (no weights are touched); tokenizing is tokenizer/'s job. A reader
 * that closes stdout early ends it quietly (status 0), as for every command
 * (cli/output.c). Covered by tests/tokenizer/test_cli.sh,
 * tests/cli/test_args.sh and the HF comparisons in tests/tokenizer/. */
#include "cli/cli.h"

#include "core/status.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 256, OPT_PIECES, OPT_COUNT, OPT_NO_SPECIAL, OPT_NO_BOS };

static const struct cli_option tokenize_options[] = {
    {"model", 'm', required_argument, "PATH", "GGUF model file or Hugging Face model folder", "the fetched SmolLM2-135M"},
    {"prompt", 'p', required_argument, "TEXT", "text to tokenize", NULL},
    {"file", 'f', required_argument, "FILE", "read the text from FILE ('-' = stdin)", NULL},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON array (of {id, piece} with --pieces)", NULL},
    {"pieces", OPT_PIECES, no_argument, NULL, "show each token's text next to its id", NULL},
    {"count", OPT_COUNT, no_argument, NULL, "print only the number of tokens", NULL},
    {"no-special", OPT_NO_SPECIAL, no_argument, NULL,
     "treat control-token text (<|im_start|>...) as plain text", NULL},
    {"no-bos", OPT_NO_BOS, no_argument, NULL, "do not add BOS even if the model asks for it", NULL},
    {"threads", 't', required_argument, "N", "taken as llama-tokenize takes it; no effect: tokenizing is one thread", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

/* A token's text (control tokens included) in *buf, grown to fit. Returns
 * its length, or -1 when out of memory. */
static int64_t piece_of(const struct tok_vocab *v, int32_t id, char **buf, size_t *cap)
{
    int64_t n = tok_piece(v, id, true, *buf, *cap);
    if (n >= 0 && (size_t)n > *cap) {
        char *p = realloc(*buf, (size_t)n);
        if (!p)
            return -1;
        *buf = p;
        *cap = (size_t)n;
        n = tok_piece(v, id, true, *buf, *cap);
    }
    return n;
}

static int print_json(const struct tok_vocab *v, const struct tok_ids *ids, bool pieces)
{
    cJSON *arr = cJSON_CreateArray();
    size_t cap = 256;
    char *piece = malloc(cap);
    int rc = piece ? IG_OK : IG_E_NOMEM;
    for (int64_t i = 0; arr && i < ids->n && !rc; i++) {
        if (!pieces) {
            if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids->ids[i])))
                rc = IG_E_NOMEM;
            continue;
        }
        int64_t n = piece_of(v, ids->ids[i], &piece, &cap);
        char *text = n >= 0 ? cli_utf8_repair(piece, (size_t)n) : NULL;
        cJSON *o = cJSON_CreateObject();
        if (!text || !o || !cJSON_AddNumberToObject(o, "id", ids->ids[i]) ||
            !cJSON_AddStringToObject(o, "piece", text) || !cJSON_AddItemToArray(arr, o))
            rc = IG_E_NOMEM;
        free(text);
    }
    free(piece);
    char *s = arr && !rc ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!s)
        return ig_error(IG_E_NOMEM, "out of memory formatting JSON");
    puts(s);
    cli_stdout_ok(false); /* keeps a failed write's errno */
    free(s);
    return IG_OK;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *usage = "ignite tokenize [-m MODEL] (-p TEXT | -f FILE) [--json] [--pieces] "
                        "[--count] [--no-special] [--no-bos]";
    const char *model_arg = NULL, *prompt = NULL, *file = NULL;
    bool json = false, pieces = false, count = false;
    unsigned flags = TOK_ENC_DEFAULT;
    struct cli_parser p;
    cli_parser_init(&p, tokenize_options);
    int rc = cli_check_args("tokenize", argc, argv, tokenize_options);
    if (rc)
        return rc;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, p.shortopts, p.longopts, NULL)) != -1;) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case OPT_JSON: json = true; break;
        case OPT_PIECES: pieces = true; break;
        case OPT_COUNT: count = true; break;
        case OPT_NO_SPECIAL: flags &= ~TOK_ENC_PARSE_SPECIAL; break;
        case OPT_NO_BOS: flags &= ~TOK_ENC_ADD_BOS; break;
        case 't': { /* checked as run's, then unused: scripts for llama-tokenize pass it */
            int64_t n_threads;
            if (cli_parse_i64("--threads", optarg, 0, OPS_POOL_MAX_THREADS, &n_threads))
                return IG_E_USAGE;
            break;
        }
        case 'h':
            cli_print_help(stdout, usage,
                           "Print the token ids the model's tokenizer gives a text, one per line.",
                           tokenize_options);
            return cli_flush_stdout();
        case 'V': cli_print_version(); return cli_flush_stdout();
        default: return cli_option_error("tokenize", c, argv);
        }
    }
    if (optind < argc)
        return ig_error(IG_E_USAGE, "tokenize: unexpected argument '%s' (text goes after -p)",
                        argv[optind]);
    if (!prompt == !file)
        return ig_error(IG_E_USAGE, "tokenize: give exactly one of -p TEXT or -f FILE");

    char path[4096];
    rc = cli_model_path(model_arg, path, sizeof path);
    if (rc)
        return rc;
    char *text = NULL;
    size_t len = 0;
    if (file) {
        if ((rc = cli_read_file(file, &text, &len)))
            return rc;
    } else {
        len = strlen(prompt);
    }
    struct tok_vocab *v = NULL;
    struct tok_ids ids = {0};
    if ((rc = tok_load_path(path, &v)) ||
        (rc = tok_encode(v, file ? text : prompt, len, flags, &ids)))
        goto done;
    if (count) {
        if (json)
            printf("{\"count\":%lld}\n", (long long)ids.n);
        else
            printf("%lld\n", (long long)ids.n);
    } else if (json) {
        rc = print_json(v, &ids, pieces);
    } else {
        size_t cap = 256;
        char *piece = malloc(cap);
        /* each line checked as it goes: a reader that has gone ends the
         * loop, and a failed write keeps its own errno */
        for (int64_t i = 0; i < ids.n && piece && cli_stdout_ok(false); i++) {
            printf("%d", ids.ids[i]);
            if (pieces) {
                int64_t n = piece_of(v, ids.ids[i], &piece, &cap);
                if (n < 0) {
                    rc = ig_error(IG_E_NOMEM, "out of memory");
                    break;
                }
                putchar('\t');
                cli_print_escaped(stdout, piece, (size_t)n);
            }
            putchar('\n');
        }
        if (!piece)
            rc = ig_error(IG_E_NOMEM, "out of memory");
        free(piece);
    }
    if (!rc)
        rc = cli_flush_stdout();
done:
    tok_ids_free(&ids);
    tok_vocab_free(v);
    free(text);
    return rc;
}
