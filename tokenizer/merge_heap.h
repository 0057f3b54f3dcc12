/* tokenizer/merge_heap.h: the binary min-heap of candidate merges that both
 * BPE flavours use. Byte-level BPE orders by merge rank, SentencePiece by
 * score (highest first, pushed as -score); ties go to the leftmost pair.
 * Entries can go stale when a neighbour merges; the encoders skip those
 * when popped. Covered by tests/tokenizer/. */
#ifndef IGNITE_TOKENIZER_MERGE_HEAP_H
#define IGNITE_TOKENIZER_MERGE_HEAP_H

#include <stdbool.h>
#include <stdint.h>

struct tok_merge_cand {
    double prio;  /* smaller merges first: a rank, or -score */
    int32_t pos;  /* index of the left symbol */
    uint32_t len; /* encoder-specific check for stale entries (SPM: bytes merged) */
};

struct tok_merge_heap {
    struct tok_merge_cand *a; /* capacity is the caller's: 3 entries per symbol suffice */
    int64_t n;
};

static inline bool tok_merge_before(struct tok_merge_cand x, struct tok_merge_cand y)
{
    return x.prio != y.prio ? x.prio < y.prio : x.pos < y.pos;
}

static inline void tok_merge_push(struct tok_merge_heap *h, struct tok_merge_cand c)
{
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!tok_merge_before(c, h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
}

/* Removes and returns the first candidate; the heap must not be empty. */
static inline struct tok_merge_cand tok_merge_pop(struct tok_merge_heap *h)
{
    struct tok_merge_cand top = h->a[0], last = h->a[--h->n];
    int64_t i = 0, n = h->n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && tok_merge_before(h->a[c + 1], h->a[c]))
            c++;
        if (!tok_merge_before(h->a[c], last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n > 0)
        h->a[i] = last;
    return top;
}

#endif
