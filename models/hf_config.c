/* models/hf_config.c: the architectures a Hugging Face folder may hold and
 * config.json -> struct model_hparams (plus generation_config.json's
 * sampling defaults and tokenizer_config.json's chat template). Works on
 * parsed JSON only, so the fuzz target drives it without files; opening
 * the files and binding tensors is hf_model.c's job.
 *
 * HF checkpoints keep Q and K rows in the order of HF's rotate-half RoPE
 * (dimension i pairs with i + head_dim/2); llama.cpp's converter permutes
 * them for GGUF's adjacent-pair RoPE. A folder is mapped, not rewritten, so
 * every architecture here runs with ROPE_HALF_SPLIT over the rows as stored
 * (Qwen3's and Gemma 3's per-head Q/K norm weights are in that same order:
 * they need no permutation either; GGUF's qwen3 and gemma3 are half-split
 * too). What an architecture adds beyond Llama (Q/K norms, Gemma's
 * post-norms, GELU, embedding scale, sliding window) is its row of
 * models/arch.c, as for a GGUF; this file reads the config.json keys that
 * set it. The weights' names are the table of tensors' (models/tensors.h).
 * Covered by tests/models/test_hf_folder.py, test_hf_tiny.py,
 * test_hf_arch.py, test_hf_malformed.py and test_hf_gemma4.py. */
#include "models/hf.h"

#include "core/json.h"
#include "core/status.h"
#include "models/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A dimension larger than this is not a model ignite can run (as model.c). */
#define HF_MAX_DIM (INT64_C(1) << 24)

/* Qwen3Config's head_dim default (its configs state it anyway). */
static const struct hf_default qwen3_defaults[] = {{"head_dim", 128}, {NULL, 0}};

/* Qwen3MoeConfig's __init__ defaults (Qwen3-30B-A3B's sizes; norm_topk_prob
 * false there, true in the released configs, which state it). */
static const struct hf_default qwen3moe_defaults[] = {
    {"head_dim", 128}, {"num_experts", 128}, {"num_experts_per_tok", 8},
    {"moe_intermediate_size", 768}, {"decoder_sparse_step", 1}, {NULL, 0},
};

/* Qwen3_5TextConfig's and Qwen3_5MoeTextConfig's defaults (Qwen3.5-35B-A3B's
 * sizes for the experts). */
static const struct hf_default qwen35_defaults[] = {
    {"head_dim", 256}, {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 128},
    {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
    {"linear_num_value_heads", 32}, {"num_experts", 256}, {"num_experts_per_tok", 8},
    {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512}, {NULL, 0},
};

/* Gemma3TextConfig's __init__ defaults: a multimodal config.json's
 * text_config often states only the sizes that differ from them. */
static const struct hf_default gemma3_defaults[] = {
    {"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
    {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
    {"head_dim", 256}, {"max_position_embeddings", 131072}, {"rope_theta", 1000000.0},
    {"rope_local_base_freq", 10000.0}, {"query_pre_attn_scalar", 256},
    {"sliding_window", 4096}, {"sliding_window_pattern", 6}, {NULL, 0},
};

/* Gemma4TextConfig's (E2B's layer count aside, a 30-layer model's sizes;
 * layer_types every sixth layer full, as its __post_init__). */
static const struct hf_default gemma4_defaults[] = {
    {"vocab_size", 262144}, {"hidden_size", 2304}, {"intermediate_size", 9216},
    {"num_hidden_layers", 30}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
    {"head_dim", 256}, {"global_head_dim", 512}, {"max_position_embeddings", 131072},
    {"sliding_window", 512}, {"sliding_window_pattern", 6},
    {"vocab_size_per_layer_input", 262144}, {"hidden_size_per_layer_input", 256},
    {"num_kv_shared_layers", 0}, {NULL, 0},
};

/* GptOssConfig's defaults (gpt-oss-120b's sizes; rope_scaling's YaRN is
 * read_rope's). */
static const struct hf_default gptoss_defaults[] = {
    {"num_hidden_layers", 36}, {"num_local_experts", 128}, {"vocab_size", 201088},
    {"hidden_size", 2880}, {"intermediate_size", 2880}, {"head_dim", 64},
    {"num_attention_heads", 64}, {"num_key_value_heads", 8}, {"sliding_window", 128},
    {"max_position_embeddings", 131072}, {"num_experts_per_tok", 4},
    {"rope_theta", 150000.0}, {NULL, 0},
};

/* The defaults are those of transformers' config classes (LlamaConfig:
 * rms_norm_eps 1e-6, tie_word_embeddings false; Qwen2Config, Qwen3Config
 * the same; Gemma3TextConfig ties). */
static const struct hf_arch archs[] = {
    {"LlamaForCausalLM", "llama", MODEL_ARCH_LLAMA, NULL, "model.", "", NULL, NULL, "silu",
     false, false, 1e-6, NULL},
    {"MistralForCausalLM", "llama", MODEL_ARCH_LLAMA, NULL, "model.", "", NULL, NULL, "silu",
     false, false, 1e-6, NULL},
    {"Qwen2ForCausalLM", "qwen2", MODEL_ARCH_QWEN2, NULL, "model.", "", NULL, NULL, "silu",
     false, false, 1e-6, NULL},
    {"Qwen3ForCausalLM", "qwen3", MODEL_ARCH_QWEN3, NULL, "model.", "", NULL, NULL, "silu",
     false, false, 1e-6, qwen3_defaults},
    {"Qwen3MoeForCausalLM", "qwen3moe", MODEL_ARCH_QWEN3MOE, NULL, "model.", "", NULL, NULL,
     "silu", false, false, 1e-6, qwen3moe_defaults},
    {"Gemma3ForCausalLM", "gemma3", MODEL_ARCH_GEMMA3, NULL, "model.", "", NULL, NULL,
     "gelu_pytorch_tanh", true, true, 1e-6, gemma3_defaults},
    {"Gemma3ForConditionalGeneration", "gemma3", MODEL_ARCH_GEMMA3, "text_config",
     "language_model.model.", "language_model.", "model.language_model.", "",
     "gelu_pytorch_tanh", true, true, 1e-6, gemma3_defaults},
    /* Qwen3.5 (the published checkpoints' multimodal classes; the text model
     * only: the vision tower's and the MTP head's tensors are not read).
     * Their RMSNorms multiply by 1 + w, except the DeltaNet's gated output
     * norm (a TENSOR_BIAS row). */
    {"Qwen3_5ForConditionalGeneration", "qwen35", MODEL_ARCH_QWEN35, "text_config",
     "model.language_model.", "", NULL, NULL, "silu", true, false, 1e-6, qwen35_defaults},
    {"Qwen3_5MoeForConditionalGeneration", "qwen35moe", MODEL_ARCH_QWEN35MOE, "text_config",
     "model.language_model.", "", NULL, NULL, "silu", true, false, 1e-6, qwen35_defaults},
    {"GptOssForCausalLM", "gpt-oss", MODEL_ARCH_GPT_OSS, NULL, "model.", "", NULL, NULL, "silu",
     false, false, 1e-5, gptoss_defaults},
    /* Gemma 4 (the text model only: Gemma4ForConditionalGeneration's vision
     * and audio towers are not read). Its RMSNorms multiply by w, not 1 + w. */
    {"Gemma4ForCausalLM", "gemma4", MODEL_ARCH_GEMMA4, NULL, "model.", "", NULL, NULL,
     "gelu_pytorch_tanh", false, true, 1e-6, gemma4_defaults},
    {"Gemma4ForConditionalGeneration", "gemma4", MODEL_ARCH_GEMMA4, "text_config",
     "model.language_model.", "", NULL, NULL, "gelu_pytorch_tanh", false, true, 1e-6,
     gemma4_defaults},
};

/* rope_scaling kinds the forward computes; "default" is plain RoPE. */
static const char *const rope_kinds[] = {"default", "linear", "llama3", "yarn"};

const char *hf_arch_names(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "Qwen3MoeForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, "
           "Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration, "
           "GptOssForCausalLM, Gemma4ForCausalLM, Gemma4ForConditionalGeneration";
}

/* Everything a config step needs to name the file in a message. */
struct cfg {
    const char *name;        /* the file */
    const cJSON *j;          /* the object holding the text model's settings */
    const struct hf_arch *a; /* its defaults, or NULL */
};

/* The config class's default for `key`, else `def`. */
static double class_default(const struct cfg *c, const char *key, double def)
{
    for (const struct hf_default *d = c->a ? c->a->defaults : NULL; d && d->key; d++)
        if (!strcmp(d->key, key))
            return d->value;
    return def;
}

/* A whole number in [lo, hi]; `def` < 0 means required. A JSON null counts
 * as absent (Mistral writes "head_dim": null). */
static int get_int(const struct cfg *c, const char *key, int64_t def, int64_t lo, int64_t hi,
                   int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    def = (int64_t)class_default(c, key, (double)def);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0)
            return ig_error(IG_E_MODEL, "'%s': '%s' is missing", c->name, key);
        *out = def;
        return IG_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return ig_error(IG_E_MODEL, "'%s': '%s' must be a whole number from %lld to %lld",
                        c->name, key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return IG_OK;
}

static int get_pos_float(const struct cfg *c, const char *key, double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    if (!v || cJSON_IsNull(v)) {
        *out = class_default(c, key, def);
        return IG_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return ig_error(IG_E_MODEL, "'%s': '%s' must be a positive number", c->name, key);
    *out = v->valuedouble;
    return IG_OK;
}

static int get_bool(const struct cfg *c, const char *key, bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return IG_OK;
    }
    if (!cJSON_IsBool(v))
        return ig_error(IG_E_MODEL, "'%s': '%s' must be true or false", c->name, key);
    *out = cJSON_IsTrue(v);
    return IG_OK;
}

static int find_arch(const char *name, const cJSON *root, const struct hf_arch **out)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!cJSON_IsArray(a) || !a->child)
        return ig_error(IG_E_MODEL, "'%s': 'architectures' is missing (a list naming the "
                        "model class, such as [\"LlamaForCausalLM\"])", name);
    for (const cJSON *e = a->child; e; e = e->next)
        for (size_t k = 0; cJSON_IsString(e) && k < sizeof archs / sizeof archs[0]; k++)
            if (!strcmp(e->valuestring, archs[k].name)) {
                *out = &archs[k];
                return IG_OK;
            }
    const char *first = cJSON_IsString(a->child) ? a->child->valuestring : "?";
    return ig_error(IG_E_MODEL, "'%s': architecture '%.80s' is not supported (supported: %s)",
                    name, first, hf_arch_names());
}

/* rope_scaling, or transformers 5's rope_parameters (NULL: neither). */
static const cJSON *rope_scaling(const struct cfg *c)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->j, "rope_scaling");
    return rs && !cJSON_IsNull(rs) ? rs : cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
}

/* Refuses settings the forward would silently get wrong. */
static int check_unsupported(const struct cfg *c, const struct hf_arch *a)
{
    const char *act = ig_json_str(c->j, "hidden_act");
    if (!act)
        act = ig_json_str(c->j, "hidden_activation");
    if (act && strcmp(act, a->act))
        return ig_error(IG_E_MODEL, "'%s': hidden_act '%.40s' is not supported (%s computes %s)",
                        c->name, act, a->name, a->act);
    bool b;
    int st;
    if ((st = get_bool(c, "attention_bias", false, &b)))
        return st;
    if (b && !(model_arch_of(a->id)->features & MODEL_FEAT_QKV_BIAS))
        return ig_error(IG_E_MODEL, "'%s': attention_bias true (biases on Q, K, V and the "
                        "output projection) is not supported", c->name);
    if ((st = get_bool(c, "mlp_bias", false, &b)))
        return st;
    if (b)
        return ig_error(IG_E_MODEL, "'%s': mlp_bias true is not supported", c->name);
    /* Gemma 4: rope_parameters per layer kind, use_bidirectional_attention a
     * string: read_gemma4's */
    bool g4 = model_arch_of(a->id)->per_layer_shapes;
    const cJSON *rs = g4 ? NULL : rope_scaling(c);
    if (rs && !cJSON_IsNull(rs)) {
        const char *kind = ig_json_str(rs, "rope_type");
        if (!kind)
            kind = ig_json_str(rs, "type");
        if (!cJSON_IsObject(rs) || !kind)
            return ig_error(IG_E_MODEL, "'%s': rope_scaling must be null or an object with a "
                            "'rope_type'", c->name);
        size_t k = 0;
        while (k < sizeof rope_kinds / sizeof rope_kinds[0] && strcmp(kind, rope_kinds[k]))
            k++;
        /* YaRN as a GGUF of the model has it: proven for gpt-oss only */
        if (k == sizeof rope_kinds / sizeof rope_kinds[0] ||
            (!strcmp(kind, "yarn") && !HF_MXFP4_EXPERTS(a)))
            return ig_error(IG_E_MODEL, "'%s': rope_scaling type '%.40s' is not supported yet "
                            "(supported: default, linear, llama3; yarn on gpt-oss)", c->name,
                            kind);
    }
    if (HF_MXFP4_EXPERTS(a)) { /* the clamped SwiGLU's constants are the forward's */
        double limit = 7.0, alpha = 1.702;
        if ((st = get_pos_float(c, "swiglu_limit", 7.0, &limit)) ||
            (st = get_pos_float(c, "swiglu_alpha", 1.702, &alpha)))
            return st;
        if (limit != 7.0 || alpha != 1.702)
            return ig_error(IG_E_MODEL, "'%s': swiglu_limit %g, swiglu_alpha %g: ignite computes "
                            "gpt-oss's 7 and 1.702", c->name, limit, alpha);
    }
    /* Qwen2/Qwen3's own sliding window (layers from max_window_layers on) is
     * not computed; their released configs leave it off. */
    if ((st = get_bool(c, "use_sliding_window", false, &b)))
        return st;
    if (b)
        return ig_error(IG_E_MODEL, "'%s': use_sliding_window true is not supported", c->name);
    /* EmbeddingGemma's Gemma 3 text model attends both ways: not a decoder. */
    if (!g4 && (st = get_bool(c, "use_bidirectional_attention", false, &b)))
        return st;
    if (b)
        return ig_error(IG_E_MODEL, "'%s': use_bidirectional_attention true (an encoder such "
                        "as EmbeddingGemma) is not supported", c->name);
    return IG_OK;
}

/* rope_scaling "llama3" (Llama 3.1/3.2): its four keys, all required as
 * transformers requires them; hf_load turns them into rope_freqs divisors. */
static int read_llama3(const struct cfg *c, const cJSON *rs, struct hf_config *out)
{
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, keys[k])))
            return ig_error(IG_E_MODEL, "'%s': rope_scaling 'llama3' needs '%s' (a number)",
                            c->name, keys[k]);
    struct cfg sub = {c->name, rs, NULL};
    double f, lo, hi, ctx;
    int st;
    if ((st = get_pos_float(&sub, "factor", 0, &f)) ||
        (st = get_pos_float(&sub, "low_freq_factor", 0, &lo)) ||
        (st = get_pos_float(&sub, "high_freq_factor", 0, &hi)) ||
        (st = get_pos_float(&sub, "original_max_position_embeddings", 0, &ctx)))
        return st;
    if (!(f >= 1 && f <= 1e6 && lo > 0 && hi > lo && ctx >= 1 && ctx <= 1e9))
        return ig_error(IG_E_MODEL, "'%s': rope_scaling 'llama3' needs factor from 1 to 1e6, "
                        "0 < low_freq_factor < high_freq_factor and "
                        "original_max_position_embeddings from 1 to 1e9", c->name);
    out->llama3.factor = f;
    out->llama3.low = lo;
    out->llama3.high = hi;
    out->llama3.orig_ctx = ctx;
    return IG_OK;
}

/* rope_scaling "yarn" as llama.cpp's converter writes it to a GGUF (type,
 * factor, original context; beta_fast 32 and beta_slow 1 unless given;
 * the attention factor YaRN's own 0.1 ln(factor) + 1, as in both): what
 * the forward computes for a GGUF. `rs` NULL: GptOssConfig's default
 * (factor 32 over 4096 positions). Refused: attention_factor, mscale and
 * mscale_all_dim (another attention factor). */
static int read_yarn(const struct cfg *c, const cJSON *rs, struct hf_config *out)
{
    struct model_rope *r = &out->hp.rope[MODEL_ROPE_GLOBAL];
    r->scaling = ROPE_SCALING_YARN;
    r->factor = 32.0;
    r->orig_ctx = 4096;
    if (!rs)
        return IG_OK;
    static const char *const refused[] = {"attention_factor", "mscale", "mscale_all_dim"};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, refused[k]);
        if (v && !cJSON_IsNull(v))
            return ig_error(IG_E_MODEL, "'%s': rope_scaling 'yarn' with '%s' is not supported",
                            c->name, refused[k]);
    }
    struct cfg sub = {c->name, rs, NULL};
    int64_t orig;
    int st;
    if ((st = get_pos_float(&sub, "factor", 0, &r->factor)) ||
        (st = get_pos_float(&sub, "beta_fast", 32.0, &r->yarn_beta_fast)) ||
        (st = get_pos_float(&sub, "beta_slow", 1.0, &r->yarn_beta_slow)) ||
        (st = get_int(&sub, "original_max_position_embeddings", out->hp.n_ctx_train, 1,
                      INT64_C(1) << 30, &orig)))
        return st;
    if (!(r->factor >= 1 && r->factor <= 1e6))
        return ig_error(IG_E_MODEL, "'%s': rope_scaling 'yarn' needs a 'factor' from 1 to 1e6",
                        c->name);
    r->orig_ctx = orig;
    return IG_OK;
}

/* rope_scaling "linear" divides the positions by its factor (on Gemma 3's
 * global layers only: the local ones keep plain RoPE at
 * rope_local_base_freq, as transformers' rotary_emb_local). */
static int read_rope(const struct cfg *c, struct hf_config *out)
{
    struct model_hparams *hp = &out->hp;
    const cJSON *rs = rope_scaling(c);
    const char *kind = ig_json_str(rs, "rope_type");
    if (!kind)
        kind = ig_json_str(rs, "type");
    if (kind && !strcmp(kind, "llama3"))
        return read_llama3(c, rs, out);
    if ((kind && !strcmp(kind, "yarn")) || (!kind && c->a && HF_MXFP4_EXPERTS(c->a)))
        return read_yarn(c, kind ? rs : NULL, out);
    if (!kind || strcmp(kind, "linear"))
        return IG_OK;
    struct cfg sub = {c->name, rs, NULL};
    double f;
    int st = get_pos_float(&sub, "factor", 0, &f);
    if (st)
        return st;
    if (!(f >= 1 && f <= 1e6))
        return ig_error(IG_E_MODEL, "'%s': rope_scaling 'linear' needs a 'factor' from 1 to 1e6",
                        c->name);
    hp->rope[MODEL_ROPE_GLOBAL].scaling = ROPE_SCALING_LINEAR;
    hp->rope[MODEL_ROPE_GLOBAL].factor = f;
    return IG_OK;
}

/* layer_types (transformers' list of each layer's kind): the layers of kind
 * `other` (the rest "full_attention") as bits of out, their count in *n;
 * without the list, all but every every-th layer (layer i is `other` when
 * (i + 1) % every != 0). IG_OK, or IG_E_MODEL after one line. */
static int layer_kinds(const struct cfg *c, int64_t n_layer, int64_t every, const char *other,
                       uint8_t *out, int64_t *n)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(c->j, "layer_types");
    if (types && !cJSON_IsNull(types) &&
        (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n_layer))
        return ig_error(IG_E_MODEL, "'%s': 'layer_types' must list one kind for each of the %lld "
                        "layers", c->name, (long long)n_layer);
    const cJSON *e = cJSON_IsArray(types) ? types->child : NULL;
    *n = 0;
    for (int64_t il = 0; il < n_layer; il++) {
        bool is = (il + 1) % every != 0;
        if (e) {
            const char *k = cJSON_IsString(e) ? e->valuestring : "";
            if (strcmp(k, other) && strcmp(k, "full_attention"))
                return ig_error(IG_E_MODEL, "'%s': layer_types[%lld] is '%.40s', expected '%s' "
                                "or 'full_attention'", c->name, (long long)il, k, other);
            is = !strcmp(k, other);
            e = e->next;
        }
        if (is)
            out[il / 8] |= (uint8_t)(1u << (il % 8));
        *n += is;
    }
    return IG_OK;
}

/* Gemma 3's local layers: sliding_window keys back from each query, on the
 * layers layer_types calls "sliding_attention", else on all but every
 * sliding_window_pattern-th (transformers: layer i is local when
 * (i + 1) % pattern != 0); their RoPE base rope_local_base_freq. */
static int read_window(const struct cfg *c, const struct model_arch_info *ai,
                       struct hf_config *out)
{
    struct model_hparams *hp = &out->hp;
    int64_t window, every;
    int st;
    if ((st = get_int(c, "sliding_window", -1, 1, HF_MAX_DIM, &window)) ||
        (st = get_int(c, "sliding_window_pattern", ai->swa_pattern, 1, HF_MAX_LAYERS, &every)) ||
        (st = get_pos_float(c, "rope_local_base_freq", ai->rope_base_local,
                            &hp->rope[MODEL_ROPE_LOCAL].base)))
        return st;
    hp->n_swa = window;
    if ((st = layer_kinds(c, hp->n_layer, every, "sliding_attention", out->local,
                          &hp->n_swa_layers)))
        return st;
    if (ai->swa_rope_scaled) /* gpt-oss: local layers rotate as the global ones */
        hp->rope[MODEL_ROPE_LOCAL] = hp->rope[MODEL_ROPE_GLOBAL];
    return IG_OK;
}

/* A mixture of experts (Qwen3MoeConfig): num_experts, num_experts_per_tok,
 * moe_intermediate_size, norm_topk_prob; every layer sparse (a
 * decoder_sparse_step other than 1 or mlp_only_layers would make some
 * layers dense: refused). */
static int read_moe(const struct cfg *c, struct model_hparams *hp)
{
    int st;
    int64_t step;
    if (HF_MXFP4_EXPERTS(c->a)) { /* GptOssConfig: every layer's experts; top-k softmaxed */
        hp->moe_norm_topk = true;
        if ((st = get_int(c, "num_local_experts", -1, 1, MODEL_MAX_EXPERTS, &hp->n_expert)) ||
            (st = get_int(c, "num_experts_per_tok", -1, 1, hp->n_expert, &hp->n_expert_used)))
            return st;
        hp->n_ff_exp = hp->n_ff;
        return IG_OK;
    }
    if ((st = get_int(c, "num_experts", -1, 1, MODEL_MAX_EXPERTS, &hp->n_expert)) ||
        (st = get_int(c, "num_experts_per_tok", -1, 1, hp->n_expert, &hp->n_expert_used)) ||
        (st = get_int(c, "moe_intermediate_size", -1, 1, HF_MAX_DIM, &hp->n_ff_exp)) ||
        (st = get_bool(c, "norm_topk_prob", false, &hp->moe_norm_topk)) ||
        (st = get_int(c, "decoder_sparse_step", 1, 0, HF_MAX_LAYERS, &step)))
        return st;
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(c->j, "mlp_only_layers");
    if (step != 1 || (dense && !cJSON_IsNull(dense) && cJSON_GetArraySize(dense) > 0))
        return ig_error(IG_E_MODEL, "'%s': dense layers among the experts' (decoder_sparse_step "
                        "%lld, mlp_only_layers) are not supported", c->name, (long long)step);
    return IG_OK;
}

/* rope_parameters' member `key` (transformers 5 keeps rope_theta and
 * partial_rotary_factor there), else the config's own, else `def`. */
static int get_rope_param(const struct cfg *c, const char *key, double def, double *out)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
    if (cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, key)) {
        struct cfg sub = {c->name, rp, NULL};
        return get_pos_float(&sub, key, def, out);
    }
    return get_pos_float(c, key, def, out);
}

/* Qwen3.5's gated DeltaNet (Qwen3_5TextConfig): linear_* sizes (key and
 * value heads of one head dim, value heads a multiple of key heads),
 * which layers are DeltaNet (layer_types, else full_attention_interval),
 * the attention's partial RoPE (partial_rotary_factor of head_dim: text
 * positions make the multi-section RoPE plain half-split RoPE); a MoE
 * model's shared expert and its always-renormalized routing. */
static int read_deltanet(const struct cfg *c, const struct model_arch_info *ai,
                         struct hf_config *out)
{
    struct model_hparams *hp = &out->hp;
    int64_t vd, every;
    double prf;
    int st;
    if ((st = get_int(c, "linear_conv_kernel_dim", -1, 1, 64, &hp->dn_conv)) ||
        (st = get_int(c, "linear_key_head_dim", -1, 1, 1024, &hp->dn_head_dim)) ||
        (st = get_int(c, "linear_value_head_dim", -1, 1, 1024, &vd)) ||
        (st = get_int(c, "linear_num_key_heads", -1, 1, 4096, &hp->dn_k_heads)) ||
        (st = get_int(c, "linear_num_value_heads", -1, 1, 4096, &hp->dn_v_heads)) ||
        (st = get_int(c, "full_attention_interval", 4, 1, HF_MAX_LAYERS, &every)) ||
        (st = get_rope_param(c, "partial_rotary_factor", 0.25, &prf)) ||
        (st = get_rope_param(c, "rope_theta", 10000.0, &hp->rope_base)))
        return st;
    if (vd != hp->dn_head_dim || hp->dn_v_heads % hp->dn_k_heads)
        return ig_error(IG_E_MODEL, "'%s': linear_value_head_dim %lld must equal "
                        "linear_key_head_dim %lld and linear_num_value_heads %lld be a multiple "
                        "of linear_num_key_heads %lld", c->name, (long long)vd,
                        (long long)hp->dn_head_dim, (long long)hp->dn_v_heads,
                        (long long)hp->dn_k_heads);
    hp->rope[MODEL_ROPE_GLOBAL].base = hp->rope_base;
    hp->n_rot = (int64_t)(hp->head_dim * prf);
    if (prf > 1 || hp->n_rot < 2 || hp->n_rot % 2)
        return ig_error(IG_E_MODEL, "'%s': partial_rotary_factor %g of head_dim %lld is not an "
                        "even number of dims", c->name, prf, (long long)hp->head_dim);
    hp->full_attn_every = every;
    hp->has_attn_gate = true;
    int64_t n_recurrent;
    if ((st = layer_kinds(c, hp->n_layer, every, "linear_attention", out->recurrent,
                          &n_recurrent)))
        return st;
    if (!(ai->features & MODEL_FEAT_MOE_SHEXP))
        return IG_OK;
    hp->moe_norm_topk = true; /* Qwen3_5MoeTopKRouter divides by the top k's sum */
    return get_int(c, "shared_expert_intermediate_size", -1, 1, HF_MAX_DIM, &hp->n_ff_shexp);
}

/* One entry of Gemma 4's rope_parameters (keyed by layer kind; absent:
 * Gemma4TextConfig's default): its rope_theta into *base and, for the
 * full_attention layers ("proportional" allowed), its rotated pairs of
 * head_dim / 2 into *pairs as transformers' _compute_proportional_rope_
 * parameters counts them (int(partial_rotary_factor * head_dim // 2)). */
static int gemma4_rope(const struct cfg *c, const char *kind, double def_base, int64_t head_dim,
                       double *base, int64_t *pairs)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
    const cJSON *e = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, kind) : NULL;
    bool full = !strcmp(kind, "full_attention");
    *base = def_base;
    *pairs = full ? (int64_t)floor(0.25 * (double)head_dim / 2) : head_dim / 2;
    if (!e || cJSON_IsNull(e))
        return IG_OK;
    const char *type = ig_json_str(e, "rope_type");
    if (!cJSON_IsObject(e) || !type ||
        (strcmp(type, "default") && !(full && !strcmp(type, "proportional"))))
        return ig_error(IG_E_MODEL, "'%s': rope_parameters.%s must be an object with rope_type "
                        "'default'%s (found '%.40s')", c->name, kind,
                        full ? " or 'proportional'" : "", type ? type : "?");
    struct cfg sub = {c->name, e, NULL};
    double prf, factor;
    int st;
    if ((st = get_pos_float(&sub, "rope_theta", def_base, base)) ||
        (st = get_pos_float(&sub, "partial_rotary_factor", 1.0, &prf)) ||
        (st = get_pos_float(&sub, "factor", 1.0, &factor)))
        return st;
    bool proportional = !strcmp(type, "proportional");
    if (factor != 1 || prf > 1 || (!proportional && prf != 1))
        return ig_error(IG_E_MODEL, "'%s': rope_parameters.%s: factor %g, partial_rotary_factor "
                        "%g are not supported (factor 1; a partial factor on 'proportional' "
                        "only)", c->name, kind, factor, prf);
    *pairs = proportional ? (int64_t)floor(prf * (double)head_dim / 2) : head_dim / 2;
    return IG_OK;
}

/* Gemma 4 (Gemma4TextConfig): head_dim on the sliding layers, global_head_dim
 * (and with attention_k_eq_v, num_global_key_value_heads and V = K) on the
 * full ones; the last num_kv_shared_layers reading the K/V of the last
 * earlier layer of their kind, their FFN twice as wide with
 * use_double_wide_mlp; per-layer embeddings of hidden_size_per_layer_input
 * (0: none); rope_parameters per kind; V normed, a layer_scalar each,
 * softmax scale 1. The last layer is full_attention whatever layer_types
 * says (its __post_init__ forces it). With enable_moe_block, every layer's
 * mixture of experts beside its dense MLP (Gemma4TextRouter: num_experts,
 * top_k_experts renormalized, moe_intermediate_size). */
static int read_gemma4(const struct cfg *c, struct hf_config *out)
{
    struct model_hparams *hp = &out->hp;
    int64_t hd_global, shared, ple, ple_vocab, kv_global = -1;
    bool moe, wide;
    int st;
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(c->j, "use_bidirectional_attention");
    if (bi && !cJSON_IsNull(bi) && !(cJSON_IsString(bi) && !strcmp(bi->valuestring, "vision")))
        return ig_error(IG_E_MODEL, "'%s': use_bidirectional_attention must be null or \"vision\" "
                        "(text attends causally); other values are not a decoder", c->name);
    if ((st = get_bool(c, "enable_moe_block", false, &moe)))
        return st;
    if (moe && ((st = get_int(c, "num_experts", -1, 1, MODEL_MAX_EXPERTS, &hp->n_expert)) ||
                (st = get_int(c, "top_k_experts", -1, 1, hp->n_expert, &hp->n_expert_used)) ||
                (st = get_int(c, "moe_intermediate_size", -1, 1, HF_MAX_DIM, &hp->n_ff_exp))))
        return st;
    hp->moe_norm_topk = moe; /* top_k_weights /= their sum */
    if ((st = get_int(c, "global_head_dim", -1, 2, HF_MAX_DIM, &hd_global)) ||
        (st = get_int(c, "num_kv_shared_layers", 0, 0, hp->n_layer - 1, &shared)) ||
        (st = get_int(c, "hidden_size_per_layer_input", -1, 0, HF_MAX_DIM / hp->n_layer, &ple)) ||
        (st = get_int(c, "vocab_size_per_layer_input", hp->n_vocab, 1, HF_MAX_DIM, &ple_vocab)) ||
        (st = get_bool(c, "attention_k_eq_v", false, &out->gemma4.k_eq_v)) ||
        (st = get_bool(c, "use_double_wide_mlp", false, &wide)))
        return st;
    const cJSON *kvg = cJSON_GetObjectItemCaseSensitive(c->j, "num_global_key_value_heads");
    if (out->gemma4.k_eq_v && kvg && !cJSON_IsNull(kvg) &&
        (st = get_int(c, "num_global_key_value_heads", -1, 1, hp->n_head, &kv_global)))
        return st;
    out->gemma4.n_kv_global = kv_global > 0 ? kv_global : hp->n_head_kv;
    if (hd_global % 2 || hp->n_head % out->gemma4.n_kv_global)
        return ig_error(IG_E_MODEL, "'%s': global_head_dim %lld must be even and "
                        "num_attention_heads %lld a multiple of the full layers' %lld KV heads",
                        c->name, (long long)hd_global, (long long)hp->n_head,
                        (long long)out->gemma4.n_kv_global);
    if (ple && ple_vocab != hp->n_vocab)
        return ig_error(IG_E_MODEL, "'%s': vocab_size_per_layer_input %lld differs from "
                        "vocab_size %lld (not supported)", c->name, (long long)ple_vocab,
                        (long long)hp->n_vocab);
    hp->head_dim_local = hp->n_rot_local = hp->head_dim;
    hp->head_dim = hp->n_rot = hd_global;
    hp->n_kv_shared = shared;
    hp->n_embd_per_layer = ple;
    hp->has_v_norm = true;
    hp->attn_scale = 1.0;
    out->gemma4.n_ff_shared = wide ? 2 * hp->n_ff : hp->n_ff;
    int64_t last = hp->n_layer - 1, pairs;
    if (out->local[last / 8] >> (last % 8) & 1) { /* transformers forces it full */
        out->local[last / 8] &= (uint8_t)~(1u << (last % 8));
        hp->n_swa_layers--;
    }
    if ((st = gemma4_rope(c, "sliding_attention", 10000.0, hp->head_dim_local,
                          &hp->rope[MODEL_ROPE_LOCAL].base, &pairs)) ||
        (st = gemma4_rope(c, "full_attention", 1000000.0, hd_global,
                          &hp->rope[MODEL_ROPE_GLOBAL].base, &out->gemma4.rot_pairs)))
        return st;
    model_features_set(hp, model_features(hp) | MODEL_FEAT_OUT_SCALE |
                               (ple ? MODEL_FEAT_PLE : 0u) |
                               (moe ? MODEL_FEAT_MOE | MODEL_FEAT_MOE_MLP : 0u));
    return IG_OK;
}

/* What the architecture's row of models/arch.c adds to the Llama block, with
 * config.json's values where it has keys for them. */
static int read_arch_extras(const struct cfg *c, const struct model_arch_info *ai,
                            struct hf_config *out)
{
    struct model_hparams *hp = &out->hp;
    /* the architecture's weights; an output head of its own unless tied */
    model_features_set(hp, ai->features | (hp->tied_embeddings ? 0u : MODEL_FEAT_OUTPUT));
    hp->ffn_act = ai->act;
    hp->embd_scale = ai->embd_scale_sqrt ? sqrt((double)hp->n_embd) : 1.0;
    int st;
    if ((ai->features & MODEL_FEAT_MOE) && (st = read_moe(c, hp)))
        return st;
    if ((ai->features & MODEL_FEAT_DELTANET) && (st = read_deltanet(c, ai, out)))
        return st;
    double qpas = 0;
    if ((st = get_pos_float(c, "query_pre_attn_scalar", 0, &qpas)))
        return st;
    if (qpas > 0) /* Gemma: scores scaled by query_pre_attn_scalar^-0.5 */
        hp->attn_scale = 1.0 / sqrt(qpas);
    if ((st = get_pos_float(c, "attn_logit_softcapping", 0, &hp->attn_softcap)) ||
        (st = get_pos_float(c, "final_logit_softcapping", 0, &hp->final_softcap)) ||
        (st = read_rope(c, out)))
        return st;
    if (ai->swa_pattern && (st = read_window(c, ai, out)))
        return st;
    return ai->per_layer_shapes ? read_gemma4(c, out) : IG_OK;
}

static int read_dims(const struct cfg *c, struct model_hparams *hp)
{
    int st;
    /* a mixture of experts may have no dense width (Qwen3_5MoeTextConfig) */
    int64_t ff_def = model_arch_of(c->a->id)->features & MODEL_FEAT_MOE ? 0 : -1;
    if ((st = get_int(c, "num_hidden_layers", -1, 1, HF_MAX_LAYERS, &hp->n_layer)) ||
        (st = get_int(c, "hidden_size", -1, 1, HF_MAX_DIM, &hp->n_embd)) ||
        (st = get_int(c, "num_attention_heads", -1, 1, HF_MAX_DIM, &hp->n_head)) ||
        (st = get_int(c, "num_key_value_heads", hp->n_head, 1, HF_MAX_DIM, &hp->n_head_kv)) ||
        (st = get_int(c, "intermediate_size", ff_def, 1, HF_MAX_DIM, &hp->n_ff)) ||
        (st = get_int(c, "vocab_size", -1, 1, HF_MAX_DIM, &hp->n_vocab)) ||
        (st = get_int(c, "max_position_embeddings", -1, 1, INT64_C(1) << 30, &hp->n_ctx_train)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return ig_error(IG_E_MODEL, "'%s': %lld attention heads are not a multiple of %lld KV "
                        "heads", c->name, (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t def = hp->n_embd % hp->n_head ? -1 : hp->n_embd / hp->n_head;
    if ((st = get_int(c, "head_dim", def, 2, HF_MAX_DIM, &hp->head_dim)))
        return st;
    if (hp->head_dim % 2)
        return ig_error(IG_E_MODEL, "'%s': head_dim %lld is odd (RoPE rotates pairs)", c->name,
                        (long long)hp->head_dim);
    hp->n_rot = hp->head_dim;
    return IG_OK;
}

int hf_parse_config(const char *name, const cJSON *root, struct hf_config *out)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(root))
        return ig_error(IG_E_MODEL, "'%s': expected a JSON object", name);
    const struct hf_arch *a = NULL;
    int st = find_arch(name, root, &a);
    if (st)
        return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    const char *method = q && !cJSON_IsNull(q) ? ig_json_str(q, "quant_method") : NULL;
    if (q && !cJSON_IsNull(q) && !(HF_MXFP4_EXPERTS(a) && method && !strcmp(method, "mxfp4")))
        return ig_error(IG_E_MODEL, "'%s': the weights are quantized (quantization_config, "
                        "method '%.40s'); ignite reads F32, F16 and BF16 folders%s: use a GGUF "
                        "of this model", name, method ? method : "?",
                        HF_MXFP4_EXPERTS(a) ? " (gpt-oss: and MXFP4 experts)" : "");
    struct cfg c = {name, root, a};
    if (a->text_config) {
        c.j = cJSON_GetObjectItemCaseSensitive(root, a->text_config);
        if (!cJSON_IsObject(c.j))
            return ig_error(IG_E_MODEL, "'%s': '%s' (the text model's settings) is missing",
                            name, a->text_config);
    }
    struct model_hparams *hp = &out->hp;
    snprintf(hp->arch, sizeof hp->arch, "%s", a->arch);
    if ((st = check_unsupported(&c, a)) || (st = read_dims(&c, hp)) ||
        (st = get_pos_float(&c, "rope_theta", 10000.0, &hp->rope_base)) ||
        (st = get_pos_float(&c, "rms_norm_eps", a->eps_default, &hp->norm_eps)) ||
        (st = get_bool(&c, "tie_word_embeddings", a->tie_default, &hp->tied_embeddings)))
        return st;
    /* tie_word_embeddings sits at the top level even when the rest is in text_config */
    if (c.j != root && !cJSON_GetObjectItemCaseSensitive(c.j, "tie_word_embeddings")) {
        struct cfg top = {name, root, a};
        if ((st = get_bool(&top, "tie_word_embeddings", a->tie_default, &hp->tied_embeddings)))
            return st;
    }
    hp->rope_style = ROPE_HALF_SPLIT;
    hp->arch_id = a->id;
    model_hparams_set_defaults(hp); /* plain RoPE, the Llama block's scales */
    if ((st = read_arch_extras(&c, model_arch_of(a->id), out)))
        return st;
    out->arch = a;
    return IG_OK;
}

int hf_parse_generation(const char *name, const cJSON *root, struct model_sampling *s)
{
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(root))
        return ig_error(IG_E_MODEL, "'%s': expected a JSON object", name);
    struct cfg c = {name, root, NULL};
    int64_t k;
    bool do_sample = true;
    int st;
    if ((st = get_bool(&c, "do_sample", true, &do_sample)))
        return st;
    const struct {
        const char *key;
        double lo, hi;
        bool *has;
        double *v;
    } f[] = {
        {"temperature", 0, 1e6, &s->has_temperature, &s->temperature},
        {"top_p", 0, 1, &s->has_top_p, &s->top_p},
        {"min_p", 0, 1, &s->has_min_p, &s->min_p},
        {"repetition_penalty", 1e-3, 1e3, &s->has_repeat_penalty, &s->repeat_penalty},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, f[i].key);
        if (!v || cJSON_IsNull(v))
            continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= f[i].lo && v->valuedouble <= f[i].hi))
            return ig_error(IG_E_MODEL, "'%s': '%s' must be a number from %g to %g", name,
                            f[i].key, f[i].lo, f[i].hi);
        *f[i].has = true;
        *f[i].v = v->valuedouble;
    }
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(root, "top_k");
    if (tk && !cJSON_IsNull(tk)) {
        if ((st = get_int(&c, "top_k", 0, 0, INT32_MAX, &k)))
            return st;
        s->has_top_k = true;
        s->top_k = k;
    }
    if (!do_sample) { /* transformers then decodes greedily whatever the rest says */
        s->has_temperature = true;
        s->temperature = 0;
    }
    return IG_OK;
}

const char *hf_chat_template(const cJSON *root)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(t))
        return t->valuestring;
    if (!cJSON_IsArray(t))
        return NULL;
    const char *first = NULL;
    for (const cJSON *e = t->child; e; e = e->next) {
        const char *n = ig_json_str(e, "name"), *x = ig_json_str(e, "template");
        if (!x)
            continue;
        if (n && !strcmp(n, "default"))
            return x;
        if (!first)
            first = x;
    }
    return first;
}
