/* tokenizer/jinja_value.c: the values a Jinja render computes with (none,
 * booleans, integers, floats, UTF-8 strings, lists, dicts in insertion
 * order, namespaces, macros, functions) in one arena per render, and how
 * they print: Python's str() and repr() (`{{ [1, 'a'] }}` is "[1, 'a']") and
 * json.dumps (`tojson`). Leaves operators and filters to jinja_eval.c.
 * Covered by tests/unit/test_jinja.py. */
#include "tokenizer/jinja_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jj_chunk {
    struct jj_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jj_alloc(struct jj_arena *a, size_t n)
{
    if (a->failed)
        return NULL;
    n = (n + 15) & ~(size_t)15;
    struct jj_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->limit && (cap > a->limit || a->total > a->limit - cap)) {
            a->failed = a->over = true;
            return NULL;
        }
        a->total += cap;
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(struct jj_arena *a, const char *s, size_t n)
{
    char *p = jj_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void jj_arena_free(struct jj_arena *a)
{
    for (struct jj_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}

struct jj_value *jj_new(struct jj_arena *a, enum jj_type t)
{
    struct jj_value *v = jj_alloc(a, sizeof *v);
    if (v)
        v->type = t;
    return v;
}

struct jj_value *jj_str(struct jj_arena *a, const char *s, size_t len)
{
    struct jj_value *v = jj_new(a, JV_STRING);
    if (v && !(v->s = jj_strndup(a, s, len)))
        return NULL;
    if (v)
        v->len = len;
    return v;
}

struct jj_value *jj_int(struct jj_arena *a, int64_t i)
{
    struct jj_value *v = jj_new(a, JV_INT);
    if (v)
        v->i = i;
    return v;
}

struct jj_value *jj_bool(struct jj_arena *a, bool b)
{
    struct jj_value *v = jj_new(a, JV_BOOL);
    if (v)
        v->b = b;
    return v;
}

static bool grow(struct jj_arena *a, struct jj_value *v, int64_t need)
{
    if (need <= v->cap)
        return true;
    int64_t cap = v->cap ? v->cap * 2 : 8;
    while (cap < need)
        cap *= 2;
    struct jj_value **items = jj_alloc(a, (size_t)cap * sizeof *items);
    if (!items)
        return false;
    if (v->n)
        memcpy(items, v->items, (size_t)v->n * sizeof *items);
    v->items = items;
    v->cap = cap;
    return true;
}

bool jj_list_push(struct jj_arena *a, struct jj_value *list, struct jj_value *v)
{
    if (!v || !grow(a, list, list->n + 1))
        return false;
    list->items[list->n++] = v;
    return true;
}

bool jj_dict_set(struct jj_arena *a, struct jj_value *d, struct jj_value *key,
                 struct jj_value *v)
{
    if (!key || !v)
        return false;
    for (int64_t i = 0; i < d->n; i += 2)
        if (jj_equal(d->items[i], key)) {
            d->items[i + 1] = v;
            return true;
        }
    if (!grow(a, d, d->n + 2))
        return false;
    d->items[d->n++] = key;
    d->items[d->n++] = v;
    return true;
}

struct jj_value *jj_dict_get(const struct jj_value *d, const struct jj_value *key)
{
    for (int64_t i = 0; i < d->n; i += 2)
        if (jj_equal(d->items[i], key))
            return d->items[i + 1];
    return NULL;
}

struct jj_value *jj_dict_get_s(const struct jj_value *d, const char *key)
{
    size_t n = strlen(key);
    for (int64_t i = 0; i < d->n; i += 2) {
        const struct jj_value *k = d->items[i];
        if (k->type == JV_STRING && k->len == n && !memcmp(k->s, key, n))
            return d->items[i + 1];
    }
    return NULL;
}

bool jj_truthy(const struct jj_value *v)
{
    switch (v->type) {
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0;
    case JV_STRING: return v->len > 0;
    case JV_LIST: case JV_DICT: return v->n > 0;
    case JV_NAMESPACE: case JV_MACRO: case JV_FUNC: return true;
    default: return false;
    }
}

static bool is_num(const struct jj_value *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}

static double num(const struct jj_value *v)
{
    return v->type == JV_FLOAT ? v->f : v->type == JV_INT ? (double)v->i : (double)v->b;
}

bool jj_equal(const struct jj_value *x, const struct jj_value *y)
{
    if (is_num(x) && is_num(y)) {
        if (x->type != JV_FLOAT && y->type != JV_FLOAT)
            return (x->type == JV_INT ? x->i : x->b) == (y->type == JV_INT ? y->i : y->b);
        return num(x) == num(y);
    }
    if (x->type != y->type)
        return false;
    switch (x->type) {
    case JV_UNDEFINED: case JV_NONE: return true;
    case JV_STRING: return x->len == y->len && !memcmp(x->s, y->s, x->len);
    case JV_LIST:
        if (x->n != y->n)
            return false;
        for (int64_t i = 0; i < x->n; i++)
            if (!jj_equal(x->items[i], y->items[i]))
                return false;
        return true;
    case JV_DICT:
        if (x->n != y->n)
            return false;
        for (int64_t i = 0; i < x->n; i += 2) {
            const struct jj_value *w = jj_dict_get(y, x->items[i]);
            if (!w || !jj_equal(x->items[i + 1], w))
                return false;
        }
        return true;
    default: return x == y;
    }
}

/* Python's repr() of a float: the shortest text that reads back the same. */
static void add_float(struct ig_str *b, double f, bool json)
{
    char t[40];
    if (isnan(f)) {
        ig_str_puts(b, json ? "NaN" : "nan");
        return;
    }
    if (isinf(f)) {
        ig_str_puts(b, f > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, f);
        if (strtod(t, NULL) == f)
            break;
    }
    /* Python writes exponents from 1e16 and below 1e-4 as 1e+16, 1e-05 */
    char *e = strchr(t, 'e');
    if (e) {
        int ex = atoi(e + 1);
        char x[8];
        snprintf(x, sizeof x, "e%c%02d", ex < 0 ? '-' : '+', (ex < 0 ? -ex : ex) % 1000);
        ig_str_putn(b, t, (size_t)(e - t));
        ig_str_puts(b, x);
        return;
    }
    ig_str_puts(b, t);
    if (!strchr(t, '.'))
        ig_str_puts(b, ".0");
}

/* The code point at s when Python's repr() escapes it (separators other
 * than ' ', C1 controls, format characters; *k its length), else 0. */
static uint32_t unprintable(const char *str, size_t n, size_t *k)
{
    const unsigned char *s = (const unsigned char *)str;
    uint32_t cp;
    if ((s[0] & 0xE0) == 0xC0 && n >= 2) {
        cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        *k = 2;
    } else if ((s[0] & 0xF0) == 0xE0 && n >= 3) {
        cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        *k = 3;
    } else {
        return 0;
    }
    bool esc = (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
               (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
               (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF;
    return esc ? cp : 0;
}

/* repr() of a string: single quotes unless it holds ' and no ". */
static void add_repr_str(struct ig_str *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    ig_str_putn(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char t[8];
        uint32_t cp;
        size_t k;
        if (c == '\\')
            ig_str_puts(b, "\\\\");
        else if (c == (unsigned char)q)
            (t[0] = '\\', t[1] = (char)c, ig_str_putn(b, t, 2));
        else if (c == '\n')
            ig_str_puts(b, "\\n");
        else if (c == '\r')
            ig_str_puts(b, "\\r");
        else if (c == '\t')
            ig_str_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F)
            (snprintf(t, sizeof t, "\\x%02x", c), ig_str_puts(b, t));
        else if (c >= 0x80 && (cp = unprintable(s + i, n - i, &k))) {
            char e[12];
            snprintf(e, sizeof e, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x",
                     (unsigned)cp);
            ig_str_puts(b, e);
            i += k - 1;
        } else
            ig_str_putn(b, (const char *)&c, 1);
    }
    ig_str_putn(b, &q, 1);
}

static void add_repr(struct ig_str *b, const struct jj_value *v, int depth);

static void add_str(struct ig_str *b, const struct jj_value *v, bool repr, int depth)
{
    char t[32];
    if (depth > 64) {
        ig_str_puts(b, "...");
        return;
    }
    switch (v->type) {
    case JV_UNDEFINED: break;
    case JV_NONE: ig_str_puts(b, "None"); break;
    case JV_BOOL: ig_str_puts(b, v->b ? "True" : "False"); break;
    case JV_INT: snprintf(t, sizeof t, "%" PRId64, v->i); ig_str_puts(b, t); break;
    case JV_FLOAT: add_float(b, v->f, false); break;
    case JV_STRING:
        if (repr)
            add_repr_str(b, v->s, v->len);
        else
            ig_str_putn(b, v->s, v->len);
        break;
    case JV_LIST:
        ig_str_puts(b, "[");
        for (int64_t i = 0; i < v->n; i++) {
            if (i)
                ig_str_puts(b, ", ");
            add_repr(b, v->items[i], depth + 1);
        }
        ig_str_puts(b, "]");
        break;
    case JV_DICT:
        ig_str_puts(b, "{");
        for (int64_t i = 0; i < v->n; i += 2) {
            if (i)
                ig_str_puts(b, ", ");
            add_repr(b, v->items[i], depth + 1);
            ig_str_puts(b, ": ");
            add_repr(b, v->items[i + 1], depth + 1);
        }
        ig_str_puts(b, "}");
        break;
    case JV_NAMESPACE: ig_str_puts(b, "<Namespace>"); break;
    case JV_MACRO: ig_str_puts(b, "<Macro>"); break;
    case JV_FUNC: ig_str_puts(b, "<function>"); break;
    }
}

static void add_repr(struct ig_str *b, const struct jj_value *v, int depth)
{
    add_str(b, v, true, depth);
}

void jj_to_str(struct ig_str *b, const struct jj_value *v) { add_str(b, v, false, 0); }

static void add_json_str(struct ig_str *b, const char *s, size_t n)
{
    ig_str_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char t[8];
        switch (c) {
        case '"': ig_str_puts(b, "\\\""); break;
        case '\\': ig_str_puts(b, "\\\\"); break;
        case '\n': ig_str_puts(b, "\\n"); break;
        case '\r': ig_str_puts(b, "\\r"); break;
        case '\t': ig_str_puts(b, "\\t"); break;
        case '\b': ig_str_puts(b, "\\b"); break;
        case '\f': ig_str_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(t, sizeof t, "\\u%04x", c);
                ig_str_puts(b, t);
            } else {
                ig_str_putn(b, (const char *)&c, 1);
            }
        }
    }
    ig_str_puts(b, "\"");
}

static void newline_indent(struct ig_str *b, int64_t indent, int64_t depth)
{
    ig_str_puts(b, "\n");
    for (int64_t i = 0; i < indent * depth && i < 4096; i++)
        ig_str_puts(b, " ");
}

void jj_to_json(struct ig_str *b, const struct jj_value *v, int64_t indent, int64_t depth)
{
    char t[32];
    if (depth > 64) {
        ig_str_puts(b, "null");
        return;
    }
    switch (v->type) {
    case JV_BOOL: ig_str_puts(b, v->b ? "true" : "false"); break;
    case JV_INT: snprintf(t, sizeof t, "%" PRId64, v->i); ig_str_puts(b, t); break;
    case JV_FLOAT: add_float(b, v->f, true); break;
    case JV_STRING: add_json_str(b, v->s, v->len); break;
    case JV_LIST: case JV_DICT: case JV_NAMESPACE: {
        bool list = v->type == JV_LIST;
        int64_t step = list ? 1 : 2;
        ig_str_puts(b, list ? "[" : "{");
        for (int64_t i = 0; i < v->n; i += step) {
            if (i)
                ig_str_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                newline_indent(b, indent, depth + 1);
            if (list) {
                jj_to_json(b, v->items[i], indent, depth + 1);
                continue;
            }
            const struct jj_value *k = v->items[i];
            if (k->type == JV_STRING) {
                add_json_str(b, k->s, k->len);
            } else {
                struct ig_str kb = {0};
                jj_to_json(&kb, k, -1, depth + 1);
                ig_str_puts(b, "\"");
                ig_str_putn(b, kb.s ? kb.s : "", kb.len);
                ig_str_puts(b, "\"");
                free(kb.s);
            }
            ig_str_puts(b, ": ");
            jj_to_json(b, v->items[i + 1], indent, depth + 1);
        }
        if (indent >= 0 && v->n)
            newline_indent(b, indent, depth);
        ig_str_puts(b, list ? "]" : "}");
        break;
    }
    default: ig_str_puts(b, "null"); break;
    }
}

const char *jj_type_name(const struct jj_value *v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "string",
                                        "list", "dict", "namespace", "macro", "function"};
    return names[v->type];
}

int64_t jj_utf8_count(const char *s, size_t len)
{
    int64_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

size_t jj_utf8_offset(const char *s, size_t len, int64_t i)
{
    size_t k = 0;
    int64_t n = 0;
    while (k < len) {
        if (((unsigned char)s[k] & 0xC0) != 0x80) {
            if (n == i)
                return k;
            n++;
        }
        k++;
    }
    return len;
}
