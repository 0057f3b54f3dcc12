/* tokenizer/jinja.h: renders a chat template written in Jinja (a model's
 * tokenizer.chat_template, or --chat-template-file) for a list of messages,
 * as Hugging Face transformers renders it: trim_blocks and lstrip_blocks on,
 * one trailing newline of the source dropped, the loop controls
 * (break/continue) on, `tojson` as json.dumps (ensure_ascii off, keys in
 * their order), the objects immutable except a namespace()'s attributes.
 *
 * The subset is what published chat templates use (docs/cli.md, "Chat
 * templates"): text, {{ }}, {% %}, {# #} with the `-` whitespace controls;
 * for (with `if`, `else`, `loop.*`, tuple targets), if/elif/else, set
 * (names, namespace attributes, blocks), macro, break/continue,
 * generation; literals, lists, dicts, attributes, subscripts, slices,
 * calls, filters, `is` tests, the ternary, and/or/not, in, comparisons,
 * + - * / // % ~; the globals range, namespace, raise_exception. A construct
 * outside it is refused with one line naming it and its line:col.
 *
 * Split in four: jinja_lex.c (source → tokens), jinja_parse.c (tokens →
 * tree), jinja_eval.c (tree → text, with the values of jinja_value.c) and
 * jinja_filters.c (filters, tests, methods).
 * Covered by tests/unit/test_jinja.py (against jinja2) and
 * tests/fuzz/fuzz_jinja.c. */
#ifndef IGNITE_TOKENIZER_JINJA_H
#define IGNITE_TOKENIZER_JINJA_H

#include "tokenizer/chat_template.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The variables a chat template sees. */
struct jinja_input {
    const struct chat_message *messages;
    int64_t n_messages;
    bool add_generation_prompt;
    const char *bos_token; /* NULL: "" */
    const char *eos_token; /* NULL: "" */
    int enable_thinking;   /* -1: not defined, else false/true (Qwen3's switch) */
};

/* Renders the template `src` (len bytes) with `in`. `name` names the
 * template in messages ("chat template 'FILE'"). On IG_OK *out is a
 * NUL-terminated string the caller frees. Returns IG_E_USAGE with one line
 * "NAME:LINE:COL: ..." for a template outside the subset or one that fails
 * (raise_exception's message, an undefined value used), IG_E_NOMEM. */
int jinja_render(const char *src, size_t len, const char *name, const struct jinja_input *in,
                 char **out);

/* Parses only: IG_OK, or the error jinja_render would give for a template
 * that does not parse. */
int jinja_check(const char *src, size_t len, const char *name);

#endif
