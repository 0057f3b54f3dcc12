#!/usr/bin/env bash
# tests/tokenizer/test_cli.sh: `ignite tokenize` end to end on the test model:
# output formats, stdin, special-token switches, errors and exit codes. The
# ids themselves are checked against HF in test_hf_smollm.py; here the
# expected ids come from that reference once (SmolLM2 vocabulary).
# Labels: tokenizer, model, cli. Exits 77 without the model.
set -u
bin=${IGNITE_BIN:-build/ignite}
model=${IGNITE_MODEL:-${IGNITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ignite}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "test model not found; skipped"; exit 77; }
fails=0
check() { # name, expected, actual
    if [ "$2" != "$3" ]; then
        echo "FAIL $1: expected [$2], got [$3]"
        fails=$((fails + 1))
    fi
}
tok() { "$bin" tokenize -m "$model" "$@"; }

check ids "19556
905" "$(tok -p 'Hello world')"
check count "2" "$(tok -p 'Hello world' --count)"
check json "[19556,905]" "$(tok -p 'Hello world' --json)"
check json-count '{"count":2}' "$(tok -p 'Hello world' --count --json)"
check pieces "$(printf '19556\tHello\n905\t world')" "$(tok -p 'Hello world' --pieces)"
check json-pieces '[{"id":1,"piece":"<|im_start|>"},{"id":4093,"piece":"user"}]' \
    "$(tok -p '<|im_start|>user' --json --pieces)"
check special-on "1" "$(tok -p '<|im_start|>' --count)"
check special-off "1" "$([ "$(tok -p '<|im_start|>' --no-special --count)" -gt 1 ] && echo 1)"
check stdin "19556
905" "$(printf 'Hello world' | tok -f -)"
check escaped-piece "$(printf '198\t%s' '\n')" "$(tok -p $'\n' --pieces)"
check invalid-json '[{"id":250,"piece":"\ufffd"}]' "$(printf '\xa0' | tok -f - --json --pieces | sed 's/\xef\xbf\xbd/\\ufffd/')"
check empty "0" "$(printf '' | tok -f - --count)"

"$bin" tokenize -m "$model" >/dev/null 2>&1; check no-text-status 2 $?
"$bin" tokenize -m "$model" -p a -f - >/dev/null 2>&1; check both-status 2 $?
"$bin" tokenize -m "$model" --bogus >/dev/null 2>&1; check bad-option-status 2 $?
"$bin" tokenize -m /nonexistent.gguf -p a >/dev/null 2>&1; check missing-model-status 3 $?
"$bin" tokenize -m "$model" -f /nonexistent.txt >/dev/null 2>&1; check missing-file-status 3 $?
"$bin" tokenize --help | grep -q -- '--no-special'; check help 0 $?

[ $fails -eq 0 ] && echo "test_cli: all checks passed"
exit $((fails > 0))
