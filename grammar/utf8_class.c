/* grammar/utf8_class.c: character classes as bytes. A set of code point
 * ranges becomes the UTF-8 byte-range sequences that encode exactly those
 * code points (the splitting rule RE2 and Go's regexp use: cut a range where
 * its encodings change length or where a byte's range would not be the full
 * continuation range, until every piece is a product of byte ranges), and
 * those become the alternatives of a rule. Surrogates (U+D800..U+DFFF) have
 * no valid encoding and are never matched.
 * Covered by tests/grammar/test_grammar.c (every code point of random
 * classes against its own encoding). */
#include "grammar/internal.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int utf8_len(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

int gr_utf8_encode(uint32_t c, uint8_t *out)
{
    int n = utf8_len(c);
    switch (n) {
    case 1: out[0] = (uint8_t)c; break;
    case 2:
        out[0] = (uint8_t)(0xC0 | c >> 6);
        out[1] = (uint8_t)(0x80 | (c & 0x3F));
        break;
    case 3:
        out[0] = (uint8_t)(0xE0 | c >> 12);
        out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        break;
    default:
        out[0] = (uint8_t)(0xF0 | c >> 18);
        out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[3] = (uint8_t)(0x80 | (c & 0x3F));
        break;
    }
    return n;
}

void gr_utf8_sequences(uint32_t lo, uint32_t hi,
                       void (*emit)(void *user, int n, const uint8_t *lo, const uint8_t *hi),
                       void *user)
{
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return;
    if (lo <= 0xDFFF && hi >= 0xD800) { /* no surrogates */
        if (lo < 0xD800)
            gr_utf8_sequences(lo, 0xD7FF, emit, user);
        if (hi > 0xDFFF)
            gr_utf8_sequences(0xE000, hi, emit, user);
        return;
    }
    static const uint32_t last_of_len[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= last_of_len[i] && hi > last_of_len[i]) {
            gr_utf8_sequences(lo, last_of_len[i], emit, user);
            gr_utf8_sequences(last_of_len[i] + 1, hi, emit, user);
            return;
        }
    int n = utf8_len(lo);
    /* Split until each trailing byte spans 80..BF wherever the bytes before
     * it are free to vary: then the range is a product of byte ranges. */
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                gr_utf8_sequences(lo, lo | m, emit, user);
                gr_utf8_sequences((lo | m) + 1, hi, emit, user);
                return;
            }
            if ((hi & m) != m) {
                gr_utf8_sequences(lo, (hi & ~m) - 1, emit, user);
                gr_utf8_sequences(hi & ~m, hi, emit, user);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    gr_utf8_encode(lo, a);
    gr_utf8_encode(hi, z);
    emit(user, n, a, z);
}

/* ---- sequences -> rule -------------------------------------------------- */

/* One alternative: n byte sets, one per byte. */
struct seq {
    int n;
    struct gr_byteset b[4];
};

struct seq_list {
    struct seq *v;
    int64_t n, cap;
    bool nomem;
};

static void collect(void *user, int n, const uint8_t *lo, const uint8_t *hi)
{
    struct seq_list *l = user;
    if (l->nomem)
        return;
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 16;
        struct seq *p = realloc(l->v, (size_t)cap * sizeof *p);
        if (!p) {
            l->nomem = true;
            return;
        }
        l->v = p;
        l->cap = cap;
    }
    struct seq *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    s->n = n;
    for (int i = 0; i < n; i++)
        gr_byteset_add_range(&s->b[i], lo[i], hi[i]);
}

/* Sequences of one length whose bytes after the first agree become one
 * with the union of their first bytes: fewer alternatives, fewer stacks. */
static void merge_leads(struct seq_list *l)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < l->n; i++) {
        struct seq *s = &l->v[i];
        int64_t j = 0;
        for (; j < kept; j++) {
            struct seq *t = &l->v[j];
            if (t->n == s->n && !memcmp(&t->b[1], &s->b[1], (size_t)(s->n - 1) * sizeof s->b[0]))
                break;
        }
        if (j < kept) {
            for (int w = 0; w < 4; w++)
                l->v[j].b[0].w[w] |= s->b[0].w[w];
        } else {
            l->v[kept++] = *s;
        }
    }
    l->n = kept;
}

static uint64_t ranges_hash(const struct gr_cprange *r, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h = (h ^ r[i].lo) * 0x100000001b3ull;
        h = (h ^ r[i].hi) * 0x100000001b3ull;
    }
    return h;
}

/* Builds the class rule from its sequences; returns its index, or a
 * negative status. */
static int32_t build_class_rule(struct gr_builder *b, struct seq_list *l, const char *owner)
{
    char name[96];
    snprintf(name, sizeof name, "%.64s_%lld", owner, (long long)b->n_rules);
    int32_t r = gr_builder_add_rule(b, name, strlen(name), GR_RULE_CLASS);
    if (r < 0)
        return -ig_error(IG_E_NOMEM, "grammar: out of memory");
    b->rules[r].defined = true;
    for (int64_t i = 0; i < l->n; i++) {
        for (int k = 0; k < l->v[i].n; k++) {
            int32_t set = gr_builder_set(b, &l->v[i].b[k]);
            if (set < 0)
                return -ig_error(IG_E_NOMEM, "grammar: out of memory");
            int st = gr_builder_push(b, r, GR_ELEM(GR_BYTES, set));
            if (st != IG_OK)
                return -st;
        }
        int st = gr_builder_push(b, r, GR_ELEM(i + 1 < l->n ? GR_ALT : GR_END, 0));
        if (st != IG_OK)
            return -st;
    }
    return r;
}

int gr_utf8_class(struct gr_builder *b, int32_t r, const struct gr_cprange *ranges, int64_t n,
                  const char *owner_name)
{
    struct gr_byteset ascii = {{0}};
    bool wide = false;
    for (int64_t i = 0; i < n; i++) {
        if (ranges[i].lo < 0x80)
            gr_byteset_add_range(&ascii, ranges[i].lo, ranges[i].hi < 0x80 ? ranges[i].hi : 0x7F);
        if (ranges[i].hi >= 0x80)
            wide = true;
    }
    if (!wide) {
        int32_t set = gr_builder_set(b, &ascii);
        if (set < 0)
            return ig_error(IG_E_NOMEM, "grammar: out of memory");
        return gr_builder_push(b, r, GR_ELEM(GR_BYTES, set));
    }
    uint64_t h = ranges_hash(ranges, n);
    for (int64_t i = 0; i < b->n_classes; i++) {
        const struct gr_class_memo *c = &b->classes[i];
        if (c->hash == h && c->n == n && (!n || !memcmp(c->ranges, ranges, (size_t)n * sizeof *ranges)))
            return gr_builder_push(b, r, GR_ELEM(GR_RULE, c->rule));
    }

    struct seq_list l = {0};
    for (int64_t i = 0; i < n; i++)
        if (ranges[i].hi >= 0x80)
            gr_utf8_sequences(ranges[i].lo < 0x80 ? 0x80 : ranges[i].lo, ranges[i].hi, collect, &l);
    if (l.nomem) {
        free(l.v);
        return ig_error(IG_E_NOMEM, "grammar: out of memory");
    }
    merge_leads(&l);
    if (ascii.w[0] | ascii.w[1]) { /* the one-byte alternative first */
        collect(&l, 1, (const uint8_t *)"\0", (const uint8_t *)"\0");
        if (l.nomem) {
            free(l.v);
            return ig_error(IG_E_NOMEM, "grammar: out of memory");
        }
        memmove(&l.v[1], &l.v[0], (size_t)(l.n - 1) * sizeof l.v[0]);
        l.v[0] = (struct seq){.n = 1, .b = {ascii}};
    }
    int32_t cr = build_class_rule(b, &l, owner_name);
    free(l.v);
    if (cr < 0)
        return -cr;

    if (b->n_classes == b->cap_classes) {
        int64_t cap = b->cap_classes ? 2 * b->cap_classes : 16;
        struct gr_class_memo *p = realloc(b->classes, (size_t)cap * sizeof *p);
        if (!p)
            return ig_error(IG_E_NOMEM, "grammar: out of memory");
        b->classes = p;
        b->cap_classes = cap;
    }
    struct gr_cprange *copy = malloc((size_t)(n ? n : 1) * sizeof *copy);
    if (!copy)
        return ig_error(IG_E_NOMEM, "grammar: out of memory");
    if (n)
        memcpy(copy, ranges, (size_t)n * sizeof *copy);
    b->classes[b->n_classes++] = (struct gr_class_memo){.hash = h, .rule = cr, .n = n, .ranges = copy};
    return gr_builder_push(b, r, GR_ELEM(GR_RULE, cr));
}
