/* main.c: ignite's entry point: picks the subcommand and returns its status
 * as the exit code (the codes are listed in core/status.h and docs/cli.md).
 * Each subcommand lives in cli/cmd_<name>.c with its own option table; when
 * the first argument is an option (ignite -p TEXT), or there is none and a
 * prompt is piped to stdin (cat p.txt | ignite), the command is run.
 * `ignite help CMD` is `ignite CMD --help`; a mistyped command gets "did you
 * mean". Covered by tests/cli/test_args.sh. */
#include "cli/cli.h"
#include "backend/tp.h"
#include "core/coll.h"
#include "core/status.h"
#include "models/tp.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"run", cmd_run, "generate text from a prompt (the default: 'ignite -p TEXT')"},
    {"chat", cmd_chat, "talk with a chat model, turn by turn (a terminal, or one message a line)"},
    {"batch", cmd_batch, "run many prompts at once (JSON Lines in and out, continuous batching)"},
    {"info", cmd_info, "describe a model file: architecture, shapes, tensors, tokenizer"},
    {"bench", cmd_bench, "measure prefill and decode speed, like llama-bench"},
    {"perplexity", cmd_perplexity, "score a text: perplexity and KL divergence, like llama-perplexity"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (or their count, or pieces)"},
};
#define N_SUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

static void print_usage(FILE *out)
{
    fprintf(out, "usage: ignite <command> [options]\n\n"
                 "ignite runs Llama-family GGUF models: a batched prefill of the prompt, then decode.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(out, "  %-11s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out, "\nOne model across N processes (tensor parallelism, a build with MPI): mpirun -np N\n"
                 "ignite <command> ...; 'ignite info --tp N' shows what each rank holds.\n");
    fprintf(out, "\nRun 'ignite help <command>' (or 'ignite <command> --help') for a command's options.\n"
                 "Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O, 4 bad model,\n"
                 "5 out of memory, 6 bad input, 7 device, 8 bad KV file, 9 some batch requests\n"
                 "failed, 130 interrupted.\n");
}

static const struct subcommand *find_command(const char *name)
{
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        if (!strcmp(name, subcommands[i].name))
            return &subcommands[i];
    return NULL;
}

/* One line for a word that is no command, with the nearest one if any. */
static int unknown_command(const char *cmd)
{
    const char *names[N_SUBCOMMANDS + 1];
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        names[i] = subcommands[i].name;
    names[N_SUBCOMMANDS] = "help";
    const char *near = cli_suggest(cmd, strlen(cmd), names, N_SUBCOMMANDS + 1);
    if (near)
        return ig_error(IG_E_USAGE, "unknown command '%s' (did you mean '%s'?)", cmd, near);
    return ig_error(IG_E_USAGE, "unknown command '%s' (run 'ignite --help')", cmd);
}

/* Takes `--tp N` (or --tp=N) out of argv wherever it is: the ranks of a
 * tensor-parallel job, every command's (backend/tp.h). IG_OK, or
 * IG_E_USAGE after one line. */
static int take_tp(int *argc, char **argv)
{
    int out = 0;
    for (int i = 0; i < *argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--tp")) {
            if (i + 1 >= *argc)
                return ig_error(IG_E_USAGE, "--tp: expected a number of ranks");
            v = argv[++i];
        } else if (!strncmp(argv[i], "--tp=", 5)) {
            v = argv[i] + 5;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        int64_t n;
        if (!cli_scan_i64(v, &n) || n < 1 || n > MODEL_TP_MAX_RANKS)
            return ig_error(IG_E_USAGE, "--tp: expected 1..%d ranks, got '%s'",
                            MODEL_TP_MAX_RANKS, v);
        backend_tp_set_asked((int)n);
    }
    *argc = out;
    argv[out] = NULL;
    return IG_OK;
}

/* --tp N against the job this process is in: under mpirun the ranks must be
 * N; without it, how to start them (`info --tp N` only describes). */
static int check_tp(const char *cmd)
{
    int n = backend_tp_asked(), size = ig_coll_size();
    if (n > 1 && !ig_coll_available() && strcmp(cmd, "info"))
        return ig_error(IG_E_USAGE, "--tp %d needs MPI: this ignite was built without it "
                        "(install libopenmpi-dev and openmpi-bin, rebuild)", n);
    if (n > 1 && size == 1 && strcmp(cmd, "info"))
        return ig_error(IG_E_USAGE, "--tp %d: start the ranks with MPI: mpirun -np %d ignite %s "
                        "... (without --tp; srun works too)", n, n, cmd);
    if (n && size > 1 && n != size)
        return ig_error(IG_E_USAGE, "--tp %d, but mpirun started %d ranks", n, size);
    return IG_OK;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv)
{
    int st = ig_coll_start(&argc, &argv);
    if (st != IG_OK)
        return st;
    if (cli_pd_asked(argc, argv)) { /* batch --pd: every rank runs the command (cli/pd.c) */
        backend_tp_off();
        if (ig_coll_rank() != 0) { /* rank 0 reads, writes and speaks for the job */
            ig_status_quiet(1);
            if (!freopen("/dev/null", "w", stdout))
                return IG_E_IO;
        }
    } else if (ig_coll_rank() != 0) { /* the others follow rank 0's steps, quietly */
        st = backend_tp_follow();
        ig_coll_finish();
        return st;
    }
    st = take_tp(&argc, argv);
    if (st == IG_OK)
        st = check_tp(argc > 1 && argv[1][0] != '-' ? argv[1] : "run");
    if (st == IG_OK)
        st = run_command(argc, argv);
    backend_tp_end();
    ig_coll_finish();
    return st;
}

static int run_command(int argc, char **argv)
{
    cli_stdout_init();
    if (argc < 2) {
        if (cli_stdin_has_input()) /* cat prompt.txt | ignite */
            return cmd_run(argc, argv);
        print_usage(stderr);
        return IG_E_USAGE;
    }
    const char *cmd = argv[1];
    bool help_help = argc > 2 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"));
    if (!strcmp(cmd, "help") && argc > 2 && !help_help) { /* ignite help run */
        if (argc > 3)
            return ig_error(IG_E_USAGE, "help: one command at a time, got '%s' after '%s'",
                            argv[3], argv[2]);
        const struct subcommand *s = find_command(argv[2]);
        if (!s)
            return unknown_command(argv[2]);
        char help[] = "--help";
        char *args[] = {argv[2], help, NULL};
        return s->fn(2, args);
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return cli_flush_stdout();
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        cli_print_version();
        return cli_flush_stdout();
    }
    if (cmd[0] == '-') /* options first: the run command */
        return cmd_run(argc, argv);
    const struct subcommand *s = find_command(cmd);
    return s ? s->fn(argc - 1, argv + 1) : unknown_command(cmd);
}
