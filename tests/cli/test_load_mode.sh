# tests/cli/test_load_mode.sh: llama.cpp's --no-mmap and --mlock. --no-mmap
# reads the model file into memory instead of mapping it: the same bytes, so
# the same greedy text; --mlock locks the weights, and where the system
# refuses (RLIMIT_MEMLOCK) says so in one warning line and runs on. On the
# fetched default model (skipped without it); the words in every command
# that loads a model.
. "$(dirname "$0")/lib.sh"
need_model
NOPE=$TMP/nope.gguf

expect_rc 0 "mapped" "$IGNITE" run -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 -q &&
    cp "$TMP/out" "$TMP/mapped"
expect_rc 0 "--no-mmap" "$IGNITE" run -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 -q --no-mmap &&
    expect_empty "$TMP/err" "--no-mmap" &&
    { cmp -s "$TMP/mapped" "$TMP/out" || fail "--no-mmap: '$(cat "$TMP/out")' vs mapped '$(cat "$TMP/mapped")'"; }
expect_rc 0 "--mlock --no-mmap" "$IGNITE" run -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 -q --mlock --no-mmap &&
    { cmp -s "$TMP/mapped" "$TMP/out" || fail "--mlock --no-mmap: '$(cat "$TMP/out")'"; }
# a lock the system refuses is a warning, not an error (root may lock anyway)
expect_rc 0 "--mlock, ulimit -l 0" sh -c 'ulimit -l 0 2>/dev/null; exec "$@"' sh \
    "$IGNITE" run -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 -q --mlock &&
    { cmp -s "$TMP/mapped" "$TMP/out" || fail "--mlock: '$(cat "$TMP/out")'"; } &&
    { [ ! -s "$TMP/err" ] || { [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "^ignite: warning: --mlock: cannot lock '.*' (.* MiB) in memory: .*ulimit -l" "$TMP/err"; } ||
        fail "--mlock: want no line or one warning, got: $(cat "$TMP/err")"; }

# taken by every command that loads weights; info and tokenize refuse them
for cmd in chat batch bench perplexity; do
    echo "some text to score" >"$TMP/text.txt"
    case $cmd in perplexity) more="-f $TMP/text.txt" ;; *) more= ;; esac
    expect_rc 3 "$cmd --no-mmap --mlock" "$IGNITE" $cmd -m "$NOPE" $more --no-mmap --mlock </dev/null
done
expect_rc 0 "bench --no-mmap" "$IGNITE" bench -m "$MODEL" -p 8 -n 0 -r 1 -t 1 --no-mmap -o csv
expect_rc 2 "info --no-mmap" "$IGNITE" info -m "$MODEL" --no-mmap &&
    expect_grep "$TMP/err" "unknown option '--no-mmap'" "info --no-mmap"
finish test_load_mode
