/* tests/fuzz/fuzz_batch_line.c: libFuzzer entry for `ignite batch`'s request
 * parser (cli/batch_request.c) and `bench --requests-file`'s line parser
 * (cli/bench_reqfile.c). Every line of the input goes through the first as
 * JSON and as a plain prompt, and through the second; a line that parses
 * must hold what the engine relies on: a non-empty prompt of valid UTF-8
 * without NUL, options and lengths in their ranges, stop strings that are
 * non-empty. Any sanitizer report or failed
 * check is a parser bug. fuzz_replay.c runs it over tests/fuzz/corpus_batch
 * in ordinary builds. */
#include "cli/batch_request.h"
#include "cli/bench_reqfile.h"
#include "cli/cli.h"
#include "core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const struct batch_request *r)
{
    const struct gen_cli *o = &r->opts;
    size_t n = strlen(r->prompt);
    if (!n || !cli_utf8_valid(r->prompt, n, NULL) || (o->n_predict == 0) ||
        o->n_predict < -1 || !(o->sp.temperature >= 0) || o->sp.top_k < 0 ||
        !(o->sp.top_p > 0 && o->sp.top_p <= 1) || !(o->sp.min_p >= 0 && o->sp.min_p <= 1) ||
        !(o->sp.repeat_penalty > 0) || o->sp.repeat_last_n < 0 || o->seed < -1 ||
        o->n_stop < 0 || o->n_stop > GEN_CLI_MAX_STOP || (o->system && !o->chat))
        abort();
    for (int i = 0; i < o->n_stop; i++)
        if (!o->stop[i][0] || !cli_utf8_valid(o->stop[i], strlen(o->stop[i]), NULL))
            abort();
}

/* A --requests-file line: a prompt or a length, lengths in [1, 2^20]. */
static void check_bench_line(const char *p, size_t len, char *msg)
{
    struct bench_line l = {0};
    msg[0] = '\0';
    if (bench_parse_request_line(p, len, 1, &l) == IG_OK) {
        size_t n = l.prompt ? strlen(l.prompt) : 0;
        if (!l.prompt == !l.input_len || (l.prompt && !cli_utf8_valid(l.prompt, n, NULL)) ||
            (l.prompt && !n) || l.input_len < 0 || l.input_len > (1 << 20) ||
            l.output_len < 0 || l.output_len > (1 << 20))
            abort();
    } else if (!msg[0] || strchr(msg, '\n')) {
        abort();
    }
    free(l.prompt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gen_cli defaults;
    gen_cli_defaults(&defaults);
    char msg[1024];
    ig_error_capture(msg, sizeof msg);
    const char *p = (const char *)data, *end = p + size;
    while (p <= end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        for (int plain = 0; plain < 2; plain++) {
            struct batch_request r;
            msg[0] = '\0';
            if (batch_request_parse(p, len, plain, &defaults, &r) == IG_OK) {
                check_request(&r);
                batch_request_free(&r);
            } else if (!msg[0] || strchr(msg, '\n')) {
                abort(); /* a refusal always says why, in one line */
            }
        }
        check_bench_line(p, len, msg);
        if (!nl)
            break;
        p = nl + 1;
    }
    ig_error_capture(NULL, 0);
    return 0;
}
