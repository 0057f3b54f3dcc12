"""tests/kvcache/test_kv_cli.py: `ignite run --prompt-only --save-kv` and
`--load-kv` on tiny random-weight models (tests/pylib/ggufgen.py), so it
needs no download and stays fast under ASan:
  - resumed = uninterrupted: byte-identical text, greedy and at --temp 0.9
    with a seed, through a file, through a pipe (`--save-kv - | --load-kv -`)
    and through a chain (load, add text, save again);
  - prefix reuse: load + more text = the whole text in one run, and only
    the new tokens are prefilled;
  - --chunk and its aliases give the unchunked text;
  - every refused file exits 8 with its reason: another model, truncated
    (several lengths), another version, a corrupted byte, not a cache file,
    bytes after the checksum (two files joined; a file or stdin);
  - a context smaller than the file (6), usage conflicts (2; also --save-kv
    naming the model, which stays intact), an unwritable --save-kv path (3;
    a symlink or device there is not removed), a context that cannot fit in
    memory (5, both numbers).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import ggufgen
from igtest import check, summary

IGNITE = os.environ["IGNITE_BIN"]



def run(model, *args, stdin=None):
    r = subprocess.run([IGNITE, "run", "-m", model, "-t", "1", *args], input=stdin,
                       capture_output=True, timeout=120)
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
        refused(good[:8] + struct.pack("<I", 2) + good[12:], "version 2", "version 2")
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
        for args in (["-p", "ab", "--save-kv", kvf],
                     ["-p", "ab", "--prompt-only", "--save-kv", "-", "--json"],
                     ["--load-kv", kvf, "-p", "ab", "--chat"]):
            rc, out, err = run(tiny, *args)
            check(rc == 2, f"usage {args}: rc {rc} {err!r}")
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
            check(rc == 5 and "of KV cache need" in err and "available" in err,
                  f"context beyond memory: rc {rc} {err!r}")
    return summary("test_kv_cli")


if __name__ == "__main__":
    sys.exit(main())
