#!/usr/bin/env bash
# Fuzzes ignite's parsers of outside input with libFuzzer, SECONDS each
# (default 600):
#   scripts/fuzz.sh [SECONDS] [TARGET...]     TARGET: gguf, tokenizer (default: both)
#   gguf       the GGUF parser (tests/fuzz/fuzz_gguf.c, seeds tests/fuzz/corpus/)
#   tokenizer  encode/decode of any bytes (tests/fuzz/fuzz_tokenizer.c, seeds
#              tests/fuzz/corpus-tok/)
# Builds each target with clang -fsanitize=fuzzer,address,undefined into
# $FUZZ_BUILD (default build-fuzz/) and writes new inputs to
# $FUZZ_BUILD/corpus-run-TARGET/ (the committed corpora stay as they are). A
# crash leaves its input in $FUZZ_BUILD/crash-* and exits non-zero.
# Exits 77 (skipped) when clang or libFuzzer is not available.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf tokenizer)
out=${FUZZ_BUILD:-$root/build-fuzz}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found; skipped" >&2
    exit 77
fi
mkdir -p "$out"
# one probe per run of this script: targets may be fuzzed at the same time
probe="$out/probe-$$"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' >"$probe.c"
if ! "$cc" -fsanitize=fuzzer "$probe.c" -o "$probe" >/dev/null 2>&1; then
    rm -f "$probe.c" "$probe"
    echo "fuzz: $cc cannot link libFuzzer (-fsanitize=fuzzer); skipped" >&2
    exit 77
fi
rm -f "$probe.c" "$probe"

for t in "${targets[@]}"; do
    case "$t" in
    gguf)
        srcs=(core/status.c core/mapped_file.c models/gguf.c models/gguf_index.c models/gguf_get.c
              models/gguf_keys.c models/quant.c tests/fuzz/fuzz_gguf.c)
        seeds=tests/fuzz/corpus max_len=65536 ;;
    tokenizer)
        srcs=(core/status.c core/utf8.c tokenizer/unicode.c tokenizer/unicode_tables.c
              tokenizer/vocab.c tokenizer/pretok.c tokenizer/bpe.c tokenizer/spm.c
              tokenizer/encode.c tokenizer/decode.c tests/fuzz/fuzz_tokenizer.c)
        seeds=tests/fuzz/corpus-tok max_len=4096 ;;
    *) echo "fuzz: unknown target '$t' (gguf or tokenizer)" >&2; exit 2 ;;
    esac
    "$cc" -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$root" "${srcs[@]/#/$root/}" -o "$out/fuzz_$t"
    mkdir -p "$out/corpus-run-$t"
    echo "fuzz: running $out/fuzz_$t for ${secs}s" >&2
    "$out/fuzz_$t" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/" \
        "$out/corpus-run-$t" "$root/$seeds"
done
