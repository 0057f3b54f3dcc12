/* tests/emu/pdl_hide.h: runs a kernel as a programmatic dependent launch
 * (IGNITE_PDL=1) with the inputs the previous kernel would write hidden
 * from each block until its threads have met at griddepcontrol.wait
 * (emu/pdl_hooks.h): they read as all-ones bytes (NaN in f16 and f32)
 * before, as themselves after. A kernel that reads one before its wait
 * computes from NaN, so its output differs from the plain launch's.
 *   struct pdl_hide h = {0};
 *   pdl_hide_add(&h, x, bytes); ...      the inputs, as they are now
 *   pdl_hide_on(&h);  launch;  pdl_hide_off(&h);
 * or PDL_PAIR below: the launch plain and dependent, the same bits.
 * For emulated tests (C), header-only. */
#ifndef IGNITE_TESTS_EMU_PDL_HIDE_H
#define IGNITE_TESTS_EMU_PDL_HIDE_H

#include "emu/pdl_hooks.h"

#include <stdlib.h>
#include <string.h>

#define PDL_HIDE_MAX 8

struct pdl_hide {
    int n;
    void *p[PDL_HIDE_MAX], *keep[PDL_HIDE_MAX];
    size_t bytes[PDL_HIDE_MAX];
    int hides, shows;
};

/* [p, p + bytes) is hidden from each block until its wait. */
static inline void pdl_hide_add(struct pdl_hide *h, void *p, size_t bytes)
{
    if (!p || !bytes || h->n == PDL_HIDE_MAX)
        abort();
    h->p[h->n] = p;
    h->bytes[h->n] = bytes;
    h->keep[h->n] = malloc(bytes);
    h->n++;
}

/* A block starts: what is there now (earlier blocks' outputs included,
 * where the kernel updates an input in place, as y with beta) is kept and
 * shown again at its wait. */
static inline void pdl_hide_poison(void *c)
{
    struct pdl_hide *h = (struct pdl_hide *)c;
    for (int i = 0; i < h->n; i++) {
        memcpy(h->keep[i], h->p[i], h->bytes[i]);
        memset(h->p[i], 0xff, h->bytes[i]);
    }
    h->hides++;
}

static inline void pdl_hide_show(void *c)
{
    struct pdl_hide *h = (struct pdl_hide *)c;
    for (int i = 0; i < h->n; i++)
        memcpy(h->p[i], h->keep[i], h->bytes[i]);
    h->shows++;
}

static inline void pdl_hide_on(struct pdl_hide *h)
{
    const struct ig_emu_pdl_hooks hooks = {pdl_hide_poison, pdl_hide_show, h};
    ig_emu_set_pdl_hooks(&hooks);
    setenv("IGNITE_PDL", "1", 1);
}

/* Back to plain launches (each block's end showed its inputs again). */
static inline void pdl_hide_off(struct pdl_hide *h)
{
    unsetenv("IGNITE_PDL");
    ig_emu_set_pdl_hooks(NULL);
    for (int i = 0; i < h->n; i++)
        free(h->keep[i]);
    h->n = 0;
}

/* A launch run twice into `out` (bytes): plainly, then as a dependent
 * launch whose inputs h holds are hidden from each block until its wait
 * (the kernel's in-place inputs put back first by `restore`). Same bits,
 * every block hidden and shown, at least min_blocks of them. CHECKF: the
 * includer's tests/test.h. */
#define PDL_PAIR(what, h, out, bytes, restore, min_blocks, call)                          \
    do {                                                                                \
        unsigned char *plain_ = malloc(bytes);                                          \
        (h)->hides = (h)->shows = 0;                                                    \
        restore;                                                                        \
        CHECKF((call) == 0, "%s: plain rc", what);                                      \
        memcpy(plain_, out, bytes);                                                     \
        memset(out, 0x5a, bytes); /* then the in-place inputs back */                   \
        restore;                                                                        \
        pdl_hide_on(h);                                                                 \
        int rc_ = (call);                                                               \
        int hides_ = (h)->hides, shows_ = (h)->shows;                                   \
        pdl_hide_off(h);                                                                \
        CHECKF(rc_ == 0 && hides_ == shows_ && hides_ >= (min_blocks),                  \
               "%s pdl: rc %d, %d blocks hidden, %d shown", what, rc_, hides_, shows_); \
        CHECKF(memcmp(plain_, out, bytes) == 0, "%s pdl: differs from the plain launch", \
               what);                                                                   \
        free(plain_);                                                                   \
    } while (0)

#endif
