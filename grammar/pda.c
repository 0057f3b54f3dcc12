/* grammar/pda.c: the byte-level pushdown automaton of grammar/pda.h:
 * interned frames and states, the expansion of a stack to the byte sets it
 * can read next (rule references opened, finished rules popped, tail calls
 * without a return frame), memoized steps and cuts.
 * Left recursion is refused by check.c, so an expansion always ends: the
 * frames it can reach are finite, and each is expanded once per step.
 * Covered by tests/grammar/test_grammar.c and test_mask.c. */
#include "grammar/pda.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static int nomem(void) { return ig_error(IG_E_NOMEM, "grammar: out of memory"); }

/* Bounds on what one automaton may build. A grammar whose nullable rules
 * repeat inside repetitions (expr ::= | "x" expr+ ...) can reach a number
 * of stacks exponential in the text's length; past these it is refused
 * with a message instead of eating the machine. JSON schemas and the
 * grammars people write stay far below (tests/grammar's corpus: < 10^4). */
#define GR_MAX_FRAMES (1 << 20)
#define GR_MAX_STACKS (1 << 14) /* in one state */

static int too_ambiguous(const char *what, int64_t limit)
{
    return ig_error(IG_E_NOMEM, "grammar: more than %lld %s (the grammar is too ambiguous: "
                    "a rule that can match nothing, repeated?)", (long long)limit, what);
}

static uint32_t hash2(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static uint32_t hash_list(const int32_t *v, int32_t n)
{
    uint64_t h = 0x84222325cbf29ce4ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)v[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ h >> 29);
}

/* ---- frames ---------------------------------------------------------------- */

static int grow_frames(struct gr_pda *p)
{
    int32_t cap = p->cap_frames ? 2 * p->cap_frames : 1024;
    int32_t *pos = realloc(p->pos, (size_t)cap * sizeof *pos);
    if (pos)
        p->pos = pos;
    int32_t *par = realloc(p->parent, (size_t)cap * sizeof *par);
    if (par)
        p->parent = par;
    int32_t *dep = realloc(p->depth, (size_t)cap * sizeof *dep);
    if (dep)
        p->depth = dep;
    uint32_t *vis = realloc(p->visited, (size_t)cap * sizeof *vis);
    if (vis) {
        memset(vis + p->cap_frames, 0, (size_t)(cap - p->cap_frames) * sizeof *vis);
        p->visited = vis;
    }
    int32_t *slots = malloc((size_t)cap * 2 * sizeof *slots);
    if (!pos || !par || !dep || !vis || !slots) {
        free(slots);
        return nomem();
    }
    uint32_t mask = (uint32_t)cap * 2 - 1;
    memset(slots, 0xff, (size_t)cap * 2 * sizeof *slots);
    for (int32_t id = 2; id < p->n_frames; id++) {
        uint32_t j = hash2(p->pos[id], p->parent[id]) & mask;
        while (slots[j] >= 0)
            j = (j + 1) & mask;
        slots[j] = id;
    }
    free(p->frame_slots);
    p->frame_slots = slots;
    p->frame_mask = mask;
    p->cap_frames = cap;
    return IG_OK;
}

/* The frame (pos, parent); -1 when out of memory. */
static int32_t frame(struct gr_pda *p, int32_t pos, int32_t parent)
{
    if (p->n_frames >= p->cap_frames &&
        (p->n_frames >= GR_MAX_FRAMES ? too_ambiguous("parse frames", GR_MAX_FRAMES)
                                      : grow_frames(p)) != IG_OK)
        return -1;
    uint32_t j = hash2(pos, parent) & p->frame_mask;
    for (int32_t id; (id = p->frame_slots[j]) >= 0; j = (j + 1) & p->frame_mask)
        if (p->pos[id] == pos && p->parent[id] == parent)
            return id;
    int32_t id = p->n_frames++;
    p->pos[id] = pos;
    p->parent[id] = parent;
    p->depth[id] = p->depth[parent] + 1;
    p->visited[id] = 0;
    p->frame_slots[j] = id;
    return id;
}

/* ---- states ------------------------------------------------------------------ */

static int grow_states(struct gr_pda *p)
{
    int32_t cap = p->cap_states ? 2 * p->cap_states : 1024;
    int64_t *off = realloc(p->off, (size_t)cap * sizeof *off);
    if (off)
        p->off = off;
    int32_t *len = realloc(p->len, (size_t)cap * sizeof *len);
    if (len)
        p->len = len;
    int64_t *row = realloc(p->row, (size_t)cap * sizeof *row);
    if (row)
        p->row = row;
    int32_t *cut = realloc(p->cut, (size_t)cap * sizeof *cut);
    if (cut)
        p->cut = cut;
    uint8_t *flags = realloc(p->flags, (size_t)cap);
    if (flags)
        p->flags = flags;
    int32_t *slots = malloc((size_t)cap * 2 * sizeof *slots);
    if (!off || !len || !row || !cut || !flags || !slots) {
        free(slots);
        return nomem();
    }
    uint32_t mask = (uint32_t)cap * 2 - 1;
    memset(slots, 0xff, (size_t)cap * 2 * sizeof *slots);
    for (int32_t s = 0; s < p->n_states; s++) {
        uint32_t j = hash_list(p->pool + p->off[s], p->len[s]) & mask;
        while (slots[j] >= 0)
            j = (j + 1) & mask;
        slots[j] = s;
    }
    free(p->state_slots);
    p->state_slots = slots;
    p->state_mask = mask;
    p->cap_states = cap;
    return IG_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of the n stacks v (sorted and deduplicated here, in place);
 * -1 when out of memory. */
static int32_t state_of(struct gr_pda *p, int32_t *v, int32_t n)
{
    if (n > 1) {
        if (n < 16) { /* insertion sort: states are small */
            for (int32_t i = 1; i < n; i++)
                for (int32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
                    int32_t t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
                }
        } else {
            qsort(v, (size_t)n, sizeof *v, cmp_i32);
        }
        int32_t k = 1;
        for (int32_t i = 1; i < n; i++)
            if (v[i] != v[k - 1])
                v[k++] = v[i];
        n = k;
    }
    if (p->n_states >= p->cap_states && grow_states(p) != IG_OK)
        return -1;
    uint32_t j = hash_list(v, n) & p->state_mask;
    for (int32_t s; (s = p->state_slots[j]) >= 0; j = (j + 1) & p->state_mask)
        if (p->len[s] == n && !memcmp(p->pool + p->off[s], v, (size_t)n * sizeof *v))
            return s;
    if (p->pool_len + n > p->pool_cap) {
        int64_t cap = p->pool_cap ? 2 * p->pool_cap : 4096;
        while (cap < p->pool_len + n)
            cap *= 2;
        int32_t *pool = realloc(p->pool, (size_t)cap * sizeof *pool);
        if (!pool)
            return nomem(), -1;
        p->pool = pool;
        p->pool_cap = cap;
    }
    int32_t s = p->n_states++;
    memcpy(p->pool + p->pool_len, v, (size_t)n * sizeof *v);
    p->off[s] = p->pool_len;
    p->len[s] = n;
    p->row[s] = -1;
    p->cut[s] = -1;
    bool empty = n && v[0] == GR_EMPTY;
    p->flags[s] = (uint8_t)((empty ? GR_F_COMPLETE : 0) | (empty && n == 1 ? GR_F_DONE : 0) |
                            ((n && v[0] == GR_BOTTOM) || (n > 1 && v[1] == GR_BOTTOM) ? GR_F_BOTTOM : 0));
    p->pool_len += n;
    p->state_slots[j] = s;
    return s;
}

int gr_pda_ensure_row(struct gr_pda *p, int32_t s)
{
    if (p->row[s] >= 0)
        return IG_OK;
    int64_t n = p->g->n_classes;
    if (p->trans_len + n > p->trans_cap) {
        int64_t cap = p->trans_cap ? 2 * p->trans_cap : 16384;
        while (cap < p->trans_len + n)
            cap *= 2;
        int32_t *t = realloc(p->trans, (size_t)cap * sizeof *t);
        if (!t)
            return nomem();
        p->trans = t;
        p->trans_cap = cap;
    }
    for (int64_t i = 0; i < n; i++)
        p->trans[p->trans_len + i] = GR_UNKNOWN;
    p->row[s] = p->trans_len;
    p->trans_len += n;
    return IG_OK;
}

/* ---- expansion ------------------------------------------------------------------ */

static int reserve(int32_t **v, int64_t *cap, int64_t need)
{
    if (need <= *cap)
        return IG_OK;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int32_t *q = realloc(*v, (size_t)c * sizeof *q);
    if (!q)
        return nomem();
    *v = q;
    *cap = c;
    return IG_OK;
}

/* Expands the stacks on p->work (n of them) into the stacks that read a
 * byte next, appended to p->out; returns their count, or -1 (no memory).
 * Each frame is expanded once per stamp. */
static int32_t expand(struct gr_pda *p, int64_t n_work)
{
    const struct grammar *g = p->g;
    int32_t n_out = 0;
    while (n_work) {
        int32_t f = p->work[--n_work];
        if (f > GR_BOTTOM && p->visited[f] == p->stamp)
            continue;
        if (f <= GR_BOTTOM || GR_TYPE(g->elems[p->pos[f]]) == GR_BYTES) {
            if (f > GR_BOTTOM)
                p->visited[f] = p->stamp;
            if (n_out >= GR_MAX_STACKS) {
                too_ambiguous("parse stacks at one point", GR_MAX_STACKS);
                return -1;
            }
            if (reserve(&p->out, &p->out_cap, n_out + 1) != IG_OK)
                return -1;
            p->out[n_out++] = f;
            continue;
        }
        p->visited[f] = p->stamp;
        int32_t at = p->pos[f], r = GR_VALUE(g->elems[at]);
        int32_t ret = GR_ENDS_SEQ(g->elems[at + 1]) ? p->parent[f] : frame(p, at + 1, p->parent[f]);
        if (ret < 0)
            return -1;
        int32_t n_alts = g->alt_first[r + 1] - g->alt_first[r];
        if (reserve(&p->work, &p->work_cap, n_work + n_alts) != IG_OK)
            return -1;
        for (int32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++) {
            int32_t start = g->alt_start[a];
            int32_t next = GR_ENDS_SEQ(g->elems[start]) ? ret : frame(p, start, ret);
            if (next < 0)
                return -1;
            p->work[n_work++] = next;
        }
    }
    return n_out;
}

/* Advances every stack of s whose byte set holds byte b, then expands. */
static int32_t compute_step(struct gr_pda *p, int32_t s, unsigned b)
{
    const struct grammar *g = p->g;
    if (++p->stamp == 0) { /* wrapped: clear the stamps */
        memset(p->visited, 0, (size_t)p->cap_frames * sizeof *p->visited);
        p->stamp = 1;
    }
    int64_t n_work = 0;
    for (int32_t i = 0; i < p->len[s]; i++) {
        int32_t f = p->pool[p->off[s] + i];
        if (f <= GR_BOTTOM)
            continue;
        int32_t at = p->pos[f];
        if (!gr_byteset_has(&g->sets[GR_VALUE(g->elems[at])], b))
            continue;
        int32_t next = GR_ENDS_SEQ(g->elems[at + 1]) ? p->parent[f] : frame(p, at + 1, p->parent[f]);
        if (next < 0 || reserve(&p->work, &p->work_cap, n_work + 1) != IG_OK)
            return -1;
        p->work[n_work++] = next;
    }
    int32_t n = expand(p, n_work);
    return n < 0 ? -1 : state_of(p, p->out, n);
}

/* Advances the stacks of s picked by `adv` (bit i: stack i), then expands. */
static int32_t step_picked(struct gr_pda *p, int32_t s, uint64_t adv)
{
    const struct grammar *g = p->g;
    if (++p->stamp == 0) {
        memset(p->visited, 0, (size_t)p->cap_frames * sizeof *p->visited);
        p->stamp = 1;
    }
    int64_t n_work = 0;
    for (int32_t i = 0; i < p->len[s]; i++) {
        if (!(adv >> i & 1))
            continue;
        int32_t f = p->pool[p->off[s] + i], at = p->pos[f];
        int32_t next = GR_ENDS_SEQ(g->elems[at + 1]) ? p->parent[f] : frame(p, at + 1, p->parent[f]);
        if (next < 0 || reserve(&p->work, &p->work_cap, n_work + 1) != IG_OK)
            return -1;
        p->work[n_work++] = next;
    }
    int32_t n = expand(p, n_work);
    return n < 0 ? -1 : state_of(p, p->out, n);
}

bool gr_pda_class_stacks(const struct gr_pda *p, int32_t s, uint64_t sig[256])
{
    const struct grammar *g = p->g;
    int32_t n = p->len[s];
    if (n > 64)
        return false;
    memset(sig, 0, (size_t)g->n_classes * sizeof *sig);
    for (int32_t i = 0; i < n; i++) {
        int32_t f = p->pool[p->off[s] + i];
        if (f <= GR_BOTTOM)
            continue;
        const uint64_t *cl = p->set_classes[GR_VALUE(g->elems[p->pos[f]])];
        for (int w = 0; w < 4; w++)
            for (uint64_t x = cl[w]; x; x &= x - 1)
                sig[w * 64 + __builtin_ctzll(x)] |= 1ull << i;
    }
    return true;
}

/* Fills the entries of state s's row that class c shares its stacks with:
 * byte classes that advance the same stacks share one expansion (inside a
 * JSON string every ordinary character does). The other classes wait until
 * they are asked for: a string's state is stepped by its ASCII characters
 * for its run (runs.c), and each class of lead bytes beyond ASCII would
 * make a state of its own. States of more than 64 stacks go class by
 * class. */
int32_t gr_pda_step_slow(struct gr_pda *p, int32_t s, int c)
{
    if (gr_pda_ensure_row(p, s) != IG_OK)
        return -1;
    const struct grammar *g = p->g;
    int32_t n = p->len[s];
    if (n > 64) {
        int32_t t = compute_step(p, s, g->class_byte[c]);
        if (t >= 0)
            p->trans[p->row[s] + c] = t;
        return t;
    }
    uint64_t sig[256];
    gr_pda_class_stacks(p, s, sig);
    int32_t t = sig[c] ? step_picked(p, s, sig[c]) : GR_DEAD;
    if (t < 0)
        return -1;
    for (int j = 0; j < g->n_classes; j++) /* every class with the same stacks */
        if (sig[j] == sig[c])
            p->trans[p->row[s] + j] = t;
    return t;
}

int32_t gr_pda_step_uncached(struct gr_pda *p, int32_t s, int c)
{
    return compute_step(p, s, p->g->class_byte[c]);
}

int32_t gr_pda_start(struct gr_pda *p)
{
    const struct grammar *g = p->g;
    if (++p->stamp == 0) {
        memset(p->visited, 0, (size_t)p->cap_frames * sizeof *p->visited);
        p->stamp = 1;
    }
    int32_t r = g->root;
    int64_t n_work = 0;
    if (reserve(&p->work, &p->work_cap, g->alt_first[r + 1] - g->alt_first[r]) != IG_OK)
        return -1;
    for (int32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++) {
        int32_t start = g->alt_start[a];
        int32_t f = GR_ENDS_SEQ(g->elems[start]) ? GR_EMPTY : frame(p, start, GR_EMPTY);
        if (f < 0)
            return -1;
        p->work[n_work++] = f;
    }
    int32_t n = expand(p, n_work);
    return n < 0 ? -1 : state_of(p, p->out, n);
}

/* ---- cuts ---------------------------------------------------------------------- */

static int32_t common_frame(const struct gr_pda *p, int32_t a, int32_t b)
{
    while (p->depth[a] > p->depth[b])
        a = p->parent[a];
    while (p->depth[b] > p->depth[a])
        b = p->parent[b];
    while (a != b)
        a = p->parent[a], b = p->parent[b];
    return a;
}

int32_t gr_pda_cut(struct gr_pda *p, int32_t s)
{
    if (p->cut[s] >= 0)
        return p->cut[s];
    int32_t n = p->len[s];
    const int32_t *v = p->pool + p->off[s];
    if (n == 0 || v[0] <= GR_BOTTOM) /* complete or already cut: nothing below */
        return p->cut[s] = s;
    int32_t c = v[0];
    for (int32_t i = 1; i < n; i++)
        c = common_frame(p, c, v[i]);
    if (c <= GR_BOTTOM || p->parent[c] == GR_EMPTY)
        return p->cut[s] = s;
    int32_t base = frame(p, p->pos[c], GR_BOTTOM);
    if (base < 0 || reserve(&p->out, &p->out_cap, n) != IG_OK)
        return -1;
    int32_t path[512];
    for (int32_t i = 0; i < n; i++) {
        /* v may move when frames grow: reread through the pool */
        int32_t f = p->pool[p->off[s] + i], k = 0;
        for (; f != c && k < (int32_t)(sizeof path / sizeof path[0]); f = p->parent[f])
            path[k++] = f;
        if (f != c) /* deeper than the path buffer: no cut */
            return p->cut[s] = s;
        int32_t cur = base;
        while (k && cur >= 0)
            cur = frame(p, p->pos[path[--k]], cur);
        if (cur < 0)
            return -1;
        p->out[i] = cur;
    }
    int32_t t = state_of(p, p->out, n);
    if (t < 0)
        return -1;
    p->cut[s] = t;
    p->cut[t] = t;
    return t;
}

int32_t gr_pda_top_cut(struct gr_pda *p, int32_t s, int32_t *parent_out)
{
    const struct grammar *g = p->g;
    int32_t n = 0, parent = -1;
    for (int32_t i = 0; i < p->len[s]; i++) {
        int32_t f = p->pool[p->off[s] + i];
        if (f <= GR_BOTTOM)
            continue;
        const struct gr_byteset *set = &g->sets[GR_VALUE(g->elems[p->pos[f]])];
        if (!(set->w[2] | set->w[3]))
            continue;
        if (parent >= 0 && p->parent[f] != parent)
            return GR_DEAD;
        parent = p->parent[f];
        if (reserve(&p->out, &p->out_cap, n + 1) != IG_OK)
            return -1;
        int32_t t = frame(p, p->pos[f], GR_BOTTOM);
        if (t < 0)
            return -1;
        p->out[n++] = t;
    }
    *parent_out = parent;
    return n ? state_of(p, p->out, n) : GR_DEAD;
}

bool gr_pda_pops_to(const struct gr_pda *p, int32_t s, unsigned b, int32_t parent)
{
    const struct grammar *g = p->g;
    bool any = false;
    for (int32_t i = 0; i < p->len[s]; i++) {
        int32_t f = p->pool[p->off[s] + i];
        if (f <= GR_BOTTOM || !gr_byteset_has(&g->sets[GR_VALUE(g->elems[p->pos[f]])], b))
            continue;
        if (p->parent[f] != parent || !GR_ENDS_SEQ(g->elems[p->pos[f] + 1]))
            return false;
        any = true;
    }
    return any;
}

int32_t gr_pda_bottom_state(struct gr_pda *p)
{
    int32_t bottom = GR_BOTTOM;
    return state_of(p, &bottom, 1);
}

/* ---- life cycle ------------------------------------------------------------------ */

static void clear(struct gr_pda *p)
{
    p->n_frames = 2; /* GR_EMPTY and GR_BOTTOM */
    p->pos[GR_EMPTY] = p->pos[GR_BOTTOM] = -1;
    p->parent[GR_EMPTY] = p->parent[GR_BOTTOM] = -1;
    p->depth[GR_EMPTY] = p->depth[GR_BOTTOM] = 0;
    memset(p->frame_slots, 0xff, ((size_t)p->frame_mask + 1) * sizeof *p->frame_slots);
    p->n_states = 0;
    p->pool_len = 0;
    p->trans_len = 0;
    memset(p->state_slots, 0xff, ((size_t)p->state_mask + 1) * sizeof *p->state_slots);
    int32_t none = 0;
    state_of(p, &none, 0); /* GR_DEAD = state 0, the empty set; cannot fail: capacity exists */
}

int gr_pda_init(struct gr_pda *p, const struct grammar *g)
{
    *p = (struct gr_pda){.g = g};
    if (grow_frames(p) != IG_OK || grow_states(p) != IG_OK) {
        gr_pda_free(p);
        return IG_E_NOMEM;
    }
    /* the classes of each byte set, so a step's signatures cost the sets'
     * sizes in classes, not every class times every stack */
    p->set_classes = calloc((size_t)(g->n_sets ? g->n_sets : 1), sizeof *p->set_classes);
    if (!p->set_classes) {
        gr_pda_free(p);
        return nomem();
    }
    for (int32_t k = 0; k < g->n_sets; k++)
        for (int c = 0; c < g->n_classes; c++)
            if (gr_byteset_has(&g->sets[k], g->class_byte[c]))
                p->set_classes[k][c >> 6] |= 1ull << (c & 63);
    p->pool_cap = 4096;
    if (!(p->pool = malloc((size_t)p->pool_cap * sizeof *p->pool))) {
        gr_pda_free(p);
        return nomem();
    }
    clear(p);
    return IG_OK;
}

void gr_pda_free(struct gr_pda *p)
{
    free(p->pos), free(p->parent), free(p->depth), free(p->visited), free(p->frame_slots);
    free(p->off), free(p->len), free(p->row), free(p->cut), free(p->flags), free(p->pool), free(p->state_slots);
    free(p->trans), free(p->work), free(p->out), free(p->set_classes);
    *p = (struct gr_pda){0};
}

size_t gr_pda_bytes(const struct gr_pda *p)
{
    return (size_t)p->cap_frames * (4 * 4 + 2 * 4) + (size_t)p->cap_states * (8 + 4 + 8 + 4 + 1 + 8) +
           (size_t)p->pool_cap * 4 + (size_t)p->trans_cap * 4;
}

int gr_pda_rebase(struct gr_pda *p, int32_t *keep)
{
    /* Copy the kept stacks out as position lists (top first), rebuild. */
    int32_t n = p->len[*keep];
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += p->depth[p->pool[p->off[*keep] + i]] + 1;
    int32_t *save = malloc((size_t)(total + 1) * sizeof *save);
    int32_t *stacks = malloc((size_t)(n + 1) * sizeof *stacks);
    if (!save || !stacks) {
        free(save), free(stacks);
        return nomem();
    }
    int64_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t f = p->pool[p->off[*keep] + i];
        int64_t start = k++;
        int32_t d = 0;
        for (; f > GR_BOTTOM; f = p->parent[f])
            save[k++] = p->pos[f], d++;
        save[start] = d * 2 + (f == GR_BOTTOM); /* the frame count, and the bottom */
    }
    clear(p);
    k = 0;
    int st = IG_OK;
    for (int32_t i = 0; i < n && st == IG_OK; i++) {
        int32_t d = save[k] / 2, cur = save[k] & 1 ? GR_BOTTOM : GR_EMPTY;
        for (int32_t j = d; j >= 1 && cur >= 0; j--)
            cur = frame(p, save[k + j], cur);
        k += d + 1;
        if (cur < 0)
            st = IG_E_NOMEM;
        stacks[i] = cur;
    }
    int32_t s = st == IG_OK ? state_of(p, stacks, n) : -1;
    free(save), free(stacks);
    if (s < 0)
        return IG_E_NOMEM;
    *keep = s;
    return IG_OK;
}
