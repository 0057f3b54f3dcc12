"""tests/pylib/archgen.py: small GGUF models of the architectures ignite
runs, written with the gguf package's GGUFWriter: the tensor names, shapes
and metadata keys llama.cpp's converter writes for llama, qwen2, qwen3 and
gemma3 (Q/K norms, post-norms, rope_freqs, rope.scaling.*, sliding window),
with random weights in valid encodings of modest scale, so a forward stays
well conditioned. Used by tests/cpu/test_forward_arch.py,
tests/models/test_arch_load.py and tests/unit/test_chat_jinja.py.
"""
import math

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

T = QT


def _f16(x):
    return np.asarray(x, dtype=np.float16).tobytes()


def _blocks(rng, qt, rows, cols):
    """Random but valid stored rows of type qt: [rows, row_bytes] uint8."""
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    nb = rows * cols // be
    if qt in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0):
        # the gguf package's own quantizer over normal weights
        w = (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)
        return gguf.quants.quantize(w, qt)
    raw = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
    a = 1.0 / math.sqrt(cols)
    if qt == QT.Q4_K:  # d, dmin (f16) then 12 bytes of 6-bit scales and mins
        raw[:, 0:2] = np.frombuffer(_f16([2 * a / (15 * 63)] * nb), np.uint8).reshape(nb, 2)
        raw[:, 2:4] = np.frombuffer(_f16([a / 63] * nb), np.uint8).reshape(nb, 2)
    elif qt == QT.Q5_K:
        raw[:, 0:2] = np.frombuffer(_f16([2 * a / (31 * 63)] * nb), np.uint8).reshape(nb, 2)
        raw[:, 2:4] = np.frombuffer(_f16([a / 63] * nb), np.uint8).reshape(nb, 2)
    elif qt == QT.Q6_K:  # ql, qh, scales (int8), then d (f16) last
        raw[:, bb - 2:bb] = np.frombuffer(_f16([a / (32 * 128)] * nb), np.uint8).reshape(nb, 2)
    else:
        raise ValueError(f"no generator for {qt.name}")
    return raw.reshape(rows, cols // be * bb)


def _matrix(w, rng, name, rows, cols, qt):
    if qt == QT.F32:
        data = (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)
        w.add_tensor(name, data)
    elif qt == QT.F16:
        data = (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float16)
        w.add_tensor(name, data)
    else:
        w.add_tensor(name, _blocks(rng, qt, rows, cols), raw_dtype=qt)


def _norm(w, rng, name, n, gemma):
    # Gemma's converter stores 1 + w with w near 0; the others w near 1
    v = 1.0 + 0.2 * rng.standard_normal(n)
    w.add_tensor(name, v.astype(np.float32))


def llama3_rope_freqs(base, dim, factor, low=1.0, high=4.0, old_ctx=8192):
    """The rope_freqs tensor llama.cpp's converter writes for rope_type
    "llama3" (transformers' _compute_llama3_parameters as divisors)."""
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / base ** (i / dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def write_model(path, arch, seed=0, n_layer=2, n_embd=64, n_head=4, n_head_kv=2,
                head_dim=None, n_ff=96, n_vocab=48, ctx=4096, mat=QT.Q8_0, emb=QT.Q8_0,
                tied=True, rope_base=10000.0, keys=None, tensors=None, skip=(),
                vocab=None, template=None):
    """Writes a model. `keys` adds or overrides metadata (without the
    "<arch>." prefix for architecture keys, given as (value, GGUFValueType));
    `tensors` adds tensors (name -> float32 array); `skip` drops tensors or
    keys by full name. `vocab`: (tokens, scores, types, model) for a
    tokenizer; else a toy one."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    hd = head_dim or n_embd // n_head
    gemma = arch == "gemma3"
    kv = {
        "block_count": (n_layer, gguf.GGUFValueType.UINT32),
        "context_length": (ctx, gguf.GGUFValueType.UINT32),
        "embedding_length": (n_embd, gguf.GGUFValueType.UINT32),
        "feed_forward_length": (n_ff, gguf.GGUFValueType.UINT32),
        "attention.head_count": (n_head, gguf.GGUFValueType.UINT32),
        "attention.head_count_kv": (n_head_kv, gguf.GGUFValueType.UINT32),
        "rope.freq_base": (rope_base, gguf.GGUFValueType.FLOAT32),
        "attention.layer_norm_rms_epsilon": (1e-6, gguf.GGUFValueType.FLOAT32),
    }
    if head_dim:
        kv["attention.key_length"] = (hd, gguf.GGUFValueType.UINT32)
        kv["attention.value_length"] = (hd, gguf.GGUFValueType.UINT32)
    kv.update(keys or {})
    for k, (v, t) in kv.items():
        if f"{arch}.{k}" in skip:
            continue
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(f"{arch}.{k}", v)
        else:
            w.add_key_value(f"{arch}.{k}", v, t)
    toks, scores, types, model = vocab or (
        ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(n_vocab - 3)],
        [0.0] * n_vocab, [2, 3, 3] + [1] * (n_vocab - 3), "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if template is not None:
        w.add_chat_template(template)

    def add(name, fn):
        if name not in skip:
            fn(name)

    add("token_embd.weight", lambda n: _matrix(w, rng, n, n_vocab, n_embd, emb))
    add("output_norm.weight", lambda n: _norm(w, rng, n, n_embd, gemma))
    if not tied:
        add("output.weight", lambda n: _matrix(w, rng, n, n_vocab, n_embd, mat))
    for name, arr in (tensors or {}).items():
        w.add_tensor(name, np.asarray(arr, dtype=np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", lambda n: _norm(w, rng, n, n_embd, gemma))
        add(p + "attn_q.weight", lambda n: _matrix(w, rng, n, n_head * hd, n_embd, mat))
        add(p + "attn_k.weight", lambda n: _matrix(w, rng, n, n_head_kv * hd, n_embd, mat))
        add(p + "attn_v.weight", lambda n: _matrix(w, rng, n, n_head_kv * hd, n_embd, mat))
        if arch == "qwen2":
            for b, m in (("attn_q.bias", n_head), ("attn_k.bias", n_head_kv),
                         ("attn_v.bias", n_head_kv)):
                add(p + b, lambda n, m=m: w.add_tensor(
                    n, (0.1 * rng.standard_normal(m * hd)).astype(np.float32)))
        if arch in ("qwen3", "gemma3"):
            add(p + "attn_q_norm.weight", lambda n: _norm(w, rng, n, hd, gemma))
            add(p + "attn_k_norm.weight", lambda n: _norm(w, rng, n, hd, gemma))
        add(p + "attn_output.weight", lambda n: _matrix(w, rng, n, n_embd, n_head * hd, mat))
        add(p + "ffn_norm.weight", lambda n: _norm(w, rng, n, n_embd, gemma))
        add(p + "ffn_gate.weight", lambda n: _matrix(w, rng, n, n_ff, n_embd, mat))
        add(p + "ffn_up.weight", lambda n: _matrix(w, rng, n, n_ff, n_embd, mat))
        add(p + "ffn_down.weight", lambda n: _matrix(w, rng, n, n_embd, n_ff, mat))
        if gemma:
            add(p + "post_attention_norm.weight", lambda n: _norm(w, rng, n, n_embd, gemma))
            add(p + "post_ffw_norm.weight", lambda n: _norm(w, rng, n, n_embd, gemma))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
