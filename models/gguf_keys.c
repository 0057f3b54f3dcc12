/* models/gguf_keys.c: value-type checks for the metadata keys ignite reads.
 *
 * A known key with the wrong type is a malformed file, reported at parse
 * time so that every later getter can treat "wrong type" as impossible.
 * Integer keys accept any integer width real files use (but not negative
 * values); float keys accept float32 and float64. Other keys are not
 * checked. Ranges and meaning are model.c's business.
 * Covered by tests/models/test_gguf_malformed.py. */
#include "models/gguf_impl.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

enum kind { K_UINT, K_FLOAT, K_STR, K_BOOL, K_ARR_STR, K_ARR_F32, K_ARR_INT, K_UINT_OR_ARR };

struct known_key {
    const char *name; /* full key, or the part after "<arch>." */
    enum kind kind;
};

static const struct known_key general_keys[] = {
    {"general.architecture", K_STR},
    {"general.name", K_STR},
    {"general.alignment", K_UINT},
    {"general.file_type", K_UINT},
    {"general.quantization_version", K_UINT},
    {"tokenizer.ggml.model", K_STR},
    {"tokenizer.ggml.pre", K_STR},
    {"tokenizer.ggml.tokens", K_ARR_STR},
    {"tokenizer.ggml.merges", K_ARR_STR},
    {"tokenizer.ggml.scores", K_ARR_F32},
    {"tokenizer.ggml.token_type", K_ARR_INT},
    {"tokenizer.ggml.bos_token_id", K_UINT},
    {"tokenizer.ggml.eos_token_id", K_UINT},
    {"tokenizer.ggml.unknown_token_id", K_UINT},
    {"tokenizer.ggml.padding_token_id", K_UINT},
    {"tokenizer.ggml.separator_token_id", K_UINT},
    {"tokenizer.ggml.eot_token_id", K_UINT},
    {"tokenizer.ggml.eom_token_id", K_UINT},
    {"tokenizer.ggml.add_bos_token", K_BOOL},
    {"tokenizer.ggml.add_eos_token", K_BOOL},
    {"tokenizer.ggml.add_space_prefix", K_BOOL},
    {"tokenizer.chat_template", K_STR},
};

static const struct known_key arch_keys[] = {
    {"context_length", K_UINT},
    {"embedding_length", K_UINT},
    {"block_count", K_UINT},
    /* llama.cpp allows one value per layer for these three */
    {"feed_forward_length", K_UINT_OR_ARR},
    {"vocab_size", K_UINT},
    {"attention.head_count", K_UINT_OR_ARR},
    {"attention.head_count_kv", K_UINT_OR_ARR},
    {"attention.key_length", K_UINT},
    {"attention.value_length", K_UINT},
    {"attention.layer_norm_rms_epsilon", K_FLOAT},
    {"rope.dimension_count", K_UINT},
    {"rope.freq_base", K_FLOAT},
    {"rope.freq_base_swa", K_FLOAT},
    {"rope.scale_linear", K_FLOAT},
    {"rope.scaling.type", K_STR},
    {"rope.scaling.factor", K_FLOAT},
    {"rope.scaling.attn_factor", K_FLOAT},
    {"rope.scaling.original_context_length", K_UINT},
    {"rope.scaling.yarn_ext_factor", K_FLOAT},
    {"rope.scaling.yarn_beta_fast", K_FLOAT},
    {"rope.scaling.yarn_beta_slow", K_FLOAT},
    {"rope.scaling.yarn_log_multiplier", K_FLOAT},
    {"attention.sliding_window", K_UINT},
    {"attn_logit_softcapping", K_FLOAT},
    {"final_logit_softcapping", K_FLOAT},
    {"expert_count", K_UINT},
    {"expert_used_count", K_UINT},
    {"expert_feed_forward_length", K_UINT_OR_ARR},
    {"expert_shared_feed_forward_length", K_UINT},
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *kind_name(enum kind k)
{
    switch (k) {
    case K_UINT: return "a non-negative integer";
    case K_FLOAT: return "float32 or float64";
    case K_STR: return "string";
    case K_BOOL: return "bool";
    case K_ARR_STR: return "array of string";
    case K_ARR_F32: return "array of float32";
    case K_UINT_OR_ARR: return "a non-negative integer or an array of them";
    default: return "array of integers";
    }
}

static bool matches(const struct gguf_kv *kv, enum kind k)
{
    bool arr = kv->type == GGUF_TYPE_ARRAY;
    switch (k) {
    case K_UINT: return gguf_type_is_int(kv->type) && !(gguf_type_is_signed(kv->type) && kv->v.i64 < 0);
    case K_FLOAT: return kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64;
    case K_STR: return kv->type == GGUF_TYPE_STRING;
    case K_BOOL: return kv->type == GGUF_TYPE_BOOL;
    case K_ARR_STR: return arr && kv->arr_type == GGUF_TYPE_STRING;
    case K_ARR_F32: return arr && kv->arr_type == GGUF_TYPE_FLOAT32;
    case K_UINT_OR_ARR: return arr ? gguf_type_is_int(kv->arr_type) : matches(kv, K_UINT);
    default: return arr && gguf_type_is_int(kv->arr_type);
    }
}

static int check(const struct gguf_kv *kv, const struct known_key *k, struct gguf_error *err)
{
    if (matches(kv, k->kind))
        return IG_OK;
    char name[64], found[32];
    if (kv->type == GGUF_TYPE_ARRAY)
        snprintf(found, sizeof found, "array of %s", gguf_type_name(kv->arr_type));
    else if (gguf_type_is_signed(kv->type) && kv->v.i64 < 0)
        snprintf(found, sizeof found, "%s %lld", gguf_type_name(kv->type), (long long)kv->v.i64);
    else
        snprintf(found, sizeof found, "%s", gguf_type_name(kv->type));
    return gguf_fail(err, GGUF_ERR_KEY_TYPE, "metadata key '%s' is %s, expected %s",
                     gguf_printable(name, sizeof name, kv->key), found, kind_name(k->kind));
}

int gguf_check_known_keys(const struct gguf_file *g, struct gguf_error *err)
{
    for (size_t i = 0; i < N_OF(general_keys); i++) {
        const struct gguf_kv *kv = gguf_find_kv(g, general_keys[i].name);
        if (kv && check(kv, &general_keys[i], err))
            return IG_E_MODEL;
    }
    struct gguf_str arch;
    if (!gguf_get_str(g, "general.architecture", &arch) || arch.len > 64)
        return IG_OK;
    for (size_t i = 0; i < N_OF(arch_keys); i++) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.ptr, arch_keys[i].name);
        const struct gguf_kv *kv = gguf_find_kv(g, key);
        if (kv && check(kv, &arch_keys[i], err))
            return IG_E_MODEL;
    }
    return IG_OK;
}
