/* cli/interrupt.c: Ctrl-C for the commands that stop between steps and keep
 * what was done (run, chat, batch, perplexity, bench --requests): SIGINT
 * only sets cli_interrupted, which their loops and the engine read.
 * Covered by the Ctrl-C cases of tests/cli/ (test_run_model.sh, test_batch.py,
 * test_chat.py, test_perplexity.py, test_bench_requests.py). */
#include "cli/cli.h"

#include <signal.h>
#include <string.h>

volatile sig_atomic_t cli_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    cli_interrupted = 1;
}

void cli_catch_sigint(bool restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESETHAND | SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}
