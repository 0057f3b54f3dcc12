/* models/tensors.h: the table of tensors, every weight a model has listed
 * once (models/tensors.c), and the one walker over a model's weights.
 *
 * A row names a weight's role and says where it lives (per model or per
 * layer), its GGUF and Hugging Face names, its shape in terms of the
 * hyper-parameters, what kind of weight it is, when a model has it, how it
 * splits across tensor-parallel ranks, which fused device matrix it joins
 * and where the saved-cache model id hashes it. The loaders (model.c,
 * hf_model.c), the synthetic models, the saved-cache model id
 * (kvcache/kvfile.c), the CPU int8 packing (ops/ctx.c) and the CUDA
 * backend's plan and upload (backend/gpu_plan.c, gpu_weights.c) all walk
 * it; nothing else lists weights. Adding a weight is one row in
 * tensors.c (docs/design.md, "How to add a weight").
 *
 * Not in the table: rope_freqs.weight, Llama 3's RoPE divisors, which a
 * GGUF stores as a tensor but a folder states as config.json keys: they
 * are a RoPE setting (struct model_rope's freq_factors), read by
 * model.c's read_rope.
 * Covered by tests/models/test_tensor_table.py (tensor_table_check.c). */
#ifndef IGNITE_MODELS_TENSORS_H
#define IGNITE_MODELS_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct model_hparams;
struct model_layer;
struct model_weight;

/* The weights a model holds once (struct model's w[]). The values are
 * stable: they seed a shapes-only synthetic model's device weights
 * (backend/gpu_weights.c), so a new role goes last. */
enum model_role {
    MODEL_TOK_EMBD,    /* [n_vocab, n_embd] */
    MODEL_OUTPUT_NORM, /* [1, n_embd] f32 */
    MODEL_OUTPUT,      /* [n_vocab, n_embd]; token_embd's weight when tied */
    MODEL_PLE_TOK_EMBD,  /* [n_vocab, n_layer*n_embd_per_layer], with MODEL_FEAT_PLE: rows
                            read by token id, each layer's n_embd_per_layer in turn */
    MODEL_PLE_PROJ,      /* [n_layer*n_embd_per_layer, n_embd], likewise */
    MODEL_PLE_PROJ_NORM, /* [1, n_embd_per_layer] f32, likewise */
    MODEL_ROLES
};

/* The weights of a layer (struct model_layer's w[]); stable values, as
 * above. */
enum layer_role {
    LAYER_WQ,             /* [n_head*head_dim, n_embd] */
    LAYER_WK,             /* [n_head_kv*head_dim, n_embd] */
    LAYER_WV,             /* [n_head_kv*head_dim, n_embd] */
    LAYER_WO,             /* [n_embd, n_head*head_dim] */
    LAYER_FFN_GATE,       /* [n_ff, n_embd] */
    LAYER_FFN_UP,         /* [n_ff, n_embd] */
    LAYER_FFN_DOWN,       /* [n_embd, n_ff] */
    LAYER_ATTN_NORM,      /* [1, n_embd] f32 */
    LAYER_FFN_NORM,       /* [1, n_embd] f32 */
    LAYER_BQ,             /* [1, n_head*head_dim] f32, with MODEL_FEAT_QKV_BIAS */
    LAYER_BK,             /* [1, n_head_kv*head_dim] f32, likewise */
    LAYER_BV,             /* [1, n_head_kv*head_dim] f32, likewise */
    LAYER_Q_NORM,         /* [1, head_dim] f32, with MODEL_FEAT_QK_NORM */
    LAYER_K_NORM,         /* [1, head_dim] f32, likewise */
    LAYER_ATTN_POST_NORM, /* [1, n_embd] f32, with MODEL_FEAT_POST_NORMS */
    LAYER_FFN_POST_NORM,  /* [1, n_embd] f32, likewise */
    LAYER_FFN_GATE_INP,   /* [n_expert, n_embd], with MODEL_FEAT_MOE: the router */
    LAYER_FFN_GATE_EXPS,  /* n_expert x [n_ff, n_embd] (n_ff the layer's: an expert's) */
    LAYER_FFN_UP_EXPS,    /* n_expert x [n_ff, n_embd] */
    LAYER_FFN_DOWN_EXPS,  /* n_expert x [n_embd, n_ff] */
    /* gated DeltaNet (MODEL_FEAT_DELTANET, DeltaNet layers only); c = conv
     * channels (q|k|v: 2 k_heads + v_heads heads of dn_head_dim), vd = v_heads
     * * dn_head_dim, hv = v_heads */
    LAYER_DN_QKV,         /* [c, n_embd] attn_qkv: q|k|v before the convolution */
    LAYER_DN_Z,           /* [vd, n_embd] attn_gate: the output norm's gate z */
    LAYER_DN_CONV,        /* [c, dn_conv] f32: the causal depthwise convolution */
    LAYER_DN_DT,          /* [1, hv] f32: dt bias */
    LAYER_DN_A,           /* [1, hv] f32: -exp(A_log), as the converter stores it */
    LAYER_DN_BETA,        /* [hv, n_embd] */
    LAYER_DN_ALPHA,       /* [hv, n_embd] */
    LAYER_DN_NORM,        /* [1, dn_head_dim] f32: the gated output norm (stored as is) */
    LAYER_DN_OUT,         /* [n_embd, vd] */

    LAYER_PLE_GATE,       /* [n_embd_per_layer, n_embd], with MODEL_FEAT_PLE */
    LAYER_PLE_PROJ,       /* [n_embd, n_embd_per_layer], likewise */
    LAYER_PLE_POST_NORM,  /* [1, n_embd] f32, likewise */
    LAYER_OUT_SCALE,      /* [1, 1] f32, with MODEL_FEAT_OUT_SCALE: the layer's output scale */
    LAYER_FFN_GATE_INP_SCALE, /* [1, n_embd] f32, with MODEL_FEAT_MOE_MLP: the router's input
                                 scale (gemma4) */
    LAYER_FFN_PRE_NORM_2,     /* [1, n_embd] f32, likewise: the experts' input norm */
    LAYER_FFN_POST_NORM_1,    /* [1, n_embd] f32, likewise: the dense MLP's output norm */
    LAYER_FFN_POST_NORM_2,    /* [1, n_embd] f32, likewise: the experts' output norm */
    LAYER_FFN_DOWN_EXPS_SCALE, /* [1, n_expert] f32, likewise: each expert's output scale */

    LAYER_BO,             /* [1, n_embd] f32, with MODEL_FEAT_O_BIAS: wo's bias */
    LAYER_ATTN_SINKS,     /* [1, n_head] f32, with MODEL_FEAT_ATTN_SINKS */
    LAYER_FFN_GATE_INP_B, /* [1, n_expert] f32, with MODEL_FEAT_MOE_BIAS: the router's */
    LAYER_FFN_GATE_EXPS_B, /* n_expert x [1, n_ff] f32, likewise: each expert's biases */
    LAYER_FFN_UP_EXPS_B,  /* n_expert x [1, n_ff] f32 */
    LAYER_FFN_DOWN_EXPS_B, /* n_expert x [1, n_embd] f32 */

    LAYER_FFN_GATE_INP_SHEXP, /* [1, n_embd] f32, with MODEL_FEAT_MOE_SHEXP: the shared
                                 expert's gate (one logit a row) */
    LAYER_FFN_GATE_SHEXP, /* [n_ff_shexp, n_embd], likewise: the shared expert's */
    LAYER_FFN_UP_SHEXP,   /* [n_ff_shexp, n_embd] */
    LAYER_FFN_DOWN_SHEXP, /* [n_embd, n_ff_shexp] */
    MODEL_LAYER_ROLES
};

/* What an architecture may add to the Llama block (bits; models/arch.c
 * says which architecture has which; model_features reads them off the
 * hyper-parameters). */
enum model_feature {
    MODEL_FEAT_QKV_BIAS = 1u << 0,   /* biases on Q, K and V (qwen2) */
    MODEL_FEAT_QK_NORM = 1u << 1,    /* RMSNorm of each Q and K head (qwen3, gemma3) */
    MODEL_FEAT_POST_NORMS = 1u << 2, /* norms of the attention and FFN outputs (gemma3) */
    MODEL_FEAT_OUTPUT = 1u << 3,     /* an output head of its own (untied embeddings) */
    MODEL_FEAT_MOE = 1u << 4,        /* a mixture-of-experts FFN in place of the dense one
                                        (qwen3moe): a router and n_expert experts */
    MODEL_FEAT_DELTANET = 1u << 5,   /* gated DeltaNet layers beside gated attention
                                        ones (qwen35): the FFN's norm is GGUF's
                                        post_attention_norm, q_proj carries the gate */
    MODEL_FEAT_PLE = 1u << 6,        /* per-layer embeddings (gemma4 E2B, E4B) */
    MODEL_FEAT_OUT_SCALE = 1u << 7,  /* a scalar times each layer's output (gemma4) */
    MODEL_FEAT_MOE_MLP = 1u << 8,    /* with MODEL_FEAT_MOE: a dense MLP beside the experts,
                                        the router's own scaled norm (gemma4 26B-A4B) */

    MODEL_FEAT_O_BIAS = 1u << 9,     /* a bias on the attention's output (gpt-oss) */
    MODEL_FEAT_ATTN_SINKS = 1u << 10, /* a learned logit per query head that joins every
                                        softmax's denominator (gpt-oss) */
    MODEL_FEAT_MOE_BIAS = 1u << 11,  /* biases on the router and on each expert's
                                        gate, up and down (gpt-oss) */

    MODEL_FEAT_MOE_SHEXP = 1u << 12, /* with MODEL_FEAT_MOE: a shared expert every row runs,
                                        scaled by its own sigmoid gate (qwen35moe) */
};

/* A row that applies to layers of some mixers only (struct model_tensor's
 * mixers): the bit of enum layer_mixer m. */
#define TENSOR_MIXER(m) (1u << (m))

enum tensor_scope {
    TENSOR_PER_MODEL, /* one weight; role is an enum model_role */
    TENSOR_PER_LAYER, /* one weight in each layer; role is an enum layer_role */
};

/* A dimension in terms of the hyper-parameters and, through
 * model_layer_dim, of the layer's own sizes (its heads, head dim and FFN
 * width). */
enum tensor_dim {
    TENSOR_DIM_ONE,   /* 1 */
    TENSOR_DIM_EMBD,  /* n_embd */
    TENSOR_DIM_Q,     /* n_head * head_dim */
    TENSOR_DIM_KV,    /* n_head_kv * head_dim */
    TENSOR_DIM_HEAD,  /* head_dim */
    TENSOR_DIM_FF,    /* n_ff */
    TENSOR_DIM_VOCAB, /* n_vocab */
    TENSOR_DIM_EXPERT, /* n_expert (the layer's experts) */
    TENSOR_DIM_FF_EXP, /* n_ff_exp, an expert's FFN width (the layer's n_ff) */
    TENSOR_DIM_Q_ROWS, /* q_proj's rows: n_head * head_dim, twice that with an output gate */
    TENSOR_DIM_DN_CONV,   /* gated DeltaNet's conv channels: (2 k_heads + v_heads) * head dim */
    TENSOR_DIM_DN_V,      /* its value width: v_heads * head dim */
    TENSOR_DIM_DN_VHEADS, /* its value heads */
    TENSOR_DIM_DN_HEAD,   /* its head dim */
    TENSOR_DIM_DN_KERNEL, /* its convolution's width */
    TENSOR_DIM_PLE,    /* n_embd_per_layer */
    TENSOR_DIM_PLE_ALL, /* n_layer * n_embd_per_layer */
    TENSOR_DIM_HEADS,  /* n_head (one value per query head: attention sinks) */

    TENSOR_DIM_FF_SHEXP, /* n_ff_shexp, the shared expert's FFN width */
};

/* Which layers hold a per-layer weight (of a model that has its feature). */
enum tensor_layers {
    TENSOR_LAYERS_ALL,    /* every layer */
    TENSOR_LAYERS_OWN_KV, /* layers that write their own K/V (not kv_shared) */
    TENSOR_LAYERS_OWN_V,  /* those with a V of their own too (not v_is_k) */
};

enum tensor_kind {
    TENSOR_MATRIX, /* [rows, cols] of any type ignite computes with */
    TENSOR_NORM,   /* an RMSNorm weight, F32 (a folder's widened; Gemma's 1 + w) */
    TENSOR_BIAS,   /* a bias vector, F32 (a folder's widened) */
};

/* How a weight splits across tensor-parallel ranks, Megatron's way: the
 * matrices that read the layer's input (Q, K, V, gate, up) by output rows,
 * so each rank computes its own heads and FFN columns; the ones that write
 * the residual (wo, down) by input columns, so each rank's partial sums
 * meet in one all-reduce per block; biases of row-split matrices by rows
 * with them; norms (Q/K head norms too: one head_dim vector all heads
 * share) replicated. The embedding table and the output head split by
 * vocabulary rows (Megatron's vocab-parallel embedding: each rank looks up
 * the ids in its range and the all-reduce fills in the rest; the head's
 * logits are gathered), which also keeps a tied pair split alike.
 * models/tp.c splits by this column; the embedding table is not split
 * there yet: every rank reads the rows of its step's tokens. */
enum tensor_split {
    TENSOR_SPLIT_NONE,    /* replicated on every rank */
    TENSOR_SPLIT_ROWS,    /* by output rows */
    TENSOR_SPLIT_COLS,    /* by input columns */
    TENSOR_SPLIT_EXPERTS, /* whole experts per rank (mixture-of-experts) */
    TENSOR_SPLIT_ONCE,    /* on rank 0 alone: a bias after a column-split matrix, which the
                             reduce would otherwise add once a rank */
    TENSOR_SPLIT_HEADS_GATHERED, /* a gated DeltaNet's: the rank's heads' rows (or, where
                             the rows are not per head, columns: A and dt's entries,
                             the output projection's inputs), gathered: its value heads
                             lie apart in the tiled order (models/tp.c) */
};

/* The fused device matrix (or vector) a weight joins on the CUDA backend:
 * rows of one group and kind are stacked in table order into one buffer,
 * kept at the group's first role (backend/gpu_impl.h). */
enum tensor_fuse {
    TENSOR_FUSE_NONE,    /* a buffer of its own */
    TENSOR_FUSE_QKV,     /* Q|K|V, and their biases */
    TENSOR_FUSE_GATE_UP, /* gate|up */
    TENSOR_FUSE_GATE_UP_SHEXP, /* the shared expert's gate|up (qwen35moe) */
};

/* Where the saved-cache model id (kvcache/kvfile.c) hashes a weight. The
 * first two reproduce the ids ignite has always written, absent weights
 * included (hashed as zero bytes), so saved caches keep loading. */
enum tensor_id_pass {
    TENSOR_ID_FIRST,   /* the first pass: the model's rows, then each layer's */
    TENSOR_ID_EXT,     /* the extension pass, with each layer's window and RoPE; models
                          past Llama 2 and Qwen2 only */
    TENSOR_ID_PRESENT, /* after both, only where the model has it: a new row
                          leaves the ids of models without it as they were */
};

/* A Hugging Face name that applies where the model has every feature of
 * `when` and none of `unless`. */
struct tensor_hf_name {
    const char *name; /* NULL: no (more) names */
    unsigned when, unless;
};

#define TENSOR_HF_NAMES 3

/* One weight role: a row of the table. */
struct model_tensor {
    enum tensor_scope scope;
    int role;                /* enum model_role or enum layer_role, by scope */
    const char *gguf;        /* "token_embd.weight"; per layer the part after "blk.N." */
    /* The GGUF name instead where the model has any feature of
     * gguf_alt_when (the FFN input norm is llama.cpp's post_attention_norm
     * in gpt-oss and qwen35 files); NULL: none. */
    const char *gguf_alt;
    unsigned gguf_alt_when;
    /* The part after the text model's prefix ("model."; per layer after
     * "model.layers.N."), the first that applies; where an architecture
     * names the role differently, a feature tells them apart. An expert
     * tensor's holds "%lld", the expert's number (a tensor per expert). */
    struct tensor_hf_name hf[TENSOR_HF_NAMES];
    bool hf_beside;          /* the name sits beside the text model (lm_head.weight) */
    enum tensor_dim n_expert, rows, cols; /* n_expert consecutive [rows, cols] matrices */
    enum tensor_kind kind;
    unsigned feature;        /* 0: every model has it; else where the model has the feature */
    unsigned unless;         /* absent where the model has any of these features (the
                                dense FFN of a mixture of experts) ... */
    unsigned also;           /* ... unless it has one of these (gemma4's dense MLP beside
                                its experts) */
    bool file_shows;         /* a GGUF whose architecture lacks the feature may hold the
                                weight, and then has the feature (llama.cpp's llama files
                                with Q/K/V biases; output.weight, absent when tied) */
    bool ties_to_embd;       /* absent (no feature): token_embd is read in its place */
    bool gathered;           /* rows read by token id (the embedding), not a product */
    enum tensor_split split;
    enum tensor_fuse fuse;
    enum tensor_id_pass id_pass;
    unsigned mixers;         /* 0: every layer has it; else only layers whose mixer's
                                TENSOR_MIXER bit is set (a hybrid's attention rows) */

    enum tensor_layers layers; /* per layer: which layers hold it */
};

/* The table: *n rows, per-model rows first, each scope in the order the
 * id, the synthetic models and the loaders take them. */
const struct model_tensor *model_tensor_table(int *n);

/* The row of a role. */
const struct model_tensor *model_tensor_row(enum tensor_scope scope, int role);

/* A dimension's size by the model-wide hyper-parameters alone (`layer`
 * unused): for what has no layers yet (a context sized for a test) and
 * where every layer has the model's sizes. */
int64_t model_tensor_dim(const struct model_hparams *hp, int64_t layer, enum tensor_dim d);

/* The row's shape by the hyper-parameters alone: {n_expert, rows, cols}. */
void model_tensor_shape(const struct model_tensor *t, const struct model_hparams *hp,
                        int64_t layer, int64_t shape[3]);

/* A dimension's size in layer `layer` of m (-1 for a per-model weight):
 * heads, head dim and FFN width are the layer's own (struct model_layer,
 * which the loaders fill before they check any weight's shape). */
int64_t model_layer_dim(const struct model *m, int64_t layer, enum tensor_dim d);

/* The row's shape in layer `layer` of m: {n_expert, rows, cols}, by
 * model_layer_dim. What the loaders check each weight against. */
void model_weight_shape(const struct model_tensor *t, const struct model *m, int64_t layer,
                        int64_t shape[3]);

/* The MODEL_FEAT_ bits a model's hyper-parameters have, and the setting of
 * the hyper-parameters' flags from such bits. */
unsigned model_features(const struct model_hparams *hp);
void model_features_set(struct model_hparams *hp, unsigned features);

/* A feature's name for messages ("Q/K/V biases"). */
const char *model_feature_name(unsigned feature);

/* True where a model with `features` holds the row's weight of its own
 * (every bit of its feature, none of its unless). */
bool model_tensor_present(const struct model_tensor *t, unsigned features);

/* True where layer `layer` of m holds the row's weight by its kind (a
 * shared-KV layer has no K/V weights, a V = K layer no V; per model:
 * true). The walker skips the others as absent. */
bool model_layer_holds(const struct model *m, const struct model_tensor *t, int64_t layer);

/* The row's GGUF name for layer `layer` ("blk.3.attn_q.weight") in buf, for
 * a model with `features` (gguf_alt where they call for it). */
void model_tensor_gguf_name(const struct model_tensor *t, int64_t layer, unsigned features,
                            char *buf, size_t cap);
/* True where layer L (of its mixer) has row t's weight at all: rows of
 * other mixers are none of its own, not even absent ones. */
bool model_tensor_in_layer(const struct model_tensor *t, const struct model_layer *L);

/* The row's Hugging Face name under `features` (NULL: it has none). */
const char *model_tensor_hf_name(const struct model_tensor *t, unsigned features);

/* The weight of row t in layer `layer` of m (layer ignored per model). */
struct model_weight *model_weight_at(struct model *m, const struct model_tensor *t,
                                     int64_t layer);

/* Points every absent weight that ties to the embedding (the output head
 * of tied embeddings) at token_embd's. Loaders call it after binding. */
void model_tensors_tie(struct model *m);

/* ---- the walker ---------------------------------------------------------- */

#define MODEL_TENSORS_MODEL 1u  /* the per-model rows (first) */
#define MODEL_TENSORS_LAYERS 2u /* the per-layer rows, layer by layer */
#define MODEL_TENSORS_ALL 3u    /* both */
#define MODEL_TENSORS_ABSENT 4u /* also rows the model does not hold (loaders, the id) */
#define MODEL_TENSORS_TIED 8u   /* also a weight read in place of an absent one (the output
                                   head of tied embeddings: token_embd's data) */

/* One step of a walk: the row, its layer (-1 per model) and m's weight. */
struct model_tensor_it {
    const struct model_tensor *t;
    int64_t layer;
    const struct model_weight *w;
    /* the walk's own */
    const struct model *m;
    unsigned flags, features;
    int row;
    int64_t layer_end;
};

/* Starts a walk over m's weights (flags: MODEL_TENSORS_*), in table order,
 * the per-model rows first, then layer by layer; then
 *   for (model_tensors_begin(&it, m, flags); model_tensors_next(&it);) ...
 * The features are read from m->hp at the start. */
void model_tensors_begin(struct model_tensor_it *it, const struct model *m, unsigned flags);

/* The same over the per-layer rows of layer `layer` alone. */
void model_tensors_begin_layer(struct model_tensor_it *it, const struct model *m, int64_t layer,
                               unsigned flags);

/* Moves to the next weight; false at the end. */
bool model_tensors_next(struct model_tensor_it *it);

#endif
