/* tokenizer/chat_template.c: recognises a chat template's family by its
 * markers and renders a single-turn conversation in that family's format,
 * or the next turn of a continued one (the formats are listed in
 * tokenizer/chat_template.h). Leaves encoding the
 * result, with its special tokens, to the tokenizer.
 * Covered by tests/unit/test_chat_template.c and test_chat_jinja.py. */
#include "tokenizer/chat_template.h"

#include "core/status.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int has(const char *t, size_t len, const char *marker)
{
    return memmem(t, len, marker, strlen(marker)) != NULL;
}

enum chat_style chat_detect(const char *tmpl, size_t len)
{
    if (!tmpl || !len)
        return CHAT_UNKNOWN;
    if (has(tmpl, len, "<|im_start|>"))
        return CHAT_CHATML;
    if (has(tmpl, len, "<|start_header_id|>"))
        return CHAT_LLAMA3;
    if (has(tmpl, len, "<start_of_turn>"))
        return CHAT_GEMMA;
    if (has(tmpl, len, "[INST]"))
        return has(tmpl, len, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    return CHAT_UNKNOWN;
}

const char *chat_style_name(enum chat_style style)
{
    switch (style) {
    case CHAT_CHATML: return "chatml";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_LLAMA2: return "llama2";
    case CHAT_GEMMA: return "gemma";
    case CHAT_MISTRAL: return "mistral";
    default: return "unknown";
    }
}

/* A literal default system message is template text between
 * "<|im_start|>system" + newline and "<|im_end|>" with no Jinja in it (no
 * quotes, braces or '+' that would splice in a variable). */
size_t chat_default_system(const char *tmpl, size_t len, char *buf, size_t cap)
{
    static const char head[] = "<|im_start|>system", tail[] = "<|im_end|>";
    const char *p = tmpl, *end = tmpl ? tmpl + len : NULL;
    while (p && (p = memmem(p, (size_t)(end - p), head, sizeof head - 1))) {
        p += sizeof head - 1;
        if (p < end && *p == '\n')
            p++;
        else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
            p += 2;
        else
            continue;
        const char *stop = memmem(p, (size_t)(end - p), tail, sizeof tail - 1);
        if (!stop)
            return 0;
        if (stop == p || memchr(p, '{', (size_t)(stop - p)) ||
            memchr(p, '}', (size_t)(stop - p)) || memchr(p, '\'', (size_t)(stop - p)) ||
            memchr(p, '"', (size_t)(stop - p)) || memchr(p, '+', (size_t)(stop - p)))
            continue;
        size_t n = 0;
        for (const char *q = p; q < stop; q++) {
            char c = *q;
            if (c == '\\' && q + 1 < stop && q[1] == 'n') {
                c = '\n';
                q++;
            }
            if (n + 1 >= cap)
                return 0;
            buf[n++] = c;
        }
        buf[n] = '\0';
        return n;
    }
    return 0;
}

/* The error for a template of no known family. */
static int unknown_style(void)
{
    return ig_error(IG_E_MODEL, "--chat: the model's chat template is not one ignite knows "
                                "(chatml, llama3, llama2, gemma, mistral); run without --chat "
                                "and format the prompt yourself");
}

int chat_has_thinking_switch(const char *tmpl, size_t len)
{
    return tmpl && has(tmpl, len, "<|im_start|>") && has(tmpl, len, "enable_thinking");
}

/* Python's str.isspace() for the code point at s (what Jinja's trim strips):
 * its length, or 0. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x20)))
        return 1;
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (n >= 3) {
        uint32_t cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        if ((s[0] & 0xF0) == 0xE0 &&
            (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
             cp == 0x202F || cp == 0x205F || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* A malloc'd copy of text without leading and trailing white space. */
static char *trimmed(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), a = 0, k;
    while (a < n && (k = space_at(s + a, n - a)))
        a += k;
    size_t e = a; /* end of the last non-space character */
    for (size_t i = a; i < n;) {
        k = space_at(s + i, n - i);
        if (k) {
            i += k;
        } else {
            i += 1;
            while (i < n && (s[i] & 0xC0) == 0x80)
                i++;
            e = i;
        }
    }
    char *out = malloc(e - a + 1);
    if (out) {
        memcpy(out, text + a, e - a);
        out[e - a] = '\0';
    }
    return out;
}

int chat_render(enum chat_style style, const char *tmpl, size_t tmpl_len,
                const char *system, const char *user, char **out)
{
    return chat_render_opts(style, tmpl, tmpl_len, system, user, NULL, out);
}

/* A rendered prompt into *out (the caller's to free), or the error of an
 * allocation that failed; frees trim. */
static int render_done(struct ig_str *b, char *trim, char **out)
{
    free(trim);
    if (b->failed || !b->s) {
        free(b->s);
        return ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
    }
    *out = b->s;
    return IG_OK;
}

int chat_render_opts(enum chat_style style, const char *tmpl, size_t tmpl_len,
                     const char *system, const char *user, const struct chat_opts *opts,
                     char **out)
{
    struct ig_str b = {0};
    char def[1024];
    *out = NULL;
    if (system && !*system)
        system = NULL;
    bool no_thinking = opts && opts->no_thinking;
    if (no_thinking && !chat_has_thinking_switch(tmpl, tmpl_len))
        return ig_error(IG_E_USAGE, "--no-think: the model's chat template has no thinking "
                        "switch (Qwen3's enable_thinking)");
    char *trim = NULL;
    if (style == CHAT_LLAMA3 || style == CHAT_GEMMA) {
        if (!(trim = trimmed(user)))
            return ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
        user = trim;
    }
    switch (style) {
    case CHAT_CHATML:
        if (!system && chat_default_system(tmpl, tmpl_len, def, sizeof def))
            system = def;
        if (system)
            ig_str_cat(&b, "<|im_start|>system\n", system, "<|im_end|>\n", NULL);
        ig_str_cat(&b, "<|im_start|>user\n", user, "<|im_end|>\n<|im_start|>assistant\n", NULL);
        if (no_thinking)
            ig_str_puts(&b, "<think>\n\n</think>\n\n");
        break;
    case CHAT_LLAMA3:
        if (system)
            ig_str_cat(&b, "<|start_header_id|>system<|end_header_id|>\n\n", system, "<|eot_id|>",
                       NULL);
        ig_str_cat(&b, "<|start_header_id|>user<|end_header_id|>\n\n", user, "<|eot_id|>",
                   "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
        break;
    case CHAT_LLAMA2: { /* the template strips the turn's whole content */
        struct ig_str c = {0};
        if (system)
            ig_str_cat(&c, "<<SYS>>\n", system, "\n<</SYS>>\n\n", NULL);
        ig_str_puts(&c, user);
        char *t = c.failed ? NULL : trimmed(c.s ? c.s : "");
        if (!t)
            b.failed = true;
        else
            ig_str_cat(&b, "[INST] ", t, " [/INST]", NULL);
        free(t);
        free(c.s);
        break;
    }
    case CHAT_GEMMA:
        ig_str_puts(&b, "<start_of_turn>user\n");
        if (system)
            ig_str_cat(&b, system, "\n\n", NULL);
        ig_str_cat(&b, user, "<end_of_turn>\n<start_of_turn>model\n", NULL);
        break;
    case CHAT_MISTRAL:
        ig_str_puts(&b, "[INST] ");
        if (system)
            ig_str_cat(&b, system, "\n\n", NULL);
        ig_str_cat(&b, user, " [/INST]", NULL);
        break;
    default:
        free(trim);
        return unknown_style();
    }
    return render_done(&b, trim, out);
}

int chat_render_next(enum chat_style style, const char *user, int closed, const char *bos,
                     char **out)
{
    struct ig_str b = {0};
    *out = NULL;
    bos = bos ? bos : "";
    char *trim = NULL; /* these templates trim every message, as in the first turn */
    if (style == CHAT_LLAMA3 || style == CHAT_GEMMA || style == CHAT_LLAMA2) {
        if (!(trim = trimmed(user)))
            return ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
        user = trim;
    }
    /* after the answer: the family's end-of-turn marker (when the model's own
     * token did not end it), then what the template puts before a user turn */
    switch (style) {
    case CHAT_CHATML:
        ig_str_cat(&b, closed ? "" : "<|im_end|>", "\n<|im_start|>user\n", user,
                   "<|im_end|>\n<|im_start|>assistant\n", NULL);
        break;
    case CHAT_LLAMA3:
        ig_str_cat(&b, closed ? "" : "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\n",
                   user, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
        break;
    case CHAT_LLAMA2: /* bos_token + '[INST] ' for every user turn */
        ig_str_cat(&b, closed ? "" : "</s>", bos, "[INST] ", user, " [/INST]", NULL);
        break;
    case CHAT_GEMMA:
        ig_str_cat(&b, closed ? "" : "<end_of_turn>", "\n<start_of_turn>user\n", user,
                   "<end_of_turn>\n<start_of_turn>model\n", NULL);
        break;
    case CHAT_MISTRAL:
        ig_str_cat(&b, closed ? "" : "</s>", "[INST] ", user, " [/INST]", NULL);
        break;
    default:
        free(trim);
        return unknown_style();
    }
    return render_done(&b, trim, out);
}
