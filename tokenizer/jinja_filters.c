/* tokenizer/jinja_filters.c: what Jinja's values can be asked for by name:
 * the filters (`|trim`, `|tojson`, `|map(attribute=...)`...), the tests
 * (`is defined`, `is string`...), the string and dict methods
 * (`.strip()`, `.split()`, `.items()`...) and the text operations they
 * share (Python's white space, letter case, replace, split), with their
 * arguments by position or name. The names the parser lets through are
 * jj_known_filter's and jj_known_test's. Leaves statements, operators and
 * the render to jinja_eval.c.
 * Covered by tests/unit/test_jinja.py (against jinja2). */
#include "tokenizer/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return jj_str_v(ev, v->s + a, e - a);
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

/* Python's str.isspace (what re's \s matches in a str). */
static bool cp_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* 0 lower, 1 upper, 2 capitalize, 3 title (Python's str.title, for the
 * letters above), 4 the title filter (jinja2's do_title: a word starts
 * after a run of '-', white space, '(', '{', '[' or '<', not after any
 * character without case: "</think>" stays) */
static struct jj_value *change_case(struct jj_eval *ev, const struct jj_value *v, int mode)
{
    struct ig_str b = {0};
    const unsigned char *s = (const unsigned char *)v->s;
    bool word_start = true;
    for (size_t i = 0; i < v->len;) {
        size_t k = cp_len(s + i, v->len - i);
        uint32_t c = s[i];
        if (k == 2)
            c = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
        else if (k == 3)
            c = (uint32_t)(s[i] & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode >= 3 && word_start);
        if (k <= 2) {
            uint32_t d = up ? cp_upper(c) : cp_lower(c);
            char t[2];
            if (d < 0x80) {
                t[0] = (char)d;
                ig_str_putn(&b, t, 1);
            } else {
                t[0] = (char)(0xC0 | d >> 6);
                t[1] = (char)(0x80 | (d & 0x3F));
                ig_str_putn(&b, t, 2);
            }
        } else {
            ig_str_putn(&b, v->s + i, k);
        }
        /* str.title: a word starts after any character that has no case */
        if (mode == 4)
            word_start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || cp_space(c);
        else
            word_start = !(k <= 2 ? cp_cased(c) : false);
        i += k;
    }
    return jj_buf_v(ev, &b);
}

static struct jj_value *replace(struct jj_eval *ev, const struct jj_value *v,
                                const struct jj_value *old, const struct jj_value *new_,
                                int64_t count)
{
    struct ig_str b = {0};
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
            ig_str_putn(&b, v->s + i, v->len - i);
            break;
        }
        size_t at = (size_t)(hit - v->s);
        ig_str_putn(&b, v->s + i, at - i);
        ig_str_putn(&b, new_->s, new_->len);
        done++;
        if (old->len == 0) { /* between every code point */
            if (at >= v->len)
                break;
            size_t k = cp_len((const unsigned char *)v->s + at, v->len - at);
            ig_str_putn(&b, v->s + at, k);
            i = at + k;
        } else {
            i = at + old->len;
        }
        if (b.len > JJ_MAX_OUTPUT) {
            free(b.s);
            return jj_enomem(ev);
        }
    }
    return jj_buf_v(ev, &b);
}

static struct jj_value *split(struct jj_eval *ev, const struct jj_value *v,
                              const struct jj_value *sep, int64_t maxsplit)
{
    struct jj_value *list = jj_new(ev->a, JV_LIST);
    if (!list)
        return jj_enomem(ev);
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
                    return jj_enomem(ev);
                break;
            }
            while (i < n && !space_at(u + i, n - i))
                i += cp_len(u + i, n - i);
            if (!jj_list_push(ev->a, list, jj_str(ev->a, s + start, i - start)))
                return jj_enomem(ev);
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
            return jj_enomem(ev);
        if (!hit)
            break;
        i = e + sep->len;
        done++;
    }
    return list;
}

/* ---- calls: arguments by position or name ---- */


/* The argument at position pos or named name; NULL when absent. */
struct jj_value *jj_arg(const struct jj_args *a, int64_t pos, const char *name)
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

bool jj_want(struct jj_eval *ev, const struct jj_node *at, const struct jj_value *v,
                 enum jj_type t, const char *what)
{
    if (v && v->type == t)
        return true;
    char msg[96];
    snprintf(msg, sizeof msg, "%s needs a %s, not %s", what,
             t == JV_STRING ? "string" : t == JV_INT ? "integer" : t == JV_LIST ? "list" : "dict",
             v ? jj_type_name(v) : "nothing");
    jj_efail(ev, at, "%s", msg, NULL);
    return false;
}


/* ---- methods of strings and dicts ---- */

struct jj_value *jj_method(struct jj_eval *ev, const struct jj_node *at, const char *name,
                               struct jj_value *self, const struct jj_args *a)
{
    struct jj_value *x = jj_arg(a, 0, NULL), *y = jj_arg(a, 1, NULL);
    if (self->type == JV_STRING) {
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            if (x && x->type == JV_NONE)
                x = NULL;
            if (x && !jj_want(ev, at, x, JV_STRING, name))
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
                return jj_efail(ev, at, "%s needs a string", name, NULL);
            for (int64_t i = 0; i < list->n; i++) {
                const struct jj_value *p = list->items[i];
                if (p->type != JV_STRING)
                    return jj_efail(ev, at, "%s needs strings", name, NULL);
                if (p->len <= self->len &&
                    !memcmp(self->s + (end ? self->len - p->len : 0), p->s, p->len))
                    return jj_bool(ev->a, true);
            }
            return jj_bool(ev->a, false);
        }
        if (!strcmp(name, "split")) {
            struct jj_value *sep = jj_arg(a, 0, "sep"), *mx = jj_arg(a, 1, "maxsplit");
            if (sep && sep->type == JV_NONE)
                sep = NULL;
            if ((sep && !jj_want(ev, at, sep, JV_STRING, "split")) ||
                (mx && !jj_want(ev, at, mx, JV_INT, "split's maxsplit")))
                return NULL;
            struct jj_value *r = split(ev, self, sep, mx ? mx->i : -1);
            return r || ev->e->set ? r : jj_efail(ev, at, "split: empty separator", NULL, NULL);
        }
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
            !strcmp(name, "title"))
            return change_case(ev, self, name[0] == 'l' ? 0 : name[0] == 'u' ? 1
                                         : name[0] == 'c' ? 2 : 3);
        if (!strcmp(name, "replace")) {
            struct jj_value *c = jj_arg(a, 2, "count");
            if (!jj_want(ev, at, x, JV_STRING, "replace") || !jj_want(ev, at, y, JV_STRING, "replace"))
                return NULL;
            return replace(ev, self, x, y, c && c->type == JV_INT ? c->i : -1);
        }
        if (!strcmp(name, "find")) {
            if (!jj_want(ev, at, x, JV_STRING, "find"))
                return NULL;
            const char *hit = x->len == 0 ? self->s : memmem(self->s, self->len, x->s, x->len);
            return jj_int(ev->a, hit ? jj_utf8_count(self->s, (size_t)(hit - self->s)) : -1);
        }
        return jj_efail(ev, at, "unsupported construct: the string method '%s'", name, NULL);
    }
    if (self->type == JV_DICT || self->type == JV_NAMESPACE) {
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            struct jj_value *list = jj_new(ev->a, JV_LIST);
            if (!list)
                return jj_enomem(ev);
            for (int64_t i = 0; i < self->n; i += 2) {
                struct jj_value *item = self->items[i + (name[0] == 'v')];
                if (name[0] == 'i') {
                    item = jj_new(ev->a, JV_LIST);
                    if (!item || !jj_list_push(ev->a, item, self->items[i]) ||
                        !jj_list_push(ev->a, item, self->items[i + 1]))
                        return jj_enomem(ev);
                }
                if (!jj_list_push(ev->a, list, item))
                    return jj_enomem(ev);
            }
            return list;
        }
        if (!strcmp(name, "get")) {
            struct jj_value *v = x ? jj_dict_get(self, x) : NULL;
            return v ? v : y ? y : jj_new(ev->a, JV_NONE);
        }
        return jj_efail(ev, at, "unsupported construct: the dict method '%s'", name, NULL);
    }
    return jj_efail(ev, at, "unsupported construct: the method '%s' of a %s", name,
                jj_type_name(self));
}

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "startswith",
                                          "endswith", "split", "upper", "lower",
                                          "capitalize", "title", "replace", "find", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};

static bool listed(const char *const *list, const char *name)
{
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

bool jj_is_method_name(const struct jj_value *self, const char *name)
{
    return listed(self->type == JV_STRING ? str_methods : self->type == JV_DICT ? dict_methods
                                                                                 : NULL,
                  name);
}

bool jj_known_method(const char *name)
{
    return listed(str_methods, name) || listed(dict_methods, name);
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


/* The items of an iterable: a list, a dict's keys, a string's characters. */
struct jj_value *jj_as_list(struct jj_eval *ev, const struct jj_node *at, struct jj_value *v)
{
    if (v->type == JV_LIST)
        return v;
    struct jj_value *l = jj_new(ev->a, JV_LIST);
    if (!l)
        return jj_enomem(ev);
    if (v->type == JV_DICT || v->type == JV_NAMESPACE) {
        for (int64_t i = 0; i < v->n; i += 2)
            if (!jj_list_push(ev->a, l, v->items[i]))
                return jj_enomem(ev);
    } else if (v->type == JV_STRING) {
        for (size_t i = 0; i < v->len;) {
            size_t k = cp_len((const unsigned char *)v->s + i, v->len - i);
            if (!jj_list_push(ev->a, l, jj_str(ev->a, v->s + i, k)))
                return jj_enomem(ev);
            i += k;
        }
    } else if (v->type != JV_UNDEFINED) {
        return jj_efail(ev, at, "a %s is not iterable", jj_type_name(v), NULL);
    }
    return l;
}

struct jj_value *jj_filter(struct jj_eval *ev, struct jj_node *at, const char *name,
                               struct jj_value *v, const struct jj_args *a)
{
    struct jj_value *x = jj_arg(a, 0, NULL);
    if (!strcmp(name, "safe") || !strcmp(name, "string")) /* no autoescaping */
        return name[1] == 't' ? jj_to_string(ev, v) : v;
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        int64_t n = v->type == JV_UNDEFINED ? 0 : length_of(v);
        if (n < 0)
            return jj_efail(ev, at, "a %s has no length", jj_type_name(v), NULL);
        return jj_int(ev->a, n);
    }
    if (!strcmp(name, "trim")) {
        struct jj_value *s = jj_to_string(ev, v), *chars = jj_arg(a, 0, "chars");
        if (chars && chars->type == JV_NONE)
            chars = NULL;
        if (!s || (chars && !jj_want(ev, at, chars, JV_STRING, "trim")))
            return NULL;
        return strip(ev, s, true, true, chars);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title")) {
        struct jj_value *s = jj_to_string(ev, v);
        return s ? change_case(ev, s, name[0] == 'l' ? 0 : name[0] == 'u' ? 1
                                       : name[0] == 'c' ? 2 : 4)
                 : NULL;
    }
    if (!strcmp(name, "tojson")) {
        struct jj_value *ind = jj_arg(a, 0, "indent");
        struct ig_str b = {0};
        if (v->type == JV_UNDEFINED)
            return jj_efail(ev, at, "'%s' is undefined (tojson)", v->undef_name, NULL);
        jj_to_json(&b, v, ind && ind->type == JV_INT ? ind->i : -1, 0);
        return jj_buf_v(ev, &b);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct jj_value *bo = jj_arg(a, 1, "boolean");
        bool use = v->type == JV_UNDEFINED || (bo && jj_truthy(bo) && !jj_truthy(v));
        return use ? (x ? x : jj_str_v(ev, "", 0)) : v;
    }
    if (!strcmp(name, "join")) {
        struct jj_value *sep = jj_arg(a, 0, "d"), *attr = jj_arg(a, 1, "attribute");
        struct jj_value *l = jj_as_list(ev, at, v);
        if (!l || (sep && !jj_want(ev, at, sep, JV_STRING, "join")))
            return NULL;
        struct ig_str b = {0};
        for (int64_t i = 0; i < l->n; i++) {
            if (i && sep)
                ig_str_putn(&b, sep->s, sep->len);
            struct jj_value *item = l->items[i];
            if (attr && attr->type == JV_STRING && !(item = jj_getattr(ev, at, item, attr->s))) {
                free(b.s);
                return NULL;
            }
            jj_to_str(&b, item);
        }
        return jj_buf_v(ev, &b);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        struct jj_value *l = jj_as_list(ev, at, v);
        if (!l)
            return NULL;
        return l->n ? l->items[name[0] == 'f' ? 0 : l->n - 1] : jj_undef(ev, name);
    }
    if (!strcmp(name, "list"))
        return jj_as_list(ev, at, v);
    if (!strcmp(name, "reverse")) {
        if (v->type == JV_STRING) {
            struct ig_str b = {0};
            for (size_t i = v->len; i > 0;) {
                size_t k = i - 1;
                while (k > 0 && ((unsigned char)v->s[k] & 0xC0) == 0x80)
                    k--;
                ig_str_putn(&b, v->s + k, i - k);
                i = k;
            }
            return jj_buf_v(ev, &b);
        }
        struct jj_value *l = jj_as_list(ev, at, v), *r = jj_new(ev->a, JV_LIST);
        if (!l)
            return NULL;
        for (int64_t i = l->n - 1; r && i >= 0; i--)
            if (!jj_list_push(ev->a, r, l->items[i]))
                return jj_enomem(ev);
        return r ? r : jj_enomem(ev);
    }
    if (!strcmp(name, "items")) {
        if (v->type != JV_DICT && v->type != JV_NAMESPACE)
            return jj_efail(ev, at, "items needs a dict, not a %s", jj_type_name(v), NULL);
        return jj_method(ev, at, "items", v, a);
    }
    if (!strcmp(name, "replace")) {
        struct jj_value *s = jj_to_string(ev, v), *y = jj_arg(a, 1, NULL), *c = jj_arg(a, 2, "count");
        if (!s || !jj_want(ev, at, x, JV_STRING, "replace") || !jj_want(ev, at, y, JV_STRING, "replace"))
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
        if (jj_is_num(v))
            return jj_float_v(ev, jj_num(v));
        if (v->type == JV_STRING) {
            char *end;
            double r = strtod(v->s, &end);
            if (end != v->s && !*end)
                return jj_float_v(ev, r);
        }
        return x ? x : jj_float_v(ev, 0);
    }
    if (!strcmp(name, "abs")) {
        if (v->type == JV_INT)
            return jj_int(ev->a, v->i < 0 ? (int64_t)(0 - (uint64_t)v->i) : v->i);
        if (v->type == JV_FLOAT)
            return jj_float_v(ev, fabs(v->f));
        return jj_efail(ev, at, "abs needs a number", NULL, NULL);
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") ||
        !strcmp(name, "reject")) {
        bool by_attr = strstr(name, "attr") != NULL, keep_true = name[0] == 's';
        struct jj_value *l = jj_as_list(ev, at, v), *out = jj_new(ev->a, JV_LIST);
        if (!l || !out)
            return l ? jj_enomem(ev) : NULL;
        struct jj_value *attr = by_attr ? x : NULL;
        if (by_attr && !jj_want(ev, at, attr, JV_STRING, name))
            return NULL;
        struct jj_value *test = jj_arg(a, by_attr ? 1 : 0, NULL);
        if (test && !jj_want(ev, at, test, JV_STRING, name))
            return NULL;
        /* the test's own arguments follow its name */
        struct jj_args ta = {0};
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
                    if (!t && !(t = jj_undef(ev, attr->s)))
                        return NULL;
                } else if (!(t = jj_getattr(ev, at, item, attr->s))) {
                    return NULL;
                }
            }
            bool r;
            if (test) {
                if (!jj_run_test(ev, at, test->s, t, &ta, &r))
                    return NULL;
            } else {
                r = jj_truthy(t);
            }
            if (r == keep_true && !jj_list_push(ev->a, out, item))
                return jj_enomem(ev);
        }
        return out;
    }
    if (!strcmp(name, "map")) {
        struct jj_value *l = jj_as_list(ev, at, v), *out = jj_new(ev->a, JV_LIST);
        struct jj_value *attr = jj_arg(a, -1, "attribute"), *dflt = jj_arg(a, -1, "default");
        if (!l || !out)
            return l ? jj_enomem(ev) : NULL;
        for (int64_t i = 0; i < l->n; i++) {
            struct jj_value *r;
            if (attr) {
                if (!jj_want(ev, at, attr, JV_STRING, "map's attribute") ||
                    !(r = jj_getattr(ev, at, l->items[i], attr->s)))
                    return NULL;
                if (r->type == JV_UNDEFINED && dflt)
                    r = dflt;
            } else {
                if (!jj_want(ev, at, x, JV_STRING, "map"))
                    return NULL;
                struct jj_args rest = {a->v + 1, a->kw + 1, a->n - 1};
                if (!(r = jj_filter(ev, at, x->s, l->items[i], &rest)))
                    return NULL;
            }
            if (!jj_list_push(ev->a, out, r))
                return jj_enomem(ev);
        }
        return out;
    }
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort")) {
        bool dict = name[0] == 'd';
        struct jj_value *rev = jj_arg(a, dict ? 2 : 0, "reverse"), *attr = jj_arg(a, -1, "attribute");
        struct jj_value *l = dict ? (v->type == JV_DICT ? jj_method(ev, at, "items", v, a) : NULL)
                                  : jj_as_list(ev, at, v);
        if (!l)
            return ev->e->set ? NULL : jj_efail(ev, at, "dictsort needs a dict", NULL, NULL);
        struct jj_value *out = jj_new(ev->a, JV_LIST);
        struct jj_value **keys = jj_alloc(ev->a, (size_t)(l->n + 1) * sizeof *keys);
        if (!out || !keys)
            return jj_enomem(ev);
        for (int64_t i = 0; i < l->n; i++) { /* stable insertion sort: lists are short */
            struct jj_value *item = l->items[i], *key = dict ? item->items[0] : item;
            if (attr && attr->type == JV_STRING && !(key = jj_getattr(ev, at, item, attr->s)))
                return NULL;
            if (!jj_list_push(ev->a, out, item))
                return jj_enomem(ev);
            int64_t k = out->n - 1;
            while (k > 0) {
                struct jj_node cmp = {.kind = JN_BINARY, .name = rev && jj_truthy(rev) ? "<" : ">",
                                      .line = at->line, .col = at->col};
                struct jj_value *gt = jj_binary(ev, &cmp, keys[k - 1], key);
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
    return jj_efail(ev, at, "unsupported construct: the filter '%s'", name, NULL);
}

bool jj_run_test(struct jj_eval *ev, const struct jj_node *at, const char *name,
                     struct jj_value *v, const struct jj_args *a, bool *out)
{
    struct jj_value *x = jj_arg(a, 0, NULL);
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
            return jj_efail(ev, at, "'%s' needs an integer", name, NULL), false;
        *out = ((v->i % 2) != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (t != JV_INT || !x || x->type != JV_INT || x->i == 0)
            return jj_efail(ev, at, "'divisibleby' needs integers", NULL, NULL), false;
        *out = v->i % x->i == 0;
    } else if (!strcmp(name, "in")) {
        bool ok;
        *out = x && jj_contains(x, v, &ok);
        if (x && !ok)
            return jj_efail(ev, at, "'in' does not apply to a %s", jj_type_name(x), NULL), false;
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (t != JV_STRING)
            return jj_efail(ev, at, "'%s' needs a string", name, NULL), false;
        bool r = true;
        for (size_t i = 0; i < v->len; i++)
            if ((name[0] == 'l' && v->s[i] >= 'A' && v->s[i] <= 'Z') ||
                (name[0] == 'u' && v->s[i] >= 'a' && v->s[i] <= 'z'))
                r = false;
        *out = r;
    } else {
        jj_efail(ev, at, "unsupported construct: the test '%s'", name, NULL);
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
