#!/usr/bin/env bash
# bench/llamacpp_greedy.sh: makes tests/cpu/golden_llamacpp.json, llama.cpp's
# greedy token ids on a few prompts, for tests/cpu/test_greedy_llamacpp.py.
# Run it by hand when the model or the prompts change; CI only reads the JSON.
#
#   bench/llamacpp_greedy.sh [BUILD]     (BUILD: ignite build dir, default build)
#
# Needs llama.cpp's source (headers) and a CPU build of it (static libs), as
# left in ~/.cache/ignite/ by the llama-cpp-python 0.3.36 sdist; override with
# LLAMA_SRC / LLAMA_BUILD. Prompt ids come from `ignite tokenize`, so both
# engines start from the same ids; the driver binary goes to the cache.
#
# Each prompt runs twice: on the Q4_1 model (llama.cpp then quantizes the
# activations to 8 bits in its matmuls, so its logits drift from ignite's
# f32 ones) and on an f32 twin of it, every tensor dequantized by the gguf
# package (made here, in the cache). The twin is the same function as the
# Q4_1 model in exact arithmetic, and llama.cpp runs it without activation
# quantization: that run is the one ignite must match exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CACHE=~/.cache/ignite
MODEL=${IGNITE_MODEL:-$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf}
LLAMA_VERSION=0.3.36
LLAMA_SRC=${LLAMA_SRC:-$CACHE/llama-src/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-$CACHE/llama.cpp-build/$LLAMA_VERSION}
DRIVER=$CACHE/llamacpp-greedy/llamacpp_greedy
TWIN=$CACHE/llamacpp-greedy/$(basename "$MODEL" .gguf).deq-f32.gguf
N_GEN=32

# The build was configured with GGML_OPENMP=ON, hence -fopenmp.
mkdir -p "$(dirname "$DRIVER")"
g++ -O2 -std=c++17 -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
    bench/llamacpp_greedy.cpp -o "$DRIVER" \
    "$LLAMA_BUILD/src/libllama.a" "$LLAMA_BUILD/ggml/src/libggml.a" \
    "$LLAMA_BUILD/ggml/src/libggml-cpu.a" "$LLAMA_BUILD/ggml/src/libggml-base.a" \
    -fopenmp -lpthread -ldl -lm

if [ ! -f "$TWIN" ]; then
    .venv/bin/python - "$MODEL" "$TWIN" <<'PY'
# Writes an f32 twin of a GGUF: every tensor dequantized by the gguf package,
# all metadata copied (file_type set to ALL_F32).
import sys
import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType, LlamaFileType
from gguf.quants import dequantize
src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
w = GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    if name == "general.file_type":
        w.add_file_type(LlamaFileType.ALL_F32)
        continue
    sub = f.types[1] if f.types[0] == GGUFValueType.ARRAY else None
    w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
for t in r.tensors:
    w.add_tensor(t.name, dequantize(t.data, t.tensor_type).astype(np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
fi

# name and text; the chat prompt is SmolLM2's ChatML with its default system line.
NAMES=(chat story code fact)
TEXTS=(
$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
'Once upon a time, in a small village at the edge of a forest, there lived'
$'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
'The Eiffel Tower is located in Paris and was completed in the year'
)

OUT=tests/cpu/golden_llamacpp.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for i in "${!NAMES[@]}"; do
    ids=$("$BUILD/ignite" tokenize -m "$MODEL" -p "${TEXTS[$i]}" | paste -sd,)
    echo "$ids" > "$TMP/$i.ids"
    "$DRIVER" "$MODEL" "$N_GEN" "$ids" > "$TMP/$i.out"
    "$DRIVER" "$TWIN" "$N_GEN" "$ids" > "$TMP/$i.f32"
done

SHA=$(sha256sum "$MODEL" | cut -d' ' -f1)
python3 - "$TMP" "$OUT" "$SHA" "llama-cpp-python $LLAMA_VERSION (vendored llama.cpp), CPU, f32 KV, no flash attention" "${NAMES[@]}" <<'PY'
import json, re, sys
tmp, out, sha, version, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]


def run(path):
    """One driver output: ids, top1 - top2 margins, top-2 ids, both logits."""
    rows = [line.split() for line in open(path)]
    return {"ids": [int(r[0]) for r in rows],
            "margins": [round(float(r[1]), 4) for r in rows],
            "top2_ids": [int(r[2]) for r in rows],
            "top_logits": [[round(float(r[3]), 4), round(float(r[4]), 4)] for r in rows]}


prompts = []
for i, name in enumerate(names):
    ids = [int(t) for t in open(f"{tmp}/{i}.ids").read().strip().split(",")]
    prompts.append({"name": name, "prompt_ids": ids, "q4_1": run(f"{tmp}/{i}.out"),
                    "f32_twin": run(f"{tmp}/{i}.f32")})
doc = {"model_sha256": sha, "llama_cpp": version, "n_gen": len(prompts[0]["q4_1"]["ids"]),
       "generated_by": "bench/llamacpp_greedy.sh",
       "f32_twin": "the model with every tensor dequantized to f32 by gguf.quants", "prompts": prompts}
# One line per flat list, so a regenerated file diffs readably.
text = re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))),
              json.dumps(doc, indent=1))
with open(out, "w") as f:
    f.write(text + "\n")
print(f"wrote {out}: {len(prompts)} prompts x {doc['n_gen']} tokens")
PY
