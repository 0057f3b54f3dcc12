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
 * Covered by tests/models/test_arch_load.py. */
#include "models/arch.h"

#include "core/status.h"

#include <string.h>

static const struct model_arch_info archs[] = {
    {.name = "llama", .id = MODEL_ARCH_LLAMA, .rope_style = ROPE_ADJACENT,
     .act = MODEL_ACT_SILU, .norm_eps = 1e-5},
    {.name = "qwen2", .id = MODEL_ARCH_QWEN2, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QKV_BIAS, .act = MODEL_ACT_SILU, .norm_eps = 1e-5},
    {.name = "qwen3", .id = MODEL_ARCH_QWEN3, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM, .act = MODEL_ACT_SILU, .norm_eps = 1e-6},
    /* Gemma3TextConfig: sliding_window_pattern 6, rope_local_base_freq 10000,
     * rms_norm_eps 1e-6; 27B (62 layers) has query_pre_attn_scalar 168 =
     * hidden_size / num_attention_heads, the others head_dim (256). */
    {.name = "gemma3", .id = MODEL_ARCH_GEMMA3, .rope_style = ROPE_HALF_SPLIT,
     .features = MODEL_FEAT_QK_NORM | MODEL_FEAT_POST_NORMS, .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt = true, .norm_eps = 1e-6,
     .swa_pattern = 6, .rope_base_local = 10000.0, .qpas_embd_layers = 62},
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

const char *model_arch_list(void)
{
    return "llama, qwen2, qwen3, gemma3";
}
