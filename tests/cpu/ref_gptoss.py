"""tests/cpu/ref_gptoss.py: the fp64 numpy forward of a gpt-oss GGUF,
written from transformers' modeling_gpt_oss.py (GptOssAttention,
eager_attention_forward, GptOssTopKRouter, GptOssExperts), the reference
ignite's CPU forward of gpt-oss is checked against (tests/cpu/test_gptoss.py).

RefModel (ref_forward.py) reads the file and dequantizes every tensor with
the gguf package (MXFP4 included); this class adds what gpt-oss has:
  - layer_types: even layers sliding_attention (a query at p sees keys
    p - window + 1 .. p), odd ones full; one rotary embedding for all layers
    (YaRN: RefModel's _rope_params, llama.cpp's truncated ramp ends, the
    GGUF having no `truncate` key);
  - Q/K/V and o_proj biases; sinks: per head a logit concatenated to every
    row's scores, the max taken over both, the softmax's sink column dropped;
  - the FFN input norm (HF's post_attention_layernorm, llama.cpp's
    post_attention_norm);
  - the router: logits = h W^T + b, torch.topk's k largest (ties: the lower
    index), softmax over those k; an expert: gate_up + bias, gate clamped
    above at 7, up to [-7, 7], glu = gate sigmoid(1.702 gate), out =
    ((up + 1) glu) down + bias, weighted by the router.
"""
import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize

from ref_forward import MOE_TIE, RefModel

ALPHA, LIMIT = 1.702, 7.0


class GptOssRef(RefModel):
    def __init__(self, path):
        super().__init__(path)
        r = GGUFReader(path)
        a = self.arch
        self.window = int(r.fields[f"{a}.attention.sliding_window"].parts[-1][0])
        self.sliding = [i % 2 == 0 for i in range(self.n_layer)]
        self.scaling = self.head_dim ** -0.5
        self.moe = True
        self.routes = None  # a list: _experts appends each layer's router logits [n, n_expert]
        names = {"bo": "attn_output.bias", "sinks": "attn_sinks.weight",
                 "router_b": "ffn_gate_inp.bias", "gate_b": "ffn_gate_exps.bias",
                 "up_b": "ffn_up_exps.bias", "down_b": "ffn_down_exps.bias"}
        extra = {t.name: t for t in r.tensors}
        for i, L in enumerate(self.layers):
            L["ffn_norm"] = L.pop("post_attn_norm")
            for k, n in names.items():
                t = extra[f"blk.{i}.{n}"]
                L[k] = np.asarray(dequantize(t.data, GGMLQuantizationType(t.tensor_type)),
                                  dtype=np.float64)

    def _experts(self, h, L):
        """GptOssMLP of rows h [n, n_embd]."""
        k = self.n_expert_used
        logits = h @ L["router"].T + L["router_b"]
        if self.routes is not None:  # (bench/kl_vs_fp64.py: the router's logits per layer)
            self.routes.append(logits)
        top = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # ties: lower index first
        srt = -np.sort(-logits, axis=1)
        if k < srt.shape[1]:
            gap = srt[:, k - 1] - srt[:, k]
            self.moe_ties += int(np.sum((gap > 0) & (gap < MOE_TIE)))
            self.moe_exact_ties += int(np.sum(gap == 0))
        tv = np.take_along_axis(logits, top, axis=1)
        w = np.exp(tv - tv.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            he = h[rows]
            gate = np.minimum(he @ L["gate_exps"][e].T + L["gate_b"][e], LIMIT)
            up = np.clip(he @ L["up_exps"][e].T + L["up_b"][e], -LIMIT, LIMIT)
            glu = gate / (1.0 + np.exp(-ALPHA * gate))
            y = ((up + 1) * glu) @ L["down_exps"][e].T + L["down_b"][e]
            out[rows] += w[rows, slot][:, None] * y
        return out

    def forward(self, tokens, cache, all_rows=False):
        n = len(tokens)
        pos0 = cache["k"][0].shape[0]
        pos = np.arange(pos0, pos0 + n)
        hd, g = self.head_dim, self.n_head // self.n_head_kv
        inv, ms = self.inv_freq_global, self.mscale_global
        x = self.tok_embd[np.asarray(tokens)]
        for i, L in enumerate(self.layers):
            h = self._rmsnorm(x, L["attn_norm"])
            q = (h @ L["wq"].T + L["bq"]).reshape(n, self.n_head, hd)
            k = (h @ L["wk"].T + L["bk"]).reshape(n, self.n_head_kv, hd)
            v = (h @ L["wv"].T + L["bv"]).reshape(n, self.n_head_kv, hd)
            q, k = self._rope(q, pos, inv, ms), self._rope(k, pos, inv, ms)
            K = cache["k"][i] = np.concatenate([cache["k"][i], k])
            V = cache["v"][i] = np.concatenate([cache["v"][i], v])
            Kh, Vh = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)
            s = np.einsum("qhd,khd->hqk", q, Kh) * self.scaling
            kpos = np.arange(K.shape[0])[None, :]
            mask = kpos > pos[:, None]
            if self.sliding[i]:
                mask |= pos[:, None] - kpos >= self.window
            s = np.where(mask[None], -np.inf, s)
            sink = np.broadcast_to(L["sinks"][:, None, None], (self.n_head, n, 1))
            c = np.concatenate([s, sink], axis=-1)
            c = np.exp(c - c.max(axis=-1, keepdims=True))
            p = (c / c.sum(axis=-1, keepdims=True))[..., :-1]  # the sink's share dropped
            att = np.einsum("hqk,khd->qhd", p, Vh).reshape(n, self.n_head * hd)
            x = x + att @ L["wo"].T + L["bo"]
            x = x + self._experts(self._rmsnorm(x, L["ffn_norm"]), L)
        return self._rmsnorm(x if all_rows else x[-1], self.output_norm) @ self.output.T
