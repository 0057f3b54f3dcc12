#!/usr/bin/env python3
"""tests/models/test_hf_arch.py: synthetic Qwen3ForCausalLM,
Gemma3ForCausalLM and Gemma3ForConditionalGeneration folders (small random
weights, the real models' structure: Q/K norms, Gemma's four norms a layer
stored as HF applies them, x * (1 + w), sliding-window layers, two RoPE
bases, linear RoPE scaling, query_pre_attn_scalar, a vision tower the
loader must skip, both of transformers' multimodal layouts) with
IGNITE_MATMUL=exact:
  - logits of prefill (whole, in chunks of 4, one thread) and decode steps
    against the fp64 HF-style numpy forward over the folder's own tensors
    (tests/models/hf_ref.py: rotate-half RoPE, 1 + w norms), within 1e-4;
    the prompt is longer than the sliding window, so both cross its edge;
  - the same weights written as an F32 GGUF the way llama.cpp's converter
    does (tests/pylib/hfgen.write_gguf_tiny: w + 1 norms, no Q/K permute
    for these half-split architectures): logits equal within 1e-4, and
    `ignite info --json` reports the same architecture and features;
  - malformed variants (a missing q_norm, wrong-shaped norms, a bad
    layer_types, an unsupported rope_scaling, use_sliding_window,
    bidirectional attention, another activation) are refused with one line
    naming the file and the tensor or key.
Label: unit."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfgen  # noqa: E402
from hf_ref import HFRef  # noqa: E402
from igtest import check, summary  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
DUMP = sys.argv[1] if len(sys.argv) > 1 else "build/tests/cpu/forward_dump"
ENV = dict(os.environ, IGNITE_MATMUL="exact")
IDS = [5, 17, 200, 3, 99, 260, 1, 42, 7, 64, 128, 31]  # 12 > the windows below
FIXED = [9, 250, 0]


def dump(model, opts=()):
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        cmd = [DUMP, "-m", model, "-o", out.name, "-d", ",".join(map(str, FIXED)), *opts,
               ",".join(map(str, IDS))]
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
        check(r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        return np.fromfile(out.name, dtype=np.float32).astype(np.float64)


def rel(a, b):
    if a.size != b.size:
        return float("inf")
    return float(np.abs(a.reshape(b.shape) - b).max() / np.abs(b).max())


def info(model):
    r = subprocess.run([BIN, "info", "--json", "-m", model], capture_output=True, text=True)
    check(r.returncode == 0, f"info {model}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout) if r.returncode == 0 else {}


def check_folder(name, folder, tmp, gguf=True):
    want = HFRef(folder).logits(IDS + FIXED)[len(IDS) - 1:]
    for opts in [(), ("-c", "4"), ("-t", "1")]:
        err = rel(dump(folder, opts), want)
        check(err <= 1e-4, f"{name} {' '.join(opts)}: relative error {err:.2e} > 1e-4")
    msg = f"ok {name}: against the HF forward {err:.1e}"
    if gguf:
        g = hfgen.write_gguf_tiny(folder, os.path.join(tmp, os.path.basename(folder) + ".gguf"))
        err = rel(dump(folder), dump(g))
        check(err <= 1e-4, f"{name}: folder vs GGUF relative error {err:.2e} > 1e-4")
        a, b = info(folder), info(g)
        for k in ("architecture", "supported", "features", "n_layer", "n_embd", "n_head",
                  "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train", "n_rot",
                  "rope_base", "rope_style", "norm_eps", "tied_embeddings", "has_qkv_bias",
                  "kv_bytes_per_token", "kv_groups"):
            same = k in a and a.get(k) == b.get(k)
            if k == "norm_eps" and k in a:  # the GGUF holds it as f32
                same = abs(a[k] - b[k]) <= 1e-6 * a[k]
            check(same, f"{name}: info '{k}' {a.get(k)} (folder) != {b.get(k)} (GGUF)")
        msg += f", against the GGUF {err:.1e}"
    print(msg)


def gemma_text(**over):
    cfg = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 32, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
           "sliding_window": 8, "sliding_window_pattern": 6, "query_pre_attn_scalar": 32,
           "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
           "attn_logit_softcapping": None, "attention_bias": False,
           "tie_word_embeddings": True}
    cfg.update(over)
    return cfg


def multimodal(text):
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "text_config": text, "image_token_index": 262144, "mm_tokens_per_image": 4,
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16}}


def vision_tower(prefix):
    rng = np.random.default_rng(9)
    return {prefix + "vision_tower.vision_model.embeddings.patch_embedding.weight":
            rng.standard_normal((16, 3, 2, 2)).astype(np.float32),
            prefix + "multi_modal_projector.mm_input_projection_weight":
            rng.standard_normal((16, 64)).astype(np.float32)}


def expect_refused(folder, *needles):
    r = subprocess.run([BIN, "info", "-m", folder], capture_output=True, text=True)
    err = r.stderr.strip()
    check(r.returncode == 4, f"{folder}: exit {r.returncode}, expected 4: {err}")
    check(len(err.splitlines()) == 1 and err.startswith("ignite: "),
          f"{folder}: expected one 'ignite: ' line, got {err!r}")
    for n in needles:
        check(n in err, f"{folder}: {n!r} not in {err!r}")


def rewrite_weights(folder, fn):
    _, t = hfgen.read_folder(folder)
    fn(t)
    save_file(t, os.path.join(folder, "model.safetensors"))


def edit_config(folder, fn):
    p = os.path.join(folder, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = lambda n: os.path.join(tmp, n)  # noqa: E731
        qwen3 = dict(arch="Qwen3ForCausalLM", tied=False, head_dim=32, rope_theta=1000000.0,
                     rms_norm_eps=1e-6, attention_bias=False, use_sliding_window=False,
                     sliding_window=None, max_window_layers=2, model_type="qwen3")
        check_folder("qwen3, head_dim 32 != 64/4, untied",
                     hfgen.write_tiny(d("qwen3"), seed=11, **qwen3), tmp)
        check_folder("qwen3 BF16 (norms widened)",
                     hfgen.write_tiny(d("qwen3_bf16"), dtype="BF16", seed=12, **qwen3), tmp,
                     gguf=False)
        # 7 layers: 5 local, 1 global, 1 local; window 8 < the 15 positions
        g1 = hfgen.write_tiny(d("gemma3"), cfg=dict(architectures=["Gemma3ForCausalLM"],
                                                    **gemma_text()), seed=13)
        check_folder("gemma3 CausalLM, window 8, pattern 6", g1, tmp)
        check_folder("gemma3 CausalLM BF16 (1 + w widened)", hfgen.write_tiny(
            d("gemma3_bf16"), dtype="BF16", cfg=dict(architectures=["Gemma3ForCausalLM"],
                                                     **gemma_text()), seed=14), tmp, gguf=False)
        # transformers < 4.52: language_model.model.*; a minimal text_config
        # (rms_norm_eps, rope_local_base_freq, max_position_embeddings and the
        # tie from Gemma3TextConfig's defaults), linear RoPE 8 on the global
        # layers, query_pre_attn_scalar 16 = hidden / heads != head_dim
        text = gemma_text(num_attention_heads=4, query_pre_attn_scalar=16,
                          rope_scaling={"factor": 8.0, "rope_type": "linear"}, sliding_window=5)
        for k in ("rms_norm_eps", "rope_local_base_freq", "max_position_embeddings",
                  "tie_word_embeddings", "hidden_activation", "sliding_window_pattern"):
            text.pop(k)
        check_folder("gemma3 ConditionalGeneration (language_model.model.), window 5, "
                     "linear RoPE 8, query_pre_attn_scalar 16", hfgen.write_tiny(
                         d("gemma3_mm"), cfg=multimodal(text), prefix="language_model.model.",
                         extra=vision_tower(""), seed=15), tmp, gguf=False)
        # transformers >= 4.52: model.language_model.*, layer_types
        kinds = ["sliding_attention", "full_attention", "sliding_attention",
                 "sliding_attention", "full_attention", "sliding_attention"]
        text = gemma_text(num_hidden_layers=6, layer_types=kinds, sliding_window=6,
                          rope_scaling={"factor": 8.0, "rope_type": "linear"})
        text.pop("sliding_window_pattern")
        check_folder("gemma3 ConditionalGeneration (model.language_model.), layer_types",
                     hfgen.write_tiny(d("gemma3_mm2"), cfg=multimodal(text),
                                      prefix="model.language_model.",
                                      extra=vision_tower("model."), seed=16), tmp)

        # Llama 3.1/3.2's rope_scaling "llama3", its original context set to 32
        # positions so that head_dim 32 has pairs in each of its three regimes
        # (a folder without the scaling must then be far from the reference)
        l3 = hfgen.write_tiny(d("llama3"), seed=17, head_dim=32, rope_theta=10000.0,
                              rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 32})
        check_folder("llama rope_scaling llama3", l3, tmp, gguf=False)
        c = d("llama3_plain")
        import shutil
        shutil.copytree(l3, c)
        edit_config(c, lambda j: j.update(rope_scaling=None))
        err = rel(dump(c), HFRef(l3).logits(IDS + FIXED)[len(IDS) - 1:])
        check(err > 1e-2, f"llama3: the scaling changes nothing here ({err:.1e}): a weak case")

        # malformed variants: one line naming the file (folder) and the tensor or key
        def case(src, name):
            p = d(name)
            shutil.copytree(src, p)
            return p

        c = case(d("qwen3"), "no_qnorm")
        rewrite_weights(c, lambda t: t.pop("model.layers.1.self_attn.q_norm.weight"))
        expect_refused(c, "tensor 'model.layers.1.self_attn.q_norm.weight' is missing")
        c = case(g1, "bad_knorm")
        rewrite_weights(c, lambda t: t.update({"model.layers.0.self_attn.k_norm.weight":
                                               np.zeros(16, np.float32)}))
        expect_refused(c, "model.layers.0.self_attn.k_norm.weight", "model.safetensors",
                       "shape [16]", "[32]")
        c = case(g1, "bad_postnorm")
        rewrite_weights(c, lambda t: t.update({"model.layers.3.post_feedforward_layernorm.weight":
                                               np.zeros((2, 32), np.float32)}))
        expect_refused(c, "model.layers.3.post_feedforward_layernorm.weight", "[2, 32]")
        c = case(d("gemma3_mm"), "mm_no_prenorm")
        rewrite_weights(c, lambda t: t.pop(
            "language_model.model.layers.2.pre_feedforward_layernorm.weight"))
        expect_refused(c, "'language_model.model.layers.2.pre_feedforward_layernorm.weight' "
                       "is missing")
        c = case(d("gemma3_mm2"), "bad_types")
        edit_config(c, lambda j: j["text_config"].update(layer_types=kinds[:5]))
        expect_refused(c, "config.json", "'layer_types' must list one kind for each of the 6")
        c = case(d("gemma3_mm2"), "bad_kind")
        edit_config(c, lambda j: j["text_config"]["layer_types"].__setitem__(2, "chunked"))
        expect_refused(c, "config.json", "layer_types[2] is 'chunked'")
        c = case(g1, "yarn")
        edit_config(c, lambda j: j.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}))
        expect_refused(c, "config.json", "rope_scaling type 'yarn' is not supported")
        c = case(d("qwen3"), "qwen_swa")
        edit_config(c, lambda j: j.update(use_sliding_window=True))
        expect_refused(c, "config.json", "use_sliding_window true")
        c = case(g1, "bidirectional")
        edit_config(c, lambda j: j.update(use_bidirectional_attention=True))
        expect_refused(c, "config.json", "use_bidirectional_attention true")
        c = case(g1, "gemma_act")
        edit_config(c, lambda j: j.update(hidden_activation="gelu"))
        expect_refused(c, "config.json", "hidden_act 'gelu' is not supported")
    return summary("test_hf_arch")


if __name__ == "__main__":
    sys.exit(main())
