/* generate/stop.h: stop strings over streamed text.
 *
 * Text arrives in pieces (a token's bytes, whole UTF-8). Generation ends at
 * the first occurrence of any stop string in the text, wherever the pieces
 * split it (inside one token or across several); the text is cut before it.
 * While streaming, the end of the text that could still grow into a stop
 * string is held back; everything before it goes out at once.
 * Covered by tests/generate/test_stop.c. */
#ifndef IGNITE_GENERATE_STOP_H
#define IGNITE_GENERATE_STOP_H

#include <stdbool.h>
#include <stddef.h>

/* Where text goes: returns 0 to go on, non-zero to stop. */
typedef int (*stop_emit_fn)(void *user, const char *text, size_t len);

struct stop_matcher {
    const char *const *stops; /* borrowed, n of them; empty strings are ignored */
    int n;
    char *buf;                /* held-back text, then the pending piece */
    size_t len, cap;
};

/* Starts a matcher over stops[0..n) (borrowed). Nothing is allocated. */
void stop_init(struct stop_matcher *m, const char *const *stops, int n);
void stop_free(struct stop_matcher *m);

/* Adds text[0..len): emits what can no longer start a stop string. Returns
 * 0 (go on), 1 (a stop string was found: the text before it was emitted, the
 * rest dropped), -1 (emit asked to stop) or -2 (out of memory). */
int stop_push(struct stop_matcher *m, const char *text, size_t len, stop_emit_fn emit, void *user);

/* Emits the held-back text (the end of generation). Returns 0 or -1 (emit
 * asked to stop). */
int stop_finish(struct stop_matcher *m, stop_emit_fn emit, void *user);

#endif
