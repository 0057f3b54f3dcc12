# tests/cli/test_run_model.sh: `ignite run` on the test model: streaming,
# the one stats line, stdin, --json, seeds, --chat, prompt over the context,
# a full context, a closed pipe (SIGPIPE/EPIPE: quiet, status 0) and Ctrl-C
# (status 130 with the stats so far, also in the prefill). Exits 77 without
# the model.
# Runs generate only a few tokens each: the ASan build is ~30x slower.
. "$(dirname "$0")/lib.sh"
need_model
run() { "$IGNITE" run -m "$MODEL" -t 2 "$@"; }

# A plain run: text on stdout, exactly one stats line on stderr.
expect_rc 0 "greedy run" run -p "The capital of France is" -n 2 --temp 0
expect_grep "$TMP/out" "Paris" "greedy continuation"
CHECKS=$((CHECKS + 1)); [ -s "$TMP/out" ] || fail "greedy run printed no text"
CHECKS=$((CHECKS + 1))
[ "$(grep -c '^stats: ' "$TMP/err")" = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ] ||
    fail "want exactly one stats line on stderr, got: $(cat "$TMP/err")"
expect_grep "$TMP/err" "prompt [0-9]* tok | ttft [0-9.]* ms | prefill [0-9.]* tok/s | gen [0-9]* tok | decode [0-9.]* ms/tok [0-9.]* tok/s | device cpu | threads 2 | stop " "stats format"
cp "$TMP/out" "$TMP/greedy.txt"

# A context whose cache can never fit is refused up front (exit 5) in the
# blocks it would take, never naming a -c nobody gave (99999999 rounds up to
# 100000000 positions).
expect_rc 5 "-c 99999999" run -p "Hi" -n 1 -c 99999999
expect_grep "$TMP/err" "the KV cache's 1562500 blocks of 64 positions need" "-c 99999999 in blocks"
CHECKS=$((CHECKS + 1))
! grep -q 100000000 "$TMP/err" || fail "-c 99999999 named 100000000: $(cat "$TMP/err")"

# -f - with -q: the same prompt from stdin gives the same text, stderr stays empty.
printf 'The capital of France is' | expect_rc 0 "stdin prompt" run -f - -n 2 --temp 0 -q
expect_empty "$TMP/err" "-q"
CHECKS=$((CHECKS + 1)); cmp -s "$TMP/out" "$TMP/greedy.txt" || fail "-f - differs from -p"

# --json: one object on stdout, nothing else; fields and values as documented.
expect_rc 0 "--json" run -p "Once upon a time" -n 2 -s 42 --json
python3 - "$TMP/out" <<'PY' || fail "--json content"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
obj = json.loads(raw)  # exactly one JSON value, or this raises
assert raw.count("\n") == 1 and raw.endswith("}\n"), repr(raw[-40:])
assert isinstance(obj["text"], str) and obj["text"], obj
assert obj["stop"] in ("limit", "eog"), obj["stop"]
assert obj["status"] == 0
assert obj["tokens"]["generated"] <= 2 and obj["tokens"]["prompt"] >= 4, obj["tokens"]
for k in ("ttft_ms", "prefill_ms", "prefill_tok_s"):
    assert obj["timings"][k] >= 0, k
for k in ("decode_ms_per_tok", "decode_tok_s"):  # measured once a token was fed back
    v = obj["timings"][k]
    assert v >= 0 if obj["tokens"]["generated"] >= 2 else v is None, (k, v)
s = obj["sampling"]
assert s["seed"] == 42 and s["temperature"] == 0.8 and s["top_k"] == 40, s
assert obj["device"] == "cpu" and obj["threads"] == 2 and obj["n_ctx"] > 0
assert obj["device_memory"] == {"bytes": 0, "weight_bytes": 0, "weights": None}, obj
PY
CHECKS=$((CHECKS + 1))
cp "$TMP/out" "$TMP/json1"

# The same seed gives the same text; the run is sampled, not greedy.
expect_rc 0 "seeded again" run -p "Once upon a time" -n 2 -s 42 --json
python3 -c 'import json,sys; a,b=(json.load(open(f))["text"] for f in sys.argv[1:]); sys.exit(a!=b)' \
    "$TMP/json1" "$TMP/out" || fail "seed 42 gave different texts"
CHECKS=$((CHECKS + 1))

# --chat with the model's ChatML template (and a system message).
expect_rc 0 "--chat --system" run --chat --system "Be brief." -p "Hi" -n 1 --temp 0

# Prompt over the context: status 6 with both numbers, nothing generated.
long=$(for i in $(seq 1 40); do printf 'word%d ' "$i"; done)
expect_rc 6 "prompt over the context" run -p "$long" -c 16 -n 4
expect_grep "$TMP/err" "context holds 16" "over-context message"
expect_empty "$TMP/out" "over-context stdout"
# Past the 8192 trained positions as well as the 4096 of the context: the
# refusal alone, not the warning that the output will degrade before it.
python3 -c 'print("word " * 9000)' >"$TMP/huge.txt"
expect_rc 6 "prompt past the trained context" run -f "$TMP/huge.txt" -n 4
CHECKS=$((CHECKS + 1))
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "past the trained context: want one line: $(cat "$TMP/err")"

# A full context stops generation with a warning and status 0.
n_prompt=$("$IGNITE" tokenize -m "$MODEL" -p "1 2" --count)
expect_rc 0 "full context" run -p "1 2" -c $((n_prompt + 2)) -n -1 --ignore-eos --temp 0
expect_grep "$TMP/err" "context is full" "full context warning"
expect_grep "$TMP/err" "gen 3 tok .* stop context" "full context stats"

# A reader that goes away: ignite ends quietly with status 0.
CHECKS=$((CHECKS + 1))
"$IGNITE" run -m "$MODEL" -t 2 -p "Hi" -n 400 --ignore-eos --temp 0 2>"$TMP/err" |
    head -c 5 >"$TMP/out"
rcs=("${PIPESTATUS[@]}")
[ "${rcs[0]}" = 0 ] || fail "closed pipe: ignite exited ${rcs[0]}, want 0"
grep -q '^ignite: ' "$TMP/err" && fail "closed pipe printed a message: $(cat "$TMP/err")"
grep -q 'stop output_closed' "$TMP/err" || fail "closed pipe: stop reason: $(cat "$TMP/err")"
[ "$(wc -c <"$TMP/out")" = 5 ] || fail "head got $(wc -c <"$TMP/out") bytes"

# Any other write error on stdout is an I/O error (3) with a message.
if [ -w /dev/full ]; then
    CHECKS=$((CHECKS + 1))
    run -p "Hi" -n 2 >/dev/full 2>"$TMP/err"
    rc=$?
    [ "$rc" = 3 ] || fail "stdout on /dev/full: exit $rc, want 3"
    grep -q "^ignite: cannot write to stdout: No space left on device" "$TMP/err" || fail "/dev/full: $(cat "$TMP/err")"
fi

# Ctrl-C during a long generation: status 130 and the stats so far.
CHECKS=$((CHECKS + 1))
# Text on stdout means the handler is in place (a SIGINT before that would
# kill ignite, which a shell also reports as 130: the stats line tells them apart).
"$IGNITE" run -m "$MODEL" -t 2 -p "Hi" -n -1 -c 4096 --ignore-eos \
    >"$TMP/int.out" 2>"$TMP/int.err" &
pid=$!
for _ in $(seq 1 600); do [ -s "$TMP/int.out" ] && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" = 130 ] || fail "SIGINT: exit $rc, want 130"
grep -q '^stats: .*stop interrupted' "$TMP/int.err" || fail "SIGINT: no stats line: $(cat "$TMP/int.err")"
[ -s "$TMP/int.out" ] || fail "SIGINT: no text before the interrupt"

# Ctrl-C during the prefill: the stats count only the chunks prefilled (not
# the whole prompt, which made prefill tok/s too high), and what was not
# measured is left out (no "ttft 0.0 ms", null in --json). The signal goes
# once the handler is in place (SigCgt in /proc, bit 2 = SIGINT).
CHECKS=$((CHECKS + 1))
long=$(for i in $(seq 1 1000); do printf 'w%d ' "$i"; done)
n_long=$("$IGNITE" tokenize -m "$MODEL" -p "$long" --count)
"$IGNITE" run -m "$MODEL" -t 2 -p "$long" -b 4 -n 1 --json >"$TMP/pint.out" 2>"$TMP/pint.err" &
pid=$!
for _ in $(seq 1 600); do
    mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$mask" ] && [ $((0x$mask & 2)) != 0 ] && break
    sleep 0.1
done
sleep 0.5
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" = 130 ] || fail "SIGINT in the prefill: exit $rc, want 130: $(cat "$TMP/pint.err")"
python3 - "$TMP/pint.out" "$n_long" <<'PY' || fail "SIGINT in the prefill: $(cat "$TMP/pint.out")"
import json, sys
obj = json.load(open(sys.argv[1]))
n, full = obj["tokens"]["prompt"], int(sys.argv[2])
assert obj["stop"] == "interrupted" and obj["tokens"]["generated"] == 0, obj
assert n < full and n % 4 == 0, (n, full)  # whole chunks of -b 4, not the whole prompt
t = obj["timings"]
assert t["ttft_ms"] is None and t["decode_ms_per_tok"] is None and t["decode_tok_s"] is None, t
assert t["prefill_tok_s"] is None if n == 0 else t["prefill_tok_s"] > 0, t
PY
grep '^stats: ' "$TMP/pint.err" | grep -q 'ttft\|decode' &&
    fail "SIGINT in the prefill: figures not measured in the stats: $(cat "$TMP/pint.err")"

finish test_run_model
