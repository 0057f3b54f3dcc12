/* grammar/matcher.h: module-internal: a sequence's matcher as mask.c (the
 * masks, the API) and runs.c (subtrees decided whole) share it. */
#ifndef IGNITE_GRAMMAR_MATCHER_H
#define IGNITE_GRAMMAR_MATCHER_H

#include "grammar/internal.h"
#include "grammar/pda.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct chain;

/* Masks of n_words each in blocks of GR_POOL_BLOCK that never move: a new
 * mask costs its own bytes, never a copy of the others (a realloc that
 * doubled a pool of masks was a 0.1 ms stall on a first mask). */
#define GR_POOL_BLOCK 16
struct gr_mask_pool {
    uint64_t **blocks;
    int32_t n, n_blocks, cap_blocks;
};

/* One sequence: its state in the automaton, and the tables its masks come
 * from (per state id, grown by gr_cover_states). */
struct grammar_matcher {
    const struct grammar *g;
    const struct grammar_vocab *gv;
    struct gr_pda pda;
    int32_t state;
    bool allow_eog;
    bool at_start;          /* no text yet: the first token's piece rule applies */
    int64_t last_allowed;
    int64_t n_words;        /* 64-bit words in a mask */
    size_t budget;
    /* per state id: its mask in masks[], and (cut states) its cut mask */
    int32_t *exact_of, *cut_of;
    int32_t n_of;
    struct gr_mask_pool masks; /* exact masks */
    struct gr_mask_pool cuts;  /* cut masks */
    int64_t *roots_off;     /* [cuts.n + 1] cut mask k's trie nodes: roots[roots_off[k]..roots_off[k+1]) */
    int32_t cap_roots_off;
    int32_t *roots;
    int64_t n_roots, cap_roots;
    /* per state id: how it reads plain characters (runs.c) */
    struct chain *chain;
    /* a walk's subtrees decided whole: [begin, end) ranges of trie order */
    int32_t *ranges;        /* pairs */
    int64_t n_allowed_r, n_denied_r, cap_ranges; /* allowed from the front, denied from the back */
    int32_t *len_ranges;    /* triples: [begin, end) of trie order, and the most characters allowed */
    int64_t n_len_r, cap_len_r;
    /* how often the shortcuts ran, for tests: walks that took JSON string
     * content from gv->plain_upto, and characters beyond ASCII decided on a
     * top-cut state */
    int64_t n_plain_walks, n_top_cut;
    /* walk scratch, one entry per depth */
    int32_t *wstate;
    int64_t *wrow;
    uint64_t *scratch;      /* [n_words] */
};

/* How a state reads "plain" characters, for skipping trie subtrees whole:
 * the ASCII bytes in `plain` all lead to the same next state `next` (and,
 * when `nonascii`, so does every valid character beyond ASCII). A run of
 * such characters keeps being read that way for `run[0]` characters
 * (ASCII only) or `run[1]` (beyond ASCII too): INT32_MAX inside a JSON
 * string, k in a string with k characters left before its maximum. A
 * subtree whose suffixes use only such characters, at most that many, is
 * allowed whole. Computed on demand: `nonascii` and the runs cost steps. */
struct chain {
    uint64_t plain[2];
    int32_t next;      /* GR_DEAD: no plain characters */
    int32_t run[2];    /* -1: not computed; -2: being computed */
    int8_t nonascii;   /* -1: not computed */
    int8_t end_dead[2];/* after a finite run, no plain character is read at all; -1: unknown */
    bool have_base;    /* plain and next computed */
};

#define CHAIN_MAX 128 /* runs are followed this far at most (tokens are shorter) */

/* exact_of, cut_of and chain cover every state id the automaton has.
 * IG_OK or IG_E_NOMEM. */
int gr_cover_states(struct grammar_matcher *m);

enum gr_skip { GR_SKIP_NO, GR_SKIP_ALL, GR_SKIP_BY_LENGTH };

/* How trie node i's subtree can be decided without walking it, from state
 * s (the state at i's parent): GR_SKIP_ALL when all its characters from
 * i's byte on are plain for s and no more of them than s's run;
 * GR_SKIP_BY_LENGTH (*limit: the run) when they are plain but some tokens
 * are longer and the run's end reads no plain character: then exactly the
 * tokens of at most *limit characters are allowed. *err on out of memory
 * (runs.c). */
enum gr_skip gr_skip_whole(struct grammar_matcher *m, int32_t i, int32_t s, int32_t *limit,
                           int *err);

/* When state s reads JSON string content (its plain characters are
 * exactly those of GV_JSON_PLAIN0/1 and every character beyond ASCII) for a
 * run of k characters, after which none of them is read: the row of
 * gv->plain_upto that is exactly the content tokens s allows (k, or
 * GV_PLAIN_K when the run is longer than any such token). -1 otherwise, or
 * with *err set on out of memory (runs.c). */
int32_t gr_plain_limit(struct grammar_matcher *m, int32_t s, int *err);

#endif
