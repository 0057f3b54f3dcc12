/* cli/run_grammar.c: `ignite run`'s constraint options (--grammar,
 * --grammar-file, --json-schema, --json-schema-file, --format json) ->
 * a compiled grammar, checked before the model loads so a bad grammar costs
 * nothing; then, with the model's vocabulary, the matcher installed in the
 * sampler. The grammar room does the work (grammar/grammar.h).
 * Covered by tests/grammar/test_run_grammar_args.sh and test_schema_corpus.py. */
#include "cli/cli.h"
#include "cli/run.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

bool run_has_grammar(const struct run_opts *o)
{
    return o->grammar || o->grammar_file || o->json_schema || o->json_schema_file || o->format;
}

int run_grammar_check_opts(const struct run_opts *o)
{
    int n = !!o->grammar + !!o->grammar_file + !!o->json_schema + !!o->json_schema_file +
            !!o->format;
    if (n > 1)
        return ig_error(IG_E_USAGE, "give at most one of --grammar, --grammar-file, "
                        "--json-schema, --json-schema-file and --format");
    if (o->format && strcmp(o->format, "json") != 0)
        return ig_error(IG_E_USAGE, "--format: expected 'json', got '%s'", o->format);
    const char *gfile = o->grammar_file ? o->grammar_file : o->json_schema_file;
    if (gfile && !strcmp(gfile, "-") && ((o->file && !strcmp(o->file, "-")) ||
                                         (o->load_kv && !strcmp(o->load_kv, "-"))))
        return ig_error(IG_E_USAGE, "%s - and %s - both want stdin",
                        o->grammar_file ? "--grammar-file" : "--json-schema-file",
                        o->file && !strcmp(o->file, "-") ? "-f" : "--load-kv");
    if (n && o->prompt_only)
        return ig_error(IG_E_USAGE, "a grammar constrains generated text; --prompt-only "
                        "generates none");
    return IG_OK;
}

int run_grammar_compile(const struct run_opts *o, struct run_grammar *rg)
{
    *rg = (struct run_grammar){0};
    if (o->format)
        return grammar_any_json(&rg->g);
    if (o->grammar)
        return grammar_from_gbnf(o->grammar, strlen(o->grammar), "--grammar", &rg->g);
    if (o->json_schema)
        return grammar_from_json_schema(o->json_schema, strlen(o->json_schema), "--json-schema",
                                        &rg->g);
    const char *file = o->grammar_file ? o->grammar_file : o->json_schema_file;
    if (!file)
        return IG_OK;
    char *text;
    size_t len;
    int st = cli_read_file(file, &text, &len);
    if (st != IG_OK)
        return st;
    const char *name = strcmp(file, "-") ? file : "stdin";
    st = o->grammar_file ? grammar_from_gbnf(text, len, name, &rg->g)
                         : grammar_from_json_schema(text, len, name, &rg->g);
    free(text);
    return st;
}

int run_grammar_attach(struct run_grammar *rg, const struct tok_vocab *vocab,
                       struct sampler *smp, bool allow_eog)
{
    if (!rg->g)
        return IG_OK;
    int st = grammar_vocab_build(vocab, &rg->gv);
    if (st == IG_OK)
        st = grammar_matcher_create(rg->g, rg->gv, allow_eog, &rg->m);
    if (st == IG_OK)
        sampler_set_mask(smp, grammar_mask_hook, rg->m);
    return st;
}

void run_grammar_free(struct run_grammar *rg)
{
    grammar_matcher_free(rg->m);
    grammar_vocab_free(rg->gv);
    grammar_free(rg->g);
    *rg = (struct run_grammar){0};
}
