/* cli/channels.c: where a harmony chat's channels go (run, chat, batch):
 * the final channel to the command's own sink (stdout, the --json text),
 * the others to stderr with --verbose, or dropped; the analysis text and
 * the answer as the model wrote it (markers included) kept for --json and
 * batch lines. The splitting itself is generate/harmony.c's.
 * Covered by tests/cli/test_harmony_model.py. */
#include "cli/run.h"

#include "cli/cli.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

void run_channels_init(struct run_channels *c, bool on, bool verbose,
                       int (*final)(void *user, const char *text, size_t len), void *user)
{
    *c = (struct run_channels){.on = on, .verbose = verbose, .final = final, .user = user};
    harmony_init(&c->h);
}

void run_channels_free(struct run_channels *c)
{
    free(c->analysis.s);
    free(c->raw.s);
    c->analysis = c->raw = (struct ig_str){0};
}

/* stderr's line for the channel in progress: "[analysis] " before its text,
 * a newline when another channel takes over. */
static void verbose_switch(struct run_channels *c, enum harmony_channel ch)
{
    bool shown = ch != HARMONY_FINAL;
    if (c->err_open && (!shown || ch != c->err_ch)) {
        fputc('\n', stderr);
        c->err_open = false;
    }
    if (shown && !c->err_open) {
        fprintf(stderr, "[%s] ", harmony_channel_name(ch));
        c->err_open = true;
        c->err_ch = ch;
    }
}

static int emit(void *user, enum harmony_channel ch, const char *text, size_t len)
{
    struct run_channels *c = user;
    if (c->verbose)
        verbose_switch(c, ch);
    if (ch == HARMONY_FINAL)
        return c->final(c->user, text, len);
    if (ch == HARMONY_ANALYSIS && !ig_str_putn(&c->analysis, text, len))
        c->nomem = true;
    if (c->verbose) {
        fwrite(text, 1, len, stderr);
        fflush(stderr);
    }
    return 0;
}

int run_channels_text(struct run_channels *c, const char *text, size_t len)
{
    if (!c->on)
        return c->final(c->user, text, len);
    if (!ig_str_putn(&c->raw, text, len))
        c->nomem = true;
    return harmony_push(&c->h, text, len, emit, c);
}

int run_channels_finish(struct run_channels *c)
{
    if (!c->on)
        return 0;
    int rc = harmony_finish(&c->h, emit, c);
    if (c->err_open) {
        fputc('\n', stderr);
        c->err_open = false;
    }
    return rc;
}

/* key: text[0..len) as a JSON string (invalid UTF-8 repaired). */
static bool add_text(cJSON *o, const char *key, const struct ig_str *t)
{
    char *s = cli_utf8_repair(t->s ? t->s : "", t->len);
    bool ok = s && cJSON_AddStringToObject(o, key, s);
    free(s);
    return ok;
}

int run_channels_json(cJSON *o, const struct run_channels *c)
{
    if (!c->on)
        return IG_OK;
    if (c->nomem)
        return ig_error(IG_E_NOMEM, "out of memory keeping the answer's channels");
    return add_text(o, "analysis", &c->analysis) && add_text(o, "raw", &c->raw)
               ? IG_OK
               : ig_error(IG_E_NOMEM, "out of memory building the JSON result");
}
