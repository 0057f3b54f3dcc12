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
# Builds the target's entry with clang -fsanitize=fuzzer,address,undefined
# into $FUZZ_BUILD (default build-fuzz/) and writes new inputs to
# $FUZZ_BUILD/corpus-run-TARGET/ (the committed corpus stays as it is). A
# crash leaves its input in $FUZZ_BUILD/crash-* and exits non-zero.
# Exits 77 (skipped) when clang or libFuzzer is not available. FUZZ_SEED
# fixes libFuzzer's seed (ctest sets 1; unset: a new seed each run).
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
run="$out/corpus-run-$target"
mkdir -p "$run"
probe="$out/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer "$probe" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot link libFuzzer (-fsanitize=fuzzer); skipped" >&2
    exit 77
fi
rm -f "$probe.c" "$probe"

gguf=(core/status.c core/mapped_file.c models/gguf.c models/gguf_index.c models/gguf_get.c
      models/gguf_keys.c models/quant.c)
defs=() libs=() entry=tests/fuzz/fuzz_$target.c
case "$target" in
gguf)
    srcs=("${gguf[@]}")
    corpus=corpus max_len=65536 ;;
safetensors)
    srcs=(core/status.c core/mapped_file.c core/utf8.c models/safetensors.c)
    corpus=corpus_st max_len=65536 libs=(-lcjson) ;;
hf_json)
    srcs=("${gguf[@]}" core/utf8.c core/json.c models/arch.c models/model.c models/tensors.c
          models/safetensors.c models/hf_config.c models/hf_model.c models/hf_mxfp4.c ops/rope_freqs.c
          tokenizer/unicode.c tokenizer/unicode_tables.c tokenizer/vocab.c tokenizer/pretok.c
          tokenizer/bpe.c tokenizer/spm.c tokenizer/encode.c tokenizer/decode.c
          tokenizer/gguf_vocab.c tokenizer/hf_vocab.c)
    corpus=corpus_json max_len=262144 libs=(-lcjson -lm) ;;
grammar|schema)
    srcs=(core/status.c core/utf8.c core/json.c core/mapped_file.c grammar/gbnf.c grammar/rules.c
          grammar/utf8_class.c grammar/check.c grammar/schema.c grammar/schema_regex.c grammar/strbuf.c grammar/pda.c)
    entry=tests/fuzz/fuzz_grammar.c corpus=corpus_$target max_len=8192 libs=(-lcjson)
    [ "$target" = schema ] && defs=(-DFUZZ_SCHEMA) ;;
batch)
    srcs=(core/status.c core/utf8.c core/json.c core/mapped_file.c core/paths.c cli/opts.c cli/prompt.c
          cli/gen_opts.c cli/device_args.c cli/batch_request.c cli/bench_reqfile.c decode/sampler.c
          kvcache/kvmem.c tokenizer/chat_builtin.c)
    entry=tests/fuzz/fuzz_batch_line.c corpus=corpus_batch max_len=65536 libs=(-lcjson -lm) ;;
tokenizer)
    srcs=(core/status.c core/utf8.c tokenizer/unicode.c tokenizer/unicode_tables.c
          tokenizer/vocab.c tokenizer/pretok.c tokenizer/bpe.c tokenizer/spm.c
          tokenizer/encode.c tokenizer/decode.c)
    corpus=corpus-tok max_len=4096 ;;
jinja)
    srcs=(core/status.c tokenizer/jinja_lex.c tokenizer/jinja_parse.c tokenizer/jinja_value.c
          tokenizer/jinja_eval.c tokenizer/jinja_filters.c)
    corpus=corpus_jinja max_len=16384 libs=(-lm) ;;
klfile)
    srcs=(core/status.c ppl/klfile.c ppl/score.c)
    corpus=corpus_klfile max_len=65536 libs=(-lm) ;;
kvfile)
    srcs=(core/status.c core/checksum.c core/half.c kvcache/kvmem.c kvcache/kvcache.c
          kvcache/kvfile.c models/tensors.c models/arch.c models/quant.c)
    corpus=corpus_kvfile max_len=65536 libs=(-lm) ;;
*)
    echo "fuzz: unknown target '$target' (gguf, safetensors, hf_json, grammar, schema, batch, tokenizer, jinja, klfile, kvfile)" >&2
    exit 2 ;;
esac
srcs+=("$entry")
"$cc" -std=c11 -D_GNU_SOURCE "${defs[@]}" -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root" "${srcs[@]/#/$root/}" "${libs[@]}" -o "$out/fuzz_$target"

echo "fuzz: running $out/fuzz_$target for ${secs}s" >&2
"$out/fuzz_$target" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    ${FUZZ_SEED:+-seed="$FUZZ_SEED"} \
    -print_final_stats=1 -artifact_prefix="$out/" \
    "$run" "$root/tests/fuzz/$corpus"
