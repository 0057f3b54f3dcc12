/* tests/generate/test_stop.c: stop strings over streamed text against a
 * plain reference (cut the whole text at the first occurrence of any stop
 * string): texts split into pieces at every possible place and at random,
 * stop strings inside one piece, across two and across many, overlapping
 * stop strings, prefixes of a stop string held back and then released, an
 * empty stop list, and a consumer that asks to stop. What went out before
 * the end never contains a byte past the cut. */
#include "generate/stop.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

struct sink {
    char buf[512];
    size_t len;
    size_t limit; /* ask to stop once this many bytes arrived (0: never) */
};

static int take(void *user, const char *text, size_t len)
{
    struct sink *s = user;
    CHECK(s->len + len < sizeof s->buf);
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    return s->limit && s->len >= s->limit;
}

/* The reference: text cut at the first occurrence of any stop string. */
static size_t cut_at(const char *text, const char *const *stops, int n, int *found)
{
    size_t at = strlen(text);
    *found = 0;
    for (int i = 0; i < n; i++) {
        const char *p = strstr(text, stops[i]);
        if (p && (size_t)(p - text) <= at) {
            at = (size_t)(p - text);
            *found = 1;
        }
    }
    return at;
}

/* Streams `text` in pieces ending at cuts[0..n_cuts) and checks the result. */
static void stream(const char *text, const char *const *stops, int n_stops, const size_t *cuts,
                   int n_cuts, const char *what)
{
    struct stop_matcher m;
    struct sink s = {.len = 0};
    stop_init(&m, stops, n_stops);
    int r = 0;
    size_t prev = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts && r == 0; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        r = stop_push(&m, text + prev, end - prev, take, &s);
        prev = end;
    }
    if (r == 0)
        CHECK(stop_finish(&m, take, &s) == 0);
    int found;
    size_t want = cut_at(text, stops, n_stops, &found);
    CHECKF(r == (found ? 1 : 0), "%s: stop_push returned %d, want %d", what, r, found);
    CHECKF(s.len == want && !memcmp(s.buf, text, want), "%s: got %.*s, want %.*s", what,
           (int)s.len, s.buf, (int)want, text);
    stop_free(&m);
}

int main(void)
{
    static const char *const stops[] = {"STOP", "\n\n", "ab"};
    static const char *const texts[] = {
        "hello world, no stop here at all",
        "hello STOP world",
        "one\ntwo\n\nthree",
        "STOPSTOP",
        "xxSTOxxSTOP",
        "trailing ST",        /* a held-back prefix released at the end */
        "aab",                /* "ab" after a false start */
        "\xc3\xa9t\xc3\xa9 STOP", /* multi-byte characters before the cut */
    };
    uint64_t rng = 42;
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        const char *text = texts[t];
        size_t len = strlen(text);
        /* one piece; every single cut; every byte its own piece */
        stream(text, stops, 3, NULL, 0, text);
        for (size_t c = 1; c < len; c++)
            stream(text, stops, 3, &c, 1, text);
        size_t all[64];
        for (size_t c = 1; c < len && c <= 64; c++)
            all[c - 1] = c;
        stream(text, stops, 3, all, (int)(len - 1), text);
        /* random pieces */
        for (int k = 0; k < 50; k++) {
            size_t cuts[16];
            int n = 0;
            size_t at = 0;
            while (n < 16) {
                at += 1 + test_rand_u64(&rng) % 4;
                if (at >= len)
                    break;
                cuts[n++] = at;
            }
            stream(text, stops, 3, cuts, n, text);
        }
        /* no stop strings: everything goes through */
        stream(text, NULL, 0, NULL, 0, "no stops");
    }
    /* A consumer that stops: -1, and nothing after. */
    struct stop_matcher m;
    struct sink s = {.limit = 3};
    stop_init(&m, stops, 3);
    CHECK(stop_push(&m, "xyzw", 4, take, &s) == -1 && s.len == 4);
    stop_free(&m);
    return test_summary("test_stop");
}
