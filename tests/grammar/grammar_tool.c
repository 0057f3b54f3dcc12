/* tests/grammar/grammar_tool.c: the grammar room from the command line, for
 * the Python and shell tests:
 *
 *   grammar_tool check FILE          compile GBNF; exit status = the status
 *   grammar_tool schema FILE         print the GBNF of a JSON schema
 *   grammar_tool match FILE          for each line of stdin (a JSON string),
 *                                    print 1 (the whole grammar matches it),
 *                                    p (a proper prefix of a match) or 0
 *   grammar_tool match-schema FILE   the same with a JSON schema
 *
 * FILE "-" is stdin for check/schema. */
#include "cli/cli.h"
#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "grammar/pda.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int match_lines(const struct grammar *g)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        cJSON *s = cJSON_ParseWithLength(line, (size_t)n);
        if (!cJSON_IsString(s)) {
            cJSON_Delete(s);
            fprintf(stderr, "grammar_tool: each line must be a JSON string\n");
            return 2;
        }
        struct gr_pda p;
        IG_ASSERT(gr_pda_init(&p, g) == IG_OK);
        int32_t st = gr_pda_start(&p);
        const unsigned char *b = (const unsigned char *)s->valuestring;
        for (size_t i = 0; b[i] && st > GR_DEAD; i++)
            st = gr_pda_step(&p, st, g->byte_class[b[i]]);
        IG_ASSERT(st >= 0);
        putchar(st == GR_DEAD ? '0' : gr_pda_complete(&p, st) ? '1' : 'p');
        putchar('\n');
        gr_pda_free(&p);
        cJSON_Delete(s);
    }
    free(line);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: grammar_tool check|schema|match|match-schema FILE\n");
        return 2;
    }
    const char *cmd = argv[1], *file = argv[2];
    char *text;
    size_t len;
    int st = cli_read_file(file, &text, &len);
    if (st != IG_OK)
        return st;
    struct grammar *g = NULL;
    if (!strcmp(cmd, "schema")) {
        char *gbnf;
        st = grammar_schema_to_gbnf(text, len, file, &gbnf);
        if (st == IG_OK) {
            fputs(gbnf, stdout);
            free(gbnf);
        }
    } else if (!strcmp(cmd, "check") || !strcmp(cmd, "match")) {
        st = grammar_from_gbnf(text, len, file, &g);
    } else if (!strcmp(cmd, "match-schema")) {
        st = grammar_from_json_schema(text, len, file, &g);
    } else {
        fprintf(stderr, "grammar_tool: unknown command %s\n", cmd);
        st = 2;
    }
    if (st == IG_OK && strncmp(cmd, "match", 5) == 0)
        st = match_lines(g);
    grammar_free(g);
    free(text);
    return st;
}
