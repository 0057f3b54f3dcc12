/* core/status.c: error and warning lines on stderr, status names.
 * Covered by tests/unit/test_core.c. */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

int ig_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ignite: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

void ig_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ignite: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
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
