/* grammar/schema.c: JSON schema -> GBNF, then compiled like any grammar.
 * The subset and its meaning are in docs/grammar.md; in short, following
 * llama.cpp's json-schema-to-grammar: objects list their required
 * properties first, then any subset of the optional ones, in the order of
 * `properties`; an absent `additionalProperties` means false when
 * `properties` is given (llama.cpp's choice: fewer hallucinated keys) and
 * any object when nothing is said about properties at all. Whitespace
 * (llama.cpp's `space`) may follow every `{ [ , :` and every value inside a
 * container, never the whole value, so generation ends at its last byte.
 * Annotations are ignored; any other keyword the converter does not turn
 * into grammar is refused with its JSON pointer, so a grammar is never
 * silently looser or stricter than the schema (oneOf is generated as anyOf:
 * its alternatives must not overlap, docs/grammar.md).
 * Numbers in a range are decimals without an exponent of at most 15 digits,
 * compared with the bound's text digit by digit; patterns go through
 * schema_regex.c; allOf merges object schemas (or numeric bounds).
 * Covered by tests/grammar/test_schema_bounds.py (accept/reject at every
 * bound, judged by jsonschema), test_schema_suite.py (the JSON Schema Test
 * Suite: no invalid instance admitted), test_schema_corpus.py (jsonschema validates
 * sampled generations), test_run_grammar_args.sh (refusals with their JSON
 * pointers) and test_mask.c; fuzzed by tests/fuzz/fuzz_grammar.c
 * (fuzz_schema). */
#include "grammar/internal.h"

#include "core/json.h"
#include "core/status.h"
#include "core/strbuf.h"
#include "core/utf8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_MAX_DEPTH 64
#define INT_MAX_DIGITS 18 /* unbounded integers: at most this many digits (int64 range) */

/* ---- the converter ------------------------------------------------------------ */

struct ref_rule {
    char *ref;  /* the $ref string */
    char *name; /* its rule */
};

struct conv {
    const char *source;
    const cJSON *doc;
    struct ig_str rules;     /* "name ::= body\n" lines */
    char **names;          /* rule names in use */
    int64_t n_names, cap_names;
    struct ref_rule *refs;
    int64_t n_refs, cap_refs;
    unsigned prims;        /* PRIM_* rules already emitted */
    int depth;
    int st;                /* the first error */
    char ptr[1024];        /* JSON pointer of the node being converted */
};

enum {
    PRIM_SPACE = 1 << 0, PRIM_VALUE = 1 << 1, PRIM_OBJECT = 1 << 2, PRIM_ARRAY = 1 << 3,
    PRIM_STRING = 1 << 4, PRIM_CHAR = 1 << 5, PRIM_NUMBER = 1 << 6, PRIM_INTEGER = 1 << 7,
    PRIM_BOOLEAN = 1 << 8, PRIM_NULL = 1 << 9, PRIM_DATE = 1 << 10, PRIM_TIME = 1 << 11,
    PRIM_UUID = 1 << 12, PRIM_KEYCHAR = 1 << 13, PRIM_FRAC = 1 << 14,
};

static int fail(struct conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct conv *c, const char *fmt, ...)
{
    if (c->st != IG_OK)
        return c->st;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = ig_error(IG_E_USAGE, "%s: %s: %s", c->source, c->ptr[0] ? c->ptr : "(root)", msg);
    return c->st;
}

static int nomem(struct conv *c)
{
    if (c->st == IG_OK)
        c->st = ig_error(IG_E_NOMEM, "grammar: out of memory converting the JSON schema");
    return c->st;
}

/* Appends "/key" (escaped as RFC 6901 says) to the pointer; returns the old
 * length to restore. */
static size_t ptr_push(struct conv *c, const char *key)
{
    size_t old = strlen(c->ptr), n = old;
    if (n + 1 < sizeof c->ptr)
        c->ptr[n++] = '/';
    for (const char *k = key; *k && n + 3 < sizeof c->ptr; k++) {
        if (*k == '~' || *k == '/') {
            c->ptr[n++] = '~';
            c->ptr[n++] = *k == '~' ? '0' : '1';
        } else {
            c->ptr[n++] = *k;
        }
    }
    c->ptr[n] = '\0';
    return old;
}

static void ptr_pop(struct conv *c, size_t old) { c->ptr[old] = '\0'; }

/* A fresh rule name from `base` (letters, digits, '-' only), or NULL. */
static char *new_name(struct conv *c, const char *base)
{
    char clean[80];
    size_t n = 0;
    for (const char *s = base; *s && n + 1 < 64; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok)
            clean[n++] = ch;
        else if (n && clean[n - 1] != '-')
            clean[n++] = '-';
    }
    while (n && clean[n - 1] == '-')
        n--;
    if (!n)
        clean[n++] = 'r';
    clean[n] = '\0';
    char cand[96];
    snprintf(cand, sizeof cand, "%s", clean);
    for (int64_t k = 1;; k++) {
        bool used = false;
        for (int64_t i = 0; i < c->n_names && !used; i++)
            used = !strcmp(c->names[i], cand);
        if (!used)
            break;
        snprintf(cand, sizeof cand, "%s-%lld", clean, (long long)k);
    }
    if (c->n_names == c->cap_names) {
        int64_t cap = c->cap_names ? 2 * c->cap_names : 32;
        char **p = realloc(c->names, (size_t)cap * sizeof *p);
        if (!p)
            return nomem(c), NULL;
        c->names = p;
        c->cap_names = cap;
    }
    char *name = strdup(cand);
    if (!name)
        return nomem(c), NULL;
    c->names[c->n_names++] = name;
    return name;
}

static void add_rule(struct conv *c, const char *name, const char *body)
{
    ig_str_printf(&c->rules, "%s ::= ", name);
    ig_str_puts(&c->rules, body);
    ig_str_puts(&c->rules, "\n");
    if (c->rules.failed)
        nomem(c);
}

/* The built-in rules, emitted once each with what they use. Names are
 * reserved: schema-derived names start with "root" or "def-". */
static const char *prim(struct conv *c, unsigned which)
{
    static const struct {
        unsigned bit, deps;
        const char *name, *body;
    } P[] = {
        {PRIM_SPACE, 0, "space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"},
        {PRIM_VALUE, PRIM_OBJECT | PRIM_ARRAY | PRIM_STRING | PRIM_NUMBER | PRIM_BOOLEAN | PRIM_NULL,
         "value", "object | array | string | number | boolean | null"},
        {PRIM_OBJECT, PRIM_SPACE | PRIM_STRING | PRIM_VALUE, "object",
         "\"{\" space ( string space \":\" space value space ( \",\" space string space \":\" "
         "space value space )* )? \"}\""},
        {PRIM_ARRAY, PRIM_SPACE | PRIM_VALUE, "array",
         "\"[\" space ( value space ( \",\" space value space )* )? \"]\""},
        {PRIM_STRING, PRIM_CHAR, "string", "\"\\\"\" char* \"\\\"\""},
        {PRIM_CHAR, 0, "char",
         "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] "
         "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )"},
        {PRIM_FRAC, 0, "frac", "\".\" [0-9]{1,16}"},
        {PRIM_NUMBER, PRIM_FRAC, "number",
         "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) frac? ( [eE] [-+]? ( \"0\" | [1-9] [0-9]{0,2} ) )?"},
        {PRIM_INTEGER, 0, "integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,17} )"},
        {PRIM_BOOLEAN, 0, "boolean", "\"true\" | \"false\""},
        {PRIM_NULL, 0, "null", "\"null\""},
        {PRIM_DATE, 0, "date",
         "( [0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\" ) \"-\" ( "
         "( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
         "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
         "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | "
         "( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | "
         "( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\""},
        {PRIM_TIME, 0, "time",
         "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
         "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
        {PRIM_UUID, 0, "uuid",
         "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
         "[0-9a-fA-F]{12}"},
        {PRIM_KEYCHAR, 0, "keychar", "[^\"\\\\\\x7F\\x00-\\x1F]"},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (P[i].bit != which)
            continue;
        if (!(c->prims & which)) {
            c->prims |= which;
            add_rule(c, P[i].name, P[i].body);
            for (unsigned d = 1; d; d <<= 1)
                if (P[i].deps & d)
                    prim(c, d);
        }
        return P[i].name;
    }
    IG_ASSERT(!"unknown primitive rule");
    return NULL;
}

/* s as a GBNF string literal (quotes added). */
static void gbnf_literal(struct ig_str *b, const char *s)
{
    ig_str_puts(b, "\"");
    for (; *s; s++) {
        switch (*s) {
        case '"': ig_str_puts(b, "\\\""); break;
        case '\\': ig_str_puts(b, "\\\\"); break;
        case '\n': ig_str_puts(b, "\\n"); break;
        case '\r': ig_str_puts(b, "\\r"); break;
        case '\t': ig_str_puts(b, "\\t"); break;
        default:
            if ((unsigned char)*s < 0x20)
                ig_str_printf(b, "\\x%02X", (unsigned char)*s);
            else
                ig_str_putn(b, s, 1);
        }
    }
    ig_str_puts(b, "\"");
}

/* A JSON value as the exact text the model must write (compact JSON). */
static int json_literal(struct conv *c, const cJSON *v, struct ig_str *b)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text)
        return nomem(c);
    gbnf_literal(b, text);
    cJSON_free(text);
    return IG_OK;
}

/* ---- keywords ---------------------------------------------------------------- */

static bool is_annotation(const char *k)
{
    static const char *const A[] = {"title", "description", "examples", "default", "$comment",
                                    "$schema", "$id"};
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        if (!strcmp(k, A[i]))
            return true;
    return false;
}

static bool is_known(const char *k)
{
    static const char *const K[] = {
        "type", "properties", "required", "additionalProperties", "items", "minItems",
        "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs",
        "definitions", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "uniqueItems", "pattern", "allOf", "prefixItems", "additionalItems", "patternProperties",
        "minProperties", "maxProperties"};
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
        if (!strcmp(k, K[i]))
            return true;
    return is_annotation(k);
}

/* Refuses unknown keywords and (except those in `also_ok`, a
 * NULL-terminated list) every non-annotation keyword beside `what`. */
static int only_annotations_beside(struct conv *c, const cJSON *node, const char *what,
                                   const char *const *also_ok)
{
    for (const cJSON *k = node->child; k; k = k->next) {
        if (!strcmp(k->string, what) || is_annotation(k->string) ||
            !strcmp(k->string, "$defs") || !strcmp(k->string, "definitions"))
            continue;
        bool ok = false;
        for (const char *const *a = also_ok; a && *a && !ok; a++)
            ok = !strcmp(k->string, *a);
        if (!ok)
            return fail(c, "'%s' beside '%s' is not supported (only annotations may stand "
                        "beside it)", k->string, what);
    }
    return IG_OK;
}

/* A non-negative integer keyword (at most `max`), or def when absent. */
static int get_count(struct conv *c, const cJSON *node, const char *key, int64_t max, int64_t def,
                     int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
    *out = def;
    if (!v)
        return IG_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return fail(c, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > (double)max)
        return fail(c, "'%s' above %lld is not supported (repetitions are unrolled into the "
                    "grammar)", key, (long long)max);
    *out = (int64_t)v->valuedouble;
    return IG_OK;
}

/* ---- integers in a range ------------------------------------------------------- */

/* Digits of equal-length decimal strings lo..hi (lo <= hi) as GBNF. */
static void digit_range(struct ig_str *b, const char *lo, const char *hi, size_t n)
{
    if (n == 1) {
        if (lo[0] == hi[0])
            ig_str_printf(b, "\"%c\"", lo[0]);
        else
            ig_str_printf(b, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        ig_str_printf(b, "\"%c\" ", lo[0]);
        digit_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zeros = strspn(lo + 1, "0") >= n - 1, hi_nines = strspn(hi + 1, "9") >= n - 1;
    char first = lo_zeros ? lo[0] : (char)(lo[0] + 1);
    char last = hi_nines ? hi[0] : (char)(hi[0] - 1);
    ig_str_puts(b, "( ");
    bool any = false;
    if (!lo_zeros) {
        char nines[32];
        memset(nines, '9', n - 1);
        ig_str_printf(b, "\"%c\" ( ", lo[0]);
        digit_range(b, lo + 1, nines, n - 1);
        ig_str_puts(b, " )");
        any = true;
    }
    if (first <= last) {
        ig_str_printf(b, "%s[%c-%c] [0-9]{%zu}", any ? " | " : "", first, last, n - 1);
        any = true;
    }
    if (!hi_nines) {
        char zeros[32];
        memset(zeros, '0', n - 1);
        ig_str_printf(b, "%s\"%c\" ( ", any ? " | " : "", hi[0]);
        digit_range(b, zeros, hi + 1, n - 1);
        ig_str_puts(b, " )");
    }
    ig_str_puts(b, " )");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded, at most
 * INT_MAX_DIGITS digits), no leading zeros, as alternatives. */
static void uint_range(struct ig_str *b, uint64_t lo, int64_t hi)
{
    char a[32], z[32];
    int la = snprintf(a, sizeof a, "%llu", (unsigned long long)lo);
    int lz = hi >= 0 ? snprintf(z, sizeof z, "%lld", (long long)hi) : INT_MAX_DIGITS;
    bool first = true;
    for (int len = la; len <= lz; len++) {
        char from[32], to[32];
        if (len == la)
            memcpy(from, a, (size_t)la + 1);
        else
            from[0] = '1', memset(from + 1, '0', (size_t)len - 1), from[len] = '\0';
        if (hi >= 0 && len == lz) {
            memcpy(to, z, (size_t)lz + 1);
        } else if (hi < 0 && len > la) { /* every longer length at once */
            ig_str_printf(b, "%s[1-9] [0-9]{%d,%d}", first ? "" : " | ", len - 1,
                          INT_MAX_DIGITS - 1);
            return;
        } else {
            memset(to, '9', (size_t)len), to[len] = '\0';
        }
        ig_str_puts(b, first ? "" : " | ");
        digit_range(b, from, to, (size_t)len);
        first = false;
    }
}

/* Reads an integer bound; *has false when absent. A fractional bound is
 * the integer bound of the same kind that keeps the same integers
 * (minimum 2.5 is 3, exclusiveMinimum 2.5 is exclusiveMinimum 2): `up`
 * rounds it up, else down. */
static int int_bound(struct conv *c, const cJSON *node, const char *key, bool up, bool *has,
                     int64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(node, key);
    *has = x != NULL;
    if (!x)
        return IG_OK;
    if (!cJSON_IsNumber(x) || fabs(x->valuedouble) > 1e15)
        return fail(c, "'%s' must be a number of at most 15 integer digits here", key);
    *v = (int64_t)(up ? ceil(x->valuedouble) : floor(x->valuedouble));
    return IG_OK;
}

/* The integers between the schema's bounds. */
static int integer_range(struct conv *c, const cJSON *node, struct ig_str *b)
{
    bool has_lo, has_hi, has_xlo, has_xhi;
    int64_t lo = 0, hi = 0, xlo = 0, xhi = 0;
    int st;
    if ((st = int_bound(c, node, "minimum", true, &has_lo, &lo)) != IG_OK ||
        (st = int_bound(c, node, "maximum", false, &has_hi, &hi)) != IG_OK ||
        (st = int_bound(c, node, "exclusiveMinimum", false, &has_xlo, &xlo)) != IG_OK ||
        (st = int_bound(c, node, "exclusiveMaximum", true, &has_xhi, &xhi)) != IG_OK)
        return st;
    if (has_xlo && (!has_lo || xlo + 1 > lo))
        lo = xlo + 1, has_lo = true;
    if (has_xhi && (!has_hi || xhi - 1 < hi))
        hi = xhi - 1, has_hi = true;
    if (!has_lo && !has_hi) {
        ig_str_puts(b, prim(c, PRIM_INTEGER));
        return IG_OK;
    }
    if (has_lo && has_hi && lo > hi)
        return fail(c, "no integer lies between the bounds");
    ig_str_puts(b, "( ");
    bool any = false;
    /* negatives: "-" then magnitudes */
    if (!has_lo || lo < 0) {
        uint64_t mag_lo = has_hi && hi < 0 ? (uint64_t)-hi : 1;
        ig_str_puts(b, "\"-\" ( ");
        uint_range(b, mag_lo, has_lo ? -lo : -1);
        ig_str_puts(b, " )");
        any = true;
    }
    if (!has_hi || hi >= 0) {
        ig_str_puts(b, any ? " | " : "");
        uint_range(b, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? hi : -1);
    }
    ig_str_puts(b, " )");
    return IG_OK;
}

/* ---- numbers in a range ---------------------------------------------------------- */

/* Bounded numbers are written without an exponent and with at most
 * NUM_DIGITS digits in all: two such decimals are never the same double,
 * so comparing their text with a bound's shortest text orders them as
 * jsonschema's floats do. */
#define NUM_DIGITS 15

static bool all_zero(const char *s) { return s[strspn(s, "0")] == '\0'; }

/* May the empty fraction (the value .0) lie between lo and hi (digits of
 * a fraction; NULL: no bound on that side; *_x: exclusive)? */
static bool frac_zero_ok(const char *lo, bool lo_x, const char *hi, bool hi_x)
{
    bool low = !lo || (all_zero(lo) && !lo_x);
    bool high = !hi || !all_zero(hi) || !hi_x;
    return low && high;
}

/* Alternatives (" | " between) of the non-empty digit strings t of at most
 * k digits with lo <= .t <= hi (< where exclusive); *any: one was written. */
static void frac_alts(struct ig_str *b, const char *lo, bool lo_x, const char *hi, bool hi_x,
                      int k, bool *any)
{
    if (k <= 0)
        return;
    if (lo && all_zero(lo) && !lo_x)
        lo = NULL; /* every fraction is >= 0 */
    if (hi && all_zero(hi)) { /* at most .0: zeros only, when that is allowed */
        if (!lo && !hi_x) {
            ig_str_printf(b, "%s\"0\"{1,%d}", *any ? " | " : "", k);
            *any = true;
        }
        return;
    }
    char l = lo ? (lo[0] ? lo[0] : '0') : '0', h = hi ? (hi[0] ? hi[0] : '0') : '9';
    const char *lrest = lo ? (lo[0] ? lo + 1 : lo) : NULL;
    const char *hrest = hi ? (hi[0] ? hi + 1 : hi) : NULL;
    char dl = lo ? (char)(l + 1) : '0', dh = hi ? (char)(h - 1) : '9';
    if (dl <= dh) { /* strictly inside on both sides: any digits after */
        ig_str_printf(b, "%s[%c-%c]", *any ? " | " : "", dl, dh);
        if (k > 1)
            ig_str_printf(b, " [0-9]{0,%d}", k - 1);
        *any = true;
    }
    /* d on a bound: the rest decides */
    for (int side = 0; side < 2; side++) {
        char d;
        const char *nlo = NULL, *nhi = NULL;
        if (side == 0) { /* d == l */
            if (!lo || (hi && l > h))
                continue;
            d = l;
            nlo = lrest;
            nhi = hi && l == h ? hrest : NULL;
        } else { /* d == h, above l */
            if (!hi || (lo && h <= l))
                continue;
            d = h;
            nhi = hrest;
        }
        struct ig_str sub = {0};
        bool sub_any = false;
        frac_alts(&sub, nlo, lo_x, nhi, hi_x, k - 1, &sub_any);
        bool zero = frac_zero_ok(nlo, lo_x, nhi, hi_x);
        if (sub_any || zero) {
            ig_str_printf(b, "%s\"%c\"", *any ? " | " : "", d);
            if (sub_any) {
                ig_str_puts(b, " ( ");
                ig_str_puts(b, sub.s);
                ig_str_puts(b, zero ? " )?" : " )");
            }
            *any = true;
        }
        b->failed |= sub.failed;
        free(sub.s);
    }
}

/* The integer part i (digits) with a fraction between lo and hi. */
static void int_with_frac(struct ig_str *b, const char *i, const char *lo, bool lo_x,
                          const char *hi, bool hi_x, bool *any)
{
    struct ig_str alts = {0};
    bool a = false;
    frac_alts(&alts, lo, lo_x, hi, hi_x, NUM_DIGITS - (int)strlen(i), &a);
    bool zero = frac_zero_ok(lo, lo_x, hi, hi_x);
    if (a || zero) {
        ig_str_printf(b, "%s\"%s\"", *any ? " | " : "", i);
        if (a) {
            ig_str_puts(b, " ( \".\" ( ");
            ig_str_puts(b, alts.s);
            ig_str_puts(b, zero ? " ) )?" : " ) )");
        }
        *any = true;
    }
    b->failed |= alts.failed;
    free(alts.s);
}

/* A decimal bound: integer part and fraction digits. */
struct dec {
    char i[24], f[24];
};

/* The shortest text of a double as a plain decimal; false when it needs
 * more than NUM_DIGITS digits either side. */
static bool to_dec(double v, struct dec *d)
{
    char t[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, fabs(v));
        if (strtod(t, NULL) == fabs(v))
            break;
    }
    char digits[24];
    int n = 0;
    for (const char *q = t; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[n++] = *q;
    digits[n] = '\0';
    int exp = atoi(strchr(t, 'e') + 1), point = exp + 1; /* digits before the point */
    if (point > NUM_DIGITS || n - point > NUM_DIGITS || -point > NUM_DIGITS)
        return false;
    int k = 0;
    if (point <= 0) {
        d->i[0] = '0', d->i[1] = '\0';
        for (int z = 0; z < -point; z++)
            d->f[k++] = '0';
        memcpy(d->f + k, digits, (size_t)n + 1);
        return true;
    }
    for (int j = 0; j < point; j++)
        d->i[j] = j < n ? digits[j] : '0';
    d->i[point] = '\0';
    snprintf(d->f, sizeof d->f, "%s", n > point ? digits + point : "");
    return true;
}

/* Magnitudes m (no sign) with lo <= m <= hi (< where exclusive; hi NULL:
 * none), NUM_DIGITS digits at most, as alternatives. */
static void magnitude_range(struct ig_str *b, const struct dec *lo, bool lo_x, const struct dec *hi,
                            bool hi_x, bool *any)
{
    uint64_t ai = strtoull(lo->i, NULL, 10), bi = hi ? strtoull(hi->i, NULL, 10) : 0;
    if (hi && ai == bi) {
        int_with_frac(b, lo->i, lo->f, lo_x, hi->f, hi_x, any);
        return;
    }
    int_with_frac(b, lo->i, lo->f, lo_x, NULL, false, any);
    /* the integer parts strictly between, by length: any fraction that fits */
    uint64_t pow10 = 1;
    for (int len = 1; len <= NUM_DIGITS; len++, pow10 *= 10) {
        uint64_t from = len == 1 ? 0 : pow10, to = pow10 * 10 - 1;
        if (from < ai + 1)
            from = ai + 1;
        if (hi && to > bi - 1)
            to = bi - 1;
        if (hi && bi == 0)
            break;
        if (from > to)
            continue;
        ig_str_printf(b, "%s( ", *any ? " | " : "");
        uint_range(b, from, (int64_t)to);
        if (NUM_DIGITS - len > 0)
            ig_str_printf(b, " ) ( \".\" [0-9]{1,%d} )?", NUM_DIGITS - len);
        else
            ig_str_puts(b, " )");
        *any = true;
    }
    if (hi)
        int_with_frac(b, hi->i, NULL, false, hi->f, hi_x, any);
}

/* A number bound: *has false when absent. */
static int num_bound(struct conv *c, const cJSON *node, const char *key, bool *has, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(node, key);
    *has = x != NULL;
    if (!x)
        return IG_OK;
    struct dec d;
    if (!cJSON_IsNumber(x) || !to_dec(x->valuedouble, &d))
        return fail(c, "'%s' must be a number of at most %d digits either side of the point "
                    "here", key, NUM_DIGITS);
    *v = x->valuedouble;
    return IG_OK;
}

/* The numbers between the schema's bounds, written as decimals without an
 * exponent (docs/grammar.md). */
static int number_range(struct conv *c, const cJSON *node, struct ig_str *b)
{
    bool has_lo, has_hi, has_xlo, has_xhi;
    double lo = 0, hi = 0, xlo = 0, xhi = 0;
    int st;
    if ((st = num_bound(c, node, "minimum", &has_lo, &lo)) != IG_OK ||
        (st = num_bound(c, node, "maximum", &has_hi, &hi)) != IG_OK ||
        (st = num_bound(c, node, "exclusiveMinimum", &has_xlo, &xlo)) != IG_OK ||
        (st = num_bound(c, node, "exclusiveMaximum", &has_xhi, &xhi)) != IG_OK)
        return st;
    bool lo_x = false, hi_x = false;
    if (has_xlo && (!has_lo || xlo >= lo))
        lo = xlo, lo_x = has_lo = true;
    if (has_xhi && (!has_hi || xhi <= hi))
        hi = xhi, hi_x = has_hi = true;
    struct dec dlo, dhi, zero = {"0", ""};
    ig_str_puts(b, "( ");
    bool any = false;
    /* x >= 0: magnitudes from max(lo, 0) */
    if (!has_hi || hi > 0 || (hi == 0 && !hi_x)) {
        bool from_lo = has_lo && lo > 0;
        to_dec(from_lo ? lo : 0, &dlo);
        if (has_hi)
            to_dec(hi, &dhi);
        magnitude_range(b, from_lo ? &dlo : &zero, from_lo && lo_x, has_hi ? &dhi : NULL, hi_x,
                        &any);
    }
    /* x < 0: "-" and magnitudes above max(-hi, 0), never 0 itself */
    if (!has_lo || lo < 0) {
        struct ig_str neg = {0};
        bool nany = false;
        bool from_hi = has_hi && hi < 0;
        if (from_hi)
            to_dec(-hi, &dhi);
        if (has_lo)
            to_dec(-lo, &dlo);
        magnitude_range(&neg, from_hi ? &dhi : &zero, from_hi ? hi_x : true, has_lo ? &dlo : NULL,
                        lo_x, &nany);
        if (nany) {
            ig_str_printf(b, "%s\"-\" ( ", any ? " | " : "");
            ig_str_puts(b, neg.s);
            ig_str_puts(b, " )");
            any = true;
        }
        b->failed |= neg.failed;
        free(neg.s);
    }
    ig_str_puts(b, " )");
    return any ? IG_OK : fail(c, "no number lies between the bounds");
}

/* ---- schema nodes ------------------------------------------------------------------ */

static int visit(struct conv *c, const cJSON *node, const char *name, struct ig_str *expr);

/* Converts `node` into a rule of its own named from `base`; *rule gets the
 * name (owned by c). */
static int visit_rule(struct conv *c, const cJSON *node, const char *base, const char **rule)
{
    struct ig_str body = {0};
    char *name = new_name(c, base);
    if (!name)
        return c->st;
    int st = visit(c, node, name, &body);
    if (st == IG_OK && body.failed)
        st = nomem(c);
    if (st == IG_OK)
        add_rule(c, name, body.s);
    free(body.s);
    *rule = name;
    return c->st;
}

/* A subschema under key (and index >= 0 for arrays) of node. */
static int visit_child(struct conv *c, const cJSON *child, const char *key, int index,
                       const char *base, const char **rule)
{
    size_t old = ptr_push(c, key);
    size_t old2 = strlen(c->ptr);
    if (index >= 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", index);
        ptr_push(c, num);
    }
    int st = visit_rule(c, child, base, rule);
    ptr_pop(c, old2);
    ptr_pop(c, old);
    return st;
}

/* Resolves a local JSON pointer "#/a/b" in the document. */
static const cJSON *resolve(const cJSON *doc, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = doc;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof key) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                key[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                key[n++] = *p++;
            }
        }
        key[n] = '\0';
        if (*p && *p != '/')
            return NULL;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(key, &end, 10);
            cur = *end || !*key ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = cJSON_GetObjectItemCaseSensitive(cur, key);
        }
    }
    return *p ? NULL : cur;
}

static int visit_ref(struct conv *c, const cJSON *node, struct ig_str *expr)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(node, "$ref");
    if (!cJSON_IsString(r))
        return fail(c, "'$ref' must be a string");
    int st = only_annotations_beside(c, node, "$ref", NULL);
    if (st != IG_OK)
        return st;
    for (int64_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, r->valuestring)) {
            ig_str_puts(expr, c->refs[i].name);
            return IG_OK;
        }
    const cJSON *target = resolve(c->doc, r->valuestring);
    if (!target)
        return fail(c, "'$ref' '%s' does not resolve in this document (only local "
                    "references \"#/...\" are supported)", r->valuestring);
    const char *last = strrchr(r->valuestring, '/');
    char base[96];
    snprintf(base, sizeof base, "def-%s", last ? last + 1 : "root");
    if (c->n_refs == c->cap_refs) {
        int64_t cap = c->cap_refs ? 2 * c->cap_refs : 8;
        struct ref_rule *p = realloc(c->refs, (size_t)cap * sizeof *p);
        if (!p)
            return nomem(c);
        c->refs = p;
        c->cap_refs = cap;
    }
    /* The name exists before the target is converted: recursion refers to it. */
    char *name = new_name(c, base);
    char *ref = strdup(r->valuestring);
    if (!name || !ref) {
        free(ref);
        return nomem(c);
    }
    c->refs[c->n_refs++] = (struct ref_rule){ref, name};
    char saved[sizeof c->ptr];
    memcpy(saved, c->ptr, sizeof saved);
    snprintf(c->ptr, sizeof c->ptr, "%s", r->valuestring[1] ? r->valuestring + 1 : "");
    struct ig_str body = {0};
    st = visit(c, target, name, &body);
    memcpy(c->ptr, saved, sizeof saved);
    if (st == IG_OK && body.failed)
        st = nomem(c);
    if (st == IG_OK)
        add_rule(c, name, body.s);
    free(body.s);
    if (st == IG_OK)
        ig_str_puts(expr, name);
    return c->st;
}

static int visit_union(struct conv *c, const cJSON *node, const char *key, const char *name,
                       struct ig_str *expr)
{
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(node, key);
    if (!cJSON_IsArray(alts) || !alts->child)
        return fail(c, "'%s' must be a non-empty array of schemas", key);
    int st = only_annotations_beside(c, node, key, NULL);
    if (st != IG_OK)
        return st;
    int i = 0;
    ig_str_puts(expr, "( ");
    for (const cJSON *a = alts->child; a; a = a->next, i++) {
        char base[96];
        snprintf(base, sizeof base, "%s-%d", name, i);
        const char *rule;
        if ((st = visit_child(c, a, key, i, base, &rule)) != IG_OK)
            return st;
        ig_str_printf(expr, "%s%s", i ? " | " : "", rule);
    }
    ig_str_puts(expr, " )");
    return IG_OK;
}

/* Does JSON value v have JSON schema type t? */
static bool has_type(const cJSON *v, const char *t)
{
    if (!strcmp(t, "string"))
        return cJSON_IsString(v);
    if (!strcmp(t, "number"))
        return cJSON_IsNumber(v);
    if (!strcmp(t, "integer"))
        return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean"))
        return cJSON_IsBool(v);
    if (!strcmp(t, "null"))
        return cJSON_IsNull(v);
    if (!strcmp(t, "object"))
        return cJSON_IsObject(v);
    if (!strcmp(t, "array"))
        return cJSON_IsArray(v);
    return false;
}

/* enum / const: the listed values that also have the schema's type. */
static int visit_values(struct conv *c, const cJSON *node, const char *key, struct ig_str *expr)
{
    static const char *const ok[] = {"type", "enum", "const", NULL};
    int st = only_annotations_beside(c, node, key, ok);
    if (st != IG_OK)
        return st;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(node, "type");
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(node, key);
    if (!strcmp(key, "enum") && (!cJSON_IsArray(vals) || !vals->child))
        return fail(c, "'enum' must be a non-empty array");
    const cJSON *cnst = cJSON_GetObjectItemCaseSensitive(node, "const");
    const cJSON *list = !strcmp(key, "enum") ? vals->child : vals;
    int n = 0;
    ig_str_puts(expr, "( ");
    for (const cJSON *v = list; v; v = !strcmp(key, "enum") ? v->next : NULL) {
        bool keep = true;
        if (cJSON_IsString(type))
            keep = has_type(v, type->valuestring);
        else if (cJSON_IsArray(type)) {
            keep = false;
            for (const cJSON *t = type->child; t; t = t->next)
                keep |= cJSON_IsString(t) && has_type(v, t->valuestring);
        }
        if (keep && cnst && !strcmp(key, "enum"))
            keep = cJSON_Compare(v, cnst, true);
        if (!keep)
            continue;
        ig_str_puts(expr, n++ ? " | " : "");
        if ((st = json_literal(c, v, expr)) != IG_OK)
            return st;
    }
    ig_str_puts(expr, " )");
    if (!n)
        return fail(c, "no value of '%s' also satisfies the schema's type%s", key,
                    cnst ? " and const" : "");
    return IG_OK;
}

/* `"name"` as the model writes it: JSON-escaped, as a GBNF literal. */
static int key_literal(struct conv *c, const char *key, struct ig_str *b)
{
    cJSON *s = cJSON_CreateString(key);
    if (!s)
        return nomem(c);
    int st = json_literal(c, s, b);
    cJSON_Delete(s);
    return st;
}

/* A trie of code points over the property names, for "any key but these". */
struct ktrie {
    uint32_t cp;
    bool end;                  /* a name ends here */
    struct ktrie *child, *next;
};

static void ktrie_free(struct ktrie *t)
{
    while (t) {
        struct ktrie *n = t->next;
        ktrie_free(t->child);
        free(t);
        t = n;
    }
}

static int ktrie_add(struct ktrie *root, const char *s)
{
    struct ktrie *cur = root;
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        uint32_t cp = *u++;
        int extra = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        cp &= extra == 3 ? 0x07 : extra == 2 ? 0x0F : extra == 1 ? 0x1F : 0x7F;
        for (; extra && (*u & 0xC0) == 0x80; extra--)
            cp = cp << 6 | (*u++ & 0x3F);
        struct ktrie *k = cur->child;
        while (k && k->cp != cp)
            k = k->next;
        if (!k) {
            if (!(k = calloc(1, sizeof *k)))
                return IG_E_NOMEM;
            k->cp = cp;
            k->next = cur->child;
            cur->child = k;
        }
        cur = k;
    }
    cur->end = true;
    return IG_OK;
}

/* A class-safe spelling of code point cp inside [...]. */
static void class_char(struct ig_str *b, uint32_t cp)
{
    if (cp < 0x20 || cp == '"' || cp == '\\' || cp == ']' || cp == '-' || cp == '^' || cp == 0x7F)
        ig_str_printf(b, "\\x%02X", cp);
    else if (cp < 0x80)
        ig_str_printf(b, "%c", (char)cp);
    else
        ig_str_printf(b, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", cp);
}

/* Rules for the key text after the opening quote at trie node t: any
 * escape-free string except the names below t. Returns the rule name. */
static const char *not_names(struct conv *c, const struct ktrie *t, const char *base)
{
    char *name = new_name(c, base);
    if (!name)
        return NULL;
    struct ig_str body = {0};
    /* the empty alternative first: after a trailing '|' the rule would go on
     * on the next line */
    if (!t->end) /* a proper prefix of a name is another name */
        ig_str_puts(&body, "| ");
    bool first = true;
    int i = 0;
    for (const struct ktrie *k = t->child; k; k = k->next, i++) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s-%d", base, i);
        const char *rule = not_names(c, k, sub);
        if (!rule) {
            free(body.s);
            return NULL;
        }
        ig_str_puts(&body, first ? "" : " | ");
        char one[8];
        uint8_t enc[4];
        int n = gr_utf8_encode(k->cp, enc);
        memcpy(one, enc, (size_t)n);
        one[n] = '\0';
        gbnf_literal(&body, one);
        ig_str_printf(&body, " %s", rule);
        first = false;
    }
    /* any other character, then anything */
    ig_str_printf(&body, "%s[^\"\\\\\\x7F\\x00-\\x1F", first ? "" : " | ");
    for (const struct ktrie *k = t->child; k; k = k->next)
        class_char(&body, k->cp);
    ig_str_printf(&body, "] %s*", prim(c, PRIM_KEYCHAR));
    if (body.failed) {
        free(body.s);
        return nomem(c), NULL;
    }
    add_rule(c, name, body.s);
    free(body.s);
    return name;
}

static int visit_pattern(struct conv *c, const cJSON *pat, struct ig_str *expr);

/* An object of keys `key` (a GBNF expression of the quoted key) with values
 * `value`, min to max of them (max < 0: any number). A grammar cannot keep
 * keys apart, so more than one required key is refused: two equal keys
 * would be one property. */
static int free_object(struct conv *c, const char *key, const char *value, int64_t min,
                       int64_t max, struct ig_str *expr)
{
    if (min > 1)
        return fail(c, "'minProperties' above 1 is not supported here (a grammar cannot keep "
                    "the keys apart)");
    prim(c, PRIM_SPACE);
    if (max == 0) {
        ig_str_puts(expr, "\"{\" space \"}\"");
        return IG_OK;
    }
    /* key may be long (a pattern's grammar): no ig_str_printf of it */
    ig_str_puts(expr, min ? "\"{\" space " : "\"{\" space ( ");
    ig_str_puts(expr, key);
    ig_str_puts(expr, " space \":\" space ");
    ig_str_puts(expr, value);
    ig_str_puts(expr, " space");
    if (max != 1) {
        ig_str_puts(expr, " ( \",\" space ");
        ig_str_puts(expr, key);
        ig_str_puts(expr, " space \":\" space ");
        ig_str_puts(expr, value);
        ig_str_puts(expr, " space )");
        if (max > 1)
            ig_str_printf(expr, "{0,%lld}", (long long)(max - 1));
        else
            ig_str_puts(expr, "*");
    }
    ig_str_printf(expr, "%s \"}\"", min ? "" : " )?");
    return IG_OK;
}

/* patternProperties with one pattern and no other keys: keys the pattern
 * matches, values of its schema. */
static int visit_pattern_props(struct conv *c, const cJSON *node, const cJSON *pp,
                               const char *name, int64_t min, int64_t max, struct ig_str *expr)
{
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    if (!cJSON_IsObject(pp) || !pp->child)
        return fail(c, "'patternProperties' must be an object of patterns");
    if (pp->child->next)
        return fail(c, "'patternProperties' with more than one pattern is not supported (a key "
                    "may match several)");
    if (cJSON_GetObjectItemCaseSensitive(node, "properties") || (addl && !cJSON_IsFalse(addl)))
        return fail(c, "'patternProperties' beside 'properties' or 'additionalProperties' is "
                    "not supported (a key may match both)");
    size_t old = ptr_push(c, "patternProperties");
    struct ig_str key = {0};
    cJSON pat = {.type = cJSON_String, .valuestring = pp->child->string};
    int st = visit_pattern(c, &pat, &key);
    ptr_pop(c, old);
    const char *value = NULL;
    char base[160];
    snprintf(base, sizeof base, "%s-value", name);
    if (st == IG_OK)
        st = visit_child(c, pp->child, "patternProperties", -1, base, &value);
    if (st == IG_OK && key.failed)
        st = nomem(c);
    if (st == IG_OK)
        st = free_object(c, key.s, value, min, max, expr);
    free(key.s);
    return st;
}

static int visit_object(struct conv *c, const cJSON *node, const char *name, struct ig_str *expr)
{
    int64_t min_props, max_props;
    int st0;
    if ((st0 = get_count(c, node, "minProperties", GR_MAX_REPEAT, 0, &min_props)) != IG_OK ||
        (st0 = get_count(c, node, "maxProperties", GR_MAX_REPEAT, -1, &max_props)) != IG_OK)
        return st0;
    if (max_props >= 0 && min_props > max_props)
        return fail(c, "minProperties is above maxProperties");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(node, "patternProperties");
    if (pp)
        return visit_pattern_props(c, node, pp, name, min_props, max_props, expr);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(node, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return fail(c, "'required' must be an array of property names");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' must be a boolean or a schema");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r))
            return fail(c, "'required' must be an array of property names");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(c, "required property '%s' is not in 'properties' (not supported)",
                        r->valuestring);
    }
    bool extra = addl && (cJSON_IsTrue(addl) || cJSON_IsObject(addl));
    if (!props && !(addl && !extra) && !cJSON_IsObject(addl)) {
        if (min_props == 0 && max_props < 0) {
            ig_str_puts(expr, prim(c, PRIM_OBJECT)); /* nothing said: any object */
            return IG_OK;
        }
        return free_object(c, prim(c, PRIM_STRING), prim(c, PRIM_VALUE), min_props, max_props,
                           expr);
    }
    /* the counts where the object's shape already keeps them */
    int n_listed = props ? cJSON_GetArraySize(props) : 0, n_required = 0;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        n_required++;
    if (min_props > n_required)
        return fail(c, "'minProperties' above the required properties is not supported");
    if (max_props >= 0 && (extra || max_props < n_listed))
        return fail(c, "'maxProperties' below the properties the object may have is not "
                    "supported");
    prim(c, PRIM_SPACE);
    /* key-value rules, required first, each in the order of 'properties' */
    int n_props = props ? cJSON_GetArraySize(props) : 0;
    const char **kv = calloc((size_t)n_props + 1, sizeof *kv);
    bool *is_req = calloc((size_t)n_props + 1, sizeof *is_req);
    int *order = calloc((size_t)n_props + 1, sizeof *order);
    if (!kv || !is_req || !order) {
        free(kv), free(is_req), free(order);
        return nomem(c);
    }
    int st = IG_OK, i = 0;
    for (const cJSON *p = props ? props->child : NULL; p && st == IG_OK; p = p->next, i++) {
        char base[160];
        snprintf(base, sizeof base, "%s-%s", name, p->string);
        const char *value;
        size_t old = ptr_push(c, "properties");
        st = visit_child(c, p, p->string, -1, base, &value);
        ptr_pop(c, old);
        if (st != IG_OK)
            break;
        struct ig_str body = {0};
        key_literal(c, p->string, &body);
        ig_str_printf(&body, " space \":\" space %s space", value);
        char kvbase[170];
        snprintf(kvbase, sizeof kvbase, "%s-kv", base);
        char *kvname = new_name(c, kvbase);
        if (!kvname || body.failed) {
            free(body.s);
            st = nomem(c);
            break;
        }
        add_rule(c, kvname, body.s);
        free(body.s);
        kv[i] = kvname;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            is_req[i] |= !strcmp(r->valuestring, p->string);
    }
    const char *extra_kv = NULL;
    if (st == IG_OK && extra) {
        const char *value, *key;
        char base[160];
        snprintf(base, sizeof base, "%s-additional", name);
        if (cJSON_IsObject(addl)) {
            st = visit_child(c, addl, "additionalProperties", -1, base, &value);
        } else {
            value = prim(c, PRIM_VALUE);
        }
        struct ig_str body = {0};
        if (st == IG_OK && n_props) {
            struct ktrie root = {0};
            for (const cJSON *p = props->child; p && st == IG_OK; p = p->next)
                if (ktrie_add(&root, p->string) != IG_OK)
                    st = nomem(c);
            char kbase[170];
            snprintf(kbase, sizeof kbase, "%s-k", base);
            key = st == IG_OK ? not_names(c, &root, kbase) : NULL;
            ktrie_free(root.child);
            if (!key)
                st = c->st != IG_OK ? c->st : nomem(c);
            else
                ig_str_printf(&body, "\"\\\"\" %s \"\\\"\"", key);
        } else if (st == IG_OK) {
            ig_str_puts(&body, prim(c, PRIM_STRING));
        }
        if (st == IG_OK) {
            ig_str_printf(&body, " space \":\" space %s space", value);
            char kvbase[170];
            snprintf(kvbase, sizeof kvbase, "%s-kv", base);
            char *kvname = new_name(c, kvbase);
            if (!kvname || body.failed)
                st = nomem(c);
            else
                add_rule(c, kvname, body.s), extra_kv = kvname;
        }
        free(body.s);
    }
    if (st != IG_OK) {
        free(kv), free(is_req), free(order);
        return st;
    }
    /* "{" required ("," ...)* then any subset of the optional ones in order */
    int n_req = 0, n_opt = 0;
    for (int k = 0; k < n_props; k++)
        if (is_req[k])
            ig_str_printf(expr, "%s%s", n_req++ ? " \",\" space " : "\"{\" space ", kv[k]);
    if (!n_req)
        ig_str_puts(expr, "\"{\" space");
    for (int k = 0; k < n_props; k++)
        if (!is_req[k])
            order[n_opt++] = k;
    if (n_opt || extra_kv) {
        /* rest(j) ::= ("," space opt_j)? rest(j+1); the extra kv repeats */
        int total = n_opt + (extra_kv != NULL);
        const char **rest = calloc((size_t)total + 1, sizeof *rest);
        if (!rest) {
            free(kv), free(is_req), free(order);
            return nomem(c);
        }
        for (int j = total - 1; j >= 1; j--) {
            const char *item = j < n_opt ? kv[order[j]] : extra_kv;
            struct ig_str body = {0};
            ig_str_printf(&body, "( \",\" space %s )%s", item, j < n_opt ? "?" : "*");
            if (rest[j + 1])
                ig_str_printf(&body, " %s", rest[j + 1]);
            char base[160];
            snprintf(base, sizeof base, "%s-rest", name);
            char *rn = new_name(c, base);
            if (!rn || body.failed) {
                free(body.s);
                free(rest);
                free(kv), free(is_req), free(order);
                return nomem(c);
            }
            add_rule(c, rn, body.s);
            free(body.s);
            rest[j] = rn;
        }
        ig_str_puts(expr, n_req ? " ( \",\" space ( " : " ( ");
        for (int j = 0; j < total; j++) {
            const char *item = j < n_opt ? kv[order[j]] : extra_kv;
            ig_str_printf(expr, "%s%s", j ? " | " : "", item);
            if (j >= n_opt)
                ig_str_printf(expr, " ( \",\" space %s )*", extra_kv);
            if (rest[j + 1])
                ig_str_printf(expr, " %s", rest[j + 1]);
        }
        ig_str_puts(expr, n_req ? " ) )?" : " )?");
        free(rest);
    }
    ig_str_puts(expr, " \"}\"");
    free(kv), free(is_req), free(order);
    return IG_OK;
}

/* A tuple: prefix[i] at position i (prefixItems, or draft 7's items
 * array), `rest` (a schema, true, false) after them, within the counts.
 * Prefix items are optional past minItems, as JSON Schema has it. */
static int visit_tuple(struct conv *c, const cJSON *prefix, const char *key, const cJSON *rest,
                       const char *rest_key, int64_t min, int64_t max, const char *name,
                       struct ig_str *expr)
{
    int64_t n = cJSON_GetArraySize(prefix);
    if (n > GR_MAX_REPEAT)
        return fail(c, "'%s' of more than %d schemas is not supported", key, GR_MAX_REPEAT);
    const char **rules = calloc((size_t)n + 1, sizeof *rules);
    if (!rules)
        return nomem(c);
    int st = IG_OK, i = 0;
    for (const cJSON *p = prefix->child; p && st == IG_OK; p = p->next, i++) {
        char base[160];
        snprintf(base, sizeof base, "%s-%d", name, i);
        st = visit_child(c, p, key, i, base, &rules[i]);
    }
    const char *rest_rule = NULL;
    if (st == IG_OK && rest && cJSON_IsObject(rest)) {
        char base[160];
        snprintf(base, sizeof base, "%s-rest", name);
        st = visit_child(c, rest, rest_key, -1, base, &rest_rule);
    } else if (st == IG_OK && (!rest || cJSON_IsTrue(rest))) {
        rest_rule = prim(c, PRIM_VALUE);
    } else if (st == IG_OK && !cJSON_IsFalse(rest)) {
        st = fail(c, "'%s' must be a schema", rest_key);
    }
    int64_t hi = rest_rule ? max : (max >= 0 && max < n ? max : n);
    if (st == IG_OK && hi >= 0 && min > hi)
        st = fail(c, "minItems is above what the tuple can hold");
    if (st != IG_OK) {
        free(rules);
        return st;
    }
    prim(c, PRIM_SPACE);
    ig_str_puts(expr, "\"[\" space");
    int64_t m = hi >= 0 && hi < n ? hi : n; /* prefix positions written */
    for (int64_t k = 0; k < m; k++) /* ( "," item ( ... )? )? nested */
        ig_str_printf(expr, " %s%s%s space", k >= min ? "( " : "", k ? "\",\" space " : "",
                      rules[k]);
    if (rest_rule && (hi < 0 || hi > n)) {
        int64_t lo = min > n ? min - n : 0;
        ig_str_printf(expr, " ( \",\" space %s space )", rest_rule);
        if (hi < 0)
            ig_str_printf(expr, "{%lld,}", (long long)lo);
        else
            ig_str_printf(expr, "{%lld,%lld}", (long long)lo, (long long)(hi - n));
    }
    for (int64_t k = m - 1; k >= 0; k--)
        if (k >= min)
            ig_str_puts(expr, " )?");
    ig_str_puts(expr, " \"]\"");
    free(rules);
    return IG_OK;
}

static int visit_array(struct conv *c, const cJSON *node, const char *name, struct ig_str *expr)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(node, "items");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(node, "uniqueItems");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(node, "prefixItems");
    if (uniq && !cJSON_IsFalse(uniq))
        return fail(c, "'uniqueItems' true is not supported (a grammar cannot compare items)");
    if (prefix && (!cJSON_IsArray(prefix) || cJSON_IsArray(items)))
        return fail(c, "'prefixItems' must be an array of schemas (and 'items' then a schema)");
    if ((prefix && prefix->child) || (cJSON_IsArray(items) && items->child)) {
        int64_t min, max;
        int st;
        if ((st = get_count(c, node, "minItems", GR_MAX_REPEAT, 0, &min)) != IG_OK ||
            (st = get_count(c, node, "maxItems", GR_MAX_REPEAT, -1, &max)) != IG_OK)
            return st;
        if (max >= 0 && min > max)
            return fail(c, "minItems is above maxItems");
        if (prefix)
            return visit_tuple(c, prefix, "prefixItems", items, "items", min, max, name, expr);
        return visit_tuple(c, items, "items",
                           cJSON_GetObjectItemCaseSensitive(node, "additionalItems"),
                           "additionalItems", min, max, name, expr);
    }
    if (cJSON_IsArray(items)) /* an empty tuple: additionalItems says it all */
        items = cJSON_GetObjectItemCaseSensitive(node, "additionalItems");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return fail(c, "'items' must be a schema");
    if (cJSON_IsFalse(items)) { /* no items at all */
        int64_t min;
        int st = get_count(c, node, "minItems", GR_MAX_REPEAT, 0, &min);
        if (st != IG_OK)
            return st;
        if (min > 0)
            return fail(c, "minItems above 0 with 'items': false matches nothing");
        prim(c, PRIM_SPACE);
        ig_str_puts(expr, "\"[\" space \"]\"");
        return IG_OK;
    }
    int64_t min, max;
    int st;
    if ((st = get_count(c, node, "minItems", GR_MAX_REPEAT, 0, &min)) != IG_OK ||
        (st = get_count(c, node, "maxItems", GR_MAX_REPEAT, -1, &max)) != IG_OK)
        return st;
    if (max >= 0 && min > max)
        return fail(c, "minItems is above maxItems");
    const char *item;
    if (cJSON_IsObject(items)) {
        char base[160];
        snprintf(base, sizeof base, "%s-item", name);
        if ((st = visit_child(c, items, "items", -1, base, &item)) != IG_OK)
            return st;
    } else {
        item = prim(c, PRIM_VALUE);
    }
    prim(c, PRIM_SPACE);
    if (max == 0) {
        ig_str_puts(expr, "\"[\" space \"]\"");
        return IG_OK;
    }
    ig_str_printf(expr, "\"[\" space %s%s space", min == 0 ? "( " : "", item);
    int64_t lo = min ? min - 1 : 0, hi = max < 0 ? -1 : max - 1;
    if (hi != 0) {
        ig_str_printf(expr, " ( \",\" space %s space )", item);
        if (hi < 0)
            ig_str_printf(expr, "{%lld,}", (long long)lo);
        else
            ig_str_printf(expr, "{%lld,%lld}", (long long)lo, (long long)hi);
    }
    ig_str_printf(expr, "%s \"]\"", min == 0 ? " )?" : "");
    return IG_OK;
}

/* `pattern`: the string's text as the regular expression allows it. */
static int visit_pattern(struct conv *c, const cJSON *pat, struct ig_str *expr)
{
    if (!cJSON_IsString(pat))
        return fail(c, "'pattern' must be a string");
    char msg[200], *re;
    int st = gr_regex_to_gbnf(pat->valuestring, prim(c, PRIM_CHAR), &re, msg, sizeof msg);
    if (st == IG_E_NOMEM)
        return nomem(c);
    if (st != IG_OK) {
        size_t old = ptr_push(c, "pattern");
        st = fail(c, "pattern '%.80s': %s", pat->valuestring, msg);
        ptr_pop(c, old);
        return st;
    }
    ig_str_puts(expr, "\"\\\"\" ( ");
    ig_str_puts(expr, re);
    ig_str_puts(expr, " ) \"\\\"\"");
    free(re);
    return IG_OK;
}

static int visit_string(struct conv *c, const cJSON *node, struct ig_str *expr)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(node, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
    bool has_len = cJSON_GetObjectItemCaseSensitive(node, "minLength") ||
                   cJSON_GetObjectItemCaseSensitive(node, "maxLength");
    if (pat) {
        if (fmt || has_len)
            return fail(c, "'%s' beside 'pattern' is not supported (a grammar of both is not "
                        "built)", fmt ? "format" : "minLength/maxLength");
        return visit_pattern(c, pat, expr);
    }
    if (fmt) {
        if (!cJSON_IsString(fmt))
            return fail(c, "'format' must be a string");
        unsigned which = !strcmp(fmt->valuestring, "date") ? PRIM_DATE
                         : !strcmp(fmt->valuestring, "time") ? PRIM_TIME
                         : !strcmp(fmt->valuestring, "date-time") ? PRIM_DATE | PRIM_TIME
                         : !strcmp(fmt->valuestring, "uuid") ? PRIM_UUID : 0;
        if (!which)
            return fail(c, "format '%s' is not supported (supported: date, time, date-time, "
                        "uuid)", fmt->valuestring);
        if (has_len)
            return fail(c, "minLength/maxLength beside 'format' is not supported");
        if (which == (PRIM_DATE | PRIM_TIME))
            ig_str_printf(expr, "\"\\\"\" %s \"T\" %s \"\\\"\"", prim(c, PRIM_DATE),
                          prim(c, PRIM_TIME));
        else
            ig_str_printf(expr, "\"\\\"\" %s \"\\\"\"", prim(c, which));
        return IG_OK;
    }
    if (!has_len) {
        ig_str_puts(expr, prim(c, PRIM_STRING));
        return IG_OK;
    }
    int64_t min, max;
    int st;
    if ((st = get_count(c, node, "minLength", GR_MAX_REPEAT, 0, &min)) != IG_OK ||
        (st = get_count(c, node, "maxLength", GR_MAX_REPEAT, -1, &max)) != IG_OK)
        return st;
    if (max >= 0 && min > max)
        return fail(c, "minLength is above maxLength");
    const char *ch = prim(c, PRIM_CHAR);
    if (max < 0)
        ig_str_printf(expr, "\"\\\"\" %s{%lld,} \"\\\"\"", ch, (long long)min);
    else
        ig_str_printf(expr, "\"\\\"\" %s{%lld,%lld} \"\\\"\"", ch, (long long)min, (long long)max);
    return IG_OK;
}

static int visit_number(struct conv *c, const cJSON *node, bool integer, struct ig_str *expr)
{
    bool bounded = cJSON_GetObjectItemCaseSensitive(node, "minimum") ||
                   cJSON_GetObjectItemCaseSensitive(node, "maximum") ||
                   cJSON_GetObjectItemCaseSensitive(node, "exclusiveMinimum") ||
                   cJSON_GetObjectItemCaseSensitive(node, "exclusiveMaximum");
    if (integer)
        return integer_range(c, node, expr);
    if (bounded)
        return number_range(c, node, expr);
    ig_str_puts(expr, prim(c, PRIM_NUMBER));
    return IG_OK;
}

/* allOf: one member stands for itself; several are merged where they are
 * object schemas (properties, required, type object: OpenAPI's composition),
 * the node's own object keywords with them; anything else is refused. The
 * merged object writes only keys some member lists, each under its member's
 * schema, so whatever it admits is valid for every member. */
static bool merge_member(struct conv *c, const cJSON *m, cJSON *props, cJSON *req, int *n_true,
                         int depth)
{
    if (depth > 16)
        return fail(c, "allOf: '$ref' chains deeper than 16"), false;
    for (const cJSON *k = m->child; k; k = k->next) {
        const char *key = k->string;
        if (is_annotation(key) || !strcmp(key, "$defs") || !strcmp(key, "definitions") ||
            !strcmp(key, "allOf"))
            continue;
        if (!strcmp(key, "$ref")) {
            const cJSON *t = cJSON_IsString(k) ? resolve(c->doc, k->valuestring) : NULL;
            if (!t || !cJSON_IsObject(t))
                return fail(c, "allOf: '$ref' '%s' does not resolve to an object schema here",
                            cJSON_IsString(k) ? k->valuestring : "?"), false;
            if (!merge_member(c, t, props, req, n_true, depth + 1))
                return false;
            continue;
        }
        if (!strcmp(key, "type")) {
            if (!cJSON_IsString(k) || strcmp(k->valuestring, "object"))
                return fail(c, "allOf of types other than object is not supported (only object "
                            "schemas are merged)"), false;
            continue;
        }
        if (!strcmp(key, "additionalProperties")) {
            if (!cJSON_IsTrue(k))
                return fail(c, "allOf: 'additionalProperties' other than true in a member is "
                            "not supported"), false;
            (*n_true)++;
            continue;
        }
        if (!strcmp(key, "required")) {
            for (const cJSON *r = cJSON_IsArray(k) ? k->child : NULL; r; r = r->next)
                if (!cJSON_IsString(r) ||
                    !cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring)))
                    return fail(c, "'required' must be an array of property names"), false;
            continue;
        }
        if (!strcmp(key, "properties") && cJSON_IsObject(k)) {
            for (const cJSON *p = k->child; p; p = p->next) {
                const cJSON *had = cJSON_GetObjectItemCaseSensitive(props, p->string);
                if (had && !cJSON_Compare(had, p, true))
                    return fail(c, "allOf: property '%s' in two members with different schemas "
                                "is not supported", p->string), false;
                if (!had && !cJSON_AddItemToObject(props, p->string, cJSON_Duplicate(p, true)))
                    return nomem(c), false;
            }
            continue;
        }
        return fail(c, "'%s' in an allOf member is not supported (allOf merges object schemas: "
                    "properties, required, type object)", key), false;
    }
    return true;
}

/* allOf of numeric members (type number/integer and bounds only, the node's
 * own keywords among them): the tightest bounds, integer if one says so.
 * Returns 1 when the members are not all numeric (nothing written). */
static int allof_numbers(struct conv *c, const cJSON *node, const cJSON *all, const char *name,
                         struct ig_str *expr)
{
    static const char *const bounds[] = {"minimum", "exclusiveMinimum", "maximum",
                                         "exclusiveMaximum"};
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return nomem(c);
    bool integer = false, numeric = false;
    int st = 1;
    for (const cJSON *member = node; member; member = member == node ? all->child : member->next) {
        if (!cJSON_IsObject(member))
            goto done;
        for (const cJSON *k = member->child; k; k = k->next) {
            if (is_annotation(k->string) || !strcmp(k->string, "allOf") ||
                !strcmp(k->string, "$defs") || !strcmp(k->string, "definitions"))
                continue;
            if (!strcmp(k->string, "type") && cJSON_IsString(k) &&
                (!strcmp(k->valuestring, "number") || !strcmp(k->valuestring, "integer"))) {
                integer |= !strcmp(k->valuestring, "integer");
                numeric = true;
                continue;
            }
            int b = 0;
            while (b < 4 && strcmp(k->string, bounds[b]))
                b++;
            if (b == 4 || !cJSON_IsNumber(k))
                goto done; /* not numeric: the object merge decides */
            numeric = true;
            const cJSON *had = cJSON_GetObjectItemCaseSensitive(m, bounds[b]);
            bool lower = b < 2;
            if (!had || (lower ? k->valuedouble > had->valuedouble
                               : k->valuedouble < had->valuedouble)) {
                cJSON_DeleteItemFromObjectCaseSensitive(m, bounds[b]);
                if (!cJSON_AddNumberToObject(m, bounds[b], k->valuedouble)) {
                    st = nomem(c);
                    goto done;
                }
            }
        }
    }
    if (numeric) {
        size_t old = ptr_push(c, "allOf");
        st = visit_number(c, m, integer, expr);
        ptr_pop(c, old);
    }
done:
    cJSON_Delete(m);
    (void)name;
    return st;
}

static int visit_allof(struct conv *c, const cJSON *node, const char *name, struct ig_str *expr)
{
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(node, "allOf");
    if (!cJSON_IsArray(all) || !all->child)
        return fail(c, "'allOf' must be a non-empty array of schemas");
    bool alone = true; /* nothing but annotations beside allOf */
    for (const cJSON *k = node->child; k; k = k->next)
        alone &= !strcmp(k->string, "allOf") || is_annotation(k->string) ||
                 !strcmp(k->string, "$defs") || !strcmp(k->string, "definitions");
    if (alone && !all->child->next) {
        const char *rule;
        int st = visit_child(c, all->child, "allOf", 0, name, &rule);
        if (st == IG_OK)
            ig_str_puts(expr, rule);
        return st;
    }
    int numeric = allof_numbers(c, node, all, name, expr);
    if (numeric != 1)
        return numeric;
    cJSON *merged = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    if (!merged || !props || !req) {
        cJSON_Delete(merged), cJSON_Delete(props), cJSON_Delete(req);
        return nomem(c);
    }
    int n_true = 0, members = 1, i = 0;
    bool ok = merge_member(c, node, props, req, &n_true, 0);
    for (const cJSON *m = all->child; ok && m; m = m->next, i++, members++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        size_t old = ptr_push(c, "allOf"), old2 = ptr_push(c, num);
        if (cJSON_IsTrue(m))
            members--;
        else if (!cJSON_IsObject(m))
            ok = (fail(c, "an allOf member must be an object schema"), false);
        else
            ok = merge_member(c, m, props, req, &n_true, 0);
        ptr_pop(c, old2);
        ptr_pop(c, old);
    }
    int st = c->st;
    if (ok) {
        cJSON_AddItemToObject(merged, "type", cJSON_CreateString("object"));
        cJSON_AddItemToObject(merged, "properties", props);
        cJSON_AddItemToObject(merged, "required", req);
        props = req = NULL;
        /* extra keys only where every member lets them in */
        if (n_true == members)
            cJSON_AddItemToObject(merged, "additionalProperties", cJSON_CreateTrue());
        st = visit_object(c, merged, name, expr);
    }
    cJSON_Delete(props), cJSON_Delete(req), cJSON_Delete(merged);
    return st != IG_OK ? st : c->st;
}

/* The keywords that only mean something for one type. */
static const char *implied_type(const cJSON *node)
{
    static const struct { const char *key, *type; } I[] = {
        {"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
        {"items", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"uniqueItems", "array"}, {"minLength", "string"}, {"maxLength", "string"},
        {"format", "string"}, {"minimum", "number"}, {"maximum", "number"},
        {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
        {"pattern", "string"}, {"prefixItems", "array"}, {"patternProperties", "object"},
        {"minProperties", "object"}, {"maxProperties", "object"},
    };
    for (size_t i = 0; i < sizeof I / sizeof I[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(node, I[i].key))
            return I[i].type;
    return NULL;
}

static int visit_type(struct conv *c, const cJSON *node, const char *type, const char *name,
                      struct ig_str *expr)
{
    if (!strcmp(type, "object"))
        return visit_object(c, node, name, expr);
    if (!strcmp(type, "array"))
        return visit_array(c, node, name, expr);
    if (!strcmp(type, "string"))
        return visit_string(c, node, expr);
    if (!strcmp(type, "number") || !strcmp(type, "integer"))
        return visit_number(c, node, !strcmp(type, "integer"), expr);
    if (!strcmp(type, "boolean")) {
        ig_str_puts(expr, prim(c, PRIM_BOOLEAN));
        return IG_OK;
    }
    if (!strcmp(type, "null")) {
        ig_str_puts(expr, prim(c, PRIM_NULL));
        return IG_OK;
    }
    return fail(c, "unknown type '%s'", type);
}

/* Appends to expr the grammar expression for schema node `node`; `name`
 * is the rule it becomes (sub-rules are named after it). */
static int visit(struct conv *c, const cJSON *node, const char *name, struct ig_str *expr)
{
    if (c->st != IG_OK)
        return c->st;
    if (++c->depth > SCHEMA_MAX_DEPTH) {
        c->depth--;
        return fail(c, "the schema nests more than %d levels", SCHEMA_MAX_DEPTH);
    }
    int st = IG_OK;
    if (cJSON_IsTrue(node)) {
        ig_str_puts(expr, prim(c, PRIM_VALUE));
        goto done;
    }
    if (!cJSON_IsObject(node)) {
        st = fail(c, cJSON_IsFalse(node) ? "the schema false matches nothing"
                                         : "a schema must be an object or a boolean");
        goto done;
    }
    for (const cJSON *k = node->child; k; k = k->next)
        if (!is_known(k->string)) {
            size_t old = ptr_push(c, k->string);
            st = fail(c, "keyword '%s' is not supported", k->string);
            ptr_pop(c, old);
            goto done;
        }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_GetObjectItemCaseSensitive(node, "allOf")) {
        st = visit_allof(c, node, name, expr);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "$ref")) {
        st = visit_ref(c, node, expr);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "anyOf")) {
        st = visit_union(c, node, "anyOf", name, expr);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "oneOf")) {
        st = visit_union(c, node, "oneOf", name, expr);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "const")) {
        st = visit_values(c, node, "const", expr);
    } else if (cJSON_GetObjectItemCaseSensitive(node, "enum")) {
        st = visit_values(c, node, "enum", expr);
    } else if (cJSON_IsArray(type)) {
        if (!type->child) {
            st = fail(c, "'type' must not be an empty array");
            goto done;
        }
        ig_str_puts(expr, "( ");
        int i = 0;
        for (const cJSON *t = type->child; t && st == IG_OK; t = t->next, i++) {
            if (!cJSON_IsString(t)) {
                st = fail(c, "'type' must hold type names");
                break;
            }
            ig_str_puts(expr, i ? " | " : "");
            st = visit_type(c, node, t->valuestring, name, expr);
        }
        ig_str_puts(expr, " )");
    } else if (type) {
        st = cJSON_IsString(type) ? visit_type(c, node, type->valuestring, name, expr)
                                  : fail(c, "'type' must be a string or an array of strings");
    } else {
        const char *t = implied_type(node);
        if (t)
            st = visit_type(c, node, t, name, expr);
        else
            ig_str_puts(expr, prim(c, PRIM_VALUE)); /* nothing constrains it: any value */
    }
done:
    c->depth--;
    return st != IG_OK ? st : c->st;
}

static void conv_free(struct conv *c)
{
    for (int64_t i = 0; i < c->n_names; i++)
        free(c->names[i]);
    free(c->names);
    for (int64_t i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c->refs);
}

int grammar_schema_to_gbnf(const char *json, size_t len, const char *source, char **gbnf)
{
    *gbnf = NULL;
    for (size_t i = 0; i < len;) {
        size_t n = ig_utf8_char_len((const unsigned char *)json + i, len - i);
        if (n == 0)
            return ig_error(IG_E_USAGE, "%s: invalid UTF-8 at byte %zu", source, i);
        i += n;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!doc) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < at && i < len; i++) {
            if (json[i] == '\n')
                line++, col = 1;
            else if (((unsigned char)json[i] & 0xC0) != 0x80)
                col++;
        }
        if (at >= ig_json_too_deep_at(json, len))
            return ig_error(IG_E_USAGE, "%s: JSON nested more than %d levels deep", source,
                            CJSON_NESTING_LIMIT);
        return ig_error(IG_E_USAGE, "%s:%d:%d: not valid JSON", source, line, col);
    }
    for (const char *p = end; p < json + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(doc);
            return ig_error(IG_E_USAGE, "%s: text after the JSON schema", source);
        }
    struct conv c = {.source = source, .doc = doc};
    struct ig_str root = {0};
    char *root_name = new_name(&c, "root");
    int st = root_name ? visit(&c, doc, "root", &root) : c.st;
    if (st == IG_OK && root.failed)
        st = nomem(&c);
    if (st == IG_OK) {
        /* root first, so the text reads top-down */
        struct ig_str out = {0};
        ig_str_printf(&out, "root ::= %s\n", root.s);
        ig_str_puts(&out, c.rules.s ? c.rules.s : "");
        if (out.failed) {
            free(out.s);
            st = nomem(&c);
        } else {
            *gbnf = out.s;
        }
    }
    free(root.s);
    free(c.rules.s);
    conv_free(&c);
    cJSON_Delete(doc);
    return st;
}

int grammar_from_json_schema(const char *json, size_t len, const char *source,
                             struct grammar **out)
{
    *out = NULL;
    char *gbnf;
    int st = grammar_schema_to_gbnf(json, len, source, &gbnf);
    if (st != IG_OK)
        return st;
    st = grammar_from_gbnf(gbnf, strlen(gbnf), source, out);
    free(gbnf);
    return st;
}

int grammar_any_json(struct grammar **out)
{
    static const char any[] = "{}";
    return grammar_from_json_schema(any, sizeof any - 1, "--format json", out);
}
