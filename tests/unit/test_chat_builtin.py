"""tests/unit/test_chat_builtin.py: --chat-template NAME and the
conversation layer.

1. tokenizer/chat_builtin.c against llama.cpp's own expected renders: the
   cases of llama.cpp's tests/test-chat-template.cpp (read from the source
   in the cache, scripts/fetch-model.sh llama-src; skipped when absent),
   whose template llama.cpp maps to a built-in name, rendered from that
   test's conversation with the generation prompt.
2. tokenizer/chat_conv.c's turns against jinja2: for the test models'
   templates and a built-in, the first turn and then, after an answer the
   model closed with its end-of-turn token (or one cut short), the next
   turn: first + answer [+ the closing token] + next must be exactly
   jinja2's render of the whole conversation (llama.cpp's built-in renders
   for a built-in), BOS stripped where the tokenizer adds it.
3. Qwen3.5's template (llama.cpp's models/templates/Qwen3.5-4B.jinja) with
   thinking on and off (--no-think): each turn against jinja2 (its history
   drops past reasoning, so the turns are checked one by one).

usage: test_chat_builtin.py JINJA_RENDER_TOOL"""
import json
import os
import re
import subprocess
import sys

import chat_templates
from igtest import cache_dir

try:
    import jinja2  # noqa: F401
except ImportError:
    print("jinja2 is missing (pip install -r tests/requirements.txt)", file=sys.stderr)
    sys.exit(77)

import test_jinja  # the reference environment and the test models' templates

LLAMA_TEST = os.path.join(cache_dir(), "llama-src", "llama_cpp_python-0.3.36", "vendor",
                          "llama.cpp", "tests", "test-chat-template.cpp")
# llama.cpp's test case → the built-in its template is detected as
CASES = {
    "teknium/OpenHermes-2.5-Mistral-7B": "chatml",
    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)": "llama2",
    "TheBloke/FusionNet_34Bx2_MoE-AWQ": "llama2-sys-bos",
    "bofenghuang/vigogne-2-70b-chat": "llama2-sys-strip",
    "mlabonne/AlphaMonarch-7B": "monarch",
    "google/gemma-7b-it": "gemma",
    "OrionStarAI/Orion-14B-Chat": "orion",
    "openchat/openchat-3.5-0106": "openchat",
    "deepseek-ai/deepseek-coder-33b-instruct": "deepseek",
    "eachadea/vicuna-13b-1.1": "vicuna",
    "Orca-Vicuna": "vicuna-orca",
    "CohereForAI/c4ai-command-r-plus": "command-r",
    "Llama-3": "llama3",
    "Phi-3-mini": "phi3",
    "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)":
        "mistral-v1",
    "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at "
    "start)": "mistral-v3",
    "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template; modified to have system prompt "
    "at start)": "mistral-v3-tekken",
    "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)": "mistral-v7",
    "phi-4": "phi4",
}
CONVERSATION = [("system", "You are a helpful assistant"), ("user", "Hello"),
                ("assistant", "Hi there"), ("user", "Who are you"),
                ("assistant", "   I am an assistant   "), ("user", "Another question")]


def c_string(lit):
    """The value of a C string literal's inside (the escapes the file uses)."""
    return re.sub(r'\\(.)', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), lit)


def llama_expected():
    with open(LLAMA_TEST, encoding="utf-8") as f:
        src = f.read()
    out = {}
    pat = re.compile(r'/\* \.name= \*/ "((?:[^"\\]|\\.)*)",.*?/\* \.expected_output= \*/\s*'
                     r'(?:U8C\()?"((?:[^"\\]|\\.)*)"', re.S)
    for m in pat.finditer(src):
        name = c_string(m.group(1))
        if name in CASES and name not in out:
            out[name] = c_string(m.group(2))
    return out


def main():
    tool = sys.argv[1]
    failures = checks = 0

    # 1. built-ins against llama.cpp's expected renders
    if os.path.exists(LLAMA_TEST):
        expected = llama_expected()
        missing = set(CASES) - set(expected)
        if missing:
            sys.exit(f"llama.cpp's test file lacks the cases {sorted(missing)}")
        cases = [{"builtin": CASES[n], "add_generation_prompt": True,
                  "messages": [{"role": r, "content": c} for r, c in CONVERSATION]}
                 for n in expected]
        for name, got in zip(expected, test_jinja.run_tool(tool, cases)):
            checks += 1
            if got.get("text") != expected[name]:
                failures += 1
                print(f"BUILTIN {CASES[name]} ({name}):\n  llama.cpp: {expected[name]!r}\n"
                      f"  ignite:    {got}", file=sys.stderr)
        print(f"{len(expected)} built-in templates against llama.cpp's expected renders")
    else:
        print("note: llama.cpp's source is absent: the built-ins are not checked",
              file=sys.stderr)

    # 2. the conversation layer: first turn + answer + next turn = the whole
    templates = {"Gemma 3": (chat_templates.GEMMA3, "<bos>", "<eos>", "<end_of_turn>", True),
                 "Qwen2.5": (test_jinja.templates()["Qwen2.5"], "", "<|im_end|>", "<|im_end|>",
                             False)}
    smol = test_jinja.gguf_template(test_jinja.model_path())
    if smol:
        templates["SmolLM2"] = (smol, "<|im_start|>", "<|im_end|>", "<|im_end|>", False)
    qwen3 = chat_templates.qwen3()
    if qwen3:
        templates["Qwen3"] = (qwen3, "", "<|im_end|>", "<|im_end|>", False)
    answer = "Sure: 4.\nTwo lines."
    for name, (tmpl, bos, eos, eot, strip) in templates.items():
        for system in (None, "Be brief."):
            for closed in (True, False):
                msgs = ([{"role": "system", "content": system}] if system else []) + \
                    [{"role": "user", "content": "Hi"}]
                base = {"template": tmpl, "bos_token": bos, "eos_token": eos, "strip_bos": strip,
                        "system": system}
                first, nxt = test_jinja.run_tool(tool, [
                    dict(base, turn="first", user="Hi"),
                    dict(base, turn="next", user=" And 3+3? ", closing=eot if closed else None)])
                whole = msgs + [{"role": "assistant", "content": answer},
                                {"role": "user", "content": " And 3+3? "}]
                want, err = test_jinja.reference(tmpl, {"messages": whole,
                                                        "add_generation_prompt": True,
                                                        "bos_token": bos, "eos_token": eos})
                if strip and want.startswith(bos):
                    want = want[len(bos):]
                checks += 1
                got = None
                if "text" in first and "text" in nxt:
                    got = first["text"] + answer + (eot if closed else "") + nxt["text"]
                    # a cut-short answer: the template's end of turn comes with the next turn
                if got != want:
                    failures += 1
                    print(f"TURNS {name} system={system!r} closed={closed}:\n  jinja2: {want!r}\n"
                          f"  ignite: {got!r} {first} {nxt}", file=sys.stderr)
    # 3. Qwen3.5's template (qwen35, qwen35moe) with thinking on and off
    # (--no-think). Its history drops a past answer's <think> block, so first +
    # answer + next is not the whole render: each turn is checked on its own,
    # the first against jinja2's render of [system?, user], the next against
    # what follows the answer in jinja2's render of the whole conversation
    # (less the end-of-turn token the cache holds where the answer was closed).
    q35 = os.path.join(test_jinja.LLAMA_TEMPLATES, "Qwen3.5-4B.jinja")
    if os.path.exists(q35):
        with open(q35, encoding="utf-8") as f:
            tmpl = f.read()
        eot, answer = "<|im_end|>", "It is 4."
        for thinking in (None, False):
            for system in (None, "Be brief."):
                for closed in (True, False):
                    think = {} if thinking is None else {"enable_thinking": thinking}
                    base = dict(template=tmpl, bos_token="", eos_token=eot, system=system,
                                **think)
                    first, nxt = test_jinja.run_tool(tool, [
                        dict(base, turn="first", user="2+2?"),
                        dict(base, turn="next", user=" And 3+3? ", closing=eot if closed else None)])
                    msgs = ([{"role": "system", "content": system}] if system else []) + \
                        [{"role": "user", "content": "2+2?"}]
                    case = dict(bos_token="", eos_token=eot, add_generation_prompt=True, **think)
                    want_first, _ = test_jinja.reference(tmpl, dict(case, messages=msgs))
                    whole, _ = test_jinja.reference(tmpl, dict(case, messages=msgs + [
                        {"role": "assistant", "content": answer},
                        {"role": "user", "content": " And 3+3? "}]))
                    tail = whole[whole.index(answer) + len(answer):]
                    want_next = tail[len(eot):] if closed else tail
                    gen = "<think>\n\n</think>\n\n" if thinking is False else "<think>\n"
                    checks += 1
                    if first.get("text") != want_first or nxt.get("text") != want_next or \
                            not want_first.endswith("<|im_start|>assistant\n" + gen) or \
                            not want_next.endswith("<|im_start|>assistant\n" + gen):
                        failures += 1
                        print(f"TURNS Qwen3.5 thinking={thinking} system={system!r} "
                              f"closed={closed}:\n  jinja2: {want_first!r} {want_next!r}\n"
                              f"  ignite: {first} {nxt}", file=sys.stderr)
        print("Qwen3.5's turns with thinking on and off against jinja2")
    else:
        print("note: llama.cpp's source is absent: Qwen3.5's turns are not checked",
              file=sys.stderr)
    # a built-in's turns against its own whole render
    for name in ("chatml", "llama3", "gemma", "zephyr", "phi3"):
        base = {"builtin": name, "bos_token": "", "eos_token": "</s>"}
        closing = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "gemma": "<end_of_turn>",
                   "zephyr": "<|endoftext|>", "phi3": "<|end|>"}[name]
        first, nxt, whole = test_jinja.run_tool(tool, [
            dict(base, turn="first", system="Sys", user="Hi"),
            dict(base, turn="next", system="Sys", user="Next", closing=closing),
            dict(base, add_generation_prompt=True, messages=[
                {"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Yes."}, {"role": "user", "content": "Next"}])])
        checks += 1
        got = first.get("text", "?") + "Yes." + closing + nxt.get("text", "?")
        if got != whole.get("text"):
            failures += 1
            print(f"TURNS builtin {name}:\n  whole: {whole}\n  turns: {got!r}", file=sys.stderr)
    print(f"{checks} checks, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
