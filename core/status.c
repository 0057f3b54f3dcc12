/* core/status.c: error and warning lines on stderr, status names.
 * Covered by tests/unit/test_core.c. */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

static char *capture_buf; /* ig_error_capture's */
static size_t capture_cap;
static int quiet;          /* ig_status_quiet's */

void ig_status_quiet(int on)
{
    quiet = on;
}

/* Formats the message into buf[cap]: a control byte becomes '?'. Messages
 * quote paths and strings from model files, which may hold any byte, so a
 * diagnostic stays one line and cannot carry a terminal escape. */
__attribute__((format(printf, 3, 0)))
static void format_line(char *buf, size_t cap, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, cap, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = '?';
}

/* Writes "ignite: <prefix><message>\n" to stderr (not when quiet). */
__attribute__((format(printf, 2, 0)))
static void print_line(const char *prefix, const char *fmt, va_list ap)
{
    char buf[8192];
    format_line(buf, sizeof buf, fmt, ap);
    if (!quiet)
        fprintf(stderr, "ignite: %s%s\n", prefix, buf);
}

void ig_error_capture(char *buf, size_t cap)
{
    capture_buf = cap ? buf : NULL;
    capture_cap = cap;
}

int ig_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (capture_buf)
        format_line(capture_buf, capture_cap, fmt, ap);
    else
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
    case IG_E_PARTIAL: return "partial";
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
