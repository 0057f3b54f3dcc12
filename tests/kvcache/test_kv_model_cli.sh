# tests/kvcache/test_kv_model_cli.sh: resumed = uninterrupted on the real
# model through the CLI: byte-identical text greedy and with the default
# sampler at a fixed seed (repeat penalty on), through a file and through a
# pipe; prefix reuse at a word boundary gives the text of the whole prompt;
# --chunk 7 gives the unchunked text. Exits 77 without the model. A sanitizer
# build (~30x slower) checks the sampled case only, with 4 tokens, and
# not --chunk 7.
. "$(dirname "$0")/../cli/lib.sh"
need_model

P1="The old lighthouse keeper climbed the stairs every evening."
P2=" He lit the lamp and watched the ships pass by in the dark"
run() { "$IGNITE" run -m "$MODEL" -t 2 -q "$@"; }
if [ "${IGNITE_SANITIZED:-}" = 1 ]; then
    SAMPLINGS=("--temp 0.8 -s 42 --repeat-penalty 1.3")
    N=4
else
    SAMPLINGS=("--temp 0" "--temp 0.8 -s 42 --repeat-penalty 1.3")
    N=20
fi

same() { # same WHAT FILE_A FILE_B
    CHECKS=$((CHECKS + 1))
    cmp -s "$2" "$3" || fail "$1: '$(head -c 200 "$2")' vs '$(head -c 200 "$3")'"
}

for sampling in "${SAMPLINGS[@]}"; do
    # shellcheck disable=SC2086
    run -p "$P1$P2" -n "$N" --ignore-eos $sampling >"$TMP/full.txt" 2>"$TMP/full.err" ||
        fail "full run: $(cat "$TMP/full.err")"
    expect_rc 0 "save" run -p "$P1$P2" --prompt-only --save-kv "$TMP/p.kv"
    # shellcheck disable=SC2086
    run --load-kv "$TMP/p.kv" -n "$N" --ignore-eos $sampling </dev/null >"$TMP/res.txt" 2>"$TMP/res.err" ||
        fail "resumed run: $(cat "$TMP/res.err")"
    same "resumed ($sampling)" "$TMP/res.txt" "$TMP/full.txt"

    # shellcheck disable=SC2086
    run -p "$P1$P2" --prompt-only --save-kv - | run --load-kv - -n "$N" --ignore-eos $sampling \
        >"$TMP/pipe.txt" 2>"$TMP/pipe.err" || fail "pipe: $(cat "$TMP/pipe.err")"
    same "piped ($sampling)" "$TMP/pipe.txt" "$TMP/full.txt"

    expect_rc 0 "save prefix" run -p "$P1" --prompt-only --save-kv "$TMP/p1.kv"
    # shellcheck disable=SC2086
    run --load-kv "$TMP/p1.kv" -p "$P2" -n "$N" --ignore-eos $sampling >"$TMP/more.txt" \
        2>"$TMP/more.err" || fail "prefix reuse: $(cat "$TMP/more.err")"
    same "prefix reuse ($sampling)" "$TMP/more.txt" "$TMP/full.txt"

    # (the sanitizers: chunked prefill's memory runs there in test_prefill_decode's
    # chunks of 7 and 64 and test_forward_ref's of 5)
    [ "${IGNITE_SANITIZED:-}" = 1 ] && continue
    # shellcheck disable=SC2086
    run -p "$P1$P2" --chunk 7 -n "$N" --ignore-eos $sampling >"$TMP/chunk.txt" 2>&1 ||
        fail "--chunk 7: $(cat "$TMP/chunk.txt")"
    same "--chunk 7 ($sampling)" "$TMP/chunk.txt" "$TMP/full.txt"
done

# the tokens of the two parts are the tokens of the whole (else the prefix
# check above compares different token sequences), and only the second
# part's tokens are prefilled after the load
tok() { "$IGNITE" tokenize -m "$MODEL" "$@" 2>/dev/null; }
tok -p "$P1$P2" >"$TMP/t.full"
{ tok -p "$P1"; tok --no-bos -p "$P2"; } >"$TMP/t.parts"
same "tokens of the parts vs the whole" "$TMP/t.parts" "$TMP/t.full"
"$IGNITE" run -m "$MODEL" -t 2 --load-kv "$TMP/p1.kv" -p "$P2" --prompt-only --json \
    >"$TMP/j" 2>/dev/null
expect_grep "$TMP/j" "\"prompt\":$(tok --no-bos -p "$P2" | wc -l),\"generated\":0,\"cached\":$(tok -p "$P1" | wc -l)}" \
    "prefix reuse prefills only the new tokens"

finish test_kv_model_cli
