"""tests/unit/test_jinja.py: tokenizer/jinja_*.c against jinja2, set as
transformers sets it for chat templates (an immutable sandbox, trim_blocks,
lstrip_blocks, loop controls, tojson as json.dumps with ensure_ascii off,
raise_exception, strftime_now).

Templates: the test models' (SmolLM2's read from its GGUF by the gguf
package, Gemma 3's from tests/pylib/chat_templates.py, Qwen2.5's in
tests/unit/data/qwen2.5.jinja, copied from llama.cpp's models/templates),
published ones from llama.cpp's models/templates in the cache (the source
scripts/fetch-model.sh llama-src fetches; skipped one by one when absent),
and small ones for the constructs those do not reach. Each is rendered for
several conversations (no system, a system message, several turns, white
space around messages, the generation prompt on and off) and must give
exactly jinja2's text, or fail where jinja2 raises. Templates outside the
subset must be refused with one line naming the construct at its line:col.

usage: test_jinja.py JINJA_RENDER_TOOL"""
import datetime
import json
import os
import subprocess
import sys

import chat_templates
from igtest import cache_dir, model_path

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("jinja2 is missing (pip install -r tests/requirements.txt)", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_TEMPLATES = os.path.join(cache_dir(), "llama-src", "llama_cpp_python-0.3.36", "vendor",
                               "llama.cpp", "models", "templates")
# Published templates in llama.cpp's collection the subset renders exactly.
PUBLISHED = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "google-gemma-2-2b-it.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen-QwQ-32B.jinja",
    "Qwen3.5-4B.jinja",  # qwen35/qwen35moe: past turns' <think> dropped, enable_thinking
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "fireworks-ai-llama-3-firefunction-v2.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "unsloth-mistral-Devstral-Small-2507.jinja",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
    "openai-gpt-oss-120b.jinja",  # harmony (gpt-oss): strftime_now, namespaces, macros
]

# Constructs the published ones may not reach.
SMALL = {
    "ops": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} "
           "{{ 'ab' * 3 }} {{ 1 + 2.5 }} {{ [1] + [2, 'x'] }} {{ 3 > 2 and 'y' or 'n' }} "
           "{{ none }} {{ true }} {{ 1.0 }} {{ 1e-5 }} {{ 'a' ~ 1 ~ none }} "
           "{{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}",
    "strings": "{% for m in messages %}[{{ m.content.strip() }}|{{ m.content.lstrip() }}|"
               "{{ m.content.rstrip() }}|{{ m.content.split() }}|{{ m.content.split(' ') }}|"
               "{{ m.content.split(' ', 1) }}|{{ m.content.startswith(' ') }}|"
               "{{ m.content.endswith(('!', '\\n')) }}|{{ m.content[1:4] }}|{{ m.content[::-1] }}|"
               "{{ m.content[-2:] }}|{{ m.content|length }}|{{ m.content.upper() }}|"
               "{{ m.content|replace('l', 'L') }}|{{ m.content.strip('H! ') }}|"
               "{{ m.content|trim|title }}|{{ m.content|capitalize }}]\n{% endfor %}",
    "lists": "{{ messages|length }} {{ messages[1:]|length }} {{ messages[-1].role }} "
             "{{ messages|map(attribute='role')|join(',') }} "
             "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} "
             "{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }} "
             "{{ (messages|first).role }} {{ (messages|last)['role'] }} {{ range(3)|list }} "
             "{{ range(5, 0, -2)|list }} {{ messages[::2]|length }} {{ [3, 1]|reverse|list }}",
    "namespace": "{% set ns = namespace(n=0, last='') %}{% for m in messages %}"
                 "{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{% endfor %}"
                 "{{ ns.n }}:{{ ns.last }}",
    "loops": "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}/{{ loop.length }}"
             "{{ '<' if loop.first }}{{ '>' if loop.last }}{{ loop.revindex }}"
             "{% if loop.index > 2 %}{% break %}{% endif %}{% endfor %}"
             "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"
             "{% for x in [] %}no{% else %}empty{% endfor %}"
             "{% for x in range(4) %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "macros": "{% macro turn(role, text='') -%}\n<{{ role }}>{{ text | trim }}</{{ role }}>\n"
              "{%- endmacro %}{% for m in messages %}{{ turn(m.role, text=m.content) }}"
              "{% endfor %}{{ turn('end') }}",
    "tests": "{{ messages is defined }} {{ tools is defined }} {{ tools is none }} "
             "{{ messages[0].content is string }} {{ 3 is divisibleby 3 }} {{ 4 is even }} "
             "{{ messages is iterable }} {{ {} is mapping }} {{ x is undefined }} "
             "{{ (tools or [])|length }} {{ tools|default('dflt') }} {{ ''|default('e', true) }}",
    "json": "{{ messages|tojson }} {{ {'a': [1, 2.5, none, true], 'b': 'q\"\\\\é\\n'}|tojson }} "
            "{{ messages[0]|tojson(indent=2) }} {% for k, v in {'z': 1, 'a': 2}|dictsort %}{{ k }}{{ v }}{% endfor %} "
            "{{ [3, 1, 2]|sort }} {{ ['b', 'a']|sort(reverse=true) }} "
            "{{ messages|sort(attribute='role')|map(attribute='role')|list }}",
    "whitespace": "  {% for m in messages %}\n    {{- m.role }}\n  {% if loop.last %}\n"
                  "last\n  {% endif %}\n{% endfor %}\n{# a comment #}\n  x {#- trimmed -#}  y\n"
                  "{%+ if true %}kept{% endif %}\n",
    "set_block": "{% set head %}<{{ messages[0].role }}>{% endset %}{{ head }}{{ head|length }}",
    "raise": "{% if messages[0].role == 'system' %}{{ raise_exception('no system here') }}"
             "{% endif %}ok",
    "undefined": "{{ messages[0].nothing }}|{{ messages[0].nothing|default('d') }}|"
                 "{{ messages[9] is defined }}|{% for x in nothing %}{{ x }}{% endfor %}",
}

# Refused with "NAME:LINE:COL: <what>" naming the construct.
REFUSED = {
    "{% include 'x' %}": ("1:4", "include"),
    "a\n {% for x in y recursive %}{% endfor %}": ("2:16", "recursive"),
    "{{ x|wordwrap(3) }}": ("1:6", "wordwrap"),
    "{% if x %}": ("1:4", "not closed"),
    "{{ 'abc' }": ("1:1", "not closed"),
    "{% endfor %}": ("1:4", "without its opening tag"),
    "{{ x.y.z }}": ("1:5", "'x' is undefined"),
    "{% raw %}x{% endraw %}": ("1:4", "raw"),
    "{{ '{}'.format(1) }}": ("1:8", "the method 'format'"),
}

ROLES_OK = {"system", "user", "assistant"}
CONVERSATIONS = [
    ([("user", "Hello!")], True),
    ([("system", "You are terse."), ("user", "What is 2+2?\nAnswer briefly.")], True),
    ([("user", "  padded \u3000\n"), ("assistant", "Sure: 4."), ("user", "héllo — 日本語 🙂")],
     True),
    ([("system", "Line one.\nLine two."), ("user", "Hi"), ("assistant", " An answer. "),
      ("user", "\n\tTabbed.\n\n")], True),
    ([("user", "Hi"), ("assistant", "Hello, how can I help?")], False),
    ([("system", "Sys"), ("user", "Hi")], False),
    ([("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"), ("user", "e")], True),
    # a thinking model's answers: reasoning kept after the last query, dropped before it
    ([("user", "2+2?"), ("assistant", "<think>\nAdd them.\n</think>\n\nIt is 4."),
      ("user", "And 3+3?"), ("assistant", "<think>\n\n</think>\n\n6.")], False),
    ([("user", "2+2?"), ("assistant", "<think>\nAdd.\n</think>\n\n4."), ("user", "More?")], True),
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


ENV = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                   extensions=[jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
# transformers' strftime_now (the harmony template's date; a render that
# straddles midnight could differ by a day)
ENV.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)


_COMPILED = {}


def reference(template, case):
    extra = {}
    if "enable_thinking" in case:
        extra["enable_thinking"] = case["enable_thinking"]
    try:
        if template not in _COMPILED:
            _COMPILED[template] = ENV.from_string(template)
        return _COMPILED[template].render(
            messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
            bos_token=case["bos_token"], eos_token=case["eos_token"], **extra), None
    except Exception as e:  # jinja2's and the template's own errors
        return None, f"{type(e).__name__}: {e}"


def gguf_template(path):
    try:
        import gguf
    except ImportError:
        return None
    if not os.path.exists(path):
        return None
    f = gguf.GGUFReader(path).fields.get("tokenizer.chat_template")
    return None if f is None else bytes(f.parts[-1]).decode("utf-8")


def templates():
    t = {}
    smol = gguf_template(model_path())
    if smol:
        t["SmolLM2 (GGUF)"] = smol
    else:
        print("note: the SmolLM2 model is absent; its template is skipped", file=sys.stderr)
    t["Gemma 3"] = chat_templates.GEMMA3
    with open(os.path.join(HERE, "data", "qwen2.5.jinja"), encoding="utf-8") as f:
        t["Qwen2.5"] = f.read()
    missing = 0
    for name in PUBLISHED:
        path = os.path.join(LLAMA_TEMPLATES, name)
        if not os.path.exists(path):
            missing += 1
            continue
        with open(path, encoding="utf-8") as f:
            t[name] = f.read()
    if missing:
        print(f"note: {missing} published templates absent (scripts/fetch-model.sh llama-src)",
              file=sys.stderr)
    for k, v in SMALL.items():
        t["small:" + k] = v
    return t


def cases_of(template):
    out = []
    for msgs, gen in CONVERSATIONS:
        for bos, eos in (("<s>", "</s>"), ("", "<|im_end|>")):
            case = {"template": template, "add_generation_prompt": gen, "bos_token": bos,
                    "eos_token": eos,
                    "messages": [{"role": r, "content": c} for r, c in msgs]}
            out.append(case)
            if "enable_thinking" in template:
                out.append(dict(case, enable_thinking=False))
    return out


def run_tool(tool, cases):
    p = subprocess.run([tool], input="".join(json.dumps(c) + "\n" for c in cases),
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        sys.exit(f"jinja_render_tool exited {p.returncode}")
    return [json.loads(line) for line in p.stdout.splitlines()]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tool = sys.argv[1]
    failures = checks = 0
    names, cases = [], []
    for name, tmpl in templates().items():
        for c in cases_of(tmpl):
            names.append(name)
            cases.append(c)
    results = run_tool(tool, cases)
    per = {}
    for name, case, got in zip(names, cases, results):
        want, err = reference(case["template"], case)
        checks += 1
        ok = (got.get("text") == want) if want is not None else ("error" in got)
        per.setdefault(name, [0, 0, 0])
        per[name][0] += 1
        per[name][1] += want is None
        if not ok:
            failures += 1
            per[name][2] += 1
            if per[name][2] <= 1:
                conv = [(m["role"], m["content"]) for m in case["messages"]]
                print(f"MISMATCH {name} {conv} gen={case['add_generation_prompt']} "
                      f"bos={case['bos_token']!r}:\n  jinja2: {want!r}{' ' + err if err else ''}"
                      f"\n  ignite: {got}", file=sys.stderr)
    for name, (n, raised, bad) in per.items():
        print(f"{name}: {n} renders ({raised} raise in jinja2), {bad} mismatches")

    # refusals: one line, the construct, its place
    refused = [{"template": t, "messages": [{"role": "user", "content": "x"}],
                "add_generation_prompt": True, "bos_token": "", "eos_token": ""} for t in REFUSED]
    for (t, (where, what)), got in zip(REFUSED.items(), run_tool(tool, refused)):
        checks += 1
        msg = got.get("error", "")
        if "text" in got or f"template:{where}:" not in msg or what not in msg or "\n" in msg:
            failures += 1
            print(f"REFUSAL {t!r}: want '{where}' and '{what}', got {got}", file=sys.stderr)
    print(f"{checks} checks, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
