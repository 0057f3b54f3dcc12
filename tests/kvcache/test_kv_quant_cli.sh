# tests/kvcache/test_kv_quant_cli.sh: a quantized KV cache (-ctk q8_0 -ctv
# q4_0: K and V of different block formats) through the CLI on the real
# model, on the default int8 path:
#   - a saved cache is stored quantized (the header's type word names both
#     types) and resumed = uninterrupted, byte-identical text;
#   - loading it with other types asked is refused in one line naming both;
#   - prefix sharing and batch invariance: two requests sharing a prompt of
#     more than one block in one `batch` (-P 1: the second shares the blocks
#     the first computed) share its blocks (the summary's count) and each
#     gets the text `run` gives it alone;
#   - chunked prefill (--chunk 64, a last chunk of 8 rows or more, where the
#     int8 matmuls keep their kernel) gives the unchunked text;
#   - run --json names the types;
#   - fp8 on the CPU is refused in one line (exit 2).
# The bit-for-bit logits of chunked and interleaved rows are
# tests/cpu/test_prefill_decode.c's; this is the CLI's wiring. Exits 77
# without the model.
. "$(dirname "$0")/../cli/lib.sh"
need_model

TYPES=(-ctk q8_0 -ctv q4_0)
P1="The old lighthouse keeper climbed the stairs every evening, counting each of the one hundred and twelve steps, pausing at the small window on the landing to look at the sea, the rocks below and the lights of the harbour town. He had done this for thirty years, through storms and calm nights alike, and knew every sound the old tower made in the wind."
P2=" One night he heard a knock at the door"
P3=" The next morning a letter arrived from the city"
N=16
run() { "$IGNITE" run -m "$MODEL" -t 2 -q --temp 0 "${TYPES[@]}" "$@"; }

same() { # same WHAT FILE_A FILE_B
    CHECKS=$((CHECKS + 1))
    cmp -s "$2" "$3" || fail "$1: '$(head -c 200 "$2")' vs '$(head -c 200 "$3")'"
}

# saved quantized, resumed = uninterrupted
run -p "$P1$P2" -n "$N" --ignore-eos >"$TMP/full.txt" 2>"$TMP/full.err" ||
    fail "full run: $(cat "$TMP/full.err")"
expect_rc 0 "save" run -p "$P1$P2" --prompt-only --save-kv "$TMP/q.kv"
# bytes 12..15: K's type (2 = q8_0) in the low half, V's + 1 (3 + 1) in the high
CHECKS=$((CHECKS + 1))
word=$(od -An -tu4 -j12 -N4 "$TMP/q.kv" | tr -d ' ')
[ "$word" = $((2 + (4 << 16))) ] || fail "type word $word, want q8_0 K and q4_0 V"
"$IGNITE" run -m "$MODEL" -t 2 -q --temp 0 --load-kv "$TMP/q.kv" -n "$N" --ignore-eos \
    </dev/null >"$TMP/res.txt" 2>"$TMP/res.err" || fail "resumed run: $(cat "$TMP/res.err")"
same "resumed from the q8_0/q4_0 file" "$TMP/res.txt" "$TMP/full.txt"

# another type asked: one line naming both
expect_rc 2 "load with other types" "$IGNITE" run -m "$MODEL" -t 2 -q --load-kv "$TMP/q.kv" \
    -ctk f16 -n 4 </dev/null
CHECKS=$((CHECKS + 1))
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "want one line, got: $(cat "$TMP/err")"
expect_grep "$TMP/err" "holds a KV cache of K q8_0, V q4_0, but K f16, V f32 was asked" \
    "load with other types"

# prefix sharing and batch invariance: batch's texts are run's
run -p "$P1$P3" -n "$N" --ignore-eos >"$TMP/full3.txt" 2>/dev/null || fail "run P1P3"
PY=${PYTHON:-python3}
"$PY" -c 'import json,sys; [print(json.dumps({"prompt": a + b, "n_predict": int(sys.argv[3]),
    "ignore_eos": True})) for a, b in ((sys.argv[1], sys.argv[2]), (sys.argv[1], sys.argv[4]))]' \
    "$P1" "$P2" "$N" "$P3" >"$TMP/req.jsonl"
"$IGNITE" batch -m "$MODEL" -t 2 --temp 0 -P 1 "${TYPES[@]}" --ordered <"$TMP/req.jsonl" \
    >"$TMP/batch.jsonl" 2>"$TMP/batch.err" || fail "batch: $(cat "$TMP/batch.err")"
"$PY" -c 'import json,sys
for i, line in enumerate(open(sys.argv[1])):
    o = json.loads(line)
    assert o["kv_cache"] == {"type_k": "q8_0", "type_v": "q4_0"}, o.get("kv_cache")
    open(sys.argv[2 + i], "w").write(o["text"])' "$TMP/batch.jsonl" "$TMP/b1.txt" "$TMP/b2.txt" ||
    fail "batch lines: $(head -c 300 "$TMP/batch.jsonl")"
printf '%s' "$(cat "$TMP/full.txt")" >"$TMP/r1.txt"
printf '%s' "$(cat "$TMP/full3.txt")" >"$TMP/r2.txt"
printf '%s' "$(cat "$TMP/b1.txt")" >"$TMP/b1n.txt"
printf '%s' "$(cat "$TMP/b2.txt")" >"$TMP/b2n.txt"
same "batch request 1 vs run" "$TMP/b1n.txt" "$TMP/r1.txt"
same "batch request 2 vs run" "$TMP/b2n.txt" "$TMP/r2.txt"
expect_grep "$TMP/batch.err" "MiB (q8_0/q4_0)" "batch summary names the types"
CHECKS=$((CHECKS + 1))
shared=$(sed -n 's/.*, \([0-9]*\) blocks shared.*/\1/p' "$TMP/batch.err")
[ "${shared:-0}" -ge 1 ] || fail "no block shared: $(cat "$TMP/batch.err")"

# chunked prefill
run -p "$P1$P2" --chunk 64 -n "$N" --ignore-eos >"$TMP/chunk.txt" 2>&1 ||
    fail "--chunk 64: $(cat "$TMP/chunk.txt")"
same "--chunk 64" "$TMP/chunk.txt" "$TMP/full.txt"

# run --json names the types
"$IGNITE" run -m "$MODEL" -t 2 -p "$P2" -n 2 "${TYPES[@]}" --json >"$TMP/j" 2>/dev/null
expect_grep "$TMP/j" '"type_k":"q8_0","type_v":"q4_0"' "run --json"

# fp8 is the CUDA pool's type (issue 51): on the CPU one line, exit 2 (q4_0 on cuda:
# tests/emu/test_backend_emu.c, which needs no device)
expect_rc 2 "fp8 on the CPU" "$IGNITE" run -m "$MODEL" -t 2 -q -p "$P2" -n 1 -ctk fp8
expect_grep "$TMP/err" "an fp8 KV cache runs on --device cuda only" "fp8 on the CPU's line"

finish test_kv_quant_cli
