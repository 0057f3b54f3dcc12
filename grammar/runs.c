/* grammar/runs.c: trie subtrees decided without walking them. A state
 * "reads plain characters" when many ASCII bytes (and maybe every valid
 * character beyond ASCII) lead it to one next state; following that next
 * state gives a run: endless inside a JSON string (the same state again), k
 * characters in a string with k left before its maxLength. A subtree whose
 * tokens use only those characters, no more of them than the run, is
 * allowed whole; when the run ends in a state that reads none of them, the
 * subtree is decided by each token's length (vocab.c's summaries and
 * character counts). Everything here is computed on demand per state and
 * kept in the matcher's chain table.
 * Covered by tests/grammar/test_mask.c. */
#include "grammar/matcher.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* The state after every valid UTF-8 character beyond ASCII from s when they
 * all agree (else GR_DEAD); -1 when out of memory. Walks the encoding's
 * byte ranges by byte class, so only distinct classes are stepped. strict:
 * a state inside a character must not hold GR_BOTTOM (top-cut states: a
 * frame that ends before the character does would hand the rest of it to
 * the context, which the top-cut state does not know). */
static int32_t after_nonascii(struct grammar_matcher *m, int32_t s, int need, uint8_t lo,
                              uint8_t hi, int32_t want, bool strict)
{
    const uint8_t *cls = m->g->byte_class;
    bool seen[256] = {false};
    for (unsigned b = lo; b <= hi; b++) {
        if (seen[cls[b]])
            continue;
        seen[cls[b]] = true;
        int32_t t = gr_pda_step(&m->pda, s, cls[b]);
        if (t < 0)
            return -1;
        if (t == GR_DEAD)
            return GR_DEAD;
        if (need > 1) {
            if (strict && gr_pda_has_bottom(&m->pda, t))
                return GR_DEAD;
            t = after_nonascii(m, t, need - 1, 0x80, 0xBF, want, strict);
            if (t <= GR_DEAD)
                return t;
        } else if (t != want) {
            return GR_DEAD;
        }
    }
    return want;
}

static bool all_nonascii_to(struct grammar_matcher *m, int32_t s, int32_t want, bool strict,
                            int *err)
{
    static const struct { uint8_t lead_lo, lead_hi, lo, hi, len; } U[] = {
        {0xC2, 0xDF, 0x80, 0xBF, 2}, {0xE0, 0xE0, 0xA0, 0xBF, 3}, {0xE1, 0xEC, 0x80, 0xBF, 3},
        {0xED, 0xED, 0x80, 0x9F, 3}, {0xEE, 0xEF, 0x80, 0xBF, 3}, {0xF0, 0xF0, 0x90, 0xBF, 4},
        {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4},
    };
    const uint8_t *cls = m->g->byte_class;
    for (size_t u = 0; u < sizeof U / sizeof U[0]; u++) {
        bool seen[256] = {false};
        for (unsigned b = U[u].lead_lo; b <= U[u].lead_hi; b++) {
            if (seen[cls[b]])
                continue;
            seen[cls[b]] = true;
            int32_t t = gr_pda_step(&m->pda, s, cls[b]);
            if (t > GR_DEAD && strict && gr_pda_has_bottom(&m->pda, t))
                t = GR_DEAD;
            if (t > GR_DEAD)
                t = after_nonascii(m, t, U[u].len - 1, U[u].lo, U[u].hi, want, strict);
            if (t < 0)
                *err = 1;
            if (t != want)
                return false;
        }
    }
    return true;
}

/* Whether every character beyond ASCII leads state x to `want`. Stepping
 * x through the whole UTF-8 space makes a dozen states inside characters,
 * and each state of a length-bounded string (k characters left) has its
 * own; so the characters are first followed from x's top-cut state
 * (pda.h), the same for every k: when each character ends exactly the top
 * frames there, it takes x to one state, the one after U+0080, and only
 * that one character is stepped from x itself. Otherwise the whole space is
 * stepped from x. */
static bool nonascii_to(struct grammar_matcher *m, int32_t x, int32_t want, int *err)
{
    int32_t parent = -1;
    int32_t top = gr_pda_top_cut(&m->pda, x, &parent);
    int32_t bottom = top > GR_DEAD ? gr_pda_bottom_state(&m->pda) : top;
    if (top < 0 || bottom < 0) {
        *err = 1;
        return false;
    }
    if (top > GR_DEAD && all_nonascii_to(m, top, bottom, true, err)) {
        m->n_top_cut++;
        /* a plain ASCII byte that ends its frames there, as the characters
         * do, goes to `want` too: no state inside a character is made */
        const struct chain *c = &m->chain[x];
        unsigned b = c->plain[0] ? (unsigned)__builtin_ctzll(c->plain[0])
                                 : 64 + (unsigned)__builtin_ctzll(c->plain[1]);
        if (c->next == want && (c->plain[0] | c->plain[1]) && gr_pda_pops_to(&m->pda, x, b, parent))
            return true;
        const uint8_t *cls = m->g->byte_class;
        int32_t t = gr_pda_step(&m->pda, x, cls[0xC2]);
        if (t > GR_DEAD)
            t = gr_pda_step(&m->pda, t, cls[0x80]);
        if (t < 0)
            *err = 1;
        return t == want;
    }
    return !*err && all_nonascii_to(m, x, want, false, err);
}

/* plain and next of state x. IG_OK or IG_E_NOMEM. */
static int chain_base(struct grammar_matcher *m, int32_t x)
{
    if (gr_cover_states(m) != IG_OK)
        return IG_E_NOMEM;
    if (m->chain[x].have_base)
        return IG_OK;
    const struct grammar *g = m->g;
    uint64_t sig[256];
    if (gr_pda_class_stacks(&m->pda, x, sig)) {
        /* the ASCII bytes of the classes that advance the same stacks, the
         * most of them (a tie goes to the first class): one step, not one
         * per successor (a quote's would expand the string's context) */
        int64_t w[256] = {0};
        for (unsigned b = 0; b < 128; b++)
            w[g->byte_class[b]]++;
        int first[256], n_dist = 0; /* each distinct set of stacks: its first class */
        int64_t dist_w[256];
        for (int k = 0; k < g->n_classes; k++) {
            if (!sig[k] || !w[k])
                continue;
            int j = 0;
            while (j < n_dist && sig[first[j]] != sig[k])
                j++;
            if (j == n_dist)
                first[n_dist] = k, dist_w[n_dist++] = 0;
            dist_w[j] += w[k];
        }
        int best_k = -1;
        int64_t best_w = 0;
        for (int j = 0; j < n_dist; j++)
            if (dist_w[j] > best_w)
                best_k = first[j], best_w = dist_w[j];
        int32_t best = best_k < 0 ? GR_DEAD : gr_pda_step(&m->pda, x, best_k);
        if (best < 0 || gr_cover_states(m) != IG_OK)
            return IG_E_NOMEM;
        struct chain *c = &m->chain[x];
        c->plain[0] = c->plain[1] = 0;
        c->next = GR_DEAD;
        if (best > GR_DEAD && !gr_pda_has_bottom(&m->pda, best)) {
            for (unsigned b = 0; b < 128; b++)
                if (sig[g->byte_class[b]] == sig[best_k])
                    c->plain[b >> 6] |= 1ull << (b & 63);
            c->next = best;
        }
        c->have_base = true;
        return IG_OK;
    }
    int32_t succ[256];
    int64_t weight[256] = {0};
    for (int k = 0; k < g->n_classes; k++)
        succ[k] = -2;
    for (unsigned b = 0; b < 128; b++) {
        int k = g->byte_class[b];
        if (succ[k] == -2 && (succ[k] = gr_pda_step(&m->pda, x, k)) < 0)
            return IG_E_NOMEM;
        weight[k]++;
    }
    /* the bytes of all classes with the same successor, successors in the
     * order of their first class (a tie goes to the first) */
    int32_t dist[256];
    int64_t dist_w[256];
    int n_dist = 0;
    for (int k = 0; k < g->n_classes; k++) {
        if (succ[k] <= GR_DEAD || weight[k] == 0)
            continue;
        int j = 0;
        while (j < n_dist && dist[j] != succ[k])
            j++;
        if (j == n_dist)
            dist[n_dist] = succ[k], dist_w[n_dist++] = 0;
        dist_w[j] += weight[k];
    }
    int32_t best = GR_DEAD;
    int64_t best_w = 0;
    for (int j = 0; j < n_dist; j++)
        if (dist_w[j] > best_w)
            best = dist[j], best_w = dist_w[j];
    if (gr_cover_states(m) != IG_OK) /* the steps may have made states */
        return IG_E_NOMEM;
    struct chain *c = &m->chain[x];
    c->plain[0] = c->plain[1] = 0;
    c->next = GR_DEAD;
    /* a cut state's run stops before it leaves the part it knows */
    if (best > GR_DEAD && !gr_pda_has_bottom(&m->pda, best)) {
        for (unsigned b = 0; b < 128; b++)
            if (succ[g->byte_class[b]] == best)
                c->plain[b >> 6] |= 1ull << (b & 63);
        c->next = best;
    }
    c->have_base = true;
    return IG_OK;
}

static int chain_nonascii(struct grammar_matcher *m, int32_t x)
{
    struct chain *c = &m->chain[x];
    if (c->nonascii >= 0)
        return IG_OK;
    int err = 0;
    bool na = c->next > GR_DEAD && nonascii_to(m, x, c->next, &err);
    if (err || gr_cover_states(m) != IG_OK)
        return IG_E_NOMEM;
    m->chain[x].nonascii = na;
    return IG_OK;
}

/* Computes m->chain[x].run[na] by following the chain (at most CHAIN_MAX
 * states; a cycle is an endless run). IG_OK or IG_E_NOMEM. */
static int chain_run(struct grammar_matcher *m, int32_t x, int na)
{
    int32_t path[CHAIN_MAX + 1];
    int n = 0;
    int64_t tail = 0; /* the run after the last state on the path */
    for (int32_t cur = x;;) {
        if (chain_base(m, cur) != IG_OK || (na && chain_nonascii(m, cur) != IG_OK))
            return IG_E_NOMEM;
        struct chain *c = &m->chain[cur];
        if (c->run[na] >= 0) {
            tail = c->run[na];
            break;
        }
        if (c->next == GR_DEAD || (na && !c->nonascii)) {
            c->run[na] = 0;
            tail = 0;
            break;
        }
        if (c->run[na] == -2 || c->next == cur) { /* a cycle: endless */
            tail = INT32_MAX;
            if (c->run[na] != -2)
                path[n++] = cur, tail = INT32_MAX - 1;
            break;
        }
        c->run[na] = -2;
        path[n++] = cur;
        if (n == CHAIN_MAX) {
            tail = 0;
            break;
        }
        if (chain_base(m, c->next) != IG_OK || (na && chain_nonascii(m, c->next) != IG_OK))
            return IG_E_NOMEM;
        const struct chain *a = &m->chain[cur], *b = &m->chain[a->next];
        bool same = (b->plain[0] & a->plain[0]) == a->plain[0] &&
                    (b->plain[1] & a->plain[1]) == a->plain[1] && (!na || b->nonascii);
        if (!same) {
            tail = 0;
            break;
        }
        cur = a->next;
    }
    /* unwind: each state reads one more than the one after it */
    for (int i = n - 1; i >= 0; i--) {
        if (tail < INT32_MAX)
            tail++;
        m->chain[path[i]].run[na] = (int32_t)(tail > INT32_MAX ? INT32_MAX : tail);
    }
    return IG_OK;
}

/* Whether the state a finite run of s ends in reads none of s's plain
 * characters (then a token of more plain characters than the run dies).
 * IG_OK or IG_E_NOMEM. */
static int chain_end_dead(struct grammar_matcher *m, int32_t s, int na)
{
    if (m->chain[s].end_dead[na] >= 0)
        return IG_OK;
    int32_t e = s;
    for (int32_t k = m->chain[s].run[na]; k > 0 && e > GR_DEAD; k--)
        e = m->chain[e].next; /* run > 0: every state on the way has its base */
    bool dead = true;
    if (e > GR_DEAD) {
        const struct chain *c = &m->chain[s];
        uint64_t plain[2] = {c->plain[0], c->plain[1]};
        for (unsigned b = 0; b < 128 && dead; b++) {
            if (!(plain[b >> 6] >> (b & 63) & 1))
                continue;
            int32_t t = gr_pda_step(&m->pda, e, m->g->byte_class[b]);
            if (t < 0)
                return IG_E_NOMEM;
            dead = t == GR_DEAD;
        }
        for (unsigned b = 0xC2; b <= 0xF4 && dead && na; b++) {
            int32_t t = gr_pda_step(&m->pda, e, m->g->byte_class[b]);
            if (t < 0)
                return IG_E_NOMEM;
            dead = t == GR_DEAD;
        }
    }
    if (gr_cover_states(m) != IG_OK)
        return IG_E_NOMEM;
    m->chain[s].end_dead[na] = dead;
    return IG_OK;
}

/* How trie node i's subtree can be decided without walking it, from state
 * s (the state at i's parent): SKIP_ALL when all its characters from i's
 * byte on are plain for s and no more of them than s's run; SKIP_BY_LENGTH
 * (*limit: the run) when they are plain but some tokens are longer and the
 * run's end reads no plain character: then exactly the tokens of at most
 * *limit characters are allowed. *err on out of memory. */
enum gr_skip gr_skip_whole(struct grammar_matcher *m, int32_t i, int32_t s, int32_t *limit,
                           int *err)
{
    const struct gv_below *b = &m->gv->incl[i];
    if (b->flags & GV_INVALID || b->max_chars == 0)
        return GR_SKIP_NO;
    if (chain_base(m, s) != IG_OK) {
        *err = 1;
        return GR_SKIP_NO;
    }
    const struct chain *c = &m->chain[s];
    if ((b->ascii[0] & ~c->plain[0]) || (b->ascii[1] & ~c->plain[1]))
        return GR_SKIP_NO;
    int na = (b->flags & (GV_NONASCII | GV_PARTIAL)) != 0;
    if (c->run[na] == -1 && chain_run(m, s, na) != IG_OK) {
        *err = 1;
        return GR_SKIP_NO;
    }
    int32_t run = m->chain[s].run[na];
    if (b->max_chars <= run)
        return GR_SKIP_ALL;
    if (run <= 0 || run >= CHAIN_MAX - 1 || chain_end_dead(m, s, na) != IG_OK)
        return GR_SKIP_NO; /* (a run cut at CHAIN_MAX has no known end) */
    *limit = run;
    return m->chain[s].end_dead[na] ? GR_SKIP_BY_LENGTH : GR_SKIP_NO;
}

int32_t gr_plain_limit(struct grammar_matcher *m, int32_t s, int *err)
{
    if (chain_base(m, s) != IG_OK) {
        *err = 1;
        return -1;
    }
    const struct chain *c = &m->chain[s];
    if (c->next <= GR_DEAD || c->plain[0] != GV_JSON_PLAIN0 || c->plain[1] != GV_JSON_PLAIN1)
        return -1;
    for (int na = 0; na < 2; na++)
        if (m->chain[s].run[na] == -1 && chain_run(m, s, na) != IG_OK) {
            *err = 1;
            return -1;
        }
    int32_t run = m->chain[s].run[1];
    if (run != m->chain[s].run[0] || run <= 0)
        return -1;
    if (run >= m->gv->max_plain_chars)
        return GV_PLAIN_K;
    if (run >= GV_PLAIN_K || run >= CHAIN_MAX - 1)
        return -1;
    if (chain_end_dead(m, s, 1) != IG_OK) {
        *err = 1;
        return -1;
    }
    return m->chain[s].end_dead[1] ? run : -1;
}
