/* main.c: ignite's entry point: picks the subcommand and returns its status
 * as the exit code (the codes are listed in core/status.h and docs/cli.md).
 * Each subcommand lives in cli/cmd_<name>.c with its own option table; when
 * the first argument is an option (ignite -p TEXT) the command is run. */
#include "cli/cli.h"
#include "core/status.h"

#include <stdio.h>
#include <string.h>

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"run", cmd_run, "generate text from a prompt (the default: 'ignite -p TEXT')"},
    {"batch", cmd_batch, "run many prompts at once (JSON Lines in and out, continuous batching)"},
    {"info", cmd_info, "describe a model file: architecture, shapes, tensors, tokenizer"},
    {"bench", cmd_bench, "measure prefill and decode speed, like llama-bench"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (or their count, or pieces)"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: ignite <command> [options]\n\n"
                 "ignite runs Llama-family GGUF models: a batched prefill of the prompt, then decode.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out, "\nRun 'ignite <command> --help' for a command's options.\n"
                 "Exit codes: 0 ok, 1 internal error, 2 usage, 3 I/O, 4 bad model,\n"
                 "5 out of memory, 6 bad input, 7 device, 8 bad KV file, 9 some batch requests\n"
                 "failed, 130 interrupted.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return IG_E_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return cli_flush_stdout();
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("ignite %s\n", IGNITE_VERSION);
        return cli_flush_stdout();
    }
    if (cmd[0] == '-') /* options first: the run command */
        return cmd_run(argc, argv);
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(cmd, subcommands[i].name))
            return subcommands[i].fn(argc - 1, argv + 1);
    return ig_error(IG_E_USAGE, "unknown command '%s' (run 'ignite --help')", cmd);
}
