"""tests/cpu/test_ops_numpy.py: the primitives qwen3 and gemma3 added, one
at a time, against numpy transcriptions of their definitions (through
ops_tool, which runs the ops/ function on the test's inputs):

  - ops_rope_freqs against two transcriptions: llama.cpp's (ggml-cpu
    rope_yarn / ggml_rope_cache_init, ggml_rope_yarn_corr_dims, and the
    attention factor llama_context derives), and, where the two agree
    (YaRN without an explicit attention factor, linear, "llama3" through
    the converter's rope_freqs), transformers' modeling_rope_utils; at
    several bases, dims, factors, original contexts and betas, with and
    without per-dimension factors. Relative error <= 1e-12 (both in double);
  - RMSNorm over rows of one head (Qwen3/Gemma3's Q/K norms: the same call
    over n_tokens * n_heads rows of head_dim) and Gemma's convention: the
    stored weight is transformers' w + 1, so ignite's plain RMSNorm with the
    stored weight equals Gemma3RMSNorm's x / rms(x) * (1 + w);
  - GeGLU with GELU's tanh form (transformers' gelu_pytorch_tanh), SwiGLU,
    and tanh soft-capping, elementwise, relative to the fp64 values'
    magnitude <= 2e-6 (f32 arithmetic);
  - the Walsh-Hadamard rotation of a quantized cache's rows in chunks of
    64, 128 and 256, against numpy's product with Sylvester's matrix / sqrt(n)
    (ggml_gen_hadamard's), relative <= 1e-6, and applied twice = identity;
  - the KV cache's rows as kv_write_rows stores them (K, and V apart), f32,
    f16 and ggml's q8_0 and q4_0 blocks, against the gguf package's
    quantize (ggml's reference quantizers' NumPy twin), byte for byte:
    random rows, an all-zero block, ties at .5, a block whose largest
    magnitude is negative, sizes across a cache block.
Usage: test_ops_numpy.py OPS_TOOL
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from archgen import llama3_rope_freqs  # noqa: E402

failures = []


def tool(*args):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"ops_tool {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
    return r.stdout


# ---- RoPE frequencies --------------------------------------------------------

def ggml_freqs(base, n_rot, scaling, factor, orig, ext, beta_fast, beta_slow, attn, ff):
    """llama.cpp: freq_scale = 1/factor (linear, yarn), ext_factor for yarn;
    theta_extrap = p base^(-2i/n) / ff[i]; theta_interp = freq_scale theta_extrap;
    yarn: ramp over corr dims, mscale *= 1 + 0.1 ln(1/freq_scale), with
    llama_context's yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor)."""
    freq_scale = 1.0 / factor if scaling in ("linear", "yarn") else 1.0
    ext_factor = ext if scaling == "yarn" else 0.0

    def corr_dim(n_rot_turns):
        return n_rot * math.log(orig / (n_rot_turns * 2 * math.pi)) / (2 * math.log(base))
    lo = max(0.0, math.floor(corr_dim(beta_fast)))
    hi = min(n_rot - 1.0, math.ceil(corr_dim(beta_slow)))
    mscale = attn
    if ext_factor != 0:
        f = 1.0 / freq_scale
        get_mscale = 1.0 if f <= 1 else 0.1 * math.log(f) + 1.0
        mscale = get_mscale * (1.0 / (1.0 + 0.1 * math.log(f))) * attn
    inv = []
    for i0 in range(0, n_rot, 2):
        extrap = base ** (-i0 / n_rot) / (ff[i0 // 2] if ff is not None else 1.0)
        interp = freq_scale * extrap
        theta = interp
        if ext_factor != 0:
            y = (i0 // 2 - lo) / max(0.001, hi - lo)
            ramp = (1 - min(1, max(0, y))) * ext_factor
            theta = interp * (1 - ramp) + extrap * ramp
        inv.append(theta)
    if ext_factor != 0:
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    return np.array(inv), mscale


def hf_freqs(base, n_rot, scaling, factor, orig, beta_fast, beta_slow, ff):
    """transformers' modeling_rope_utils: _compute_default/_linear/_yarn
    (attention_factor from get_mscale), "llama3" as the converter's
    rope_freqs divisors."""
    dim = n_rot
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if ff is not None:
        inv = inv / ff
    if scaling == "linear":
        return inv / factor, 1.0
    if scaling != "yarn":
        return inv, 1.0

    def fcd(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(math.floor(fcd(beta_fast)), 0), min(math.ceil(fcd(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrap_factor = 1 - ramp
    inv = (inv / factor) * (1 - extrap_factor) + inv * extrap_factor
    return inv, (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def check_freqs(tmp, name, base, n_rot, scaling, factor=1.0, orig=4096, ext=1.0, beta_fast=32.0,
                beta_slow=1.0, attn=1.0, ff=None, hf=True):
    args = [base, n_rot, scaling, factor, orig, ext, beta_fast, beta_slow, attn]
    if ff is not None:
        path = os.path.join(tmp, "ff.f32")
        ff.astype(np.float32).tofile(path)
        args.append(path)
        ff = ff.astype(np.float32).astype(np.float64)
    out = np.array([float(v) for v in tool("freqs", *args).split()])
    inv, mscale = out[:-1], out[-1]
    want, want_m = ggml_freqs(base, n_rot, scaling, factor, orig, ext, beta_fast, beta_slow,
                              attn, ff)
    refs = [("llama.cpp", want, want_m)]
    if hf:
        refs.append(("transformers", *hf_freqs(base, n_rot, scaling, factor, orig, beta_fast,
                                              beta_slow, ff)))
    for who, w, m in refs:
        err = np.max(np.abs(inv - w) / np.abs(w))
        if err > 1e-12 or abs(mscale - m) > 1e-12 * m:
            failures.append(f"freqs {name} vs {who}: inv_freq rel err {err:.2e}, mscale "
                            f"{mscale!r} vs {m!r}")
    return inv


def test_freqs(tmp):
    check_freqs(tmp, "default", 10000.0, 64, "none")
    check_freqs(tmp, "partial rotary n_rot 24", 10000.0, 24, "none")
    check_freqs(tmp, "linear 8 (Gemma 3 4B+ global)", 1e6, 256, "linear", factor=8.0)
    check_freqs(tmp, "none ignores the factor", 1e6, 128, "none", factor=8.0)
    for base, n_rot, factor, orig in [(10000.0, 128, 4.0, 32768), (1e6, 128, 4.0, 32768),
                                      (500000.0, 64, 2.0, 8192), (10000.0, 32, 16.0, 2048),
                                      (10000.0, 64, 0.5, 4096)]:
        check_freqs(tmp, f"yarn base {base} n_rot {n_rot} factor {factor} orig {orig}", base,
                    n_rot, "yarn", factor=factor, orig=orig)
    check_freqs(tmp, "yarn betas 16/2", 10000.0, 64, "yarn", factor=3.0, orig=4096,
                beta_fast=16.0, beta_slow=2.0)
    check_freqs(tmp, "yarn ramp over two pairs", 10000.0, 64, "yarn", factor=4.0,
                orig=60, beta_fast=1.5, beta_slow=1.0)
    # llama.cpp-only inputs: an ext_factor other than 1, rope.scaling.attn_factor, and
    # an original context under 2 pi beta_slow (the ramp's ends cross; llama.cpp
    # then extrapolates pair 0 alone, transformers every pair)
    check_freqs(tmp, "yarn ends crossed", 10000.0, 64, "yarn", factor=4.0, orig=4, hf=False)
    check_freqs(tmp, "yarn ext_factor 0.5", 10000.0, 64, "yarn", factor=4.0, ext=0.5, hf=False)
    check_freqs(tmp, "yarn ext_factor 0", 10000.0, 64, "yarn", factor=4.0, ext=0.0, hf=False)
    check_freqs(tmp, "linear with attn_factor 0.8", 10000.0, 64, "linear", factor=2.0,
                attn=0.8, hf=False)
    for factor, base, n_rot in [(8.0, 500000.0, 128), (32.0, 500000.0, 64)]:
        ff = llama3_rope_freqs(base, n_rot, factor)
        inv = check_freqs(tmp, f"llama3 rope_freqs factor {factor}", base, n_rot, "none", ff=ff)
        # the converter's factors are transformers' _compute_llama3_parameters
        freq = 1.0 / base ** (np.arange(0, n_rot, 2) / n_rot)
        wavelen = 2 * math.pi / freq
        low_wl, high_wl = 8192 / 1.0, 8192 / 4.0
        hf = np.where(wavelen > low_wl, freq / factor, freq)
        smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
        smoothed = (1 - smooth) * hf / factor + smooth * hf
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        hf = np.where(medium, smoothed, hf)
        err = np.max(np.abs(inv - hf) / hf)
        if err > 2e-7:  # the factors went through float32
            failures.append(f"llama3 factor {factor} vs _compute_llama3_parameters: {err:.2e}")
    check_freqs(tmp, "rope_freqs with yarn", 10000.0, 64, "yarn", factor=4.0,
                ff=np.linspace(1.0, 3.0, 32), hf=False)


# ---- element-wise ----------------------------------------------------------------

def run_f32(tmp, op, arrays, *params):
    paths = []
    for i, a in enumerate(arrays):
        p = os.path.join(tmp, f"in{i}.f32")
        np.asarray(a, dtype=np.float32).tofile(p)
        paths.append(p)
    out = os.path.join(tmp, "out.f32")
    tool(op, *params, *paths, out)
    return np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(np.shape(arrays[0]))


def close(name, got, want, tol=2e-6):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    if err > tol:
        failures.append(f"{name}: relative error {err:.2e} > {tol:.0e}")


def test_elementwise(tmp):
    rng = np.random.default_rng(5)
    # Q/K norms: rows are heads (n_tokens * n_heads of them), normalized over head_dim
    for hd in (64, 128, 256):
        x = rng.standard_normal((7 * 4, hd)).astype(np.float32) * 3
        w = (1 + 0.3 * rng.standard_normal(hd)).astype(np.float32)
        xd = x.astype(np.float64)
        want = xd / np.sqrt(np.mean(xd * xd, axis=-1, keepdims=True) + 1e-6) * w
        close(f"per-head RMSNorm, head_dim {hd}", run_f32(tmp, "rmsnorm", [x, w],
                                                          7 * 4, hd, 1e-6), want)
    # Gemma3RMSNorm(x) = x / rms(x) * (1 + w_hf); the GGUF stores w_hf + 1
    x = rng.standard_normal((3, 640)).astype(np.float32)
    w_hf = (0.5 * rng.standard_normal(640)).astype(np.float32)
    stored = (w_hf.astype(np.float64) + 1.0).astype(np.float32)
    xd = x.astype(np.float64)
    want = xd / np.sqrt(np.mean(xd * xd, axis=-1, keepdims=True) + 1e-6) * \
        (1.0 + w_hf.astype(np.float64))
    close("Gemma's (1 + w) through the stored weight", run_f32(tmp, "rmsnorm", [x, stored], 3,
                                                               640, 1e-6), want, tol=4e-6)
    g = rng.standard_normal(4096).astype(np.float32) * 4
    u = rng.standard_normal(4096).astype(np.float32)
    gd, ud = g.astype(np.float64), u.astype(np.float64)
    gelu = 0.5 * gd * (1 + np.tanh(math.sqrt(2 / math.pi) * (gd + 0.044715 * gd ** 3)))
    close("GeGLU (gelu_pytorch_tanh)", run_f32(tmp, "geglu", [g, u], 4096), gelu * ud)
    close("SwiGLU", run_f32(tmp, "swiglu", [g, u], 4096), gd / (1 + np.exp(-gd)) * ud)
    x = rng.standard_normal(1000).astype(np.float32) * 100
    close("soft-capping at 30", run_f32(tmp, "softcap", [x], 1000, 30.0),
          30.0 * np.tanh(x.astype(np.float64) / 30.0))


def test_hadamard(tmp):
    rng = np.random.default_rng(11)
    for nrot in (64, 128, 256):
        h = np.array([[1.0]])
        while h.shape[0] < nrot:
            h = np.block([[h, h], [h, -h]])
        h /= math.sqrt(nrot)
        x = (rng.standard_normal(3 * nrot) * 4).astype(np.float32)
        want = (h @ x.astype(np.float64).reshape(3, nrot).T).T.reshape(-1)
        got = run_f32(tmp, "hadamard", [x], 3 * nrot, nrot)
        close(f"hadamard {nrot}", got, want, 1e-6)
        back = run_f32(tmp, "hadamard", [got.astype(np.float32)], 3 * nrot, nrot)
        close(f"hadamard {nrot} twice", back, x.astype(np.float64), 1e-6)


def zero_scales_positive(data, block):
    """The blocks' f16 scales of -0 written as +0."""
    b = bytearray(data)
    for i in range(0, len(b), block):
        if b[i] == 0 and b[i + 1] == 0x80:
            b[i + 1] = 0
    return bytes(b)


def test_kv_rows(tmp):
    """kv_write_rows's bytes against gguf.quants.quantize, byte for byte."""
    import gguf
    from gguf.quants import quantize
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(7)
    rows, hd = 70, 64  # across a 64-position block, two quant blocks a row
    x = (rng.standard_normal((rows, hd)) * 3).astype(np.float32)
    x[1, :32] = 0                                             # an all-zero block
    x[2, :32] = np.arange(32, dtype=np.float32) * 0.5 - 8     # ties at .5 (q8_0: 127 / 8)
    x[3, 32:] = rng.uniform(-1, 1, 32).astype(np.float32)
    x[3, 40] = -5                                             # the largest is negative
    path = os.path.join(tmp, "kv.f32")
    x.tofile(path)
    want = {"f32": lambda a: a.astype(np.float32).tobytes(),
            "f16": lambda a: a.astype(np.float16).tobytes(),
            "q8_0": lambda a: quantize(a, Q.Q8_0).tobytes(),
            "q4_0": lambda a: quantize(a, Q.Q4_0).tobytes()}
    for name, ref in want.items():
        out = os.path.join(tmp, "kv.bin")
        tool("kvwrite", name, rows, hd, path, out)
        got = open(out, "rb").read()
        expect = ref(x) + ref(-x)
        if name == "q4_0":  # a block of -0s: ggml's max stays +0, so d = +0 / -8 = -0;
            # the gguf package takes the -0 itself, d = +0. The same values (0).
            got, expect = (zero_scales_positive(b, 18) for b in (got, expect))
        if got != expect:
            failures.append("kv rows %s: %d of %d bytes differ from the gguf package's" % (
                name, sum(a != b for a, b in zip(got, expect)) + abs(len(got) - len(expect)),
                len(expect)))


def main():
    global TOOL
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_ops_numpy.py OPS_TOOL")
    TOOL = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        test_freqs(tmp)
        test_elementwise(tmp)
        test_kv_rows(tmp)
        test_hadamard(tmp)
    for f in failures:
        print("FAIL", f)
    print(f"test_ops_numpy: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
