/* models/hf_config.c: the architectures a Hugging Face folder may hold and
 * config.json -> struct model_hparams (plus generation_config.json's
 * sampling defaults and tokenizer_config.json's chat template). Works on
 * parsed JSON only, so the fuzz target drives it without files; opening
 * the files and binding tensors is hf_model.c's job.
 *
 * HF checkpoints keep Q and K rows in the order of HF's rotate-half RoPE
 * (dimension i pairs with i + head_dim/2); llama.cpp's converter permutes
 * them for GGUF's adjacent-pair RoPE. A folder is mapped, not rewritten, so
 * every architecture here runs with ROPE_HALF_SPLIT over the rows as stored.
 * Covered by tests/models/test_hf_folder.py and test_hf_malformed.py. */
#include "models/hf.h"

#include "core/json.h"
#include "core/status.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* A dimension larger than this is not a model ignite can run (as model.c). */
#define HF_MAX_DIM (INT64_C(1) << 24)

#define LAYER(f) offsetof(struct model_layer, f)

/* Llama, Mistral and Qwen2 name their layers alike; Qwen2 adds biases. */
static const struct hf_layer_tensor llama_layer[] = {
    {"input_layernorm.weight", LAYER(attn_norm), HF_DIM_ONE, HF_DIM_EMBD, HF_NORM},
    {"self_attn.q_proj.weight", LAYER(wq), HF_DIM_Q, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.k_proj.weight", LAYER(wk), HF_DIM_KV, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.v_proj.weight", LAYER(wv), HF_DIM_KV, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.o_proj.weight", LAYER(wo), HF_DIM_EMBD, HF_DIM_Q, HF_MATRIX},
    {"post_attention_layernorm.weight", LAYER(ffn_norm), HF_DIM_ONE, HF_DIM_EMBD, HF_NORM},
    {"mlp.gate_proj.weight", LAYER(w_gate), HF_DIM_FF, HF_DIM_EMBD, HF_MATRIX},
    {"mlp.up_proj.weight", LAYER(w_up), HF_DIM_FF, HF_DIM_EMBD, HF_MATRIX},
    {"mlp.down_proj.weight", LAYER(w_down), HF_DIM_EMBD, HF_DIM_FF, HF_MATRIX},
    {NULL, 0, 0, 0, 0},
};

static const struct hf_layer_tensor qwen2_layer[] = {
    {"input_layernorm.weight", LAYER(attn_norm), HF_DIM_ONE, HF_DIM_EMBD, HF_NORM},
    {"self_attn.q_proj.weight", LAYER(wq), HF_DIM_Q, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.q_proj.bias", LAYER(bq), HF_DIM_ONE, HF_DIM_Q, HF_BIAS},
    {"self_attn.k_proj.weight", LAYER(wk), HF_DIM_KV, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.k_proj.bias", LAYER(bk), HF_DIM_ONE, HF_DIM_KV, HF_BIAS},
    {"self_attn.v_proj.weight", LAYER(wv), HF_DIM_KV, HF_DIM_EMBD, HF_MATRIX},
    {"self_attn.v_proj.bias", LAYER(bv), HF_DIM_ONE, HF_DIM_KV, HF_BIAS},
    {"self_attn.o_proj.weight", LAYER(wo), HF_DIM_EMBD, HF_DIM_Q, HF_MATRIX},
    {"post_attention_layernorm.weight", LAYER(ffn_norm), HF_DIM_ONE, HF_DIM_EMBD, HF_NORM},
    {"mlp.gate_proj.weight", LAYER(w_gate), HF_DIM_FF, HF_DIM_EMBD, HF_MATRIX},
    {"mlp.up_proj.weight", LAYER(w_up), HF_DIM_FF, HF_DIM_EMBD, HF_MATRIX},
    {"mlp.down_proj.weight", LAYER(w_down), HF_DIM_EMBD, HF_DIM_FF, HF_MATRIX},
    {NULL, 0, 0, 0, 0},
};

/* The defaults are those of transformers' config classes (LlamaConfig:
 * rms_norm_eps 1e-6, tie_word_embeddings false; Qwen2Config the same). */
static const struct hf_arch archs[] = {
    {"LlamaForCausalLM", "llama", NULL, "model.", "lm_head.weight", llama_layer, "silu",
     false, false, false, 1e-6},
    {"MistralForCausalLM", "llama", NULL, "model.", "lm_head.weight", llama_layer, "silu",
     false, false, false, 1e-6},
    {"Qwen2ForCausalLM", "qwen2", NULL, "model.", "lm_head.weight", qwen2_layer, "silu",
     true, false, false, 1e-6},
};

/* rope_scaling kinds the forward computes; "default" is plain RoPE. */
static const char *const rope_kinds[] = {"default"};

const char *hf_arch_names(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";
}

/* Everything a config step needs to name the file in a message. */
struct cfg {
    const char *name; /* the file */
    const cJSON *j;   /* the object holding the text model's settings */
};

/* A whole number in [lo, hi]; `def` < 0 means required. A JSON null counts
 * as absent (Mistral writes "head_dim": null). */
static int get_int(const struct cfg *c, const char *key, int64_t def, int64_t lo, int64_t hi,
                   int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0)
            return ig_error(IG_E_MODEL, "%s: '%s' is missing", c->name, key);
        *out = def;
        return IG_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return ig_error(IG_E_MODEL, "%s: '%s' must be a whole number from %lld to %lld",
                        c->name, key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return IG_OK;
}

static int get_pos_float(const struct cfg *c, const char *key, double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return IG_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return ig_error(IG_E_MODEL, "%s: '%s' must be a positive number", c->name, key);
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
        return ig_error(IG_E_MODEL, "%s: '%s' must be true or false", c->name, key);
    *out = cJSON_IsTrue(v);
    return IG_OK;
}

static int find_arch(const char *name, const cJSON *root, const struct hf_arch **out)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!cJSON_IsArray(a) || !a->child)
        return ig_error(IG_E_MODEL, "%s: 'architectures' is missing (a list naming the "
                        "model class, such as [\"LlamaForCausalLM\"])", name);
    for (const cJSON *e = a->child; e; e = e->next)
        for (size_t k = 0; cJSON_IsString(e) && k < sizeof archs / sizeof archs[0]; k++)
            if (!strcmp(e->valuestring, archs[k].name)) {
                *out = &archs[k];
                return IG_OK;
            }
    const char *first = cJSON_IsString(a->child) ? a->child->valuestring : "?";
    return ig_error(IG_E_MODEL, "%s: architecture '%.80s' is not supported (supported: %s)",
                    name, first, hf_arch_names());
}

/* Refuses settings the forward would silently get wrong. */
static int check_unsupported(const struct cfg *c, const struct hf_arch *a)
{
    const char *act = ig_json_str(c->j, "hidden_act");
    if (!act)
        act = ig_json_str(c->j, "hidden_activation");
    if (act && strcmp(act, a->act))
        return ig_error(IG_E_MODEL, "%s: hidden_act '%.40s' is not supported (%s computes %s)",
                        c->name, act, a->name, a->act);
    bool b;
    int st;
    if ((st = get_bool(c, "attention_bias", false, &b)))
        return st;
    if (b && !a->qkv_bias)
        return ig_error(IG_E_MODEL, "%s: attention_bias true (biases on Q, K, V and the "
                        "output projection) is not supported", c->name);
    if ((st = get_bool(c, "mlp_bias", false, &b)))
        return st;
    if (b)
        return ig_error(IG_E_MODEL, "%s: mlp_bias true is not supported", c->name);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->j, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        const char *kind = ig_json_str(rs, "rope_type");
        if (!kind)
            kind = ig_json_str(rs, "type");
        if (!cJSON_IsObject(rs) || !kind)
            return ig_error(IG_E_MODEL, "%s: rope_scaling must be null or an object with a "
                            "'rope_type'", c->name);
        size_t k = 0;
        while (k < sizeof rope_kinds / sizeof rope_kinds[0] && strcmp(kind, rope_kinds[k]))
            k++;
        if (k == sizeof rope_kinds / sizeof rope_kinds[0])
            return ig_error(IG_E_MODEL, "%s: rope_scaling type '%.40s' is not supported yet "
                            "(only plain RoPE is)", c->name, kind);
    }
    return IG_OK;
}

static int read_dims(const struct cfg *c, struct model_hparams *hp)
{
    int st;
    if ((st = get_int(c, "num_hidden_layers", -1, 1, 4096, &hp->n_layer)) ||
        (st = get_int(c, "hidden_size", -1, 1, HF_MAX_DIM, &hp->n_embd)) ||
        (st = get_int(c, "num_attention_heads", -1, 1, HF_MAX_DIM, &hp->n_head)) ||
        (st = get_int(c, "num_key_value_heads", hp->n_head, 1, HF_MAX_DIM, &hp->n_head_kv)) ||
        (st = get_int(c, "intermediate_size", -1, 1, HF_MAX_DIM, &hp->n_ff)) ||
        (st = get_int(c, "vocab_size", -1, 1, HF_MAX_DIM, &hp->n_vocab)) ||
        (st = get_int(c, "max_position_embeddings", -1, 1, INT64_C(1) << 30, &hp->n_ctx_train)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return ig_error(IG_E_MODEL, "%s: %lld attention heads are not a multiple of %lld KV "
                        "heads", c->name, (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t def = hp->n_embd % hp->n_head ? -1 : hp->n_embd / hp->n_head;
    if ((st = get_int(c, "head_dim", def, 2, HF_MAX_DIM, &hp->head_dim)))
        return st;
    if (hp->head_dim % 2)
        return ig_error(IG_E_MODEL, "%s: head_dim %lld is odd (RoPE rotates pairs)", c->name,
                        (long long)hp->head_dim);
    hp->n_rot = hp->head_dim;
    return IG_OK;
}

int hf_parse_config(const char *name, const cJSON *root, struct hf_config *out)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(root))
        return ig_error(IG_E_MODEL, "%s: expected a JSON object", name);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (q && !cJSON_IsNull(q)) {
        const char *method = ig_json_str(q, "quant_method");
        return ig_error(IG_E_MODEL, "%s: the weights are quantized (quantization_config, "
                        "method '%.40s'); ignite reads F32, F16 and BF16 folders: use a GGUF "
                        "of this model", name, method ? method : "?");
    }
    const struct hf_arch *a = NULL;
    int st = find_arch(name, root, &a);
    if (st)
        return st;
    struct cfg c = {name, root};
    if (a->text_config) {
        c.j = cJSON_GetObjectItemCaseSensitive(root, a->text_config);
        if (!cJSON_IsObject(c.j))
            return ig_error(IG_E_MODEL, "%s: '%s' (the text model's settings) is missing",
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
        struct cfg top = {name, root};
        if ((st = get_bool(&top, "tie_word_embeddings", a->tie_default, &hp->tied_embeddings)))
            return st;
    }
    hp->rope_style = ROPE_HALF_SPLIT;
    hp->has_qkv_bias = a->qkv_bias;
    hp->arch_id = a->qkv_bias ? MODEL_ARCH_QWEN2 : MODEL_ARCH_LLAMA;
    model_hparams_set_defaults(hp); /* plain RoPE, the Llama block's scales */
    out->arch = a;
    return IG_OK;
}

int hf_parse_generation(const char *name, const cJSON *root, struct model_sampling *s)
{
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(root))
        return ig_error(IG_E_MODEL, "%s: expected a JSON object", name);
    struct cfg c = {name, root};
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
            return ig_error(IG_E_MODEL, "%s: '%s' must be a number from %g to %g", name,
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
