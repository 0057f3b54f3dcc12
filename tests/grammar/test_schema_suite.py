"""tests/grammar/test_schema_suite.py: the JSON-schema converter against the
official JSON Schema Test Suite (drafts 7 and 2020-12, the required files; fetched
by scripts/fetch-model.sh schema-suite from the jsonschema sdist that vendors
it, sha256 checked; exit 77 when it cannot be had).

For every schema of the suite that ignite accepts, the grammar (the
automaton run over the instance's JSON text, json.dumps with its default
separators) must admit no instance the suite marks invalid. The exception
is `oneOf`, generated as `anyOf` (a grammar cannot count matches:
docs/grammar.md): an invalid instance that matches several alternatives of a
oneOf is counted apart. A schema ignite does not accept must be refused with
one line naming a keyword (never silently accepted as something looser).

Prints, per keyword (the suite's file), the schemas accepted and refused and
the valid instances the grammar admits (ignite writes object keys in one
order, required first, and treats an absent additionalProperties beside
properties as false, as llama.cpp does: some valid instances are outside the
grammar by design). --markdown prints the table for docs/grammar.md.

usage: test_schema_suite.py GRAMMAR_TOOL [--markdown]"""
import json
import os
import re
import subprocess
import sys
import tempfile

from igtest import cache_dir

SRC = os.environ.get("IGNITE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
TESTS = os.path.join(cache_dir(), "json-schema-suite", "jsonschema-4.26.0", "json", "tests")
DRAFTS = ("draft7", "draft2020-12")


def fetch():
    if all(os.path.isdir(os.path.join(TESTS, d)) for d in DRAFTS):
        return True
    r = subprocess.run(["bash", os.path.join(SRC, "scripts", "fetch-model.sh"), "schema-suite"],
                       capture_output=True, text=True, timeout=300)
    return r.returncode == 0 and all(os.path.isdir(os.path.join(TESTS, d)) for d in DRAFTS)


def uses_oneof(schema):
    return "oneOf" in json.dumps(schema)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tool, markdown = sys.argv[1], "--markdown" in sys.argv
    if not fetch():
        print("the JSON Schema Test Suite is not in the cache and cannot be fetched "
              "(scripts/fetch-model.sh schema-suite); skipped", file=sys.stderr)
        sys.exit(77)
    failures = 0
    for draft in DRAFTS:
        failures += run_draft(tool, draft, markdown)
    sys.exit(1 if failures else 0)


def run_draft(tool, draft, markdown):
    """The suite's required files of one draft: failures."""
    suite = os.path.join(TESTS, draft)
    rows = {}
    failures = 0
    oneof_admitted = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.json")
        for name in sorted(os.listdir(suite)):
            if not name.endswith(".json"):
                continue
            kw = name[:-5]
            with open(os.path.join(suite, name), encoding="utf-8") as f:
                groups = json.load(f)
            row = rows.setdefault(kw, {"groups": 0, "accepted": 0, "valid": 0, "admitted": 0,
                                       "invalid": 0})
            for g in groups:
                row["groups"] += 1
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(g["schema"], f)
                texts = [json.dumps(t["data"], ensure_ascii=False) for t in g["tests"]]
                r = subprocess.run([tool, "match-schema", path],
                                   input="".join(json.dumps(t) + "\n" for t in texts),
                                   capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    # refused: exit 2 and one line naming where (a JSON pointer)
                    line = r.stderr.strip()
                    if r.returncode != 2 or "\n" in line or not line.startswith("ignite: "):
                        failures += 1
                        print(f"REFUSAL {draft}/{kw}: {g['description']!r}: rc {r.returncode} "
                              f"{line!r}", file=sys.stderr)
                    continue
                row["accepted"] += 1
                got = r.stdout.split()
                for t, text, m in zip(g["tests"], texts, got):
                    if t["valid"]:
                        row["valid"] += 1
                        row["admitted"] += m == "1"
                    elif m == "1":
                        if uses_oneof(g["schema"]):
                            oneof_admitted += 1
                            continue
                        row["invalid"] += 1
                        failures += 1
                        print(f"ADMITTED INVALID {draft}/{kw}: {g['description']!r} / "
                              f"{t['description']!r}: {text}", file=sys.stderr)
    tot = {k: sum(r[k] for r in rows.values()) for k in ("groups", "accepted", "valid",
                                                         "admitted", "invalid")}
    if markdown:
        print(f"\n{draft}:\n")
        print("| keyword (suite file) | schemas | accepted | valid instances admitted |")
        print("|---|---|---|---|")
        for kw, r in rows.items():
            print(f"| {kw} | {r['groups']} | {r['accepted']} | {r['admitted']} of {r['valid']} |")
        print(f"| **all** | {tot['groups']} | {tot['accepted']} | {tot['admitted']} of "
              f"{tot['valid']} |")
    else:
        for kw, r in rows.items():
            print(f"{draft}/{kw:24s} {r['accepted']:3d}/{r['groups']:3d} accepted, valid "
                  f"admitted {r['admitted']}/{r['valid']}, invalid admitted {r['invalid']}")
    print(f"{draft}: {tot['accepted']} of {tot['groups']} schemas accepted, "
          f"{tot['admitted']} of {tot['valid']} valid instances admitted, {tot['invalid']} "
          f"invalid instances admitted ({oneof_admitted} more under oneOf, counted apart)")
    return failures


if __name__ == "__main__":
    main()
