#!/usr/bin/env python3
"""tests/models/test_gguf_malformed.py: `ignite info` on broken GGUF files
(mixtures of experts among them: counts out of range, inconsistent with the
tensors, a router of the wrong shape or type).

Starts from a small valid model (tests/pylib/ggufgen.py, checked against
gguf.GGUFReader), breaks one thing per case and expects exit code 4, one
line on stderr naming the file and that specific problem, nothing on
stdout, and no crash (run it in the ASan build too). Also: valid variants
load (v2, other alignment, qwen2 with biases, untied output), metadata
strings that are not UTF-8 or hold control bytes keep --json valid UTF-8
and the text form free of control bytes, a missing file gives exit 3.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import gguf

from ggufgen import ARR, BOOL, F32, I32, STR, T_F32, T_Q4_0, U32, U64, Gguf, tiny_llama

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
failures = []


def base():
    return tiny_llama()


def tiny_moe(**kw):
    """A qwen3moe model: 8 experts of 32, 2 used."""
    return tiny_llama(arch="qwen3moe", moe=(8, 2, 32), **kw)


def valid_bytes():
    return base().build()


def with_tensor_patch(name, **kw):
    g = base()
    for t in g.tensors:
        if t["name"] == name:
            t.update(kw)
    return g.build()


def truncate_value():
    return Gguf().add("k", U64, 5).build()[:-4]  # inside the last value


def truncate_tensor_info():
    g = Gguf().tensor("t" * 20, [1], T_F32)
    return g.build()[:24 + 8 + 20 + 4 + 8 + 4 + 4]  # inside the offset


def key_len_huge():
    g = Gguf()
    g.add("general.architecture", STR, "llama")
    b = bytearray(g.build())
    struct.pack_into("<Q", b, 24, 1 << 50)  # the first key's length
    return bytes(b)


def array_count_huge():
    g = Gguf().add_raw("tokenizer.ggml.tokens", struct.pack("<IIQ", ARR, STR, 1 << 40))
    return g.build()


def duplicate_key():
    g = base()
    g.add("general.name", STR, "again")
    return g.build()


def key_type(key, vtype, v, sub=None):
    def make():
        g = base()
        g.kv = [(k, r) for k, r in g.kv if k != key]
        g.add(key, vtype, v, sub)
        return g.build()
    return make


def alignment(v, vtype=U32):
    def make():
        g = base()
        g.add("general.alignment", vtype, v)
        return g.build()
    return make


def misaligned_for_cpu():
    """general.alignment 2 with the data section two bytes past a multiple of
    4: the parser accepts it, but the kernels cannot read floats there."""
    for pad in ("", "xx"):  # a two-byte longer header moves the data by two
        g = tiny_llama(alignment=2).add("general.alignment", U32, 2).add("test.pad", STR, pad)
        data = g.build()
        start = len(data) - max(t["_off"] + len(t["data"]) for t in g.tensors)
        if start % 4 == 2:
            return data
    raise AssertionError("could not place the data section at 2 mod 4")


def duplicate_tensor():
    g = base()
    g.tensor("output_norm.weight", [32], T_F32)
    return g.build()


def overlap():
    g = base()
    first = g.tensors[1]["name"]
    g.build()  # assigns offsets
    g.tensors[2]["offset"] = g.tensors[1]["_off"]
    return g.build(), first


def out_of_bounds():
    b = valid_bytes()
    return b[:-100]


# name -> (bytes maker, expected exit code, expected substring)
CASES = {
    "too_small": (lambda: b"GGUF\x03\x00\x00", 4, "file too small: 7 bytes"),
    "bad_magic": (lambda: b"GGML" + valid_bytes()[4:], 4, "not a GGUF file: magic is 47 47 4d 4c"),
    "version_1": (lambda: b"GGUF" + struct.pack("<I", 1) + valid_bytes()[8:], 4,
                  "GGUF version 1 is not supported"),
    "big_endian": (lambda: b"GGUF" + struct.pack(">I", 3) + valid_bytes()[8:], 4,
                   "a big-endian file?"),
    "truncated": (truncate_value, 4, "metadata key 'k': truncated: value at byte 37"),
    "truncated_tensor_info": (truncate_tensor_info, 4, "truncated: tensor offset at byte 68"),
    # one byte short: the bounds check's own edge (reading that byte past the
    # end does not crash a build without sanitizers)
    "truncated_by_one": (lambda: Gguf().add("k", U64, 5).build()[:-1], 4,
                         "metadata key 'k': truncated: value at byte 37 needs 8 bytes, 7 left"),
    "kv_count": (lambda: Gguf().build(n_kv=1 << 40), 4,
                 "1099511627776 metadata entries cannot fit"),
    "tensor_count": (lambda: Gguf().build(n_tensors=1 << 40), 4,
                     "1099511627776 tensor infos cannot fit"),
    "string_len": (key_len_huge, 4, "metadata entry 0: key length 1125899906842624"),
    "array_count": (array_count_huge, 4,
                    "array of 1099511627776 string elements cannot fit"),
    "value_type": (lambda: Gguf().add_raw("x", struct.pack("<I", 13)).build(), 4,
                   "metadata key 'x': unknown value type 13"),
    "array_elem_type": (lambda: Gguf().add_raw("x", struct.pack("<IIQ", ARR, 77, 1)).build(),
                        4, "unknown array element type 77"),
    "nested_array": (lambda: Gguf().add_raw("x", struct.pack("<IIQ", ARR, ARR, 1)).build(), 4,
                     "arrays of arrays are not supported"),
    "bool_value": (lambda: Gguf().add_raw("b", struct.pack("<IB", BOOL, 2)).build(), 4,
                   "bool value 2 is neither 0 nor 1"),
    "duplicate_key": (duplicate_key, 4, "metadata key 'general.name' appears twice"),
    "type_alignment": (key_type("general.alignment", STR, "32"), 4,
                       "'general.alignment' is string, expected a non-negative integer"),
    "type_arch": (key_type("general.architecture", U32, 1), 4,
                  "'general.architecture' is uint32, expected string"),
    "type_block_count": (key_type("llama.block_count", F32, 1.0), 4,
                         "'llama.block_count' is float32, expected a non-negative integer"),
    "type_negative": (key_type("llama.embedding_length", I32, -32), 4,
                      "'llama.embedding_length' is int32 -32"),
    "type_freq_base": (key_type("llama.rope.freq_base", U32, 10000), 4,
                       "'llama.rope.freq_base' is uint32, expected float32 or float64"),
    "type_tokens": (key_type("tokenizer.ggml.tokens", ARR, [1, 2], I32), 4,
                    "'tokenizer.ggml.tokens' is array of int32, expected array of string"),
    "type_scores": (key_type("tokenizer.ggml.scores", ARR, ["x"], STR), 4,
                    "'tokenizer.ggml.scores' is array of string, expected array of float32"),
    "type_bos": (key_type("tokenizer.ggml.bos_token_id", F32, 1.0), 4,
                 "'tokenizer.ggml.bos_token_id' is float32"),
    "alignment_not_pow2": (alignment(48), 4, "power of 2 up to 1073741824, got 48"),
    "alignment_zero": (alignment(0, U64), 4, "power of 2 up to 1073741824, got 0"),
    "n_dims_0": (lambda: with_tensor_patch("output_norm.weight", ne=[], n_dims=0), 4,
                 "tensor 'output_norm.weight': n_dims is 0"),
    "n_dims_5": (lambda: with_tensor_patch("output_norm.weight", ne=[32, 1, 1, 1, 1]), 4,
                 "n_dims is 5, expected 1 to 4"),
    "dim_0": (lambda: with_tensor_patch("blk.0.attn_q.weight", ne=[32, 0]), 4,
              "tensor 'blk.0.attn_q.weight': dim 1 is 0"),
    "dims_overflow": (lambda: with_tensor_patch("blk.0.attn_q.weight",
                                                ne=[1 << 32, 1 << 32]), 4,
                      "the element count overflows at dim 1"),
    "tensor_type": (lambda: with_tensor_patch("blk.0.attn_q.weight", type=99), 4,
                    "unknown tensor type id 99\n"),
    "tensor_type_removed": (lambda: with_tensor_patch("blk.0.attn_q.weight", type=4), 4,
                            "unknown tensor type id 4 (Q4_2"),
    "row_blocks": (lambda: with_tensor_patch("blk.0.attn_q.weight", ne=[33, 32]), 4,
                   "row length 33 is not a multiple of Q4_0's block of 32"),
    "duplicate_tensor": (duplicate_tensor, 4, "tensor name 'output_norm.weight' appears twice"),
    "misaligned": (lambda: with_tensor_patch("blk.0.attn_q.weight", offset=16), 4,
                   "offset 16 is not a multiple of the alignment 32"),
    "out_of_bounds": (out_of_bounds, 4, "lies outside the file (size"),
    "overlap": (lambda: overlap()[0], 4, "overlap: ["),
    # a Q8_0 tensor whose type byte says Q4_0: fewer bytes than its data, a gap
    "tensor_gap": (lambda: with_tensor_patch("token_embd.weight", type=2), 4,
                   "tensor 'token_embd.weight' ends at 288 but 'output_norm.weight' starts at 544"),
    # model-level problems (model.c)
    # (an unknown architecture is described by info and refused by run:
    # tests/models/test_arch_load.py)
    "missing_key": (lambda: tiny_llama(skip=("llama.block_count",)).build(), 4,
                    "metadata key 'llama.block_count' is missing"),
    "zero_dim": (key_type("llama.feed_forward_length", U32, 0), 4,
                 "llama.feed_forward_length is 0, expected 1 to"),
    "gqa": (lambda: tiny_llama(n_head=2, n_head_kv=2, skip=("llama.attention.head_count_kv",))
            .add("llama.attention.head_count_kv", U32, 3).build(), 4,
            "2 heads are not a multiple of 3 KV heads"),
    "block_count_short": (lambda: tiny_llama(n_layer=2, skip=("llama.block_count",))
                          .add("llama.block_count", U32, 1).build(), 4,
                          "tensor 'blk.1.attn_norm.weight' is past llama.block_count 1"),
    "missing_tensor": (lambda: tiny_llama(skip=("blk.0.ffn_up.weight",)).build(), 4,
                       "tensor 'blk.0.ffn_up.weight' is missing"),
    "wrong_shape": (lambda: tiny_llama(override={"blk.0.attn_k.weight": ([32, 32], T_Q4_0)})
                    .build(), 4, "tensor 'blk.0.attn_k.weight' has shape ne=[32, 32, 1, 1], expected ne=[32, 16]"),
    "norm_type": (lambda: tiny_llama(override={"blk.0.ffn_norm.weight": ([32], 1)}).build(), 4,
                  "tensor 'blk.0.ffn_norm.weight' has type F16, expected F32"),
    "unsupported_type": (lambda: tiny_llama(override={"blk.0.attn_q.weight": ([32, 32], 9)})
                         .build(), 4, "has type Q8_1, which ignite cannot compute with"),
    "qwen2_no_bias": (lambda: tiny_llama(arch="qwen2").build(), 4,
                      "tensor 'blk.0.attn_q.bias' is missing"),
    "partial_bias": (lambda: tiny_llama(bias=True, skip=("blk.0.attn_k.bias",)).build(), 4,
                     "layer 0 has only some of the Q/K/V biases"),
    "misaligned_for_cpu": (misaligned_for_cpu, 4,
                           "is not a multiple of 4 bytes (general.alignment 2)"),
    "rope_dims": (lambda: tiny_llama().add("llama.rope.dimension_count", U32, 17).build(), 4,
                  "rope.dimension_count 17 must be even"),
    # a mixture of experts (qwen3moe): its counts, and the tensors against them
    "moe_count_zero": (lambda: tiny_moe(skip=("qwen3moe.expert_count",))
                       .add("qwen3moe.expert_count", U32, 0).build(), 4,
                       "qwen3moe.expert_count is 0, expected 1 to"),
    "moe_count_absurd": (lambda: tiny_moe(skip=("qwen3moe.expert_count",))
                         .add("qwen3moe.expert_count", U32, 100000).build(), 4,
                         "qwen3moe.expert_count is 100000, expected 1 to 1024"),
    "moe_used_missing": (lambda: tiny_moe(skip=("qwen3moe.expert_used_count",)).build(), 4,
                         "metadata key 'qwen3moe.expert_used_count' is missing"),
    "moe_used_zero": (lambda: tiny_moe(skip=("qwen3moe.expert_used_count",))
                      .add("qwen3moe.expert_used_count", U32, 0).build(), 4,
                      "qwen3moe.expert_used_count is 0, expected 1 to"),
    "moe_used_over": (lambda: tiny_moe(skip=("qwen3moe.expert_used_count",))
                      .add("qwen3moe.expert_used_count", U32, 9).build(), 4,
                      "qwen3moe.expert_used_count 9 is more than expert_count 8"),
    "moe_count_vs_tensors": (lambda: tiny_moe(skip=("qwen3moe.expert_count",))
                             .add("qwen3moe.expert_count", U32, 4).build(), 4,
                             "tensor 'blk.0.ffn_gate_inp.weight' has shape ne=[32, 8, 1, 1], "
                             "expected ne=[32, 4] by qwen3moe.expert_count 4"),
    "moe_width_vs_tensors": (lambda: tiny_moe(skip=("qwen3moe.expert_feed_forward_length",))
                             .add("qwen3moe.expert_feed_forward_length", U32, 64).build(), 4,
                             "tensor 'blk.0.ffn_gate_exps.weight' has shape ne=[32, 32, 8, 1], "
                             "expected ne=[32, 64, 8] by qwen3moe.expert_count 8, "
                             "embedding_length 32 and expert_feed_forward_length 64"),
    "moe_router_shape": (lambda: tiny_moe(override={"blk.0.ffn_gate_inp.weight": ([32, 7], T_F32)})
                         .build(), 4, "tensor 'blk.0.ffn_gate_inp.weight' has shape "
                         "ne=[32, 7, 1, 1], expected ne=[32, 8] by qwen3moe.expert_count 8"),
    "moe_router_quantized": (lambda: tiny_moe(override={"blk.0.ffn_gate_inp.weight":
                                                        ([32, 8], T_Q4_0)}).build(), 4,
                             "tensor 'blk.0.ffn_gate_inp.weight' (the router) has type Q4_0, "
                             "expected F32, F16 or BF16"),
    "moe_experts_missing": (lambda: tiny_moe(skip=("blk.0.ffn_down_exps.weight",)).build(), 4,
                            "tensor 'blk.0.ffn_down_exps.weight' is missing"),
}


def run(args):
    return subprocess.run([BIN, "info", *args], capture_output=True, text=True, timeout=60)


def check_case(tmp, name, make, want_rc, want):
    path = os.path.join(tmp, name + ".gguf")
    with open(path, "wb") as f:
        f.write(make())
    r = run(["-m", path])
    lines = r.stderr.splitlines()
    problems = []
    if r.returncode != want_rc:
        problems.append(f"exit {r.returncode}, want {want_rc}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, want 1")
    if want not in r.stderr:
        problems.append(f"message lacks {want!r}")
    if f"'{path}':" not in r.stderr:  # file names are quoted in every message
        problems.append("message does not name the file, quoted")
    if r.stdout:
        problems.append("wrote to stdout")
    if problems:
        failures.append(f"{name}: {'; '.join(problems)}; stderr: {r.stderr.strip()!r}")


def check_valid(tmp, name, g, expect):
    path = os.path.join(tmp, name + ".gguf")
    with open(path, "wb") as f:
        f.write(g.build())
    reader = gguf.GGUFReader(path)  # our builder writes what the reference reads
    assert len(reader.tensors) == len(g.tensors), name
    r = run(["-m", path, "--json"])
    if r.returncode != 0:
        failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
        return
    info = json.loads(r.stdout)
    for k, v in expect.items():
        if info[k] != v:
            failures.append(f"{name}: {k} = {info[k]!r}, want {v!r}")


def check_untrusted_strings(tmp):
    """Metadata strings are the file's bytes: --json must stay valid UTF-8
    JSON and the text form must not pass control bytes (a terminal escape)
    through."""
    g = tiny_llama(skip=("general.name", "tokenizer.ggml.pre"))
    g.add("general.name", STR, b"bad \xff\xfe name \x1b[31m red")
    g.add("tokenizer.ggml.pre", STR, b"gp\xfft2")
    path = os.path.join(tmp, "strings.gguf")
    with open(path, "wb") as f:
        f.write(g.build())
    r = subprocess.run([BIN, "info", "-m", path, "--json"], capture_output=True, timeout=60)
    try:
        info = json.loads(r.stdout.decode("utf-8"))
        if r.returncode != 0 or info["name"] != "bad \ufffd\ufffd name  [31m red" or \
                info["tokenizer"]["pre"] != "gp\ufffdt2":
            failures.append(f"untrusted strings --json: exit {r.returncode}, {info.get('name')!r}")
    except ValueError as e:
        failures.append(f"untrusted strings --json: not UTF-8 JSON ({e}): {r.stdout[:300]!r}")
    r = subprocess.run([BIN, "info", "-m", path], capture_output=True, timeout=60)
    ctrl = [c for c in r.stdout if c < 0x20 and c != 0x0a or c == 0x7f]
    if r.returncode != 0 or ctrl:
        failures.append(f"untrusted strings text: exit {r.returncode}, control bytes {ctrl}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_untrusted_strings(tmp)
        wants = [w for _, _, w in CASES.values()]
        assert len(set(wants)) == len(wants), "two cases expect the same message"
        for name, (make, rc, want) in CASES.items():
            check_case(tmp, name, make, rc, want)
        g2 = tiny_llama()
        g2.version = 2
        check_valid(tmp, "v2", g2, {"gguf_version": 2, "n_layer": 1})
        # 2 layers of 8 experts of 32, 2 used; a layer's active parameters: two
        # norms, Q and O (32 x 32), K and V (16 x 32), two head norms, the router
        # (8 x 32), 2 experts' gate, up and down (32 x 32); then the embedding
        # table (16 x 32, tied) and the output norm
        moe = tiny_moe(n_layer=2)
        per_layer = 2 * 32 + 2 * 32 * 32 + 2 * 16 * 32 + 2 * 16 + 8 * 32 + 2 * 3 * 32 * 32
        # no CUDA bytes: its head dim 16 is not one the CUDA attention takes
        # (backend_gpu_missing); the experts' device bytes are checked on files
        # it runs by tests/models/tensor_table_check.c
        check_valid(tmp, "qwen3moe", moe,
                    {"architecture": "qwen3moe", "n_expert": 8, "n_expert_used": 2,
                     "n_ff_exp": 32, "active_params": 2 * per_layer + 16 * 32 + 32,
                     "cuda_weight_bytes": None})
        check_valid(tmp, "align64", tiny_llama(alignment=64).add("general.alignment", U32, 64),
                    {"n_embd": 32})
        check_valid(tmp, "qwen2", tiny_llama(arch="qwen2", bias=True, tied=False, n_layer=2),
                    {"architecture": "qwen2", "has_qkv_bias": True, "rope_style": "half-split",
                     "tied_embeddings": False, "n_layer": 2})
        check_valid(tmp, "llama_gqa", tiny_llama(n_head=4, n_head_kv=2),
                    {"head_dim": 8, "n_head_kv": 2, "n_rot": 8, "rope_base": 10000,
                     "kv_bytes_per_token": {"f32": 2 * 1 * 2 * 8 * 4, "f16": 2 * 1 * 2 * 8 * 2}})
        g = tiny_llama(n_head=2).add("llama.attention.key_length", U32, 8) \
            .add("llama.attention.value_length", U32, 8)
        g.tensors = [t for t in g.tensors if "attn" not in t["name"] or "norm" in t["name"]]
        g.tensor("blk.0.attn_q.weight", [32, 16], T_Q4_0).tensor("blk.0.attn_k.weight", [32, 8], T_Q4_0)
        g.tensor("blk.0.attn_v.weight", [32, 8], T_Q4_0).tensor("blk.0.attn_output.weight", [16, 32], T_F32)
        check_valid(tmp, "key_length", g, {"head_dim": 8, "n_rot": 8})
        r = run(["-m", os.path.join(tmp, "absent.gguf")])
        if r.returncode != 3 or len(r.stderr.splitlines()) != 1:
            failures.append(f"missing file: exit {r.returncode}, stderr {r.stderr!r}")
        r = run(["-m", tmp])  # a directory is a Hugging Face folder (docs/hf.md)
        if r.returncode != 4 or "config.json is missing" not in r.stderr:
            failures.append(f"directory: exit {r.returncode}, stderr {r.stderr!r}")
    for f in failures[:20]:
        print("FAIL", f, file=sys.stderr)
    print(f"test_gguf_malformed: {len(CASES)} malformed cases, {len(failures)} failures",
          file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
