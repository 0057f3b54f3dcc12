/* tests/grammar/test_grammar.c: the grammar room without a model.
 *   - UTF-8 classes: for random code point ranges (and the full range),
 *     every code point's own encoding is matched by the emitted byte-range
 *     sequences exactly when it is in the range and no surrogate, and
 *     nothing else of that length is;
 *   - GBNF: grammars that must compile or be refused (with the status),
 *     and strings each grammar must match whole, as a prefix, or reject,
 *     written from the grammar's meaning (llama.cpp's, docs/grammar.md);
 *   - the matcher's state survives dropping its tables (rebase).
 * The Python side (test_grammar_py.py) checks messages and compares
 * random grammars with Python's re. */
#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "grammar/pda.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 sequences -------------------------------------------------------- */

struct seqs {
    int n;
    int len[64];
    uint8_t lo[64][4], hi[64][4];
};

static void take(void *user, int n, const uint8_t *lo, const uint8_t *hi)
{
    struct seqs *s = user;
    IG_ASSERT(s->n < 64);
    s->len[s->n] = n;
    memcpy(s->lo[s->n], lo, (size_t)n);
    memcpy(s->hi[s->n], hi, (size_t)n);
    s->n++;
}

/* The encoding of c written here independently of the code under test. */
static int encode(uint32_t c, uint8_t *b)
{
    if (c < 0x80) { b[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { b[0] = 0xC0 | (uint8_t)(c >> 6); b[1] = 0x80 | (c & 63); return 2; }
    if (c < 0x10000) {
        b[0] = 0xE0 | (uint8_t)(c >> 12); b[1] = 0x80 | (c >> 6 & 63); b[2] = 0x80 | (c & 63);
        return 3;
    }
    b[0] = 0xF0 | (uint8_t)(c >> 18); b[1] = 0x80 | (c >> 12 & 63);
    b[2] = 0x80 | (c >> 6 & 63); b[3] = 0x80 | (c & 63);
    return 4;
}

static int matches(const struct seqs *s, const uint8_t *b, int n)
{
    int hits = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->len[i] != n)
            continue;
        int ok = 1;
        for (int k = 0; k < n && ok; k++)
            ok = b[k] >= s->lo[i][k] && b[k] <= s->hi[i][k];
        hits += ok;
    }
    return hits;
}

static void check_range(uint32_t lo, uint32_t hi)
{
    struct seqs s = {0};
    gr_utf8_sequences(lo, hi, take, &s);
    long bad = 0;
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        uint8_t b[4];
        int n = encode(c, b);
        int want = c >= lo && c <= hi && !(c >= 0xD800 && c <= 0xDFFF);
        if (matches(&s, b, n) != want && bad++ < 3)
            fprintf(stderr, "FAIL range %X-%X: U+%04X matched %d times\n", lo, hi, c,
                    matches(&s, b, n));
    }
    CHECKF(bad == 0, "range %X-%X: %ld code points wrong", lo, hi, bad);
    /* the sequences are products of byte ranges of valid encodings only:
     * every byte string they match decodes to a code point in range */
    for (int i = 0; i < s.n; i++) {
        uint8_t b[4];
        for (int k = 0; k < s.len[i]; k++)
            b[k] = s.hi[i][k];
        uint32_t c = s.len[i] == 1 ? b[0] : s.len[i] == 2 ? (b[0] & 31u) << 6 | (b[1] & 63u)
                   : s.len[i] == 3 ? (b[0] & 15u) << 12 | (b[1] & 63u) << 6 | (b[2] & 63u)
                   : (b[0] & 7u) << 18 | (b[1] & 63u) << 12 | (b[2] & 63u) << 6 | (b[3] & 63u);
        CHECKF(c >= lo && c <= hi && encode(c, b) == s.len[i], "sequence %d of %X-%X", i, lo, hi);
    }
}

static void test_utf8_sequences(void)
{
    check_range(0, 0x10FFFF);
    check_range(0x80, 0x7FF);
    check_range(0xD000, 0xE100);
    uint64_t seed = 5;
    for (int i = 0; i < 6; i++) {
        uint32_t a = (uint32_t)(test_rand_u64(&seed) % 0x110000);
        uint32_t b = (uint32_t)(test_rand_u64(&seed) % 0x110000);
        if (i < 3) /* small ranges too, which cut inside one leading byte */
            b = a + (uint32_t)(test_rand_u64(&seed) % 300);
        if (b > 0x10FFFF)
            b = 0x10FFFF;
        check_range(a < b ? a : b, a < b ? b : a);
    }
}

/* ---- GBNF ------------------------------------------------------------------------- */

static int compile(const char *text, struct grammar **g)
{
    *g = NULL;
    return grammar_from_gbnf(text, strlen(text), "test", g);
}

/* 1: the whole grammar matches s; 'p': s is a proper prefix of a match;
 * 0: neither. */
static int match(const struct grammar *g, const char *s)
{
    struct gr_pda p;
    IG_ASSERT(gr_pda_init(&p, g) == IG_OK);
    int32_t st = gr_pda_start(&p);
    for (size_t i = 0; s[i] && st > GR_DEAD; i++)
        st = gr_pda_step(&p, st, g->byte_class[(unsigned char)s[i]]);
    IG_ASSERT(st >= 0);
    int r = st == GR_DEAD ? 0 : gr_pda_complete(&p, st) ? 1 : 'p';
    gr_pda_free(&p);
    return r;
}

struct case_ {
    const char *grammar;
    const char *text;
    int want; /* 1, 'p', 0 */
};

static void test_matching(void)
{
    static const struct case_ C[] = {
        {"root ::= \"ab\" | \"cd\"", "ab", 1},
        {"root ::= \"ab\" | \"cd\"", "c", 'p'},
        {"root ::= \"ab\" | \"cd\"", "ad", 0},
        {"root ::= \"ab\" | \"cd\"", "abc", 0},
        {"root ::= [a-c]+", "abcabc", 1},
        {"root ::= [a-c]+", "", 'p'},
        {"root ::= [a-c]+", "abd", 0},
        {"root ::= [^a-c]*", "xyz\xc3\xa9", 1},
        {"root ::= [^a-c]*", "xbz", 0},
        {"root ::= [^a-c]*", "\xc3", 'p'},        /* a character's first byte */
        {"root ::= [^a-c]*", "\xc3(", 0},         /* not a continuation byte */
        {"root ::= [^a-c]*", "\xed\xa0\x80", 0},  /* an encoded surrogate is no character */
        {"root ::= \"x\"? \"y\"", "y", 1},
        {"root ::= \"x\"? \"y\"", "xy", 1},
        {"root ::= \"x\"? \"y\"", "xx", 0},
        {"root ::= \"a\"{3}", "aaa", 1},
        {"root ::= \"a\"{3}", "aa", 'p'},
        {"root ::= \"a\"{3}", "aaaa", 0},
        {"root ::= \"a\"{2,}", "aaaaaaa", 1},
        {"root ::= \"a\"{2,}", "a", 'p'},
        {"root ::= \"a\"{2,4} \"b\"", "aaaab", 1},
        {"root ::= \"a\"{2,4} \"b\"", "aaaaa", 0},
        {"root ::= \"a\"{2,4} \"b\"", "ab", 0},
        {"root ::= \"a\"{0,2}", "", 1},
        {"root ::= (\"ab\" | \"c\")* \"!\"", "abcab!", 1},
        {"root ::= (\"ab\" | \"c\")* \"!\"", "aba", 'p'},
        {"root ::= (\"ab\" | \"c\")* \"!\"", "abb", 0},
        {"root ::= x\nx ::= \"(\" x \")\" | \"\"", "((()))", 1},
        {"root ::= x\nx ::= \"(\" x \")\" | \"\"", "(()", 'p'},
        {"root ::= x\nx ::= \"(\" x \")\" | \"\"", "())", 0},
        {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\"", "A\xc3\xa9\xf0\x9f\x98\x80\t\n\\\"", 1},
        {"root ::= [\\]\\[\\-]+", "][-", 1},
        {"root ::= [a-]+", "-a-", 1},
        {"root ::= .", "\xe6\x97\xa5", 1},
        {"root ::= .", "\xe6\x97", 'p'},
        {"root ::= . .", "ab", 1},
        {"root ::= \"é\"", "\xc3\xa9", 1},
        {"# comment\nroot ::= a | # a newline after | goes on\n  b\na ::= \"1\"\nb ::= (\n  \"2\"\n  | \"3\" )\n", "3", 1},
        {"root ::= ( | \"a\" ) \"b\"", "b", 1},
        {"root ::= (\"a\"?)* \"b\"", "aab", 1},      /* a tail-only cycle: accepted */
        {"root ::= \"a\" root | \"b\"", "aaab", 1},
        {"root ::= [0-9]{1,3} (\",\" [0-9]{3})*", "12,345,678", 1},
        {"root ::= [0-9]{1,3} (\",\" [0-9]{3})*", "1234", 0},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        struct grammar *g;
        int st = compile(C[i].grammar, &g);
        CHECKF(st == IG_OK, "case %zu does not compile", i);
        if (st != IG_OK)
            continue;
        int got = match(g, C[i].text);
        CHECKF(got == C[i].want, "case %zu: '%s' on %s: got %c, want %c", i, C[i].text,
               C[i].grammar, got == 'p' ? 'p' : '0' + got, C[i].want == 'p' ? 'p' : '0' + C[i].want);
        grammar_free(g);
    }
}

static void test_refused(void)
{
    static const char *const bad[] = {
        "",                                 /* no root */
        "a ::= \"x\"",                      /* no root */
        "root ::= x",                       /* undefined */
        "root ::= \"a\"\nroot ::= \"b\"",   /* defined twice */
        "root ::= root \"a\" | \"b\"",      /* left recursion */
        "root ::= x \"a\"\nx ::= y\ny ::= root | \"c\"", /* through other rules */
        "root ::= e \"a\" | \"b\"\ne ::= \"\" | root", /* behind a rule that can be empty */
        "root ::= \"a\" root",              /* matches nothing: never ends */
        "root ::= []",                      /* empty class */
        "root ::= [^\\x00-\\U0010FFFF]",    /* empty after negation */
        "root ::= \"abc",                   /* unterminated */
        "root ::= [abc",
        "root ::= (\"a\"",
        "root ::= \"a\")",
        "root ::= *",
        "root ::= \"a\"{3,2}",
        "root ::= \"a\"{2001}",
        "root ::= \"a\"{1,x}",
        "root ::= \"\\q\"",
        "root ::= \"\\x4\"",
        "root ::= \"\\uD800\"",
        "root ::= \"\\U00110000\"",
        "root ::= [z-a]",
        "root ::= <think>",
        "root ::= \"a\" ::= \"b\"",
        "root := \"a\"",
        "root ::= \"\xff\"",
        "root ::= \"a\"\n  | \"b\"",         /* a newline before | ends the rule */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct grammar *g;
        int st = compile(bad[i], &g);
        CHECKF(st == IG_E_USAGE && !g, "bad grammar %zu ('%s') gave %d", i, bad[i], st);
        grammar_free(g);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[2000];
    size_t n = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 600; i++)
        deep[n++] = '(';
    deep[n] = '\0';
    struct grammar *g;
    CHECK(compile(deep, &g) == IG_E_USAGE);
}

/* Rebasing keeps the state: a prefix, then the tables dropped, then the
 * rest still matches. */
static void test_rebase(void)
{
    struct grammar *g;
    IG_ASSERT(compile("root ::= \"[\" ( [0-9]+ (\",\" [0-9]+)* )? \"]\"", &g) == IG_OK);
    struct gr_pda p;
    IG_ASSERT(gr_pda_init(&p, g) == IG_OK);
    int32_t s = gr_pda_start(&p);
    const char *a = "[12,3", *b = "4,5]";
    for (const char *c = a; *c; c++)
        s = gr_pda_step(&p, s, g->byte_class[(unsigned char)*c]);
    CHECK(s > GR_DEAD && gr_pda_rebase(&p, &s) == IG_OK);
    for (const char *c = b; *c && s > GR_DEAD; c++)
        s = gr_pda_step(&p, s, g->byte_class[(unsigned char)*c]);
    CHECK(s > GR_DEAD && gr_pda_done(&p, s));
    gr_pda_free(&p);
    grammar_free(g);
}

/* A nullable rule repeated inside its own repetition has exponentially many
 * stacks after a few bytes: the step fails with a message (no hang, no
 * memory exhausted), while the same shape without the empty alternative
 * still runs. */
static void test_too_ambiguous(void)
{
    struct grammar *g;
    IG_ASSERT(compile("root ::= expr\nexpr ::= | [^a-z] expr+ \")\"", &g) == IG_OK);
    struct gr_pda p;
    IG_ASSERT(gr_pda_init(&p, g) == IG_OK);
    int32_t s = gr_pda_start(&p);
    char err[256] = "";
    ig_error_capture(err, sizeof err);
    for (int i = 0; i < 64 && s > GR_DEAD; i++)
        s = gr_pda_step(&p, s, g->byte_class['1']);
    ig_error_capture(NULL, 0);
    CHECKF(s < 0 && strstr(err, "too ambiguous"), "state %d, error '%s'", (int)s, err);
    gr_pda_free(&p);
    grammar_free(g);
    IG_ASSERT(compile("root ::= expr\nexpr ::= [^a-z] expr* \")\"", &g) == IG_OK);
    CHECK(match(g, "11111111)))") == 'p' && match(g, "1)") == 1);
    grammar_free(g);
}

int main(void)
{
    test_utf8_sequences();
    test_matching();
    test_refused();
    test_rebase();
    test_too_ambiguous();
    return test_summary("test_grammar");
}
