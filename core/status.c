/* core/status.c: error and warning lines on stderr, status names.
 * Covered by tests/unit/test_core.c. */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

/* Writes "ignite: <prefix><message>\n". Messages quote paths and strings
 * from model files, which may hold any byte: a control byte becomes '?', so
 * a diagnostic stays one line and cannot carry a terminal escape. */
static int quiet;

void ig_status_quiet(int on)
{
    quiet = on;
}

__attribute__((format(printf, 2, 0)))
static void print_line(const char *prefix, const char *fmt, va_list ap)
{
    char buf[8192];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = '?';
    if (!quiet)
        fprintf(stderr, "ignite: %s%s\n", prefix, buf);
}

int ig_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_line("", fmt, ap);
    va_end(ap);
    return status;
}

void ig_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_line("warning: ", fmt, ap);
    va_end(ap);
}

const char *ig_status_name(int status)
{
    switch (status) {
    case IG_OK: return "ok";
    case IG_E_INTERNAL: return "internal";
    case IG_E_USAGE: return "usage";
    case IG_E_IO: return "io";
    case IG_E_MODEL: return "model";
    case IG_E_NOMEM: return "nomem";
    case IG_E_INPUT: return "input";
    case IG_E_DEVICE: return "device";
    case IG_E_KVFILE: return "kvfile";
    case IG_E_INTERRUPTED: return "interrupted";
    default: return "unknown";
    }
}

void ig_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "ignite: internal error: assertion `%s' failed at %s:%d\n",
            expr, file, line);
    abort();
}
