# tests/grammar/test_run_grammar_args.sh: `ignite run`'s constraint options
# refuse bad input before the model loads: exit 2 and one line naming the
# position (GBNF: FILE:LINE:COL, JSON: line:col, schema: the JSON pointer);
# conflicting options exit 2. No model needed.
. "$(dirname "$0")/../cli/lib.sh"

# expect_err WANT_RC PATTERN DESCRIPTION ARGS...: one stderr line matching PATTERN
expect_err() {
    local rc=$1 pat=$2 what=$3
    shift 3
    expect_rc "$rc" "$what" "$IGNITE" run -p hi "$@" || return
    CHECKS=$((CHECKS + 1))
    local n
    n=$(wc -l <"$TMP/err")
    [ "$n" = 1 ] || fail "$what: $n stderr lines: $(cat "$TMP/err")"
    expect_grep "$TMP/err" "$pat" "$what"
}

printf 'root ::= "a" (\n  "b" | [cd\n' >"$TMP/bad.gbnf"
expect_err 2 "bad.gbnf:2:9: character class is not closed" "gbnf syntax" --grammar-file "$TMP/bad.gbnf"
expect_err 2 "^ignite: --grammar:1:10: rule 'x' is used but never defined" "undefined rule" --grammar 'root ::= x'
expect_err 2 "^ignite: --grammar:1:1: left recursion" "left recursion" --grammar 'root ::= root "a" | "b"'
expect_err 2 "can match no text" "empty language" --grammar 'root ::= "a" root'
expect_err 3 "cannot open" "missing grammar file" --grammar-file "$TMP/none.gbnf"

expect_err 2 "^ignite: --json-schema:1:13: not valid JSON" "bad JSON" --json-schema '{"type": "x",'
expect_err 2 "^ignite: --json-schema: /properties/a/not: keyword 'not' is not supported" \
    "unsupported keyword" --json-schema '{"properties": {"a": {"type": "string", "not": {"const": "x"}}}}'
expect_err 2 "^ignite: --json-schema: /properties/a/pattern: pattern '(a)\\\\1': unsupported construct: a back-reference at offset 3" \
    "pattern outside the subset" --json-schema '{"properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}'
expect_err 2 "/allOf/1: 'minimum' in an allOf member is not supported" "allOf of non-objects" \
    --json-schema '{"allOf": [{"properties": {"a": {}}}, {"minimum": 1}]}'
expect_err 2 "/items/anyOf/0: unknown type 'strin'" "bad type in anyOf" \
    --json-schema '{"items": {"anyOf": [{"type": "strin"}]}}'
printf '{\n  "$ref": "#/$defs/missing"\n}\n' >"$TMP/s.json"
expect_err 2 "s.json: (root): '\$ref' '#/\$defs/missing' does not resolve" "unresolved ref" --json-schema-file "$TMP/s.json"
expect_err 2 "required property 'b' is not in 'properties'" "required not in properties" \
    --json-schema '{"properties": {"a": {}}, "required": ["b"]}'
expect_err 2 "format 'email' is not supported" "format" --json-schema '{"type": "string", "format": "email"}'
expect_err 2 "'uniqueItems' true is not supported" "uniqueItems" --json-schema '{"type": "array", "uniqueItems": true}'
expect_err 2 "/properties/x: 'minimum' must be a number of at most 15 digits either side of the point" \
    "number bounds too long" --json-schema '{"properties": {"x": {"type": "number", "minimum": 1e20}}}'
expect_err 2 "no number lies between the bounds" "empty number range" \
    --json-schema '{"type": "number", "exclusiveMinimum": 1.5, "maximum": 1.5}'
expect_err 2 "no integer lies between" "empty integer range" --json-schema '{"type": "integer", "minimum": 5, "maximum": 4}'
expect_err 2 "/properties/x: the schema false matches nothing" "false schema" --json-schema '{"properties": {"x": false}}'

expect_err 2 "at most one of --grammar" "two constraints" --grammar 'root ::= "a"' --format json
expect_err 2 "format: expected 'json', got 'xml'" "format value" --format xml
expect_err 2 "prompt-only generates none" "prompt-only" --format json --prompt-only
CHECKS=$((CHECKS + 1))
"$IGNITE" run -f - --grammar-file - </dev/null >"$TMP/out" 2>"$TMP/err"
[ $? = 2 ] && grep -q -- "--grammar-file - and -f - both want stdin" "$TMP/err" || fail "two stdins: $(cat "$TMP/err")"

# annotations are ignored: this compiles and fails only later, on the model
expect_rc 3 "annotations" "$IGNITE" run -p hi -m "$TMP/none.gguf" \
    --json-schema '{"title": "t", "description": "d", "examples": [1], "default": 1, "$comment": "c", "$schema": "s", "$id": "i", "type": "integer"}'
CHECKS=$((CHECKS + 1))
grep -q "none.gguf" "$TMP/err" || fail "annotations: the schema was refused: $(cat "$TMP/err")"

finish test_run_grammar_args
