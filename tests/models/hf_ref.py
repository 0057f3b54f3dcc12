"""tests/models/hf_ref.py: an fp64 numpy forward over a Hugging Face folder's
own tensors, written the way transformers' LlamaForCausalLM /
Qwen2ForCausalLM / Qwen3ForCausalLM / Gemma3ForCausalLM (and the text model
of Gemma3ForConditionalGeneration) compute it: RMSNorm (Gemma's multiplies
by 1 + w), q/k/v projections (+ Qwen2's biases), Qwen3's and Gemma 3's
RMSNorm of each Q and K head, rotary embedding with rotate_half (dimension i
pairs with i + head_dim/2, cos/sin repeated over both halves; Gemma 3's
local layers at rope_local_base_freq, its global ones at rope_theta with a
linear rope_scaling), grouped-query causal attention (Gemma 3: a sliding
window of `sliding_window` keys on local layers, scale
query_pre_attn_scalar^-0.5, optional logit soft-capping), SwiGLU MLP
(Gemma: GELU-tanh), Gemma's norms after attention and around the MLP and
its embedding scale sqrt(hidden_size), lm_head or the tied embedding. It
shares no code with ignite nor with tests/cpu/ref_forward.py (which
computes GGUF's form); the tensors are read by tests/pylib/hfgen.read_folder
(the safetensors package). Used by tests/models/test_hf_folder.py,
test_hf_tiny.py and test_hf_arch.py."""
import math

import numpy as np

import hfgen

# transformers' Gemma3TextConfig defaults, for keys a text_config leaves out
GEMMA3_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
                   "sliding_window": 4096, "sliding_window_pattern": 6,
                   "tie_word_embeddings": True}


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def llama3_inv_freq(inv_freq, rs):
    """transformers' _compute_llama3_parameters: long wavelengths divided by
    factor, short ones kept, those between interpolated."""
    factor, old = rs["factor"], rs["original_max_position_embeddings"]
    lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    out = np.where(wavelen > old / lo, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return np.where(medium, smoothed, out)


class HFRef:
    def __init__(self, folder):
        top, t = hfgen.read_folder(folder)
        arch = top["architectures"][0]
        self.gemma = arch.startswith("Gemma3")
        cfg = dict(GEMMA3_DEFAULTS) if self.gemma else {}
        cfg.update(top.get("text_config", top))
        if "tie_word_embeddings" in top and "tie_word_embeddings" not in top.get("text_config", {}):
            cfg["tie_word_embeddings"] = top["tie_word_embeddings"]
        self.cfg = cfg
        self.n_layer = cfg["num_hidden_layers"]
        self.n_head = cfg["num_attention_heads"]
        self.n_head_kv = cfg.get("num_key_value_heads") or self.n_head
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_head
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.t = {k: v.astype(np.float64) for k, v in t.items()}
        self.p = next(p for p in ("model.", "language_model.model.", "model.language_model.")
                      if p + "embed_tokens.weight" in self.t)
        self.embed = self.t[self.p + "embed_tokens.weight"]
        self.lm_head = self.embed if cfg.get("tie_word_embeddings") else self.t["lm_head.weight"]
        self.n_vocab = self.embed.shape[0]
        self.scale = self.head_dim ** -0.5
        self.window = [0] * self.n_layer
        self.rope_of = [(self.theta, 1.0)] * self.n_layer
        rs = cfg.get("rope_scaling") or {}
        self.llama3 = rs if rs.get("rope_type", rs.get("type")) == "llama3" else None
        if self.gemma:
            self.scale = cfg["query_pre_attn_scalar"] ** -0.5
            rs = cfg.get("rope_scaling") or {}
            linear = rs.get("rope_type", rs.get("type")) == "linear"
            factor = rs.get("factor", 1.0) if linear else 1.0
            kinds = cfg.get("layer_types") or [
                "sliding_attention" if (i + 1) % cfg["sliding_window_pattern"] else
                "full_attention" for i in range(self.n_layer)]
            local = [k == "sliding_attention" for k in kinds]
            self.window = [cfg["sliding_window"] if loc else 0 for loc in local]
            self.rope_of = [(cfg["rope_local_base_freq"], 1.0) if loc else (self.theta, factor)
                            for loc in local]

    def norm(self, x, w):
        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return x * (1.0 + w) if self.gemma else w * x

    def rope(self, x, pos, theta, factor):
        """x: [n, heads, head_dim] -> x * cos + rotate_half(x) * sin."""
        inv_freq = 1.0 / (theta ** (np.arange(0, self.head_dim, 2) / self.head_dim)) / factor
        if self.llama3:
            inv_freq = llama3_inv_freq(inv_freq, self.llama3)
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
        if self.gemma:
            x = x * math.sqrt(self.cfg["hidden_size"])
        qi, ki = np.arange(n)[:, None], np.arange(n)[None, :]
        soft = self.cfg.get("attn_logit_softcapping")
        for i in range(self.n_layer):
            p = f"{self.p}layers.{i}."
            masked = ki > qi
            if self.window[i]:
                masked |= ki <= qi - self.window[i]
            h = self.norm(x, self.t[p + "input_layernorm.weight"])
            q = self.proj(h, p + "self_attn.q_proj").reshape(n, self.n_head, hd)
            k = self.proj(h, p + "self_attn.k_proj").reshape(n, self.n_head_kv, hd)
            v = self.proj(h, p + "self_attn.v_proj").reshape(n, self.n_head_kv, hd)
            if p + "self_attn.q_norm.weight" in self.t:
                q = self.norm(q, self.t[p + "self_attn.q_norm.weight"])
                k = self.norm(k, self.t[p + "self_attn.k_norm.weight"])
            q, k = self.rope(q, pos, *self.rope_of[i]), self.rope(k, pos, *self.rope_of[i])
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) * self.scale
            if soft:
                s = soft * np.tanh(s / soft)
            s = np.where(masked[None], -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            a = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), v)
            o = a.reshape(n, self.n_head * hd) @ self.t[p + "self_attn.o_proj.weight"].T
            if self.gemma:
                x = x + self.norm(o, self.t[p + "post_attention_layernorm.weight"])
                h = self.norm(x, self.t[p + "pre_feedforward_layernorm.weight"])
            else:
                x = x + o
                h = self.norm(x, self.t[p + "post_attention_layernorm.weight"])
            gate = h @ self.t[p + "mlp.gate_proj.weight"].T
            up = h @ self.t[p + "mlp.up_proj.weight"].T
            act = gelu_tanh(gate) if self.gemma else gate / (1.0 + np.exp(-gate))
            f = (act * up) @ self.t[p + "mlp.down_proj.weight"].T
            x = x + (self.norm(f, self.t[p + "post_feedforward_layernorm.weight"])
                     if self.gemma else f)
        out = self.norm(x, self.t[self.p + "norm.weight"]) @ self.lm_head.T
        cap = self.cfg.get("final_logit_softcapping")
        return cap * np.tanh(out / cap) if cap else out
