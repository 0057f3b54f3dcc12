/* tests/tokenizer/tok_tool.c: the tokenizer as the Python tests see it.
 * Reads records "<length>\n<bytes>" from stdin and prints one line each:
 *
 *   tok_tool encode MODEL [--no-special] [--no-bos]   (a GGUF or an HF folder)
 *       "<rt> <st> id id ...": rt = 1 when decoding the ids (control tokens
 *       rendered) gives back the input bytes exactly; st = 1 when the
 *       streaming decoder's output, chunk by chunk, concatenates to the same
 *       bytes and, if those are valid UTF-8, every chunk is valid UTF-8.
 *   tok_tool split PRE
 *       the end offset (bytes) of every pre-token of the record.
 *
 * Used by test_hf_smollm.py, test_spm.py, test_splitters.py. */
#include "core/status.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        int k = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
              : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (k == 0 || n - i < (size_t)k)
            return false;
        for (int j = 1; j < k; j++)
            if ((s[i + (size_t)j] & 0xC0) != 0x80)
                return false;
        if (k > 1) {
            unsigned char c = s[i + 1];
            if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
                (b == 0xF4 && c > 0x8F))
                return false;
        }
        i += (size_t)k;
    }
    return true;
}

/* Reads one record; returns false at the end of input. */
static bool read_record(char **buf, size_t *cap, size_t *len)
{
    unsigned long long n;
    if (scanf("%llu", &n) != 1 || getchar() != '\n')
        return false;
    if (n + 1 > *cap) {
        *cap = n + 1;
        *buf = realloc(*buf, *cap);
        if (!*buf)
            exit(5);
    }
    if (fread(*buf, 1, n, stdin) != n)
        exit(3);
    *len = n;
    return true;
}

static int check_stream(const struct tok_vocab *v, const struct tok_ids *ids, const char *want,
                        size_t want_len)
{
    struct tok_stream s;
    tok_stream_init(&s, v, true);
    bool ok = true, whole_valid = valid_utf8((const unsigned char *)want, want_len);
    size_t at = 0;
    for (int64_t i = 0; i <= ids->n && ok; i++) {
        const char *t;
        size_t n;
        int rc = i < ids->n ? tok_stream_push(&s, ids->ids[i], &t, &n) : tok_stream_flush(&s, &t, &n);
        if (rc || at + n > want_len || memcmp(want + at, t, n) ||
            (whole_valid && !valid_utf8((const unsigned char *)t, n)))
            ok = false;
        at += n;
    }
    tok_stream_free(&s);
    return ok && at == want_len;
}

static int encode(const char *path, unsigned flags)
{
    struct tok_vocab *v = NULL;
    int rc = tok_load_path(path, &v);
    if (rc)
        goto done;
    char *buf = NULL;
    size_t cap = 0, len;
    while (read_record(&buf, &cap, &len)) {
        struct tok_ids ids = {0};
        char *dec = NULL;
        size_t dec_len = 0;
        if ((rc = tok_encode(v, buf, len, flags, &ids)) ||
            (rc = tok_decode(v, ids.ids, ids.n, true, &dec, &dec_len)))
            break;
        int rt = dec_len == len && !memcmp(dec, buf, len);
        int st = check_stream(v, &ids, dec, dec_len);
        printf("%d %d", rt, st);
        for (int64_t i = 0; i < ids.n; i++)
            printf(" %d", ids.ids[i]);
        putchar('\n');
        free(dec);
        tok_ids_free(&ids);
    }
    free(buf);
done:
    tok_vocab_free(v);
    return rc;
}

static int split(const char *name)
{
    enum tok_pre pre;
    int rc = tok_pre_from_name(name, &pre);
    if (rc)
        return rc;
    char *buf = NULL;
    size_t cap = 0, len;
    while (read_record(&buf, &cap, &len)) {
        struct tok_ids ends = {0};
        if ((rc = tok_pre_split(pre, buf, len, &ends)))
            break;
        for (int64_t i = 0; i < ends.n; i++)
            printf(i ? " %d" : "%d", ends.ids[i]);
        putchar('\n');
        tok_ids_free(&ends);
    }
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "encode")) {
        unsigned flags = TOK_ENC_DEFAULT;
        for (int i = 3; i < argc; i++) {
            if (!strcmp(argv[i], "--no-special"))
                flags &= ~TOK_ENC_PARSE_SPECIAL;
            else if (!strcmp(argv[i], "--no-bos"))
                flags &= ~(unsigned)(TOK_ENC_ADD_BOS | TOK_ENC_ADD_EOS);
            else
                return ig_error(IG_E_USAGE, "tok_tool: unknown option '%s'", argv[i]);
        }
        return encode(argv[2], flags);
    }
    if (argc == 3 && !strcmp(argv[1], "split"))
        return split(argv[2]);
    fprintf(stderr, "usage: tok_tool encode MODEL [--no-special] [--no-bos] | split PRE\n");
    return IG_E_USAGE;
}
