/* grammar/strbuf.c: the growable string the JSON-schema converter writes its
 * GBNF into (schema.c, schema_regex.c; grammar/internal.h). Covered by
 * tests/grammar/test_schema_bounds.py and test_grammar_py.py. */
#include "grammar/internal.h"

#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gr_str_putn(struct gr_str *b, const char *s, size_t n)
{
    if (b->nomem)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->nomem = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void gr_str_puts(struct gr_str *b, const char *s)
{
    gr_str_putn(b, s, strlen(s));
}

void gr_str_printf(struct gr_str *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    IG_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    gr_str_putn(b, tmp, (size_t)n);
}
