/* cli/output.c: stdout as the commands that print results see it. SIGPIPE
 * is ignored, so a reader that goes away (`| head`) shows up as EPIPE and
 * the command ends quietly with status 0, the same for every command. Any
 * other failed write is an I/O error that names its real reason: stdio
 * reports a failure late (a later fflush finds only the error flag, the
 * errno of the write long overwritten), so the errno is taken right after
 * each piece of output and the first one is kept. Also whether stderr is a
 * terminal that may show progress.
 * Covered by tests/cli/test_args.sh (>/dev/full, closed pipes). */
#include "cli/cli.h"

#include "core/status.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int stdout_errno; /* the first failed write's errno, 0 while none */

void cli_stdout_init(void)
{
    signal(SIGPIPE, SIG_IGN);
}

bool cli_stdout_ok(bool flush)
{
    if (stdout_errno)
        return false;
    int e = errno; /* a write that failed in the output just before set it */
    bool failed = false;
    if (flush) {
        errno = 0;
        failed = fflush(stdout) != 0;
        if (failed && errno)
            e = errno;
    }
    if (failed || ferror(stdout)) {
        stdout_errno = e ? e : EIO;
        return false;
    }
    return true;
}

bool cli_stdout_gone(void)
{
    return stdout_errno == EPIPE;
}

int cli_flush_stdout(void)
{
    if (cli_stdout_ok(true) || stdout_errno == EPIPE)
        return IG_OK;
    return ig_error(IG_E_IO, "cannot write to stdout: %s", strerror(stdout_errno));
}

bool cli_stderr_is_tty(void)
{
    const char *nc = getenv("NO_COLOR");
    return isatty(STDERR_FILENO) && !(nc && *nc);
}
