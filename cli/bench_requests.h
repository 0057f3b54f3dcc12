/* cli/bench_requests.h: `ignite bench --requests N`: a throughput benchmark
 * of the generation engine (cli/bench_requests.c), private to cli/. */
#ifndef IGNITE_CLI_BENCH_REQUESTS_H
#define IGNITE_CLI_BENCH_REQUESTS_H

#include "backend/backend.h"
#include "cli/bench_schedule.h"
#include "cli/gen_opts.h"
#include "cli/device.h"

#include <stdbool.h>
#include <stdint.h>

struct bench_requests_opts {
    int64_t n_requests;         /* --requests (0 with --requests-file: all its lines) */
    int64_t parallel;           /* --parallel: sequences in flight */
    double in_mean, in_sd;      /* --input-len MEAN[:SD] (prompt tokens) */
    double out_mean, out_sd;    /* --output-len MEAN[:SD] (generated tokens) */
    double range_ratio;         /* --range-ratio: > 0, uniform lengths instead of normal */
    const char *requests_file;  /* --requests-file: JSONL, a request a line */
    double rate;                /* --request-rate, requests/s; INFINITY: all at once */
    double burstiness;          /* --burstiness: the gamma shape of the gaps */
    struct bench_slo slo;       /* --goodput; < 0: no such objective */
    uint64_t seed;              /* -s: lengths, token ids and arrivals */
    int64_t n_batch;            /* -b: the row budget of a step */
    int n_threads;              /* the first -t */
    struct backend_device device;
    struct cli_cache_types kv;
    bool exact;
    enum backend_gpu_weights gpu_weights;
    const char *format;         /* md, csv, json, jsonl */
    const char *prompt_file;    /* --prompt-file: every request's prompt (--input-len
                                 * unused; an end-of-generation token ends it) */
    bool chat;                  /* --chat: that prompt in the model's chat template */
    int pd_p, pd_d;             /* --pd P:D (cli/pd.h); 0: one process */
    struct gen_cli spec;        /* the speculation options (--lookup, -md, ...); the
                                 * rest of it unused */
};

/* Parses "MEAN" or "MEAN:SD" (`what` names the option). Returns IG_OK or
 * IG_E_USAGE (one line). */
int bench_parse_len(const char *what, const char *arg, double *mean, double *sd);

/* Runs the benchmark on model `spec` (a file, synthetic:NAME[:TYPE], or
 * NULL for the default model) and prints its report on stdout. */
int bench_requests(const struct bench_requests_opts *o, const char *spec);

#endif
