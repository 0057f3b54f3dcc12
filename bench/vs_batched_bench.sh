#!/usr/bin/env bash
# bench/vs_batched_bench.sh: ignite's batch engine (`ignite bench --requests`)
# beside llama.cpp's llama-batched-bench on the same GGUF, with the same
# threads, in one run; a benchmark, not a test (not part of CI).
#
# For each npl, llama-batched-bench prefills npl prompts of npp random tokens
# and then decodes ntg tokens for all npl sequences in lockstep: S_PP, S_TG
# (npl x ntg / the decode phase's time) and S (all tokens / all the time).
# ignite runs npl requests of npp prompt tokens and ntg generated tokens,
# all arriving at once with npl in flight: its tg_tok_s is the decode phase's
# rate (S_TG's counterpart), total_token_throughput is S's, and
# output_throughput counts the prefill time too. docs/benchmarks.md has the
# mapping and the figures. Single-sequence tg (ignite bench -n ntg) is
# printed for the ratio the issue asks about.
#
# usage: bench/vs_batched_bench.sh [-m model.gguf] [-t 2] [-npp 128] [-ntg 128] [-npl 1,4,8]
# env:   IGNITE (default build/ignite), IGNITE_CACHE (~/.cache/ignite)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${IGNITE_CACHE:-$HOME/.cache/ignite}
ignite=${IGNITE:-$here/build/ignite}
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf threads=$(nproc) npp=128 ntg=128 npl=1,4,8

while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -npp) npp=$2; shift 2 ;;
    -ntg) ntg=$2; shift 2 ;;
    -npl) npl=$2; shift 2 ;;
    *) echo "vs_batched_bench.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done

bin=$("$here/bench/llamacpp_build.sh" llama-batched-bench)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
largest=$(echo "$npl" | tr ',' '\n' | sort -n | tail -1)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/llama-batched-bench" -m "$model" -c $(( largest * (npp + ntg) + 64 )) -b 2048 -ub 512 \
    -npp "$npp" -ntg "$ntg" -npl "$npl" -t "$threads" --output-format jsonl 2>/dev/null |
    grep '^{' >"$out/llama.jsonl"
for pl in ${npl//,/ }; do
    "$ignite" bench -m "$model" -t "$threads" --requests "$pl" --parallel "$pl" \
        --input-len "$npp" --output-len "$ntg" -o jsonl >>"$out/ignite.jsonl"
done
"$ignite" bench -m "$model" -t "$threads" -p 0 -n "$ntg" -r 3 -o jsonl >"$out/tg.jsonl"
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/llama.jsonl" "$out/ignite.jsonl" "$out/tg.jsonl" <<'PY'
import json, sys
llama = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ign = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
tg = [json.loads(l) for l in open(sys.argv[3]) if l.strip()][0]["avg_ts"]
print(f"single-sequence tg (ignite bench): {tg:.1f} tok/s")
print("| npl | llama S_TG | ignite tg_tok_s | ratio | llama S | ignite total tok/s | ratio "
      "| ignite output tok/s | vs single tg |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for l in llama:
    i = next((r for r in ign if r["parallel"] == l["pl"]), None)
    if i is None:
        continue
    print(f"| {l['pl']} | {l['speed_tg']:.1f} | {i['tg_tok_s']:.1f} | "
          f"{i['tg_tok_s'] / l['speed_tg']:.2f}x | {l['speed']:.1f} | "
          f"{i['total_token_throughput']:.1f} | {i['total_token_throughput'] / l['speed']:.2f}x | "
          f"{i['output_throughput']:.1f} | {i['output_throughput'] / tg:.2f}x |")
PY
