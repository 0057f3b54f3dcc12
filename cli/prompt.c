/* cli/prompt.c: where the prompt comes from (-p text, -f file, -f - for
 * stdin) and the checks it must pass before tokenization: not empty, no NUL
 * byte, at most CLI_TEXT_MAX_BYTES, valid UTF-8 (a file's byte-order mark
 * is dropped). Also the UTF-8 repair --json needs for its text field.
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

#define UTF8_BOM "\xef\xbb\xbf"

/* Reads all of `f` into a NUL-terminated buffer, at most CLI_TEXT_MAX_BYTES
 * (an endless source such as /dev/zero or `yes |` is stopped there). With
 * `no_nul` the first NUL byte stops it too. A leading byte-order mark is
 * dropped; *skipped says how many bytes that was, so offsets found later
 * can still be named in the file's own counting. `name` is quoted already. */
static int read_stream(FILE *f, const char *name, bool no_nul, char **out, size_t *len,
                       size_t *skipped)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return ig_error(IG_E_NOMEM, "out of memory reading %s", name);
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        const char *nul = no_nul ? memchr(buf + n, '\0', got) : NULL;
        n += got;
        if (nul) {
            size_t at = (size_t)(nul - buf);
            free(buf);
            return ig_error(IG_E_INPUT, "the prompt contains a NUL byte (offset %zu of %s)", at,
                            name);
        }
        if (n > CLI_TEXT_MAX_BYTES) {
            free(buf);
            return ig_error(IG_E_INPUT, "%s holds more than %zu MiB, the most a text may be "
                            "(reading stopped at offset %zu)", name, CLI_TEXT_MAX_BYTES >> 20,
                            CLI_TEXT_MAX_BYTES);
        }
        if (ferror(f)) {
            int e = errno;
            free(buf);
            return ig_error(IG_E_IO, "cannot read %s: %s", name, strerror(e ? e : EIO));
        }
        if (feof(f))
            break;
        if (n == cap - 1) {
            /* one byte past the limit is enough to know it was passed */
            size_t want = cap * 2 < CLI_TEXT_MAX_BYTES + 2 ? cap * 2 : CLI_TEXT_MAX_BYTES + 2;
            char *b = realloc(buf, want);
            if (!b)
                free(buf);
            buf = b;
            cap = want;
        }
    }
    *skipped = 0;
    if (n >= 3 && !memcmp(buf, UTF8_BOM, 3)) {
        memmove(buf, buf + 3, n - 3);
        n -= 3;
        *skipped = 3;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return IG_OK;
}

/* cli_read_file with the choice of refusing NUL bytes. */
static int read_path(const char *path, bool no_nul, char **out, size_t *len, size_t *skipped)
{
    if (!strcmp(path, "-"))
        return read_stream(stdin, "'stdin'", no_nul, out, len, skipped);
    char name[4096];
    snprintf(name, sizeof name, "'%s'", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s: %s", name, strerror(errno));
    int st = read_stream(f, name, no_nul, out, len, skipped);
    fclose(f);
    return st;
}

int cli_read_file(const char *path, char **out, size_t *len)
{
    size_t skipped;
    return read_path(path, false, out, len, &skipped);
}

int cli_read_prompt(const char *text, const char *file, char **out, size_t *len)
{
    int st;
    size_t skipped = 0; /* a file's byte-order mark, for offsets in its counting */
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
        st = read_path(file, true, out, len, &skipped);
    }
    if (st != IG_OK)
        return st;
    size_t bad;
    if (*len == 0)
        st = ig_error(IG_E_INPUT, "the prompt is empty");
    else if (!cli_utf8_valid(*out, *len, &bad))
        st = ig_error(IG_E_INPUT, "the prompt is not valid UTF-8 (byte 0x%02x at offset %zu)",
                      (unsigned char)(*out)[bad], bad + skipped);
    if (st != IG_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}
