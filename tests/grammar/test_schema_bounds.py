"""tests/grammar/test_schema_bounds.py: the JSON-schema converter's grammars
accept exactly what the schema allows, at every bound it supports, judged by
the `jsonschema` package (not by sampling: every instance is put to the
compiled grammar itself through `grammar_tool match-schema`).

Guards grammar/schema.c's bounds: integer minimum/maximum and
exclusiveMinimum/exclusiveMaximum (negative, zero, spanning zero, across
digit-count edges, 15-digit, one value, both kinds of bound at once),
minLength/maxLength (code points, not bytes: 2-, 3- and 4-byte UTF-8 and
escapes count one each), minItems/maxItems, required and optional
properties with additionalProperties false, enum/const with a type, type
arrays, anyOf, and the formats date (leap years) and uuid. For each schema
a list of instances around each bound (bound - 2 .. bound + 2 and more) is
written as compact JSON; the grammar must say "whole match" exactly when
jsonschema.validate says valid. A mutant that moves any bound by one (e.g.
exclusiveMinimum made inclusive) fails here: docs/testing-mutants.md.

Also pattern (regular expressions against Python's re, escapes and
non-ASCII included), tuples (prefixItems, draft 7's items array with
additionalItems, items false), allOf of object schemas (with $ref),
minProperties/maxProperties and patternProperties.

Bounds and keywords the converter cannot turn into grammar (fractional
bounds, bounds on "number", lookarounds, allOf of non-objects, ...) are
refused (exit 2, one line), never silently dropped.

Usage: test_schema_bounds.py GRAMMAR_TOOL
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import jsonschema

from igtest import check, sanitized, summary

TOOL = sys.argv[1]
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def truth(schema, text):
    """jsonschema's verdict on the JSON text (invalid JSON: rejected)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    try:
        jsonschema.validate(value, schema, format_checker=FORMATS)
        return True
    except jsonschema.ValidationError:
        return False


def grammar_verdicts(schema, texts):
    """grammar_tool's answer per text: '1' whole match, 'p' prefix, '0' none;
    None when the schema was refused (then the exit status is in [1])."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(schema, f)
        path = f.name
    try:
        p = subprocess.run([TOOL, "match-schema", path],
                           input="".join(json.dumps(t) + "\n" for t in texts),
                           capture_output=True, text=True, encoding="utf-8", timeout=120)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, p.returncode, p.stderr
    return p.stdout.split(), 0, p.stderr


N_CASES = 0


def judge(schema, texts, forms=()):
    """Every text: the grammar accepts it exactly when jsonschema does; both
    verdicts must occur (a list that only accepts or only rejects tests no
    bound). `forms`: texts of allowed values in a form the grammar never
    writes (an integer as 5.0 or 1e2, a key twice), rejected by design
    (docs/grammar.md): the grammar must reject them."""
    global N_CASES
    texts = list(dict.fromkeys(texts))
    got, rc, err = grammar_verdicts(schema, list(texts) + list(forms))
    check(got is not None and len(got) == len(texts) + len(forms),
          f"schema {json.dumps(schema)}: grammar_tool exit {rc}: {err.strip()[-300:]}")
    if got is None or len(got) != len(texts) + len(forms):
        return
    for t, g in zip(forms, got[len(texts):]):
        check(g != "1", f"schema {json.dumps(schema)}: {t!r}, a form never generated, accepted")
    got = got[:len(texts)]
    want = [truth(schema, t) for t in texts]
    check(any(want) and not all(want),
          f"schema {json.dumps(schema)}: the instances are all {want[0]}: no bound tested")
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if (g == "1") != w]
    for t, g, w in bad[:5]:
        check(False, f"schema {json.dumps(schema)}: {t!r}: grammar "
              f"{'accepts' if g == '1' else 'rejects'}, jsonschema says "
              f"{'valid' if w else 'invalid'}")
    N_CASES += len(texts)


# ---- integers ---------------------------------------------------------------

def near(*bounds, width=2):
    vals = set()
    for b in bounds:
        vals.update(range(b - width, b + width + 1))
    return vals


def digit_edges():
    vals = {0}
    for k in range(1, 17):
        for v in (10 ** k - 1, 10 ** k, 10 ** k + 1):
            vals.update((v, -v))
    return vals


def integer_cases():
    cases = [
        {"minimum": 5},
        {"maximum": 5},
        {"minimum": -7},
        {"maximum": -7},
        {"minimum": 0},
        {"maximum": 0},
        {"minimum": 0, "maximum": 0},
        {"minimum": 3, "maximum": 3},
        {"minimum": -3, "maximum": -3},
        {"minimum": -12, "maximum": 47},
        {"minimum": -250, "maximum": -19},
        {"minimum": 19, "maximum": 250},
        {"minimum": 99, "maximum": 1001},
        {"minimum": 10, "maximum": 99},
        {"minimum": 1, "maximum": 9},
        {"exclusiveMinimum": 5},
        {"exclusiveMaximum": 5},
        {"exclusiveMinimum": -5},
        {"exclusiveMaximum": -5},
        {"exclusiveMinimum": 0},
        {"exclusiveMaximum": 0},
        {"exclusiveMinimum": -1, "exclusiveMaximum": 1},
        {"exclusiveMinimum": 9, "exclusiveMaximum": 100},
        {"exclusiveMinimum": -100, "exclusiveMaximum": -9},
        {"minimum": 5, "exclusiveMinimum": 5},     # the stricter one wins
        {"minimum": 5, "exclusiveMinimum": 2},
        {"maximum": 5, "exclusiveMaximum": 5},
        {"maximum": 5, "exclusiveMaximum": 9},
        {"minimum": -5, "exclusiveMaximum": -4},
        {"minimum": 10 ** 15 - 3},
        {"maximum": -(10 ** 15) + 3},
        {"minimum": -(10 ** 15), "maximum": 10 ** 15},
    ]
    rng = random.Random(53)
    for _ in range(6 if sanitized() else 24):  # random bounds of every size and sign
        a = rng.choice([-1, 1]) * int(10 ** rng.uniform(0, 6))
        b = a + int(10 ** rng.uniform(0, 6))
        kind = rng.randrange(4)
        s = [{"minimum": a, "maximum": b}, {"exclusiveMinimum": a, "maximum": b},
             {"minimum": a, "exclusiveMaximum": b}, {"exclusiveMinimum": a - 1,
                                                     "exclusiveMaximum": b + 1}][kind]
        cases.append(s)
    for bounds in cases:
        schema = {"type": "integer", **bounds}
        vals = near(*bounds.values()) | digit_edges() | {-1, 0, 1}
        lo = max([bounds.get("minimum", -10 ** 16), bounds.get("exclusiveMinimum", -10 ** 16)])
        hi = min([bounds.get("maximum", 10 ** 16), bounds.get("exclusiveMaximum", 10 ** 16)])
        if -10 ** 16 < lo and hi < 10 ** 16 and hi - lo < 400:
            vals.update(range(lo - 3, hi + 4))  # every value of a small range
        texts = [str(v) for v in sorted(vals)]
        texts += ["1.5", "-", "", "05", "+5", "\"5\"", "null"]  # not integers, or not JSON
        judge(schema, texts, forms=[f"{v}.0" for v in (lo + 1, hi - 1) if abs(v) < 10 ** 15]
              + ["1e2", "-0"])


# ---- strings ----------------------------------------------------------------

# 1-, 2-, 3- and 4-byte UTF-8, characters written as escapes, and "e" + a
# combining accent (two code points, two characters for jsonschema)
CHARS = ["a", "\u00e9", "\u20ac", "\U0001F600", "\n", "\"", "\\", "e\u0301"]


def string_texts(lens, rng):
    texts = []
    for n in lens:
        texts.append(json.dumps("a" * n))
        for _ in range(3):  # mixed widths and escapes: n picks, n or more code points
            s = "".join(rng.choice(CHARS) for _ in range(n))
            # \u escapes of BMP characters; astral ones stay raw UTF-8 (the
            # grammar generates no surrogate escapes, docs/grammar.md)
            esc = "".join(c if ord(c) > 0xFFFF else json.dumps(c, ensure_ascii=True)[1:-1]
                          for c in s)
            texts.append(json.dumps(s, ensure_ascii=False) if rng.random() < 0.7
                         else '"' + esc + '"')
    return texts


def string_cases():
    rng = random.Random(7)
    for bounds in ({"minLength": 3}, {"maxLength": 3}, {"minLength": 0, "maxLength": 0},
                   {"minLength": 1}, {"maxLength": 1}, {"minLength": 2, "maxLength": 5},
                   {"minLength": 4, "maxLength": 4}, {"minLength": 0, "maxLength": 2}):
        top = max(bounds.values()) + 3
        judge({"type": "string", **bounds},
              string_texts(range(0, top + 1), rng) + ["5", "null", "[\"ab\"]"])


# ---- arrays -----------------------------------------------------------------

def array_texts(top):
    texts = []
    for n in range(top + 1):
        texts.append(json.dumps(list(range(n)), separators=(",", ":")))
        texts.append(json.dumps(list(range(n))))  # with spaces after ','
    texts += ["[\"x\"]", "[1,\"x\"]", "{}", "[1,]", "[,1]"]
    return texts


def array_cases():
    for bounds in ({"minItems": 2}, {"maxItems": 2}, {"minItems": 0, "maxItems": 0},
                   {"minItems": 1}, {"maxItems": 1}, {"minItems": 1, "maxItems": 3},
                   {"minItems": 3, "maxItems": 3}, {"minItems": 0, "maxItems": 4}):
        judge({"type": "array", "items": {"type": "integer"}, **bounds},
              array_texts(max(bounds.values()) + 3))
    # bounds on the items themselves, inside the array's
    judge({"type": "array", "items": {"type": "integer", "exclusiveMinimum": 0,
                                      "maximum": 3}, "minItems": 1, "maxItems": 2},
          ["[]", "[0]", "[1]", "[3]", "[4]", "[1,3]", "[3,0]", "[1,2,3]", "[-1]"])


# ---- objects, enum, const, unions, formats ------------------------------------

def object_cases():
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "string", "maxLength": 1},
                                               "c": {"type": "boolean"}},
              "required": ["a"], "additionalProperties": False}
    texts = ['{}', '{"a":1}', '{"b":"x"}', '{"a":1,"b":"x"}', '{"a":1,"c":true}',
             '{"a":1,"b":"x","c":false}', '{"a":1,"b":"xy"}', '{"a":1,"d":1}',
             '{"a":"1"}', '{"a":1,}', '{ "a": 1, "b": "" }']
    judge(schema, texts, forms=['{"a":1,"a":2}', '{"b":"x","a":1}'])
    judge({"type": "integer", "enum": [1, 3, "x"]}, ["1", "2", "3", "\"x\"", "13", "-1"])
    judge({"const": "on"}, ['"on"', '"off"', '"o"', '"onn"', "1"])
    judge({"type": ["integer", "null"], "minimum": 2}, ["null", "1", "2", "3", "\"2\"", "true"])
    judge({"anyOf": [{"type": "integer", "maximum": -1},
                     {"type": "integer", "minimum": 10}]},
          [str(v) for v in range(-3, 13)])


def format_cases():
    dates = ["2024-02-29", "2023-02-29", "2000-02-29", "1900-02-29", "2023-02-28",
             "2023-04-30", "2023-04-31", "2023-12-31", "2023-13-01", "2023-00-10",
             "2023-01-00", "0000-01-01", "0001-01-01", "9999-12-31", "2023-1-01",
             "20230101", "2023-01-01T00:00:00Z"]
    judge({"type": "string", "format": "date"}, [json.dumps(d) for d in dates])
    uuids = ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
             "123e4567-e89b-12d3-a456-42661417400", "123e4567-e89b-12d3-a456-4266141740000",
             "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"]
    judge({"type": "string", "format": "uuid"}, [json.dumps(u) for u in uuids])


def fractional_integer_cases():
    """an integer's fractional bounds keep the integers they allow"""
    for bounds in ({"minimum": 2.5, "maximum": 7.5}, {"exclusiveMinimum": 2.5,
                                                       "exclusiveMaximum": 7.5},
                   {"exclusiveMaximum": 0.5}, {"minimum": -2.5, "exclusiveMaximum": -0.5},
                   {"exclusiveMinimum": -3, "maximum": 2.999}):
        judge(dict(bounds, type="integer"), [str(v) for v in range(-5, 10)])


def number_cases():
    """number bounds: decimals of at most 15 digits without an exponent,
    judged against jsonschema's float comparisons at and around each bound."""
    texts = ["0", "0.0", "1", "1.4", "1.49", "1.4999999", "1.5", "1.50", "1.5000001", "1.51",
             "2", "2.0", "2.999", "3", "3.2", "3.25", "3.2500", "3.2500001", "3.251", "3.26",
             "4", "10", "123456.789", "-0.4", "-0.5", "-0.50", "-0.5000001", "-0.6", "-1",
             "-2.4", "-2.5", "-2.5000", "-2.51", "-3", "-100", "0.1", "0.09", "0.10000001",
             "0.099999", "99999999999999", "0.000001"]
    forms = ["1.5e0", "-0", "2E0", "1.500000000000000001", "1234567890123.456"]
    for bounds in ({"minimum": 1.5, "maximum": 3.25},
                   {"exclusiveMinimum": 1.5, "exclusiveMaximum": 3.25},
                   {"exclusiveMinimum": -0.5, "exclusiveMaximum": 0},
                   {"minimum": -0.5, "maximum": 0},
                   {"maximum": -2.5},
                   {"exclusiveMaximum": -2.5},
                   {"minimum": 0},
                   {"exclusiveMaximum": 1},
                   {"minimum": 0.1},
                   {"exclusiveMinimum": 0.1, "maximum": 10},
                   {"minimum": -3, "exclusiveMaximum": 2},
                   {"minimum": 1.5, "exclusiveMinimum": 1.4}):
        schema = dict(bounds, type="number")
        judge(schema, texts, forms=[f for f in forms if truth(schema, f)])


def js(*strings):
    """JSON texts of strings as the grammar writes them (UTF-8 as is)."""
    return [json.dumps(x, ensure_ascii=False) for x in strings]


def pattern_cases():
    """pattern: the grammar writes exactly the strings the regex finds a
    match in (Python's re, as jsonschema runs it), escapes included."""
    cases = [
        ("^[a-z]+$", ["abc", "", "aBc", "a1", "zz"]),
        ("^\\d{3}-\\d{4}$", ["555-1234", "5551234", "55-12345", "555-12a4", "555-12345"]),
        ("ab|cd", ["xaby", "cd", "ac", "", "abcd", "a\nb"]),
        ("^(foo|bar)+$", ["foo", "foobar", "fob", "", "barfoo!"]),
        ("^a.c$", ["abc", "a\nc", "ac", "a\"c", "a\\c", "a\u00e9c"]),
        ('^[^"\\\\x]*$', ["plain", "with\"quote", "back\\slash", "x", "", "tab\t"]),
        ("^\\s?x$", [" x", "\tx", "x", "  x", "\nx"]),
        ("^[\\w.-]+@[\\w-]+\\.[a-z]{2,3}$", ["a.b@c-d.com", "a@b.c", "@b.com", "a@b.comm"]),
        ("^\u00e9+\u00fc?$", ["\u00e9\u00e9", "\u00e9\u00fc", "e", "\u00fc"]),
        ("x{2,}", ["axxb", "axb", "xxx"]),
        ("^a+?b$", ["aab", "b", "ab"]),
        ("^(?:[0-9]{1,3}\\.){3}[0-9]{1,3}$", ["10.0.0.1", "10.0.0", "1000.0.0.1", "a.b.c.d"]),
        ("^\\D\\W\\S$", ["a!b", "1!b", "a1b", "a! "]),
    ]
    for pat, strings in cases:
        judge({"type": "string", "pattern": pat}, js(*strings))


def tuple_cases():
    pair = [{"type": "integer"}, {"type": "string"}]
    arrays = ["[]", "[1]", '[1,"a"]', '[1,"a",2]', '["a"]', "[1,2]", '[1,"a","b"]']
    judge({"type": "array", "prefixItems": pair, "items": False}, arrays)
    judge({"type": "array", "prefixItems": pair, "minItems": 1}, arrays + ['[1,"a",null]'])
    judge({"type": "array", "prefixItems": [{"const": 1}], "items": {"type": "boolean"},
           "maxItems": 3}, ["[1]", "[1,true]", "[1,true,false]", "[1,true,false,true]",
                           "[1,2]", "[2]", "[]"])
    judge({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
           "items": pair, "additionalItems": False}, arrays)
    judge({"type": "array", "items": False}, ["[]", "[1]"])


def allof_cases():
    two = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                      "required": ["a"]},
                     {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    judge(two, ['{"a":1,"b":"x"}', '{"a":1}', '{"b":"x"}', '{"a":"1","b":"x"}', "{}"],
          forms=['{"a":1,"b":"x","c":1}'])
    ref = {"$defs": {"base": {"properties": {"id": {"type": "integer"}}, "required": ["id"]}},
           "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}}]}
    judge(ref, ['{"id":1}', '{"id":1,"name":"x"}', '{"name":"x"}', "{}", '{"id":1,"name":2}'])
    judge({"allOf": [{"type": "integer", "minimum": 3}], "description": "one member"},
          ["2", "3", "4"])
    judge({"allOf": [{"maximum": 30}, {"minimum": 20}, {"exclusiveMaximum": 29.5}]},
          ["19", "19.99", "20", "25.5", "29", "29.4999", "29.5", "30", "31"])
    judge({"type": "integer", "allOf": [{"minimum": 2.5}, {"maximum": 5}]},
          ["2", "3", "5", "6"], forms=["3.0"])


def property_count_cases():
    objs = ["{}", '{"a":1}', '{"a":1,"b":2}', '{"a":1,"b":2,"c":3}']
    judge({"type": "object", "maxProperties": 2}, objs)
    judge({"type": "object", "minProperties": 1}, objs)
    judge({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"],
           "minProperties": 1, "maxProperties": 2}, objs[:3] + ['{"b":2}'])
    judge({"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}},
           "additionalProperties": False},
          ["{}", '{"x-a":1}', '{"x-a":1,"x-b":2}', '{"y":1}', '{"x-a":"s"}', '{"x-":1}'])


# ---- refusals -----------------------------------------------------------------

def refusals():
    for schema in ({"type": "integer", "minimum": 2.5e16},
                   {"type": "number", "minimum": 1e20},
                   {"type": "number", "exclusiveMinimum": 1.5, "maximum": 1.5},
                   {"type": "integer", "minimum": 5, "maximum": 4},
                   {"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 5},
                   {"type": "string", "minLength": 3, "maxLength": 2},
                   {"type": "array", "minItems": 3, "maxItems": 2},
                   {"type": "string", "maxLength": 1.5},
                   {"type": "string", "pattern": "^(?=a)"},
                   {"type": "string", "pattern": "(a)\\1"},
                   {"type": "string", "pattern": "a^b"},
                   {"type": "string", "pattern": "^a$", "maxLength": 3},
                   {"allOf": [{"minimum": 1}, {"maxLength": 3}]},
                   {"allOf": [{"properties": {"a": {"type": "string"}}},
                              {"properties": {"a": {"type": "integer"}}}]},
                   {"type": "object", "minProperties": 2},
                   {"type": "object", "patternProperties": {"a": {}, "b": {}}},
                   {"type": "object", "properties": {"a": {}}, "maxProperties": 0}):
        got, rc, err = grammar_verdicts(schema, [])
        check(got is None and rc == 2 and err.count("\n") == 1,
              f"schema {json.dumps(schema)}: want one line and exit 2, got exit {rc}: {err!r}")


def main():
    integer_cases()
    string_cases()
    array_cases()
    object_cases()
    format_cases()
    number_cases()
    fractional_integer_cases()
    pattern_cases()
    tuple_cases()
    allof_cases()
    property_count_cases()
    refusals()
    print(f"test_schema_bounds: {N_CASES} instances judged", file=sys.stderr)
    return summary("test_schema_bounds")


if __name__ == "__main__":
    sys.exit(main())
