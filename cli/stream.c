/* cli/stream.c: generated text on its way to stdout (run, chat): a flush
 * per token, the first write error kept, and the screen kept tidy on a
 * terminal: the prefill's progress line on stderr, erased when the first
 * token comes, and every diagnostic on a line of its own (the text's line
 * is ended first, through core/status.h's hook) (cli/run.h).
 * Covered by tests/cli/test_tty.py (through a pseudo-terminal). */
#include "cli/cli.h"
#include "cli/run.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"

/* Before a diagnostic: the progress line goes, and a line of text left open
 * on a terminal is ended (the newline the end of the run owes). */
static void before_diag(void *user)
{
    struct run_stream *s = user;
    cli_progress_clear(&s->progress);
    if (s->tty && s->mid_line && fputc('\n', stdout) != EOF && fflush(stdout) == 0) {
        s->mid_line = false;
        s->owe_newline = false;
    }
}

void run_stream_init(struct run_stream *s, bool progress)
{
    *s = (struct run_stream){.tty = isatty(STDOUT_FILENO)};
    cli_progress_start(&s->progress, progress);
    ig_set_diag_hook(before_diag, s);
}

void run_stream_done(struct run_stream *s)
{
    cli_progress_clear(&s->progress);
    ig_set_diag_hook(NULL, NULL);
}

int run_stream_write(struct run_stream *s, const char *text, size_t len)
{
    if (!len)
        return 0;
    cli_progress_clear(&s->progress);
    errno = 0;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        s->write_errno = errno ? errno : EIO;
        return 1;
    }
    s->wrote = s->owe_newline = true;
    s->mid_line = text[len - 1] != '\n';
    return 0;
}

void run_stream_end_line(struct run_stream *s)
{
    if (s->owe_newline && fputc('\n', stdout) != EOF)
        fflush(stdout);
    s->owe_newline = s->mid_line = false;
}

void run_stream_prefill(struct run_stream *s, const struct gen_result *res, int64_t total)
{
    if (res->ttft_set || res->n_prompt >= total || res->n_prompt == 0 ||
        !cli_progress_due(&s->progress))
        return;
    double rate = (double)res->n_prompt * 1000.0 / (res->prefill_ms > 0 ? res->prefill_ms : 1);
    double left = (double)(total - res->n_prompt) / (rate > 0 ? rate : 1);
    cli_progress_draw(&s->progress, "prefill %lld/%lld tok | %.1f tok/s | %.0f s left",
                      (long long)res->n_prompt, (long long)total, rate, left);
}
