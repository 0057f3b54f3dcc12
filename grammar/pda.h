/* grammar/pda.h: module-internal: the grammar as a pushdown automaton over
 * bytes, with every stack and every state interned so that a state is one
 * int32 and its transitions can be memoized.
 *
 * A stack is a chain of frames, each a position in the grammar's element
 * array (the next element to match in some alternative) and a parent
 * frame; frames are interned by (position, parent), so equal stacks are the
 * same id and stacks share their bottoms. A reference in last position
 * pushes no return frame (tail calls), so `x*` loops on one frame instead
 * of growing the stack. Two ids are special: GR_EMPTY, the empty stack (the
 * root rule has ended: the text is complete), and GR_BOTTOM, a stand-in for
 * "whatever the context below is" (cut states, below).
 *
 * A state is the sorted set of stacks whose top is a byte set (or which
 * are GR_EMPTY / GR_BOTTOM), i.e. the llama.cpp stacks after advancing to
 * the next terminal. State 0 (GR_DEAD) is the empty set: nothing matches.
 * Stepping a state by a byte class is computed once and remembered in the
 * state's row of the transition table.
 *
 * The cut of a state replaces the frames below the deepest frame common to
 * all its stacks by GR_BOTTOM: what happens inside a JSON string, say,
 * depends only on the string rule, not on which property the string
 * belongs to, so the cut state is the same for every string property and
 * its token mask can be reused. A cut state that reaches GR_BOTTOM has
 * left the part it knows.
 *
 * Covered by tests/grammar/test_grammar.c and test_mask.c. */
#ifndef IGNITE_GRAMMAR_PDA_H
#define IGNITE_GRAMMAR_PDA_H

#include "grammar/internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GR_EMPTY 0   /* stack id: the root rule has ended */
#define GR_BOTTOM 1  /* stack id: the unknown context of a cut state */
#define GR_DEAD 0    /* state id: no stack, no text can follow */
#define GR_UNKNOWN (-1) /* transition not computed yet */

#define GR_F_COMPLETE 1u /* holds GR_EMPTY: the text so far is complete */
#define GR_F_BOTTOM 2u   /* holds GR_BOTTOM: a cut state left the part it knows */
#define GR_F_DONE 4u     /* holds GR_EMPTY alone: complete, nothing may follow */

struct gr_pda {
    const struct grammar *g;
    /* frames (stacks): id -> position, parent, depth */
    int32_t *pos, *parent, *depth;
    int32_t n_frames, cap_frames;
    int32_t *frame_slots;     /* (pos, parent) -> id, open addressing, -1 = empty */
    uint32_t frame_mask;
    uint32_t *visited;        /* [cap_frames] stamp: expanded in the current step */
    uint32_t stamp;
    /* states: id -> its stacks pool[off[s] .. off[s] + len[s]) */
    int64_t *off;
    int32_t *len;
    int64_t *row;             /* offset of the state's transition row in trans, -1 = none */
    int32_t *cut;             /* the state's cut, -1 = not computed */
    uint8_t *flags;           /* GR_F_* of each state */
    int32_t n_states, cap_states;
    int32_t *pool;
    int64_t pool_len, pool_cap;
    int32_t *state_slots;
    uint32_t state_mask;
    int32_t *trans;           /* rows of g->n_classes next states (GR_UNKNOWN until computed) */
    int64_t trans_len, trans_cap;
    uint64_t (*set_classes)[4]; /* per byte set: the byte classes it holds, as bits */
    /* scratch for one step */
    int32_t *work, *out;
    int64_t work_cap, out_cap;
};

/* Sets up an automaton for g (nothing is computed yet). IG_OK or IG_E_NOMEM. */
int gr_pda_init(struct gr_pda *p, const struct grammar *g);
void gr_pda_free(struct gr_pda *p);
/* Forgets every frame and state except state `keep`, which gets a new id
 * (written back); memoized transitions and cuts are lost. IG_OK or
 * IG_E_NOMEM. */
int gr_pda_rebase(struct gr_pda *p, int32_t *keep);
/* Bytes held by the tables. */
size_t gr_pda_bytes(const struct gr_pda *p);

/* The state before any text. Returns its id, or -1 when out of memory. */
int32_t gr_pda_start(struct gr_pda *p);

/* The state after byte class c (of g->byte_class) from state s: memoized.
 * Returns the id (GR_DEAD when nothing matches), or -1 when out of memory. */
int32_t gr_pda_step_slow(struct gr_pda *p, int32_t s, int c);
static inline int32_t gr_pda_step(struct gr_pda *p, int32_t s, int c)
{
    int32_t t = p->row[s] >= 0 ? p->trans[p->row[s] + c] : GR_UNKNOWN;
    return t != GR_UNKNOWN ? t : gr_pda_step_slow(p, s, c);
}
/* The same without the memo (computed afresh each call; for tests that
 * check the memo). */
int32_t gr_pda_step_uncached(struct gr_pda *p, int32_t s, int c);

/* The cut of state s (s itself when nothing is below the common frame).
 * Returns its id, or -1 when out of memory. */
int32_t gr_pda_cut(struct gr_pda *p, int32_t s);

/* The stacks of s whose top byte set holds a byte >= 0x80, each cut to its
 * top frame over GR_BOTTOM, when they all have the same parent frame (a
 * JSON string's characters, say: every "characters left" count gives the
 * same top-cut state, so what a character beyond ASCII does is worked out
 * once for all of them; runs.c). GR_DEAD when there is no such stack or
 * their parents differ; -1 when out of memory. */
int32_t gr_pda_top_cut(struct gr_pda *p, int32_t s, int32_t *parent);
/* Whether byte b ends the top frame of every stack of s that reads it, and
 * each returns to frame `parent` (and one does): then s goes after b where
 * its top-cut goes after a whole character (runs.c). */
bool gr_pda_pops_to(const struct gr_pda *p, int32_t s, unsigned b, int32_t parent);
/* The state {GR_BOTTOM}: a top-cut state whose top frames all ended. -1
 * when out of memory. */
int32_t gr_pda_bottom_state(struct gr_pda *p);

static inline bool gr_pda_complete(const struct gr_pda *p, int32_t s)
{
    return p->flags[s] & GR_F_COMPLETE;
}
static inline bool gr_pda_done(const struct gr_pda *p, int32_t s)
{
    return p->flags[s] & GR_F_DONE;
}
static inline bool gr_pda_has_bottom(const struct gr_pda *p, int32_t s)
{
    return p->flags[s] & GR_F_BOTTOM;
}

/* sig[c]: the stacks of s (bit i: stack i) that read byte class c, for
 * every class; classes with equal bits lead to the same state. false
 * (nothing written) when s has more than 64 stacks. */
bool gr_pda_class_stacks(const struct gr_pda *p, int32_t s, uint64_t sig[256]);

/* Allocates state s's transition row (all GR_UNKNOWN) when it has none.
 * IG_OK or IG_E_NOMEM. */
int gr_pda_ensure_row(struct gr_pda *p, int32_t s);

#endif
