/* core/strbuf.h: the one growable string: text built a piece at a time (the
 * JSON-schema converter's GBNF, the chat templates' prompts, Jinja's output,
 * a harmony answer's channels, the answer run --json and chat keep). Where
 * the text is read into place instead (tok_decode, the line readers) or
 * kept without its NUL (cli/textbuf.c) it is not this. Covered by
 * tests/unit/test_core.c. */
#ifndef IGNITE_CORE_STRBUF_H
#define IGNITE_CORE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

/* A NUL-terminated string that grows, {0} when empty (s NULL until the
 * first byte). A failed allocation keeps what was written and sets failed,
 * and later appends do nothing, so a writer may check once at the end. s is
 * the owner's to free. */
struct ig_str {
    char *s;
    size_t len, cap;
    bool failed;
};

/* Append n bytes of s (any bytes; NUL stays the terminator after them).
 * Returns false when the string has failed, now or before. */
bool ig_str_putn(struct ig_str *b, const char *s, size_t n);
bool ig_str_puts(struct ig_str *b, const char *s);
/* Append the NULL-terminated list of strings after b. */
void ig_str_cat(struct ig_str *b, ...);
/* Append printf's text, any length. */
void ig_str_printf(struct ig_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
