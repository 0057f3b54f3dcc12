"""tests/cpu/ref_forward.py: an independent fp64 numpy forward of a GGUF
model (llama, qwen2, qwen3, gemma3, qwen3moe), the reference ignite's CPU forward is
checked against.

Weights are dequantized by the gguf package (gguf.quants.dequantize), not by
ignite, and everything after that is float64. Written from each
architecture's definition in Hugging Face transformers (LlamaModel,
Qwen2Model, Qwen3Model, Gemma3TextModel, Qwen3MoeModel and modeling_rope_utils), sharing
no code with ignite: the file's metadata is read back into the config those
classes take (what llama.cpp's converter wrote from it), then:
  - RMSNorm; Gemma3RMSNorm multiplies by (1 + w), and the converter stored
    w + 1, so w = stored - 1 here;
  - RoPE: default, linear (positions / factor), "llama3" (the converter's
    rope_freqs tensor divides each frequency), YaRN
    (_compute_yarn_parameters: ramp between interpolated and extrapolated
    frequencies, cos and sin times 0.1 ln(factor) + 1); Gemma 3's local
    layers use rope_local_base_freq without scaling;
  - Qwen3 and Gemma 3 RMSNorm each Q and K head before RoPE; Gemma 3 scales
    embeddings by sqrt(hidden_size), scales attention by
    query_pre_attn_scalar^-0.5, normalizes the attention and MLP outputs
    before the residual adds, uses gelu_pytorch_tanh, and its sliding layers
    ((i + 1) % sliding_window_pattern != 0) see keys j with i - j < window;
  - Qwen3-MoE (Qwen3MoeSparseMoeBlock) replaces the MLP by a router:
    softmax of h W_gate^T, torch.topk's k largest (ties: the lower index),
    their weights renormalized (norm_topk_prob: llama.cpp always for a
    qwen3moe GGUF), the sum of those experts' SwiGLU MLPs so weighted. A row
    whose k-th and (k+1)-th router logits lie within MOE_TIE (but are not
    equal: an exact tie goes to the lower index, here as in torch.topk) may
    pick either expert in another engine: forward() counts such rows
    (moe_ties) and the exact ties (moe_exact_ties).
Used by tests/cpu/test_forward_ref.py, test_forward_tiny.py,
test_forward_arch.py and test_gemma3_real.py.
"""
import math

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize

# Router logits closer than this at the top-k boundary: either expert is right.
MOE_TIE = 1e-6


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.item() if v.size == 1 else v


class RefModel:
    """The model's config and fp64 weights; forward() runs it."""

    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch
        f = lambda k, d=None: _field(r, f"{a}.{k}", d)  # noqa: E731
        self.n_layer = int(f("block_count"))
        self.n_embd = int(f("embedding_length"))
        self.n_head = int(f("attention.head_count"))
        self.n_head_kv = int(f("attention.head_count_kv", self.n_head))
        self.head_dim = int(f("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(f("rope.dimension_count", self.head_dim))
        self.rope_base = float(f("rope.freq_base", 10000.0))
        gemma = a == "gemma3"
        self.eps = float(f("attention.layer_norm_rms_epsilon", 1e-6 if a in ("qwen3", "gemma3",
                                                                              "qwen3moe")
                                                                 else 1e-5))
        # GGUF llama weights are permuted so that RoPE pairs dims (2i, 2i+1);
        # the others keep transformers' rotate_half pairing (i, i + n_rot/2).
        self.rope_adjacent = a == "llama"
        self.qk_norm = a in ("qwen3", "gemma3", "qwen3moe")
        self.moe = a == "qwen3moe"
        self.n_expert_used = int(f("expert_used_count", 0))
        self.moe_ties = self.moe_exact_ties = 0
        # (q, k, v) -> (q, k, v) after RoPE, each [n, heads, head_dim]: what a
        # quantized KV cache and its query hold (bench/kvq_judge.py); None: exact
        self.kv_hook = None
        self.norm_topk = True  # a folder's norm_topk_prob may say otherwise
        self.gemma = gemma
        # rope_scaling as transformers' config has it
        stype = f("rope.scaling.type")
        factor = f("rope.scaling.factor")
        if stype is None and factor:
            stype = "linear"
        self.rope_scaling = None
        if stype in ("linear", "yarn") and factor:
            self.rope_scaling = {"rope_type": stype, "factor": float(factor),
                                 "original_max_position_embeddings":
                                     int(f("rope.scaling.original_context_length",
                                           f("context_length"))),
                                 "beta_fast": float(f("rope.scaling.yarn_beta_fast", 32.0)),
                                 "beta_slow": float(f("rope.scaling.yarn_beta_slow", 1.0))}
        self.final_softcap = f("final_logit_softcapping")
        self.attn_softcap = f("attn_logit_softcapping")
        # Gemma 3: window, pattern (Gemma3TextConfig defaults), local base,
        # query_pre_attn_scalar (168 = hidden / heads for the 62-layer 27B)
        self.window = int(f("attention.sliding_window", 0)) if gemma else 0
        pattern = int(f("attention.sliding_window_pattern", 6))
        self.sliding = [bool(self.window) and (i + 1) % pattern != 0
                        for i in range(self.n_layer)]
        self.local_base = float(f("rope.freq_base_swa", 10000.0))
        qpas = self.n_embd // self.n_head if gemma and self.n_layer == 62 else self.head_dim
        self.scaling = qpas ** -0.5

        t = {}
        for ten in r.tensors:
            w = dequantize(ten.data, GGMLQuantizationType(ten.tensor_type))
            t[ten.name] = np.asarray(w, dtype=np.float64)
        self.rope_freqs = t.get("rope_freqs.weight")
        self.tok_embd = t["token_embd.weight"]  # [n_vocab, n_embd]
        self.output = t.get("output.weight", self.tok_embd)
        self.output_norm = self._norm_w(t["output_norm.weight"])
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            L = {k: t.get(p + n) for k, n in [
                ("attn_norm", "attn_norm.weight"), ("wq", "attn_q.weight"),
                ("wk", "attn_k.weight"), ("wv", "attn_v.weight"),
                ("bq", "attn_q.bias"), ("bk", "attn_k.bias"), ("bv", "attn_v.bias"),
                ("wo", "attn_output.weight"), ("ffn_norm", "ffn_norm.weight"),
                ("w_gate", "ffn_gate.weight"), ("w_up", "ffn_up.weight"),
                ("w_down", "ffn_down.weight"), ("q_norm", "attn_q_norm.weight"),
                ("k_norm", "attn_k_norm.weight"),
                ("post_attn_norm", "post_attention_norm.weight"),
                ("post_ffn_norm", "post_ffw_norm.weight"), ("router", "ffn_gate_inp.weight"),
                ("gate_exps", "ffn_gate_exps.weight"), ("up_exps", "ffn_up_exps.weight"),
                ("down_exps", "ffn_down_exps.weight")]}
            for k in ("attn_norm", "ffn_norm", "q_norm", "k_norm", "post_attn_norm",
                      "post_ffn_norm"):
                if L[k] is not None:
                    L[k] = self._norm_w(L[k])
            self.layers.append(L)
        self.n_vocab = self.tok_embd.shape[0]
        self.inv_freq_global, self.mscale_global = self._rope_params(global_layer=True)
        self.inv_freq_local, self.mscale_local = self._rope_params(global_layer=False)

    def _norm_w(self, stored):
        """transformers' weight of an RMSNorm: Gemma's converter stored w + 1."""
        return stored - 1.0 if self.gemma else stored

    def new_cache(self):
        """K and V per layer: lists of [n_pos, n_head_kv, head_dim] arrays."""
        return {"k": [np.zeros((0, self.n_head_kv, self.head_dim))] * self.n_layer,
                "v": [np.zeros((0, self.n_head_kv, self.head_dim))] * self.n_layer}

    def _rmsnorm(self, x, w):
        """LlamaRMSNorm x / rms(x) * w; Gemma3RMSNorm x / rms(x) * (1 + w)."""
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y * (1.0 + w) if self.gemma else y * w

    def _rope_params(self, global_layer):
        """(inv_freq [n_rot/2], attention_scaling) as modeling_rope_utils
        computes them for this layer kind."""
        dim = self.n_rot
        base = self.rope_base if global_layer else self.local_base
        inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        rs = self.rope_scaling if global_layer else None
        scale = 1.0
        if self.rope_freqs is not None and global_layer:
            # the "llama3" rope_type, as the converter's rope_freqs factors
            inv = inv / self.rope_freqs
        if rs and rs["rope_type"] == "linear":
            inv = inv / rs["factor"]
        elif rs and rs["rope_type"] == "yarn":
            factor, orig = rs["factor"], rs["original_max_position_embeddings"]

            def corr_dim(rot):
                return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
            low = max(math.floor(corr_dim(rs["beta_fast"])), 0)
            high = min(math.ceil(corr_dim(rs["beta_slow"])), dim - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
            extrap_factor = 1 - ramp
            inv = (inv / factor) * (1 - extrap_factor) + inv * extrap_factor
            scale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        return inv, scale

    def _rope(self, x, pos, inv, mscale):
        """x: [n, heads, head_dim]; rotates the first n_rot dims at positions pos."""
        half = self.n_rot // 2
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [n, half]
        c, s = np.cos(ang)[:, None, :] * mscale, np.sin(ang)[:, None, :] * mscale
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

    def _moe(self, h, L):
        """Qwen3MoeSparseMoeBlock of rows h [n, n_embd]."""
        k = self.n_expert_used
        logits = h @ L["router"].T  # [n, n_expert]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        top = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # ties: lower index first
        srt = -np.sort(-logits, axis=1)
        if k < srt.shape[1]:
            gap = srt[:, k - 1] - srt[:, k]
            self.moe_ties += int(np.sum((gap > 0) & (gap < MOE_TIE)))
            self.moe_exact_ties += int(np.sum(gap == 0))
        w = np.take_along_axis(p, top, axis=1)
        if self.norm_topk:
            w /= w.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            he = h[rows]
            g, u = he @ L["gate_exps"][e].T, he @ L["up_exps"][e].T
            y = (g / (1.0 + np.exp(-g)) * u) @ L["down_exps"][e].T
            out[rows] += w[rows, slot][:, None] * y
        return out

    def forward(self, tokens, cache, all_rows=False):
        """Runs tokens at the positions after those in `cache` (which grows) and
        returns the logits of the last token, float64 [n_vocab] (all_rows:
        of every token, [n, n_vocab])."""
        n = len(tokens)
        pos0 = cache["k"][0].shape[0]
        pos = np.arange(pos0, pos0 + n)
        hd, g = self.head_dim, self.n_head // self.n_head_kv
        x = self.tok_embd[np.asarray(tokens)]
        if self.gemma:
            x = x * math.sqrt(self.n_embd)
        for i, L in enumerate(self.layers):
            h = self._rmsnorm(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.reshape(n, self.n_head, hd)
            k = k.reshape(n, self.n_head_kv, hd)
            if self.qk_norm:
                q, k = self._rmsnorm(q, L["q_norm"]), self._rmsnorm(k, L["k_norm"])
            sliding = self.sliding[i]
            inv, ms = ((self.inv_freq_local, self.mscale_local) if sliding
                       else (self.inv_freq_global, self.mscale_global))
            q, k = self._rope(q, pos, inv, ms), self._rope(k, pos, inv, ms)
            v = v.reshape(n, self.n_head_kv, hd)
            if self.kv_hook is not None:
                q, k, v = self.kv_hook(q, k, v)
            K = cache["k"][i] = np.concatenate([cache["k"][i], k])
            V = cache["v"][i] = np.concatenate([cache["v"][i], v])
            Kh, Vh = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)  # [P, n_head, hd]
            s = np.einsum("qhd,khd->hqk", q, Kh) * self.scaling
            if self.attn_softcap:
                s = np.tanh(s / self.attn_softcap) * self.attn_softcap
            kpos = np.arange(K.shape[0])[None, :]
            mask = kpos > pos[:, None]  # [n, P]
            if sliding:
                mask |= pos[:, None] - kpos >= self.window
            s = np.where(mask[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            p = s / s.sum(axis=-1, keepdims=True)
            att = np.einsum("hqk,khd->qhd", p, Vh).reshape(n, self.n_head * hd)
            o = att @ L["wo"].T
            if L["post_attn_norm"] is not None:
                o = self._rmsnorm(o, L["post_attn_norm"])
            x = x + o
            h = self._rmsnorm(x, L["ffn_norm"])
            if self.moe:
                x = x + self._moe(h, L)
                continue
            gate, up = h @ L["w_gate"].T, h @ L["w_up"].T
            if self.gemma:  # gelu_pytorch_tanh
                act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                (gate + 0.044715 * gate ** 3)))
            else:  # silu
                act = gate / (1.0 + np.exp(-gate))
            o = (act * up) @ L["w_down"].T
            if L["post_ffn_norm"] is not None:
                o = self._rmsnorm(o, L["post_ffn_norm"])
            x = x + o
        logits = self._rmsnorm(x if all_rows else x[-1], self.output_norm) @ self.output.T
        if self.final_softcap:
            logits = np.tanh(logits / self.final_softcap) * self.final_softcap
        return logits
