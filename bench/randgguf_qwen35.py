"""bench/randgguf_qwen35.py: the qwen35 (Qwen3.5 dense) and qwen35moe writer of
bench/random_gguf.py: the shapes, the tensors as llama.cpp's converter names
and lays them out (llama.cpp's src/models/qwen35.cpp loads them), the keys,
and the values of the DeltaNet parameters that random blocks would make
meaningless (A stored as -exp(A_log), the dt bias).

Shapes: tiny (4 layers: 3 gated DeltaNet then 1 gated attention; 2 key and 4
value heads of 64, so that value heads share key heads in the converter's
tiled order; an output head of its own, so that a step's top token is not
its input's: a random model with tied embeddings repeats its input), emu (2
layers: one of each, for the emulated CUDA backend) and Qwen3.5-0.8B (Qwen3_5TextConfig of Qwen/Qwen3.5-0.8B: 24
layers of 1024, full_attention_interval 4, attention 8 heads and 2 KV heads
of 256, DeltaNet 16 key and 16 value heads of 128, FFN 3584, vocabulary
248320, tied embeddings, partial RoPE 0.25 in sections [11, 11, 10]).
Types F16, Q8_0, Q4_K_M (llama-quant.cpp's: Q4_K, attn_v / ffn_down Q6_K on
use_more_bits layers; the head (token_embd, tied) Q6_K; the convolution,
A, dt and norms F32 as llama.cpp leaves every 1-D tensor and ssm_conv1d;
qwen35moe's experts as the FFN: gate/up Q4_K, down Q6_K on use_more_bits
layers, the router and the shared expert's gate F32).
"""
import numpy as np

SHAPES = {
    "tiny": dict(layers=4, embd=256, heads=4, kv=2, hd=64, ff=512, dn_k=2, dn_v=4, dn_hd=64,
                 conv=4, every=4, vocab=1024, ctx=4096, rope=10000000.0, sections=[3, 3, 2, 0],
                 tied=False),
    # emu: the emulated CUDA tests' (tests/tp/test_tp_gpu.py): a DeltaNet layer and a gated
    # attention layer, the tiny's DeltaNet heads (an emulated DeltaNet layer costs ~2 s)
    "emu": dict(layers=2, embd=128, heads=2, kv=1, hd=64, ff=128, dn_k=2, dn_v=4, dn_hd=64,
                conv=4, every=2, vocab=256, ctx=4096, rope=10000000.0, sections=[3, 3, 2, 0],
                tied=False),
    "Qwen3.5-0.8B": dict(layers=24, embd=1024, heads=8, kv=2, hd=256, ff=3584, dn_k=16,
                         dn_v=16, dn_hd=128, conv=4, every=4, vocab=248320, ctx=262144,
                         rope=10000000.0, sections=[11, 11, 10, 0], tied=True),
}
# qwen35moe: the same layers with a mixture of experts in every FFN (n_exp
# experts of ff_exp, used routed, one shared expert of ff_shexp beside them
# with its own sigmoid gate). tiny: 16 experts of 256, 2 used, a shared
# expert of 512 (a width of its own, so that a mix-up of the two shows);
# Qwen3.5-35B-A3B: Qwen3_5MoeTextConfig's defaults (40 layers of 2048,
# attention 16 heads and 2 KV heads of 256, DeltaNet 16 key and 32 value
# heads of 128, 256 experts of 512, 8 used, a shared expert of 512, vocabulary
# 248320, an output head of its own). No feed_forward_length key: the
# converter writes none (the config has no intermediate_size).
MOE_SHAPES = {
    "tiny": dict(SHAPES["tiny"], ff=None, n_exp=16, used=2, ff_exp=256, ff_shexp=512),
    # emu: the emulated CUDA tests' (tests/tp/test_tp_gpu.py): the qwen35 emu's layers, 4
    # experts of 64, 2 used, a shared expert of 128
    "emu": dict(SHAPES["emu"], ff=None, n_exp=4, used=2, ff_exp=64, ff_shexp=128),
    "Qwen3.5-35B-A3B": dict(layers=40, embd=2048, heads=16, kv=2, hd=256, ff=None, dn_k=16,
                            dn_v=32, dn_hd=128, conv=4, every=4, vocab=248320, ctx=262144,
                            rope=10000000.0, sections=[11, 11, 10, 0], tied=False, n_exp=256,
                            used=8, ff_exp=512, ff_shexp=512),
}
TYPES = ("F16", "Q8_0", "Q4_K_M")


def arch_of(sh):
    return "qwen35moe" if "n_exp" in sh else "qwen35"


def recurrent(sh, i):
    return (i + 1) % sh["every"] != 0


def tensors(sh, qtype, vocab, use_more_bits):
    """(name, type, dims) in the order llama.cpp's converter writes them."""
    n, e, hd = sh["layers"], sh["embd"], sh["hd"]
    q, kvd = sh["heads"] * hd, sh["kv"] * hd
    kd, vd = sh["dn_k"] * sh["dn_hd"], sh["dn_v"] * sh["dn_hd"]
    km = qtype == "Q4_K_M"
    base = "Q4_K" if km else qtype
    head = "Q6_K" if km else base
    out = [("token_embd.weight", head if sh["tied"] else base, [e, vocab])]
    for i in range(n):
        more = "Q6_K" if km and use_more_bits(i, n) else base
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", "F32", [e]))
        if recurrent(sh, i):
            out += [
                (p + "attn_qkv.weight", base, [e, 2 * kd + vd]),
                (p + "attn_gate.weight", base, [e, vd]),
                (p + "ssm_conv1d.weight", "F32", [sh["conv"], 2 * kd + vd]),
                (p + "ssm_dt.bias", "F32", [sh["dn_v"]]),
                (p + "ssm_a", "F32", [sh["dn_v"]]),
                (p + "ssm_beta.weight", base, [e, sh["dn_v"]]),
                (p + "ssm_alpha.weight", base, [e, sh["dn_v"]]),
                (p + "ssm_norm.weight", "F32", [sh["dn_hd"]]),
                (p + "ssm_out.weight", base, [vd, e]),
            ]
        else:
            out += [
                (p + "attn_q.weight", base, [e, 2 * q]),
                (p + "attn_k.weight", base, [e, kvd]),
                (p + "attn_v.weight", more, [e, kvd]),
                (p + "attn_output.weight", base, [q, e]),
                (p + "attn_q_norm.weight", "F32", [hd]),
                (p + "attn_k_norm.weight", "F32", [hd]),
            ]
        out.append((p + "post_attention_norm.weight", "F32", [e]))
        if "n_exp" in sh:  # the router and the shared expert's gate stay F32
            ne, fe, fs = sh["n_exp"], sh["ff_exp"], sh["ff_shexp"]
            out += [
                (p + "ffn_gate_inp.weight", "F32", [e, ne]),
                (p + "ffn_gate_exps.weight", base, [e, fe, ne]),
                (p + "ffn_up_exps.weight", base, [e, fe, ne]),
                (p + "ffn_down_exps.weight", more, [fe, e, ne]),
                (p + "ffn_gate_inp_shexp.weight", "F32", [e, 1]),
                (p + "ffn_gate_shexp.weight", base, [e, fs]),
                (p + "ffn_up_shexp.weight", base, [e, fs]),
                (p + "ffn_down_shexp.weight", more, [fs, e]),
            ]
        else:
            out += [
                (p + "ffn_gate.weight", base, [e, sh["ff"]]),
                (p + "ffn_up.weight", base, [e, sh["ff"]]),
                (p + "ffn_down.weight", more, [sh["ff"], e]),
            ]
    out.append(("output_norm.weight", "F32", [e]))
    if not sh["tied"]:
        out.append(("output.weight", head, [e, vocab]))
    return out


def keys(kv, sh, shape_name, qtype, vocab, file_type):
    a = arch_of(sh)
    moe = []
    if "n_exp" in sh:
        moe = [kv(f"{a}.expert_count", 4, sh["n_exp"]),
               kv(f"{a}.expert_used_count", 4, sh["used"]),
               kv(f"{a}.expert_feed_forward_length", 4, sh["ff_exp"]),
               kv(f"{a}.expert_shared_feed_forward_length", 4, sh["ff_shexp"])]
    return [kv("general.architecture", 8, a),
            kv("general.name", 8, f"random {a} {shape_name} {qtype}"),
            kv("general.file_type", 4, file_type),
            kv(f"{a}.block_count", 4, sh["layers"]), kv(f"{a}.context_length", 4, sh["ctx"]),
            kv(f"{a}.embedding_length", 4, sh["embd"])] + \
        ([kv(f"{a}.feed_forward_length", 4, sh["ff"])] if sh["ff"] else []) + moe + [
            kv(f"{a}.attention.head_count", 4, sh["heads"]),
            kv(f"{a}.attention.head_count_kv", 4, sh["kv"]),
            kv(f"{a}.attention.key_length", 4, sh["hd"]),
            kv(f"{a}.attention.value_length", 4, sh["hd"]),
            kv(f"{a}.rope.freq_base", 6, sh["rope"]),
            kv(f"{a}.rope.dimension_count", 4, sh["hd"] // 4),
            kv(f"{a}.rope.dimension_sections", 9, (5, sh["sections"])),
            kv(f"{a}.attention.layer_norm_rms_epsilon", 6, 1e-6),
            kv(f"{a}.ssm.conv_kernel", 4, sh["conv"]),
            kv(f"{a}.ssm.state_size", 4, sh["dn_hd"]),
            kv(f"{a}.ssm.group_count", 4, sh["dn_k"]),
            kv(f"{a}.ssm.time_step_rank", 4, sh["dn_v"]),
            kv(f"{a}.ssm.inner_size", 4, sh["dn_v"] * sh["dn_hd"]),
            kv(f"{a}.full_attention_interval", 4, sh["every"]),
            kv(f"{a}.vocab_size", 4, vocab)]


def special(name, dims, rng):
    """The bytes of a tensor random blocks would not do, or None: A =
    -exp(A_log) with A_log = log(U(1, 16)) (Qwen3.5's init), the dt bias
    softplus^-1 of U(0.001, 0.1): decays of a few hundred tokens' reach."""
    n = int(np.prod(dims))
    if name.endswith(".ssm_a"):
        return (-rng.uniform(1, 16, n)).astype(np.float32).tobytes()
    if name.endswith(".ssm_dt.bias"):
        dt = rng.uniform(0.001, 0.1, n)
        return np.log(np.expm1(dt)).astype(np.float32).tobytes()
    return None
