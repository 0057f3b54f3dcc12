"""bench/ref_qwen35_window.py: tests/cpu/ref_deltanet.py's fp64 forward of a
qwen35 GGUF, a whole window at a time and a layer at a time, for files too
large for that reference (Qwen3.5-0.8B's shape in fp64 is 6.4 GB, and its
token-by-token products read every weight once a token).

The same math as Qwen35Ref (its docstring says what each step is); what
differs is the order: every token of the window goes through a layer before
the next layer's weights are dequantized (float64, one layer held at a
time), the DeltaNet's recurrence steps through the window with its heads
side by side, attention is causal over the window. The head (token_embd or
output) is held dequantized in f32 and applied in f64 in slices of rows.

`rounding` makes every product with a 2-D weight read its input rounded
(bench/kl_judge.py's q8_0 / f16, llama.cpp's activations): a function of the
weight's type name, giving the rounding or None. `depths` gives the logits
of the model cut after those layers too (the output norm and head applied to
the residual there), so that one pass tells how a perturbation grows.
bench/kl_depth.py checks this against Qwen35Ref on the tiny file (--check).
"""
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cpu"))
from ref_deltanet import _field, l2norm, read_sizes, rms, silu, softplus  # noqa: E402

HEAD_ROWS = 16384  # the head's rows a slice (f64: 128 MiB at 1024 wide)


class WindowRef:
    def __init__(self, path):
        r = GGUFReader(path)
        a = _field(r, "general.architecture")
        if a != "qwen35":
            raise SystemExit(f"ref_qwen35_window: {path} is {a}, not qwen35")
        read_sizes(self, r, a)
        self.t = {t.name: t for t in r.tensors}
        head = "output.weight" if "output.weight" in self.t else "token_embd.weight"
        self.head_t, self.head = self.t[head], None  # dequantized at its first use
        self.head_type = self.head_t.tensor_type.name
        self.n_vocab = int(self.head_t.shape[1])

    @staticmethod
    def _deq(t, dtype=np.float64):
        v = dequantize(t.data, t.tensor_type).astype(dtype)
        return v.reshape([int(d) for d in reversed(t.shape)])

    def layer(self, il):
        """Layer il's tensors in f64 (short names), with their types' names."""
        p = f"blk.{il}."
        return {n[len(p):]: (self._deq(t), t.tensor_type.name)
                for n, t in self.t.items() if n.startswith(p)}

    @staticmethod
    def rounded(raw, rounding):
        """The layer's tensors as the forward reads them: 2-D weights (the
        convolution's aside) as (W, rounding of its input or None)."""
        out = {}
        for n, (w, ty) in raw.items():
            prod = w.ndim == 2 and "conv1d" not in n
            out[n] = (w, rounding(ty) if rounding else None) if prod else w
        return out

    @staticmethod
    def mm(wr, x):
        """x [T, in] times the weight's transpose, x rounded first where asked."""
        w, rnd = wr
        return (rnd(x) if rnd else x) @ w.T

    def rope(self, x, pos):  # x [T, heads, hd]
        half = self.n_rot // 2
        inv = self.base ** (-np.arange(half) * 2.0 / self.n_rot)
        ang = pos[:, None] * inv[None]
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
        y = x.copy()
        x1, x2 = x[..., :half], x[..., half:self.n_rot]
        y[..., :half] = x1 * cos - x2 * sin
        y[..., half:self.n_rot] = x2 * cos + x1 * sin
        return y

    def attention(self, L, h):
        T = h.shape[0]
        qg = self.mm(L["attn_q.weight"], h).reshape(T, self.n_head, 2, self.hd)
        q, gate = qg[:, :, 0], qg[:, :, 1].reshape(T, -1)
        k = self.mm(L["attn_k.weight"], h).reshape(T, self.n_kv, self.hd)
        v = self.mm(L["attn_v.weight"], h).reshape(T, self.n_kv, self.hd)
        pos = np.arange(T, dtype=np.float64)
        q = self.rope(rms(q, L["attn_q_norm.weight"], self.eps), pos)
        k = self.rope(rms(k, L["attn_k_norm.weight"], self.eps), pos)
        g = self.n_head // self.n_kv
        out = np.zeros((T, self.n_head, self.hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for hh in range(self.n_head):
            s = q[:, hh] @ k[:, hh // g].T / np.sqrt(self.hd) + mask
            pr = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh] = (pr / pr.sum(axis=1, keepdims=True)) @ v[:, hh // g]
        out = out.reshape(T, -1) / (1.0 + np.exp(-gate))
        return self.mm(L["attn_output.weight"], out)

    def deltanet(self, L, h):
        T = h.shape[0]
        dk, hk, hv = self.dk, self.hk, self.hv
        x = self.mm(L["attn_qkv.weight"], h)  # [T, C]
        z = self.mm(L["attn_gate.weight"], h).reshape(T, hv, dk)
        beta = 1.0 / (1.0 + np.exp(-self.mm(L["ssm_beta.weight"], h)))
        a = self.mm(L["ssm_alpha.weight"], h)
        g = L["ssm_a"] * softplus(a + L["ssm_dt.bias"])  # [T, hv]
        conv = L["ssm_conv1d.weight"]  # [C, K]
        xp = np.vstack([np.zeros((self.K - 1, x.shape[1])), x])
        x = silu(sum(xp[j:j + T] * conv[:, j] for j in range(self.K)))
        q = l2norm(x[:, :hk * dk].reshape(T, hk, dk)) * dk ** -0.5
        k = l2norm(x[:, hk * dk:2 * hk * dk].reshape(T, hk, dk))
        v = x[:, 2 * hk * dk:].reshape(T, hv, dk)
        kh = np.arange(hv) % hk  # value head h reads key head h % hk
        S = np.zeros((hv, dk, dk))
        o = np.zeros((T, hv, dk))
        for t in range(T):
            S *= np.exp(g[t])[:, None, None]
            kk, qq = k[t, kh], q[t, kh]
            delta = (v[t] - np.einsum("hd,hde->he", kk, S)) * beta[t][:, None]
            S += kk[:, :, None] * delta[:, None, :]
            o[t] = np.einsum("hd,hde->he", qq, S)
        o = rms(o, L["ssm_norm.weight"], self.eps) * silu(z)
        return self.mm(L["ssm_out.weight"], o.reshape(T, -1))

    def ffn(self, L, h):
        return self.mm(L["ffn_down.weight"],
                       silu(self.mm(L["ffn_gate.weight"], h)) * self.mm(L["ffn_up.weight"], h))

    def logits(self, x, rounding=None):
        """The head's logits [rows, vocab] of residuals x [rows, embd]."""
        if self.head is None:
            self.head = self._deq(self.head_t, np.float32)  # [vocab, embd]
        y = rms(x, self._deq(self.t["output_norm.weight"]), self.eps)
        rnd = rounding(self.head_type) if rounding else None
        y = rnd(y) if rnd else y
        out = np.empty((x.shape[0], self.n_vocab))
        for r in range(0, self.n_vocab, HEAD_ROWS):
            out[:, r:r + HEAD_ROWS] = y @ self.head[r:r + HEAD_ROWS].astype(np.float64).T
        return out

    def window(self, toks, rows, on_depth, roundings=(None,), depths=None):
        """Feeds toks from an empty state once for each of roundings (None:
        exact); after each of depths (default: all the layers) calls
        on_depth(depth, [logits [len(rows), vocab] at positions rows, a rounding each])."""
        depths = sorted(set(depths or [self.n_layer]))
        emb = self.t["token_embd.weight"]
        ids = np.asarray(toks)
        e = dequantize(emb.data[ids], emb.tensor_type).astype(np.float64).reshape(len(ids), -1)
        xs = [e.copy() for _ in roundings]
        # per layer (the embedding first): RMS of the residual after it, of its mixer, of its FFN
        self.trace = [[np.sqrt(np.mean(e * e)), 0.0, 0.0]]
        self.drift = []
        for il in range(depths[-1]):
            raw = self.layer(il)
            for i, rnd in enumerate(roundings):
                L = self.rounded(raw, rnd)
                x = xs[i]
                h = rms(x, L["attn_norm.weight"], self.eps)
                mix = self.deltanet(L, h) if self.recurrent[il] else self.attention(L, h)
                f = self.ffn(L, rms(x + mix, L["post_attention_norm.weight"], self.eps))
                xs[i] = x + mix + f
                if i == 0:  # the first forward's residual and branches, RMS over the window
                    self.trace.append([np.sqrt(np.mean(v * v)) for v in (xs[i], mix, f)])
            # each other forward's residual's distance from the first's, relative, median
            # over the positions
            self.drift.append([np.median(np.linalg.norm(x - xs[0], axis=1) /
                                         np.linalg.norm(xs[0], axis=1)) for x in xs[1:]])
            del raw
            if il + 1 in depths:
                on_depth(il + 1, [self.logits(x[rows], r) for x, r in zip(xs, roundings)])
