#!/usr/bin/env python3
"""llama.cpp's own tokenizer test vectors: models/ggml-vocab-NAME.gguf with
NAME.gguf.inp (texts separated by "\\n__ggml_vocab_test__\\n") and
NAME.gguf.out (the ids, one line per text, made by Hugging Face's
tokenizers for each vocabulary), from the llama.cpp source in the cache
(scripts/fetch-model.sh llama-src; $LLAMA_SRC overrides). As llama.cpp's
test-tokenizer-0 reads them: no BOS, special-token text not parsed.

Every vocabulary with vectors must match them all, except the ones in
REFUSED, which ignite must refuse in one line (exit 4) instead: bert-bge, a
WordPiece embedding model. A vocabulary that starts passing or failing
otherwise fails the test. Gemma 4's vocabulary (UTF-8 BPE) is also checked
on the whole corpus against HF tokenizers set up as its tokenizer.json is
(BPE over its merges with byte fallback, spaces replaced by U+2581, the
user-defined tokens added), and `ignite tokenize` must read the file
although `run` does not know the gemma4 architecture.
Labels: tokenizer, model (exits 77 without the llama.cpp source)."""
import glob
import os
import subprocess
import sys

import corpus
from igtest import cache_dir

LLAMA_VERSION = "0.3.36"
REFUSED = {"bert-bge": "tokenizer: unsupported tokenizer model 'bert'"}
SEP = b"\n__ggml_vocab_test__\n"


def source_dir():
    src = os.environ.get("LLAMA_SRC") or os.path.join(
        cache_dir(), "llama-src", f"llama_cpp_python-{LLAMA_VERSION}", "vendor", "llama.cpp")
    return src if os.path.isdir(os.path.join(src, "models")) else None


def read_vectors(inp, out):
    with open(inp, "rb") as f:
        texts = f.read().split(SEP)
    with open(out, "rb") as f:
        ids = [[int(t) for t in line.split()] for line in f.read().decode().split("\n")]
    if ids and ids[-1] == [] and len(ids) == len(texts) + 1:
        ids.pop()  # the file's last newline
    if len(texts) != len(ids):
        raise SystemExit(f"{inp}: {len(texts)} texts but {len(ids)} id lines")
    return texts, ids


def check_gemma4_hf(path):
    """ignite's ids for Gemma 4's vocabulary equal HF's on the corpus."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, models, normalizers
    f = GGUFReader(path).fields
    toks = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)},
                              [tuple(m.split(" ", 1)) for m in merges], byte_fallback=True))
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.add_tokens([AddedToken(toks[i], special=False, normalized=False)
                   for i in range(len(toks)) if types[i] == 4])  # user-defined
    records = [r for r in corpus.load() if corpus.is_valid(r)] + corpus.random_strings(3000, 3)
    out = corpus.run_tool(["encode", path, "--no-bos", "--no-special"], records)
    bad = 0
    for rec, line in zip(records, out):
        ours = [int(x) for x in line.split()[2:]]
        want = tk.encode(rec.decode("utf-8"), add_special_tokens=False).ids
        if ours != want:
            bad += 1
            if bad <= 3:
                i = corpus.first_diff(ours, want)
                print(f"  gemma-4 vs HF: {rec[:60]!r}: ids differ at {i}: ours {ours[i:i + 6]}, "
                      f"HF {want[i:i + 6]}")
    print(f"{'ok' if not bad else 'FAIL':6} gemma-4 against HF tokenizers: {len(records)} "
          f"strings, {bad} differ")
    bin_ = os.environ.get("IGNITE_BIN", "build/ignite")
    r = subprocess.run([bin_, "tokenize", "-m", path, "--no-bos", "-p", "Hello world"],
                       capture_output=True, text=True, timeout=60)
    want = tk.encode("Hello world", add_special_tokens=False).ids
    if r.returncode != 0 or [int(x) for x in r.stdout.split()] != want:
        bad += 1
        print(f"FAIL ignite tokenize on the gemma4 file: exit {r.returncode}, {r.stdout!r} "
              f"{r.stderr.strip()!r}, want {want}")
    return bad == 0


def main():
    src = source_dir()
    if not src:
        print("skip: no llama.cpp source (scripts/fetch-model.sh llama-src)")
        return 77
    failed, passed, vectors = [], [], 0
    for inp in sorted(glob.glob(os.path.join(src, "models", "ggml-vocab-*.gguf.inp"))):
        path = inp[:-4]
        name = os.path.basename(path)[len("ggml-vocab-"):-len(".gguf")]
        texts, want = read_vectors(inp, path + ".out")
        if name in REFUSED:
            r = subprocess.run([corpus.tool_path(), "encode", path, "--no-bos", "--no-special"],
                               input=b"", capture_output=True)
            err = r.stderr.decode(errors="replace")
            if r.returncode != 4 or REFUSED[name] not in err or len(err.splitlines()) != 1:
                failed.append(name)
                print(f"FAIL {name}: expected a one-line refusal ({REFUSED[name]!r}), got exit "
                      f"{r.returncode}: {err.strip()!r}")
            else:
                print(f"ok     {name}: refused ({err.strip()})")
            continue
        p = subprocess.run([corpus.tool_path(), "encode", path, "--no-bos", "--no-special"],
                           input=b"".join(b"%d\n" % len(t) + t for t in texts),
                           capture_output=True)
        if p.returncode != 0:
            failed.append(name)
            print(f"FAIL {name}: tok_tool exit {p.returncode}: "
                  f"{p.stderr.decode(errors='replace').strip()}")
            continue
        lines = p.stdout.decode().split("\n")[:-1]
        bad = 0
        for text, ids, line in zip(texts, want, lines):
            ours = [int(x) for x in line.split()[2:]]
            if ours != ids:
                bad += 1
                if bad <= 3:
                    i = corpus.first_diff(ours, ids)
                    print(f"  {name}: {text[:60]!r}: ids differ at {i}: ours {ours[i:i + 6]}, "
                          f"llama.cpp/HF {ids[i:i + 6]}")
        vectors += len(texts)
        if bad:
            failed.append(name)
            print(f"FAIL {name}: {bad} of {len(texts)} vectors differ")
        elif name == "gemma-4" and not check_gemma4_hf(path):
            failed.append(name)
        else:
            passed.append(name)
            print(f"ok     {name}: {len(texts)} vectors")
    print(f"test_llamacpp_vocab: {len(passed)} vocabularies ({vectors} vectors) pass, "
          f"{len(REFUSED)} refused as expected unless listed: failed {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
