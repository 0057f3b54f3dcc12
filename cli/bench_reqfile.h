/* cli/bench_reqfile.h: `ignite bench --requests-file FILE`: the requests of
 * the throughput test read from JSONL (cli/bench_reqfile.c), private to cli/. */
#ifndef IGNITE_CLI_BENCH_REQFILE_H
#define IGNITE_CLI_BENCH_REQFILE_H

#include <stddef.h>
#include <stdint.h>

/* One line: {"prompt": TEXT} or {"input_len": N} (random token ids), and
 * optionally "output_len" (tokens generated; absent: --output-len's draw).
 * "id" is taken and ignored (a batch file's ids); any other key is refused. */
struct bench_line {
    char *prompt;         /* owned; NULL: input_len random ids */
    int64_t input_len;    /* >= 1 without a prompt */
    int64_t output_len;   /* 0: not given */
};

/* One line s[0..len) (no newline) into *l (zeroed by the caller; its
 * prompt freed by the caller also on failure). IG_OK, or IG_E_INPUT /
 * IG_E_NOMEM naming line number `line` in one line. */
int bench_parse_request_line(const char *s, size_t len, int64_t line, struct bench_line *l);

/* Reads FILE (blank lines skipped) into *lines[0..*n) (freed with
 * bench_lines_free). Returns IG_OK, IG_E_IO / IG_E_NOMEM, or IG_E_INPUT with
 * the line number and the cause in one line (an empty file too). */
int bench_read_requests(const char *path, struct bench_line **lines, int64_t *n);
void bench_lines_free(struct bench_line *lines, int64_t n);

#endif
