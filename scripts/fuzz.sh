#!/usr/bin/env bash
# Fuzzes a parser of outside input with libFuzzer for SECONDS (default 600):
#   scripts/fuzz.sh [SECONDS] [TARGET]
# TARGET (seeds under tests/fuzz/):
#   gguf         the GGUF parser (the default; corpus/)
#   safetensors  the safetensors header parser (corpus_st/)
#   hf_json      the readers of config.json, tokenizer.json, tokenizer_config.json and
#                generation_config.json (corpus_json/)
#   grammar      the GBNF parser (fuzz_grammar.c; corpus_grammar/)
#   schema       the JSON-schema converter (fuzz_grammar.c with FUZZ_SCHEMA; corpus_schema/)
#   batch        ignite batch's request parser (fuzz_batch_line.c; corpus_batch/)
#   tokenizer    the tokenizer: any bytes in (fuzz_tokenizer.c; corpus-tok/)
#   jinja        the Jinja chat-template renderer (fuzz_jinja.c; corpus_jinja/)
#   klfile       the perplexity base file reader (fuzz_klfile.c; corpus_klfile/)
#   kvfile       the saved KV cache reader, --load-kv (fuzz_kvfile.c; corpus_kvfile/)
# Builds the target's entry and the sources of ignite_core it needs with
# clang -fsanitize=fuzzer,address,undefined into $FUZZ_BUILD (default
# build-fuzz/): which sources, scripts/fuzz_sources.py reads from the objects
# of the build in $IGNITE_BUILD_DIR (default build/; build ignite first), so
# no list here follows CMake's. It writes new inputs to
# $FUZZ_BUILD/corpus-run-TARGET/ (the committed corpus stays as it is). A
# crash leaves its input in $FUZZ_BUILD/crash-* and exits non-zero.
# Exits 77 (skipped) when clang or libFuzzer is not available. FUZZ_SEED
# fixes libFuzzer's seed (ctest sets 1; unset: a new seed each run).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
target=${2:-gguf}
out=${FUZZ_BUILD:-$root/build-fuzz}
build=${IGNITE_BUILD_DIR:-$root/build}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found; skipped" >&2
    exit 77
fi
run="$out/corpus-run-$target"
mkdir -p "$run"
probe="$out/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer "$probe" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot link libFuzzer (-fsanitize=fuzzer); skipped" >&2
    exit 77
fi
rm -f "$probe" "$out/probe"

defs=() entry=tests/fuzz/fuzz_$target.c
case "$target" in
gguf)        corpus=corpus max_len=65536 ;;
safetensors) corpus=corpus_st max_len=65536 ;;
hf_json)     corpus=corpus_json max_len=262144 ;;
grammar|schema)
    entry=tests/fuzz/fuzz_grammar.c corpus=corpus_$target max_len=8192
    [ "$target" = schema ] && defs=(-DFUZZ_SCHEMA) ;;
batch)       entry=tests/fuzz/fuzz_batch_line.c corpus=corpus_batch max_len=65536 ;;
tokenizer)   corpus=corpus-tok max_len=4096 ;;
jinja)       corpus=corpus_jinja max_len=16384 ;;
klfile)      corpus=corpus_klfile max_len=65536 ;;
kvfile)      corpus=corpus_kvfile max_len=65536 ;;
*)
    echo "fuzz: unknown target '$target' (gguf, safetensors, hf_json, grammar, schema, batch, tokenizer, jinja, klfile, kvfile)" >&2
    exit 2 ;;
esac
flags=(-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root")
"$cc" "${flags[@]}" "${defs[@]}" -c "$root/$entry" -o "$out/entry.o"
# The library sources the entry needs: what a link against ignite_core
# pulls in, read from the build's objects (CMake's list, no copy here).
list=$(python3 "$root/scripts/fuzz_sources.py" "$build" "$out/entry.o") || exit 2
mapfile -t srcs <<<"$list"
"$cc" "${flags[@]}" "${srcs[@]/#/$root/}" "$out/entry.o" -lcjson -lm -o "$out/fuzz_$target"

echo "fuzz: running $out/fuzz_$target for ${secs}s" >&2
"$out/fuzz_$target" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    ${FUZZ_SEED:+-seed="$FUZZ_SEED"} \
    -print_final_stats=1 -artifact_prefix="$out/" \
    "$run" "$root/tests/fuzz/$corpus"
