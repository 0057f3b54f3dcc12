/* models/model.h: a decoder-only transformer as the forward pass sees it
 * (the architectures of models/arch.c: llama, qwen2, qwen3, gemma3).
 *
 * model_load opens a GGUF file, reads the architecture's hyper-parameters
 * (from the file, else from the architecture's definition), finds every
 * weight of the table of tensors (models/tensors.h) by its llama.cpp name
 * and checks each shape against the hyper-parameters. Given a directory it
 * loads a Hugging Face folder instead (models/hf.h): config.json and the
 * safetensors files, into the same struct. Weights stay in their stored
 * format and point into the mapped files; the forward reads them through
 * struct model_weight, by role (m->w[MODEL_OUTPUT], L->w[LAYER_WQ]). What
 * differs between layers (a sliding window, a RoPE variant) is in struct
 * model_layer with the layer's kind (its mixer and FFN) and sizes, so a
 * forward reads one layer's facts in one place. What the
 * CLI needs beyond the weights (chat template, sampling defaults, tensor
 * counts) comes from the accessors at the end, whichever format the model
 * came from. Covered by tests/models/.
 *
 * Shape vocabulary used in comments across ignite:
 *   n_embd (model width), n_head, n_head_kv, head_dim, n_ff (FFN width),
 *   n_vocab, n_tokens (tokens in a batch), n_ctx (context positions).
 * A weight "[rows, cols]" has `rows` output rows of `cols` stored elements:
 * GGUF's ne[0] = cols (contiguous), ne[1] = rows.
 */
#ifndef IGNITE_MODELS_MODEL_H
#define IGNITE_MODELS_MODEL_H

#include "models/gguf.h"
#include "models/quant.h"
#include "models/tensors.h"

#include <stdbool.h>
#include <stdint.h>

/* More experts than this in a layer is not a model (llama.cpp's
 * LLAMA_MAX_EXPERTS); model_load refuses it. */
#define MODEL_MAX_EXPERTS 1024

/* How RoPE pairs the dimensions of a head. */
enum rope_style {
    ROPE_ADJACENT,  /* pairs (2i, 2i+1): GGUF "llama" (weights are permuted by the converter) */
    ROPE_HALF_SPLIT /* pairs (i, i + n_rot/2): "qwen2", "qwen3", "gemma3", NeoX style */
};

/* <arch>.rope.scaling.type, as llama.cpp names them. */
enum rope_scaling {
    ROPE_SCALING_NONE,     /* the positions as they are */
    ROPE_SCALING_LINEAR,   /* positions divided by rope.scaling.factor */
    ROPE_SCALING_YARN,     /* YaRN: interpolation blended per dimension, cos/sin scaled */
    ROPE_SCALING_LONGROPE, /* Phi-3's per-dimension factors: named, refused by model_load */
};

/* The architectures ignite runs (models/arch.c holds what each one is). */
enum model_arch {
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_GEMMA3,
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_QWEN35,

    MODEL_ARCH_GEMMA4,

    MODEL_ARCH_GPT_OSS,

    MODEL_ARCH_QWEN35MOE,
};

/* The FFN's gate activation: down(act(gate x) * up x). */
enum model_act {
    MODEL_ACT_SILU,      /* SwiGLU (llama, qwen) */
    MODEL_ACT_GELU_TANH, /* GeGLU with GELU's tanh approximation (gemma3) */
    MODEL_ACT_SWIGLU_OAI, /* gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up,
                             -7, 7), (u + 1) g sigmoid(1.702 g) (ops_swiglu_oai) */
};

/* Which of hp.rope a layer uses. Local (sliding-window) layers of Gemma 3
 * have their own base and no scaling. */
#define MODEL_ROPE_GLOBAL 0
#define MODEL_ROPE_LOCAL 1

/* One RoPE variant: how the angle of pair i at position p is made. ops/rope.c
 * turns it into per-pair inverse frequencies and a cos/sin scale, as
 * llama.cpp's ggml_rope_ext computes them. */
struct model_rope {
    double base;               /* rope.freq_base (local: rope.freq_base_swa) */
    enum rope_scaling scaling;
    double factor;             /* rope.scaling.factor (>= 1 when scaling; 1 otherwise) */
    int64_t orig_ctx;          /* rope.scaling.original_context_length (YaRN) */
    double attn_factor;        /* rope.scaling.attn_factor: cos/sin multiplier, default 1 */
    double yarn_ext_factor;    /* YaRN's extrapolation mix, default 1 */
    double yarn_beta_fast;     /* YaRN's ramp ends, defaults 32 and 1 */
    double yarn_beta_slow;
    const float *freq_factors; /* [n_rot / 2] per-pair divisors of the frequency
                                  (rope_freqs: Llama 3.1/3.2's scaling as the
                                  converter writes it); NULL: all 1. Points into
                                  the file */
};

struct model_hparams {
    char arch[32];        /* general.architecture, e.g. "llama" */
    enum model_arch arch_id;
    int64_t n_layer;
    int64_t n_embd;
    /* The attention and FFN sizes as the file states them for the model;
     * each layer has its own in struct model_layer (what the forward reads). */
    int64_t n_head;
    int64_t n_head_kv;    /* grouped-query attention: n_head % n_head_kv == 0 */
    int64_t head_dim;     /* n_embd / n_head unless the file says otherwise */
    int64_t head_dim_local; /* the local layers' (attention.key_length_swa); 0: head_dim */
    int64_t n_ff;
    int64_t n_vocab;
    int64_t n_ctx_train;  /* <arch>.context_length */
    int64_t n_rot;        /* rope.dimension_count, <= head_dim */
    int64_t n_rot_local;  /* the local layers' (rope.dimension_count_swa); 0: n_rot
                             (model_rope_dims) */
    double rope_base;     /* rope.freq_base, default 10000 (== rope[MODEL_ROPE_GLOBAL].base) */
    double norm_eps;      /* attention.layer_norm_rms_epsilon, default 1e-5 (gemma3 1e-6) */
    enum rope_style rope_style;
    bool tied_embeddings; /* output.weight absent (tie_word_embeddings): logits use token_embd */
    bool has_qkv_bias;    /* qwen2-style biases on Q, K and V */
    /* What the architectures after Llama 2 added (models/arch.c says which
     * has what; the defaults are the Llama block). */
    struct model_rope rope[2]; /* MODEL_ROPE_GLOBAL, MODEL_ROPE_LOCAL */
    bool has_qk_norm;     /* RMSNorm of each Q and K head before RoPE (qwen3, gemma3) */
    bool has_post_norms;  /* RMSNorm of the attention and FFN outputs before the residual add (gemma3) */
    enum model_act ffn_act;
    double embd_scale;    /* embeddings are multiplied by this: 1, or sqrt(n_embd) (gemma3) */
    double attn_scale;    /* softmax scale: 1/sqrt(head_dim), or 1/sqrt(query_pre_attn_scalar) */
    double attn_softcap;  /* attn_logit_softcapping: scores become c tanh(s / c); 0 = none */
    double final_softcap; /* final_logit_softcapping, the same on the logits; 0 = none */
    int64_t n_swa;        /* attention.sliding_window of the local layers; 0 = none */
    int64_t n_swa_layers; /* how many layers are local (sliding-window) */
    /* A mixture of experts (qwen3moe): expert_count, expert_used_count,
     * expert_feed_forward_length; 0 without one. */
    bool has_moe;
    int64_t n_expert;      /* experts per layer */
    int64_t n_expert_used; /* experts each row is routed to (top-k) */
    int64_t n_ff_exp;      /* an expert's FFN width */
    bool moe_norm_topk;    /* the k routing weights renormalized to sum to 1 */
    /* A hybrid of gated DeltaNet and attention (qwen35): ssm.conv_kernel,
     * ssm.group_count (key heads), ssm.time_step_rank (value heads),
     * ssm.state_size (their head dim), full_attention_interval; 0 without. */
    bool has_deltanet;
    bool has_attn_gate;    /* attention's q_proj gives each head's query and an output gate */
    int64_t dn_conv, dn_k_heads, dn_v_heads, dn_head_dim;
    int64_t full_attn_every; /* layer il is attention where (il + 1) % this == 0 */

    /* Gemma 4 (models/arch.c): V RMS-normed per head without a weight; the
     * last n_kv_shared layers read an earlier layer's K/V (struct
     * model_layer's kv_source); per-layer embeddings of n_embd_per_layer
     * per layer (0: none; MODEL_FEAT_PLE's weights). */
    bool has_v_norm;
    int64_t n_kv_shared;
    int64_t n_embd_per_layer;
    bool has_ple;          /* MODEL_FEAT_PLE: n_embd_per_layer > 0 */
    bool has_out_scale;    /* MODEL_FEAT_OUT_SCALE: each layer's output times its scalar */
    bool has_moe_mlp;      /* MODEL_FEAT_MOE_MLP: gemma4's dense MLP beside its experts */

    /* gpt-oss: wo's bias, attention sinks, the router's and experts' biases */
    bool has_o_bias, has_attn_sinks, has_moe_bias;

    /* qwen35moe: a shared expert beside the routed ones (MODEL_FEAT_MOE_SHEXP),
     * a dense SwiGLU FFN of expert_shared_feed_forward_length every row runs,
     * its output times sigmoid(ffn_gate_inp_shexp . xn); 0 without. */
    bool has_moe_shexp;
    int64_t n_ff_shexp;
};

/* The rotated dims of RoPE variant r (MODEL_ROPE_GLOBAL or _LOCAL). */
static inline int64_t model_rope_dims(const struct model_hparams *hp, int r)
{
    return r == MODEL_ROPE_LOCAL && hp->n_rot_local > 0 ? hp->n_rot_local : hp->n_rot;
}

/* The most rotated dims of any variant: what a table of angles per row holds. */
static inline int64_t model_rope_dims_max(const struct model_hparams *hp)
{
    return hp->n_rot_local > hp->n_rot ? hp->n_rot_local : hp->n_rot;
}
/* A weight in its stored format: n_expert consecutive [rows, cols]
 * matrices (1 for every weight today; the expert dimension of a
 * mixture-of-experts FFN), 1-D when rows == 1. Which weights a model has
 * and their shapes: models/tensors.h. */
struct model_weight {
    enum quant_type type;
    int64_t rows;         /* output features */
    int64_t cols;         /* input features, contiguous, a multiple of the block */
    size_t row_bytes;     /* bytes of one stored row */
    const void *data;     /* n_expert * rows * row_bytes bytes; NULL for an absent weight */
    int64_t n_expert;     /* matrices of [rows, cols], >= 1 (0 only in an absent weight) */
    /* [n_expert] each expert's matrix, where they lie apart (a Hugging Face
     * folder's tensor per expert; data is expert 0's); NULL: one after the
     * other from data (a GGUF's, read in place). Read through
     * ops_weight_expert. */
    const void *const *expert_data;
};

/* What mixes a layer's positions: each backend's layer loop calls the
 * mixer of the layer's kind through its table (backend/cpu_forward.c,
 * backend/gpu_forward.c). */
enum layer_mixer {
    LAYER_MIXER_ATTENTION, /* softmax attention over the layer's KV cache (all of it,
                              or its sliding window) */
    LAYER_MIXER_DELTANET,  /* gated DeltaNet (qwen35): a causal convolution and the
                              delta rule's matrix per head, a fixed state per sequence
                              (kvcache's KV_RECURRENT; backend/cpu_deltanet.c) */
};

/* A layer's feed-forward network, by the same tables. */
enum layer_ffn {
    LAYER_FFN_DENSE, /* down(act(gate x) * up x), the model's hp.ffn_act */
    LAYER_FFN_MOE,   /* a router's softmax picks n_expert_used of n_expert dense FFNs
                        of width n_ff; their outputs summed by the routing weights */
};

/* A layer: its weights by role (models/tensors.h: enum layer_role; absent
 * ones zeroed), its kind, and its own sizes, so that layers may differ in
 * heads, head dim and FFN width. The loaders fill the kind and the facts
 * from the architecture's row (models/arch.c, model_arch_layer) and the
 * hyper-parameters; the forwards, the KV memory, the checks of the
 * weights' shapes and every buffer size (the largest layer's:
 * model_layers_max) read them here. */
struct model_layer {
    struct model_weight w[MODEL_LAYER_ROLES];
    enum layer_mixer mixer;
    enum layer_ffn ffn;
    /* attention (LAYER_MIXER_ATTENTION) */
    int64_t n_head;                /* query heads */
    int64_t n_head_kv;             /* KV heads: n_head % n_head_kv == 0 */
    int64_t head_dim;              /* of queries, keys and values */
    int64_t window;                /* sliding window: a query at position p sees keys
                                      p - window + 1 .. p; 0 = every key up to p */
    int rope;                      /* MODEL_ROPE_GLOBAL or MODEL_ROPE_LOCAL */
    double attn_scale;             /* softmax scale of the scores */
    bool attn_gate;                /* q_proj gives [query | gate] per head; the output is
                                      multiplied by sigmoid(gate) before wo (qwen35) */
    /* gated DeltaNet (LAYER_MIXER_DELTANET) */
    int64_t dn_conv;               /* causal convolution's kernel width (4) */
    int64_t dn_k_heads;            /* query/key heads */
    int64_t dn_v_heads;            /* value heads, a multiple of dn_k_heads: value head h
                                      reads key head h % dn_k_heads (the converter's tiled
                                      order) */
    int64_t dn_head_dim;           /* of keys and values alike */
    bool dn_grouped;               /* value heads in the checkpoint's grouped order (a
                                      Hugging Face folder): value head h reads key head
                                      h / (dn_v_heads / dn_k_heads); false: the tiled order */
    /* the FFN */
    int64_t n_ff;                  /* FFN width (LAYER_FFN_MOE: each expert's) */
    int64_t n_expert;              /* LAYER_FFN_MOE: experts, and how many a row uses */
    int64_t n_expert_used;
    int64_t expert0;               /* the first expert this model holds: a tensor-parallel
                                      rank's part holds experts [expert0, expert0 + the expert
                                      weights' n_expert) of n_expert; 0 otherwise */
    bool moe_norm_topk;            /* the used experts' weights renormalized to sum 1 */
    int64_t n_ff_mlp;              /* LAYER_FFN_MOE with MODEL_FEAT_MOE_MLP: the dense MLP's
                                      width */
    int64_t n_ff_shexp;            /* LAYER_FFN_MOE with MODEL_FEAT_MOE_SHEXP: the shared
                                      expert's width (a tensor-parallel rank's: its part) */
    /* Gemma 4: a layer that reads layer kv_source's K/V instead of writing
     * its own (kv_shared; no K/V weights then), and V taken from K's
     * projection (no V weight of its own: attention_k_eq_v). */
    bool kv_shared;
    int64_t kv_source;
    bool v_is_k;
};

/* The largest of each per-layer size over a model's layers (and its
 * hyper-parameters' values: a model made by hand for a test has no
 * layers): what buffers for any layer hold. */
struct model_layer_max {
    int64_t n_head, n_head_kv, head_dim;
    int64_t q_dim;  /* n_head * head_dim */
    int64_t kv_dim; /* n_head_kv * head_dim */
    int64_t n_ff;
    int64_t n_expert, n_expert_used; /* 0 without a mixture of experts */
    int64_t q_rows; /* q_proj's output rows: q_dim, twice that with an output gate */
    int64_t dn_conv_dim, dn_v_dim, dn_v_heads; /* gated DeltaNet's channels (q|k|v), value
                                                  width and heads; 0 without */
};

/* Sampling settings a model ships with (generation_config.json); each
 * applies only where its has_ flag is set and the user gave none. */
struct model_sampling {
    bool has_temperature, has_top_k, has_top_p, has_min_p, has_repeat_penalty;
    double temperature;   /* 0 = greedy (also what do_sample: false means) */
    int64_t top_k;
    double top_p, min_p, repeat_penalty;
};

struct hf_folder;

struct model {
    struct model_hparams hp;
    struct model_weight w[MODEL_ROLES]; /* by enum model_role (models/tensors.h); the
                                          output head is token_embd's when tied */
    struct model_layer *layers;      /* n_layer entries, owned */
    struct gguf_file *gguf;          /* owned; metadata for the tokenizer; NULL for a folder */
    struct hf_folder *hf;            /* owned; a Hugging Face folder's files, else NULL */
    const void **fused_experts;      /* owned: the expert_data of gate and up experts read
                                      * from a fused ffn_gate_up_exps (GGUF), else NULL */
    struct model_sampling sampling;  /* the model's sampling defaults (folders only for now) */
    int64_t n_tensors;               /* tensors in the file(s), used or not */
    size_t file_bytes;               /* bytes of the file(s) */
    int64_t n_params;                /* elements over all tensors */
    bool virtual_weights;            /* shapes only, data NULL (models/synthetic.h) */
    char path[4096];                 /* where it was loaded from ("" if synthetic) */
};

/* Loads and validates the model at `path`: a GGUF file, or a directory
 * holding a Hugging Face folder. Returns IG_OK and *out (free with
 * model_free), or IG_E_IO / IG_E_MODEL / IG_E_NOMEM after one line on
 * stderr naming the file and the problem. */
int model_load(const char *path, struct model **out);

/* model_load for a file already parsed: takes ownership of g (closed on
 * failure too). `path` is for messages and m->path. */
int model_from_gguf(const char *path, struct gguf_file *g, struct model **out);

/* For a model built in memory (synthetic, tests): after the shape fields
 * and rope_base are set, makes the rest the Llama block's: both RoPE
 * variants unscaled at rope_base, embedding scale 1, softmax scale
 * 1/sqrt(head_dim), SwiGLU, no norms beyond Llama's, no window. */
void model_hparams_set_defaults(struct model_hparams *hp);

/* True when the file's general.architecture is one model_load knows. */
bool model_arch_known(const struct gguf_file *g);

/* The architectures model_load knows, comma-separated, for messages. */
const char *model_arch_names(void);

/* The largest of each per-layer size of m (struct model_layer_max). */
void model_layers_max(const struct model *m, struct model_layer_max *out);

/* True where the saved-cache model id (kvcache/kvfile.c) hashes its
 * extension pass whatever the model's RoPE: the architectures past Llama 2
 * and Qwen2 (models/arch.c's rows say which). */
bool model_arch_id_ext(enum model_arch id);

/* Frees the model and unmaps its file. NULL is fine. */
void model_free(struct model *m);

/* Bytes of w's stored data by its shape (0 for an absent weight; a
 * shapes-only synthetic weight has its size but no data). */
static inline size_t model_weight_size(const struct model_weight *w)
{
    return (size_t)w->n_expert * (size_t)w->rows * w->row_bytes;
}

/* What a token uses of m's weights (a mixture of experts runs
 * n_expert_used of each layer's n_expert): *active the parameters of every
 * weight with the unused experts left out; *bytes the bytes a decode step
 * reads: those weights but the looked-up tables (the embedding table,
 * Gemma 4's per-layer one), of which one row each is read (the embedding
 * table whole where it is the output head too). */
void model_active_size(const struct model *m, int64_t *active, size_t *bytes);

/* The largest E8M0 scale byte of an MXFP4 block whose weights (up to 12 x
 * 2^(e - 128), ggml's values) are finite floats; 255 is NaN in the OCP MX
 * format. */
#define MODEL_MXFP4_E_FINITE 252

/* Reads every MXFP4 weight's E8M0 scale bytes (gpt-oss's experts): the
 * first above max_e is refused (IG_E_MODEL, one line naming the tensor, the
 * expert, row and block, the byte and `why`, which says what max_e is the
 * limit of). The loader does not read the weights' bytes (`info` stays
 * instant on a 12 GB file); backend_create calls this before a backend
 * takes the weights, which it reads all of anyway. */
int model_check_mxfp4(const struct model *m, int max_e, const char *why);

/* ---- what the model says besides its weights, in either format ---------- */

/* True for a model loaded from a Hugging Face folder. */
bool model_is_folder(const struct model *m);

/* The safetensors files a folder's weights are in (0 for a GGUF). */
int model_folder_files(const struct model *m);

/* The chat template text (GGUF tokenizer.chat_template, or the folder's
 * tokenizer_config.json / chat_template.jinja): true and *text, *len (not
 * NUL-terminated, owned by m) when the model has one. */
bool model_chat_template(const struct model *m, const char **text, size_t *len);

/* Counts and bytes of the tensors by stored type, indexed by enum
 * quant_type id < n (tensors of types outside F32..BF16 in a folder, such
 * as integer buffers, are counted in n_tensors only). */
void model_tensor_types(const struct model *m, int64_t *count, int64_t *bytes, int n);

/* The weights' type as llama-bench names it: a GGUF's general.file_type in
 * llama.cpp's words ("Q4_K - Medium", quant_file_type_name), else (a folder, a
 * synthetic model, a GGUF without the key) the type of the first layer's
 * query matrix ("BF16", "Q4_1"). A static string. */
const char *model_type_name(const struct model *m);

#endif
