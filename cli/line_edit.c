/* cli/line_edit.c: line editing for `ignite chat` on a terminal, through
 * libedit (Debian's libedit-dev, BSD-licensed, readline's interface): the
 * arrow keys, Home/End, Ctrl-R's search and the session's history, kept in
 * a file between sessions ($XDG_STATE_HOME/ignite/history, else
 * ~/.local/state/ignite/history; the last CLI_HISTORY_MAX messages).
 * Built where CMake finds libedit (IGNITE_HAVE_LIBEDIT); elsewhere
 * cli_line_edit_open says no and chat reads plain lines as from a pipe.
 * The prompt goes to stderr, as chat's marker does; stdout keeps the
 * answers only. Leaves what a message is (continuation lines, checks) to
 * cmd_chat.c. Covered by tests/cli/test_chat_edit.py (a pseudo-terminal). */
#include "cli/cli.h"

#include "core/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef IGNITE_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

enum { CLI_HISTORY_MAX = 1000 };

static char history_path[4096]; /* "" when the history is not kept */

/* $XDG_STATE_HOME/ignite/history or ~/.local/state/ignite/history, its
 * folder made; false (with a warning) when neither can be. */
static bool history_file(char *out, size_t cap)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4000];
    int n;
    if (state && state[0] == '/')
        n = snprintf(dir, sizeof dir, "%s/ignite", state);
    else if (home && *home)
        n = snprintf(dir, sizeof dir, "%s/.local/state/ignite", home);
    else
        return false;
    if (n < 0 || (size_t)n >= sizeof dir || (size_t)n + 9 > cap)
        return false;
    /* each missing folder of the path, as mkdir -p */
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            break;
        *p = '/';
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        ig_warn("chat: cannot make '%s' for the history: %s (--no-history skips it)", dir,
                strerror(errno));
        return false;
    }
    snprintf(out, cap, "%s/history", dir);
    return true;
}

#ifdef IGNITE_HAVE_LIBEDIT

bool cli_line_edit_open(bool keep_history)
{
    rl_instream = stdin;
    rl_outstream = stderr;
    /* chat's own SIGINT handler decides what Ctrl-C means */
    rl_catch_signals = 0;
    using_history();
    stifle_history(CLI_HISTORY_MAX);
    history_path[0] = '\0';
    if (keep_history && history_file(history_path, sizeof history_path)) {
        errno = 0;
        if (read_history(history_path) != 0 && errno && errno != ENOENT)
            ig_warn("chat: cannot read the history '%s': %s", history_path, strerror(errno));
    }
    return true;
}

int cli_line_edit_read(const char *prompt, char **line)
{
    *line = readline(prompt);
    return *line ? 1 : 0;
}

void cli_line_edit_add(const char *msg)
{
    if (!*msg)
        return;
    add_history(msg);
    /* written after each message: a session that is killed keeps its history */
    if (history_path[0] && write_history(history_path) != 0) {
        ig_warn("chat: cannot write the history '%s': %s", history_path, strerror(errno));
        history_path[0] = '\0';
    }
}

void cli_line_edit_close(void)
{
    clear_history();
}

#else

bool cli_line_edit_open(bool keep_history)
{
    (void)keep_history;
    (void)history_file;
    return false;
}

int cli_line_edit_read(const char *prompt, char **line)
{
    (void)prompt;
    *line = NULL;
    return 0;
}

void cli_line_edit_add(const char *msg) { (void)msg; }

void cli_line_edit_close(void) {}

#endif
