#!/usr/bin/env python3
"""tests/models/test_tensor_table.py: the table of tensors (models/tensors.h)
is walked whole by every loader and backend (tensor_table_check.c says
what each check is), on:
  - pairs of the same weights: a Hugging Face folder (F32 safetensors) and
    a GGUF written from it here, with names mapped by this test's own list
    (llama.cpp's converter's names, not ignite's table): LlamaForCausalLM
    untied, Qwen2ForCausalLM with Q/K/V biases, Qwen3ForCausalLM (head
    norms), Gemma3ForCausalLM (four norms a layer, HF's
    post_attention_layernorm being GGUF's post_attention_norm) and
    Gemma3ForConditionalGeneration untied (the text model under
    language_model.model., the head beside it); both loaders must bind
    every weight, alike;
  - quantized GGUFs (Q8_0 matrices, so the CPU packs them) of llama tied
    and untied, llama with Q/K/V biases (a file's biases turn the feature
    on), qwen2, qwen3 and gemma3 (tests/pylib/archgen.py);
  - a qwen3moe GGUF (bench/random_gguf.py's tiny shape in Q8_0: a router
    and three expert tensors a layer, no dense FFN; each expert packed on
    its own; the emulated CUDA backend uploads it: its bytes the plan's and
    the table's sum, the routers f32), a gpt-oss GGUF (the
    tiny shape in MXFP4: sinks, biases on wo, the router and the experts,
    the FFN norm under its GGUF name post_attention_norm), and a
    Qwen3MoeForCausalLM folder (a tensor per expert) with the GGUF of its
    weights (tests/pylib/moegen.py);
  - a qwen35 GGUF (bench/random_gguf.py's tiny shape in Q8_0: three gated
    DeltaNet layers, whose rows are not the attention's, and a gated
    attention layer; uploaded likewise) and a qwen35moe one (the same
    layers, experts and a shared expert with its F32 gate; likewise);
    what backend_gpu_missing names (gpt-oss's sinks) is refused in one line;
  - the synthetic models Llama-tiny (Q4_K_M), Qwen3-tiny and Gemma3-tiny.
The GGUFs are not faithful conversions (no Q/K permutation for llama): only
which weight is bound where is checked, not a forward. Every f16 matrix is
a multiple of 256 bytes (head_dim 64, widths of 128), so the GPU plan's
bytes are the table's plain sum. Label: unit."""
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import archgen  # noqa: E402
import moegen  # noqa: E402
from bench_gguf import random_gguf  # noqa: E402
from igtest import check, summary  # noqa: E402

TOOL = sys.argv[1] if len(sys.argv) > 1 else "build/tests/models/tensor_table_check"
ENV = {k: v for k, v in os.environ.items() if k != "IGNITE_MATMUL"}  # the int8 path packs

E, FF, NH, NKV, HD, V, NL = 128, 256, 2, 1, 64, 256, 2

# Hugging Face's name (after the text model's prefix) -> llama.cpp's.
TOP = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
         "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "pre_feedforward_layernorm": "ffn_norm",
         "post_feedforward_layernorm": "post_ffw_norm"}


def hf_weights(arch, rng, prefix, head):
    """{HF name: f32 array} of a tiny model of class `arch`; `head`: the
    untied output head's name, or None."""
    gemma = arch.startswith("Gemma3")
    bias = arch == "Qwen2ForCausalLM"
    qk_norm = arch.startswith(("Qwen3", "Gemma3"))

    def m(r, c):
        return (rng.standard_normal((r, c)) / np.sqrt(c)).astype(np.float32)

    def norm(n):
        return (0.1 * rng.standard_normal(n) + (0 if gemma else 1)).astype(np.float32)

    t = {prefix + "embed_tokens.weight": m(V, E), prefix + "norm.weight": norm(E)}
    if head:
        t[head] = m(V, E)
    for i in range(NL):
        p = f"{prefix}layers.{i}."
        t[p + "input_layernorm.weight"] = norm(E)
        t[p + "self_attn.q_proj.weight"] = m(NH * HD, E)
        t[p + "self_attn.k_proj.weight"] = m(NKV * HD, E)
        t[p + "self_attn.v_proj.weight"] = m(NKV * HD, E)
        t[p + "self_attn.o_proj.weight"] = m(E, NH * HD)
        if bias:
            for k, n in (("q", NH), ("k", NKV), ("v", NKV)):
                t[p + f"self_attn.{k}_proj.bias"] = (0.5 * rng.standard_normal(n * HD)).astype(np.float32)
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = norm(HD)
            t[p + "self_attn.k_norm.weight"] = norm(HD)
        t[p + "post_attention_layernorm.weight"] = norm(E)
        if gemma:
            t[p + "pre_feedforward_layernorm.weight"] = norm(E)
            t[p + "post_feedforward_layernorm.weight"] = norm(E)
        t[p + "mlp.gate_proj.weight"] = m(FF, E)
        t[p + "mlp.up_proj.weight"] = m(FF, E)
        t[p + "mlp.down_proj.weight"] = m(E, FF)
    return t


def gguf_name(name, prefix, head, gemma):
    if name == head:
        return "output.weight"
    rest = name[len(prefix):]
    if rest in TOP:
        return TOP[rest]
    _, i, part = rest.split(".", 2)
    part, kind = part.rsplit(".", 1)
    if part == "post_attention_layernorm":  # the FFN's input norm, but Gemma 3's own
        g = "post_attention_norm" if gemma else "ffn_norm"
    else:
        g = LAYER[part]
    return f"blk.{i}.{g}.{kind}"


def write_pair(d, arch, seed, tied=True, prefix="model.", head="lm_head.weight"):
    """A folder and a GGUF of the same random weights; returns their paths."""
    rng = np.random.default_rng(seed)
    gemma = arch.startswith("Gemma3")
    head = None if tied else head
    t = hf_weights(arch, rng, prefix, head)
    folder = os.path.join(d, arch + ("" if tied else "_untied"))
    os.makedirs(folder)
    cfg = {"hidden_size": E, "intermediate_size": FF, "num_hidden_layers": NL,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "vocab_size": V, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "tie_word_embeddings": tied,
           "hidden_act": "gelu_pytorch_tanh" if gemma else "silu"}
    if arch == "Gemma3ForConditionalGeneration":
        cfg = {"text_config": dict(cfg, sliding_window=16), "tie_word_embeddings": tied}
    elif gemma:
        cfg["sliding_window"] = 16
    cfg["architectures"] = [arch]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(t, os.path.join(folder, "model.safetensors"))

    ga = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
          "Qwen3ForCausalLM": "qwen3"}.get(arch, "gemma3")
    path = folder + ".gguf"
    w = gguf.GGUFWriter(path, ga)
    u32, f32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    for k, v in {"block_count": NL, "context_length": 256, "embedding_length": E,
                 "feed_forward_length": FF, "attention.head_count": NH,
                 "attention.head_count_kv": NKV, "attention.key_length": HD,
                 "attention.value_length": HD}.items():
        w.add_key_value(f"{ga}.{k}", v, u32)
    w.add_key_value(f"{ga}.rope.freq_base", 10000.0, f32)
    w.add_key_value(f"{ga}.attention.layer_norm_rms_epsilon", 1e-6, f32)
    if gemma:
        w.add_key_value(f"{ga}.attention.sliding_window", 16, u32)
    for name, a in t.items():
        if gemma and a.ndim == 1:
            a = a + np.float32(1)  # the converter stores Gemma's norms as 1 + w
        w.add_tensor(gguf_name(name, prefix, head, gemma), np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return folder, path


def run(*models):
    r = subprocess.run([TOOL, *models], capture_output=True, text=True, env=ENV)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, f"tensor_table_check {' '.join(models)}: exit {r.returncode}")


def main():
    with tempfile.TemporaryDirectory() as d:
        pairs = [("LlamaForCausalLM", dict(tied=False)),
                 ("Qwen2ForCausalLM", dict()),
                 ("Qwen3ForCausalLM", dict(tied=False)),
                 ("Gemma3ForCausalLM", dict()),
                 ("Gemma3ForConditionalGeneration",
                  dict(tied=False, prefix="language_model.model.",
                       head="language_model.lm_head.weight"))]
        for seed, (arch, kw) in enumerate(pairs):
            run(*write_pair(d, arch, seed, **kw))

        Q8 = archgen.QT.Q8_0
        dims = dict(n_layer=NL, n_embd=E, n_head=NH, n_head_kv=NKV, n_ff=FF, n_vocab=V,
                    mat=Q8, emb=Q8)
        rng = np.random.default_rng(9)
        biases = {f"blk.{i}.attn_{k}.bias": 0.1 * rng.standard_normal(n * HD)
                  for i in range(NL) for k, n in (("q", NH), ("k", NKV), ("v", NKV))}
        for name, arch, kw in (("llama_tied", "llama", dict()),
                               ("llama_untied", "llama", dict(tied=False)),
                               ("llama_bias", "llama", dict(tensors=biases)),
                               ("qwen2", "qwen2", dict(tied=False)),
                               ("qwen3", "qwen3", dict()),
                               ("gemma3", "gemma3", dict(tied=False))):
            p = os.path.join(d, name + ".gguf")
            archgen.write_model(p, arch, seed=len(name), **dims, **kw)
            run(p)

        moe = os.path.join(d, "qwen3moe.gguf")
        random_gguf.write(moe, "tiny", "Q8_0", arch="qwen3moe")
        run(moe)
        oss = os.path.join(d, "gpt-oss.gguf")
        random_gguf.write(oss, "tiny", "MXFP4", arch="gpt-oss")
        run(oss)
        folder, path, _ = moegen.write_folder_and_gguf(d, 3, True)
        run(folder, path)
        hybrid = os.path.join(d, "qwen35.gguf")
        random_gguf.write(hybrid, "tiny", "Q8_0", arch="qwen35")
        run(hybrid)
        hybrid_moe = os.path.join(d, "qwen35moe.gguf")
        random_gguf.write(hybrid_moe, "tiny", "Q8_0", arch="qwen35moe")
        run(hybrid_moe)

        for spec in ("synthetic:Llama-tiny:Q4_K_M", "synthetic:Qwen3-tiny:Q8_0",
                     "synthetic:Gemma3-tiny:Q4_0"):
            run(spec)
    return summary("test_tensor_table")


if __name__ == "__main__":
    sys.exit(main())
