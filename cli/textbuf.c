/* cli/textbuf.c: a growing text buffer's append, for the answers batch
 * collects (cmd_batch.c) and a decode rank sends (pd_decode.c). */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

int cli_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n > *cap) {
        size_t c = (*len + n) * 2 + 64;
        char *t = realloc(*buf, c);
        if (!t)
            return 1;
        *buf = t;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}
