"""tests/cli/test_chat_edit.py: line editing in `ignite chat` on a terminal
(cli/line_edit.c, libedit), through a pseudo-terminal (Python's pty), on a
tiny synthetic chat model; each message is seen in --verbose-prompt's
rendered prompt.

- The left arrow moves the cursor: "abc", left, "X" sends "abXc" (not the
  arrow's escape sequence); Ctrl-A goes to the start of the line.
- Ctrl-R finds an earlier message by what it contains.
- The up arrow recalls the session's earlier message; the history file
  ($XDG_STATE_HOME/ignite/history) keeps the messages, and a new session
  recalls them from it.
- --no-history neither reads nor writes the file.
- Through a pipe nothing changes: the escape sequence is part of the message.

Skips (77) where ignite is built without libedit."""
import os
import subprocess
import sys
import tempfile

import ggufgen
import ptyterm
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]
LEFT, UP, CTRL_A, CTRL_C, CTRL_D, CTRL_R = (b"\x1b[D", b"\x1b[A", b"\x01", b"\x03", b"\x04",
                                            b"\x12")


def spawn(args, env):
    return ptyterm.spawn(IGNITE, args, env)


def read_until(fd, what, timeout=60):
    return ptyterm.read_until(fd, what, timeout)


def finish(pid, fd):
    return ptyterm.finish(pid, fd, 60)


def send_message(fd, keys):
    """Types keys and Enter; returns what the terminal shows up to the next marker."""
    os.write(fd, keys + b"\r")
    return read_until(fd, "\n> ")


def prompted(out, text):
    """Did --verbose-prompt show `text` as the user's message (ChatML)?"""
    return f"<|im_start|>user\\n{text}<|im_end|>" in out


def main():
    if b"libedit" not in subprocess.run(["ldd", IGNITE], capture_output=True).stdout:
        print("ignite is built without libedit: no line editing to test", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "chat.gguf")
        with open(model, "wb") as f:
            f.write(ggufgen.tiny_chat_llama(n_layer=1, n_head=2, n_head_kv=1))
        env = dict(os.environ, XDG_STATE_HOME=os.path.join(tmp, "state"), TERM="xterm")
        hist = os.path.join(tmp, "state", "ignite", "history")
        args = ["chat", "-m", model, "-t", "1", "--temp", "0", "-n", "1", "--verbose-prompt"]

        pid, fd = spawn(args, env)
        read_until(fd, "> ")
        out = send_message(fd, b"abc" + LEFT + b"X")
        check(prompted(out, "abXc"), f"left arrow: the message is not abXc: {out!r}")
        send_message(fd, b"hello")
        out = send_message(fd, CTRL_R + b"bX")
        check(prompted(out, "abXc"), f"Ctrl-R: the message is not abXc: {out!r}")
        out = send_message(fd, UP + CTRL_A + b"Z")
        check(prompted(out, "ZabXc"), f"up arrow, Ctrl-A: the message is not ZabXc: {out!r}")
        os.write(fd, CTRL_D)
        rc, rest = finish(pid, fd)
        check(rc == 0 and "chat: 4 turns" in rest, f"Ctrl-D: rc {rc} {rest!r}")
        data = open(hist, "rb").read() if os.path.exists(hist) else b""
        check(b"abXc" in data and b"ZabXc" in data, f"the history file: {data!r}")

        # a new session recalls the last message from the file
        pid, fd = spawn(args, env)
        read_until(fd, "> ")
        out = send_message(fd, UP)
        check(prompted(out, "ZabXc"), f"history from the file: {out!r}")
        os.write(fd, CTRL_C)
        rc, rest = finish(pid, fd)
        check(rc == 130 and "\nchat: 1 turns" in rest, f"Ctrl-C at the marker: rc {rc} {rest!r}")

        # --no-history: nothing recalled, the file untouched
        before = open(hist, "rb").read()
        pid, fd = spawn(args + ["--no-history"], env)
        read_until(fd, "> ")
        out = send_message(fd, UP + b"q")
        check(prompted(out, "q"), f"--no-history recalled something: {out!r}")
        os.write(fd, CTRL_D)
        rc, rest = finish(pid, fd)
        check(rc == 0 and open(hist, "rb").read() == before,
              f"--no-history: rc {rc}, the file changed: {open(hist, 'rb').read()!r}")

        # a pipe: no editing, the escape sequence is in the message
        r = subprocess.run([IGNITE, *args], input=b"ab\x1b[Dc\n", capture_output=True, env=env,
                           timeout=120)
        err = r.stderr.decode("utf-8", "replace")
        check(r.returncode == 0 and "ab\\x1b[dc" in err.lower(),
              f"a pipe: rc {r.returncode} {err!r}")
        check(open(hist, "rb").read() == before, "a pipe wrote the history")
    return summary("test_chat_edit")


if __name__ == "__main__":
    sys.exit(main())
