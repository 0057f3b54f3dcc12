"""Generation under JSON schemas and GBNF grammars on the default model, with
independent judges.

- Every schema of tests/grammar/schemas/ (nested objects, arrays, enums,
  optional fields, $ref, $defs/definitions, anyOf/oneOf, formats, integer
  ranges) twice, temperatures and seeds varying across the corpus
  (unbounded recursion is left to test_mask.c's masks: sampled, a model may
  nest until -n runs out): the output is complete JSON
  that the `jsonschema` package validates (formats checked), `--json`
  reports stop "grammar" (or "eog") with grammar_complete true, and the
  plain run's stdout piped into jq (or `python -m json.tool` where jq is
  absent, as on CI) parses.
- GBNF grammars: arithmetic (checked with Python's ast: only numbers,
  + - * / and parentheses, and it evaluates), CSV (csv module: every row has
  the header's field count), a date (datetime.date.fromisoformat).
- -n too small: grammar_complete false, stop "limit", and a warning.
Under the sanitizers (the compilers' and matchers' memory, not the sampling's variety
again): each schema once (--json), each grammar with one seed.

Skips (77) without the model.
"""
import ast
import csv
import datetime
import io
import json
import os
import shutil
import subprocess
import sys

import jsonschema

from igtest import check, model_path, sanitized, summary

IGNITE = os.environ["IGNITE_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "schemas")

PROMPTS = {
    "person": "a person with name, age, tags and maybe an email",
    "address_ref": "a person's name with home and work addresses",
    "tree": "a small tree of numbers, two levels deep",
    "event": "a calendar event",
    "inventory": "items in a shop inventory",
    "anyof": "the result of an operation",
    "config": "a server configuration",
    "definitions": "a log level setting with notes",
}

# (temperature, seed) pairs; schema k takes pairs k and k+1 (the second run
# is the piped one), so the corpus sees every temperature and several seeds
PAIRS = [(0.0, 1), (0.7, 7), (1.0, 3), (0.9, 11), (0.5, 5)]


def run(args, stdin=None):
    return subprocess.run([IGNITE, "run", "-m", MODEL, "-q"] + args, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", input=stdin,
                          timeout=300)


def json_judge():
    jq = shutil.which("jq")
    return [jq, "."] if jq else [sys.executable, "-m", "json.tool"]


def schemas():
    for name in sorted(os.listdir(SCHEMAS)):
        if name.endswith(".json"):
            with open(os.path.join(SCHEMAS, name), encoding="utf-8") as f:
                yield name[:-5], os.path.join(SCHEMAS, name), json.load(f)


def test_schemas():
    judge = json_judge()
    for k, (name, path, schema) in enumerate(schemas()):
        runs = [PAIRS[k % len(PAIRS)], PAIRS[(k + 1) % len(PAIRS)]][:1 if sanitized() else 2]
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        prompt = "Write " + PROMPTS.get(name, "an example") + " as JSON."
        for i, (temp, seed) in enumerate(runs):
            args = ["--json-schema-file", path, "--chat", "-p", prompt, "--temp", str(temp),
                    "--seed", str(seed), "-n", "320"]
            piped = i == 1
            p = run(args if piped else args + ["--json"])
            what = f"{name} temp {temp} seed {seed}"
            check(p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr[-300:]}")
            if p.returncode != 0:
                continue
            if piped:  # `ignite run ... | jq .`
                text = p.stdout
                j = subprocess.run(judge, input=text, capture_output=True, text=True)
                check(j.returncode == 0, f"{what}: {judge[0]} refused the output "
                      f"{text[:300]!r}: {j.stderr[:200]}")
            else:
                out = json.loads(p.stdout)
                text = out["text"]
                check(out.get("grammar_complete") is True and out["stop"] in ("grammar", "eog"),
                      f"{what}: stop {out['stop']}, complete {out.get('grammar_complete')}")
            try:
                value = json.loads(text)
            except ValueError as e:
                check(False, f"{what}: not JSON ({e}): {text[:300]!r}")
                continue
            errors = [e.message for e in validator.iter_errors(value)]
            check(not errors, f"{what}: {text[:200]!r} is invalid: {errors[:3]}")


def test_gbnf():
    arithmetic = ('root ::= expr\nexpr ::= term (ws [-+] ws term)*\n'
                  'term ::= factor (ws [*/] ws factor)*\n'
                  'factor ::= [1-9] [0-9]{0,3} | "(" ws expr ws ")"\nws ::= " "?\n')
    csv_grammar = ('root ::= header ("\\n" row){2,4}\nheader ::= "name,age,city"\n'
                   'row ::= field "," [0-9]{1,3} "," field\nfield ::= [A-Za-z ]{1,16}\n')
    date = ('root ::= year "-" month "-" day\nyear ::= "19" [5-9] [0-9] | "20" [0-2] [0-9]\n'
            'month ::= "0" [1-9] | "1" [0-2]\nday ::= "0" [1-9] | [12] [0-9] | "3" [01]\n')
    for seed in (1,) if sanitized() else (1, 2):
        p = run(["--grammar", arithmetic, "-p", "A long arithmetic expression: ", "--temp",
                 "0.9", "--seed", str(seed), "-n", "64", "--json"])
        out = json.loads(p.stdout)
        text = out["text"]
        ok = out["grammar_complete"]
        if ok:
            tree = ast.parse(text, mode="eval")
            allowed = (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult,
                       ast.Div)
            check(all(isinstance(n, allowed) for n in ast.walk(tree)),
                  f"arithmetic {text!r}: other syntax")
            try:
                eval(compile(tree, "<expr>", "eval"), {"__builtins__": {}})
            except ZeroDivisionError:
                pass
        else:  # the limit cut it: reported, and the stop says why
            check(out["stop"] == "limit", f"arithmetic {text!r} incomplete, stop {out['stop']}")

        p = run(["--grammar", csv_grammar, "-p", "A CSV file of people:\n", "--temp", "0.8",
                 "--seed", str(seed), "-n", "120", "--json"])
        out = json.loads(p.stdout)
        check(out["grammar_complete"] and out["stop"] in ("grammar", "eog"),
              f"csv incomplete: {out['text']!r}")
        rows = list(csv.reader(io.StringIO(out["text"])))
        check(rows[0] == ["name", "age", "city"] and 3 <= len(rows) <= 5 and
              all(len(r) == 3 and r[1].isdigit() for r in rows[1:]), f"csv {rows}")

        p = run(["--grammar", date, "-p", "The date of the first moon landing:", "--temp",
                 "0.8", "--seed", str(seed), "-n", "20", "--json"])
        out = json.loads(p.stdout)
        check(out["stop"] == "grammar" and out["grammar_complete"], f"date stop {out['stop']}")
        try:
            d = datetime.date.fromisoformat(out["text"])
            check(1950 <= d.year <= 2029, f"date {d}")
        except ValueError as e:
            # the grammar admits 02-31: a grammar, not a calendar; the JSON
            # schema format "date" is the exact one (test_schemas checks it)
            check(out["text"][5:7] in ("02", "04", "06", "09", "11"),
                  f"date {out['text']!r}: {e}")


def test_incomplete():
    path = os.path.join(SCHEMAS, "person.json")
    p = run(["--json-schema-file", path, "-p", "A person:", "-n", "3", "--json"])
    out = json.loads(p.stdout)
    check(p.returncode == 0 and out["stop"] == "limit" and out["grammar_complete"] is False,
          f"-n 3: {out}")
    p = subprocess.run([IGNITE, "run", "-m", MODEL, "--json-schema-file", path, "-p", "A person:",
                        "-n", "3"], capture_output=True, text=True)
    check("incomplete" in p.stderr and "grammar incomplete" in p.stderr,
          f"-n 3: no warning / stats: {p.stderr!r}")


def main():
    global MODEL
    MODEL = model_path()
    if not os.path.exists(MODEL):
        print(f"skip: no model at {MODEL}", file=sys.stderr)
        return 77
    test_schemas()
    test_gbnf()
    test_incomplete()
    return summary("test_schema_corpus")


if __name__ == "__main__":
    sys.exit(main())
