/* cli/lines.c: a line reader over a file descriptor that can look without
 * waiting (poll), for `ignite batch` (cli/lines.h).
 * Covered by tests/cli/test_batch.py. */
#include "cli/lines.h"

#include "core/status.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void lines_init(struct line_reader *r, int fd, const char *name)
{
    *r = (struct line_reader){.fd = fd, .name = name};
}

void lines_free(struct line_reader *r)
{
    free(r->buf);
    *r = (struct line_reader){0};
}

int lines_fill(struct line_reader *r, bool block)
{
    if (r->eof)
        return IG_OK;
    /* Waiting in poll, not read: a signal (Ctrl-C) ends the wait even when
     * handlers restart system calls, and the caller looks at its flag. */
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    if (poll(&p, 1, block ? -1 : 0) <= 0)
        return IG_OK; /* nothing yet, or a signal (an error shows up in read next time) */
    if (r->start > 0) { /* keep the unread bytes at the front */
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
    }
    if (r->cap - r->len < 65536) {
        size_t cap = r->cap ? 2 * r->cap : 1 << 17;
        char *b = realloc(r->buf, cap);
        if (!b)
            return ig_error(IG_E_NOMEM, "out of memory reading %s", r->name);
        r->buf = b;
        r->cap = cap;
    }
    ssize_t n;
    do
        n = read(r->fd, r->buf + r->len, r->cap - r->len);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return ig_error(IG_E_IO, "cannot read %s: %s", r->name, strerror(errno));
    if (n == 0)
        r->eof = true;
    r->len += (size_t)n;
    /* Inside an over-long line nothing before the next newline is kept. */
    if (r->skipping) {
        char *nl = memchr(r->buf + r->start, '\n', r->len - r->start);
        if (!nl && !r->eof)
            r->start = r->len;
    } else if (r->len - r->start > LINES_MAX &&
               !memchr(r->buf + r->start, '\n', r->len - r->start)) {
        r->skipping = true;
        r->start = r->len;
    }
    return IG_OK;
}

bool lines_next(struct line_reader *r, const char **line, size_t *len, bool *too_long)
{
    char *at = r->buf + r->start;
    size_t avail = r->len - r->start;
    char *nl = avail ? memchr(at, '\n', avail) : NULL;
    if (!nl && !(r->eof && (avail || r->skipping)))
        return false;
    size_t n = nl ? (size_t)(nl - at) : avail;
    r->start += n + (nl != NULL);
    *too_long = r->skipping || n > LINES_MAX;
    r->skipping = false;
    if (n && at[n - 1] == '\r')
        n--;
    *line = at;
    *len = *too_long ? 0 : n;
    r->line_no++;
    return true;
}

bool lines_done(const struct line_reader *r)
{
    return r->eof && r->start == r->len && !r->skipping;
}
