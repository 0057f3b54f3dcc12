#!/usr/bin/env bash
# bench/arch_speed.sh: ignite bench against llama-bench on the random-weight files of the
# architectures that have no downloadable weights (the shapes and layer counts the MoE,
# hybrid and Gemma 4 issues name), on the CPU, 2 threads, the two engines in turn (A B A B)
# on one file at a time, each line with the load average it ran under. Meant for a quiet
# machine: llama.cpp's OpenMP threads wait by spinning, so any other load makes its figures
# (and the ratios) meaningless.
#
#   bench/arch_speed.sh [-w] [-r REPS] [-o OUT] [NAME...]
#     -w       write the files only (into $IGNITE_BENCH_MODELS, default
#              ~/.cache/ignite/bench-models; a file already there is kept)
#     -r REPS  repetitions of each engine's run (default 2)
#     -o OUT   the raw lines (default arch_speed.txt); a table goes to stdout
#     NAME     some of: qwen3moe qwen35-q4 qwen35-q8 qwen35-8k gemma4 gptoss (default all)
#
# Needs bench/llamacpp_build.sh's llama-bench (it prints where) and build/ignite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${IGNITE_BENCH_MODELS:-$HOME/.cache/ignite/bench-models}
ignite=${IGNITE_BIN:-$root/build/ignite}
py=${PYTHON:-$root/.venv/bin/python}
reps=2 out=arch_speed.txt write_only=0
while getopts "wr:o:" o; do
    case $o in
    w) write_only=1 ;;
    r) reps=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))

# name: file, random_gguf.py arguments, bench arguments (both engines)
declare -A FILE ARGS TESTS
FILE[qwen3moe]=qwen3moe-30b-a3b-l24-q4_k_m.gguf
ARGS[qwen3moe]="--arch qwen3moe --shape Qwen3-30B-A3B --layers 24 --type Q4_K_M"
TESTS[qwen3moe]="-p 512 -n 128"
FILE[qwen35-q4]=qwen35-0.8b-q4_k_m.gguf
ARGS[qwen35-q4]="--arch qwen35 --shape Qwen3.5-0.8B --type Q4_K_M"
TESTS[qwen35-q4]="-p 512 -n 128"
FILE[qwen35-q8]=qwen35-0.8b-q8_0.gguf
ARGS[qwen35-q8]="--arch qwen35 --shape Qwen3.5-0.8B --type Q8_0"
TESTS[qwen35-q8]="-p 512 -n 128"
FILE[qwen35-8k]=qwen35-0.8b-q4_k_m.gguf
ARGS[qwen35-8k]=${ARGS[qwen35-q4]}
TESTS[qwen35-8k]="-p 8192 -n 0 -b 8192"
FILE[gemma4]=gemma4-e2b-q4_k_m.gguf
ARGS[gemma4]="--arch gemma4 --shape E2B --type Q4_K_M"
TESTS[gemma4]="-p 512 -n 128"
FILE[gptoss]=gpt-oss-20b-l12-mxfp4.gguf
ARGS[gptoss]="--arch gpt-oss --shape gpt-oss-20b --layers 12 --type MXFP4"
TESTS[gptoss]="-p 512 -n 128"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(qwen3moe qwen35-q4 qwen35-q8 qwen35-8k gemma4 gptoss)

mkdir -p "$dir"
for n in "${names[@]}"; do
    [ -n "${FILE[$n]:-}" ] || { echo "arch_speed: unknown name '$n'" >&2; exit 2; }
    f=$dir/${FILE[$n]}
    if [ ! -s "$f" ]; then
        echo "arch_speed: writing $f" >&2
        # shellcheck disable=SC2086
        "$py" "$root/bench/random_gguf.py" "$f.part" ${ARGS[$n]} >&2
        mv "$f.part" "$f"
    fi
done
[ "$write_only" = 0 ] || exit 0

bin=$("$root/bench/llamacpp_build.sh" llama-bench)
load() { cut -d' ' -f1 /proc/loadavg; }
: >"$out"
for n in "${names[@]}"; do
    f=$dir/${FILE[$n]}
    for rep in $(seq "$reps"); do
        # shellcheck disable=SC2086
        echo "# $n ignite rep $rep load $(load) $(date -u +%T)" >>"$out"
        "$ignite" bench -m "$f" ${TESTS[$n]} -t 2 -r 1 -o jsonl 2>/dev/null >>"$out"
        echo "# $n llama rep $rep load $(load) $(date -u +%T)" >>"$out"
        "$bin/llama-bench" -m "$f" ${TESTS[$n]} -t 2 -r 1 -o jsonl 2>/dev/null >>"$out"
    done
    echo "# $n done load $(load) $(date -u +%T)" >>"$out"
done
# the table: each test's tok/s by engine (the mean of the reps) and the ratio
"$py" - "$out" <<'EOF'
import json, sys
rows, name, eng = {}, None, None
for line in open(sys.argv[1]):
    if line.startswith("# "):
        w = line.split()
        name, eng = w[1], w[2]
        continue
    try:
        r = json.loads(line)
    except ValueError:
        continue
    test = r.get("test") or (f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}")
    rows.setdefault((name, test), {}).setdefault(eng, []).append(r["avg_ts"])
print("| file | test | ignite tok/s | llama-bench tok/s | ratio |")
print("|---|---|---|---|---|")
for (name, test), e in rows.items():
    a = sum(e.get("ignite", [0])) / max(1, len(e.get("ignite", [])))
    b = sum(e.get("llama", [0])) / max(1, len(e.get("llama", [])))
    print(f"| {name} | {test} | {a:.2f} | {b:.2f} | {a / b if b else float('nan'):.2f}x |")
EOF
