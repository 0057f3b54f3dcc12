/* models/tensors.c: the table of tensors (models/tensors.h), the one list
 * of the weights ignite knows, and the walker every other list became.
 * GGUF names are llama.cpp's (its llama-arch.cpp); Hugging Face names are
 * transformers' (modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py,
 * modeling_gemma3.py, modeling_qwen3_moe.py, modeling_gpt_oss.py,
 * modeling_qwen3_5_moe.py). Covered by tests/models/test_tensor_table.py. */
#include "models/tensors.h"

#include "models/model.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

#define HF(n) {{n, 0, 0}}

/* Per-model rows first; each scope in the order of the saved-cache id's
 * first pass (which the synthetic models' random stream and the loaders'
 * messages follow too). A new row goes where it reads best, with
 * .id_pass = TENSOR_ID_PRESENT. */
static const struct model_tensor table[] = {
    {.scope = TENSOR_PER_MODEL, .role = MODEL_TOK_EMBD, .gguf = "token_embd.weight",
     .hf = HF("embed_tokens.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_VOCAB,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .gathered = true,
     .split = TENSOR_SPLIT_ROWS},
    {.scope = TENSOR_PER_MODEL, .role = MODEL_OUTPUT_NORM, .gguf = "output_norm.weight",
     .hf = HF("norm.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM},
    {.scope = TENSOR_PER_MODEL, .role = MODEL_OUTPUT, .gguf = "output.weight",
     .hf = HF("lm_head.weight"), .hf_beside = true, .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_VOCAB, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_OUTPUT, .file_shows = true, .ties_to_embd = true,
     .split = TENSOR_SPLIT_ROWS},
    /* Gemma 4's per-layer embeddings (Gemma4TextModel's embed_tokens_per_layer,
     * per_layer_model_projection, per_layer_projection_norm): read in place,
     * a row per token, never expanded. */
    {.scope = TENSOR_PER_MODEL, .role = MODEL_PLE_TOK_EMBD, .gguf = "per_layer_token_embd.weight",
     .hf = HF("embed_tokens_per_layer.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_VOCAB, .cols = TENSOR_DIM_PLE_ALL, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_PLE, .gathered = true, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_MODEL, .role = MODEL_PLE_PROJ, .gguf = "per_layer_model_proj.weight",
     .hf = HF("per_layer_model_projection.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_PLE_ALL, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_PLE, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_MODEL, .role = MODEL_PLE_PROJ_NORM, .gguf = "per_layer_proj_norm.weight",
     .hf = HF("per_layer_projection_norm.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_PLE, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_PLE, .id_pass = TENSOR_ID_PRESENT},

    {.scope = TENSOR_PER_LAYER, .role = LAYER_ATTN_NORM, .gguf = "attn_norm.weight",
     .hf = HF("input_layernorm.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_WQ, .gguf = "attn_q.weight",
     .hf = HF("self_attn.q_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_Q_ROWS,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_ROWS,
     .fuse = TENSOR_FUSE_QKV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_WK, .gguf = "attn_k.weight",
     .hf = HF("self_attn.k_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_KV,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_ROWS,
     .fuse = TENSOR_FUSE_QKV, .layers = TENSOR_LAYERS_OWN_KV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_WV, .gguf = "attn_v.weight",
     .hf = HF("self_attn.v_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_KV,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_ROWS,
     .fuse = TENSOR_FUSE_QKV, .layers = TENSOR_LAYERS_OWN_V,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_BQ, .gguf = "attn_q.bias",
     .hf = HF("self_attn.q_proj.bias"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_Q, .kind = TENSOR_BIAS, .feature = MODEL_FEAT_QKV_BIAS,
     .file_shows = true, .split = TENSOR_SPLIT_ROWS, .fuse = TENSOR_FUSE_QKV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_BK, .gguf = "attn_k.bias",
     .hf = HF("self_attn.k_proj.bias"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_KV, .kind = TENSOR_BIAS, .feature = MODEL_FEAT_QKV_BIAS,
     .file_shows = true, .split = TENSOR_SPLIT_ROWS, .fuse = TENSOR_FUSE_QKV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_BV, .gguf = "attn_v.bias",
     .hf = HF("self_attn.v_proj.bias"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_KV, .kind = TENSOR_BIAS, .feature = MODEL_FEAT_QKV_BIAS,
     .file_shows = true, .split = TENSOR_SPLIT_ROWS, .fuse = TENSOR_FUSE_QKV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_WO, .gguf = "attn_output.weight",
     .hf = HF("self_attn.o_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_EMBD,
     .cols = TENSOR_DIM_Q, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_COLS,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    /* The FFN's input norm: HF's post_attention_layernorm in the Llama
     * block, pre_feedforward_layernorm where Gemma 3 adds the post norms
     * (and its post_attention_layernorm is the attention's output norm). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_NORM, .gguf = "ffn_norm.weight",
     .hf = {{"post_attention_layernorm.weight", 0, MODEL_FEAT_POST_NORMS},
            {"pre_feedforward_layernorm.weight", MODEL_FEAT_POST_NORMS, 0}},
     .gguf_alt = "post_attention_norm.weight", .gguf_alt_when = MODEL_FEAT_ATTN_SINKS | MODEL_FEAT_DELTANET,
     .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD,
     .kind = TENSOR_NORM},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE, .gguf = "ffn_gate.weight",
     .hf = HF("mlp.gate_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_FF,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_ROWS,
     .fuse = TENSOR_FUSE_GATE_UP, .unless = MODEL_FEAT_MOE, .also = MODEL_FEAT_MOE_MLP},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_UP, .gguf = "ffn_up.weight",
     .hf = HF("mlp.up_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_FF,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_ROWS,
     .fuse = TENSOR_FUSE_GATE_UP, .unless = MODEL_FEAT_MOE, .also = MODEL_FEAT_MOE_MLP},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_DOWN, .gguf = "ffn_down.weight",
     .hf = HF("mlp.down_proj.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_EMBD,
     .cols = TENSOR_DIM_FF, .kind = TENSOR_MATRIX, .split = TENSOR_SPLIT_COLS,
     .unless = MODEL_FEAT_MOE, .also = MODEL_FEAT_MOE_MLP},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_Q_NORM, .gguf = "attn_q_norm.weight",
     .hf = HF("self_attn.q_norm.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_HEAD, .kind = TENSOR_NORM, .feature = MODEL_FEAT_QK_NORM,
     .id_pass = TENSOR_ID_EXT,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_K_NORM, .gguf = "attn_k_norm.weight",
     .hf = HF("self_attn.k_norm.weight"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_HEAD, .kind = TENSOR_NORM, .feature = MODEL_FEAT_QK_NORM,
     .id_pass = TENSOR_ID_EXT, .layers = TENSOR_LAYERS_OWN_KV,
     .mixers = TENSOR_MIXER(LAYER_MIXER_ATTENTION)},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_ATTN_POST_NORM, .gguf = "post_attention_norm.weight",
     .hf = HF("post_attention_layernorm.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_POST_NORMS, .id_pass = TENSOR_ID_EXT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_POST_NORM, .gguf = "post_ffw_norm.weight",
     .hf = HF("post_feedforward_layernorm.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_POST_NORMS, .id_pass = TENSOR_ID_EXT},
    /* A mixture of experts (Qwen3MoeSparseMoeBlock: mlp.gate, mlp.experts.E.*:
     * a folder's experts are a tensor each, "%lld" the expert's number; the
     * weight points at each, struct model_weight's expert_data). The router stays F32
     * in llama.cpp's quantizations (llama-quant.cpp leaves ffn_gate_inp). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_INP, .gguf = "ffn_gate_inp.weight",
     .hf = {{"mlp.router.weight", MODEL_FEAT_MOE_BIAS, 0}, {"router.proj.weight",
             MODEL_FEAT_MOE_MLP, 0}, {"mlp.gate.weight", 0, 0}},
     .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_EXPERT,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX, .feature = MODEL_FEAT_MOE,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_EXPS, .gguf = "ffn_gate_exps.weight",
     .hf = {{"mlp.experts.gate_up_proj", MODEL_FEAT_MOE_BIAS, 0},
            {"experts.gate_up_proj", MODEL_FEAT_MOE_MLP, 0},
            {"mlp.experts.%lld.gate_proj.weight", 0, 0}}, .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_FF_EXP, .cols = TENSOR_DIM_EMBD,
     .kind = TENSOR_MATRIX, .feature = MODEL_FEAT_MOE, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_UP_EXPS, .gguf = "ffn_up_exps.weight",
     .hf = {{"mlp.experts.gate_up_proj", MODEL_FEAT_MOE_BIAS, 0},
            {"experts.gate_up_proj", MODEL_FEAT_MOE_MLP, 0},
            {"mlp.experts.%lld.up_proj.weight", 0, 0}}, .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_FF_EXP, .cols = TENSOR_DIM_EMBD,
     .kind = TENSOR_MATRIX, .feature = MODEL_FEAT_MOE, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_DOWN_EXPS, .gguf = "ffn_down_exps.weight",
     .hf = {{"mlp.experts.down_proj", MODEL_FEAT_MOE_BIAS, 0},
            {"experts.down_proj", MODEL_FEAT_MOE_MLP, 0},
            {"mlp.experts.%lld.down_proj.weight", 0, 0}}, .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_EMBD, .cols = TENSOR_DIM_FF_EXP,
     .kind = TENSOR_MATRIX, .feature = MODEL_FEAT_MOE, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},
    /* Gated DeltaNet (Qwen3_5GatedDeltaNet: linear_attn.*; llama.cpp's
     * converter stores -exp(A_log), squeezes the convolution and reorders the
     * value heads from grouped to tiled; the output norm is not widened). */
#define DN(r, g, h, R, C, k, sp)                                                             \
    {.scope = TENSOR_PER_LAYER, .role = r, .gguf = g, .hf = HF(h), .n_expert = TENSOR_DIM_ONE, \
     .rows = R, .cols = C, .kind = k, .feature = MODEL_FEAT_DELTANET, .split = sp,           \
     .id_pass = TENSOR_ID_PRESENT, .mixers = TENSOR_MIXER(LAYER_MIXER_DELTANET)}
#define HG TENSOR_SPLIT_HEADS_GATHERED
    DN(LAYER_DN_QKV, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", TENSOR_DIM_DN_CONV,
       TENSOR_DIM_EMBD, TENSOR_MATRIX, HG),
    DN(LAYER_DN_Z, "attn_gate.weight", "linear_attn.in_proj_z.weight", TENSOR_DIM_DN_V,
       TENSOR_DIM_EMBD, TENSOR_MATRIX, HG),
    DN(LAYER_DN_CONV, "ssm_conv1d.weight", "linear_attn.conv1d.weight", TENSOR_DIM_DN_CONV,
       TENSOR_DIM_DN_KERNEL, TENSOR_BIAS, HG),
    DN(LAYER_DN_DT, "ssm_dt.bias", "linear_attn.dt_bias", TENSOR_DIM_ONE, TENSOR_DIM_DN_VHEADS,
       TENSOR_BIAS, HG),
    DN(LAYER_DN_A, "ssm_a", "linear_attn.A_log", TENSOR_DIM_ONE, TENSOR_DIM_DN_VHEADS,
       TENSOR_BIAS, HG),
    DN(LAYER_DN_BETA, "ssm_beta.weight", "linear_attn.in_proj_b.weight", TENSOR_DIM_DN_VHEADS,
       TENSOR_DIM_EMBD, TENSOR_MATRIX, HG),
    DN(LAYER_DN_ALPHA, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", TENSOR_DIM_DN_VHEADS,
       TENSOR_DIM_EMBD, TENSOR_MATRIX, HG),
    /* one weight per head dim, every head's */
    DN(LAYER_DN_NORM, "ssm_norm.weight", "linear_attn.norm.weight", TENSOR_DIM_ONE,
       TENSOR_DIM_DN_HEAD, TENSOR_BIAS, TENSOR_SPLIT_NONE),
    DN(LAYER_DN_OUT, "ssm_out.weight", "linear_attn.out_proj.weight", TENSOR_DIM_EMBD,
       TENSOR_DIM_DN_V, TENSOR_MATRIX, HG),
#undef HG
#undef DN

    /* Gemma 4 (Gemma4TextDecoderLayer): a layer's per-layer embedding input
     * (per_layer_input_gate, per_layer_projection, post_per_layer_input_norm)
     * and its output scalar (layer_scalar). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_PLE_GATE, .gguf = "inp_gate.weight",
     .hf = HF("per_layer_input_gate.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_PLE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_PLE, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_PLE_PROJ, .gguf = "proj.weight",
     .hf = HF("per_layer_projection.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_EMBD, .cols = TENSOR_DIM_PLE, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_PLE, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_PLE_POST_NORM, .gguf = "post_norm.weight",
     .hf = HF("post_per_layer_input_norm.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_PLE, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_OUT_SCALE, .gguf = "layer_output_scale.weight",
     .hf = HF("layer_scalar"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_ONE, .kind = TENSOR_NORM, .feature = MODEL_FEAT_OUT_SCALE,
     .file_shows = true, .id_pass = TENSOR_ID_PRESENT},
    /* Gemma 4's mixture of experts (Gemma4TextDecoderLayer with
     * enable_moe_block: router.scale, pre_feedforward_layernorm_2,
     * post_feedforward_layernorm_1/_2, router.per_expert_scale). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_INP_SCALE, .gguf = "ffn_gate_inp.scale",
     .hf = HF("router.scale"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM, .feature = MODEL_FEAT_MOE_MLP,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_PRE_NORM_2, .gguf = "pre_ffw_norm_2.weight",
     .hf = HF("pre_feedforward_layernorm_2.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_MOE_MLP, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_POST_NORM_1, .gguf = "post_ffw_norm_1.weight",
     .hf = HF("post_feedforward_layernorm_1.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_MOE_MLP, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_POST_NORM_2, .gguf = "post_ffw_norm_2.weight",
     .hf = HF("post_feedforward_layernorm_2.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_NORM,
     .feature = MODEL_FEAT_MOE_MLP, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_DOWN_EXPS_SCALE, .gguf = "ffn_down_exps.scale",
     .hf = HF("router.per_expert_scale"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EXPERT, .kind = TENSOR_NORM, .feature = MODEL_FEAT_MOE_MLP,
     .id_pass = TENSOR_ID_PRESENT},

    /* gpt-oss (GptOssAttention, GptOssMLP; llama.cpp's openai-moe): wo's
     * bias, the sinks, the router's and the experts' biases (the HF names
     * are transformers'; a folder's experts are fused: gate_up_proj's even
     * rows are gate's, its odd ones up's, stored as MXFP4 _blocks and
     * _scales; models/hf_model.c's bind_fused). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_BO, .gguf = "attn_output.bias",
     .hf = HF("self_attn.o_proj.bias"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EMBD, .kind = TENSOR_BIAS, .feature = MODEL_FEAT_O_BIAS,
     .split = TENSOR_SPLIT_ONCE, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_ATTN_SINKS, .gguf = "attn_sinks.weight",
     .hf = HF("self_attn.sinks"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_HEADS, .kind = TENSOR_BIAS, .feature = MODEL_FEAT_ATTN_SINKS,
     .split = TENSOR_SPLIT_ROWS, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_INP_B, .gguf = "ffn_gate_inp.bias",
     .hf = HF("mlp.router.bias"), .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE,
     .cols = TENSOR_DIM_EXPERT, .kind = TENSOR_BIAS,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_BIAS, .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_EXPS_B, .gguf = "ffn_gate_exps.bias",
     .hf = HF("mlp.experts.gate_up_proj_bias"), .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_FF_EXP, .kind = TENSOR_BIAS,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_BIAS, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_UP_EXPS_B, .gguf = "ffn_up_exps.bias",
     .hf = HF("mlp.experts.gate_up_proj_bias"), .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_FF_EXP, .kind = TENSOR_BIAS,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_BIAS, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_DOWN_EXPS_B, .gguf = "ffn_down_exps.bias",
     .hf = HF("mlp.experts.down_proj_bias"), .n_expert = TENSOR_DIM_EXPERT,
     .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_BIAS,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_BIAS, .split = TENSOR_SPLIT_EXPERTS,
     .id_pass = TENSOR_ID_PRESENT},

    /* qwen35moe's shared expert (Qwen3_5MoeSparseMoeBlock: shared_expert,
     * shared_expert_gate, a [1, n_embd] Linear the converter keeps F32). */
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_INP_SHEXP,
     .gguf = "ffn_gate_inp_shexp.weight", .hf = HF("mlp.shared_expert_gate.weight"),
     .n_expert = TENSOR_DIM_ONE, .rows = TENSOR_DIM_ONE, .cols = TENSOR_DIM_EMBD,
     .kind = TENSOR_BIAS, .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_SHEXP,
     .id_pass = TENSOR_ID_PRESENT},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_GATE_SHEXP, .gguf = "ffn_gate_shexp.weight",
     .hf = HF("mlp.shared_expert.gate_proj.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_FF_SHEXP, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_SHEXP, .split = TENSOR_SPLIT_ROWS,
     .id_pass = TENSOR_ID_PRESENT,
     .fuse = TENSOR_FUSE_GATE_UP_SHEXP},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_UP_SHEXP, .gguf = "ffn_up_shexp.weight",
     .hf = HF("mlp.shared_expert.up_proj.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_FF_SHEXP, .cols = TENSOR_DIM_EMBD, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_SHEXP, .split = TENSOR_SPLIT_ROWS,
     .id_pass = TENSOR_ID_PRESENT,
     .fuse = TENSOR_FUSE_GATE_UP_SHEXP},
    {.scope = TENSOR_PER_LAYER, .role = LAYER_FFN_DOWN_SHEXP, .gguf = "ffn_down_shexp.weight",
     .hf = HF("mlp.shared_expert.down_proj.weight"), .n_expert = TENSOR_DIM_ONE,
     .rows = TENSOR_DIM_EMBD, .cols = TENSOR_DIM_FF_SHEXP, .kind = TENSOR_MATRIX,
     .feature = MODEL_FEAT_MOE | MODEL_FEAT_MOE_SHEXP, .split = TENSOR_SPLIT_COLS,
     .id_pass = TENSOR_ID_PRESENT},
};
#define N_ROWS ((int)(sizeof table / sizeof table[0]))

_Static_assert(N_ROWS == MODEL_ROLES + MODEL_LAYER_ROLES, "one row per role");

const struct model_tensor *model_tensor_table(int *n)
{
    *n = N_ROWS;
    return table;
}

const struct model_tensor *model_tensor_row(enum tensor_scope scope, int role)
{
    for (int i = 0; i < N_ROWS; i++)
        if (table[i].scope == scope && table[i].role == role)
            return &table[i];
    IG_ASSERT(!"a role without a row");
    return NULL;
}

int64_t model_tensor_dim(const struct model_hparams *hp, int64_t layer, enum tensor_dim d)
{
    (void)layer;
    switch (d) {
    case TENSOR_DIM_ONE: return 1;
    case TENSOR_DIM_EMBD: return hp->n_embd;
    case TENSOR_DIM_Q: return hp->n_head * hp->head_dim;
    case TENSOR_DIM_KV: return hp->n_head_kv * hp->head_dim;
    case TENSOR_DIM_HEAD: return hp->head_dim;
    case TENSOR_DIM_FF: return hp->n_ff;
    case TENSOR_DIM_VOCAB: return hp->n_vocab;
    case TENSOR_DIM_EXPERT: return hp->n_expert;
    case TENSOR_DIM_FF_EXP: return hp->n_ff_exp;
    case TENSOR_DIM_Q_ROWS: return hp->n_head * hp->head_dim * (hp->has_attn_gate ? 2 : 1);
    case TENSOR_DIM_DN_CONV: return (2 * hp->dn_k_heads + hp->dn_v_heads) * hp->dn_head_dim;
    case TENSOR_DIM_DN_V: return hp->dn_v_heads * hp->dn_head_dim;
    case TENSOR_DIM_DN_VHEADS: return hp->dn_v_heads;
    case TENSOR_DIM_DN_HEAD: return hp->dn_head_dim;
    case TENSOR_DIM_DN_KERNEL: return hp->dn_conv;
    case TENSOR_DIM_PLE: return hp->n_embd_per_layer;
    case TENSOR_DIM_PLE_ALL: return hp->n_layer * hp->n_embd_per_layer;
    case TENSOR_DIM_HEADS: return hp->n_head;

    case TENSOR_DIM_FF_SHEXP: return hp->n_ff_shexp;
    }
    IG_ASSERT(!"an unknown dimension");
    return 0;
}

void model_tensor_shape(const struct model_tensor *t, const struct model_hparams *hp,
                        int64_t layer, int64_t shape[3])
{
    shape[0] = model_tensor_dim(hp, layer, t->n_expert);
    shape[1] = model_tensor_dim(hp, layer, t->rows);
    shape[2] = model_tensor_dim(hp, layer, t->cols);
}

int64_t model_layer_dim(const struct model *m, int64_t layer, enum tensor_dim d)
{
    if (layer < 0)
        return model_tensor_dim(&m->hp, layer, d);
    IG_ASSERT(layer < m->hp.n_layer);
    const struct model_layer *L = &m->layers[layer];
    switch (d) {
    case TENSOR_DIM_Q: return L->n_head * L->head_dim;
    case TENSOR_DIM_KV: return L->n_head_kv * L->head_dim;
    case TENSOR_DIM_HEAD: return L->head_dim;
    case TENSOR_DIM_FF: /* a mixture of experts' dense MLP beside them (gemma4) */
        return L->ffn == LAYER_FFN_MOE ? L->n_ff_mlp : L->n_ff;
    case TENSOR_DIM_FF_EXP: return L->n_ff; /* a mixture of experts': an expert's */
    case TENSOR_DIM_EXPERT: return L->n_expert;
    case TENSOR_DIM_Q_ROWS: return L->n_head * L->head_dim * (L->attn_gate ? 2 : 1);
    case TENSOR_DIM_DN_CONV: return (2 * L->dn_k_heads + L->dn_v_heads) * L->dn_head_dim;
    case TENSOR_DIM_DN_V: return L->dn_v_heads * L->dn_head_dim;
    case TENSOR_DIM_DN_VHEADS: return L->dn_v_heads;
    case TENSOR_DIM_DN_HEAD: return L->dn_head_dim;
    case TENSOR_DIM_DN_KERNEL: return L->dn_conv;
    case TENSOR_DIM_HEADS: return L->n_head;
    case TENSOR_DIM_FF_SHEXP: return L->n_ff_shexp;
    default: return model_tensor_dim(&m->hp, layer, d);
    }
}

void model_weight_shape(const struct model_tensor *t, const struct model *m, int64_t layer,
                        int64_t shape[3])
{
    shape[0] = model_layer_dim(m, layer, t->n_expert);
    shape[1] = model_layer_dim(m, layer, t->rows);
    shape[2] = model_layer_dim(m, layer, t->cols);
}

unsigned model_features(const struct model_hparams *hp)
{
    return (hp->has_qkv_bias ? MODEL_FEAT_QKV_BIAS : 0u) |
           (hp->has_qk_norm ? MODEL_FEAT_QK_NORM : 0u) |
           (hp->has_post_norms ? MODEL_FEAT_POST_NORMS : 0u) |
           (hp->tied_embeddings ? 0u : MODEL_FEAT_OUTPUT) |
           (hp->has_moe ? MODEL_FEAT_MOE : 0u) | (hp->has_ple ? MODEL_FEAT_PLE : 0u) |
           (hp->has_out_scale ? MODEL_FEAT_OUT_SCALE : 0u) |
           (hp->has_moe_mlp ? MODEL_FEAT_MOE_MLP : 0u) |
           (hp->has_deltanet ? MODEL_FEAT_DELTANET : 0u) |
           (hp->has_o_bias ? MODEL_FEAT_O_BIAS : 0u) |
           (hp->has_attn_sinks ? MODEL_FEAT_ATTN_SINKS : 0u) |
           (hp->has_moe_bias ? MODEL_FEAT_MOE_BIAS : 0u) |
           (hp->has_moe_shexp ? MODEL_FEAT_MOE_SHEXP : 0u);
}

void model_features_set(struct model_hparams *hp, unsigned features)
{
    hp->has_qkv_bias = features & MODEL_FEAT_QKV_BIAS;
    hp->has_qk_norm = features & MODEL_FEAT_QK_NORM;
    hp->has_post_norms = features & MODEL_FEAT_POST_NORMS;
    hp->tied_embeddings = !(features & MODEL_FEAT_OUTPUT);
    hp->has_moe = features & MODEL_FEAT_MOE;
    hp->has_deltanet = features & MODEL_FEAT_DELTANET;

    hp->has_ple = features & MODEL_FEAT_PLE;
    hp->has_out_scale = features & MODEL_FEAT_OUT_SCALE;
    hp->has_moe_mlp = features & MODEL_FEAT_MOE_MLP;

    hp->has_o_bias = features & MODEL_FEAT_O_BIAS;
    hp->has_attn_sinks = features & MODEL_FEAT_ATTN_SINKS;
    hp->has_moe_bias = features & MODEL_FEAT_MOE_BIAS;

    hp->has_moe_shexp = features & MODEL_FEAT_MOE_SHEXP;
}

const char *model_feature_name(unsigned feature)
{
    switch (feature) {
    case MODEL_FEAT_QKV_BIAS: return "Q/K/V biases";
    case MODEL_FEAT_QK_NORM: return "Q/K head norms";
    case MODEL_FEAT_POST_NORMS: return "post-attention and post-FFN norms";
    case MODEL_FEAT_OUTPUT: return "output head";
    case MODEL_FEAT_MOE: return "mixture of experts";
    case MODEL_FEAT_DELTANET: return "gated DeltaNet";

    case MODEL_FEAT_PLE: return "per-layer embeddings";
    case MODEL_FEAT_OUT_SCALE: return "layer output scales";
    case MODEL_FEAT_MOE_MLP: return "a dense MLP beside the experts";

    case MODEL_FEAT_O_BIAS: return "attention output bias";
    case MODEL_FEAT_ATTN_SINKS: return "attention sinks";
    case MODEL_FEAT_MOE_BIAS: return "router and expert biases";

    case MODEL_FEAT_MOE_SHEXP: return "a shared expert";
    }
    return "?";
}

bool model_tensor_present(const struct model_tensor *t, unsigned features)
{
    return (t->feature & features) == t->feature &&
           (!(t->unless & features) || (t->also & features));
}

bool model_layer_holds(const struct model *m, const struct model_tensor *t, int64_t layer)
{
    if (t->scope != TENSOR_PER_LAYER || t->layers == TENSOR_LAYERS_ALL || !m->layers)
        return true;
    const struct model_layer *L = &m->layers[layer];
    if (L->kv_shared)
        return false;
    return t->layers != TENSOR_LAYERS_OWN_V || !L->v_is_k;
}

void model_tensor_gguf_name(const struct model_tensor *t, int64_t layer, unsigned features,
                            char *buf, size_t cap)
{
    const char *name = t->gguf_alt && (features & t->gguf_alt_when)
                           ? t->gguf_alt
                           : t->gguf;
    if (t->scope == TENSOR_PER_LAYER)
        snprintf(buf, cap, "blk.%lld.%s", (long long)layer, name);
    else
        snprintf(buf, cap, "%s", name);
}

bool model_tensor_in_layer(const struct model_tensor *t, const struct model_layer *L)
{
    return !t->mixers || !L || (t->mixers & TENSOR_MIXER(L->mixer));
}

const char *model_tensor_hf_name(const struct model_tensor *t, unsigned features)
{
    for (int i = 0; i < TENSOR_HF_NAMES && t->hf[i].name; i++)
        if ((features & t->hf[i].when) == t->hf[i].when && !(features & t->hf[i].unless))
            return t->hf[i].name;
    return NULL;
}

struct model_weight *model_weight_at(struct model *m, const struct model_tensor *t,
                                     int64_t layer)
{
    if (t->scope == TENSOR_PER_MODEL)
        return &m->w[t->role];
    IG_ASSERT(layer >= 0 && layer < m->hp.n_layer);
    return &m->layers[layer].w[t->role];
}

void model_tensors_tie(struct model *m)
{
    unsigned f = model_features(&m->hp);
    for (int i = 0; i < N_ROWS; i++)
        if (table[i].ties_to_embd && !model_tensor_present(&table[i], f)) {
            IG_ASSERT(table[i].scope == TENSOR_PER_MODEL);
            m->w[table[i].role] = m->w[MODEL_TOK_EMBD];
        }
}

/* ---- the walker ------------------------------------------------------------ */

static void begin(struct model_tensor_it *it, const struct model *m, int64_t l0, int64_t l1,
                  unsigned flags)
{
    *it = (struct model_tensor_it){.m = m, .flags = flags, .features = model_features(&m->hp),
                                   .row = -1, .layer = l0, .layer_end = l1};
}

void model_tensors_begin(struct model_tensor_it *it, const struct model *m, unsigned flags)
{
    begin(it, m, flags & MODEL_TENSORS_MODEL ? -1 : 0,
          flags & MODEL_TENSORS_LAYERS ? m->hp.n_layer : 0, flags);
}

void model_tensors_begin_layer(struct model_tensor_it *it, const struct model *m, int64_t layer,
                               unsigned flags)
{
    IG_ASSERT(layer >= 0 && layer < m->hp.n_layer);
    begin(it, m, layer, layer + 1, (flags & ~MODEL_TENSORS_MODEL) | MODEL_TENSORS_LAYERS);
}

/* Whether the walk yields row t. */
static bool wanted(const struct model_tensor_it *it, const struct model_tensor *t)
{
    if (t->scope == TENSOR_PER_LAYER && it->m->layers &&
        !model_tensor_in_layer(t, &it->m->layers[it->layer]))
        return false;
    if (it->flags & MODEL_TENSORS_ABSENT)
        return true;
    if (model_tensor_present(t, it->features))
        return it->layer < 0 || model_layer_holds(it->m, t, it->layer);
    return it->flags & MODEL_TENSORS_TIED && t->ties_to_embd;
}

bool model_tensors_next(struct model_tensor_it *it)
{
    /* layer -1 walks the per-model rows, 0.. the per-layer rows */
    while (it->layer < it->layer_end) {
        enum tensor_scope scope = it->layer < 0 ? TENSOR_PER_MODEL : TENSOR_PER_LAYER;
        while (++it->row < N_ROWS) {
            const struct model_tensor *t = &table[it->row];
            if (t->scope != scope || !wanted(it, t))
                continue;
            it->t = t;
            it->w = scope == TENSOR_PER_MODEL ? &it->m->w[t->role]
                                              : &it->m->layers[it->layer].w[t->role];
            return true;
        }
        it->row = -1;
        /* from the per-model rows straight to the layers the flags ask for */
        it->layer = it->layer < 0 && !(it->flags & MODEL_TENSORS_LAYERS) ? it->layer_end
                                                                         : it->layer + 1;
    }
    it->t = NULL;
    it->w = NULL;
    return false;
}
