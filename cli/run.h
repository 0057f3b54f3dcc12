/* cli/run.h: what cmd_run.c and run_report.c share (private to cli/): the
 * run's settings as parsed, and the end-of-run report. */
#ifndef IGNITE_CLI_RUN_H
#define IGNITE_CLI_RUN_H

#include "decode/generate.h"
#include "decode/sampler.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct run_opts {
    const char *model;   /* -m, NULL = the default model */
    const char *prompt;  /* -p */
    const char *file;    /* -f, "-" = stdin */
    const char *system;  /* --system, needs --chat */
    const char *device;  /* --device as given */
    const char *save_kv; /* --save-kv FILE, "-" = stdout; needs prompt_only */
    const char *load_kv; /* --load-kv FILE, "-" = stdin */
    /* constraints, at most one (cli/run_grammar.c) */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file, *format;
    int64_t n_predict, n_ctx, n_threads;
    int64_t n_batch;     /* --chunk (-b, --ubatch, --batch-size) */
    int64_t seed;        /* -1 = pick one */
    struct sampler_params sp; /* sp.seed is the seed actually used */
    bool chat, quiet, json, no_special, ignore_eos, prompt_only;
};

/* What the report prints besides the stats. */
struct run_result {
    const struct generate_stats *stats;
    const char *device;  /* "cpu" */
    int threads;
    int64_t n_ctx;
    size_t kv_bytes;     /* KV cache memory held at the end */
    double kv_max_bytes; /* what the whole context would need */
    double kv_load_ms;   /* reading --load-kv, 0 if none */
    double kv_save_ms;   /* writing --save-kv, 0 if none */
    const char *text;    /* generated text (--json), len bytes, any bytes */
    size_t len;
    int status;          /* the exit status the run ends with */
    bool grammar;        /* the run had a grammar: report whether it is complete */
};

/* The one stats line on stderr (format in docs/cli.md). */
void run_print_stats(const struct run_opts *o, const struct run_result *r);

/* The --json object on stdout. Returns IG_OK (also when the reader has gone:
 * EPIPE), IG_E_NOMEM or IG_E_IO. */
int run_print_json(const struct run_opts *o, const struct run_result *r);

/* ---- constraints (cli/run_grammar.c) ---- */

/* A run's grammar: compiled from the options, then bound to the vocabulary. */
struct run_grammar {
    struct grammar *g;
    struct grammar_vocab *gv;
    struct grammar_matcher *m; /* installed as the sampler's mask hook */
};

bool run_has_grammar(const struct run_opts *o);
/* At most one constraint option; --format's value. IG_OK or IG_E_USAGE. */
int run_grammar_check_opts(const struct run_opts *o);
/* Compiles the constraint option, if any (files read here). IG_OK (rg->g
 * NULL without one), IG_E_USAGE (a bad grammar or schema), IG_E_IO,
 * IG_E_NOMEM. */
int run_grammar_compile(const struct run_opts *o, struct run_grammar *rg);
/* Builds the matcher over the vocabulary and installs it in the sampler
 * (nothing without a grammar). IG_OK or IG_E_NOMEM. */
int run_grammar_attach(struct run_grammar *rg, const struct tok_vocab *vocab,
                       struct sampler *smp, bool allow_eog);
void run_grammar_free(struct run_grammar *rg);

#endif
