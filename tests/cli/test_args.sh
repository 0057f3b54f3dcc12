# tests/cli/test_args.sh: the command line before any model is read, for
# every command: the single-dash rule (llama.cpp's words refused with what
# ignite has instead, values that start with a dash kept), "did you mean",
# `ignite help CMD`, --version's build lines, bench's list and nothing-to-run
# checks, prompt files that must not be read whole (/dev/zero, an endless
# pipe) and byte-order marks, and write errors that name their reason.
# Needs no model: accepted words are shown by the run going on to fail on a
# model file that is not there (exit 3).
. "$(dirname "$0")/lib.sh"
NOPE=$TMP/nope.gguf

# refused WORD... : `ignite ARGS` exits 2 with one line naming the word.
# Usage: refused "what" WORD PATTERN CMD...
refused() {
    local what=$1 word=$2 pat=$3
    shift 3
    expect_rc 2 "$what" "$@" || return
    expect_empty "$TMP/out" "$what: stdout"
    CHECKS=$((CHECKS + 1))
    [ "$(wc -l <"$TMP/err")" = 1 ] || fail "$what: want one line, got: $(cat "$TMP/err")"
    expect_grep "$TMP/err" "unknown option '$word'" "$what"
    [ -z "$pat" ] || expect_grep "$TMP/err" "$pat" "$what"
}

# llama.cpp's words, each with ignite's way where it has one. -hf once
# printed the help and exited 0; -ngl 99 said "--n-predict: expected an
# integer, got 'gl'".
refused "-hf" -hf "-m FILE" "$IGNITE" -p hi -hf foo/bar
refused "run -hf" -hf "" "$IGNITE" run -hf foo/bar -p hi
refused "--hf-repo" --hf-repo "-m FILE" "$IGNITE" -p hi --hf-repo foo/bar
refused "-cnv" -cnv "--chat" "$IGNITE" -p hi -cnv
refused "-sys" -sys "--system" "$IGNITE" -p hi -sys "be brief"
refused "--system-prompt" --system-prompt "--system" "$IGNITE" -p hi --system-prompt x
refused "info -ctk" -ctk "build a cache (run, chat" "$IGNITE" info -ctk q8_0
refused "tokenize -ctv" -ctv "build a cache (run, chat" "$IGNITE" tokenize -ctv q8_0 hi
# -ctk/-ctv are options of the commands that build a cache: a bad type is
# their one line, naming the four types.
expect_rc 2 "bench -ctk q5_0" "$IGNITE" bench -ctk q5_0
expect_grep "$TMP/err" "cache-type-k: expected f32, f16, q8_0 or q4_0, got 'q5_0'" "bench -ctk q5_0"
expect_rc 2 "run -ctv q5_1" "$IGNITE" -p hi -ctv q5_1
expect_grep "$TMP/err" "cache-type-v: expected f32, f16, q8_0 or q4_0, got 'q5_1'" "run -ctv q5_1"
refused "bench -pg" -pg "-p N and -n N" "$IGNITE" bench -pg 32,8
refused "bench -npp" -npp "bench's -p" "$IGNITE" bench -npp 128
refused "bench -ntg" -ntg "bench's -n" "$IGNITE" bench -ntg 128
refused "bench -npl" -npl "" "$IGNITE" bench -npl 1,2
refused "bench -mg" -mg "cuda:N" "$IGNITE" bench -mg 1
refused "bench -sm" -sm "one device" "$IGNITE" bench -sm row
refused "bench -ts" -ts "one device" "$IGNITE" bench -ts 1/1
refused "-co" -co "" "$IGNITE" -p hi -co
refused "-dev" -dev "--device" "$IGNITE" -p hi -dev CUDA0
refused "bench -ot" -ot "" "$IGNITE" bench -ot "exps=CPU"
refused "bench -nkvo" -nkvo "" "$IGNITE" bench -nkvo 1
refused "bench -mmp" -mmp "memory" "$IGNITE" bench -mmp 0
refused "-ub" -ub "spelling is --batch-size" "$IGNITE" -p hi -ub 64
refused "bench -ub" -ub "spelling is -b, --batch-size" "$IGNITE" bench -ub 64
refused "tokenize -hf" -hf "-m FILE" "$IGNITE" tokenize -hf foo/bar -p hi
refused "info -ngl" -ngl "" "$IGNITE" info -ngl 99
refused "tokenize -fa" -fa "fused attention" "$IGNITE" tokenize -p hi -fa on
refused "bench --jinja" --jinja "render chat templates as Jinja" "$IGNITE" bench --jinja

# -ngl and -fa where a command has --device: taken with llama.cpp's meaning.
# -ngl 0 is the CPU, N > 0 the GPU where one is usable, else the CPU with one
# warning line; against an explicit --device, one line, exit 2. (-ngl 99 once
# said "--n-predict: expected an integer, got 'gl'".) A model that is not
# there (exit 3) shows the words were taken.
"$IGNITE" run -m "$NOPE" -p hi --device cuda >/dev/null 2>&1
GPU=$([ $? = 7 ] && echo no || echo yes)
echo "some text to score" >"$TMP/text.txt"
for cmd in run chat batch bench perplexity; do
    case $cmd in run) more="-p hi" ;; perplexity) more="-f $TMP/text.txt" ;; *) more= ;; esac
    expect_rc 3 "$cmd -ngl 0" "$IGNITE" $cmd -m "$NOPE" $more -ngl 0 </dev/null &&
        expect_grep "$TMP/err" "nope.gguf" "$cmd -ngl 0" &&
        { grep -q warning "$TMP/err" && fail "$cmd -ngl 0 warned: $(cat "$TMP/err")"; true; }
    if [ "$GPU" = no ]; then
        expect_rc 3 "$cmd -ngl 99" "$IGNITE" $cmd -m "$NOPE" $more -ngl 99 </dev/null &&
            expect_grep "$TMP/err" "warning: -ngl 99: no usable CUDA device here, so every layer runs on the CPU" "$cmd -ngl 99"
    fi
    expect_rc 3 "$cmd -fa on" "$IGNITE" $cmd -m "$NOPE" $more -fa on </dev/null
    expect_rc 2 "$cmd --device cpu -ngl 99" "$IGNITE" $cmd -m "$NOPE" $more --device cpu -ngl 99 </dev/null &&
        expect_grep "$TMP/err" "^ignite: --device cpu with -ngl 99: -ngl N > 0 asks for the GPU" "$cmd --device cpu -ngl 99"
    expect_rc 2 "$cmd --device cuda -ngl 0" "$IGNITE" $cmd -m "$NOPE" $more --device cuda:0 -ngl 0 </dev/null
    expect_rc 2 "$cmd -ngl x" "$IGNITE" $cmd -m "$NOPE" $more -ngl x </dev/null &&
        expect_grep "$TMP/err" "n-gpu-layers: expected an integer" "$cmd -ngl x"
    expect_rc 2 "$cmd -fa maybe" "$IGNITE" $cmd -m "$NOPE" $more -fa maybe </dev/null &&
        expect_grep "$TMP/err" "flash-attn: expected on, off or auto" "$cmd -fa maybe"
done
expect_rc 3 "--n-gpu-layers=0" "$IGNITE" -m "$NOPE" -p hi --n-gpu-layers=0
expect_rc 3 "--gpu-layers 0" "$IGNITE" -m "$NOPE" -p hi --gpu-layers 0
expect_rc 3 "-fa off" "$IGNITE" run -m "$NOPE" -p hi -fa off &&
    expect_grep "$TMP/err" "warning: -fa off: ignite always uses its fused attention" "-fa off"
expect_rc 3 "bench -ngl 0,0 -fa 1,1" "$IGNITE" bench -m "$NOPE" -ngl 0,0 -fa 1,1
expect_rc 2 "bench -ngl 0,99" "$IGNITE" bench -m "$NOPE" -ngl 0,99 &&
    expect_grep "$TMP/err" "bench takes one value" "bench -ngl 0,99"
expect_rc 2 "bench -fa 0,1" "$IGNITE" bench -m "$NOPE" -fa 0,1
expect_rc 2 "run -ngl 0,0" "$IGNITE" run -m "$NOPE" -p hi -ngl 0,0
# a word that is a value is never rewritten
expect_rc 3 "-p -ngl" "$IGNITE" run -m "$NOPE" -p -ngl -ngl 0
# An option known to ignite bundled with letters that are not its value.
refused "-qx" -qx "" "$IGNITE" -p hi -qx
refused "-hq" -hq "" "$IGNITE" -p hi -hq
refused "-mg in run" -mg "cuda:N" "$IGNITE" run -p hi -mg 0
refused "-f with letters" -fxyz "a value goes after a space: -f xyz" "$IGNITE" run -fxyz
refused "-m with a path attached" -m/x.gguf "" "$IGNITE" run -p hi -m/x.gguf

# Did you mean: by edit distance, a long name that begins the word counts as near.
refused "--temperature" --temperature "did you mean --temp?" "$IGNITE" -p hi --temperature 0.5
refused "-temp" -temp "did you mean --temp?" "$IGNITE" -p hi -temp 0.5
refused "--max-tokens" --max-tokens "ignite's spelling is -n, --n-predict" "$IGNITE" -p hi --max-tokens 5
refused "batch --max-tokens" --max-tokens "-n, --n-predict" "$IGNITE" batch --max-tokens=5
refused "--n_predict" --n_predict "did you mean -n, --n-predict?" "$IGNITE" -p hi --n_predict 5
refused "--seeed" --seeed "did you mean -s, --seed?" "$IGNITE" -p hi --seeed 5
refused "bench --repetition" --repetitions-count "did you mean -r, --repetitions?" "$IGNITE" bench --repetitions-count 3
refused "nothing near" --zzzzzz "ignite run --help" "$IGNITE" -p hi --zzzzzz
expect_rc 2 "runn" "$IGNITE" runn -p hi && expect_grep "$TMP/err" "unknown command 'runn' (did you mean 'run'?)" "runn"
expect_rc 2 "tokenise" "$IGNITE" tokenise -p hi && expect_grep "$TMP/err" "did you mean 'tokenize'" "tokenise"
expect_rc 2 "no near command" "$IGNITE" frobnicate && expect_grep "$TMP/err" "unknown command 'frobnicate' (run 'ignite --help')" "frobnicate"
expect_rc 2 "ambiguous prefix" "$IGNITE" -p hi --top 5 && expect_grep "$TMP/err" "ambiguous option '--top': --top-k, --top-p" "--top"
expect_rc 2 "a value for a flag" "$IGNITE" -p hi --json=yes && expect_grep "$TMP/err" "--json takes no value" "--json=yes"
# An exact name wins over the longer names it begins (--json beside --json-schema,
# --json-schema-file): the run goes on to fail on the missing model.
expect_rc 3 "an exact name that begins others" "$IGNITE" -m "$NOPE" -p hi --json
expect_rc 3 "the same in batch" "$IGNITE" batch -m "$NOPE" --json-schema "{}" --lines
expect_rc 2 "missing value" "$IGNITE" -p && expect_grep "$TMP/err" "missing value for -p" "-p at the end"
expect_rc 2 "missing long value" "$IGNITE" -p hi --seed && expect_grep "$TMP/err" "missing value for --seed" "--seed at the end"

# Values are kept as getopt takes them: the word after an option that needs
# one, whatever it looks like, and numbers attached to a short option.
for args in "-n -1" "-s -1" "-s-1" "-n64" "-c4096" "-n 5 -t1" "--seed=-1" "--temp 0" "--temp=0.5"; do
    expect_rc 3 "accepted: $args" "$IGNITE" -m "$NOPE" -p hi $args
done
expect_rc 3 "-p -x" "$IGNITE" -m "$NOPE" -p -x
expect_rc 3 "-p -hf" "$IGNITE" -m "$NOPE" -p -hf
expect_rc 3 "--prompt -ngl" "$IGNITE" run -m "$NOPE" --prompt -ngl
expect_rc 3 "--prompt=-ngl" "$IGNITE" run -m "$NOPE" --prompt=-ngl
expect_rc 3 "--system -cnv" "$IGNITE" -m "$NOPE" --chat --system -cnv -p hi
expect_rc 3 "tokenize -p -x" "$IGNITE" tokenize -m "$NOPE" -p -x
# llama-tokenize's -t is taken (and checked), as run's is
expect_rc 3 "tokenize -t" "$IGNITE" tokenize -m "$NOPE" -p hi -t 4
expect_rc 3 "tokenize --threads" "$IGNITE" tokenize -m "$NOPE" -p hi --threads=0
expect_rc 2 "tokenize -t x" "$IGNITE" tokenize -m "$NOPE" -p hi -t x && expect_grep "$TMP/err" "expected an integer" "tokenize -t x"
expect_rc 3 "info -m -x" "$IGNITE" info -m -x
expect_rc 2 "-- ends the options" "$IGNITE" run -p hi -- -ngl && expect_grep "$TMP/err" "unexpected argument '-ngl'" "--"

# help CMD is CMD --help.
for cmd in run info tokenize bench perplexity; do
    expect_rc 0 "help $cmd" "$IGNITE" help $cmd && expect_grep "$TMP/out" "^usage: ignite" "help $cmd"
    CHECKS=$((CHECKS + 1))
    "$IGNITE" $cmd --help >"$TMP/direct" 2>&1
    cmp -s "$TMP/out" "$TMP/direct" || fail "help $cmd differs from $cmd --help"
done
expect_rc 0 "help" "$IGNITE" help && expect_grep "$TMP/out" "ignite help <command>" "help"
expect_rc 2 "help runn" "$IGNITE" help runn && expect_grep "$TMP/err" "did you mean 'run'" "help runn"
expect_rc 2 "help two commands" "$IGNITE" help run info

# --version names the build; the commit is one of this repository's.
expect_rc 0 "--version" "$IGNITE" --version
for field in "^ignite [0-9]" "^build: [0-9a-f]* (-*[0-9]*)$\|^build: unknown (-1)$" "^compiler: \(gcc\|clang\) [0-9]" "^cuda: \(none\|[0-9]*\.[0-9]*\)$" "^cpu int8 kernels: \(avx512vnni\|avxvnni\|avx2\|scalar\)$"; do
    expect_grep "$TMP/out" "$field" "--version"
done
commit=$(sed -n 's/^build: \([0-9a-f]*\) .*/\1/p' "$TMP/out")
if git -C "${IGNITE_SOURCE_DIR:-.}" rev-parse --git-dir >/dev/null 2>&1; then
    CHECKS=$((CHECKS + 1))
    [ -n "$commit" ] && git -C "$IGNITE_SOURCE_DIR" cat-file -e "$commit^{commit}" 2>/dev/null ||
        fail "--version: build commit '$commit' is not a commit of $IGNITE_SOURCE_DIR"
fi
expect_rc 0 "IGNITE_SIMD=scalar --version" env IGNITE_SIMD=scalar "$IGNITE" --version &&
    expect_grep "$TMP/out" "^cpu int8 kernels: scalar$" "kernels chosen at run time"
# Capped at AVX-VNNI: that set where the CPU reports it (Linux's flag
# avx_vnni) and the compiler built it (GCC 11, clang 12 on), else AVX2 (where
# the CPU has it), else scalar.
want=scalar
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then
    want=avx2
    compiler=$("$IGNITE" --version | sed -n 's/^compiler: \([a-z]*\) \([0-9]*\).*/\1 \2/p')
    case $compiler in
    "gcc "*) [ "${compiler#gcc }" -ge 11 ] && built=1 ;;
    "clang "*) [ "${compiler#clang }" -ge 12 ] && built=1 ;;
    esac
    grep -qw avx_vnni /proc/cpuinfo && [ "${built:-0}" = 1 ] && want=avxvnni
fi
expect_rc 0 "IGNITE_SIMD=avxvnni --version" env IGNITE_SIMD=avxvnni "$IGNITE" --version &&
    expect_grep "$TMP/out" "^cpu int8 kernels: $want$" "kernels capped at AVX-VNNI"
# A value that names no set is refused where the kernels would run.
expect_rc 2 "IGNITE_SIMD=avx512" env IGNITE_SIMD=avx512 "$IGNITE" bench \
    -m synthetic:SmolLM2-135M:Q4_1 -p 1 -n 0 -r 1 &&
    expect_grep "$TMP/err" "IGNITE_SIMD: expected scalar, avx2, avxvnni or avx512vnni, got 'avx512'" \
        "IGNITE_SIMD=avx512"
expect_rc 0 "bench -V" "$IGNITE" bench -V && expect_grep "$TMP/out" "^build: " "bench -V"

# Small rules of run and bench.
expect_rc 2 "--chat --no-special" "$IGNITE" -p hi --chat --no-special &&
    expect_grep "$TMP/err" "--no-special does not go with --chat" "--chat --no-special"
expect_rc 0 "run --help" "$IGNITE" run --help && expect_grep "$TMP/out" "1 internal error" "run --help exit codes"
expect_rc 2 "bench -p 0 -n 0" "$IGNITE" bench -p 0 -n 0 && expect_grep "$TMP/err" "nothing to run" "-p 0 -n 0"
expect_rc 2 "bench -p 0,0 -n 0" "$IGNITE" bench -p 0,0 -n 0
for list in "64,,8" "64," ",8" ","; do
    expect_rc 2 "bench -p $list" "$IGNITE" bench -p "$list" && expect_grep "$TMP/err" "empty item" "-p $list"
done

# A prompt file is refused while it is read: a NUL byte at once (not after
# reading /dev/zero until memory runs out), a text past 64 MiB there.
expect_rc 6 "-f /dev/zero" timeout 60 "$IGNITE" -m "$NOPE" -f /dev/zero &&
    expect_grep "$TMP/err" "NUL byte (offset 0 of '/dev/zero')" "/dev/zero"
printf 'ab\0cd' >"$TMP/nul.txt"
expect_rc 6 "NUL in a file" "$IGNITE" -m "$NOPE" -f "$TMP/nul.txt" && expect_grep "$TMP/err" "offset 2 of" "NUL offset"
printf 'ab\0cd' | expect_rc 6 "NUL on stdin" "$IGNITE" -m "$NOPE" -f - && expect_grep "$TMP/err" "offset 2 of 'stdin'" "NUL on stdin"
expect_rc 6 "perplexity -f /dev/zero" timeout 60 "$IGNITE" perplexity -m "$NOPE" -f /dev/zero &&
    expect_grep "$TMP/err" "the text contains a NUL byte (offset 0 of '/dev/zero')" "perplexity /dev/zero"
yes | expect_rc 6 "an endless pipe" timeout 120 "$IGNITE" -m "$NOPE" -f - &&
    expect_grep "$TMP/err" "more than 64 MiB.*offset 67108864" "endless pipe"
yes | expect_rc 6 "tokenize: an endless pipe" timeout 120 "$IGNITE" tokenize -m "$NOPE" -f - 

# A byte-order mark at the start of a prompt file or stdin is dropped: a
# file of a BOM alone is an empty prompt; offsets stay the file's.
printf '\xef\xbb\xbf' >"$TMP/bom.txt"
expect_rc 6 "BOM alone" "$IGNITE" -m "$NOPE" -f "$TMP/bom.txt" && expect_grep "$TMP/err" "the prompt is empty" "BOM alone"
printf '\xef\xbb\xbf' | expect_rc 6 "BOM alone on stdin" "$IGNITE" -m "$NOPE" -f -
printf '\xef\xbb\xbfab\xff' >"$TMP/bombad.txt"
expect_rc 6 "BOM then bad UTF-8" "$IGNITE" -m "$NOPE" -f "$TMP/bombad.txt" && expect_grep "$TMP/err" "0xff at offset 5" "offset after a BOM"
printf 'hi\xef\xbb\xbf' >"$TMP/bomlate.txt"
expect_rc 3 "a BOM later is text" "$IGNITE" -m "$NOPE" -f "$TMP/bomlate.txt"
expect_rc 3 "-p keeps a BOM" "$IGNITE" -m "$NOPE" -p $'\xef\xbb\xbf'

# File names are quoted the one way in every message.
expect_rc 3 "missing prompt file" "$IGNITE" -m "$NOPE" -f "$TMP/no file.txt" &&
    expect_grep "$TMP/err" "cannot open '$TMP/no file.txt': No such file" "quoted prompt file"
expect_rc 3 "missing model" "$IGNITE" -m "$NOPE" -p hi && expect_grep "$TMP/err" "'$NOPE'" "quoted model"
# A word after the options: one line naming it (it was two).
for cmd in run chat batch bench perplexity; do
    expect_rc 2 "$cmd extra" "$IGNITE" $cmd extra || continue
    CHECKS=$((CHECKS + 1))
    [ "$(wc -l <"$TMP/err")" = 1 ] || fail "$cmd extra: want one line, got: $(cat "$TMP/err")"
    expect_grep "$TMP/err" "unexpected argument 'extra' (.*'ignite $cmd --help' lists" "$cmd extra"
done
expect_rc 2 "--stop bad UTF-8" "$IGNITE" -m "$NOPE" -p hi --stop "$(printf 'a\377')" &&
    expect_grep "$TMP/err" "--stop: not valid UTF-8 (byte 0xff at offset 1)" "--stop bad UTF-8"
# --json where the command has none: not "ambiguous" between the schema options
for cmd in batch chat; do
    expect_rc 2 "$cmd --json" "$IGNITE" $cmd --json &&
        expect_grep "$TMP/err" "unknown option '--json': $cmd" "$cmd --json"
done
# Environment switches with a value they do not know: one line, exit 2.
for var in IGNITE_MATMUL IGNITE_QMM_PATH IGNITE_SIMD; do
    expect_rc 2 "$var=bogus" env "$var=bogus" "$IGNITE" bench -m synthetic:Llama-tiny -r 1 -p 0 -n 1 &&
        expect_grep "$TMP/err" "$var: expected .* got 'bogus'" "$var=bogus"
done
# Refused before the model (and the run) rather than after it: an empty
# output name, bench's thread counts past the pool's 256, a batch input
# that is a directory.
expect_rc 2 "--save-kv ''" "$IGNITE" -m "$NOPE" -p hi --save-kv '' &&
    expect_grep "$TMP/err" "--save-kv: the file name is empty" "--save-kv ''"
expect_rc 2 "--kl-divergence-base ''" "$IGNITE" perplexity -m "$NOPE" -f "$NOPE" --kl-divergence-base '' &&
    expect_grep "$TMP/err" "the file name is empty" "--kl-divergence-base ''"
expect_rc 2 "bench -t 5000" "$IGNITE" bench -m "$NOPE" -t 1,5000 &&
    expect_grep "$TMP/err" "expected an integer in \[0, 256\], got '5000'" "bench -t 5000"
expect_rc 3 "batch -f DIR" "$IGNITE" batch -m "$NOPE" -f "$TMP" &&
    expect_grep "$TMP/err" "cannot read '$TMP': Is a directory" "batch -f DIR"

# Output that cannot be written names the real reason, for every command.
if [ -w /dev/full ]; then
    for args in "--help" "--version" "help run" "info --help" "bench -V" "tokenize --help"; do
        CHECKS=$((CHECKS + 1))
        "$IGNITE" $args >/dev/full 2>"$TMP/err"
        rc=$?
        [ "$rc" = 3 ] && grep -q "cannot write to stdout: No space left on device" "$TMP/err" ||
            fail "$args >/dev/full: exit $rc, want 3 naming ENOSPC: $(cat "$TMP/err")"
    done
fi
# A reader that goes away ends every command quietly (status 0, no message):
# stdout is a pipe whose reading end is closed before ignite starts.
closed_pipe() {
    python3 - "$@" <<'PY'
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE, timeout=120)
sys.stderr.write(p.stderr.decode("utf-8", "replace"))
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)
PY
}
for args in "--help" "--version" "help bench" "bench --help" "tokenize -V"; do
    expect_rc 0 "$args | (closed)" closed_pipe "$IGNITE" $args && expect_empty "$TMP/err" "$args | (closed)"
done

finish test_args
