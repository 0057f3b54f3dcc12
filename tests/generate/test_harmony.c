/* tests/generate/test_harmony.c: harmony's channel splitter
 * (generate/harmony.h) on scripted answers in the model card's format:
 * analysis then final, a commentary preamble, tool calls (recipient in the
 * channel header and in the role header), stray text between messages,
 * unknown markers, '<' and "<|" that are not markers, a marker cut off at
 * the end, an over-long header, plain text with no headers at all. Each is
 * fed whole, one byte at a time, cut at every pair of places, and as the
 * tokens a model would send (the header split over several); every way
 * gives the channels the expected text, and no marker ever comes out. A
 * consumer that asks to stop stops the push. */
#include "generate/harmony.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

struct got {
    char text[3][512];
    size_t len[3];
    int stop_after; /* ask to stop after this many emits (0: never) */
    int emits;
};

static int take(void *user, enum harmony_channel ch, const char *text, size_t len)
{
    struct got *g = user;
    CHECK(len > 0);
    CHECK(g->len[ch] + len < sizeof g->text[ch]);
    if (g->len[ch] + len < sizeof g->text[ch]) {
        memcpy(g->text[ch] + g->len[ch], text, len);
        g->len[ch] += len;
        g->text[ch][g->len[ch]] = '\0';
    }
    return g->stop_after && ++g->emits >= g->stop_after;
}

struct script {
    const char *name;
    const char *const *pieces; /* NULL-terminated: the tokens as a model sends them */
    const char *final, *analysis, *other;
};

static void join(const struct script *s, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; s->pieces[i]; i++)
        strncat(out, s->pieces[i], cap - strlen(out) - 1);
}

static void expect(const struct script *s, const struct got *g, const char *how)
{
    const char *want[3] = {s->final, s->analysis, s->other};
    for (int c = 0; c < 3; c++) {
        CHECKF(!strcmp(g->text[c], want[c]), "%s (%s), channel %s: got \"%s\", want \"%s\"",
               s->name, how, harmony_channel_name((enum harmony_channel)c), g->text[c],
               want[c]);
        CHECKF(!strstr(g->text[c], "<|channel|>") && !strstr(g->text[c], "<|message|>"),
               "%s (%s): a marker came out", s->name, how);
    }
}

/* Feeds text cut at the given places (sorted, within len). */
static void run_cuts(const struct script *s, const char *text, const size_t *cuts, int n,
                     const char *how)
{
    struct harmony h;
    struct got g = {0};
    harmony_init(&h);
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n; i++) {
        size_t end = i < n ? cuts[i] : len;
        CHECK(harmony_push(&h, text + at, end - at, take, &g) == 0);
        at = end;
    }
    CHECK(harmony_finish(&h, take, &g) == 0);
    expect(s, &g, how);
}

static void run_script(const struct script *s)
{
    char text[1024];
    join(s, text, sizeof text);
    size_t len = strlen(text);
    run_cuts(s, text, NULL, 0, "whole");
    /* as the model's tokens */
    struct harmony h;
    struct got g = {0};
    harmony_init(&h);
    for (int i = 0; s->pieces[i]; i++)
        CHECK(harmony_push(&h, s->pieces[i], strlen(s->pieces[i]), take, &g) == 0);
    CHECK(harmony_finish(&h, take, &g) == 0);
    expect(s, &g, "tokens");
    /* one byte at a time */
    size_t *cuts = malloc(len * sizeof *cuts);
    CHECK(cuts != NULL);
    if (!cuts)
        return;
    for (size_t i = 0; i < len; i++)
        cuts[i] = i;
    run_cuts(s, text, cuts, (int)len, "bytes");
    /* every pair of places */
    int failures = test_failures_;
    for (size_t a = 0; a <= len && test_failures_ == failures; a++)
        for (size_t b = a; b <= len && test_failures_ == failures; b++) {
            size_t two[2] = {a, b};
            run_cuts(s, text, two, 2, "pair");
        }
    free(cuts);
}

#define PIECES(...) ((const char *const[]){__VA_ARGS__, NULL})

int main(void)
{
    static char long_header[600];
    /* a header of 300+ bytes: its first ones keep the channel */
    strcpy(long_header, "<|channel|>analysis ");
    memset(long_header + strlen(long_header), 'x', 320);
    strcat(long_header, "<|message|>");

    const struct script scripts[] = {
        {"analysis then final",
         PIECES("<|channel|>", "analysis", "<|message|>", "Let", " me", " think.", "<|end|>",
                "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hello",
                " world!"),
         "Hello world!", "Let me think.", ""},
        {"final only, ended by <|return|>",
         PIECES("<|channel|>", "fin", "al", "<|message|>", "4", "<|return|>"), "4", "", ""},
        {"commentary preamble is content",
         PIECES("<|channel|>commentary<|message|>", "Checking.", "<|end|>",
                "<|start|>assistant<|channel|>final<|message|>", "Done."),
         "Checking.Done.", "", ""},
        {"tool call, recipient in the channel header",
         PIECES("<|channel|>analysis<|message|>", "Need weather.", "<|end|>",
                "<|start|>assistant", "<|channel|>", "commentary", " to", "=functions",
                ".get_weather", " ", "<|constrain|>", "json", "<|message|>", "{\"city\":",
                "\"Oslo\"}", "<|call|>"),
         "", "Need weather.", "{\"city\":\"Oslo\"}"},
        {"tool call, recipient in the role header",
         PIECES(" to", "=functions.f", "<|channel|>", "commentary json", "<|message|>", "{}",
                "<|call|>"),
         "", "", "{}"},
        {"stray text between messages, unknown markers",
         PIECES("<|channel|>analysis<|message|>", "a", "<|end|>", "junk", "<|reserved_200013|>",
                "<|start|>assistant<|channel|>final<|message|>", "b", "<|foo|>", "c"),
         "bc", "a", ""},
        {"'<' and \"<|\" that are not markers",
         PIECES("<|channel|>final<|message|>", "a < b, a <", "| b, <|", "x y, <||> <|A|>",
                " <|", "done"),
         "a < b, a <| b, <|x y, <||> <|A|> <|done", "", ""},
        {"a marker cut off at the end",
         PIECES("<|channel|>final<|message|>", "ends with ", "<|ret"), "ends with <|ret", "",
         ""},
        {"an unknown channel",
         PIECES("<|channel|>secret<|message|>", "s", "<|end|>",
                "<|start|>assistant<|channel|>final<|message|>", "f"),
         "f", "", "s"},
        {"an over-long header", PIECES(long_header, "thought", "<|end|>"), "", "thought", ""},
        {"no headers at all", PIECES("Just", " text", " t", "o="), "Just text to=", "", ""},
        {"a body opened without a channel",
         PIECES("<|start|>assistant<|message|>", "hi"), "hi", "", ""},
        {"a channel without <|start|> after a body",
         PIECES("<|channel|>analysis<|message|>", "t", "<|channel|>final<|message|>", "f"), "f",
         "t", ""},
        {"only a recipient's start", PIECES(" to"), " to", "", ""},
    };
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++)
        run_script(&scripts[i]);

    /* a consumer that asks to stop: the push returns its answer at once */
    struct harmony h;
    struct got g = {.stop_after = 1};
    harmony_init(&h);
    const char *t = "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
                    "<|channel|>final<|message|>answer";
    CHECK(harmony_push(&h, t, strlen(t), take, &g) == 1);
    CHECK(!strcmp(g.text[HARMONY_ANALYSIS], "think") && g.len[HARMONY_FINAL] == 0);

    printf("test_harmony: %d checks, %d failed\n", test_checks_, test_failures_);
    return test_failures_ != 0;
}
