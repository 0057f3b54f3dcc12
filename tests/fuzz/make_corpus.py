#!/usr/bin/env python3
"""tests/fuzz/make_corpus.py: writes the fuzzing seed corpora (committed;
rerun after changing tests/pylib/ggufgen.py, hfgen.py or the texts below):
  corpus/       GGUF: small valid files that between them use every metadata
                value type, arrays of every element type, GGUF v2 and v3,
                several alignments, llama, qwen2 and qwen3moe (experts: 3-D
                tensors and a router) and a tensor
                of every ggml type ignite dequantizes;
  corpus_st/    safetensors: every dtype, scalars and empty tensors, metadata,
                header padding, a tiny model's weights;
  corpus_json/  the JSON files of Hugging Face folders: config.json of each
                architecture, generation_config.json, tokenizer_config.json,
                the index, and tokenizer.json of each pre-tokenizer family;
  corpus-tok/   texts for fuzz_tokenizer.c, each behind the byte that picks
                the vocabulary (0-3 byte-level BPE with the gpt2, smollm,
                llama3, qwen2 pre-tokenizers, 4 SentencePiece-style) and, with
                0x80 set, parsing of control-token text;
  corpus_klfile/ perplexity base files (llama.cpp's _logits_ layout, written
                here from its description): even and odd windows and
                vocabularies, a record of equal logits (scale 0);
  corpus_kvfile/ saved KV caches (kvcache/kvfile.c's format, written here
                from its header comment) for fuzz_kvfile.c's model: f32 and
                f16, with and without logits, one position and one past a
                64-position block."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import hfgen  # noqa: E402
from ggufgen import (ARR, BOOL, F32, F64, I8, I16, I32, I64, STR, U8, U16, U32, U64,  # noqa: E402
                     Gguf, tiny_llama)
from kvfile import crc32c  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
# ggml id -> (block elems, block bytes) for every type quant.c dequantizes
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22),
         7: (32, 24), 8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144),
         13: (256, 176), 14: (256, 210)}


def all_values():
    g = Gguf()
    g.add("u8", U8, 200).add("i8", I8, -100).add("u16", U16, 60000).add("i16", I16, -30000)
    g.add("u32", U32, 4000000000).add("i32", I32, -2000000000).add("f32", F32, 1.5)
    g.add("bool", BOOL, 1).add("str", STR, "hello").add("u64", U64, 1 << 60)
    g.add("i64", I64, -(1 << 60)).add("f64", F64, 2.25)
    for name, t, v in [("au8", U8, [1, 2]), ("ai8", I8, [-1]), ("au16", U16, [7]),
                       ("ai16", I16, [-7]), ("au32", U32, [9]), ("ai32", I32, [-9]),
                       ("af32", F32, [0.5]), ("abool", BOOL, [0, 1]), ("astr", STR, ["a", ""]),
                       ("au64", U64, [3]), ("ai64", I64, [-3]), ("af64", F64, [1.0]),
                       ("aempty", U32, [])]:
        g.add(name, ARR, v, t)
    g.tensor("one", [4], 0)
    return g


def all_types():
    g = Gguf(alignment=16).add("general.alignment", U32, 16)
    rng = np.random.default_rng(7)
    for tid, (be, bb) in TYPES.items():
        n_blocks = {1: 32, 32: 8, 256: 1}[be]
        data = rng.integers(0, 256, n_blocks * bb, dtype=np.uint8).tobytes()
        g.tensor(f"t{tid}", [n_blocks * be], tid, data=data)
    return g


OUT_TOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus-tok")
# name -> (selector byte, text)
TEXTS = {
    "english": (0, "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?\n"),
    "code": (1, "def f(x):\n    return {'a': x ** 2 + 3.14159}  # 12345678\n\tif a==b: pass\n"),
    "numbers": (2, "1 12 123 1234 12345 3.14 -7 1e10 2024-01-01 0x1F 1,000,000"),
    "contractions": (3, "I'm sure you'll see: DON'T, we'd, they've, HE'LL 's 't 're"),
    "scripts": (0, "日本語のテキスト, café, naïve, Привет мир, مرحبا, हिन्दी, 👍🏽👨‍👩‍👧 e\u0301"),
    "whitespace": (3, "  \t\n\n   x  \r\n\u00a0\u3000y \n\n\n z   "),
    "chatml": (0x80, "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"),
    "chatml_plain": (1, "<|im_start|>user\nnot parsed<|im_end|><|endoftext|>"),
    "user_defined": (2, "call <tool> then <tool><tool> and <too"),
    "spm_english": (4, "The theory and the thing in an ending: café 123"),
    "spm_spaces": (4, "  leading  and trailing spaces  "),
    "spm_scripts": (4, "日本 と é and 👍 \u2581 kept"),
    "spm_special": (0x84, "<s>hello</s> world"),
    "empty": (0, ""),
}
RAW = {  # bytes that are not UTF-8
    "invalid_utf8": bytes([2]) + b"ok \xc0\xaf \xed\xa0\x80 \xff\xfe \xe2\x82 end\x80",
    "nul_bytes": bytes([0]) + b"a\x00b\x00\x00c",
    "spm_invalid": bytes([4]) + b"\xf5\x80 x \xc3",
}


def write_tok_corpus():
    os.makedirs(OUT_TOK, exist_ok=True)
    for name, (sel, text) in TEXTS.items():
        with open(os.path.join(OUT_TOK, name + ".txt"), "wb") as f:
            f.write(bytes([sel]) + text.encode("utf-8"))
    for name, b in RAW.items():
        with open(os.path.join(OUT_TOK, name + ".bin"), "wb") as f:
            f.write(b)
    print(f"corpus-tok: {len(TEXTS) + len(RAW)} files")


def main():
    write_tok_corpus()
    os.makedirs(OUT, exist_ok=True)
    v2 = tiny_llama()
    v2.version = 2
    files = {
        "tiny_llama.gguf": tiny_llama(),
        "tiny_llama_v2.gguf": v2,
        "tiny_qwen2.gguf": tiny_llama(arch="qwen2", bias=True, tied=False, n_vocab=8),
        "tiny_qwen3moe.gguf": tiny_llama(arch="qwen3moe", moe=(4, 2, 32), n_vocab=8),
        "align1.gguf": tiny_llama(alignment=1).add("general.alignment", U8, 1),
        "all_values.gguf": all_values(),
        "all_types.gguf": all_types(),
        "header_only.gguf": Gguf(),
    }
    for name, g in files.items():
        b = g.build()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)
        print(f"{name}: {len(b)} bytes")


def safetensors_corpus():
    out = os.path.join(HERE, "corpus_st")
    os.makedirs(out, exist_ok=True)
    raw = hfgen.raw_safetensors
    dtypes = [("BOOL", 1), ("U8", 1), ("I8", 1), ("F8_E5M2", 1), ("F8_E4M3", 1), ("I16", 2),
              ("U16", 2), ("F16", 2), ("BF16", 2), ("I32", 4), ("U32", 4), ("F32", 4),
              ("F64", 8), ("I64", 8), ("U64", 8)]
    header, off = {"__metadata__": {"format": "pt", "note": "all dtypes"}}, 0
    for i, (dt, size) in enumerate(dtypes):
        shape = [[], [0], [3], [2, 3], [1, 2, 2]][i % 5]
        n = int(np.prod(shape)) if shape else 1
        header[f"t.{dt.lower()}"] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n * size]}
        off += n * size
    files = {"all_dtypes.safetensors": raw(header, bytes(range(256)) * (off // 256) + bytes(off % 256))}
    padded = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    padded += b" " * (-len(padded) % 8)
    files["padded.safetensors"] = raw(padded, np.arange(4, dtype=np.float32).tobytes())
    files["empty.safetensors"] = raw(b"{}      ")
    t = hfgen.tiny_tensors(hfgen.tiny_config(n_vocab=8, hidden_size=8, intermediate_size=8,
                                             num_attention_heads=2, num_key_value_heads=1,
                                             num_hidden_layers=1))
    path = os.path.join(out, "tiny_model.safetensors")
    hfgen.save_safetensors(t, path, "BF16")
    for name, b in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)
    print(f"corpus_st: {len(files) + 1} files")


def json_corpus():
    out = os.path.join(HERE, "corpus_json")
    os.makedirs(out, exist_ok=True)
    files = {}
    for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        files[f"config_{arch}.json"] = hfgen.tiny_config(arch, head_dim=16, rope_scaling=None)
    files["config_Qwen3ForCausalLM.json"] = hfgen.tiny_config(
        "Qwen3ForCausalLM", head_dim=16, use_sliding_window=False, sliding_window=None)
    files["config_Qwen3MoeForCausalLM.json"] = hfgen.tiny_config(
        "Qwen3MoeForCausalLM", head_dim=16, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[])
    gemma = dict(hfgen.tiny_config("Gemma3ForCausalLM", head_dim=16), sliding_window=4,
                 sliding_window_pattern=2, query_pre_attn_scalar=16, rope_local_base_freq=1e4,
                 hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                 attn_logit_softcapping=None)
    del gemma["hidden_act"]
    files["config_Gemma3ForCausalLM.json"] = gemma
    text = {k: v for k, v in gemma.items() if k != "architectures"}
    text.update(layer_types=["sliding_attention", "full_attention"],
                rope_scaling={"rope_type": "linear", "factor": 8.0})
    files["config_Gemma3ForConditionalGeneration.json"] = {
        "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
        "vision_config": {"hidden_size": 16}}
    files["config_GptOssForCausalLM.json"] = dict(
        hfgen.tiny_config("GptOssForCausalLM", head_dim=16), num_local_experts=8,
        num_experts_per_tok=2, sliding_window=4, attention_bias=True, swiglu_limit=7.0,
        layer_types=["sliding_attention", "full_attention"],
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 64},
        quantization_config={"quant_method": "mxfp4"})
    files["generation_config.json"] = {"do_sample": True, "temperature": 0.6, "top_p": 0.9,
                                       "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.05,
                                       "bos_token_id": 1, "eos_token_id": [2, 3]}
    files["tokenizer_config.json"] = {"bos_token": {"content": "<|im_start|>"},
                                      "eos_token": "<|im_end|>",
                                      "chat_template": [{"name": "default",
                                                         "template": hfgen.TINY_TEMPLATE}]}
    files["index.json"] = {"metadata": {"total_size": 16},
                           "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    for name, j in files.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(j, f)
    for pre in ("smollm", "gpt2", "llama3", "qwen2"):
        hfgen.tiny_tokenizer(pre).save(os.path.join(out, f"tokenizer_{pre}.json"), pretty=False)
    print(f"corpus_json: {len(files) + 4} files")


def klfile(n_ctx, n_vocab, n_chunk, seed, flat=False):
    """A base file: header, tokens, then each window's records."""
    import struct
    rng = np.random.default_rng(seed)
    nv, n_scored = 2 * ((n_vocab + 1) // 2) + 4, n_ctx - 1 - n_ctx // 2
    out = b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk)
    out += rng.integers(0, n_vocab, n_chunk * n_ctx).astype("<i4").tobytes()
    for _ in range(n_chunk * n_scored):
        l = np.zeros(n_vocab) if flat else rng.normal(0, 4, n_vocab)
        mx, mn = l.max(), max(l.min(), l.max() - 16)
        lse = np.log(np.exp(l - mx).sum())
        scale = (mx - mn) / 65535
        words = np.zeros(nv - 4, dtype="<u2")
        if scale > 0:
            words[:n_vocab] = np.where(l > mn, np.rint((l - mn) / scale), 0)
        out += struct.pack("<ff", scale, mn - mx - lse) + words.tobytes()
    return out


def klfile_corpus():
    out = os.path.join(HERE, "corpus_klfile")
    os.makedirs(out, exist_ok=True)
    for name, data in [("even.kl", klfile(8, 6, 2, 1)), ("odd.kl", klfile(7, 5, 3, 2)),
                       ("smallest.kl", klfile(3, 1, 1, 3)), ("flat.kl", klfile(4, 4, 1, 4, True))]:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def kvfile(dtype, n_tokens, logits, seed, version=1):
    """A cache of fuzz_kvfile.c's model: 2 layers, 2 KV heads of 8, vocabulary
    64, model id 0..31; version 2 describes its one group of full-attention
    layers (kind 0, window 0) and each layer (group 0, heads, head dim,
    source -1, no state bytes)."""
    rng = np.random.default_rng(seed)
    n_layer, n_head_kv, head_dim, n_vocab = 2, 2, 8, 64
    b = bytearray(b"IGNITEKV")
    b += np.array([version, dtype], "<u4").tobytes() + bytes(range(32))
    if version == 1:
        b += np.array([n_layer, n_head_kv, head_dim, n_tokens, n_vocab if logits else 0],
                      "<i8").tobytes()
    else:
        b += np.array([n_layer, 1, n_tokens, n_vocab if logits else 0], "<i8").tobytes()
        b += np.array([0, 0], "<u4").tobytes() + np.array([0, n_layer], "<i8").tobytes()
        for _ in range(n_layer):
            b += np.array([0, n_head_kv, head_dim, -1, 0], "<i8").tobytes()
    b += rng.integers(0, n_vocab, n_tokens).astype("<i4").tobytes()
    if logits:
        b += rng.standard_normal(n_vocab).astype("<f4").tobytes()
    rows = rng.standard_normal(n_layer * 2 * n_head_kv * n_tokens * head_dim)
    b += rows.astype("<f4" if dtype == 0 else "<f2").tobytes()
    return bytes(b) + np.array([crc32c(b)], "<u4").tobytes()


def kvfile_corpus():
    out = os.path.join(HERE, "corpus_kvfile")
    os.makedirs(out, exist_ok=True)
    for name, data in [("f32_one.kv", kvfile(0, 1, True, 1)),
                       ("f16_logits.kv", kvfile(1, 5, True, 2)),
                       ("f32_block_edge.kv", kvfile(0, 65, False, 3)),
                       ("f16_no_logits.kv", kvfile(1, 3, False, 4)),
                       ("v2_f32_one.kv", kvfile(0, 1, True, 5, 2)),
                       ("v2_f16_logits.kv", kvfile(1, 5, True, 6, 2)),
                       ("v2_f32_block_edge.kv", kvfile(0, 65, False, 7, 2))]:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
    safetensors_corpus()
    json_corpus()
    klfile_corpus()
    kvfile_corpus()
