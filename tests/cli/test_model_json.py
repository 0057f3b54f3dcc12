"""tests/cli/test_model_json.py: the keys that name the model in JSON
output, alike in every command: run --json, each line of `ignite batch`
(results and errors), bench -o json and bench --requests carry
model_filename (the path as given), model_arch and model_type (bench's
"<arch> <params> <type>"). On a tiny f32 model made by
tests/pylib/ggufgen.py and bench's synthetic model: no download, seconds."""
import json
import os
import subprocess
import tempfile

import ggufgen
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]
KEYS = ("model_filename", "model_arch", "model_type")


def tiny_model():
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",), mat_type=ggufgen.T_F32,
                           emb_type=ggufgen.T_F32)
    return g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2").build()


def ignite(*args, stdin=b""):
    r = subprocess.run([IGNITE, *args], input=stdin, capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def objects(what, out):
    objs = []
    for line in out.splitlines():
        try:
            objs.append(json.loads(line))
        except ValueError:
            check(False, f"{what}: a line is not JSON: {line[:200]!r}")
    return objs


def names(obj):
    return tuple(obj.get(k) for k in KEYS)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.gguf")
        with open(tiny, "wb") as f:
            f.write(tiny_model())

        rc, out, err = ignite("run", "-m", tiny, "-t", "1", "-p", "abc", "-n", "3", "--json", "-q")
        objs = objects("run --json", out)
        check(rc == 0 and len(objs) == 1, f"run --json: rc {rc}, {len(objs)} objects: {err}")
        run = names(objs[0]) if objs else (None,) * 3
        check(run[0] == tiny, f"run: model_filename {run[0]!r}, want {tiny!r}")
        check(run[1] == "llama", f"run: model_arch {run[1]!r}")
        check(isinstance(run[2], str) and run[2].startswith("llama ") and run[2].endswith(" F32"),
              f"run: model_type {run[2]!r}")

        # a result line and an error line (a request without a prompt)
        reqs = b'{"prompt": "abc", "n_predict": 2}\n{"n_predict": 2}\n'
        rc, out, err = ignite("batch", "-m", tiny, "-t", "1", stdin=reqs)
        lines = objects("batch", out)
        check(len(lines) == 2, f"batch: {len(lines)} lines, want 2: {out[:300]} {err}")
        check(any("error" in o for o in lines), f"batch: no error line: {lines}")
        for o in lines:
            check(names(o) == run, f"batch line {o.get('line')}: {names(o)}, run's {run}")

    model = "synthetic:SmolLM2-135M:Q4_1"
    rc, out, err = ignite("bench", "-m", model, "-r", "1", "-t", "1", "-p", "8", "-n", "0",
                          "-o", "jsonl")
    rows = objects("bench -o jsonl", out)
    check(rc == 0 and len(rows) == 1, f"bench: rc {rc}, {len(rows)} rows: {err}")
    for o in rows:
        check(o.get("model_filename") == model and o.get("model_arch") == "llama" and
              o.get("model_type", "").startswith("llama ") and o["model_type"].endswith(" Q4_1"),
              f"bench row: {names(o)}")
    bench_type = rows[0].get("model_type") if rows else None

    rc, out, err = ignite("bench", "-m", model, "-t", "1", "--requests", "2", "--input-len", "4",
                          "--output-len", "2", "-o", "json")
    try:
        objs = json.loads(out)  # one array, as bench's json rows
    except ValueError:
        objs = []
    check(rc == 0 and len(objs) == 1, f"bench --requests: rc {rc}: {out[:300]} {err}")
    for o in objs:
        check(names(o) == (model, "llama", bench_type),
              f"bench --requests: {names(o)}, bench's type {bench_type!r}")
    return summary("test_model_json")


if __name__ == "__main__":
    raise SystemExit(main())
