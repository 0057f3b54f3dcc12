"""bench/randgguf_gptoss.py: random_gguf.py's writer for `--arch gpt-oss`
(llama.cpp's openai-moe, GptOssForCausalLM): the tensors and keys llama.cpp's
converter (conversion/gpt_oss.py) writes, random weights.

  shapes  tiny         2 layers, embd 256, 4 heads, 2 KV heads of 64, 8
                       experts of 256 with 2 used, window 32 on layer 0
          gpt-oss-20b  24 layers, embd 2880, 64 heads, 8 KV heads of 64, 32
                       experts of 2880 with 4 used, window 128 on even layers
          both: vocabulary 201088 (tiny 1024), RoPE base 150000, YaRN factor
          32 over 4096 original positions, untied output head
  types   F16 (matrices F16), Q8_0 (matrices Q8_0), MXFP4 (llama-quantize's
          MXFP4_MOE: experts MXFP4, the other matrices Q8_0); norms, biases,
          sinks and the router F32, as llama.cpp leaves them

Gains keep a random model from being flat: the output head as for qwen3moe
(random_gguf.py OUT_GAIN), the router twice qwen3moe's ROUTER_GAIN (at 1x the
tiny Q8_0 file's 2-of-8 routing flipped under llama.cpp's int8 activations
often enough to give KL 0.02-0.026 against it, F16 0.0006), the experts' gate
and up large enough that the clamp at 7 of the SwiGLU bites, sinks of the
scores' size so they take a real share of each softmax. Imported by
random_gguf.py (its helpers passed in, so this module needs none of its
own). Covered by tests/cpu/test_gptoss.py."""
import numpy as np

SHAPES = {
    "tiny": dict(layers=2, embd=256, heads=4, kv=2, hd=64, n_exp=8, used=2, ff_exp=256,
                 vocab=1024, ctx=8192, window=32),
    "gpt-oss-20b": dict(layers=24, embd=2880, heads=64, kv=8, hd=64, n_exp=32, used=4,
                        ff_exp=2880, vocab=201088, ctx=131072, window=128),
}
TYPES = ("F16", "Q8_0", "MXFP4", "MXFP4_F16")
FILE_TYPES = {"F16": 1, "Q8_0": 7, "MXFP4": 38, "MXFP4_F16": 38}  # llama_ftype (38: MOSTLY_MXFP4_MOE)
ROPE_BASE, YARN_FACTOR, YARN_ORIG_CTX = 150000.0, 32.0, 4096
EXPERT_GAIN = 6.0  # gate and up: a few values past the clamp of 7
SINK_SPREAD = 2.0  # sinks uniform in [-2, 2]: the scores' size

# MXFP4: ggml's block_mxfp4, one E8M0 scale byte and 16 bytes of nibbles.
MXFP4_BLOCK = (32, 17)


def tensors(sh, qtype, vocab):
    """(name, type, dims) in the order llama.cpp's converter writes them."""
    n, e, hd, ne, fe = sh["layers"], sh["embd"], sh["hd"], sh["n_exp"], sh["ff_exp"]
    q, kvd = sh["heads"] * hd, sh["kv"] * hd
    mat = "F16" if qtype in ("F16", "MXFP4_F16") else "Q8_0"
    exp = "MXFP4" if qtype.startswith("MXFP4") else mat
    out = [("token_embd.weight", mat, [e, vocab])]
    for i in range(n):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", "F32", [e]),
            (p + "attn_q.weight", mat, [e, q]), (p + "attn_q.bias", "F32", [q]),
            (p + "attn_k.weight", mat, [e, kvd]), (p + "attn_k.bias", "F32", [kvd]),
            (p + "attn_v.weight", mat, [e, kvd]), (p + "attn_v.bias", "F32", [kvd]),
            (p + "attn_output.weight", mat, [q, e]), (p + "attn_output.bias", "F32", [e]),
            (p + "attn_sinks.weight", "F32", [sh["heads"]]),
            (p + "post_attention_norm.weight", "F32", [e]),
            (p + "ffn_gate_inp.weight", "F32", [e, ne]), (p + "ffn_gate_inp.bias", "F32", [ne]),
            (p + "ffn_gate_exps.weight", exp, [e, fe, ne]),
            (p + "ffn_gate_exps.bias", "F32", [fe, ne]),
            (p + "ffn_up_exps.weight", exp, [e, fe, ne]),
            (p + "ffn_up_exps.bias", "F32", [fe, ne]),
            (p + "ffn_down_exps.weight", exp, [fe, e, ne]),
            (p + "ffn_down_exps.bias", "F32", [e, ne]),
        ]
    out += [("output_norm.weight", "F32", [e]), ("output.weight", mat, [e, vocab])]
    return out


def keys(kv, sh, shape_name, qtype, vocab):
    a = "gpt-oss"
    return [kv("general.architecture", 8, a),
            kv("general.name", 8, f"random {a} {shape_name} {qtype}"),
            kv("general.file_type", 4, FILE_TYPES[qtype]),
            kv(f"{a}.block_count", 4, sh["layers"]), kv(f"{a}.context_length", 4, sh["ctx"]),
            kv(f"{a}.embedding_length", 4, sh["embd"]),
            kv(f"{a}.feed_forward_length", 4, sh["ff_exp"]),
            kv(f"{a}.attention.head_count", 4, sh["heads"]),
            kv(f"{a}.attention.head_count_kv", 4, sh["kv"]),
            kv(f"{a}.attention.key_length", 4, sh["hd"]),
            kv(f"{a}.attention.value_length", 4, sh["hd"]),
            kv(f"{a}.rope.freq_base", 6, ROPE_BASE),
            kv(f"{a}.rope.scaling.type", 8, "yarn"),
            kv(f"{a}.rope.scaling.factor", 6, YARN_FACTOR),
            kv(f"{a}.rope.scaling.original_context_length", 4, YARN_ORIG_CTX),
            kv(f"{a}.attention.layer_norm_rms_epsilon", 6, 1e-5),
            kv(f"{a}.attention.sliding_window", 4, sh["window"]),
            kv(f"{a}.expert_count", 4, sh["n_exp"]),
            kv(f"{a}.expert_used_count", 4, sh["used"]),
            kv(f"{a}.expert_feed_forward_length", 4, sh["ff_exp"]),
            kv(f"{a}.vocab_size", 4, vocab)]


def gains(sh, out_gain, router_gain):
    g = {"output.weight": out_gain}
    for i in range(sh["layers"]):
        g[f"blk.{i}.ffn_gate_inp.weight"] = 2 * router_gain
        g[f"blk.{i}.ffn_gate_exps.weight"] = EXPERT_GAIN
        g[f"blk.{i}.ffn_up_exps.weight"] = EXPERT_GAIN
    return g


def mxfp4_data(dims, rng, gain):
    """Random MXFP4 blocks with |w| <= gain / sqrt(cols): each block's scale
    2^(e - 128) times the doubled E2M1 levels (up to 12)."""
    n = int(np.prod(dims))
    blk, bb = MXFP4_BLOCK
    a = gain / np.sqrt(dims[0])
    raw = np.frombuffer(rng.bytes(n // blk * bb), dtype=np.uint8).reshape(-1, bb).copy()
    e = 128 + int(np.floor(np.log2(a / 12)))
    raw[:, 0] = e - rng.integers(0, 2, raw.shape[0])  # two scales: blocks differ
    return raw.tobytes()


def bias_data(name, dims, rng):
    """F32 vectors: sinks of the scores' size, small biases elsewhere."""
    n = int(np.prod(dims))
    spread = SINK_SPREAD if "attn_sinks" in name else 0.1
    return (spread * rng.uniform(-1, 1, n)).astype(np.float32).tobytes()


def is_bias(name):
    return name.endswith(".bias") or "attn_sinks" in name
