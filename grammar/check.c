/* grammar/check.c: what a grammar must satisfy before it runs, then the
 * compiled form. Refused up front, one line each: no `root` rule, a rule
 * used but never defined, a rule reachable from root that can match no text
 * at all (every alternative needs itself again, or an empty character
 * class), and left recursion (a rule that can begin with itself without
 * reading a byte, which would grow the matcher's stack forever). Empty
 * matches are computed exactly (a rule is nullable when some alternative is
 * all nullable rules), so recursion hidden behind rules that can be empty is
 * found too. A cycle made only of references in last position (`x ::= y`,
 * `(a?)*`) does not grow the stack and is accepted.
 * Then: all rules' elements in one array, and the byte classes (bytes that
 * no byte set tells apart) the matcher's transition tables are indexed by.
 * Covered by tests/grammar/test_grammar.c. */
#include "grammar/internal.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One alternative: rule r's elements [begin, end). */
struct alt {
    int32_t rule;
    int64_t begin, end;
};

struct checker {
    struct gr_builder *b;
    int64_t n_rules;
    struct alt *alts;
    int64_t n_alts;
    bool *reach;
};

static int nomem(void) { return ig_error(IG_E_NOMEM, "grammar: out of memory"); }

static const char *kind_word(enum gr_rule_kind k)
{
    switch (k) {
    case GR_RULE_GROUP: return "the group";
    case GR_RULE_REPEAT: return "the repetition";
    case GR_RULE_CLASS: return "the character class";
    default: return "rule";
    }
}

/* "rule 'x'" or "the group in rule 'x'", for messages (the position is
 * the message's prefix). */
static void describe(const struct gr_builder *b, int32_t r, char *buf, size_t cap)
{
    const struct gr_rule *rule = &b->rules[r];
    if (rule->kind == GR_RULE_USER) {
        snprintf(buf, cap, "rule '%s'", rule->name);
        return;
    }
    const char *us = strrchr(rule->name, '_');
    int owner_len = us ? (int)(us - rule->name) : (int)strlen(rule->name);
    snprintf(buf, cap, "%s in rule '%.*s'", kind_word(rule->kind), owner_len, rule->name);
}

static int collect_alts(struct checker *c)
{
    int64_t n = 0;
    for (int64_t r = 0; r < c->n_rules; r++)
        for (int64_t i = 0; i < c->b->rules[r].n_elems; i++)
            n += GR_ENDS_SEQ(c->b->rules[r].elems[i]);
    c->alts = malloc((size_t)(n ? n : 1) * sizeof *c->alts);
    if (!c->alts)
        return nomem();
    for (int64_t r = 0; r < c->n_rules; r++) {
        const struct gr_rule *rule = &c->b->rules[r];
        int64_t begin = 0;
        for (int64_t i = 0; i < rule->n_elems; i++)
            if (GR_ENDS_SEQ(rule->elems[i])) {
                c->alts[c->n_alts++] = (struct alt){(int32_t)r, begin, i};
                begin = i + 1;
            }
    }
    return IG_OK;
}

/* Marks the rules reachable from root. */
static int reachable(struct checker *c, int32_t root)
{
    int32_t *todo = malloc((size_t)c->n_rules * sizeof *todo);
    c->reach = calloc((size_t)c->n_rules, sizeof *c->reach);
    if (!todo || !c->reach) {
        free(todo);
        return nomem();
    }
    int64_t n = 0;
    todo[n++] = root;
    c->reach[root] = true;
    while (n) {
        const struct gr_rule *rule = &c->b->rules[todo[--n]];
        for (int64_t i = 0; i < rule->n_elems; i++) {
            uint32_t e = rule->elems[i];
            if (GR_TYPE(e) == GR_RULE && !c->reach[GR_VALUE(e)]) {
                c->reach[GR_VALUE(e)] = true;
                todo[n++] = GR_VALUE(e);
            }
        }
    }
    free(todo);
    return IG_OK;
}

/* The least fixpoint "rule r has an alternative all of whose elements are
 * good", where a byte set is good when `bytes_good` says so (productive:
 * a non-empty set; nullable: never) and a rule reference when the rule is.
 * Worklist over per-alternative counts of elements not yet known good, so
 * long chains of rules cost linear time. */
static int fixpoint(struct checker *c, bool (*bytes_good)(const struct gr_builder *, uint32_t),
                    bool *good)
{
    int64_t n_rules = c->n_rules, n_alts = c->n_alts;
    if (n_rules <= 0)
        return IG_OK;
    int64_t *pending = malloc((size_t)(n_alts ? n_alts : 1) * sizeof *pending);
    int64_t *occ_first = calloc((size_t)n_rules + 1, sizeof *occ_first);
    int64_t n_occ = 0;
    for (int64_t a = 0; a < n_alts; a++)
        for (int64_t i = c->alts[a].begin; i < c->alts[a].end; i++)
            n_occ += GR_TYPE(c->b->rules[c->alts[a].rule].elems[i]) == GR_RULE;
    int64_t *occ = malloc((size_t)(n_occ ? n_occ : 1) * sizeof *occ);
    int32_t *queue = malloc((size_t)n_rules * sizeof *queue);
    int64_t *fill = calloc((size_t)n_rules + 1, sizeof *fill);
    if (!pending || !occ_first || !occ || !queue || !fill) {
        free(pending), free(occ_first), free(occ), free(queue), free(fill);
        return nomem();
    }
    /* occurrences of each rule, grouped by rule (counting sort) */
    for (int64_t a = 0; a < n_alts; a++)
        for (int64_t i = c->alts[a].begin; i < c->alts[a].end; i++) {
            uint32_t e = c->b->rules[c->alts[a].rule].elems[i];
            if (GR_TYPE(e) == GR_RULE)
                occ_first[GR_VALUE(e) + 1]++;
        }
    for (int64_t r = 0; r < n_rules; r++)
        occ_first[r + 1] += occ_first[r];
    int64_t q_head = 0, q_tail = 0;
    memset(good, 0, (size_t)n_rules * sizeof *good);
    for (int64_t a = 0; a < n_alts; a++) {
        int64_t p = 0;
        for (int64_t i = c->alts[a].begin; i < c->alts[a].end; i++) {
            uint32_t e = c->b->rules[c->alts[a].rule].elems[i];
            if (GR_TYPE(e) == GR_RULE) {
                int32_t t = GR_VALUE(e);
                occ[occ_first[t] + fill[t]++] = a;
                p++;
            } else if (!bytes_good(c->b, e)) {
                p = INT64_MAX / 2; /* this alternative never becomes good */
            }
        }
        pending[a] = p;
        int32_t r = c->alts[a].rule;
        if (p == 0 && !good[r]) {
            good[r] = true;
            queue[q_tail++] = r;
        }
    }
    while (q_head < q_tail) {
        int32_t t = queue[q_head++];
        for (int64_t k = occ_first[t]; k < occ_first[t + 1]; k++) {
            int64_t a = occ[k];
            int32_t r = c->alts[a].rule;
            if (--pending[a] == 0 && !good[r]) {
                good[r] = true;
                queue[q_tail++] = r;
            }
        }
    }
    free(pending), free(occ_first), free(occ), free(queue), free(fill);
    return IG_OK;
}

static bool bytes_nonempty(const struct gr_builder *b, uint32_t e)
{
    const struct gr_byteset *s = &b->sets[GR_VALUE(e)];
    return (s->w[0] | s->w[1] | s->w[2] | s->w[3]) != 0;
}

static bool bytes_never(const struct gr_builder *b, uint32_t e) { return false; }

/* ---- left recursion: strongly connected components of "begins with" ------ */

struct edge {
    int32_t to;
    bool tail; /* the reference is the last element of its alternative */
};

/* Tarjan's algorithm without recursion. comp[r] receives r's component. */
static int components(int64_t n, const int64_t *first, const struct edge *edges, int32_t *comp)
{
    if (n <= 0)
        return IG_OK;
    int32_t *index = malloc((size_t)n * sizeof *index), *low = malloc((size_t)n * sizeof *low);
    int32_t *stack = malloc((size_t)n * sizeof *stack), *call = malloc((size_t)n * sizeof *call);
    int64_t *next = malloc((size_t)n * sizeof *next);
    bool *on = calloc((size_t)n, sizeof *on);
    if (!index || !low || !stack || !call || !next || !on) {
        free(index), free(low), free(stack), free(call), free(next), free(on);
        return nomem();
    }
    memset(index, 0xff, (size_t)n * sizeof *index);
    int32_t counter = 0, n_comp = 0;
    int64_t sp = 0;
    for (int64_t s = 0; s < n; s++) {
        if (index[s] >= 0)
            continue;
        int64_t depth = 0;
        call[depth++] = (int32_t)s;
        index[s] = low[s] = counter++;
        next[s] = first[s];
        stack[sp++] = (int32_t)s;
        on[s] = true;
        while (depth) {
            int32_t v = call[depth - 1];
            if (next[v] < first[v + 1]) {
                int32_t w = edges[next[v]++].to;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    next[w] = first[w];
                    stack[sp++] = w;
                    on[w] = true;
                    call[depth++] = w;
                } else if (on[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            if (low[v] == index[v]) {
                int32_t w;
                do {
                    w = stack[--sp];
                    on[w] = false;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
            depth--;
            if (depth && low[v] < low[call[depth - 1]])
                low[call[depth - 1]] = low[v];
        }
    }
    free(index), free(low), free(stack), free(call), free(next), free(on);
    return IG_OK;
}

static int left_recursion(struct checker *c, const bool *nullable)
{
    int64_t n = c->n_rules, n_edges = 0;
    int64_t *first = calloc((size_t)n + 1, sizeof *first);
    if (!first)
        return nomem();
    /* two passes: count, then fill (edges grouped by source rule) */
    struct edge *edges = NULL;
    for (int pass = 0; pass < 2; pass++) {
        int64_t *fill = pass ? calloc((size_t)n + 1, sizeof *fill) : NULL;
        if (pass && (!fill || !(edges = malloc((size_t)(n_edges ? n_edges : 1) * sizeof *edges)))) {
            free(fill), free(first), free(edges);
            return nomem();
        }
        for (int64_t a = 0; a < c->n_alts; a++) {
            const struct alt *al = &c->alts[a];
            if (!c->reach[al->rule])
                continue;
            const uint32_t *el = c->b->rules[al->rule].elems;
            for (int64_t i = al->begin; i < al->end; i++) {
                if (GR_TYPE(el[i]) != GR_RULE)
                    break;
                if (pass)
                    edges[first[al->rule] + fill[al->rule]++] =
                        (struct edge){GR_VALUE(el[i]), i + 1 == al->end};
                else
                    first[al->rule + 1]++, n_edges++;
                if (!nullable[GR_VALUE(el[i])])
                    break;
            }
        }
        if (!pass)
            for (int64_t r = 0; r < n; r++)
                first[r + 1] += first[r];
        free(fill);
    }
    int32_t *comp = malloc((size_t)n * sizeof *comp);
    int st = comp ? components(n, first, edges, comp) : nomem();
    for (int64_t r = 0; r < n && st == IG_OK; r++) {
        for (int64_t k = first[r]; k < first[r + 1]; k++) {
            const struct edge *e = &edges[k];
            if (e->tail || comp[e->to] != comp[r])
                continue;
            char what[160], via[160];
            describe(c->b, (int32_t)r, what, sizeof what);
            describe(c->b, e->to, via, sizeof via);
            const struct gr_rule *rr = &c->b->rules[r];
            st = ig_error(IG_E_USAGE, "%s:%d:%d: left recursion: %s can begin with itself "
                          "again (through %s at %d:%d) without reading any text; write the "
                          "recursion on the right, e.g. 'list ::= item (\",\" item)*'",
                          c->b->source, rr->line, rr->col, what, via,
                          c->b->rules[e->to].line, c->b->rules[e->to].col);
            break;
        }
    }
    free(comp), free(first), free(edges);
    return st;
}

/* ---- the compiled form ------------------------------------------------------------ */

/* Bytes in one class are in the same byte sets: refine the partition by
 * every set in turn. */
static void byte_classes(struct grammar *g)
{
    uint8_t cls[256] = {0};
    int n = 1;
    for (int32_t s = 0; s < g->n_sets; s++) {
        int16_t remap[512];
        memset(remap, 0xff, sizeof remap);
        int m = 0;
        uint8_t next[256];
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + gr_byteset_has(&g->sets[s], (unsigned)b);
            if (remap[key] < 0)
                remap[key] = (int16_t)m++;
            next[b] = (uint8_t)remap[key];
        }
        memcpy(cls, next, sizeof cls);
        n = m;
    }
    memcpy(g->byte_class, cls, sizeof cls);
    g->n_classes = n;
    for (int b = 255; b >= 0; b--)
        g->class_byte[cls[b]] = (uint8_t)b;
}

static int build(struct gr_builder *b, const struct checker *c, int32_t root, struct grammar **out)
{
    struct grammar *g = calloc(1, sizeof *g);
    if (!g)
        return nomem();
    g->n_rules = (int32_t)b->n_rules;
    g->root = root;
    g->n_elems = b->total_elems;
    g->elems = malloc((size_t)(g->n_elems ? g->n_elems : 1) * sizeof *g->elems);
    g->alt_first = malloc(((size_t)g->n_rules + 1) * sizeof *g->alt_first);
    g->alt_start = malloc((size_t)(c->n_alts ? c->n_alts : 1) * sizeof *g->alt_start);
    g->names = calloc((size_t)g->n_rules, sizeof *g->names);
    g->n_sets = (int32_t)b->n_sets;
    g->sets = malloc((size_t)(b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    if (!g->elems || !g->alt_first || !g->alt_start || !g->names || !g->sets) {
        grammar_free(g);
        return nomem();
    }
    if (b->n_sets)
        memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    int64_t pos = 0, a = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        const struct gr_rule *rule = &b->rules[r];
        g->alt_first[r] = (int32_t)a;
        for (int64_t i = 0; i < rule->n_elems; i++) {
            if (i == 0 || GR_ENDS_SEQ(rule->elems[i - 1]))
                g->alt_start[a++] = (int32_t)(pos + i);
            g->elems[pos + i] = rule->elems[i];
        }
        pos += rule->n_elems;
        g->names[r] = rule->name;
        b->rules[r].name = NULL; /* the grammar owns it now */
    }
    g->alt_first[g->n_rules] = (int32_t)a;
    IG_ASSERT(pos == g->n_elems && a == c->n_alts);
    byte_classes(g);
    *out = g;
    return IG_OK;
}

void grammar_free(struct grammar *g)
{
    if (!g)
        return;
    for (int32_t r = 0; g->names && r < g->n_rules; r++)
        free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alt_first);
    free(g->alt_start);
    free(g->sets);
    free(g);
}

int gr_finalize(struct gr_builder *b, struct grammar **out)
{
    *out = NULL;
    struct checker c = {.b = b, .n_rules = b->n_rules};
    bool *productive = NULL, *nullable = NULL;
    int32_t root = -1;
    int st = IG_OK;
    for (int64_t r = 0; r < b->n_rules; r++)
        if (b->rules[r].kind == GR_RULE_USER && !strcmp(b->rules[r].name, "root"))
            root = (int32_t)r;
    if (root < 0 || !b->rules[root].defined) {
        st = ig_error(IG_E_USAGE, "%s: no rule named 'root' (the grammar starts there)",
                      b->source);
        goto done;
    }
    for (int64_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined) {
            st = ig_error(IG_E_USAGE, "%s:%d:%d: rule '%s' is used but never defined", b->source,
                          b->rules[r].use_line, b->rules[r].use_col, b->rules[r].name);
            goto done;
        }
    productive = malloc((size_t)b->n_rules * sizeof *productive);
    nullable = malloc((size_t)b->n_rules * sizeof *nullable);
    if (!productive || !nullable) {
        st = nomem();
        goto done;
    }
    if ((st = collect_alts(&c)) != IG_OK || (st = reachable(&c, root)) != IG_OK ||
        (st = fixpoint(&c, bytes_nonempty, productive)) != IG_OK ||
        (st = fixpoint(&c, bytes_never, nullable)) != IG_OK)
        goto done;
    /* Report the cause first: a user rule that needs itself or an empty
     * class, then any user rule, then the groups and repetitions. */
    for (int pass = 0; pass < 3; pass++)
        for (int64_t r = 0; r < b->n_rules; r++) {
            if (!c.reach[r] || productive[r] || (pass < 2 && b->rules[r].kind != GR_RULE_USER))
                continue;
            bool cause = false;
            for (int64_t i = 0; i < b->rules[r].n_elems && pass == 0; i++) {
                uint32_t e = b->rules[r].elems[i];
                cause |= (GR_TYPE(e) == GR_RULE && GR_VALUE(e) == r) ||
                         (GR_TYPE(e) == GR_BYTES && !bytes_nonempty(b, e));
            }
            if (pass == 0 && !cause)
                continue;
            char what[160];
            describe(b, (int32_t)r, what, sizeof what);
            st = ig_error(IG_E_USAGE, "%s:%d:%d: %s can match no text: each of its "
                          "alternatives needs itself again or an empty character class%s",
                          b->source, b->rules[r].line, b->rules[r].col, what,
                          r == root ? " (so the grammar matches nothing)" : "");
            goto done;
        }
    if ((st = left_recursion(&c, nullable)) != IG_OK)
        goto done;
    st = build(b, &c, root, out);
done:
    free(productive);
    free(nullable);
    free(c.alts);
    free(c.reach);
    gr_builder_free(b);
    return st;
}
