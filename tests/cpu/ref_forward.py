"""tests/cpu/ref_forward.py: an independent fp64 numpy forward of a Llama-family
GGUF model, the reference ignite's CPU forward is checked against.

Weights are dequantized by the gguf package (gguf.quants.dequantize), not by
ignite, and everything after that is float64. Written from the model's
definition (RMSNorm, RoPE, grouped-query causal attention, SwiGLU), sharing
no code with ignite. Used by tests/cpu/test_forward_ref.py.
"""
import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.item() if v.size == 1 else v


class RefModel:
    """The model's hyper-parameters and fp64 weights; forward() runs it."""

    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch
        self.n_layer = int(_field(r, f"{a}.block_count"))
        self.n_embd = int(_field(r, f"{a}.embedding_length"))
        self.n_head = int(_field(r, f"{a}.attention.head_count"))
        self.n_head_kv = int(_field(r, f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(_field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.rope_base = float(_field(r, f"{a}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5))
        # GGUF llama weights are permuted so that RoPE pairs dims (2i, 2i+1);
        # qwen2 keeps the (i, i + n_rot/2) pairing.
        self.rope_adjacent = a != "qwen2"

        t = {}
        for ten in r.tensors:
            w = dequantize(ten.data, GGMLQuantizationType(ten.tensor_type))
            t[ten.name] = np.asarray(w, dtype=np.float64)
        self.tok_embd = t["token_embd.weight"]  # [n_vocab, n_embd]
        self.output = t.get("output.weight", self.tok_embd)
        self.output_norm = t["output_norm.weight"]
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            self.layers.append({k: t.get(p + n) for k, n in [
                ("attn_norm", "attn_norm.weight"), ("wq", "attn_q.weight"),
                ("wk", "attn_k.weight"), ("wv", "attn_v.weight"),
                ("bq", "attn_q.bias"), ("bk", "attn_k.bias"), ("bv", "attn_v.bias"),
                ("wo", "attn_output.weight"), ("ffn_norm", "ffn_norm.weight"),
                ("w_gate", "ffn_gate.weight"), ("w_up", "ffn_up.weight"),
                ("w_down", "ffn_down.weight")]})
        self.n_vocab = self.tok_embd.shape[0]

    def new_cache(self):
        """K and V per layer: lists of [n_pos, n_head_kv, head_dim] arrays."""
        return {"k": [np.zeros((0, self.n_head_kv, self.head_dim))] * self.n_layer,
                "v": [np.zeros((0, self.n_head_kv, self.head_dim))] * self.n_layer}

    def _rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):
        """x: [n, heads, head_dim]; rotates the first n_rot dims at positions pos."""
        half = self.n_rot // 2
        inv = self.rope_base ** (-2.0 * np.arange(half) / self.n_rot)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [n, half]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        if self.rope_adjacent:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            y[..., 0:self.n_rot:2] = a * c - b * s
            y[..., 1:self.n_rot:2] = a * s + b * c
        else:
            a, b = x[..., :half], x[..., half:self.n_rot]
            y[..., :half] = a * c - b * s
            y[..., half:self.n_rot] = a * s + b * c
        return y

    def forward(self, tokens, cache, all_rows=False):
        """Runs tokens at the positions after those in `cache` (which grows) and
        returns the logits of the last token, float64 [n_vocab] (all_rows:
        of every token, [n, n_vocab])."""
        n = len(tokens)
        pos0 = cache["k"][0].shape[0]
        pos = np.arange(pos0, pos0 + n)
        hd, g = self.head_dim, self.n_head // self.n_head_kv
        x = self.tok_embd[np.asarray(tokens)]
        for i, L in enumerate(self.layers):
            h = self._rmsnorm(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = self._rope(q.reshape(n, self.n_head, hd), pos)
            k = self._rope(k.reshape(n, self.n_head_kv, hd), pos)
            v = v.reshape(n, self.n_head_kv, hd)
            K = cache["k"][i] = np.concatenate([cache["k"][i], k])
            V = cache["v"][i] = np.concatenate([cache["v"][i], v])
            Kh, Vh = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)  # [P, n_head, hd]
            s = np.einsum("qhd,khd->hqk", q, Kh) / np.sqrt(hd)
            mask = np.arange(K.shape[0])[None, :] > pos[:, None]  # [n, P]
            s = np.where(mask[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            p = s / s.sum(axis=-1, keepdims=True)
            att = np.einsum("hqk,khd->qhd", p, Vh).reshape(n, self.n_head * hd)
            x = x + att @ L["wo"].T
            h = self._rmsnorm(x, L["ffn_norm"])
            gate, up = h @ L["w_gate"].T, h @ L["w_up"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ L["w_down"].T
        return self._rmsnorm(x if all_rows else x[-1], self.output_norm) @ self.output.T
