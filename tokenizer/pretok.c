/* tokenizer/pretok.c: the pre-tokenizers of byte-level BPE, hand-written
 * over the Unicode class table instead of a regex engine. Each one finds
 * where the piece starting at a position ends, doing what the reference
 * regex (first matching alternative, greedy, with backtracking) does:
 *
 *   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   smollm  every \p{N} character is a piece of its own (HF's Digits with
 *           individual_digits), then gpt2 within the text between them
 *   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2   llama3 with \p{N} instead of \p{N}{1,3}
 *
 * \s is the White_Space property. A byte that is not valid UTF-8 is one
 * character of class "other". Merging pieces into tokens is bpe.c's job.
 * Covered by tests/tokenizer/test_splitters.py (against HF tokenizers). */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

#include "core/status.h"

#include <string.h>

#define CF_LN (TOK_CF_LETTER | TOK_CF_NUMBER)
#define CF_LNS (TOK_CF_LETTER | TOK_CF_NUMBER | TOK_CF_SPACE)

/* Flags and length of the character at s[i], i < end. */
static inline unsigned char_at(const unsigned char *s, size_t i, size_t end, int *len)
{
    if (s[i] < 0x80) {
        *len = 1;
        return tok_uc_flags(s[i]);
    }
    uint32_t cp;
    *len = tok_utf8_next(s, i, end, &cp);
    return cp == TOK_CP_INVALID ? 0 : tok_uc_flags(cp);
}

/* End of the run of characters starting at i whose flags satisfy
 * (f & mask) == want, at most `max` characters (-1: unlimited). */
static size_t run(const unsigned char *s, size_t i, size_t end, unsigned mask, unsigned want,
                  int max)
{
    int len;
    while (i < end && max != 0 && (char_at(s, i, end, &len) & mask) == want) {
        i += (size_t)len;
        max--;
    }
    return i;
}

static inline unsigned lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + 32u : c;
}

/* 's 't 're 've 'm 'll 'd at i: returns the end, or 0. With `fold` the
 * letters match case-insensitively as Unicode case folding has it, which
 * for these letters adds one character: U+017F (long s) folds to 's'. */
static size_t contraction(const unsigned char *s, size_t i, size_t end, bool fold)
{
    if (s[i] != '\'' || i + 1 >= end)
        return 0;
    if (fold && i + 2 < end && s[i + 1] == 0xC5 && s[i + 2] == 0xBF)
        return i + 3;
    unsigned a = fold ? lower(s[i + 1]) : s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if (i + 2 >= end)
        return 0;
    unsigned b = fold ? lower(s[i + 2]) : s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return i + 3;
    return 0;
}

/* \s+(?!\S)|\s+ from i, where s[i] is white space. */
static size_t spaces(const unsigned char *s, size_t i, size_t end)
{
    size_t j = i, last = i;
    int len;
    while (j < end && (char_at(s, j, end, &len) & TOK_CF_SPACE)) {
        last = j;
        j += (size_t)len;
    }
    if (j == end || last == i)
        return j; /* at the end, or a single space before \S (\s+) */
    return last;  /* leave the last space to the piece that follows */
}

static size_t gpt2_next(const unsigned char *s, size_t i, size_t end)
{
    size_t j = contraction(s, i, end, false);
    if (j)
        return j;
    int len;
    size_t k = i;
    unsigned f = char_at(s, i, end, &len);
    if (s[i] == ' ' && i + 1 < end) {
        int len1;
        unsigned f1 = char_at(s, i + 1, end, &len1);
        if (!(f1 & TOK_CF_SPACE)) {
            k = i + 1;
            f = f1;
        }
    }
    if (f & TOK_CF_LETTER)
        return run(s, k, end, TOK_CF_LETTER, TOK_CF_LETTER, -1);
    if (f & TOK_CF_NUMBER)
        return run(s, k, end, TOK_CF_NUMBER, TOK_CF_NUMBER, -1);
    if (!(f & TOK_CF_SPACE))
        return run(s, k, end, CF_LNS, 0, -1);
    return spaces(s, i, end);
}

static size_t llama3_next(const unsigned char *s, size_t i, size_t end, int max_digits)
{
    size_t j = contraction(s, i, end, true);
    if (j)
        return j;
    int len;
    unsigned f = char_at(s, i, end, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f & TOK_CF_LETTER)
        return run(s, i, end, TOK_CF_LETTER, TOK_CF_LETTER, -1);
    if (!(f & (CF_LN | TOK_CF_NL)) && i + (size_t)len < end) {
        int len1;
        if (char_at(s, i + (size_t)len, end, &len1) & TOK_CF_LETTER)
            return run(s, i + (size_t)len, end, TOK_CF_LETTER, TOK_CF_LETTER, -1);
    }
    /* \p{N}{1,3} */
    if (f & TOK_CF_NUMBER)
        return run(s, i, end, TOK_CF_NUMBER, TOK_CF_NUMBER, max_digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t k = i;
    unsigned g = f;
    if (s[i] == ' ' && i + 1 < end) {
        int len1;
        g = char_at(s, i + 1, end, &len1);
        k = i + 1;
    }
    if (!(g & CF_LNS)) {
        k = run(s, k, end, CF_LNS, 0, -1);
        while (k < end && (s[k] == '\r' || s[k] == '\n'))
            k++;
        return k;
    }
    /* \s*[\r\n]+ : up to and including the last \r or \n of the space run */
    size_t last_nl = 0, e = i;
    bool nl = false;
    while (e < end && (char_at(s, e, end, &len) & TOK_CF_SPACE)) {
        if (s[e] == '\r' || s[e] == '\n') {
            last_nl = e;
            nl = true;
        }
        e += (size_t)len;
    }
    if (nl)
        return last_nl + 1;
    return spaces(s, i, end);
}

int tok_pre_from_name(const char *name, enum tok_pre *out)
{
    static const struct {
        const char *name;
        enum tok_pre pre;
    } names[] = {
        /* the names llama.cpp gives these same pipelines */
        {"gpt2", TOK_PRE_GPT2},         {"gpt-2", TOK_PRE_GPT2},
        {"mpt", TOK_PRE_GPT2},          {"olmo", TOK_PRE_GPT2},
        {"jais", TOK_PRE_GPT2},         {"smollm", TOK_PRE_SMOLLM},
        {"starcoder", TOK_PRE_SMOLLM},  {"refact", TOK_PRE_SMOLLM},
        {"command-r", TOK_PRE_SMOLLM},  {"codeshell", TOK_PRE_SMOLLM},
        {"exaone", TOK_PRE_SMOLLM},     {"llama3", TOK_PRE_LLAMA3},
        {"llama-bpe", TOK_PRE_LLAMA3},  {"llama-v3", TOK_PRE_LLAMA3},
        {"falcon3", TOK_PRE_LLAMA3},    {"pixtral", TOK_PRE_LLAMA3},
        {"qwen2", TOK_PRE_QWEN2},       {"stablelm2", TOK_PRE_QWEN2},
        {"deepseek-r1-qwen", TOK_PRE_QWEN2},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *out = names[k].pre;
            return IG_OK;
        }
    return ig_error(IG_E_MODEL, "tokenizer: unsupported pre-tokenizer type '%s' "
                    "(tokenizer.ggml.pre); supported: the gpt2, smollm, llama3 (llama-bpe) "
                    "and qwen2 families", name);
}

/* Splits [start, end) with the pre-tokenizer's regex alone. */
static int split_regex(enum tok_pre pre, const unsigned char *s, size_t start, size_t end,
                       struct tok_ids *ends)
{
    for (size_t i = start; i < end;) {
        size_t j;
        switch (pre) {
        case TOK_PRE_LLAMA3: j = llama3_next(s, i, end, 3); break;
        case TOK_PRE_QWEN2: j = llama3_next(s, i, end, 1); break;
        default: j = gpt2_next(s, i, end); break;
        }
        IG_ASSERT(j > i && j <= end);
        if (tok_ids_push(ends, (int32_t)j))
            return IG_E_NOMEM;
        i = j;
    }
    return IG_OK;
}

int tok_pre_split(enum tok_pre pre, const char *text, size_t len, struct tok_ids *ends)
{
    const unsigned char *s = (const unsigned char *)text;
    if (len > INT32_MAX)
        return ig_error(IG_E_INPUT, "tokenizer: text of %zu bytes is over 2 GiB", len);
    if (pre != TOK_PRE_SMOLLM)
        return split_regex(pre, s, 0, len, ends);
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        int n;
        unsigned f = char_at(s, i, len, &n);
        if (f & TOK_CF_NUMBER) {
            if (split_regex(TOK_PRE_GPT2, s, seg, i, ends) ||
                tok_ids_push(ends, (int32_t)(i + (size_t)n)))
                return IG_E_NOMEM;
            seg = i + (size_t)n;
        }
        i += (size_t)n;
    }
    return split_regex(TOK_PRE_GPT2, s, seg, len, ends);
}
