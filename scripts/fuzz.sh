#!/usr/bin/env bash
# Fuzzes the GGUF parser with libFuzzer for SECONDS (default 600):
#   scripts/fuzz.sh [SECONDS]
# Builds tests/fuzz/fuzz_gguf.c with clang -fsanitize=fuzzer,address,undefined
# into $FUZZ_BUILD (default build-fuzz/), seeds from tests/fuzz/corpus/ and
# writes new inputs to $FUZZ_BUILD/corpus-run/ (the committed corpus stays as
# it is). A crash leaves its input in $FUZZ_BUILD/crash-* and exits non-zero.
# Exits 77 (skipped) when clang or libFuzzer is not available.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
out=${FUZZ_BUILD:-$root/build-fuzz}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found; skipped" >&2
    exit 77
fi
mkdir -p "$out/corpus-run"
probe="$out/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer "$probe" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot link libFuzzer (-fsanitize=fuzzer); skipped" >&2
    exit 77
fi

srcs=(core/status.c core/mapped_file.c models/gguf.c models/gguf_index.c models/gguf_get.c models/gguf_keys.c
      models/quant.c tests/fuzz/fuzz_gguf.c)
"$cc" -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root" "${srcs[@]/#/$root/}" -o "$out/fuzz_gguf"

echo "fuzz: running $out/fuzz_gguf for ${secs}s" >&2
"$out/fuzz_gguf" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/" \
    "$out/corpus-run" "$root/tests/fuzz/corpus"
