/* tokenizer/jinja_eval.c: renders a parsed Jinja template (the tree of
 * jinja_parse.c) with a conversation's variables: statements into text,
 * expressions into values (jinja_value.c) with Python's and Jinja's rules
 * (truthiness, `and`/`or` returning an operand, undefined values that print
 * as "" but fail when added or looked into, negative indexes, slices), the
 * filters, tests, string and dict methods and globals chat templates use
 * (tokenizer/jinja.h). Bounded: loop iterations, macro depth and output
 * size have limits, so no template can hang or exhaust memory. Also the
 * entry points jinja_render and jinja_check.
 * Covered by tests/unit/test_jinja.py (against jinja2). */
#include "tokenizer/jinja.h"
#include "tokenizer/jinja_internal.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_STEPS = 1000000,           /* loop iterations of one render */
    MAX_CALL_DEPTH = 100,          /* nested macro calls */
    MAX_OUTPUT = 16 * 1024 * 1024, /* bytes of text, and of one string */
    MAX_ARENA_MIB = 256            /* everything one render computes */
};

struct scope {
    struct scope *parent;
    struct jj_value *vars; /* a dict */
};

struct jj_eval {
    struct jj_arena *a;
    struct jj_error *e;
    struct scope *globals;
    int64_t steps;
    int depth;
    int brk; /* 1: break, 2: continue pending */
};

static struct jj_value *fail(struct jj_eval *ev, const struct jj_node *at, const char *fmt,
                             const char *x, const char *y)
{
    char msg[200];
    /* fmt is always one of this file's literals, with at most two %s */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(msg, sizeof msg, fmt, x ? x : "", y ? y : "");
#pragma GCC diagnostic pop
    jj_fail(ev->e, at->line, at->col, "%s", msg);
    return NULL;
}

static struct jj_value *nomem(struct jj_eval *ev)
{
    ev->a->failed = true;
    ev->e->nomem = true;
    jj_fail(ev->e, 0, 0, "out of memory");
    return NULL;
}

static struct jj_value *undef(struct jj_eval *ev, const char *name)
{
    struct jj_value *v = jj_new(ev->a, JV_UNDEFINED);
    if (!v)
        return nomem(ev);
    v->undef_name = name;
    return v;
}

static struct jj_value *str_v(struct jj_eval *ev, const char *s, size_t n)
{
    struct jj_value *v = jj_str(ev->a, s, n);
    return v ? v : nomem(ev);
}

static struct jj_value *buf_v(struct jj_eval *ev, struct jj_buf *b)
{
    if (b->failed) {
        free(b->s);
        return nomem(ev);
    }
    struct jj_value *v = str_v(ev, b->s ? b->s : "", b->len);
    free(b->s);
    return v;
}

static struct jj_value *to_string(struct jj_eval *ev, const struct jj_value *v)
{
    if (v->type == JV_STRING)
        return (struct jj_value *)v;
    struct jj_buf b = {0};
    jj_to_str(&b, v);
    return buf_v(ev, &b);
}

static bool scope_set(struct jj_eval *ev, struct scope *s, const char *name, struct jj_value *v)
{
    struct jj_value *k = jj_str(ev->a, name, strlen(name));
    if (!k || !jj_dict_set(ev->a, s->vars, k, v)) {
        nomem(ev);
        return false;
    }
    return true;
}

static struct jj_value *lookup(struct jj_eval *ev, struct scope *s, const char *name)
{
    for (; s; s = s->parent) {
        struct jj_value *v = jj_dict_get_s(s->vars, name);
        if (v)
            return v;
    }
    return undef(ev, name);
}

static struct scope *new_scope(struct jj_eval *ev, struct scope *parent)
{
    struct scope *s = jj_alloc(ev->a, sizeof *s);
    if (!s || !(s->vars = jj_new(ev->a, JV_DICT))) {
        nomem(ev);
        return NULL;
    }
    s->parent = parent;
    return s;
}

/* ---- strings ---- */

/* Python's str.isspace() for the code point at s: its length, or 0. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x20)))
        return 1;
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (n >= 3 && (s[0] & 0xF0) == 0xE0) {
        uint32_t cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
            cp == 0x202F || cp == 0x205F || cp == 0x3000)
            return 3;
    }
    return 0;
}

static size_t cp_len(const unsigned char *s, size_t n)
{
    size_t k = 1;
    while (k < n && (s[k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* Is the code point at s one of chars (a string of code points)? Its length or 0. */
static size_t in_chars(const unsigned char *s, size_t n, const struct jj_value *chars)
{
    size_t k = cp_len(s, n);
    const unsigned char *c = (const unsigned char *)chars->s;
    for (size_t i = 0; i < chars->len;) {
        size_t m = cp_len(c + i, chars->len - i);
        if (m == k && !memcmp(c + i, s, k))
            return k;
        i += m;
    }
    return 0;
}

static size_t strip_test(const unsigned char *s, size_t n, const struct jj_value *chars)
{
    return chars ? in_chars(s, n, chars) : space_at(s, n);
}

/* strip/lstrip/rstrip with Python's white space or the given chars */
static struct jj_value *strip(struct jj_eval *ev, const struct jj_value *v, bool left, bool right,
                              const struct jj_value *chars)
{
    const unsigned char *s = (const unsigned char *)v->s;
    size_t a = 0, e = v->len, k;
    if (left)
        while (a < e && (k = strip_test(s + a, e - a, chars)))
            a += k;
    if (right) {
        /* from the left, remembering the end of the last kept code point */
        size_t keep = a;
        for (size_t i = a; i < e;) {
            k = strip_test(s + i, e - i, chars);
            if (k) {
                i += k;
            } else {
                i += cp_len(s + i, e - i);
                keep = i;
            }
        }
        e = keep;
    }
    return str_v(ev, v->s + a, e - a);
}

/* Upper and lower case of a code point: ASCII, Latin-1, Latin Extended-A,
 * Greek and Cyrillic (what chat templates meet; others stay as they are). */
static uint32_t cp_upper(uint32_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
        (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F))
        return c - 0x20;
    if (c == 0xFF)
        return 0x178;
    if (c >= 0x450 && c <= 0x45F)
        return c - 0x50;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && (c & 1))
        return c - 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && !(c & 1))
        return c - 1;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
        (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F))
        return c + 0x20;
    if (c == 0x178)
        return 0xFF;
    if (c >= 0x400 && c <= 0x40F)
        return c + 0x50;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && !(c & 1))
        return c + 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && (c & 1))
        return c + 1;
    return c;
}

static bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

/* 0 lower, 1 upper, 2 capitalize, 3 title (Python's, for the letters above) */
static struct jj_value *change_case(struct jj_eval *ev, const struct jj_value *v, int mode)
{
    struct jj_buf b = {0};
    const unsigned char *s = (const unsigned char *)v->s;
    bool word_start = true;
    for (size_t i = 0; i < v->len;) {
        size_t k = cp_len(s + i, v->len - i);
        uint32_t c = s[i];
        if (k == 2)
            c = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && word_start);
        if (k <= 2) {
            uint32_t d = up ? cp_upper(c) : cp_lower(c);
            char t[2];
            if (d < 0x80) {
                t[0] = (char)d;
                jj_buf_add(&b, t, 1);
            } else {
                t[0] = (char)(0xC0 | d >> 6);
                t[1] = (char)(0x80 | (d & 0x3F));
                jj_buf_add(&b, t, 2);
            }
        } else {
            jj_buf_add(&b, v->s + i, k);
        }
        /* title: a word starts after any character that has no case */
        word_start = !(k <= 2 ? cp_cased(c) : false);
        i += k;
    }
    return buf_v(ev, &b);
}

static struct jj_value *replace(struct jj_eval *ev, const struct jj_value *v,
                                const struct jj_value *old, const struct jj_value *new_,
                                int64_t count)
{
    struct jj_buf b = {0};
    size_t i = 0;
    int64_t done = 0;
    while (i <= v->len) {
        const char *hit = NULL;
        if (count < 0 || done < count) {
            if (old->len == 0)
                hit = v->s + i;
            else if (v->len - i >= old->len)
                hit = memmem(v->s + i, v->len - i, old->s, old->len);
        }
        if (!hit) {
            jj_buf_add(&b, v->s + i, v->len - i);
            break;
        }
        size_t at = (size_t)(hit - v->s);
        jj_buf_add(&b, v->s + i, at - i);
        jj_buf_add(&b, new_->s, new_->len);
        done++;
        if (old->len == 0) { /* between every code point */
            if (at >= v->len)
                break;
            size_t k = cp_len((const unsigned char *)v->s + at, v->len - at);
            jj_buf_add(&b, v->s + at, k);
            i = at + k;
        } else {
            i = at + old->len;
        }
        if (b.len > MAX_OUTPUT) {
            free(b.s);
            return nomem(ev);
        }
    }
    return buf_v(ev, &b);
}

static struct jj_value *split(struct jj_eval *ev, const struct jj_value *v,
                              const struct jj_value *sep, int64_t maxsplit)
{
    struct jj_value *list = jj_new(ev->a, JV_LIST);
    if (!list)
        return nomem(ev);
    const char *s = v->s;
    size_t n = v->len, i = 0;
    int64_t done = 0;
    if (!sep) { /* runs of white space; none at the ends */
        const unsigned char *u = (const unsigned char *)s;
        size_t k;
        for (;;) {
            while (i < n && (k = space_at(u + i, n - i)))
                i += k;
            if (i >= n)
                break;
            size_t start = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = n; /* the rest, trailing space stripped */
                size_t keep = start;
                for (size_t j = start; j < e;) {
                    k = space_at(u + j, e - j);
                    if (k) {
                        j += k;
                    } else {
                        j += cp_len(u + j, e - j);
                        keep = j;
                    }
                }
                if (!jj_list_push(ev->a, list, jj_str(ev->a, s + start, keep - start)))
                    return nomem(ev);
                break;
            }
            while (i < n && !space_at(u + i, n - i))
                i += cp_len(u + i, n - i);
            if (!jj_list_push(ev->a, list, jj_str(ev->a, s + start, i - start)))
                return nomem(ev);
            done++;
        }
        return list;
    }
    if (sep->len == 0)
        return NULL; /* the caller reports "empty separator" */
    for (;;) {
        const char *hit = (maxsplit < 0 || done < maxsplit) && n - i >= sep->len
                              ? memmem(s + i, n - i, sep->s, sep->len)
                              : NULL;
        size_t e = hit ? (size_t)(hit - s) : n;
        if (!jj_list_push(ev->a, list, jj_str(ev->a, s + i, e - i)))
            return nomem(ev);
        if (!hit)
            break;
        i = e + sep->len;
        done++;
    }
    return list;
}

/* ---- calls: arguments by position or name ---- */

struct args {
    struct jj_value **v;
    const char **kw;
    int64_t n;
};

/* The argument at position pos or named name; NULL when absent. */
static struct jj_value *arg(const struct args *a, int64_t pos, const char *name)
{
    int64_t p = 0;
    for (int64_t i = 0; i < a->n; i++) {
        if (a->kw[i]) {
            if (name && !strcmp(a->kw[i], name))
                return a->v[i];
        } else if (p++ == pos) {
            return a->v[i];
        }
    }
    return NULL;
}

static bool want(struct jj_eval *ev, const struct jj_node *at, const struct jj_value *v,
                 enum jj_type t, const char *what)
{
    if (v && v->type == t)
        return true;
    char msg[96];
    snprintf(msg, sizeof msg, "%s needs a %s, not %s", what,
             t == JV_STRING ? "string" : t == JV_INT ? "integer" : t == JV_LIST ? "list" : "dict",
             v ? jj_type_name(v) : "nothing");
    fail(ev, at, "%s", msg, NULL);
    return false;
}

static struct jj_value *call_value(struct jj_eval *ev, const struct jj_node *at,
                                   struct jj_value *f, const struct args *a);

/* ---- methods of strings and dicts ---- */

static struct jj_value *method(struct jj_eval *ev, const struct jj_node *at, const char *name,
                               struct jj_value *self, const struct args *a)
{
    struct jj_value *x = arg(a, 0, NULL), *y = arg(a, 1, NULL);
    if (self->type == JV_STRING) {
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            if (x && x->type == JV_NONE)
                x = NULL;
            if (x && !want(ev, at, x, JV_STRING, name))
                return NULL;
            return strip(ev, self, name[0] != 'r', name[0] != 'l', x);
        }
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            bool end = name[0] == 'e';
            struct jj_value one = {0}, *list = x;
            if (x && x->type == JV_STRING) { /* one prefix, or a tuple of them */
                one.type = JV_LIST;
                one.items = &x;
                one.n = 1;
                list = &one;
            }
            if (!list || list->type != JV_LIST)
                return fail(ev, at, "%s needs a string", name, NULL);
            for (int64_t i = 0; i < list->n; i++) {
                const struct jj_value *p = list->items[i];
                if (p->type != JV_STRING)
                    return fail(ev, at, "%s needs strings", name, NULL);
                if (p->len <= self->len &&
                    !memcmp(self->s + (end ? self->len - p->len : 0), p->s, p->len))
                    return jj_bool(ev->a, true);
            }
            return jj_bool(ev->a, false);
        }
        if (!strcmp(name, "split")) {
            struct jj_value *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
            if (sep && sep->type == JV_NONE)
                sep = NULL;
            if ((sep && !want(ev, at, sep, JV_STRING, "split")) ||
                (mx && !want(ev, at, mx, JV_INT, "split's maxsplit")))
                return NULL;
            struct jj_value *r = split(ev, self, sep, mx ? mx->i : -1);
            return r || ev->e->set ? r : fail(ev, at, "split: empty separator", NULL, NULL);
        }
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
            !strcmp(name, "title"))
            return change_case(ev, self, name[0] == 'l' ? 0 : name[0] == 'u' ? 1
                                         : name[0] == 'c' ? 2 : 3);
        if (!strcmp(name, "replace")) {
            struct jj_value *c = arg(a, 2, "count");
            if (!want(ev, at, x, JV_STRING, "replace") || !want(ev, at, y, JV_STRING, "replace"))
                return NULL;
            return replace(ev, self, x, y, c && c->type == JV_INT ? c->i : -1);
        }
        if (!strcmp(name, "find")) {
            if (!want(ev, at, x, JV_STRING, "find"))
                return NULL;
            const char *hit = x->len == 0 ? self->s : memmem(self->s, self->len, x->s, x->len);
            return jj_int(ev->a, hit ? jj_utf8_count(self->s, (size_t)(hit - self->s)) : -1);
        }
        return fail(ev, at, "unsupported construct: the string method '%s'", name, NULL);
    }
    if (self->type == JV_DICT || self->type == JV_NAMESPACE) {
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            struct jj_value *list = jj_new(ev->a, JV_LIST);
            if (!list)
                return nomem(ev);
            for (int64_t i = 0; i < self->n; i += 2) {
                struct jj_value *item = self->items[i + (name[0] == 'v')];
                if (name[0] == 'i') {
                    item = jj_new(ev->a, JV_LIST);
                    if (!item || !jj_list_push(ev->a, item, self->items[i]) ||
                        !jj_list_push(ev->a, item, self->items[i + 1]))
                        return nomem(ev);
                }
                if (!jj_list_push(ev->a, list, item))
                    return nomem(ev);
            }
            return list;
        }
        if (!strcmp(name, "get")) {
            struct jj_value *v = x ? jj_dict_get(self, x) : NULL;
            return v ? v : y ? y : jj_new(ev->a, JV_NONE);
        }
        return fail(ev, at, "unsupported construct: the dict method '%s'", name, NULL);
    }
    return fail(ev, at, "unsupported construct: the method '%s' of a %s", name,
                jj_type_name(self));
}

static bool is_method_name(const struct jj_value *self, const char *name)
{
    static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "startswith",
                                              "endswith", "split", "upper", "lower",
                                              "capitalize", "title", "replace", "find", NULL};
    static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};
    const char *const *list = self->type == JV_STRING ? str_methods
                              : self->type == JV_DICT  ? dict_methods
                                                       : NULL;
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

/* ---- attributes and items ---- */

static struct jj_value *getattr(struct jj_eval *ev, const struct jj_node *at,
                                struct jj_value *obj, const char *name)
{
    if (obj->type == JV_UNDEFINED)
        return fail(ev, at, "'%s' is undefined (looking up its '%s')",
                    obj->undef_name ? obj->undef_name : "value", name);
    if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
        struct jj_value *v = jj_dict_get_s(obj, name);
        if (v)
            return v;
    }
    if (is_method_name(obj, name)) {
        struct jj_value *f = jj_new(ev->a, JV_FUNC);
        if (!f)
            return nomem(ev);
        f->self = obj;
        f->undef_name = name; /* the method's name */
        return f;
    }
    return undef(ev, name);
}

static int64_t py_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

static struct jj_value *getitem(struct jj_eval *ev, const struct jj_node *at,
                                struct jj_value *obj, struct jj_value *key)
{
    if (obj->type == JV_UNDEFINED)
        return fail(ev, at, "'%s' is undefined (looking up an item)",
                    obj->undef_name ? obj->undef_name : "value", NULL);
    if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
        struct jj_value *v = jj_dict_get(obj, key);
        if (v)
            return v;
        if (key->type == JV_STRING)
            return getattr(ev, at, obj, key->s);
        return undef(ev, "item");
    }
    if ((obj->type == JV_LIST || obj->type == JV_STRING) &&
        (key->type == JV_INT || key->type == JV_BOOL)) {
        int64_t k = key->type == JV_INT ? key->i : key->b;
        if (obj->type == JV_LIST) {
            int64_t i = py_index(k, obj->n);
            return i >= 0 && i < obj->n ? obj->items[i] : undef(ev, "item");
        }
        int64_t n = jj_utf8_count(obj->s, obj->len), i = py_index(k, n);
        if (i < 0 || i >= n)
            return undef(ev, "item");
        size_t a = jj_utf8_offset(obj->s, obj->len, i), b = jj_utf8_offset(obj->s, obj->len, i + 1);
        return str_v(ev, obj->s + a, b - a);
    }
    if (key->type == JV_STRING)
        return getattr(ev, at, obj, key->s);
    return undef(ev, "item");
}

static struct jj_value *eval(struct jj_eval *ev, struct jj_node *n, struct scope *s);

/* Python's slice of a list or string */
static struct jj_value *slice(struct jj_eval *ev, struct jj_node *n, struct scope *s)
{
    struct jj_value *obj = eval(ev, n->a, s);
    if (!obj)
        return NULL;
    int64_t parts[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    struct jj_node *pn[3] = {n->b->a, n->b->b, n->b->c};
    for (int i = 0; i < 3; i++) {
        if (!pn[i])
            continue;
        struct jj_value *v = eval(ev, pn[i], s);
        if (!v)
            return NULL;
        if (v->type == JV_NONE)
            continue;
        if (v->type != JV_INT)
            return fail(ev, pn[i], "a slice needs integers", NULL, NULL);
        parts[i] = v->i;
        given[i] = true;
    }
    int64_t step = parts[2];
    if (step == 0)
        return fail(ev, n, "a slice step cannot be zero", NULL, NULL);
    int64_t len;
    if (obj->type == JV_LIST)
        len = obj->n;
    else if (obj->type == JV_STRING)
        len = jj_utf8_count(obj->s, obj->len);
    else if (obj->type == JV_UNDEFINED)
        return fail(ev, n, "'%s' is undefined (slicing it)",
                    obj->undef_name ? obj->undef_name : "value", NULL);
    else
        return fail(ev, n, "a %s cannot be sliced", jj_type_name(obj), NULL);
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
    int64_t start = given[0] ? parts[0] : (step > 0 ? 0 : len - 1);
    int64_t stop = given[1] ? parts[1] : (step > 0 ? len : -len - 1);
    if (given[0]) {
        start = start < 0 ? start + len : start;
        start = start < lo ? lo : start > hi ? hi : start;
    }
    if (given[1]) {
        stop = stop < 0 ? stop + len : stop;
        stop = stop < lo ? lo : stop > hi ? hi : stop;
    } else if (step < 0) {
        stop = -1;
    }
    struct jj_value *out = jj_new(ev->a, JV_LIST);
    struct jj_buf b = {0};
    if (!out)
        return nomem(ev);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj->type == JV_LIST) {
            if (!jj_list_push(ev->a, out, obj->items[i]))
                return nomem(ev);
        } else {
            size_t x = jj_utf8_offset(obj->s, obj->len, i), y = jj_utf8_offset(obj->s, obj->len, i + 1);
            jj_buf_add(&b, obj->s + x, y - x);
        }
    }
    return obj->type == JV_LIST ? out : buf_v(ev, &b);
}

/* ---- operators ---- */

static bool is_num(const struct jj_value *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}
static double num(const struct jj_value *v)
{
    return v->type == JV_FLOAT ? v->f : v->type == JV_INT ? (double)v->i : (double)v->b;
}
static int64_t inum(const struct jj_value *v) { return v->type == JV_INT ? v->i : v->b; }

static struct jj_value *float_v(struct jj_eval *ev, double f)
{
    struct jj_value *v = jj_new(ev->a, JV_FLOAT);
    if (!v)
        return nomem(ev);
    v->f = f;
    return v;
}

static bool contains(const struct jj_value *hay, const struct jj_value *x, bool *ok)
{
    *ok = true;
    if (hay->type == JV_STRING) {
        if (x->type != JV_STRING) {
            *ok = false;
            return false;
        }
        return x->len == 0 || memmem(hay->s, hay->len, x->s, x->len) != NULL;
    }
    if (hay->type == JV_LIST) {
        for (int64_t i = 0; i < hay->n; i++)
            if (jj_equal(hay->items[i], x))
                return true;
        return false;
    }
    if (hay->type == JV_DICT || hay->type == JV_NAMESPACE)
        return jj_dict_get(hay, x) != NULL;
    if (hay->type == JV_UNDEFINED)
        return false;
    *ok = false;
    return false;
}

static struct jj_value *binary(struct jj_eval *ev, struct jj_node *n, struct jj_value *x,
                               struct jj_value *y)
{
    const char *op = n->name;
    if (!strcmp(op, "~")) {
        struct jj_buf b = {0};
        jj_to_str(&b, x);
        jj_to_str(&b, y);
        return buf_v(ev, &b);
    }
    if (!strcmp(op, "==") || !strcmp(op, "!="))
        return jj_bool(ev->a, jj_equal(x, y) == (op[0] == '='));
    if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        bool ok, r = contains(y, x, &ok);
        if (!ok)
            return fail(ev, n, "'in' does not apply to a %s in a %s", jj_type_name(x),
                        jj_type_name(y));
        return jj_bool(ev->a, r == (op[0] == 'i'));
    }
    if (x->type == JV_UNDEFINED || y->type == JV_UNDEFINED) {
        const struct jj_value *u = x->type == JV_UNDEFINED ? x : y;
        return fail(ev, n, "'%s' is undefined (used with '%s')",
                    u->undef_name ? u->undef_name : "value", op);
    }
    if (op[0] == '<' || op[0] == '>') {
        int c;
        if (is_num(x) && is_num(y))
            c = num(x) < num(y) ? -1 : num(x) > num(y);
        else if (x->type == JV_STRING && y->type == JV_STRING) {
            size_t m = x->len < y->len ? x->len : y->len;
            c = memcmp(x->s, y->s, m);
            if (c == 0)
                c = x->len < y->len ? -1 : x->len > y->len;
        } else {
            return fail(ev, n, "'%s' does not compare a %s with that", op, jj_type_name(x));
        }
        bool r = !strcmp(op, "<") ? c < 0 : !strcmp(op, "<=") ? c <= 0 : !strcmp(op, ">") ? c > 0 : c >= 0;
        return jj_bool(ev->a, r);
    }
    if (!strcmp(op, "+")) {
        if (x->type == JV_STRING && y->type == JV_STRING) {
            struct jj_buf b = {0};
            jj_buf_add(&b, x->s, x->len);
            jj_buf_add(&b, y->s, y->len);
            if (b.len > MAX_OUTPUT) {
                free(b.s);
                return fail(ev, n, "a string longer than the limit", NULL, NULL);
            }
            return buf_v(ev, &b);
        }
        if (x->type == JV_LIST && y->type == JV_LIST) {
            struct jj_value *l = jj_new(ev->a, JV_LIST);
            for (int64_t i = 0; l && i < x->n + y->n; i++)
                if (!jj_list_push(ev->a, l, i < x->n ? x->items[i] : y->items[i - x->n]))
                    return nomem(ev);
            return l ? l : nomem(ev);
        }
    }
    if (!strcmp(op, "*") && ((x->type == JV_STRING && y->type == JV_INT) ||
                             (x->type == JV_INT && y->type == JV_STRING))) {
        const struct jj_value *str = x->type == JV_STRING ? x : y;
        int64_t k = x->type == JV_INT ? x->i : y->i;
        if (k > 0 && (uint64_t)k * str->len > MAX_OUTPUT)
            return fail(ev, n, "a string longer than the limit", NULL, NULL);
        struct jj_buf b = {0};
        for (int64_t i = 0; i < k; i++)
            jj_buf_add(&b, str->s, str->len);
        return buf_v(ev, &b);
    }
    if (!is_num(x) || !is_num(y))
        return fail(ev, n, "unsupported construct: '%s' between a %s and that", op,
                    jj_type_name(x));
    bool ints = x->type != JV_FLOAT && y->type != JV_FLOAT;
    int64_t a = inum(x), b = inum(y);
    double fa = num(x), fb = num(y);
    switch (op[0]) {
    case '+': return ints ? jj_int(ev->a, (int64_t)((uint64_t)a + (uint64_t)b)) : float_v(ev, fa + fb);
    case '-': return ints ? jj_int(ev->a, (int64_t)((uint64_t)a - (uint64_t)b)) : float_v(ev, fa - fb);
    case '*':
        if (op[1] == '*') {
            if (ints && b >= 0) {
                int64_t r = 1;
                for (int64_t i = 0; i < b && i < 64; i++)
                    r = (int64_t)((uint64_t)r * (uint64_t)a);
                return jj_int(ev->a, r);
            }
            return float_v(ev, pow(fa, fb));
        }
        return ints ? jj_int(ev->a, (int64_t)((uint64_t)a * (uint64_t)b)) : float_v(ev, fa * fb);
    case '/':
        if (fb == 0)
            return fail(ev, n, "division by zero", NULL, NULL);
        if (op[1] == '/') {
            if (ints) {
                if (a == INT64_MIN && b == -1)
                    return jj_int(ev->a, INT64_MIN);
                int64_t q = a / b;
                if ((a % b != 0) && ((a < 0) != (b < 0)))
                    q--;
                return jj_int(ev->a, q);
            }
            return float_v(ev, floor(fa / fb));
        }
        return float_v(ev, fa / fb);
    case '%':
        if (fb == 0)
            return fail(ev, n, "modulo by zero", NULL, NULL);
        if (ints) {
            if (b == -1)
                return jj_int(ev->a, 0);
            int64_t r = a % b;
            if (r != 0 && ((r < 0) != (b < 0)))
                r += b;
            return jj_int(ev->a, r);
        }
        return float_v(ev, fa - fb * floor(fa / fb));
    }
    return fail(ev, n, "unsupported construct: the operator '%s'", op, NULL);
}

/* ---- filters and tests ---- */

static int64_t length_of(const struct jj_value *v)
{
    switch (v->type) {
    case JV_STRING: return jj_utf8_count(v->s, v->len);
    case JV_LIST: return v->n;
    case JV_DICT: case JV_NAMESPACE: return v->n / 2;
    default: return -1;
    }
}

static bool run_test(struct jj_eval *ev, const struct jj_node *at, const char *name,
                     struct jj_value *v, const struct args *a, bool *out);

/* The items of an iterable: a list, a dict's keys, a string's characters. */
static struct jj_value *as_list(struct jj_eval *ev, const struct jj_node *at, struct jj_value *v)
{
    if (v->type == JV_LIST)
        return v;
    struct jj_value *l = jj_new(ev->a, JV_LIST);
    if (!l)
        return nomem(ev);
    if (v->type == JV_DICT || v->type == JV_NAMESPACE) {
        for (int64_t i = 0; i < v->n; i += 2)
            if (!jj_list_push(ev->a, l, v->items[i]))
                return nomem(ev);
    } else if (v->type == JV_STRING) {
        for (size_t i = 0; i < v->len;) {
            size_t k = cp_len((const unsigned char *)v->s + i, v->len - i);
            if (!jj_list_push(ev->a, l, jj_str(ev->a, v->s + i, k)))
                return nomem(ev);
            i += k;
        }
    } else if (v->type != JV_UNDEFINED) {
        return fail(ev, at, "a %s is not iterable", jj_type_name(v), NULL);
    }
    return l;
}

static struct jj_value *filter(struct jj_eval *ev, struct jj_node *at, const char *name,
                               struct jj_value *v, const struct args *a)
{
    struct jj_value *x = arg(a, 0, NULL);
    if (!strcmp(name, "safe") || !strcmp(name, "string")) /* no autoescaping */
        return name[1] == 't' ? to_string(ev, v) : v;
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        int64_t n = v->type == JV_UNDEFINED ? 0 : length_of(v);
        if (n < 0)
            return fail(ev, at, "a %s has no length", jj_type_name(v), NULL);
        return jj_int(ev->a, n);
    }
    if (!strcmp(name, "trim")) {
        struct jj_value *s = to_string(ev, v), *chars = arg(a, 0, "chars");
        if (chars && chars->type == JV_NONE)
            chars = NULL;
        if (!s || (chars && !want(ev, at, chars, JV_STRING, "trim")))
            return NULL;
        return strip(ev, s, true, true, chars);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title")) {
        struct jj_value *s = to_string(ev, v);
        return s ? change_case(ev, s, name[0] == 'l' ? 0 : name[0] == 'u' ? 1
                                       : name[0] == 'c' ? 2 : 3)
                 : NULL;
    }
    if (!strcmp(name, "tojson")) {
        struct jj_value *ind = arg(a, 0, "indent");
        struct jj_buf b = {0};
        if (v->type == JV_UNDEFINED)
            return fail(ev, at, "'%s' is undefined (tojson)", v->undef_name, NULL);
        jj_to_json(&b, v, ind && ind->type == JV_INT ? ind->i : -1, 0);
        return buf_v(ev, &b);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct jj_value *bo = arg(a, 1, "boolean");
        bool use = v->type == JV_UNDEFINED || (bo && jj_truthy(bo) && !jj_truthy(v));
        return use ? (x ? x : str_v(ev, "", 0)) : v;
    }
    if (!strcmp(name, "join")) {
        struct jj_value *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        struct jj_value *l = as_list(ev, at, v);
        if (!l || (sep && !want(ev, at, sep, JV_STRING, "join")))
            return NULL;
        struct jj_buf b = {0};
        for (int64_t i = 0; i < l->n; i++) {
            if (i && sep)
                jj_buf_add(&b, sep->s, sep->len);
            struct jj_value *item = l->items[i];
            if (attr && attr->type == JV_STRING && !(item = getattr(ev, at, item, attr->s))) {
                free(b.s);
                return NULL;
            }
            jj_to_str(&b, item);
        }
        return buf_v(ev, &b);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        struct jj_value *l = as_list(ev, at, v);
        if (!l)
            return NULL;
        return l->n ? l->items[name[0] == 'f' ? 0 : l->n - 1] : undef(ev, name);
    }
    if (!strcmp(name, "list"))
        return as_list(ev, at, v);
    if (!strcmp(name, "reverse")) {
        if (v->type == JV_STRING) {
            struct jj_buf b = {0};
            for (size_t i = v->len; i > 0;) {
                size_t k = i - 1;
                while (k > 0 && ((unsigned char)v->s[k] & 0xC0) == 0x80)
                    k--;
                jj_buf_add(&b, v->s + k, i - k);
                i = k;
            }
            return buf_v(ev, &b);
        }
        struct jj_value *l = as_list(ev, at, v), *r = jj_new(ev->a, JV_LIST);
        if (!l)
            return NULL;
        for (int64_t i = l->n - 1; r && i >= 0; i--)
            if (!jj_list_push(ev->a, r, l->items[i]))
                return nomem(ev);
        return r ? r : nomem(ev);
    }
    if (!strcmp(name, "items")) {
        if (v->type != JV_DICT && v->type != JV_NAMESPACE)
            return fail(ev, at, "items needs a dict, not a %s", jj_type_name(v), NULL);
        return method(ev, at, "items", v, a);
    }
    if (!strcmp(name, "replace")) {
        struct jj_value *s = to_string(ev, v), *y = arg(a, 1, NULL), *c = arg(a, 2, "count");
        if (!s || !want(ev, at, x, JV_STRING, "replace") || !want(ev, at, y, JV_STRING, "replace"))
            return NULL;
        return replace(ev, s, x, y, c && c->type == JV_INT ? c->i : -1);
    }
    if (!strcmp(name, "int")) {
        if (v->type == JV_INT)
            return v;
        if (v->type == JV_FLOAT && fabs(v->f) < 9e18)
            return jj_int(ev->a, (int64_t)v->f);
        if (v->type == JV_BOOL)
            return jj_int(ev->a, v->b);
        if (v->type == JV_STRING) {
            char *end;
            long long r = strtoll(v->s, &end, 10);
            if (end != v->s && !*end)
                return jj_int(ev->a, r);
        }
        return x ? x : jj_int(ev->a, 0);
    }
    if (!strcmp(name, "float")) {
        if (is_num(v))
            return float_v(ev, num(v));
        if (v->type == JV_STRING) {
            char *end;
            double r = strtod(v->s, &end);
            if (end != v->s && !*end)
                return float_v(ev, r);
        }
        return x ? x : float_v(ev, 0);
    }
    if (!strcmp(name, "abs")) {
        if (v->type == JV_INT)
            return jj_int(ev->a, v->i < 0 ? (int64_t)(0 - (uint64_t)v->i) : v->i);
        if (v->type == JV_FLOAT)
            return float_v(ev, fabs(v->f));
        return fail(ev, at, "abs needs a number", NULL, NULL);
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") ||
        !strcmp(name, "reject")) {
        bool by_attr = strstr(name, "attr") != NULL, keep_true = name[0] == 's';
        struct jj_value *l = as_list(ev, at, v), *out = jj_new(ev->a, JV_LIST);
        if (!l || !out)
            return l ? nomem(ev) : NULL;
        struct jj_value *attr = by_attr ? x : NULL;
        if (by_attr && !want(ev, at, attr, JV_STRING, name))
            return NULL;
        struct jj_value *test = arg(a, by_attr ? 1 : 0, NULL);
        if (test && !want(ev, at, test, JV_STRING, name))
            return NULL;
        /* the test's own arguments follow its name */
        struct args ta = {0};
        int64_t skip = by_attr ? 2 : 1;
        if (a->n > skip) {
            ta.v = a->v + skip;
            ta.kw = a->kw + skip;
            ta.n = a->n - skip;
        }
        for (int64_t i = 0; i < l->n; i++) {
            struct jj_value *item = l->items[i], *t = item;
            if (by_attr) {
                if (item->type == JV_DICT || item->type == JV_NAMESPACE) {
                    t = jj_dict_get_s(item, attr->s);
                    if (!t && !(t = undef(ev, attr->s)))
                        return NULL;
                } else if (!(t = getattr(ev, at, item, attr->s))) {
                    return NULL;
                }
            }
            bool r;
            if (test) {
                if (!run_test(ev, at, test->s, t, &ta, &r))
                    return NULL;
            } else {
                r = jj_truthy(t);
            }
            if (r == keep_true && !jj_list_push(ev->a, out, item))
                return nomem(ev);
        }
        return out;
    }
    if (!strcmp(name, "map")) {
        struct jj_value *l = as_list(ev, at, v), *out = jj_new(ev->a, JV_LIST);
        struct jj_value *attr = arg(a, -1, "attribute"), *dflt = arg(a, -1, "default");
        if (!l || !out)
            return l ? nomem(ev) : NULL;
        for (int64_t i = 0; i < l->n; i++) {
            struct jj_value *r;
            if (attr) {
                if (!want(ev, at, attr, JV_STRING, "map's attribute") ||
                    !(r = getattr(ev, at, l->items[i], attr->s)))
                    return NULL;
                if (r->type == JV_UNDEFINED && dflt)
                    r = dflt;
            } else {
                if (!want(ev, at, x, JV_STRING, "map"))
                    return NULL;
                struct args rest = {a->v + 1, a->kw + 1, a->n - 1};
                if (!(r = filter(ev, at, x->s, l->items[i], &rest)))
                    return NULL;
            }
            if (!jj_list_push(ev->a, out, r))
                return nomem(ev);
        }
        return out;
    }
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort")) {
        bool dict = name[0] == 'd';
        struct jj_value *rev = arg(a, dict ? 2 : 0, "reverse"), *attr = arg(a, -1, "attribute");
        struct jj_value *l = dict ? (v->type == JV_DICT ? method(ev, at, "items", v, a) : NULL)
                                  : as_list(ev, at, v);
        if (!l)
            return ev->e->set ? NULL : fail(ev, at, "dictsort needs a dict", NULL, NULL);
        struct jj_value *out = jj_new(ev->a, JV_LIST);
        struct jj_value **keys = jj_alloc(ev->a, (size_t)(l->n + 1) * sizeof *keys);
        if (!out || !keys)
            return nomem(ev);
        for (int64_t i = 0; i < l->n; i++) { /* stable insertion sort: lists are short */
            struct jj_value *item = l->items[i], *key = dict ? item->items[0] : item;
            if (attr && attr->type == JV_STRING && !(key = getattr(ev, at, item, attr->s)))
                return NULL;
            if (!jj_list_push(ev->a, out, item))
                return nomem(ev);
            int64_t k = out->n - 1;
            while (k > 0) {
                struct jj_node cmp = {.kind = JN_BINARY, .name = rev && jj_truthy(rev) ? "<" : ">",
                                      .line = at->line, .col = at->col};
                struct jj_value *gt = binary(ev, &cmp, keys[k - 1], key);
                if (!gt)
                    return NULL;
                if (!gt->b)
                    break;
                out->items[k] = out->items[k - 1];
                keys[k] = keys[k - 1];
                k--;
            }
            out->items[k] = item;
            keys[k] = key;
        }
        return out;
    }
    return fail(ev, at, "unsupported construct: the filter '%s'", name, NULL);
}

static bool run_test(struct jj_eval *ev, const struct jj_node *at, const char *name,
                     struct jj_value *v, const struct args *a, bool *out)
{
    struct jj_value *x = arg(a, 0, NULL);
    enum jj_type t = v->type;
    if (!strcmp(name, "defined"))
        *out = t != JV_UNDEFINED;
    else if (!strcmp(name, "undefined"))
        *out = t == JV_UNDEFINED;
    else if (!strcmp(name, "none"))
        *out = t == JV_NONE;
    else if (!strcmp(name, "string"))
        *out = t == JV_STRING;
    else if (!strcmp(name, "number"))
        *out = t == JV_INT || t == JV_FLOAT;
    else if (!strcmp(name, "integer"))
        *out = t == JV_INT;
    else if (!strcmp(name, "float"))
        *out = t == JV_FLOAT;
    else if (!strcmp(name, "boolean"))
        *out = t == JV_BOOL;
    else if (!strcmp(name, "true") || !strcmp(name, "false"))
        *out = t == JV_BOOL && v->b == (name[0] == 't');
    else if (!strcmp(name, "mapping"))
        *out = t == JV_DICT || t == JV_NAMESPACE;
    else if (!strcmp(name, "iterable"))
        *out = t == JV_LIST || t == JV_DICT || t == JV_STRING || t == JV_UNDEFINED;
    else if (!strcmp(name, "sequence"))
        *out = t == JV_LIST || t == JV_DICT || t == JV_STRING;
    else if (!strcmp(name, "callable"))
        *out = t == JV_MACRO || t == JV_FUNC;
    else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
             !strcmp(name, "sameas"))
        *out = x && jj_equal(v, x);
    else if (!strcmp(name, "ne") || !strcmp(name, "!="))
        *out = !(x && jj_equal(v, x));
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (t != JV_INT)
            return fail(ev, at, "'%s' needs an integer", name, NULL), false;
        *out = ((v->i % 2) != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (t != JV_INT || !x || x->type != JV_INT || x->i == 0)
            return fail(ev, at, "'divisibleby' needs integers", NULL, NULL), false;
        *out = v->i % x->i == 0;
    } else if (!strcmp(name, "in")) {
        bool ok;
        *out = x && contains(x, v, &ok);
        if (x && !ok)
            return fail(ev, at, "'in' does not apply to a %s", jj_type_name(x), NULL), false;
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (t != JV_STRING)
            return fail(ev, at, "'%s' needs a string", name, NULL), false;
        bool r = true;
        for (size_t i = 0; i < v->len; i++)
            if ((name[0] == 'l' && v->s[i] >= 'A' && v->s[i] <= 'Z') ||
                (name[0] == 'u' && v->s[i] >= 'a' && v->s[i] <= 'z'))
                r = false;
        *out = r;
    } else {
        fail(ev, at, "unsupported construct: the test '%s'", name, NULL);
        return false;
    }
    return true;
}

static bool in_list(const char *const *list, const char *name)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

bool jj_known_filter(const char *name)
{
    static const char *const filters[] = {
        "safe", "string", "length", "count", "trim", "upper", "lower", "capitalize", "title",
        "tojson", "default", "d", "join", "first", "last", "list", "reverse", "items", "replace",
        "int", "float", "abs", "selectattr", "rejectattr", "select", "reject", "map", "sort",
        "dictsort", NULL};
    return in_list(filters, name);
}

bool jj_known_test(const char *name)
{
    static const char *const tests[] = {
        "defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
        "true", "false", "mapping", "iterable", "sequence", "callable", "equalto", "eq", "==",
        "sameas", "ne", "!=", "odd", "even", "divisibleby", "in", "lower", "upper", NULL};
    return in_list(tests, name);
}

/* ---- calls ---- */

static bool exec(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct jj_buf *out);

static struct jj_value *call_macro(struct jj_eval *ev, const struct jj_node *at,
                                   struct jj_value *f, const struct args *a)
{
    struct jj_node *m = f->macro;
    if (ev->depth >= MAX_CALL_DEPTH)
        return fail(ev, at, "macros call each other more than %s deep", "100", NULL);
    struct scope *s = new_scope(ev, ev->globals);
    if (!s)
        return NULL;
    int64_t pos = 0;
    for (int64_t i = 0; i < a->n; i++) {
        if (a->kw[i]) {
            int64_t k = 0;
            while (k < m->n_params && strcmp(m->params[k], a->kw[i]))
                k++;
            if (k == m->n_params)
                return fail(ev, at, "the macro '%s' has no parameter '%s'", m->name, a->kw[i]);
            if (!scope_set(ev, s, a->kw[i], a->v[i]))
                return NULL;
        } else {
            if (pos >= m->n_params)
                return fail(ev, at, "too many arguments for the macro '%s'", m->name, NULL);
            if (!scope_set(ev, s, m->params[pos++], a->v[i]))
                return NULL;
        }
    }
    for (int64_t k = 0; k < m->n_params; k++) {
        if (jj_dict_get_s(s->vars, m->params[k]))
            continue;
        struct jj_value *d = m->items[k] ? eval(ev, m->items[k], s) : undef(ev, m->params[k]);
        if (!d || !scope_set(ev, s, m->params[k], d))
            return NULL;
    }
    struct jj_buf b = {0};
    ev->depth++;
    bool ok = exec(ev, m->a, s, &b);
    ev->depth--;
    ev->brk = 0;
    if (!ok) {
        free(b.s);
        return NULL;
    }
    return buf_v(ev, &b);
}

static struct jj_value *call_value(struct jj_eval *ev, const struct jj_node *at,
                                   struct jj_value *f, const struct args *a)
{
    if (f->type == JV_MACRO)
        return call_macro(ev, at, f, a);
    if (f->type == JV_FUNC && f->self)
        return method(ev, at, f->undef_name, f->self, a);
    if (f->type == JV_FUNC)
        return f->fn(ev, (struct jj_node *)at, a->v, a->kw, a->n, NULL);
    if (f->type == JV_UNDEFINED)
        return fail(ev, at, "'%s' is undefined (called)", f->undef_name ? f->undef_name : "value",
                    NULL);
    return fail(ev, at, "a %s cannot be called", jj_type_name(f), NULL);
}

static struct jj_value *g_range(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                                const char **kw, int64_t n, struct jj_value *self)
{
    (void)kw, (void)self;
    int64_t p[3] = {0, 0, 1};
    if (n < 1 || n > 3)
        return fail(ev, at, "range takes 1 to 3 integers", NULL, NULL);
    for (int64_t i = 0; i < n; i++) {
        if (v[i]->type != JV_INT)
            return fail(ev, at, "range takes integers", NULL, NULL);
    }
    if (n == 1)
        p[1] = v[0]->i;
    else
        p[0] = v[0]->i, p[1] = v[1]->i, p[2] = n == 3 ? v[2]->i : 1;
    if (p[2] == 0)
        return fail(ev, at, "range's step cannot be zero", NULL, NULL);
    struct jj_value *l = jj_new(ev->a, JV_LIST);
    if (!l)
        return nomem(ev);
    for (int64_t i = p[0]; p[2] > 0 ? i < p[1] : i > p[1]; i += p[2]) {
        if (++ev->steps > MAX_STEPS)
            return fail(ev, at, "range is longer than the limit", NULL, NULL);
        if (!jj_list_push(ev->a, l, jj_int(ev->a, i)))
            return nomem(ev);
    }
    return l;
}

static struct jj_value *g_namespace(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                                    const char **kw, int64_t n, struct jj_value *self)
{
    (void)self;
    struct jj_value *ns = jj_new(ev->a, JV_NAMESPACE);
    if (!ns)
        return nomem(ev);
    for (int64_t i = 0; i < n; i++) {
        if (!kw[i]) {
            if (v[i]->type != JV_DICT)
                return fail(ev, at, "namespace takes name=value arguments", NULL, NULL);
            for (int64_t k = 0; k < v[i]->n; k += 2)
                if (!jj_dict_set(ev->a, ns, v[i]->items[k], v[i]->items[k + 1]))
                    return nomem(ev);
            continue;
        }
        if (!jj_dict_set(ev->a, ns, jj_str(ev->a, kw[i], strlen(kw[i])), v[i]))
            return nomem(ev);
    }
    return ns;
}

static struct jj_value *g_dict(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                               const char **kw, int64_t n, struct jj_value *self)
{
    struct jj_value *d = g_namespace(ev, at, v, kw, n, self);
    if (d)
        d->type = JV_DICT;
    return d;
}

static struct jj_value *g_raise(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                                const char **kw, int64_t n, struct jj_value *self)
{
    (void)kw, (void)self;
    struct jj_buf b = {0};
    if (n > 0)
        jj_to_str(&b, v[0]);
    char msg[160];
    snprintf(msg, sizeof msg, "%.*s", (int)(b.len < 150 ? b.len : 150), b.s ? b.s : "");
    free(b.s);
    return fail(ev, at, "the template raised an exception: %s", msg, NULL);
}

/* ---- expressions ---- */

static bool eval_args(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct args *a)
{
    a->n = n->n_items;
    a->kw = n->kw_names;
    a->v = n->n_items ? jj_alloc(ev->a, (size_t)n->n_items * sizeof *a->v) : NULL;
    if (n->n_items && !a->v)
        return nomem(ev), false;
    for (int64_t i = 0; i < n->n_items; i++)
        if (!(a->v[i] = eval(ev, n->items[i], s)))
            return false;
    return true;
}

static struct jj_value *eval(struct jj_eval *ev, struct jj_node *n, struct scope *s)
{
    struct jj_value *x, *y;
    struct args a;
    if (ev->e->set)
        return NULL;
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return lookup(ev, s, n->name);
    case JN_LIST: case JN_TUPLE: {
        struct jj_value *l = jj_new(ev->a, JV_LIST);
        if (!l)
            return nomem(ev);
        for (int64_t i = 0; i < n->n_items; i++) {
            if (!(x = eval(ev, n->items[i], s)))
                return NULL;
            if (!jj_list_push(ev->a, l, x))
                return nomem(ev);
        }
        return l;
    }
    case JN_DICT: {
        struct jj_value *d = jj_new(ev->a, JV_DICT);
        if (!d)
            return nomem(ev);
        for (int64_t i = 0; i + 1 < n->n_items; i += 2) {
            if (!(x = eval(ev, n->items[i], s)) || !(y = eval(ev, n->items[i + 1], s)))
                return NULL;
            if (!jj_dict_set(ev->a, d, x, y))
                return nomem(ev);
        }
        return d;
    }
    case JN_GETATTR:
        return (x = eval(ev, n->a, s)) ? getattr(ev, n, x, n->name) : NULL;
    case JN_GETITEM:
        if (!(x = eval(ev, n->a, s)) || !(y = eval(ev, n->b, s)))
            return NULL;
        return getitem(ev, n, x, y);
    case JN_SLICE: return slice(ev, n, s);
    case JN_CALL:
        if (!(x = eval(ev, n->a, s)) || !eval_args(ev, n, s, &a))
            return NULL;
        return call_value(ev, n, x, &a);
    case JN_FILTER:
        if (!(x = eval(ev, n->a, s)) || !eval_args(ev, n, s, &a))
            return NULL;
        return filter(ev, n, n->name, x, &a);
    case JN_TEST: {
        bool r;
        if (!(x = eval(ev, n->a, s)) || !eval_args(ev, n, s, &a) ||
            !run_test(ev, n, n->name, x, &a, &r))
            return NULL;
        return jj_bool(ev->a, r);
    }
    case JN_UNARY:
        if (!(x = eval(ev, n->a, s)))
            return NULL;
        if (n->name[0] == '+' && is_num(x))
            return x;
        if (x->type == JV_INT || x->type == JV_BOOL)
            return jj_int(ev->a, (int64_t)(0 - (uint64_t)inum(x)));
        if (x->type == JV_FLOAT)
            return float_v(ev, -x->f);
        return fail(ev, n, "unary '%s' needs a number, not a %s", n->name, jj_type_name(x));
    case JN_BINARY:
        if (!(x = eval(ev, n->a, s)) || !(y = eval(ev, n->b, s)))
            return NULL;
        return binary(ev, n, x, y);
    case JN_AND:
        if (!(x = eval(ev, n->a, s)))
            return NULL;
        return jj_truthy(x) ? eval(ev, n->b, s) : x;
    case JN_OR:
        if (!(x = eval(ev, n->a, s)))
            return NULL;
        return jj_truthy(x) ? x : eval(ev, n->b, s);
    case JN_NOT:
        return (x = eval(ev, n->a, s)) ? jj_bool(ev->a, !jj_truthy(x)) : NULL;
    case JN_COND:
        if (!(x = eval(ev, n->b, s)))
            return NULL;
        if (jj_truthy(x))
            return eval(ev, n->a, s);
        return n->c ? eval(ev, n->c, s) : undef(ev, "else");
    default:
        return fail(ev, n, "internal: not an expression", NULL, NULL);
    }
}

/* ---- statements ---- */

static bool emit(struct jj_eval *ev, const struct jj_node *at, struct jj_buf *out, const char *s,
                 size_t n)
{
    jj_buf_add(out, s, n);
    if (out->failed)
        return nomem(ev), false;
    if (out->len > MAX_OUTPUT)
        return fail(ev, at, "the output is longer than the limit", NULL, NULL), false;
    return true;
}

static struct jj_value *loop_var(struct jj_eval *ev, struct jj_value *items, int64_t i)
{
    struct jj_value *d = jj_new(ev->a, JV_DICT);
    int64_t n = items->n;
    if (!d)
        return nomem(ev);
    struct {
        const char *k;
        struct jj_value *v;
    } kv[] = {
        {"index", jj_int(ev->a, i + 1)},
        {"index0", jj_int(ev->a, i)},
        {"revindex", jj_int(ev->a, n - i)},
        {"revindex0", jj_int(ev->a, n - i - 1)},
        {"first", jj_bool(ev->a, i == 0)},
        {"last", jj_bool(ev->a, i == n - 1)},
        {"length", jj_int(ev->a, n)},
        {"previtem", i > 0 ? items->items[i - 1] : undef(ev, "previtem")},
        {"nextitem", i + 1 < n ? items->items[i + 1] : undef(ev, "nextitem")},
    };
    for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++)
        if (!jj_dict_set(ev->a, d, jj_str(ev->a, kv[k].k, strlen(kv[k].k)), kv[k].v))
            return nomem(ev);
    return d;
}

static bool bind_targets(struct jj_eval *ev, struct jj_node *n, struct scope *s,
                         struct jj_value *item)
{
    if (n->n_items == 1)
        return scope_set(ev, s, n->name, item);
    if (item->type != JV_LIST || item->n != n->n_items)
        return fail(ev, n, "cannot unpack a %s into the loop's %s names", jj_type_name(item),
                    NULL), false;
    for (int64_t k = 0; k < n->n_items; k++)
        if (!scope_set(ev, s, n->items[k]->name, item->items[k]))
            return false;
    return true;
}

static bool exec_for(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct jj_buf *out)
{
    struct jj_value *it = eval(ev, n->a, s);
    if (!it)
        return false;
    if (it->type == JV_NONE || it->type == JV_INT || it->type == JV_FLOAT || it->type == JV_BOOL)
        return fail(ev, n->a, "a %s is not iterable", jj_type_name(it), NULL), false;
    struct jj_value *items = as_list(ev, n->a, it);
    if (!items)
        return false;
    struct scope *ls = new_scope(ev, s);
    if (!ls)
        return false;
    if (n->filter) { /* `for x in xs if cond`: loop.* counts the kept items */
        struct jj_value *kept = jj_new(ev->a, JV_LIST);
        if (!kept)
            return nomem(ev), false;
        for (int64_t i = 0; i < items->n; i++) {
            if (!bind_targets(ev, n, ls, items->items[i]))
                return false;
            struct jj_value *c = eval(ev, n->filter, ls);
            if (!c)
                return false;
            if (jj_truthy(c) && !jj_list_push(ev->a, kept, items->items[i]))
                return nomem(ev), false;
        }
        items = kept;
    }
    for (int64_t i = 0; i < items->n; i++) {
        if (++ev->steps > MAX_STEPS)
            return fail(ev, n, "the loops run longer than the limit", NULL, NULL), false;
        struct jj_value *lv = loop_var(ev, items, i);
        if (!lv || !bind_targets(ev, n, ls, items->items[i]) || !scope_set(ev, ls, "loop", lv))
            return false;
        if (!exec(ev, n->b, ls, out))
            return false;
        if (ev->brk == 1) {
            ev->brk = 0;
            break;
        }
        ev->brk = 0;
    }
    if (items->n == 0 && n->c)
        return exec(ev, n->c, s, out);
    return true;
}

static bool exec(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct jj_buf *out)
{
    struct jj_value *v;
    if (ev->e->set)
        return false;
    switch (n->kind) {
    case JN_BLOCK:
        for (int64_t i = 0; i < n->n_items; i++) {
            if (!exec(ev, n->items[i], s, out))
                return false;
            if (ev->brk)
                break;
        }
        return true;
    case JN_TEXT: return emit(ev, n, out, n->text, n->text_len);
    case JN_OUTPUT: {
        if (!(v = eval(ev, n->a, s)))
            return false;
        if (v->type == JV_STRING)
            return emit(ev, n, out, v->s, v->len);
        struct jj_buf b = {0};
        jj_to_str(&b, v);
        bool ok = !b.failed && emit(ev, n, out, b.s ? b.s : "", b.len);
        if (b.failed)
            nomem(ev);
        free(b.s);
        return ok;
    }
    case JN_IF:
        if (!(v = eval(ev, n->a, s)))
            return false;
        if (jj_truthy(v))
            return exec(ev, n->b, s, out);
        return n->c ? exec(ev, n->c, s, out) : true;
    case JN_FOR: return exec_for(ev, n, s, out);
    case JN_SET:
        if (!(v = eval(ev, n->a, s)))
            return false;
        if (n->attr) {
            struct jj_value *ns = lookup(ev, s, n->name);
            if (!ns)
                return false;
            if (ns->type != JV_NAMESPACE)
                return fail(ev, n, "'%s' is not a namespace: its attributes cannot be set",
                            n->name, NULL), false;
            if (!jj_dict_set(ev->a, ns, jj_str(ev->a, n->attr, strlen(n->attr)), v))
                return nomem(ev), false;
            return true;
        }
        return scope_set(ev, s, n->name, v);
    case JN_SET_BLOCK: {
        struct jj_buf b = {0};
        if (!exec(ev, n->a, s, &b)) {
            free(b.s);
            return false;
        }
        return (v = buf_v(ev, &b)) && scope_set(ev, s, n->name, v);
    }
    case JN_MACRO:
        if (!(v = jj_new(ev->a, JV_MACRO)))
            return nomem(ev), false;
        v->macro = n;
        return scope_set(ev, s, n->name, v);
    case JN_BREAK: ev->brk = 1; return true;
    case JN_CONTINUE: ev->brk = 2; return true;
    default:
        return fail(ev, n, "internal: not a statement", NULL, NULL), false;
    }
}

/* ---- entry points ---- */

static int report(const struct jj_arena *a, const struct jj_error *e, const char *name)
{
    if (a->over)
        return ig_error(IG_E_USAGE, "%s: rendering takes more than %d MiB (a runaway loop?)",
                        name, MAX_ARENA_MIB);
    if (e->nomem)
        return ig_error(IG_E_NOMEM, "out of memory rendering %s", name);
    return ig_error(IG_E_USAGE, "%s:%d:%d: %s", name, e->line, e->col, e->msg);
}

static struct jj_node *parse(struct jj_arena *a, const char *src, size_t len, struct jj_error *e)
{
    struct jj_token *toks;
    int64_t n;
    if (!jj_lex(a, src, len, &toks, &n, e)) {
        if (a->failed)
            e->nomem = true;
        return NULL;
    }
    struct jj_node *root = jj_parse(a, toks, n, e);
    if (a->failed)
        e->nomem = true;
    return root;
}

int jinja_check(const char *src, size_t len, const char *name)
{
    struct jj_arena a = {.limit = (size_t)MAX_ARENA_MIB << 20};
    struct jj_error e = {0};
    struct jj_node *root = parse(&a, src, len, &e);
    int st = root ? IG_OK : report(&a, &e, name);
    jj_arena_free(&a);
    return st;
}

static bool set_global(struct jj_eval *ev, const char *name, struct jj_value *v)
{
    return v && scope_set(ev, ev->globals, name, v);
}

static struct jj_value *func(struct jj_eval *ev, jj_builtin fn)
{
    struct jj_value *v = jj_new(ev->a, JV_FUNC);
    if (v)
        v->fn = fn;
    return v;
}

int jinja_render(const char *src, size_t len, const char *name, const struct jinja_input *in,
                 char **out)
{
    struct jj_arena a = {.limit = (size_t)MAX_ARENA_MIB << 20};
    struct jj_error e = {0};
    struct jj_buf b = {0};
    *out = NULL;
    struct jj_node *root = parse(&a, src, len, &e);
    struct jj_eval ev = {.a = &a, .e = &e};
    bool ok = root && (ev.globals = new_scope(&ev, NULL));
    if (ok) {
        struct jj_value *msgs = jj_new(&a, JV_LIST);
        ok = msgs != NULL;
        for (int64_t i = 0; ok && i < in->n_messages; i++) {
            struct jj_value *m = jj_new(&a, JV_DICT);
            const struct chat_message *jm = &in->messages[i];
            ok = m && jj_dict_set(&a, m, jj_str(&a, "role", 4), jj_str(&a, jm->role, strlen(jm->role))) &&
                 jj_dict_set(&a, m, jj_str(&a, "content", 7),
                             jj_str(&a, jm->content, strlen(jm->content))) &&
                 jj_list_push(&a, msgs, m);
        }
        const char *bos = in->bos_token ? in->bos_token : "", *eos = in->eos_token ? in->eos_token : "";
        ok = ok && set_global(&ev, "messages", msgs) &&
             set_global(&ev, "add_generation_prompt", jj_bool(&a, in->add_generation_prompt)) &&
             set_global(&ev, "bos_token", jj_str(&a, bos, strlen(bos))) &&
             set_global(&ev, "eos_token", jj_str(&a, eos, strlen(eos))) &&
             set_global(&ev, "range", func(&ev, g_range)) &&
             set_global(&ev, "namespace", func(&ev, g_namespace)) &&
             set_global(&ev, "dict", func(&ev, g_dict)) &&
             set_global(&ev, "raise_exception", func(&ev, g_raise)) &&
             (in->enable_thinking < 0 ||
              set_global(&ev, "enable_thinking", jj_bool(&a, in->enable_thinking > 0)));
        if (!ok && !e.set)
            nomem(&ev);
        ok = ok && exec(&ev, root, ev.globals, &b);
    }
    int st = IG_OK;
    if (!ok || b.failed) {
        if (b.failed)
            e.nomem = true;
        st = report(&a, &e, name);
        free(b.s);
    } else {
        *out = b.s ? b.s : strdup("");
        if (!*out)
            st = ig_error(IG_E_NOMEM, "out of memory rendering %s", name);
    }
    jj_arena_free(&a);
    return st;
}
