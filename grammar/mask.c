/* grammar/mask.c: one sequence's matcher: the current state, the token
 * masks, and following the chosen tokens.
 *
 * A mask is a walk of the token trie (vocab.c) from the current state: each
 * trie node steps the automaton by one byte (memoized in pda.c), a dead
 * state skips the node's whole subtree, and every token whose node is
 * reached alive is allowed. Masks are remembered per state. Walks are cut
 * short by reuse: the mask of a state's cut (pda.h) is computed once for
 * all the contexts the cut stands for; it decides every token that stays
 * inside the part of the stacks the cut keeps, and lists the trie nodes
 * where a token leaves it (reaches GR_BOTTOM). Only those nodes' subtrees
 * are walked again from the real state. Inside a JSON string, say, the cut
 * mask is the whole vocabulary minus a few hundred tokens with a quote in
 * them, computed once per run for every string property. Subtrees whose
 * tokens a state reads as a run of "plain" characters are decided without
 * walking them (runs.c); inside a JSON string (k characters before its
 * maxLength, or unbounded) the tokens that are string content come from the
 * vocabulary's mask for k at once, and only the other trie nodes are
 * walked. The masks' bits: whichever of the allowed and the
 * denied side is smaller is written.
 *
 * When the tables outgrow GR_MATCHER_BUDGET they are dropped and rebuilt
 * from the current state.
 * Covered by tests/grammar/test_mask.c (every token against a byte-by-byte
 * check on random states) and the generation tests. */
#include "grammar/matcher.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GR_MATCHER_BUDGET ((size_t)512 << 20)

static int nomem(void) { return ig_error(IG_E_NOMEM, "grammar: out of memory"); }

static inline void set_bit(uint64_t *bits, int32_t id) { bits[id >> 6] |= 1ull << (id & 63); }

/* Sets the bits of trie node i's own tokens. */
static inline void mark_node(const struct grammar_vocab *gv, int32_t i, uint64_t *bits)
{
    for (int32_t k = gv->nodes[i].tok_begin; k < gv->nodes[i + 1].tok_begin; k++)
        set_bit(bits, gv->order[k]);
}

/* ---- caches ------------------------------------------------------------------ */

int gr_cover_states(struct grammar_matcher *m)
{
    int32_t need = m->pda.n_states;
    if (need <= m->n_of)
        return IG_OK;
    int32_t n = m->n_of ? m->n_of : 1024;
    while (n < need)
        n *= 2;
    int32_t *e = realloc(m->exact_of, (size_t)n * sizeof *e);
    if (e)
        m->exact_of = e;
    int32_t *c = realloc(m->cut_of, (size_t)n * sizeof *c);
    if (c)
        m->cut_of = c;
    struct chain *ch = realloc(m->chain, (size_t)n * sizeof *ch);
    if (ch)
        m->chain = ch;
    if (!e || !c || !ch)
        return nomem();
    memset(e + m->n_of, 0xff, (size_t)(n - m->n_of) * sizeof *e);
    memset(c + m->n_of, 0xff, (size_t)(n - m->n_of) * sizeof *c);
    for (int32_t i = m->n_of; i < n; i++)
        ch[i] = (struct chain){.run = {-1, -1}, .nonascii = -1, .end_dead = {-1, -1}};
    m->n_of = n;
    return IG_OK;
}

static inline uint64_t *pool_at(const struct gr_mask_pool *p, int32_t i, int64_t n_words)
{
    return p->blocks[i / GR_POOL_BLOCK] + (size_t)(i % GR_POOL_BLOCK) * (size_t)n_words;
}

/* A zeroed mask in pool p; returns its index or -1. */
static int32_t pool_new(struct gr_mask_pool *p, int64_t n_words)
{
    if (p->n == p->n_blocks * GR_POOL_BLOCK) {
        if (p->n_blocks == p->cap_blocks) {
            int32_t c = p->cap_blocks ? 2 * p->cap_blocks : 16;
            uint64_t **b = realloc(p->blocks, (size_t)c * sizeof *b);
            if (!b)
                return -1;
            p->blocks = b;
            p->cap_blocks = c;
        }
        p->blocks[p->n_blocks] = malloc((size_t)GR_POOL_BLOCK * (size_t)n_words * sizeof **p->blocks);
        if (!p->blocks[p->n_blocks])
            return -1;
        p->n_blocks++;
    }
    memset(pool_at(p, p->n, n_words), 0, (size_t)n_words * sizeof **p->blocks);
    return p->n++;
}

static void pool_free(struct gr_mask_pool *p)
{
    for (int32_t i = 0; i < p->n_blocks; i++)
        free(p->blocks[i]);
    free(p->blocks);
}

static size_t matcher_bytes(const struct grammar_matcher *m)
{
    return gr_pda_bytes(&m->pda) +
           ((size_t)m->masks.n_blocks + (size_t)m->cuts.n_blocks) * GR_POOL_BLOCK * (size_t)m->n_words * 8 +
           (size_t)m->cap_roots * 4 + (size_t)m->n_of * (8 + sizeof(struct chain));
}

/* Drops every table when they hold more than the budget; the state
 * survives under a new id. */
static int keep_in_budget(struct grammar_matcher *m)
{
    if (matcher_bytes(m) <= m->budget)
        return IG_OK;
    int st = gr_pda_rebase(&m->pda, &m->state);
    if (st != IG_OK)
        return st;
    if (m->n_of) {
        memset(m->exact_of, 0xff, (size_t)m->n_of * sizeof *m->exact_of);
        memset(m->cut_of, 0xff, (size_t)m->n_of * sizeof *m->cut_of);
    }
    for (int32_t i = 0; i < m->n_of; i++)
        m->chain[i] = (struct chain){.run = {-1, -1}, .nonascii = -1, .end_dead = {-1, -1}};
    m->masks.n = m->cuts.n = 0; /* the blocks are kept for reuse */
    m->n_roots = 0;
    return IG_OK;
}

/* ---- walks ------------------------------------------------------------------- */

static int push_root(struct grammar_matcher *m, int32_t node)
{
    if (m->n_roots == m->cap_roots) {
        int64_t c = m->cap_roots ? 2 * m->cap_roots : 256;
        int32_t *p = realloc(m->roots, (size_t)c * sizeof *p);
        if (!p)
            return nomem();
        m->roots = p;
        m->cap_roots = c;
    }
    m->roots[m->n_roots++] = node;
    return IG_OK;
}

/* Records the tokens of trie node i's subtree as allowed (or denied)
 * whole; applied by finish_walk. */
static int push_range(struct grammar_matcher *m, int32_t i, bool allowed)
{
    if ((m->n_allowed_r + m->n_denied_r + 1) * 2 > m->cap_ranges) {
        int64_t cap = m->cap_ranges ? 2 * m->cap_ranges : 1024;
        int32_t *r = malloc((size_t)cap * sizeof *r);
        if (!r)
            return nomem();
        /* allowed pairs at the front, denied pairs at the back */
        if (m->n_allowed_r)
            memcpy(r, m->ranges, (size_t)m->n_allowed_r * 2 * sizeof *r);
        if (m->n_denied_r)
            memcpy(r + cap - m->n_denied_r * 2, m->ranges + m->cap_ranges - m->n_denied_r * 2,
                   (size_t)m->n_denied_r * 2 * sizeof *r);
        free(m->ranges);
        m->ranges = r;
        m->cap_ranges = cap;
    }
    const struct gv_node *nd = m->gv->nodes;
    int32_t *at = allowed ? m->ranges + 2 * m->n_allowed_r++
                          : m->ranges + m->cap_ranges - 2 * ++m->n_denied_r;
    at[0] = nd[i].tok_begin;
    at[1] = nd[nd[i].next].tok_begin;
    return IG_OK;
}

/* Records trie node i's subtree as decided by token length: the tokens of
 * at most `limit` characters after i's parent are allowed. */
static int push_len_range(struct grammar_matcher *m, int32_t i, int32_t limit)
{
    if (m->n_len_r == m->cap_len_r) {
        int64_t cap = m->cap_len_r ? 2 * m->cap_len_r : 256;
        int32_t *r = realloc(m->len_ranges, (size_t)cap * 3 * sizeof *r);
        if (!r)
            return nomem();
        m->len_ranges = r;
        m->cap_len_r = cap;
    }
    const struct gv_node *nd = m->gv->nodes;
    int32_t *at = m->len_ranges + 3 * m->n_len_r++;
    at[0] = nd[i].tok_begin;
    at[1] = nd[nd[i].next].tok_begin;
    at[2] = limit + m->gv->incl[i].parent_chars;
    return IG_OK;
}

/* A length range under a child of the root with a limit below
 * GV_MAX_CHARS - 1 is read from the sorted index: its first *n_short
 * sorted positions are the allowed tokens. */
static bool sorted_range(const struct grammar_vocab *gv, const int32_t *l, int32_t *n_short)
{
    if (l[2] >= GV_MAX_CHARS - 1 || l[0] >= gv->n_order)
        return false;
    /* the root's child whose tokens these are: only all of its tokens are
     * indexed (a range of the same size under it is the same range) */
    const int32_t *upto = gv->chars_upto[gv->pieces[gv->piece_off[gv->order[l[0]]]]];
    if (l[1] - l[0] != upto[GV_MAX_CHARS - 1])
        return false;
    *n_short = upto[l[2]]; /* limits count characters from the token's start */
    return true;
}

/* Applies the recorded ranges to bits. A walk from the trie's root (whole:
 * every text token is in an allowed or a denied range or was marked) sets
 * whichever side is smaller: inside a JSON string nearly everything is
 * allowed and only the denied tokens are touched. */
static void finish_walk(struct grammar_matcher *m, uint64_t *bits, bool whole)
{
    const struct grammar_vocab *gv = m->gv;
    const int32_t *order = gv->order, *by = gv->by_chars;
    const uint16_t *chars = gv->chars;
    int64_t allowed = 0, denied = 0;
    for (int64_t r = 0; r < m->n_allowed_r; r++)
        allowed += m->ranges[2 * r + 1] - m->ranges[2 * r];
    const int32_t *den = m->ranges + m->cap_ranges - 2 * m->n_denied_r;
    for (int64_t r = 0; r < m->n_denied_r; r++)
        denied += den[2 * r + 1] - den[2 * r];
    for (int64_t r = 0; r < m->n_len_r; r++) {
        int32_t *l = m->len_ranges + 3 * r, n_short;
        if (sorted_range(gv, l, &n_short)) {
            allowed += n_short;
            denied += l[1] - l[0] - n_short;
        } else { /* scanned whole either way */
            allowed += l[1] - l[0];
            denied += l[1] - l[0];
        }
    }
    if (whole && denied < allowed) {
        for (int64_t w = 0; w < m->n_words; w++)
            bits[w] |= gv->text_bits[w];
        for (int64_t r = 0; r < m->n_denied_r; r++)
            for (int32_t k = den[2 * r]; k < den[2 * r + 1]; k++)
                bits[order[k] >> 6] &= ~(1ull << (order[k] & 63));
        for (int64_t r = 0; r < m->n_len_r; r++) {
            const int32_t *l = m->len_ranges + 3 * r;
            int32_t n_short;
            if (sorted_range(gv, l, &n_short)) {
                for (int32_t k = l[0] + n_short; k < l[1]; k++)
                    bits[order[by[k]] >> 6] &= ~(1ull << (order[by[k]] & 63));
                continue;
            }
            for (int32_t k = l[0]; k < l[1]; k++)
                if (chars[k] > l[2])
                    bits[order[k] >> 6] &= ~(1ull << (order[k] & 63));
        }
    } else {
        for (int64_t r = 0; r < m->n_allowed_r; r++)
            for (int32_t k = m->ranges[2 * r]; k < m->ranges[2 * r + 1]; k++)
                set_bit(bits, order[k]);
        for (int64_t r = 0; r < m->n_len_r; r++) {
            const int32_t *l = m->len_ranges + 3 * r;
            int32_t n_short;
            if (sorted_range(gv, l, &n_short)) {
                for (int32_t k = l[0]; k < l[0] + n_short; k++)
                    set_bit(bits, order[by[k]]);
                continue;
            }
            for (int32_t k = l[0]; k < l[1]; k++)
                if (chars[k] <= l[2])
                    set_bit(bits, order[k]);
        }
    }
    m->n_allowed_r = m->n_denied_r = m->n_len_r = 0;
}

/* Sets in bits every token below trie node `top` (not top's own) whose
 * bytes after top's prefix keep state s alive. cut_mode: a node whose state
 * reaches GR_BOTTOM is pushed to the roots list instead of walked.
 * From the root, a state that reads JSON string content (gr_plain_limit:
 * inside a string, k characters before its maxLength) takes its content
 * tokens from gv->plain_upto at once, and the walk skips every subtree of
 * content tokens only (gv->plain_sub): it visits the tokens with a quote, a
 * backslash or a control character, and their prefixes. */
static int walk(struct grammar_matcher *m, int32_t top, int32_t s, uint64_t *bits, bool cut_mode)
{
    const struct grammar_vocab *gv = m->gv;
    const struct gv_node *nd = gv->nodes;
    const uint8_t *cls = m->g->byte_class;
    struct gr_pda *p = &m->pda;
    int d0 = nd[top].depth;
    m->wstate[d0] = s;
    m->wrow[d0] = p->row[s];
    int err = 0;
    int32_t plain = top == 0 ? gr_plain_limit(m, s, &err) : -1;
    if (err)
        return IG_E_NOMEM;
    if (plain >= 0) {
        m->n_plain_walks++;
        const uint64_t *row = gv->plain_upto + (size_t)plain * (size_t)m->n_words;
        for (int64_t w = 0; w < m->n_words; w++)
            bits[w] |= row[w];
    }
    /* a plain walk goes over the nodes that are not all content alone
     * (gv->impure); a node of thousands of children (' ') has a few such */
    const int32_t *list = plain >= 0 ? gv->impure : NULL;
    for (int32_t q = list ? 0 : top + 1, end = list ? gv->n_impure : nd[top].next; q < end;) {
        int32_t i = list ? list[q] : q, past = list ? gv->impure_next[q] : nd[i].next;
        int d = nd[i].depth;
        int c = cls[nd[i].byte];
        if (m->wrow[d - 1] < 0) { /* the parent's first child: give it a row */
            if (gr_pda_ensure_row(p, m->wstate[d - 1]) != IG_OK)
                return IG_E_NOMEM;
            m->wrow[d - 1] = p->row[m->wstate[d - 1]];
        }
        int32_t t = p->trans[m->wrow[d - 1] + c];
        if (t == GR_UNKNOWN && (t = gr_pda_step_slow(p, m->wstate[d - 1], c)) < 0)
            return IG_E_NOMEM;
        if (t == GR_DEAD) { /* first: a dead byte needs no run of its parent state */
            if (push_range(m, i, false) != IG_OK)
                return IG_E_NOMEM;
            q = past;
            continue;
        }
        if (nd[i].next > i + 1) { /* a subtree: maybe decided whole */
            int32_t limit;
            enum gr_skip how = gr_skip_whole(m, i, m->wstate[d - 1], &limit, &err);
            if (err)
                return IG_E_NOMEM;
            if (how != GR_SKIP_NO) {
                if ((how == GR_SKIP_ALL ? push_range(m, i, true) : push_len_range(m, i, limit)) != IG_OK)
                    return IG_E_NOMEM;
                q = past;
                continue;
            }
        }
        if (cut_mode && gr_pda_has_bottom(p, t)) { /* not decided here: denied for now */
            if (push_root(m, i) != IG_OK || push_range(m, i, false) != IG_OK)
                return IG_E_NOMEM;
            q = past;
            continue;
        }
        m->wstate[d] = t;
        m->wrow[d] = p->row[t];
        mark_node(gv, i, bits);
        q++;
    }
    /* skipped content subtrees are in no range: only a plain walk is whole */
    finish_walk(m, bits, top == 0 && plain < 0);
    return IG_OK;
}

/* The state after the bytes s[0..n) from state st (GR_DEAD when they do
 * not match); -1 when out of memory. */
static int32_t run_bytes(struct grammar_matcher *m, int32_t st, const uint8_t *s, int64_t n)
{
    for (int64_t i = 0; i < n && st > GR_DEAD; i++)
        st = gr_pda_step(&m->pda, st, m->g->byte_class[s[i]]);
    return st;
}

/* The cut mask of cut state t, computed on first use; its index or -1. */
static int32_t cut_mask(struct grammar_matcher *m, int32_t t)
{
    if (m->cut_of[t] >= 0)
        return m->cut_of[t];
    if (m->cuts.n + 1 >= m->cap_roots_off) {
        int32_t c = m->cap_roots_off ? 2 * m->cap_roots_off : 16;
        int64_t *o = realloc(m->roots_off, ((size_t)c + 1) * sizeof *o);
        if (!o)
            return nomem(), -1;
        m->roots_off = o;
        m->cap_roots_off = c;
    }
    int32_t k = pool_new(&m->cuts, m->n_words);
    if (k < 0)
        return nomem(), -1;
    uint64_t *bits = pool_at(&m->cuts, k, m->n_words);
    m->roots_off[k] = m->n_roots;
    if (walk(m, 0, t, bits, true) != IG_OK)
        return -1;
    m->roots_off[k + 1] = m->n_roots;
    if (gr_cover_states(m) != IG_OK)
        return -1;
    m->cut_of[t] = k;
    return k;
}

/* The exact mask of state s (end-of-generation ids included when allowed),
 * computed on first use. Returns a pointer into the cache, or NULL. */
static const uint64_t *exact_mask(struct grammar_matcher *m, int32_t s)
{
    if (gr_cover_states(m) != IG_OK)
        return NULL;
    if (m->exact_of[s] >= 0)
        return pool_at(&m->masks, m->exact_of[s], m->n_words);
    const struct grammar_vocab *gv = m->gv;
    int32_t t = gr_pda_cut(&m->pda, s);
    if (t < 0)
        return NULL;
    int32_t k = t == s ? -1 : cut_mask(m, t);
    if (t != s && k < 0)
        return NULL;
    int32_t idx = pool_new(&m->masks, m->n_words);
    if (idx < 0)
        return nomem(), NULL;
    uint64_t *bits = pool_at(&m->masks, idx, m->n_words);
    if (t == s) {
        if (walk(m, 0, s, bits, false) != IG_OK)
            return NULL;
    } else {
        memcpy(bits, pool_at(&m->cuts, k, m->n_words), (size_t)m->n_words * 8);
        for (int64_t r = m->roots_off[k]; r < m->roots_off[k + 1]; r++) {
            int32_t u = m->roots[r];
            int32_t tok = gv->order[gv->nodes[u].tok_begin];
            int32_t su = run_bytes(m, s, gv->pieces + gv->piece_off[tok], gv->nodes[u].depth);
            if (su < 0)
                return NULL;
            if (su == GR_DEAD)
                continue;
            mark_node(gv, u, bits);
            if (walk(m, u, su, bits, false) != IG_OK)
                return NULL;
        }
    }
    if (m->allow_eog && gr_pda_complete(&m->pda, s))
        for (int32_t i = 0; i < gv->n_eog; i++)
            set_bit(bits, gv->eog[i]);
    if (gr_cover_states(m) != IG_OK)
        return NULL;
    m->exact_of[s] = idx;
    return bits;
}

/* The first token's mask when SentencePiece's space prefix changes some
 * tokens' text there: those tokens are checked one by one. */
static const uint64_t *first_mask(struct grammar_matcher *m, const uint64_t *bits)
{
    const struct grammar_vocab *gv = m->gv;
    memcpy(m->scratch, bits, (size_t)m->n_words * 8);
    for (int32_t i = 0; i < gv->n_strip; i++) {
        int32_t id = gv->strip[i];
        int64_t len = gv->piece_off[id + 1] - gv->piece_off[id] - 1;
        int32_t s = len > 0 ? run_bytes(m, m->state, gv->pieces + gv->piece_off[id] + 1, len) : 0;
        if (s < 0)
            return NULL;
        if (s > GR_DEAD)
            m->scratch[id >> 6] |= 1ull << (id & 63);
        else
            m->scratch[id >> 6] &= ~(1ull << (id & 63));
    }
    return m->scratch;
}

/* ---- the public API ---------------------------------------------------------------- */

int grammar_matcher_create(const struct grammar *g, const struct grammar_vocab *gv,
                           bool allow_eog, struct grammar_matcher **out)
{
    *out = NULL;
    struct grammar_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return nomem();
    m->g = g;
    m->gv = gv;
    m->allow_eog = allow_eog;
    m->at_start = true;
    m->budget = GR_MATCHER_BUDGET;
    m->n_words = (gv->n_tokens + 63) / 64;
    m->wstate = malloc(((size_t)gv->max_depth + 2) * sizeof *m->wstate);
    m->wrow = malloc(((size_t)gv->max_depth + 2) * sizeof *m->wrow);
    m->scratch = malloc((size_t)(m->n_words ? m->n_words : 1) * sizeof *m->scratch);
    if (!m->wstate || !m->wrow || !m->scratch || gr_pda_init(&m->pda, g) != IG_OK) {
        grammar_matcher_free(m);
        return nomem();
    }
    m->state = gr_pda_start(&m->pda);
    if (m->state < 0) {
        grammar_matcher_free(m);
        return IG_E_NOMEM;
    }
    *out = m;
    return IG_OK;
}

void grammar_matcher_free(struct grammar_matcher *m)
{
    if (!m)
        return;
    gr_pda_free(&m->pda);
    free(m->chain), free(m->exact_of), free(m->cut_of), free(m->roots_off);
    pool_free(&m->masks), pool_free(&m->cuts);
    free(m->roots), free(m->wstate), free(m->wrow), free(m->scratch), free(m->ranges), free(m->len_ranges);
    free(m);
}

/* The allowed-token bits of the current state; NULL when out of memory. */
static const uint64_t *current_mask(struct grammar_matcher *m)
{
    if (keep_in_budget(m) != IG_OK)
        return NULL;
    const uint64_t *bits = exact_mask(m, m->state);
    if (bits && m->at_start && m->gv->n_strip)
        bits = first_mask(m, bits);
    return bits;
}

/* keep8[b][j]: all ones when bit j of byte b is set (the token stays), else
 * zero; a word of the mask is applied 8 logits at a time without a branch
 * per bit (the compiler makes vector code of the inner loop). */
#define K1(b, j) (((b) >> (j) & 1) ? 0xFFFFFFFFu : 0u)
#define K8(b) {K1(b, 0), K1(b, 1), K1(b, 2), K1(b, 3), K1(b, 4), K1(b, 5), K1(b, 6), K1(b, 7)}
#define K4(b) K8(b), K8((b) + 1), K8((b) + 2), K8((b) + 3)
#define K16(b) K4(b), K4((b) + 4), K4((b) + 8), K4((b) + 12)
#define K64(b) K16(b), K16((b) + 16), K16((b) + 32), K16((b) + 48)
static const uint32_t keep8[256][8] = {K64(0), K64(64), K64(128), K64(192)};

#define NEG_INF_BITS 0xFF800000u /* -INFINITY as a float's bits */

/* Bits set in x (without -mpopcnt, __builtin_popcountll is a libgcc call). */
static inline int64_t popcount64(uint64_t x)
{
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (int64_t)((x * 0x0101010101010101ull) >> 56);
}

/* Writes -inf over the 64 logits at l whose bit in x is clear. */
static void apply_word(float *l, uint64_t x)
{
    uint32_t v[64];
    memcpy(v, l, sizeof v);
    for (int k = 0; k < 8; k++) {
        const uint32_t *keep = keep8[(x >> (8 * k)) & 255];
        for (int j = 0; j < 8; j++)
            v[8 * k + j] = (v[8 * k + j] & keep[j]) | (~keep[j] & NEG_INF_BITS);
    }
    memcpy(l, v, sizeof v);
}

int64_t grammar_matcher_mask(struct grammar_matcher *m, float *logits)
{
    int64_t n = m->gv->n_tokens;
    const uint64_t *bits = current_mask(m);
    if (!bits) {
        for (int64_t i = 0; i < n; i++)
            logits[i] = -INFINITY;
        m->last_allowed = 0;
        return -1;
    }
    int64_t allowed = 0, full = n / 64;
    for (int64_t w = 0; w < full;) {
        uint64_t x = bits[w];
        if (x == 0) { /* a run of denied words */
            int64_t e = w + 1;
            while (e < full && bits[e] == 0)
                e++;
            for (int64_t v = w; v < e; v++) { /* 64 at a time: vector stores at -O2 */
                float *l = logits + v * 64;
                for (int j = 0; j < 64; j++)
                    l[j] = -INFINITY;
            }
            w = e;
            continue;
        }
        int64_t k = popcount64(x);
        allowed += k;
        if (k >= 56) { /* a few denied: write just those */
            float *l = logits + w * 64;
            for (uint64_t y = ~x; y; y &= y - 1)
                l[__builtin_ctzll(y)] = -INFINITY;
        } else {
            apply_word(logits + w * 64, x);
        }
        w++;
    }
    if (full < m->n_words) { /* the last, partial word */
        uint64_t x = bits[full] & ((1ull << (n - full * 64)) - 1);
        allowed += popcount64(x);
        for (int64_t j = 0; j < n - full * 64; j++)
            if (!(x >> j & 1))
                logits[full * 64 + j] = -INFINITY;
    }
    m->last_allowed = allowed;
    return allowed;
}

void grammar_mask_hook(void *user, float *logits, int64_t n_logits)
{
    struct grammar_matcher *m = user;
    IG_ASSERT(n_logits >= m->gv->n_tokens);
    grammar_matcher_mask(m, logits);
}

static bool is_eog(const struct grammar_vocab *gv, int32_t id)
{
    for (int32_t i = 0; i < gv->n_eog; i++)
        if (gv->eog[i] == id)
            return true;
    return false;
}

/* The text token id stands for here, in *s / *n. */
static void token_text(const struct grammar_matcher *m, int32_t id, const uint8_t **s, int64_t *n)
{
    const struct grammar_vocab *gv = m->gv;
    *s = gv->pieces + gv->piece_off[id];
    *n = gv->piece_off[id + 1] - gv->piece_off[id];
    if (m->at_start && *n && (*s)[0] == ' ' && gv->n_strip) {
        for (int32_t i = 0; i < gv->n_strip; i++) /* once per run: a scan is fine */
            if (gv->strip[i] == id) {
                (*s)++, (*n)--;
                break;
            }
    }
}

int grammar_matcher_accept(struct grammar_matcher *m, int32_t token)
{
    const struct grammar_vocab *gv = m->gv;
    if (token < 0 || token >= gv->n_tokens)
        return ig_error(IG_E_INPUT, "grammar: token id %d is outside the vocabulary", token);
    if (is_eog(gv, token)) {
        if (m->allow_eog && gr_pda_complete(&m->pda, m->state))
            return IG_OK;
        return ig_error(IG_E_INPUT, "grammar: end-of-generation token %d before the grammar "
                        "is complete", token);
    }
    const uint8_t *s;
    int64_t n;
    token_text(m, token, &s, &n);
    if (!gv->in_trie[token] || n == 0)
        return ig_error(IG_E_INPUT, "grammar: token %d is not text and never matches", token);
    int32_t t = run_bytes(m, m->state, s, n);
    if (t < 0)
        return IG_E_NOMEM;
    if (t == GR_DEAD)
        return ig_error(IG_E_INPUT, "grammar: token %d ('%.*s') is not allowed here", token,
                        (int)(n < 40 ? n : 40), (const char *)s);
    m->state = t;
    m->at_start = false;
    return IG_OK;
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t n)
{
    int32_t t = run_bytes(m, m->state, (const uint8_t *)s, (int64_t)n);
    if (t < 0)
        return IG_E_NOMEM;
    if (t == GR_DEAD)
        return IG_E_INPUT;
    m->state = t;
    if (n)
        m->at_start = false;
    return IG_OK;
}

bool grammar_matcher_complete(const struct grammar_matcher *m)
{
    return gr_pda_complete(&m->pda, m->state);
}

bool grammar_matcher_done(const struct grammar_matcher *m)
{
    return gr_pda_done(&m->pda, m->state);
}

void gr_matcher_set_budget(struct grammar_matcher *m, size_t bytes) { m->budget = bytes; }
void grammar_matcher_set_budget(struct grammar_matcher *m, size_t bytes) { m->budget = bytes; }

int64_t grammar_matcher_last_allowed(const struct grammar_matcher *m) { return m->last_allowed; }
