"""tests/kvcache/test_kv_cli.py: `ignite run --prompt-only --save-kv` and
`--load-kv` on tiny random-weight models (tests/pylib/ggufgen.py), so it
needs no download and stays fast under ASan:
  - resumed = uninterrupted: byte-identical text, greedy and at --temp 0.9
    with a seed, through a file, through a pipe (`--save-kv - | --load-kv -`)
    and through a chain (load, add text, save again); a version 1 file
    (written by tests/pylib/kvfile.py from the docs' table) continues as the
    version 3 one;
  - prefix reuse: load + more text = the whole text in one run, and only
    the new tokens are prefilled;
  - --chunk and its aliases give the unchunked text;
  - every refused file exits 8 with its reason: another model, truncated
    (several lengths), another version (3), a corrupted byte, not a cache file,
    bytes after the checksum (two files joined; a file or stdin);
  - a context smaller than the file (6), usage conflicts (2; also --save-kv
    naming the model, which stays intact), an unwritable --save-kv path (3;
    a symlink or device there is not removed), a context that cannot fit in
    memory (5, both numbers);
  - --save-kv after generation: the cache of prompt and answer (the last
    token fed), from which a greedy run continues as an uninterrupted one;
  - --save-kv is made before any work: a path that cannot be created fails
    before the model loads (a broken model is not even read); the file is
    written beside the target and renamed at the end, so a failed run (a
    write past RLIMIT_FSIZE, Ctrl-C, a prompt over the context) leaves the
    old file and no temporary one; the new file has the mode a created file
    gets (or the old file's), and a symlink stays a link to the new file.
"""
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile

import ggufgen
from igtest import check, summary
from kvfile import kv_tokens, kv_v1_of

IGNITE = os.environ["IGNITE_BIN"]



def run(model, *args, stdin=b"", preexec=None):
    r = subprocess.run([IGNITE, "run", "-m", model, "-t", "1", *args], input=stdin,
                       capture_output=True, timeout=120, preexec_fn=preexec)
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


def run_json(model, *args):
    rc, out, err = run(model, "--json", *args)
    try:
        return rc, json.loads(out), err
    except ValueError:
        check(False, f"--json {args}: not one JSON object: {out[:200]!r} {err}")
        return rc, {}, err


def tiny_model(**kw):
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",), mat_type=ggufgen.T_F32,
                           emb_type=ggufgen.T_F32, **kw)
    return g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2").build()


GEN = ["-n", "12", "--ignore-eos"]


def check_save_after_generation(tiny, tmp):
    """--save-kv after an answer: prompt and answer in the cache, the last
    token fed; greedy, the continuation is the uninterrupted run's."""
    kvf = os.path.join(tmp, "gen.kv")
    greedy = ["--temp", "0", "--ignore-eos"]
    rc, full, err = run_json(tiny, "-p", "abcdef", "-n", "14", *greedy)
    rc2, first, err2 = run_json(tiny, "-p", "abcdef", "-n", "9", "--save-kv", kvf, *greedy)
    check(rc == rc2 == 0 and first.get("stop") == "limit", f"save after generation: {err2}")
    n_saved = len(kv_tokens(kvf))
    t = first.get("tokens", {})
    check(n_saved == t.get("prompt", 0) + 9, f"{n_saved} tokens saved, {t}: the last one not fed")
    rc, rest, err = run_json(tiny, "--load-kv", kvf, "-n", "5", *greedy)
    check(rc == 0 and first.get("text", "") + rest.get("text", "") == full.get("text"),
          f"continued: {first.get('text')!r} + {rest.get('text')!r} vs {full.get('text')!r} {err}")
    check(rest.get("tokens", {}).get("cached") == n_saved, f"continued: {rest.get('tokens')}")
    # at a full context the last token has no position: saved without it
    rc, obj, err = run_json(tiny, "-p", "abcdef", "-c", "12", "-n", "-1", "--save-kv", kvf,
                            *greedy)
    n_saved = len(kv_tokens(kvf))
    check(rc == 0 and obj.get("stop") == "context" and n_saved == 12 and
          "not in the saved cache" in err, f"full context saved {n_saved}: {err!r}")


def check_save_file(tiny, tmp):
    """The --save-kv file: made before any work, replaced whole or not at all."""
    bad_model = os.path.join(tmp, "bad.gguf")
    with open(bad_model, "wb") as f:
        f.write(b"GGUF not really")
    nowhere = os.path.join(tmp, "no", "such", "dir.kv")
    rc, out, err = run(bad_model, "-p", "ab", "--save-kv", nowhere)
    check(rc == 3 and "cannot create" in err and "dir.kv" in err,
          f"--save-kv checked before the model: rc {rc} {err!r}")
    os.mkdir(os.path.join(tmp, "ro"))
    os.chmod(os.path.join(tmp, "ro"), 0o500)
    if not os.access(os.path.join(tmp, "ro"), os.W_OK):  # (root writes anyway)
        rc, out, err = run(bad_model, "-p", "ab", "--save-kv", os.path.join(tmp, "ro", "c.kv"))
        check(rc == 3 and "Permission denied" in err, f"read-only directory: rc {rc} {err!r}")

    conv = os.path.join(tmp, "conv")
    os.mkdir(conv)
    kvf = os.path.join(conv, "c.kv")
    old_mask = os.umask(0o027)
    rc, _, err = run(tiny, "-p", "abcdef", "-n", "3", "--save-kv", kvf)
    os.umask(old_mask)
    check(rc == 0 and (os.stat(kvf).st_mode & 0o777) == 0o640,
          f"a new file's mode {oct(os.stat(kvf).st_mode & 0o777)}, want 0o640 (umask 027)")
    os.chmod(kvf, 0o600)
    with open(kvf, "rb") as f:
        saved = f.read()

    def unchanged(what):
        with open(kvf, "rb") as f:
            check(f.read() == saved, f"{what}: the old file changed")
        check(os.listdir(conv) == ["c.kv"], f"{what}: files left: {os.listdir(conv)}")

    # a write that fails midway (past RLIMIT_FSIZE: EFBIG)
    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    rc, _, err = run(tiny, "--load-kv", kvf, "-p", "gh", "-n", "3", "--save-kv", kvf,
                     preexec=small_files)
    check(rc == 3 and "File too large" in err, f"a failed write: rc {rc} {err!r}")
    unchanged("a failed write")
    # a prompt over the context
    rc, _, err = run(tiny, "--load-kv", kvf, "-p", "g" * 300, "--save-kv", kvf)
    check(rc == 6, f"over the context: rc {rc} {err!r}")
    unchanged("a prompt over the context")
    # Ctrl-C: a long run, interrupted once it streams
    p = subprocess.Popen([IGNITE, "run", "-m", tiny, "-t", "1", "--load-kv", kvf, "-p", "gh",
                          "-n", "-1", "--ignore-eos", "-c", "200000", "--save-kv", kvf],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.read(1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    check(p.returncode == 130 and b"nothing was written" in err,
          f"Ctrl-C: rc {p.returncode} {err!r}")
    unchanged("Ctrl-C")
    # a good turn replaces it, keeping its mode; through a symlink the link stays
    link = os.path.join(tmp, "link.kv")
    os.symlink(kvf, link)
    rc, _, err = run(tiny, "--load-kv", link, "-p", "gh", "-n", "3", "--save-kv", link)
    with open(kvf, "rb") as f:
        new = f.read()
    check(rc == 0 and new != saved and len(new) > len(saved), f"a good turn: rc {rc} {err!r}")
    check(os.path.islink(link) and (os.stat(kvf).st_mode & 0o777) == 0o600,
          f"the link or the mode was not kept: {oct(os.stat(kvf).st_mode & 0o777)}")
    check(os.listdir(conv) == ["c.kv"], f"files left: {os.listdir(conv)}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.gguf")
        other = os.path.join(tmp, "other.gguf")
        with open(tiny, "wb") as f:
            f.write(tiny_model(n_layer=2, n_head=4, n_head_kv=2))
        with open(other, "wb") as f:
            f.write(tiny_model(n_layer=2, n_head=4, n_head_kv=2, n_ff=64))
        kvf = os.path.join(tmp, "p.kv")
        prompt = "abcdefghijkl"

        for sampling in (["--temp", "0"], ["--temp", "0.9", "-s", "11"],
                         ["--temp", "0.7", "-s", "5", "--repeat-penalty", "1.5"]):
            rc, full, err = run_json(tiny, "-p", prompt, *GEN, *sampling)
            check(rc == 0 and full.get("tokens", {}).get("generated") == 12, f"full run: {rc} {err}")
            rc, saved, err = run_json(tiny, "-p", prompt, "--prompt-only", "--save-kv", kvf)
            check(rc == 0 and saved.get("stop") == "prompt_only" and os.path.getsize(kvf) > 88,
                  f"--prompt-only --save-kv: {rc} {saved} {err}")
            check(saved.get("tokens", {}).get("generated") == 0, f"prompt-only generated {saved}")
            rc, res, err = run_json(tiny, "--load-kv", kvf, *GEN, *sampling)
            check(rc == 0 and res.get("text") == full.get("text"),
                  f"resumed {sampling}: {res.get('text')!r} vs {full.get('text')!r} {err}")
            check(res.get("tokens", {}).get("prompt") == 0 and
                  res.get("tokens", {}).get("cached") == full.get("tokens", {}).get("prompt"),
                  f"resumed token counts {res.get('tokens')} vs {full.get('tokens')}")

            # the same through a pipe between two processes
            save = subprocess.Popen([IGNITE, "run", "-m", tiny, "-t", "1", "-q", "-p", prompt,
                                     "--prompt-only", "--save-kv", "-"], stdout=subprocess.PIPE)
            load = subprocess.run([IGNITE, "run", "-m", tiny, "-t", "1", "-q", "--json",
                                   "--load-kv", "-", *GEN, *sampling], stdin=save.stdout,
                                  capture_output=True, timeout=120)
            save.stdout.close()
            check(save.wait(timeout=120) == 0 and load.returncode == 0, f"pipe: {load.stderr!r}")
            try:
                piped = json.loads(load.stdout).get("text")
            except ValueError:
                piped = None
            check(piped == full.get("text"), f"piped {sampling}: {piped!r} vs {full.get('text')!r}")

            # prefix reuse: "abcdef" saved, "ghijkl" added = the whole prompt
            # (no BPE merge crosses that boundary in the toy vocabulary)
            rc, _, err = run(tiny, "-p", prompt[:6], "--prompt-only", "--save-kv", kvf, "-q")
            check(rc == 0, f"save prefix: {rc} {err}")
            rc, more, err = run_json(tiny, "--load-kv", kvf, "-p", prompt[6:], *GEN, *sampling)
            check(rc == 0 and more.get("text") == full.get("text"),
                  f"prefix reuse {sampling}: {more.get('text')!r} vs {full.get('text')!r} {err}")
            t = more.get("tokens", {})
            check(t.get("cached", 0) + t.get("prompt", 0) == full.get("tokens", {}).get("prompt")
                  and t.get("cached", 0) > 0 and t.get("prompt", 0) > 0,
                  f"prefix reuse prefilled {t} (full {full.get('tokens')})")
            # a chain: load, add text, save again, load
            kv2 = os.path.join(tmp, "chain.kv")
            rc, _, err = run(tiny, "--load-kv", kvf, "-p", prompt[6:], "--prompt-only",
                             "--save-kv", kv2, "-q")
            rc2, chained, err2 = run_json(tiny, "--load-kv", kv2, *GEN, *sampling)
            check(rc == 0 and rc2 == 0 and chained.get("text") == full.get("text"),
                  f"chained save: {chained.get('text')!r} {err} {err2}")

            for opt in ("-b", "--chunk", "--ubatch", "--batch-size"):
                rc, ch, err = run_json(tiny, "-p", prompt, opt, "5", *GEN, *sampling)
                check(rc == 0 and ch.get("text") == full.get("text"), f"{opt} 5: {ch} {err}")

        # refused files (p.kv now holds the 6-token prefix)
        with open(kvf, "rb") as f:
            good = f.read()

        # the same cache as version 1 wrote it (before groups of layers) loads
        # and continues as the version 3 file does
        v1 = os.path.join(tmp, "v1.kv")
        with open(v1, "wb") as f:
            f.write(kv_v1_of(good))
        rc, a, err = run_json(tiny, "--load-kv", kvf, "-p", prompt[6:], *GEN, "--temp", "0")
        rc1, b, err1 = run_json(tiny, "--load-kv", v1, "-p", prompt[6:], *GEN, "--temp", "0")
        check(rc == rc1 == 0 and a.get("text") and a.get("text") == b.get("text") and
              a.get("tokens") == b.get("tokens"), f"version 1: {b} vs {a} {err1}")

        def refused(data, what, want):
            bad = os.path.join(tmp, "bad.kv")
            with open(bad, "wb") as f:
                f.write(data)
            rc, out, err = run(tiny, "--load-kv", bad, "-n", "2")
            check(rc == 8 and want in err and out == b"", f"{what}: rc {rc}, stderr {err!r}")

        rc, out, err = run(other, "--load-kv", kvf, "-n", "2")
        check(rc == 8 and "another model" in err, f"other model: rc {rc} {err!r}")
        for cut in (0, 10, 88, len(good) // 2, len(good) - 1):
            refused(good[:cut], f"truncated at {cut}", "truncated")
        refused(good[:8] + struct.pack("<I", 4) + good[12:], "version 4", "version 4")
        mid = len(good) // 2
        refused(good[:mid] + bytes([good[mid] ^ 1]) + good[mid + 1:], "flipped byte", "checksum")
        refused(b"hello, this is not a cache" * 10, "text file", "not an ignite KV")
        refused(good + good, "two files joined", "trailing bytes")
        refused(good + b"\n", "a byte after the checksum", "trailing bytes")
        rc, out, err = run(tiny, "--load-kv", "-", "-n", "2", stdin=good + b"x")
        check(rc == 8 and "'stdin': trailing bytes" in err and out == b"",
              f"trailing bytes on stdin: rc {rc} {err!r}")
        rc, out, err = run(tiny, "--load-kv", os.path.join(tmp, "missing.kv"))
        check(rc == 3, f"missing file: rc {rc} {err!r}")

        rc, out, err = run(tiny, "--load-kv", kvf, "-c", "3")
        check(rc == 6 and "raise -c" in err, f"context below the file: rc {rc} {err!r}")
        for args in (["-p", "ab", "--save-kv", "-"],
                     ["-p", "ab", "--prompt-only", "--save-kv", "-", "--json"],
                     ["--load-kv", kvf, "-p", "ab", "--chat", "--system", "x"]):
            rc, out, err = run(tiny, *args)
            check(rc == 2, f"usage {args}: rc {rc} {err!r}")
        check_save_after_generation(tiny, tmp)
        check_save_file(tiny, tmp)
        rc, out, err = run(tiny, "-p", "ab", "--prompt-only", "--save-kv",
                           os.path.join(tmp, "no", "such", "dir.kv"))
        check(rc == 3, f"unwritable --save-kv: rc {rc} {err!r}")
        # --save-kv naming the model (or a link to it) is refused before the
        # weights it maps are truncated (that crashed with SIGBUS)
        with open(tiny, "rb") as f:
            weights = f.read()
        link = os.path.join(tmp, "model-link.gguf")
        os.symlink(tiny, link)
        for target in (tiny, link):
            rc, out, err = run(tiny, "-p", "ab", "--prompt-only", "--save-kv", target)
            check(rc == 2 and "is the model file" in err, f"--save-kv {target}: rc {rc} {err!r}")
        with open(tiny, "rb") as f:
            check(f.read() == weights, "--save-kv onto the model changed the model file")
        # a failed save removes only a regular file it wrote: never a link or
        # a device (as root, removing /dev/full itself)
        if os.access("/dev/full", os.W_OK):
            link = os.path.join(tmp, "full.kv")
            os.symlink("/dev/full", link)
            rc, out, err = run(tiny, "-p", "ab", "--prompt-only", "--save-kv", link)
            check(rc == 3 and "No space left" in err, f"--save-kv to /dev/full: rc {rc} {err!r}")
            check(os.path.islink(link) and os.path.exists("/dev/full"),
                  "a failed --save-kv removed a symlink (or /dev/full)")

        # 2 layers x 2 KV heads x 8 dims x (K, V) x 4 bytes = 256 B a position
        avail = 0
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
        n_ctx = 1 << 30
        if avail and n_ctx * 256 > avail:
            rc, out, err = run(tiny, "-p", "ab", "-c", str(n_ctx))
            check(rc == 5 and "blocks of 64 positions need" in err and "available" in err,
                  f"context beyond memory: rc {rc} {err!r}")
    return summary("test_kv_cli")


if __name__ == "__main__":
    sys.exit(main())
