/* cli/gen_opts.h: the options `run`, `chat` and `batch` share (private to cli/):
 * the model, the device (and how CUDA holds the weights) and context, the prefill chunk, sampling, the chat
 * template, stop strings. One vocabulary for both commands: a batch
 * request's keys default to these. The rows below go into each command's
 * option table; gen_cli_set parses their values. */
#ifndef IGNITE_CLI_GEN_OPTS_H
#define IGNITE_CLI_GEN_OPTS_H

#include "cli/cli.h"
#include "cli/device.h"
#include "decode/sampler.h"
#include "kvcache/kvcache.h"

#include <stdbool.h>
#include <stdint.h>

/* Long-only option keys of the shared rows (a command's own start at 300). */
enum {
    GEN_OPT_TEMP = 256, GEN_OPT_TOP_K, GEN_OPT_TOP_P, GEN_OPT_MIN_P, GEN_OPT_REPEAT_PENALTY,
    GEN_OPT_REPEAT_LAST_N, GEN_OPT_CHAT, GEN_OPT_SYSTEM, GEN_OPT_DEVICE, GEN_OPT_NO_SPECIAL,
    GEN_OPT_IGNORE_EOS, GEN_OPT_UBATCH, GEN_OPT_BATCH_SIZE, GEN_OPT_STOP, GEN_OPT_CACHE_TYPE,
    GEN_OPT_CACHE_TYPE_K, GEN_OPT_CACHE_TYPE_V,
    GEN_OPT_GRAMMAR, GEN_OPT_GRAMMAR_FILE, GEN_OPT_JSON_SCHEMA, GEN_OPT_JSON_SCHEMA_FILE,
    GEN_OPT_FORMAT, GEN_OPT_GPU_WEIGHTS, GEN_OPT_EXACT, GEN_OPT_NO_THINK, GEN_OPT_NGL, GEN_OPT_FA,
    GEN_OPT_MLOCK, GEN_OPT_NO_MMAP, GEN_OPT_CHAT_TEMPLATE, GEN_OPT_CHAT_TEMPLATE_FILE,
    GEN_OPT_JINJA, GEN_OPT_LOOKUP, GEN_OPT_DRAFT_MODEL, GEN_OPT_DRAFT_N_MAX,
    GEN_OPT_DRAFT_N_MIN, GEN_OPT_DRAFT_MAX, GEN_OPT_DRAFT_MIN, GEN_OPT_DRAFT_P_MIN,
    GEN_OPT_SPEC_P_MIN, GEN_OPT_LOOKUP_NGRAM_MIN, GEN_OPT_LOOKUP_NGRAM_MAX,
    GEN_OPT_VERBOSE,
    GEN_OPT_END
};

/* The rows of run and batch that chat, always a chat, does not take. */
#define GEN_CLI_PROMPT_OPTIONS                                                                     \
    {"chat", GEN_OPT_CHAT, no_argument, NULL, "wrap the prompt in the model's chat template", NULL}, \
    {"no-special", GEN_OPT_NO_SPECIAL, no_argument, NULL, "treat special-token text in the prompt as plain text (not with --chat)", NULL}

/* Speculative decoding's rows (llama.cpp's names; docs/cli.md). */
#define GEN_CLI_SPEC_OPTIONS                                                                       \
    {"lookup", GEN_OPT_LOOKUP, no_argument, NULL, "speculate with prompt lookup: drafts from earlier n-grams of the prompt and output", NULL}, \
    {"lookup-ngram-min", GEN_OPT_LOOKUP_NGRAM_MIN, required_argument, "N", "--lookup: the shortest n-gram searched", "1"}, \
    {"lookup-ngram-max", GEN_OPT_LOOKUP_NGRAM_MAX, required_argument, "N", "--lookup: the longest n-gram searched (tried first)", "4"}, \
    {"draft-model", GEN_OPT_DRAFT_MODEL, required_argument, "FILE", "speculate with a draft model of the same vocabulary (-md)", NULL}, \
    {"spec-draft-n-max", GEN_OPT_DRAFT_N_MAX, required_argument, "N", "most tokens drafted a step (it adapts below this)", "3 with -md, 8 with --lookup"}, \
    {"spec-draft-n-min", GEN_OPT_DRAFT_N_MIN, required_argument, "N", "a shorter draft is not checked", "0"}, \
    {"draft-max", GEN_OPT_DRAFT_MAX, required_argument, "N", "the same as --spec-draft-n-max", NULL}, \
    {"draft-min", GEN_OPT_DRAFT_MIN, required_argument, "N", "the same as --spec-draft-n-min", NULL}, \
    {"draft-p-min", GEN_OPT_DRAFT_P_MIN, required_argument, "P", "-md: stop drafting where the draft's top token is below P", "0"}, \
    {"spec-draft-p-min", GEN_OPT_SPEC_P_MIN, required_argument, "P", "the same as --draft-p-min", NULL}

/* The shared rows of an option table (struct cli_option); CHUNK_DEFAULT is
 * the command's --chunk default as its help shows it. */
#define GEN_CLI_OPTIONS(CHUNK_DEFAULT)                                                             \
    {"model", 'm', required_argument, "PATH", "GGUF model file or Hugging Face model folder", "the fetched default model"}, \
    {"n-predict", 'n', required_argument, "N", "tokens to generate, -1 = until EOS or context full", "256"}, \
    {"ctx-size", 'c', required_argument, "N", "context positions, 0 = the model's (at most 4096)", "0"}, \
    {"threads", 't', required_argument, "N", "CPU threads, 0 = one per core", "0"},             \
    {"chunk", 'b', required_argument, "N", "rows per forward step: prompt chunks and decode tokens (bounds activation memory)", CHUNK_DEFAULT}, \
    {"ubatch", GEN_OPT_UBATCH, required_argument, "N", "the same as --chunk", NULL},            \
    {"batch-size", GEN_OPT_BATCH_SIZE, required_argument, "N", "the same as --chunk", NULL},    \
    {"temp", GEN_OPT_TEMP, required_argument, "T", "temperature, 0 = greedy", "0.8 or the model's"},           \
    {"top-k", GEN_OPT_TOP_K, required_argument, "K", "keep the K most likely tokens, 0 = off", "40 or the model's"}, \
    {"top-p", GEN_OPT_TOP_P, required_argument, "P", "nucleus: smallest set with mass >= P, 1 = off", "0.95 or the model's"}, \
    {"min-p", GEN_OPT_MIN_P, required_argument, "P", "drop tokens below P * the top probability, 0 = off", "0.05 or the model's"}, \
    {"repeat-penalty", GEN_OPT_REPEAT_PENALTY, required_argument, "X", "penalise recent tokens, 1 = off", "1.0 or the model's"}, \
    {"repeat-last-n", GEN_OPT_REPEAT_LAST_N, required_argument, "N", "tokens the penalty looks back over", "64"}, \
    {"seed", 's', required_argument, "N", "sampling seed, -1 = random (reported)", "-1"},        \
    {"stop", GEN_OPT_STOP, required_argument, "TEXT", "end generation where TEXT appears (repeatable; TEXT is cut)", NULL}, \
    {"grammar", GEN_OPT_GRAMMAR, required_argument, "TEXT", "constrain the output to a GBNF grammar (docs/grammar.md)", NULL}, \
    {"grammar-file", GEN_OPT_GRAMMAR_FILE, required_argument, "FILE", "the same, read from FILE ('-' = stdin)", NULL}, \
    {"json-schema", GEN_OPT_JSON_SCHEMA, required_argument, "TEXT", "constrain the output to JSON valid for a JSON schema", NULL}, \
    {"json-schema-file", GEN_OPT_JSON_SCHEMA_FILE, required_argument, "FILE", "the same, read from FILE ('-' = stdin)", NULL}, \
    {"format", GEN_OPT_FORMAT, required_argument, "json", "constrain the output to one JSON value", NULL}, \
    {"system", GEN_OPT_SYSTEM, required_argument, "TEXT", "system message for --chat", "the template's"}, \
    {"no-think", GEN_OPT_NO_THINK, no_argument, NULL, "with --chat: turn the model's thinking off (Qwen3's enable_thinking)", NULL}, \
    {"verbose", GEN_OPT_VERBOSE, no_argument, NULL, "with --chat on a harmony model (gpt-oss): the analysis channel to stderr (else dropped)", NULL}, \
    {"chat-template", GEN_OPT_CHAT_TEMPLATE, required_argument, "NAME", "llama.cpp's built-in template NAME instead of the model's (chatml, llama3, gemma, ...; implies --chat)", NULL}, \
    {"chat-template-file", GEN_OPT_CHAT_TEMPLATE_FILE, required_argument, "FILE", "a Jinja chat template instead of the model's (implies --chat)", NULL}, \
    {"jinja", GEN_OPT_JINJA, no_argument, NULL, "llama.cpp's, taken: ignite always renders chat templates as Jinja", NULL}, \
    {"device", GEN_OPT_DEVICE, required_argument, "DEV", "auto, cpu or cuda[:N]", "auto"},     \
    {"n-gpu-layers", GEN_OPT_NGL, required_argument, "N", "llama.cpp's -ngl: 0 = --device cpu, N > 0 = the GPU (every layer) where usable, else the CPU", NULL}, \
    {"flash-attn", GEN_OPT_FA, required_argument, "on|off", "llama.cpp's -fa, taken: ignite always uses its fused attention", NULL}, \
    {"gpu-weights", GEN_OPT_GPU_WEIGHTS, required_argument, "W", "CUDA: native (quantized weights stay in their blocks) or f16", "native"}, \
    {"cache-type", GEN_OPT_CACHE_TYPE, required_argument, "T", "KV cache element type, K and V: f32, f16, q8_0 or q4_0 (CUDA: f16)", "f32"}, \
    {"cache-type-k", GEN_OPT_CACHE_TYPE_K, required_argument, "T", "llama.cpp's -ctk: K's type alone", "f32"}, \
    {"cache-type-v", GEN_OPT_CACHE_TYPE_V, required_argument, "T", "llama.cpp's -ctv: V's type alone", "f32"}, \
    {"mlock", GEN_OPT_MLOCK, no_argument, NULL, "lock the model's weights in memory (a warning where the system refuses)", NULL}, \
    {"no-mmap", GEN_OPT_NO_MMAP, no_argument, NULL, "read the model file into memory instead of mapping it", NULL}, \
    {"exact", GEN_OPT_EXACT, no_argument, NULL, "CPU: exact f32 matmuls instead of int8 activations (slower, closer to the reference)", NULL}, \
    {"ignore-eos", GEN_OPT_IGNORE_EOS, no_argument, NULL, "do not stop at end-of-generation tokens (benchmarks)", NULL}, \
    GEN_CLI_SPEC_OPTIONS,                                                                          \
    {"quiet", 'q', no_argument, NULL, "no stats line", NULL}

/* The most --stop strings. */
#define GEN_CLI_MAX_STOP 16

struct gen_cli {
    const char *model;     /* -m, NULL = the default model */
    const char *system;    /* --system, needs --chat */
    const char *chat_template;      /* --chat-template NAME (a built-in), or NULL */
    const char *chat_template_file; /* --chat-template-file FILE, or NULL */
    const char *device;    /* --device as given */
    const char *gpu_weights; /* --gpu-weights as given (backend_parse_gpu_weights) */
    int64_t n_gpu_layers;  /* -ngl, CLI_NGL_UNSET when not given (cli/device.h) */
    int64_t n_predict, n_ctx, n_threads;
    int64_t n_batch;       /* --chunk (-b, --ubatch, --batch-size) */
    bool n_batch_given;    /* -b was given (else `batch` takes backend_batch_rows_default) */
    int64_t seed;          /* -1 = pick one */
    struct sampler_params sp;
    unsigned sp_given;     /* GEN_SP_* bits: sampling options the user set */
    const char *stop[GEN_CLI_MAX_STOP]; /* --stop, borrowed from argv */
    int n_stop;
    struct cli_cache_types kv;  /* --cache-type, -ctk, -ctv (cli/device.h) */
    /* constraints, at most one (cli/gen_grammar.c) */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file, *format;
    bool chat, quiet, no_special, ignore_eos;
    bool exact;            /* --exact: the CPU's f32-activation matmuls */
    bool no_think;         /* --no-think: the template's thinking switch off (Qwen3) */
    bool verbose;          /* --verbose: a harmony answer's other channels to stderr */
    /* speculation (cli/gen_spec.c) */
    bool lookup;           /* --lookup */
    const char *draft_model; /* -md FILE */
    int64_t spec_n_max;    /* -1: the default of the draft source */
    int64_t spec_n_min, ngram_min, ngram_max;
    double spec_p_min;
};

/* Sampling options given on the command line; the others may take the
 * model's defaults (generation_config.json). */
enum { GEN_SP_TEMP = 1, GEN_SP_TOP_K = 2, GEN_SP_TOP_P = 4, GEN_SP_MIN_P = 8, GEN_SP_REPEAT = 16 };

/* The defaults the rows document. */
void gen_cli_defaults(struct gen_cli *o);

struct model;

/* The model's sampling defaults (a Hugging Face folder's
 * generation_config.json) for the options the user did not give. */
void gen_cli_model_defaults(struct gen_cli *o, const struct model *m);

/* Parses the value of a shared option. Returns IG_OK, IG_E_USAGE (one
 * line), or 1 when `key` is not a shared option. */
int gen_cli_set(struct gen_cli *o, int key, const char *arg);

/* The checks between shared options after parsing (--system and
 * --no-think need --chat; one chat template option at most).
 * Returns IG_OK or IG_E_USAGE. */
int gen_cli_check(const struct gen_cli *o);

/* The context: -c, or the model's training context capped at 4096 (with a
 * warning past the training context). */
int64_t gen_cli_context(const struct gen_cli *o, int64_t n_ctx_train);

/* A seed: `seed` itself, or (-1) one picked from the clock and the process
 * (32 bits: exact in JSON, easy to retype). */
uint64_t gen_cli_pick_seed(int64_t seed);

/* ---- speculation (cli/gen_spec.c) ---- */

struct gen_spec;
struct backend;
struct backend_opts;
struct tok_vocab;

/* The request's speculation from the options (all zero without --lookup
 * or -md). */
void gen_cli_spec(const struct gen_cli *o, struct gen_spec *out);

/* The most tokens a request of these options drafts a step (engine_opts.spec_max). */
int64_t gen_cli_spec_max(const struct gen_cli *o);

/* The checks of the speculation options: not both sources, n-gram sizes in
 * order, n-min <= n-max (on any device `kind`, enum backend_kind: CUDA's
 * verify steps run on its decode kernels). IG_OK or IG_E_USAGE (one line). */
int gen_cli_check_spec(const struct gen_cli *o, int kind);

/* With -md: loads the draft model, checks its vocabulary against `vocab`
 * (generate/spec.h's rule) and builds its backend with the target's
 * options `bo` (device, threads, context, slots, rows). *dm, *dbe NULL
 * without -md. IG_OK, or the load's error, or IG_E_USAGE naming the first
 * token that differs. */
int gen_cli_load_draft(const struct gen_cli *o, const struct tok_vocab *vocab,
                       const struct backend_opts *bo, struct model **dm, struct backend **dbe);

/* ---- constraints (cli/gen_grammar.c) ---- */

struct grammar;

/* True when a constraint option was given. */
bool gen_cli_has_grammar(const struct gen_cli *o);

/* The rules between constraint options: at most one, --format's value,
 * not with prompt_only, a file read from stdin ('-') not when `stdin_user`
 * (the option that already reads stdin, NULL: none) does. IG_OK or
 * IG_E_USAGE. */
int gen_cli_check_grammar(const struct gen_cli *o, const char *stdin_user, bool prompt_only);

/* Compiles the constraint option into *g (NULL without one; files read
 * here). IG_OK, IG_E_USAGE (a bad grammar or schema, one line with its
 * position), IG_E_IO, IG_E_NOMEM. */
int gen_cli_compile_grammar(const struct gen_cli *o, struct grammar **g);

#endif
