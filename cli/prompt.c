/* cli/prompt.c: where the prompt comes from (-p text, -f file, -f - for
 * stdin) and the checks it must pass before tokenization: not empty, valid
 * UTF-8. Also the UTF-8 repair --json needs for its text field.
 * Covered by tests/cli/test_run_args.sh and test_run_model.sh. */
#include "cli/cli.h"

#include "core/status.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool cli_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k) {
            if (bad_at)
                *bad_at = i;
            return false;
        }
        i += k;
    }
    return true;
}

char *cli_utf8_repair(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(3 * n + 1); /* each bad byte becomes U+FFFD, 3 bytes */
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

/* Reads all of `f` into a NUL-terminated buffer. */
static int read_all(FILE *f, const char *name, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return ig_error(IG_E_NOMEM, "out of memory reading %s", name);
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (ferror(f)) {
            free(buf);
            return ig_error(IG_E_IO, "cannot read %s: %s", name, strerror(errno));
        }
        if (feof(f))
            break;
        if (n == cap - 1) {
            char *b = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!b)
                free(buf);
            buf = b;
            cap *= 2;
        }
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return IG_OK;
}

int cli_read_prompt(const char *text, const char *file, char **out, size_t *len)
{
    int st;
    *out = NULL;
    if (text && file)
        return ig_error(IG_E_USAGE, "give the prompt with -p or -f, not both");
    if (!text && !file)
        return ig_error(IG_E_USAGE, "no prompt: give one with -p TEXT or -f FILE (- for stdin)");
    if (text) {
        *len = strlen(text);
        *out = strdup(text);
        st = *out ? IG_OK : ig_error(IG_E_NOMEM, "out of memory");
    } else if (!strcmp(file, "-")) {
        st = read_all(stdin, "standard input", out, len);
    } else {
        FILE *f = fopen(file, "rb");
        if (!f)
            return ig_error(IG_E_IO, "cannot open prompt file %s: %s", file, strerror(errno));
        st = read_all(f, file, out, len);
        fclose(f);
    }
    if (st != IG_OK)
        return st;
    size_t bad;
    if (*len == 0)
        st = ig_error(IG_E_INPUT, "the prompt is empty");
    else if (memchr(*out, '\0', *len))
        st = ig_error(IG_E_INPUT, "the prompt contains a NUL byte");
    else if (!cli_utf8_valid(*out, *len, &bad))
        st = ig_error(IG_E_INPUT, "the prompt is not valid UTF-8 (byte 0x%02x at offset %zu)",
                      (unsigned char)(*out)[bad], bad);
    if (st != IG_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}
