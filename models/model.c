/* models/model.c: a parsed GGUF -> struct model for the architectures of
 * models/arch.c (a directory goes to hf_model.c instead), and the accessors
 * that answer for either format.
 *
 * Reads <arch>.* hyper-parameters (the file's, else the architecture's
 * defaults), checks them for sense, walks the table of tensors
 * (models/tensors.h) to find every weight by its llama.cpp name and check
 * its shape and type, then works out the RoPE variants
 * (rope.scaling.*, rope_freqs) and which layers are local (sliding window).
 * It leaves the bytes where they are (mmapped). The GGUF parser (gguf.c)
 * has already checked that every tensor lies inside the file and that the
 * known keys have the right types.
 * Covered by tests/models/test_info.py, test_gguf_malformed.py and
 * test_arch_load.py. */
#include "models/model.h"

#include "models/arch.h"
#include "models/gguf_impl.h"
#include "models/hf.h"

#include "core/status.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A dimension larger than this is not a model ignite can run (and products
 * of two such stay far from overflow). */
#define MODEL_MAX_DIM (INT64_C(1) << 24)

/* Weights are read in place; every tensor must start on this boundary. */
#define MODEL_DATA_ALIGN 4

/* Everything a loader step needs to name the file in a message. */
struct loader {
    const char *path;
    const struct gguf_file *g;
    struct model_hparams *hp;
    const struct model_arch_info *ai;
    unsigned features; /* the architecture's, and those its keys turn on (per-layer
                          embeddings); their weights are required */
};

/* <arch>.<suffix> as an integer in [1, MODEL_MAX_DIM]; `def` < 0 means
 * required. An array (llama.cpp's per-layer form of head counts and FFN
 * widths) is read when every layer has the same value, or, where the
 * architecture has per-layer shapes, as its largest value (each layer's:
 * hp_int_at). */
static int hp_int(const struct loader *L, const char *suffix, int64_t def, int64_t *out)
{
    char key[96];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(L->g, key);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        /* gguf_keys.c let only arrays of integers through */
        if (kv->arr_n == 0)
            return ig_error(IG_E_MODEL, "'%s': metadata key '%s' is an empty array", L->path, key);
        int64_t first = gguf_arr_int(kv, 0);
        for (uint64_t i = 1; L->ai->per_layer_shapes && i < kv->arr_n; i++)
            first = gguf_arr_int(kv, i) > first ? gguf_arr_int(kv, i) : first;
        for (uint64_t i = 1; !L->ai->per_layer_shapes && i < kv->arr_n; i++)
            if (gguf_arr_int(kv, i) != first)
                return ig_error(IG_E_MODEL,
                                "'%s': %s differs between layers (%lld, then %lld at layer %llu); "
                                "per-layer shapes are not supported", L->path, key,
                                (long long)first, (long long)gguf_arr_int(kv, i),
                                (unsigned long long)i);
        v = first < 0 ? UINT64_MAX : (uint64_t)first;
    } else if (!gguf_get_u64(L->g, key, &v)) {
        if (def < 0)
            return ig_error(IG_E_MODEL, "'%s': metadata key '%s' is missing", L->path, key);
        *out = def;
        return IG_OK;
    }
    if (v < 1 || v > (uint64_t)MODEL_MAX_DIM)
        return ig_error(IG_E_MODEL, "'%s': %s is %llu, expected 1 to %lld", L->path, key,
                        (unsigned long long)v, (long long)MODEL_MAX_DIM);
    *out = (int64_t)v;
    return IG_OK;
}

/* Layer il's value of <arch>.<suffix>: its element of a per-layer array
 * (n_layer integers in [1, MODEL_MAX_DIM]), else `model` (hp_int's). */
static int hp_int_at(const struct loader *L, const char *suffix, int64_t il, int64_t model,
                     int64_t *out)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(L->g, key);
    *out = model;
    if (!kv || kv->type != GGUF_TYPE_ARRAY)
        return IG_OK;
    if (kv->arr_n != (uint64_t)L->hp->n_layer)
        return ig_error(IG_E_MODEL, "'%s': %s has %llu values, expected one per layer (%lld)",
                        L->path, key, (unsigned long long)kv->arr_n, (long long)L->hp->n_layer);
    int64_t v = gguf_arr_int(kv, (uint64_t)il);
    if (v < 1 || v > MODEL_MAX_DIM)
        return ig_error(IG_E_MODEL, "'%s': %s is %lld at layer %lld, expected 1 to %lld", L->path,
                        key, (long long)v, (long long)il, (long long)MODEL_MAX_DIM);
    *out = v;
    return IG_OK;
}

/* <arch>.<suffix> as a positive finite float, `def` when absent. */
static int hp_float(const struct loader *L, const char *suffix, double def, double *out)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    if (!gguf_get_f64(L->g, key, out))
        *out = def;
    if (!isfinite(*out) || *out <= 0)
        return ig_error(IG_E_MODEL, "'%s': %s is %g, expected a positive number", L->path,
                        key, *out);
    return IG_OK;
}

/* <arch>.<suffix> as a finite float >= 0 (0 meaning "off"), 0 when absent. */
static int hp_float0(const struct loader *L, const char *suffix, double *out)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    if (!gguf_get_f64(L->g, key, out))
        *out = 0;
    if (!isfinite(*out) || *out < 0)
        return ig_error(IG_E_MODEL, "'%s': %s is %g, expected 0 or a positive number", L->path,
                        key, *out);
    return IG_OK;
}

static int read_arch(struct loader *L)
{
    struct gguf_str a;
    if (!gguf_get_str(L->g, "general.architecture", &a))
        return ig_error(IG_E_MODEL, "'%s': metadata key 'general.architecture' is missing",
                        L->path);
    L->ai = model_arch_find(a);
    if (L->ai) {
        snprintf(L->hp->arch, sizeof L->hp->arch, "%s", L->ai->name);
        L->hp->arch_id = L->ai->id;
        return IG_OK;
    }
    char buf[48];
    return ig_error(IG_E_MODEL, "'%s': architecture '%s' is not supported (supported: %s)",
                    L->path, gguf_printable(buf, sizeof buf, a), model_arch_list());
}

/* Weights every layer has, whatever its architecture. */
static int64_t layer_tensors_min(void)
{
    int n, k = 0;
    const struct model_tensor *t = model_tensor_table(&n);
    for (int i = 0; i < n; i++)
        k += t[i].scope == TENSOR_PER_LAYER && !t[i].feature && !t[i].unless && !t[i].mixers &&
             t[i].layers == TENSOR_LAYERS_ALL;
    return k;
}

/* A mixture of experts' counts: expert_count in [1, MODEL_MAX_EXPERTS],
 * expert_used_count in [1, expert_count], expert_feed_forward_length
 * (llama.cpp's default: feed_forward_length / expert_used_count). The
 * used experts' weights are renormalized: llama.cpp does for every
 * qwen3moe file. With a shared expert (qwen35moe) its width,
 * expert_shared_feed_forward_length. */
static int read_experts(const struct loader *L)
{
    struct model_hparams *hp = L->hp;
    int st;
    if ((st = hp_int(L, "expert_count", -1, &hp->n_expert)) ||
        (st = hp_int(L, "expert_used_count", -1, &hp->n_expert_used)))
        return st;
    if (hp->n_expert > MODEL_MAX_EXPERTS)
        return ig_error(IG_E_MODEL, "'%s': %s.expert_count is %lld, expected 1 to %d", L->path,
                        hp->arch, (long long)hp->n_expert, MODEL_MAX_EXPERTS);
    if (hp->n_expert_used > hp->n_expert)
        return ig_error(IG_E_MODEL, "'%s': %s.expert_used_count %lld is more than "
                        "expert_count %lld", L->path, hp->arch, (long long)hp->n_expert_used,
                        (long long)hp->n_expert);
    if ((st = hp_int(L, "expert_feed_forward_length",
                     hp->n_ff / hp->n_expert_used ? hp->n_ff / hp->n_expert_used : -1,
                     &hp->n_ff_exp)))
        return st;
    hp->moe_norm_topk = true;
    /* the shared expert's width (llama.cpp's default: feed_forward_length) */
    if ((L->ai->features & MODEL_FEAT_MOE_SHEXP) &&
        (st = hp_int(L, "expert_shared_feed_forward_length", hp->n_ff ? hp->n_ff : -1,
                     &hp->n_ff_shexp)))
        return st;
    return IG_OK;
}

/* Gated DeltaNet's sizes (llama.cpp's ssm.* keys, all required, as
 * llama.cpp requires them): ssm.conv_kernel, ssm.group_count (key heads),
 * ssm.time_step_rank (value heads, a multiple of the key heads),
 * ssm.state_size (the head dim of keys and values), ssm.inner_size (value
 * heads x head dim); full_attention_interval, default 4. */
static int read_deltanet(const struct loader *L)
{
    struct model_hparams *hp = L->hp;
    int64_t inner;
    int st;
    if ((st = hp_int(L, "ssm.conv_kernel", -1, &hp->dn_conv)) ||
        (st = hp_int(L, "ssm.group_count", -1, &hp->dn_k_heads)) ||
        (st = hp_int(L, "ssm.time_step_rank", -1, &hp->dn_v_heads)) ||
        (st = hp_int(L, "ssm.state_size", -1, &hp->dn_head_dim)) ||
        (st = hp_int(L, "ssm.inner_size", -1, &inner)) ||
        (st = hp_int(L, "full_attention_interval", 4, &hp->full_attn_every)))
        return st;
    if (hp->dn_v_heads % hp->dn_k_heads)
        return ig_error(IG_E_MODEL, "'%s': %s.ssm.time_step_rank %lld (value heads) is not a "
                        "multiple of ssm.group_count %lld (key heads)", L->path, hp->arch,
                        (long long)hp->dn_v_heads, (long long)hp->dn_k_heads);
    if (inner != hp->dn_v_heads * hp->dn_head_dim)
        return ig_error(IG_E_MODEL, "'%s': %s.ssm.inner_size %lld is not ssm.time_step_rank %lld "
                        "x ssm.state_size %lld", L->path, hp->arch, (long long)inner,
                        (long long)hp->dn_v_heads, (long long)hp->dn_head_dim);
    if (hp->dn_conv > 64 || hp->dn_head_dim > 1024 || hp->dn_v_heads > 4096)
        return ig_error(IG_E_MODEL, "'%s': %s's gated DeltaNet sizes (conv_kernel %lld, "
                        "state_size %lld, time_step_rank %lld) are past 64, 1024, 4096",
                        L->path, hp->arch, (long long)hp->dn_conv, (long long)hp->dn_head_dim,
                        (long long)hp->dn_v_heads);
    hp->has_attn_gate = true;
    return IG_OK;
}

/* Gemma 4's keys beyond gemma3's: the local layers' head dim and rotated
 * dims, the shared-KV layer count and the per-layer embedding width
 * (whose weights it then requires). */
static int read_local_shapes(const struct loader *L)
{
    struct model_hparams *hp = L->hp;
    int st;
    int64_t v_len, shared = 0, ple = 0;
    if ((st = hp_int(L, "attention.key_length_swa", hp->head_dim, &hp->head_dim_local)) ||
        (st = hp_int(L, "attention.value_length_swa", hp->head_dim_local, &v_len)) ||
        (st = hp_int(L, "rope.dimension_count_swa", hp->head_dim_local, &hp->n_rot_local)))
        return st;
    if (v_len != hp->head_dim_local)
        return ig_error(IG_E_MODEL, "'%s': %s.attention.value_length_swa %lld differs from "
                        "key_length_swa %lld (not supported)", L->path, hp->arch,
                        (long long)v_len, (long long)hp->head_dim_local);
    if (hp->n_rot_local > hp->head_dim_local || hp->n_rot_local % 2)
        return ig_error(IG_E_MODEL, "'%s': %s.rope.dimension_count_swa %lld must be even and at "
                        "most key_length_swa %lld", L->path, hp->arch,
                        (long long)hp->n_rot_local, (long long)hp->head_dim_local);
    char key[96];
    uint64_t u;
    snprintf(key, sizeof key, "%s.attention.shared_kv_layers", hp->arch);
    if (gguf_get_u64(L->g, key, &u)) {
        if (u >= (uint64_t)hp->n_layer)
            return ig_error(IG_E_MODEL, "'%s': %s is %llu, expected fewer than the %lld layers",
                            L->path, key, (unsigned long long)u, (long long)hp->n_layer);
        shared = (int64_t)u;
    }
    snprintf(key, sizeof key, "%s.embedding_length_per_layer_input", hp->arch);
    if (gguf_get_u64(L->g, key, &u)) {
        if (u > (uint64_t)MODEL_MAX_DIM / (uint64_t)hp->n_layer)
            return ig_error(IG_E_MODEL, "'%s': %s is %llu, too large for %lld layers", L->path,
                            key, (unsigned long long)u, (long long)hp->n_layer);
        ple = (int64_t)u;
    }
    hp->n_kv_shared = shared;
    hp->n_embd_per_layer = ple;
    return IG_OK;
}

static int read_hparams(struct loader *L)
{
    struct model_hparams *hp = L->hp;
    const struct model_arch_info *ai = L->ai;
    int st;
    if ((st = hp_int(L, "block_count", -1, &hp->n_layer)) ||
        (st = hp_int(L, "embedding_length", -1, &hp->n_embd)) ||
        (st = hp_int(L, "attention.head_count", -1, &hp->n_head)) ||
        (st = hp_int(L, "attention.head_count_kv", hp->n_head, &hp->n_head_kv)) ||
        /* a mixture of experts may state no dense width (qwen35moe's converter
         * writes none: its config has no intermediate_size) */
        (st = hp_int(L, "feed_forward_length", ai->features & MODEL_FEAT_MOE ? 0 : -1,
                     &hp->n_ff)) ||
        (st = hp_int(L, "context_length", -1, &hp->n_ctx_train)))
        return st;
    if (!L->ai->per_layer_shapes && hp->n_head % hp->n_head_kv)
        return ig_error(IG_E_MODEL, "'%s': %lld heads are not a multiple of %lld KV heads",
                        L->path, (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t def_head_dim = hp->n_embd % hp->n_head ? -1 : hp->n_embd / hp->n_head;
    if ((st = hp_int(L, "attention.key_length", def_head_dim, &hp->head_dim)))
        return st;
    int64_t v_len;
    if ((st = hp_int(L, "attention.value_length", hp->head_dim, &v_len)))
        return st;
    if (v_len != hp->head_dim)
        return ig_error(IG_E_MODEL,
                        "'%s': %s.attention.value_length %lld differs from key_length %lld "
                        "(not supported)", L->path, hp->arch, (long long)v_len,
                        (long long)hp->head_dim);
    if ((st = hp_int(L, "rope.dimension_count", hp->head_dim, &hp->n_rot)))
        return st;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ig_error(IG_E_MODEL,
                        "'%s': %s.rope.dimension_count %lld must be even and at most "
                        "head_dim %lld", L->path, hp->arch, (long long)hp->n_rot,
                        (long long)hp->head_dim);
    if (ai->per_layer_shapes && (st = read_local_shapes(L)))
        return st;
    if ((st = hp_float(L, "rope.freq_base", 10000.0, &hp->rope_base)) ||
        (st = hp_float(L, "attention.layer_norm_rms_epsilon", ai->norm_eps, &hp->norm_eps)) ||
        (st = hp_float0(L, "attn_logit_softcapping", &hp->attn_softcap)) ||
        (st = hp_float0(L, "final_logit_softcapping", &hp->final_softcap)))
        return st;
    char moe_key[96];
    snprintf(moe_key, sizeof moe_key, "%s.expert_count", hp->arch);
    bool moe_file = ai->moe_optional && gguf_find_kv(L->g, moe_key);
    if (((ai->features & MODEL_FEAT_MOE) || moe_file) && (st = read_experts(L)))
        return st;
    if ((ai->features & MODEL_FEAT_DELTANET) && (st = read_deltanet(L)))
        return st;

    L->features = ai->features | (hp->n_embd_per_layer > 0 ? MODEL_FEAT_PLE : 0u) |
                  (moe_file ? MODEL_FEAT_MOE | MODEL_FEAT_MOE_MLP : 0u);
    hp->rope_style = ai->rope_style;
    hp->ffn_act = ai->act;
    hp->embd_scale = ai->embd_scale_sqrt ? sqrt((double)hp->n_embd) : 1.0;
    /* Gemma 3 27B: query_pre_attn_scalar = hidden_size / num_attention_heads */
    double qpas = ai->qpas_embd_layers && hp->n_layer == ai->qpas_embd_layers
                      ? (double)(hp->n_embd / hp->n_head)
                      : (double)hp->head_dim;
    hp->attn_scale = ai->attn_scale_one ? 1.0 : 1.0 / sqrt(qpas);
    hp->has_v_norm = ai->v_norm;
    /* Each layer needs the table's rows every model has: reject absurd
     * counts before allocating. */
    if (hp->n_layer > L->g->n_tensors / layer_tensors_min())
        return ig_error(IG_E_MODEL, "'%s': %s.block_count %lld but the file has only %lld tensors",
                        L->path, hp->arch, (long long)hp->n_layer, (long long)L->g->n_tensors);
    /* A block past block_count would be left out without a word (a corrupt
     * count runs a shorter model; llama.cpp refuses the tensor count too). */
    for (int64_t i = 0; i < L->g->n_tensors; i++) {
        struct gguf_str name = L->g->tensors[i].name;
        uint64_t at = 4, blk = 0;
        if (name.len < 6 || memcmp(name.ptr, "blk.", 4))
            continue;
        for (; at < name.len && at < 4 + 18 && name.ptr[at] >= '0' && name.ptr[at] <= '9'; at++)
            blk = blk * 10 + (uint64_t)(name.ptr[at] - '0');
        if (at > 4 && at < name.len && name.ptr[at] == '.' && blk >= (uint64_t)hp->n_layer) {
            char shown[64];
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' is past %s.block_count %lld",
                            L->path, gguf_printable(shown, sizeof shown, name), hp->arch,
                            (long long)hp->n_layer);
        }
    }
    return IG_OK;
}

/* Finds `name` and checks it is n_expert x [rows, cols] (shape; 1-D when
 * rows == 1, 2-D when n_expert == 1; [cols, n_expert] for experts' vectors,
 * rows == 1: gpt-oss's expert biases) of a type ignite computes with; norms
 * and biases (f32_only) must be F32. With optional set, an absent tensor
 * leaves w zeroed and is not an error. */
static int get_weight(const struct loader *L, const char *name, const int64_t shape[3],
                      bool f32_only, bool optional, const char *hint, struct model_weight *w)
{
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t) {
        if (optional)
            return IG_OK;
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing", L->path, name);
    }
    int64_t n_expert = shape[0], rows = shape[1], cols = shape[2];
    bool vecs = rows == 1 && n_expert > 1; /* one vector per expert */
    bool shape_ok = vecs ? t->ne[0] == cols && t->ne[1] == n_expert && t->ne[2] == 1 && t->ne[3] == 1
                         : t->ne[0] == cols && t->ne[1] == rows && t->ne[2] == n_expert &&
                               t->ne[3] == 1;
    if (!shape_ok) {
        char want[64];
        if (n_expert == 1 || vecs)
            snprintf(want, sizeof want, "%lld, %lld", (long long)cols,
                     (long long)(vecs ? n_expert : rows));
        else
            snprintf(want, sizeof want, "%lld, %lld, %lld", (long long)cols, (long long)rows,
                     (long long)n_expert);
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' has shape ne=[%lld, %lld, %lld, %lld], expected "
                        "ne=[%s]%s", L->path, name, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3], want, hint ? hint : "");
    }
    const struct quant_traits *q = quant_traits_of(t->type);
    if (f32_only && t->type != QUANT_F32)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' has type %s, expected F32", L->path,
                        name, quant_type_name(t->type));
    if (!q || !q->can_dequantize)
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' has type %s, which ignite cannot compute with "
                        "(F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL IQ4_XS MXFP4)",
                        L->path, name, quant_type_name(t->type));
    /* The kernels read F32 rows as floats and block fields as 16-bit
     * halves in place: a file laid out with general.alignment 1 or 2 can
     * put them at addresses the CPU must not load them from. */
    if ((uintptr_t)t->data % MODEL_DATA_ALIGN != 0)
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' starts at a file offset that is not a multiple of "
                        "%d bytes (general.alignment %llu); re-convert the file with the "
                        "default alignment of 32", L->path, name, MODEL_DATA_ALIGN,
                        (unsigned long long)L->g->alignment);
    w->type = (enum quant_type)t->type;
    w->n_expert = n_expert;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = quant_row_bytes(w->type, cols);
    w->data = t->data;
    return IG_OK;
}

static int scaling_from_name(const struct loader *L, struct gguf_str s, enum rope_scaling *out)
{
    static const struct {
        const char *name;
        enum rope_scaling v;
    } names[] = {{"none", ROPE_SCALING_NONE}, {"linear", ROPE_SCALING_LINEAR},
                 {"yarn", ROPE_SCALING_YARN}, {"longrope", ROPE_SCALING_LONGROPE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (gguf_str_eq(s, names[i].name)) {
            *out = names[i].v;
            return IG_OK;
        }
    char buf[48];
    return ig_error(IG_E_MODEL, "'%s': %s.rope.scaling.type '%s' is not supported (supported: "
                    "none, linear, yarn, longrope)", L->path, L->hp->arch,
                    gguf_printable(buf, sizeof buf, s));
}

/* An optional [n_rot / 2] F32 tensor of per-pair frequency factors: NULL
 * when absent; every factor must be a positive finite number. */
static int read_factors(const struct loader *L, const char *name, const float **out)
{
    struct model_weight w;
    const int64_t shape[3] = {1, 1, L->hp->n_rot / 2};
    int st = get_weight(L, name, shape, true, true, NULL, &w);
    *out = w.data;
    if (st || !w.data)
        return st;
    for (int64_t i = 0; i < L->hp->n_rot / 2; i++) {
        float f;
        memcpy(&f, (const char *)w.data + 4 * i, 4);
        if (!(isfinite(f) && f > 0))
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' holds %g at %lld, expected positive "
                            "frequency factors", L->path, name, (double)f, (long long)i);
    }
    return IG_OK;
}

/* The RoPE of global layers (and the one of every layer when there are no
 * local ones) from rope.freq_base, rope.scaling.* and the factor tensors,
 * with llama.cpp's defaults: the type is "linear" when only a factor is
 * given, YaRN's ramp runs from beta_fast 32 to beta_slow 1 over the
 * dimensions that turn fewer times than that over original_context_length
 * (default context_length). Refused: yarn_log_multiplier (DeepSeek's
 * mscale_all_dim, another attention factor) and longrope. */
static int read_rope(const struct loader *L)
{
    struct model_hparams *hp = L->hp;
    struct model_rope *r = &hp->rope[MODEL_ROPE_GLOBAL];
    *r = (struct model_rope){.base = hp->rope_base, .scaling = ROPE_SCALING_NONE, .factor = 1.0,
                             .orig_ctx = hp->n_ctx_train, .attn_factor = 1.0,
                             .yarn_ext_factor = 1.0, .yarn_beta_fast = 32.0,
                             .yarn_beta_slow = 1.0};
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    struct gguf_str type;
    bool has_type = gguf_get_str(L->g, key, &type);
    double factor = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", hp->arch);
    bool has_factor = gguf_get_f64(L->g, key, &factor);
    if (!has_factor) {
        snprintf(key, sizeof key, "%s.rope.scale_linear", hp->arch);
        has_factor = gguf_get_f64(L->g, key, &factor);
    }
    int st;
    if (has_type && (st = scaling_from_name(L, type, &r->scaling)))
        return st;
    if (!has_type && has_factor && factor != 0)
        r->scaling = ROPE_SCALING_LINEAR;
    if (has_factor && factor != 0 && r->scaling != ROPE_SCALING_NONE) {
        if (!isfinite(factor) || factor < 0)
            return ig_error(IG_E_MODEL, "'%s': %s is %g, expected a positive number", L->path,
                            key, factor);
        r->factor = factor;
    }
    if ((st = hp_float(L, "rope.scaling.attn_factor", 1.0, &r->attn_factor)) ||
        (st = hp_float(L, "rope.scaling.yarn_beta_fast", 32.0, &r->yarn_beta_fast)) ||
        (st = hp_float(L, "rope.scaling.yarn_beta_slow", 1.0, &r->yarn_beta_slow)) ||
        (st = hp_int(L, "rope.scaling.original_context_length", hp->n_ctx_train, &r->orig_ctx)))
        return st;
    double ext = 1.0, log_mul = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_ext_factor", hp->arch);
    if (gguf_get_f64(L->g, key, &ext) && !(isfinite(ext) && ext >= 0))
        return ig_error(IG_E_MODEL, "'%s': %s is %g, expected 0 or a positive number", L->path,
                        key, ext);
    r->yarn_ext_factor = ext;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", hp->arch);
    if (r->scaling == ROPE_SCALING_YARN && gguf_get_f64(L->g, key, &log_mul) && log_mul != 0)
        return ig_error(IG_E_MODEL, "'%s': %s (YaRN with mscale_all_dim) is not supported",
                        L->path, key);
    /* LongRoPE picks one of two factor tensors by the run's context length
     * (llama.cpp) or the sequence's length (transformers); no architecture
     * ignite runs ships it. */
    if (r->scaling == ROPE_SCALING_LONGROPE)
        return ig_error(IG_E_MODEL, "'%s': %s.rope.scaling.type 'longrope' is not supported "
                        "(supported: none, linear, yarn, and Llama 3's rope_freqs)", L->path,
                        hp->arch);
    if ((st = read_factors(L, "rope_freqs.weight", &r->freq_factors)))
        return st;
    /* Local layers: their own base, never scaled (llama.cpp's freq_scale_swa
     * of 1 and no factors; transformers' rotary_emb_local). */
    hp->rope[MODEL_ROPE_LOCAL] = (struct model_rope){
        .base = L->ai->rope_base_local > 0 ? L->ai->rope_base_local : hp->rope_base,
        .scaling = ROPE_SCALING_NONE, .factor = 1.0, .orig_ctx = hp->n_ctx_train,
        .attn_factor = 1.0, .yarn_ext_factor = 1.0, .yarn_beta_fast = 32.0,
        .yarn_beta_slow = 1.0};
    if (L->ai->swa_rope_scaled) /* gpt-oss: the global scaling, its own base if the file says */
        hp->rope[MODEL_ROPE_LOCAL] = *r;
    return hp_float(L, "rope.freq_base_swa", hp->rope[MODEL_ROPE_LOCAL].base,
                    &hp->rope[MODEL_ROPE_LOCAL].base);
}

/* Where the architecture has per-layer shapes: each layer's head counts
 * and FFN width from the file's arrays, which layers read another's K/V
 * (llama.cpp's rule: the last shared_kv_layers layers reuse the last
 * layer with K/V of their own of the same kind, local or global), and
 * which take V from K (no attn_v of their own). */
static int read_layer_shapes(const struct loader *L, struct model *m)
{
    struct model_hparams *hp = L->hp;
    int64_t n_own = hp->n_layer - hp->n_kv_shared;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        struct model_layer *Ly = &m->layers[il];
        int st;
        if ((st = hp_int_at(L, "attention.head_count", il, hp->n_head, &Ly->n_head)) ||
            (st = hp_int_at(L, "attention.head_count_kv", il, hp->n_head_kv, &Ly->n_head_kv)) ||
            (st = hp_int_at(L, "feed_forward_length", il, hp->n_ff, &Ly->n_ff)))
            return st;
        if (L->features & MODEL_FEAT_MOE) { /* gemma4: experts and the dense MLP beside */
            Ly->ffn = LAYER_FFN_MOE;
            Ly->n_ff_mlp = Ly->n_ff;
            Ly->n_ff = hp->n_ff_exp;
            Ly->n_expert = hp->n_expert;
            Ly->n_expert_used = hp->n_expert_used;
            Ly->moe_norm_topk = hp->moe_norm_topk;
        }
        if (Ly->n_head % Ly->n_head_kv)
            return ig_error(IG_E_MODEL, "'%s': layer %lld's %lld heads are not a multiple of its "
                            "%lld KV heads", L->path, (long long)il, (long long)Ly->n_head,
                            (long long)Ly->n_head_kv);
        if (il >= n_own) {
            int64_t src = n_own - (Ly->window > 0 ? 2 : 1);
            const struct model_layer *S = src >= 0 ? &m->layers[src] : NULL;
            if (!S || S->kv_shared || (S->window > 0) != (Ly->window > 0) ||
                S->n_head_kv != Ly->n_head_kv || S->head_dim != Ly->head_dim)
                return ig_error(IG_E_MODEL, "'%s': layer %lld shares the K/V of layer %lld "
                                "(%s.attention.shared_kv_layers %lld), which is not a layer of "
                                "its kind and shape with K/V of its own", L->path, (long long)il,
                                (long long)src, hp->arch, (long long)hp->n_kv_shared);
            Ly->kv_shared = true;
            Ly->kv_source = src;
        } else if (L->ai->v_optional) {
            char name[64];
            snprintf(name, sizeof name, "blk.%lld.attn_v.weight", (long long)il);
            Ly->v_is_k = gguf_find_tensor(L->g, name) == NULL;
        }
    }
    return IG_OK;
}

/* Each layer's kind and sizes (model_arch_layer), and which layers are
 * local (sliding-window): from attention.sliding_window and
 * attention.sliding_window_pattern (an integer n: every n-th layer global,
 * llama.cpp's rule; or one bool per layer, true = local), else the
 * architecture's pattern. Without a window every layer is global. */
static int read_layer_kinds(const struct loader *L, struct model *m)
{
    struct model_hparams *hp = L->hp;
    char key[96];
    uint64_t window = 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window", hp->arch);
    bool has_window = gguf_get_u64(L->g, key, &window);
    if (has_window && window > (uint64_t)MODEL_MAX_DIM)
        return ig_error(IG_E_MODEL, "'%s': %s is %llu, expected 0 to %lld", L->path, key,
                        (unsigned long long)window, (long long)MODEL_MAX_DIM);
    /* An architecture without local layers ignores a window key, as
     * llama.cpp does (Mistral's converted files may carry one). */
    if (!L->ai->swa_pattern)
        window = 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const struct gguf_kv *pat = gguf_find_kv(L->g, key);
    int64_t every = L->ai->swa_pattern;
    if (window && pat && pat->type == GGUF_TYPE_ARRAY) {
        if (pat->arr_n != (uint64_t)hp->n_layer ||
            (pat->arr_type != GGUF_TYPE_BOOL && !gguf_type_is_int(pat->arr_type)))
            return ig_error(IG_E_MODEL, "'%s': %s should be %lld bools (one per layer), found "
                            "%llu of type %s", L->path, key, (long long)hp->n_layer,
                            (unsigned long long)pat->arr_n, gguf_type_name(pat->arr_type));
    } else if (window && pat) {
        uint64_t v;
        if (!gguf_get_u64(L->g, key, &v) || v > (uint64_t)MODEL_MAX_DIM)
            return ig_error(IG_E_MODEL, "'%s': %s should be a layer count or an array of bools",
                            L->path, key);
        every = (int64_t)v;
        pat = NULL;
    }
    /* a hybrid's recurrent layers: one bool per layer, else the interval */
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch);
    const struct gguf_kv *recr = hp->full_attn_every ? gguf_find_kv(L->g, key) : NULL;
    if (recr && (recr->type != GGUF_TYPE_ARRAY || recr->arr_n != (uint64_t)hp->n_layer ||
                 (recr->arr_type != GGUF_TYPE_BOOL && !gguf_type_is_int(recr->arr_type))))
        return ig_error(IG_E_MODEL, "'%s': %s should be %lld bools (one per layer)", L->path,
                        key, (long long)hp->n_layer);
    hp->n_swa = (int64_t)window;
    hp->n_swa_layers = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        bool recurrent = hp->full_attn_every && (il + 1) % hp->full_attn_every != 0;
        if (recr)
            recurrent = recr->arr_type == GGUF_TYPE_BOOL ? recr->arr_data[il] != 0
                                                         : gguf_arr_int(recr, (uint64_t)il) != 0;
        bool local;
        if (!window)
            local = false;
        else if (pat)
            local = pat->arr_type == GGUF_TYPE_BOOL ? pat->arr_data[il] != 0
                                                    : gguf_arr_int(pat, (uint64_t)il) != 0;
        else
            local = every == 0 || il % every < every - 1;
        model_arch_layer_at(L->ai, hp, local, recurrent, &m->layers[il]);
        hp->n_swa_layers += local;
    }
    return L->ai->per_layer_shapes ? read_layer_shapes(L, m) : IG_OK;
}

/* The features the architecture lacks but a file shows by holding their
 * weights (Q/K/V biases in a llama file, an output head of its own): on
 * where the feature's first weight is there (in layer 0 for a layer's),
 * and then every layer must have all of its weights, else none. */
static int shown_features(const struct loader *L, const struct model *m, unsigned *shown)
{
    unsigned decided = L->features;
    *shown = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_ABSENT);
         model_tensors_next(&it);) {
        unsigned f = it.t->feature;
        if (!it.t->file_shows || (L->features & f))
            continue;
        if (!(decided & f)) {
            decided |= f;
            *shown |= it.w->data ? f : 0u;
        }
        if ((it.w->data != NULL) != ((*shown & f) != 0))
            return ig_error(IG_E_MODEL, "'%s': layer %lld has only some of the %s (all layers "
                            "need all of them or none)", L->path, (long long)it.layer,
                            model_feature_name(f));
    }
    return IG_OK;
}

/* llama.cpp's converter writes a layer's gate and up experts fused, as
 * blk.N.ffn_gate_up_exps.weight, ne [n_embd, 2 n_ff_exp, n_expert]: each
 * expert's gate rows, then its up rows (llama.cpp's build_moe_ffn views
 * them at 0 and n_ff). Binds the gate (or, `up`, the up) half of layer
 * `layer`'s as the weight of `shape` [n_expert, n_ff_exp, n_embd], in
 * place: each expert's matrix through expert_data. Returns -1 when bound, 1
 * when the layer has no fused tensor (read the separate ones), or an error
 * status (0 is never returned). */
static int fused_gate_up(const struct loader *L, struct model *m, int64_t layer, bool up,
                         const int64_t shape[3], struct model_weight *w)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%lld.ffn_gate_up_exps.weight", (long long)layer);
    if (!gguf_find_tensor(L->g, name))
        return 1;
    char sep[96];
    snprintf(sep, sizeof sep, "blk.%lld.ffn_%s_exps.weight", (long long)layer,
             up ? "up" : "gate");
    if (gguf_find_tensor(L->g, sep))
        return ig_error(IG_E_MODEL, "'%s': layer %lld has both '%s' and the fused '%s'",
                        L->path, (long long)layer, sep, name);
    int64_t n_expert = shape[0], n_ff = shape[1];
    int64_t fused[3] = {n_expert, 2 * n_ff, shape[2]};
    int st = get_weight(L, name, fused, false, false,
                        " (the experts' gate and up fused: 2 x expert_feed_forward_length)", w);
    if (st)
        return st;
    if (!m->fused_experts) { /* room for every layer's gate and up */
        m->fused_experts = calloc((size_t)(2 * m->hp.n_layer * n_expert), sizeof(void *));
        if (!m->fused_experts)
            return ig_error(IG_E_NOMEM, "out of memory loading '%s'", L->path);
    }
    const void **ptrs = m->fused_experts + (2 * layer + up) * n_expert;
    for (int64_t e = 0; e < n_expert; e++)
        ptrs[e] = (const uint8_t *)w->data + ((size_t)(2 * e + up) * (size_t)n_ff) * w->row_bytes;
    w->rows = n_ff;
    w->data = ptrs[0];
    w->expert_data = ptrs;
    return -1;
}

/* A feature its keys switch on (gemma4's per-layer embeddings by
 * embedding_length_per_layer_input, its experts by expert_count) is off,
 * yet the file holds one of its tensors: the keys are wrong, and a forward
 * without those weights would answer wrongly (llama.cpp's count of the
 * tensors it created refuses such a file too). */
static int keyed_feature_off(const struct loader *L, const struct model_tensor_it *it)
{
    unsigned keyed = (L->ai->per_layer_shapes ? MODEL_FEAT_PLE : 0u) |
                     (L->ai->moe_optional ? MODEL_FEAT_MOE : 0u);
    unsigned off = it->t->feature & keyed & ~L->features;
    if (!off)
        return IG_OK;
    char name[96];
    model_tensor_gguf_name(it->t, it->layer, L->ai->features, name, sizeof name);
    if (!gguf_find_tensor(L->g, name))
        return IG_OK;
    return ig_error(IG_E_MODEL, "'%s': tensor '%s' is in the file, but %s.%s (no %s)", L->path,
                    name, L->hp->arch,
                    off & MODEL_FEAT_PLE ? "embedding_length_per_layer_input is 0 or missing"
                                         : "expert_count is missing",
                    model_feature_name(off & MODEL_FEAT_PLE ? MODEL_FEAT_PLE : MODEL_FEAT_MOE));
}

/* Binds every weight of the table of tensors: those of the features the
 * architecture has are required, those a file may show are read where it
 * has them, the others are not read (a file may carry tensors ignite's
 * forward does not use). Then sets the model's features and ties the
 * output head to the embedding where the file has none. */
static int load_weights(const struct loader *L, struct model *m)
{
    struct model_hparams *hp = &m->hp;
    const char *emb_name = model_tensor_row(TENSOR_PER_MODEL, MODEL_TOK_EMBD)->gguf;
    const struct gguf_tensor *emb = gguf_find_tensor(L->g, emb_name);
    if (!emb)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing", L->path, emb_name);
    int st = hp_int(L, "vocab_size", emb->ne[1] <= MODEL_MAX_DIM ? emb->ne[1] : -1, &hp->n_vocab);
    if (st)
        return st;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_ABSENT);
         model_tensors_next(&it);) {
        bool required = model_tensor_present(it.t, L->features);
        if (!required && !it.t->file_shows) {
            if ((st = keyed_feature_off(L, &it)))
                return st;
            continue;
        }
        if (it.layer >= 0 && !model_layer_holds(m, it.t, it.layer))
            continue; /* a shared-KV layer's K/V, a V = K layer's V */
        char name[96];
        int64_t shape[3];
        model_tensor_gguf_name(it.t, it.layer, L->ai->features, name, sizeof name);
        model_weight_shape(it.t, m, it.layer, shape);
        /* an expert's shape comes from the keys: name them */
        char hint[160] = "";
        if (it.t->feature & MODEL_FEAT_MOE_SHEXP)
            snprintf(hint, sizeof hint, " by %s.expert_shared_feed_forward_length %lld and "
                     "embedding_length %lld", hp->arch, (long long)hp->n_ff_shexp,
                     (long long)hp->n_embd);
        else if (it.t->feature & MODEL_FEAT_MOE)
            snprintf(hint, sizeof hint, " by %s.expert_count %lld, embedding_length %lld and "
                     "expert_feed_forward_length %lld", hp->arch, (long long)hp->n_expert,
                     (long long)hp->n_embd, (long long)hp->n_ff_exp);
        else if (it.t->feature & MODEL_FEAT_DELTANET)
            snprintf(hint, sizeof hint, " by %s.ssm.group_count %lld, time_step_rank %lld, "
                     "state_size %lld, conv_kernel %lld", hp->arch, (long long)hp->dn_k_heads,
                     (long long)hp->dn_v_heads, (long long)hp->dn_head_dim,
                     (long long)hp->dn_conv);
        struct model_weight *w = model_weight_at(m, it.t, it.layer);
        if ((it.t->role == LAYER_FFN_GATE_EXPS || it.t->role == LAYER_FFN_UP_EXPS) &&
            it.t->scope == TENSOR_PER_LAYER && it.layer >= 0 &&
            (st = fused_gate_up(L, m, it.layer, it.t->role == LAYER_FFN_UP_EXPS, shape, w)) <= 0) {
            if (st < 0) /* bound from the fused tensor */
                continue;
            return st;
        }
        if ((st = get_weight(L, name, shape, it.t->kind != TENSOR_MATRIX, !required,
                             hint[0] ? hint : NULL, w)))
            return st;
        /* the router's logits are computed in f32 (llama.cpp never quantizes it) */
        if (it.t->role == LAYER_FFN_GATE_INP && it.t->scope == TENSOR_PER_LAYER && w->data &&
            w->type != QUANT_F32 && w->type != QUANT_F16 && w->type != QUANT_BF16)
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' (the router) has type %s, expected "
                            "F32, F16 or BF16", L->path, name, quant_type_name(w->type));
    }
    unsigned shown;
    if ((st = shown_features(L, m, &shown)))
        return st;
    model_features_set(hp, L->features | shown);
    model_tensors_tie(m);
    return IG_OK;
}

int model_from_gguf(const char *path, struct gguf_file *g, struct model **out)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        return ig_error(IG_E_NOMEM, "out of memory loading '%s'", path);
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    m->gguf = g;
    struct loader L = {path, m->gguf, &m->hp, NULL, 0};
    int st;
    if ((st = read_arch(&L)) || (st = read_hparams(&L)))
        goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = ig_error(IG_E_NOMEM, "out of memory loading '%s'", path);
        goto fail;
    }
    /* the layers' kinds and sizes first: each weight's shape is its layer's */
    if ((st = read_layer_kinds(&L, m)) || (st = load_weights(&L, m)) || (st = read_rope(&L)))
        goto fail;
    for (int64_t i = 0; i < m->gguf->n_tensors; i++)
        m->n_params += m->gguf->tensors[i].n_elems;
    m->n_tensors = m->gguf->n_tensors;
    m->file_bytes = m->gguf->file_size;
    *out = m;
    return IG_OK;
fail:
    model_free(m);
    return st;
}

int model_load(const char *path, struct model **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        struct model *m = calloc(1, sizeof *m);
        if (!m)
            return ig_error(IG_E_NOMEM, "out of memory loading '%s'", path);
        snprintf(m->path, sizeof m->path, "%s", path);
        int st = hf_load(path, m);
        if (st) {
            model_free(m);
            return st;
        }
        *out = m;
        return IG_OK;
    }
    struct gguf_file *g = NULL;
    int st = gguf_open(path, &g, NULL);
    if (st)
        return st;
    return model_from_gguf(path, g, out);
}

int model_check_mxfp4(const struct model *m, int max_e, const char *why)
{
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        const struct model_weight *w = it.w;
        if (w->type != QUANT_MXFP4 || !w->data)
            continue;
        int64_t n_blk = w->cols / QK_MXFP4;
        for (int64_t e = 0; e < w->n_expert; e++) {
            const uint8_t *x = w->expert_data ? (const uint8_t *)w->expert_data[e]
                                              : (const uint8_t *)w->data +
                                                    (size_t)e * (size_t)w->rows * w->row_bytes;
            for (int64_t r = 0; r < w->rows; r++, x += w->row_bytes)
                for (int64_t b = 0; b < n_blk; b++) {
                    int byte = x[(size_t)b * sizeof(struct block_mxfp4)];
                    if (byte <= max_e)
                        continue;
                    char name[96];
                    model_tensor_gguf_name(it.t, it.layer, model_features(&m->hp), name,
                                           sizeof name);
                    return ig_error(IG_E_MODEL, "'%s': tensor '%s', expert %lld, row %lld, "
                                    "block %lld: E8M0 scale byte %d (weights up to 12 x "
                                    "2^%d): %s", m->path, name, (long long)e, (long long)r,
                                    (long long)b, byte, byte - 128, why);
                }
        }
    }
    return IG_OK;
}

void model_hparams_set_defaults(struct model_hparams *hp)
{
    for (int r = 0; r < 2; r++)
        hp->rope[r] = (struct model_rope){.base = hp->rope_base, .scaling = ROPE_SCALING_NONE,
                                          .factor = 1.0, .orig_ctx = hp->n_ctx_train,
                                          .attn_factor = 1.0, .yarn_ext_factor = 1.0,
                                          .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0};
    hp->embd_scale = 1.0;
    hp->attn_scale = 1.0 / sqrt((double)hp->head_dim);
    hp->ffn_act = MODEL_ACT_SILU;
}

bool model_arch_known(const struct gguf_file *g)
{
    struct gguf_str a;
    return gguf_get_str(g, "general.architecture", &a) && model_arch_find(a) != NULL;
}

const char *model_arch_names(void)
{
    return model_arch_list();
}

void model_free(struct model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m->fused_experts);
    gguf_close(m->gguf);
    hf_folder_free(m->hf);
    free(m);
}

void model_active_size(const struct model *m, int64_t *active, size_t *bytes)
{
    *active = 0;
    *bytes = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        const struct model_weight *w = it.w;
        int64_t used = w->n_expert;
        if (w->n_expert > 1)
            used = m->layers[it.layer].n_expert_used;
        *active += used * w->rows * w->cols;
        bool head = it.t->scope == TENSOR_PER_MODEL && it.t->role == MODEL_TOK_EMBD &&
                    !model_tensor_present(model_tensor_row(TENSOR_PER_MODEL, MODEL_OUTPUT),
                                          model_features(&m->hp));
        /* a tied table is the head: read whole; another looked-up table
         * (Gemma 4's per-layer embeddings) a row a token */
        if (!it.t->gathered || head)
            *bytes += (size_t)used * (size_t)w->rows * w->row_bytes;
        else
            *bytes += w->row_bytes;
    }
}

bool model_is_folder(const struct model *m)
{
    return m->hf != NULL;
}

int model_folder_files(const struct model *m)
{
    return m->hf ? m->hf->n_shards : 0;
}

bool model_chat_template(const struct model *m, const char **text, size_t *len)
{
    if (m->hf) {
        *text = m->hf->chat_template;
        *len = *text ? strlen(*text) : 0;
        return *len > 0;
    }
    struct gguf_str t;
    if (!m->gguf || !gguf_get_str(m->gguf, "tokenizer.chat_template", &t) || !t.len)
        return false;
    *text = t.ptr;
    *len = (size_t)t.len;
    return true;
}

static void count_type(int64_t *count, int64_t *bytes, int n, uint32_t type, size_t nbytes)
{
    if (type < (uint32_t)n) {
        count[type]++;
        bytes[type] += (int64_t)nbytes;
    }
}

void model_tensor_types(const struct model *m, int64_t *count, int64_t *bytes, int n)
{
    memset(count, 0, (size_t)n * sizeof *count);
    memset(bytes, 0, (size_t)n * sizeof *bytes);
    if (m->gguf)
        for (int64_t i = 0; i < m->gguf->n_tensors; i++)
            count_type(count, bytes, n, m->gguf->tensors[i].type, m->gguf->tensors[i].nbytes);
    for (int64_t i = 0; m->hf && i < m->hf->n_tensors; i++) {
        const struct st_tensor *t = m->hf->by_name[i];
        int type = t->dtype == ST_F32 ? QUANT_F32 : t->dtype == ST_F16 ? QUANT_F16
                 : t->dtype == ST_BF16 ? QUANT_BF16 : -1;
        size_t k = strlen(t->name);
        if (type >= 0)
            count_type(count, bytes, n, (uint32_t)type, t->nbytes);
        else if (t->dtype == ST_U8 && k > 7 && !strcmp(t->name + k - 7, "_blocks"))
            /* gpt-oss's MXFP4 experts: blocks and their scales, 17 bytes of 32 values */
            count_type(count, bytes, n, QUANT_MXFP4, t->nbytes / 16 * 17);
    }
}

const char *model_type_name(const struct model *m)
{
    uint64_t ft;
    if (m->gguf && gguf_get_u64(m->gguf, "general.file_type", &ft))
        return quant_file_type_name(ft);
    return quant_type_name((uint32_t)m->layers[0].w[LAYER_WQ].type);
}
