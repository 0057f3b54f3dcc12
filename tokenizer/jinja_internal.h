/* tokenizer/jinja_internal.h: what the Jinja lexer, parser, values and
 * evaluator share (tokenizer/jinja.h describes the subset): the arena every
 * render allocates from, the tokens, the tree, the values. Private to the
 * jinja_*.c files. */
#ifndef IGNITE_TOKENIZER_JINJA_INTERNAL_H
#define IGNITE_TOKENIZER_JINJA_INTERNAL_H

#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the arena: everything of one render, freed at once ---- */

struct jj_chunk;
struct jj_arena {
    struct jj_chunk *head;
    size_t total, limit; /* bytes taken; at most limit (0: no limit) */
    bool failed;         /* an allocation failed (the render stops) */
    bool over;           /* ... because the limit was reached */
};
void *jj_alloc(struct jj_arena *a, size_t n); /* zeroed; NULL sets failed */
char *jj_strndup(struct jj_arena *a, const char *s, size_t n);
void jj_arena_free(struct jj_arena *a);

/* ---- tokens ---- */

enum jj_tok {
    JT_EOF, JT_TEXT,           /* template text between tags */
    JT_VAR_BEGIN, JT_VAR_END,  /* {{ }} */
    JT_BLOCK_BEGIN, JT_BLOCK_END, /* {% %} */
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT,
    JT_OP,                     /* punctuation: text holds it */
};

struct jj_token {
    enum jj_tok kind;
    const char *text; /* arena copy: the text, the name, the string's value, the operator */
    size_t len;
    int64_t ival;
    double fval;
    int line, col;
};

/* The error both passes report: the first one wins. */
struct jj_error {
    char msg[256];
    int line, col;
    bool set;
    bool nomem;
};
void jj_fail(struct jj_error *e, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Tokens of the whole source (whitespace control applied to the text
 * tokens); false with *e set. */
bool jj_lex(struct jj_arena *a, const char *src, size_t len, struct jj_token **toks,
            int64_t *n, struct jj_error *e);

/* ---- the tree ---- */

enum jj_node_kind {
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK,
    JN_CONTINUE, JN_BLOCK, /* a list of statements (a body, the generation block) */
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_UNARY, JN_BINARY, JN_AND, JN_OR, JN_NOT, JN_COND, JN_TUPLE,
};

struct jj_value;
struct jj_node {
    enum jj_node_kind kind;
    int line, col;
    const char *name;   /* NAME, GETATTR's attribute, FILTER/TEST's name, BINARY's op,
                           SET's target name, FOR's first target, MACRO's name */
    const char *attr;   /* SET: namespace attribute (name.attr = ...) */
    struct jj_node *a, *b, *c; /* operands; IF: cond, then, else; FOR: iter, body, else;
                                  SLICE: start, stop, step; COND: then, cond, else */
    struct jj_node *filter; /* FOR's `if` condition */
    struct jj_node **items; /* LIST/TUPLE/DICT (key, value pairs)/CALL args/BLOCK/targets */
    int64_t n_items;
    const char **kw_names;  /* CALL/FILTER/TEST: keyword arguments' names (NULL: positional) */
    const char **params;    /* MACRO: parameter names, defaults in items */
    int64_t n_params;
    const char *text;       /* TEXT */
    size_t text_len;
    struct jj_value *value; /* CONST */
};

/* The template's tree (a JN_BLOCK), or NULL with *e set. */
struct jj_node *jj_parse(struct jj_arena *a, const struct jj_token *toks, int64_t n,
                         struct jj_error *e);

/* The filters and tests the evaluator has (jinja_eval.c), so the parser
 * refuses others before anything renders. */
bool jj_known_filter(const char *name);
bool jj_known_test(const char *name);
bool jj_known_method(const char *name); /* of strings or dicts */

/* ---- values ---- */

enum jj_type {
    JV_UNDEFINED, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STRING, JV_LIST, JV_DICT,
    JV_NAMESPACE, JV_MACRO, JV_FUNC,
};

struct jj_eval;
typedef struct jj_value *(*jj_builtin)(struct jj_eval *ev, struct jj_node *at,
                                       struct jj_value **args, const char **kw, int64_t n,
                                       struct jj_value *self);

struct jj_value {
    enum jj_type type;
    bool b;
    int64_t i;
    double f;
    const char *s; /* STRING: bytes (UTF-8), NUL-terminated */
    size_t len;
    struct jj_value **items; /* LIST; DICT/NAMESPACE: keys and values interleaved */
    int64_t n, cap;
    struct jj_node *macro;   /* MACRO */
    jj_builtin fn;           /* FUNC (a bound method when self is set) */
    struct jj_value *self;
    const char *undef_name;  /* UNDEFINED: what was looked up, for messages */
};

struct jj_value *jj_new(struct jj_arena *a, enum jj_type t);
struct jj_value *jj_str(struct jj_arena *a, const char *s, size_t len);
struct jj_value *jj_int(struct jj_arena *a, int64_t i);
struct jj_value *jj_bool(struct jj_arena *a, bool b);
/* Appends to a list (or a key/value to a dict: jj_dict_set). false: no memory. */
bool jj_list_push(struct jj_arena *a, struct jj_value *list, struct jj_value *v);
bool jj_dict_set(struct jj_arena *a, struct jj_value *d, struct jj_value *key,
                 struct jj_value *v);
/* The value of key in a dict or namespace, or NULL. */
struct jj_value *jj_dict_get(const struct jj_value *d, const struct jj_value *key);
struct jj_value *jj_dict_get_s(const struct jj_value *d, const char *key);

bool jj_truthy(const struct jj_value *v);
bool jj_equal(const struct jj_value *x, const struct jj_value *y);
/* Python's str() of a value (None, True, 1.5, ['a'], {'k': 1}); undefined
 * is "". Appended to *buf; false: no memory. */
void jj_to_str(struct ig_str *b, const struct jj_value *v);
/* json.dumps(v, ensure_ascii=False) with `indent` spaces (< 0: inline). */
void jj_to_json(struct ig_str *b, const struct jj_value *v, int64_t indent, int64_t depth);
const char *jj_type_name(const struct jj_value *v);

/* ---- the render (jinja_eval.c) and what filters use of it ---- */

struct scope;
struct jj_eval {
    struct jj_arena *a;
    struct jj_error *e;
    struct scope *globals;
    int64_t steps; /* loop iterations so far */
    int depth;     /* macro calls nested */
    int brk;       /* 1: break, 2: continue pending */
};

enum {
    JJ_MAX_STEPS = 1000000,           /* loop iterations of one render */
    JJ_MAX_CALL_DEPTH = 100,          /* nested macro calls */
    JJ_MAX_OUTPUT = 16 * 1024 * 1024, /* bytes of text, and of one string */
    JJ_MAX_ARENA_MIB = 256            /* everything one render computes */
};

/* An error at `at` (fmt with at most two %s, x and y); NULL. */
struct jj_value *jj_efail(struct jj_eval *ev, const struct jj_node *at, const char *fmt,
                          const char *x, const char *y);
struct jj_value *jj_enomem(struct jj_eval *ev);                     /* NULL */
struct jj_value *jj_undef(struct jj_eval *ev, const char *name);   /* an undefined value */
struct jj_value *jj_str_v(struct jj_eval *ev, const char *s, size_t n);
struct jj_value *jj_buf_v(struct jj_eval *ev, struct ig_str *b);   /* frees b's text */
struct jj_value *jj_float_v(struct jj_eval *ev, double f);
struct jj_value *jj_to_string(struct jj_eval *ev, const struct jj_value *v); /* str() */
struct jj_value *jj_getattr(struct jj_eval *ev, const struct jj_node *at, struct jj_value *obj,
                            const char *name);
/* x OP y for the operator n->name ("<", "+", ...) */
struct jj_value *jj_binary(struct jj_eval *ev, struct jj_node *n, struct jj_value *x,
                           struct jj_value *y);
bool jj_is_num(const struct jj_value *v);
double jj_num(const struct jj_value *v);
/* `x in hay`; *ok false where `in` does not apply */
bool jj_contains(const struct jj_value *hay, const struct jj_value *x, bool *ok);

/* ---- filters, tests, methods (jinja_filters.c) ---- */

/* A call's arguments: values, their keyword names (NULL: positional). */
struct jj_args {
    struct jj_value **v;
    const char **kw;
    int64_t n;
};
/* The argument at position pos (-1: none) or named name; NULL when absent. */
struct jj_value *jj_arg(const struct jj_args *a, int64_t pos, const char *name);
/* v is of type t, else an error naming `what`. */
bool jj_want(struct jj_eval *ev, const struct jj_node *at, const struct jj_value *v,
             enum jj_type t, const char *what);
struct jj_value *jj_filter(struct jj_eval *ev, struct jj_node *at, const char *name,
                           struct jj_value *v, const struct jj_args *a);
bool jj_run_test(struct jj_eval *ev, const struct jj_node *at, const char *name,
                 struct jj_value *v, const struct jj_args *a, bool *out);
struct jj_value *jj_method(struct jj_eval *ev, const struct jj_node *at, const char *name,
                           struct jj_value *self, const struct jj_args *a);
bool jj_is_method_name(const struct jj_value *self, const char *name);
/* The items of an iterable: a list, a dict's keys, a string's characters
 * (undefined: none). */
struct jj_value *jj_as_list(struct jj_eval *ev, const struct jj_node *at, struct jj_value *v);

/* Code points in a UTF-8 string, and the byte offset of code point i
 * (clamped to len). */
int64_t jj_utf8_count(const char *s, size_t len);
size_t jj_utf8_offset(const char *s, size_t len, int64_t i);

#endif
