/* cli/cmd_bench.c: `ignite bench`, a llama-bench look-alike: prefill tests
 * (-p, tokens/s and TTFT) and decode tests (-n, tokens/s) for every model
 * (-m, files or synthetic:NAME[:TYPE]) and thread count (-t), -r timed
 * repetitions after one warm-up run each, as a markdown table, csv, json or
 * jsonl rows that carry the model, its size and parameters, the device and
 * the build (version, commit, compiler, CUDA). Prompts are random token ids,
 * as llama-bench's are. The timing loops call the backend (CPU or CUDA)
 * directly; on CUDA a synthetic model's random weights are made on the
 * device. Ctrl-C ends at once with the rows so far (a json array closed); a
 * reader that closes stdout ends it quietly.
 * Covered by tests/cli/test_bench.py. */
#include "cli/bench_fill.h"
#include "cli/bench_requests.h"
#include "cli/bench_schedule.h"
#include "cli/cli.h"
#include "cli/device.h"
#include "cli/pd.h"

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/timer.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_MAX_LIST 16

enum { OPT_DEVICE = 256, OPT_CACHE_TYPE, OPT_EXACT, OPT_REQUESTS, OPT_INPUT_LEN, OPT_OUTPUT_LEN,
       OPT_GPU_WEIGHTS, OPT_NGL, OPT_FA, OPT_MLOCK, OPT_NO_MMAP, OPT_PROMPT_FILE, OPT_CHAT,
       OPT_CACHE_TYPE_K, OPT_CACHE_TYPE_V, OPT_RATE, OPT_BURSTINESS, OPT_GOODPUT, OPT_RANGE_RATIO,
       OPT_REQUESTS_FILE, OPT_PD, OPT_DEPTH_FILL };
_Static_assert((int)OPT_DEPTH_FILL < (int)GEN_OPT_LOOKUP,
               "bench's keys and the speculation rows' differ");

static const struct cli_option bench_options[] = {
    {"model", 'm', required_argument, "FILE", "GGUF file or synthetic:NAME[:TYPE]; repeatable", "the fetched default model"},
    {"n-prompt", 'p', required_argument, "N,..", "prefill tests: prompt lengths, 0 = none", "512"},
    {"n-gen", 'n', required_argument, "N,..", "decode tests: tokens generated, 0 = none", "128"},
    {"n-depth", 'd', required_argument, "N,..", "tokens already in the KV cache before each test", "0"},
    {"depth-fill", OPT_DEPTH_FILL, required_argument, "N", "-d: prefill N tokens (a multiple of 64), copy their K/V rows over the rest of the depth; 0 = prefill it all", "0"},
    {"repetitions", 'r', required_argument, "N", "timed runs per test (after one warm-up run)", "5"},
    {"threads", 't', required_argument, "N,..", "CPU thread counts, 0 = one per core", "0"},
    {"batch-size", 'b', required_argument, "N", "prompt tokens per prefill chunk (--requests: rows per step, 2048 on CUDA)", "512"},
    {"device", OPT_DEVICE, required_argument, "DEV", "auto, cpu, cuda or cuda:N", "auto"},
    {"n-gpu-layers", OPT_NGL, required_argument, "N", "llama-bench's -ngl (one value): 0 = --device cpu, N > 0 = the GPU where usable", NULL},
    {"flash-attn", OPT_FA, required_argument, "on|off", "llama-bench's -fa (one value), taken: ignite always uses its fused attention", NULL},
    {"mlock", OPT_MLOCK, no_argument, NULL, "lock the model's weights in memory (a warning where the system refuses)", NULL},
    {"no-mmap", OPT_NO_MMAP, no_argument, NULL, "read the model file into memory instead of mapping it", NULL},
    {"cache-type", OPT_CACHE_TYPE, required_argument, "T", "KV cache element type, K and V: f16, f32, q8_0 or q4_0 (CUDA: f16)", "f16"},
    {"cache-type-k", OPT_CACHE_TYPE_K, required_argument, "T", "llama-bench's -ctk: K's type alone", "f16"},
    {"cache-type-v", OPT_CACHE_TYPE_V, required_argument, "T", "llama-bench's -ctv: V's type alone", "f16"},
    {"exact", OPT_EXACT, no_argument, NULL, "exact f32 matmuls instead of int8 activations", NULL},
    {"gpu-weights", OPT_GPU_WEIGHTS, required_argument, "W", "CUDA: native (quantized weights stay in their blocks) or f16", "native"},
    {"output", 'o', required_argument, "FMT", "md, csv, json or jsonl", "md"},
    {"requests", OPT_REQUESTS, required_argument, "N", "throughput test: N requests through the batch engine", NULL},
    {"parallel", 'P', required_argument, "N", "--requests: sequences in flight", "8"},
    {"input-len", OPT_INPUT_LEN, required_argument, "MEAN[:SD]", "--requests: prompt tokens, normal (clipped to >= 1)", "128"},
    {"output-len", OPT_OUTPUT_LEN, required_argument, "MEAN[:SD]", "--requests: tokens generated, normal", "128"},
    {"range-ratio", OPT_RANGE_RATIO, required_argument, "R", "--requests: lengths uniform in [LEN(1-R), LEN(1+R)] (vLLM's --random-range-ratio; not with :SD)", NULL},
    {"requests-file", OPT_REQUESTS_FILE, required_argument, "FILE", "--requests: JSONL, a request a line: \"prompt\" or \"input_len\", \"output_len\"", NULL},
    {"pd", OPT_PD, required_argument, "P:D", "--requests: prefill on P ranks, decode on D (mpirun -np P+D)", NULL},
    {"request-rate", OPT_RATE, required_argument, "R", "--requests: arrivals per second (Poisson), inf = all at once", "inf"},
    {"burstiness", OPT_BURSTINESS, required_argument, "B", "--request-rate: gamma shape of the gaps (1 = Poisson, < 1 burstier, inf = even)", "1"},
    {"goodput", OPT_GOODPUT, required_argument, "SLO..", "--requests: objectives ttft:MS tpot:MS e2el:MS; reports request_goodput", NULL},
    {"seed", 's', required_argument, "N", "--requests: seed of the lengths, token ids and arrivals", "0"},
    {"prompt-file", OPT_PROMPT_FILE, required_argument, "FILE", "--requests: every request's prompt is FILE's text (an end-of-generation token ends it)", NULL},
    {"chat", OPT_CHAT, no_argument, NULL, "--prompt-file: in the model's chat template", NULL},
    GEN_CLI_SPEC_OPTIONS,
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static const char bench_usage[] = "ignite bench [options]";
static const char bench_summary[] =
    "Measures prefill (ppN: N prompt tokens, tokens/s and time to first token) and decode\n"
    "(tgN: N generated tokens, tokens/s), like llama-bench. Synthetic models: "
    "synthetic:NAME[:TYPE]\nwith NAME one of SmolLM2-135M, SmolLM2-360M, Llama-3.2-1B, "
    "Llama-3.2-3B, Llama-3-8B, Llama-tiny\nand TYPE one of F32, F16, BF16, Q4_0, Q4_1 (default), "
    "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,\nQ4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q4_K_M.";

struct bench_opts {
    const char *models[BENCH_MAX_LIST];
    int n_models;
    int64_t prompts[BENCH_MAX_LIST], gens[BENCH_MAX_LIST], threads[BENCH_MAX_LIST];
    int64_t depths[BENCH_MAX_LIST];
    int n_prompts, n_gens, n_threads, n_depths;
    int64_t depth_fill; /* --depth-fill: positions of -d prefilled, the rest copies; 0: all */
    int64_t reps, n_batch; /* n_batch 0: not given (512; --requests: the device's default) */
    const char *format;
    const char *device_arg, *gpu_weights_arg; /* --device, --gpu-weights as given */
    int64_t n_gpu_layers;                     /* -ngl, CLI_NGL_UNSET when not given */
    struct backend_device device;             /* from them (cli_choose_device) */
    struct cli_cache_types kv;
    bool exact;
    enum backend_gpu_weights gpu_weights;
    struct bench_requests_opts req; /* req.n_requests > 0: the throughput test instead */
    bool spec_given;                /* a speculation option (--requests only) */
    bool arrivals_given;            /* --request-rate, --burstiness, --goodput, --range-ratio */
    bool len_sd_given;              /* --input-len or --output-len with :SD */
};

/* "512,2048" -> list. Every item must be a number: an empty one ("64,,8",
 * "64,", ",8") is refused, not skipped. Returns IG_OK, IG_E_USAGE or
 * IG_E_NOMEM. */
static int parse_list(const char *what, const char *arg, int64_t min, int64_t max, int64_t *out,
                      int *n)
{
    size_t len = strlen(arg);
    char *buf = malloc(len + 1); /* a copy of any length: a fixed one cut long lists short */
    if (!buf)
        return ig_error(IG_E_NOMEM, "%s: out of memory for a list of %zu characters", what, len);
    memcpy(buf, arg, len + 1);
    int st = IG_OK;
    *n = 0;
    for (char *tok = buf, *end; tok && st == IG_OK; tok = end ? end + 1 : NULL) {
        end = strchr(tok, ',');
        if (end)
            *end = '\0';
        if (!*tok)
            st = ig_error(IG_E_USAGE, "%s: empty item in the list '%s' (write numbers between "
                          "the commas)", what, arg);
        else if (*n == BENCH_MAX_LIST)
            st = ig_error(IG_E_USAGE, "%s: at most %d values", what, BENCH_MAX_LIST);
        else if (cli_parse_i64(what, tok, min, max, &out[*n]) != IG_OK)
            st = IG_E_USAGE;
        else
            (*n)++;
    }
    free(buf);
    return st;
}

static int set_option(struct bench_opts *o, int key, const char *arg)
{
    switch (key) {
    case 'm':
        if (o->n_models == BENCH_MAX_LIST)
            return ig_error(IG_E_USAGE, "-m: at most %d models", BENCH_MAX_LIST);
        o->models[o->n_models++] = arg;
        return IG_OK;
    case 'p': return parse_list("--n-prompt", arg, 0, 1 << 20, o->prompts, &o->n_prompts);
    case 'n': return parse_list("--n-gen", arg, 0, 1 << 20, o->gens, &o->n_gens);
    case 'd': return parse_list("--n-depth", arg, 0, 1 << 20, o->depths, &o->n_depths);
    case OPT_DEPTH_FILL:
        if (cli_parse_i64("--depth-fill", arg, 0, 1 << 20, &o->depth_fill) != IG_OK)
            return IG_E_USAGE;
        if (o->depth_fill % KV_BLOCK != 0) /* copies go block by block */
            return ig_error(IG_E_USAGE, "--depth-fill: expected a multiple of %d (the cache's "
                            "block), got '%s'", KV_BLOCK, arg);
        return IG_OK;
    case 't': /* as run's -t: past the pool's most, refused, not cut */
        return parse_list("--threads", arg, 0, OPS_POOL_MAX_THREADS, o->threads, &o->n_threads);
    case 'r': return cli_parse_i64("--repetitions", arg, 1, 1000, &o->reps);
    case 'b': return cli_parse_i64("--batch-size", arg, 1, 1 << 16, &o->n_batch);
    case OPT_DEVICE: o->device_arg = arg; return IG_OK;
    case OPT_CACHE_TYPE: return cli_parse_cache_type(CLI_CACHE_KV, arg, &o->kv);
    case OPT_CACHE_TYPE_K: return cli_parse_cache_type(CLI_CACHE_K, arg, &o->kv);
    case OPT_CACHE_TYPE_V: return cli_parse_cache_type(CLI_CACHE_V, arg, &o->kv);
    case OPT_EXACT: o->exact = true; return IG_OK;
    case OPT_GPU_WEIGHTS: o->gpu_weights_arg = arg; return IG_OK;
    case OPT_NGL: return cli_parse_ngl(arg, true, &o->n_gpu_layers);
    case OPT_FA: return cli_parse_flash_attn(arg, true);
    case OPT_MLOCK: cli_load_mode(IG_MAP_LOCK); return IG_OK;
    case OPT_NO_MMAP: cli_load_mode(IG_MAP_READ); return IG_OK;
    case OPT_REQUESTS: return cli_parse_i64("--requests", arg, 1, 1 << 24, &o->req.n_requests);
    case 'P': return cli_parse_i64("--parallel", arg, 1, 4096, &o->req.parallel);
    case OPT_INPUT_LEN:
        o->len_sd_given |= strchr(arg, ':') != NULL;
        return bench_parse_len("--input-len", arg, &o->req.in_mean, &o->req.in_sd);
    case OPT_OUTPUT_LEN:
        o->len_sd_given |= strchr(arg, ':') != NULL;
        return bench_parse_len("--output-len", arg, &o->req.out_mean, &o->req.out_sd);
    case OPT_RANGE_RATIO:
        o->arrivals_given = true;
        if (cli_parse_f64("--range-ratio", arg, 0, 1, &o->req.range_ratio) != IG_OK)
            return IG_E_USAGE;
        if (o->req.range_ratio >= 1) /* vLLM's bound: a ratio of 1 could draw 0 tokens */
            return ig_error(IG_E_USAGE, "--range-ratio: expected a number in [0, 1), got '%s'", arg);
        return IG_OK;
    case OPT_REQUESTS_FILE: o->req.requests_file = arg; return IG_OK;
    case OPT_PD: return pd_parse(arg, &o->req.pd_p, &o->req.pd_d);
    case OPT_RATE:
        o->arrivals_given = true;
        return bench_parse_rate("--request-rate", arg, &o->req.rate);
    case OPT_BURSTINESS:
        o->arrivals_given = true;
        return bench_parse_rate("--burstiness", arg, &o->req.burstiness);
    case OPT_GOODPUT:
        o->arrivals_given = true;
        return bench_parse_goodput(arg, &o->req.slo);
    case 's': {
        int64_t seed;
        if (cli_parse_i64("--seed", arg, 0, UINT32_MAX, &seed) != IG_OK)
            return IG_E_USAGE;
        o->req.seed = (uint64_t)seed;
        return IG_OK;
    }
    case OPT_PROMPT_FILE: o->req.prompt_file = arg; return IG_OK;
    case OPT_CHAT: o->req.chat = true; return IG_OK;
    case 'o':
        if (strcmp(arg, "md") && strcmp(arg, "csv") && strcmp(arg, "json") && strcmp(arg, "jsonl"))
            return ig_error(IG_E_USAGE, "--output: expected md, csv, json or jsonl, got '%s'", arg);
        o->format = arg;
        return IG_OK;
    }
    if (key >= GEN_OPT_LOOKUP && key < GEN_OPT_END) { /* speculation's rows */
        o->spec_given = true;
        return gen_cli_set(&o->req.spec, key, arg);
    }
    return ig_error(IG_E_INTERNAL, "option key %d has no handler", key);
}

/* True when some -p or -n value is not 0: there is a test to run. */
static bool any_test(const struct bench_opts *o)
{
    for (int i = 0; i < o->n_prompts; i++)
        if (o->prompts[i])
            return true;
    for (int i = 0; i < o->n_gens; i++)
        if (o->gens[i])
            return true;
    return false;
}

/* Returns IG_OK to run, -1 after --help/--version, or IG_E_USAGE / IG_E_DEVICE. */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){.prompts = {512}, .n_prompts = 1, .gens = {128}, .n_gens = 1,
                             .depths = {0}, .n_depths = 1,
                             .threads = {0}, .n_threads = 1, .reps = 5, .n_batch = 0,
                             .device_arg = "auto", .gpu_weights_arg = "native",
                             .n_gpu_layers = CLI_NGL_UNSET,
                             .format = "md", .kv = {KV_F16, KV_F16, false},
                             .req = {.parallel = 8, .in_mean = 128, .out_mean = 128,
                                     .rate = INFINITY, .burstiness = 1,
                                     .slo = {-1, -1, -1}}};
    gen_cli_defaults(&o->req.spec);
    struct cli_parser parser;
    const struct cli_command cmd = {"bench", bench_usage, bench_summary, bench_options};
    int st = cli_options_begin(&parser, &cmd, argc, argv);
    if (st != IG_OK)
        return st;
    int key;
    while ((key = cli_options_next(&parser, &cmd, argc, argv)) >= 0) {
        if ((st = set_option(o, key, optarg)) != IG_OK)
            return st;
        /* vLLM's spelling, `--goodput ttft:500 tpot:50`: the words after it */
        while (key == OPT_GOODPUT && optind < argc && bench_goodput_word(argv[optind]))
            if ((st = bench_parse_goodput(argv[optind++], &o->req.slo)) != IG_OK)
                return st;
    }
    if (key != CLI_OPTS_DONE)
        return key == CLI_OPTS_EXIT ? -1 : IG_E_USAGE;
    if (optind < argc)
        return cli_unexpected_argument("bench", argv[optind], NULL);
    if (!any_test(o) && !o->req.n_requests && !o->req.requests_file)
        return ig_error(IG_E_USAGE, "nothing to run: every -p and -n value is 0");
    if ((st = cli_choose_device(o->device_arg, o->n_gpu_layers, o->gpu_weights_arg, &o->device, &o->gpu_weights)) !=
        IG_OK)
        return st;
    if (!o->n_batch)
        o->n_batch = o->req.n_requests || o->req.requests_file
                         ? backend_batch_rows_default(o->device.kind) : 512;
    if (!o->req.n_requests && !o->req.requests_file &&
        (o->spec_given || o->req.prompt_file || o->req.chat || o->arrivals_given))
        return ig_error(IG_E_USAGE, "speculation, --prompt-file, --chat, --request-rate, "
                        "--burstiness, --goodput and --range-ratio are options of the "
                        "throughput test: add --requests N");
    if (o->req.range_ratio > 0 && o->len_sd_given)
        return ig_error(IG_E_USAGE, "--range-ratio draws uniform lengths, MEAN:SD normal ones: "
                        "give one");
    if (o->req.requests_file && o->req.prompt_file)
        return ig_error(IG_E_USAGE, "--requests-file gives each request's prompt: drop "
                        "--prompt-file");
    if (o->req.chat && !o->req.prompt_file)
        return ig_error(IG_E_USAGE, "--chat wraps --prompt-file's text: give --prompt-file");
    if (o->req.pd_p && !o->req.n_requests && !o->req.requests_file)
        return ig_error(IG_E_USAGE, "--pd runs the throughput test: add --requests N");
    if (o->req.pd_p && o->spec_given)
        return ig_error(IG_E_USAGE, "--pd does not take speculative decoding (--lookup, -md) yet");
    if (o->req.pd_p && (st = pd_check_job("bench", o->req.pd_p, o->req.pd_d)) != IG_OK)
        return st;
    if ((st = gen_cli_check_spec(&o->req.spec, o->device.kind)) != IG_OK)
        return st;
    return IG_OK;
}

/* ---- one result row --------------------------------------------------------- */

struct bench_row {
    const char *model;      /* file path or synthetic spec */
    char model_type[96];    /* "llama 134.52 M Q4_1" (cli_model_type) */
    char model_arch[32];    /* "llama" */
    size_t model_size;
    int64_t n_params;
    int threads;
    const char *device;     /* "cpu", "cuda:0" */
    const char *device_name;/* "cpu (avx2)", "NVIDIA H200" */
    int64_t n_prompt, n_gen;
    int64_t n_depth;        /* tokens in the cache before the timed part */
    size_t device_weight_bytes; /* the weights on the device (CUDA; 0 on the CPU) */
    size_t device_step_bytes;   /* of them, what a decode step reads (CUDA; 0 on the CPU) */
    int64_t device_step_nodes;  /* launches (graph nodes) of a decode step (CUDA; 0 on the CPU) */
    double avg_ts, sd_ts, avg_ns, sd_ns, ttft_ms;
    double samples_ts[1000];
    int64_t reps;
};

struct bench_env {
    const struct bench_opts *o;
    char cpu[128];
    const char *isa;
    struct cli_build build;
    int rows_out;
};

static void cpu_name(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v += 1 + (v[1] == ' ');
                snprintf(buf, cap, "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    }
    fclose(f);
}

/* "pp512", "tg128", with " @ d4096" at a depth (llama-bench's names). */
static void test_name(const struct bench_row *r, char *buf, size_t cap)
{
    int k = snprintf(buf, cap, "%s%lld", r->n_prompt ? "pp" : "tg",
                     (long long)(r->n_prompt ? r->n_prompt : r->n_gen));
    if (r->n_depth && k > 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, " @ d%lld", (long long)r->n_depth);
}

static cJSON *row_json(const struct bench_env *e, const struct bench_row *r)
{
    char test[32];
    test_name(r, test, sizeof test);
    cJSON *j = cJSON_CreateObject();
    bool cpu = !strcmp(r->device, "cpu");
    cJSON_AddStringToObject(j, "ignite_version", IGNITE_VERSION);
    cJSON_AddStringToObject(j, "build_commit", e->build.commit);
    cJSON_AddNumberToObject(j, "build_number", (double)e->build.number);
    cJSON_AddStringToObject(j, "build_compiler", e->build.compiler);
    cJSON_AddStringToObject(j, "build_cuda", e->build.cuda);
    cJSON_AddStringToObject(j, "cpu_info", e->cpu);
    cJSON_AddStringToObject(j, "device", r->device);
    cJSON_AddStringToObject(j, "device_name", r->device_name);
    cJSON_AddStringToObject(j, "isa", e->isa);
    cJSON_AddStringToObject(j, "matmul", !cpu ? backend_gpu_weights_name(e->o->gpu_weights)
                                              : e->o->exact ? "exact" : "int8");
    cJSON_AddStringToObject(j, "model_filename", r->model);
    cJSON_AddStringToObject(j, "model_arch", r->model_arch);
    cJSON_AddStringToObject(j, "model_type", r->model_type);
    cJSON_AddNumberToObject(j, "model_size", (double)r->model_size);
    cJSON_AddNumberToObject(j, "model_n_params", (double)r->n_params);
    cJSON_AddNumberToObject(j, "device_weight_bytes", (double)r->device_weight_bytes);
    cJSON_AddNumberToObject(j, "device_step_bytes", (double)r->device_step_bytes);
    cJSON_AddNumberToObject(j, "device_step_nodes", (double)r->device_step_nodes);
    cJSON_AddNumberToObject(j, "n_batch", (double)e->o->n_batch);
    cJSON_AddNumberToObject(j, "n_threads", r->threads);
    /* the CUDA pool is f16 unless q8_0 or fp8 was asked (q4_0 is refused there) */
    const char *tk = cpu || kv_dtype_quantized(e->o->kv.k) ? kv_dtype_name(e->o->kv.k) : "f16",
               *tv = cpu || kv_dtype_quantized(e->o->kv.v) ? kv_dtype_name(e->o->kv.v) : "f16";
    cJSON_AddStringToObject(j, "type_kv", tk); /* ignite's first name for K's, kept */
    cJSON_AddStringToObject(j, "type_k", tk);  /* llama-bench's */
    cJSON_AddStringToObject(j, "type_v", tv);
    cJSON_AddNumberToObject(j, "n_prompt", (double)r->n_prompt);
    cJSON_AddNumberToObject(j, "n_gen", (double)r->n_gen);
    cJSON_AddNumberToObject(j, "n_depth", (double)r->n_depth);
    cJSON_AddStringToObject(j, "test", test);
    cJSON_AddNumberToObject(j, "repetitions", (double)r->reps);
    /* whole nanoseconds, as llama-bench writes them */
    cJSON_AddNumberToObject(j, "avg_ns", (double)llround(r->avg_ns));
    cJSON_AddNumberToObject(j, "stddev_ns", (double)llround(r->sd_ns));
    cJSON_AddNumberToObject(j, "avg_ts", r->avg_ts);
    cJSON_AddNumberToObject(j, "stddev_ts", r->sd_ts);
    if (r->n_prompt)
        cJSON_AddNumberToObject(j, "ttft_ms", r->ttft_ms);
    else
        cJSON_AddNullToObject(j, "ttft_ms");
    cJSON *s = cJSON_AddArrayToObject(j, "samples_ts");
    for (int64_t i = 0; i < r->reps; i++)
        cJSON_AddItemToArray(s, cJSON_CreateNumber(r->samples_ts[i]));
    return j;
}

static void csv_field(const char *s, bool last)
{
    bool quote = strpbrk(s, ",\"\n") != NULL;
    if (quote) {
        putchar('"');
        for (; *s; s++) {
            if (*s == '"')
                putchar('"');
            putchar(*s);
        }
        putchar('"');
    } else {
        fputs(s, stdout);
    }
    putchar(last ? '\n' : ',');
}

static const char *csv_cols[] = {"ignite_version", "build_commit", "build_number",
                                 "build_compiler", "build_cuda", "cpu_info", "device", "device_name", "isa", "matmul",
                                 "model_filename", "model_type", "model_size", "model_n_params",
                                 "device_weight_bytes", "device_step_bytes",
                                 "n_batch", "n_threads", "type_kv", "type_k", "type_v", "n_prompt", "n_gen", "n_depth", "test",
                                 "repetitions", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                                 "ttft_ms"};
#define N_CSV_COLS (sizeof csv_cols / sizeof csv_cols[0])

/* A number as csv holds it: an integer whole (avg_ns 181937412, never
 * 1.81937e+08), any other value with the digits that read back the same. */
static void csv_number(double d, char *buf, size_t cap)
{
    if (d == floor(d) && fabs(d) < 9007199254740992.0) { /* 2^53: exact in a double */
        snprintf(buf, cap, "%.0f", d);
        return;
    }
    snprintf(buf, cap, "%.15g", d);
    if (strtod(buf, NULL) != d)
        snprintf(buf, cap, "%.17g", d);
}

static void print_size(char *buf, size_t cap, size_t bytes)
{
    snprintf(buf, cap, "%.2f MiB", (double)bytes / (1 << 20));
    if (bytes >= (size_t)1 << 30)
        snprintf(buf, cap, "%.2f GiB", (double)bytes / (1 << 30));
}

/* The row as text in the chosen format, to stdout's buffer. */
static void print_row(struct bench_env *e, const struct bench_row *r)
{
    const char *fmt = e->o->format;
    char test[32];
    test_name(r, test, sizeof test);
    if (!strcmp(fmt, "md")) {
        if (e->rows_out == 0) {
            printf("| model | size | params | device | isa | threads | test | t/s | ttft ms |\n");
            printf("| --- | ---: | ---: | --- | --- | ---: | --- | ---: | ---: |\n");
        }
        char size[32], params[32], ttft[32] = "-";
        print_size(size, sizeof size, r->model_size);
        cli_model_params(params, sizeof params, r->n_params);
        if (r->n_prompt)
            snprintf(ttft, sizeof ttft, "%.1f", r->ttft_ms);
        bool cpu = !strcmp(r->device, "cpu");
        printf("| %s | %s | %s | %s | %s%s | %d | %s | %.2f ± %.2f | %s |\n", r->model_type,
               size, params, cpu ? "cpu" : r->device_name,
               cpu ? e->isa : backend_gpu_weights_name(e->o->gpu_weights),
               cpu && e->o->exact ? " exact" : "", r->threads, test, r->avg_ts, r->sd_ts, ttft);
    } else if (!strcmp(fmt, "csv")) {
        if (e->rows_out == 0)
            for (size_t i = 0; i < N_CSV_COLS; i++)
                csv_field(csv_cols[i], i + 1 == N_CSV_COLS);
        cJSON *j = row_json(e, r);
        for (size_t i = 0; i < N_CSV_COLS; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, csv_cols[i]);
            char num[64];
            const char *s = "";
            if (cJSON_IsString(v)) {
                s = v->valuestring;
            } else if (cJSON_IsNumber(v)) {
                csv_number(v->valuedouble, num, sizeof num);
                s = num;
            }
            csv_field(s, i + 1 == N_CSV_COLS);
        }
        cJSON_Delete(j);
    } else {
        cJSON *j = row_json(e, r);
        char *txt = cJSON_PrintUnformatted(j);
        bool json = !strcmp(fmt, "json");
        if (json)
            printf("%s  %s", e->rows_out == 0 ? "[\n" : ",\n", txt ? txt : "{}");
        else
            printf("%s\n", txt ? txt : "{}");
        free(txt);
        cJSON_Delete(j);
    }
    e->rows_out++;
}

/* ---- Ctrl-C and the end of the output ------------------------------------------ */

/* Ctrl-C ends bench at once with status 130, leaving the rows written so
 * far as a whole document: a json array is closed. The handler may run on
 * any thread (the CPU backend's workers too) while the main thread writes a
 * row, so the two agree through sequentially consistent atomics (plain
 * lock-free ints, safe in a handler): a handler that finds a row being
 * written leaves the ending to emit_row, which looks again when the row is
 * out. Whoever ends first closes; a second caller waits for the exit. */
static atomic_int bench_json_state; /* -o json: 1 before the first row, 2 after; else 0 */
static atomic_int bench_emitting;   /* the main thread is writing to stdout */
static atomic_int bench_interrupted;
static atomic_int bench_ending;
static atomic_int bench_tty;        /* stderr shows a progress line to clear */

static void bench_end_interrupted(void)
{
    if (atomic_exchange(&bench_ending, 1))
        for (;;)
            pause();
    int js = atomic_load(&bench_json_state);
    if (js)
        (void)!write(STDOUT_FILENO, js == 2 ? "\n]\n" : "[]\n", 3);
    if (atomic_load(&bench_tty))
        (void)!write(STDERR_FILENO, "\r\033[K", 4);
    _exit(IG_E_INTERRUPTED);
}

static void on_sigint(int sig)
{
    (void)sig;
    atomic_store(&bench_interrupted, 1);
    if (!atomic_load(&bench_emitting))
        bench_end_interrupted();
}

/* SIGINT as above; a second Ctrl-C kills at once (SA_RESETHAND). */
static void install_sigint(bool json)
{
    atomic_store(&bench_json_state, json ? 1 : 0);
    atomic_store(&bench_tty, cli_stderr_is_tty());
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

enum { BENCH_READER_GONE = -2 }; /* stdout's reader has gone: stop, status 0 */

/* Marks the start and end of a write to stdout (see on_sigint). */
static void output_begin(void)
{
    atomic_store(&bench_emitting, 1);
    if (atomic_load(&bench_interrupted))
        bench_end_interrupted();
}

static void output_end(void)
{
    atomic_store(&bench_emitting, 0);
    if (atomic_load(&bench_interrupted))
        bench_end_interrupted();
}

/* Writes one row and flushes it. Returns IG_OK, BENCH_READER_GONE, or
 * IG_E_IO naming the write's own error (after one line). */
static int emit_row(struct bench_env *e, const struct bench_row *r)
{
    output_begin();
    print_row(e, r);
    bool ok = cli_stdout_ok(true);
    if (atomic_load(&bench_json_state))
        atomic_store(&bench_json_state, 2);
    output_end();
    if (ok)
        return IG_OK;
    return cli_stdout_gone() ? BENCH_READER_GONE : cli_flush_stdout();
}

/* After the last row: the json array's end, md's build line. */
static int end_output(struct bench_env *e)
{
    output_begin();
    if (!strcmp(e->o->format, "json"))
        printf(e->rows_out ? "\n]\n" : "[]\n");
    else if (!strcmp(e->o->format, "md") && e->rows_out)
        printf("\nbuild: %s (%lld), %s, CUDA %s\n", e->build.commit,
               (long long)e->build.number, e->build.compiler, e->build.cuda);
    int st = cli_flush_stdout();
    atomic_store(&bench_json_state, 0); /* closed */
    output_end();
    return st;
}

/* ---- the measurements -------------------------------------------------------- */

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct bench_run {
    const struct model *m;
    struct backend *be;
    int32_t *tokens;  /* random ids, as many as the longest test */
    int32_t *table;   /* the one sequence's blocks: 0, 1, 2, ... */
    float *logits;
    int64_t n_batch;
    /* progress within a long run (cli/progress.c): drawn at most 10 times a
     * second from the loops below, a clock read per chunk or token otherwise */
    struct cli_progress pg;
    char label[160];  /* "bench: model | 2 threads | pp512 | run 1/5" */
};

/* The progress line within a run: `done` of `total` tokens. */
static void tick(struct bench_run *b, int64_t done, int64_t total)
{
    if (cli_progress_due(&b->pg))
        cli_progress_draw(&b->pg, "%s | %lld/%lld tok", b->label, (long long)done,
                          (long long)total);
}

/* Prefills tokens [pos0, pos0 + n) in chunks of n_batch after pos0 cached
 * ones (later positions are rewritten). */
static int prefill_span(struct bench_run *b, int64_t pos0, int64_t n)
{
    for (int64_t i = pos0; i < pos0 + n; i += b->n_batch) {
        int64_t len = pos0 + n - i < b->n_batch ? pos0 + n - i : b->n_batch;
        int st = backend_run_seq(b->be, b->table, 0, b->tokens + i, len, i, b->logits);
        if (st != IG_OK)
            return st;
        tick(b, i + len - pos0, n);
    }
    return IG_OK;
}

/* One prefill of n tokens after `depth` cached ones; *ns is its wall time. */
static int run_prefill(struct bench_run *b, int64_t depth, int64_t n, int64_t *ns)
{
    int64_t t0 = ig_now_ns();
    int st = prefill_span(b, depth, n);
    *ns = ig_now_ns() - t0;
    return st;
}

/* n one-token decode steps after `depth` cached tokens. */
static int run_decode(struct bench_run *b, int64_t depth, int64_t n, int64_t *ns)
{
    int64_t t0 = ig_now_ns();
    for (int64_t i = depth; i < depth + n; i++) {
        int st = backend_run_seq(b->be, b->table, 0, b->tokens + i, 1, i, b->logits);
        if (st != IG_OK)
            return st;
        tick(b, i + 1 - depth, n);
    }
    *ns = ig_now_ns() - t0;
    return IG_OK;
}

/* The progress line between runs (at once), and the label the line within
 * a run (tick) starts with. NULL model: the line is erased. */
static void progress(struct bench_run *b, const char *model, int threads, const char *test,
                     const char *what, int64_t rep, int64_t reps)
{
    if (!model) {
        cli_progress_clear(&b->pg);
        return;
    }
    snprintf(b->label, sizeof b->label, "bench: %s | %d threads | %s | %s", model, threads,
             test, what);
    if (rep >= 0)
        snprintf(b->label + strlen(b->label), sizeof b->label - strlen(b->label),
                 " %lld/%lld", (long long)rep, (long long)reps);
    cli_progress_start(&b->pg, true);
    if (b->pg.on)
        cli_progress_draw(&b->pg, "%s", b->label);
}

/* Runs one test (n_prompt or n_gen, the other 0) and fills r. */
static int run_test(struct bench_env *e, struct bench_run *b, struct bench_row *r)
{
    char test[32];
    test_name(r, test, sizeof test);
    int64_t n = r->n_prompt ? r->n_prompt : r->n_gen;
    double sum = 0, sum_ns = 0;
    if (r->n_depth)
        progress(b, r->model, r->threads, test, "filling the cache", -1, 0);
    /* untimed; each run rewrites what follows it */
    int64_t fill = e->o->depth_fill, real = fill && fill < r->n_depth ? fill : r->n_depth;
    int st = prefill_span(b, 0, real);
    if (st == IG_OK && real < r->n_depth)
        st = bench_fill_copies(b->be, b->table, real, r->n_depth);
    if (st != IG_OK)
        return st;
    for (int64_t rep = 0; rep <= e->o->reps; rep++) {
        progress(b, r->model, r->threads, test, rep == 0 ? "warm-up" : "run", rep, e->o->reps);
        int64_t ns = 0;
        st = r->n_prompt ? run_prefill(b, r->n_depth, n, &ns)
                         : run_decode(b, r->n_depth, n, &ns);
        if (st != IG_OK)
            return st;
        if (rep == 0)
            continue; /* warm-up */
        double ts = (double)n * 1e9 / (double)(ns > 0 ? ns : 1);
        r->samples_ts[rep - 1] = ts;
        sum += ts;
        sum_ns += (double)ns;
    }
    progress(b, NULL, 0, NULL, NULL, 0, 0);
    int64_t k = e->o->reps;
    r->reps = k;
    r->avg_ts = sum / (double)k;
    r->avg_ns = sum_ns / (double)k;
    double v = 0, vns = 0;
    for (int64_t i = 0; i < k; i++) {
        double d = r->samples_ts[i] - r->avg_ts, dn = (double)n * 1e9 / r->samples_ts[i] - r->avg_ns;
        v += d * d;
        vns += dn * dn;
    }
    r->sd_ts = k > 1 ? sqrt(v / (double)(k - 1)) : 0;
    r->sd_ns = k > 1 ? sqrt(vns / (double)(k - 1)) : 0;
    r->ttft_ms = r->n_prompt ? r->avg_ns / 1e6 : 0;
    return IG_OK;
}

static int64_t max_list(const int64_t *v, int n)
{
    int64_t m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static int bench_model(struct bench_env *e, const char *spec)
{
    const struct bench_opts *o = e->o;
    struct model *m = NULL;
    char path[4096];
    int st;
    bool cuda = o->device.kind == BACKEND_CUDA;
    if (spec && !strncmp(spec, "synthetic:", 10)) {
        /* On CUDA the weights are made on the device: only shapes here. */
        st = cuda ? model_synthetic_spec_shapes(spec, &m) : model_synthetic_spec(spec, &m);
    } else {
        if ((st = cli_model_path(spec, path, sizeof path)) != IG_OK)
            return st;
        st = model_load(path, &m);
        spec = path;
    }
    if (st != IG_OK)
        return st;

    struct bench_row *r = calloc(1, sizeof *r);
    int64_t n_max = max_list(o->prompts, o->n_prompts);
    int64_t g_max = max_list(o->gens, o->n_gens);
    int64_t n_ctx = max_list(o->depths, o->n_depths) + (n_max > g_max ? n_max : g_max) + 1;
    struct bench_run b = {.m = m, .n_batch = o->n_batch};
    b.tokens = malloc((size_t)n_ctx * sizeof *b.tokens);
    b.table = malloc((size_t)kv_blocks_for(n_ctx) * sizeof *b.table);
    b.logits = malloc((size_t)m->hp.n_vocab * sizeof *b.logits);
    if (!r || !b.tokens || !b.table || !b.logits) {
        st = ig_error(IG_E_NOMEM, "out of memory setting up the benchmark");
        goto done;
    }
    kv_identity_table(b.table, kv_blocks_for(n_ctx));
    uint64_t seed = 0x2545F4914F6CDD1DULL;
    for (int64_t i = 0; i < n_ctx; i++)
        b.tokens[i] = (int32_t)(xorshift(&seed) % (uint64_t)m->hp.n_vocab);

    r->model = spec;
    cli_model_type(m, r->model_type, sizeof r->model_type);
    snprintf(r->model_arch, sizeof r->model_arch, "%s", m->hp.arch);
    r->model_size = model_weight_bytes(m);
    r->n_params = m->n_params;

    /* Thread counts are the CPU's: one pass on CUDA. */
    int n_passes = cuda ? 1 : o->n_threads;
    for (int it = 0; it < n_passes && st == IG_OK; it++) {
        int64_t d_max = max_list(o->depths, o->n_depths);
        int64_t longest = n_max > d_max ? n_max : d_max;
        int64_t batch = longest < o->n_batch ? (longest > 0 ? longest : 1) : o->n_batch;
        struct backend_opts bo = {.device = o->device, .n_threads = (int)o->threads[it],
                                  .n_ctx = n_ctx, .max_rows = batch, .n_slots = 1,
                                  .kv_dtype = o->kv.k, .kv_dtype_v = o->kv.v,
                                  .exact = o->exact, .gpu_weights = o->gpu_weights,
                                  /* bench's context is the longest -d plus -p or -n */
                                  .oom_hint = cuda ? "lower -p, -n, -d or -b, or use --device cpu"
                                                   : "lower -p, -n or -d"};
        if ((st = backend_create(m, &bo, &b.be)) != IG_OK)
            break;
        r->threads = b.be->threads;
        r->device = b.be->device;
        r->device_name = b.be->device_name;
        r->device_weight_bytes = backend_weight_bytes(b.be);
        r->device_step_bytes = cuda ? backend_gpu_step_bytes(m, o->gpu_weights) : 0;
        for (int id = 0; id < o->n_depths && st == IG_OK; id++) {
            r->n_depth = o->depths[id];
            for (int i = 0; i < o->n_prompts && st == IG_OK; i++) {
                if (!o->prompts[i])
                    continue;
                r->n_prompt = o->prompts[i];
                r->n_gen = 0;
                r->device_step_nodes = 0;
                if ((st = run_test(e, &b, r)) == IG_OK)
                    st = emit_row(e, r);
            }
            for (int i = 0; i < o->n_gens && st == IG_OK; i++) {
                if (!o->gens[i])
                    continue;
                r->n_prompt = 0;
                r->n_gen = o->gens[i];
                st = run_test(e, &b, r);
                r->device_step_nodes = b.be->step_nodes; /* the last decode step's */
                if (st == IG_OK)
                    st = emit_row(e, r);
            }
        }
        backend_free(b.be);
        b.be = NULL;
    }
done:
    free(b.logits);
    free(b.table);
    free(b.tokens);
    free(r);
    model_free(m);
    return st;
}

int cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int st = parse_args(argc, argv, &o);
    if (st != IG_OK)
        return st < 0 ? cli_flush_stdout() : st;
    if (o.n_models == 0)
        o.models[o.n_models++] = NULL; /* the default model */
    if (o.req.n_requests || o.req.requests_file) {
        struct bench_requests_opts *rq = &o.req;
        rq->n_batch = o.n_batch;
        rq->n_threads = (int)o.threads[0];
        rq->device = o.device;
        rq->kv = o.kv;
        rq->exact = o.exact;
        rq->gpu_weights = o.gpu_weights;
        rq->format = o.format;
        for (int i = 0; i < o.n_models && st == IG_OK; i++)
            st = bench_requests(rq, o.models[i]);
        return st;
    }
    struct bench_env e = {.o = &o, .isa = ops_qmm_isa_name(ops_qmm_best_isa())};
    cpu_name(e.cpu, sizeof e.cpu);
    cli_build_info(&e.build);
    install_sigint(!strcmp(o.format, "json"));
    for (int i = 0; i < o.n_models && st == IG_OK; i++)
        st = bench_model(&e, o.models[i]);
    if (st == BENCH_READER_GONE)
        return IG_OK;
    if (!cli_stdout_ok(false))
        return st; /* stdout failed: that error has been said */
    int out = end_output(&e); /* a json array is closed after a failure too */
    return st == IG_OK ? out : st; /* rows that never arrived are a failure */
}
