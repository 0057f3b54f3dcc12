"""tests/cli/test_tty.py: what `ignite run`, `bench` and `perplexity` do on a
terminal, through a pseudo-terminal (python pty), on tiny random-weight models:
  - a warning after streamed text starts on a line of its own (the "context
    is full" warning was glued to the text);
  - --save-kv - onto a terminal is refused (binary to the screen);
  - no prompt and stdin a terminal: the usage error, not a read;
  - the prefill's progress line (IGNITE_PROGRESS_MS=0 draws at every step):
    tokens done of total, tok/s, time left, erased before the text;
  - bench's progress within a test, not only between runs;
  - perplexity's progress line, erased before each window's line.
"""
import os
import re
import sys
import tempfile

import ggufgen
import ptyterm
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]


def on_tty(args, env=None, timeout=120):
    """Runs ignite with stdin, stdout and stderr on one pseudo-terminal;
    returns (exit status, everything it showed, \\r\\n as \\n)."""
    return ptyterm.run(IGNITE, args, {**os.environ, **(env or {})}, timeout)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.gguf")
        with open(tiny, "wb") as f:
            f.write(ggufgen.tiny_chat_llama())
        base = ["run", "-m", tiny, "-t", "1", "--temp", "0"]

        # The full-context warning on a line of its own, after the text.
        rc, out = on_tty(base + ["-p", "hello", "-c", "24", "-n", "-1", "--ignore-eos"])
        at = out.find("ignite: warning: the context is full")
        check(rc == 0 and at > 0, f"full context: rc {rc} {out!r}")
        check(at > 0 and out[at - 1] == "\n", f"the warning is glued to the text: {out!r}")
        text = out[:at].rstrip("\n").split("\n")[-1]  # the line before the warning
        check(text and not text.startswith(("loading", "ignite")),
              f"no text before the warning (the check would be void): {out!r}")
        check(not re.search(r"\n\n\n", out), f"blank lines around the warning: {out!r}")

        # --save-kv - onto the terminal
        rc, out = on_tty(base + ["-p", "hello", "--prompt-only", "--save-kv", "-"])
        check(rc == 2 and "stdout is a terminal" in out, f"--save-kv - on a tty: {rc} {out!r}")
        # a terminal with no prompt keeps the usage error (stdin is not read)
        rc, out = on_tty(["run", "-m", tiny])
        check(rc == 2 and "no prompt" in out, f"no prompt on a tty: {rc} {out!r}")
        rc, out = on_tty([])
        check(rc == 2 and "usage: ignite" in out, f"ignite alone on a tty: {rc} {out!r}")

        # The prefill's progress line, erased before the text.
        env = {"IGNITE_PROGRESS_MS": "0"}
        rc, out = on_tty(base + ["-p", "hello there " * 8, "-b", "4", "-n", "3"], env)
        m = re.search(r"prefill (\d+)/(\d+) tok \| [0-9.]+ tok/s \| \d+ s left", out)
        check(rc == 0 and m is not None, f"no progress line: rc {rc} {out!r}")
        if m:
            check(int(m.group(1)) < int(m.group(2)), f"progress {m.group(0)}")
            # the line is erased: the text and the stats do not follow it on its line
            tail = out[m.end():]
            check(tail.startswith("\r\x1b[K") or "\r\x1b[K" in tail.split("\n")[0],
                  f"the progress line is not erased: {tail[:80]!r}")
        # without a terminal or with NO_COLOR: no progress line
        rc, out = on_tty(base + ["-p", "hello there " * 8, "-b", "4", "-n", "3"],
                         {**env, "NO_COLOR": "1"})
        check(rc == 0 and not re.search(r"prefill \d+/\d+ tok", out),
              f"NO_COLOR still drew progress: {out!r}")

        # bench: progress within a test (tokens done of total), not only
        # between runs
        rc, out = on_tty(["bench", "-m", tiny, "-t", "1", "-p", "0", "-n", "32", "-r", "1"], env)
        check(rc == 0 and re.search(r"tg32 \| (warm-up|run) \d+/1 \| \d+/32 tok", out) is not None,
              f"bench: no progress within a test: rc {rc} {out[-600:]!r}")
        # perplexity: the progress line (window, tokens), erased before the
        # window's line on stdout
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write("hello there " * 12)
        rc, out = on_tty(["perplexity", "-m", tiny, "-t", "1", "-f", text, "-c", "8", "-b", "2",
                          "--chunks", "2"], env)
        m = re.search(r"perplexity: window 1/2, \d+/16 tokens", out)
        check(rc == 0 and m is not None, f"perplexity: no progress line: rc {rc} {out[-600:]!r}")
        if m:
            line = out[m.end():].split("\n")[0]
            check("\r\x1b[K" in line and line.rstrip().endswith(tuple("0123456789.%")),
                  f"perplexity: the window's line is not on a clean line: {line!r}")
    return summary("test_tty")


if __name__ == "__main__":
    sys.exit(main())
