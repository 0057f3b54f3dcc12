/* grammar/schema_regex.c: a JSON schema's `pattern` (an ECMAScript regular
 * expression, the subset llama.cpp's json-schema-to-grammar takes) → a GBNF
 * expression of the JSON string's text between its quotes: literals,
 * `.`, classes `[...]`/`[^...]`, `\d \w \s \D \W \S`, escapes, groups `( )`
 * and `(?: )`, alternation, the quantifiers `* + ? {n} {n,} {n,m}` (lazy
 * ones alike), `^` and `$` at an alternative's ends. A pattern matches
 * anywhere in the string (JSON Schema's search), so an end without its
 * anchor may hold any characters. Every character is written as JSON writes
 * it (`"` `\` and control characters as their short escapes), and the
 * grammar writes only the characters the regex matches: never looser than
 * the pattern. Lookarounds, back-references, `\b`, `\p{}` are refused with
 * their offset. Used by schema.c; covered by tests/grammar/test_schema_bounds.py
 * (patterns judged by jsonschema) and test_schema_suite.py. */
#include "grammar/internal.h"

#include "core/status.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rx {
    const char *s;
    size_t pos, len;
    const char *anychar;
    char *msg;
    size_t cap;
    bool failed;
    int depth;
};

static bool rx_fail(struct rx *r, const char *what)
{
    if (!r->failed)
        snprintf(r->msg, r->cap, "%s at offset %zu", what, r->pos);
    r->failed = true;
    return false;
}

/* ---- sets of code points ---- */

struct range {
    uint32_t lo, hi;
};

struct cset {
    struct range r[64];
    int n;
};

static bool cset_add(struct rx *x, struct cset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == 64)
        return rx_fail(x, "a class of more than 64 ranges");
    s->r[s->n++] = (struct range){lo, hi};
    return true;
}

static int cmp_range(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* sorted, merged */
static void cset_norm(struct cset *s)
{
    qsort(s->r, (size_t)s->n, sizeof s->r[0], cmp_range);
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi)
                s->r[k - 1].hi = s->r[i].hi;
        } else {
            s->r[k++] = s->r[i];
        }
    }
    s->n = k;
}

static void cset_negate(struct cset *s)
{
    cset_norm(s);
    struct cset out = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next)
            out.r[out.n++] = (struct range){next, s->r[i].lo - 1};
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF && out.n < 64)
        out.r[out.n++] = (struct range){next, 0x10FFFF};
    *s = out;
}

static void class_cp(struct ig_str *b, uint32_t cp)
{
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
        ig_str_printf(b, "%c", (char)cp);
    else if (cp < 0x100)
        ig_str_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000)
        ig_str_printf(b, "\\u%04X", (unsigned)cp);
    else
        ig_str_printf(b, "\\U%08X", (unsigned)cp);
}

/* The JSON text of one control character, `"`, `\` or DEL as a GBNF literal. */
static void special_cp(struct ig_str *b, uint32_t cp)
{
    static const char *const short_esc[32] = {
        [8] = "b", [9] = "t", [10] = "n", [12] = "f", [13] = "r"};
    if (cp == '"')
        ig_str_puts(b, "\"\\\\\\\"\"");
    else if (cp == '\\')
        ig_str_puts(b, "\"\\\\\\\\\"");
    else if (cp < 32 && short_esc[cp])
        ig_str_printf(b, "\"\\\\%s\"", short_esc[cp]);
    else
        ig_str_printf(b, "\"\\\\u%04x\"", (unsigned)cp);
}

/* The characters JSON writes as themselves (the rest are escapes). */
static const struct range plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E},
                                     {0x80, 0xD7FF}, {0xE000, 0x10FFFF}};

/* A set as GBNF: a class of its plain characters, the escaped ones as
 * alternatives. false for a set that matches nothing. */
static bool cset_emit(struct ig_str *b, struct cset *s)
{
    cset_norm(s);
    struct ig_str cls = {0};
    int alts = 0;
    ig_str_puts(b, "( ");
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        static const uint32_t escaped[] = {'"', '\\', 0x7F};
        for (uint32_t cp = lo; cp < 0x20 && cp <= hi; cp++) {
            ig_str_puts(b, alts++ ? " | " : "");
            special_cp(b, cp);
        }
        for (int k = 0; k < 3; k++)
            if (escaped[k] >= lo && escaped[k] <= hi) {
                ig_str_puts(b, alts++ ? " | " : "");
                special_cp(b, escaped[k]);
            }
        for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++) {
            uint32_t a = lo > plain[k].lo ? lo : plain[k].lo;
            uint32_t e = hi < plain[k].hi ? hi : plain[k].hi;
            if (a > e)
                continue;
            class_cp(&cls, a);
            if (e > a) {
                ig_str_puts(&cls, "-");
                class_cp(&cls, e);
            }
        }
    }
    if (cls.len) {
        ig_str_puts(b, alts++ ? " | [" : "[");
        ig_str_puts(b, cls.s);
        ig_str_puts(b, "]");
    }
    b->failed |= cls.failed;
    free(cls.s);
    ig_str_puts(b, " )");
    return alts > 0;
}

static void literal_cp(struct ig_str *b, uint32_t cp)
{
    struct cset s = {.n = 1, .r = {{cp, cp}}};
    (void)cset_emit(b, &s); /* one character: never empty */
}

static bool set_emit(struct rx *r, struct ig_str *b, struct cset *s)
{
    return cset_emit(b, s) || rx_fail(r, "a class that matches no character");
}

/* ---- the parser ---- */

static uint32_t utf8_next(struct rx *r)
{
    const unsigned char *s = (const unsigned char *)r->s + r->pos;
    size_t left = r->len - r->pos;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    if ((size_t)n > left)
        n = 1;
    if (n > 1)
        c &= 0xFF >> (n + 1);
    for (int i = 1; i < n; i++)
        c = c << 6 | (s[i] & 0x3F);
    r->pos += (size_t)n;
    return c;
}

static bool class_escape(struct rx *r, char e, struct cset *s)
{
    switch (e) {
    case 'd': case 'D':
        if (!cset_add(r, s, '0', '9'))
            return false;
        break;
    case 'w': case 'W':
        if (!cset_add(r, s, '0', '9') || !cset_add(r, s, 'A', 'Z') || !cset_add(r, s, 'a', 'z') ||
            !cset_add(r, s, '_', '_'))
            return false;
        break;
    case 's': case 'S': {
        static const uint32_t ws[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                         {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                         {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (!cset_add(r, s, ws[i][0], ws[i][1]))
                return false;
        break;
    }
    default: return false;
    }
    if (e >= 'A' && e <= 'Z')
        cset_negate(s);
    return true;
}

/* An escape's single character, or false (refused). */
static bool escape_char(struct rx *r, char e, uint32_t *cp)
{
    switch (e) {
    case 'n': *cp = '\n'; return true;
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0': *cp = 0; return true;
    case 'u': case 'x': {
        int n = e == 'u' ? 4 : 2;
        uint32_t v = 0;
        for (int i = 0; i < n; i++) {
            char h = r->pos < r->len ? r->s[r->pos] : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0)
                return rx_fail(r, "a bad \\x or \\u escape");
            v = v * 16 + (uint32_t)d;
            r->pos++;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return rx_fail(r, "unsupported construct: a surrogate \\u escape");
        *cp = v;
        return true;
    }
    }
    if (strchr("\\/.^$*+?()[]{}|-", e)) {
        *cp = (uint32_t)(unsigned char)e;
        return true;
    }
    char what[64];
    snprintf(what, sizeof what, "unsupported construct '\\%c'", e);
    return rx_fail(r, what);
}

static bool parse_class(struct rx *r, struct cset *s)
{
    bool neg = r->pos < r->len && r->s[r->pos] == '^';
    if (neg)
        r->pos++;
    bool first = true;
    for (;;) {
        if (r->pos >= r->len)
            return rx_fail(r, "a class without its ']'");
        if (r->s[r->pos] == ']' && !first)
            break;
        first = false;
        uint32_t lo;
        if (r->s[r->pos] == '\\') {
            r->pos++;
            if (r->pos >= r->len)
                return rx_fail(r, "a trailing '\\'");
            char e = r->s[r->pos++];
            if (strchr("dDwWsS", e)) {
                struct cset sub = {.n = 0};
                if (!class_escape(r, e, &sub))
                    return false;
                for (int i = 0; i < sub.n; i++)
                    if (!cset_add(r, s, sub.r[i].lo, sub.r[i].hi))
                        return false;
                continue;
            }
            if (e == 'b') {
                lo = '\b';
            } else if (!escape_char(r, e, &lo)) {
                return false;
            }
        } else {
            lo = utf8_next(r);
        }
        uint32_t hi = lo;
        if (r->pos + 1 < r->len && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
            r->pos++;
            if (r->s[r->pos] == '\\') {
                r->pos++;
                if (r->pos >= r->len || !escape_char(r, r->s[r->pos++], &hi))
                    return rx_fail(r, "a bad range in a class");
            } else {
                hi = utf8_next(r);
            }
            if (hi < lo)
                return rx_fail(r, "a class range out of order");
        }
        if (!cset_add(r, s, lo, hi))
            return false;
    }
    r->pos++; /* ] */
    if (neg)
        cset_negate(s);
    return true;
}

static bool parse_alt(struct rx *r, struct ig_str *b, bool top);

/* One atom into b; false on error. */
static bool parse_atom(struct rx *r, struct ig_str *b)
{
    char ch = r->s[r->pos];
    if (ch == '(') {
        r->pos++;
        if (r->pos < r->len && r->s[r->pos] == '?') {
            if (r->pos + 1 < r->len && r->s[r->pos + 1] == ':')
                r->pos += 2;
            else
                return r->pos--, rx_fail(r, "unsupported construct '(?' (lookaround or named "
                                            "group)");
        }
        if (++r->depth > 50)
            return rx_fail(r, "groups nested more than 50 deep");
        ig_str_puts(b, "( ");
        if (!parse_alt(r, b, false))
            return false;
        r->depth--;
        if (r->pos >= r->len || r->s[r->pos] != ')')
            return rx_fail(r, "a group without its ')'");
        r->pos++;
        ig_str_puts(b, " )");
        return true;
    }
    if (ch == '[') {
        r->pos++;
        struct cset s = {.n = 0};
        return parse_class(r, &s) && set_emit(r, b, &s);
    }
    if (ch == '.') {
        r->pos++;
        struct cset s = {.n = 0};
        cset_add(r, &s, '\n', '\n');
        cset_add(r, &s, '\r', '\r');
        cset_add(r, &s, 0x2028, 0x2029);
        cset_negate(&s);
        return set_emit(r, b, &s);
    }
    if (ch == '\\') {
        r->pos++;
        if (r->pos >= r->len)
            return rx_fail(r, "a trailing '\\'");
        char e = r->s[r->pos++];
        if (strchr("dDwWsS", e)) {
            struct cset s = {.n = 0};
            return class_escape(r, e, &s) && set_emit(r, b, &s);
        }
        if (e == 'b' || e == 'B')
            return r->pos -= 2, rx_fail(r, "unsupported construct: a word boundary");
        if (e >= '1' && e <= '9')
            return r->pos -= 2, rx_fail(r, "unsupported construct: a back-reference");
        uint32_t cp;
        if (!escape_char(r, e, &cp))
            return false;
        literal_cp(b, cp);
        return true;
    }
    if (ch == '^' || ch == '$')
        return rx_fail(r, "unsupported construct: an anchor inside the pattern");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return rx_fail(r, "a quantifier with nothing before it");
    if (ch == ')' || ch == ']' || ch == '}')
        return rx_fail(r, "an unbalanced bracket");
    literal_cp(b, utf8_next(r));
    return true;
}

static bool parse_count(struct rx *r, long *v)
{
    size_t start = r->pos;
    *v = 0;
    while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9' && *v <= GR_MAX_REPEAT)
        *v = *v * 10 + (r->s[r->pos++] - '0');
    return r->pos > start;
}

/* A sequence of atoms with quantifiers, up to '|' or ')' or the end (or a
 * final '$' when `top`). */
static bool parse_seq(struct rx *r, struct ig_str *b, bool top, bool *end_anchor)
{
    int n = 0;
    *end_anchor = false;
    while (r->pos < r->len && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
        if (top && r->s[r->pos] == '$' &&
            (r->pos + 1 == r->len || r->s[r->pos + 1] == '|')) {
            r->pos++;
            *end_anchor = true;
            break;
        }
        struct ig_str atom = {0};
        if (!parse_atom(r, &atom)) {
            free(atom.s);
            return false;
        }
        char q = r->pos < r->len ? r->s[r->pos] : 0;
        ig_str_puts(b, n++ ? " " : "");
        ig_str_puts(b, atom.s ? atom.s : "");
        b->failed |= atom.failed;
        free(atom.s);
        if (q == '*' || q == '+' || q == '?') {
            r->pos++;
            ig_str_printf(b, "%c", q);
        } else if (q == '{') {
            size_t save = r->pos++;
            long lo, hi = -1;
            if (!parse_count(r, &lo)) { /* a literal '{' in ECMAScript's annex B: refused */
                r->pos = save;
                return rx_fail(r, "a '{' that is not a count");
            }
            bool comma = r->pos < r->len && r->s[r->pos] == ',';
            if (comma) {
                r->pos++;
                if (r->pos < r->len && r->s[r->pos] != '}' && !parse_count(r, &hi))
                    return rx_fail(r, "a bad count");
            } else {
                hi = lo;
            }
            if (r->pos >= r->len || r->s[r->pos] != '}')
                return rx_fail(r, "a count without its '}'");
            r->pos++;
            if (lo > GR_MAX_REPEAT || hi > GR_MAX_REPEAT)
                return rx_fail(r, "a count above 2000");
            if (hi >= 0 && hi < lo)
                return rx_fail(r, "a count out of order");
            if (hi < 0)
                ig_str_printf(b, "{%ld,}", lo);
            else
                ig_str_printf(b, "{%ld,%ld}", lo, hi);
        } else {
            continue;
        }
        if (r->pos < r->len && r->s[r->pos] == '?') /* lazy: the same language */
            r->pos++;
        if (r->pos < r->len && strchr("*+?{", r->s[r->pos]))
            return rx_fail(r, "unsupported construct: a quantifier after a quantifier");
    }
    if (!n)
        ig_str_puts(b, "\"\"");
    return true;
}

/* Alternatives; at the top level each may carry ^ and $, and an end
 * without its anchor takes any characters. */
static bool parse_alt(struct rx *r, struct ig_str *b, bool top)
{
    int n = 0;
    for (;;) {
        bool start_anchor = false, end_anchor = false;
        if (top && r->pos < r->len && r->s[r->pos] == '^') {
            r->pos++;
            start_anchor = true;
        }
        ig_str_puts(b, n++ ? " | " : "");
        if (top && !start_anchor)
            ig_str_printf(b, "%s* ", r->anychar);
        struct ig_str seq = {0};
        if (!parse_seq(r, &seq, top, &end_anchor)) {
            free(seq.s);
            return false;
        }
        ig_str_puts(b, "( ");
        ig_str_puts(b, seq.s ? seq.s : "");
        ig_str_puts(b, " )");
        b->failed |= seq.failed;
        free(seq.s);
        if (top && !end_anchor)
            ig_str_printf(b, " %s*", r->anychar);
        if (r->pos < r->len && r->s[r->pos] == '|') {
            r->pos++;
            continue;
        }
        break;
    }
    return true;
}

int gr_regex_to_gbnf(const char *re, const char *anychar, char **out, char *msg, size_t cap)
{
    struct rx r = {.s = re, .len = strlen(re), .anychar = anychar, .msg = msg, .cap = cap};
    struct ig_str b = {0};
    *out = NULL;
    bool ok = parse_alt(&r, &b, true);
    if (ok && r.pos < r.len)
        ok = rx_fail(&r, "an unbalanced ')'");
    if (!ok || b.failed) {
        free(b.s);
        if (!ok)
            return IG_E_USAGE;
        snprintf(msg, cap, "out of memory");
        return IG_E_NOMEM;
    }
    *out = b.s;
    return IG_OK;
}
