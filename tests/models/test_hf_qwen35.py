#!/usr/bin/env python3
"""tests/models/test_hf_qwen35.py: Qwen3.5 Hugging Face folders
(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration: the
text model under model.language_model., lm_head beside it) against the
GGUF of the same weights.

bench/random_gguf.py writes the qwen35 and qwen35moe `tiny` files (F16);
this test writes each as a folder the way the published checkpoints are
laid out, undoing what llama.cpp's converter (conversion/qwen.py,
Qwen3NextModel and _LinearAttentionVReorderBase) did: norms stored as
w - 1 (Qwen3.5's RMSNorm multiplies by 1 + w; the DeltaNet's gated norm
as it is), A_log = log(-A), the dt bias under its HF name, the conv1d as
[C, 1, K], the value heads back from the tiled order to the grouped one
(in_proj_qkv's V rows, in_proj_z, in_proj_a / in_proj_b, A_log, dt_bias,
the conv1d's V channels, out_proj's columns), the experts fused as the
published checkpoints hold them (Qwen3_5MoeExperts: mlp.experts.gate_up_proj
[experts, 2 ff, hidden], gate the first half, down_proj [experts, hidden,
ff]) or a tensor each (mlp.experts.E.gate_proj.weight, ...), the shared
expert's gate [1, hidden]; plus a vision tensor and an MTP tensor the
loader must leave alone. config.json carries the text model's
settings in text_config (rope_parameters with partial_rotary_factor,
layer_types). Checked with IGNITE_MATMUL=exact: a 70-token prompt (the
chunked DeltaNet form) and greedy steps give the GGUF's logits within 1e-5
relative (A goes through exp(log) in float32) and the same greedy tokens;
the same folder with its value heads left tiled does not (the pairing is
what the grouped order changes), nor one whose fused experts hold up
before gate. Label: unit (about 6 s).

usage: test_hf_qwen35.py FORWARD_DUMP"""
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cpu"))
from bench_gguf import random_gguf  # noqa: E402
import randgguf_qwen35  # noqa: E402
from test_deltanet import dump  # noqa: E402

try:
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file
except ImportError:
    print("gguf or safetensors is missing (pip install -r tests/requirements.txt)")
    sys.exit(77)

BOUND = 1e-5
NORMS = {"attn_norm.weight": "input_layernorm.weight",
         "post_attention_norm.weight": "post_attention_layernorm.weight",
         "attn_q_norm.weight": "self_attn.q_norm.weight",
         "attn_k_norm.weight": "self_attn.k_norm.weight"}
PLAIN = {"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight",
         "attn_output.weight": "self_attn.o_proj.weight",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
         "ffn_down.weight": "mlp.down_proj.weight", "ffn_gate_inp.weight": "mlp.gate.weight",
         "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
         "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
         "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
         "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
         "ssm_norm.weight": "linear_attn.norm.weight"}
EXPERTS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
           "ffn_down_exps.weight": "down_proj"}


def grouped(x, axis, hk, r, d):
    """x with its value heads along `axis` (hv = hk r heads of d) from the
    tiled order [r, hk, d] (the converter's) to the grouped one [hk, r, d]."""
    y = np.moveaxis(x, axis, 0)
    rest = y.shape[1:]
    y = y.reshape(r, hk, d, *rest).swapaxes(0, 1).reshape(hk * r * d, *rest)
    return np.moveaxis(y, 0, axis)


def read_gguf(path):
    r = gguf.GGUFReader(path)
    w = {t.name: dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
         for t in r.tensors}
    types = {t.name: t.tensor_type.name for t in r.tensors}
    return w, types


def write_folder(path, gguf_path, arch, sh, regroup=True, experts="fused"):
    """experts: "fused" (gate_up_proj, down_proj), "swapped" (the same with
    up before gate: a mutant) or "each" (a tensor per expert)."""
    w, types = read_gguf(gguf_path)
    hk, hv, d = sh["dn_k"], sh["dn_v"], sh["dn_hd"]
    r = hv // hk
    g = (lambda x, axis, dd: grouped(x, axis, hk, r, dd)) if regroup else \
        (lambda x, axis, dd: x)
    pre = "model.language_model."
    out = {}

    def put(name, x, like):
        dt = np.float16 if types[like] == "F16" else np.float32
        out[name] = np.ascontiguousarray(x.astype(dt))
    put(pre + "embed_tokens.weight", w["token_embd.weight"], "token_embd.weight")
    put(pre + "norm.weight", w["output_norm.weight"] - 1, "output_norm.weight")
    if "output.weight" in w:
        put("lm_head.weight", w["output.weight"], "output.weight")
    for il in range(sh["layers"]):
        p, q = f"blk.{il}.", f"{pre}layers.{il}."
        for k, x in w.items():
            if not k.startswith(p):
                continue
            n = k[len(p):]
            if n in NORMS:
                put(q + NORMS[n], x - 1, k)
            elif n in PLAIN:
                put(q + PLAIN[n], x, k)
            elif n in EXPERTS and experts != "each":
                if n == "ffn_down_exps.weight":
                    put(q + "mlp.experts.down_proj", x, k)
                elif n == "ffn_gate_exps.weight":
                    up = w[p + "ffn_up_exps.weight"]
                    halves = (up, x) if experts == "swapped" else (x, up)
                    put(q + "mlp.experts.gate_up_proj", np.concatenate(halves, axis=1), k)
            elif n in EXPERTS:
                for e in range(x.shape[0]):
                    put(f"{q}mlp.experts.{e}.{EXPERTS[n]}.weight", x[e], k)
            elif n == "attn_qkv.weight":
                put(q + "linear_attn.in_proj_qkv.weight",
                    np.concatenate([x[:2 * hk * d], g(x[2 * hk * d:], 0, d)]), k)
            elif n == "ssm_conv1d.weight":  # [C, K] -> [C, 1, K]
                c = np.concatenate([x[:2 * hk * d], g(x[2 * hk * d:], 0, d)])
                put(q + "linear_attn.conv1d.weight", c[:, None, :], k)
            elif n == "attn_gate.weight":
                put(q + "linear_attn.in_proj_z.weight", g(x, 0, d), k)
            elif n in ("ssm_beta.weight", "ssm_alpha.weight"):
                hf = "in_proj_b" if n == "ssm_beta.weight" else "in_proj_a"
                put(f"{q}linear_attn.{hf}.weight", g(x, 0, 1), k)
            elif n == "ssm_dt.bias":
                put(q + "linear_attn.dt_bias", g(x, 0, 1), k)
            elif n == "ssm_a":
                put(q + "linear_attn.A_log", np.log(-g(x.astype(np.float64), 0, 1)), k)
            elif n == "ssm_out.weight":
                put(q + "linear_attn.out_proj.weight", g(x, 1, d), k)
            else:
                raise SystemExit(f"test_hf_qwen35: no HF name for {k}")
    # what the loader must not read: the vision tower, the MTP head
    out["model.visual.patch_embed.proj.weight"] = np.ones((8, 3, 2, 2), np.float32)
    out["mtp.fc.weight"] = np.ones((4, 4), np.float32)
    os.makedirs(path, exist_ok=True)
    save_file(out, os.path.join(path, "model.safetensors"))
    text = {"hidden_size": sh["embd"], "num_hidden_layers": sh["layers"],
            "num_attention_heads": sh["heads"], "num_key_value_heads": sh["kv"],
            "head_dim": sh["hd"], "vocab_size": sh["vocab"],
            "max_position_embeddings": sh["ctx"], "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "linear_conv_kernel_dim": sh["conv"], "linear_key_head_dim": d,
            "linear_value_head_dim": d, "linear_num_key_heads": hk, "linear_num_value_heads": hv,
            "layer_types": ["linear_attention" if randgguf_qwen35.recurrent(sh, i)
                            else "full_attention" for i in range(sh["layers"])],
            "rope_parameters": {"rope_type": "default", "rope_theta": sh["rope"],
                                "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                                "mrope_section": sh["sections"][:3]},
            "tie_word_embeddings": sh["tied"]}
    if arch == "qwen35moe":
        text.update(num_experts=sh["n_exp"], num_experts_per_tok=sh["used"],
                    moe_intermediate_size=sh["ff_exp"],
                    shared_expert_intermediate_size=sh["ff_shexp"])
        cls = "Qwen3_5MoeForConditionalGeneration"
    else:
        text["intermediate_size"] = sh["ff"]
        cls = "Qwen3_5ForConditionalGeneration"
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": [cls], "text_config": text,
                   "vision_config": {"depth": 1}, "tie_word_embeddings": sh["tied"]}, f)


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(11)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for arch, shapes in (("qwen35", randgguf_qwen35.SHAPES),
                             ("qwen35moe", randgguf_qwen35.MOE_SHAPES)):
            sh = shapes["tiny"]
            path = os.path.join(tmp, f"{arch}.gguf")
            random_gguf.write(path, "tiny", "F16", seed=3, arch=arch)
            prompt = [int(t) for t in rng.integers(0, sh["vocab"], 70)]
            fixed = [int(t) for t in rng.integers(0, sh["vocab"], 2)]
            base, gb, _ = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "g.bin"))
            # (label, value heads regrouped, experts' layout, must match)
            cases = [("as published", True, "fused", True),
                     ("value heads left tiled", False, "fused", False)]
            if arch == "qwen35moe":
                cases += [("experts a tensor each", True, "each", True),
                          ("fused experts up before gate", True, "swapped", False)]
            for i, (label, regroup, experts, must) in enumerate(cases):
                folder = os.path.join(tmp, f"{arch}-{i}")
                write_folder(folder, path, arch, sh, regroup, experts)
                lg, g, _ = dump(tool, folder, prompt, fixed, 4, os.path.join(tmp, "f.bin"))
                err = np.abs(lg.astype(np.float64) - base).max() / np.abs(base).max()
                same = err <= BOUND and g == gb
                if same != must:
                    ok = False
                print(f"{'ok' if same == must else 'FAIL':6} {arch} folder, {label}: "
                      f"relative {err:.2e} from the GGUF, greedy {g} vs {gb}"
                      f" ({'must' if must else 'must not'} match)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
