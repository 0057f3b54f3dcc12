#!/usr/bin/env python3
"""tests/models/test_dequant.py: our dequantization against the gguf package.

  test_dequant.py GGUF_DUMP --synthetic   random blocks of every supported
      type, written with gguf.GGUFWriter, dequantized by gguf.quants and by
      us (through tests/models/gguf_dump); F32/F16/BF16 must agree bit for
      bit, the quantized types within f32 rounding (they agree bit for bit
      in practice: both evaluate ggml's formulas in f32; the count of
      differing elements is printed).
  test_dequant.py GGUF_DUMP --model       every tensor of the real model,
      plus the tensor infos against gguf.GGUFReader.

Exit 77 (skipped) in --model mode when the model is not there.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from igtest import model_path

# Byte offsets of the f16 scale fields in a block: random bytes there would
# make infinities and NaNs, so they get sane values instead.
SCALE_OFFSETS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
                 Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
                 Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.MXFP4: []}
EXACT = (Q.F32, Q.F16, Q.BF16)
# MXFP4's value is one exact f32 product (a power of two times a small
# integer): bit for bit too, every E8M0 scale from 0 (subnormal) up.
BIT_EXACT = EXACT + (Q.MXFP4,)
SUPPORTED = EXACT + tuple(SCALE_OFFSETS)

failures = []


def random_tensor(qtype, rows, cols, rng):
    """Raw stored bytes (rows, row_bytes) of a random tensor."""
    if qtype == Q.F32:
        return rng.integers(0, 1 << 32, (rows, cols), dtype=np.uint32).view(np.uint8)
    if qtype == Q.F16:  # every bit pattern, NaNs and infinities included
        return np.arange(rows * cols, dtype=np.uint32).astype(np.uint16).reshape(
            rows, cols).view(np.uint8)
    if qtype == Q.BF16:
        return rng.integers(0, 1 << 16, (rows, cols), dtype=np.uint16).view(np.uint8)
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows * cols // bs, ts), dtype=np.uint8)
    if qtype == Q.MXFP4:  # scales 0..249: 2^121 x 12 stays finite
        blocks[:, 0] = rng.integers(0, 250, blocks.shape[0], dtype=np.uint8)
    for off in SCALE_OFFSETS[qtype]:
        d = rng.uniform(-2, 2, blocks.shape[0]).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, cols // bs * ts)


def compare(name, qtype, ours, ref):
    ours = ours.reshape(-1)
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    if ours.shape != ref.shape:
        failures.append(f"{name}: {ours.size} elements, reference has {ref.size}")
        return
    ob, rb = ours.view(np.uint32), ref.view(np.uint32)
    same = (ob == rb) | (np.isnan(ours) & np.isnan(ref))
    if qtype in BIT_EXACT:
        bad = ~same
    else:
        tol = 1e-6 * np.maximum(np.abs(ref).max(initial=0.0), 1e-30)
        bad = ~(np.abs(ours - ref) <= tol)
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        failures.append(f"{name} ({qtype.name}): {int(bad.sum())} of {ref.size} differ; "
                        f"first at {i.tolist()}: ours {ours[i].tolist()} ref {ref[i].tolist()}")
    return int((~same).sum())


def run_dump(dump, mode, path):
    return subprocess.Popen([dump, mode, path], stdout=subprocess.PIPE)


def check_infos(dump, path):
    out = subprocess.run([dump, "info", path], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    version, align, n_kv, n_t, data_off = map(int, lines[0].split())
    reader = gguf.GGUFReader(path)
    if n_t != len(reader.tensors) or len(lines) != n_t + 1:
        failures.append(f"{path}: {n_t} tensors, the reader sees {len(reader.tensors)}")
        return
    if n_kv != len(reader.fields) - 3:  # the reader adds 3 header pseudo-fields
        failures.append(f"{path}: {n_kv} metadata entries, the reader sees {len(reader.fields) - 3}")
    for line, t in zip(lines[1:], reader.tensors):
        name, ttype, nd, *rest = line.split()
        ne, off, nbytes = [int(x) for x in rest[:4]], int(rest[4]), int(rest[5])
        want = (t.name, int(t.tensor_type), len(t.shape), [int(x) for x in t.shape] +
                [1] * (4 - len(t.shape)), int(t.data_offset), int(t.n_bytes))
        got = (name, int(ttype), int(nd), ne, data_off + off, nbytes)
        if got != want:
            failures.append(f"tensor info {name}: ours {got}, reader {want}")


def synthetic(dump):
    rng = np.random.default_rng(1234)
    shapes = {Q.F16: (256, 256)}
    arrays = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "quants.gguf")
        w = gguf.GGUFWriter(path, "test")
        for qtype in SUPPORTED:
            rows, cols = shapes.get(qtype, (7, 512))  # several rows, two super-blocks each
            raw = random_tensor(qtype, rows, cols, rng)
            w.add_tensor(f"t.{qtype.name}", raw, raw_dtype=qtype)
            arrays.append((qtype, raw))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        check_infos(dump, path)
        out = subprocess.run([dump, "dequant", path], capture_output=True, check=True).stdout
        ours_all = np.frombuffer(out, dtype=np.float32)
        pos = 0
        for qtype, raw in arrays:
            ref = dequantize(raw, qtype)
            ours = ours_all[pos:pos + ref.size]
            pos += ref.size
            n = compare(f"synthetic {qtype.name}", qtype, ours, ref)
            print(f"{qtype.name:5s} {ref.size:6d} elements, {n} not bit-identical", file=sys.stderr)
        if pos != ours_all.size:
            failures.append(f"dump wrote {ours_all.size} floats, expected {pos}")


def model(dump):
    path = model_path()
    if not os.path.exists(path):
        print(f"skipped: no model at {path}", file=sys.stderr)
        return 77
    check_infos(dump, path)
    reader = gguf.GGUFReader(path)
    proc = run_dump(dump, "dequant", path)
    n_diff = n_elems = 0
    for t in reader.tensors:
        if t.tensor_type not in SUPPORTED:
            continue
        ref = dequantize(t.data, t.tensor_type)
        buf = proc.stdout.read(ref.size * 4)
        ours = np.frombuffer(buf, dtype=np.float32)
        if ours.size != ref.size:
            failures.append(f"{t.name}: dump ended early")
            break
        n_diff += compare(t.name, t.tensor_type, ours, ref) or 0
        n_elems += ref.size
    rest = proc.stdout.read()
    if proc.wait() != 0 or rest:
        failures.append(f"gguf_dump exit {proc.returncode}, {len(rest)} extra bytes")
    print(f"model: {len(reader.tensors)} tensors, {n_elems} elements, {n_diff} not "
          f"bit-identical", file=sys.stderr)
    return 0


def main():
    dump, mode = sys.argv[1], sys.argv[2]
    rc = synthetic(dump) if mode == "--synthetic" else model(dump)
    if rc == 77:
        return 77
    for f in failures[:20]:
        print("FAIL", f, file=sys.stderr)
    print(f"test_dequant {mode}: {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
