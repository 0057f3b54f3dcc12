/* core/status.h: the one status type every module returns, and the one way
 * library code reports a problem (a single line on stderr).
 *
 * Library code never exits and never writes to stdout; it prints one line
 * naming what was expected and what was found, then returns a status. Only
 * main.c turns a status into an exit code, and the values below ARE the exit
 * codes (documented in docs/cli.md). */
#ifndef IGNITE_CORE_STATUS_H
#define IGNITE_CORE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

/* Usable from C++ (CUDA sources and the kernel emulator include it). */
#ifdef __cplusplus
extern "C" {
#define IG_NORETURN [[noreturn]]
#else
#define IG_NORETURN _Noreturn
#endif

enum ig_status {
    IG_OK = 0,
    IG_E_INTERNAL = 1,     /* a bug: an invariant of ours did not hold */
    IG_E_USAGE = 2,        /* bad flags or option values */
    IG_E_IO = 3,           /* a file could not be opened, read or written */
    IG_E_MODEL = 4,        /* the model file is malformed or unsupported */
    IG_E_NOMEM = 5,        /* an allocation failed, or a size is absurd */
    IG_E_INPUT = 6,        /* bad prompt: empty, invalid UTF-8, over the context */
    IG_E_DEVICE = 7,       /* the requested device is missing or failed */
    IG_E_KVFILE = 8,       /* a saved KV cache file is malformed or foreign */
    IG_E_PARTIAL = 9,      /* ignite batch: some requests failed, the others ran */
    IG_E_INTERRUPTED = 130 /* stopped by SIGINT (128 + 2, as shells do) */
};

/* Prints "ignite: <message>\n" to stderr, always one line: control bytes in
 * the message (a path, a string from a model file) print as '?'. Returns
 * `status` so a caller can write `return ig_error(IG_E_MODEL, "...")`. */
int ig_error(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* While `buf` is set (cap > 0), ig_error writes its message (without the
 * "ignite: " prefix, control bytes as '?') into buf instead of stderr, so a
 * caller can put it elsewhere (a batch request's error object); NULL
 * restores stderr. Not for use from several threads. */
void ig_error_capture(char *buf, size_t cap);

/* Prints "ignite: warning: <message>\n" to stderr, one line as ig_error's. */
void ig_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fuzz targets of readers that report through ig_error (JSON files) turn
 * the lines off: messages are still formatted, not printed. Not for
 * library code. */
void ig_status_quiet(int on);

/* Short name of a status for --json and tests ("model", "usage", ...). */
const char *ig_status_name(int status);

/* Always-on check for memory-safety invariants: prints the failing
 * expression with file:line and aborts. Not for validating input. */
#define IG_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond))                                                           \
            ig_assert_fail(#cond, __FILE__, __LINE__);                         \
    } while (0)

IG_NORETURN void ig_assert_fail(const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif

#endif
