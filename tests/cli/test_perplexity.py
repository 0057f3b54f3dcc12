"""tests/cli/test_perplexity.py: `ignite perplexity` on tiny models made by
tests/pylib/ggufgen.py (no download, fast under ASan), against references
written here from llama.cpp's definitions:

- perplexity and its error, overall and per window, of the exact path
  against an fp64 numpy forward (tests/cpu/ref_forward.py) over the same
  windows: the second half of each window scored, each window's first token
  replaced by BOS when the vocabulary adds one (a model that does and one that
  does not; the rule matters: the reference without it differs);
- the base file, parsed here from its documented layout: header, tokens,
  records whose log-probabilities are the reference's within the 16-bit step;
- KL divergence, top-1 agreement and PPL(base) of the int8 path against the
  exact path's base, against numpy over the two runs' records; a run against
  its own base: KL 0 within the records' resolution, top-1 100 %;
- --chunks, -b (steps smaller than a window), --json's keys (jsonschema);
- refusals in one line with their exit codes: another model's base file, a
  truncated one, one with bytes after it, not a base file, -c or a text that
  differ from the base's, a text too short, empty or not UTF-8, options that
  do not go together, a base path that cannot be created (before any work,
  nothing left behind)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import jsonschema
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
import ggufgen  # noqa: E402
from igtest import check, summary  # noqa: E402
from ref_forward import RefModel  # noqa: E402
from test_forward_tiny import valid_data  # noqa: E402

IGNITE = os.environ["IGNITE_BIN"]
N_VOCAB = 24  # ids 3.. are the letters a, b, c, ...

SCHEMA_ROWS = {
    "scored": {"type": "integer", "minimum": 1},
    "ppl": {"type": "number"}, "ppl_err": {"type": "number", "minimum": 0},
}
SCHEMA_KL = {k: {"type": "number"} for k in (
    "ppl_base", "ppl_base_err", "kl_mean", "kl_mean_err", "kl_median", "kl_p99", "kl_max",
    "top1", "top1_err")}
SCHEMA = {
    "type": "object",
    "required": ["model", "device", "device_name", "matmul", "threads", "n_ctx", "text_tokens",
                 "windows_planned", "windows", "scored_per_window", "bos", "seconds",
                 "interrupted", "per_window"] + list(SCHEMA_ROWS),
    "properties": {
        "model": {"type": "string"}, "device": {"type": "string"},
        "device_name": {"type": "string"}, "matmul": {"enum": ["int8", "exact", "f16"]},
        "threads": {"type": "integer"}, "n_ctx": {"type": "integer"},
        "text_tokens": {"type": "integer"}, "windows_planned": {"type": "integer"},
        "windows": {"type": "integer"}, "scored_per_window": {"type": "integer"},
        "bos": {"type": "boolean"}, "seconds": {"type": "number"},
        "interrupted": {"type": "boolean"},
        "base_written": {"type": ["string", "null"]}, "kl_base": {"type": "string"},
        **SCHEMA_ROWS, **SCHEMA_KL,
        "per_window": {"type": "array", "items": {
            "type": "object", "required": ["window"] + list(SCHEMA_ROWS),
            "properties": {"window": {"type": "integer"}, **SCHEMA_ROWS, **SCHEMA_KL}}},
    },
}


def write_model(path, seed, n_vocab=N_VOCAB, add_bos=False):
    g = ggufgen.tiny_llama(skip=("tokenizer.ggml.pre",), arch="llama", n_layer=2, n_embd=64,
                           n_head=4, n_head_kv=2, n_ff=96, n_vocab=n_vocab,
                           mat_type=ggufgen.T_Q8_0, emb_type=ggufgen.T_Q8_0)
    g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2")
    if add_bos:
        g.add("tokenizer.ggml.add_bos_token", ggufgen.BOOL, 1)
    rng = np.random.default_rng(seed)
    for t in g.tensors:
        t["data"] = valid_data(t["name"], t["ne"], t["type"], rng)
    with open(path, "wb") as f:
        f.write(g.build())


def ppl(model, *args, stdin=None):
    r = subprocess.run([IGNITE, "perplexity", "-m", model, "-t", "1", *args], input=stdin,
                       capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def ppl_json(model, *args):
    rc, out, err = ppl(model, "--json", *args)
    try:
        obj = json.loads(out)
        jsonschema.validate(obj, SCHEMA)
    except (ValueError, jsonschema.ValidationError) as e:
        check(False, f"{args}: stdout is not the documented JSON object ({e}): {out[:300]!r} {err}")
        obj = {}
    check(rc == 0, f"{args}: exit {rc}: {err}")
    return obj


def one_line(err, what):
    lines = [ln for ln in err.splitlines() if ln]
    check(len(lines) == 1 and lines[0].startswith("ignite: "), f"{what}: not one line: {err!r}")


# ---- references ---------------------------------------------------------------------


def log_softmax(l):
    m = l.max(axis=-1, keepdims=True)
    return l - m - np.log(np.exp(l - m).sum(axis=-1, keepdims=True))


def ref_windows(ref, tokens, n_ctx, bos, max_chunks=None):
    """Each window's scored rows: (targets, fp64 log-probabilities [n_scored, vocab])."""
    n_chunk = len(tokens) // n_ctx
    if max_chunks:
        n_chunk = min(n_chunk, max_chunks)
    first, out = n_ctx // 2, []
    for c in range(n_chunk):
        win = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if bos is not None:
            win[0] = bos
        logits = ref.forward(win, ref.new_cache(), all_rows=True)
        out.append((np.array(win[first + 1:]), log_softmax(logits[first:n_ctx - 1])))
    return out


def nll_stats(nll):
    nll = np.asarray(nll, dtype=np.float64)
    mean = nll.mean()
    err = np.sqrt(max((nll * nll).mean() - mean * mean, 0) / (len(nll) - 1))
    return np.exp(mean), np.exp(mean) * err


def window_nll(win):
    targets, lp = win
    return -lp[np.arange(len(targets)), targets]


def read_base(path):
    """The base file by its documented layout: header, tokens, records as
    log-probabilities [n_chunk, n_scored, n_vocab] and their steps."""
    b = open(path, "rb").read()
    check(b[:8] == b"_logits_", f"{path}: magic {b[:8]!r}")
    n_ctx, n_vocab, n_chunk = struct.unpack("<iii", b[8:20])
    toks = np.frombuffer(b, "<i4", n_chunk * n_ctx, 20)
    nv, n_scored = 2 * ((n_vocab + 1) // 2) + 4, n_ctx - 1 - n_ctx // 2
    off = 20 + 4 * n_chunk * n_ctx
    check(len(b) == off + 2 * nv * n_scored * n_chunk, f"{path}: {len(b)} bytes")
    rec = np.frombuffer(b, "<u2", n_chunk * n_scored * nv, off).reshape(n_chunk, n_scored, nv)
    scale = rec[..., 0:2].copy().view("<f4")[..., 0].astype(np.float64)
    min_lp = rec[..., 2:4].copy().view("<f4")[..., 0].astype(np.float64)
    words = rec[..., 4:4 + n_vocab]
    lp = scale[..., None] * words + min_lp[..., None]
    return (n_ctx, n_vocab, n_chunk), toks, lp, scale, words


def kl_from_records(lp_base, lp, words_base):
    """llama.cpp's KL(base || run) per row, over base log-probabilities above -16,
    and top-1 agreement (a tie in the base's words agrees)."""
    keep = lp_base > -16
    kl = np.where(keep, np.exp(lp_base) * (lp_base - lp), 0).sum(axis=-1)
    top = lp.argmax(axis=-1)
    same = np.take_along_axis(words_base, top[..., None], -1)[..., 0] == words_base.max(axis=-1)
    return kl, same


# ---- the checks ---------------------------------------------------------------------


def tokens_of(model, text):
    r = subprocess.run([IGNITE, "tokenize", "-m", model, "-f", text, "--json", "--no-special"],
                       capture_output=True, timeout=60)
    return json.loads(r.stdout)


def check_ppl(model, ref, text, bos, tag):
    toks = tokens_of(model, text)
    obj = ppl_json(model, "--exact", "-c", "16", "-f", text)
    wins = ref_windows(ref, toks, 16, bos)
    want, want_err = nll_stats(np.concatenate([window_nll(w) for w in wins]))
    check(obj.get("bos") is (bos is not None), f"{tag}: bos {obj.get('bos')}")
    check(obj.get("windows") == len(wins) and obj.get("scored") == 7 * len(wins),
          f"{tag}: windows {obj.get('windows')} scored {obj.get('scored')}")
    got, got_err = obj.get("ppl", 0), obj.get("ppl_err", 0)
    check(abs(got / want - 1) < 2e-4 and abs(got_err / want_err - 1) < 2e-3,
          f"{tag}: PPL {got} +/- {got_err}, numpy fp64 {want} +/- {want_err}")
    for w, o in zip(wins, obj.get("per_window", [])):
        p, _ = nll_stats(window_nll(w))
        check(abs(o["ppl"] / p - 1) < 2e-4, f"{tag}: window {o['window']} PPL {o['ppl']} vs {p}")
    # the BOS rule is what makes them agree
    if bos is not None:
        alt, _ = nll_stats(np.concatenate([window_nll(w) for w in ref_windows(ref, toks, 16, None)]))
        check(abs(alt / want - 1) > 1e-3, f"{tag}: BOS changes nothing ({alt} vs {want})")
    # steps of 5 rows, and --chunks
    obj2 = ppl_json(model, "--exact", "-c", "16", "-b", "5", "--chunks", "2", "-f", text)
    want2, _ = nll_stats(np.concatenate([window_nll(w) for w in wins[:2]]))
    check(obj2.get("windows") == 2 and abs(obj2.get("ppl", 0) / want2 - 1) < 2e-4,
          f"{tag}: -b 5 --chunks 2: {obj2.get('windows')} windows, PPL {obj2.get('ppl')} vs {want2}")
    return toks, wins


def check_base_and_kl(model, tmp, text, toks, wins):
    base = os.path.join(tmp, "exact.kl")
    obj = ppl_json(model, "--exact", "-c", "16", "-f", text, "--kl-divergence-base", base)
    check(obj.get("base_written") == base, f"base_written {obj.get('base_written')}")
    check(not [f for f in os.listdir(tmp) if ".partial-" in f], "a partial file was left")
    (n_ctx, n_vocab, n_chunk), ftoks, lp, scale, words = read_base(base)
    check((n_ctx, n_vocab, n_chunk) == (16, N_VOCAB, len(wins)),
          f"header {(n_ctx, n_vocab, n_chunk)}")
    check(list(ftoks) == toks[:n_chunk * 16], "the file's tokens are not the text's")
    worst = 0.0
    for c, (_, lp_ref) in enumerate(wins):
        top = lp_ref.max(axis=-1, keepdims=True)
        near = lp_ref > top - 16
        worst = max(worst, float((np.abs(lp[c] - lp_ref) - scale[c][:, None] / 2)[near].max()))
    check(worst < 1e-3, f"records vs numpy log-probabilities: {worst:.2e} past the 16-bit step")

    # a run against its own base
    obj = ppl_json(model, "--exact", "--kl-divergence-base", base, "--kl-divergence")
    check(abs(obj.get("kl_mean", 1)) < 1e-5 and obj.get("kl_p99", 1) < 1e-4 and
          obj.get("top1") == 1, f"itself: KL {obj.get('kl_mean')} p99 {obj.get('kl_p99')} "
          f"top-1 {obj.get('top1')}")
    check(abs(obj.get("ppl_base", 0) / obj.get("ppl", 1) - 1) < 1e-4,
          f"itself: PPL(base) {obj.get('ppl_base')} vs PPL {obj.get('ppl')}")

    # the int8 path against the exact base, against numpy over both runs' records
    own = os.path.join(tmp, "int8.kl")
    ppl_json(model, "-c", "16", "-f", text, "--kl-divergence-base", own)
    _, _, lp8, _, _ = read_base(own)
    obj = ppl_json(model, "--kl-divergence-base", base, "--kl-divergence", "-f", text)
    kl, same = kl_from_records(lp, lp8, words)
    check(obj.get("matmul") == "int8" and obj.get("windows") == n_chunk, f"int8 run: {obj}")
    check(abs(obj.get("kl_mean", -1) - kl.mean()) < 2e-5 + 0.02 * kl.mean(),
          f"int8 vs exact: KL {obj.get('kl_mean')}, numpy {kl.mean()}")
    check(abs(obj.get("kl_p99", -1) - np.quantile(kl, 0.99)) < 5e-5 + 0.05 * kl.max(),
          f"int8 vs exact: KL p99 {obj.get('kl_p99')}, numpy {np.quantile(kl, 0.99)}")
    check(abs(obj.get("top1", -1) * kl.size - same.sum()) <= 1,
          f"int8 vs exact: top-1 {obj.get('top1')}, numpy {same.mean()}")
    nll_base = -np.take_along_axis(lp, np.array([w[0] for w in wins])[..., None], -1)[..., 0]
    check(abs(obj.get("ppl_base", 0) / np.exp(nll_base.mean()) - 1) < 1e-5,
          f"PPL(base) {obj.get('ppl_base')} vs {np.exp(nll_base.mean())}")
    for w, o in enumerate(obj.get("per_window", [])):
        check(abs(o["kl_mean"] - kl[w].mean()) < 2e-5 + 0.02 * kl[w].mean(),
              f"window {w + 1}: KL {o['kl_mean']} vs {kl[w].mean()}")
    # --chunks reads a prefix of the file
    obj = ppl_json(model, "--kl-divergence-base", base, "--kl-divergence", "--chunks", "1")
    check(obj.get("windows") == 1 and obj.get("scored") == 7, f"--chunks 1: {obj.get('windows')}")
    # the text view is the same run
    rc, out, err = ppl(model, "--kl-divergence-base", base, "--kl-divergence")
    check(rc == 0 and "Mean    KLD:" in out and "Same top p:" in out and "99.0%   KLD:" in out,
          f"text output: {rc} {out!r} {err}")
    return base


def check_refusals(model, tmp, text, base):
    other = os.path.join(tmp, "other.gguf")
    write_model(other, seed=9, n_vocab=N_VOCAB + 4)
    cases = []
    rc, _, err = ppl(other, "--kl-divergence-base", base, "--kl-divergence")
    cases.append(("another vocabulary", rc, 6, err, "this model has 28"))
    size = os.path.getsize(base)
    data = open(base, "rb").read()
    cut = os.path.join(tmp, "cut.kl")
    with open(cut, "wb") as f:
        f.write(data[:size - 100])
    rc, _, err = ppl(model, "--kl-divergence-base", cut, "--kl-divergence")
    cases.append(("truncated", rc, 6, err, "truncated"))
    with open(cut, "wb") as f:
        f.write(data + data[-8:])
    rc, _, err = ppl(model, "--kl-divergence-base", cut, "--kl-divergence")
    cases.append(("bytes after it", rc, 6, err, "after its last window"))
    rc, _, err = ppl(model, "--kl-divergence-base", model, "--kl-divergence")
    cases.append(("a model as base", rc, 6, err, "not a perplexity base file"))
    rc, _, err = ppl(model, "--kl-divergence-base", base, "--kl-divergence", "-c", "32")
    cases.append(("-c differs", rc, 2, err, "-c 16"))
    other_text = os.path.join(tmp, "other.txt")
    with open(other_text, "w") as f:
        f.write("efgh" * 40)
    rc, _, err = ppl(model, "--kl-divergence-base", base, "--kl-divergence", "-f", other_text)
    cases.append(("another text", rc, 6, err, "another text"))
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("efghijk")
    rc, _, err = ppl(model, "-f", short, "-c", "16")
    cases.append(("too short", rc, 6, err, "7 tokens"))
    with open(short, "w") as f:
        pass
    rc, _, err = ppl(model, "-f", short)
    cases.append(("empty", rc, 6, err, "empty"))
    with open(short, "wb") as f:
        f.write(b"efgh\xff" * 10)
    rc, _, err = ppl(model, "-f", short)
    cases.append(("not UTF-8", rc, 6, err, "UTF-8"))
    rc, _, err = ppl(model, "--kl-divergence")
    cases.append(("--kl-divergence alone", rc, 2, err, "--kl-divergence-base"))
    rc, _, err = ppl(model)
    cases.append(("no text", rc, 2, err, "-f FILE"))
    rc, _, err = ppl(model, "-f", text, "--chunks", "0")
    cases.append(("--chunks 0", rc, 2, err, "--chunks"))
    rc, _, err = ppl(model, "-f", text, "-c", "2")
    cases.append(("-c 2", rc, 2, err, "--ctx-size"))
    nowhere = os.path.join(tmp, "no-such-dir", "b.kl")
    rc, _, err = ppl("/no/such/model.gguf", "-f", text, "--kl-divergence-base", nowhere)
    cases.append(("base cannot be created (checked before the model)", rc, 3, err, "cannot create"))
    for what, rc, want, err, needle in cases:
        check(rc == want, f"{what}: exit {rc}, expected {want}: {err!r}")
        check(needle in err, f"{what}: {needle!r} not in {err!r}")
        one_line(err, what)
    check(not [f for f in os.listdir(tmp) if ".partial-" in f], "a partial file was left")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        plain, bos = os.path.join(tmp, "tiny.gguf"), os.path.join(tmp, "tiny_bos.gguf")
        write_model(plain, seed=5)
        write_model(bos, seed=6, add_bos=True)
        rng = np.random.default_rng(3)
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:  # letters e..u: one token each; 4 windows of 16 and a rest
            f.write("".join(chr(ord("e") + int(i)) for i in rng.integers(0, N_VOCAB - 7, 70)))
        toks, wins = check_ppl(plain, RefModel(plain), text, None, "no BOS")
        check_ppl(bos, RefModel(bos), text, 1, "BOS")
        base = check_base_and_kl(plain, tmp, text, toks, wins)
        check_refusals(plain, tmp, text, base)
    return summary("test_perplexity")


if __name__ == "__main__":
    sys.exit(main())
