#!/usr/bin/env python3
"""bench/spec_vs_llamacpp.py: ignite's speculative decoding against llama.cpp's
own (`llama-speculative-simple`) on the same models, prompts and draft
settings, on the CPU, greedy (docs/benchmarks.md, "Speculative decoding").

Each prompt (bench/spec/*.txt) is rendered once through the target's own
chat template (read from the GGUF with the gguf package, rendered by jinja2,
so neither tool's template code is in the comparison) and given to both as
plain text. Modes, interleaved --reps times (the median is kept, the machine
is shared):

  plain          ignite run, no speculation (the baseline of the x-plain column)
  draft          ignite -md DRAFT        vs llama-speculative-simple -md DRAFT
  lookup         ignite --lookup         vs llama-speculative-simple --spec-type ngram-simple

The draft settings are the same on both sides: --spec-draft-n-max N (default
llama.cpp's 3 for the draft model; 8 for lookup), --spec-draft-p-min 0. For
n-gram lookup llama.cpp's ngram-simple is given the n-gram and draft sizes of
ignite's lookup (--spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 8);
its own defaults (12, 48) draft only on long repeats and are run as a second
row (`lookup-default`) with --llama-defaults.

Decode speed: ignite's is run's --json decode_tok_s (first token to last);
llama.cpp's is its `decoded N tokens in T seconds` line (from after the
prompt to the last token, the first token's step included: it favours
neither side by more than one step in N).

    bench/spec_vs_llamacpp.py --target T.gguf --draft D.gguf [-n 256] [-t 2] [--reps 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def render(model, text):
    """The target's chat template applied to one user message, with the
    generation prompt (what `ignite run --chat` sends)."""
    import gguf
    import jinja2
    r = gguf.GGUFReader(model)
    f = r.fields["tokenizer.chat_template"]
    tmpl = bytes(f.parts[f.data[0]]).decode()
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
    env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(ValueError(m))
    return env.from_string(tmpl).render(messages=[{"role": "user", "content": text}],
                                        add_generation_prompt=True)


def ignite(bin_, model, prompt_file, n, threads, extra):
    args = [bin_, "run", "-m", model, "-f", prompt_file, "--json", "-q", "--temp", "0",
            "-n", str(n), "-t", str(threads), "--device", "cpu", *extra]
    r = subprocess.run(args, capture_output=True, timeout=3600)
    if r.returncode:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.decode()[-400:]}")
    j = json.loads(r.stdout)
    spec = j.get("speculation") or {}
    return {"tok_s": j["timings"]["decode_tok_s"], "tokens": j["tokens"]["generated"],
            "text": j["text"],
            "acceptance": spec.get("acceptance")}


LLAMA_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
LLAMA_ACCEPT = re.compile(r"accept\s+=\s+([\d.]+)%")


def llama(bin_dir, model, prompt_file, n, threads, extra):
    args = [os.path.join(bin_dir, "llama-speculative-simple"), "-m", model, "-f", prompt_file,
            "-n", str(n), "-t", str(threads), "-td", str(threads), "-c", "4096", "--temp", "0",
            "--seed", "1", *extra]
    r = subprocess.run(args, capture_output=True, timeout=3600)
    err = r.stderr.decode(errors="replace")
    m = LLAMA_DECODED.search(err)
    if r.returncode or not m:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}: {err[-600:]}")
    a = LLAMA_ACCEPT.search(err)
    return {"tok_s": int(m.group(1)) / float(m.group(2)), "tokens": int(m.group(1)),
            "text": r.stdout.decode(errors="replace"),
            "acceptance": float(a.group(1)) / 100 if a else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ignite", default=os.path.join(HERE, "..", "build", "ignite"))
    ap.add_argument("--llamacpp", default=None,
                    help="directory of llama.cpp's binaries (default: bench/llamacpp_build.sh's)")
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=3)
    ap.add_argument("--lookup-max", type=int, default=8)
    ap.add_argument("--llama-defaults", action="store_true",
                    help="also llama.cpp's ngram-simple at its own sizes")
    ap.add_argument("prompts", nargs="*",
                    default=[os.path.join(HERE, "spec", f) for f in ("edit.txt", "summary.txt", "fail.txt")])
    a = ap.parse_args()
    bin_dir = a.llamacpp or subprocess.run(
        [os.path.join(HERE, "llamacpp_build.sh"), "llama-speculative-simple"],
        capture_output=True, text=True, check=True).stdout.strip()
    dn, ln = str(a.draft_max), str(a.lookup_max)
    modes = {
        "plain": ("ignite", []),
        "draft": ("ignite", ["-md", a.draft, "--spec-draft-n-max", dn, "--draft-p-min", "0"]),
        "draft llama.cpp": ("llama", ["-md", a.draft, "--spec-type", "draft-simple",
                                      "--spec-draft-n-max", dn,
                                      "--spec-draft-p-min", "0"]),
        "lookup": ("ignite", ["--lookup", "--spec-draft-n-max", ln]),
        "lookup llama.cpp": ("llama", ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                                       "4", "--spec-ngram-simple-size-m", ln]),
    }
    if a.llama_defaults:
        modes["lookup-default llama.cpp"] = ("llama", ["--spec-type", "ngram-simple"])
    print("| prompt | mode | tokens | decode tok/s | x plain | ignite / llama.cpp | acceptance |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for p in a.prompts:
            pf = os.path.join(tmp, os.path.basename(p))
            with open(p) as f, open(pf, "w") as g:
                g.write(render(a.target, f.read()))
            res = {m: [] for m in modes}
            for _ in range(a.reps):
                for m, (tool, extra) in modes.items():
                    fn = ignite if tool == "ignite" else llama
                    where = a.ignite if tool == "ignite" else bin_dir
                    res[m].append(fn(where, a.target, pf, a.n, a.t, extra))
            med = {m: statistics.median(r["tok_s"] for r in rs) for m, rs in res.items()}
            name = os.path.splitext(os.path.basename(p))[0]
            for m, rs in res.items():
                vs = ""
                if m in ("draft", "lookup"):
                    peer = max(med[k] for k in med if k.startswith(m) and k.endswith("llama.cpp"))
                    vs = f"**{med[m] / peer:.2f}**"
                acc = rs[0]["acceptance"]
                print(f"| {name} | {m} | {rs[0]['tokens']} | {med[m]:.2f} | "
                      f"{med[m] / med['plain']:.2f} | {vs} | "
                      f"{'' if acc is None else f'{acc:.2f}'} |", flush=True)


if __name__ == "__main__":
    main()
