"""tests/cli/test_conversation.py: the generation path on the test model
(SmolLM2, a ChatML template with a default system message), against
independent references. Exits 77 without the model.
  - A conversation from the shell, three turns through one cache file
    (`run --chat --save-kv c.kv`, then `--load-kv c.kv --save-kv c.kv --chat`):
    the saved tokens, decoded by HF tokenizers (tests/tokenizer/hfref.py),
    are jinja2's render of the whole conversation (the model's template read
    by the gguf package) with each answer as the run printed it, its
    <|im_end|> included; each turn prefills only its own tokens.
  - `ignite chat` through a pipe gives the same answers.
  - --verbose-prompt prints jinja2's render of the first turn and HF's ids.
  - Ctrl-C in the prefill (a pseudo-terminal, the progress line telling when):
    exit 130, no ttft or decode figures in the stats line, null in --json;
    the same in a batch object.
  - --exact is the exact matmul path (IGNITE_MATMUL=exact gives the same
    text), not the default one (the text differs on this prompt).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))

import ptyterm
from igtest import check, model_path, sanitized, summary
from kvfile import kv_tokens

IGNITE = os.environ["IGNITE_BIN"]
MODEL = model_path()
QUESTIONS = ["What is the capital of France?", "And of Germany?", "Which one is bigger?"]
GREEDY = ["--temp", "0", "-n", "16", "-t", "2"]


def run(*args, stdin=b"", env=None):
    r = subprocess.run([IGNITE, *args], input=stdin, capture_output=True, timeout=600,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def jinja_render(template, msgs, gen):
    import jinja2
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    return env.from_string(template).render(messages=msgs, add_generation_prompt=gen,
                                            bos_token="", eos_token="")


def on_tty_interrupt(args, when, env):
    """Runs ignite on a pseudo-terminal, sends Ctrl-C once `when` shows;
    returns (exit status, output)."""
    return ptyterm.run(IGNITE, args, {**os.environ, **env}, 600, interrupt_on=when)


def conversation(template, tk, kv, flags, stops):
    """Three turns from the shell, then the same through `ignite chat`."""
    if os.path.exists(kv):
        os.remove(kv)
    msgs, answers, prev, prev_closed = [], [], [], True
    for i, q in enumerate(QUESTIONS):
        load = ["--load-kv", kv] if i else []
        rc, out, err = run("run", "-m", MODEL, "--chat", *load, "--save-kv", kv, "-p", q,
                           "--json", *flags)
        check(rc == 0, f"turn {i + 1}: rc {rc} {err!r}")
        if rc != 0:
            break
        obj = json.loads(out)
        answers.append(obj["text"])
        toks = kv_tokens(kv)
        closed = obj["stop"] == "eog"
        stops.add(obj["stop"])
        msgs.append({"role": "user", "content": q})
        # the whole conversation as jinja2 renders it; an answer cut at -n
        # is open (the next turn closes it, as jinja2 does)
        want = jinja_render(template, msgs, True) + obj["text"] + \
            ("<|im_end|>" if closed else "")
        got = tk.decode(toks, skip_special_tokens=False)
        check(got == want, f"turn {i + 1}: the cache holds\n  {got!r}\njinja2 renders\n  {want!r}")
        t = obj["tokens"]
        check(t["cached"] == len(prev) and t["cached"] + t["prompt"] + t["generated"] == len(toks),
              f"turn {i + 1}: {t}, {len(prev)} tokens before, {len(toks)} after")
        if i:  # only the next turn was prefilled, as HF encodes it
            turn = ("" if prev_closed else "<|im_end|>") + \
                f"\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
            ids = tk.encode(turn, add_special_tokens=False).ids
            check(toks[:len(prev)] == prev and toks[len(prev):len(prev) + len(ids)] == ids and
                  t["prompt"] == len(ids), f"turn {i + 1}: prefilled {t['prompt']} tokens "
                  f"{toks[len(prev):len(prev) + t['prompt']]}, HF encodes the turn as {ids}")
        msgs.append({"role": "assistant", "content": obj["text"]})
        prev, prev_closed = toks, closed

    rc, out, err = run("chat", "-m", MODEL, *flags,
                       stdin="".join(q + "\n" for q in QUESTIONS).encode())
    want = "".join(a + "\n" for a in answers)
    check(rc == 0 and out == want, f"chat: rc {rc}\n  {out!r}\nthe runs said\n  {want!r}")


def main():
    if not os.path.exists(MODEL):
        print(f"skipped: the test model {MODEL} is absent (make fetch-model)", file=sys.stderr)
        return 77
    try:
        import gguf
        import hfref
        import jinja2  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (pip install -r tests/requirements.txt)", file=sys.stderr)
        return 77
    f = gguf.GGUFReader(MODEL).fields["tokenizer.chat_template"]
    template = bytes(f.parts[f.data[0]]).decode()
    tk, _, _ = hfref.smollm_tokenizer(MODEL)

    with tempfile.TemporaryDirectory() as tmp:
        stops = set()
        # the int8 path's answers run on past -n 16 (open turns), the exact
        # path's end with <|im_end|> (closed turns); under the sanitizers
        # (~30x slower) the open turns alone, the longer path through the cache
        modes = [GREEDY] if sanitized() else [GREEDY, GREEDY + ["--exact"]]
        for flags in modes:
            conversation(template, tk, os.path.join(tmp, "c.kv"), flags, stops)
        if not sanitized():
            check(stops == {"eog", "limit"}, f"the turns ended {stops}: both kinds not tested")

        rc, out, err = run("run", "-m", MODEL, "--chat", "-p", QUESTIONS[0], "--verbose-prompt",
                           "-q", *GREEDY[:2], "-n", "1")
        text = jinja_render(template, [{"role": "user", "content": QUESTIONS[0]}], True)
        ids = tk.encode(text).ids
        printed = [int(line.split("\t")[0]) for line in err.splitlines() if re.match(r"\d+\t", line)]
        check(rc == 0 and printed == ids, f"--verbose-prompt ids {printed} vs HF {ids}")
        esc = text.replace("\\", "\\\\").replace("\n", "\\n")
        check(f"prompt: {esc}\n" in err and f"prompt tokens: {len(ids)}\n" in err,
              f"--verbose-prompt text: {err[:300]!r}")

        # Ctrl-C in the prefill: what was measured, nothing else.
        long = " ".join(f"word{i}" for i in range(300))
        rc, out = on_tty_interrupt(["run", "-m", MODEL, "-t", "2", "-b", "2", "-p", long,
                                    "--json"], "prefill ", {"IGNITE_PROGRESS_MS": "0"})
        out = out.replace("\r\x1b[K", "\n")  # the progress line's erasures
        stats = [ln for ln in out.split("\n") if ln.startswith("stats: ")]
        objs = [ln for ln in out.split("\n") if ln.startswith("{")]
        check(rc == 130 and len(stats) == 1 and len(objs) == 1, f"Ctrl-C in the prefill: {rc} {out[-500:]!r}")
        if stats and objs:
            check("ttft" not in stats[0] and "decode" not in stats[0] and "prefill " in stats[0],
                  f"stats after Ctrl-C in the prefill: {stats[0]!r}")
            tm = json.loads(objs[0])["timings"]
            check(tm["ttft_ms"] is None and tm["decode_tok_s"] is None and
                  tm["decode_ms_per_tok"] is None and tm["prefill_tok_s"] > 0,
                  f"timings after Ctrl-C in the prefill: {tm}")
        # ... and in a batch object: the first request done, the second interrupted
        p = subprocess.Popen([IGNITE, "batch", "-m", MODEL, "-t", "2", "-b", "2", "-q"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(b'{"prompt": "Hi", "n_predict": 1}\n')
        p.stdin.flush()
        first = p.stdout.readline()
        p.stdin.write(json.dumps({"prompt": long}).encode() + b"\n")
        p.stdin.flush()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=600)
        lines = [json.loads(x) for x in rest.decode().splitlines() if x.strip()]
        check(p.returncode == 130 and json.loads(first).get("stop") in ("limit", "eog") and
              len(lines) == 1 and lines[0].get("stop") == "interrupted",
              f"batch Ctrl-C: rc {p.returncode} {first!r} {lines}")
        if lines:
            tm = lines[0].get("timings", {})
            check(tm.get("ttft_ms", 0) is None and tm.get("decode_tok_s", 0) is None,
                  f"batch timings after Ctrl-C in the prefill: {tm}")

        # --exact: the exact path (as IGNITE_MATMUL=exact), not the int8 one (a flag's
        # routing: the normal build's alone)
        if sanitized():
            return summary("test_conversation")
        q = ["-m", MODEL, "--chat", "-p", QUESTIONS[0], "--temp", "0", "-n", "12", "-t", "2", "-q"]
        rc1, exact, _ = run("run", *q, "--exact")
        rc2, env_exact, _ = run("run", *q, env={"IGNITE_MATMUL": "exact"})
        rc3, int8, _ = run("run", *q)
        check(rc1 == rc2 == rc3 == 0 and exact == env_exact and exact != int8,
              f"--exact {exact!r}, IGNITE_MATMUL=exact {env_exact!r}, int8 {int8!r}")
        rc, out, err = run("batch", "--exact", "-m", MODEL, "-t", "2", "-q", "--lines",
                           "--chat", "--temp", "0", "-n", "12", stdin=(QUESTIONS[0] + "\n").encode())
        check(rc == 0 and json.loads(out)["text"] + "\n" == exact, f"batch --exact: {out!r} {err!r}")
    return summary("test_conversation")


if __name__ == "__main__":
    sys.exit(main())
