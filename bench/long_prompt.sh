#!/usr/bin/env bash
# bench/long_prompt.sh: TTFT and peak memory of `ignite run --prompt-only`
# for prompts of N tokens, chunked (--chunk 512, the default) and unchunked
# (--chunk N: the whole prompt in one block). Prints one markdown table row
# per run (the table of docs/benchmarks.md).
#
#   bench/long_prompt.sh [-m MODEL] [-t THREADS] N...      e.g. 1024 2048 4096
#   bench/long_prompt.sh -d DEPTH [-m MODEL] [-t THREADS] N...
#
# With -d, prefill at depth: a DEPTH-token prompt is prefilled and saved once
# (--save-kv), then each run loads it (--load-kv) and prefills N more tokens
# (default chunk), reporting the prefill speed with DEPTH tokens already in the
# cache (load time excluded).
#
# The prompt is English-like text of N tokens exactly (built from a word list
# and cut with `ignite tokenize`). Peak memory is the max RSS /usr/bin/time
# reports: the mapped model pages that were touched count too.
set -eu
IGNITE=${IGNITE:-build/ignite}
MODEL=()
THREADS=2
DEPTH=0
while getopts "d:m:t:" o; do
    case $o in
    d) DEPTH=$OPTARG ;;
    m) MODEL=(-m "$OPTARG") ;;
    t) THREADS=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

words="the a of river light stone morning city old keeper ship harbour wind tower road
market bread letter window garden winter summer quiet evening people north south bell
children story paper music teacher doctor engine bridge forest mountain island night"
make_prompt() { # make_prompt N FILE: exactly N tokens (BOS included if the model adds it)
    local n=$1 out=$2
    python3 - "$n" "$words" >"$TMP/raw" <<'PY'
import random, sys
n, words = int(sys.argv[1]), sys.argv[2].split()
r = random.Random(n)
out = []
for i in range(n + 64):
    out.append(r.choice(words) + ("." if i % 12 == 11 else ""))
print(" ".join(out).capitalize(), end="")
PY
    "$IGNITE" tokenize "${MODEL[@]}" -f "$TMP/raw" --json --pieces >"$TMP/tok.json"
    python3 - "$n" "$TMP/tok.json" >"$out" <<'PY'
import json, sys
n, toks = int(sys.argv[1]), json.load(open(sys.argv[2]))
start = 1 if toks and toks[0]["piece"] in ("<s>", "<|endoftext|>", "<|begin_of_text|>") else 0
pieces = [t["piece"] for t in toks[start:]]
print("".join(pieces[:n - start]), end="")
PY
}

if [ "$DEPTH" -gt 0 ]; then
    make_prompt "$DEPTH" "$TMP/depth"
    "$IGNITE" run "${MODEL[@]}" -t "$THREADS" -q -f "$TMP/depth" -c $((DEPTH + 64)) \
        --prompt-only --save-kv "$TMP/depth.kv"
    echo "| depth | new tokens | prefill s | prefill tok/s | peak RSS MiB | KV MiB |"
    echo "|---:|---:|---:|---:|---:|---:|"
    for n in "$@"; do
        make_prompt "$n" "$TMP/p$n"
        sed -i '1s/^/ /' "$TMP/p$n" # continue the text after a word
        /usr/bin/time -v "$IGNITE" run "${MODEL[@]}" -t "$THREADS" -f "$TMP/p$n" \
            --load-kv "$TMP/depth.kv" -c $((DEPTH + n + 64)) --prompt-only --json \
            >"$TMP/out.json" 2>"$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
        rss=$(awk -F: '/Maximum resident/ {print $2}' "$TMP/err")
        python3 - "$TMP/out.json" "$rss" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
t, kv, tok = o["timings"], o["kv_cache"], o["tokens"]
print(f"| {tok['cached']} | {tok['prompt']} | {t['prefill_ms'] / 1000:.1f} | "
      f"{t['prefill_tok_s']:.1f} | {int(sys.argv[2]) / 1024:.0f} | {kv['bytes'] / 2**20:.0f} |")
PY
    done
    exit 0
fi

echo "| prompt tokens | chunk | TTFT s | prefill tok/s | peak RSS MiB | KV MiB |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in "$@"; do
    make_prompt "$n" "$TMP/p$n"
    for chunk in 512 "$n"; do
        /usr/bin/time -v "$IGNITE" run "${MODEL[@]}" -t "$THREADS" -f "$TMP/p$n" \
            -c $((n + 64)) --chunk "$chunk" --prompt-only --json \
            >"$TMP/out.json" 2>"$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
        rss=$(awk -F: '/Maximum resident/ {print $2}' "$TMP/err")
        python3 - "$TMP/out.json" "$chunk" "$rss" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
t, kv = o["timings"], o["kv_cache"]
print(f"| {o['tokens']['prompt']} | {sys.argv[2]} | {t['ttft_ms'] / 1000:.1f} | "
      f"{t['prefill_tok_s']:.1f} | {int(sys.argv[3]) / 1024:.0f} | {kv['bytes'] / 2**20:.0f} |")
PY
    done
done
