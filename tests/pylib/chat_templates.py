"""Chat templates of the models ignite runs, for the tests that render them
with jinja2 (tests/unit/test_chat_jinja.py, tests/cli/test_chat_models.py)."""
import os

from igtest import cache_dir

# Gemma 3's (google/gemma-3-*-it), text messages only
GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- if messages[0]['content'] is "
    "string -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception("
    "\"Conversation roles must alternate user/assistant/user/assistant/...\") }}{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + "
    "(first_user_prefix if loop.first else \"\") }}{%- if message['content'] is string -%}"
    "{{ message['content'] | trim }}{%- elif message['content'] is iterable -%}{%- for item in "
    "message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}"
    "{%- else -%}{{ raise_exception(\"Invalid content type\") }}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}"
    "{{'<start_of_turn>model\n'}}{%- endif -%}")


def qwen3():
    """Qwen3's template as llama.cpp's source (in the cache: scripts/fetch-model.sh
    llama-src) keeps it in models/templates, or None when that is absent."""
    path = os.path.join(cache_dir(), "llama-src", "llama_cpp_python-0.3.36", "vendor",
                        "llama.cpp", "models", "templates", "Qwen-Qwen3-0.6B.jinja")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()
