"""bench/randgguf_gemma4.py: the gemma4 shapes of bench/random_gguf.py, with
the keys and tensors llama.cpp's gemma4 loader reads (src/models/gemma4.cpp,
convert_hf_to_gguf.py's Gemma4Model): per-layer head counts, KV head counts
and FFN widths as arrays, a per-layer sliding-window pattern, global head dim
and RoPE dims beside the local ones (key_length_swa, rope.dimension_count_swa),
proportional RoPE on the global layers through rope_freqs (1 on the rotated
pairs, 1e30 on the others), shared-KV last layers (no K/V tensors of their
own), V = K on some layers (no attn_v), per-layer embeddings and a layer
output scale. Imported by random_gguf.py; tests/cpu/test_gemma4.py writes
its files with it.

  tiny  9 layers of 256 (global every third, window 16), 4 heads, 2 KV heads
        local / 1 global of 64 / 128, FFN 512 (1024 on the 3 shared-KV layers),
        per-layer embeddings of 32, V = K on the global layers with K/V
  emu   the smallest with every rule, for the emulated CUDA backend: 4 layers of
        128 (local, global, then two reading their K/V), window 8, 2 heads, 1 KV
        head of 64 / 128, FFN 256 (512 shared), per-layer embeddings of 16, V = K
        on the global layer, vocabulary 256
  emu512  emu with Gemma 4's real head dims, 256 local / 512 global (the CUDA
        attention's widest rows), and 1 head (half the emulated attention's time)
  E2B   Gemma 4 E2B's text model: 35 layers of 1536 (global every fifth,
        window 512), 8 heads, 1 KV head of 256 / 512, FFN 6144 (12288 on the
        20 shared-KV layers), per-layer embeddings of 256, vocabulary 262144
  moe-tiny  the mixture of experts, small: 6 layers of 256 (the last global),
        8 experts of 128 (2 used) beside a dense MLP of 512, V = K on the
        global layer, no per-layer embeddings, no shared KV
  moe-emu   the smallest MoE, for the emulated CUDA backend: 2 layers of 128
        (local, global), window 8, 2 heads, 1 KV head of 64 / 128, 4 experts of
        64 (2 used) beside a dense MLP of 256, V = K on the global layer,
        vocabulary 256; per-expert down scales in [0.25, 2] (not near 1: a
        device that dropped them would be seen through the norms after)
  26B-A4B   26B-A4B-like: 30 layers of 2816 (global every sixth, window 1024),
        16 heads, 8 KV heads of 256 local / 2 of 512 global (V = K there), 128
        experts of 704 (8 used) beside a dense MLP of 2112 (--layers N: fewer)
"""
import struct

import numpy as np

SHAPES = {
    "tiny": dict(layers=9, embd=256, heads=4, kv_local=2, kv_global=1, hd_local=64,
                 hd_global=128, ff=512, shared=3, ple=32, vocab=1024, ctx=4096, window=16,
                 period=3, partial=0.25, v_is_k_global=True),
    "emu": dict(layers=4, embd=128, heads=2, kv_local=1, kv_global=1, hd_local=64,
                hd_global=128, ff=256, shared=2, ple=16, vocab=256, ctx=1024, window=8,
                period=2, partial=0.25, v_is_k_global=True),
    "emu512": dict(layers=4, embd=128, heads=1, kv_local=1, kv_global=1, hd_local=256,
                   hd_global=512, ff=256, shared=2, ple=16, vocab=256, ctx=1024, window=8,
                   period=2, partial=0.25, v_is_k_global=True),
    "E2B": dict(layers=35, embd=1536, heads=8, kv_local=1, kv_global=1, hd_local=256,
                hd_global=512, ff=6144, shared=20, ple=256, vocab=262144, ctx=131072,
                window=512, period=5, partial=0.25, v_is_k_global=False),
    "moe-tiny": dict(layers=6, embd=256, heads=4, kv_local=2, kv_global=1, hd_local=64,
                     hd_global=128, ff=512, shared=0, ple=0, vocab=1024, ctx=4096, window=16,
                     period=6, partial=0.25, v_is_k_global=True, n_exp=8, used=2,
                     ff_exp=128),
    "moe-emu": dict(layers=2, embd=128, heads=2, kv_local=1, kv_global=1, hd_local=64,
                    hd_global=128, ff=256, shared=0, ple=0, vocab=256, ctx=1024, window=8,
                    period=2, partial=0.25, v_is_k_global=True, n_exp=4, used=2, ff_exp=64,
                    exp_scale=(0.25, 2.0)),
    "26B-A4B": dict(layers=30, embd=2816, heads=16, kv_local=8, kv_global=2, hd_local=256,
                    hd_global=512, ff=2112, shared=0, ple=0, vocab=262144, ctx=262144,
                    window=1024, period=6, partial=0.25, v_is_k_global=True, n_exp=128,
                    used=8, ff_exp=704),
}
# The router's weights times this: its logits spread enough that the k-th and
# (k+1)-th expert seldom lie within a rounding (as random_gguf.py's qwen3moe)
ROUTER_GAIN = 4.0
TYPES = ("F16", "Q8_0", "Q4_K_M")
FILE_TYPES = {"F16": 1, "Q8_0": 7, "Q4_K_M": 15}
# tied embeddings: the token table times this gives logits with a spread of
# a few units (random weights of the embedding's scale are nearly flat)
EMBD_GAIN = 4.0


def _s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, value):
    """A GGUF key: 4 u32, 6 f32, 7 bool, 8 string; a list: an array of vtype."""
    fmt = {4: "<I", 6: "<f", 7: "<?"}
    out = _s(key)
    if isinstance(value, list):
        out += struct.pack("<IIQ", 9, vtype, len(value))
        return out + b"".join(struct.pack(fmt[vtype], v) for v in value)
    out += struct.pack("<I", vtype)
    return out + (_s(value) if vtype == 8 else struct.pack(fmt[vtype], value))


def layer_facts(sh, n):
    """Per layer: local, own K/V, V = K, KV heads, head dim, FFN width."""
    out = []
    own = n - sh["shared"]
    for i in range(n):
        local = i % sh["period"] != sh["period"] - 1
        has_kv = i < own
        out.append(dict(local=local, kv=has_kv,
                        v_is_k=has_kv and not local and sh["v_is_k_global"],
                        n_kv=sh["kv_local"] if local else sh["kv_global"],
                        hd=sh["hd_local"] if local else sh["hd_global"],
                        ff=sh["ff"] if has_kv else 2 * sh["ff"]))
    return out


def _pick(qtype, cols, heavy=False):
    """The type of a matrix of `cols` columns: K-quants need whole blocks of
    256 (llama-quant.cpp falls back for the others; Q8_0 here)."""
    if qtype != "Q4_K_M":
        return qtype
    if cols % 256:
        return "Q8_0"
    return "Q6_K" if heavy else "Q4_K"


def build(shape_name, qtype, layers=None, vocab=None, seed=1, fused=False):
    """(tensors [(name, type, dims)], keys [bytes], gains {name: gain},
    fixed {name: bytes}) of a gemma4 file of the shape. The Q and K head
    norms' weights are near head_dim^-1/4: Gemma 4's attention scale is 1,
    its norms do the scaling (near 1, random heads' scores would spread by
    sqrt(head_dim) and the softmax turn on a rounding: nothing like a trained
    model, and every engine's int8 or f16 activations would move it). With
    fused, a MoE layer's gate and up experts are one ffn_gate_up_exps of
    [embd, 2 ff_exp, n_exp] (each expert's gate rows, then its up rows), as
    llama.cpp's converter writes a Gemma 4 folder's experts.gate_up_proj."""
    sh = dict(SHAPES[shape_name])
    n = min(layers, sh["layers"]) if layers else sh["layers"]
    if n < sh["layers"]:
        sh["shared"] = 0  # the first layers of the shape: each with K/V of its own
    vocab = vocab or sh["vocab"]
    e, d, h = sh["embd"], sh["ple"], sh["heads"]
    facts = layer_facts(sh, n)
    own = n - sh["shared"]
    # llama.cpp's rule: a shared layer reads layer own-1 (global) or own-2 (local)
    assert sh["shared"] == 0 or (not facts[own - 1]["local"] and facts[own - 2]["local"])
    a = "gemma4"
    keys = [_kv("general.architecture", 8, a),
            _kv("general.name", 8, f"random {a} {shape_name} {qtype}"),
            _kv("general.file_type", 4, FILE_TYPES[qtype]),
            _kv(f"{a}.block_count", 4, n), _kv(f"{a}.context_length", 4, sh["ctx"]),
            _kv(f"{a}.embedding_length", 4, e),
            _kv(f"{a}.feed_forward_length", 4, [f["ff"] for f in facts]),
            _kv(f"{a}.attention.head_count", 4, [h] * n),
            _kv(f"{a}.attention.head_count_kv", 4, [f["n_kv"] for f in facts]),
            _kv(f"{a}.attention.key_length", 4, sh["hd_global"]),
            _kv(f"{a}.attention.value_length", 4, sh["hd_global"]),
            _kv(f"{a}.attention.key_length_swa", 4, sh["hd_local"]),
            _kv(f"{a}.attention.value_length_swa", 4, sh["hd_local"]),
            _kv(f"{a}.rope.dimension_count", 4, sh["hd_global"]),
            _kv(f"{a}.rope.dimension_count_swa", 4, sh["hd_local"]),
            _kv(f"{a}.rope.freq_base", 6, 1000000.0),
            _kv(f"{a}.rope.freq_base_swa", 6, 10000.0),
            _kv(f"{a}.attention.layer_norm_rms_epsilon", 6, 1e-6),
            _kv(f"{a}.attention.sliding_window", 4, sh["window"]),
            _kv(f"{a}.attention.sliding_window_pattern", 7, [f["local"] for f in facts]),
            _kv(f"{a}.attention.shared_kv_layers", 4, sh["shared"]),
            _kv(f"{a}.embedding_length_per_layer_input", 4, d),
            _kv(f"{a}.final_logit_softcapping", 6, 30.0),
            # llama.cpp sizes the vocabulary by the tokenizer, or this without one
            _kv(f"{a}.vocab_size", 4, vocab)]
    moe = "n_exp" in sh
    if moe:
        keys += [_kv(f"{a}.expert_count", 4, sh["n_exp"]),
                 _kv(f"{a}.expert_used_count", 4, sh["used"]),
                 _kv(f"{a}.expert_feed_forward_length", 4, sh["ff_exp"])]
    base = _pick(qtype, e)
    ts = [("token_embd.weight", _pick(qtype, e, True), [e, vocab])]
    if d:
        ts += [("per_layer_token_embd.weight", _pick(qtype, n * d, True), [n * d, vocab]),
               ("per_layer_model_proj.weight", base, [e, n * d]),
               ("per_layer_proj_norm.weight", "F32", [d])]
    ts.append(("rope_freqs.weight", "F32", [sh["hd_global"] // 2]))
    gains = {"token_embd.weight": EMBD_GAIN}
    for i, f in enumerate(facts):
        p = f"blk.{i}."
        q, kvd = h * f["hd"], f["n_kv"] * f["hd"]
        ts += [(p + "attn_norm.weight", "F32", [e]),
               (p + "attn_q.weight", base, [e, q])]
        if f["kv"]:
            ts.append((p + "attn_k.weight", base, [e, kvd]))
            if not f["v_is_k"]:
                ts.append((p + "attn_v.weight", _pick(qtype, e, True), [e, kvd]))
        ts += [(p + "attn_output.weight", _pick(qtype, q), [q, e]),
               (p + "attn_q_norm.weight", "F32", [f["hd"]])]
        if f["kv"]:
            ts.append((p + "attn_k_norm.weight", "F32", [f["hd"]]))
        ts += [(p + "post_attention_norm.weight", "F32", [e]),
               (p + "ffn_norm.weight", "F32", [e]),
               (p + "ffn_gate.weight", base, [e, f["ff"]]),
               (p + "ffn_up.weight", base, [e, f["ff"]]),
               (p + "ffn_down.weight", _pick(qtype, f["ff"], True), [f["ff"], e]),
               (p + "post_ffw_norm.weight", "F32", [e])]
        if moe:
            ne, fe = sh["n_exp"], sh["ff_exp"]
            ts += [(p + "ffn_gate_inp.weight", "F32", [e, ne]),
                   (p + "ffn_gate_inp.scale", "F32", [e]),
                   (p + "pre_ffw_norm_2.weight", "F32", [e]),
                   (p + "post_ffw_norm_1.weight", "F32", [e]),
                   (p + "post_ffw_norm_2.weight", "F32", [e]),
                   *([(p + "ffn_gate_up_exps.weight", base, [e, 2 * fe, ne])] if fused else
                     [(p + "ffn_gate_exps.weight", base, [e, fe, ne]),
                      (p + "ffn_up_exps.weight", base, [e, fe, ne])]),
                   (p + "ffn_down_exps.weight", _pick(qtype, fe, True), [fe, e, ne]),
                   (p + "ffn_down_exps.scale", "F32", [ne])]
            gains[p + "ffn_gate_inp.weight"] = ROUTER_GAIN
        if d:
            ts += [(p + "inp_gate.weight", base, [e, d]),
                   (p + "proj.weight", _pick(qtype, d), [d, e]),
                   (p + "post_norm.weight", "F32", [e])]
        ts.append((p + "layer_output_scale.weight", "F32", [1]))
    ts.append(("output_norm.weight", "F32", [e]))
    n_rot = int(sh["hd_global"] * sh["partial"] / 2)
    freqs = [1.0] * n_rot + [1e30] * (sh["hd_global"] // 2 - n_rot)
    fixed = {"rope_freqs.weight": np.array(freqs, dtype=np.float32).tobytes()}
    rng = np.random.default_rng(seed + 1000)
    for name, ttype, dims in ts:
        if name.endswith(("attn_q_norm.weight", "attn_k_norm.weight")):
            w = dims[0] ** -0.25 * (1.0 + 0.1 * rng.uniform(-1, 1, dims[0]))
            fixed[name] = w.astype(np.float32).tobytes()
        if name.endswith("ffn_down_exps.scale") and "exp_scale" in sh:
            fixed[name] = rng.uniform(*sh["exp_scale"], dims[0]).astype(np.float32).tobytes()
    return ts, keys, gains, fixed
