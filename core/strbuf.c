/* core/strbuf.c: the growable string (core/strbuf.h). Covered by
 * tests/unit/test_core.c. */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL; false (failed set) when there is none. */
static bool reserve(struct ig_str *b, size_t n)
{
    if (b->failed)
        return false;
    if (b->len + n + 1 <= b->cap)
        return true;
    if (n > SIZE_MAX / 2 - b->len - 1) { /* the doubling below would wrap */
        b->failed = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->s = p;
    b->cap = cap;
    return true;
}

bool ig_str_putn(struct ig_str *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return false;
    if (n)
        memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return true;
}

bool ig_str_puts(struct ig_str *b, const char *s)
{
    return ig_str_putn(b, s, strlen(s));
}

void ig_str_cat(struct ig_str *b, ...)
{
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));)
        ig_str_puts(b, s);
    va_end(ap);
}

void ig_str_printf(struct ig_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
