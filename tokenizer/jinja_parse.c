/* tokenizer/jinja_parse.c: Jinja tokens → a tree of statements and
 * expressions, with Jinja's precedence (ternary < or < and < not <
 * comparisons < + - < ~ < * / // % < ** < unary < postfix and filters).
 * A statement or operator outside the subset (tokenizer/jinja.h) is refused
 * here, naming it, before anything is rendered. Leaves evaluation to
 * jinja_eval.c. Covered by tests/unit/test_jinja.py and the fuzz target. */
#include "tokenizer/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    struct jj_arena *a;
    const struct jj_token *t;
    int64_t n, i;
    struct jj_error *e;
    int depth;
};

enum { MAX_DEPTH = 200 };

static const struct jj_token *peek(struct parser *P) { return &P->t[P->i]; }
static const struct jj_token *peek2(struct parser *P)
{
    return P->i + 1 < P->n ? &P->t[P->i + 1] : &P->t[P->n - 1];
}
static const struct jj_token *next(struct parser *P)
{
    const struct jj_token *t = &P->t[P->i];
    if (t->kind != JT_EOF)
        P->i++;
    return t;
}

static bool is_op(const struct jj_token *t, const char *op)
{
    return t->kind == JT_OP && !strcmp(t->text, op);
}
static bool is_name(const struct jj_token *t, const char *name)
{
    return t->kind == JT_NAME && !strcmp(t->text, name);
}

static const char *tok_desc(const struct jj_token *t)
{
    switch (t->kind) {
    case JT_EOF: return "the end of the template";
    case JT_TEXT: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT: case JT_FLOAT: return "a number";
    default: return t->text;
    }
}

static void *fail_at(struct parser *P, const struct jj_token *t, const char *what)
{
    jj_fail(P->e, t->line, t->col, "%s, found %s", what, tok_desc(t));
    return NULL;
}

static bool expect_op(struct parser *P, const char *op)
{
    if (is_op(peek(P), op)) {
        next(P);
        return true;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "expected '%s'", op);
    fail_at(P, peek(P), msg);
    return false;
}

static struct jj_node *node(struct parser *P, enum jj_node_kind k, const struct jj_token *at)
{
    struct jj_node *n = jj_alloc(P->a, sizeof *n);
    if (n) {
        n->kind = k;
        n->line = at->line;
        n->col = at->col;
    }
    return n;
}

/* A growing list of nodes (and names). */
static bool add_item(struct parser *P, struct jj_node *n, struct jj_node *item, const char *kw)
{
    if ((n->n_items & (n->n_items - 1)) == 0) { /* 0, 1, 2, 4, ...: grow */
        int64_t cap = n->n_items ? n->n_items * 2 : 1;
        struct jj_node **items = jj_alloc(P->a, (size_t)cap * sizeof *items);
        const char **kws = jj_alloc(P->a, (size_t)cap * sizeof *kws);
        if (!items || !kws)
            return false;
        if (n->n_items) {
            memcpy(items, n->items, (size_t)n->n_items * sizeof *items);
            memcpy(kws, n->kw_names, (size_t)n->n_items * sizeof *kws);
        }
        n->items = items;
        n->kw_names = kws;
    }
    n->kw_names[n->n_items] = kw;
    n->items[n->n_items++] = item;
    return true;
}

static struct jj_node *expr(struct parser *P);
static struct jj_node *unary(struct parser *P, bool with_filter);

/* (args) of a call, filter or test: positional, then name=value. */
static bool call_args(struct parser *P, struct jj_node *n)
{
    if (!expect_op(P, "("))
        return false;
    while (!is_op(peek(P), ")")) {
        const char *kw = NULL;
        if (peek(P)->kind == JT_NAME && is_op(peek2(P), "=")) {
            kw = next(P)->text;
            next(P);
        } else if (is_op(peek(P), "*") || is_op(peek(P), "**")) {
            return fail_at(P, peek(P), "unsupported construct: *args in a call"), false;
        }
        struct jj_node *v = expr(P);
        if (!v || !add_item(P, n, v, kw))
            return false;
        if (!is_op(peek(P), ","))
            break;
        next(P);
    }
    return expect_op(P, ")");
}

static struct jj_node *constant(struct parser *P, const struct jj_token *at, struct jj_value *v)
{
    struct jj_node *n = node(P, JN_CONST, at);
    if (!n || !v)
        return NULL;
    n->value = v;
    return n;
}

static struct jj_node *primary(struct parser *P)
{
    const struct jj_token *t = next(P);
    switch (t->kind) {
    case JT_NAME: {
        const char *s = t->text;
        if (!strcmp(s, "true") || !strcmp(s, "True"))
            return constant(P, t, jj_bool(P->a, true));
        if (!strcmp(s, "false") || !strcmp(s, "False"))
            return constant(P, t, jj_bool(P->a, false));
        if (!strcmp(s, "none") || !strcmp(s, "None"))
            return constant(P, t, jj_new(P->a, JV_NONE));
        struct jj_node *n = node(P, JN_NAME, t);
        if (n)
            n->name = s;
        return n;
    }
    case JT_STRING: { /* adjacent strings join */
        struct ig_str b = {0};
        ig_str_putn(&b, t->text, t->len);
        while (peek(P)->kind == JT_STRING) {
            const struct jj_token *u = next(P);
            ig_str_putn(&b, u->text, u->len);
        }
        struct jj_value *v = b.failed ? NULL : jj_str(P->a, b.s ? b.s : "", b.len);
        free(b.s);
        if (!v)
            P->a->failed = true;
        return constant(P, t, v);
    }
    case JT_INT: return constant(P, t, jj_int(P->a, t->ival));
    case JT_FLOAT: {
        struct jj_value *v = jj_new(P->a, JV_FLOAT);
        if (v)
            v->f = t->fval;
        return constant(P, t, v);
    }
    case JT_OP:
        if (!strcmp(t->text, "(")) {
            if (is_op(peek(P), ")")) { /* the empty tuple */
                next(P);
                return node(P, JN_TUPLE, t);
            }
            struct jj_node *first = expr(P);
            if (!first)
                return NULL;
            if (!is_op(peek(P), ",")) {
                return expect_op(P, ")") ? first : NULL;
            }
            struct jj_node *n = node(P, JN_TUPLE, t);
            if (!n || !add_item(P, n, first, NULL))
                return NULL;
            while (is_op(peek(P), ",")) {
                next(P);
                if (is_op(peek(P), ")"))
                    break;
                struct jj_node *v = expr(P);
                if (!v || !add_item(P, n, v, NULL))
                    return NULL;
            }
            return expect_op(P, ")") ? n : NULL;
        }
        if (!strcmp(t->text, "[")) {
            struct jj_node *n = node(P, JN_LIST, t);
            while (n && !is_op(peek(P), "]")) {
                struct jj_node *v = expr(P);
                if (!v || !add_item(P, n, v, NULL))
                    return NULL;
                if (!is_op(peek(P), ","))
                    break;
                next(P);
            }
            return n && expect_op(P, "]") ? n : NULL;
        }
        if (!strcmp(t->text, "{")) {
            struct jj_node *n = node(P, JN_DICT, t);
            while (n && !is_op(peek(P), "}")) {
                struct jj_node *k = expr(P);
                if (!k || !expect_op(P, ":"))
                    return NULL;
                struct jj_node *v = expr(P);
                if (!v || !add_item(P, n, k, NULL) || !add_item(P, n, v, NULL))
                    return NULL;
                if (!is_op(peek(P), ","))
                    break;
                next(P);
            }
            return n && expect_op(P, "}") ? n : NULL;
        }
        break;
    default:
        break;
    }
    return fail_at(P, t, "expected an expression");
}

/* [start:stop:step] or [index] after the '[' */
static struct jj_node *subscript(struct parser *P, struct jj_node *obj, const struct jj_token *at)
{
    struct jj_node *parts[3] = {0};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(peek(P), ":") && !is_op(peek(P), "]")) {
            if (!(parts[k] = expr(P)))
                return NULL;
        }
        if (is_op(peek(P), ":") && k < 2) {
            next(P);
            slice = true;
            k++;
            continue;
        }
        break;
    }
    if (!expect_op(P, "]"))
        return NULL;
    if (!slice && !parts[0])
        return fail_at(P, at, "expected an index");
    struct jj_node *n = node(P, slice ? JN_SLICE : JN_GETITEM, at);
    if (!n)
        return NULL;
    n->a = obj;
    if (slice) {
        struct jj_node *s = node(P, JN_LIST, at); /* holds start, stop, step */
        if (!s)
            return NULL;
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
        n->b = s;
    } else {
        n->b = parts[0];
    }
    return n;
}

static struct jj_node *postfix(struct parser *P, struct jj_node *n)
{
    while (n) {
        const struct jj_token *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            const struct jj_token *name = next(P);
            if (name->kind == JT_INT) { /* x.0 is x[0] */
                struct jj_node *g = node(P, JN_GETITEM, t);
                if (!g || !(g->b = constant(P, name, jj_int(P->a, name->ival))))
                    return NULL;
                g->a = n;
                n = g;
                continue;
            }
            if (name->kind != JT_NAME)
                return fail_at(P, name, "expected an attribute name");
            struct jj_node *g = node(P, JN_GETATTR, t);
            if (!g)
                return NULL;
            g->a = n;
            g->name = name->text;
            n = g;
        } else if (is_op(t, "[")) {
            next(P);
            n = subscript(P, n, t);
        } else if (is_op(t, "(")) {
            if (n->kind == JN_GETATTR && !jj_known_method(n->name)) {
                jj_fail(P->e, n->line, n->col, "unsupported construct: the method '%s'", n->name);
                return NULL;
            }
            struct jj_node *c = node(P, JN_CALL, t);
            if (!c)
                return NULL;
            c->a = n;
            if (!call_args(P, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

/* name or name(args) of a filter or test */
static struct jj_node *filter_or_test(struct parser *P, struct jj_node *obj,
                                      enum jj_node_kind kind, const struct jj_token *at)
{
    const struct jj_token *name = next(P);
    if (name->kind != JT_NAME)
        return fail_at(P, name, kind == JN_FILTER ? "expected a filter name"
                                                  : "expected a test name");
    struct jj_node *n = node(P, kind, at);
    if (!n)
        return NULL;
    n->a = obj;
    n->name = name->text;
    if (!(kind == JN_FILTER ? jj_known_filter(n->name) : jj_known_test(n->name))) {
        jj_fail(P->e, name->line, name->col, "unsupported construct: the %s '%s'",
                kind == JN_FILTER ? "filter" : "test", n->name);
        return NULL;
    }
    if (is_op(peek(P), "("))
        return call_args(P, n) ? n : NULL;
    if (kind == JN_TEST) { /* `is divisibleby 3`: one argument without parentheses */
        const struct jj_token *t = peek(P);
        bool arg = t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
                   is_op(t, "[") || is_op(t, "{") ||
                   (t->kind == JT_NAME && !is_name(t, "else") && !is_name(t, "or") &&
                    !is_name(t, "and") && !is_name(t, "if") && !is_name(t, "in") &&
                    !is_name(t, "is") && !is_name(t, "not"));
        if (arg) {
            struct jj_node *v = unary(P, false);
            if (!v || !add_item(P, n, v, NULL))
                return NULL;
        }
    }
    return n;
}

static struct jj_node *filters(struct parser *P, struct jj_node *n)
{
    while (n) {
        const struct jj_token *t = peek(P);
        if (is_op(t, "|")) {
            next(P);
            n = filter_or_test(P, n, JN_FILTER, t);
        } else if (is_name(t, "is")) {
            next(P);
            bool neg = false;
            if (is_name(peek(P), "not")) {
                next(P);
                neg = true;
            }
            n = filter_or_test(P, n, JN_TEST, t);
            if (n && neg) {
                struct jj_node *x = node(P, JN_NOT, t);
                if (x)
                    x->a = n;
                n = x;
            }
        } else if (is_op(t, "(")) {
            n = postfix(P, n);
        } else {
            break;
        }
    }
    return n;
}

static struct jj_node *unary(struct parser *P, bool with_filter)
{
    const struct jj_token *t = peek(P);
    if (++P->depth > MAX_DEPTH) {
        P->depth--;
        return fail_at(P, t, "the expression nests too deeply");
    }
    struct jj_node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        n = node(P, JN_UNARY, t);
        if (n) {
            n->name = t->text;
            n->a = unary(P, false);
            if (!n->a)
                n = NULL;
        }
    } else {
        n = postfix(P, primary(P));
    }
    if (with_filter)
        n = filters(P, n);
    P->depth--;
    return n;
}

static struct jj_node *binary(struct parser *P, const struct jj_token *at, const char *op,
                              struct jj_node *l, struct jj_node *r)
{
    if (!l || !r)
        return NULL;
    struct jj_node *n = node(P, JN_BINARY, at);
    if (n) {
        n->name = op;
        n->a = l;
        n->b = r;
    }
    return n;
}

static struct jj_node *power(struct parser *P)
{
    struct jj_node *n = unary(P, true);
    while (n && is_op(peek(P), "**")) {
        const struct jj_token *t = next(P);
        n = binary(P, t, "**", n, unary(P, true));
    }
    return n;
}

static struct jj_node *math2(struct parser *P)
{
    struct jj_node *n = power(P);
    while (n) {
        const struct jj_token *t = peek(P);
        if (!is_op(t, "*") && !is_op(t, "/") && !is_op(t, "//") && !is_op(t, "%"))
            break;
        next(P);
        n = binary(P, t, t->text, n, power(P));
    }
    return n;
}

static struct jj_node *concat(struct parser *P)
{
    struct jj_node *n = math2(P);
    while (n && is_op(peek(P), "~")) {
        const struct jj_token *t = next(P);
        n = binary(P, t, "~", n, math2(P));
    }
    return n;
}

static struct jj_node *math1(struct parser *P)
{
    struct jj_node *n = concat(P);
    while (n) {
        const struct jj_token *t = peek(P);
        if (!is_op(t, "+") && !is_op(t, "-"))
            break;
        next(P);
        n = binary(P, t, t->text, n, concat(P));
    }
    return n;
}

static struct jj_node *compare(struct parser *P)
{
    struct jj_node *n = math1(P);
    while (n) {
        const struct jj_token *t = peek(P);
        const char *op = NULL;
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") ||
            is_op(t, ">") || is_op(t, ">="))
            op = t->text;
        else if (is_name(t, "in"))
            op = "in";
        else if (is_name(t, "not") && is_name(peek2(P), "in"))
            op = "not in";
        if (!op)
            break;
        next(P);
        if (!strcmp(op, "not in"))
            next(P);
        /* a chain a < b < c is not in the subset: evaluated pairwise left to right */
        n = binary(P, t, op, n, math1(P));
    }
    return n;
}

static struct jj_node *not_expr(struct parser *P)
{
    const struct jj_token *t = peek(P);
    if (is_name(t, "not")) {
        next(P);
        if (++P->depth > MAX_DEPTH)
            return fail_at(P, t, "the expression nests too deeply");
        struct jj_node *n = node(P, JN_NOT, t);
        if (n && !(n->a = not_expr(P)))
            n = NULL;
        P->depth--;
        return n;
    }
    return compare(P);
}

static struct jj_node *and_expr(struct parser *P)
{
    struct jj_node *n = not_expr(P);
    while (n && is_name(peek(P), "and")) {
        const struct jj_token *t = next(P);
        struct jj_node *x = node(P, JN_AND, t);
        if (!x || !(x->b = not_expr(P)))
            return NULL;
        x->a = n;
        n = x;
    }
    return n;
}

static struct jj_node *or_expr(struct parser *P)
{
    struct jj_node *n = and_expr(P);
    while (n && is_name(peek(P), "or")) {
        const struct jj_token *t = next(P);
        struct jj_node *x = node(P, JN_OR, t);
        if (!x || !(x->b = and_expr(P)))
            return NULL;
        x->a = n;
        n = x;
    }
    return n;
}

/* x if cond else y (else optional: undefined) */
static struct jj_node *expr(struct parser *P)
{
    if (++P->depth > MAX_DEPTH) {
        P->depth--;
        return fail_at(P, peek(P), "the expression nests too deeply");
    }
    struct jj_node *n = or_expr(P);
    while (n && is_name(peek(P), "if")) {
        const struct jj_token *t = next(P);
        struct jj_node *c = node(P, JN_COND, t);
        if (!c || !(c->b = or_expr(P)))
            return NULL;
        c->a = n;
        if (is_name(peek(P), "else")) {
            next(P);
            if (!(c->c = expr(P)))
                return NULL;
        }
        n = c;
    }
    P->depth--;
    return n;
}

/* ---- statements ---- */

static bool block_end(struct parser *P)
{
    if (peek(P)->kind == JT_BLOCK_END) {
        next(P);
        return true;
    }
    fail_at(P, peek(P), "expected '%}'");
    return false;
}

/* Is the next tag `{% name %}` for one of the names (NULL-terminated)? */
static const char *at_keyword(struct parser *P, const char *const *names)
{
    if (peek(P)->kind != JT_BLOCK_BEGIN || peek2(P)->kind != JT_NAME)
        return NULL;
    for (int i = 0; names && names[i]; i++)
        if (!strcmp(peek2(P)->text, names[i]))
            return names[i];
    return NULL;
}

static struct jj_node *body(struct parser *P, const char *const *ends, const char *opener,
                            const struct jj_token *open_at);

/* after {% keyword ...: the statement, up to and with its end tag */
static struct jj_node *statement(struct parser *P)
{
    const struct jj_token *begin = next(P); /* {% */
    const struct jj_token *kw = next(P);
    if (kw->kind != JT_NAME)
        return fail_at(P, kw, "expected a statement name after '{%'");
    const char *k = kw->text;
    if (!strcmp(k, "if")) {
        struct jj_node *n = node(P, JN_IF, kw), *cur = n;
        if (!n || !(n->a = expr(P)) || !block_end(P))
            return NULL;
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        for (;;) {
            if (!(cur->b = body(P, ends, "if", kw)))
                return NULL;
            next(P); /* {% */
            const struct jj_token *e = next(P);
            if (!strcmp(e->text, "elif")) {
                struct jj_node *x = node(P, JN_IF, e);
                if (!x || !(x->a = expr(P)) || !block_end(P))
                    return NULL;
                struct jj_node *blk = node(P, JN_BLOCK, e);
                if (!blk || !add_item(P, blk, x, NULL))
                    return NULL;
                cur->c = blk;
                cur = x;
                continue;
            }
            if (!strcmp(e->text, "else")) {
                static const char *const end_if[] = {"endif", NULL};
                if (!block_end(P) || !(cur->c = body(P, end_if, "if", kw)))
                    return NULL;
                next(P);
                next(P);
            }
            return block_end(P) ? n : NULL;
        }
    }
    if (!strcmp(k, "for")) {
        struct jj_node *n = node(P, JN_FOR, kw);
        struct jj_node *targets = n ? node(P, JN_TUPLE, kw) : NULL;
        if (!targets)
            return NULL;
        do {
            const struct jj_token *t = next(P);
            if (t->kind != JT_NAME)
                return fail_at(P, t, "expected a loop variable name");
            struct jj_node *v = node(P, JN_NAME, t);
            if (!v || !add_item(P, targets, v, NULL))
                return NULL;
            v->name = t->text;
        } while (is_op(peek(P), ",") && next(P));
        n->b = NULL;
        n->name = targets->items[0]->name;
        n->items = targets->items;
        n->n_items = targets->n_items;
        if (!is_name(peek(P), "in"))
            return fail_at(P, peek(P), "expected 'in'");
        next(P);
        if (!(n->a = or_expr(P))) /* the iterable: no ternary, `if` filters */
            return NULL;
        if (is_name(peek(P), "if")) {
            next(P);
            if (!(n->filter = expr(P)))
                return NULL;
        }
        if (is_name(peek(P), "recursive")) {
            jj_fail(P->e, peek(P)->line, peek(P)->col, "unsupported construct: a recursive loop");
            return NULL;
        }
        if (!block_end(P))
            return NULL;
        static const char *const ends[] = {"else", "endfor", NULL};
        if (!(n->b = body(P, ends, "for", kw)))
            return NULL;
        next(P);
        if (!strcmp(next(P)->text, "else")) {
            static const char *const end_for[] = {"endfor", NULL};
            if (!block_end(P) || !(n->c = body(P, end_for, "for", kw)))
                return NULL;
            next(P);
            next(P);
        }
        return block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "set")) {
        const struct jj_token *t = next(P);
        if (t->kind != JT_NAME)
            return fail_at(P, t, "expected a variable name after 'set'");
        const char *attr = NULL;
        if (is_op(peek(P), ".")) {
            next(P);
            const struct jj_token *a = next(P);
            if (a->kind != JT_NAME)
                return fail_at(P, a, "expected an attribute name");
            attr = a->text;
        }
        if (is_op(peek(P), ","))
            return fail_at(P, peek(P), "unsupported construct: set with several targets");
        if (peek(P)->kind == JT_BLOCK_END && !attr) { /* {% set x %}...{% endset %} */
            next(P);
            struct jj_node *n = node(P, JN_SET_BLOCK, kw);
            static const char *const ends[] = {"endset", NULL};
            if (!n || !(n->a = body(P, ends, "set", kw)))
                return NULL;
            n->name = t->text;
            next(P);
            next(P);
            return block_end(P) ? n : NULL;
        }
        if (!expect_op(P, "="))
            return NULL;
        struct jj_node *n = node(P, JN_SET, kw);
        if (!n || !(n->a = expr(P)))
            return NULL;
        if (is_op(peek(P), ",")) { /* set x = a, b: a tuple */
            struct jj_node *tu = node(P, JN_TUPLE, kw);
            if (!tu || !add_item(P, tu, n->a, NULL))
                return NULL;
            while (is_op(peek(P), ",")) {
                next(P);
                struct jj_node *v = expr(P);
                if (!v || !add_item(P, tu, v, NULL))
                    return NULL;
            }
            n->a = tu;
        }
        n->name = t->text;
        n->attr = attr;
        return block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "macro")) {
        const struct jj_token *t = next(P);
        if (t->kind != JT_NAME)
            return fail_at(P, t, "expected a macro name");
        struct jj_node *n = node(P, JN_MACRO, kw);
        if (!n || !expect_op(P, "("))
            return NULL;
        n->name = t->text;
        const char *params[64];
        struct jj_node *defs = node(P, JN_LIST, kw);
        if (!defs)
            return NULL;
        while (!is_op(peek(P), ")")) {
            const struct jj_token *p = next(P);
            if (p->kind != JT_NAME)
                return fail_at(P, p, "expected a parameter name");
            if (n->n_params == 64)
                return fail_at(P, p, "more than 64 macro parameters");
            params[n->n_params++] = p->text;
            struct jj_node *d = NULL;
            if (is_op(peek(P), "=")) {
                next(P);
                if (!(d = expr(P)))
                    return NULL;
            }
            if (!add_item(P, defs, d, NULL))
                return NULL;
            if (!is_op(peek(P), ","))
                break;
            next(P);
        }
        if (!expect_op(P, ")") || !block_end(P))
            return NULL;
        n->params = jj_alloc(P->a, (size_t)(n->n_params + 1) * sizeof *n->params);
        if (!n->params)
            return NULL;
        memcpy(n->params, params, (size_t)n->n_params * sizeof *params);
        n->items = defs->items;
        n->n_items = defs->n_items;
        static const char *const ends[] = {"endmacro", NULL};
        if (!(n->a = body(P, ends, "macro", kw)))
            return NULL;
        next(P);
        next(P);
        return block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "break") || !strcmp(k, "continue")) {
        struct jj_node *n = node(P, k[0] == 'b' ? JN_BREAK : JN_CONTINUE, kw);
        return n && block_end(P) ? n : NULL;
    }
    if (!strcmp(k, "generation")) { /* transformers' assistant-mask marker: its body as is */
        if (!block_end(P))
            return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        struct jj_node *n = body(P, ends, "generation", kw);
        if (!n)
            return NULL;
        next(P);
        next(P);
        return block_end(P) ? n : NULL;
    }
    (void)begin;
    jj_fail(P->e, kw->line, kw->col, "unsupported construct '{%% %s %%}'", k);
    return NULL;
}

/* Statements up to a tag named in ends (not consumed), or the end of the
 * template when ends is NULL. */
static struct jj_node *body(struct parser *P, const char *const *ends, const char *opener,
                            const struct jj_token *open_at)
{
    struct jj_node *blk = node(P, JN_BLOCK, peek(P));
    if (!blk)
        return NULL;
    if (++P->depth > MAX_DEPTH)
        return fail_at(P, peek(P), "the statements nest too deeply");
    for (;;) {
        const struct jj_token *t = peek(P);
        struct jj_node *s = NULL;
        if (t->kind == JT_EOF) {
            if (ends) {
                jj_fail(P->e, open_at->line, open_at->col,
                        "'{%% %s %%}' is not closed ('{%% %s %%}' missing)", opener, ends[0]);
                return NULL;
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            next(P);
            if (!(s = node(P, JN_TEXT, t)))
                return NULL;
            s->text = t->text;
            s->text_len = t->len;
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            if (!(s = node(P, JN_OUTPUT, t)) || !(s->a = expr(P)))
                return NULL;
            if (peek(P)->kind != JT_VAR_END)
                return fail_at(P, peek(P), "expected '}}'");
            next(P);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            if (at_keyword(P, ends))
                break;
            const struct jj_token *k = peek2(P);
            if (k->kind == JT_NAME && (!strncmp(k->text, "end", 3) || !strcmp(k->text, "else") ||
                                       !strcmp(k->text, "elif"))) {
                jj_fail(P->e, k->line, k->col, "'{%% %s %%}' without its opening tag", k->text);
                return NULL;
            }
            if (!(s = statement(P)))
                return NULL;
        } else {
            return fail_at(P, t, "unexpected token");
        }
        if (!add_item(P, blk, s, NULL))
            return NULL;
    }
    P->depth--;
    return blk;
}

struct jj_node *jj_parse(struct jj_arena *a, const struct jj_token *toks, int64_t n,
                         struct jj_error *e)
{
    struct parser P = {.a = a, .t = toks, .n = n, .e = e};
    struct jj_node *root = body(&P, NULL, NULL, NULL);
    if (a->failed)
        e->nomem = true;
    return e->set || a->failed ? NULL : root;
}
