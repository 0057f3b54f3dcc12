/* tokenizer/jinja_eval.c: renders a parsed Jinja template (the tree of
 * jinja_parse.c) with a conversation's variables: statements into text,
 * expressions into values (jinja_value.c) with Python's and Jinja's rules
 * (truthiness, `and`/`or` returning an operand, undefined values that print
 * as "" but fail when added or looked into, negative indexes, slices), the
 * operators and the globals chat templates use (tokenizer/jinja.h); the
 * filters, tests and methods are jinja_filters.c's. Bounded: loop iterations, macro depth and output
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
#include <time.h>

struct scope {
    struct scope *parent;
    struct jj_value *vars; /* a dict */
};

struct jj_value *jj_efail(struct jj_eval *ev, const struct jj_node *at, const char *fmt,
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

struct jj_value *jj_enomem(struct jj_eval *ev)
{
    ev->a->failed = true;
    ev->e->nomem = true;
    jj_fail(ev->e, 0, 0, "out of memory");
    return NULL;
}

struct jj_value *jj_undef(struct jj_eval *ev, const char *name)
{
    struct jj_value *v = jj_new(ev->a, JV_UNDEFINED);
    if (!v)
        return jj_enomem(ev);
    v->undef_name = name;
    return v;
}

struct jj_value *jj_str_v(struct jj_eval *ev, const char *s, size_t n)
{
    struct jj_value *v = jj_str(ev->a, s, n);
    return v ? v : jj_enomem(ev);
}

struct jj_value *jj_buf_v(struct jj_eval *ev, struct ig_str *b)
{
    if (b->failed) {
        free(b->s);
        return jj_enomem(ev);
    }
    struct jj_value *v = jj_str_v(ev, b->s ? b->s : "", b->len);
    free(b->s);
    return v;
}

struct jj_value *jj_to_string(struct jj_eval *ev, const struct jj_value *v)
{
    if (v->type == JV_STRING)
        return (struct jj_value *)v;
    struct ig_str b = {0};
    jj_to_str(&b, v);
    return jj_buf_v(ev, &b);
}

static bool scope_set(struct jj_eval *ev, struct scope *s, const char *name, struct jj_value *v)
{
    struct jj_value *k = jj_str(ev->a, name, strlen(name));
    if (!k || !jj_dict_set(ev->a, s->vars, k, v)) {
        jj_enomem(ev);
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
    return jj_undef(ev, name);
}

static struct scope *new_scope(struct jj_eval *ev, struct scope *parent)
{
    struct scope *s = jj_alloc(ev->a, sizeof *s);
    if (!s || !(s->vars = jj_new(ev->a, JV_DICT))) {
        jj_enomem(ev);
        return NULL;
    }
    s->parent = parent;
    return s;
}

/* ---- attributes and items ---- */

struct jj_value *jj_getattr(struct jj_eval *ev, const struct jj_node *at,
                                struct jj_value *obj, const char *name)
{
    if (obj->type == JV_UNDEFINED)
        return jj_efail(ev, at, "'%s' is undefined (looking up its '%s')",
                    obj->undef_name ? obj->undef_name : "value", name);
    if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
        struct jj_value *v = jj_dict_get_s(obj, name);
        if (v)
            return v;
    }
    if (jj_is_method_name(obj, name)) {
        struct jj_value *f = jj_new(ev->a, JV_FUNC);
        if (!f)
            return jj_enomem(ev);
        f->self = obj;
        f->undef_name = name; /* the method's name */
        return f;
    }
    return jj_undef(ev, name);
}

static int64_t py_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

static struct jj_value *getitem(struct jj_eval *ev, const struct jj_node *at,
                                struct jj_value *obj, struct jj_value *key)
{
    if (obj->type == JV_UNDEFINED)
        return jj_efail(ev, at, "'%s' is undefined (looking up an item)",
                    obj->undef_name ? obj->undef_name : "value", NULL);
    if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
        struct jj_value *v = jj_dict_get(obj, key);
        if (v)
            return v;
        if (key->type == JV_STRING)
            return jj_getattr(ev, at, obj, key->s);
        return jj_undef(ev, "item");
    }
    if ((obj->type == JV_LIST || obj->type == JV_STRING) &&
        (key->type == JV_INT || key->type == JV_BOOL)) {
        int64_t k = key->type == JV_INT ? key->i : key->b;
        if (obj->type == JV_LIST) {
            int64_t i = py_index(k, obj->n);
            return i >= 0 && i < obj->n ? obj->items[i] : jj_undef(ev, "item");
        }
        int64_t n = jj_utf8_count(obj->s, obj->len), i = py_index(k, n);
        if (i < 0 || i >= n)
            return jj_undef(ev, "item");
        size_t a = jj_utf8_offset(obj->s, obj->len, i), b = jj_utf8_offset(obj->s, obj->len, i + 1);
        return jj_str_v(ev, obj->s + a, b - a);
    }
    if (key->type == JV_STRING)
        return jj_getattr(ev, at, obj, key->s);
    return jj_undef(ev, "item");
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
            return jj_efail(ev, pn[i], "a slice needs integers", NULL, NULL);
        parts[i] = v->i;
        given[i] = true;
    }
    int64_t step = parts[2];
    if (step == 0)
        return jj_efail(ev, n, "a slice step cannot be zero", NULL, NULL);
    int64_t len;
    if (obj->type == JV_LIST)
        len = obj->n;
    else if (obj->type == JV_STRING)
        len = jj_utf8_count(obj->s, obj->len);
    else if (obj->type == JV_UNDEFINED)
        return jj_efail(ev, n, "'%s' is undefined (slicing it)",
                    obj->undef_name ? obj->undef_name : "value", NULL);
    else
        return jj_efail(ev, n, "a %s cannot be sliced", jj_type_name(obj), NULL);
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
    struct ig_str b = {0};
    if (!out)
        return jj_enomem(ev);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj->type == JV_LIST) {
            if (!jj_list_push(ev->a, out, obj->items[i]))
                return jj_enomem(ev);
        } else {
            size_t x = jj_utf8_offset(obj->s, obj->len, i), y = jj_utf8_offset(obj->s, obj->len, i + 1);
            ig_str_putn(&b, obj->s + x, y - x);
        }
    }
    return obj->type == JV_LIST ? out : jj_buf_v(ev, &b);
}

/* ---- operators ---- */

bool jj_is_num(const struct jj_value *v)
{
    return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}
double jj_num(const struct jj_value *v)
{
    return v->type == JV_FLOAT ? v->f : v->type == JV_INT ? (double)v->i : (double)v->b;
}
static int64_t inum(const struct jj_value *v) { return v->type == JV_INT ? v->i : v->b; }

struct jj_value *jj_float_v(struct jj_eval *ev, double f)
{
    struct jj_value *v = jj_new(ev->a, JV_FLOAT);
    if (!v)
        return jj_enomem(ev);
    v->f = f;
    return v;
}

bool jj_contains(const struct jj_value *hay, const struct jj_value *x, bool *ok)
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

struct jj_value *jj_binary(struct jj_eval *ev, struct jj_node *n, struct jj_value *x,
                               struct jj_value *y)
{
    const char *op = n->name;
    if (!strcmp(op, "~")) {
        struct ig_str b = {0};
        jj_to_str(&b, x);
        jj_to_str(&b, y);
        return jj_buf_v(ev, &b);
    }
    if (!strcmp(op, "==") || !strcmp(op, "!="))
        return jj_bool(ev->a, jj_equal(x, y) == (op[0] == '='));
    if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        bool ok, r = jj_contains(y, x, &ok);
        if (!ok)
            return jj_efail(ev, n, "'in' does not apply to a %s in a %s", jj_type_name(x),
                        jj_type_name(y));
        return jj_bool(ev->a, r == (op[0] == 'i'));
    }
    if (x->type == JV_UNDEFINED || y->type == JV_UNDEFINED) {
        const struct jj_value *u = x->type == JV_UNDEFINED ? x : y;
        return jj_efail(ev, n, "'%s' is undefined (used with '%s')",
                    u->undef_name ? u->undef_name : "value", op);
    }
    if (op[0] == '<' || op[0] == '>') {
        int c;
        if (jj_is_num(x) && jj_is_num(y))
            c = jj_num(x) < jj_num(y) ? -1 : jj_num(x) > jj_num(y);
        else if (x->type == JV_STRING && y->type == JV_STRING) {
            size_t m = x->len < y->len ? x->len : y->len;
            c = memcmp(x->s, y->s, m);
            if (c == 0)
                c = x->len < y->len ? -1 : x->len > y->len;
        } else {
            return jj_efail(ev, n, "'%s' does not compare a %s with that", op, jj_type_name(x));
        }
        bool r = !strcmp(op, "<") ? c < 0 : !strcmp(op, "<=") ? c <= 0 : !strcmp(op, ">") ? c > 0 : c >= 0;
        return jj_bool(ev->a, r);
    }
    if (!strcmp(op, "+")) {
        if (x->type == JV_STRING && y->type == JV_STRING) {
            struct ig_str b = {0};
            ig_str_putn(&b, x->s, x->len);
            ig_str_putn(&b, y->s, y->len);
            if (b.len > JJ_MAX_OUTPUT) {
                free(b.s);
                return jj_efail(ev, n, "a string longer than the limit", NULL, NULL);
            }
            return jj_buf_v(ev, &b);
        }
        if (x->type == JV_LIST && y->type == JV_LIST) {
            struct jj_value *l = jj_new(ev->a, JV_LIST);
            for (int64_t i = 0; l && i < x->n + y->n; i++)
                if (!jj_list_push(ev->a, l, i < x->n ? x->items[i] : y->items[i - x->n]))
                    return jj_enomem(ev);
            return l ? l : jj_enomem(ev);
        }
    }
    if (!strcmp(op, "*") && ((x->type == JV_STRING && y->type == JV_INT) ||
                             (x->type == JV_INT && y->type == JV_STRING))) {
        const struct jj_value *str = x->type == JV_STRING ? x : y;
        int64_t k = x->type == JV_INT ? x->i : y->i;
        if (k > 0 && (uint64_t)k * str->len > JJ_MAX_OUTPUT)
            return jj_efail(ev, n, "a string longer than the limit", NULL, NULL);
        struct ig_str b = {0};
        for (int64_t i = 0; i < k; i++)
            ig_str_putn(&b, str->s, str->len);
        return jj_buf_v(ev, &b);
    }
    if (!jj_is_num(x) || !jj_is_num(y))
        return jj_efail(ev, n, "unsupported construct: '%s' between a %s and that", op,
                    jj_type_name(x));
    bool ints = x->type != JV_FLOAT && y->type != JV_FLOAT;
    int64_t a = inum(x), b = inum(y);
    double fa = jj_num(x), fb = jj_num(y);
    switch (op[0]) {
    case '+': return ints ? jj_int(ev->a, (int64_t)((uint64_t)a + (uint64_t)b)) : jj_float_v(ev, fa + fb);
    case '-': return ints ? jj_int(ev->a, (int64_t)((uint64_t)a - (uint64_t)b)) : jj_float_v(ev, fa - fb);
    case '*':
        if (op[1] == '*') {
            if (ints && b >= 0) {
                int64_t r = 1;
                for (int64_t i = 0; i < b && i < 64; i++)
                    r = (int64_t)((uint64_t)r * (uint64_t)a);
                return jj_int(ev->a, r);
            }
            return jj_float_v(ev, pow(fa, fb));
        }
        return ints ? jj_int(ev->a, (int64_t)((uint64_t)a * (uint64_t)b)) : jj_float_v(ev, fa * fb);
    case '/':
        if (fb == 0)
            return jj_efail(ev, n, "division by zero", NULL, NULL);
        if (op[1] == '/') {
            if (ints) {
                if (a == INT64_MIN && b == -1)
                    return jj_int(ev->a, INT64_MIN);
                int64_t q = a / b;
                if ((a % b != 0) && ((a < 0) != (b < 0)))
                    q--;
                return jj_int(ev->a, q);
            }
            return jj_float_v(ev, floor(fa / fb));
        }
        return jj_float_v(ev, fa / fb);
    case '%':
        if (fb == 0)
            return jj_efail(ev, n, "modulo by zero", NULL, NULL);
        if (ints) {
            if (b == -1)
                return jj_int(ev->a, 0);
            int64_t r = a % b;
            if (r != 0 && ((r < 0) != (b < 0)))
                r += b;
            return jj_int(ev->a, r);
        }
        return jj_float_v(ev, fa - fb * floor(fa / fb));
    }
    return jj_efail(ev, n, "unsupported construct: the operator '%s'", op, NULL);
}

/* ---- calls ---- */

static bool exec(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct ig_str *out);

static struct jj_value *call_macro(struct jj_eval *ev, const struct jj_node *at,
                                   struct jj_value *f, const struct jj_args *a)
{
    struct jj_node *m = f->macro;
    if (ev->depth >= JJ_MAX_CALL_DEPTH)
        return jj_efail(ev, at, "macros call each other more than %s deep", "100", NULL);
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
                return jj_efail(ev, at, "the macro '%s' has no parameter '%s'", m->name, a->kw[i]);
            if (!scope_set(ev, s, a->kw[i], a->v[i]))
                return NULL;
        } else {
            if (pos >= m->n_params)
                return jj_efail(ev, at, "too many arguments for the macro '%s'", m->name, NULL);
            if (!scope_set(ev, s, m->params[pos++], a->v[i]))
                return NULL;
        }
    }
    for (int64_t k = 0; k < m->n_params; k++) {
        if (jj_dict_get_s(s->vars, m->params[k]))
            continue;
        struct jj_value *d = m->items[k] ? eval(ev, m->items[k], s) : jj_undef(ev, m->params[k]);
        if (!d || !scope_set(ev, s, m->params[k], d))
            return NULL;
    }
    struct ig_str b = {0};
    ev->depth++;
    bool ok = exec(ev, m->a, s, &b);
    ev->depth--;
    ev->brk = 0;
    if (!ok) {
        free(b.s);
        return NULL;
    }
    return jj_buf_v(ev, &b);
}

static struct jj_value *call_value(struct jj_eval *ev, const struct jj_node *at,
                                   struct jj_value *f, const struct jj_args *a)
{
    if (f->type == JV_MACRO)
        return call_macro(ev, at, f, a);
    if (f->type == JV_FUNC && f->self)
        return jj_method(ev, at, f->undef_name, f->self, a);
    if (f->type == JV_FUNC)
        return f->fn(ev, (struct jj_node *)at, a->v, a->kw, a->n, NULL);
    if (f->type == JV_UNDEFINED)
        return jj_efail(ev, at, "'%s' is undefined (called)", f->undef_name ? f->undef_name : "value",
                    NULL);
    return jj_efail(ev, at, "a %s cannot be called", jj_type_name(f), NULL);
}

static struct jj_value *g_range(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                                const char **kw, int64_t n, struct jj_value *self)
{
    (void)kw, (void)self;
    int64_t p[3] = {0, 0, 1};
    if (n < 1 || n > 3)
        return jj_efail(ev, at, "range takes 1 to 3 integers", NULL, NULL);
    for (int64_t i = 0; i < n; i++) {
        if (v[i]->type != JV_INT)
            return jj_efail(ev, at, "range takes integers", NULL, NULL);
    }
    if (n == 1)
        p[1] = v[0]->i;
    else
        p[0] = v[0]->i, p[1] = v[1]->i, p[2] = n == 3 ? v[2]->i : 1;
    if (p[2] == 0)
        return jj_efail(ev, at, "range's step cannot be zero", NULL, NULL);
    struct jj_value *l = jj_new(ev->a, JV_LIST);
    if (!l)
        return jj_enomem(ev);
    for (int64_t i = p[0]; p[2] > 0 ? i < p[1] : i > p[1]; i += p[2]) {
        if (++ev->steps > JJ_MAX_STEPS)
            return jj_efail(ev, at, "range is longer than the limit", NULL, NULL);
        if (!jj_list_push(ev->a, l, jj_int(ev->a, i)))
            return jj_enomem(ev);
    }
    return l;
}

static struct jj_value *g_namespace(struct jj_eval *ev, struct jj_node *at, struct jj_value **v,
                                    const char **kw, int64_t n, struct jj_value *self)
{
    (void)self;
    struct jj_value *ns = jj_new(ev->a, JV_NAMESPACE);
    if (!ns)
        return jj_enomem(ev);
    for (int64_t i = 0; i < n; i++) {
        if (!kw[i]) {
            if (v[i]->type != JV_DICT)
                return jj_efail(ev, at, "namespace takes name=value arguments", NULL, NULL);
            for (int64_t k = 0; k < v[i]->n; k += 2)
                if (!jj_dict_set(ev->a, ns, v[i]->items[k], v[i]->items[k + 1]))
                    return jj_enomem(ev);
            continue;
        }
        if (!jj_dict_set(ev->a, ns, jj_str(ev->a, kw[i], strlen(kw[i])), v[i]))
            return jj_enomem(ev);
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
    struct ig_str b = {0};
    if (n > 0)
        jj_to_str(&b, v[0]);
    char msg[160];
    snprintf(msg, sizeof msg, "%.*s", (int)(b.len < 150 ? b.len : 150), b.s ? b.s : "");
    free(b.s);
    return jj_efail(ev, at, "the template raised an exception: %s", msg, NULL);
}

/* strftime_now(format): the local time now in C's strftime's format (what
 * transformers gives templates: datetime.now().strftime; the codes
 * templates use, %Y %m %d %B %b %A %H %M, mean the same in both; gpt-oss's
 * harmony template writes "Current date: %Y-%m-%d"). */
static struct jj_value *g_strftime_now(struct jj_eval *ev, struct jj_node *at,
                                       struct jj_value **v, const char **kw, int64_t n,
                                       struct jj_value *self)
{
    (void)kw, (void)self;
    if (n != 1 || v[0]->type != JV_STRING)
        return jj_efail(ev, at, "strftime_now takes one string (a format)", NULL, NULL);
    time_t now = time(NULL);
    struct tm tm;
    char out[256];
    /* the template's format: strftime reads only the codes, writes at most out's size */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    size_t len = localtime_r(&now, &tm) ? strftime(out, sizeof out, v[0]->s, &tm) : 0;
#pragma GCC diagnostic pop
    return jj_str_v(ev, out, len);
}

/* ---- expressions ---- */

static bool eval_args(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct jj_args *a)
{
    a->n = n->n_items;
    a->kw = n->kw_names;
    a->v = n->n_items ? jj_alloc(ev->a, (size_t)n->n_items * sizeof *a->v) : NULL;
    if (n->n_items && !a->v)
        return jj_enomem(ev), false;
    for (int64_t i = 0; i < n->n_items; i++)
        if (!(a->v[i] = eval(ev, n->items[i], s)))
            return false;
    return true;
}

static struct jj_value *eval(struct jj_eval *ev, struct jj_node *n, struct scope *s)
{
    struct jj_value *x, *y;
    struct jj_args a;
    if (ev->e->set)
        return NULL;
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return lookup(ev, s, n->name);
    case JN_LIST: case JN_TUPLE: {
        struct jj_value *l = jj_new(ev->a, JV_LIST);
        if (!l)
            return jj_enomem(ev);
        for (int64_t i = 0; i < n->n_items; i++) {
            if (!(x = eval(ev, n->items[i], s)))
                return NULL;
            if (!jj_list_push(ev->a, l, x))
                return jj_enomem(ev);
        }
        return l;
    }
    case JN_DICT: {
        struct jj_value *d = jj_new(ev->a, JV_DICT);
        if (!d)
            return jj_enomem(ev);
        for (int64_t i = 0; i + 1 < n->n_items; i += 2) {
            if (!(x = eval(ev, n->items[i], s)) || !(y = eval(ev, n->items[i + 1], s)))
                return NULL;
            if (!jj_dict_set(ev->a, d, x, y))
                return jj_enomem(ev);
        }
        return d;
    }
    case JN_GETATTR:
        return (x = eval(ev, n->a, s)) ? jj_getattr(ev, n, x, n->name) : NULL;
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
        return jj_filter(ev, n, n->name, x, &a);
    case JN_TEST: {
        bool r;
        if (!(x = eval(ev, n->a, s)) || !eval_args(ev, n, s, &a) ||
            !jj_run_test(ev, n, n->name, x, &a, &r))
            return NULL;
        return jj_bool(ev->a, r);
    }
    case JN_UNARY:
        if (!(x = eval(ev, n->a, s)))
            return NULL;
        if (n->name[0] == '+' && jj_is_num(x))
            return x;
        if (x->type == JV_INT || x->type == JV_BOOL)
            return jj_int(ev->a, (int64_t)(0 - (uint64_t)inum(x)));
        if (x->type == JV_FLOAT)
            return jj_float_v(ev, -x->f);
        return jj_efail(ev, n, "unary '%s' needs a number, not a %s", n->name, jj_type_name(x));
    case JN_BINARY:
        if (!(x = eval(ev, n->a, s)) || !(y = eval(ev, n->b, s)))
            return NULL;
        return jj_binary(ev, n, x, y);
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
        return n->c ? eval(ev, n->c, s) : jj_undef(ev, "else");
    default:
        return jj_efail(ev, n, "internal: not an expression", NULL, NULL);
    }
}

/* ---- statements ---- */

static bool emit(struct jj_eval *ev, const struct jj_node *at, struct ig_str *out, const char *s,
                 size_t n)
{
    ig_str_putn(out, s, n);
    if (out->failed)
        return jj_enomem(ev), false;
    if (out->len > JJ_MAX_OUTPUT)
        return jj_efail(ev, at, "the output is longer than the limit", NULL, NULL), false;
    return true;
}

static struct jj_value *loop_var(struct jj_eval *ev, struct jj_value *items, int64_t i)
{
    struct jj_value *d = jj_new(ev->a, JV_DICT);
    int64_t n = items->n;
    if (!d)
        return jj_enomem(ev);
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
        {"previtem", i > 0 ? items->items[i - 1] : jj_undef(ev, "previtem")},
        {"nextitem", i + 1 < n ? items->items[i + 1] : jj_undef(ev, "nextitem")},
    };
    for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++)
        if (!jj_dict_set(ev->a, d, jj_str(ev->a, kv[k].k, strlen(kv[k].k)), kv[k].v))
            return jj_enomem(ev);
    return d;
}

static bool bind_targets(struct jj_eval *ev, struct jj_node *n, struct scope *s,
                         struct jj_value *item)
{
    if (n->n_items == 1)
        return scope_set(ev, s, n->name, item);
    if (item->type != JV_LIST || item->n != n->n_items)
        return jj_efail(ev, n, "cannot unpack a %s into the loop's %s names", jj_type_name(item),
                    NULL), false;
    for (int64_t k = 0; k < n->n_items; k++)
        if (!scope_set(ev, s, n->items[k]->name, item->items[k]))
            return false;
    return true;
}

static bool exec_for(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct ig_str *out)
{
    struct jj_value *it = eval(ev, n->a, s);
    if (!it)
        return false;
    if (it->type == JV_NONE || it->type == JV_INT || it->type == JV_FLOAT || it->type == JV_BOOL)
        return jj_efail(ev, n->a, "a %s is not iterable", jj_type_name(it), NULL), false;
    struct jj_value *items = jj_as_list(ev, n->a, it);
    if (!items)
        return false;
    struct scope *ls = new_scope(ev, s);
    if (!ls)
        return false;
    if (n->filter) { /* `for x in xs if cond`: loop.* counts the kept items */
        struct jj_value *kept = jj_new(ev->a, JV_LIST);
        if (!kept)
            return jj_enomem(ev), false;
        for (int64_t i = 0; i < items->n; i++) {
            if (!bind_targets(ev, n, ls, items->items[i]))
                return false;
            struct jj_value *c = eval(ev, n->filter, ls);
            if (!c)
                return false;
            if (jj_truthy(c) && !jj_list_push(ev->a, kept, items->items[i]))
                return jj_enomem(ev), false;
        }
        items = kept;
    }
    for (int64_t i = 0; i < items->n; i++) {
        if (++ev->steps > JJ_MAX_STEPS)
            return jj_efail(ev, n, "the loops run longer than the limit", NULL, NULL), false;
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

static bool exec(struct jj_eval *ev, struct jj_node *n, struct scope *s, struct ig_str *out)
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
        struct ig_str b = {0};
        jj_to_str(&b, v);
        bool ok = !b.failed && emit(ev, n, out, b.s ? b.s : "", b.len);
        if (b.failed)
            jj_enomem(ev);
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
                return jj_efail(ev, n, "'%s' is not a namespace: its attributes cannot be set",
                            n->name, NULL), false;
            if (!jj_dict_set(ev->a, ns, jj_str(ev->a, n->attr, strlen(n->attr)), v))
                return jj_enomem(ev), false;
            return true;
        }
        return scope_set(ev, s, n->name, v);
    case JN_SET_BLOCK: {
        struct ig_str b = {0};
        if (!exec(ev, n->a, s, &b)) {
            free(b.s);
            return false;
        }
        return (v = jj_buf_v(ev, &b)) && scope_set(ev, s, n->name, v);
    }
    case JN_MACRO:
        if (!(v = jj_new(ev->a, JV_MACRO)))
            return jj_enomem(ev), false;
        v->macro = n;
        return scope_set(ev, s, n->name, v);
    case JN_BREAK: ev->brk = 1; return true;
    case JN_CONTINUE: ev->brk = 2; return true;
    default:
        return jj_efail(ev, n, "internal: not a statement", NULL, NULL), false;
    }
}

/* ---- entry points ---- */

static int report(const struct jj_arena *a, const struct jj_error *e, const char *name)
{
    if (a->over)
        return ig_error(IG_E_USAGE, "%s: rendering takes more than %d MiB (a runaway loop?)",
                        name, JJ_MAX_ARENA_MIB);
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
    struct jj_arena a = {.limit = (size_t)JJ_MAX_ARENA_MIB << 20};
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
    struct jj_arena a = {.limit = (size_t)JJ_MAX_ARENA_MIB << 20};
    struct jj_error e = {0};
    struct ig_str b = {0};
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
             set_global(&ev, "strftime_now", func(&ev, g_strftime_now)) &&
             (in->enable_thinking < 0 ||
              set_global(&ev, "enable_thinking", jj_bool(&a, in->enable_thinking > 0)));
        if (!ok && !e.set)
            jj_enomem(&ev);
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
