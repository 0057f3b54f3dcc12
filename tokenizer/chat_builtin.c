/* tokenizer/chat_builtin.c: llama.cpp's built-in chat templates by name
 * (`--chat-template NAME`, as llama-cli takes it): a conversation rendered
 * exactly as llama.cpp's llm_chat_apply_template renders it
 * (src/llama-chat.cpp), for the families listed in chat_builtin_names.
 * Leaves the choice of template and the encoding to the caller.
 * Covered by tests/unit/test_chat_builtin.py (llama.cpp's own expected
 * renders from its tests/test-chat-template.cpp). */
#include "tokenizer/chat_template.h"

#include "core/status.h"
#include "core/strbuf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum builtin {
    B_CHATML, B_LLAMA2, B_LLAMA2_SYS, B_LLAMA2_SYS_BOS, B_LLAMA2_SYS_STRIP, B_MISTRAL_V1,
    B_MISTRAL_V3, B_MISTRAL_V3_TEKKEN, B_MISTRAL_V7, B_MISTRAL_V7_TEKKEN, B_PHI3, B_PHI4,
    B_FALCON3, B_ZEPHYR, B_MONARCH, B_GEMMA, B_ORION, B_OPENCHAT, B_VICUNA, B_VICUNA_ORCA,
    B_DEEPSEEK, B_DEEPSEEK3, B_COMMAND_R, B_LLAMA3,
};

static const struct {
    const char *name;
    enum builtin id;
} builtins[] = {
    {"chatml", B_CHATML}, {"llama2", B_LLAMA2}, {"llama2-sys", B_LLAMA2_SYS},
    {"llama2-sys-bos", B_LLAMA2_SYS_BOS}, {"llama2-sys-strip", B_LLAMA2_SYS_STRIP},
    {"mistral-v1", B_MISTRAL_V1}, {"mistral-v3", B_MISTRAL_V3},
    {"mistral-v3-tekken", B_MISTRAL_V3_TEKKEN}, {"mistral-v7", B_MISTRAL_V7},
    {"mistral-v7-tekken", B_MISTRAL_V7_TEKKEN}, {"phi3", B_PHI3}, {"phi4", B_PHI4},
    {"falcon3", B_FALCON3}, {"zephyr", B_ZEPHYR}, {"monarch", B_MONARCH}, {"gemma", B_GEMMA},
    {"orion", B_ORION}, {"openchat", B_OPENCHAT}, {"vicuna", B_VICUNA},
    {"vicuna-orca", B_VICUNA_ORCA}, {"deepseek", B_DEEPSEEK}, {"deepseek3", B_DEEPSEEK3},
    {"command-r", B_COMMAND_R}, {"llama3", B_LLAMA3},
};

static int find(const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (!strcmp(builtins[i].name, name))
            return (int)i;
    return -1;
}

bool chat_builtin_known(const char *name) { return find(name) >= 0; }

const char *chat_builtin_names(void)
{
    static char list[512];
    if (!list[0])
        for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
            if (i)
                strcat(list, ", ");
            strcat(list, builtins[i].name);
        }
    return list;
}

/* llama.cpp's trim: ASCII white space (C isspace) off both ends */
static void add_trimmed(struct ig_str *b, const char *s)
{
    size_t a = 0, e = strlen(s);
    while (a < e && isspace((unsigned char)s[a]))
        a++;
    while (e > a && isspace((unsigned char)s[e - 1]))
        e--;
    ig_str_putn(b, s + a, e - a);
}

static bool is(const char *role, const char *r) { return !strcmp(role, r); }

int chat_builtin_render(const char *name, const struct chat_message *msgs, int64_t n,
                        bool add_ass, char **out)
{
    int k = find(name);
    *out = NULL;
    if (k < 0)
        return ig_error(IG_E_USAGE, "--chat-template: '%s' is not a built-in template (%s; or "
                        "a Jinja file with --chat-template-file)", name, chat_builtin_names());
    enum builtin t = builtins[k].id;
    struct ig_str b = {0};
    ig_str_putn(&b, "", 0);
    switch (t) {
    case B_CHATML:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, "<|im_start|>", msgs[i].role, "\n", msgs[i].content, "<|im_end|>\n",
                       NULL);
        if (add_ass)
            ig_str_cat(&b, "<|im_start|>assistant\n", NULL);
        break;
    case B_MISTRAL_V7: case B_MISTRAL_V7_TEKKEN: {
        const char *sp = t == B_MISTRAL_V7 ? " " : "";
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system"))
                ig_str_cat(&b, "[SYSTEM_PROMPT]", sp, msgs[i].content, "[/SYSTEM_PROMPT]", NULL);
            else if (is(msgs[i].role, "user"))
                ig_str_cat(&b, "[INST]", sp, msgs[i].content, "[/INST]", NULL);
            else
                ig_str_cat(&b, sp, msgs[i].content, "</s>", NULL);
        }
        break;
    }
    case B_MISTRAL_V1: case B_MISTRAL_V3: case B_MISTRAL_V3_TEKKEN: {
        const char *lead = t == B_MISTRAL_V1 ? " " : "";
        const char *trail = t == B_MISTRAL_V3_TEKKEN ? "" : " ";
        bool inside = false;
        for (int64_t i = 0; i < n; i++) {
            if (!inside) {
                ig_str_cat(&b, lead, "[INST]", trail, NULL);
                inside = true;
            }
            if (is(msgs[i].role, "system")) {
                ig_str_cat(&b, msgs[i].content, "\n\n", NULL);
            } else if (is(msgs[i].role, "user")) {
                ig_str_cat(&b, msgs[i].content, lead, "[/INST]", NULL);
            } else {
                ig_str_cat(&b, trail, NULL);
                if (t == B_MISTRAL_V3)
                    add_trimmed(&b, msgs[i].content);
                else
                    ig_str_cat(&b, msgs[i].content, NULL);
                ig_str_cat(&b, "</s>", NULL);
                inside = false;
            }
        }
        break;
    }
    case B_LLAMA2: case B_LLAMA2_SYS: case B_LLAMA2_SYS_BOS: case B_LLAMA2_SYS_STRIP: {
        bool sys = t != B_LLAMA2, bos_inside = t == B_LLAMA2_SYS_BOS, strip = t == B_LLAMA2_SYS_STRIP;
        bool inside = true;
        ig_str_cat(&b, "[INST] ", NULL);
        for (int64_t i = 0; i < n; i++) {
            if (!inside) {
                inside = true;
                ig_str_cat(&b, bos_inside ? "<s>[INST] " : "[INST] ", NULL);
            }
            struct ig_str c = {0};
            ig_str_putn(&c, "", 0);
            if (strip)
                add_trimmed(&c, msgs[i].content);
            else
                ig_str_cat(&c, msgs[i].content, NULL);
            const char *content = c.failed ? "" : c.s;
            if (is(msgs[i].role, "system")) {
                if (sys)
                    ig_str_cat(&b, "<<SYS>>\n", content, "\n<</SYS>>\n\n", NULL);
                else
                    ig_str_cat(&b, content, "\n", NULL);
            } else if (is(msgs[i].role, "user")) {
                ig_str_cat(&b, content, " [/INST]", NULL);
            } else {
                ig_str_cat(&b, content, "</s>", NULL);
                inside = false;
            }
            b.failed |= c.failed;
            free(c.s);
        }
        break;
    }
    case B_PHI3:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, "<|", msgs[i].role, "|>\n", msgs[i].content, "<|end|>\n", NULL);
        if (add_ass)
            ig_str_cat(&b, "<|assistant|>\n", NULL);
        break;
    case B_PHI4:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, "<|im_start|>", msgs[i].role, "<|im_sep|>", msgs[i].content,
                       "<|im_end|>", NULL);
        if (add_ass)
            ig_str_cat(&b, "<|im_start|>assistant<|im_sep|>", NULL);
        break;
    case B_FALCON3:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, "<|", msgs[i].role, "|>\n", msgs[i].content, "\n", NULL);
        if (add_ass)
            ig_str_cat(&b, "<|assistant|>\n", NULL);
        break;
    case B_ZEPHYR:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, "<|", msgs[i].role, "|>\n", msgs[i].content, "<|endoftext|>\n", NULL);
        if (add_ass)
            ig_str_cat(&b, "<|assistant|>\n", NULL);
        break;
    case B_MONARCH:
        for (int64_t i = 0; i < n; i++)
            ig_str_cat(&b, i ? "<s>" : "", msgs[i].role, "\n", msgs[i].content, "</s>\n", NULL);
        if (add_ass)
            ig_str_cat(&b, "<s>assistant\n", NULL);
        break;
    case B_GEMMA: {
        struct ig_str sys = {0};
        ig_str_putn(&sys, "", 0);
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system")) {
                add_trimmed(&sys, msgs[i].content);
                continue;
            }
            const char *role = is(msgs[i].role, "assistant") ? "model" : msgs[i].role;
            ig_str_cat(&b, "<start_of_turn>", role, "\n", NULL);
            if (sys.len && !is(role, "model")) {
                ig_str_cat(&b, sys.s, "\n\n", NULL);
                sys.len = 0;
                sys.s[0] = '\0';
            }
            add_trimmed(&b, msgs[i].content);
            ig_str_cat(&b, "<end_of_turn>\n", NULL);
        }
        b.failed |= sys.failed;
        free(sys.s);
        if (add_ass)
            ig_str_cat(&b, "<start_of_turn>model\n", NULL);
        break;
    }
    case B_ORION: {
        struct ig_str sys = {0};
        ig_str_putn(&sys, "", 0);
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system")) {
                ig_str_cat(&sys, msgs[i].content, NULL);
            } else if (is(msgs[i].role, "user")) {
                ig_str_cat(&b, "Human: ", NULL);
                if (sys.len) {
                    ig_str_cat(&b, sys.s, "\n\n", NULL);
                    sys.len = 0;
                    sys.s[0] = '\0';
                }
                ig_str_cat(&b, msgs[i].content, "\n\nAssistant: </s>", NULL);
            } else {
                ig_str_cat(&b, msgs[i].content, "</s>", NULL);
            }
        }
        b.failed |= sys.failed;
        free(sys.s);
        break;
    }
    case B_OPENCHAT:
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system")) {
                ig_str_cat(&b, msgs[i].content, "<|end_of_turn|>", NULL);
                continue;
            }
            char first[2] = {(char)toupper((unsigned char)msgs[i].role[0]), 0};
            ig_str_cat(&b, "GPT4 Correct ", first, msgs[i].role[0] ? msgs[i].role + 1 : "", ": ",
                       msgs[i].content, "<|end_of_turn|>", NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "GPT4 Correct Assistant:", NULL);
        break;
    case B_VICUNA: case B_VICUNA_ORCA:
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system"))
                ig_str_cat(&b, t == B_VICUNA_ORCA ? "SYSTEM: " : "", msgs[i].content,
                           t == B_VICUNA_ORCA ? "\n" : "\n\n", NULL);
            else if (is(msgs[i].role, "user"))
                ig_str_cat(&b, "USER: ", msgs[i].content, "\n", NULL);
            else if (is(msgs[i].role, "assistant"))
                ig_str_cat(&b, "ASSISTANT: ", msgs[i].content, "</s>\n", NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "ASSISTANT:", NULL);
        break;
    case B_DEEPSEEK:
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system"))
                ig_str_cat(&b, msgs[i].content, NULL);
            else if (is(msgs[i].role, "user"))
                ig_str_cat(&b, "### Instruction:\n", msgs[i].content, "\n", NULL);
            else if (is(msgs[i].role, "assistant"))
                ig_str_cat(&b, "### Response:\n", msgs[i].content, "\n<|EOT|>\n", NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "### Response:\n", NULL);
        break;
    case B_DEEPSEEK3:
        for (int64_t i = 0; i < n; i++) {
            if (is(msgs[i].role, "system"))
                ig_str_cat(&b, msgs[i].content, "\n\n", NULL);
            else if (is(msgs[i].role, "user"))
                ig_str_cat(&b, "<\xef\xbd\x9cUser\xef\xbd\x9c>", msgs[i].content, NULL);
            else if (is(msgs[i].role, "assistant"))
                ig_str_cat(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", msgs[i].content,
                           "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                           NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", NULL);
        break;
    case B_COMMAND_R:
        for (int64_t i = 0; i < n; i++) {
            const char *tag = is(msgs[i].role, "system") ? "<|SYSTEM_TOKEN|>"
                              : is(msgs[i].role, "user") ? "<|USER_TOKEN|>"
                              : is(msgs[i].role, "assistant") ? "<|CHATBOT_TOKEN|>" : NULL;
            if (!tag)
                continue;
            ig_str_cat(&b, "<|START_OF_TURN_TOKEN|>", tag, NULL);
            add_trimmed(&b, msgs[i].content);
            ig_str_cat(&b, "<|END_OF_TURN_TOKEN|>", NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", NULL);
        break;
    case B_LLAMA3:
        for (int64_t i = 0; i < n; i++) {
            ig_str_cat(&b, "<|start_header_id|>", msgs[i].role, "<|end_header_id|>\n\n", NULL);
            add_trimmed(&b, msgs[i].content);
            ig_str_cat(&b, "<|eot_id|>", NULL);
        }
        if (add_ass)
            ig_str_cat(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
        break;
    }
    if (b.failed) {
        free(b.s);
        return ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
    }
    *out = b.s;
    return IG_OK;
}
