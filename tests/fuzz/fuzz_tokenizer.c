/* tests/fuzz/fuzz_tokenizer.c: libFuzzer entry for the tokenizer: any bytes
 * are a text to encode.
 *
 * The first byte picks one of five vocabularies built here from plain
 * arrays (byte-level BPE with each of the four pre-tokenizers, and
 * SentencePiece-style BPE with byte fallback) and whether control-token
 * text is parsed; the rest is the text. For every input:
 *   - encoding succeeds and every id is in the vocabulary;
 *   - with BOS asked for, the ids are BOS followed by the same ids;
 *   - the streaming decoder's pieces add up to tok_decode's text;
 *   - the round trip gives the input back wherever the tokenizer is
 *     lossless: byte-level BPE on any bytes (each byte has its token;
 *     special tokens decode to their text), SentencePiece-style BPE on valid
 *     UTF-8 without U+2581 (the character spaces become) and without parsed
 *     control tokens (the space prefix goes before the text, not before a
 *     leading control token).
 * Any failure aborts with the input's kind printed, so libFuzzer keeps it.
 * Built by scripts/fuzz.sh (clang, libFuzzer); fuzz_replay.c runs the same
 * entry over tests/fuzz/corpus-tok/ in ordinary and ASan builds. */
#include "core/status.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the vocabularies ---------------------------------------------------------- */

#define MAX_TOKENS 1024

/* A vocabulary under construction: token strings own their bytes. */
struct builder {
    struct tok_str tokens[MAX_TOKENS];
    int32_t types[MAX_TOKENS];
    float scores[MAX_TOKENS];
    int64_t n;
    struct tok_str merges[MAX_TOKENS];
    int64_t n_merges;
};

static struct tok_str dup_str(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    IG_ASSERT(p);
    memcpy(p, s, n);
    p[n] = '\0';
    return (struct tok_str){p, n};
}

static int64_t find_token(const struct builder *b, const char *s, size_t n)
{
    for (int64_t i = 0; i < b->n; i++)
        if (b->tokens[i].len == n && !memcmp(b->tokens[i].ptr, s, n))
            return i;
    return -1;
}

static int64_t add_token(struct builder *b, const char *s, size_t n, enum tok_type type,
                         float score)
{
    int64_t id = find_token(b, s, n);
    if (id >= 0)
        return id;
    IG_ASSERT(b->n < MAX_TOKENS);
    b->tokens[b->n] = dup_str(s, n);
    b->types[b->n] = type;
    b->scores[b->n] = score;
    return b->n++;
}

/* GPT-2's byte -> code point map (printable bytes stand for themselves),
 * written as UTF-8 into out; returns its length. */
static size_t gpt2_char(unsigned byte, char *out)
{
    unsigned cp = byte;
    if (!((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174)) {
        unsigned k = 0;
        for (unsigned b = 0; b < byte; b++)
            k += !((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174);
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Words whose merges the BPE vocabulary learns, left to right: enough to
 * give the merge queue long chains, numbers, multi-byte characters. */
static const char *const bpe_words[] = {
    " the", "the", " and", "ing", " a", " in", "er", "on", " t", "an", "at", " to", "ed",
    " is", "re", "es", " of", "or", "'s", "'t", " don", "ll", "12", "123", "2024", "00",
    "\xc3\xa9", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x91\x8d", "  ", "\n\n",
    " \n", "\t", "()", "{}", "==", "->", "\xd0\xbf\xd1\x80\xd0\xb8", "\xe0\xa4\xb9\xe0\xa4\xbf",
};

/* Byte-level BPE: the 256 byte tokens, merges for bpe_words, and special
 * tokens (three control, one user-defined). */
static void build_bpe(struct builder *b)
{
    memset(b, 0, sizeof *b);
    char ch[2];
    for (unsigned c = 0; c < 256; c++)
        add_token(b, ch, gpt2_char(c, ch), TOK_TYPE_NORMAL, 0);
    for (size_t w = 0; w < sizeof bpe_words / sizeof bpe_words[0]; w++) {
        const unsigned char *s = (const unsigned char *)bpe_words[w];
        char left[256];
        size_t nl = gpt2_char(s[0], left);
        for (size_t i = 1; s[i]; i++) {
            char right[2], merged[256], merge[512];
            size_t nr = gpt2_char(s[i], right);
            memcpy(merged, left, nl);
            memcpy(merged + nl, right, nr);
            int n = snprintf(merge, sizeof merge, "%.*s %.*s", (int)nl, left, (int)nr, right);
            if (find_token(b, merged, nl + nr) < 0) {
                IG_ASSERT(b->n_merges < MAX_TOKENS);
                b->merges[b->n_merges++] = dup_str(merge, (size_t)n);
                add_token(b, merged, nl + nr, TOK_TYPE_NORMAL, 0);
            }
            memcpy(left, merged, nl + nr);
            nl += nr;
        }
    }
    add_token(b, "<|endoftext|>", 13, TOK_TYPE_CONTROL, 0);
    add_token(b, "<|im_start|>", 12, TOK_TYPE_CONTROL, 0);
    add_token(b, "<|im_end|>", 10, TOK_TYPE_CONTROL, 0);
    add_token(b, "<tool>", 6, TOK_TYPE_USER_DEFINED, 0);
}

/* Pieces of the SentencePiece-style vocabulary, every prefix of each
 * included so that merges can reach it; longer pieces score higher. */
#define SP "\xe2\x96\x81" /* U+2581, what SentencePiece makes of a space */
static const char *const spm_pieces[] = {
    SP "the", SP "and", "ing", SP "a", SP "in", "er",
    "on", "an", SP SP, "12", "123", "\xc3\xa9", "caf\xc3\xa9",
    "\xe6\x97\xa5\xe6\x9c\xac", "e", "t", "h", "a", "n", "d", "i", "g", "r", "o", "c", "f",
};

static void build_spm(struct builder *b)
{
    memset(b, 0, sizeof *b);
    add_token(b, "<unk>", 5, TOK_TYPE_UNKNOWN, 0);
    add_token(b, "<s>", 3, TOK_TYPE_CONTROL, 0);
    add_token(b, "</s>", 4, TOK_TYPE_CONTROL, 0);
    for (unsigned c = 0; c < 256; c++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", c);
        add_token(b, t, 6, TOK_TYPE_BYTE, 0);
    }
    add_token(b, SP, 3, TOK_TYPE_NORMAL, -100);
    for (size_t w = 0; w < sizeof spm_pieces / sizeof spm_pieces[0]; w++) {
        const char *s = spm_pieces[w];
        size_t n = strlen(s);
        for (size_t k = 1; k <= n; k++) /* prefixes that end on a character boundary */
            if (k == n || ((unsigned char)s[k] & 0xC0) != 0x80)
                add_token(b, s, k, TOK_TYPE_NORMAL, (float)k - 10.0f);
    }
}

static void builder_free(struct builder *b)
{
    for (int64_t i = 0; i < b->n; i++)
        free((char *)b->tokens[i].ptr);
    for (int64_t i = 0; i < b->n_merges; i++)
        free((char *)b->merges[i].ptr);
    memset(b, 0, sizeof *b);
}

/* The vocabulary of `b` (which is emptied: the vocabulary copies what it
 * keeps). */
static struct tok_vocab *vocab_of(struct builder *b, const char *model, const char *pre,
                                  int32_t bos, int32_t eos)
{
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = model;
    d.pre = pre;
    d.n_tokens = b->n;
    d.tokens = b->tokens;
    d.types = b->types;
    d.scores = b->scores;
    d.n_merges = b->n_merges;
    d.merges = b->merges;
    d.bos_id = bos;
    d.eos_id = eos;
    d.add_bos = 1;
    d.add_eos = 0;
    struct tok_vocab *v = NULL;
    if (tok_vocab_build(&d, &v) != IG_OK)
        abort(); /* the vocabularies here are well-formed: a refusal is a bug */
    builder_free(b);
    return v;
}

#define N_VOCABS 5
static struct tok_vocab *vocabs[N_VOCABS];

static void init_vocabs(void)
{
    static struct builder b; /* static: too large for a fuzzer's stack */
    static const char *const pres[] = {"gpt2", "smollm", "llama3", "qwen2"};
    for (int i = 0; i < 4; i++) {
        build_bpe(&b);
        int32_t eot = (int32_t)find_token(&b, "<|endoftext|>", 13);
        vocabs[i] = vocab_of(&b, "gpt2", pres[i], eot, eot);
    }
    build_spm(&b);
    vocabs[4] = vocab_of(&b, "llama", NULL, 1, 2);
}

/* ---- the properties ------------------------------------------------------------ */

static void fail(const char *what, int kind, size_t n)
{
    fprintf(stderr, "fuzz_tokenizer: %s (vocabulary %d, %zu bytes)\n", what, kind, n);
    abort();
}

static bool valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || k > n - i)
            return false;
        for (size_t j = 1; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80)
                return false;
        if ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] > 0x9F) ||
            (c == 0xF0 && u[i + 1] < 0x90) || (c == 0xF4 && u[i + 1] > 0x8F))
            return false;
        i += k;
    }
    return true;
}

static bool contains(const char *s, size_t n, const char *what)
{
    size_t k = strlen(what);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, what, k))
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocabs[0])
        init_vocabs();
    if (size == 0)
        return 0;
    int kind = data[0] % N_VOCABS;
    bool special = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    struct tok_vocab *v = vocabs[kind];
    int64_t n_vocab = tok_n_tokens(v);

    struct tok_ids ids = {0}, with_bos = {0};
    unsigned flags = special ? TOK_ENC_PARSE_SPECIAL : 0;
    if (tok_encode(v, text, n, flags, &ids) != IG_OK)
        fail("encode failed", kind, n);
    for (int64_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= n_vocab)
            fail("an id outside the vocabulary", kind, n);
    if (tok_encode(v, text, n, flags | TOK_ENC_ADD_BOS, &with_bos) != IG_OK)
        fail("encode with BOS failed", kind, n);
    if (with_bos.n != ids.n + 1 || with_bos.ids[0] != tok_bos(v) ||
        (ids.n && memcmp(with_bos.ids + 1, ids.ids, (size_t)ids.n * sizeof *ids.ids)))
        fail("BOS changed the ids after it", kind, n);

    char *out = NULL;
    size_t out_len = 0;
    if (tok_decode(v, ids.ids, ids.n, true, &out, &out_len) != IG_OK)
        fail("decode failed", kind, n);

    /* the streaming decoder adds up to the same text */
    struct tok_stream st;
    tok_stream_init(&st, v, true);
    char *cat = malloc(out_len + 8);
    size_t cat_len = 0;
    IG_ASSERT(cat);
    for (int64_t i = 0; i <= ids.n; i++) {
        const char *piece;
        size_t len;
        int rc = i < ids.n ? tok_stream_push(&st, ids.ids[i], &piece, &len)
                           : tok_stream_flush(&st, &piece, &len);
        if (rc != IG_OK || cat_len + len > out_len)
            fail("the streaming decoder differs from decode", kind, n);
        if (len)
            memcpy(cat + cat_len, piece, len);
        cat_len += len;
    }
    if (cat_len != out_len || (out_len && memcmp(cat, out, out_len)))
        fail("the streaming decoder differs from decode", kind, n);
    tok_stream_free(&st);
    free(cat);

    bool lossless = tok_model_of(v) == TOK_MODEL_BPE ||
                    (!special && valid_utf8(text, n) && !contains(text, n, SP));
    if (lossless && (out_len != n || (n && memcmp(out, text, n))))
        fail("the round trip lost the text", kind, n);

    free(out);
    tok_ids_free(&ids);
    tok_ids_free(&with_bos);
    return 0;
}
