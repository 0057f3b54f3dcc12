/* models/arch.c: the architecture table, one row per general.architecture
 * ignite runs. The values come from each architecture's published
 * definition (Hugging Face transformers' modeling and configuration code)
 * and from what llama.cpp's converter writes into GGUF:
 *   llama   Llama 1-3 and Mistral: SwiGLU, RoPE on pairs the converter
 *           permuted to be adjacent
 *   qwen2   Qwen2/2.5: llama with Q/K/V biases and NeoX (half-split) RoPE
 *   qwen3   Qwen3 dense: no biases, RMSNorm of each Q and K head before RoPE
 *   gemma3  Gemma 3 text: GELU-tanh GeGLU, embeddings times sqrt(n_embd),
 *           Q/K norms, norms after attention and after the FFN, five local
 *           (sliding-window, RoPE base 10000) layers to one global; the
 *           converter stores every norm weight as 1 + w (Gemma3RMSNorm
 *           multiplies by 1 + w), so the plain RMSNorm applies as stored.
 *   qwen3moe Qwen3-MoE (Qwen3-30B-A3B, -235B-A22B): qwen3's attention, a
 *           mixture-of-experts FFN in every layer (expert_count experts of
 *           expert_feed_forward_length, expert_used_count used; llama.cpp
 *           renormalizes the used experts' weights for every qwen3moe GGUF)
 *   qwen35  Qwen3.5 dense: gated DeltaNet layers with a gated attention
 *           layer every full_attention_interval (the row's comment)
 *   gemma4  Gemma 4 text (E2B, E4B, 31B dense): gemma3's block with head
 *           counts, head dims (global / local), RoPE dims and FFN widths per
 *           layer, softmax scale 1, V normed without a weight, V = K where
 *           the file has no attn_v, shared-KV last layers, per-layer
 *           embeddings, a layer output scale (llama.cpp's src/models/gemma4.cpp)
 *   gpt-oss gpt-oss-20b/-120b (GptOssForCausalLM; llama.cpp's openai-moe):
 *           Q/K/V and output biases, a learned sink logit per head in every
 *           softmax, sliding window on even layers (pattern 2), YaRN on
 *           local and global layers alike, the FFN input norm named
 *           post_attention_norm in GGUF, experts with biases routed by the
 *           softmax of the top-k router logits (= renormalized) and the
 *           clamped SwiGLU (MODEL_ACT_SWIGLU_OAI), an untied output head
 *   qwen35moe Qwen3.5 MoE (35B-A3B, 122B-A10B, 397B-A17B): qwen35's layers,
 *           every FFN a mixture of experts (softmax, top k renormalized)
 *           plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x)
 * Every other layer of these is attention and an FFN (dense, or the experts) of the model's sizes
 * (model_arch_layer); a hybrid's row will give a pattern of kinds.
 * Covered by tests/models/test_arch_load.py. */
#include "models/arch.h"

#include "core/status.h"

#include <string.h>

static const struct model_arch_info archs[] = {
    {.name = "llama", .id = MODEL_ARCH_LLAMA, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_ADJACENT, .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5},
    {.name = "qwen2", .id = MODEL_ARCH_QWEN2, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_HALF_SPLIT, .features = MODEL_FEAT_QKV_BIAS,
     .act = MODEL_ACT_SILU, .norm_eps = 1e-5},
    {.name = "qwen3", .id = MODEL_ARCH_QWEN3, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_HALF_SPLIT, .features = MODEL_FEAT_QK_NORM,
     .act = MODEL_ACT_SILU, .norm_eps = 1e-6, .id_ext = true},
    /* Gemma3TextConfig: sliding_window_pattern 6, rope_local_base_freq 10000,
     * rms_norm_eps 1e-6; 27B (62 layers) has query_pre_attn_scalar 168 =
     * hidden_size / num_attention_heads, the others head_dim (256). */
    {.name = "gemma3", .id = MODEL_ARCH_GEMMA3, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_POST_NORMS, .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt = true, .norm_eps = 1e-6,
     .swa_pattern = 6, .rope_base_local = 10000.0, .qpas_embd_layers = 62, .id_ext = true},
    {.name = "qwen3moe", .id = MODEL_ARCH_QWEN3MOE, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_MOE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_MOE, .act = MODEL_ACT_SILU, .norm_eps = 1e-6,
     .id_ext = true},
    /* Qwen3.5 dense (Qwen3_5TextConfig): of every full_attention_interval
     * layers the last is gated attention (qwen3's head norms, q_proj with an
     * output gate, partial RoPE), the others gated DeltaNet; every layer's
     * FFN dense SwiGLU. Text positions only: llama.cpp's interleaved
     * multi-section RoPE gives every section the same position, which is
     * half-split RoPE over rope.dimension_count. */
    {.name = "qwen35", .id = MODEL_ARCH_QWEN35, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_DELTANET, .act = MODEL_ACT_SILU,
     .norm_eps = 1e-6, .id_ext = true},

    /* Gemma4TextConfig: layer_types (the file's sliding_window_pattern
     * array), sliding rope_theta 10000, full ones proportional (rope_freqs
     * of 1 on the rotated pairs, 1e30 on the others), self.scaling = 1. */
    {.name = "gemma4", .id = MODEL_ARCH_GEMMA4, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_DENSE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_POST_NORMS, .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt = true, .norm_eps = 1e-6, .swa_pattern = 6, .rope_base_local = 10000.0,
     .id_ext = true, .per_layer_shapes = true, .attn_scale_one = true, .v_norm = true,
     .v_optional = true, .kv_sharing = true, .moe_optional = true},

    {.name = "gpt-oss", .id = MODEL_ARCH_GPT_OSS, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_MOE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QKV_BIAS | MODEL_FEAT_MOE | MODEL_FEAT_O_BIAS |
                 MODEL_FEAT_ATTN_SINKS | MODEL_FEAT_MOE_BIAS | MODEL_FEAT_OUTPUT,
     .act = MODEL_ACT_SWIGLU_OAI, .norm_eps = 1e-5, .swa_pattern = 2, .swa_rope_scaled = true,
     .id_ext = true},
    /* Qwen3.5 MoE (Qwen3_5MoeTextConfig): qwen35's layers with a mixture of
     * experts in every FFN (softmax over the experts, the top k renormalized:
     * llama.cpp's build_moe_ffn with norm_w, transformers' TopKRouter) and a
     * shared expert beside them, gated by its own sigmoid. */
    {.name = "qwen35moe", .id = MODEL_ARCH_QWEN35MOE, .mixer = LAYER_MIXER_ATTENTION,
     .ffn = LAYER_FFN_MOE, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_DELTANET | MODEL_FEAT_MOE |
                 MODEL_FEAT_MOE_SHEXP,
     .act = MODEL_ACT_SILU, .norm_eps = 1e-6, .id_ext = true},
};

const struct model_arch_info *model_arch_find(struct gguf_str name)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (gguf_str_eq(name, archs[i].name))
            return &archs[i];
    return NULL;
}

const struct model_arch_info *model_arch_of(enum model_arch id)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (archs[i].id == id)
            return &archs[i];
    IG_ASSERT(!"an architecture id without a row");
    return NULL;
}

bool model_arch_id_ext(enum model_arch id)
{
    return model_arch_of(id)->id_ext;
}

void model_arch_layer(const struct model_arch_info *ai, const struct model_hparams *hp,
                      bool local, struct model_layer *L)
{
    L->mixer = ai->mixer;
    L->ffn = ai->ffn;
    L->n_head = hp->n_head;
    L->n_head_kv = hp->n_head_kv;
    L->head_dim = local && hp->head_dim_local ? hp->head_dim_local : hp->head_dim;
    L->window = local ? hp->n_swa : 0;
    L->rope = local ? MODEL_ROPE_LOCAL : MODEL_ROPE_GLOBAL;
    L->attn_scale = hp->attn_scale;
    L->n_ff = ai->ffn == LAYER_FFN_MOE ? hp->n_ff_exp : hp->n_ff;
    L->n_expert = ai->ffn == LAYER_FFN_MOE ? hp->n_expert : 0;
    L->n_expert_used = ai->ffn == LAYER_FFN_MOE ? hp->n_expert_used : 0;
    L->n_ff_shexp = ai->features & MODEL_FEAT_MOE_SHEXP ? hp->n_ff_shexp : 0;
    L->moe_norm_topk = hp->moe_norm_topk;
    L->kv_shared = false;
    L->kv_source = -1;
    L->v_is_k = false;
}

void model_arch_layer_at(const struct model_arch_info *ai, const struct model_hparams *hp,
                         bool local, bool recurrent, struct model_layer *L)
{
    model_arch_layer(ai, hp, local, L);
    if (!(ai->features & MODEL_FEAT_DELTANET))
        return;
    L->attn_gate = true;
    if (!recurrent)
        return;
    L->mixer = LAYER_MIXER_DELTANET;
    L->n_head = L->n_head_kv = L->head_dim = 0;
    L->dn_conv = hp->dn_conv;
    L->dn_k_heads = hp->dn_k_heads;
    L->dn_v_heads = hp->dn_v_heads;
    L->dn_head_dim = hp->dn_head_dim;
}

static int64_t max_i64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

void model_layers_max(const struct model *m, struct model_layer_max *out)
{
    const struct model_hparams *hp = &m->hp;
    *out = (struct model_layer_max){hp->n_head, hp->n_head_kv, hp->head_dim,
                                    hp->n_head * hp->head_dim, hp->n_head_kv * hp->head_dim,
                                    max_i64(hp->n_ff, hp->n_ff_shexp), hp->n_expert,
                                    hp->n_expert_used,
                                    hp->n_head * hp->head_dim * (hp->has_attn_gate ? 2 : 1),
                                    0, 0, 0};
    for (int64_t l = 0; m->layers && l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        out->n_head = max_i64(out->n_head, L->n_head);
        out->n_head_kv = max_i64(out->n_head_kv, L->n_head_kv);
        out->head_dim = max_i64(out->head_dim, L->head_dim);
        out->q_dim = max_i64(out->q_dim, L->n_head * L->head_dim);
        out->kv_dim = max_i64(out->kv_dim, L->n_head_kv * L->head_dim);
        out->n_ff = max_i64(out->n_ff, max_i64(L->n_ff, L->n_ff_mlp)); /* gemma4's MLP too */
        out->n_expert = max_i64(out->n_expert, L->n_expert);
        out->n_expert_used = max_i64(out->n_expert_used, L->n_expert_used);
        out->q_rows = max_i64(out->q_rows, L->n_head * L->head_dim * (L->attn_gate ? 2 : 1));
        int64_t vd = L->dn_v_heads * L->dn_head_dim;
        out->dn_conv_dim = max_i64(out->dn_conv_dim, 2 * L->dn_k_heads * L->dn_head_dim + vd);
        out->dn_v_dim = max_i64(out->dn_v_dim, vd);
        out->dn_v_heads = max_i64(out->dn_v_heads, L->dn_v_heads);
    }
}

const char *model_arch_list(void)
{
    return "llama, qwen2, qwen3, gemma3, qwen3moe, qwen35, gemma4, gpt-oss, qwen35moe";
}
