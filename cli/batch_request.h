/* cli/batch_request.h: one line of `ignite batch`'s input, parsed and
 * checked (private to cli/; the parser is separate from I/O so it can be
 * fuzzed: tests/fuzz/fuzz_batch_line.c).
 *
 * A JSON line is an object: "prompt" (required, a non-empty string of valid
 * UTF-8 without NUL), "id" (any JSON value, echoed back), and run's options
 * by their --json names: "n_predict", "temperature", "top_k", "top_p",
 * "min_p", "repeat_penalty", "repeat_last_n", "seed", "ignore_eos", "chat",
 * "system", "no_think", "stop" (a string or an array of strings), and a constraint:
 * "grammar" (GBNF text) or "json_schema" (a schema object, or its text),
 * and speculation where the command line turned it on (--lookup or -md):
 * "lookup" or "draft" (booleans: that source, or none when false),
 * "spec_draft_n_max" (at most the engine's: the command line's, or 16),
 * "spec_draft_n_min", "draft_p_min".
 * Absent keys take the command line's values. A key that is unknown or of the wrong type, a
 * value out of range, a line that is not one JSON object: refused with one
 * line naming the cause. With --lines the line is the prompt itself. */
#ifndef IGNITE_CLI_BATCH_REQUEST_H
#define IGNITE_CLI_BATCH_REQUEST_H

#include "cli/gen_opts.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct batch_request {
    cJSON *id;             /* the line's "id", detached and owned; NULL: none given */
    char *prompt;          /* owned */
    char *system;          /* owned; NULL: the command line's */
    char *stop[GEN_CLI_MAX_STOP]; /* owned */
    int n_stop;
    char *grammar;         /* the line's GBNF, owned; NULL: none given */
    char *json_schema;     /* the line's schema as JSON text, owned; NULL: none given */
    const char *spec_draft_model; /* the command line's -md (what "draft" turns on) */
    bool spec_cli;         /* the command line turned speculation on */
    struct gen_cli opts;   /* the command line's options with the line's keys applied
                            * (opts.system and opts.stop point into this request) */
};

/* Parses line[0..len) (no newline) into *r, starting from `defaults`. With
 * `plain` the line is the prompt. Returns IG_OK, or IG_E_INPUT with the
 * cause in one line (through ig_error) and *r empty. */
int batch_request_parse(const char *line, size_t len, bool plain, const struct gen_cli *defaults,
                        struct batch_request *r);
void batch_request_free(struct batch_request *r);

struct grammar;
struct gen_params;

/* The line's own constraint ("grammar" or "json_schema") compiled, named
 * "line N" in its messages; *out NULL where it has none. IG_OK, or the
 * compiler's status after one line. */
int batch_request_grammar(const struct batch_request *r, int64_t line_no, struct grammar **out);

/* How to continue the request: its options, its constraint (`own`, else the
 * command line's `shared`, else none). The seed is r->opts.sp.seed as it is. */
void batch_request_params(const struct batch_request *r, const struct grammar *own,
                          const struct grammar *shared, struct gen_params *out);

#endif
