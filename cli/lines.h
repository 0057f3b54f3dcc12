/* cli/lines.h: lines from a file descriptor as they arrive (private to
 * cli/): `ignite batch` reads its requests while it generates, so a pipe
 * that delivers them over time is served as they come, and a huge file is
 * not read into memory at once. Covered by tests/cli/test_batch.py. */
#ifndef IGNITE_CLI_LINES_H
#define IGNITE_CLI_LINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest line taken; a longer one is skipped and reported as such. */
#define LINES_MAX (16u << 20)

struct line_reader {
    int fd;
    const char *name;  /* for messages */
    char *buf;         /* unread bytes are buf[start, len) */
    size_t start, len, cap;
    bool eof;
    bool skipping;     /* inside a line longer than LINES_MAX */
    int64_t line_no;   /* lines returned so far */
};

void lines_init(struct line_reader *r, int fd, const char *name);
void lines_free(struct line_reader *r);

/* Reads what the descriptor has now; with `block`, waits for at least
 * something (or the end, or a signal). Returns IG_OK, IG_E_IO (one line) or
 * IG_E_NOMEM. */
int lines_fill(struct line_reader *r, bool block);

/* The next whole line (a final one without a newline counts at the end of
 * input): *line and *len without the newline (and a CR before it), valid
 * until the next call; *too_long for a line that was longer than LINES_MAX
 * (its text is not given). Returns false when no whole line is buffered. */
bool lines_next(struct line_reader *r, const char **line, size_t *len, bool *too_long);

/* True when every line has been returned. */
bool lines_done(const struct line_reader *r);

#endif
