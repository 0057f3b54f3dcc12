/* tests/unit/test_chat_template.c: tokenizer/chat_template.c against expected
 * strings written out by hand from each family's published template text,
 * and detection on real template snippets. (test_chat_jinja.py checks the
 * same renders against jinja2.) */
#include "core/status.h"
#include "tests/test.h"
#include "tokenizer/chat_template.h"

#include <stdlib.h>
#include <string.h>

/* The test model's template (SmolLM2-135M-Instruct), verbatim. */
static const char smol[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

static void expect(enum chat_style style, const char *tmpl, const char *sys, const char *user,
                   const char *want)
{
    char *got = NULL;
    int st = chat_render(style, tmpl, tmpl ? strlen(tmpl) : 0, sys, user, &got);
    CHECKF(st == IG_OK && got && !strcmp(got, want), "%s sys=%s:\n got  [%s]\n want [%s]",
           chat_style_name(style), sys ? sys : "(none)", got ? got : "(null)", want);
    free(got);
}

static void test_detect(void)
{
    static const struct { const char *t; enum chat_style s; } cases[] = {
        {smol, CHAT_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}", CHAT_LLAMA3},
        {"{{ bos_token + '[INST] ' }}{{ '<<SYS>>\\n' + system_message }}", CHAT_LLAMA2},
        {"{{ '<start_of_turn>' + role + '\\n' }}", CHAT_GEMMA},
        {"{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}", CHAT_MISTRAL},
        {"{{ message['content'] }}", CHAT_UNKNOWN},
        {"", CHAT_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECKF(chat_detect(cases[i].t, strlen(cases[i].t)) == cases[i].s, "case %zu", i);
    CHECK(chat_detect(NULL, 0) == CHAT_UNKNOWN);
}

static void test_default_system(void)
{
    char buf[256];
    size_t n = chat_default_system(smol, strlen(smol), buf, sizeof buf);
    CHECKF(n && !strcmp(buf, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
           "got [%s]", n ? buf : "");
    static const char escaped[] = "{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}";
    n = chat_default_system(escaped, strlen(escaped), buf, sizeof buf);
    CHECKF(n && !strcmp(buf, "You are Qwen."), "escaped newline: got [%s]", n ? buf : "");
    static const char spliced[] =
        "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>' }}";
    CHECK(chat_default_system(spliced, strlen(spliced), buf, sizeof buf) == 0);
    CHECK(chat_default_system(smol, strlen(smol), buf, 10) == 0); /* does not fit */
}

static void test_render(void)
{
    expect(CHAT_CHATML, smol, NULL, "Hi",
           "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
           "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(CHAT_CHATML, smol, "Be brief.", "Hi",
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(CHAT_CHATML, NULL, NULL, "Hi",
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(CHAT_LLAMA3, NULL, "S", "Hi",
           "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(CHAT_LLAMA2, NULL, "S", "Hi", "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]");
    expect(CHAT_LLAMA2, NULL, NULL, "Hi", "[INST] Hi [/INST]");
    expect(CHAT_GEMMA, NULL, "S", "Hi",
           "<start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    expect(CHAT_MISTRAL, NULL, NULL, "Hi", "[INST] Hi [/INST]");
    expect(CHAT_MISTRAL, NULL, "S", "Hi", "[INST] S\n\nHi [/INST]");
    char *out = (char *)1;
    CHECK(chat_render(CHAT_UNKNOWN, NULL, 0, NULL, "Hi", &out) == IG_E_MODEL && !out);
}

int main(void)
{
    test_detect();
    test_default_system();
    test_render();
    return test_summary("test_chat_template");
}
