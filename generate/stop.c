/* generate/stop.c: finding stop strings in streamed text and holding back
 * what could still become one (generate/stop.h).
 * Covered by tests/generate/test_stop.c and, end to end in run and batch
 * against the greedy text, tests/cli/test_stop_model.py. */
#include "generate/stop.h"

#include <stdlib.h>
#include <string.h>

void stop_init(struct stop_matcher *m, const char *const *stops, int n)
{
    *m = (struct stop_matcher){.stops = stops, .n = n};
}

void stop_free(struct stop_matcher *m)
{
    free(m->buf);
    *m = (struct stop_matcher){0};
}

/* Length of the longest end of buf[0..len) that is a proper prefix of some
 * stop string: text that may still grow into one. */
static size_t held_tail(const struct stop_matcher *m)
{
    size_t best = 0;
    for (int i = 0; i < m->n; i++) {
        size_t sl = strlen(m->stops[i]);
        size_t k = sl - (sl > 0) < m->len ? sl - (sl > 0) : m->len;
        for (; k > best; k--)
            if (!memcmp(m->buf + m->len - k, m->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Offset of the first stop string in buf, or len when none. */
static size_t first_stop(const struct stop_matcher *m)
{
    size_t at = m->len;
    for (int i = 0; i < m->n; i++) {
        size_t sl = strlen(m->stops[i]);
        if (!sl || sl > m->len)
            continue;
        const char *p = memmem(m->buf, m->len, m->stops[i], sl);
        if (p && (size_t)(p - m->buf) < at)
            at = (size_t)(p - m->buf);
    }
    return at;
}

int stop_push(struct stop_matcher *m, const char *text, size_t len, stop_emit_fn emit, void *user)
{
    if (!m->n) /* nothing to look for: straight through */
        return len && emit(user, text, len) ? -1 : 0;
    if (!len) /* (a token that prints nothing) */
        return 0;
    if (m->len + len > m->cap) {
        size_t cap = (m->len + len) * 2 + 16;
        char *b = realloc(m->buf, cap);
        if (!b)
            return -2;
        m->buf = b;
        m->cap = cap;
    }
    memcpy(m->buf + m->len, text, len);
    m->len += len;
    size_t at = first_stop(m);
    if (at < m->len) {
        int r = at && emit(user, m->buf, at) ? -1 : 1;
        m->len = 0;
        return r;
    }
    size_t out = m->len - held_tail(m);
    if (out && emit(user, m->buf, out))
        return -1;
    memmove(m->buf, m->buf + out, m->len - out);
    m->len -= out;
    return 0;
}

int stop_finish(struct stop_matcher *m, stop_emit_fn emit, void *user)
{
    int r = m->len && emit(user, m->buf, m->len) ? -1 : 0;
    m->len = 0;
    return r;
}
