#!/usr/bin/env bash
# Fuzzes a parser with libFuzzer for SECONDS (default 600):
#   scripts/fuzz.sh [SECONDS] [TARGET]
# TARGET: gguf (default; tests/fuzz/fuzz_gguf.c, seeds tests/fuzz/corpus/),
# grammar (GBNF, tests/fuzz/fuzz_grammar.c, seeds tests/fuzz/corpus_grammar/)
# or schema (JSON schemas, the same file with FUZZ_SCHEMA, seeds
# tests/fuzz/corpus_schema/). Builds with clang
# -fsanitize=fuzzer,address,undefined into $FUZZ_BUILD (default build-fuzz/)
# and writes new inputs to $FUZZ_BUILD/corpus-run-TARGET/ (the committed
# corpus stays as it is). A crash leaves its input in
# $FUZZ_BUILD/crash-* and exits non-zero.
# Exits 77 (skipped) when clang or libFuzzer is not available.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
target=${2:-gguf}
out=${FUZZ_BUILD:-$root/build-fuzz}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found; skipped" >&2
    exit 77
fi
mkdir -p "$out/corpus-run-$target"
probe="$out/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer "$probe" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot link libFuzzer (-fsanitize=fuzzer); skipped" >&2
    exit 77
fi

defs=() libs=() max_len=65536
case "$target" in
gguf)
    srcs=(core/status.c core/mapped_file.c models/gguf.c models/gguf_index.c models/gguf_get.c
          models/gguf_keys.c models/quant.c tests/fuzz/fuzz_gguf.c)
    seeds=tests/fuzz/corpus ;;
grammar|schema)
    srcs=(core/status.c core/utf8.c grammar/gbnf.c grammar/rules.c grammar/utf8_class.c
          grammar/check.c grammar/schema.c grammar/pda.c tests/fuzz/fuzz_grammar.c)
    seeds=tests/fuzz/corpus_$target
    libs=(-lcjson) max_len=8192
    [ "$target" = schema ] && defs=(-DFUZZ_SCHEMA) ;;
*) echo "fuzz: unknown target '$target' (gguf, grammar, schema)" >&2; exit 2 ;;
esac
"$cc" -std=c11 -D_GNU_SOURCE "${defs[@]}" -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root" "${srcs[@]/#/$root/}" "${libs[@]}" -o "$out/fuzz_$target"

echo "fuzz: running $out/fuzz_$target for ${secs}s" >&2
"$out/fuzz_$target" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/" \
    "$out/corpus-run-$target" "$root/$seeds"
