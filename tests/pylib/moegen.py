"""tests/pylib/moegen.py: a Qwen3MoeForCausalLM folder (F32 safetensors, a
tensor per expert) and the GGUF of the same weights (llama.cpp's qwen3moe
names, the experts stacked), written with this file's own list of names:
what tests/cpu/test_moe.py runs both of and tests/models/test_tensor_table.py
binds both of."""
import json
import os

import gguf
import numpy as np


def write_folder_and_gguf(tmp, seed, norm_topk):
    """A Qwen3MoeForCausalLM folder (F32 safetensors) and the GGUF of its
    weights (llama.cpp's names, experts stacked); returns both paths."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    E, NH, NKV, HD, FE, NE, K, V, NL = 128, 4, 2, 32, 96, 8, 2, 64, 2

    def m(r, c, gain=1.0):
        return (gain * rng.standard_normal((r, c)) / np.sqrt(c)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    hf = {"model.embed_tokens.weight": m(V, E), "model.norm.weight": norm(E),
          "lm_head.weight": m(V, E, 4.0)}
    gg = {"token_embd.weight": hf["model.embed_tokens.weight"],
          "output_norm.weight": hf["model.norm.weight"], "output.weight": hf["lm_head.weight"]}
    for i in range(NL):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        parts = [("input_layernorm.weight", "attn_norm.weight", norm(E)),
                 ("self_attn.q_proj.weight", "attn_q.weight", m(NH * HD, E)),
                 ("self_attn.k_proj.weight", "attn_k.weight", m(NKV * HD, E)),
                 ("self_attn.v_proj.weight", "attn_v.weight", m(NKV * HD, E)),
                 ("self_attn.o_proj.weight", "attn_output.weight", m(E, NH * HD)),
                 ("self_attn.q_norm.weight", "attn_q_norm.weight", norm(HD)),
                 ("self_attn.k_norm.weight", "attn_k_norm.weight", norm(HD)),
                 ("post_attention_layernorm.weight", "ffn_norm.weight", norm(E)),
                 ("mlp.gate.weight", "ffn_gate_inp.weight", m(NE, E, 4.0))]
        for h_name, g_name, a in parts:
            hf[p + h_name], gg[b + g_name] = a, a
        for proj, gname, shape in (("gate_proj", "ffn_gate_exps", (FE, E)),
                                   ("up_proj", "ffn_up_exps", (FE, E)),
                                   ("down_proj", "ffn_down_exps", (E, FE))):
            experts = [m(*shape) for _ in range(NE)]
            for e, a in enumerate(experts):
                hf[f"{p}mlp.experts.{e}.{proj}.weight"] = a
            gg[f"{b}{gname}.weight"] = np.stack(experts)
    folder = os.path.join(tmp, f"qwen3moe-folder-{int(norm_topk)}")
    os.makedirs(folder)
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": E,
           "intermediate_size": 3 * E, "num_hidden_layers": NL, "num_attention_heads": NH,
           "num_key_value_heads": NKV, "head_dim": HD, "vocab_size": V,
           "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "tie_word_embeddings": False, "hidden_act": "silu", "num_experts": NE,
           "num_experts_per_tok": K, "moe_intermediate_size": FE, "norm_topk_prob": norm_topk,
           "decoder_sparse_step": 1, "mlp_only_layers": []}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(hf, os.path.join(folder, "model.safetensors"))
    path = folder + ".gguf"
    w = gguf.GGUFWriter(path, "qwen3moe")
    u32 = gguf.GGUFValueType.UINT32
    for k, v in {"block_count": NL, "context_length": 512, "embedding_length": E,
                 "feed_forward_length": 3 * E, "attention.head_count": NH,
                 "attention.head_count_kv": NKV, "attention.key_length": HD,
                 "attention.value_length": HD, "expert_count": NE, "expert_used_count": K,
                 "expert_feed_forward_length": FE}.items():
        w.add_key_value(f"qwen3moe.{k}", v, u32)
    w.add_key_value("qwen3moe.rope.freq_base", 1000000.0, gguf.GGUFValueType.FLOAT32)
    w.add_key_value("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6,
                    gguf.GGUFValueType.FLOAT32)
    for name, a in gg.items():
        w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return folder, path, V
