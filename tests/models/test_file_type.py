#!/usr/bin/env python3
"""tests/models/test_file_type.py: the weights' type is named as llama-bench
names it, so tables put side by side agree: `bench`'s model_type ends with,
and `info`'s file_type (text and --json) is, llama.cpp's name of the file's
general.file_type, read here with the gguf package's value types (a walk
over the key-value pairs up to that key: GGUFReader takes 15 s over Gemma's
262k-token vocabulary). The names are llama.cpp's
llama_ftype_name strings keyed by the gguf package's LlamaFileType names (not
ignite's table). Gemma 3 270M Q4_K_M is the case that read Q5_0 before (the
type of most of its tensors). A synthetic model, which has no file type,
keeps its weights' type. Exit 77 when neither fetched model is there."""
import json
import os
import struct
import subprocess
import sys

import gguf
from igtest import check, gemma3_path, model_path, summary

BIN = os.environ.get("IGNITE_BIN", "build/ignite")
LLAMA_NAMES = {"ALL_F32": "all F32", "MOSTLY_F16": "F16", "MOSTLY_BF16": "BF16",
               "MOSTLY_Q4_0": "Q4_0", "MOSTLY_Q4_1": "Q4_1", "MOSTLY_Q5_0": "Q5_0",
               "MOSTLY_Q5_1": "Q5_1", "MOSTLY_Q8_0": "Q8_0", "MOSTLY_Q6_K": "Q6_K",
               "MOSTLY_Q4_K_S": "Q4_K - Small", "MOSTLY_Q4_K_M": "Q4_K - Medium",
               "MOSTLY_Q5_K_S": "Q5_K - Small", "MOSTLY_Q5_K_M": "Q5_K - Medium"}


def file_type(path):
    """general.file_type of a GGUF, or None: the header's key-value pairs
    read in order, each value skipped by its gguf.GGUFValueType size."""
    T = gguf.GGUFValueType
    fixed = {T.UINT8: 1, T.INT8: 1, T.BOOL: 1, T.UINT16: 2, T.INT16: 2, T.UINT32: 4,
             T.INT32: 4, T.FLOAT32: 4, T.UINT64: 8, T.INT64: 8, T.FLOAT64: 8}
    with open(path, "rb") as f:
        def u(n):
            return int.from_bytes(f.read(n), "little")

        def skip(t):
            if t == T.STRING:
                f.seek(u(8), 1)
            elif t == T.ARRAY:
                et, n = T(u(4)), u(8)
                if et in fixed:
                    f.seek(fixed[et] * n, 1)
                else:
                    for _ in range(n):
                        skip(et)
            else:
                f.seek(fixed[t], 1)

        magic, _version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            return None
        for _ in range(n_kv):
            key = f.read(u(8)).decode()
            t = T(u(4))
            if key == "general.file_type":
                return u(fixed[t])
            skip(t)
    return None


def run(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{args}: rc {r.returncode} {r.stderr[-300:]!r}")
    return r.stdout


def main():
    paths = [p for p in (model_path(), gemma3_path()) if os.path.exists(p)]
    if not paths:
        print("skipped: no fetched model", file=sys.stderr)
        return 77
    for path in paths:
        ft = file_type(path)
        check(ft is not None, f"{path}: no general.file_type")
        if ft is None:
            continue
        want = LLAMA_NAMES.get(gguf.LlamaFileType(ft).name)
        check(want is not None, f"{path}: file type {ft} not in this test's table")
        try:
            info = json.loads(run("info", "-m", path, "--json"))
        except ValueError:
            info = {}
        check(info.get("file_type") == want,
              f"{path}: info --json file_type {info.get('file_type')!r}, llama.cpp {want!r}")
        text = run("info", "-m", path)
        check(f"file type       {want}\n" in text, f"{path}: info text {text[:400]!r}")
        out = run("bench", "-m", path, "-t", "1", "-p", "0", "-n", "1", "-r", "1", "-o", "jsonl")
        mt = json.loads(out.splitlines()[0]).get("model_type", "") if out.strip() else ""
        check(mt.endswith(" " + want), f"{path}: bench model_type {mt!r}, llama.cpp {want!r}")
    out = run("bench", "-m", "synthetic:Llama-tiny:Q8_0", "-t", "1", "-p", "0", "-n", "1", "-r",
              "1", "-o", "jsonl")
    mt = json.loads(out.splitlines()[0]).get("model_type", "") if out.strip() else ""
    check(mt.endswith(" Q8_0"), f"synthetic Q8_0: bench model_type {mt!r}")
    return summary("test_file_type")


if __name__ == "__main__":
    sys.exit(main())
