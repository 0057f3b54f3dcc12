/* tokenizer/chat_conv.c: a conversation's turns through whichever template
 * was chosen (struct chat_tmpl): the model's Jinja template, a Jinja file, a
 * llama.cpp built-in by name, or the hand-written family renderer. The first
 * turn is a render of [system?, user] with the generation prompt; the next
 * turn of a conversation kept in the cache is what the template writes
 * after the last answer, found by rendering the conversation with a marker
 * for that answer (llama.cpp's common_chat_format_single takes the same
 * difference). Leaves choosing the template to cli/gen_setup.c.
 * Covered by tests/unit/test_jinja.py (chat_conv cases) and tests/cli/. */
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* Stands for the answer in the cache: no white space (templates trim
 * answers), nothing a template would split on. */
static const char ANSWER_MARK[] = "IGNITE_ANSWER_MARK_2f9c41";

static int render(const struct chat_tmpl *t, const struct chat_message *msgs, int64_t n,
                  bool no_think, char **out)
{
    if (t->kind == CHAT_TMPL_BUILTIN) {
        if (no_think)
            return ig_error(IG_E_USAGE, "--no-think: the built-in template '%s' has no thinking "
                            "switch", t->name);
        return chat_builtin_render(t->name, msgs, n, true, out);
    }
    if (no_think && !strstr(t->text, "enable_thinking"))
        return ig_error(IG_E_USAGE, "--no-think: %s has no thinking switch (enable_thinking)",
                        t->name);
    struct jinja_input in = {.messages = msgs, .n_messages = n, .add_generation_prompt = true,
                             .bos_token = t->bos, .eos_token = t->eos,
                             .enable_thinking = no_think ? 0 : -1};
    return jinja_render(t->text, t->len, t->name, &in, out);
}

int chat_tmpl_first(const struct chat_tmpl *t, const char *system, const char *user,
                    bool no_think, char **out)
{
    *out = NULL;
    if (system && !*system)
        system = NULL;
    if (t->kind == CHAT_TMPL_FAMILY)
        return chat_render_opts(t->style, t->text, t->len, system, user,
                                &(struct chat_opts){.no_thinking = no_think}, out);
    struct chat_message msgs[2];
    int64_t n = 0;
    if (system)
        msgs[n++] = (struct chat_message){"system", system};
    msgs[n++] = (struct chat_message){"user", user};
    int st = render(t, msgs, n, no_think, out);
    /* the tokenizer adds BOS itself: a template's bos_token would double it */
    size_t k = t->bos ? strlen(t->bos) : 0;
    if (st == IG_OK && t->strip_bos && k && !strncmp(*out, t->bos, k))
        memmove(*out, *out + k, strlen(*out + k) + 1);
    return st;
}

int chat_tmpl_next(const struct chat_tmpl *t, const char *system, const char *user,
                   bool no_think, const char *closing, char **out)
{
    *out = NULL;
    if (system && !*system)
        system = NULL;
    if (t->kind == CHAT_TMPL_FAMILY)
        return chat_render_next(t->style, user, closing != NULL, t->bos, out);
    struct chat_message msgs[4];
    int64_t n = 0;
    if (system)
        msgs[n++] = (struct chat_message){"system", system};
    msgs[n++] = (struct chat_message){"user", "."};
    msgs[n++] = (struct chat_message){"assistant", ANSWER_MARK};
    msgs[n++] = (struct chat_message){"user", user};
    char *full;
    int st = render(t, msgs, n, no_think, &full);
    if (st != IG_OK)
        return st;
    const char *at = strstr(full, ANSWER_MARK);
    if (!at || strstr(at + 1, ANSWER_MARK)) {
        free(full);
        return ig_error(IG_E_USAGE, "%s does not write the assistant's answer once in a "
                        "conversation: a chat cannot continue from a saved cache with it",
                        t->name);
    }
    const char *tail = at + sizeof ANSWER_MARK - 1;
    /* the model's end-of-turn token is already in the cache */
    if (closing && *closing && !strncmp(tail, closing, strlen(closing)))
        tail += strlen(closing);
    *out = strdup(tail);
    free(full);
    return *out ? IG_OK : ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
}

int chat_tmpl_next_answer(const struct chat_tmpl *t, const char *system, const char *answer,
                          const char *user, bool no_think, char **out)
{
    *out = NULL;
    if (system && !*system)
        system = NULL;
    if (t->kind == CHAT_TMPL_FAMILY)
        return ig_error(IG_E_USAGE, "the %s family renderer cannot write an answer back",
                        chat_style_name(t->style));
    struct chat_message msgs[4];
    int64_t n = 0;
    if (system)
        msgs[n++] = (struct chat_message){"system", system};
    msgs[n++] = (struct chat_message){"user", "."};
    char *start = NULL, *full = NULL;
    int st = render(t, msgs, n, no_think, &start);
    msgs[n++] = (struct chat_message){"assistant", answer};
    msgs[n++] = (struct chat_message){"user", user};
    if (st == IG_OK)
        st = render(t, msgs, n, no_think, &full);
    size_t k = start ? strlen(start) : 0;
    if (st == IG_OK && strncmp(full, start, k))
        st = ig_error(IG_E_USAGE, "%s writes a conversation's start otherwise once an answer "
                      "follows: the chat cannot go on from its cache", t->name);
    if (st == IG_OK && !(*out = strdup(full + k)))
        st = ig_error(IG_E_NOMEM, "out of memory rendering the chat prompt");
    free(start);
    free(full);
    return st;
}
