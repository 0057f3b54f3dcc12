#!/usr/bin/env bash
# scripts/gpu/moe.sh: the moe step of the GPU check (scripts/gpu-steps-arch.txt;
# the mixture of experts on the CUDA backend, docs/gpu.md "Mixture of experts").
# Its parts, in order (MOE_PARTS picks):
#
#   part     about  what
#   correct   5 s   test_backend_moe_gpu on bench/random_gguf.py's tiny qwen3moe
#                   (Q8_0) and tiny gpt-oss (F16: sinks, biases, window): the
#                   backend against the CPU backend, native and f16 weights,
#                   every product the real kernels' (the emulated test's
#                   checks, tests/emu/test_backend_moe_emu.c), and on its tiny
#                   qwen35moe (Q8_0): the shared expert beside the routed ones;
#                   tiny gpt-oss MXFP4 in native weights (the tensor cores' MXFP4)
#   kernels  ~20 s  bench_moe --peak 989 (H100/H200 SXM dense f16): the expert
#                   products at Qwen3-30B-A3B's shape (one layer, Q4_K/Q6_K)
#                   and at gpt-oss-20b's (--shape gpt-oss: MXFP4, the clamped
#                   SwiGLU with biases), a run each (60 s limit each),
#                   tensor cores (gk_moe_mma) against the GEMV, rows 512 and
#                   2048: TFLOPS, over cuBLAS's f16 GEMM and of the peak (issue
#                   45: >= 0.40 at pp2048); the lines into moe.txt
#   speed    ~150 s Qwen3-30B-A3B's shape with its first MOE_LAYERS (default 12)
#                   layers in Q4_K_M (bench/random_gguf.py; written, measured,
#                   deleted: the machine's disk holds one large file at a time):
#                   ignite bench --device cuda pp512, pp2048, tg128, and
#                   llama-bench on the same file where .gpubin/llama.cpp/bin runs
#                   (scripts/llamacpp-cuda.sh); the ratios in moe.txt
#   full-gptoss ~200 s, full-qwen3 ~230 s: issue 45's GPU targets at full
#                   size, one file a part (written, measured, deleted):
#                   gpt-oss-20b (MXFP4 experts, the rest Q8_0), Qwen3-30B-A3B
#                   (Q4_K_M). Per file: `ignite
#                   info --json`'s bytes read a token (the active weights), tg128
#                   and pp2048 of one sequence, 64 sequences in flight (`bench
#                   --requests 128 -P 64`, 128 in / 128 out), llama-bench beside
#                   where it runs; then the decode's bytes a token x tok/s over
#                   the device-to-device copy (target >= 0.60) and 64 sequences'
#                   output rate over one sequence's tg128 (target >= 8). Not
#                   default parts: a lease of their own (gpu-steps-moe-full.txt)
#   gemma4   ~20 s  Gemma 4's MoE (the dense MLP beside GeGLU experts, router
#                   and per-expert scales) on bench/random_gguf.py's gemma4
#                   moe-tiny (F16, head dims 64 / 128: the real 26B-A4B's
#                   global 512 is not on the GPU yet): ignite bench --device
#                   cuda pp512, tg128 (it runs, not refused) and llama-bench
#                   on the same file; not a default part (MOE_PARTS=gemma4)
#
# Under scripts/gpu-check.sh: $BIN (the prebuilt programs), $WORK (this step's
# directory; moe.txt there comes back), $PY. Alone, from the repository: BIN
# defaults to .gpubin, WORK to build-gpu-moe. Exit 1 when a part failed (the
# later ones still run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BIN=${BIN:-$PWD/.gpubin}
WORK=${WORK:-$PWD/build-gpu-moe}
PY=${PY:-python3}
PARTS=${MOE_PARTS:-correct kernels speed}
LAYERS=${MOE_LAYERS:-12}
MODEL_DIR=${MODEL_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$WORK"
cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
export LD_LIBRARY_PATH="$BIN/lib:$cuda_root/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TABLE=$WORK/${MOE_TABLE:-moe.txt} # the step table names it
: >"$TABLE"
status=0
t0=$(date +%s)
say() { echo "-- $* ($(( $(date +%s) - t0 )) s)"; }
fail() { echo "FAILED: $*" | tee -a "$TABLE"; status=1; }

part_correct() {
    local f=$WORK/qwen3moe_tiny_q8_0.gguf f35=$WORK/qwen35moe_tiny_q8_0.gguf o=$WORK/gptoss_tiny_f16.gguf
    local o4=$WORK/gptoss_tiny_mxfp4.gguf
    timeout 30 "$PY" bench/random_gguf.py "$f" --arch qwen3moe --shape tiny --type Q8_0 ||
        { fail "random_gguf tiny"; return; }
    timeout 30 "$PY" bench/random_gguf.py "$f35" --arch qwen35moe --shape tiny --type Q8_0 ||
        { fail "random_gguf qwen35moe tiny"; return; }
    timeout 30 "$PY" bench/random_gguf.py "$o" --arch gpt-oss --shape tiny --type F16 ||
        { fail "random_gguf gpt-oss tiny"; return; }
    timeout 30 "$PY" bench/random_gguf.py "$o4" --arch gpt-oss --shape tiny --type MXFP4 ||
        { fail "random_gguf gpt-oss tiny MXFP4"; return; }
    say "test_backend_moe_gpu"
    timeout 60 "$BIN/test_backend_moe_gpu" "$f" "$f35" "$o" "$o4" >"$WORK/test_backend_moe_gpu.log" 2>&1 ||
        fail "test_backend_moe_gpu (exit $?)"
    grep -E "worst|checks" "$WORK/test_backend_moe_gpu.log" | tee -a "$TABLE"
}

part_kernels() {
    local shape
    for shape in qwen3 gpt-oss; do
        say "bench_moe --shape $shape"
        timeout 60 "$BIN/bench_moe" --shape "$shape" --rows 512,2048 --peak 989 \
            >"$WORK/bench_moe_$shape.txt" 2>&1 || fail "bench_moe --shape $shape (exit $?)"
        grep "^moe " "$WORK/bench_moe_$shape.txt" | tee -a "$TABLE"
    done
}

part_speed() {
    local f=$MODEL_DIR/random-qwen3-30b-a3b-l$LAYERS-q4_k_m.gguf
    local lb=$BIN/llama.cpp/bin/llama-bench lib=$BIN/llama.cpp/lib
    rm -f "$WORK/ignite_moe.jsonl" "$WORK/llama_moe.jsonl"
    say "write $f"
    timeout 150 "$PY" bench/random_gguf.py "$f" --arch qwen3moe --shape Qwen3-30B-A3B \
        --layers "$LAYERS" --type Q4_K_M || { fail "random_gguf Qwen3-30B-A3B"; return; }
    say "ignite bench"
    timeout 120 "$BIN/ignite" bench --device cuda -m "$f" -p 512,2048 -n 128 -r 3 -b 2048 \
        -o jsonl >>"$WORK/ignite_moe.jsonl" || fail "ignite bench qwen3moe"
    if LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" "$lb" --help >/dev/null 2>&1; then
        say "llama-bench"
        LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 120 "$lb" -m "$f" -p 512,2048 \
            -n 128 -r 3 -ngl 99 -b 2048 -ub 2048 -o jsonl >>"$WORK/llama_moe.jsonl" \
            2>"$WORK/llama_moe.err" || fail "llama-bench qwen3moe"
    else
        echo "llama.cpp: skipped, no runnable $lb (scripts/llamacpp-cuda.sh)" | tee -a "$TABLE"
    fi
    rm -f "$f"
    "$PY" - "$WORK/llama_moe.jsonl" "$WORK/ignite_moe.jsonl" <<'PY' | tee -a "$TABLE"
import json, os, sys
def rows(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
llama = {(r["n_prompt"], r["n_gen"]): r for r in rows(sys.argv[1])}
print("| test | llama.cpp t/s | ignite t/s | ignite / llama.cpp |")
print("| --- | ---: | ---: | ---: |")
for r in rows(sys.argv[2]):
    k = (r["n_prompt"], r["n_gen"])
    t = f"pp{k[0]}" if k[0] else f"tg{k[1]}"
    l = llama.get(k)
    ratio = f"{r['avg_ts'] / l['avg_ts']:.2f}" if l else "-"
    lts = f"{l['avg_ts']:.1f}" if l else "-"
    print(f"| {t} | {lts} | {r['avg_ts']:.1f} | {ratio} |")
PY
}

part_gemma4() {
    local f=$WORK/gemma4_moe_tiny_f16.gguf lb=$BIN/llama.cpp/bin/llama-bench
    local lib=$BIN/llama.cpp/lib
    timeout 60 "$PY" bench/random_gguf.py "$f" --arch gemma4 --shape moe-tiny --type F16 ||
        { fail "random_gguf gemma4 moe-tiny"; return; }
    say "ignite bench gemma4 moe-tiny"
    timeout 60 "$BIN/ignite" bench --device cuda -m "$f" -p 512 -n 128 -r 3 -o jsonl \
        >"$WORK/ignite_g4moe.jsonl" || fail "ignite bench gemma4 moe-tiny"
    if LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" "$lb" --help >/dev/null 2>&1; then
        LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 60 "$lb" -m "$f" -p 512 -n 128 \
            -r 3 -ngl 99 -o jsonl >"$WORK/llama_g4moe.jsonl" 2>"$WORK/llama_g4moe.err" ||
            fail "llama-bench gemma4 moe-tiny"
    fi
    for r in "$WORK/ignite_g4moe.jsonl" "$WORK/llama_g4moe.jsonl"; do
        [ -s "$r" ] && sed "s|^|gemma4 moe-tiny $(basename "$r" .jsonl): |" "$r" | tee -a "$TABLE"
    done
}

# full_one ARCH SHAPE TYPE: one full-size file through the full part.
full_one() {
    local arch=$1 shape=$2 type=$3 f tag lb=$BIN/llama.cpp/bin/llama-bench lib=$BIN/llama.cpp/lib
    tag=$arch-$type
    f=$MODEL_DIR/random-$shape-$type.gguf
    say "write $f"
    timeout 150 "$PY" bench/random_gguf.py "$f" --arch "$arch" --shape "$shape" --type "$type" ||
        { fail "random_gguf $shape $type"; rm -f "$f"; return; }
    timeout 60 "$BIN/ignite" info -m "$f" --json >"$WORK/info_$tag.json" ||
        fail "ignite info $shape"
    say "ignite bench $shape"
    timeout 60 "$BIN/ignite" bench --device cuda -m "$f" -p 2048 -n 128 -r 2 -b 2048 -o jsonl \
        >"$WORK/one_$tag.jsonl" || fail "ignite bench $shape"
    say "ignite bench --requests 128 -P 64 $shape"
    timeout 50 "$BIN/ignite" bench --device cuda -m "$f" --requests 128 -P 64 --input-len 128 \
        --output-len 128 -o jsonl >"$WORK/p64_$tag.jsonl" || fail "ignite bench -P 64 $shape"
    if LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" "$lb" --help >/dev/null 2>&1; then
        say "llama-bench $shape"
        LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 50 "$lb" -m "$f" -p 2048 -n 128 \
            -r 1 -ngl 99 -b 2048 -ub 2048 -o jsonl >"$WORK/llama_$tag.jsonl" \
            2>"$WORK/llama_$tag.err" || fail "llama-bench $shape"
    fi
    rm -f "$f"
    "$PY" - "$tag" "$WORK" "$COPY" <<'PY' | tee -a "$TABLE"
import json, os, sys
tag, work, copy = sys.argv[1], sys.argv[2], float(sys.argv[3] or 0)
def rows(name):
    p = os.path.join(work, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
def get(name):
    p = os.path.join(work, name)
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return {}
info = get(f"info_{tag}.json")
bpt = (info.get("model") or info).get("bytes_per_token") or 0
one = {("pp" if r["n_prompt"] else "tg"): r["avg_ts"] for r in rows(f"one_{tag}.jsonl")}
lcp = {("pp" if r["n_prompt"] else "tg"): r["avg_ts"] for r in rows(f"llama_{tag}.jsonl")}
p64 = rows(f"p64_{tag}.jsonl")
p64 = p64[-1] if p64 else {}
print(f"{tag}: bytes a token {bpt:.0f}, copy {copy:.0f} GB/s")
for k in ("pp", "tg"):
    if k in one:
        n = "pp2048" if k == "pp" else "tg128"
        line = f"{tag} {n}: ignite {one[k]:.1f} t/s"
        if k in lcp:
            line += f", llama.cpp {lcp[k]:.1f} t/s, x{one[k] / lcp[k]:.2f}"
        if k == "tg" and bpt and copy:
            gbps = bpt * one[k] / 1e9
            line += f"; {gbps:.0f} GB/s = {gbps / copy:.2f} of the copy (target >= 0.60)"
        print(line)
out = p64.get("output_throughput")
if out and one.get("tg"):
    print(f"{tag} 64 in flight: {out:.1f} output t/s (decode {p64.get('tg_tok_s') or 0:.1f}), "
          f"x{out / one['tg']:.1f} one sequence's tg128 (target >= 8)")
PY
}

# part_full ARCH SHAPE TYPE: the copy's bandwidth, then the file.
part_full() {
    COPY=$(timeout 20 "$BIN/bench_qmm" --copy-only 2>/dev/null | sed -n 's/.*GBps=\([0-9.]*\).*/\1/p' |
        head -1)
    echo "copy ${COPY:-?} GB/s (bench_qmm --copy-only)" | tee -a "$TABLE"
    full_one "$@"
}

for p in $PARTS; do
    case $p in
    correct) part_correct ;;
    kernels) part_kernels ;;
    speed) part_speed ;;
    full-gptoss) part_full gpt-oss gpt-oss-20b MXFP4 ;;
    full-qwen3) part_full qwen3moe Qwen3-30B-A3B Q4_K_M ;;
    gemma4) part_gemma4 ;;
    *) fail "unknown part $p (correct, kernels, speed, full-gptoss, full-qwen3, gemma4)" ;;
    esac
done
say "done"
exit $status
