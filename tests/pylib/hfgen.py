"""tests/pylib/hfgen.py: Hugging Face model folders (and GGUFs of the same
weights) written from a GGUF, with the safetensors, tokenizers and gguf
packages, for the tests of ignite's folder loader.

from_gguf() reads a Llama-family GGUF with gguf.GGUFReader and dequantizes
every tensor with the gguf package. write_folder() then writes what
transformers would save for that model: config.json from the
hyper-parameters, the weights under their HF names in F32/F16/BF16 (one
file or shards with model.safetensors.index.json), Q and K rows put back
into HF's rotate-half order (llama.cpp's converter permutes them for GGUF;
this undoes its permute), tokenizer.json built with the tokenizers package
from the GGUF's vocabulary and merges, tokenizer_config.json with the chat
template, generation_config.json. write_gguf() writes the same weights as a
GGUF (F32 or BF16) in llama.cpp's layout, so the two formats can be
compared. read_folder() reads a folder back the HF way (safetensors +
config.json), for the numpy reference in tests/models/hf_ref.py.
"""
import json
import os
import struct

import numpy as np
from gguf import GGUFReader, GGUFWriter
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize
from safetensors import TensorSpec, serialize_file, safe_open
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

CONTROL, USER_DEFINED = 3, 4


def _field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


class Source:
    """A GGUF's hyper-parameters, f32 weights (GGUF names, [rows, cols]) and
    tokenizer metadata."""

    def __init__(self, path):
        r = GGUFReader(path)
        a = _field(r, "general.architecture")
        self.arch = a
        self.n_layer = int(_field(r, f"{a}.block_count"))
        self.n_embd = int(_field(r, f"{a}.embedding_length"))
        self.n_head = int(_field(r, f"{a}.attention.head_count"))
        self.n_head_kv = int(_field(r, f"{a}.attention.head_count_kv", self.n_head))
        self.n_ff = int(_field(r, f"{a}.feed_forward_length"))
        self.n_ctx = int(_field(r, f"{a}.context_length"))
        self.rope_base = float(_field(r, f"{a}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5))
        self.t = {}
        for ten in r.tensors:
            w = dequantize(ten.data, GGMLQuantizationType(ten.tensor_type))
            self.t[ten.name] = np.asarray(w, dtype=np.float32).reshape(
                [int(x) for x in reversed(ten.shape)])
        self.n_vocab = self.t["token_embd.weight"].shape[0]
        self.tokens = _field(r, "tokenizer.ggml.tokens")
        self.types = [int(x) for x in _field(r, "tokenizer.ggml.token_type")]
        self.merges = _field(r, "tokenizer.ggml.merges")
        self.pre = _field(r, "tokenizer.ggml.pre")
        self.bos = int(_field(r, "tokenizer.ggml.bos_token_id", -1))
        self.eos = int(_field(r, "tokenizer.ggml.eos_token_id", -1))
        self.add_bos = bool(_field(r, "tokenizer.ggml.add_bos_token", False))
        self.chat_template = _field(r, "tokenizer.chat_template")


def unpermute(w, n_head):
    """The inverse of llama.cpp's convert_hf_to_gguf permute(): GGUF rows
    (pairs (2i, 2i+1) rotate together) back to HF's rotate-half rows."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w, n_head):
    """llama.cpp's permute(): HF rows -> GGUF rows."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = [("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"),
               ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
               ("attn_output", "self_attn.o_proj"), ("ffn_norm", "post_attention_layernorm"),
               ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
               ("ffn_down", "mlp.down_proj")]


def hf_tensors(src, tied=True):
    """{HF name: f32 array} in HF's layout."""
    out = {"model.embed_tokens.weight": src.t["token_embd.weight"],
           "model.norm.weight": src.t["output_norm.weight"]}
    if not tied:
        out["lm_head.weight"] = src.t.get("output.weight", src.t["token_embd.weight"]).copy()
    for i in range(src.n_layer):
        for g, h in LAYER_NAMES:
            for kind in ("weight", "bias"):
                w = src.t.get(f"blk.{i}.{g}.{kind}")
                if w is None:
                    continue
                if g == "attn_q" and src.arch == "llama":
                    w = unpermute(w, src.n_head)
                if g == "attn_k" and src.arch == "llama":
                    w = unpermute(w, src.n_head_kv)
                out[f"model.layers.{i}.{h}.{kind}"] = w
    return out


def to_bf16(a):
    """f32 -> bf16 bits, round to nearest even (as torch's .to(bfloat16))."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def save_safetensors(tensors, path, dtype):
    """Writes {name: f32 array} as dtype "F32", "F16" or "BF16" with the
    safetensors package."""
    keep, specs = [], {}
    for name, a in tensors.items():
        if dtype == "BF16":
            b, dt = to_bf16(a), "bfloat16"
        else:
            b = np.ascontiguousarray(a, dtype=np.float16 if dtype == "F16" else np.float32)
            dt = b.dtype.name
        keep.append(b)
        specs[name] = TensorSpec(dtype=dt, shape=list(b.shape), data_ptr=b.ctypes.data,
                                 data_len=b.nbytes)
    serialize_file(specs, path, metadata={"format": "pt"})


def config_json(src, tied=True, arch="LlamaForCausalLM", dtype="BF16"):
    return {
        "architectures": [arch],
        "model_type": {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                       "Qwen2ForCausalLM": "qwen2"}.get(arch, "llama"),
        "hidden_size": src.n_embd, "intermediate_size": src.n_ff,
        "num_hidden_layers": src.n_layer, "num_attention_heads": src.n_head,
        "num_key_value_heads": src.n_head_kv, "vocab_size": src.n_vocab,
        "max_position_embeddings": src.n_ctx, "rms_norm_eps": src.eps,
        "rope_theta": src.rope_base, "rope_scaling": None, "hidden_act": "silu",
        "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": src.bos, "eos_token_id": src.eos,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
        "transformers_version": "4.46.0",
    }


def tokenizer(src):
    """SmolLM2's tokenizer.json pipeline over the GGUF's vocabulary and merges:
    Digits(individual) + ByteLevel(GPT-2 regex), ByteLevel post-processor and
    decoder, control and user-defined tokens as added tokens."""
    vocab = {t: i for i, t in enumerate(src.tokens)}
    tk = Tokenizer(models.BPE(vocab, [tuple(m.split(" ", 1)) for m in src.merges]))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_tokens([AddedToken(src.tokens[i], special=src.types[i] == CONTROL, normalized=False)
                   for i in range(len(src.tokens)) if src.types[i] in (CONTROL, USER_DEFINED)])
    return tk


def write_folder(src, out, dtype="BF16", shards=1, tied=True, tensors=None):
    """A complete HF folder at `out`; returns its path."""
    os.makedirs(out, exist_ok=True)
    tensors = tensors if tensors is not None else hf_tensors(src, tied)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(src, tied, dtype=dtype), f, indent=2)
    if shards == 1:
        save_safetensors(tensors, os.path.join(out, "model.safetensors"), dtype)
    else:
        names = sorted(tensors)
        parts = [names[k::shards] for k in range(shards)]
        wmap, total = {}, 0
        for k, part in enumerate(parts):
            fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_safetensors({n: tensors[n] for n in part}, os.path.join(out, fn), dtype)
            for n in part:
                wmap[n] = fn
                total += tensors[n].size * (4 if dtype == "F32" else 2)
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
    tokenizer(src).save(os.path.join(out, "tokenizer.json"))
    tc = {"add_prefix_space": False, "bos_token": src.tokens[src.bos],
          "eos_token": src.tokens[src.eos], "unk_token": src.tokens[0],
          "model_max_length": src.n_ctx, "tokenizer_class": "GPT2Tokenizer",
          "chat_template": src.chat_template, "clean_up_tokenization_spaces": False}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": src.bos, "eos_token_id": src.eos, "pad_token_id": src.eos,
                   "transformers_version": "4.46.0"}, f, indent=2)
    return out


def write_gguf(src, path, dtype="F32", tensors=None):
    """The same weights as a GGUF of type F32 or BF16 (norms F32), in
    llama.cpp's layout (Q/K permuted), with the source's metadata."""
    hf = tensors if tensors is not None else hf_tensors(src, tied=True)
    w = GGUFWriter(path, "llama")
    w.add_block_count(src.n_layer)
    w.add_context_length(src.n_ctx)
    w.add_embedding_length(src.n_embd)
    w.add_feed_forward_length(src.n_ff)
    w.add_head_count(src.n_head)
    w.add_head_count_kv(src.n_head_kv)
    w.add_rope_freq_base(src.rope_base)
    w.add_layer_norm_rms_eps(src.eps)
    w.add_vocab_size(src.n_vocab)
    w.add_rope_dimension_count(src.n_embd // src.n_head)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(src.pre)
    w.add_token_list([t.encode("utf-8") for t in src.tokens])
    w.add_token_types(src.types)
    w.add_token_merges([m.encode("utf-8") for m in src.merges])
    w.add_bos_token_id(src.bos)
    w.add_eos_token_id(src.eos)
    w.add_add_bos_token(src.add_bos)
    if src.chat_template:
        w.add_chat_template(src.chat_template)
    inv = {h: g for g, h in LAYER_NAMES}
    for name, a in hf.items():
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            _, _, i, rest = name.split(".", 3)
            part, kind = rest.rsplit(".", 1)
            g = f"blk.{i}.{inv[part]}.{kind}"
            if part == "self_attn.q_proj":
                a = permute(a, src.n_head)
            elif part == "self_attn.k_proj":
                a = permute(a, src.n_head_kv)
        if dtype == "BF16" and a.ndim == 2:
            w.add_tensor(g, to_bf16(a), raw_shape=a.shape, raw_dtype=GGMLQuantizationType.BF16)
        elif dtype == "BF16":  # GGUF keeps norms in F32: the values a BF16 folder holds
            w.add_tensor(g, from_bf16(to_bf16(a)))
        else:
            w.add_tensor(g, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def read_safetensors(path):
    """{name: f32 array} as stored (BF16 widened exactly). The safetensors
    package reads F32/F16; numpy has no bfloat16, so BF16 is read from the
    header's offsets here."""
    out = {}
    with safe_open(path, framework="numpy") as f:
        names = list(f.keys())
    with open(path, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    for name in names:
        h = header[name]
        b, e = h["data_offsets"]
        buf = raw[8 + n + b:8 + n + e]
        if h["dtype"] == "BF16":
            a = from_bf16(np.frombuffer(buf, dtype=np.uint16))
        else:
            with safe_open(path, framework="numpy") as f:
                a = f.get_tensor(name)
        out[name] = np.asarray(a, dtype=np.float32).reshape(h["shape"])
    return out


def read_folder(folder):
    """(config dict, {name: f32 array}) of a folder, sharded or not."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    idx = os.path.join(folder, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(folder, fn)))
    return cfg, tensors


# ---- tiny synthetic folders (unit tests, fuzz corpus) -----------------------

def gpt2_bytes():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


TINY_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tiny_tokenizer(pre="smollm"):
    """A byte-level BPE of the 256 bytes, a few merges and two control tokens,
    with the pre-tokenizer pipeline tokenizer.json files of that family use."""
    enc = gpt2_bytes()
    vocab = {enc[b]: b for b in range(256)}
    merges = []
    for word in ["the", "he", "in", "an", "er", "on", " the", " a"]:
        w = "".join(enc[b] for b in word.encode())
        cur = [w[0]]
        for c in w[1:]:
            left = "".join(cur)
            if left + c not in vocab:
                merges.append((left, c))
                vocab[left + c] = len(vocab)
            cur = [left + c]
    from tokenizers import Regex
    tk = Tokenizer(models.BPE(vocab, merges, ignore_merges=(pre == "llama3")))
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre == "gpt2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT_REGEX[pre]), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    return tk


SPLIT_REGEX = {
    "llama3": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


def tiny_config(arch="LlamaForCausalLM", n_vocab=280, tied=True, **over):
    cfg = {"architectures": [arch], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": n_vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu",
           "tie_word_embeddings": tied}
    cfg.update(over)
    return cfg


def tiny_tensors(cfg, seed=0, prefix="model."):
    """Random f32 weights for a tiny config, HF names (`prefix` before
    embed_tokens, norm and layers). For Gemma 3 (text_config for the
    multimodal class) the norm weights are near 0, as HF applies 1 + w."""
    rng = np.random.default_rng(seed)
    arch = cfg["architectures"][0]
    gemma = arch.startswith("Gemma3")
    cfg = cfg.get("text_config", cfg)
    e, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or e // nh
    qwen2 = arch == "Qwen2ForCausalLM"
    qk_norm = arch in ("Qwen3ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")

    def m(r, c):
        return (rng.standard_normal((r, c)) / np.sqrt(c)).astype(np.float32)

    def norm(n):
        return ((0 if gemma else 1) + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {prefix + "embed_tokens.weight": m(v, e), prefix + "norm.weight": norm(e)}
    if not cfg.get("tie_word_embeddings", gemma):
        t["lm_head.weight"] = m(v, e)
    for i in range(cfg["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        t[p + "input_layernorm.weight"] = norm(e)
        t[p + "post_attention_layernorm.weight"] = norm(e)
        if gemma:
            t[p + "pre_feedforward_layernorm.weight"] = norm(e)
            t[p + "post_feedforward_layernorm.weight"] = norm(e)
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = norm(hd)
            t[p + "self_attn.k_norm.weight"] = norm(hd)
        t[p + "self_attn.q_proj.weight"] = m(nh * hd, e)
        t[p + "self_attn.k_proj.weight"] = m(nkv * hd, e)
        t[p + "self_attn.v_proj.weight"] = m(nkv * hd, e)
        t[p + "self_attn.o_proj.weight"] = m(e, nh * hd)
        if qwen2:
            for k, n in (("q", nh), ("k", nkv), ("v", nkv)):
                t[p + f"self_attn.{k}_proj.bias"] = (0.5 * rng.standard_normal(n * hd)).astype(np.float32)
        t[p + "mlp.gate_proj.weight"] = m(ff, e)
        t[p + "mlp.up_proj.weight"] = m(ff, e)
        t[p + "mlp.down_proj.weight"] = m(e, ff)
    return t


def write_tiny(out, arch="LlamaForCausalLM", dtype="F32", tied=True, shards=1, pre="smollm",
               generation=None, seed=0, cfg=None, prefix="model.", extra=None, **over):
    """A complete tiny folder (random weights, a tiny byte-level tokenizer);
    returns its path. `cfg` replaces the generated config.json (its
    vocab_size, or its text_config's, is set to the tokenizer's); `extra`
    adds tensors the model does not use (a vision tower)."""
    os.makedirs(out, exist_ok=True)
    tk = tiny_tokenizer(pre)
    if cfg is None:
        cfg = tiny_config(arch, n_vocab=tk.get_vocab_size(), tied=tied, **over)
    else:
        cfg.get("text_config", cfg)["vocab_size"] = tk.get_vocab_size()
    tensors = tiny_tensors(cfg, seed, prefix)
    tensors.update(extra or {})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if shards == 1:
        save_safetensors(tensors, os.path.join(out, "model.safetensors"), dtype)
    else:
        names = sorted(tensors)
        wmap = {}
        for k in range(shards):
            fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_safetensors({n: tensors[n] for n in names[k::shards]}, os.path.join(out, fn), dtype)
            wmap.update({n: fn for n in names[k::shards]})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wmap}, f)
    tk.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                   "chat_template": TINY_TEMPLATE}, f)
    if generation is not None:
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump(generation, f)
    return out


def raw_safetensors(header, data=b"", size=None):
    """A safetensors image from a header (dict or raw bytes) and data bytes;
    `size` overrides the 8-byte header size."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if size is None else size) + h + data


# ---- the same weights as a GGUF (qwen3, gemma3) -------------------------------

GGUF_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
              "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "pre_feedforward_layernorm": "ffn_norm",
              "post_feedforward_layernorm": "post_ffw_norm"}


def write_gguf_tiny(folder, path):
    """A tiny qwen3 or gemma3 folder's weights as an F32 GGUF, the way
    llama.cpp's converter writes them: these architectures use NeoX
    (half-split) RoPE, so Q/K rows are not permuted; Gemma's norm weights
    are stored as 1 + w; post_attention_layernorm is ffn_norm for Qwen3 and
    post_attention_norm for Gemma 3 (whose pre_feedforward_layernorm is
    ffn_norm). The toy vocabulary has as many tokens as the folder's."""
    import gguf
    top, t = read_folder(folder)
    cfg = top.get("text_config", top)
    gemma = top["architectures"][0].startswith("Gemma3")
    arch = "gemma3" if gemma else "qwen3"
    prefix = next(p for p in ("model.", "language_model.model.", "model.language_model.")
                  if p + "embed_tokens.weight" in t)
    U32, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    w = GGUFWriter(path, arch)
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    kv = {"block_count": cfg["num_hidden_layers"], "context_length":
          cfg.get("max_position_embeddings", 131072), "embedding_length": cfg["hidden_size"],
          "feed_forward_length": cfg["intermediate_size"], "attention.head_count": nh,
          "attention.head_count_kv": cfg["num_key_value_heads"],
          "attention.key_length": hd, "attention.value_length": hd}
    for k, v in kv.items():
        w.add_key_value(f"{arch}.{k}", v, U32)
    w.add_key_value(f"{arch}.rope.freq_base", cfg.get("rope_theta", 1e6), F32)
    w.add_key_value(f"{arch}.attention.layer_norm_rms_epsilon", cfg.get("rms_norm_eps", 1e-6), F32)
    if gemma:
        w.add_key_value(f"{arch}.attention.sliding_window", cfg.get("sliding_window", 4096), U32)
        w.add_key_value(f"{arch}.rope.freq_base_swa", cfg.get("rope_local_base_freq", 1e4), F32)
        if cfg.get("layer_types"):
            w.add_array(f"{arch}.attention.sliding_window_pattern",
                        [k == "sliding_attention" for k in cfg["layer_types"]])
        else:
            w.add_key_value(f"{arch}.attention.sliding_window_pattern",
                            cfg.get("sliding_window_pattern", 6), U32)
        rs = cfg.get("rope_scaling") or {}
        if rs.get("rope_type") == "linear":
            w.add_key_value(f"{arch}.rope.scaling.type", "linear", gguf.GGUFValueType.STRING)
            w.add_key_value(f"{arch}.rope.scaling.factor", rs["factor"], F32)
    n_vocab = cfg["vocab_size"]
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(n_vocab - 3)])
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    for name, a in t.items():
        if not name.startswith(prefix) and name != "lm_head.weight":
            continue  # a vision tower
        rest = name[len(prefix):]
        if rest == "embed_tokens.weight":
            g = "token_embd.weight"
        elif rest == "norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            _, i, part = rest.split(".", 2)
            part, kind = part.rsplit(".", 1)
            gn = GGUF_LAYER.get(part) or ("post_attention_norm" if gemma else "ffn_norm")
            g = f"blk.{i}.{gn}.{kind}"
        if gemma and a.ndim == 1:
            a = a + np.float32(1)
        w.add_tensor(g, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
