/* cli/prompt.c: where the prompt comes from (-p text, -f file, -f - for
 * stdin) and the checks it must pass before tokenization: not empty, valid
 * UTF-8. Also the UTF-8 repair --json needs for its text field.
 * Covered by tests/cli/test_run_args.sh and test_run_model.sh. */
#include "cli/cli.h"

#include "core/status.h"
#include "core/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool cli_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = ig_utf8_char_len(u + i, n - i);
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
        size_t k = ig_utf8_char_len(u + i, n - i);
        if (k && s[i] != '\0') { /* a NUL would end the C string cJSON takes */
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
static int read_stream(FILE *f, const char *name, char **out, size_t *len)
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

int cli_read_file(const char *path, char **out, size_t *len)
{
    if (!strcmp(path, "-"))
        return read_stream(stdin, "standard input", out, len);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s: %s", path, strerror(errno));
    int st = read_stream(f, path, out, len);
    fclose(f);
    return st;
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
    } else {
        st = cli_read_file(file, out, len);
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
