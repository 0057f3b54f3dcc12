# tests/cli/lib.sh: what the CLI shell tests share: the binary, a scratch
# directory, the model (or a skip), and check helpers that print the first
# mismatch and count failures.
set -u
IGNITE=${IGNITE_BIN:?IGNITE_BIN is not set (run through ctest)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
CHECKS=0

fail() { FAILS=$((FAILS + 1)); echo "FAIL: $*" >&2; }

# expect_rc WANT DESCRIPTION CMD...: runs CMD with stdout/stderr captured in
# $TMP/out and $TMP/err, checks the exit status.
expect_rc() {
    local want=$1 what=$2
    shift 2
    CHECKS=$((CHECKS + 1))
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$what: exit $rc, want $want; stderr: $(head -c 400 "$TMP/err")"
        return 1
    fi
    return 0
}

# expect_grep FILE PATTERN DESCRIPTION
expect_grep() {
    CHECKS=$((CHECKS + 1))
    grep -q -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1"): $(head -c 400 "$1")"
}

expect_empty() {
    CHECKS=$((CHECKS + 1))
    [ ! -s "$1" ] || fail "$2: $(basename "$1") should be empty: $(head -c 400 "$1")"
}

# Sets MODEL, or exits 77 (skipped) when the test model is absent.
need_model() {
    MODEL=${IGNITE_MODEL:-}
    if [ -z "$MODEL" ]; then
        local cache=${IGNITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ignite}
        MODEL=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
    fi
    if [ ! -f "$MODEL" ]; then
        echo "skip: no test model at $MODEL (make fetch-model)" >&2
        exit 77
    fi
}

finish() {
    echo "$1: $CHECKS checks, $FAILS failed" >&2
    [ "$FAILS" = 0 ]
}
