#!/usr/bin/env python3
"""bench/random_gguf.py: writes a GGUF file of random weights for a known
shape of an architecture ignite runs, so that ignite and llama.cpp can be
timed and compared on the same file on a machine that can download nothing
(the GPU check's quant step, scripts/gpu/quant.sh; bench/moe_vs_llamacpp.sh).
numpy only (no gguf package there).

  --arch llama     shapes Llama-3-8B, Llama-tiny, Qwen2.5-1.5B; F16, BF16, Q4_0, Q4_K, Q6_K or
                   Q4_K_M (llama.cpp's recipe: Q4_K, with attn_v and ffn_down
                   in Q6_K on the layers its use_more_bits picks and the
                   output head in Q6_K)
  --arch qwen3moe  shapes tiny (3 layers, 8 experts of 256, 2 used) and
                   Qwen3-30B-A3B (48 layers, 128 experts of 768, 8 used);
                   F16, Q8_0 or Q4_K_M (llama-quant.cpp's recipe for experts:
                   gate/up in Q4_K, ffn_down_exps and attn_v in Q6_K where
                   use_more_bits; with 8 experts attn_k and attn_v in Q8_0
                   and attn_output in Q5_K); the router (ffn_gate_inp) F32,
                   as llama.cpp never quantizes it.
  --arch qwen35    shapes tiny, emu and Qwen3.5-0.8B (bench/randgguf_qwen35.py);
                   F16, Q8_0 or Q4_K_M
  --arch qwen35moe shapes tiny (16 experts, 2 used, a shared expert), emu and
                   Qwen3.5-35B-A3B (bench/randgguf_qwen35.py); F16, Q8_0, Q4_K_M or
                   F32 (llama.cpp's F32 products round no activation to f16)

  --arch gemma4    shapes tiny and E2B (bench/randgguf_gemma4.py); F16, Q8_0 or
                   Q4_K_M
  --fused-experts  gemma4 moe shapes: each layer's gate and up experts as one
                   ffn_gate_up_exps tensor, as llama.cpp's converter writes them

  --arch gpt-oss   shapes tiny and gpt-oss-20b; F16, Q8_0, MXFP4 (experts
                   MXFP4, the rest Q8_0) or MXFP4_F16 (the rest F16):
                   bench/randgguf_gptoss.py
  --layers N       the first N layers of the shape only
  --vocab-from F   the tokenizer.* keys (vocabulary, merges, chat template)
                   copied from the GGUF F; the vocabulary size follows it.

Weights are random blocks (quant bytes random, scales set so that
|w| <~ 1/sqrt(cols), as models/synthetic.c makes them); f16 and f32 tensors
repeat a random block of 2^20 values (writing 16 GB of fresh random numbers
would take minutes and measure nothing more). There is no tokenizer:
tokenizer.ggml.model is "no_vocab" and llama.vocab_size the row count, which
llama.cpp accepts for benchmarks; ignite's bench needs no tokenizer either.
tests/models/test_random_gguf.py reads a small one back with the gguf package
and loads it in ignite.

Usage: random_gguf.py OUT.gguf [--arch llama|qwen3moe|qwen35|qwen35moe|gemma4|gpt-oss]
                      [--shape SHAPE] [--type TYPE]
                      [--layers N] [--vocab-from FILE] [--seed N] [--fused-experts]
"""
import argparse
import struct
import sys

import numpy as np

import randgguf_qwen35 as qwen35

import randgguf_gemma4

import randgguf_gptoss
SHAPES = {  # layers, embd, heads, kv heads, head dim, ff, vocab, ctx, rope base
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, 8192, 500000.0),
    "Llama-tiny": (2, 256, 4, 2, 64, 768, 1000, 1024, 10000.0),
    # Qwen2.5-Coder-1.5B's sizes as a llama (no Q/K/V biases; an untied head):
    # the GPU check's tp step (scripts/gpu/tp.sh)
    "Qwen2.5-1.5B": (28, 1536, 12, 2, 128, 8960, 151936, 32768, 1000000.0),
}
# Qwen3-MoE (Qwen3MoeConfig): layers, embd, heads, kv heads, head dim, ff
# (the dense width the config states), experts, used, an expert's ff, vocab,
# ctx, rope base
MOE_SHAPES = {
    "tiny": dict(layers=3, embd=256, heads=4, kv=2, hd=64, ff=768, n_exp=8, used=2, ff_exp=256,
                 vocab=1024, ctx=4096, rope=1000000.0),
    "Qwen3-30B-A3B": dict(layers=48, embd=2048, heads=32, kv=4, hd=128, ff=6144, n_exp=128,
                          used=8, ff_exp=768, vocab=151936, ctx=40960, rope=1000000.0),
}
ARCH_SHAPES = {"llama": SHAPES, "qwen3moe": MOE_SHAPES, "qwen35": qwen35.SHAPES,
               "gemma4": randgguf_gemma4.SHAPES, "gpt-oss": randgguf_gptoss.SHAPES,
               "qwen35moe": qwen35.MOE_SHAPES}
ARCH_TYPES = {"llama": ("F16", "BF16", "Q4_0", "Q4_K", "Q6_K", "Q4_K_M"),
              "qwen3moe": ("F16", "Q8_0", "Q4_K_M"), "qwen35": qwen35.TYPES,
              "gemma4": randgguf_gemma4.TYPES, "gpt-oss": randgguf_gptoss.TYPES,
              "qwen35moe": qwen35.TYPES + ("F32",)}
# ggml type ids, elements and bytes per block
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2), "Q4_0": (2, 32, 18),
         "Q8_0": (8, 32, 34),
         "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
         "MXFP4": (39,) + randgguf_gptoss.MXFP4_BLOCK}
FILE_TYPES = {"F32": 0, "F16": 1, "BF16": 32, "Q4_0": 2, "Q8_0": 7, "Q4_K": 15, "Q6_K": 18,
              "Q4_K_M": 15}  # llama_ftype
# The output head's weights times this in a qwen3moe file: logits with a
# spread of a few units, so that a step's top token stands out (random
# weights of the embedding's scale give logits within about +-2 of each
# other over the vocabulary: nearly flat).
OUT_GAIN = 6.0
# The router's the same: with the embedding's scale its logits spread by
# about 0.6 over the experts, so that the k-th and the (k+1)-th often lie
# within a rounding of each other and engines pick experts by their noise;
# a trained router (Qwen3-30B-A3B's top 8 of 128 take about half the
# weight) is more decisive.
ROUTER_GAIN = 4.0
ALIGN = 32


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == 4:  # uint32
        out += struct.pack("<I", value)
    elif vtype == 6:  # float32
        out += struct.pack("<f", value)
    elif vtype == 8:  # string
        out += gguf_str(value)
    elif vtype == 9 and value[0] == 5:  # array of int32: (5, values)
        out += struct.pack("<IQ", 5, len(value[1])) + struct.pack(f"<{len(value[1])}i", *value[1])
    else:
        raise ValueError(vtype)
    return out


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(shape, qtype):
    """(name, type, [ne0, ne1] or [ne0]) in the order llama.cpp writes them."""
    layers, e, h, kvh, hd, ff, vocab = shape[:7]
    base = "Q4_K" if qtype == "Q4_K_M" else qtype
    heavy = "Q6_K" if qtype == "Q4_K_M" else qtype
    out = [("token_embd.weight", base, [e, vocab])]
    for i in range(layers):
        more = heavy if use_more_bits(i, layers) else base
        out += [
            (f"blk.{i}.attn_norm.weight", "F32", [e]),
            (f"blk.{i}.attn_q.weight", base, [e, h * hd]),
            (f"blk.{i}.attn_k.weight", base, [e, kvh * hd]),
            (f"blk.{i}.attn_v.weight", more, [e, kvh * hd]),
            (f"blk.{i}.attn_output.weight", base, [h * hd, e]),
            (f"blk.{i}.ffn_norm.weight", "F32", [e]),
            (f"blk.{i}.ffn_gate.weight", base, [e, ff]),
            (f"blk.{i}.ffn_up.weight", base, [e, ff]),
            (f"blk.{i}.ffn_down.weight", more, [ff, e]),
        ]
    out += [("output_norm.weight", "F32", [e]), ("output.weight", heavy, [e, vocab])]
    return out


def moe_tensors(sh, qtype, vocab):
    """A qwen3moe file's tensors, typed as llama-quant.cpp's recipe for qtype
    types them (llama_tensor_get_type_impl: n_expert == 8 bumps attn_k and
    attn_v to Q8_0 and attn_output to Q5_K; ffn_down, experts included, and
    attn_v take Q6_K on use_more_bits layers; the router is never
    quantized; the output head Q6_K)."""
    n, e, hd, ne, fe = sh["layers"], sh["embd"], sh["hd"], sh["n_exp"], sh["ff_exp"]
    q, kvd = sh["heads"] * hd, sh["kv"] * hd
    km = qtype == "Q4_K_M"
    base = "Q4_K" if km else qtype
    eight = ne == 8
    out = [("token_embd.weight", base, [e, vocab])]
    for i in range(n):
        more = "Q6_K" if km and use_more_bits(i, n) else base
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", "F32", [e]),
            (p + "attn_q.weight", base, [e, q]),
            (p + "attn_k.weight", "Q8_0" if km and eight else base, [e, kvd]),
            (p + "attn_v.weight", "Q8_0" if km and eight else more, [e, kvd]),
            (p + "attn_output.weight", "Q5_K" if km and eight else base, [q, e]),
            (p + "attn_q_norm.weight", "F32", [hd]),
            (p + "attn_k_norm.weight", "F32", [hd]),
            (p + "ffn_norm.weight", "F32", [e]),
            (p + "ffn_gate_inp.weight", "F32", [e, ne]),
            (p + "ffn_gate_exps.weight", base, [e, fe, ne]),
            (p + "ffn_up_exps.weight", base, [e, fe, ne]),
            (p + "ffn_down_exps.weight", more, [fe, e, ne]),
        ]
    out += [("output_norm.weight", "F32", [e]),
            ("output.weight", "Q6_K" if km else base, [e, vocab])]
    return out


def nbytes(ttype, dims):
    _, blk, bb = TYPES[ttype]
    n = int(np.prod(dims))
    assert n % blk == 0 and dims[0] % blk == 0, (ttype, dims)
    return n // blk * bb


def f16_bytes(v):
    return np.array([v], dtype=np.float16).tobytes()


def data(ttype, dims, rng, gain=1.0):
    """The tensor's bytes: random blocks with scales for |w| <~ gain/sqrt(cols)."""
    cols = dims[0]
    a = gain / np.sqrt(cols)
    n = int(np.prod(dims))
    if ttype == "BF16":  # f32's top 16 bits, rounded to nearest
        u = (a * rng.uniform(-1, 1, min(n, 1 << 20))).astype(np.float32).view(np.uint32)
        block = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return np.resize(block, n).tobytes()
    if ttype in ("F32", "F16"):
        if len(dims) == 1:  # norms near 1
            return (1.0 + 0.1 * rng.uniform(-1, 1, n)).astype(np.float32).tobytes()
        dt = np.float16 if ttype == "F16" else np.float32
        if ttype == "F32" or n <= 1 << 20:  # small ones fresh (the router)
            return (a * rng.uniform(-1, 1, n)).astype(dt).tobytes()
        block = (a * rng.uniform(-1, 1, 1 << 20)).astype(dt)
        return np.resize(block, n).tobytes()
    if ttype == "MXFP4":
        return randgguf_gptoss.mxfp4_data(dims, rng, gain)
    _, blk, bb = TYPES[ttype]
    raw = np.frombuffer(rng.bytes(n // blk * bb), dtype=np.uint8).reshape(-1, bb).copy()
    if ttype == "Q4_0":  # d (q - 8)
        raw[:, 0:2] = np.frombuffer(f16_bytes(a / 8), dtype=np.uint8)
    elif ttype == "Q8_0":  # d q, q int8
        raw[:, 0:2] = np.frombuffer(f16_bytes(a / 128), dtype=np.uint8)
    elif ttype == "Q4_K":  # d sc q - dmin m, 6-bit sc and m
        raw[:, 0:2] = np.frombuffer(f16_bytes(2 * a / (15 * 63)), dtype=np.uint8)
        raw[:, 2:4] = np.frombuffer(f16_bytes(a / 63), dtype=np.uint8)
    elif ttype == "Q5_K":  # the same with 5-bit q
        raw[:, 0:2] = np.frombuffer(f16_bytes(2 * a / (31 * 63)), dtype=np.uint8)
        raw[:, 2:4] = np.frombuffer(f16_bytes(a / 63), dtype=np.uint8)
    elif ttype == "Q6_K":  # d sc (q - 32), 8-bit sc; d is the last field
        raw[:, 208:210] = np.frombuffer(f16_bytes(a / (32 * 128)), dtype=np.uint8)
    return raw.tobytes()


def _skip_value(buf, at, vtype):
    """The offset after a GGUF value of vtype at buf[at:]."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if vtype in sizes:
        return at + sizes[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, at)
        return at + 8 + n
    if vtype == 9:
        etype, n = struct.unpack_from("<IQ", buf, at)
        at += 12
        if etype in sizes:
            return at + n * sizes[etype]
        for _ in range(n):
            at = _skip_value(buf, at, etype)
        return at
    raise ValueError(f"GGUF value type {vtype}")


def vocab_keys(path):
    """(the raw key/value records of path's tokenizer.* keys, its vocabulary
    size): copied as they are into the file written."""
    with open(path, "rb") as f:
        buf = f.read(64 << 20)  # a vocabulary's keys come long before the tensors
    if buf[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    _, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
    at, out, vocab = 24, [], None
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, at)
        key = buf[at + 8:at + 8 + klen].decode()
        (vtype,) = struct.unpack_from("<I", buf, at + 8 + klen)
        end = _skip_value(buf, at + 12 + klen, vtype)
        if key.startswith("tokenizer."):
            out.append(buf[at:end])
        if key == "tokenizer.ggml.tokens":
            vocab = struct.unpack_from("<Q", buf, at + 16 + klen)[0]
        at = end
    if vocab is None:
        raise SystemExit(f"{path}: no tokenizer.ggml.tokens")
    return out, vocab


def moe_keys(sh, shape_name, qtype, vocab):
    a = "qwen3moe"
    return [kv("general.architecture", 8, a),
            kv("general.name", 8, f"random {a} {shape_name} {qtype}"),
            kv("general.file_type", 4, FILE_TYPES[qtype]),
            kv(f"{a}.block_count", 4, sh["layers"]), kv(f"{a}.context_length", 4, sh["ctx"]),
            kv(f"{a}.embedding_length", 4, sh["embd"]),
            kv(f"{a}.feed_forward_length", 4, sh["ff"]),
            kv(f"{a}.attention.head_count", 4, sh["heads"]),
            kv(f"{a}.attention.head_count_kv", 4, sh["kv"]),
            kv(f"{a}.attention.key_length", 4, sh["hd"]),
            kv(f"{a}.attention.value_length", 4, sh["hd"]),
            kv(f"{a}.rope.freq_base", 6, sh["rope"]),
            kv(f"{a}.attention.layer_norm_rms_epsilon", 6, 1e-6),
            kv(f"{a}.expert_count", 4, sh["n_exp"]),
            kv(f"{a}.expert_used_count", 4, sh["used"]),
            kv(f"{a}.expert_feed_forward_length", 4, sh["ff_exp"]),
            kv(f"{a}.vocab_size", 4, vocab)]


def write(path, shape_name, qtype, seed=1, arch="llama", layers=None, vocab_from=None,
          fused_experts=False):
    """Writes the file; returns the bytes of its tensors."""
    fixed = {}  # tensors of given values (gemma4's rope_freqs)
    if arch == "llama":
        shape = SHAPES[shape_name]
        if layers:
            shape = (min(layers, shape[0]),) + shape[1:]
        n_layer, e, h, kvh, hd, ff, vocab, ctx, rope = shape
        toks, vocab = vocab_keys(vocab_from) if vocab_from else (None, vocab)
        ts = tensors((n_layer, e, h, kvh, hd, ff, vocab), qtype)
        kvs = [kv("general.architecture", 8, "llama"),
               kv("general.name", 8, f"random {shape_name} {qtype}"),
               kv("general.file_type", 4, FILE_TYPES[qtype]),
               kv("llama.block_count", 4, n_layer), kv("llama.context_length", 4, ctx),
               kv("llama.embedding_length", 4, e), kv("llama.feed_forward_length", 4, ff),
               kv("llama.attention.head_count", 4, h),
               kv("llama.attention.head_count_kv", 4, kvh),
               kv("llama.rope.freq_base", 6, rope), kv("llama.rope.dimension_count", 4, hd),
               kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
               kv("llama.vocab_size", 4, vocab)]
        gain = {}
    elif arch in ("qwen35", "qwen35moe"):  # bench/randgguf_qwen35.py
        sh = dict((qwen35.SHAPES if arch == "qwen35" else qwen35.MOE_SHAPES)[shape_name])
        if layers:
            sh["layers"] = min(layers, sh["layers"])
        toks, vocab = vocab_keys(vocab_from) if vocab_from else (None, sh["vocab"])
        ts = qwen35.tensors(sh, qtype, vocab, use_more_bits)
        kvs = qwen35.keys(kv, sh, shape_name, qtype, vocab, FILE_TYPES[qtype])
        gain = {"output.weight" if "output.weight" in dict((t[0], 0) for t in ts)
                else "token_embd.weight": OUT_GAIN}
        gain.update({f"blk.{i}.ffn_gate_inp.weight": ROUTER_GAIN for i in range(sh["layers"])})

    elif arch == "gemma4":  # bench/randgguf_gemma4.py
        vocab = vocab_keys(vocab_from)[1] if vocab_from else None
        toks = vocab_keys(vocab_from)[0] if vocab_from else None
        ts, kvs, gain, fixed = randgguf_gemma4.build(shape_name, qtype, layers, vocab, seed,
                                                     fused_experts)

    elif arch == "gpt-oss":
        sh = dict(randgguf_gptoss.SHAPES[shape_name])
        if layers:
            sh["layers"] = min(layers, sh["layers"])
        toks, vocab = vocab_keys(vocab_from) if vocab_from else (None, sh["vocab"])
        ts = randgguf_gptoss.tensors(sh, qtype, vocab)
        kvs = randgguf_gptoss.keys(kv, sh, shape_name, qtype, vocab)
        gain = randgguf_gptoss.gains(sh, OUT_GAIN, ROUTER_GAIN)
    else:
        sh = dict(MOE_SHAPES[shape_name])
        if layers:
            sh["layers"] = min(layers, sh["layers"])
        toks, vocab = vocab_keys(vocab_from) if vocab_from else (None, sh["vocab"])
        ts = moe_tensors(sh, qtype, vocab)
        kvs = moe_keys(sh, shape_name, qtype, vocab)
        gain = {"output.weight": OUT_GAIN}
        gain.update({f"blk.{i}.ffn_gate_inp.weight": ROUTER_GAIN for i in range(sh["layers"])})
    kvs += toks if toks else [kv("tokenizer.ggml.model", 8, "no_vocab")]
    infos, offset = b"", 0
    for name, ttype, dims in ts:
        infos += gguf_str(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", TYPES[ttype][0], offset)
        offset += (nbytes(ttype, dims) + ALIGN - 1) // ALIGN * ALIGN
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)))
        f.write(b"".join(kvs) + infos)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for name, ttype, dims in ts:
            if arch == "gpt-oss" and ttype == "F32" and randgguf_gptoss.is_bias(name):
                d = randgguf_gptoss.bias_data(name, dims, rng)
            else:
                d = fixed[name] if name in fixed else \
                (qwen35.special(name, dims, rng) if arch in ("qwen35", "qwen35moe") else None) or \
                data(ttype, dims, rng, gain.get(name, 1.0))
            assert len(d) == nbytes(ttype, dims)
            f.write(d)
            f.write(b"\0" * (-len(d) % ALIGN))
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", default="llama", choices=sorted(ARCH_SHAPES))
    ap.add_argument("--shape", help="llama: Llama-3-8B (default), Llama-tiny; "
                    "qwen3moe: tiny (default), Qwen3-30B-A3B; gpt-oss: tiny (default), "
                    "gpt-oss-20b")
    ap.add_argument("--type", default=None,
                    help="llama: F16 BF16 Q4_0 (default) Q4_K Q6_K Q4_K_M; qwen3moe: F16 (default) "
                    "Q8_0 Q4_K_M; gpt-oss: F16 (default) Q8_0 MXFP4 MXFP4_F16")
    ap.add_argument("--layers", type=int, default=None, help="the first N layers only")
    ap.add_argument("--vocab-from", default=None, help="copy tokenizer.* keys from this GGUF")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fused-experts", action="store_true",
                    help="gemma4: gate and up experts as one ffn_gate_up_exps (llama.cpp's)")
    args = ap.parse_args()
    shapes = ARCH_SHAPES[args.arch]
    shape = args.shape or ("Llama-3-8B" if args.arch == "llama" else "tiny")  # qwen35: tiny
    qtype = args.type or ("Q4_0" if args.arch == "llama" else "F16")
    if shape not in shapes:
        ap.error(f"--shape {shape}: {args.arch} has {', '.join(shapes)}")
    if qtype not in ARCH_TYPES[args.arch]:
        ap.error(f"--type {qtype}: {args.arch} files are {', '.join(ARCH_TYPES[args.arch])}")
    if args.layers is not None and args.layers < 1:
        ap.error("--layers must be at least 1")
    n = write(args.out, shape, qtype, args.seed, args.arch, args.layers, args.vocab_from,
              args.fused_experts)
    print(f"{args.out}: {args.arch} {shape} {qtype}, {n} bytes of tensors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
