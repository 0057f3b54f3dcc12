/* cli/outfile.c: an output file that is never left half-written (--save-kv):
 * it is made before any work, written under a temporary name beside the
 * target and renamed over it at the end, so a failure (or Ctrl-C) leaves the
 * target as it was: a conversation's cache is never lost. Also what '-'
 * (stdout), devices, FIFOs and symlinks mean (cli/cli.h).
 * Covered by tests/kvcache/test_kv_cli.py and tests/cli/test_conversation.py. */
#include "cli/cli.h"

#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mode a new file gets from open(2): 0666 less the umask. */
static mode_t default_mode(void)
{
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

int cli_outfile_open(struct cli_outfile *o, const char *path, const char *what)
{
    *o = (struct cli_outfile){.path = path};
    if (!strcmp(path, "-")) {
        if (isatty(STDOUT_FILENO))
            return ig_error(IG_E_USAGE, "%s -: stdout is a terminal and the output is binary "
                            "(redirect it to a file or a pipe)", what);
        o->f = stdout;
        o->is_stdout = true;
        return IG_OK;
    }
    snprintf(o->name, sizeof o->name, "'%s'", path);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        /* a device (/dev/null), a FIFO, a directory: written in place, if at all */
        if (!(o->f = fopen(path, "wb")))
            return ig_error(IG_E_IO, "cannot create %s: %s", o->name, strerror(errno));
        return IG_OK;
    }
    /* The file replaced at the end: a symlink's target (the link stays). */
    if (exists && !realpath(path, o->target))
        return ig_error(IG_E_IO, "cannot resolve %s: %s", o->name, strerror(errno));
    if (!exists && snprintf(o->target, sizeof o->target, "%s", path) >= (int)sizeof o->target)
        return ig_error(IG_E_IO, "cannot create %s: the path is too long", o->name);
    char dir_buf[PATH_MAX], base_buf[PATH_MAX];
    snprintf(dir_buf, sizeof dir_buf, "%s", o->target);
    snprintf(base_buf, sizeof base_buf, "%s", o->target);
    const char *dir = dirname(dir_buf), *base = basename(base_buf);
    if (snprintf(o->tmp, sizeof o->tmp, "%s/.%s.ignite-XXXXXX", dir, base) >= (int)sizeof o->tmp)
        return ig_error(IG_E_IO, "cannot create %s: the path is too long", o->name);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        o->tmp[0] = '\0';
        return ig_error(IG_E_IO, "cannot create %s: %s", o->name, strerror(e));
    }
    /* mkstemp makes 0600: give the file the mode it would have had */
    if (fchmod(fd, exists ? sb.st_mode & 07777 : default_mode()) != 0 ||
        !(o->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        cli_outfile_abort(o);
        return ig_error(IG_E_IO, "cannot create %s: %s", o->name, strerror(e));
    }
    return IG_OK;
}

int cli_outfile_commit(struct cli_outfile *o)
{
    if (!o->f)
        return IG_OK;
    if (o->is_stdout) {
        o->f = NULL;
        errno = 0;
        if (fflush(stdout) != 0 && errno != EPIPE)
            return ig_error(IG_E_IO, "cannot write to stdout: %s", strerror(errno));
        return IG_OK;
    }
    errno = 0;
    bool ok = fflush(o->f) == 0 && (!o->tmp[0] || fsync(fileno(o->f)) == 0);
    int e = errno;
    ok = fclose(o->f) == 0 && ok;
    e = e ? e : errno;
    o->f = NULL;
    if (ok && o->tmp[0] && rename(o->tmp, o->target) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        cli_outfile_abort(o);
        return ig_error(IG_E_IO, "cannot write %s: %s", o->name, strerror(e ? e : EIO));
    }
    o->tmp[0] = '\0';
    return IG_OK;
}

void cli_outfile_abort(struct cli_outfile *o)
{
    if (o->f && !o->is_stdout)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = '\0';
}
