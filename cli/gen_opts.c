/* cli/gen_opts.c: the options run and batch share (cli/gen_opts.h): their
 * defaults, values, checks, and the context and seed they lead to.
 * Covered by tests/cli/test_run_args.sh and tests/cli/test_batch.py. */
#include "cli/gen_opts.h"

#include "cli/device.h"

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/timer.h"
#include "models/model.h"
#include "ops/ops.h"
#include "tokenizer/chat_template.h"

#include <string.h>
#include <unistd.h>

#define GEN_DEFAULT_CTX 4096 /* -c 0: the model's context, capped here */

void gen_cli_defaults(struct gen_cli *o)
{
    *o = (struct gen_cli){.n_predict = 256, .n_batch = 512, .seed = -1, .device = "auto",
                          .gpu_weights = "native", .n_gpu_layers = CLI_NGL_UNSET,
                          .kv = {KV_F32, KV_F32, false}, .spec_n_max = -1, .ngram_min = 1,
                          .ngram_max = 4};
    o->sp = sampler_default_params();
}

int gen_cli_set(struct gen_cli *o, int key, const char *arg)
{
    double d;
    o->sp_given |= key == GEN_OPT_TEMP ? GEN_SP_TEMP : key == GEN_OPT_TOP_K ? GEN_SP_TOP_K
                 : key == GEN_OPT_TOP_P ? GEN_SP_TOP_P : key == GEN_OPT_MIN_P ? GEN_SP_MIN_P
                 : key == GEN_OPT_REPEAT_PENALTY ? GEN_SP_REPEAT : 0u;
    switch (key) {
    case 'm': o->model = arg; return IG_OK;
    case 'n':
        if (cli_parse_i64("--n-predict", arg, -1, INT32_MAX, &o->n_predict) != IG_OK)
            return IG_E_USAGE;
        return o->n_predict ? IG_OK
                            : ig_error(IG_E_USAGE, "--n-predict: 0 generates nothing; use -1 or N >= 1");
    case 'c': return cli_parse_i64("--ctx-size", arg, 0, (int64_t)1 << 30, &o->n_ctx);
    case 't': return cli_parse_i64("--threads", arg, 0, OPS_POOL_MAX_THREADS, &o->n_threads);
    case 'b':
    case GEN_OPT_UBATCH:
    case GEN_OPT_BATCH_SIZE:
        o->n_batch_given = true;
        return cli_parse_i64("--chunk", arg, 1, 1 << 20, &o->n_batch);
    case 's': return cli_parse_i64("--seed", arg, -1, UINT32_MAX, &o->seed);
    case GEN_OPT_TEMP: return cli_parse_f64("--temp", arg, 0, 1e6, &o->sp.temperature);
    case GEN_OPT_TOP_K: return cli_parse_i64("--top-k", arg, 0, INT32_MAX, &o->sp.top_k);
    case GEN_OPT_TOP_P:
        if (cli_parse_f64("--top-p", arg, 0, 1, &d) != IG_OK)
            return IG_E_USAGE;
        o->sp.top_p = d > 0 ? d : 1e-9; /* 0 means: only the best token */
        return IG_OK;
    case GEN_OPT_MIN_P: return cli_parse_f64("--min-p", arg, 0, 1, &o->sp.min_p);
    case GEN_OPT_REPEAT_PENALTY:
        return cli_parse_f64("--repeat-penalty", arg, 1e-3, 1e3, &o->sp.repeat_penalty);
    case GEN_OPT_REPEAT_LAST_N:
        return cli_parse_i64("--repeat-last-n", arg, 0, 1 << 20, &o->sp.repeat_last_n);
    case GEN_OPT_STOP:
        if (o->n_stop == GEN_CLI_MAX_STOP)
            return ig_error(IG_E_USAGE, "--stop: at most %d strings", GEN_CLI_MAX_STOP);
        if (!*arg)
            return ig_error(IG_E_USAGE, "--stop: the string is empty");
        size_t bad; /* generated text is valid UTF-8: such a string could never match */
        if (!cli_utf8_valid(arg, strlen(arg), &bad))
            return ig_error(IG_E_USAGE, "--stop: not valid UTF-8 (byte 0x%02x at offset %zu)",
                            (unsigned char)arg[bad], bad);
        o->stop[o->n_stop++] = arg;
        return IG_OK;
    case GEN_OPT_CHAT: o->chat = true; return IG_OK;
    case GEN_OPT_SYSTEM: o->system = arg; return IG_OK;
    case GEN_OPT_NO_THINK: o->no_think = true; return IG_OK;
    case GEN_OPT_VERBOSE: o->verbose = true; return IG_OK;
    case GEN_OPT_DEVICE: o->device = arg; return IG_OK;
    case GEN_OPT_GPU_WEIGHTS: o->gpu_weights = arg; return IG_OK;
    case GEN_OPT_NGL: return cli_parse_ngl(arg, false, &o->n_gpu_layers);
    case GEN_OPT_FA: return cli_parse_flash_attn(arg, false);
    case GEN_OPT_MLOCK: cli_load_mode(IG_MAP_LOCK); return IG_OK;
    case GEN_OPT_NO_MMAP: cli_load_mode(IG_MAP_READ); return IG_OK;
    case GEN_OPT_CACHE_TYPE: return cli_parse_cache_type(CLI_CACHE_KV, arg, &o->kv);
    case GEN_OPT_CACHE_TYPE_K: return cli_parse_cache_type(CLI_CACHE_K, arg, &o->kv);
    case GEN_OPT_CACHE_TYPE_V: return cli_parse_cache_type(CLI_CACHE_V, arg, &o->kv);
    case GEN_OPT_GRAMMAR: o->grammar = arg; return IG_OK;
    case GEN_OPT_GRAMMAR_FILE: o->grammar_file = arg; return IG_OK;
    case GEN_OPT_JSON_SCHEMA: o->json_schema = arg; return IG_OK;
    case GEN_OPT_JSON_SCHEMA_FILE: o->json_schema_file = arg; return IG_OK;
    case GEN_OPT_FORMAT: o->format = arg; return IG_OK;
    case GEN_OPT_NO_SPECIAL: o->no_special = true; return IG_OK;
    case GEN_OPT_CHAT_TEMPLATE:
        if (!chat_builtin_known(arg))
            return ig_error(IG_E_USAGE, "--chat-template: '%s' is not a built-in template (%s); "
                            "a Jinja template goes in --chat-template-file FILE", arg,
                            chat_builtin_names());
        o->chat_template = arg;
        o->chat = true;
        return IG_OK;
    case GEN_OPT_JINJA: return IG_OK; /* llama.cpp's switch: ignite's templates are Jinja */
    case GEN_OPT_CHAT_TEMPLATE_FILE:
        o->chat_template_file = arg;
        o->chat = true;
        return IG_OK;
    case GEN_OPT_IGNORE_EOS: o->ignore_eos = true; return IG_OK;
    case GEN_OPT_EXACT: o->exact = true; return IG_OK;
    case GEN_OPT_LOOKUP: o->lookup = true; return IG_OK;
    case GEN_OPT_DRAFT_MODEL: o->draft_model = arg; return IG_OK;
    case GEN_OPT_DRAFT_N_MAX:
    case GEN_OPT_DRAFT_MAX:
        return cli_parse_i64("--spec-draft-n-max", arg, 1, 64, &o->spec_n_max);
    case GEN_OPT_DRAFT_N_MIN:
    case GEN_OPT_DRAFT_MIN:
        return cli_parse_i64("--spec-draft-n-min", arg, 0, 64, &o->spec_n_min);
    case GEN_OPT_DRAFT_P_MIN:
    case GEN_OPT_SPEC_P_MIN:
        return cli_parse_f64("--draft-p-min", arg, 0, 1, &o->spec_p_min);
    case GEN_OPT_LOOKUP_NGRAM_MIN:
        return cli_parse_i64("--lookup-ngram-min", arg, 1, 64, &o->ngram_min);
    case GEN_OPT_LOOKUP_NGRAM_MAX:
        return cli_parse_i64("--lookup-ngram-max", arg, 1, 64, &o->ngram_max);
    case 'q': o->quiet = true; return IG_OK;
    }
    return 1;
}

void gen_cli_model_defaults(struct gen_cli *o, const struct model *m)
{
    const struct model_sampling *ms = &m->sampling;
    if (ms->has_temperature && !(o->sp_given & GEN_SP_TEMP))
        o->sp.temperature = ms->temperature;
    if (ms->has_top_k && !(o->sp_given & GEN_SP_TOP_K))
        o->sp.top_k = ms->top_k;
    if (ms->has_top_p && !(o->sp_given & GEN_SP_TOP_P))
        o->sp.top_p = ms->top_p > 0 ? ms->top_p : 1e-9;
    if (ms->has_min_p && !(o->sp_given & GEN_SP_MIN_P))
        o->sp.min_p = ms->min_p;
    if (ms->has_repeat_penalty && !(o->sp_given & GEN_SP_REPEAT))
        o->sp.repeat_penalty = ms->repeat_penalty;
}

int gen_cli_check(const struct gen_cli *o)
{
    if (o->chat_template && o->chat_template_file)
        return ig_error(IG_E_USAGE, "--chat-template and --chat-template-file: give one");
    if (o->system && !o->chat)
        return ig_error(IG_E_USAGE, "--system needs --chat");
    if (o->no_think && !o->chat)
        return ig_error(IG_E_USAGE, "--no-think needs --chat");
    if (o->no_special && o->chat)
        return ig_error(IG_E_USAGE, "--no-special does not go with --chat (the template's "
                                    "special tokens must be parsed)");
    return IG_OK;
}

int64_t gen_cli_context(const struct gen_cli *o, int64_t n_ctx_train)
{
    if (o->n_ctx > 0) {
        if (n_ctx_train > 0 && o->n_ctx > n_ctx_train)
            ig_warn("--ctx-size %lld is beyond the %lld positions the model was trained on",
                    (long long)o->n_ctx, (long long)n_ctx_train);
        return o->n_ctx;
    }
    int64_t n = n_ctx_train > 0 ? n_ctx_train : GEN_DEFAULT_CTX;
    return n < GEN_DEFAULT_CTX ? n : GEN_DEFAULT_CTX;
}

uint64_t gen_cli_pick_seed(int64_t seed)
{
    if (seed >= 0)
        return (uint64_t)seed;
    static uint64_t calls; /* batch picks one per request: never the same twice */
    uint64_t x = (uint64_t)ig_now_ns() ^ ((uint64_t)getpid() << 32) ^ (++calls * 0x9e37u);
    x ^= x >> 29;
    return (x * 0x9e3779b97f4a7c15ull) >> 32;
}
