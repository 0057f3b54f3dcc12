"""tests/models/hf_ref.py: an fp64 numpy forward over a Hugging Face folder's
own tensors, written the way transformers' LlamaForCausalLM /
Qwen2ForCausalLM compute it: RMSNorm, q/k/v projections (+ Qwen2's biases),
rotary embedding with rotate_half (dimension i pairs with i + head_dim/2,
cos/sin repeated over both halves), grouped-query causal attention, SwiGLU
MLP, lm_head or the tied embedding. It shares no code with ignite nor with
tests/cpu/ref_forward.py (which computes GGUF's adjacent-pair form); the
tensors are read by tests/pylib/hfgen.read_folder (the safetensors
package). Used by tests/models/test_hf_folder.py."""
import numpy as np

import hfgen


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class HFRef:
    def __init__(self, folder):
        cfg, t = hfgen.read_folder(folder)
        self.cfg = cfg
        self.n_layer = cfg["num_hidden_layers"]
        self.n_head = cfg["num_attention_heads"]
        self.n_head_kv = cfg.get("num_key_value_heads") or self.n_head
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_head
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.t = {k: v.astype(np.float64) for k, v in t.items()}
        self.embed = self.t["model.embed_tokens.weight"]
        self.lm_head = self.embed if cfg.get("tie_word_embeddings") else self.t["lm_head.weight"]
        self.n_vocab = self.embed.shape[0]

    def norm(self, x, w):
        return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps))

    def rope(self, x, pos):
        """x: [n, heads, head_dim] -> x * cos + rotate_half(x) * sin."""
        inv_freq = 1.0 / (self.theta ** (np.arange(0, self.head_dim, 2) / self.head_dim))
        freqs = np.outer(pos, inv_freq)                   # [n, head_dim/2]
        emb = np.concatenate([freqs, freqs], axis=-1)     # [n, head_dim]
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
        return x * cos + rotate_half(x) * sin

    def proj(self, h, name):
        y = h @ self.t[name + ".weight"].T
        b = self.t.get(name + ".bias")
        return y if b is None else y + b

    def logits(self, tokens):
        """Logits of every position, float64 [n, n_vocab]."""
        n = len(tokens)
        pos = np.arange(n)
        hd, g = self.head_dim, self.n_head // self.n_head_kv
        x = self.embed[np.asarray(tokens)]
        causal = np.triu(np.ones((n, n), dtype=bool), k=1)
        for i in range(self.n_layer):
            p = f"model.layers.{i}."
            h = self.norm(x, self.t[p + "input_layernorm.weight"])
            q = self.proj(h, p + "self_attn.q_proj").reshape(n, self.n_head, hd)
            k = self.proj(h, p + "self_attn.k_proj").reshape(n, self.n_head_kv, hd)
            v = self.proj(h, p + "self_attn.v_proj").reshape(n, self.n_head_kv, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
            s = np.where(causal[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            a = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), v)
            x = x + a.reshape(n, self.n_head * hd) @ self.t[p + "self_attn.o_proj.weight"].T
            h = self.norm(x, self.t[p + "post_attention_layernorm.weight"])
            gate = h @ self.t[p + "mlp.gate_proj.weight"].T
            up = h @ self.t[p + "mlp.up_proj.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.t[p + "mlp.down_proj.weight"].T
        return self.norm(x, self.t["model.norm.weight"]) @ self.lm_head.T
