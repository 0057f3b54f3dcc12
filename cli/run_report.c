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

/* What was measured: a quantity that was not (Ctrl-C in the prefill has no
 * TTFT; a run that fed no token back has no decode speed) is left out of
 * the stats line and null in JSON, never shown as 0. */
static bool has_prefill(const struct gen_result *s) { return s->n_prompt > 0 && s->prefill_ms > 0; }
static bool has_decode(const struct gen_result *s) { return s->n_decode > 0 && s->decode_ms > 0; }

static double prefill_tok_s(const struct gen_result *s)
{
    return (double)s->n_prompt * 1000.0 / s->prefill_ms;
}

static double decode_tok_s(const struct gen_result *s)
{
    return (double)s->n_decode * 1000.0 / s->decode_ms;
}

void run_print_stats(const struct run_report *r)
{
    const struct gen_result *s = r->res;
    char cached[48] = "", ttft[48] = "", prefill[48] = "", decode[64] = "", seed[40] = "";
    char spec[96] = "";
    if (s->spec)
        snprintf(spec, sizeof spec, " | spec accepted %lld/%lld (%.1f%%), %.2f a step",
                 (long long)s->n_accepted, (long long)s->n_drafted,
                 s->n_drafted ? 100.0 * (double)s->n_accepted / (double)s->n_drafted : 0.0,
                 s->n_verify ? (double)s->n_accepted / (double)s->n_verify : 0.0);
    if (s->n_cached)
        snprintf(cached, sizeof cached, " (+%lld cached)", (long long)s->n_cached);
    char mem[96] = ""; /* the device's memory, on CUDA */
    if (r->gpu_weights)
        snprintf(mem, sizeof mem, " | gpu mem %.2f GiB, weights %s %.2f GiB",
                 (double)r->device_bytes / 1073741824.0, r->gpu_weights,
                 (double)r->weight_bytes / 1073741824.0);
    if (s->ttft_set)
        snprintf(ttft, sizeof ttft, " | ttft %.1f ms", s->ttft_ms);
    if (has_prefill(s))
        snprintf(prefill, sizeof prefill, " | prefill %.1f tok/s", prefill_tok_s(s));
    if (has_decode(s))
        snprintf(decode, sizeof decode, " | decode %.2f ms/tok %.1f tok/s",
                 s->decode_ms / (double)s->n_decode, decode_tok_s(s));
    /* a sampled run: this seed repeats it (a --prompt-only run samples nothing) */
    if (r->sp->temperature > 0 && s->stop != GEN_STOP_PROMPT)
        snprintf(seed, sizeof seed, " | seed %llu", (unsigned long long)r->sp->seed);
    fprintf(stderr,
            "stats: prompt %lld tok%s%s%s | gen %lld tok%s%s | device %s | threads %d | stop %s | "
            "kv %.1f MiB%s%s%s\n",
            (long long)s->n_prompt, cached, ttft, prefill, (long long)s->n_gen, decode, spec,
            r->device, r->threads, r->write_failed ? "output_error" : gen_stop_name(s->stop),
            (double)r->kv_bytes / 1048576.0,
            seed,
            !s->grammar ? "" : s->grammar_complete ? " | grammar complete"
                                                   : " | grammar incomplete",
            mem);
}

/* key: v when measured, else null. */
static void add_measured(cJSON *o, const char *key, bool measured, double v)
{
    if (measured)
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
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
    bool pf = has_prefill(s), dc = has_decode(s);
    cJSON_AddNumberToObject(tm, "tokenize_ms", s->tokenize_ms);
    cJSON_AddNumberToObject(tm, "queue_ms", s->queue_ms);
    add_measured(tm, "ttft_ms", s->ttft_set, s->ttft_ms);
    cJSON_AddNumberToObject(tm, "prefill_ms", s->prefill_ms);
    add_measured(tm, "prefill_tok_s", pf, pf ? prefill_tok_s(s) : 0);
    cJSON_AddNumberToObject(tm, "decode_ms", s->decode_ms);
    add_measured(tm, "decode_ms_per_tok", dc, dc ? s->decode_ms / (double)s->n_decode : 0);
    add_measured(tm, "decode_tok_s", dc, dc ? decode_tok_s(s) : 0);
    cJSON_AddNumberToObject(sm, "temperature", sp->temperature);
    cJSON_AddNumberToObject(sm, "top_k", (double)sp->top_k);
    cJSON_AddNumberToObject(sm, "top_p", sp->top_p);
    cJSON_AddNumberToObject(sm, "min_p", sp->min_p);
    cJSON_AddNumberToObject(sm, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(sm, "repeat_last_n", (double)sp->repeat_last_n);
    cJSON_AddNumberToObject(sm, "seed", (double)sp->seed);
    cJSON *spec = s->spec ? cJSON_AddObjectToObject(root, "speculation") : NULL;
    if (spec) {
        cJSON_AddNumberToObject(spec, "verify_steps", (double)s->n_verify);
        cJSON_AddNumberToObject(spec, "drafted", (double)s->n_drafted);
        cJSON_AddNumberToObject(spec, "accepted", (double)s->n_accepted);
        add_measured(spec, "acceptance", s->n_drafted > 0,
                     s->n_drafted ? (double)s->n_accepted / (double)s->n_drafted : 0);
        add_measured(spec, "mean_accepted", s->n_verify > 0,
                     s->n_verify ? (double)s->n_accepted / (double)s->n_verify : 0);
        cJSON_AddNumberToObject(spec, "verify_ms", s->verify_ms);
        cJSON_AddNumberToObject(spec, "draft_ms", s->draft_ms);
    }
    return root;
}

int run_print_json(const struct run_report *r)
{
    cJSON *root = run_result_json(r->res, r->sp, r->text, r->len, r->status);
    cJSON *kvo = NULL;
    int cst = root && r->channels ? run_channels_json(root, r->channels) : IG_OK;
    if (cst != IG_OK) {
        cJSON_Delete(root);
        return cst;
    }
    if (!root || !cli_add_model_json(root, r->model_path, r->m) ||
        !cJSON_AddStringToObject(root, "device", r->device) ||
        !cJSON_AddNumberToObject(root, "threads", r->threads) ||
        !cJSON_AddNumberToObject(root, "n_ctx", (double)r->n_ctx) ||
        !(kvo = cJSON_AddObjectToObject(root, "kv_cache")))
        goto fail;
    cJSON_AddNumberToObject(kvo, "bytes", (double)r->kv_bytes);
    cJSON_AddNumberToObject(kvo, "max_bytes", r->kv_max_bytes);
    if (r->kv_mem) {
        cJSON_AddStringToObject(kvo, "type_k", kv_dtype_name(r->kv_mem->dtype));
        cJSON_AddStringToObject(kvo, "type_v", kv_dtype_name(r->kv_mem->dtype_v));
    }
    cJSON_AddNumberToObject(kvo, "load_ms", r->kv_load_ms);
    cJSON_AddNumberToObject(kvo, "save_ms", r->kv_save_ms);
    cJSON *dm = cJSON_AddObjectToObject(root, "device_memory");
    if (!dm)
        goto fail;
    cJSON_AddNumberToObject(dm, "bytes", (double)r->device_bytes);
    cJSON_AddNumberToObject(dm, "weight_bytes", (double)r->weight_bytes);
    if (r->gpu_weights)
        cJSON_AddStringToObject(dm, "weights", r->gpu_weights);
    else
        cJSON_AddNullToObject(dm, "weights");
    char *out = cJSON_PrintUnformatted(root);
    if (!out)
        goto fail;
    int st = IG_OK;
    errno = 0;
    if ((puts(out) == EOF || fflush(stdout) != 0) && errno != EPIPE) /* a gone reader is no error */
        st = ig_error(IG_E_IO, "cannot write to stdout: %s", strerror(errno));
    cJSON_free(out);
    cJSON_Delete(root);
    return st;
fail:
    cJSON_Delete(root);
    return ig_error(IG_E_NOMEM, "out of memory building the JSON result");
}
