"""tests/pylib/gptosshf.py: a GptOssForCausalLM folder written from a
gpt-oss GGUF's weights, in Hugging Face's layout: the inverse of llama.cpp's
converter (conversion/gpt_oss.py). The experts' ggml MXFP4 blocks (a scale
byte, then byte j holding elements j and j + 16) become `_blocks` (byte j
holding elements 2j and 2j + 1) and `_scales`; gate and up interleave into
gate_up_proj's even and odd rows, their biases likewise; the sinks lose
".weight". The other matrices must be F16 or F32 in the GGUF (a folder
holds no Q8_0): bench/random_gguf.py's gpt-oss MXFP4_F16 type.
Used by tests/cpu/test_gptoss_hf.py."""
import json
import os

import numpy as np

LAYER = {  # GGUF name after "blk.N." -> HF name after "model.layers.N."
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_sinks.weight": "self_attn.sinks",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
}
MODEL = {"token_embd.weight": "model.embed_tokens.weight",
         "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}


def hf_mxfp4(raw, rows, cols):
    """ggml MXFP4 bytes of [E, rows, cols] -> (HF blocks [E, rows, cols/32, 16],
    scales [E, rows, cols/32])."""
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, rows, cols // 32, 17)
    scales = blk[..., 0].copy()
    qs = blk[..., 1:]
    vals = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # elements 0..31 in order
    blocks = (vals[..., 0::2] | (vals[..., 1::2] << 4)).astype(np.uint8)
    return blocks, scales


def interleave(a, b, axis):
    out = np.stack([a, b], axis=axis + 1)
    shape = list(a.shape)
    shape[axis] *= 2
    return out.reshape(shape)


def field(r, key):
    return r.fields[key].contents()


def write_folder(gguf_path, folder):
    """The folder (config.json + model.safetensors) of gguf_path's weights."""
    import gguf
    from safetensors.numpy import save_file
    r = gguf.GGUFReader(gguf_path)
    a = "gpt-oss"
    n_layer = field(r, f"{a}.block_count")
    E = field(r, f"{a}.expert_count")
    embd = field(r, f"{a}.embedding_length")
    ff = field(r, f"{a}.expert_feed_forward_length")
    t = {x.name: x for x in r.tensors}
    out = {}

    def plain(x):
        kind = x.tensor_type.name
        assert kind in ("F32", "F16"), f"{x.name} is {kind}: a folder holds F32, F16, BF16"
        return np.array(x.data)

    for g, h in MODEL.items():
        out[h] = plain(t[g])
    for i in range(n_layer):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        for g, h in LAYER.items():
            out[q + h] = plain(t[p + g])
        gate = hf_mxfp4(t[p + "ffn_gate_exps.weight"].data, ff, embd)
        up = hf_mxfp4(t[p + "ffn_up_exps.weight"].data, ff, embd)
        down = hf_mxfp4(t[p + "ffn_down_exps.weight"].data, embd, ff)
        e = q + "mlp.experts."
        out[e + "gate_up_proj_blocks"] = interleave(gate[0], up[0], 1)
        out[e + "gate_up_proj_scales"] = interleave(gate[1], up[1], 1)
        out[e + "gate_up_proj_bias"] = interleave(plain(t[p + "ffn_gate_exps.bias"]),
                                                  plain(t[p + "ffn_up_exps.bias"]), 1)
        out[e + "down_proj_blocks"], out[e + "down_proj_scales"] = down
        out[e + "down_proj_bias"] = plain(t[p + "ffn_down_exps.bias"])
    window = field(r, f"{a}.attention.sliding_window")
    cfg = {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "hidden_size": embd, "num_hidden_layers": n_layer,
        "num_attention_heads": field(r, f"{a}.attention.head_count"),
        "num_key_value_heads": field(r, f"{a}.attention.head_count_kv"),
        "head_dim": field(r, f"{a}.attention.key_length"),
        "num_local_experts": E, "num_experts_per_tok": field(r, f"{a}.expert_used_count"),
        "intermediate_size": ff, "vocab_size": int(t["token_embd.weight"].shape[1]),
        "max_position_embeddings": field(r, f"{a}.context_length"),
        "rms_norm_eps": float(field(r, f"{a}.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(r, f"{a}.rope.freq_base")),
        "rope_scaling": {"rope_type": "yarn",
                         "factor": float(field(r, f"{a}.rope.scaling.factor")),
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings":
                             field(r, f"{a}.rope.scaling.original_context_length")},
        "sliding_window": window,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                        for i in range(n_layer)],
        "attention_bias": True, "tie_word_embeddings": False, "hidden_act": "silu",
        "swiglu_limit": 7.0,
        "quantization_config": {"quant_method": "mxfp4",
                                "modules_to_not_convert": ["model.layers.*.self_attn",
                                                           "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"]},
    }
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file({k: np.ascontiguousarray(v) for k, v in out.items()},
              os.path.join(folder, "model.safetensors"))
    return folder
