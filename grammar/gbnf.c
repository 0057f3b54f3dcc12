/* grammar/gbnf.c: GBNF text -> rules, with llama.cpp's syntax and meaning
 * (docs/grammar.md is the reference): rules `name ::= alternatives`, one per
 * line (newlines continue a rule inside parentheses and after `|`),
 * sequences, `( )`, string literals and character classes with llama.cpp's
 * escapes, `.`, the repetitions `* + ? {m} {m,} {m,n}` rewritten as llama.cpp
 * rewrites them (S{m,n} = S..S (m times) then S'(n-m), S'(k) ::= S S'(k-1) |),
 * and `#` comments. Every problem is one line SOURCE:LINE:COLUMN. Whether the
 * rules make sense together (defined, a root, no left recursion) is
 * check.c's job.
 * Covered by tests/grammar/test_grammar.c and test_grammar_py.py; fuzzed by
 * tests/fuzz/fuzz_grammar.c. */
#include "grammar/internal.h"

#include "core/status.h"
#include "core/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const char *s;
    size_t len, pos;
    struct gr_builder *b;
    int depth;          /* parentheses open */
    int32_t *slots;     /* user rule name -> rule index, open addressing, -1 = empty */
    int64_t slot_mask;
    int64_t n_named;
    /* the last position line_col counted to: positions mostly grow, and
     * counting from the start each time made a grammar of N rules N^2 */
    size_t lc_at;
    int lc_line, lc_col;
};

/* ---- positions and errors -------------------------------------------------- */

/* 1-based line and column (in characters) of byte offset `at`, counted on
 * from the last position asked for when it is not past `at`. */
static void line_col(struct parser *p, size_t at, int *line, int *col)
{
    size_t i = 0;
    int l = 1, c = 1;
    if (p->lc_line && p->lc_at <= at)
        i = p->lc_at, l = p->lc_line, c = p->lc_col;
    for (; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    p->lc_at = i, p->lc_line = l, p->lc_col = c;
    *line = l;
    *col = c;
}

static int perr(struct parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int perr(struct parser *p, size_t at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(p, at, &line, &col);
    return ig_error(IG_E_USAGE, "%s:%d:%d: %s", p->b->source, line, col, msg);
}

static int nomem(void) { return ig_error(IG_E_NOMEM, "grammar: out of memory"); }

/* The byte at pos + k, or 0 past the end (the text holds no NUL). */
static char peek(const struct parser *p, size_t k)
{
    return p->pos + k < p->len ? p->s[p->pos + k] : '\0';
}

/* A character for messages: printable ASCII as is, else its code. */
static const char *show(char c, char *buf)
{
    unsigned char u = (unsigned char)c;
    if (u == 0)
        snprintf(buf, 16, "the end");
    else if (u == '\n')
        snprintf(buf, 16, "a newline");
    else if (u >= 0x20 && u < 0x7F)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", u);
    return buf;
}

/* ---- lexical pieces ---------------------------------------------------------- */

static bool is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(struct parser *p, bool newline_ok)
{
    for (;;) {
        char c = peek(p, 0);
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\r' && p->s[p->pos] != '\n')
                p->pos++;
        } else {
            return;
        }
    }
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int parse_char(struct parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    char c = peek(p, 0);
    if (c != '\\') {
        size_t n = ig_utf8_char_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
        IG_ASSERT(n > 0); /* the text was validated whole */
        const unsigned char *u = (const unsigned char *)p->s + p->pos;
        uint32_t v = n == 1 ? u[0] : n == 2 ? u[0] & 0x1Fu : n == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
        for (size_t i = 1; i < n; i++)
            v = v << 6 | (u[i] & 0x3Fu);
        *cp = v;
        p->pos += n;
        return IG_OK;
    }
    char e = peek(p, 1);
    int digits = 0;
    switch (e) {
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    case 't': *cp = '\t'; p->pos += 2; return IG_OK;
    case 'r': *cp = '\r'; p->pos += 2; return IG_OK;
    case 'n': *cp = '\n'; p->pos += 2; return IG_OK;
    case '\\': case '"': case '[': case ']': case '-':
        *cp = (unsigned char)e;
        p->pos += 2;
        return IG_OK;
    default: {
        char buf[16];
        return perr(p, at, "unknown escape: '\\' followed by %s (known: \\x \\u \\U \\t \\r "
                    "\\n \\\\ \\\" \\[ \\] \\-)", show(e, buf));
    }
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = hex_value(peek(p, 2 + (size_t)i));
        if (h < 0)
            return perr(p, at, "\\%c needs %d hex digits", e, digits);
        v = v << 4 | (uint32_t)h;
    }
    if (v > 0x10FFFF)
        return perr(p, at, "\\U%08X is beyond U+10FFFF, the last code point", v);
    if (v >= 0xD800 && v <= 0xDFFF)
        return perr(p, at, "\\u%04X is a surrogate, which UTF-8 cannot encode", v);
    *cp = v;
    p->pos += 2 + (size_t)digits;
    return IG_OK;
}

/* ---- rule names ---------------------------------------------------------------- */

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static int grow_names(struct parser *p)
{
    int64_t n = p->slot_mask ? 2 * (p->slot_mask + 1) : 64;
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    if (!slots)
        return nomem();
    memset(slots, 0xff, (size_t)n * sizeof *slots);
    for (int64_t i = 0; i <= p->slot_mask && p->slots; i++) {
        int32_t r = p->slots[i];
        if (r < 0)
            continue;
        const char *nm = p->b->rules[r].name;
        uint64_t j = name_hash(nm, strlen(nm)) & (uint64_t)(n - 1);
        while (slots[j] >= 0)
            j = (j + 1) & (uint64_t)(n - 1);
        slots[j] = r;
    }
    free(p->slots);
    p->slots = slots;
    p->slot_mask = n - 1;
    return IG_OK;
}

/* The rule named s[0..n), created (undefined) on first mention. */
static int lookup_rule(struct parser *p, const char *s, size_t n, int32_t *out)
{
    if ((p->n_named + 1) * 2 > p->slot_mask + 1 && grow_names(p) != IG_OK)
        return IG_E_NOMEM;
    uint64_t j = name_hash(s, n) & (uint64_t)p->slot_mask;
    for (; p->slots[j] >= 0; j = (j + 1) & (uint64_t)p->slot_mask) {
        const char *nm = p->b->rules[p->slots[j]].name;
        if (strlen(nm) == n && !memcmp(nm, s, n)) {
            *out = p->slots[j];
            return IG_OK;
        }
    }
    int32_t r = gr_builder_add_rule(p->b, s, n, GR_RULE_USER);
    if (r < 0)
        return nomem();
    p->slots[j] = r;
    p->n_named++;
    *out = r;
    return IG_OK;
}

/* A synthesized rule named after the user rule it belongs to, at offset at. */
static int new_rule(struct parser *p, int32_t owner, enum gr_rule_kind kind, size_t at,
                    int32_t *out)
{
    char name[96];
    snprintf(name, sizeof name, "%.64s_%lld", p->b->rules[owner].name, (long long)p->b->n_rules);
    int32_t r = gr_builder_add_rule(p->b, name, strlen(name), kind);
    if (r < 0)
        return nomem();
    struct gr_rule *rule = &p->b->rules[r];
    rule->defined = true;
    line_col(p, at, &rule->line, &rule->col);
    *out = r;
    return IG_OK;
}

/* ---- sequences ------------------------------------------------------------------- */

static int parse_alternates(struct parser *p, int32_t owner, int32_t r, bool nested);

static int push(struct parser *p, int32_t r, uint32_t e) { return gr_builder_push(p->b, r, e); }

/* The UTF-8 bytes of one character as single-byte sets. */
static int push_char(struct parser *p, int32_t r, uint32_t cp)
{
    uint8_t bytes[4];
    int n = gr_utf8_encode(cp, bytes);
    for (int i = 0; i < n; i++) {
        struct gr_byteset s = {{0}};
        gr_byteset_add_range(&s, bytes[i], bytes[i]);
        int32_t set = gr_builder_set(p->b, &s);
        if (set < 0)
            return nomem();
        int st = push(p, r, GR_ELEM(GR_BYTES, set));
        if (st != IG_OK)
            return st;
    }
    return IG_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const struct gr_cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges ranges in place, then complements them over
 * [0, U+10FFFF] when negate; returns the new count (the buffer holds one
 * more than n for the complement). */
static int64_t normalize_ranges(struct gr_cprange *v, int64_t n, bool negate)
{
    qsort(v, (size_t)n, sizeof *v, cmp_range);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (k && v[i].lo <= v[k - 1].hi + 1) {
            if (v[i].hi > v[k - 1].hi)
                v[k - 1].hi = v[i].hi;
        } else {
            v[k++] = v[i];
        }
    }
    if (!negate)
        return k;
    int64_t m = 0;
    uint32_t next = 0;
    bool full = false;
    for (int64_t i = 0; i < k; i++) {
        struct gr_cprange cur = v[i];
        if (cur.lo > next)
            v[m++] = (struct gr_cprange){next, cur.lo - 1};
        if (cur.hi >= 0x10FFFF) {
            full = true;
            break;
        }
        next = cur.hi + 1;
    }
    if (!full)
        v[m++] = (struct gr_cprange){next, 0x10FFFF};
    return m;
}

/* [...] or [^...] at p->pos. */
static int parse_class(struct parser *p, int32_t r)
{
    size_t open = p->pos++;
    bool negate = peek(p, 0) == '^';
    if (negate)
        p->pos++;
    struct gr_cprange *v = NULL;
    int64_t n = 0, cap = 0;
    int st = IG_OK;
    while (peek(p, 0) != ']') {
        if (p->pos >= p->len) {
            st = perr(p, open, "character class is not closed with ']'");
            goto done;
        }
        size_t at = p->pos;
        uint32_t lo, hi;
        if ((st = parse_char(p, &lo)) != IG_OK)
            goto done;
        hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && p->pos + 1 < p->len) {
            p->pos++;
            if ((st = parse_char(p, &hi)) != IG_OK)
                goto done;
            if (hi < lo) {
                st = perr(p, at, "range U+%04X-U+%04X runs backwards", lo, hi);
                goto done;
            }
        }
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 8;
            struct gr_cprange *q = realloc(v, (size_t)cap * sizeof *q);
            if (!q) {
                st = nomem();
                goto done;
            }
            v = q;
        }
        v[n++] = (struct gr_cprange){lo, hi};
    }
    p->pos++;
    if (!v && !(v = malloc(2 * sizeof *v))) {
        st = nomem();
        goto done;
    }
    n = normalize_ranges(v, n, negate);
    st = gr_utf8_class(p->b, r, v, n, p->b->rules[r].name);
done:
    free(v);
    return st;
}

/* Rewrites the item elems[start..end) of rule r as item{min,max} (max < 0:
 * unbounded), llama.cpp's way. */
static int repeat(struct parser *p, int32_t owner, int32_t r, int64_t start, uint64_t min,
                  int64_t max, size_t at)
{
    struct gr_rule *rule = &p->b->rules[r];
    int64_t n = rule->n_elems - start;
    uint32_t *item = malloc((size_t)(n ? n : 1) * sizeof *item);
    if (!item)
        return nomem();
    if (n)
        memcpy(item, rule->elems + start, (size_t)n * sizeof *item);
    int st = IG_OK;
    if (min == 0) {
        p->b->total_elems -= n;
        p->b->rules[r].n_elems = start;
    }
    for (uint64_t k = 1; k < min && st == IG_OK; k++)
        for (int64_t i = 0; i < n && st == IG_OK; i++)
            st = push(p, r, item[i]);
    int32_t last = -1;
    int64_t n_opt = max < 0 ? 1 : max - (int64_t)min;
    for (int64_t k = 0; k < n_opt && st == IG_OK; k++) {
        int32_t rec;
        if ((st = new_rule(p, owner, GR_RULE_REPEAT, at, &rec)) != IG_OK)
            break;
        for (int64_t i = 0; i < n && st == IG_OK; i++)
            st = push(p, rec, item[i]);
        if (st == IG_OK && (max < 0 || k > 0))
            st = push(p, rec, GR_ELEM(GR_RULE, max < 0 ? rec : last));
        if (st == IG_OK)
            st = push(p, rec, GR_ELEM(GR_ALT, 0));
        if (st == IG_OK)
            st = push(p, rec, GR_ELEM(GR_END, 0));
        last = rec;
    }
    if (st == IG_OK && last >= 0)
        st = push(p, r, GR_ELEM(GR_RULE, last));
    free(item);
    return st;
}

/* A decimal count inside {...}, at most GR_MAX_REPEAT. */
static int parse_count(struct parser *p, uint64_t *out)
{
    size_t at = p->pos;
    uint64_t v = 0;
    if (peek(p, 0) < '0' || peek(p, 0) > '9') {
        char buf[16];
        return perr(p, at, "expected a number in the repetition, got %s", show(peek(p, 0), buf));
    }
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        v = v * 10 + (uint64_t)(peek(p, 0) - '0');
        if (v > GR_MAX_REPEAT)
            return perr(p, at, "repetition count above %d (llama.cpp's limit)", GR_MAX_REPEAT);
        p->pos++;
    }
    *out = v;
    return IG_OK;
}

/* {m}, {m,} or {m,n} at p->pos. */
static int parse_braces(struct parser *p, bool nested, uint64_t *min, int64_t *max)
{
    size_t open = p->pos++;
    int st;
    skip_space(p, nested);
    if ((st = parse_count(p, min)) != IG_OK)
        return st;
    skip_space(p, nested);
    *max = (int64_t)*min;
    if (peek(p, 0) == ',') {
        p->pos++;
        skip_space(p, nested);
        *max = -1;
        if (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
            uint64_t m;
            if ((st = parse_count(p, &m)) != IG_OK)
                return st;
            *max = (int64_t)m;
            skip_space(p, nested);
        }
    }
    if (peek(p, 0) != '}') {
        char buf[16];
        return perr(p, p->pos, "expected ',' or '}' in the repetition, got %s",
                    show(peek(p, 0), buf));
    }
    p->pos++;
    if (*max >= 0 && (uint64_t)*max < *min)
        return perr(p, open, "repetition {%llu,%lld}: the minimum is above the maximum",
                    (unsigned long long)*min, (long long)*max);
    return IG_OK;
}

/* Items until something that is not one; appends to rule r. */
static int parse_sequence(struct parser *p, int32_t owner, int32_t r, bool nested)
{
    int64_t item_start = -1; /* where the last item's elements begin */
    int st = IG_OK;
    for (;;) {
        char c = peek(p, 0);
        size_t at = p->pos;
        if (c == '"') {
            item_start = p->b->rules[r].n_elems;
            p->pos++;
            while (peek(p, 0) != '"') {
                if (p->pos >= p->len)
                    return perr(p, at, "string literal is not closed with '\"'");
                uint32_t cp;
                if ((st = parse_char(p, &cp)) != IG_OK || (st = push_char(p, r, cp)) != IG_OK)
                    return st;
            }
            p->pos++;
            skip_space(p, nested);
        } else if (c == '[') {
            item_start = p->b->rules[r].n_elems;
            if ((st = parse_class(p, r)) != IG_OK)
                return st;
            skip_space(p, nested);
        } else if (c == '.') {
            item_start = p->b->rules[r].n_elems;
            p->pos++;
            struct gr_cprange any = {0, 0x10FFFF};
            if ((st = gr_utf8_class(p->b, r, &any, 1, p->b->rules[r].name)) != IG_OK)
                return st;
            skip_space(p, nested);
        } else if (is_word_char(c)) {
            size_t end = p->pos;
            while (end < p->len && is_word_char(p->s[end]))
                end++;
            int32_t ref;
            if ((st = lookup_rule(p, p->s + p->pos, end - p->pos, &ref)) != IG_OK)
                return st;
            struct gr_rule *target = &p->b->rules[ref];
            if (!target->use_line)
                line_col(p, at, &target->use_line, &target->use_col);
            item_start = p->b->rules[r].n_elems;
            if ((st = push(p, r, GR_ELEM(GR_RULE, ref))) != IG_OK)
                return st;
            p->pos = end;
            skip_space(p, nested);
        } else if (c == '(') {
            if (p->depth >= GR_MAX_NESTING)
                return perr(p, at, "parentheses nested more than %d deep", GR_MAX_NESTING);
            p->pos++;
            skip_space(p, true);
            int32_t g;
            if ((st = new_rule(p, owner, GR_RULE_GROUP, at, &g)) != IG_OK)
                return st;
            p->depth++;
            st = parse_alternates(p, owner, g, true);
            p->depth--;
            if (st != IG_OK)
                return st;
            if (peek(p, 0) != ')') {
                char buf[16];
                int line, col;
                line_col(p, at, &line, &col);
                return perr(p, p->pos, "expected ')' to close the '(' at %d:%d, got %s", line,
                            col, show(peek(p, 0), buf));
            }
            p->pos++;
            item_start = p->b->rules[r].n_elems;
            if ((st = push(p, r, GR_ELEM(GR_RULE, g))) != IG_OK)
                return st;
            skip_space(p, nested);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (item_start < 0)
                return perr(p, at, "'%c' has nothing before it to repeat", c);
            uint64_t min;
            int64_t max;
            if (c == '{') {
                if ((st = parse_braces(p, nested, &min, &max)) != IG_OK)
                    return st;
            } else {
                p->pos++;
                min = c == '+';
                max = c == '?' ? 1 : -1;
            }
            skip_space(p, nested);
            if ((st = repeat(p, owner, r, item_start, min, max, at)) != IG_OK)
                return st;
        } else if (c == '<' || c == '!') {
            return perr(p, at, "token references (<...>, !<...>) are not supported; write the "
                        "text as a string literal");
        } else {
            return IG_OK;
        }
    }
}

static int parse_alternates(struct parser *p, int32_t owner, int32_t r, bool nested)
{
    int st = parse_sequence(p, owner, r, nested);
    while (st == IG_OK && peek(p, 0) == '|') {
        if ((st = push(p, r, GR_ELEM(GR_ALT, 0))) != IG_OK)
            return st;
        p->pos++;
        skip_space(p, true);
        st = parse_sequence(p, owner, r, nested);
    }
    return st == IG_OK ? push(p, r, GR_ELEM(GR_END, 0)) : st;
}

/* name ::= alternatives, then a newline or the end. */
static int parse_rule(struct parser *p)
{
    size_t at = p->pos, end = p->pos;
    char buf[16];
    while (end < p->len && is_word_char(p->s[end]))
        end++;
    if (end == at)
        return perr(p, at, "expected a rule name, got %s", show(peek(p, 0), buf));
    int32_t r;
    int st = lookup_rule(p, p->s + at, end - at, &r);
    if (st != IG_OK)
        return st;
    if (p->b->rules[r].defined)
        return perr(p, at, "rule '%.*s' is defined twice (first at %d:%d)", (int)(end - at),
                    p->s + at, p->b->rules[r].line, p->b->rules[r].col);
    p->b->rules[r].defined = true;
    line_col(p, at, &p->b->rules[r].line, &p->b->rules[r].col);
    p->pos = end;
    skip_space(p, false);
    if (peek(p, 0) != ':' || peek(p, 1) != ':' || peek(p, 2) != '=')
        return perr(p, p->pos, "expected '::=' after the rule name, got %s", show(peek(p, 0), buf));
    p->pos += 3;
    skip_space(p, true);
    if ((st = parse_alternates(p, r, r, false)) != IG_OK)
        return st;
    char c = peek(p, 0);
    if (c == '\r')
        p->pos += peek(p, 1) == '\n' ? 2 : 1;
    else if (c == '\n')
        p->pos++;
    else if (p->pos < p->len)
        return perr(p, p->pos, "unexpected %s (a rule ends at the end of its line)",
                    show(c, buf));
    skip_space(p, true);
    return IG_OK;
}

int gr_parse_gbnf(const char *text, size_t len, const char *source, struct gr_builder *b)
{
    struct parser p = {.s = text, .len = len, .b = b};
    b->source = source;
    for (size_t i = 0; i < len;) { /* whole UTF-8, no NUL: the parser relies on it */
        size_t n = ig_utf8_char_len((const unsigned char *)text + i, len - i);
        if (text[i] == '\0')
            return perr(&p, i, "a NUL byte");
        if (n == 0)
            return perr(&p, i, "invalid UTF-8 (byte 0x%02x)", (unsigned char)text[i]);
        i += n;
    }
    skip_space(&p, true);
    int st = IG_OK;
    while (st == IG_OK && p.pos < p.len)
        st = parse_rule(&p);
    free(p.slots);
    return st;
}

int grammar_from_gbnf(const char *text, size_t len, const char *source, struct grammar **out)
{
    *out = NULL;
    struct gr_builder b = {0};
    int st = gr_parse_gbnf(text, len, source, &b);
    if (st != IG_OK) {
        gr_builder_free(&b);
        return st;
    }
    return gr_finalize(&b, out);
}
