/* cli/run_report.c: the end of a request: run's stats line on stderr, and
 * the JSON object of run --json and of each line of `ignite batch` (both
 * formats are documented in docs/cli.md).
 * Covered by tests/cli/test_run_model.sh, test_batch.py and tests/kvcache/test_kv_cli.py. */
#include "cli/cli.h"
#include "cli/run.h"

#include "core/status.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per second, 0 when nothing was timed. */
static double per_second(int64_t n, double ms) { return ms > 0 ? (double)n * 1000.0 / ms : 0; }

static double ms_per_token(const struct gen_result *s)
{
    return s->n_decode ? s->decode_ms / (double)s->n_decode : 0;
}

void run_print_stats(const struct run_report *r)
{
    const struct gen_result *s = r->res;
    char cached[48] = "";
    if (s->n_cached)
        snprintf(cached, sizeof cached, " (+%lld cached)", (long long)s->n_cached);
    fprintf(stderr,
            "stats: prompt %lld tok%s | ttft %.1f ms | prefill %.1f tok/s | gen %lld tok | "
            "decode %.2f ms/tok %.1f tok/s | device %s | threads %d | stop %s | "
            "kv %.1f MiB%s\n",
            (long long)s->n_prompt, cached, s->ttft_ms, per_second(s->n_prompt, s->prefill_ms),
            (long long)s->n_gen, ms_per_token(s), per_second(s->n_decode, s->decode_ms),
            r->device, r->threads, gen_stop_name(s->stop), (double)r->kv_bytes / 1048576.0,
            !s->grammar ? "" : s->grammar_complete ? " | grammar complete"
                                                   : " | grammar incomplete");
}

cJSON *run_result_json(const struct gen_result *s, const struct sampler_params *sp,
                       const char *text_in, size_t len, int status)
{
    char *text = cli_utf8_repair(text_in ? text_in : "", text_in ? len : 0);
    cJSON *root = cJSON_CreateObject();
    cJSON *tok = NULL, *tm = NULL, *sm = NULL;
    if (!text || !root || !cJSON_AddStringToObject(root, "text", text) ||
        !cJSON_AddStringToObject(root, "stop", gen_stop_name(s->stop)) ||
        (s->grammar && !cJSON_AddBoolToObject(root, "grammar_complete", s->grammar_complete)) ||
        !cJSON_AddNumberToObject(root, "status", status) ||
        !(tok = cJSON_AddObjectToObject(root, "tokens")) ||
        !(tm = cJSON_AddObjectToObject(root, "timings")) ||
        !(sm = cJSON_AddObjectToObject(root, "sampling"))) {
        cJSON_Delete(root);
        free(text);
        return NULL;
    }
    free(text);
    cJSON_AddNumberToObject(tok, "prompt", (double)s->n_prompt);
    cJSON_AddNumberToObject(tok, "generated", (double)s->n_gen);
    cJSON_AddNumberToObject(tok, "cached", (double)s->n_cached);
    cJSON_AddNumberToObject(tm, "tokenize_ms", s->tokenize_ms);
    cJSON_AddNumberToObject(tm, "queue_ms", s->queue_ms);
    cJSON_AddNumberToObject(tm, "ttft_ms", s->ttft_ms);
    cJSON_AddNumberToObject(tm, "prefill_ms", s->prefill_ms);
    cJSON_AddNumberToObject(tm, "prefill_tok_s", per_second(s->n_prompt, s->prefill_ms));
    cJSON_AddNumberToObject(tm, "decode_ms", s->decode_ms);
    cJSON_AddNumberToObject(tm, "decode_ms_per_tok", ms_per_token(s));
    cJSON_AddNumberToObject(tm, "decode_tok_s", per_second(s->n_decode, s->decode_ms));
    cJSON_AddNumberToObject(sm, "temperature", sp->temperature);
    cJSON_AddNumberToObject(sm, "top_k", (double)sp->top_k);
    cJSON_AddNumberToObject(sm, "top_p", sp->top_p);
    cJSON_AddNumberToObject(sm, "min_p", sp->min_p);
    cJSON_AddNumberToObject(sm, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(sm, "repeat_last_n", (double)sp->repeat_last_n);
    cJSON_AddNumberToObject(sm, "seed", (double)sp->seed);
    return root;
}

int run_print_json(const struct run_report *r)
{
    cJSON *root = run_result_json(r->res, r->sp, r->text, r->len, r->status);
    cJSON *kvo = NULL;
    if (!root || !cJSON_AddStringToObject(root, "device", r->device) ||
        !cJSON_AddNumberToObject(root, "threads", r->threads) ||
        !cJSON_AddNumberToObject(root, "n_ctx", (double)r->n_ctx) ||
        !(kvo = cJSON_AddObjectToObject(root, "kv_cache")))
        goto fail;
    cJSON_AddNumberToObject(kvo, "bytes", (double)r->kv_bytes);
    cJSON_AddNumberToObject(kvo, "max_bytes", r->kv_max_bytes);
    cJSON_AddNumberToObject(kvo, "load_ms", r->kv_load_ms);
    cJSON_AddNumberToObject(kvo, "save_ms", r->kv_save_ms);
    char *out = cJSON_PrintUnformatted(root);
    if (!out)
        goto fail;
    int st = IG_OK;
    errno = 0;
    if ((puts(out) == EOF || fflush(stdout) != 0) && errno != EPIPE) /* a gone reader is no error */
        st = ig_error(IG_E_IO, "cannot write the JSON result to stdout: %s", strerror(errno));
    cJSON_free(out);
    cJSON_Delete(root);
    return st;
fail:
    cJSON_Delete(root);
    return ig_error(IG_E_NOMEM, "out of memory building the JSON result");
}
