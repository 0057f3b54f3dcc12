"""tests/pylib/ggufgen.py: writes GGUF files byte by byte, valid or not.

The gguf package's GGUFWriter only writes valid files; the malformed-file
tests and the fuzz corpus need to break one field at a time, so this builder
lays out every field itself (the spec: github.com/ggml-org/ggml docs/gguf.md)
and lets a test override counts, dims, types and offsets. Valid output is
cross-checked against gguf.GGUFReader in tests/models/test_gguf_malformed.py.
"""
import struct

import numpy as np

# metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
        F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

# ggml tensor types used here: (id, block elems, block bytes)
T_F32, T_F16, T_Q4_0, T_Q8_0 = 0, 1, 2, 8
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 9: (32, 36), 30: (1, 2),
         20: (32, 18), 23: (256, 136)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def value(vtype, v, sub=None):
    """Encodes one value (no type tag); arrays take sub as element type."""
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        out = struct.pack("<IQ", sub, len(v))
        return out + b"".join(value(sub, x) for x in v)
    return struct.pack(_FMT[vtype], v)


class Gguf:
    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kv = []        # (key, raw encoded type+value bytes)
        self.tensors = []   # dicts: name, ne, type, data, offset (None = auto)

    def add(self, key, vtype, v, sub=None):
        self.kv.append((key, struct.pack("<I", vtype) + value(vtype, v, sub)))
        return self

    def add_raw(self, key, raw):
        """A key followed by arbitrary bytes in place of type and value."""
        self.kv.append((key, raw))
        return self

    def tensor(self, name, ne, ttype, data=None, offset=None, n_dims=None):
        if data is None:
            be, bb = BLOCK[ttype]
            n = int(np.prod(ne))
            data = np.random.default_rng(len(self.tensors)).integers(
                0, 256, n // be * bb, dtype=np.uint8).tobytes()
            if ttype == T_F32:
                data = np.random.default_rng(len(self.tensors)).standard_normal(
                    n).astype(np.float32).tobytes()
        self.tensors.append(dict(name=name, ne=list(ne), type=ttype, data=data,
                                 offset=offset, n_dims=n_dims))
        return self

    def build(self, n_kv=None, n_tensors=None, magic=b"GGUF"):
        a = self.alignment
        off = 0
        for t in self.tensors:
            if t["offset"] is None:
                off = (off + a - 1) // a * a
                t["_off"] = off
                off += len(t["data"])
            else:
                t["_off"] = t["offset"]
        out = bytearray(magic)
        out += struct.pack("<IQQ", self.version,
                           len(self.tensors) if n_tensors is None else n_tensors,
                           len(self.kv) if n_kv is None else n_kv)
        for k, raw in self.kv:
            out += gstr(k) + raw
        for t in self.tensors:
            nd = len(t["ne"]) if t["n_dims"] is None else t["n_dims"]
            out += gstr(t["name"]) + struct.pack("<I", nd)
            out += b"".join(struct.pack("<Q", d) for d in t["ne"])
            out += struct.pack("<IQ", t["type"], t["_off"])
        if self.tensors:
            out += bytes((-len(out)) % a)
            data = bytearray(max((t["_off"] + len(t["data"]) for t in self.tensors
                                  if t["_off"] < 1 << 40), default=0))
            for t in self.tensors:
                if t["_off"] + len(t["data"]) <= len(data):
                    data[t["_off"]:t["_off"] + len(t["data"])] = t["data"]
            out += data
        return bytes(out)


def tiny_llama(arch="llama", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=32,
               n_vocab=16, mat_type=T_Q4_0, emb_type=T_Q8_0, tied=True, bias=False,
               skip=(), override=None, alignment=32, moe=None):
    """A small, complete Llama-family model (random weights, a toy
    vocabulary). `skip` drops keys or tensors by name; `override` maps a
    tensor name to (ne, type). `moe` = (experts, used, an expert's width):
    a qwen3moe model (pass arch="qwen3moe"): Q/K head norms, a router
    (F32) and expert tensors in place of the dense FFN."""
    override = override or {}
    g = Gguf(alignment=alignment)
    toks = ["<unk>", "<s>", "</s>"] + [chr(ord("a") + i) for i in range(n_vocab - 3)]
    kvs = [
        ("general.architecture", STR, arch, None),
        ("general.name", STR, "tiny test model", None),
        (f"{arch}.block_count", U32, n_layer, None),
        (f"{arch}.context_length", U32, 256, None),
        (f"{arch}.embedding_length", U32, n_embd, None),
        (f"{arch}.feed_forward_length", U32, n_ff, None),
        (f"{arch}.attention.head_count", U32, n_head, None),
        (f"{arch}.attention.head_count_kv", U32, n_head_kv, None),
        (f"{arch}.rope.freq_base", F32, 10000.0, None),
        (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6, None),
        ("tokenizer.ggml.model", STR, "gpt2", None),
        ("tokenizer.ggml.pre", STR, "default", None),
        ("tokenizer.ggml.tokens", ARR, toks, STR),
        ("tokenizer.ggml.token_type", ARR, [3, 3, 3] + [1] * (n_vocab - 3), I32),
        ("tokenizer.ggml.merges", ARR, ["a b", "c d"], STR),
        ("tokenizer.ggml.bos_token_id", U32, 1, None),
        ("tokenizer.ggml.eos_token_id", U32, 2, None),
        ("tokenizer.chat_template", STR, "{{ messages }}", None),
    ]
    if moe:
        kvs += [(f"{arch}.expert_count", U32, moe[0], None),
                (f"{arch}.expert_used_count", U32, moe[1], None),
                (f"{arch}.expert_feed_forward_length", U32, moe[2], None)]
    for k, t, v, sub in kvs:
        if k not in skip:
            g.add(k, t, v, sub)
    hd = n_embd // n_head
    names = [("token_embd.weight", [n_embd, n_vocab], emb_type),
             ("output_norm.weight", [n_embd], T_F32)]
    if not tied:
        names.append(("output.weight", [n_embd, n_vocab], mat_type))
    for i in range(n_layer):
        p = f"blk.{i}."
        names += [(p + "attn_norm.weight", [n_embd], T_F32),
                  (p + "attn_q.weight", [n_embd, n_head * hd], mat_type),
                  (p + "attn_k.weight", [n_embd, n_head_kv * hd], mat_type),
                  (p + "attn_v.weight", [n_embd, n_head_kv * hd], mat_type),
                  (p + "attn_output.weight", [n_head * hd, n_embd], mat_type),
                  (p + "ffn_norm.weight", [n_embd], T_F32)]
        if moe:
            ne, fe = moe[0], moe[2]
            names += [(p + "attn_q_norm.weight", [hd], T_F32),
                      (p + "attn_k_norm.weight", [hd], T_F32),
                      (p + "ffn_gate_inp.weight", [n_embd, ne], T_F32),
                      (p + "ffn_gate_exps.weight", [n_embd, fe, ne], mat_type),
                      (p + "ffn_up_exps.weight", [n_embd, fe, ne], mat_type),
                      (p + "ffn_down_exps.weight", [fe, n_embd, ne], mat_type)]
        else:
            names += [(p + "ffn_gate.weight", [n_embd, n_ff], mat_type),
                      (p + "ffn_up.weight", [n_embd, n_ff], mat_type),
                      (p + "ffn_down.weight", [n_ff, n_embd], mat_type)]
        if bias:
            names += [(p + "attn_q.bias", [n_head * hd], T_F32),
                      (p + "attn_k.bias", [n_head_kv * hd], T_F32),
                      (p + "attn_v.bias", [n_head_kv * hd], T_F32)]
    for name, ne, t in names:
        if name in skip:
            continue
        ne, t = override.get(name, (ne, t))
        g.tensor(name, ne, t)
    return g


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHAT_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "\u010a", "\u0120"] + \
    [chr(ord("a") + i) for i in range(26)]
IM_END = 4


def tiny_chat_llama(n_ctx=256, **kw):
    """tiny_llama that can chat: a ChatML template and a vocabulary of the
    ChatML control tokens (<|im_end|> is the end-of-generation token), the
    newline and the space (byte-level 'Ċ', 'Ġ') and a..z, one token each (no
    merges apply); f32 weights (random quantized blocks can hold NaN
    scales). Returns the file's bytes."""
    skip = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
            "tokenizer.ggml.eos_token_id", "tokenizer.chat_template", "tokenizer.ggml.pre",
            "llama.context_length")
    g = tiny_llama(n_vocab=len(CHAT_TOKENS), skip=skip, mat_type=T_F32, emb_type=T_F32, **kw)
    g.add("llama.context_length", U32, n_ctx)
    g.add("tokenizer.ggml.pre", STR, "gpt2")
    g.add("tokenizer.ggml.tokens", ARR, CHAT_TOKENS, STR)
    g.add("tokenizer.ggml.token_type", ARR, [3] * 5 + [1] * (len(CHAT_TOKENS) - 5), I32)
    g.add("tokenizer.ggml.merges", ARR, ["x y"], STR)
    g.add("tokenizer.ggml.eos_token_id", U32, IM_END)
    g.add("tokenizer.chat_template", STR, CHATML)
    return g.build()


def chat_encode(text):
    """The ids tiny_chat_llama's tokenizer gives text (one per control token
    or character; the merge 'x y' has no token, so 'xy' stays two)."""
    ids = []
    i = 0
    while i < len(text):
        for sp in ("<|im_start|>", "<|im_end|>"):
            if text.startswith(sp, i):
                ids.append(CHAT_TOKENS.index(sp))
                i += len(sp)
                break
        else:
            c = {"\n": "\u010a", " ": "\u0120"}.get(text[i], text[i])
            ids.append(CHAT_TOKENS.index(c))
            i += 1
    return ids
