/* tokenizer/unicode.h: module-internal: UTF-8 decoding with a defined
 * answer for invalid bytes, the general-category class of a code point,
 * and GPT-2's byte <-> code point mapping. Not part of the public API
 * (tokenizer/tokenizer.h). Covered by tests/tokenizer/test_tok_unit.c and,
 * through the splitters, tests/tokenizer/test_splitters.py. */
#ifndef IGNITE_TOKENIZER_UNICODE_H
#define IGNITE_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* General-category classes. TOK_UC_OTHER covers C* and unassigned,
 * and every byte that is not part of valid UTF-8. */
enum tok_uc_class {
    TOK_UC_OTHER = 0,
    TOK_UC_LETTER,    /* Lm, Lo: letters without case */
    TOK_UC_LETTER_UPPER, /* Lu, Lt */
    TOK_UC_LETTER_LOWER, /* Ll */
    TOK_UC_NUMBER,    /* N* */
    TOK_UC_MARK,      /* M* */
    TOK_UC_PUNCT,     /* P* */
    TOK_UC_SYMBOL,    /* S* */
    TOK_UC_SEPARATOR, /* Z* */
};

struct tok_uc_range {
    uint32_t first, last; /* inclusive */
    uint8_t cls;          /* enum tok_uc_class */
};

/* Generated tables (tokenizer/unicode_tables.c). */
extern const struct tok_uc_range tok_uc_ranges[];
extern const int64_t tok_uc_n_ranges;
extern const struct tok_uc_range tok_uc_white_space[];
extern const int64_t tok_uc_n_white_space;

/* Code point reported for a byte that does not start a valid UTF-8
 * sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
 * truncated sequence). Such a byte is one "character" of length 1 whose
 * class is TOK_UC_OTHER and which is not white space. */
#define TOK_CP_INVALID 0xFFFFFFFFu

/* Decodes the character at s[i] (i < end). Returns its length in bytes
 * (1..4) and sets *cp, or returns 1 and sets *cp = TOK_CP_INVALID. */
int tok_utf8_next(const unsigned char *s, size_t i, size_t end, uint32_t *cp);

/* Length of the valid UTF-8 sequence a lead byte announces (1..4), or 0
 * when `b` cannot start one. */
int tok_utf8_lead_len(unsigned char b);

/* Encodes cp (<= 0x10FFFF) into out[0..3]; returns the length. */
int tok_utf8_put(uint32_t cp, char *out);

/* Class flags of one code point, computed once per code point below 0x10000
 * through a lazily filled table and by binary search above. */
#define TOK_CF_LETTER 1u
#define TOK_CF_NUMBER 2u
#define TOK_CF_SPACE 4u   /* White_Space property */
#define TOK_CF_NL 8u      /* '\r' or '\n' */
#define TOK_CF_MARK 16u   /* M* */
#define TOK_CF_PUNCT 32u  /* P* */
#define TOK_CF_UPPER 64u  /* Lu, Lt (with TOK_CF_LETTER) */
#define TOK_CF_LOWER 128u /* Ll (with TOK_CF_LETTER) */
unsigned tok_uc_flags(uint32_t cp);
enum tok_uc_class tok_uc_class_of(uint32_t cp);

/* GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to
 * themselves, the other 68 to U+0100.. in byte order. */
uint32_t tok_byte_to_cp(unsigned char b);
/* The inverse: the byte, or -1 when cp is not in the map's image. */
int tok_cp_to_byte(uint32_t cp);

#endif
