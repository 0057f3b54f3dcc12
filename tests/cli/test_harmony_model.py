"""tests/cli/test_harmony_model.py: a harmony chat (gpt-oss) end to end on
the tiny random gpt-oss file, against a reference parse written here from
the rules (generate/harmony.h) on the answer as the model wrote it.

The file: bench/random_gguf.py's gpt-oss `tiny` shape in MXFP4, with a
vocabulary made here: SmolLM2's (the default test model's) first 2048
tokens and their merges, "analysis", "final", "assistant", harmony's
control tokens, <|return|> the EOS, and gpt-oss's chat template
(tests/unit/data/openai-gpt-oss-120b.jinja, llama.cpp's copy). The output
rows of the markers and of the three words are scaled up so that the random model writes markers often (a random model
that never wrote one would prove nothing: the test checks it did).

  - batch: 24 chat lines of different seeds in one run; each line's
    "text" and "analysis" are the reference parse of its "raw" (the
    answer with its markers); no "text" holds a marker; some lines have
    markers in "raw", some an analysis, one at least a final channel; the
    same lines through `batch --pd 1:1` under mpirun give the same lines.
  - run --chat (a seed whose answer has an analysis, if any, and another):
    stdout is the --json run's "text" (same seed), no markup; with
    --verbose stderr shows "[analysis] " and the analysis text.
  - chat, two turns (greedy): the first answer is run's; the second is
    the answer of a run whose prompt is jinja2's render of the whole
    conversation, the first answer written as the template writes it
    (final channel only, <|end|>): the cache went back to where the
    first answer began, as the template wants the history.
Exits 77 without the default test model (its vocabulary is borrowed).
Time: ~6 s on 2 cores."""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "pylib"))

from igtest import check, model_path, sanitized, summary  # noqa: E402

IGNITE = os.environ["IGNITE_BIN"]
TEMPLATE = os.path.join(ROOT, "tests", "unit", "data", "openai-gpt-oss-120b.jinja")
MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
           "<|constrain|>"]
KEEP = 2048
N_LINES = 12 if sanitized() else 32  # an ASan build's forward is ~30x slower
WORDS = ["analysis", "final", "assistant"]
BOOST = 5.0


def write_model(d):
    """The tiny random gpt-oss file with the harmony vocabulary."""
    import gguf
    import numpy as np
    from bench_gguf import random_gguf
    src = gguf.GGUFReader(model_path())
    f = src.fields
    # SmolLM2's first KEEP tokens (the bytes, the first merges: a small
    # embedding, a quick file) and the merges among them, then the channel
    # words as plain tokens (the model may write them; text never encodes
    # to them) and the markers
    tokens = f["tokenizer.ggml.tokens"].contents()[:KEEP] + WORDS
    kept = set(tokens)
    merges = [m for m in f["tokenizer.ggml.merges"].contents()
              if set(m.split(" ")) <= kept and m.replace(" ", "") in kept]
    n0 = len(tokens)
    vocab = os.path.join(d, "vocab.gguf")
    w = gguf.GGUFWriter(vocab, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(f["tokenizer.ggml.pre"].contents())
    w.add_token_list(tokens + MARKERS)
    types = f["tokenizer.ggml.token_type"].contents()[:KEEP] + [1] * len(WORDS)
    w.add_token_types(types + [3] * len(MARKERS))
    w.add_token_merges(merges)
    w.add_eos_token_id(n0 + MARKERS.index("<|return|>"))
    with open(TEMPLATE) as t:
        w.add_chat_template(t.read())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    path = os.path.join(d, "gptoss-harmony.gguf")
    random_gguf.write(path, "tiny", "MXFP4", seed=45, arch="gpt-oss", vocab_from=vocab)
    # the markers (but <|return|>, which would end every answer early) and
    # the channel words: their output rows scaled, Q8_0 blocks' f16 scales
    r = gguf.GGUFReader(path, "r+")
    out = [t for t in r.tensors if t.name == "output.weight"][0]
    assert out.tensor_type.name == "Q8_0", out.tensor_type.name
    ids = [tokens.index(w) for w in WORDS] + [n0 + k for k in range(4)]
    for i in ids:
        row = out.data[i].view(np.uint8).reshape(-1, 34)
        row[:, :2] = (row[:, :2].copy().view(np.float16) * np.float16(BOOST)).view(np.uint8)
    del r
    return path


# ---- the reference parse (generate/harmony.h's rules, on the whole answer) ----

MARK = re.compile(rb"(<\|[a-z0-9_]{1,32}\|>)")
HEADER_MAX = 255  # HARMONY_HEADER_MAX - 1 bytes kept


def header_channel(h):
    if h.startswith(b"to=") or b" to=" in h:
        return "other"
    at = h.rfind(b"<|channel|>")
    if at < 0:
        return "final"
    name = re.match(rb"[^ <]*", h[at + 11:]).group(0)
    return {b"final": "final", b"commentary": "final", b"analysis": "analysis"}.get(name,
                                                                                 "other")


def parse(raw):
    """(final, analysis) of an answer as the model wrote it."""
    state, header, ch = "start", b"", "final"
    got = {"final": b"", "analysis": b"", "other": b""}
    for part in MARK.split(raw.encode()):
        if not part:
            continue
        m = MARK.fullmatch(part)
        if m:
            name = part[2:-2]
            if name == b"start":
                state, header = "header", b""
            elif name == b"channel":
                if state not in ("header", "start"):
                    header = b""
                state = "header"
                header = (header + part)[:HEADER_MAX]
            elif name == b"constrain":
                if state == "header":
                    header = (header + part)[:HEADER_MAX]
            elif name == b"message":
                if state != "body":
                    ch = header_channel(header) if state != "out" else "final"
                    state = "body"
            elif name in (b"end", b"return", b"call"):
                state = "out"
            continue
        if state == "start":
            s = header + part
            if s.startswith(b" to=") or b" to=".startswith(s):
                header = s[:HEADER_MAX]
                continue
            state, ch, header = "body", "final", b""
            got["final"] += s
        elif state == "body":
            got[ch] += part
        elif state == "header":
            header = (header + part)[:HEADER_MAX]
    if state == "start":
        got["final"] += header
    return got["final"].decode("utf-8", "replace"), got["analysis"].decode("utf-8", "replace")


def ignite(*args, stdin=b""):
    r = subprocess.run([IGNITE, *args], input=stdin, capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def has_marker(s):
    return any(m in s for m in MARKERS)


def batch_lines():
    return "".join(json.dumps({"prompt": "Hello", "chat": True, "seed": s, "n_predict": 48})
                   + "\n" for s in range(1, N_LINES + 1)).encode()


def check_batch_pd(model, want):
    """batch --pd 1:1 (prefill and decode ranks): each line's text, analysis
    and raw answer are one process's (the decode rank keeps the markers for
    rank 0's channels). Skipped without mpirun or an MPI build."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("batch --pd: no mpirun, not run")
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "tp"))
    from tplib import mpi  # (Open MPI's own allocations out of LeakSanitizer's report)
    r = mpi(mpirun, 2, [IGNITE, "batch", "--pd", "1:1", "-m", model, "-t", "1", "-q"],
            input=batch_lines(), timeout=900 if sanitized() else 300)
    if b"built without" in r.stderr:
        print("batch --pd: this ignite has no MPI, not run")
        return
    check(r.returncode == 0, f"batch --pd 1:1 exits {r.returncode}: {r.stderr[-300:]!r}")
    got = [json.loads(x) for x in r.stdout.decode("utf-8", "replace").splitlines() if x.strip()]
    key = [(o["sampling"]["seed"], o.get("text"), o.get("analysis"), o.get("raw")) for o in want]
    gkey = sorted((o["sampling"]["seed"], o.get("text"), o.get("analysis"), o.get("raw"))
                  for o in got)
    check(gkey == sorted(key), f"batch --pd 1:1: {len(got)} lines; the first that differs "
          f"{[g for g, k in zip(gkey, sorted(key)) if g != k][:1]}")


def check_batch(model):
    """Returns the seeds whose answers have an analysis."""
    rc, out, err = ignite("batch", "-m", model, "-t", "2", "-q", stdin=batch_lines())
    check(rc == 0, f"batch exits {rc}: {err.strip()[-300:]}")
    objs = [json.loads(x) for x in out.splitlines() if x.strip()]
    check(len(objs) == N_LINES, f"batch wrote {len(objs)} lines, not {N_LINES}")
    marked = analysed = dropped = 0
    for o in objs:
        want = parse(o.get("raw", ""))
        check((o.get("text"), o.get("analysis")) == want,
              f"seed {o['sampling']['seed']}: text/analysis {o.get('text')!r}, "
              f"{o.get('analysis')!r}; the reference parse of {o.get('raw')!r} gives {want!r}")
        check(not has_marker(o.get("text", "")), f"a marker in the text {o.get('text')!r}")
        marked += has_marker(o.get("raw", ""))
        analysed += bool(o.get("analysis"))
        dropped += o.get("text") != MARK.sub(b"", o.get("raw", "").encode()).decode("utf-8",
                                                                                   "replace")
    print(f"batch: {len(objs)} answers, {marked} with markers, {analysed} with an analysis, "
          f"{dropped} with text dropped (headers, between messages)")
    check(marked >= N_LINES // 2 and dropped >= N_LINES // 4,
          "the random model wrote too few markers to prove anything")
    if not analysed:  # (test_harmony covers the analysis channel's routing)
        print("note: no answer wrote <|channel|>analysis<|message|> (a random model's chance)")
    check_batch_pd(model, objs)
    return [o["sampling"]["seed"] for o in objs if o.get("analysis")]


def check_run(model, analysed):
    args = ["run", "-m", model, "--chat", "-p", "Hello", "-n", "48", "-t", "2"]
    for seed in [str(s) for s in analysed[:1]] + ["12"]:
        rc, out, err = ignite(*args, "--seed", seed, "--json", "-q")
        check(rc == 0, f"run --json exits {rc}: {err.strip()[-300:]}")
        o = json.loads(out)
        check((o["text"], o["analysis"]) == parse(o["raw"]), f"run --json seed {seed}: {o}")
        rc, out, err = ignite(*args, "--seed", seed, "-q")
        check(rc == 0 and out == (o["text"] + "\n" if o["text"] else ""),
              f"run seed {seed}: stdout {out!r}, the --json text {o['text']!r}")
        check(not has_marker(out), f"run seed {seed}: a marker on stdout {out!r}")
        rc, out2, err = ignite(*args, "--seed", seed, "-q", "--verbose")
        check(rc == 0 and out2 == out, f"run --verbose seed {seed}: stdout {out2!r}")
        if o["analysis"]:
            check("[analysis] " + o["analysis"] in err,
                  f"run --verbose seed {seed}: stderr {err!r} lacks the analysis")
        else:
            check("[analysis]" not in err, f"run --verbose seed {seed}: stderr {err!r}")


def jinja_render(messages, gen):
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    with open(TEMPLATE) as f:
        return env.from_string(f.read()).render(messages=messages, add_generation_prompt=gen,
                                                bos_token="", eos_token="")


def check_chat(model, d):
    greedy = ["-m", model, "--temp", "0", "-n", "32", "-t", "2", "-q"]
    rc, out, err = ignite("chat", *greedy, "--verbose-prompt", stdin=b"What is 2+2?\nAgain\n")
    check(rc == 0, f"chat exits {rc}: {err.strip()[-300:]}")
    rc1, out1, err1 = ignite("run", *greedy, "--chat", "-p", "What is 2+2?", "--json")
    a1 = json.loads(out1)
    check("\ufffd" not in a1["raw"], "the first answer is not valid UTF-8: pick another message")
    print(f"chat: first answer raw {a1['raw']!r}")
    # the second turn after the history as the template writes it
    conv = jinja_render([{"role": "user", "content": "What is 2+2?"},
                         {"role": "assistant", "content": a1["text"]},
                         {"role": "user", "content": "Again"}], True)
    check(not any(x in conv for x in ("{{", "{%", "{#")), "the conversation looks like Jinja")
    literal = os.path.join(d, "conversation.jinja")
    with open(literal, "w") as f:
        f.write(conv)
    rc2, out2, err2 = ignite("run", *greedy, "--chat-template-file", literal, "-p", "x",
                             "--json")
    check(rc2 == 0, f"run on the whole conversation exits {rc2}: {err2.strip()[-300:]}")
    a2 = json.loads(out2)
    want = "".join(a + "\n" for a in (a1["text"], a2["text"]) if a)
    check(out == want, f"chat printed {out!r}; run gives {want!r}")
    # the same conversation through a saved cache: run --save-kv, then
    # --load-kv --chat, whose history goes back to where the answer began
    kv = os.path.join(d, "c.kv")
    rc3, out3, err3 = ignite("run", *greedy, "--chat", "-p", "What is 2+2?", "--save-kv", kv)
    rc4, out4, err4 = ignite("run", *greedy, "--chat", "--load-kv", kv, "-p", "Again", "--json")
    check(rc3 == 0 and rc4 == 0, f"--save-kv / --load-kv exit {rc3}, {rc4}: {err3} {err4}")
    check(rc4 == 0 and json.loads(out4)["text"] == a2["text"],
          f"--load-kv --chat answers {out4[:300]!r}; run gives {a2['text']!r}")
    # the second turn's text begins with the first answer's final channel
    turn2 = f"<|channel|>final<|message|>{a1['text']}<|end|><|start|>user<|message|>Again"
    check(turn2.encode("unicode_escape").decode() in err or turn2 in err,
          "chat --verbose-prompt: the second turn does not write the answer back")
    changed = a1["raw"] != "<|channel|>final<|message|>" + a1["text"]
    print(f"chat: second answer {a2['text']!r}; the cache was rewritten: {changed}")


def main():
    if not os.path.exists(model_path()):
        print(f"skip: no test model at {model_path()}", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as d:
        model = write_model(d)
        check_run(model, check_batch(model))
        check_chat(model, d)
    return summary("test_harmony_model")


if __name__ == "__main__":
    sys.exit(main())
