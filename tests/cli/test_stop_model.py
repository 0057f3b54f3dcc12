"""tests/cli/test_stop_model.py: --stop end to end on the real model, against
a known answer rather than against another path of the same matcher.

The default model is deterministic at --temp 0: `run` without a stop string
gives the greedy text T, and a batch of the same request cut after 1..N
tokens gives where each token's text ends in T. Stop strings are then
chosen from T, each shown (from T and those token ends alone) to be the case
it stands for:

- own token: the stop string is exactly one token's text, nothing held
  before it;
- split: it starts inside one token and ends inside the next or the one
  after, so text is held back and the token that completes it carries more
  text after it;
- fills the held text: text held back from earlier tokens plus the next
  token's text is exactly the stop string (the matcher's buffer is the stop
  string, nothing before or after it);
- last byte: all of the stop string but its last byte is held, and that
  byte is the next token (the longest prefix the matcher may hold);
- absent: a stop string that is not in T changes nothing (stop "limit").

For each, `run --json`, `run`'s streamed stdout and one `batch` holding all
of them must give exactly T up to the first occurrence of the stop string
(Python's str.find, not the matcher), stop reason "stop" and as many tokens
as it takes T to reach the stop string's end. Guards generate/stop.c and its
use by generate/engine.c in both commands: the mutant that misses a stop
string exactly filling the held text fails "own token", "fills" and "last
byte", one holding a byte less fails "last byte" (docs/testing-mutants.md). Skips (77) without the model.
"""
import json
import os
import subprocess
import sys

from igtest import check, model_path, sanitized, summary

IGNITE = os.environ["IGNITE_BIN"]
PROMPT = "Count: one, two, three,"
N = 12 if sanitized() else 24
BASE = ["-t", "2", "-p", PROMPT, "--temp", "0"]


def run_json(stop=None, n=N):
    args = [IGNITE, "run", "-m", MODEL, "-q", "--json", *BASE, "-n", str(n)]
    if stop is not None:
        args += ["--stop", stop]
    r = subprocess.run(args, capture_output=True, timeout=300)
    check(r.returncode == 0, f"run --stop {stop!r}: exit {r.returncode}: {r.stderr[-300:]!r}")
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {}


def run_stream(stop, n=N):
    """run's stdout without --json: the streamed text (and the final newline)."""
    r = subprocess.run([IGNITE, "run", "-m", MODEL, "-q", *BASE, "-n", str(n), "--stop", stop],
                       capture_output=True, timeout=300)
    check(r.returncode == 0, f"run --stop {stop!r} (streamed): exit {r.returncode}")
    return r.stdout.decode("utf-8", "replace")


def batch(reqs):
    lines = "".join(json.dumps(q) + "\n" for q in reqs).encode()
    r = subprocess.run([IGNITE, "batch", "-m", MODEL, "-t", "2"], input=lines,
                       capture_output=True, timeout=300)
    check(r.returncode == 0, f"batch: exit {r.returncode}: {r.stderr[-300:]!r}")
    out = {}
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        o = json.loads(line)
        out[o.get("id")] = o
    return out


def held_sim(stop, pieces):
    """(token number that completes the stop string, the matcher's buffer at
    that token, the text held before it) by the rule generate/stop.h states:
    held is the longest end of the text that is a proper prefix of the stop
    string. Used only to show a case is what it claims."""
    held = ""
    for k, p in enumerate(pieces, 1):
        buf = held + p
        if stop in buf:
            return k, buf, held
        held = ""
        for n in range(min(len(stop) - 1, len(buf)), 0, -1):
            if buf.endswith(stop[:n]):
                held = stop[:n]
                break
    return None, None, None


def choose(T, ends, pieces):
    """The stop strings of each case, chosen from T and the token ends."""
    cases = {}
    for k in range(2, len(pieces) + 1):  # own token: one token's whole text
        s = pieces[k - 1]
        if len(s.strip()) >= 3 and T.find(s) == ends[k - 1]:
            tk, buf, held = held_sim(s, pieces)
            if tk == k and buf == s and held == "":
                cases["own token"] = s
                break
    for k in range(2, len(pieces)):  # split: 2 bytes into token k .. 2 into token k + j
        for j in (1, 2):
            if k + j > len(pieces) or len(pieces[k - 1]) < 3 or len(pieces[k + j - 1]) < 3:
                continue
            s = T[ends[k] - 2:ends[k + j - 1] + 2]
            if T.find(s) == ends[k] - 2:
                tk, buf, held = held_sim(s, pieces)
                if tk == k + j and buf != s and len(held) >= 2 and s.startswith(held):
                    cases["split"] = s
                    break
        if "split" in cases:
            break
    for k in range(2, len(pieces)):  # fills: tokens k and k + 1 whole, k held
        s = pieces[k - 1] + pieces[k]
        if pieces[k - 1] and pieces[k] and T.find(s) == ends[k - 1]:
            tk, buf, held = held_sim(s, pieces)
            if tk == k + 1 and buf == s and held == pieces[k - 1]:
                cases["fills"] = s
                break
    for k in range(2, len(pieces)):  # last byte: all held but the one byte token k + 1 adds
        s = pieces[k - 1] + pieces[k]
        if len(pieces[k - 1]) >= 2 and len(pieces[k].encode()) == 1 and \
                T.find(s) == ends[k - 1] and s != cases.get("fills"):
            tk, buf, held = held_sim(s, pieces)
            if tk == k + 1 and buf == s and held == pieces[k - 1]:
                cases["last byte"] = s
                break
    cases["absent"] = "\u00a7never\u00a7"
    return cases


def main():
    global MODEL
    MODEL = model_path()
    if not os.path.exists(MODEL):
        print(f"skip: no model at {MODEL}", file=sys.stderr)
        return 77
    whole = run_json()
    T = whole.get("text", "")
    check(whole.get("stop") == "limit" and whole.get("tokens", {}).get("generated") == N,
          f"the unstopped run: {whole.get('stop')}, {whole.get('tokens')}")
    # where each token's text ends in T: the same greedy request cut after k tokens
    cut = batch([{"id": k, "prompt": PROMPT, "n_predict": k, "temperature": 0}
                 for k in range(1, N + 1)])
    texts = [cut.get(k, {}).get("text", "") for k in range(1, N + 1)]
    ok = all(T.startswith(t) for t in texts) and texts[-1] == T and \
        all(len(a) <= len(b) for a, b in zip(texts, texts[1:]))
    check(ok, f"the greedy text cut after 1..{N} tokens is not a growing prefix of {T!r}: "
          f"{texts}")
    if not ok:
        return summary("test_stop_model")
    ends = [0] + [len(t) for t in texts]
    pieces = [T[ends[k - 1]:ends[k]] for k in range(1, N + 1)]
    cases = choose(T, ends, pieces)
    for name in ("own token", "split", "fills", "last byte"):
        check(name in cases, f"no stop string of the case {name!r} in {pieces}")
    print(f"T = {T!r}\ncases: {cases}", file=sys.stderr)

    reqs = [{"id": name, "prompt": PROMPT, "n_predict": N, "temperature": 0, "stop": [s]}
            for name, s in cases.items()]
    in_batch = batch(reqs)
    for name, s in cases.items():
        at = T.find(s)
        want = T[:at] if at >= 0 else T
        want_stop = "stop" if at >= 0 else "limit"
        want_n = next(k for k in range(1, N + 1) if ends[k] >= at + len(s)) if at >= 0 else N
        for how, got in (("run", run_json(s)), ("batch", in_batch.get(name, {}))):
            check(got.get("text") == want and got.get("stop") == want_stop and
                  got.get("tokens", {}).get("generated") == want_n,
                  f"{how} --stop {s!r} ({name}): text {got.get('text')!r} stop "
                  f"{got.get('stop')} tokens {got.get('tokens', {}).get('generated')}; want "
                  f"{want!r} {want_stop} {want_n}")
            check(s not in got.get("text", s), f"{how} ({name}): {s!r} in the text")
        if not sanitized() or name == "fills":
            streamed = run_stream(s)
            check(streamed == want + "\n",
                  f"run --stop {s!r} ({name}), streamed: {streamed!r}, want {want + chr(10)!r}")
    return summary("test_stop_model")


if __name__ == "__main__":
    sys.exit(main())
