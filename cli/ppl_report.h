/* cli/ppl_report.h: what `ignite perplexity` prints (cli/ppl_report.c),
 * private to cli/: a line per window as it completes, the figures over all
 * windows, and the --json object. Covered by tests/cli/test_perplexity.py. */
#ifndef IGNITE_CLI_PPL_REPORT_H
#define IGNITE_CLI_PPL_REPORT_H

#include "ppl/ppl.h"

#include <stdbool.h>
#include <stdint.h>

/* One window's sums and where its KL values start in the run's array. */
struct ppl_window {
    struct ppl_acc acc;
    int64_t kl0;
};

/* The run, as the report needs it. */
struct ppl_report {
    const char *model;     /* the path given or the default model's */
    const char *device, *device_name;
    const char *matmul;    /* "int8", "exact" (CPU) or "f16" (CUDA) */
    const char *type_k, *type_v; /* the KV cache's element types ("f32", "q8_0", ...) */
    int threads;
    const struct ppl_plan *plan;
    int64_t n_text;        /* tokens of the text (or of the base file) */
    const char *base;      /* --kl-divergence-base FILE */
    bool kl;               /* --kl-divergence: comparing against base */
    const struct ppl_window *windows; /* [n_done] */
    int64_t n_done;        /* windows completed */
    const struct ppl_acc *total;
    float *kl_values;      /* [total->count] every row's KL (sorted by the summary) */
    double seconds;        /* forward passes and scoring */
    bool interrupted;
};

/* The table's heading (text output only; nothing with --json). */
void ppl_report_head(const struct ppl_report *r, bool json);

/* Window w's line, as it completes (text output only). */
void ppl_report_window(const struct ppl_report *r, int64_t w, bool json);

/* The figures over all windows done: text, or the --json object. Returns
 * IG_OK or IG_E_NOMEM; stdout's errors are left to cli_flush_stdout. */
int ppl_report_end(const struct ppl_report *r, bool json);

#endif
