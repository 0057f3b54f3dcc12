/* core/utf8.h: the one strict UTF-8 validator (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF). The tokenizer's lenient walker
 * (tokenizer/unicode.h) is a different job: it must step over bad bytes.
 * Covered by tests/unit/test_core.c. */
#ifndef IGNITE_CORE_UTF8_H
#define IGNITE_CORE_UTF8_H

#include <stddef.h>

/* Length (1..4) of the valid UTF-8 sequence that starts s[0..n), or 0 when
 * s[0] does not start one or n == 0. */
size_t ig_utf8_char_len(const unsigned char *s, size_t n);

#endif
