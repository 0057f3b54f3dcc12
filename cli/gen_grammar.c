/* cli/gen_grammar.c: the constraint options run and batch share
 * (--grammar, --grammar-file, --json-schema, --json-schema-file, --format
 * json) -> a compiled grammar, checked and compiled before the model loads
 * so a bad grammar costs nothing. The grammar room does the work
 * (grammar/grammar.h); the engine makes each sequence's matcher.
 * Covered by tests/grammar/test_run_grammar_args.sh and test_schema_corpus.py. */
#include "cli/cli.h"
#include "cli/gen_opts.h"

#include "core/status.h"
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

bool gen_cli_has_grammar(const struct gen_cli *o)
{
    return o->grammar || o->grammar_file || o->json_schema || o->json_schema_file || o->format;
}

int gen_cli_check_grammar(const struct gen_cli *o, const char *stdin_user, bool prompt_only)
{
    int n = !!o->grammar + !!o->grammar_file + !!o->json_schema + !!o->json_schema_file +
            !!o->format;
    if (n > 1)
        return ig_error(IG_E_USAGE, "give at most one of --grammar, --grammar-file, "
                        "--json-schema, --json-schema-file and --format");
    if (o->format && strcmp(o->format, "json") != 0)
        return ig_error(IG_E_USAGE, "--format: expected 'json', got '%s'", o->format);
    const char *gfile = o->grammar_file ? o->grammar_file : o->json_schema_file;
    if (gfile && !strcmp(gfile, "-") && stdin_user)
        return ig_error(IG_E_USAGE, "%s - and %s - both want stdin",
                        o->grammar_file ? "--grammar-file" : "--json-schema-file", stdin_user);
    if (n && prompt_only)
        return ig_error(IG_E_USAGE, "a grammar constrains generated text; --prompt-only "
                        "generates none");
    return IG_OK;
}

int gen_cli_compile_grammar(const struct gen_cli *o, struct grammar **g)
{
    *g = NULL;
    if (o->format)
        return grammar_any_json(g);
    if (o->grammar)
        return grammar_from_gbnf(o->grammar, strlen(o->grammar), "--grammar", g);
    if (o->json_schema)
        return grammar_from_json_schema(o->json_schema, strlen(o->json_schema), "--json-schema",
                                        g);
    const char *file = o->grammar_file ? o->grammar_file : o->json_schema_file;
    if (!file)
        return IG_OK;
    char *text;
    size_t len;
    int st = cli_read_file(file, &text, &len);
    if (st != IG_OK)
        return st;
    const char *name = strcmp(file, "-") ? file : "stdin";
    st = o->grammar_file ? grammar_from_gbnf(text, len, name, g)
                         : grammar_from_json_schema(text, len, name, g);
    free(text);
    return st;
}
