"""tests/cli/test_run_tiny.py: `ignite run` on tiny random-weight models made
by tests/pylib/ggufgen.py, so it needs no downloaded model and stays fast in
the ASan build: exact token counts at -n and at a full context, the prompt
over the context (its error line alone, no stats line), --chat with the model's Jinja
template, a missing one (exit 4), --chat-template NAME and --chat-template-file FILE
(and their refusals, exit 2), --jinja taken,
seed repeatability and --json on every stop path; the prompt piped to stdin
without -p/-f (`cat prompt.txt | ignite`), unless another option reads stdin;
the seed in the stats line of a sampled run (not of --prompt-only); a warning for a prompt past the
trained context; `> /dev/full` names stdout (run, --json, batch)."""
import json
import os
import re
import subprocess
import sys
import tempfile

import ggufgen
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]



def run(model, *args, stdin=b""):
    r = subprocess.run([IGNITE, "run", "-m", model, "-t", "1", *args], input=stdin,
                       capture_output=True, timeout=120)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def run_json(model, *args):
    rc, out, err = run(model, "--json", *args)
    try:
        obj = json.loads(out)
    except ValueError:
        obj = None
    check(obj is not None, f"--json {args}: stdout is not one JSON object: {out[:200]!r} {err}")
    return rc, obj or {}, err


def tiny_model(**kw):
    """tiny_llama with a pre-tokenizer the tokenizer knows (ggufgen writes "default")."""
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",) + kw.pop("skip", ()), **kw)
    return g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2").build()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.gguf")
        nochat = os.path.join(tmp, "nochat.gguf")
        with open(tiny, "wb") as f:
            # f32 weights: random quantized blocks can hold NaN scales.
            f.write(tiny_model(mat_type=ggufgen.T_F32, emb_type=ggufgen.T_F32))
        with open(nochat, "wb") as f:
            f.write(tiny_model(skip=("tokenizer.chat_template",)))

        rc, obj, err = run_json(tiny, "-p", "abc", "-n", "5", "--ignore-eos", "-s", "7")
        check(rc == 0 and obj.get("stop") == "limit", f"-n 5: rc {rc} {obj} {err}")
        check(obj.get("tokens", {}).get("generated") == 5, f"-n 5 generated {obj.get('tokens')}")
        check(err.count("stats: ") == 1, f"one stats line: {err!r}")

        rc, again, _ = run_json(tiny, "-p", "abc", "-n", "5", "--ignore-eos", "-s", "7")
        check(again.get("text") == obj.get("text"), "the same seed gave different text")

        # A full context: prompt positions + generated tokens fed back = n_ctx,
        # and the last sampled token is still printed: n_ctx - n_prompt + 1.
        rc, obj, err = run_json(tiny, "-p", "abc", "-c", "8", "-n", "-1", "--ignore-eos")
        n_prompt = obj.get("tokens", {}).get("prompt", 0)
        check(rc == 0 and obj.get("stop") == "context", f"full context: rc {rc} {obj}")
        check(obj.get("tokens", {}).get("generated") == 8 - n_prompt + 1,
              f"full context generated {obj.get('tokens')}")
        check("context is full" in err, f"full context message: {err!r}")

        rc, out, err = run(tiny, "-p", "abcdefgh", "-c", "4")
        check(rc == 6 and "context holds 4" in err and out == "", f"over context: {rc} {err!r}")
        check(err.count("\n") == 1 and "stats:" not in err, f"over context: not one line {err!r}")
        rc, out, err = run(tiny, "-p", "abc", "-c", "3", "-n", "1", "-q")
        check(rc == 0, f"prompt exactly filling the context: {rc} {err!r}")

        # the tiny model's template is "{{ messages }}": Python's str() of the list
        rc, out, err = run(tiny, "-p", "abc", "--chat", "-n", "1", "--verbose-prompt")
        want = "prompt: " + str([{"role": "user", "content": "abc"}]) + "\n"
        check(rc == 0 and want in err, f"--chat renders the model's Jinja template: {rc} {err!r}")
        rc, out, err = run(nochat, "-p", "abc", "--chat")
        check(rc == 4 and "no tokenizer.chat_template" in err and "--chat-template" in err,
              f"--chat no template: {rc} {err!r}")
        rc, out, err = run(nochat, "-p", "abc", "--chat-template", "chatml", "-n", "1",
                           "--verbose-prompt")
        check(rc == 0 and "prompt: <|im_start|>user\\nabc<|im_end|>\\n<|im_start|>assistant\\n\n"
              in err, f"--chat-template chatml: {rc} {err!r}")
        rc, out, err = run(nochat, "-p", "abc", "--jinja", "--chat-template", "chatml", "-n", "1")
        check(rc == 0, f"--jinja (llama.cpp's) is taken: {rc} {err!r}")
        rc, out, err = run(nochat, "-p", "abc", "--chat-template", "chatml2")
        check(rc == 2 and err.count("\n") == 1 and "'chatml2' is not a built-in" in err,
              f"--chat-template unknown: {rc} {err!r}")
        g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre", "tokenizer.chat_template"))
        g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2")
        g.add("tokenizer.chat_template", ggufgen.STR, "{% for m in messages %}\n{% include 'x' %}")
        odd = os.path.join(tmp, "odd.gguf")
        with open(odd, "wb") as f:
            f.write(g.build())
        rc, out, err = run(odd, "-p", "abc", "--chat")
        check(rc == 4 and err.count("\n") == 1 and ":2:4: unsupported construct '{% include %}'"
              in err and "--chat-template-file" in err, f"--chat, a template outside the subset: "
              f"{rc} {err!r}")
        bad = os.path.join(tmp, "bad.jinja")
        with open(bad, "w") as f:
            f.write("{{ messages[0].content }}\n{{ x | wordwrap(5) }}")
        rc, out, err = run(nochat, "-p", "abc", "--chat-template-file", bad)
        check(rc == 2 and err.count("\n") == 1 and f"'{bad}':2:8: unsupported construct: the "
              "filter 'wordwrap'" in err, f"--chat-template-file outside the subset: {rc} {err!r}")
        good = os.path.join(tmp, "good.jinja")
        with open(good, "w") as f:
            f.write("{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}{% endfor %}"
                    "{% if add_generation_prompt %}<bot>{% endif %}\n")
        rc, out, err = run(nochat, "-p", "abc", "--chat-template-file", good, "-n", "1",
                           "--system", "s", "--verbose-prompt")
        check(rc == 0 and "prompt: <system>S<user>ABC<bot>\n" in err,
              f"--chat-template-file: {rc} {err!r}")
        rc, out, err = run(nochat, "-p", "abc", "--chat-template-file", good, "--chat-template",
                           "chatml")
        check(rc == 2 and "give one" in err, f"both template options: {rc} {err!r}")

        rc, out, err = run(tiny, "-f", "-", "-n", "2", "-q", stdin=b"abc")
        check(rc == 0 and err == "", f"stdin prompt: {rc} {err!r}")

        # No -p or -f: the prompt is stdin when it is piped.
        gen = ["-n", "4", "--ignore-eos", "--temp", "0", "-q"]
        rc, want, err = run(tiny, "-p", "abc", *gen)
        rc2, out, err2 = run(tiny, *gen, stdin=b"abc")
        check(rc == rc2 == 0 and out == want, f"piped prompt: {rc2} {out!r} vs {want!r} {err2!r}")
        r = subprocess.run([IGNITE, "-m", tiny, "-t", "1", *gen], input=b"\xef\xbb\xbfabc",
                           capture_output=True, timeout=120)
        check(r.returncode == 0 and r.stdout.decode() == want,
              f"ignite -m ... < prompt (no 'run', a BOM): {r.returncode} {r.stderr!r}")
        # `cat prompt.txt | ignite`: no arguments at all (the default model
        # is looked up in IGNITE_CACHE)
        os.symlink(tiny, os.path.join(tmp, "SmolLM2-135M-Instruct.Q4_1.gguf"))
        r = subprocess.run([IGNITE], input=b"abc", capture_output=True, timeout=120,
                           env={**os.environ, "IGNITE_CACHE": tmp, "IGNITE_MODEL": ""})
        # (sampled with a clock seed: the first token may end the text, so
        # the prompt's 3 tokens in the stats line show that stdin was read)
        check(r.returncode == 0 and b"stats: prompt 3 tok" in r.stderr,
              f"cat prompt | ignite: {r.returncode} {r.stderr!r}")
        rc, out, err = run(tiny, *gen, stdin=b"")
        check(rc == 2 and "stdin was empty" in err, f"empty stdin, no -p: {rc} {err!r}")
        rc, out, err = run(tiny, *gen, stdin=b"ab\x00c")
        check(rc == 6 and "NUL" in err, f"a NUL on stdin: {rc} {err!r}")
        rc, out, err = run(tiny, *gen, "--grammar-file", "-", stdin=b'root ::= "a"')
        check(rc == 2 and "no prompt" in err, f"--grammar-file - takes stdin: {rc} {err!r}")

        # The seed is in the stats line of a sampled run (and repeats it).
        rc, out, err = run(tiny, "-p", "abc", "-n", "6", "--ignore-eos", "--temp", "0.9")
        m = re.search(r"\| seed (\d+)", err)
        check(rc == 0 and m is not None, f"no seed in the stats line: {err!r}")
        if m:
            rc, again, _ = run(tiny, "-p", "abc", "-n", "6", "--ignore-eos", "--temp", "0.9",
                               "-s", m.group(1))
            check(again == out, f"seed {m.group(1)} repeated gives {again!r}, not {out!r}")
        rc, out, err = run(tiny, "-p", "abc", "-n", "2", "--temp", "0")
        check(rc == 0 and "seed" not in err, f"a greedy run names a seed: {err!r}")
        rc, out, err = run(tiny, "-p", "abc", "--temp", "0.9", "--prompt-only")
        check(rc == 0 and "stop prompt_only" in err and "seed" not in err,
              f"--prompt-only samples nothing, yet names a seed: {err!r}")

        # A full disk on stdout is exit 3 with docs/cli.md's words, for the
        # streamed text, --json, and batch's results.
        if os.access("/dev/full", os.W_OK):
            # --ignore-eos: a first token that ends the text (a random seed's
            # EOG) would write nothing to fail on
            for cmd, stdin in ((["run", "-p", "abc", "-n", "2", "--ignore-eos"], b""),
                               (["run", "-p", "abc", "-n", "2", "--json"], b""),
                               (["batch", "--lines", "-n", "2"], b"abc\n")):
                with open("/dev/full", "wb") as full:
                    r = subprocess.run([IGNITE, *cmd, "-m", tiny, "-t", "1"], input=stdin,
                                       stdout=full, stderr=subprocess.PIPE, timeout=120)
                err = r.stderr.decode("utf-8", "replace")
                check(r.returncode == 3 and
                      "ignite: cannot write to stdout: No space left on device" in err,
                      f"{cmd} > /dev/full: rc {r.returncode} {err!r}")

        # A prompt past the trained context (256 positions) runs with a warning.
        rc, out, err = run(tiny, "-p", "abc" * 100, "-c", "512", "-n", "1")
        check(rc == 0 and "more than the 256 positions the model was trained on" in err,
              f"prompt past the trained context: {rc} {err!r}")
    return summary("test_run_tiny")


if __name__ == "__main__":
    sys.exit(main())
