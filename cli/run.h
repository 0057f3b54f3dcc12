/* cli/run.h: what cmd_run.c and run_report.c share (private to cli/): the
 * run's settings as parsed, and the end-of-run report. */
#ifndef IGNITE_CLI_RUN_H
#define IGNITE_CLI_RUN_H

#include "decode/generate.h"
#include "decode/sampler.h"

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
    int64_t n_predict, n_ctx, n_threads;
    int64_t n_batch;     /* --chunk (-b, --ubatch, --batch-size) */
    int64_t seed;        /* -1 = pick one */
    struct sampler_params sp; /* sp.seed is the seed actually used */
    bool chat, quiet, json, no_special, ignore_eos, prompt_only;
    bool no_think;       /* --no-think: the template's thinking switch off (Qwen3) */
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
};

/* The one stats line on stderr (format in docs/cli.md). */
void run_print_stats(const struct run_opts *o, const struct run_result *r);

/* The --json object on stdout. Returns IG_OK (also when the reader has gone:
 * EPIPE), IG_E_NOMEM or IG_E_IO. */
int run_print_json(const struct run_opts *o, const struct run_result *r);

#endif
