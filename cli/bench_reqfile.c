/* cli/bench_reqfile.c: the JSONL of `ignite bench --requests-file`
 * (cli/bench_reqfile.h): every line checked whole before the run, so a bad
 * line ends it with one message and no half-run report; a line is JSON as
 * strict as `ignite batch` reads it (ig_json_line). Covered by
 * tests/cli/test_bench_arrivals.py. */
#include "cli/bench_reqfile.h"

#include "cli/cli.h"
#include "core/json.h"
#include "core/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LEN_MAX (1 << 20) /* as --input-len and --output-len */

/* A whole number in [1, LEN_MAX] under `key`, into *out. */
static int take_len(const cJSON *v, const char *key, int64_t line, int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > LEN_MAX)
        return ig_error(IG_E_INPUT, "--requests-file line %lld: \"%s\" must be a whole number "
                        "in [1, %d]", (long long)line, key, LEN_MAX);
    *out = (int64_t)v->valuedouble;
    return IG_OK;
}

int bench_parse_request_line(const char *s, size_t len, int64_t line, struct bench_line *l)
{
    cJSON *j = NULL;
    char why[128];
    int st = ig_json_line(s, len, &j, why, sizeof why);
    if (st != IG_OK)
        return ig_error(st, "--requests-file line %lld: %s", (long long)line, why);
    for (const cJSON *v = j->child; v && st == IG_OK; v = v->next) {
        if (!strcmp(v->string, "prompt")) {
            size_t bad;
            if (!cJSON_IsString(v) || !*v->valuestring)
                st = ig_error(IG_E_INPUT, "--requests-file line %lld: \"prompt\" must be a "
                              "non-empty string", (long long)line);
            else if (!cli_utf8_valid(v->valuestring, strlen(v->valuestring), &bad))
                st = ig_error(IG_E_INPUT, "--requests-file line %lld: \"prompt\" is not valid "
                              "UTF-8 (byte 0x%02x at offset %zu)", (long long)line,
                              (unsigned char)v->valuestring[bad], bad);
            else if (!(l->prompt = strdup(v->valuestring)))
                st = ig_error(IG_E_NOMEM, "out of memory");
        } else if (!strcmp(v->string, "input_len")) {
            st = take_len(v, "input_len", line, &l->input_len);
        } else if (!strcmp(v->string, "output_len")) {
            st = take_len(v, "output_len", line, &l->output_len);
        } else if (strcmp(v->string, "id")) {
            st = ig_error(IG_E_INPUT, "--requests-file line %lld: unknown key \"%s\" (expected "
                          "prompt or input_len, output_len, id)", (long long)line, v->string);
        }
    }
    if (st == IG_OK && !l->prompt == !l->input_len)
        st = ig_error(IG_E_INPUT, "--requests-file line %lld: give \"prompt\" or \"input_len\", "
                      "one of them", (long long)line);
    cJSON_Delete(j);
    return st;
}

int bench_read_requests(const char *path, struct bench_line **lines, int64_t *n)
{
    char *text = NULL;
    size_t len = 0;
    *lines = NULL;
    *n = 0;
    int st = cli_read_file(path, &text, &len);
    if (st != IG_OK)
        return st;
    int64_t cap = 0, line = 0;
    for (size_t at = 0; at < len && st == IG_OK;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, i = at;
        line++;
        while (i < end && strchr(" \t\r", text[i]))
            i++;
        if (i < end) { /* not blank */
            if (*n == cap) {
                cap = cap ? 2 * cap : 64;
                struct bench_line *g = realloc(*lines, (size_t)cap * sizeof *g);
                if (!g) {
                    st = ig_error(IG_E_NOMEM, "out of memory reading %s", path);
                    break;
                }
                *lines = g;
            }
            (*lines)[*n] = (struct bench_line){0};
            st = bench_parse_request_line(text + at, end - at, line, &(*lines)[*n]);
            (*n)++;
        }
        at = end + 1;
    }
    free(text);
    if (st == IG_OK && !*n)
        st = ig_error(IG_E_INPUT, "--requests-file %s: no requests (every line is blank)", path);
    if (st != IG_OK) {
        bench_lines_free(*lines, *n);
        *lines = NULL;
        *n = 0;
    }
    return st;
}

void bench_lines_free(struct bench_line *lines, int64_t n)
{
    for (int64_t i = 0; lines && i < n; i++)
        free(lines[i].prompt);
    free(lines);
}
