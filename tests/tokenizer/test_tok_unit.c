/* tests/tokenizer/test_tok_unit.c: the tokenizer's pieces on hand-built
 * vocabularies, where the right answer can be worked out by hand: UTF-8
 * decoding rules, the class table, GPT-2's byte map, merge order, special
 * tokens (longest first, plain-text mode), BOS/EOS, SentencePiece prefix and
 * byte fallback, the streaming decoder's UTF-8 holding, and the errors.
 * The comparisons against real tokenizers are the Python tests here. */
#include "../test.h"

#include "core/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

static void test_utf8(void)
{
    uint32_t cp;
    CHECK(tok_utf8_next((const unsigned char *)"\xE6\x97\xA5", 0, 3, &cp) == 3 && cp == 0x65E5);
    CHECK(tok_utf8_next((const unsigned char *)"\xF0\x9F\x98\x80", 0, 4, &cp) == 4 && cp == 0x1F600);
    /* overlong, surrogate, past U+10FFFF, truncated, stray continuation */
    const char *bad[] = {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE6\x97",
                         "\x80", "\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = tok_utf8_next((const unsigned char *)bad[i], 0, strlen(bad[i]), &cp);
        CHECKF(n == 1 && cp == TOK_CP_INVALID, "case %zu: n=%d cp=%x", i, n, cp);
    }
    CHECK(tok_uc_flags('a') == (TOK_CF_LETTER | TOK_CF_LOWER));
    CHECK(tok_uc_flags('A') == (TOK_CF_LETTER | TOK_CF_UPPER));
    CHECK(tok_uc_flags(0x01C5) == (TOK_CF_LETTER | TOK_CF_UPPER)); /* Dz: title case */
    CHECK(tok_uc_flags(0x02B0) == TOK_CF_LETTER);                  /* modifier letter h */
    CHECK(tok_uc_flags('!') == TOK_CF_PUNCT && tok_uc_flags('$') == 0);
    CHECK(tok_uc_flags('7') == TOK_CF_NUMBER);
    CHECK(tok_uc_flags(' ') == TOK_CF_SPACE);
    CHECK(tok_uc_flags('\n') == (TOK_CF_SPACE | TOK_CF_NL));
    CHECK(tok_uc_flags(0x3000) == TOK_CF_SPACE);
    CHECK(tok_uc_flags(0x00A0) == TOK_CF_SPACE);
    CHECK(tok_uc_flags(0x200B) == 0); /* zero-width space is not White_Space */
    CHECK(tok_uc_flags(0x0663) == TOK_CF_NUMBER);
    CHECK(tok_uc_flags(0x00E9) == (TOK_CF_LETTER | TOK_CF_LOWER));
    CHECK(tok_uc_flags(0x0301) == TOK_CF_MARK && tok_uc_class_of(0x0301) == TOK_UC_MARK);
    CHECK(tok_uc_flags(0x1F600) == 0 && tok_uc_class_of(0x1F600) == TOK_UC_SYMBOL);
    CHECK(tok_uc_class_of(0x20000) == TOK_UC_LETTER);
    CHECK(tok_uc_class_of(0x105C0) == TOK_UC_LETTER); /* Todhri: Unicode 16.0, as HF knows */
    for (int b = 0; b < 256; b++)
        CHECKF(tok_cp_to_byte(tok_byte_to_cp((unsigned char)b)) == b, "byte %d", b);
    CHECK(tok_byte_to_cp(' ') == 0x120 && tok_byte_to_cp('A') == 'A');
}

/* A byte-level vocabulary: the 256 byte tokens, then `extra` tokens. */
static struct tok_vocab *bpe_vocab(const char *pre, const char *const *extra,
                                   const int32_t *extra_types, int n_extra,
                                   const char *const *merges, int n_merges)
{
    static char bytes[256][4];
    struct tok_str tokens[300];
    int32_t types[300];
    struct tok_str mg[16];
    for (int b = 0; b < 256; b++) {
        int n = tok_utf8_put(tok_byte_to_cp((unsigned char)b), bytes[b]);
        tokens[b] = (struct tok_str){bytes[b], (size_t)n};
        types[b] = TOK_TYPE_NORMAL;
    }
    for (int i = 0; i < n_extra; i++) {
        tokens[256 + i] = (struct tok_str){extra[i], strlen(extra[i])};
        types[256 + i] = extra_types[i];
    }
    for (int i = 0; i < n_merges; i++)
        mg[i] = (struct tok_str){merges[i], strlen(merges[i])};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = 256 + n_extra;
    d.tokens = tokens;
    d.types = types;
    d.merges = mg;
    d.n_merges = n_merges;
    d.eos_id = n_extra > 0 ? 256 : -1;
    struct tok_vocab *v = NULL;
    CHECK(tok_vocab_build(&d, &v) == IG_OK);
    return v;
}

static int encode(struct tok_vocab *v, const char *s, unsigned flags, int32_t *ids, int cap)
{
    struct tok_ids out = {0};
    CHECK(tok_encode(v, s, strlen(s), flags, &out) == IG_OK);
    int n = (int)out.n;
    for (int i = 0; i < n && i < cap; i++)
        ids[i] = out.ids[i];
    tok_ids_free(&out);
    return n;
}

static void test_bpe(void)
{
    const char *extra[] = {"<|end|>", "aa", "aaa", "ab", "<|end|>x", "Ġa"};
    const int32_t types[] = {TOK_TYPE_CONTROL, 1, 1, 1, TOK_TYPE_USER_DEFINED, 1};
    /* "a a" first: "aaaa" -> aa aa; "aa a" ranks below "a b". */
    const char *merges[] = {"a a", "a b", "aa a", "Ġ a"};
    struct tok_vocab *v = bpe_vocab("gpt2", extra, types, 6, merges, 4);
    if (!v)
        return;
    int32_t ids[32];
    int n = encode(v, "aaaa", TOK_ENC_DEFAULT, ids, 32);
    CHECK(n == 2 && ids[0] == 257 && ids[1] == 257);
    n = encode(v, "aab", TOK_ENC_DEFAULT, ids, 32); /* a-a (rank 0) beats a-b */
    CHECK(n == 2 && ids[0] == 257 && ids[1] == 'b' - 0);
    n = encode(v, "aaa", TOK_ENC_DEFAULT, ids, 32);
    CHECK(n == 1 && ids[0] == 258);
    n = encode(v, " a", TOK_ENC_DEFAULT, ids, 32);
    CHECK(n == 1 && ids[0] == 261);
    /* Specials: longest first, anywhere; plain text when asked. */
    n = encode(v, "a<|end|>xa<|end|>", TOK_ENC_DEFAULT, ids, 32);
    CHECK(n == 4 && ids[0] == 'a' && ids[1] == 260 && ids[2] == 'a' && ids[3] == 256);
    n = encode(v, "<|end|>", TOK_ENC_DEFAULT & ~TOK_ENC_PARSE_SPECIAL, ids, 32);
    CHECK(n > 1 && ids[0] == '<');
    /* user-defined text (<|end|>x) is matched even as plain text, control
     * text (<|end|>) is not */
    n = encode(v, "<|end|>x<|end|>", TOK_ENC_DEFAULT & ~TOK_ENC_PARSE_SPECIAL, ids, 32);
    CHECK(n > 2 && ids[0] == 260 && ids[1] == '<');
    CHECK(encode(v, "", TOK_ENC_DEFAULT, ids, 32) == 0);
    CHECK(tok_is_eog(v, 256) && !tok_is_eog(v, 257));

    /* Decoding: bytes back; control text only when asked. */
    char buf[64];
    int32_t seq[] = {'h', 'i', 256}; /* h i <|end|> */
    char *out;
    size_t len;
    CHECK(tok_decode(v, seq, 3, false, &out, &len) == IG_OK && len == 2 && !memcmp(out, "hi", 2));
    free(out);
    CHECK(tok_decode(v, seq, 3, true, &out, &len) == IG_OK && len == 9 &&
          !memcmp(out, "hi<|end|>", 9));
    free(out);
    CHECK(tok_piece(v, ' ', true, buf, sizeof buf) == 1 && buf[0] == ' ');
    int32_t bad = 999;
    CHECK(tok_decode(v, &bad, 1, true, &out, &len) == IG_E_INPUT);
    tok_vocab_free(v);
}

/* Llama 3 takes a piece that is a token whole, merges or not (HF's
 * ignore_merges); gpt2 merges. And Llama 3 adds BOS by default. */
static void test_ignore_merges(void)
{
    const char *extra[] = {"<|begin|>", "abc"};
    const int32_t types[] = {TOK_TYPE_CONTROL, TOK_TYPE_NORMAL};
    int32_t ids[8];
    for (int k = 0; k < 2; k++) {
        struct tok_vocab *v = bpe_vocab(k ? "llama-bpe" : "gpt2", extra, types, 2, NULL, 0);
        if (!v)
            return;
        /* no BOS id set: nothing is added even for llama3 */
        int n = encode(v, "abc", TOK_ENC_DEFAULT, ids, 8);
        CHECKF(k ? n == 1 && ids[0] == 257 : n == 3 && ids[0] == 'a', "pre %d: %d ids", k, n);
        tok_vocab_free(v);
    }
}

static void test_stream(void)
{
    struct tok_vocab *v = bpe_vocab("gpt2", NULL, NULL, 0, NULL, 0);
    if (!v)
        return;
    /* "日" split over three byte tokens, then an invalid byte, then "é" cut
     * at the end. */
    const unsigned char in[] = {'x', 0xE6, 0x97, 0xA5, 0xFF, 'y', 0xC3};
    const int want_len[] = {1, 0, 0, 3, 1, 1, 0};
    struct tok_stream s;
    tok_stream_init(&s, v, true);
    for (int i = 0; i < 7; i++) {
        const char *t;
        size_t n;
        CHECK(tok_stream_push(&s, in[i], &t, &n) == IG_OK);
        CHECKF((int)n == want_len[i], "token %d: %zu bytes", i, n);
        if (i == 3)
            CHECK(n == 3 && !memcmp(t, "\xE6\x97\xA5", 3));
    }
    const char *t;
    size_t n;
    CHECK(tok_stream_flush(&s, &t, &n) == IG_OK && n == 1 && (unsigned char)t[0] == 0xC3);
    /* E0 80 can never become valid: passed through at once. */
    const char *u;
    CHECK(tok_stream_push(&s, 0xE0, &u, &n) == IG_OK && n == 0);
    CHECK(tok_stream_push(&s, 0x80, &u, &n) == IG_OK && n == 2);
    tok_stream_free(&s);
    tok_vocab_free(v);
}

/* Random bytes (mostly invalid UTF-8) never fail, come back exactly, and
 * every splitter covers them. */
static void test_random_bytes(void)
{
    struct tok_vocab *v = bpe_vocab("gpt2", NULL, NULL, 0, NULL, 0);
    if (!v)
        return;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char text[300];
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = (size_t)(iter % 300);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* bias towards UTF-8 structure: leads, continuations, ASCII */
            unsigned r = (unsigned)(x >> 32);
            text[i] = (char)(r % 4 == 0 ? 0x80 + r % 64 : r % 4 == 1 ? 0xC0 + r % 64
                             : r % 4 == 2 ? ' ' + r % 95 : r >> 8);
        }
        struct tok_ids ids = {0};
        char *out = NULL;
        size_t n = 0;
        if (tok_encode(v, text, len, TOK_ENC_DEFAULT, &ids) != IG_OK ||
            tok_decode(v, ids.ids, ids.n, true, &out, &n) != IG_OK || n != len ||
            memcmp(out, text, len))
            bad++;
        free(out);
        tok_ids_free(&ids);
        /* Every splitter covers the text with non-empty pieces. */
        for (int pre = TOK_PRE_GPT2; pre <= TOK_PRE_QWEN2; pre++) {
            struct tok_ids ends = {0};
            bool ok = tok_pre_split((enum tok_pre)pre, text, len, &ends) == IG_OK;
            for (int64_t k = 0; ok && k < ends.n; k++)
                ok = ends.ids[k] > (k ? ends.ids[k - 1] : 0);
            ok = ok && (ends.n ? (size_t)ends.ids[ends.n - 1] : 0) == len;
            bad += !ok;
            tok_ids_free(&ends);
        }
    }
    CHECKF(bad == 0, "%d of 2000 random byte strings did not round-trip or split", bad);
    tok_vocab_free(v);
}

static void test_spm(void)
{
    /* <unk> <s> </s> <0x00>..<0xFF> ▁ a b ▁a ab ▁ab */
    static char names[256][8];
    struct tok_str tokens[300];
    float scores[300];
    int32_t types[300];
    int n = 0;
    const char *head[] = {"<unk>", "<s>", "</s>"};
    const int32_t head_types[] = {TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    for (int i = 0; i < 3; i++, n++) {
        tokens[n] = (struct tok_str){head[i], strlen(head[i])};
        types[n] = head_types[i];
        scores[n] = 0;
    }
    for (int b = 0; b < 256; b++, n++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tokens[n] = (struct tok_str){names[b], 6};
        types[n] = TOK_TYPE_BYTE;
        scores[n] = 0;
    }
    const char *tail[] = {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"};
    const float tail_scores[] = {-1, -2, -3, -4, -5, -6};
    for (int i = 0; i < 6; i++, n++) {
        tokens[n] = (struct tok_str){tail[i], strlen(tail[i])};
        types[n] = TOK_TYPE_NORMAL;
        scores[n] = tail_scores[i];
    }
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "llama";
    d.n_tokens = n;
    d.tokens = tokens;
    d.scores = scores;
    d.types = types;
    d.bos_id = 1;
    d.eos_id = 2;
    struct tok_vocab *v = NULL;
    CHECK(tok_vocab_build(&d, &v) == IG_OK);
    if (!v)
        return;
    const int first = 3 + 256; /* ▁ */
    int32_t ids[32];
    /* "ab b" is ▁ a b ▁ b: ▁a (-4) beats ab (-5), then ▁a+b = ▁ab; "▁b" is
     * no token, so: <s> ▁ab ▁ b. */
    int k = encode(v, "ab b", TOK_ENC_DEFAULT, ids, 32);
    CHECKF(k == 4 && ids[0] == 1 && ids[1] == first + 5 && ids[2] == first && ids[3] == first + 2,
           "k=%d %d %d %d", k, ids[1], ids[2], ids[3]);
    k = encode(v, "a\xE6\x97\xA5", TOK_ENC_DEFAULT & ~TOK_ENC_ADD_BOS, ids, 32);
    CHECK(k == 4 && ids[0] == first + 3 && ids[1] == 3 + 0xE6 && ids[3] == 3 + 0xA5);
    char *out;
    size_t len;
    CHECK(tok_decode(v, ids, k, false, &out, &len) == IG_OK && len == 4 &&
          !memcmp(out, "a\xE6\x97\xA5", 4));
    free(out);
    tok_vocab_free(v);
}

/* Turn-ending control tokens are end-of-generation by their text (Gemma's
 * <end_of_turn> beside EOS); the same text as a normal token is not. */
static void test_eog_by_text(void)
{
    const char *extra[] = {"</s>", "<end_of_turn>", "<|im_end|>", "<start_of_turn>"};
    const int32_t types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_NORMAL,
                             TOK_TYPE_CONTROL};
    struct tok_vocab *v = bpe_vocab("gpt2", extra, types, 4, NULL, 0);
    if (!v)
        return;
    CHECK(tok_is_eog(v, 256) && tok_is_eog(v, 257));   /* EOS, <end_of_turn> */
    CHECK(!tok_is_eog(v, 258) && !tok_is_eog(v, 259)); /* normal-typed, not an end */
    tok_vocab_free(v);
    /* harmony (gpt-oss): <|return|> and <|call|> end the answer; with both
     * there, <|end|> (the end of one message) does not (llama.cpp's rule) */
    const char *oss[] = {"<|endoftext|>", "<|return|>", "<|call|>", "<|end|>"};
    const int32_t ctl[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                           TOK_TYPE_CONTROL};
    if ((v = bpe_vocab("gpt2", oss, ctl, 4, NULL, 0))) {
        CHECK(tok_is_eog(v, 256) && tok_is_eog(v, 257) && tok_is_eog(v, 258));
        CHECK(!tok_is_eog(v, 259));
        tok_vocab_free(v);
    }
    const char *no_call[] = {"<|endoftext|>", "<|return|>", "<|end|>"};
    if ((v = bpe_vocab("gpt2", no_call, ctl, 3, NULL, 0))) {
        CHECK(tok_is_eog(v, 257) && tok_is_eog(v, 258)); /* without <|call|>: as before */
        tok_vocab_free(v);
    }
}

static void test_errors(void)
{
    struct tok_str t = {"a", 1};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.n_tokens = 1;
    d.tokens = &t;
    struct tok_vocab *v = NULL;
    d.model = "wordpiece";
    CHECK(tok_vocab_build(&d, &v) == IG_E_MODEL && !v);
    d.model = "gpt2";
    d.pre = "chatglm-bpe"; /* a pre-tokenizer ignite does not have */
    CHECK(tok_vocab_build(&d, &v) == IG_E_MODEL && !v);
    d.pre = NULL;
    d.bos_id = 5;
    CHECK(tok_vocab_build(&d, &v) == IG_E_MODEL && !v);
    d.bos_id = -1;
    CHECK(tok_vocab_build(&d, &v) == IG_OK && v);
    tok_vocab_free(v);
}

int main(void)
{
    test_utf8();
    test_bpe();
    test_ignore_merges();
    test_stream();
    test_random_bytes();
    test_spm();
    test_eog_by_text();
    test_errors();
    return test_summary("test_tok_unit");
}
