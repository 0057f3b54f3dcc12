"""tests/unit/test_chat_jinja.py: tokenizer/chat_template.c against jinja2
renders (as transformers renders them: trim_blocks off, bos_token "", the
generation prompt on) of one template per recognised family, Gemma 3's and
Qwen3's (read from llama.cpp's models/templates in the cache when it is
there; with enable_thinking left out and set to false), and of the test
model's own template read from the GGUF by the gguf package. Messages with
white space around them check the templates' trims.

The next turn of a continued chat (chat_render_next) against jinja2 renders
of the whole conversation (system?, user, assistant, user): what follows the
first turn's render is the answer, the family's end-of-turn marker (the
model's end-of-generation token), then exactly the next turn; a cut-short
answer gets the marker first. Rendered with bos_token "<s>" too: a family
that puts BOS before every user turn (llama2) writes it there.

usage: test_chat_jinja.py CHAT_RENDER_TOOL"""
import os
import subprocess
import sys
import tempfile

import chat_templates

try:
    import jinja2
except ImportError:
    print("jinja2 is missing (pip install -r tests/requirements.txt)", file=sys.stderr)
    sys.exit(77)

# One representative template per family, as published with the models
# (Mistral's and Gemma's in the variants that accept a system message).
TEMPLATES = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "chatml-qwen": "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
    "mistral": "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ bos_token }}{% for message in loop_messages %}{% if message['role'] == 'user' %}{% if loop.first and system_message is defined %}{{ '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}",
}

TEMPLATES["gemma3"] = chat_templates.GEMMA3

USERS = ["Hello!", "What is 2+2?\nAnswer briefly.", "héllo wörld — 日本語 🙂",
         "  padded \u3000\n", "\n\tTabbed and newlined.\n\n"]
SYSTEMS = [None, "You are terse.", "Line one.\nLine two."]


def raise_exception(msg):
    raise jinja2.TemplateError(msg)


def jinja_render(template, user, system, thinking=None):
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    msgs = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]
    extra = {} if thinking is None else {"enable_thinking": thinking}
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                            bos_token="", eos_token="</s>",
                                            raise_exception=raise_exception, **extra)


# The text of the end-of-turn token the model generates, per family.
END_OF_TURN = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "llama2": "</s>",
               "gemma": "<end_of_turn>", "mistral": "</s>"}
ANSWERS = ["Sure: 4.", "Line one.\nLine two — ok 🙂"]


def jinja_conversation(template, msgs, bos):
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                            bos_token=bos, eos_token="</s>")


def check_next(tool, path, name, template, family):
    """Returns (checks, failures) of the next-turn renders of one template."""
    checks = failures = 0
    eot = END_OF_TURN[family]
    for system in SYSTEMS:
        for answer in ANSWERS:
            for u1, u2 in zip(USERS, USERS[1:] + USERS[:1]):
                for bos in ("", "<s>"):
                    first = ([{"role": "system", "content": system}] if system else []) + \
                        [{"role": "user", "content": u1}]
                    conv = first + [{"role": "assistant", "content": answer},
                                    {"role": "user", "content": u2}]
                    prefix = jinja_conversation(template, first, bos)
                    full = jinja_conversation(template, conv, bos)
                    rest = full[len(prefix):]
                    cut = rest.find(eot)
                    want = rest[cut + len(eot):] if full.startswith(prefix) and cut >= 0 and \
                        answer.strip() in rest[:cut] else None
                    for closed in ("closed", "open"):
                        r = subprocess.run([tool, "--next", closed, path, u2, bos],
                                           capture_output=True)
                        got = r.stdout.decode("utf-8")
                        expect = None if want is None else \
                            (want if closed == "closed" else eot + want)
                        checks += 1
                        if r.returncode != 0 or got != expect:
                            failures += 1
                            print(f"FAIL next turn {name} ({closed}) system={system!r} "
                                  f"bos={bos!r} u2={u2!r} rc={r.returncode}\n"
                                  f"  jinja2: {expect!r}\n  ignite: {got!r}", file=sys.stderr)
    return checks, failures


def model_template():
    path = os.environ.get("IGNITE_MODEL")
    if not path:
        cache = os.environ.get("IGNITE_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ignite")
        path = os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        return None
    import gguf
    f = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode()


def main():
    tool = sys.argv[1]
    cases = dict(TEMPLATES)
    smol = model_template()
    if smol is not None:
        cases["model"] = smol
    else:
        print("note: the test model is absent; its template is not checked", file=sys.stderr)
    qwen3 = chat_templates.qwen3()
    if qwen3 is not None:
        cases["qwen3"] = qwen3
    else:
        print("note: no llama.cpp source in the cache; Qwen3's template is not checked",
              file=sys.stderr)
    failures = checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(name, t, None) for name, t in cases.items()]
        if qwen3 is not None:
            runs.append(("qwen3 thinking off", qwen3, False))
        for name, template, thinking in runs:
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(template)
            for user in USERS:
                for system in SYSTEMS:
                    want = jinja_render(template, user, system, thinking)
                    args = [tool] + (["--no-think"] if thinking is False else []) + \
                        [path, user] + ([system] if system else [])
                    r = subprocess.run(args, capture_output=True)
                    got = r.stdout.decode("utf-8")
                    checks += 1
                    if r.returncode != 0 or got != want:
                        failures += 1
                        print(f"FAIL {name} user={user!r} system={system!r} "
                              f"rc={r.returncode} style={r.stderr.decode().strip()}\n"
                              f"  jinja2: {want!r}\n  ignite: {got!r}", file=sys.stderr)
            family = subprocess.run([tool, path, "x"], capture_output=True).stderr.decode().split()[0]
            c, f = check_next(tool, path, name, template, family)
            checks += c
            failures += f
    print(f"test_chat_jinja: {checks} checks, {failures} failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
