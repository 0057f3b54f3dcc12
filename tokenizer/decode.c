/* tokenizer/decode.c: ids -> bytes. One token's piece (GPT-2 code points
 * mapped back to bytes; U+2581 to a space and <0xXX> to its byte for
 * SentencePiece vocabularies), a whole sequence, and the streaming decoder
 * generation prints with, which holds back an incomplete UTF-8 character
 * until the token that completes it arrives.
 * Covered by tests/tokenizer/test_tok_unit.c and the round trips in
 * tests/tokenizer/test_hf_smollm.py. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* Appends n bytes to buf if they fit; always advances *len. */
static void put(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len < cap)
        memcpy(buf + *len, s, n <= cap - *len ? n : cap - *len);
    *len += n;
}

static bool hex_digit(char c, unsigned *v)
{
    if (c >= '0' && c <= '9')
        *v = (unsigned)(c - '0');
    else if (c >= 'A' && c <= 'F')
        *v = (unsigned)(c - 'A' + 10);
    else if (c >= 'a' && c <= 'f')
        *v = (unsigned)(c - 'a' + 10);
    else
        return false;
    return true;
}

int64_t tok_piece(const struct tok_vocab *v, int32_t id, bool special, char *buf, size_t cap)
{
    if (id < 0 || id >= v->n_tokens)
        return -1;
    const struct tok_str t = v->tokens[id];
    const unsigned char *s = (const unsigned char *)t.ptr;
    size_t len = 0;
    switch (v->types[id]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNUSED:
        if (special)
            put(buf, cap, &len, t.ptr, t.len);
        return (int64_t)len;
    case TOK_TYPE_USER_DEFINED:
        put(buf, cap, &len, t.ptr, t.len);
        return (int64_t)len;
    case TOK_TYPE_UNKNOWN:
        if (v->model == TOK_MODEL_SPM)
            put(buf, cap, &len, " \xE2\x81\x87 ", 5); /* sentencepiece's " ⁇ " */
        else if (special)
            put(buf, cap, &len, t.ptr, t.len);
        return (int64_t)len;
    default:
        break;
    }
    if (v->model == TOK_MODEL_SPM || v->model == TOK_MODEL_BPE_UTF8) {
        unsigned hi, lo;
        if (v->types[id] == TOK_TYPE_BYTE && t.len == 6 && !memcmp(t.ptr, "<0x", 3) &&
            t.ptr[5] == '>' && hex_digit(t.ptr[3], &hi) && hex_digit(t.ptr[4], &lo)) {
            char b = (char)(hi << 4 | lo);
            put(buf, cap, &len, &b, 1);
            return (int64_t)len;
        }
        for (size_t i = 0; i < t.len;) {
            if (t.len - i >= 3 && !memcmp(t.ptr + i, "\xE2\x96\x81", 3)) {
                put(buf, cap, &len, " ", 1);
                i += 3;
            } else {
                put(buf, cap, &len, t.ptr + i, 1);
                i++;
            }
        }
        return (int64_t)len;
    }
    for (size_t i = 0; i < t.len;) {
        uint32_t cp;
        int n = tok_utf8_next(s, i, t.len, &cp);
        if (cp < 324 && v->cp_byte[cp] >= 0) {
            char b = (char)v->cp_byte[cp];
            put(buf, cap, &len, &b, 1);
        } else {
            put(buf, cap, &len, t.ptr + i, (size_t)n); /* not a mapped byte: as is */
        }
        i += (size_t)n;
    }
    return (int64_t)len;
}

/* True when a SentencePiece space prefix would start this token's piece. */
static bool strips_prefix(const struct tok_vocab *v, int32_t id)
{
    return v->model == TOK_MODEL_SPM && v->add_space_prefix && v->types[id] == TOK_TYPE_NORMAL &&
           v->tokens[id].len >= 3 && !memcmp(v->tokens[id].ptr, "\xE2\x96\x81", 3);
}

bool tok_first_piece_drops_space(const struct tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && strips_prefix(v, id);
}

/* Appends token id's piece to *buf (grown as needed), dropping the space
 * prefix when *at_start. */
static int append_piece(const struct tok_vocab *v, int32_t id, bool special, bool *at_start,
                        char **buf, size_t *len, size_t *cap)
{
    if (id < 0 || id >= v->n_tokens)
        return ig_error(IG_E_INPUT, "tokenizer: token id %d is out of range (vocabulary of %lld)",
                        id, (long long)v->n_tokens);
    for (;;) {
        int64_t n = tok_piece(v, id, special, *buf + *len, *cap - *len);
        if ((size_t)n + 1 <= *cap - *len) {
            if (n > 0 && *at_start && strips_prefix(v, id)) {
                memmove(*buf + *len, *buf + *len + 1, (size_t)n - 1);
                n--;
            }
            if (n > 0 || v->types[id] == TOK_TYPE_NORMAL)
                *at_start = false;
            *len += (size_t)n;
            return IG_OK;
        }
        size_t c = *cap ? *cap * 2 : 256;
        while (c < *len + (size_t)n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return ig_error(IG_E_NOMEM, "tokenizer: out of memory decoding");
        *buf = p;
        *cap = c;
    }
}

int tok_decode(const struct tok_vocab *v, const int32_t *ids, int64_t n, bool special,
               char **out, size_t *out_len)
{
    size_t len = 0, cap = 256;
    char *buf = malloc(cap);
    bool at_start = true;
    int rc = buf ? IG_OK : ig_error(IG_E_NOMEM, "tokenizer: out of memory decoding");
    for (int64_t i = 0; i < n && !rc; i++)
        rc = append_piece(v, ids[i], special, &at_start, &buf, &len, &cap);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return IG_OK;
}

void tok_stream_init(struct tok_stream *s, const struct tok_vocab *v, bool special)
{
    *s = (struct tok_stream){.v = v, .special = special, .at_start = true};
}

/* Length of the tail of b[0..n) that is an incomplete but so far valid
 * UTF-8 sequence (0 when there is none). */
static int incomplete_tail(const unsigned char *b, size_t n)
{
    for (int k = 1; k <= 3 && (size_t)k <= n; k++) {
        unsigned char lead = b[n - (size_t)k];
        if ((lead & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        int need = tok_utf8_lead_len(lead);
        if (need <= k)
            return 0;
        if (k >= 2) { /* the second byte narrows some leads' ranges */
            unsigned char c = b[n - (size_t)k + 1];
            if ((lead == 0xE0 && c < 0xA0) || (lead == 0xED && c > 0x9F) ||
                (lead == 0xF0 && c < 0x90) || (lead == 0xF4 && c > 0x8F))
                return 0;
        }
        return k;
    }
    return 0;
}

int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len)
{
    size_t n = 0;
    if (s->cap < 4 + 256) {
        char *p = realloc(s->buf, 4 + 256);
        if (!p)
            return ig_error(IG_E_NOMEM, "tokenizer: out of memory decoding");
        s->buf = p;
        s->cap = 4 + 256;
    }
    memcpy(s->buf, s->held, (size_t)s->n_held);
    n = (size_t)s->n_held;
    int rc = append_piece(s->v, id, s->special, &s->at_start, &s->buf, &n, &s->cap);
    if (rc)
        return rc;
    int tail = incomplete_tail((const unsigned char *)s->buf, n);
    s->n_held = tail;
    memcpy(s->held, s->buf + n - (size_t)tail, (size_t)tail);
    *text = s->buf;
    *len = n - (size_t)tail;
    return IG_OK;
}

int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len)
{
    if (s->cap < 4) {
        char *p = realloc(s->buf, 256);
        if (!p)
            return ig_error(IG_E_NOMEM, "tokenizer: out of memory decoding");
        s->buf = p;
        s->cap = 256;
    }
    memcpy(s->buf, s->held, (size_t)s->n_held);
    *text = s->buf;
    *len = (size_t)s->n_held;
    s->n_held = 0;
    return IG_OK;
}

void tok_stream_free(struct tok_stream *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}
