#!/usr/bin/env python3
"""tests/models/test_hf_malformed.py: broken Hugging Face folders are refused
with one line on stderr naming the file and the problem, and the documented
exit status (4 for a malformed or unsupported model, 3 for I/O); never a
crash. Each case starts from a valid tiny folder (tests/pylib/hfgen.py),
breaks one thing, and runs `ignite info`, `ignite tokenize` or `ignite run`
on it. The safetensors cases write the bytes by hand (one lie each: header
size, offsets, overlap, hole, dtype, shape x dtype, duplicate name, bad
UTF-8, trailing bytes). Label: unit."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import hfgen
from igtest import check, summary

BIN = os.environ.get("IGNITE_BIN", "build/ignite")


def expect(folder, status, *needles, cmd="info"):
    args = {"info": ["info", "-m", folder],
            "tokenize": ["tokenize", "-m", folder, "-p", "hi"],
            "run": ["run", "-m", folder, "-p", "hi", "-n", "1", "-q"]}[cmd]
    r = subprocess.run([BIN] + args, capture_output=True, text=True)
    err = r.stderr.strip()
    what = f"{cmd} {os.path.basename(folder)}"
    check(r.returncode == status, f"{what}: exit {r.returncode}, expected {status}: {err}")
    check(len(err.splitlines()) == 1 and err.startswith("ignite: "),
          f"{what}: expected one 'ignite: ' line on stderr, got {err!r}")
    for n in needles:
        check(n in err, f"{what}: {n!r} not in {err!r}")
    # the file or folder it is about first, quoted as docs/cli.md says
    check("'" + folder in err and (folder + " " not in err and folder + ":" not in err and
                                   folder + "/" not in err.replace("'" + folder + "/", "")),
          f"{what}: the path not quoted: {err!r}")
    check(r.stdout == "", f"{what}: wrote to stdout: {r.stdout[:80]!r}")


class Case:
    """A fresh copy of the valid folder to break."""

    def __init__(self, base, tmp, name):
        self.path = os.path.join(tmp, name)
        shutil.copytree(base, self.path)

    def file(self, name):
        return os.path.join(self.path, name)

    def edit_json(self, name, fn):
        with open(self.file(name)) as f:
            j = json.load(f)
        fn(j)
        with open(self.file(name), "w") as f:
            json.dump(j, f)
        return self

    def write(self, name, data):
        with open(self.file(name), "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return self


def st_cases(c):
    """(name, image, words the message must hold) for lying safetensors."""
    f32 = np.arange(4, dtype=np.float32).tobytes()
    good = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    raw = hfgen.raw_safetensors
    return [
        ("empty", b"", "too small"),
        ("header size past the end", raw(good, f32, size=1000), "truncated: the header takes"),
        ("absurd header size", raw(good, f32, size=1 << 40), "over the"),
        ("data cut short", raw(good, f32[:10]), "truncated: tensor 'a'"),
        ("not JSON", raw(b"{\"a\": [", f32), "not valid JSON"),
        ("not an object", raw(b"[1, 2]     ", f32), "does not start with '{'"),
        ("trailing bytes", raw(json.dumps(good).encode() + b" x", f32), "after its JSON"),
        ("bad UTF-8", raw(b"{\"\xff\": 1}", f32), "UTF-8"),
        ("unknown dtype", raw({"a": dict(good["a"], dtype="F7")}, f32), "unknown dtype 'F7'"),
        ("shape x dtype lies", raw({"a": dict(good["a"], shape=[3, 2])}, f32), "make 24 bytes"),
        ("offsets reversed", raw({"a": dict(good["a"], data_offsets=[16, 0])}, f32), "end before"),
        ("offset not a number", raw({"a": dict(good["a"], data_offsets=[0, "16"])}, f32),
         "data_offsets"),
        ("negative dim", raw({"a": dict(good["a"], shape=[-2, -2])}, f32), "shape[0]"),
        ("overlap", raw({"a": good["a"], "b": {"dtype": "F32", "shape": [2],
                                               "data_offsets": [8, 16]}}, f32), "overlap"),
        ("hole", raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, f32),
         "belong to no tensor"),
        ("bytes after the data", raw({"a": {"dtype": "F32", "shape": [2],
                                            "data_offsets": [0, 8]}}, f32), "after the last"),
        ("duplicate name", raw(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                               b'"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}',
                               f32), "appears twice"),
        ("metadata not strings", raw(dict(good, __metadata__={"x": 1}), f32), "__metadata__"),
    ]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        base = hfgen.write_tiny(os.path.join(tmp, "base"))
        shard = hfgen.write_tiny(os.path.join(tmp, "shard"), shards=2)
        r = subprocess.run([BIN, "info", "-m", base], capture_output=True, text=True)
        check(r.returncode == 0, f"the valid folder fails: {r.stderr}")
        n = [0]

        def case(src=base):
            n[0] += 1
            return Case(src, tmp, f"case{n[0]}")

        # files missing, or not files
        c = case()
        os.remove(c.file("config.json"))
        expect(c.path, 4, "config.json is missing")
        c = case()
        os.remove(c.file("tokenizer.json"))
        expect(c.path, 4, "tokenizer.json is missing")
        expect(c.path, 4, "tokenizer.json is missing", cmd="tokenize")
        c = case()
        os.remove(c.file("model.safetensors"))
        expect(c.path, 4, "no weights")
        c = case()
        os.remove(c.file("model.safetensors"))
        c.write("pytorch_model.bin", b"PK\x03\x04 pickle")
        expect(c.path, 4, "pickle")
        c = case()
        os.remove(c.file("config.json"))
        os.mkdir(c.file("config.json"))
        expect(c.path, 3, "config.json", "not a regular file")

        c = case()
        os.remove(c.file("model.safetensors"))
        os.symlink("model.safetensors", c.file("model.safetensors"))  # a loop: there, unreadable
        expect(c.path, 3, "model.safetensors", "Too many levels of symbolic links")

        # bad JSON in each file
        for name, cmd in [("config.json", "info"), ("tokenizer.json", "tokenize"),
                          ("tokenizer_config.json", "info"), ("generation_config.json", "info")]:
            c = case()
            c.write(name, '{"a": 1,\n  "b": }')
            expect(c.path, 4, name, "invalid JSON at line 2", cmd=cmd)

        # a key twice: cJSON would keep both and take the first unsaid
        c = case()
        with open(c.file("config.json")) as f:
            text = f.read()
        c.write("config.json", text.replace("{", '{"num_hidden_layers": 1000, ', 1))
        expect(c.path, 4, "config.json", "key \"num_hidden_layers\" appears twice")

        # config.json: unsupported or inconsistent
        for what, fn, needles in [
            ("architecture", lambda j: j.update(architectures=["GPTNeoXForCausalLM"]),
             ["architecture 'GPTNeoXForCausalLM' is not supported", "LlamaForCausalLM"]),
            ("no architectures", lambda j: j.pop("architectures"), ["'architectures' is missing"]),
            ("quantized", lambda j: j.update(quantization_config={"quant_method": "gptq"}),
             ["quantized", "gptq"]),
            ("rope scaling", lambda j: j.update(rope_scaling={"rope_type": "dynamic", "factor": 8.0}),
             ["rope_scaling type 'dynamic' is not supported"]),
            ("llama3 scaling without its keys",
             lambda j: j.update(rope_scaling={"rope_type": "llama3", "factor": 8.0}),
             ["rope_scaling 'llama3' needs 'low_freq_factor'"]),
            ("llama3 scaling, bands crossed",
             lambda j: j.update(rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                              "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                                              "original_max_position_embeddings": 8192}),
             ["rope_scaling 'llama3' needs", "0 < low_freq_factor < high_freq_factor"]),
            ("activation", lambda j: j.update(hidden_act="gelu"), ["hidden_act 'gelu'"]),
            ("attention bias", lambda j: j.update(attention_bias=True), ["attention_bias"]),
            ("missing hidden_size", lambda j: j.pop("hidden_size"), ["'hidden_size' is missing"]),
            ("heads", lambda j: j.update(num_key_value_heads=3), ["not a multiple of 3 KV heads"]),
            ("fraction", lambda j: j.update(num_hidden_layers=1.5), ["'num_hidden_layers' must"]),
            ("eps", lambda j: j.update(rms_norm_eps=-1), ["'rms_norm_eps' must be a positive"]),
            ("wrong shape", lambda j: j.update(intermediate_size=128),
             ["model.layers.0.mlp.gate_proj.weight", "has shape [96, 64]", "[128, 64]"]),
            ("untied without lm_head", lambda j: j.update(tie_word_embeddings=False),
             ["'lm_head.weight' is missing"]),
            ("too many layers", lambda j: j.update(num_hidden_layers=3),
             ["'model.layers.2.input_layernorm.weight' is missing"]),
        ]:
            c = case().edit_json("config.json", fn)
            expect(c.path, 4, "config.json" if what not in ("wrong shape", "untied without lm_head",
                                                           "too many layers") else "",
                   *needles)

        # generation_config.json out of range
        c = case().write("generation_config.json", '{"top_p": 3}')
        expect(c.path, 4, "generation_config.json", "'top_p' must be")

        # tokenizer.json: unknown pieces are named
        for what, fn, needles in [
            ("model type", lambda j: j["model"].update(type="Unigram"),
             ["tokenizer model type 'Unigram' is not supported"]),
            ("regex", lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\w+|\\s+"}, "behavior": "Isolated",
                 "invert": False}, {"type": "ByteLevel", "use_regex": False}]}),
             ["Split with regex '\\w+|\\s+' matches none"]),
            ("normalizer", lambda j: j.update(normalizer={"type": "Lowercase"}),
             ["normalizer 'Lowercase'"]),
            ("pre-tokenizer", lambda j: j.update(pre_tokenizer={"type": "Whitespace"}),
             ["pre-tokenizer 'Whitespace'"]),
            ("vocab", lambda j: j["model"].update(vocab=[1, 2]), ["model.vocab must be"]),
            ("merges", lambda j: j["model"].update(merges=[["a"]]), ["merge 0 is not a pair"]),
            # ids size the vocabulary: one far past the file's entries is refused, not
            # allocated (fuzz_hf_json found ids near 1e9 taking 20 GiB)
            ("huge id", lambda j: j["model"]["vocab"].update({"zz": 940446524}),
             ["token id 940446524 of 'zz' is past the"]),
            ("huge added id", lambda j: j["added_tokens"].append(
                {"id": 1 << 29, "content": "<x>", "special": True}),
             [f"token id {1 << 29} of '<x>' is past the"]),
            ("long token", lambda j: j["added_tokens"].append(
                {"id": 0, "content": "x" * 20000, "special": True}), ["over the 16384-byte limit"]),
        ]:
            c = case().edit_json("tokenizer.json", fn)
            expect(c.path, 4, "tokenizer.json", *needles, cmd="tokenize")
            expect(c.path, 4, "tokenizer.json", *needles, cmd="run")

        # weights: a wrong dtype, a missing tensor, lying safetensors files
        c = case()
        cfg, t = hfgen.read_folder(c.path)
        t["model.norm.weight"] = t["model.norm.weight"].astype(np.int32)
        from safetensors.numpy import save_file
        save_file(t, c.file("model.safetensors"))
        expect(c.path, 4, "model.norm.weight", "dtype I32")
        c = case()
        t.pop("model.norm.weight")
        save_file(t, c.file("model.safetensors"))
        expect(c.path, 4, "tensor 'model.norm.weight' is missing")
        for what, image, needle in st_cases(c):
            c = case().write("model.safetensors", image)
            expect(c.path, 4, "model.safetensors':", needle)
        c = case()
        with open(c.file("model.safetensors"), "r+b") as f:
            f.truncate(os.path.getsize(c.file("model.safetensors")) - 100)
        expect(c.path, 4, "model.safetensors': truncated")

        # sharded folders: the index must match the files
        idx = "model.safetensors.index.json"
        c = case(shard)
        os.remove(c.file("model-00002-of-00002.safetensors"))
        expect(c.path, 4, "model-00002-of-00002.safetensors is missing")
        c = case(shard).edit_json(idx, lambda j: j["weight_map"].update(
            {"model.norm.weight": "../model.safetensors"}))
        expect(c.path, 4, idx, "not a .safetensors file of the folder")
        c = case(shard)
        wm = json.load(open(c.file(idx)))["weight_map"]
        moved = next(k for k, v in wm.items() if v.startswith("model-00001"))
        c.edit_json(idx, lambda j: j["weight_map"].update({moved: "model-00002-of-00002.safetensors"}))
        expect(c.path, 4, idx, f"'{moved}' in 'model-00002-of-00002.safetensors', which does not")
        c = case(shard).write(idx, '{"weight_map": {}}')
        expect(c.path, 4, idx, "weight_map")
        c = case(shard)
        shutil.copy(c.file("model-00001-of-00002.safetensors"), c.file("model-00003-of-00002.safetensors"))
        c.edit_json(idx, lambda j: j["weight_map"].update({moved: "model-00003-of-00002.safetensors"}))
        expect(c.path, 4, "is in two safetensors files")
    return summary("test_hf_malformed")


if __name__ == "__main__":
    sys.exit(main())
