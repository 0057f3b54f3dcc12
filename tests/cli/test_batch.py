"""tests/cli/test_batch.py: `ignite batch`.

On the real model (skipped without it): every request's output equals what
`ignite run` gives the same request alone, byte for byte and token for token:
greedy and seeded sampling, mixed lengths, more requests than slots (-P 3),
prompts longer than the step budget (-b 16: prefilled in chunks while other
sequences decode), a shared system prompt (its blocks shared: the summary
counts them), stop strings, on the default int8 path and the exact path,
f32 and f16 caches. On a tiny random model (fast, also in the ASan build):
every kind of bad line gets one error object and the rest runs (exit 9),
--ordered and -P 1 keep input order, a slow request outlives many
quick ones (the ring of open requests keeps it), --lines, a pipe that delivers requests
over time is served before it closes, a closed stdout ends quietly, Ctrl-C
ends the requests in flight as "interrupted" after the finished ones were
written (exit 130), the end line's counts (read, finished, failed, cut short,
never started) add up after Ctrl-C and after `| head -n 1`, --kv-mem too small for a request refuses that request.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import ggufgen
from batchrun import batch, run_alone
from igtest import check, model_path, sanitized, summary

IGNITE = os.environ["IGNITE_BIN"]
SKIP = 77


SYSTEM = ("You are a careful assistant for a library's catalogue. Answer in one short "
          "sentence, name the shelf when you know it, and never invent a title that is not "
          "in the catalogue. If you are unsure, say so plainly and suggest asking the desk. "
          "The library opens at nine and closes at six; the reading room upstairs is quiet, "
          "the children's corner is by the window, and the newspapers are near the entrance.")


def requests():
    reqs = [
        {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0},
        {"prompt": "Once upon a time", "n_predict": 20, "temperature": 0.9, "seed": 7},
        {"prompt": "List three colours:", "n_predict": 6, "temperature": 0.7, "seed": 11,
         "top_k": 20, "repeat_penalty": 1.1},
        {"prompt": "Where are the books about birds?", "chat": True, "system": SYSTEM,
         "n_predict": 16, "temperature": 0},
        {"prompt": "Where are the cookbooks?", "chat": True, "system": SYSTEM,
         "n_predict": 16, "temperature": 0.8, "seed": 3},
        {"prompt": "Count: one, two, three,", "n_predict": 24, "temperature": 0,
         "stop": [" six", "\n"]},
        {"prompt": "A long prompt, to be prefilled in chunks while others decode: " +
         "the quick brown fox jumps over the lazy dog; " * 6, "n_predict": 10,
         "temperature": 0},
        {"prompt": "Hello", "n_predict": 8, "temperature": 1.2, "seed": 99, "ignore_eos": True},
        {"prompt": "A person as JSON:", "n_predict": 40, "temperature": 0.7, "seed": 5,
         "json_schema": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "age": {"type": "integer"}},
                         "required": ["name", "age"]}},
        {"prompt": "Today's date:", "n_predict": 20, "temperature": 0,
         "grammar": 'root ::= [0-9]{4} "-" [0-9]{2} "-" [0-9]{2}'},
    ]
    for i, r in enumerate(reqs):
        r["id"] = f"r{i}"
    return reqs


def check_same(model, reqs, args, env, what, common=()):
    rc, objs, err = batch(model, [json.dumps(r) for r in reqs], *args, *common, env=env)
    check(rc == 0, f"{what}: rc {rc} {err[-400:]!r}")
    check(len(objs) == len(reqs), f"{what}: {len(objs)} results for {len(reqs)} requests")
    by_id = {o.get("id"): o for o in objs}
    for r in reqs:
        got, want = by_id.get(r["id"], {}), run_alone(model, r, env, common)
        check(got.get("text") == want.get("text"),
              f"{what}, {r['id']}: batch text {got.get('text')!r} != run's {want.get('text')!r}")
        check(got.get("stop") == want.get("stop") and
              got.get("tokens", {}).get("generated") == want.get("tokens", {}).get("generated"),
              f"{what}, {r['id']}: stop/tokens {got.get('stop')} {got.get('tokens')} vs "
              f"{want.get('stop')} {want.get('tokens')}")
        if "json_schema" in r or "grammar" in r:
            check(got.get("grammar_complete") is True and got.get("stop") in ("grammar", "eog"),
                  f"{what}, {r['id']}: constrained output incomplete: {got}")
        if "json_schema" in r and got.get("grammar_complete"):
            try:
                import jsonschema
                jsonschema.validate(json.loads(got.get("text", "")), r["json_schema"])
            except Exception as e:  # a failed validation or an unparsable text
                check(False, f"{what}, {r['id']}: output does not validate: {e}")
        if r.get("stop"):  # whatever ended it (the known answers: test_stop_model.py)
            check(not any(s in got.get("text", "") for s in r["stop"]),
                  f"{what}, {r['id']}: the stop string is in the text {got.get('text')!r}")
    return err


def real_model_checks():
    model = model_path()
    if not os.path.exists(model):
        print("real model absent: its checks are skipped", file=sys.stderr)
        return
    reqs = requests()
    env = dict(os.environ)
    env.pop("IGNITE_MATMUL", None)
    if sanitized():
        # The engine's paths once, on a quarter of the runs (~30x slower
        # forward): sampling options, the shared system prompt, a stop string,
        # a prompt prefilled in chunks beside decode rows, a schema. The
        # other modes below repeat those paths with other numbers.
        some = [reqs[i] for i in (2, 3, 5, 6, 8)]
        err = check_same(model, some, ["-P", "3", "-b", "16"], env, "int8, -P 3 -b 16")
        check("blocks shared" in err, f"summary line: {err[-300:]!r}")
        return
    err = check_same(model, reqs, ["-P", "3", "-b", "16"], env, "int8, -P 3 -b 16")
    check("blocks shared" in err, f"summary line: {err[-300:]!r}")
    exact = dict(env, IGNITE_MATMUL="exact")
    check_same(model, reqs[:5], ["-P", "4", "-b", "32"], exact, "exact, -P 4 -b 32")
    check_same(model, reqs[3:], ["-P", "2"], env, "int8, f16 cache", ["--cache-type", "f16"])
    # Two requests with the system prompt, one after the other on one slot:
    # the second shares the blocks the first computed (blocks are shared once
    # computed, as vLLM's prefix caching does) and still gives run's text.
    err = check_same(model, [dict(reqs[3], id="a"), dict(reqs[4], id="b")], ["-P", "1"], env,
                     "shared system prompt")
    shared = [int(w) for w in err.split("kv peak")[-1].replace(",", " ").split() if w.isdigit()]
    check(shared and shared[-1] > 0, f"the system prompt's blocks were not shared: {err[-300:]!r}")


def tiny_model(tmp):
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",), mat_type=ggufgen.T_F32,
                           emb_type=ggufgen.T_F32)
    path = os.path.join(tmp, "tiny.gguf")
    with open(path, "wb") as f:
        f.write(g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2").build())
    return path


def bad_lines(tiny):
    lines = [
        json.dumps({"prompt": "abc", "n_predict": 3}),          # 1 fine
        "not json at all",                                       # 2
        json.dumps({"n_predict": 3}),                            # 3 no prompt
        json.dumps({"prompt": "abc", "n_predict": "3"}),         # 4 wrong type
        json.dumps({"prompt": "abc", "temprature": 0.5}),        # 5 unknown key
        json.dumps({"prompt": "a" * 400, "n_predict": 3}),      # 6 over the context (-c 64)
        '{"prompt": "ab\\u0000c"}',                              # 7 NUL
        "",                                                      # 8 blank: no request
        json.dumps({"prompt": "abc"}) + " trailing",             # 9 text after the object
        "[1, 2]",                                                # 10 not an object
        json.dumps({"prompt": "abc", "top_p": 2}),               # 11 out of range
        json.dumps({"prompt": "abc", "system": "s"}),            # 12 system without chat
        json.dumps({"prompt": "abcd", "n_predict": 2, "id": {"k": [1]}}),  # 13 fine
    ]
    data = ("\n".join(lines) + "\n").encode() + b'{"prompt": "a\xff"}\n'  # 14 bad UTF-8
    data += b'{"prompt": "ab\x00cd", "n_predict": 3}\n'  # 15 a raw NUL: cJSON would cut "ab"
    data += b'{"prompt": "abc", "id": ' + b"[" * 1001 + b"]" * 1001 + b"}\n"  # 16 too deep
    data += b'{"prompt": "a\\"1 02", "n_predict": 020}\n'  # 17 a leading zero (strtod's)
    rc, objs, err = batch(tiny, data, "-c", "64", "-n", "4", "--ignore-eos")
    check(rc == 9, f"bad lines: exit {rc}, want 9 (some requests failed): {err[-300:]!r}")
    by_line = {o.get("line"): o for o in objs}
    for line in (2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17):
        o = by_line.get(line, {})
        check("error" in o and "\n" not in o["error"] and o.get("id") == line,
              f"line {line}: no error object: {o}")
    for line in (1, 13):
        check(by_line.get(line, {}).get("stop") == "limit", f"line {line} did not run: {by_line.get(line)}")
    check(8 not in by_line and len(objs) == 16, f"blank line or count: {sorted(by_line)}")
    check(by_line.get(13, {}).get("id") == {"k": [1]}, f"id echoed: {by_line.get(13)}")
    check("context" in by_line.get(6, {}).get("error", ""), f"over the context: {by_line.get(6)}")
    check("temprature" in by_line.get(5, {}).get("error", ""), f"unknown key: {by_line.get(5)}")
    check("UTF-8" in by_line.get(14, {}).get("error", ""), f"bad UTF-8: {by_line.get(14)}")
    check("NUL byte" in by_line.get(15, {}).get("error", ""), f"raw NUL: {by_line.get(15)}")
    check("nested more than 1000" in by_line.get(16, {}).get("error", ""),
          f"too deep: {by_line.get(16)}")
    check("number JSON does not allow at byte 35" in by_line.get(17, {}).get("error", ""),
          f"leading zero: {by_line.get(17)}")
    check("batch: 16 read, 2 finished, 14 failed, 0 cut short, 0 never started in " in err,
          f"summary: {err[-300:]!r}")


def ids_and_whole_batch_errors(tiny):
    """Numeric ids come back as written (cJSON's doubles would print
    9007199254740993 as another number); a byte-order mark before the first
    --lines prompt is dropped; --chat on a model whose template ignite cannot
    render is one error for the batch, before any line."""
    ids = ["9007199254740993", "0.30000000000000004", "-12.5e-3", "12345678901234567890", "7"]
    lines = [f'{{"prompt": "abc", "n_predict": 1, "id": {i}}}' for i in ids]
    r = subprocess.run([IGNITE, "batch", "-m", tiny, "-t", "1", "-q", "--ordered"],
                       input="".join(l + "\n" for l in lines).encode(), capture_output=True,
                       timeout=120)
    out = r.stdout.decode().splitlines()
    check(r.returncode == 0 and len(out) == len(ids) and
          all(o.startswith(f'{{"id":{i},') for o, i in zip(out, ids)),
          f"ids echoed as written: {r.returncode} {[o[:40] for o in out]}")
    rc, objs, err = batch(tiny, b"\xef\xbb\xbfabc\nabc\n", "--lines", "-n", "1", "--ordered")
    toks = [o.get("tokens", {}).get("prompt") for o in objs]
    check(rc == 0 and len(toks) == 2 and toks[0] == toks[1], f"--lines with a BOM: {toks} {err}")
    rc, objs, err = batch(tiny, [json.dumps({"prompt": "abc"})], "--chat-template-file",
                          os.devnull + "x")
    check(rc == 3 and not objs and err.count("\n") == 1,
          f"--chat-template-file unreadable: {rc} {objs} {err!r}")
    rc, objs, err = batch(tiny, [json.dumps({"prompt": "abc"})], "--chat-template", "zephyr",
                          "-n", "1")
    check(rc == 0 and len(objs) == 1 and objs[0]["tokens"]["prompt"] > 3,
          f"--chat-template zephyr: {rc} {objs} {err!r}")


def order_and_modes(tiny):
    lines = [json.dumps({"prompt": "ab" * (1 + i % 3), "n_predict": 1 + (7 * i) % 9, "id": i})
             for i in range(12)]
    rc, objs, err = batch(tiny, lines, "--ordered", "-P", "4", "--ignore-eos")
    check(rc == 0 and [o.get("id") for o in objs] == list(range(12)), f"--ordered: {objs}")
    rc, objs, err = batch(tiny, lines, "-P", "1", "--ignore-eos", "-q")
    check(rc == 0 and [o.get("id") for o in objs] == list(range(12)) and err == "",
          f"-P 1 keeps order, -q: {[o.get('id') for o in objs]} {err!r}")
    # one slow request while more than a ring's worth (64) of short ones pass it
    lines = [json.dumps({"prompt": "abc", "n_predict": 200 if i == 0 else 1, "id": i})
             for i in range(200)]
    rc, objs, err = batch(tiny, lines, "-P", "2", "--ignore-eos", "-q")
    ids = sorted(o.get("id") for o in objs)
    slow = [o for o in objs if o.get("id") == 0]
    check(rc == 0 and ids == list(range(200)) and slow and slow[0].get("stop") == "limit",
          f"a slow request among many: rc {rc}, {len(objs)} results, {slow[:1]} {err[-200:]!r}")
    # more results than the summary's first 256 slots, 8 of them in flight when it fills
    # (the arrays grew by the results so far, not the requests made: heap corruption)
    lines = [json.dumps({"prompt": "ab", "n_predict": 2, "id": i}) for i in range(300)]
    rc, objs, err = batch(tiny, lines, "-P", "8", "--ignore-eos")
    check(rc == 0 and len(objs) == 300 and "300 finished" in err,
          f"300 requests, 8 in flight: rc {rc}, {len(objs)} results, {err[-200:]!r}")
    rc, objs, err = batch(tiny, ["abc", "", "bca"], "--lines", "-n", "2")
    check(rc == 0 and [o.get("line") for o in objs] == [1, 3], f"--lines: {objs} {err}")
    rc, objs, err = batch(tiny, [json.dumps({"prompt": "abc", "n_predict": 20000})],
                          "-c", "100000", "--kv-mem", "1", "--ignore-eos")
    check(rc == 9 and objs and "KV pool" in objs[0].get("error", ""),
          f"--kv-mem too small: {rc} {objs} {err[-200:]!r}")


def streaming(tiny):
    """A result comes back while the pipe is still open."""
    p = subprocess.Popen([IGNITE, "batch", "-m", tiny, "-t", "1", "-n", "3", "-q"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(b'{"prompt": "abc", "id": "first"}\n')
    p.stdin.flush()
    first = p.stdout.readline()
    check(b'"first"' in first, f"no result before the input ended: {first!r}")
    p.stdin.write(b'{"prompt": "abd", "id": "second"}\n')
    p.stdin.close()
    rest, err = p.stdout.read(), p.stderr.read()
    p.wait(timeout=60)
    check(p.returncode == 0 and b'"second"' in rest, f"streaming: {p.returncode} {rest!r} {err!r}")


def closed_pipe_and_interrupt(tiny):
    lines = "".join(json.dumps({"prompt": "abc", "n_predict": 3, "id": i}) + "\n"
                    for i in range(40)).encode()
    r = subprocess.run(f"'{IGNITE}' batch -m '{tiny}' -t 1 -P 2 | head -n 1", shell=True,
                       input=lines, capture_output=True, timeout=120, executable="/bin/bash")
    check(r.returncode == 0 and r.stdout.count(b"\n") == 1 and b"ignite:" not in r.stderr,
          f"closed stdout: {r.returncode} {r.stdout!r} {r.stderr!r}")
    r = subprocess.run(f"set -o pipefail; '{IGNITE}' batch -m '{tiny}' -t 1 -P 2 | head -n 1",
                       shell=True, input=lines, capture_output=True, timeout=120,
                       executable="/bin/bash")
    check(r.returncode == 0, f"closed stdout under pipefail: {r.returncode} {r.stderr!r}")

    # Ctrl-C: long requests, the signal after the first result arrives
    long = "".join(json.dumps({"prompt": "abc", "n_predict": -1 if i else 2, "id": i}) + "\n"
                   for i in range(4)).encode()
    p = subprocess.Popen([IGNITE, "batch", "-m", tiny, "-t", "1", "-P", "4", "-c", "200000",
                          "--ignore-eos"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write(long)
    p.stdin.flush()
    first = p.stdout.readline()
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=60)
    p.stdin.close()
    objs = [json.loads(l) for l in (first + rest).decode().splitlines()]
    stops = sorted(o.get("stop", "") for o in objs)
    check(p.returncode == 130, f"Ctrl-C: exit {p.returncode} {err[-300:]!r}")
    check(objs and objs[0].get("id") == 0 and objs[0].get("stop") == "limit",
          f"Ctrl-C: the finished request first: {objs[:1]}")
    check(stops.count("interrupted") == 3, f"Ctrl-C: in-flight requests: {stops}")


def end_counts(err):
    """The end line's five counts, or None."""
    m = re.search(r"batch: (\d+) read, (\d+) finished, (\d+) failed, (\d+) cut short, "
                  r"(\d+) never started in ", err)
    return tuple(int(x) for x in m.groups()) if m else None


def end_line_counts(tiny):
    # Ctrl-C with 1 short and 9 endless requests, 4 in flight: the short one
    # finishes, the 4 then in flight are cut short, 5 never start
    reqs = "".join(json.dumps({"prompt": "abc", "n_predict": -1 if i else 2, "id": i}) + "\n"
                   for i in range(10)).encode()
    p = subprocess.Popen([IGNITE, "batch", "-m", tiny, "-t", "1", "-P", "4", "-c", "200000",
                          "--ignore-eos"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write(reqs)
    p.stdin.flush()
    p.stdout.readline()
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    got = end_counts(err.decode())
    check(p.returncode == 130 and got == (10, 1, 0, 4, 5),
          f"Ctrl-C: (read, finished, failed, cut short, never started) {got}, want "
          f"(10, 1, 0, 4, 5): {err[-300:]!r}")
    # a closed stdout: the reader took one line and left; nothing failed, the
    # counts add up to the 40 read, and (requests of 1000 tokens: head is
    # gone long before the last) some never started
    reqs = "".join(json.dumps({"prompt": "abc", "n_predict": 1000, "id": i}) + "\n"
                   for i in range(40)).encode()
    r = subprocess.run(f"'{IGNITE}' batch -m '{tiny}' -t 1 -P 2 -c 2048 --ignore-eos "
                       "| head -n 1", shell=True,
                       input=reqs, capture_output=True, timeout=120, executable="/bin/bash")
    got = end_counts(r.stderr.decode())
    check(got is not None and got[0] == 40 and got[2] == 0 and sum(got[1:]) == 40 and
          got[4] > 0, f"| head -n 1: {got} {r.stderr[-300:]!r}")


def main():
    real_model_checks()
    with tempfile.TemporaryDirectory() as tmp:
        tiny = tiny_model(tmp)
        bad_lines(tiny)
        ids_and_whole_batch_errors(tiny)
        order_and_modes(tiny)
        streaming(tiny)
        closed_pipe_and_interrupt(tiny)
        end_line_counts(tiny)
    return summary("test_batch")


if __name__ == "__main__":
    sys.exit(main())
