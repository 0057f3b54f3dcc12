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
 *   qwen35  qwen2 with marks (\p{M}) inside letter runs and out of punctuation runs
 *   tekken  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
 *           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
 *           \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Mistral Nemo)
 *   gpt-4o  tekken with (?i:'s|'t|'re|'ve|'m|'ll|'d)? after either letter alternative
 *           and \p{N}{1,3} for \p{N} (o200k: gpt-oss, Llama 4)
 *
 * and, as sequences of regexes each splitting the pieces of the one before
 * ("isolated": a match is a piece, and so is the text between matches):
 *   deepseek-llm    [\r\n] ; \s?[cased letters]+ ; \s?[ASCII and full-width punctuation]+ ;
 *                   \s+$ ; [CJK and Hangul]+ ; \p{N}+
 *   deepseek-coder  [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [CJK and Hangul]+ ; \p{N}
 *   falcon          [\p{P}$+<=>^~|`]+ ; gpt2 ; [0-9][0-9][0-9]
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

/* End of the run of characters with any flag of `mask` (i when none). */
static size_t run_any(const unsigned char *s, size_t i, size_t end, unsigned mask)
{
    int len;
    while (i < end && (char_at(s, i, end, &len) & mask))
        i += (size_t)len;
    return i;
}

/* End of the run of characters with no flag of `mask`. */
static size_t run_none(const unsigned char *s, size_t i, size_t end, unsigned mask)
{
    int len;
    while (i < end && !(char_at(s, i, end, &len) & mask))
        i += (size_t)len;
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

/* \s*[\r\n]+|\s+(?!\S)|\s+ from i, where s[i] is white space: up to and
 * including the last \r or \n of the space run, else as spaces(). */
static size_t newline_spaces(const unsigned char *s, size_t i, size_t end)
{
    size_t last_nl = 0, e = i;
    bool nl = false;
    int len;
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

/* The llama3 family: `word` is the flag set of letter runs (letters, and
 * marks for qwen35; punctuation runs exclude it), max_digits the length of
 * a number run (-1: any). */
static size_t llama3_family_next(const unsigned char *s, size_t i, size_t end, unsigned word,
                                 int max_digits)
{
    size_t j = contraction(s, i, end, true);
    if (j)
        return j;
    int len;
    unsigned f = char_at(s, i, end, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f & word)
        return run_any(s, i, end, word);
    if (!(f & (CF_LN | TOK_CF_NL)) && i + (size_t)len < end) {
        int len1;
        if (char_at(s, i + (size_t)len, end, &len1) & word)
            return run_any(s, i + (size_t)len, end, word);
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
    if (!(g & (word | TOK_CF_NUMBER | TOK_CF_SPACE))) {
        k = run_none(s, k, end, word | TOK_CF_NUMBER | TOK_CF_SPACE);
        while (k < end && (s[k] == '\r' || s[k] == '\n'))
            k++;
        return k;
    }
    return newline_spaces(s, i, end);
}

static size_t llama3_next(const unsigned char *s, size_t i, size_t end)
{
    return llama3_family_next(s, i, end, TOK_CF_LETTER, 3);
}

static size_t qwen2_next(const unsigned char *s, size_t i, size_t end)
{
    return llama3_family_next(s, i, end, TOK_CF_LETTER, 1);
}

static size_t qwen35_next(const unsigned char *s, size_t i, size_t end)
{
    return llama3_family_next(s, i, end, TOK_CF_LETTER | TOK_CF_MARK, 1);
}

/* ---- tekken ---------------------------------------------------------------------- */

/* Tekken's two letter classes: A = Lu Lt Lm Lo M (capitals and caseless),
 * B = Ll Lm Lo M (small letters and caseless). */
static bool tek_a(unsigned f)
{
    return (f & TOK_CF_MARK) || ((f & TOK_CF_LETTER) && !(f & TOK_CF_LOWER));
}

static bool tek_b(unsigned f)
{
    return (f & TOK_CF_MARK) || ((f & TOK_CF_LETTER) && !(f & TOK_CF_UPPER));
}

/* End of A*B+ from k, as a backtracking engine finds it (A* greedy, giving
 * back characters until B+ can start), or 0 when there is none. */
static size_t tek_cased(const unsigned char *s, size_t k, size_t end)
{
    size_t j = k, last_b = 0; /* last_b: 1 + start of the last A-char also in B */
    int len;
    unsigned f;
    while (j < end && tek_a(f = char_at(s, j, end, &len))) {
        if (tek_b(f))
            last_b = j + 1;
        j += (size_t)len;
    }
    size_t e = j;
    while (e < end && tek_b(char_at(s, e, end, &len)))
        e += (size_t)len;
    if (e > j)
        return e;
    if (!last_b)
        return 0;
    /* B+ starts at the last caseless character of the A-run and stops after
     * it (the A-run's characters after it are capitals) */
    char_at(s, last_b - 1, end, &len);
    return last_b - 1 + (size_t)len;
}

/* End of A+B* from k, or 0. */
static size_t tek_upper(const unsigned char *s, size_t k, size_t end)
{
    size_t j = k;
    int len;
    while (j < end && tek_a(char_at(s, j, end, &len)))
        j += (size_t)len;
    if (j == k)
        return 0;
    while (j < end && tek_b(char_at(s, j, end, &len)))
        j += (size_t)len;
    return j;
}

/* A letter alternative's end j, extended by the optional contraction
 * that follows it in gpt-4o's regex (with `contractions`). */
static size_t tek_suffix(const unsigned char *s, size_t j, size_t end, bool contractions)
{
    size_t c = contractions && j < end ? contraction(s, j, end, true) : 0;
    return c ? c : j;
}

/* tekken (contractions false, digits 1) and gpt-4o (true, 3). */
static size_t tekken_family_next(const unsigned char *s, size_t i, size_t end,
                                 bool contractions, int digits)
{
    int len;
    unsigned f = char_at(s, i, end, &len);
    /* the optional [^\r\n\p{L}\p{N}] before either letter alternative: tried
     * with it first, then without */
    bool prefix = !(f & (CF_LN | TOK_CF_NL)) && i + (size_t)len < end;
    size_t j;
    if ((prefix && (j = tek_cased(s, i + (size_t)len, end))) || (j = tek_cased(s, i, end)))
        return tek_suffix(s, j, end, contractions);
    if ((prefix && (j = tek_upper(s, i + (size_t)len, end))) || (j = tek_upper(s, i, end)))
        return tek_suffix(s, j, end, contractions);
    if (f & TOK_CF_NUMBER)
        return run(s, i, end, TOK_CF_NUMBER, TOK_CF_NUMBER, digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
    size_t k = i;
    unsigned g = f;
    if (s[i] == ' ' && i + 1 < end) {
        int len1;
        g = char_at(s, i + 1, end, &len1);
        k = i + 1;
    }
    if (!(g & CF_LNS)) {
        k = run(s, k, end, CF_LNS, 0, -1);
        while (k < end && (s[k] == '\r' || s[k] == '\n' || s[k] == '/'))
            k++;
        return k;
    }
    return newline_spaces(s, i, end);
}

static size_t tekken_next(const unsigned char *s, size_t i, size_t end)
{
    return tekken_family_next(s, i, end, false, 1);
}

static size_t gpt4o_next(const unsigned char *s, size_t i, size_t end)
{
    return tekken_family_next(s, i, end, true, 3);
}

/* ---- patterns of the multi-regex pre-tokenizers --------------------------------- *
 * Each returns the end of its match starting at i, or i when none starts there. */

struct cp_range {
    uint32_t first, last;
};

static bool in_table(const struct cp_range *t, size_t n, uint32_t cp)
{
    for (size_t k = 0; k < n; k++)
        if (cp >= t[k].first && cp <= t[k].last)
            return true;
    return false;
}

/* The cased letters deepseek-llm's tokenizer.json spells out (the C string in
 * llama.cpp lost six of them to NFC: U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126,
 * U+212A are written here as the regex has them). */
static const struct cp_range ds_letters[] = {
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6},
    {0x00F8, 0x01BA}, {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373},
    {0x0376, 0x0377}, {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A},
    {0x038C, 0x038C}, {0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F},
    {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F},
    {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};

/* [!-/:-~！-／：-～‘-‟　-。] */
static const struct cp_range ds_punct[] = {
    {0x0021, 0x002F}, {0x003A, 0x007E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F},
    {0x3000, 0x3002},
};

/* [一-龥ࠀ-一가-퟿]: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF */
static const struct cp_range ds_cjk[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t cp_at(const unsigned char *s, size_t i, size_t end, int *len)
{
    uint32_t cp;
    *len = tok_utf8_next(s, i, end, &cp);
    return cp;
}

/* End of the run of characters in table t from i (i when none). */
static size_t table_run(const unsigned char *s, size_t i, size_t end, const struct cp_range *t,
                        size_t n)
{
    int len;
    while (i < end && in_table(t, n, cp_at(s, i, end, &len)))
        i += (size_t)len;
    return i;
}

/* \s?X+ where X is a table: one optional white-space character, then a run. */
static size_t space_then_table(const unsigned char *s, size_t i, size_t end,
                               const struct cp_range *t, size_t n)
{
    int len;
    if (char_at(s, i, end, &len) & TOK_CF_SPACE) {
        size_t j = table_run(s, i + (size_t)len, end, t, n);
        if (j > i + (size_t)len)
            return j;
    }
    return table_run(s, i, end, t, n);
}

/* \s?F+ where F is a flag set. */
static size_t space_then_flags(const unsigned char *s, size_t i, size_t end, unsigned flag)
{
    int len;
    if (char_at(s, i, end, &len) & TOK_CF_SPACE) {
        size_t j = run_any(s, i + (size_t)len, end, flag);
        if (j > i + (size_t)len)
            return j;
    }
    return run_any(s, i, end, flag);
}

static size_t m_newline(const unsigned char *s, size_t i, size_t end)
{
    (void)end;
    return s[i] == '\r' || s[i] == '\n' ? i + 1 : i;
}

static size_t m_ds_letters(const unsigned char *s, size_t i, size_t end)
{
    return space_then_table(s, i, end, ds_letters, N_OF(ds_letters));
}

static size_t m_ds_punct(const unsigned char *s, size_t i, size_t end)
{
    return space_then_table(s, i, end, ds_punct, N_OF(ds_punct));
}

/* \s+$ : white space to the end of the piece (the pieces hold no newline
 * but as themselves, where $ and the end agree). */
static size_t m_trailing_space(const unsigned char *s, size_t i, size_t end)
{
    size_t j = run_any(s, i, end, TOK_CF_SPACE);
    return j == end ? j : i;
}

static size_t m_cjk(const unsigned char *s, size_t i, size_t end)
{
    return table_run(s, i, end, ds_cjk, N_OF(ds_cjk));
}

static size_t m_numbers(const unsigned char *s, size_t i, size_t end)
{
    return run_any(s, i, end, TOK_CF_NUMBER);
}

static size_t m_number(const unsigned char *s, size_t i, size_t end)
{
    int len;
    return char_at(s, i, end, &len) & TOK_CF_NUMBER ? i + (size_t)len : i;
}

static size_t m_space_letters(const unsigned char *s, size_t i, size_t end)
{
    return space_then_flags(s, i, end, TOK_CF_LETTER);
}

static size_t m_space_punct(const unsigned char *s, size_t i, size_t end)
{
    return space_then_flags(s, i, end, TOK_CF_PUNCT);
}

/* [\p{P}\$\+<=>\^~\|`]+ */
static size_t m_falcon_punct(const unsigned char *s, size_t i, size_t end)
{
    int len;
    while (i < end) {
        unsigned f = char_at(s, i, end, &len);
        if (!(f & TOK_CF_PUNCT) && !(len == 1 && strchr("$+<=>^~|`", s[i])))
            break;
        i += (size_t)len;
    }
    return i;
}

/* [0-9][0-9][0-9] */
static size_t m_three_digits(const unsigned char *s, size_t i, size_t end)
{
    for (int k = 0; k < 3; k++)
        if (i + (size_t)k >= end || s[i + (size_t)k] < '0' || s[i + (size_t)k] > '9')
            return i;
    return i + 3;
}

static size_t m_gpt2(const unsigned char *s, size_t i, size_t end)
{
    return gpt2_next(s, i, end);
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
        {"deepseek-r1-qwen", TOK_PRE_QWEN2}, {"qwen35", TOK_PRE_QWEN35},
        {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM}, {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER},
        {"falcon", TOK_PRE_FALCON},     {"tekken", TOK_PRE_TEKKEN},
        {"gpt-4o", TOK_PRE_GPT4O},      {"llama4", TOK_PRE_GPT4O},
        {"kanana2", TOK_PRE_GPT4O},     {"talkie", TOK_PRE_GPT4O},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *out = names[k].pre;
            return IG_OK;
        }
    return ig_error(IG_E_MODEL, "tokenizer: unsupported pre-tokenizer type '%s' "
                    "(tokenizer.ggml.pre); supported: the gpt2, smollm, llama3 (llama-bpe), "
                    "qwen2, qwen35, deepseek-llm, deepseek-coder, falcon, tekken and gpt-4o "
                    "families",
                    name);
}

/* ---- the pipelines ------------------------------------------------------------- */

/* A pattern's match at i: its end, or i when none starts there. */
typedef size_t (*match_fn)(const unsigned char *s, size_t i, size_t end);

/* The stages of each pre-tokenizer, applied in order, each to every piece
 * of the one before. A stage whose pattern matches at every position (the
 * single-regex pre-tokenizers) cuts the text into its matches; any other
 * keeps the text between matches as pieces too. */
struct stages {
    int n;
    match_fn m[6];
};

static const struct stages pipelines[] = {
    [TOK_PRE_GPT2] = {1, {m_gpt2}},
    [TOK_PRE_SMOLLM] = {2, {m_number, m_gpt2}},
    [TOK_PRE_LLAMA3] = {1, {llama3_next}},
    [TOK_PRE_QWEN2] = {1, {qwen2_next}},
    [TOK_PRE_QWEN35] = {1, {qwen35_next}},
    [TOK_PRE_TEKKEN] = {1, {tekken_next}},
    [TOK_PRE_GPT4O] = {1, {gpt4o_next}},
    [TOK_PRE_DEEPSEEK_LLM] = {6, {m_newline, m_ds_letters, m_ds_punct, m_trailing_space, m_cjk,
                                  m_numbers}},
    [TOK_PRE_DEEPSEEK_CODER] = {5, {m_newline, m_space_letters, m_space_punct, m_cjk,
                                    m_number}},
    [TOK_PRE_FALCON] = {3, {m_falcon_punct, m_gpt2, m_three_digits}},
};

/* Splits [start, end) with stages st[0..n) and appends the end of every
 * final piece. Depth is at most 6 (a stage recurses into the next). */
static int split_stages(const match_fn *st, int n, const unsigned char *s, size_t start,
                        size_t end, struct tok_ids *ends)
{
    if (n == 0)
        return start < end && tok_ids_push(ends, (int32_t)end) ? IG_E_NOMEM : IG_OK;
    size_t gap = start;
    int rc = IG_OK;
    for (size_t i = start; i < end && !rc;) {
        size_t j = st[0](s, i, end);
        IG_ASSERT(j <= end);
        if (j == i) { /* no match here: the text between matches grows */
            int len;
            char_at(s, i, end, &len);
            i += (size_t)len;
            continue;
        }
        rc = split_stages(st + 1, n - 1, s, gap, i, ends);
        if (!rc)
            rc = split_stages(st + 1, n - 1, s, i, j, ends);
        gap = i = j;
    }
    return rc ? rc : split_stages(st + 1, n - 1, s, gap, end, ends);
}

int tok_pre_split(enum tok_pre pre, const char *text, size_t len, struct tok_ids *ends)
{
    const unsigned char *s = (const unsigned char *)text;
    if (len > INT32_MAX)
        return ig_error(IG_E_INPUT, "tokenizer: text of %zu bytes is over 2 GiB", len);
    IG_ASSERT((size_t)pre < sizeof pipelines / sizeof pipelines[0] && pipelines[pre].n > 0);
    return split_stages(pipelines[pre].m, pipelines[pre].n, s, 0, len, ends);
}
