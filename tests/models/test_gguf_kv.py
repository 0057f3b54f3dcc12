#!/usr/bin/env python3
"""tests/models/test_gguf_kv.py: every metadata value our parser decodes,
against gguf.GGUFReader on the same file.

  test_gguf_kv.py GGUF_DUMP --synthetic  a file written by gguf.GGUFWriter
      with every scalar type at its extremes, arrays of every scalar type and
      of strings (empty, multi-byte UTF-8), v3
  test_gguf_kv.py GGUF_DUMP --model      all metadata of the real model
      (exit 77 when it is absent)

Compares key bytes, types, integer values exactly, floats bit for bit and
strings byte for byte, through `gguf_dump kv`.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGUFValueType as V

failures = []
NAMES = {V.UINT8: "uint8", V.INT8: "int8", V.UINT16: "uint16", V.INT16: "int16",
         V.UINT32: "uint32", V.INT32: "int32", V.FLOAT32: "float32", V.BOOL: "bool",
         V.STRING: "string", V.ARRAY: "array", V.UINT64: "uint64", V.INT64: "int64",
         V.FLOAT64: "float64"}


def model_path():
    p = os.environ.get("IGNITE_MODEL")
    if p:
        return p
    cache = os.environ.get("IGNITE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ignite")
    return os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")


def encode(vtype, part):
    """The reader's raw part for one value, in gguf_dump's notation."""
    if vtype == V.STRING:
        return "x" + part.tobytes().hex()
    if vtype == V.FLOAT32:
        return f"{int(part.view(np.uint32)[0]):08x}"
    if vtype == V.FLOAT64:
        return f"{int(part.view(np.uint64)[0]):016x}"
    return str(int(part[0]))


def expected_lines(path):
    reader = gguf.GGUFReader(path)
    out = []
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's header pseudo-fields
        t = f.types[0]
        line = ["x" + name.encode().hex(), NAMES[t]]
        if t == V.ARRAY:
            et = f.types[1] if len(f.types) > 1 else None
            if et is None:  # an empty array: the reader keeps no element type
                et = V(int(f.parts[-2][0]))
            line += [NAMES[et], str(len(f.data))]
            line += [encode(et, f.parts[i]) for i in f.data]
        else:
            line.append(encode(t, f.parts[f.data[0]]))
        out.append(" ".join(line))
    return out


def compare(dump, path):
    ours = subprocess.run([dump, "kv", path], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    want = expected_lines(path)
    if len(ours) != len(want):
        failures.append(f"{len(ours)} metadata entries, the reader has {len(want)}")
    for i, (a, b) in enumerate(zip(ours, want)):
        if a != b:
            failures.append(f"entry {i}: ours {a[:200]!r}\n      reader {b[:200]!r}")
    return len(want)


def synthetic(dump):
    ext = {V.UINT8: [0, 255], V.INT8: [-128, 127], V.UINT16: [0, 65535],
           V.INT16: [-32768, 32767], V.UINT32: [0, 2**32 - 1], V.INT32: [-2**31, 2**31 - 1],
           V.UINT64: [0, 2**64 - 1], V.INT64: [-2**63, 2**63 - 1],
           V.FLOAT32: [0.0, -0.0, 1e-45, 3.4028235e38, float("inf"), -1.5],
           V.FLOAT64: [5e-324, -1.7976931348623157e308, float("-inf"), 0.1],
           V.BOOL: [False, True], V.STRING: ["", "tab\there", "žluťoučký 🦙", "a" * 300]}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kv.gguf")
        w = gguf.GGUFWriter(path, "test")
        for t, vals in ext.items():
            for j, v in enumerate(vals):
                w.add_key_value(f"scalar.{t.name}.{j}", v, t)
            w.add_key_value(f"array.{t.name}", vals, V.ARRAY, sub_type=t)
        w.add_key_value("array.one_string", ["only"], V.ARRAY, sub_type=V.STRING)
        w.add_key_value("ключ.unicode", "value", V.STRING)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return compare(dump, path)


def main():
    dump, mode = sys.argv[1], sys.argv[2]
    if mode == "--synthetic":
        n = synthetic(dump)
    else:
        path = model_path()
        if not os.path.exists(path):
            print(f"skipped: no model at {path}", file=sys.stderr)
            return 77
        n = compare(dump, path)
    for f in failures[:20]:
        print("FAIL", f, file=sys.stderr)
    print(f"test_gguf_kv {mode}: {n} entries, {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
