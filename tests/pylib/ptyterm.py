"""tests/pylib/ptyterm.py: a program driven through a pseudo-terminal (Python's
pty), for the tests of what ignite does on a terminal (chat's marker, line
editing, Ctrl-C and Ctrl-D). Used by tests/cli/test_chat.py and
test_chat_edit.py."""
import os
import pty
import select
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
