/* tests/unit/jinja_render_tool.c: renders Jinja chat templates with
 * tokenizer/jinja.c for test_jinja.py. Reads JSON Lines on stdin, one case
 * a line: {"template": T, "messages": [{"role", "content"}...],
 * "add_generation_prompt": B, "bos_token": S, "eos_token": S,
 * "enable_thinking": B (optional)}; writes one line a case:
 * {"text": RENDERED} or {"error": MESSAGE}.
 * With "builtin": NAME, llama.cpp's built-in template renders the messages
 * instead (tokenizer/chat_builtin.c). With "turn": "first" or "next", the
 * conversation layer (tokenizer/chat_conv.c) renders a first turn
 * ("system", "user") or the next turn after an answer ("closing": the
 * end-of-generation token's text or null) with the template or builtin,
 * BOS stripped when "strip_bos" is true. */
#include "core/status.h"
#include "tokenizer/jinja.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int main(void)
{
    size_t cap = 0;
    char *line = NULL;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        cJSON *c = cJSON_Parse(line);
        if (!c) {
            fprintf(stderr, "jinja_render_tool: a line is not JSON\n");
            return 1;
        }
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
        int64_t nm = cJSON_GetArraySize(msgs);
        struct chat_message *m = calloc((size_t)nm + 1, sizeof *m);
        for (int64_t i = 0; i < nm; i++) {
            const cJSON *e = cJSON_GetArrayItem(msgs, (int)i);
            m[i].role = str_of(e, "role");
            m[i].content = str_of(e, "content");
        }
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "enable_thinking");
        struct jinja_input in = {
            .messages = m, .n_messages = nm,
            .add_generation_prompt =
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
            .bos_token = str_of(c, "bos_token"), .eos_token = str_of(c, "eos_token"),
            .enable_thinking = th ? cJSON_IsTrue(th) : -1,
        };
        const char *t = str_of(c, "template"), *builtin = str_of(c, "builtin");
        const char *turn = str_of(c, "turn");
        char err[512] = "", *out = NULL;
        int st;
        ig_error_capture(err, sizeof err);
        if (turn) {
            struct chat_tmpl ct = {
                .kind = builtin ? CHAT_TMPL_BUILTIN : CHAT_TMPL_JINJA,
                .name = builtin ? builtin : "template", .text = t, .len = t ? strlen(t) : 0,
                .bos = in.bos_token ? in.bos_token : "", .eos = in.eos_token ? in.eos_token : "",
                .strip_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "strip_bos"))};
            bool no_think = th && !cJSON_IsTrue(th);
            if (!strcmp(turn, "first"))
                st = chat_tmpl_first(&ct, str_of(c, "system"), str_of(c, "user"), no_think, &out);
            else
                st = chat_tmpl_next(&ct, str_of(c, "system"), str_of(c, "user"), no_think,
                                    str_of(c, "closing"), &out);
        } else if (builtin) {
            st = chat_builtin_render(builtin, m, nm, in.add_generation_prompt, &out);
        } else {
            st = jinja_render(t, strlen(t), "template", &in, &out);
        }
        ig_error_capture(NULL, 0);
        cJSON *r = cJSON_CreateObject();
        if (st == IG_OK)
            cJSON_AddStringToObject(r, "text", out);
        else
            cJSON_AddStringToObject(r, "error", err);
        char *s = cJSON_PrintUnformatted(r);
        printf("%s\n", s);
        fflush(stdout);
        free(s);
        cJSON_Delete(r);
        free(out);
        free(m);
        cJSON_Delete(c);
    }
    free(line);
    return 0;
}
