/* cli/cli.h: what the subcommands share: one option-table type that drives
 * both getopt_long and --help, checked number parsing, and the entry point
 * of each subcommand (one file each in cli/).
 *
 * Each subcommand returns an enum ig_status, which main() returns as the exit
 * code. Covered by tests/cli/. */
#ifndef IGNITE_CLI_CLI_H
#define IGNITE_CLI_CLI_H

#include <getopt.h>
#include <signal.h>
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

/* Checks every word of argv[1..argc) against `table` before getopt_long
 * sees them (cli/args.c): a word with one dash must be a known short option
 * alone, or one that takes a value with a number attached (-n64, -s-1);
 * unknown long options get "did you mean", llama.cpp's words what ignite
 * has instead. The word after an option that takes a value is that value,
 * whatever it looks like (-p -x). Returns IG_OK, or IG_E_USAGE after one
 * line naming the word. `cmd` names the command in hints. */
int cli_check_args(const char *cmd, int argc, char **argv, const struct cli_option *table);

/* The candidate closest to word[0..n) by edit distance (a candidate that
 * begins the word counts as one edit), or NULL when none is within a third
 * of the shorter length (at least 1). */
const char *cli_suggest(const char *word, size_t n, const char *const *cands, size_t n_cands);

/* A command's name, help texts and option table. */
struct cli_command {
    const char *name, *usage, *summary;
    const struct cli_option *options;
};

enum { CLI_OPTS_DONE = -1, CLI_OPTS_EXIT = -2, CLI_OPTS_BAD = -3 };

/* Starts reading a command's options: checks every word (cli_check_args),
 * fills `p` and restarts getopt. Returns IG_OK or IG_E_USAGE. */
int cli_options_begin(struct cli_parser *p, const struct cli_command *c, int argc, char **argv);

/* The next option's key (optarg its value), or CLI_OPTS_DONE (optind at the
 * first operand), CLI_OPTS_EXIT (--help or --version printed: exit 0) or
 * CLI_OPTS_BAD (the unknown option or missing value reported: IG_E_USAGE). */
int cli_options_next(struct cli_parser *p, const struct cli_command *c, int argc, char **argv);

/* The one line for a word after the options that the command does not take:
 * the word, `hint` (or NULL) and where the options are; returns IG_E_USAGE. */
int cli_unexpected_argument(const char *cmd, const char *arg, const char *hint);

/* Set by SIGINT once cli_catch_sigint has run (cli/interrupt.c). */
extern volatile sig_atomic_t cli_interrupted;

/* Ctrl-C sets cli_interrupted. `restart`: a second Ctrl-C kills at once
 * (SA_RESETHAND) and writes blocked on a slow reader restart (SA_RESTART);
 * without it (chat at its '> ' marker) Ctrl-C interrupts a blocked read. */
void cli_catch_sigint(bool restart);

/* For getopt_long's '?' (unknown option) and ':' (missing value) returns:
 * one line naming the option, with the --help hint; returns IG_E_USAGE. */
int cli_option_error(const char *cmd, int key, char **argv);

/* --no-mmap (IG_MAP_READ) or --mlock (IG_MAP_LOCK, core/mapped_file.h):
 * added to how every model file is held from now on, for the process. */
void cli_load_mode(unsigned flag);

/* Full-string, range-checked parsing. `what` names the option in the error
 * ("--ctx-size"). Return IG_OK, or IG_E_USAGE after one line on stderr. */
int cli_parse_i64(const char *what, const char *s, int64_t min, int64_t max, int64_t *out);
int cli_parse_f64(const char *what, const char *s, double min, double max, double *out);

/* The model path: `arg` when given, else the fetched default model. Returns
 * IG_OK, or IG_E_USAGE with a hint to run `make fetch-model` when no -m was
 * given and the default model is not there. */
int cli_model_path(const char *arg, char *buf, size_t cap);

/* stdout for commands that print results (cli/output.c). After
 * cli_stdout_init (SIGPIPE ignored) a reader that goes away shows up as
 * EPIPE, and that ends the command quietly with status 0. stdio reports a
 * failed write late (a later fflush finds the error flag, errno long
 * gone), so cli_stdout_ok is called right after each piece of output: it
 * keeps the errno of the first failure. */
void cli_stdout_init(void);

/* False once a write to stdout has failed (`flush`: flush first). */
bool cli_stdout_ok(bool flush);

/* True when the failure was EPIPE: the reader has gone, stop quietly. */
bool cli_stdout_gone(void);

/* At the end of a command's output (--help, --version, bench's rows): IG_OK
 * when stdout took it all (or the reader went away: EPIPE), else IG_E_IO
 * after one line naming the first failure's reason (`ignite --help
 * >/dev/full`: "No space left on device"). */
int cli_flush_stdout(void);

/* `ignite --version`: the version, then what the build is made of (git
 * commit and number, compiler, CUDA) and the CPU's int8 kernels, to stdout
 * (cli/version.c). */
void cli_print_version(void);

/* The build, as bench's rows and --version name it. Strings are static. */
struct cli_build {
    const char *version;  /* IGNITE_VERSION */
    const char *commit;   /* short git commit, "unknown" outside git */
    int64_t number;       /* commits in the history (llama.cpp's build_number), -1 unknown */
    const char *compiler; /* "gcc 12.2.0" */
    const char *cuda;     /* CUDA toolkit version the build used, "none" without CUDA,
                           * "emulated (...)" in ignite_emu */
    const char *isa;      /* the int8 kernels chosen: avx512vnni, avxvnni, avx2, scalar */
};
void cli_build_info(struct cli_build *b);

/* How a model is named (cli/model_name.c). cli_model_params writes a
 * parameter count as "134.52 M" or "1.24 B"; cli_model_type llama-bench's
 * model_type, "<arch> <params> <type of the first layer's Q weights>"
 * ("llama 134.52 M Q4_1"), into buf (truncated to cap bytes). */
struct model;
struct cJSON;
void cli_model_params(char *buf, size_t cap, int64_t n);
void cli_model_type(const struct model *m, char *buf, size_t cap);

/* Adds the keys that name the model to a JSON object: "model_filename"
 * (`path` as given or the default model's), "model_arch" (general.
 * architecture) and "model_type" (cli_model_type). False when out of
 * memory. */
bool cli_add_model_json(struct cJSON *o, const char *path, const struct model *m);

/* Text with control characters, backslash and bytes that are not valid
 * UTF-8 escaped (\n, \t, \xNN), so it stays on one line (a token's piece,
 * a prompt). */
void cli_print_escaped(FILE *out, const char *p, size_t n);

/* True when stderr is a terminal and NO_COLOR is unset: progress is shown. */
bool cli_stderr_is_tty(void);

/* A progress line on stderr for work that takes a while (cli/progress.c):
 * only on a terminal (cli_stderr_is_tty), first once the work has lasted
 * IGNITE_PROGRESS_MS (default 1000 ms), then redrawn at most every 0.1 s
 * (or IGNITE_PROGRESS_MS, when less); cleared before anything else is
 * printed. */
struct cli_progress {
    bool on;          /* drawn at all: `on` and stderr is a terminal */
    bool shown;       /* a line is on the screen now */
    int64_t t0, last; /* ig_now_ns: the work's start, the last draw */
    int64_t delay_ns; /* before the first draw */
};
void cli_progress_start(struct cli_progress *p, bool on);
/* True when a line should be drawn now. */
bool cli_progress_due(const struct cli_progress *p);
/* Replaces the line with the formatted text (no newline). */
void cli_progress_draw(struct cli_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Erases the line, if one is shown. */
void cli_progress_clear(struct cli_progress *p);

/* An output file that is never left half-written (cli/outfile.c): made
 * before any work, under a temporary name beside the target (".NAME.ignite-
 * XXXXXX", with the mode the target has or a new file would get), renamed
 * over the target by cli_outfile_commit after an fsync; cli_outfile_abort
 * removes it and leaves the target as it was. "-" is stdout, refused when it
 * is a terminal (the output is binary). A path naming something other than
 * a regular file (a device, a FIFO) is opened and written in place; a
 * symlink is followed (the file it names is replaced, the link stays). */
struct cli_outfile {
    const char *path;     /* as given */
    char name[4200];      /* quoted, for messages: 'c.kv' */
    char target[4096];    /* the file renamed over, "" when written in place */
    char tmp[4200];       /* the temporary file, "" when none */
    FILE *f;              /* where to write; NULL after commit or abort */
    bool is_stdout;
};
/* IG_OK, IG_E_USAGE ('-' on a terminal; `what` names the option) or
 * IG_E_IO (cannot be made: the reason named). */
int cli_outfile_open(struct cli_outfile *o, const char *path, const char *what);
/* Flushes, syncs and renames into place. IG_OK or IG_E_IO (then aborted). */
int cli_outfile_commit(struct cli_outfile *o);
/* Closes and removes the temporary file (no-op after commit). */
void cli_outfile_abort(struct cli_outfile *o);

/* The most bytes a prompt or text file may hold (64 MiB, far beyond any
 * context): reading stops there, so `-f /dev/zero` or an endless pipe
 * cannot take all memory. */
#define CLI_TEXT_MAX_BYTES ((size_t)64 << 20)

/* Reads all of `path` ('-' = stdin) into a malloc'd, NUL-terminated buffer
 * (the caller frees it); *len excludes the NUL. A UTF-8 byte-order mark at
 * the start is dropped. Returns IG_OK, IG_E_IO, IG_E_NOMEM, or IG_E_INPUT
 * (more than CLI_TEXT_MAX_BYTES: the offset is named), after one line on
 * stderr. */
int cli_read_file(const char *path, char **out, size_t *len);

/* The prompt from -p `text` or -f `file` ("-" = stdin): exactly one of the
 * two. On IG_OK *out is a malloc'd NUL-terminated copy of *len bytes.
 * Returns IG_E_USAGE (none or both given), IG_E_IO (unreadable file),
 * IG_E_INPUT (empty, a NUL byte, too long, invalid UTF-8: the offset is
 * named; a NUL byte stops the reading of a file at once). A file's
 * byte-order mark is dropped. */
int cli_read_prompt(const char *text, const char *file, char **out, size_t *len);

/* A text from `file` ("-" = stdin) with cli_read_prompt's checks, named
 * `noun` ("the text") in their messages. */
int cli_read_text(const char *file, const char *noun, char **out, size_t *len);

/* True when stdin is open and not a terminal: a prompt may be piped in. */
bool cli_stdin_has_input(void);

/* The prompt piped to stdin when neither -p nor -f was given (`cat p.txt |
 * ignite`): read and checked as -f -, except that an empty stdin is no
 * prompt: IG_OK with *out NULL (the caller decides what that means). */
int cli_read_prompt_stdin(char **out, size_t *len);

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
/* argv asks for batch --pd (cli/pd.c): every rank of the job runs the command. */
bool cli_pd_asked(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* ---- line editing (cli/line_edit.c): chat on a terminal ---- */

/* Starts libedit's editor (prompt on stderr, the history file read when
 * keep_history). false where ignite is built without libedit: read plain
 * lines then. */
bool cli_line_edit_open(bool keep_history);
/* One edited line into *line (malloc'd, no newline) after `prompt`: 1, or
 * 0 at the end of input or an interrupt (cli_interrupted tells which). */
int cli_line_edit_read(const char *prompt, char **line);
/* A message into the history (and its file, when kept). */
void cli_line_edit_add(const char *msg);
void cli_line_edit_close(void);

/* Appends n bytes of s to *buf (*len used of *cap, grown as needed): 0,
 * or 1 where memory ran out (the buffer as it was). cli/textbuf.c */
int cli_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* `ignite info --tp N`: what each of N tensor-parallel ranks holds of m
 * (cli/info_tp.c), on stdout, or as the "tensor_parallel" member of json
 * where json is not NULL. IG_OK, or the status of a split m cannot make
 * (one line); cli_info_tp_check says that alone, printing nothing else. */
struct model;
struct cJSON;
int cli_info_tp(const struct model *m, int n_ranks, struct cJSON *json);
int cli_info_tp_check(const struct model *m, int n_ranks);

#endif
