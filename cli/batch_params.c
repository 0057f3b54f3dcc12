/* cli/batch_params.c: a parsed batch line (cli/batch_request.h) made a
 * request the engine runs: its constraint compiled, its generation
 * parameters. Apart from the parser, which the fuzz target builds alone
 * (tests/fuzz/fuzz_batch_line.c): these reach the grammar compiler and the
 * engine's types. Used by cmd_batch.c and the decode ranks (pd_decode.c). */
#include "cli/batch_request.h"

#include "core/status.h"
#include "generate/generate.h"
#include "grammar/grammar.h"

#include <stdio.h>
#include <string.h>

int batch_request_grammar(const struct batch_request *r, int64_t line_no, struct grammar **out)
{
    char source[48];
    snprintf(source, sizeof source, "line %lld", (long long)line_no);
    *out = NULL;
    if (r->grammar)
        return grammar_from_gbnf(r->grammar, strlen(r->grammar), source, out);
    if (r->json_schema)
        return grammar_from_json_schema(r->json_schema, strlen(r->json_schema), source, out);
    return IG_OK;
}

void batch_request_params(const struct batch_request *r, const struct grammar *own,
                          const struct grammar *shared, struct gen_params *out)
{
    const struct gen_cli *o = &r->opts;
    *out = (struct gen_params){.n_predict = o->n_predict, .sp = o->sp,
                               .ignore_eog = o->ignore_eos, .stop = o->stop,
                               .n_stop = o->n_stop, .grammar = own ? own : shared};
    gen_cli_spec(o, &out->spec);
}
