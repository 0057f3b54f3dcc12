/* cli/cli.h: what the subcommands share: one option-table type that drives
 * both getopt_long and --help, checked number parsing, and the entry point
 * of each subcommand (one file each in cli/).
 *
 * Each subcommand returns an enum ig_status, which main() returns as the exit
 * code. Covered by tests/cli/. */
#ifndef IGNITE_CLI_CLI_H
#define IGNITE_CLI_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define IGNITE_VERSION "0.1.0"

/* One row of a subcommand's option table. A table ends with a row whose
 * name is NULL. */
struct cli_option {
    const char *name;    /* long name without "--" */
    int key;             /* short letter, or a unique value >= 256 for long-only options */
    int has_arg;         /* no_argument or required_argument */
    const char *metavar; /* shown in --help after the name, e.g. "N"; NULL if no argument */
    const char *help;    /* one line */
    const char *def;     /* default shown in --help, or NULL */
};

#define CLI_MAX_OPTIONS 64

/* getopt_long's inputs built from a table. */
struct cli_parser {
    struct option longopts[CLI_MAX_OPTIONS + 1];
    char shortopts[2 * CLI_MAX_OPTIONS + 2];
};

/* Fills `p` from `table`. Asserts the table fits. */
void cli_parser_init(struct cli_parser *p, const struct cli_option *table);

/* Prints "usage: <usage>\n\n<summary>\n\noptions:" and one aligned line per
 * option with its default, to `out`. */
void cli_print_help(FILE *out, const char *usage, const char *summary,
                    const struct cli_option *table);

/* Prints the one line for an unknown option or missing argument (getopt has
 * already named it) with a hint to run --help; returns IG_E_USAGE. */
int cli_usage_error(const char *cmd);

/* For getopt_long's '?' (unknown option) and ':' (missing value) returns:
 * one line naming the option, with the --help hint; returns IG_E_USAGE. */
int cli_option_error(const char *cmd, int key, char **argv);

/* Full-string, range-checked parsing. `what` names the option in the error
 * ("--ctx-size"). Return IG_OK, or IG_E_USAGE after one line on stderr. */
int cli_parse_i64(const char *what, const char *s, int64_t min, int64_t max, int64_t *out);
int cli_parse_f64(const char *what, const char *s, double min, double max, double *out);

/* The model path: `arg` when given, else the fetched default model. Returns
 * IG_OK, or IG_E_USAGE with a hint to run `make fetch-model` when no -m was
 * given and the default model is not there. */
int cli_model_path(const char *arg, char *buf, size_t cap);

/* At the end of a command's output (--help, --version, bench's rows): IG_OK
 * when stdout took it all (or the reader went away: EPIPE), else IG_E_IO
 * after one line (`ignite --help >/dev/full`). */
int cli_flush_stdout(void);

/* True when stderr is a terminal and NO_COLOR is unset: progress is shown. */
bool cli_stderr_is_tty(void);

/* Reads all of `path` ('-' = stdin) into a malloc'd, NUL-terminated buffer
 * (the caller frees it); *len excludes the NUL. Returns IG_OK, IG_E_IO or
 * IG_E_NOMEM after one line on stderr. */
int cli_read_file(const char *path, char **out, size_t *len);

/* The prompt from -p `text` or -f `file` ("-" = stdin): exactly one of the
 * two. On IG_OK *out is a malloc'd NUL-terminated copy of *len bytes.
 * Returns IG_E_USAGE (none or both given), IG_E_IO (unreadable file),
 * IG_E_INPUT (empty, a NUL byte, invalid UTF-8: the offset is named). */
int cli_read_prompt(const char *text, const char *file, char **out, size_t *len);

/* True when s[0..n) is valid UTF-8; else the offset of the first bad byte
 * goes to *bad_at (may be NULL). */
bool cli_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* A malloc'd NUL-terminated copy of s[0..n) with each NUL byte and each byte
 * that is not part of valid UTF-8 replaced by U+FFFD (safe for cJSON); NULL
 * when out of memory. */
char *cli_utf8_repair(const char *s, size_t n);

/* Subcommands. argv[0] is the subcommand's name. */
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_batch(int argc, char **argv);

#endif
