# tests/cli/test_run_args.sh: `ignite run` behaviour that needs no model:
# help and version (also after info, tokenize, bench), bad flags and values,
# prompt checks (empty, invalid UTF-8, unreadable file), bad model files,
# --device, --gpu-weights (run, chat, batch, bench), and the exit code of
# each (docs/cli.md lists them).
. "$(dirname "$0")/lib.sh"

# Help and version go to stdout with status 0.
expect_rc 0 "run --help" "$IGNITE" run --help && expect_grep "$TMP/out" "--top-k" "run --help"
expect_empty "$TMP/err" "run --help"
expect_rc 0 "default command --help" "$IGNITE" --help && expect_grep "$TMP/out" "run" "--help"
expect_rc 0 "run --version" "$IGNITE" run --version && expect_grep "$TMP/out" "^ignite [0-9]" "--version"
expect_rc 0 "-V" "$IGNITE" -V && expect_grep "$TMP/out" "^ignite [0-9]" "-V"
# (no arguments on a terminal prints the usage: tests/cli/test_tty.py; with
# stdin not a terminal the prompt is read from it, and an empty one is none)
expect_rc 2 "no arguments, empty stdin" "$IGNITE" </dev/null &&
    expect_grep "$TMP/err" "no prompt: stdin was empty" "no arguments"
# ... and after every command (docs/cli.md).
for cmd in info tokenize bench; do
    expect_rc 0 "$cmd --version" "$IGNITE" $cmd --version && expect_grep "$TMP/out" "^ignite [0-9]" "$cmd --version"
    expect_rc 0 "$cmd -V" "$IGNITE" $cmd -V && expect_grep "$TMP/out" "^ignite [0-9]" "$cmd -V"
    expect_rc 0 "$cmd --help" "$IGNITE" $cmd --help && expect_grep "$TMP/out" "--version" "$cmd --help"
done

# Help or version that cannot be written is an I/O error (3), not success.
if [ -w /dev/full ]; then
    for args in "--help" "--version" "run --help" "run -V" "info --help" "tokenize -V" "bench --help"; do
        CHECKS=$((CHECKS + 1))
        "$IGNITE" $args >/dev/full 2>"$TMP/err"
        rc=$?
        [ "$rc" = 3 ] && grep -q "cannot write to stdout" "$TMP/err" ||
            fail "$args >/dev/full: exit $rc, want 3: $(cat "$TMP/err")"
    done
fi

# Usage errors: status 2, one line naming the problem.
expect_rc 2 "unknown long option" "$IGNITE" run --bogus -p hi && expect_grep "$TMP/err" "--bogus" "unknown option"
expect_rc 2 "unknown short option" "$IGNITE" -Z -p hi
expect_rc 2 "missing value" "$IGNITE" run -p
expect_rc 2 "not a number" "$IGNITE" run -p hi -n abc && expect_grep "$TMP/err" "n-predict" "-n abc"
expect_rc 2 "trailing junk" "$IGNITE" run -p hi -c 12x
expect_rc 2 "leading space" "$IGNITE" run -p hi -n " 5"
expect_rc 2 "leading newline in a float" "$IGNITE" run -p hi --temp $'\n0.5'
expect_rc 2 "-n 0" "$IGNITE" run -p hi -n 0
expect_rc 2 "top-p out of range" "$IGNITE" run -p hi --top-p 1.5
expect_rc 2 "negative temperature" "$IGNITE" run -p hi --temp -1
expect_rc 2 "min-p nan" "$IGNITE" run -p hi --min-p nan
expect_rc 2 "seed too large" "$IGNITE" run -p hi -s 99999999999
expect_rc 2 "positional argument" "$IGNITE" run -p hi extra

# Numbers are decimal and whole (cli/cli.h): a count takes digits only, a
# real no hex, and a list no empty item. Each of these was once taken (the
# run went on to the missing model, exit 3); each is now one line naming
# the flag and the word, exit 2.
NOPE=$TMP/nope.gguf
strict() {
    local what=$1 pat=$2
    shift 2
    expect_rc 2 "$what" "$@" || return
    CHECKS=$((CHECKS + 1))
    [ "$(wc -l <"$TMP/err")" = 1 ] || fail "$what: want one line, got: $(cat "$TMP/err")"
    expect_grep "$TMP/err" "$pat" "$what"
}
strict "-n +5" "--n-predict: expected an integer.*got '+5'" "$IGNITE" run -m "$NOPE" -p hi -n +5
strict "--temp 0x10" "--temp: expected a number.*got '0x10'" "$IGNITE" run -m "$NOPE" -p hi --temp 0x10
strict "--top-p 0x1p-1" "--top-p:.*'0x1p-1'" "$IGNITE" run -m "$NOPE" -p hi --top-p 0x1p-1
BREQ=(bench -m "$NOPE" --requests 2)
strict "--input-len 1e3" "--input-len: expected an integer.*'1e3'" "$IGNITE" "${BREQ[@]}" --input-len 1e3
strict "--output-len 8.5" "--output-len: expected an integer.*'8.5'" "$IGNITE" "${BREQ[@]}" --output-len 8.5
strict "--input-len 8:0x2" "--input-len: expected a number.*'0x2'" "$IGNITE" "${BREQ[@]}" --input-len 8:0x2
strict "--request-rate 0x10" "--request-rate:.*'0x10'" "$IGNITE" "${BREQ[@]}" --request-rate 0x10
strict "--goodput ttft:1,,tpot:2" "--goodput: empty item" "$IGNITE" "${BREQ[@]}" --goodput ttft:1,,tpot:2
strict "--goodput ttft:1," "--goodput: empty item" "$IGNITE" "${BREQ[@]}" --goodput ttft:1,
strict "--pd ' 1:1'" "--pd: expected P:D" "$IGNITE" batch -m "$NOPE" --pd " 1:1"
strict "--pd 1:+1" "--pd: expected P:D" "$IGNITE" batch -m "$NOPE" --pd 1:+1
strict "--tp ' 2'" "--tp: expected 1\.\.[0-9]* ranks, got ' 2'" "$IGNITE" --tp " 2" -m "$NOPE" -p hi
# ... while what is meant stays: decimals and exponents in a real, inf as a rate.
expect_rc 3 "--temp 5e-1 --top-p .9" "$IGNITE" run -m "$NOPE" -p hi --temp 5e-1 --top-p .9
expect_rc 3 "--request-rate inf --goodput ttft:1,e2el:2e3" "$IGNITE" "${BREQ[@]}" \
    --request-rate inf --goodput ttft:1,e2el:2e3 --input-len 8:1.5
expect_rc 2 "no prompt" "$IGNITE" run -n 3 </dev/null
expect_rc 2 "-p and -f" "$IGNITE" run -p hi -f -
expect_rc 2 "--system without --chat" "$IGNITE" run -p hi --system x
expect_rc 2 "unknown device" "$IGNITE" run -p hi --device tpu
expect_rc 2 "bad cuda index" "$IGNITE" run -p hi --device cuda:x
for cmd in run chat batch bench; do
    expect_rc 2 "$cmd --gpu-weights q4" "$IGNITE" $cmd --gpu-weights q4 &&
        expect_grep "$TMP/err" "--gpu-weights: expected native or f16, got 'q4'" "$cmd --gpu-weights q4"
done

# A CUDA device that is not there (no GPU, no driver, a build without CUDA,
# an index past the count) is a device error naming why, before any work.
expect_rc 7 "--device cuda:1023" "$IGNITE" run -p hi --device cuda:1023 &&
    expect_grep "$TMP/err" "cuda:1023" "--device cuda:1023"
if ! nvidia-smi -L >/dev/null 2>&1; then
    expect_rc 7 "--device cuda" "$IGNITE" run -p hi --device cuda && expect_grep "$TMP/err" "cuda" "--device cuda"
    expect_rc 7 "--device cuda:0" "$IGNITE" -p hi --device cuda:0
fi

# Prompt checks come before the model is loaded.
expect_rc 6 "empty prompt" "$IGNITE" run -p "" && expect_grep "$TMP/err" "empty" "empty prompt"
: >"$TMP/empty.txt"
expect_rc 6 "empty file" "$IGNITE" run -f "$TMP/empty.txt"
expect_rc 6 "empty stdin" "$IGNITE" run -f - </dev/null
expect_rc 6 "invalid UTF-8" "$IGNITE" run -p $'ab\xffcd' && expect_grep "$TMP/err" "offset 2" "invalid UTF-8"
printf 'ok \xc0\xaf overlong' >"$TMP/bad.txt"
expect_rc 6 "overlong UTF-8 in a file" "$IGNITE" run -f "$TMP/bad.txt"
printf '\xed\xa0\x80' | expect_rc 6 "surrogate on stdin" "$IGNITE" run -f -
expect_rc 6 "truncated UTF-8" "$IGNITE" run -p $'abc\xe2\x82'
expect_rc 6 "invalid UTF-8 in --system" "$IGNITE" run --chat --system $'ab\xffc' -p hi &&
    expect_grep "$TMP/err" "--system is not valid UTF-8.*offset 2" "invalid --system"
expect_rc 3 "missing prompt file" "$IGNITE" run -f "$TMP/nope.txt"

# Model files.
expect_rc 3 "missing model" "$IGNITE" run -m "$TMP/nope.gguf" -p hi
# A diagnostic is one line whatever it quotes: control bytes print as '?'.
expect_rc 3 "model path with a newline and an escape" "$IGNITE" info -m "$TMP/a"$'\n\e[2J'"b.gguf"
CHECKS=$((CHECKS + 1))
[ "$(wc -l <"$TMP/err")" = 1 ] && ! grep -q $'\e' "$TMP/err" || fail "diagnostic not one clean line: $(od -c "$TMP/err" | head -5)"
printf 'GGUF\x03\x00\x00\x00garbage' >"$TMP/bad.gguf"
expect_rc 4 "malformed model" "$IGNITE" run -m "$TMP/bad.gguf" -p hi
printf 'not a gguf file at all' >"$TMP/text.gguf"
expect_rc 4 "not a GGUF file" "$IGNITE" run -m "$TMP/text.gguf" -p hi
mkfifo "$TMP/fifo.gguf"
expect_rc 3 "a FIFO as the model (no hang)" timeout 60 "$IGNITE" run -m "$TMP/fifo.gguf" -p hi &&
    expect_grep "$TMP/err" "not a regular file" "FIFO model"
expect_rc 2 "no default model" env IGNITE_CACHE="$TMP/nocache" "$IGNITE" run -p hi
expect_grep "$TMP/err" "fetch-model" "no default model"

finish test_run_args
