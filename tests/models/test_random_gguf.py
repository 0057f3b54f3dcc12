#!/usr/bin/env python3
"""tests/models/test_random_gguf.py: bench/random_gguf.py, the writer of the
random-weight GGUF files the GPU check times ignite and llama.cpp on, checked
on its small shape (Llama-tiny) in every type it writes: the gguf package
reads the file back (tensor names, shapes, types, byte counts; the metadata
llama.cpp needs: architecture, sizes, a "no_vocab" tokenizer with
vocab_size), the weights it dequantizes are finite and within 2.5 /
sqrt(cols), the Q4_K_M recipe puts Q6_K where llama.cpp's does; then ignite
loads the file (`ignite info`) and runs `ignite bench` on it. The same for
the qwen3moe tiny shape (F16, Q8_0, Q4_K_M: experts as llama-quant.cpp
types them for 8 experts, the router F32), --layers, and --vocab-from (the
SmolLM2 file's tokenizer keys copied, the vocabulary following it). A
gpt-oss MXFP4 file with a block's scale byte past what its weights can be
(inf) is refused by the backend; one past the CUDA kernels' f16 runs on the
CPU."""
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np

from bench_gguf import random_gguf

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def check_file(path, qtype):
    r = gguf.GGUFReader(path)
    layers, e, h, kvh, hd, ff, vocab = random_gguf.SHAPES["Llama-tiny"][:7]
    check(field(r, "general.architecture") == "llama", f"{qtype}: architecture")
    check(field(r, "llama.block_count") == layers and field(r, "llama.embedding_length") == e
          and field(r, "llama.attention.head_count_kv") == kvh, f"{qtype}: sizes")
    check(field(r, "tokenizer.ggml.model") == "no_vocab" and field(r, "llama.vocab_size") == vocab,
          f"{qtype}: tokenizer")
    want = random_gguf.tensors(random_gguf.SHAPES["Llama-tiny"], qtype)
    check(len(r.tensors) == len(want), f"{qtype}: {len(r.tensors)} tensors")
    for t, (name, ttype, dims) in zip(r.tensors, want):
        check(t.name == name and t.tensor_type.name == ttype and list(t.shape) == dims,
              f"{qtype}: {t.name} {t.tensor_type.name} {list(t.shape)}, want {name} {ttype} {dims}")
        check(int(t.n_bytes) == random_gguf.nbytes(ttype, dims), f"{qtype}: {name} bytes")
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        lim = 2.5 / np.sqrt(dims[0]) if len(dims) == 2 else 1.2
        check(np.all(np.isfinite(w)) and np.abs(w).max() <= lim and np.abs(w).max() > 0.2 * lim,
              f"{qtype}: {name} weights up to {np.abs(w).max():.3g} (limit {lim:.3g})")
    if qtype == "Q4_K_M":  # of 2 layers, use_more_bits picks layer 1 (i >= 7 n / 8)
        types = {t.name: t.tensor_type.name for t in r.tensors}
        check(types["blk.1.attn_v.weight"] == "Q6_K" and types["blk.1.ffn_down.weight"] == "Q6_K"
              and types["blk.0.attn_v.weight"] == "Q4_K" and types["output.weight"] == "Q6_K"
              and types["blk.1.attn_q.weight"] == "Q4_K", f"Q4_K_M recipe: {types}")
        # llama.cpp's rule on 32 layers: the first and last 4, and every third between
        more = [i for i in range(32) if random_gguf.use_more_bits(i, 32)]
        check(more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31],
              f"use_more_bits: {more}")


def check_moe(path, qtype, layers=3, vocab=1024):
    r = gguf.GGUFReader(path)
    a = "qwen3moe"
    check(field(r, "general.architecture") == a and field(r, f"{a}.block_count") == layers
          and field(r, f"{a}.expert_count") == 8 and field(r, f"{a}.expert_used_count") == 2
          and field(r, f"{a}.expert_feed_forward_length") == 256
          and field(r, f"{a}.vocab_size") == vocab, f"moe {qtype}: keys")
    types = {t.name: (t.tensor_type.name, [int(d) for d in t.shape]) for t in r.tensors}
    check(len(types) == 12 * layers + 3, f"moe {qtype}: {len(types)} tensors")
    check(types["blk.0.ffn_gate_exps.weight"][1] == [256, 256, 8]
          and types["blk.0.ffn_down_exps.weight"][1] == [256, 256, 8]
          and types["blk.0.ffn_gate_inp.weight"] == ("F32", [256, 8])
          and types["token_embd.weight"][1] == [256, vocab], f"moe {qtype}: shapes {types}")
    if qtype == "Q4_K_M":  # of 3 layers use_more_bits picks layer 2 (i >= 7 n / 8)
        more = [i for i in range(layers) if random_gguf.use_more_bits(i, layers)]
        for i in range(layers):
            want_down = "Q6_K" if i in more else "Q4_K"
            check(types[f"blk.{i}.ffn_down_exps.weight"][0] == want_down
                  and types[f"blk.{i}.ffn_up_exps.weight"][0] == "Q4_K"
                  and types[f"blk.{i}.attn_v.weight"][0] == "Q8_0"
                  and types[f"blk.{i}.attn_k.weight"][0] == "Q8_0"
                  and types[f"blk.{i}.attn_output.weight"][0] == "Q5_K",
                  f"moe Q4_K_M recipe, layer {i}: {types}")
        check(types["output.weight"][0] == "Q6_K", "moe Q4_K_M: output head")
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        check(np.all(np.isfinite(w)), f"moe {qtype}: {t.name} not finite")


def mxfp4_scales(tmp):
    """An MXFP4 block's E8M0 scale byte past 252 makes its weights inf (255 is
    NaN in the OCP format): the CPU's logits were NaN and greedy took token 0,
    silently; now the backend refuses the file (exit 4, naming the block).
    Byte 141 (weights of 98304) is past the CUDA kernels' f16 but the CPU's
    f32 computes it: it runs."""
    path = os.path.join(tmp, "gptoss-mxfp4.gguf")
    random_gguf.write(path, "tiny", "MXFP4", arch="gpt-oss", layers=1)
    t = {t.name: t for t in gguf.GGUFReader(path).tensors}["blk.0.ffn_down_exps.weight"]
    row_bytes = int(t.shape[0]) // 32 * 17
    at = int(t.data_offset) + (1 * int(t.shape[1]) + 2) * row_bytes + 3 * 17  # expert 1, row 2
    for byte, rc, want in ((255, 4, "tensor 'blk.0.ffn_down_exps.weight', expert 1, row 2, "
                                    "block 3: E8M0 scale byte 255 (weights up to 12 x 2^127): "
                                    "not finite (at most 252)"),
                           (141, 0, "")):
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes([byte]))
        b = subprocess.run([BIN, "bench", "-m", path, "-p", "4", "-n", "1", "-r", "1", "-t", "1",
                            "--device", "cpu", "-o", "csv"], capture_output=True, text=True,
                           timeout=120)
        check(b.returncode == rc and want in b.stderr and
              (rc == 0 or len(b.stderr.splitlines()) == 1 and not b.stdout),
              f"MXFP4 scale byte {byte}: exit {b.returncode}, want {rc}: {b.stderr.strip()!r}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        mxfp4_scales(tmp)
        for qtype in ("F16", "Q8_0", "Q4_K_M"):
            path = os.path.join(tmp, f"moe-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, arch="qwen3moe")
            check_moe(path, qtype)
        path = os.path.join(tmp, "moe-2.gguf")
        smol = os.path.expanduser("~/.cache/ignite/SmolLM2-135M-Instruct.Q4_1.gguf")
        vocab_from = smol if os.path.exists(smol) else None
        random_gguf.write(path, "tiny", "Q8_0", arch="qwen3moe", layers=2, vocab_from=vocab_from)
        check_moe(path, "Q8_0 2 layers", layers=2, vocab=49152 if vocab_from else 1024)
        if vocab_from:
            r, src = gguf.GGUFReader(path), gguf.GGUFReader(vocab_from)
            check(field(r, "tokenizer.chat_template") == field(src, "tokenizer.chat_template")
                  and field(r, "tokenizer.ggml.tokens") == field(src, "tokenizer.ggml.tokens"),
                  "--vocab-from: tokenizer keys not copied")
        for qtype in ("Q4_0", "Q4_K", "Q6_K", "Q4_K_M", "F16"):
            path = os.path.join(tmp, f"tiny-{qtype}.gguf")
            random_gguf.write(path, "Llama-tiny", qtype)
            check_file(path, qtype)
            info = subprocess.run([BIN, "info", "-m", path], capture_output=True, text=True,
                                  timeout=60)
            check(info.returncode == 0 and "layers          2" in info.stdout,
                  f"{qtype}: ignite info: exit {info.returncode}: {info.stderr}")
            b = subprocess.run([BIN, "bench", "-m", path, "-p", "8", "-n", "2", "-r", "1",
                                "-t", "1", "--device", "cpu", "-o", "csv"], capture_output=True,
                               text=True, timeout=120)
            check(b.returncode == 0 and b.stdout.count("\n") == 3,
                  f"{qtype}: ignite bench: exit {b.returncode}: {b.stderr}")
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"test_random_gguf: {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
