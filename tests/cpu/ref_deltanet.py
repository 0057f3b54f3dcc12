"""tests/cpu/ref_deltanet.py: an independent fp64 numpy forward of a qwen35
GGUF (Qwen3.5 dense: gated DeltaNet and gated attention) or a qwen35moe one
(the same with a mixture of experts and a shared expert), token by token,
the reference tests/cpu/test_deltanet.py checks ignite's CPU forward against.

Weights are dequantized by the gguf package; everything after is float64.
Written from transformers' Qwen3.5 / Qwen3-Next decoder (Qwen3NextGatedDeltaNet
and torch_recurrent_gated_delta_rule, the recurrent form, one token at a
time; Qwen3NextAttention with its gate; Qwen3NextRMSNorm(Gated)), reading
the weights as llama.cpp's converter stored them:
  - norms: the model's (1 + w) RMSNorms were stored widened (w + 1), so they
    apply as stored; the DeltaNet output norm (RMSNormGated) is stored as is
    and applies as w * norm(x) * silu(z);
  - A is stored as -exp(A_log): g = A * softplus(a + dt_bias);
  - value heads were reordered from grouped (by key head) to tiled: value
    head h reads key head h % key_heads (transformers' repeat_interleave of
    q and k over the grouped order is the same pairing);
  - the attention's q_proj rows are [query | gate] per head; the output is
    attn * sigmoid(gate); Q and K head norms; RoPE on the first
    rope.dimension_count dims in halves (text positions: every section of
    the multi-section RoPE has the same position), base rope.freq_base;
  - the FFN norm is post_attention_norm; the FFN SwiGLU; embeddings tied.
qwen35moe (Qwen3_5MoeSparseMoeBlock: Qwen3_5MoeTopKRouter, Qwen3_5MoeExperts,
the shared expert and its gate) replaces the FFN with
  p = softmax(router h); the top k of p, divided by their sum;
  y = sum_j p_j down_j(silu(gate_j h) * up_j h)
      + sigmoid(shared_expert_gate h) * down_s(silu(gate_s h) * up_s h).
The recurrence, per value head with state S [d_k, d_v] (zeros at first):
  q, k = l2norm(q), l2norm(k) (x / sqrt(sum x^2 + 1e-6)); q *= d_k^-0.5
  S = S * exp(g); kv = k^T S; delta = (v - kv) * beta; S += k delta^T;
  o = q^T S
after the causal depthwise conv (kernel K, zero history) and SiLU of q|k|v.
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    if len(f.data) > 1:
        return [f.parts[i][0].item() for i in f.data]
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v[0].item()


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def read_sizes(obj, r, a):
    """The file's sizes onto obj (Qwen35Ref, bench/ref_qwen35_window.py's
    WindowRef): layers, heads, RoPE, the DeltaNet's, which layers recur."""
    obj.n_layer = _field(r, f"{a}.block_count")
    obj.eps = _field(r, f"{a}.attention.layer_norm_rms_epsilon")
    obj.n_head = _field(r, f"{a}.attention.head_count")
    obj.n_kv = _field(r, f"{a}.attention.head_count_kv")
    obj.hd = _field(r, f"{a}.attention.key_length")
    obj.n_rot = _field(r, f"{a}.rope.dimension_count")
    obj.base = _field(r, f"{a}.rope.freq_base")
    obj.K = _field(r, f"{a}.ssm.conv_kernel")
    obj.dk = _field(r, f"{a}.ssm.state_size")
    obj.hk = _field(r, f"{a}.ssm.group_count")
    obj.hv = _field(r, f"{a}.ssm.time_step_rank")
    every = _field(r, f"{a}.full_attention_interval", 4)
    obj.recurrent = [(i + 1) % every != 0 for i in range(obj.n_layer)]


class Qwen35Ref:
    def __init__(self, path):
        r = GGUFReader(path)
        a = _field(r, "general.architecture")
        self.n_used = _field(r, f"{a}.expert_used_count")  # None: the dense FFN
        read_sizes(self, r, a)
        self.w = {}
        for t in r.tensors:
            v = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = v.reshape([int(d) for d in reversed(t.shape)])
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def new_cache(self):
        c = {"pos": 0}
        for il in range(self.n_layer):
            if self.recurrent[il]:
                C = (2 * self.hk + self.hv) * self.dk
                c[il] = {"conv": np.zeros((self.K - 1, C)),
                         "S": np.zeros((self.hv, self.dk, self.dk))}
            else:
                c[il] = {"k": [], "v": []}
        return c

    def rope(self, x, pos):
        half = self.n_rot // 2
        inv = self.base ** (-np.arange(half) * 2.0 / self.n_rot)
        ang = pos * inv
        cos, sin = np.cos(ang), np.sin(ang)
        y = x.copy()
        x1, x2 = x[..., :half], x[..., half:self.n_rot]
        y[..., :half] = x1 * cos - x2 * sin
        y[..., half:self.n_rot] = x2 * cos + x1 * sin
        return y

    def attention(self, il, h, st, pos):
        p = f"blk.{il}."
        W = self.w
        qg = (W[p + "attn_q.weight"] @ h).reshape(self.n_head, 2, self.hd)
        q, gate = qg[:, 0], qg[:, 1].reshape(-1)
        k = (W[p + "attn_k.weight"] @ h).reshape(self.n_kv, self.hd)
        v = (W[p + "attn_v.weight"] @ h).reshape(self.n_kv, self.hd)
        q = self.rope(rms(q, W[p + "attn_q_norm.weight"], self.eps), pos)
        k = self.rope(rms(k, W[p + "attn_k_norm.weight"], self.eps), pos)
        st["k"].append(k)
        st["v"].append(v)
        K, V = np.stack(st["k"]), np.stack(st["v"])  # [t, kv, hd]
        out = np.zeros((self.n_head, self.hd))
        g = self.n_head // self.n_kv
        for hh in range(self.n_head):
            s = K[:, hh // g] @ q[hh] / np.sqrt(self.hd)
            pr = np.exp(s - s.max())
            out[hh] = (pr / pr.sum()) @ V[:, hh // g]
        out = out.reshape(-1) / (1.0 + np.exp(-gate))
        return W[p + "attn_output.weight"] @ out

    def deltanet(self, il, h, st):
        p = f"blk.{il}."
        W = self.w
        dk, hk, hv = self.dk, self.hk, self.hv
        x = W[p + "attn_qkv.weight"] @ h
        z = (W[p + "attn_gate.weight"] @ h).reshape(hv, dk)
        beta = 1.0 / (1.0 + np.exp(-(W[p + "ssm_beta.weight"] @ h)))
        a = W[p + "ssm_alpha.weight"] @ h
        g = W[p + "ssm_a"] * softplus(a + W[p + "ssm_dt.bias"])
        conv = W[p + "ssm_conv1d.weight"]  # [C, K]
        hist = np.vstack([st["conv"], x[None]])  # [K, C], oldest first
        x = silu(np.sum(hist * conv.T, axis=0))
        st["conv"] = hist[1:]
        q = l2norm(x[:hk * dk].reshape(hk, dk)) * dk ** -0.5
        k = l2norm(x[hk * dk:2 * hk * dk].reshape(hk, dk))
        v = x[2 * hk * dk:].reshape(hv, dk)
        o = np.zeros((hv, dk))
        for hh in range(hv):
            S = st["S"][hh] * np.exp(g[hh])
            kk, qq = k[hh % hk], q[hh % hk]
            delta = (v[hh] - kk @ S) * beta[hh]
            S = S + np.outer(kk, delta)
            st["S"][hh] = S
            o[hh] = qq @ S
        o = rms(o, W[p + "ssm_norm.weight"], self.eps) * silu(z)
        return W[p + "ssm_out.weight"] @ o.reshape(-1)

    def ffn(self, il, h):
        p = f"blk.{il}."
        W = self.w
        if self.n_used is None:
            return W[p + "ffn_down.weight"] @ (silu(W[p + "ffn_gate.weight"] @ h)
                                               * (W[p + "ffn_up.weight"] @ h))
        lg = W[p + "ffn_gate_inp.weight"] @ h
        pr = np.exp(lg - lg.max())
        pr /= pr.sum()
        top = np.argsort(-pr, kind="stable")[:self.n_used]  # torch.topk: the lower index on a tie
        y = np.zeros_like(h)
        for e, w in zip(top, pr[top] / pr[top].sum()):
            f = silu(W[p + "ffn_gate_exps.weight"][e] @ h) * (W[p + "ffn_up_exps.weight"][e] @ h)
            y += w * (W[p + "ffn_down_exps.weight"][e] @ f)
        f = silu(W[p + "ffn_gate_shexp.weight"] @ h) * (W[p + "ffn_up_shexp.weight"] @ h)
        g = (W[p + "ffn_gate_inp_shexp.weight"].reshape(-1) @ h)
        return y + (W[p + "ffn_down_shexp.weight"] @ f) / (1.0 + np.exp(-g))

    def forward(self, toks, cache):
        """Logits [n_vocab] of the last of toks, fed one by one."""
        W = self.w
        for t in toks:
            x = W["token_embd.weight"][t].copy()
            pos = cache["pos"]
            for il in range(self.n_layer):
                p = f"blk.{il}."
                h = rms(x, W[p + "attn_norm.weight"], self.eps)
                if self.recurrent[il]:
                    x = x + self.deltanet(il, h, cache[il])
                else:
                    x = x + self.attention(il, h, cache[il], pos)
                x = x + self.ffn(il, rms(x, W[p + "post_attention_norm.weight"], self.eps))
            cache["pos"] = pos + 1
        out = W["output.weight"] if "output.weight" in W else W["token_embd.weight"]
        return out @ rms(x, W["output_norm.weight"], self.eps)
