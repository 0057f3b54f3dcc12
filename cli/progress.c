/* cli/progress.c: the progress line on stderr for work that takes a while
 * (run's prefill, bench's tests): drawn only on a terminal (and not with
 * NO_COLOR), first after IGNITE_PROGRESS_MS (1000 ms) of the work, redrawn
 * at most ten times a second (or every IGNITE_PROGRESS_MS when that is less:
 * 0 draws at every chance, for tests), erased when the work ends (cli/cli.h).
 * Covered by tests/cli/test_tty.py. */
#include "cli/cli.h"

#include "core/timer.h"

#include <stdarg.h>
#include <stdlib.h>

#define PROGRESS_REDRAW_NS 100000000 /* 0.1 s */

void cli_progress_start(struct cli_progress *p, bool on)
{
    const char *env = getenv("IGNITE_PROGRESS_MS");
    int64_t ms;
    if (!env || !cli_scan_i64(env, &ms) || ms < 0 || ms > 86400000)
        ms = 1000;
    *p = (struct cli_progress){.on = on && cli_stderr_is_tty(), .t0 = ig_now_ns(),
                               .delay_ns = (int64_t)ms * 1000000};
    p->last = p->t0 - PROGRESS_REDRAW_NS;
}

bool cli_progress_due(const struct cli_progress *p)
{
    if (!p->on)
        return false;
    int64_t now = ig_now_ns();
    int64_t redraw = p->delay_ns < PROGRESS_REDRAW_NS ? p->delay_ns : PROGRESS_REDRAW_NS;
    return now - p->t0 >= p->delay_ns && now - p->last >= redraw;
}

void cli_progress_draw(struct cli_progress *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
    va_end(ap);
    p->shown = true;
    p->last = ig_now_ns();
}

void cli_progress_clear(struct cli_progress *p)
{
    if (!p->shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->shown = false;
}
