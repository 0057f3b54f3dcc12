#!/usr/bin/env python3
"""tests/models/test_hf_gemma4.py: Gemma 4 Hugging Face folders
(Gemma4ForCausalLM; Gemma4ForConditionalGeneration's text model under
model.language_model.) against the GGUF of the same weights.

bench/random_gguf.py writes the gemma4 `tiny` file (F16: 9 layers, full
every third, window 16, head dims 64 sliding / 128 full, 2 KV heads sliding
/ 1 full with V = K there, the last 3 layers reading earlier layers' K/V
with FFNs twice as wide, per-layer embeddings of 32, proportional RoPE on a
quarter of the full layers' pairs, logits soft-capped at 30). This test
writes it as the folders transformers' Gemma 4 classes load: the GGUF's
names mapped back to transformers' (norms as they are: Gemma4RMSNorm
multiplies by w), no rope_freqs (config.json's rope_parameters say it), the
shape in Gemma4TextConfig's keys (head_dim, global_head_dim,
num_global_key_value_heads with attention_k_eq_v, num_kv_shared_layers,
use_double_wide_mlp, hidden_size_per_layer_input, layer_types,
final_logit_softcapping). The conditional-generation folder also holds a
vision tensor and a shared layer's K projection, which the loader must
leave alone. Checked with IGNITE_MATMUL=exact: a 40-token prompt (the
window crossed), 4 fixed decode tokens and 4 greedy ones give the GGUF's
logits within 1e-5 relative and its greedy tokens; the same folder with
partial_rotary_factor 0.5 must not (the proportional RoPE is read from
config.json). The mixture of experts: the gemma4 `moe-tiny` file (F16, 6
layers, 8 experts of 128, 2 used, beside a dense MLP of 512) written as a
Gemma4ForCausalLM folder with enable_moe_block (router.proj, router.scale,
router.per_expert_scale, the experts fused as experts.gate_up_proj [E, 2F,
H], each expert's gate rows then its up rows, and experts.down_proj [E, H,
F]; pre_feedforward_layernorm_2, post_feedforward_layernorm_1/_2) gives
the GGUF's logits within the same bound and its greedy tokens; with the
gate and up halves swapped it must not. Bad folders (a per-layer embedding
gate missing; a shared layer's FFN of the single width; the MoE block on
a folder without experts; per-layer embeddings or experts in a folder whose
config.json says none) are refused with one line and status 4. Label:
unit (about 7 s).

usage: test_hf_gemma4.py FORWARD_DUMP"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from bench_gguf import random_gguf  # noqa: E402
import randgguf_gemma4  # noqa: E402

try:
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file
except ImportError:
    print("gguf or safetensors is missing (pip install -r tests/requirements.txt)")
    sys.exit(77)

BOUND = 1e-5
IG_E_MODEL = 4
LAYER = {"attn_norm.weight": "input_layernorm.weight",
         "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight",
         "attn_output.weight": "self_attn.o_proj.weight",
         "attn_q_norm.weight": "self_attn.q_norm.weight",
         "attn_k_norm.weight": "self_attn.k_norm.weight",
         "post_attention_norm.weight": "post_attention_layernorm.weight",
         "ffn_norm.weight": "pre_feedforward_layernorm.weight",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
         "ffn_down.weight": "mlp.down_proj.weight",
         "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
         "inp_gate.weight": "per_layer_input_gate.weight",
         "proj.weight": "per_layer_projection.weight",
         "post_norm.weight": "post_per_layer_input_norm.weight",
         "layer_output_scale.weight": "layer_scalar",
         # the mixture of experts (Gemma4TextRouter, Gemma4TextExperts)
         "ffn_gate_inp.weight": "router.proj.weight", "ffn_gate_inp.scale": "router.scale",
         "ffn_down_exps.scale": "router.per_expert_scale",
         "ffn_down_exps.weight": "experts.down_proj",
         "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
         "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
         "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight"}
MODEL = {"token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight",
         "per_layer_token_embd.weight": "embed_tokens_per_layer.weight",
         "per_layer_model_proj.weight": "per_layer_model_projection.weight",
         "per_layer_proj_norm.weight": "per_layer_projection_norm.weight"}


def read_gguf(path):
    r = gguf.GGUFReader(path)
    return {t.name: (dequantize(t.data, t.tensor_type)
                     .reshape([int(d) for d in reversed(t.shape)]), t.tensor_type.name)
            for t in r.tensors}


def hf_tensors(w, pre, swap_halves=False):
    """The GGUF's tensors under transformers' names (prefix `pre`); a
    layer's gate and up experts fused into experts.gate_up_proj [E, 2F, H]
    (up first with swap_halves)."""
    out = {}
    for k, (x, ty) in w.items():
        if k == "rope_freqs.weight":  # config.json's rope_parameters say it
            continue
        if k.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            if k.endswith("up_exps.weight"):
                continue
            up = w[k.replace("gate_exps", "up_exps")][0]
            halves = (up, x) if swap_halves else (x, up)
            out[f"{pre}layers.{k[4:].split('.', 1)[0]}.experts.gate_up_proj"] = \
                np.ascontiguousarray(np.concatenate(halves, axis=1).astype(np.float16))
            continue
        dt = np.float16 if ty == "F16" else np.float32
        if k in MODEL:
            name = pre + MODEL[k]
        else:
            il, n = k[4:].split(".", 1)
            if n not in LAYER:
                raise SystemExit(f"test_hf_gemma4: no HF name for {k}")
            name = f"{pre}layers.{il}.{LAYER[n]}"
        out[name] = np.ascontiguousarray(x.astype(dt))
    return out


def text_config(sh):
    facts = randgguf_gemma4.layer_facts(sh, sh["layers"])
    return {"hidden_size": sh["embd"], "num_hidden_layers": sh["layers"],
            "num_attention_heads": sh["heads"], "num_key_value_heads": sh["kv_local"],
            "num_global_key_value_heads": sh["kv_global"], "head_dim": sh["hd_local"],
            "global_head_dim": sh["hd_global"], "intermediate_size": sh["ff"],
            "vocab_size": sh["vocab"], "vocab_size_per_layer_input": sh["vocab"],
            "hidden_size_per_layer_input": sh["ple"], "max_position_embeddings": sh["ctx"],
            "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
            "sliding_window": sh["window"], "attention_k_eq_v": sh["v_is_k_global"],
            "num_kv_shared_layers": sh["shared"], "use_double_wide_mlp": True,
            "layer_types": ["sliding_attention" if f["local"] else "full_attention"
                            for f in facts],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                   "partial_rotary_factor": sh["partial"]}},
            "final_logit_softcapping": 30.0, "use_bidirectional_attention": "vision",
            "enable_moe_block": "n_exp" in sh, "num_experts": sh.get("n_exp"),
            "top_k_experts": sh.get("used"), "moe_intermediate_size": sh.get("ff_exp"),
            "tie_word_embeddings": True}


def write_folder(path, w, sh, cls, edit=None, drop=None, swap_halves=False):
    text = text_config(sh)
    if edit:
        edit(text)
    if cls == "Gemma4ForCausalLM":
        t = hf_tensors(w, "model.", swap_halves)
        cfg = dict(text, architectures=[cls], model_type="gemma4_text")
    else:
        t = hf_tensors(w, "model.language_model.")
        # what the loader must not read: a vision tensor, a shared layer's K
        # (transformers ignores those on load)
        t["model.vision_tower.patch_embedder.input_proj.weight"] = np.ones((8, 12), np.float32)
        last = sh["layers"] - 1
        t[f"model.language_model.layers.{last}.self_attn.k_proj.weight"] = np.ones(
            (sh["hd_global"], sh["embd"]), np.float16)
        cfg = {"architectures": [cls], "model_type": "gemma4", "text_config": text,
               "vision_config": {"hidden_size": 8}, "tie_word_embeddings": True}
    if drop:
        del t[drop]
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def dump(tool, path, prompt, fixed, n_greedy, out):
    env = dict(os.environ, IGNITE_MATMUL="exact")
    cmd = [tool, "-m", path, "-o", out, "-g", str(n_greedy), "-d", ",".join(map(str, fixed)),
           "-t", "2", ",".join(map(str, prompt))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    greedy = [int(t) for line in res.stdout.splitlines() if line.startswith("greedy:")
              for t in line.split()[1:]]
    if res.returncode:
        return None, greedy, res
    return np.fromfile(out, dtype=np.float32).astype(np.float64), greedy, res


def main():
    tool = sys.argv[1]
    sh = dict(randgguf_gemma4.SHAPES["tiny"])
    rng = np.random.default_rng(17)
    prompt = [int(t) for t in rng.integers(0, sh["vocab"], 40)]
    fixed = [int(t) for t in rng.integers(0, sh["vocab"], 4)]
    ok = True

    def report(good, msg):
        nonlocal ok
        ok &= good
        print(f"{'ok' if good else 'FAIL':6} {msg}")

    with tempfile.TemporaryDirectory() as tmp:
        gpath = os.path.join(tmp, "g.gguf")
        random_gguf.write(gpath, "tiny", "F16", seed=5, arch="gemma4")
        base, gb, res = dump(tool, gpath, prompt, fixed, 4, os.path.join(tmp, "g.bin"))
        if base is None:
            sys.stderr.write(res.stderr)
            return 1
        w = read_gguf(gpath)

        def half_rope(t):
            t["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 0.5

        for cls, edit, must in (("Gemma4ForCausalLM", None, True),
                                ("Gemma4ForConditionalGeneration", None, True),
                                ("Gemma4ForCausalLM", half_rope, False)):
            folder = os.path.join(tmp, f"{cls}-{must}")
            write_folder(folder, w, sh, cls, edit)
            lg, g, res = dump(tool, folder, prompt, fixed, 4, os.path.join(tmp, "f.bin"))
            if lg is None:
                report(False, f"{cls}: forward_dump failed: {res.stderr.strip()}")
                continue
            err = np.abs(lg - base).max() / np.abs(base).max()
            same = lg.shape == base.shape and err <= BOUND and g == gb
            label = "as written" if must else "partial_rotary_factor 0.5"
            report(same == must, f"{cls} folder, {label}: relative {err:.2e} from the GGUF, "
                   f"greedy {g} vs {gb} ({'must' if must else 'must not'} match)")

        def single_width(t):
            t["use_double_wide_mlp"] = False

        def moe(t):  # on a folder without experts
            t.update(enable_moe_block=True, num_experts=4, top_k_experts=2,
                     moe_intermediate_size=64)

        def no_ple(t):  # on a folder with them: they were left out of the forward
            t["hidden_size_per_layer_input"] = 0

        gate = "model.layers.3.per_layer_input_gate.weight"
        for name, edit, drop, needle in (
                ("missing", None, gate, gate),
                ("shape", single_width, None, "model.layers.6.mlp.gate_proj.weight"),
                ("moe", moe, None, "router.proj.weight"),
                ("ple_off", no_ple, None, "tensor 'model.embed_tokens_per_layer.weight' is in "
                 "the folder, but config.json says the model has no per-layer embeddings")):
            folder = os.path.join(tmp, f"bad-{name}")
            write_folder(folder, w, sh, "Gemma4ForCausalLM", edit, drop)
            _, _, res = dump(tool, folder, prompt, fixed, 1, os.path.join(tmp, "b.bin"))
            err = res.stderr.strip()
            report(res.returncode == IG_E_MODEL and len(err.splitlines()) == 1
                   and err.startswith("ignite: ") and needle in err,
                   f"bad folder ({name}): status {res.returncode}, {err!r}")

        # the mixture of experts: the moe-tiny GGUF as a folder
        msh = dict(randgguf_gemma4.SHAPES["moe-tiny"])
        mpath = os.path.join(tmp, "moe.gguf")
        random_gguf.write(mpath, "moe-tiny", "F16", seed=6, arch="gemma4")
        mbase, mgb, res = dump(tool, mpath, prompt, fixed, 4, os.path.join(tmp, "m.bin"))
        if mbase is None:
            sys.stderr.write(res.stderr)
            return 1
        mw = read_gguf(mpath)
        folder = os.path.join(tmp, "moe-off")  # experts in the folder, enable_moe_block false
        write_folder(folder, mw, msh, "Gemma4ForCausalLM", lambda t: t.update(
            enable_moe_block=False))
        _, _, res = dump(tool, folder, prompt, fixed, 1, os.path.join(tmp, "b.bin"))
        err = res.stderr.strip()
        report(res.returncode == IG_E_MODEL and len(err.splitlines()) == 1 and
               "tensor 'model.layers.0.router.proj.weight' is in the folder, but config.json "
               "says the model has no mixture of experts (enable_moe_block)" in err,
               f"MoE folder with enable_moe_block false: status {res.returncode}, {err!r}")
        for swap, must in ((False, True), (True, False)):
            folder = os.path.join(tmp, f"moe-{swap}")
            write_folder(folder, mw, msh, "Gemma4ForCausalLM", swap_halves=swap)
            lg, g, res = dump(tool, folder, prompt, fixed, 4, os.path.join(tmp, "f.bin"))
            if lg is None:
                report(False, f"MoE folder: forward_dump failed: {res.stderr.strip()}")
                continue
            err = np.abs(lg - mbase).max() / np.abs(mbase).max()
            same = lg.shape == mbase.shape and err <= BOUND and g == mgb
            label = "gate|up halves swapped" if swap else "as written"
            report(same == must, f"MoE folder, {label}: relative {err:.2e} from the GGUF, "
                   f"greedy {g} vs {mgb} ({'must' if must else 'must not'} match)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
