"""tests/cpu/ref_gemma4.py: an independent fp64 numpy forward of a gemma4
GGUF (Gemma 4's text model), the reference tests/cpu/test_gemma4.py checks
ignite's CPU forward against.

Weights are dequantized by the gguf package, everything after is float64.
Written from Gemma 4's definition (Gemma4TextModel; the venv's transformers
has no gemma4 module, so from llama.cpp's src/models/gemma4.cpp and its
converter's Gemma4Model, which state the same rules), sharing no code with
ignite:
  - embeddings times sqrt(hidden_size); norms x / rms(x) * w (the converter
    stores Gemma 4's weights as they are: no 1 + w);
  - per layer its own heads, KV heads, head dim (key_length on full layers,
    key_length_swa on sliding ones) and FFN width (the per-layer arrays);
  - Q and K RMS-normed per head with their weights, V per head without one;
    V is K's projection (before K's norm) where a layer has no v_proj;
    attention scale 1; sliding layers see keys j with i - j < window;
  - RoPE rotate_half over the whole head, sliding layers base freq_base_swa
    over rope.dimension_count_swa dims, full layers "proportional": pair i
    turns at base^(-2i / head_dim) for the pairs rope_freqs marks as turning
    (factor 1; the converter's 1e30 marks the still ones: partial_rotary_factor)
    and not at all for the others;
  - the last shared_kv_layers layers attend over the K/V of the last layer
    before them of their kind (full: n_own - 1, sliding: n_own - 2);
  - per-layer embeddings: per_layer_inputs = (norm(x W_proj^T / sqrt(hidden))
    + E_ple[tok] sqrt(d)) / sqrt(2), split per layer; after a layer's MLP,
    x += norm(W_p (gelu(W_g x) * per_layer_input)); then x *= layer_scalar;
  - the mixture of experts (26B-A4B; where the file has expert_count): the
    dense MLP's output normed (post_feedforward_layernorm_1) plus the
    experts' (post_feedforward_layernorm_2): the router reads
    norm(x) / sqrt(hidden) * router.scale (no weight in the norm), softmax,
    the k largest (ties: the lower index), renormalized; each expert
    down(gelu(gate h) * up h) * per_expert_scale[e] on h =
    pre_feedforward_layernorm_2(x); then post_feedforward_layernorm of the sum;
  - logits = norm(x) E^T, soft-capped c tanh(l / c).
"""
import math

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize


def _field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    if len(f.data) > 1:  # an array
        return [f.parts[i].item() for i in f.data]
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.item() if v.size == 1 else v


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class Gemma4Ref:
    def __init__(self, path):
        r = GGUFReader(path)
        a = "gemma4"
        f = lambda k, d=None: _field(r, f"{a}.{k}", d)  # noqa: E731
        n = self.n_layer = int(f("block_count"))
        self.n_embd = int(f("embedding_length"))
        per = lambda v: list(v) if isinstance(v, list) else [v] * n  # noqa: E731
        self.n_head = per(f("attention.head_count"))
        self.n_head_kv = per(f("attention.head_count_kv", self.n_head))
        self.sliding = [bool(v) for v in per(f("attention.sliding_window_pattern"))]
        self.window = int(f("attention.sliding_window"))
        hd_g, hd_l = int(f("attention.key_length")), int(f("attention.key_length_swa"))
        self.head_dim = [hd_l if s else hd_g for s in self.sliding]
        self.rot_l = int(f("rope.dimension_count_swa", hd_l))
        self.base_g, self.base_l = float(f("rope.freq_base")), float(f("rope.freq_base_swa"))
        self.eps = float(f("attention.layer_norm_rms_epsilon"))
        self.softcap = f("final_logit_softcapping")
        self.ple_dim = int(f("embedding_length_per_layer_input", 0))
        shared = int(f("attention.shared_kv_layers", 0))
        self.n_expert_used = int(f("expert_used_count", 0))
        own = n - shared
        self.src = [i if i < own else own - (2 if self.sliding[i] else 1) for i in range(n)]
        t = {}
        for ten in r.tensors:
            w = dequantize(ten.data, GGMLQuantizationType(ten.tensor_type))
            t[ten.name] = np.asarray(w, dtype=np.float64)
        for i in range(n):  # llama.cpp's fused experts: each one's gate rows, then its up rows
            gu = t.pop(f"blk.{i}.ffn_gate_up_exps.weight", None)
            if gu is not None:
                half = gu.shape[1] // 2
                t[f"blk.{i}.ffn_gate_exps.weight"] = gu[:, :half]
                t[f"blk.{i}.ffn_up_exps.weight"] = gu[:, half:]
        self.t = t
        self.routes = None  # a list: _moe appends (layer prefix, router logits [n, n_expert])
        self.n_vocab = t["token_embd.weight"].shape[0]
        ff = t["rope_freqs.weight"].reshape(-1)
        turning = ff < 1e20  # the converter's 1e30: a pair that does not turn
        ig = np.where(turning, 1.0 / self.base_g ** (np.arange(hd_g // 2) * 2.0 / hd_g), 0.0)
        self.inv_g = ig
        self.inv_l = 1.0 / self.base_l ** (np.arange(self.rot_l // 2) * 2.0 / self.rot_l)

    def new_cache(self):
        return {"k": [None] * self.n_layer, "v": [None] * self.n_layer, "n": 0}

    def _norm(self, x, w=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y if w is None else y * w

    @staticmethod
    def _rope(x, pos, inv):
        """rotate_half over the first 2 len(inv) dims of each head of x [n, h, hd]."""
        half = len(inv)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        a, b = x[..., :half], x[..., half:2 * half]
        y[..., :half] = a * c - b * s
        y[..., half:2 * half] = a * s + b * c
        return y

    def _moe(self, x, p):
        t, k = self.t, self.n_expert_used
        r = self._norm(x) / math.sqrt(self.n_embd) * t[p + "ffn_gate_inp.scale"]
        logits = r @ t[p + "ffn_gate_inp.weight"].T  # [n, n_expert]
        if self.routes is not None:  # (bench/kl_vs_fp64.py: the router's logits per layer)
            self.routes.append((p, logits))
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        h = self._norm(x, t[p + "pre_ffw_norm_2.weight"])
        scale = t[p + "ffn_down_exps.scale"].reshape(-1)
        out = np.zeros_like(x)
        for row in range(x.shape[0]):
            top = sorted(np.argsort(-probs[row], kind="stable")[:k])
            w = probs[row, top] / probs[row, top].sum()
            for e, we in zip(top, w):
                g = h[row] @ t[p + "ffn_gate_exps.weight"][e].T
                u = h[row] @ t[p + "ffn_up_exps.weight"][e].T
                out[row] += we * scale[e] * ((gelu(g) * u) @ t[p + "ffn_down_exps.weight"][e].T)
        return self._norm(out, t[p + "post_ffw_norm_2.weight"])

    def forward(self, tokens, cache, all_rows=False):
        """The logits [n_vocab] of the last of tokens (all_rows: [n, n_vocab]
        of each), run after the cache's positions (the cache grows)."""
        t, n = self.t, len(tokens)
        pos = np.arange(cache["n"], cache["n"] + n, dtype=np.float64)
        ids = np.asarray(tokens)
        e = self.n_embd
        x = t["token_embd.weight"][ids] * math.sqrt(e)
        if self.ple_dim:
            d = self.ple_dim
            proj = (x @ t["per_layer_model_proj.weight"].T) / math.sqrt(e)
            proj = self._norm(proj.reshape(n, self.n_layer, d), t["per_layer_proj_norm.weight"])
            tok = t["per_layer_token_embd.weight"][ids].reshape(n, self.n_layer, d) * math.sqrt(d)
            ple = (proj + tok) / math.sqrt(2.0)
        for i in range(self.n_layer):
            p = f"blk.{i}."
            hd, H, Hkv = self.head_dim[i], self.n_head[i], self.n_head_kv[i]
            inv = self.inv_l if self.sliding[i] else self.inv_g
            h = self._norm(x, t[p + "attn_norm.weight"])
            q = (h @ t[p + "attn_q.weight"].T).reshape(n, H, hd)
            q = self._rope(self._norm(q, t[p + "attn_q_norm.weight"]), pos, inv)
            if self.src[i] == i:
                k = h @ t[p + "attn_k.weight"].T
                v = h @ t[p + "attn_v.weight"].T if p + "attn_v.weight" in t else k
                k = self._rope(self._norm(k.reshape(n, Hkv, hd), t[p + "attn_k_norm.weight"]),
                               pos, inv)
                v = self._norm(v.reshape(n, Hkv, hd))
                for c, new in (("k", k), ("v", v)):
                    old = cache[c][i]
                    cache[c][i] = new if old is None else np.concatenate([old, new])
            K, V = cache["k"][self.src[i]], cache["v"][self.src[i]]
            g = H // K.shape[1]
            Kh, Vh = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)
            s = np.einsum("qhd,khd->hqk", q, Kh)  # scale 1
            kpos = np.arange(K.shape[0])[None, :]
            mask = kpos > pos[:, None]
            if self.sliding[i]:
                mask |= pos[:, None] - kpos >= self.window
            s = np.where(mask[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), Vh)
            o = att.reshape(n, H * hd) @ t[p + "attn_output.weight"].T
            x = x + self._norm(o, t[p + "post_attention_norm.weight"])
            h = self._norm(x, t[p + "ffn_norm.weight"])
            f = (gelu(h @ t[p + "ffn_gate.weight"].T) * (h @ t[p + "ffn_up.weight"].T))
            f = f @ t[p + "ffn_down.weight"].T
            if self.n_expert_used:
                f = self._norm(f, t[p + "post_ffw_norm_1.weight"]) + self._moe(x, p)
            x = x + self._norm(f, t[p + "post_ffw_norm.weight"])
            if self.ple_dim:
                gp = gelu(x @ t[p + "inp_gate.weight"].T) * ple[:, i]
                x = x + self._norm(gp @ t[p + "proj.weight"].T, t[p + "post_norm.weight"])
            if p + "layer_output_scale.weight" in t:
                x = x * t[p + "layer_output_scale.weight"].reshape(-1)[0]
        cache["n"] += n
        logits = self._norm(x if all_rows else x[-1], t["output_norm.weight"]) @ \
            t["token_embd.weight"].T
        if self.softcap:
            logits = np.tanh(logits / self.softcap) * self.softcap
        return logits
