/* tokenizer/jinja_lex.c: a Jinja template's source → tokens, with Jinja's
 * whitespace rules as transformers sets them: `{%-`/`-%}` strip the white
 * space beside a tag, trim_blocks drops the newline after a block or comment
 * tag, lstrip_blocks the blanks before one on its line (`+` turns either
 * off), newlines normalised to "\n" and one trailing newline dropped.
 * Leaves the grammar to jinja_parse.c. Covered by tests/unit/test_jinja.py. */
#include "tokenizer/jinja_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jj_fail(struct jj_error *e, int line, int col, const char *fmt, ...)
{
    if (e->set)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->line = line;
    e->col = col;
    e->set = true;
}

struct lexer {
    struct jj_arena *a;
    const char *s;
    size_t len, pos;
    int line, col;
    struct jj_token *toks;
    int64_t n, cap;
    struct jj_error *e;
};

static void advance(struct lexer *L, size_t k)
{
    for (size_t i = 0; i < k && L->pos < L->len; i++, L->pos++) {
        if (L->s[L->pos] == '\n') {
            L->line++;
            L->col = 1;
        } else {
            L->col++;
        }
    }
}

static struct jj_token *push(struct lexer *L, enum jj_tok kind, int line, int col)
{
    if (L->n == L->cap) {
        int64_t cap = L->cap ? L->cap * 2 : 256;
        struct jj_token *t = jj_alloc(L->a, (size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        if (L->n)
            memcpy(t, L->toks, (size_t)L->n * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    struct jj_token *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->line = line;
    t->col = col;
    return t;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* One UTF-8 encoded code point into out (4 bytes at most): its length. */
static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A quoted string at L->pos, escapes decoded as Python's unicode-escape. */
static bool lex_string(struct lexer *L, int line, int col)
{
    char q = L->s[L->pos];
    size_t i = L->pos + 1;
    while (i < L->len && L->s[i] != q) {
        if (L->s[i] == '\\')
            i++;
        i++;
    }
    if (i >= L->len) {
        jj_fail(L->e, line, col, "unterminated string");
        return false;
    }
    const char *body = L->s + L->pos + 1;
    size_t blen = i - L->pos - 1;
    char *out = jj_alloc(L->a, blen + 1);
    if (!out)
        return false;
    size_t n = 0;
    for (size_t k = 0; k < blen; k++) {
        char c = body[k];
        if (c != '\\' || k + 1 >= blen) {
            out[n++] = c;
            continue;
        }
        char d = body[++k];
        int digits = d == 'x' ? 2 : d == 'u' ? 4 : d == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            int got = 0;
            while (got < digits && k + 1 < blen && hexval(body[k + 1]) >= 0)
                cp = cp * 16 + (uint32_t)hexval(body[++k]), got++;
            if (got != digits || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                jj_fail(L->e, line, col, "a bad \\%c escape in a string", d);
                return false;
            }
            n += utf8_put(cp, out + n); /* never longer than the escape */
            continue;
        }
        if (d >= '0' && d <= '7') {
            uint32_t cp = (uint32_t)(d - '0');
            for (int m = 0; m < 2 && k + 1 < blen && body[k + 1] >= '0' && body[k + 1] <= '7'; m++)
                cp = cp * 8 + (uint32_t)(body[++k] - '0');
            n += utf8_put(cp, out + n);
            continue;
        }
        switch (d) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'a': out[n++] = '\a'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case '\\': case '\'': case '"': out[n++] = d; break;
        case '\n': break; /* a line continuation */
        default: out[n++] = '\\'; out[n++] = d; break;
        }
    }
    out[n] = '\0';
    struct jj_token *t = push(L, JT_STRING, line, col);
    if (!t)
        return false;
    t->text = out;
    t->len = n;
    advance(L, i + 1 - L->pos);
    return true;
}

static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                  "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                  ":", "|"};

/* The tokens of a tag's inside, up to its end ("}}" or "%}" with its
 * optional '-' or '+'). Sets *strip_after / *keep_newline from the end. */
static bool lex_tag(struct lexer *L, const char *end, int open_line, int open_col,
                    bool *strip_after, bool *plus)
{
    int depth = 0;
    for (;;) {
        while (L->pos < L->len && is_space(L->s[L->pos]))
            advance(L, 1);
        if (L->pos >= L->len) {
            jj_fail(L->e, open_line, open_col, "the tag is not closed ('%s' missing)", end);
            return false;
        }
        const char *p = L->s + L->pos;
        size_t left = L->len - L->pos;
        if (depth == 0) {
            size_t k = (p[0] == '-' || p[0] == '+') ? 1 : 0;
            if (left >= k + 2 && !memcmp(p + k, end, 2)) {
                *strip_after = p[0] == '-';
                *plus = p[0] == '+';
                advance(L, k + 2);
                return true;
            }
        }
        int line = L->line, col = L->col;
        char c = p[0];
        if (c == '\'' || c == '"') {
            if (!lex_string(L, line, col))
                return false;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t k = 1;
            while (k < left && ((p[k] >= 'a' && p[k] <= 'z') || (p[k] >= 'A' && p[k] <= 'Z') ||
                                (p[k] >= '0' && p[k] <= '9') || p[k] == '_'))
                k++;
            struct jj_token *t = push(L, JT_NAME, line, col);
            if (!t || !(t->text = jj_strndup(L->a, p, k)))
                return false;
            t->len = k;
            advance(L, k);
            continue;
        }
        if (c >= '0' && c <= '9') {
            size_t k = 0;
            while (k < left && ((p[k] >= '0' && p[k] <= '9') || p[k] == '_'))
                k++;
            bool is_float = false;
            if (k + 1 < left && p[k] == '.' && p[k + 1] >= '0' && p[k + 1] <= '9') {
                is_float = true;
                k++;
                while (k < left && p[k] >= '0' && p[k] <= '9')
                    k++;
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t m = k + 1;
                if (m < left && (p[m] == '+' || p[m] == '-'))
                    m++;
                if (m < left && p[m] >= '0' && p[m] <= '9') {
                    is_float = true;
                    k = m;
                    while (k < left && p[k] >= '0' && p[k] <= '9')
                        k++;
                }
            }
            char num[64];
            size_t nn = 0;
            for (size_t m = 0; m < k && nn + 1 < sizeof num; m++)
                if (p[m] != '_')
                    num[nn++] = p[m];
            num[nn] = '\0';
            struct jj_token *t = push(L, is_float ? JT_FLOAT : JT_INT, line, col);
            if (!t)
                return false;
            if (is_float) {
                t->fval = strtod(num, NULL);
            } else {
                if (nn > 18) {
                    jj_fail(L->e, line, col, "the integer %s is too large", num);
                    return false;
                }
                t->ival = strtoll(num, NULL, 10);
            }
            advance(L, k);
            continue;
        }
        size_t i;
        for (i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            size_t k = strlen(ops[i]);
            if (left >= k && !memcmp(p, ops[i], k))
                break;
        }
        if (i == sizeof ops / sizeof ops[0]) {
            if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7F)
                jj_fail(L->e, line, col, "unexpected byte 0x%02x", (unsigned char)c);
            else
                jj_fail(L->e, line, col, "unexpected character '%c'", c);
            return false;
        }
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0)
            depth--;
        struct jj_token *t = push(L, JT_OP, line, col);
        if (!t)
            return false;
        t->text = ops[i];
        t->len = strlen(ops[i]);
        advance(L, t->len);
    }
}

bool jj_lex(struct jj_arena *a, const char *src, size_t len, struct jj_token **toks,
            int64_t *n, struct jj_error *e)
{
    /* newlines normalised as Jinja does, one trailing newline dropped */
    char *s = jj_alloc(a, len + 1);
    if (!s)
        return false;
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n')
        m--;
    s[m] = '\0';
    struct lexer L = {.a = a, .s = s, .len = m, .line = 1, .col = 1, .e = e};
    bool strip_next = false, trim_newline = false;
    while (L.pos < L.len) {
        /* the text up to the next tag */
        size_t start = L.pos, k = L.pos;
        const char *tag = NULL;
        while (k + 1 < L.len) {
            if (L.s[k] == '{' && (L.s[k + 1] == '{' || L.s[k + 1] == '%' || L.s[k + 1] == '#')) {
                tag = L.s + k;
                break;
            }
            k++;
        }
        size_t text_end = tag ? k : L.len;
        size_t a0 = start, a1 = text_end;
        if (strip_next)
            while (a0 < a1 && is_space(L.s[a0]))
                a0++;
        else if (trim_newline && a0 < a1 && L.s[a0] == '\n')
            a0++;
        if (tag) {
            char kind = tag[1];
            char mod = k + 2 < L.len ? tag[2] : 0;
            if (mod == '-') {
                while (a1 > a0 && is_space(L.s[a1 - 1]))
                    a1--;
            } else if ((kind == '%' || kind == '#') && mod != '+') {
                size_t b = a1; /* lstrip_blocks: blanks after the line's start only */
                while (b > a0 && (L.s[b - 1] == ' ' || L.s[b - 1] == '\t'))
                    b--;
                if (b == 0 || L.s[b - 1] == '\n') /* not after a tag on the same line */
                    a1 = b;
            }
        }
        if (a1 > a0) {
            int tl = L.line, tc = L.col;
            struct jj_token *t = push(&L, JT_TEXT, tl, tc);
            if (!t)
                return false;
            t->text = L.s + a0;
            t->len = a1 - a0;
        }
        advance(&L, text_end - start);
        strip_next = trim_newline = false;
        if (!tag)
            break;
        int line = L.line, col = L.col;
        char kind = tag[1];
        advance(&L, 2);
        if (L.pos < L.len && (L.s[L.pos] == '-' || L.s[L.pos] == '+'))
            advance(&L, 1);
        bool strip_after = false, plus = false;
        if (kind == '#') {
            const char *endc = strstr(L.s + L.pos, "#}");
            if (!endc) {
                jj_fail(e, line, col, "the comment is not closed ('#}' missing)");
                return false;
            }
            size_t at = (size_t)(endc - L.s);
            strip_after = at > L.pos && L.s[at - 1] == '-';
            plus = at > L.pos && L.s[at - 1] == '+';
            advance(&L, at + 2 - L.pos);
            strip_next = strip_after;
            trim_newline = !strip_after && !plus;
            continue;
        }
        if (!push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, line, col))
            return false;
        if (!lex_tag(&L, kind == '{' ? "}}" : "%}", line, col, &strip_after, &plus))
            return false;
        if (!push(&L, kind == '{' ? JT_VAR_END : JT_BLOCK_END, L.line, L.col))
            return false;
        strip_next = strip_after;
        trim_newline = kind == '%' && !strip_after && !plus;
    }
    if (!push(&L, JT_EOF, L.line, L.col))
        return false;
    *toks = L.toks;
    *n = L.n;
    return !e->set && !a->failed;
}
