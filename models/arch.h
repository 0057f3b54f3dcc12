/* models/arch.h: what each architecture ignite runs is made of (private to
 * models/). One row per general.architecture in models/arch.c: the facts a
 * GGUF file does not carry (the kind of its layers, RoPE pairing, which
 * extra weights exist, the activation, the sliding-window pattern and local
 * RoPE base when the file has no key for them). model.c reads a file's keys first and falls back to
 * these. Covered by tests/models/test_arch_load.py. */
#ifndef IGNITE_MODELS_ARCH_H
#define IGNITE_MODELS_ARCH_H

#include "models/model.h"

#include <stdbool.h>
#include <stdint.h>

struct model_arch_info {
    const char *name;        /* general.architecture */
    enum model_arch id;
    /* The kind of its layers: every layer's mixer and FFN (a hybrid's
     * pattern of kinds goes here, beside the window's below). */
    enum layer_mixer mixer;
    enum layer_ffn ffn;
    enum rope_style rope_style;
    unsigned features;       /* MODEL_FEAT_ bits beyond Llama's (models/tensors.h): the
                                weights they bring are required */
    enum model_act act;      /* the FFN's gate activation */
    bool embd_scale_sqrt;    /* embeddings multiplied by sqrt(n_embd) */
    double norm_eps;         /* when the file has no layer_norm_rms_epsilon */
    /* Sliding window, when the file has attention.sliding_window: without
     * attention.sliding_window_pattern, layer il is local unless
     * il % swa_pattern == swa_pattern - 1 (0: the architecture has no
     * local layers, a window key is refused). */
    int64_t swa_pattern;
    double rope_base_local;  /* local layers' base without rope.freq_base_swa */
    bool swa_rope_scaled;    /* local layers' RoPE is scaled as the global one is
                                (gpt-oss: llama.cpp's freq_scale_swa = freq_scale);
                                false: unscaled (Gemma 3) */
    /* The layer count of the one size whose attention scale is
     * 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim) (Gemma 3 27B's
     * query_pre_attn_scalar of 168); 0: none. */
    int64_t qpas_embd_layers;
    /* The saved-cache model id hashes its extension pass whatever the RoPE
     * (kvcache/kvfile.c): false for Llama 2's and Qwen2's block, whose ids
     * predate the pass (model_arch_id_ext). */
    bool id_ext;
    /* Gemma 4: head counts and FFN widths may differ between layers (the
     * file's per-layer arrays), softmax scale 1 (the head norms scale),
     * V RMS-normed without a weight, V absent where it is K
     * (attention_k_eq_v), the last attention.shared_kv_layers layers
     * reading an earlier layer's K/V, per-layer embeddings where
     * embedding_length_per_layer_input > 0. */
    bool per_layer_shapes;
    bool attn_scale_one;
    bool v_norm;
    bool v_optional;
    bool kv_sharing;
    bool moe_optional; /* a mixture of experts where the file has expert_count, with a
                          dense MLP beside it (gemma4 26B-A4B) */
};

/* The row for the architecture named `name`, or NULL. */
const struct model_arch_info *model_arch_find(struct gguf_str name);

/* The row of architecture `id` (never NULL). */
const struct model_arch_info *model_arch_of(enum model_arch id);

/* Sets layer L's kind and facts: the kind from the architecture's row, the
 * sizes from the hyper-parameters (every layer of today's architectures has
 * the model's), and, where the loader found the layer local (the file's
 * pattern, else the row's swa_pattern), the window hp->n_swa and the local
 * RoPE. The weights are left as they are. */
void model_arch_layer(const struct model_arch_info *ai, const struct model_hparams *hp,
                      bool local, struct model_layer *L);

/* model_arch_layer, and a hybrid's kind of the layer: with
 * MODEL_FEAT_DELTANET, gated DeltaNet of the hyper-parameters' sizes where
 * `recurrent` (the file's attention.recurrent_layers, else all but every
 * full_attention_interval-th layer), else gated attention. */
void model_arch_layer_at(const struct model_arch_info *ai, const struct model_hparams *hp,
                         bool local, bool recurrent, struct model_layer *L);

/* "llama, ..., qwen35": the known names, for messages. */
const char *model_arch_list(void);

#endif
