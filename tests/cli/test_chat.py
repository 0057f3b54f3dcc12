"""tests/cli/test_chat.py: a conversation, turn by turn, on a tiny
random-weight model with a ChatML vocabulary and template
(ggufgen.tiny_chat_llama), so it needs no download and runs under ASan:
  - from the shell: `run --chat --save-kv c.kv`, then `run --load-kv c.kv
    --save-kv c.kv --chat -p NEXT` twice: each turn prefills only its own
    tokens, and the cache grows by exactly the template's next turn (closed by
    the model's <|im_end|>, or with the marker first when the answer was cut
    short at -n); the file is replaced, never lost, when a turn fails;
  - `ignite chat` through a pipe answers the same three messages with the
    same text (the same seed, greedy and sampled);
  - `ignite chat` through a pseudo-terminal: the "> " marker, answers,
    Ctrl-C stopping a long answer (the next turn goes on), Ctrl-D ending,
    Ctrl-C at the marker ending with 130 (Ctrl-D or Ctrl-C there: the summary
    on a line of its own); bad messages skipped with exit 6.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import ggufgen
import ptyterm
from igtest import check, summary
from kvfile import kv_tokens

IGNITE = os.environ["IGNITE_BIN"]
MESSAGES = ["hello there", "what is it", "tell me more"]


def run(*args, stdin=b""):
    r = subprocess.run([IGNITE, *args], input=stdin, capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def next_turn(user, closed):
    """ChatML's next turn after an answer (as tests/unit/test_chat_jinja.py
    checks chat_render_next against jinja2)."""
    return ("" if closed else "<|im_end|>") + \
        f"\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def shell_chain(model, tmp, sampling):
    """The three messages as three runs through one cache file. Returns the
    answers (or None after a failed check)."""
    kv = os.path.join(tmp, "c.kv")
    if os.path.exists(kv):
        os.remove(kv)
    answers, prev = [], None
    for i, msg in enumerate(MESSAGES):
        load = ["--load-kv", kv] if i else []
        rc, out, err = run("run", "-m", model, "-t", "1", "--chat", *load, "--save-kv", kv,
                           "-p", msg, "--json", *sampling)
        try:
            obj = json.loads(out)
        except ValueError:
            obj = {}
        check(rc == 0 and obj.get("status") == 0, f"turn {i + 1} {sampling}: rc {rc} {err!r}")
        if rc != 0:
            return None
        answers.append(obj["text"])
        toks = kv_tokens(kv)
        t = obj["tokens"]
        if prev is not None:
            closed = prev[-1] == ggufgen.IM_END
            want = ggufgen.chat_encode(next_turn(msg, closed))
            check(toks[:len(prev)] == prev, f"turn {i + 1}: the saved history changed")
            check(toks[len(prev):len(prev) + len(want)] == want,
                  f"turn {i + 1} ({'closed' if closed else 'open'}): the cache holds "
                  f"{toks[len(prev):len(prev) + len(want)]}, the template's next turn is {want}")
            check(t["cached"] == len(prev) and t["prompt"] == len(want),
                  f"turn {i + 1}: prefilled {t} (history {len(prev)}, turn {len(want)})")
        # every generated token is in the cache, the last one fed too
        check(len(toks) == t["cached"] + t["prompt"] + t["generated"],
              f"turn {i + 1}: {len(toks)} tokens saved, {t}")
        prev = toks
    return answers


def pty_spawn(args, env=None):
    return ptyterm.spawn(IGNITE, args, env)


pty_read_until = ptyterm.read_until
pty_finish = ptyterm.finish


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = tmp  # the chat history file, where editing keeps it
        model = os.path.join(tmp, "chat.gguf")
        with open(model, "wb") as f:
            f.write(ggufgen.tiny_chat_llama(n_layer=2, n_head=4, n_head_kv=2))
        piped_in = "".join(m + "\n" for m in MESSAGES).encode()
        for sampling in (["--temp", "0", "-n", "6"], ["--temp", "0", "-n", "6", "--ignore-eos"],
                         ["--temp", "0.9", "-s", "3", "-n", "8"]):
            answers = shell_chain(model, tmp, sampling)
            rc, out, err = run("chat", "-m", model, "-t", "1", *sampling, stdin=piped_in)
            check(rc == 0 and "chat: 3 turns" in err, f"chat {sampling}: rc {rc} {err!r}")
            if answers is not None:
                want = "".join(a + "\n" for a in answers)
                check(out == want, f"chat {sampling}: {out!r}, the runs said {want!r}")

        # A failed turn never loses the conversation: the file stays as it was.
        kv = os.path.join(tmp, "c.kv")
        with open(kv, "rb") as f:
            saved = f.read()
        rc, _, err = run("run", "-m", model, "-t", "1", "--chat", "--load-kv", kv, "--save-kv",
                         kv, "-p", "x" * 400, "-n", "2")
        check(rc == 6, f"a turn over the context: rc {rc} {err!r}")
        with open(kv, "rb") as f:
            check(f.read() == saved, "a failed turn changed the saved conversation")
        check(sorted(os.listdir(tmp)) == ["c.kv", "chat.gguf"],
              f"files left behind: {os.listdir(tmp)}")
        rc, _, err = run("run", "-m", model, "--load-kv", kv, "--chat")
        check(rc == 2 and "needs the next message" in err, f"--chat --load-kv alone: {rc} {err!r}")
        rc, _, err = run("run", "-m", model, "--load-kv", kv, "--chat", "--system", "s", "-p", "x")
        check(rc == 2 and "first turn" in err, f"--system with --load-kv: {rc} {err!r}")

        # Bad messages are skipped (exit 6 at the end), the good ones answered.
        rc, out, err = run("chat", "-m", model, "-t", "1", "--temp", "0", "-n", "3",
                           stdin=b"hello\n\xff\xfe\nthere\n\n")
        check(rc == 6 and "not valid UTF-8" in err and "chat: 2 turns" in err,
              f"a bad message: rc {rc} {err!r}")
        rc, out, err = run("chat", "-m", model, "--grammar-file", "-", stdin=b"x\n")
        check(rc == 2, f"chat --grammar-file -: rc {rc} {err!r}")

        # Through a terminal: the marker, two answers, Ctrl-D.
        args = ["chat", "-m", model, "-t", "1", "--temp", "0", "-n", "6"]
        pid, fd = pty_spawn(args)
        got = pty_read_until(fd, "> ")
        check("> " in got, f"no marker on the terminal: {got!r}")
        os.write(fd, b"hello there\n")
        got = pty_read_until(fd, "> ")
        os.write(fd, b"what is it\n")
        got += pty_read_until(fd, "> ")
        os.write(fd, b"\x04")
        rc, rest = pty_finish(pid, fd)
        check(rc == 0 and "chat: 2 turns" in rest, f"terminal chat: rc {rc} {got + rest!r}")
        check("\nchat: " in rest, f"Ctrl-D: the summary on the marker's line: {rest!r}")
        # Ctrl-C at the marker ends the session with 130, the summary on a
        # line of its own (not after the marker)
        pid, fd = pty_spawn(args)
        pty_read_until(fd, "> ")
        os.write(fd, b"\x03")
        rc, rest = pty_finish(pid, fd)
        check(rc == 130, f"Ctrl-C at the marker: rc {rc} {rest!r}")
        check("\nchat: 0 turns" in rest, f"Ctrl-C: the summary on the marker's line: {rest!r}")

        # --chat-template NAME: llama.cpp's built-in; the second turn is what the
        # template writes after the (cut-short) answer, its end of turn first
        rc, out, err = run("chat", "-m", model, "-t", "1", "--temp", "0", "-n", "2",
                           "--ignore-eos", "--chat-template", "zephyr", "--verbose-prompt",
                           stdin=b"first\nsecond\n")
        prompts = [ln for ln in err.splitlines() if ln.startswith("prompt: ")]
        check(rc == 0 and prompts == [
            "prompt: <|user|>\\nfirst<|endoftext|>\\n<|assistant|>\\n",
            "prompt: <|endoftext|>\\n<|user|>\\nsecond<|endoftext|>\\n<|assistant|>\\n"],
            f"chat --chat-template zephyr: rc {rc} {prompts}")

        # Ctrl-C stops a long answer; the conversation goes on. A larger
        # model and context, so the answer lasts long enough to be stopped.
        big = os.path.join(tmp, "big.gguf")
        with open(big, "wb") as f:
            f.write(ggufgen.tiny_chat_llama(n_ctx=8192, n_layer=4, n_embd=256, n_head=4,
                                            n_head_kv=2, n_ff=1024))
        pid, fd = pty_spawn(["chat", "-m", big, "-t", "1", "--temp", "0", "-n", "-1",
                             "--ignore-eos", "-c", "8192"])
        pty_read_until(fd, "> ")
        os.write(fd, b"hello\n")
        time.sleep(0.5)
        got = pty_read_until(fd, "\0never\0", timeout=1)  # some of the answer
        os.kill(pid, signal.SIGINT)  # as the terminal's Ctrl-C does
        got += pty_read_until(fd, "> ")
        check(got.rstrip().endswith(">"), f"no marker after Ctrl-C: {got[-200:]!r}")
        os.write(fd, b"again\n")
        os.write(fd, b"\x03")  # stops the second answer too (or ends at the marker)
        time.sleep(1)
        os.write(fd, b"\x04")
        rc, rest = pty_finish(pid, fd)
        check(rc in (0, 130) and "chat: " in rest, f"after Ctrl-C: rc {rc} {rest[-300:]!r}")
        check("chat: 0 turns" not in rest, f"the stopped answer was not kept: {rest[-300:]!r}")
    return summary("test_chat")


if __name__ == "__main__":
    sys.exit(main())
