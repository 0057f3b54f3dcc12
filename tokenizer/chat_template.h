/* tokenizer/chat_template.h: turns a user message (and an optional system
 * message) into the prompt text a chat model expects.
 *
 * Three renderers: Jinja (tokenizer/jinja.h: the model's template, or a
 * file), llama.cpp's built-ins by name (chat_builtin.c), and, for a model
 * template outside the Jinja subset, the hand-written family formatters
 * below: the template is recognised by its distinctive markers and rendered
 * by the formatter of that family. chat_conv.c (struct chat_tmpl, at the
 * end) runs a conversation's turns through whichever was chosen. The result carries the
 * generation prompt (the assistant header) at the end and never the BOS
 * token: the tokenizer adds BOS as the model's metadata asks. Special-token
 * markers in the result must be encoded as special tokens.
 *
 *   style     recognised by                          system message
 *   chatml    "<|im_start|>"                         its own turn; a default
 *                                                    from the template when
 *                                                    none is given
 *   llama3    "<|start_header_id|>"                  its own turn
 *   llama2    "[INST]" and "<<SYS>>"                 <<SYS>> block in the turn
 *   gemma     "<start_of_turn>"                      first line(s) of the turn
 *   mistral   "[INST]" without "<<SYS>>"             first line(s) of the turn
 *
 * A continued conversation renders only its next turn (chat_render_next),
 * after the answer already in the cache.
                     char **out);

 * llama3 and gemma templates trim the user's message (Jinja's `| trim`),
 * llama2 the turn's whole content (system block and message), and so does
 * the formatter. A ChatML template that reads `enable_thinking`
 * (Qwen3) has a thinking switch: off, the generation prompt ends with an
 * empty "<think>\n\n</think>\n\n" block, as the template writes it.
 *
 * Covered by tests/unit/test_chat_template.c (expected strings) and
 * tests/unit/test_chat_jinja.py (against jinja2 renders of the templates). */
#ifndef IGNITE_TOKENIZER_CHAT_TEMPLATE_H
#define IGNITE_TOKENIZER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum chat_style {
    CHAT_UNKNOWN = 0,
    CHAT_CHATML,
    CHAT_LLAMA3,
    CHAT_LLAMA2,
    CHAT_GEMMA,
    CHAT_MISTRAL,
};

/* The family of a template text (len bytes, need not be NUL-terminated), or
 * CHAT_UNKNOWN. A NULL or empty template is unknown. */
enum chat_style chat_detect(const char *tmpl, size_t len);

/* "chatml", "llama3", ... or "unknown". */
const char *chat_style_name(enum chat_style style);

/* Renders one user turn plus the generation prompt. `tmpl` is the model's
 * template (used by chatml for its default system message; may be NULL).
 * `system` may be NULL for none. On IG_OK *out is a NUL-terminated string
 * the caller frees. Returns IG_E_MODEL for CHAT_UNKNOWN (one line listing
 * the known families: the model's template is unsupported), IG_E_NOMEM when
 * out of memory. */
int chat_render(enum chat_style style, const char *tmpl, size_t tmpl_len,
                const char *system, const char *user, char **out);

/* Renders the next user turn of a conversation whose text so far ends with
 * the assistant's answer (a continued chat: the cache holds the earlier
 * turns), plus the generation prompt: exactly what the template renders
 * between that answer's end-of-turn marker and the next answer. `closed`:
 * the answer ended with the model's end-of-turn token (it is in the cache);
 * when false (the answer was cut short: -n, a stop string, Ctrl-C) the
 * family's end-of-turn marker comes first. `bos` is the BOS token's text
 * (NULL: none), written where the family's template puts bos_token inside
 * a conversation (llama2: before every user turn); the result is encoded
 * with special tokens parsed and without adding BOS. The system message
 * belongs to the first turn: there is none here. Returns as chat_render. */
int chat_render_next(enum chat_style style, const char *user, int closed, const char *bos,
                     char **out);

/* Options beyond the messages. */
struct chat_opts {
    int no_thinking; /* turn thinking off (needs chat_has_thinking_switch) */
};

/* True when the template can turn the model's thinking off (Qwen3's
 * enable_thinking). */
int chat_has_thinking_switch(const char *tmpl, size_t len);

/* chat_render with options (NULL: none). Returns as chat_render, and
 * IG_E_USAGE (one line) for no_thinking on a template without the switch. */
int chat_render_opts(enum chat_style style, const char *tmpl, size_t tmpl_len,
                     const char *system, const char *user, const struct chat_opts *opts,
                     char **out);

/* The default system message a ChatML template inserts when none is given,
 * copied into buf (escapes like "\n" decoded). Returns its length, or 0 when
 * the template has none (or it does not fit in cap - 1 bytes). */
size_t chat_default_system(const char *tmpl, size_t len, char *buf, size_t cap);

/* ---- conversations of messages (chat_builtin.c, chat_conv.c) ---- */

struct chat_message {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
};

/* llama.cpp's built-in templates by name (--chat-template NAME). */
bool chat_builtin_known(const char *name);
/* "chatml, llama2, ...": the names, for messages and --help. */
const char *chat_builtin_names(void);
/* Renders n messages as llama.cpp's built-in template `name` does, with
 * the generation prompt when add_ass. *out is malloc'd. IG_OK, IG_E_USAGE
 * (an unknown name: one line listing the known ones), IG_E_NOMEM. */
int chat_builtin_render(const char *name, const struct chat_message *msgs, int64_t n,
                        bool add_ass, char **out);

/* The template a conversation is rendered with. */
enum chat_tmpl_kind {
    CHAT_TMPL_FAMILY,  /* the hand-written family renderer above (style) */
    CHAT_TMPL_BUILTIN, /* llama.cpp's built-in `name` */
    CHAT_TMPL_JINJA,   /* a Jinja template: text, len (tokenizer/jinja.h) */
};

struct chat_tmpl {
    enum chat_tmpl_kind kind;
    enum chat_style style; /* FAMILY */
    const char *name;      /* BUILTIN: its name; JINJA: how messages name it */
    const char *text;      /* JINJA: the source; FAMILY: the model's text (default system) */
    size_t len;
    const char *bos, *eos; /* the BOS/EOS tokens' text, "" when absent */
    bool strip_bos;        /* the tokenizer adds BOS: a leading BOS text is dropped */
};

/* The first turn: the system message (NULL: none) and the user's, with the
 * generation prompt; no_think turns the thinking switch off (Jinja: the
 * template must read enable_thinking). *out is malloc'd. IG_OK,
 * IG_E_USAGE (a template that fails, one line; no_think without a switch),
 * IG_E_MODEL (FAMILY of no known style), IG_E_NOMEM. */
int chat_tmpl_first(const struct chat_tmpl *t, const char *system, const char *user,
                    bool no_think, char **out);

/* The next user turn after an answer kept in the cache: exactly what the
 * template writes between the answer and the next answer. `closing` is the
 * text of the end-of-generation token that closed the answer (NULL: the
 * answer was cut short, the template's own end of turn comes first). A
 * BUILTIN or JINJA template renders [system?, user, assistant A, user
 * `user`] and keeps what follows A (a marker that no template changes);
 * one that drops A is refused. Returns as chat_tmpl_first. */
int chat_tmpl_next(const struct chat_tmpl *t, const char *system, const char *user,
                   bool no_think, const char *closing, char **out);

/* The next user turn after an answer whose tokens in the cache are not the
 * ones the template writes for it (harmony: the model's analysis is dropped
 * from the history, its <|return|> becomes <|end|>): the cache is cut back
 * to where the answer began (after the generation prompt), and this is
 * what follows there: the answer as the template writes it (`answer`, the
 * text the user saw), then the next turn with the generation prompt. Found
 * as the difference between renders of [system?, user] with the generation
 * prompt and [system?, user, assistant `answer`, user `user`]; a template
 * whose first render is not the start of the second is refused. Returns as
 * chat_tmpl_first (IG_E_USAGE for a FAMILY template). */
int chat_tmpl_next_answer(const struct chat_tmpl *t, const char *system, const char *answer,
                          const char *user, bool no_think, char **out);

#endif
