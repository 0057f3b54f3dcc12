"""tests/cli/test_output.py: the output side of `info` and `tokenize` on a
tiny model made by tests/pylib/ggufgen.py (no download): a stdout that
cannot take the output (/dev/full) is exit 3 naming the real reason ("No
space left on device", not a lost errno's "Input/output error"), short
output and output past stdio's buffer alike; a reader that closed its end
before (SIGPIPE ignored, EPIPE) ends the command quietly with status 0, as
`run` does. A byte-order mark at the start of a prompt file is dropped by
`tokenize -f` and `run -f` alike."""
import json
import os
import subprocess
import sys
import tempfile

import ggufgen
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]
ENOSPC = "No space left on device"


def tiny_model():
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",), mat_type=ggufgen.T_F32,
                           emb_type=ggufgen.T_F32)
    return g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2").build()


def to_full(args):
    """Runs ignite with stdout on /dev/full: (exit status, stderr)."""
    with open("/dev/full", "wb") as full:
        r = subprocess.run([IGNITE, *args], stdout=full, stderr=subprocess.PIPE, timeout=120)
    return r.returncode, r.stderr.decode("utf-8", "replace")


def to_closed_pipe(args):
    """Runs ignite with stdout a pipe whose reader is gone before it starts
    (the child gets SIGPIPE's default action back, as from a shell)."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = subprocess.run([IGNITE, *args], stdout=wr, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(wr)
    return r.returncode, r.stderr.decode("utf-8", "replace")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.gguf")
        with open(model, "wb") as f:
            f.write(tiny_model())
        big = os.path.join(tmp, "big.txt")  # 200k tokens: output far past stdio's buffer
        with open(big, "w") as f:
            f.write("efghijklm" * 22222)
        cases = [
            ["info", "-m", model],
            ["info", "-m", model, "--json"],
            ["tokenize", "-m", model, "-p", "efg"],
            ["tokenize", "-m", model, "-p", "efg", "--json"],
            ["tokenize", "-m", model, "-p", "efg", "--count"],
            ["tokenize", "-m", model, "-f", big],
            ["tokenize", "-m", model, "-f", big, "--pieces"],
            ["tokenize", "-m", model, "-f", big, "--json", "--pieces"],
        ]
        for args in cases:
            what = " ".join(a if a not in (model, big) else os.path.basename(a) for a in args)
            if os.access("/dev/full", os.W_OK):
                rc, err = to_full(args)
                check(rc == 3 and ENOSPC in err and err.count("\n") == 1,
                      f"{what} >/dev/full: exit {rc}, want 3 naming ENOSPC: {err!r}")
            rc, err = to_closed_pipe(args)
            check(rc == 0 and err == "", f"{what} | (closed): exit {rc}, want 0 quietly: {err!r}")

        # run: the error line, then the stats line naming the stop output_error
        # (output_closed is a closed pipe's, which is no error). Greedy: a random
        # seed's first token may be the end, and then nothing is written.
        if os.access("/dev/full", os.W_OK):
            rc, err = to_full(["run", "-m", model, "-t", "1", "-p", "efg", "-n", "4", "--temp", "0"])
            lines = err.splitlines()
            check(rc == 3 and len(lines) == 2 and ENOSPC in lines[0] and
                  lines[1].startswith("stats:") and "| stop output_error |" in lines[1],
                  f"run >/dev/full: exit {rc}, want 3, ENOSPC, stop output_error: {err!r}")
        rc, err = to_closed_pipe(["run", "-m", model, "-t", "1", "-p", "efg", "-n", "4", "--temp", "0"])
        check(rc == 0 and "| stop output_closed |" in err,
              f"run | (closed): exit {rc}, want 0 and stop output_closed: {err!r}")

        # A byte-order mark at the start of a file is not text.
        bom = os.path.join(tmp, "bom.txt")
        plain = os.path.join(tmp, "plain.txt")
        with open(bom, "wb") as f:
            f.write(b"\xef\xbb\xbfefg")
        with open(plain, "wb") as f:
            f.write(b"efg")
        ids = {}
        for name, path in [("bom", bom), ("plain", plain)]:
            r = subprocess.run([IGNITE, "tokenize", "-m", model, "-f", path, "--json"],
                               capture_output=True, timeout=120)
            check(r.returncode == 0, f"tokenize {name}: exit {r.returncode}: {r.stderr!r}")
            ids[name] = r.stdout
            with open(path, "rb") as f:
                r = subprocess.run([IGNITE, "tokenize", "-m", model, "-f", "-", "--json"],
                                   stdin=f, capture_output=True, timeout=120)
            check(r.stdout == ids[name], f"tokenize {name} on stdin: {r.stdout!r} {r.stderr!r}")
        check(ids["bom"] == ids["plain"] and ids["plain"].startswith(b"["),
              f"tokenize kept the byte-order mark: {ids}")
        prompts = {}
        for name, path in [("bom", bom), ("plain", plain)]:
            r = subprocess.run([IGNITE, "run", "-m", model, "-t", "1", "-f", path, "-n", "1",
                                "--json", "-q"], capture_output=True, timeout=120)
            try:
                prompts[name] = json.loads(r.stdout)["tokens"]["prompt"]
            except (ValueError, KeyError):
                check(False, f"run -f {name}: {r.returncode} {r.stdout!r} {r.stderr!r}")
        check(prompts.get("bom") == prompts.get("plain") and prompts.get("plain"),
              f"run -f: prompt tokens with and without a BOM: {prompts}")
    return summary("test_output")


if __name__ == "__main__":
    sys.exit(main())
