/* models/synthetic.c: builds a struct model of random weights in memory for
 * a known shape (SmolLM2-135M, Llama-3.1-8B with its RoPE scaling, Qwen3-8B,
 * Gemma-3-1B/4B/12B with their local layers, ...): the weights of the
 * table of tensors (models/tensors.h) the architecture has. All weight
 * bytes live in one aligned allocation that hangs off m->layers, so
 * model_free releases them. Quantized blocks get random quants and scales
 * chosen so every weight lies within about +-1/sqrt(cols).
 * Covered by tests/cli/test_bench.py and tests/models/test_tensor_table.py. */
#include "models/synthetic.h"

#include "models/arch.h"

#include "core/half.h"
#include "ops/ops.h"
#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct shape {
    const char *name;
    enum model_arch arch;
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    double rope_base;
    bool tied;
    int64_t window;      /* sliding window of the local layers (arch's pattern); 0: none */
    double rope_linear;  /* linear RoPE factor of the global layers; 0: none */
    double llama3_rope;  /* rope_scaling "llama3" factor (8 for 3.1, 32 for 3.2), written
                            as the rope_freqs tensor the converter makes; 0: none */
};

static const struct shape shapes[] = {
    /* name, arch, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx,
     * rope_base, tied, window, rope_linear, llama3_rope */
    {"SmolLM2-135M", MODEL_ARCH_LLAMA, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0, true,
     0, 0, 0},
    {"SmolLM2-360M", MODEL_ARCH_LLAMA, 32, 960, 15, 5, 64, 2560, 49152, 8192, 100000.0, true,
     0, 0, 0},
    {"Llama-3.2-1B", MODEL_ARCH_LLAMA, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0, true,
     0, 0, 32},
    {"Llama-3.2-3B", MODEL_ARCH_LLAMA, 28, 3072, 24, 8, 128, 8192, 128256, 131072, 500000.0, true,
     0, 0, 32},
    {"Llama-3-8B", MODEL_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 128256, 8192, 500000.0, false,
     0, 0, 0},
    {"Llama-3.1-8B", MODEL_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0, false,
     0, 0, 8},
    {"Qwen3-8B", MODEL_ARCH_QWEN3, 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1000000.0, false,
     0, 0, 0},
    {"Gemma-3-270M", MODEL_ARCH_GEMMA3, 18, 640, 4, 1, 256, 2048, 262144, 32768, 1000000.0, true,
     512, 0, 0},
    {"Gemma-3-1B", MODEL_ARCH_GEMMA3, 26, 1152, 4, 1, 256, 6912, 262144, 32768, 1000000.0, true,
     512, 0, 0},
    {"Gemma-3-4B", MODEL_ARCH_GEMMA3, 34, 2560, 8, 4, 256, 10240, 262208, 131072, 1000000.0, true,
     1024, 8.0, 0},
    {"Gemma-3-12B", MODEL_ARCH_GEMMA3, 48, 3840, 16, 8, 256, 15360, 262208, 131072, 1000000.0, true,
     1024, 8.0, 0},
    /* Not a real model: two layers 256 wide (whole K-type super-blocks), GQA
     * 2, a separate output head, for tests that run every kernel emulated. */
    {"Llama-tiny", MODEL_ARCH_LLAMA, 2, 256, 4, 2, 64, 768, 1000, 1024, 10000.0, false, 0, 0, 0},
    /* The same for the CUDA backend's Qwen 3 and Gemma 3 blocks: Qwen 3's
     * head_dim 128 with its head norms; Gemma 3's head_dim 256 on one KV
     * head (the 270M's), a window of 16 keys so short prompts cross it
     * (both layers local by the architecture's pattern). */
    {"Qwen3-tiny", MODEL_ARCH_QWEN3, 2, 256, 4, 2, 128, 768, 1000, 1024, 1000000.0, false,
     0, 0, 0},
    {"Gemma3-tiny", MODEL_ARCH_GEMMA3, 2, 256, 4, 1, 256, 512, 1000, 1024, 1000000.0, true,
     16, 0, 0},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

const char *model_synthetic_names(void)
{
    return "SmolLM2-135M, SmolLM2-360M, Llama-3.2-1B, Llama-3.2-3B, Llama-3-8B, Llama-3.1-8B, "
           "Qwen3-8B, Gemma-3-270M, Gemma-3-1B, Gemma-3-4B, Gemma-3-12B, Llama-tiny, Qwen3-tiny, "
           "Gemma3-tiny";
}

static bool type_ok(enum quant_type t)
{
    switch (t) {
    case QUANT_F32: case QUANT_F16: case QUANT_BF16: case QUANT_Q4_0: case QUANT_Q4_1:
    case QUANT_Q5_0: case QUANT_Q5_1: case QUANT_Q8_0: case QUANT_Q4_K: case QUANT_Q5_K:
    case QUANT_Q6_K: case QUANT_Q2_K: case QUANT_Q3_K: case QUANT_IQ4_NL: case QUANT_IQ4_XS:
        return true;
    default:
        return false;
    }
}

/* ---- random numbers: xorshift64*, fast and good enough for weights ------- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* uniform in [-1, 1) */
static float rnd_f(uint64_t *s)
{
    return (float)(rnd(s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ---- filling one weight --------------------------------------------------- */

static void put_f16(uint8_t *p, float v)
{
    ig_f16 h = ig_f32_to_f16(v);
    memcpy(p, &h, sizeof h);
}

/* Random stored values for w (rows x cols of w->type) with |weight| <~ a. */
static void fill(struct model_weight *w, uint8_t *data, uint64_t *s)
{
    size_t bytes = model_weight_size(w);
    float a = 1.0f / sqrtf((float)w->cols);
    w->data = data;
    switch (w->type) {
    case QUANT_F32:
        for (size_t i = 0; i < bytes / 4; i++) {
            float v = a * rnd_f(s);
            memcpy(data + 4 * i, &v, 4);
        }
        return;
    case QUANT_F16:
        for (size_t i = 0; i < bytes / 2; i++)
            put_f16(data + 2 * i, a * rnd_f(s));
        return;
    case QUANT_BF16:
        for (size_t i = 0; i < bytes / 2; i++) {
            uint32_t u = ig_f32_to_bits(a * rnd_f(s)) >> 16;
            memcpy(data + 2 * i, &(uint16_t){(uint16_t)u}, 2);
        }
        return;
    default:
        break;
    }
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t r = rnd(s);
        memcpy(data + i, &r, 8);
    }
    for (size_t i = bytes & ~(size_t)7; i < bytes; i++)
        data[i] = (uint8_t)rnd(s);
    const struct quant_traits *tr = quant_traits_of((uint32_t)w->type);
    size_t n_blk = bytes / tr->block_bytes;
    for (size_t b = 0; b < n_blk; b++) {
        uint8_t *blk = data + b * tr->block_bytes;
        switch (w->type) {
        case QUANT_Q4_0: put_f16(blk, a / 8); break;
        case QUANT_Q4_1: put_f16(blk, 2 * a / 15); put_f16(blk + 2, -a); break;
        case QUANT_Q5_0: put_f16(blk, a / 16); break;
        case QUANT_Q5_1: put_f16(blk, 2 * a / 31); put_f16(blk + 2, -a); break;
        case QUANT_Q8_0: put_f16(blk, a / 127); break;
        case QUANT_Q4_K: /* d * sc (<= 63) * q (<= 15), minus dmin * m (<= 63) */
            put_f16(blk + offsetof(struct block_q4_K, d), 2 * a / (15 * 63));
            put_f16(blk + offsetof(struct block_q4_K, dmin), a / 63);
            break;
        case QUANT_Q5_K: /* q <= 31 */
            put_f16(blk + offsetof(struct block_q5_K, d), 2 * a / (31 * 63));
            put_f16(blk + offsetof(struct block_q5_K, dmin), a / 63);
            break;
        case QUANT_Q6_K: /* d * sc (|sc| <= 128) * (q - 32) */
            put_f16(blk + offsetof(struct block_q6_K, d), a / (32 * 128));
            break;
        case QUANT_Q2_K: /* d * sc (<= 15) * q (<= 3), minus dmin * m (<= 15) */
            put_f16(blk + offsetof(struct block_q2_K, d), 2 * a / (15 * 3));
            put_f16(blk + offsetof(struct block_q2_K, dmin), a / 15);
            break;
        case QUANT_Q3_K: /* d * sc (|sc| <= 32) * v (|v| <= 4) */
            put_f16(blk + offsetof(struct block_q3_K, d), a / (32 * 4));
            break;
        case QUANT_IQ4_NL: put_f16(blk, a / 127); break; /* levels -127..113 */
        case QUANT_IQ4_XS: put_f16(blk, a / (32 * 127)); break; /* |sc| <= 32 */
        default: break;
        }
    }
}

/* ---- the model -------------------------------------------------------------- */

/* Row t's weight in layer `layer` (-1: the model's), stored as `type`. */
static struct model_weight shaped(const struct model_tensor *t, const struct model *m,
                                  int64_t layer, enum quant_type type)
{
    int64_t shape[3];
    model_weight_shape(t, m, layer, shape);
    return (struct model_weight){.type = type, .n_expert = shape[0], .rows = shape[1],
                                 .cols = shape[2], .row_bytes = quant_row_bytes(type, shape[2])};
}

/* The weights `mixed` stores as Q6_K: V, the FFN's down projection and the
 * output head, llama.cpp's Q4_K_M recipe (mostly). */
static bool heavy(const struct model_tensor *t)
{
    if (t->scope == TENSOR_PER_MODEL)
        return t->role == MODEL_OUTPUT;
    return t->role == LAYER_WV || t->role == LAYER_FFN_DOWN;
}

static size_t padded(const struct model_weight *w)
{
    return (model_weight_size(w) + 63) & ~(size_t)63;
}

/* The padded bytes and elements of a model's weights and of one layer's. */
struct shapes {
    size_t model_bytes, layer_bytes;
    int64_t model_params, layer_params;
};

/* Sets the shape of the walk's weight (matrices as `type`, or `hv` for the
 * heavy ones; norms and biases f32) and counts it into *sz. */
static void shape_weight(struct model *m, const struct model_tensor_it *it, enum quant_type hv,
                         enum quant_type type, struct shapes *sz)
{
    enum quant_type t = it->t->kind != TENSOR_MATRIX ? QUANT_F32 : heavy(it->t) ? hv : type;
    struct model_weight *w = model_weight_at(m, it->t, it->layer);
    *w = shaped(it->t, m, it->layer, t);
    *(it->layer < 0 ? &sz->model_bytes : &sz->layer_bytes) += padded(w);
    *(it->layer < 0 ? &sz->model_params : &sz->layer_params) += w->n_expert * w->rows * w->cols;
}

/* Norm weights near 1: a layer's 1 + 0.1 u (u drawn from s), the output
 * norm's exactly 1. */
static void near_one(const struct model_weight *w, int64_t layer, uint64_t *s)
{
    float *v = (float *)w->data;
    for (int64_t c = 0; c < w->cols; c++)
        v[c] = layer < 0 ? 1.0f : 1.0f + 0.1f * rnd_f(s);
}

/* Builds the model; with materialize false only the shapes (data NULL).
 * `mixed` (TYPE Q4_K_M, type Q4_K) stores V, the FFN's down projection and
 * the output head as Q6_K, as llama.cpp's Q4_K_M files mostly do: one
 * model with matrices of two types. */
static int build(const char *name, enum quant_type type, bool mixed, bool materialize,
                 struct model **out)
{
    *out = NULL;
    const struct shape *sh = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcasecmp(shapes[i].name, name) == 0)
            sh = &shapes[i];
    if (!sh)
        return ig_error(IG_E_USAGE, "synthetic model '%s': known are %s", name,
                        model_synthetic_names());
    if (!type_ok(type))
        return ig_error(IG_E_USAGE, "synthetic model: type %s is not supported "
                        "(F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, "
                        "Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q4_K_M)",
                        quant_type_name((uint32_t)type));
    int64_t blk = quant_traits_of((uint32_t)type)->block_elems;
    int64_t q_dim = sh->n_head * sh->head_dim;
    if (sh->n_embd % blk || sh->n_ff % blk || q_dim % blk)
        return ig_error(IG_E_USAGE, "synthetic model %s: its widths are not multiples of %s's "
                        "block of %lld", sh->name, quant_type_name((uint32_t)type),
                        (long long)blk);

    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return ig_error(IG_E_NOMEM, "out of memory building synthetic %s", sh->name);
    struct model_hparams *hp = &m->hp;
    const struct model_arch_info *ai = model_arch_of(sh->arch);
    snprintf(hp->arch, sizeof hp->arch, "%s", ai->name);
    hp->arch_id = sh->arch;
    hp->n_layer = sh->n_layer;
    hp->n_embd = sh->n_embd;
    hp->n_head = sh->n_head;
    hp->n_head_kv = sh->n_head_kv;
    hp->head_dim = sh->head_dim;
    hp->n_ff = sh->n_ff;
    hp->n_vocab = sh->n_vocab;
    hp->n_ctx_train = sh->n_ctx;
    hp->n_rot = sh->head_dim;
    hp->rope_base = sh->rope_base;
    model_features_set(hp, ai->features | (sh->tied ? 0u : MODEL_FEAT_OUTPUT));
    model_hparams_set_defaults(hp);
    hp->norm_eps = ai->norm_eps;
    hp->rope_style = ai->rope_style;
    hp->ffn_act = ai->act;
    hp->embd_scale = ai->embd_scale_sqrt ? sqrt((double)sh->n_embd) : 1.0;
    if (sh->rope_linear > 0) {
        hp->rope[MODEL_ROPE_GLOBAL].scaling = ROPE_SCALING_LINEAR;
        hp->rope[MODEL_ROPE_GLOBAL].factor = sh->rope_linear;
    }
    if (sh->window) {
        hp->rope[MODEL_ROPE_LOCAL].base = ai->rope_base_local;
        hp->n_swa = sh->window;
    }

    /* Shapes first: the table's weights the model has, matrices stored as
     * `type` (or Q6_K, heavy), norms and biases f32; a layer's into proto,
     * copied into every layer once the one allocation for every weight is
     * made. */
    struct model_layer proto = {0};
    model_arch_layer(ai, hp, false, &proto); /* every layer has the model's sizes */
    m->layers = &proto;
    struct shapes sz = {0};
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_MODEL); model_tensors_next(&it);)
        shape_weight(m, &it, mixed ? QUANT_Q6_K : type, type, &sz);
    for (model_tensors_begin_layer(&it, m, 0, 0); model_tensors_next(&it);)
        shape_weight(m, &it, mixed ? QUANT_Q6_K : type, type, &sz);
    model_tensors_tie(m);
    size_t head = ((size_t)sh->n_layer * sizeof(struct model_layer) + 63) & ~(size_t)63;
    size_t freqs_bytes = ((size_t)sh->head_dim / 2 * sizeof(float) + 63) & ~(size_t)63;
    size_t total = head + freqs_bytes + (size_t)sh->n_layer * sz.layer_bytes + sz.model_bytes;
    if (!materialize)
        total = head + freqs_bytes;
    uint8_t *mem = aligned_alloc(64, total);
    if (!mem) {
        m->layers = NULL;
        free(m);
        return ig_error(IG_E_NOMEM, "out of memory: synthetic %s %s needs %.1f GiB", sh->name,
                        quant_type_name((uint32_t)type), (double)total / (1 << 30));
    }
    m->layers = (struct model_layer *)mem;
    if (sh->llama3_rope > 0) {
        float *ff = (float *)(mem + head);
        /* Llama 3.1/3.2's low_freq_factor 1, high_freq_factor 4, 8192 positions */
        ops_rope_llama3_factors(sh->rope_base, hp->n_rot, sh->llama3_rope, 1, 4, 8192, ff);
        hp->rope[MODEL_ROPE_GLOBAL].freq_factors = ff;
    }
    /* Gemma's pattern: every swa_pattern-th layer global, the others local. */
    for (int64_t il = 0; il < sh->n_layer; il++) {
        bool local = sh->window && il % ai->swa_pattern < ai->swa_pattern - 1;
        model_arch_layer(ai, hp, local, &proto);
        m->layers[il] = proto;
        hp->n_swa_layers += local;
    }
    m->n_params = sz.model_params + sh->n_layer * sz.layer_params;
    snprintf(m->path, sizeof m->path, "synthetic:%s:%s", sh->name,
             mixed ? "Q4_K_M" : quant_type_name((uint32_t)type));
    if (!materialize) {
        m->virtual_weights = true;
        *out = m;
        return IG_OK;
    }
    /* The layers' weights, then the model's, in table order: the random
     * stream every earlier ignite drew them in. */
    uint8_t *p = mem + head + freqs_bytes;
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (int pass = 0; pass < 2; pass++)
        for (model_tensors_begin(&it, m, pass ? MODEL_TENSORS_MODEL : MODEL_TENSORS_LAYERS);
             model_tensors_next(&it);) {
            struct model_weight *w = model_weight_at(m, it.t, it.layer);
            fill(w, p, &seed);
            p += padded(w);
            if (it.t->kind == TENSOR_NORM)
                near_one(w, it.layer, &seed);
        }
    model_tensors_tie(m); /* the output head of tied embeddings, now with its data */
    *out = m;
    return IG_OK;
}

int model_synthetic(const char *name, enum quant_type type, struct model **out)
{
    return build(name, type, false, true, out);
}

static int from_spec(const char *spec, bool materialize, struct model **out)
{
    *out = NULL;
    static const char prefix[] = "synthetic:";
    if (strncmp(spec, prefix, sizeof prefix - 1) != 0)
        return ig_error(IG_E_USAGE, "'%s' is not a synthetic model spec", spec);
    char name[64];
    snprintf(name, sizeof name, "%s", spec + sizeof prefix - 1);
    enum quant_type type = QUANT_Q4_1;
    bool mixed = false;
    char *colon = strchr(name, ':');
    if (colon && strcasecmp(colon + 1, "Q4_K_M") == 0) {
        *colon = 0;
        type = QUANT_Q4_K;
        mixed = true;
    } else if (colon) {
        *colon = 0;
        bool found = false;
        for (uint32_t t = 0; t < 64 && !found; t++) {
            const struct quant_traits *tr = quant_traits_of(t);
            if (tr && strcasecmp(tr->name, colon + 1) == 0) {
                type = (enum quant_type)t;
                found = true;
            }
        }
        if (!found)
            return ig_error(IG_E_USAGE, "synthetic model: unknown type '%s'", colon + 1);
    }
    return build(name, type, mixed, materialize, out);
}

int model_synthetic_spec(const char *spec, struct model **out)
{
    return from_spec(spec, true, out);
}

int model_synthetic_spec_shapes(const char *spec, struct model **out)
{
    return from_spec(spec, false, out);
}

size_t model_weight_bytes(const struct model *m)
{
    size_t n = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
        if (it.w->data || m->virtual_weights)
            n += model_weight_size(it.w);
    return n;
}
