/* tokenizer/unicode.c: UTF-8 decoding, general-category lookup over the
 * generated range table (unicode_tables.c), and GPT-2's byte mapping.
 * The splitters (pretok.c) and both BPE flavours build on this; nothing
 * here knows about vocabularies. Covered by tests/tokenizer/test_tok_unit.c. */
#include "tokenizer/unicode.h"

#include <stdatomic.h>

int tok_utf8_lead_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

int tok_utf8_next(const unsigned char *s, size_t i, size_t end, uint32_t *cp)
{
    unsigned char b = s[i];
    int n = tok_utf8_lead_len(b);
    if (n == 1) {
        *cp = b;
        return 1;
    }
    if (n == 0 || end - i < (size_t)n)
        goto invalid;
    uint32_t c = b & (0x7Fu >> n);
    for (int k = 1; k < n; k++) {
        unsigned char t = s[i + (size_t)k];
        if ((t & 0xC0) != 0x80)
            goto invalid;
        c = (c << 6) | (t & 0x3Fu);
    }
    /* Overlong 3- and 4-byte forms, surrogates and values past U+10FFFF
     * (2-byte overlongs are excluded by the lead-byte table). */
    if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
        (c >= 0xD800 && c <= 0xDFFF))
        goto invalid;
    *cp = c;
    return n;
invalid:
    *cp = TOK_CP_INVALID;
    return 1;
}

int tok_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int in_ranges(const struct tok_uc_range *r, int64_t n, uint32_t cp)
{
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first)
            hi = mid - 1;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return (int)mid;
    }
    return -1;
}

enum tok_uc_class tok_uc_class_of(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return TOK_UC_OTHER;
    int k = in_ranges(tok_uc_ranges, tok_uc_n_ranges, cp);
    return k < 0 ? TOK_UC_OTHER : (enum tok_uc_class)tok_uc_ranges[k].cls;
}

static unsigned flags_slow(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return 0;
    unsigned f = 0;
    switch (tok_uc_class_of(cp)) {
    case TOK_UC_LETTER: f |= TOK_CF_LETTER; break;
    case TOK_UC_LETTER_UPPER: f |= TOK_CF_LETTER | TOK_CF_UPPER; break;
    case TOK_UC_LETTER_LOWER: f |= TOK_CF_LETTER | TOK_CF_LOWER; break;
    case TOK_UC_NUMBER: f |= TOK_CF_NUMBER; break;
    case TOK_UC_MARK: f |= TOK_CF_MARK; break;
    case TOK_UC_PUNCT: f |= TOK_CF_PUNCT; break;
    default: break;
    }
    if (in_ranges(tok_uc_white_space, tok_uc_n_white_space, cp) >= 0)
        f |= TOK_CF_SPACE;
    if (cp == '\r' || cp == '\n')
        f |= TOK_CF_NL;
    return f;
}

/* The Basic Multilingual Plane's flags, filled on first use. Bit 15 marks
 * an entry as computed, so concurrent fillers write the same value and a
 * relaxed atomic suffices. */
#define FLAGS_DONE 0x8000u
static _Atomic uint16_t bmp_flags[0x10000];

unsigned tok_uc_flags(uint32_t cp)
{
    if (cp >= 0x10000)
        return flags_slow(cp);
    uint16_t f = atomic_load_explicit(&bmp_flags[cp], memory_order_relaxed);
    if (f & FLAGS_DONE)
        return f & ~FLAGS_DONE;
    f = (uint16_t)(flags_slow(cp) | FLAGS_DONE);
    atomic_store_explicit(&bmp_flags[cp], f, memory_order_relaxed);
    return f & ~FLAGS_DONE;
}

static int byte_is_printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(unsigned char b)
{
    if (byte_is_printable(b))
        return b;
    uint32_t n = 0; /* rank of b among the non-printable bytes */
    for (unsigned k = 0; k < b; k++)
        n += !byte_is_printable(k);
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned k = 0; k < 256; k++)
        if (!byte_is_printable(k) && n-- == 0)
            return (int)k;
    return -1;
}
