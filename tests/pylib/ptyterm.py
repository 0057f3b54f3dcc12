"""tests/pylib/ptyterm.py: a program driven through a pseudo-terminal (Python's
pty), for the tests of what ignite does on a terminal (chat's marker, line
editing, Ctrl-C and Ctrl-D, progress lines). Used by tests/cli/test_chat.py,
test_chat_edit.py, test_tty.py and test_conversation.py."""
import os
import pty
import select
import signal
import time


def spawn(binary, args, env=None):
    """Starts binary with args on a new pseudo-terminal: (pid, its fd)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(binary, [binary, *args], env or os.environ)
    return pid, fd


def read_until(fd, what, timeout=120):
    """Reads the terminal until `what` is the last thing written and nothing
    more comes for 0.3 s (the program waits for input: an answer's text may
    itself hold a marker, and keys typed then race the editor's set-up), or
    it closes, or time runs out; returns what was read."""
    buf = b""
    end = time.time() + timeout
    quiet = 0.0
    while time.time() < end:
        if buf.endswith(what.encode()) and quiet >= 0.3:
            break
        r, _, _ = select.select([fd], [], [], 0.1)
        quiet = 0.0 if r else quiet + 0.1
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf.decode("utf-8", "replace")


def finish(pid, fd, timeout=120):
    """Reads to the end; returns (exit status, output). A program still
    running after the timeout is killed (the test fails, never hangs)."""
    out = read_until(fd, "\0never\0", timeout)
    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def run(binary, args, env=None, timeout=120, interrupt_on=None):
    """Runs binary with args on a new pseudo-terminal (its stdin, stdout and
    stderr) to its end; with interrupt_on, sends it SIGINT (Ctrl-C) once that
    text has shown. Returns (exit status, everything it showed, \\r\\n as
    \\n). A program still running after the timeout is killed (the test
    fails, never hangs)."""
    pid, fd = spawn(binary, args, env)
    buf, sent = b"", interrupt_on is None
    end = time.time() + timeout
    while True:
        if time.time() >= end:
            os.kill(pid, signal.SIGKILL)
            break
        if not sent and interrupt_on.encode() in buf:
            os.kill(pid, signal.SIGINT)
            sent = True
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), buf.decode("utf-8", "replace").replace("\r\n", "\n")
