/* grammar/vocab.c: a vocabulary's tokens as the grammar sees them: the
 * bytes each prints in generated text (tok_piece without special tokens),
 * in a trie stored depth-first so a mask is one walk over an array and a
 * dead prefix skips its whole subtree. Control, unused and unknown tokens
 * and tokens that print nothing are not text: never allowed (the
 * end-of-generation ids are kept apart for the end of the grammar). The
 * tokens SentencePiece's space prefix changes when they come first are
 * listed with their first-token text. The tokens that are JSON string
 * content are kept as masks by character count, with the trie nodes that
 * are not all content listed apart (mask.c's walks inside strings).
 * Covered by tests/grammar/test_mask.c. */
#include "grammar/internal.h"

#include "core/status.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

struct piece_ref {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
};

static int cmp_piece(const void *a, const void *b)
{
    const struct piece_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int nomem(void) { return ig_error(IG_E_NOMEM, "grammar: out of memory for the token trie"); }

/* The token's text: its piece, or nothing when it is not text. */
static int64_t text_of(const struct tok_vocab *v, int32_t id, char *buf, size_t cap)
{
    switch (tok_type_of(v, id)) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNUSED:
    case TOK_TYPE_UNKNOWN:
        return 0;
    default:
        return tok_piece(v, id, false, buf, cap);
    }
}

static int build_trie(struct grammar_vocab *gv)
{
    int64_t n = 0;
    for (int64_t id = 0; id < gv->n_tokens; id++)
        n += gv->in_trie[id];
    struct piece_ref *refs = malloc((size_t)(n ? n : 1) * sizeof *refs);
    gv->order = malloc((size_t)(n ? n : 1) * sizeof *gv->order);
    /* at most one node per byte, plus the root and the sentinel */
    int64_t max_nodes = 2;
    for (int64_t id = 0; id < gv->n_tokens; id++)
        if (gv->in_trie[id])
            max_nodes += gv->piece_off[id + 1] - gv->piece_off[id];
    if (max_nodes > INT32_MAX / 2) {
        free(refs);
        return ig_error(IG_E_NOMEM, "grammar: the vocabulary is too large for a token trie");
    }
    gv->nodes = malloc((size_t)max_nodes * sizeof *gv->nodes);
    if (!refs || !gv->order || !gv->nodes) {
        free(refs);
        return nomem();
    }
    int64_t k = 0;
    for (int64_t id = 0; id < gv->n_tokens; id++)
        if (gv->in_trie[id])
            refs[k++] = (struct piece_ref){gv->pieces + gv->piece_off[id],
                                           (uint32_t)(gv->piece_off[id + 1] - gv->piece_off[id]),
                                           (int32_t)id};
    qsort(refs, (size_t)n, sizeof *refs, cmp_piece);

    int32_t open[GR_MAX_TOKEN_BYTES + 1];
    int32_t n_nodes = 1, depth = 0;
    gv->nodes[0] = (struct gv_node){.tok_begin = 0};
    open[0] = 0;
    const struct piece_ref *prev = NULL;
    for (int64_t i = 0; i < n; i++) {
        const struct piece_ref *t = &refs[i];
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < t->len && prev->p[lcp] == t->p[lcp])
                lcp++;
        for (; depth > (int32_t)lcp; depth--)
            gv->nodes[open[depth]].next = n_nodes;
        for (; depth < (int32_t)t->len; depth++) {
            gv->nodes[n_nodes] = (struct gv_node){
                .tok_begin = (int32_t)i, .depth = (uint16_t)(depth + 1), .byte = t->p[depth]};
            open[depth + 1] = n_nodes++;
        }
        gv->order[i] = t->id;
        prev = t;
    }
    for (; depth >= 0; depth--)
        gv->nodes[open[depth]].next = n_nodes;
    gv->nodes[n_nodes] = (struct gv_node){.next = n_nodes + 1, .tok_begin = (int32_t)n};
    gv->n_nodes = n_nodes;
    gv->n_order = (int32_t)n;
    free(refs);
    return IG_OK;
}

/* Length of the UTF-8 sequence lead byte b starts (2..4), 0 when b cannot
 * lead one; *lo and *hi: the range of the byte after it. */
static int lead_len(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80, *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0)
            *lo = 0xA0;
        if (b == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0)
            *lo = 0x90;
        if (b == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

static void merge_below(struct gv_below *into, const struct gv_below *b, int chars_before)
{
    into->ascii[0] |= b->ascii[0];
    into->ascii[1] |= b->ascii[1];
    into->flags |= b->flags;
    int m = chars_before + b->max_chars;
    if (m > into->max_chars)
        into->max_chars = (uint16_t)(m > 65535 ? 65535 : m);
}

/* The rest of a character led at node c (`need` more continuation bytes,
 * the first in [lo, hi]) and what follows it, into *out; below[] holds
 * the summaries of the boundary nodes after it. */
static void below_char(const struct grammar_vocab *gv, const struct gv_below *below, int32_t c,
                       int need, uint8_t lo, uint8_t hi, struct gv_below *out)
{
    const struct gv_node *nd = gv->nodes;
    if (nd[c].tok_begin < nd[c + 1].tok_begin) /* a token ends inside the character */
        merge_below(out, &(struct gv_below){.flags = GV_PARTIAL, .max_chars = 1}, 0);
    for (int32_t k = c + 1; k < nd[c].next; k = nd[k].next) {
        uint8_t b = nd[k].byte;
        if (b < lo || b > hi) {
            out->flags |= GV_INVALID;
        } else if (need > 1) {
            below_char(gv, below, k, need - 1, 0x80, 0xBF, out);
        } else {
            out->flags |= GV_NONASCII;
            merge_below(out, &below[k], 1);
            if (out->max_chars < 1)
                out->max_chars = 1;
        }
    }
}

/* Characters in p[0..d) (a final partial one and each invalid byte count
 * one); *whole: the prefix ends at a character boundary. */
static int count_chars(const uint8_t *p, int d, bool *whole)
{
    int j = 0, n = 0;
    while (j < d) {
        uint8_t lo, hi;
        int len = p[j] < 0x80 ? 1 : lead_len(p[j], &lo, &hi);
        j += len ? len : 1;
        n++;
    }
    *whole = j == d;
    return n;
}

/* Whether each node's prefix ends at a character boundary, and its
 * characters (cdepth); each token's characters (gv->chars). */
static bool *boundaries(struct grammar_vocab *gv, uint16_t *cdepth)
{
    const struct gv_node *nd = gv->nodes;
    bool *at = calloc((size_t)gv->n_nodes + 1, sizeof *at);
    gv->chars = malloc((size_t)(gv->n_order ? gv->n_order : 1) * sizeof *gv->chars);
    if (!at || !gv->chars) {
        free(at);
        return NULL;
    }
    at[0] = true;
    cdepth[0] = 0;
    for (int32_t i = 1; i < gv->n_nodes; i++) {
        int32_t tok = gv->order[nd[i].tok_begin];
        cdepth[i] = (uint16_t)count_chars(gv->pieces + gv->piece_off[tok], nd[i].depth, &at[i]);
    }
    for (int32_t k = 0; k < gv->n_order; k++) {
        int32_t tok = gv->order[k];
        bool whole;
        gv->chars[k] = (uint16_t)count_chars(gv->pieces + gv->piece_off[tok],
                                             (int)(gv->piece_off[tok + 1] - gv->piece_off[tok]),
                                             &whole);
    }
    return at;
}

/* gv->by_chars and gv->chars_upto: a counting sort of each root child's
 * tokens by their characters. */
static int sort_by_chars(struct grammar_vocab *gv)
{
    gv->by_chars = malloc((size_t)(gv->n_order ? gv->n_order : 1) * sizeof *gv->by_chars);
    gv->chars_upto = calloc(256, sizeof *gv->chars_upto);
    if (!gv->by_chars || !gv->chars_upto)
        return nomem();
    const struct gv_node *nd = gv->nodes;
    for (int32_t c = 1; c < gv->n_nodes; c = nd[c].next) {
        int32_t *upto = gv->chars_upto[nd[c].byte];
        int32_t a = nd[c].tok_begin, b = nd[nd[c].next].tok_begin;
        for (int32_t k = a; k < b; k++)
            upto[gv->chars[k] < GV_MAX_CHARS ? gv->chars[k] : GV_MAX_CHARS - 1]++;
        int32_t fill[GV_MAX_CHARS], sum = 0;
        for (int j = 0; j < GV_MAX_CHARS; j++) {
            fill[j] = a + sum;
            sum += upto[j];
            upto[j] = sum;
        }
        for (int32_t k = a; k < b; k++)
            gv->by_chars[fill[gv->chars[k] < GV_MAX_CHARS ? gv->chars[k] : GV_MAX_CHARS - 1]++] = k;
    }
    return IG_OK;
}

/* The characters of text p[0..n) when it is JSON string content (see
 * GV_JSON_PLAIN0), counted as gv->chars counts them (a final partial
 * character is one); -1 when it is not. */
static int plain_chars(const uint8_t *p, int64_t n)
{
    int chars = 0;
    for (int64_t j = 0; j < n; chars++) {
        uint8_t b = p[j], lo, hi;
        if (b < 0x80) {
            uint64_t w = b < 64 ? GV_JSON_PLAIN0 : GV_JSON_PLAIN1;
            if (!(w >> (b & 63) & 1))
                return -1;
            j++;
            continue;
        }
        int len = lead_len(b, &lo, &hi);
        if (!len)
            return -1;
        for (int c = 1; c < len && ++j < n; c++) {
            if (p[j] < lo || p[j] > hi)
                return -1;
            lo = 0x80, hi = 0xBF;
        }
        j++;
    }
    return chars;
}

/* gv->plain_upto, gv->max_plain_chars, gv->plain_sub and the impure list. */
static int plain_masks(struct grammar_vocab *gv)
{
    int64_t n_words = (gv->n_tokens + 63) / 64;
    gv->plain_upto = calloc((size_t)(GV_PLAIN_K + 1) * (size_t)(n_words ? n_words : 1),
                            sizeof *gv->plain_upto);
    gv->plain_sub = malloc((size_t)gv->n_nodes + 1);
    int16_t *pc = malloc((size_t)(gv->n_tokens ? gv->n_tokens : 1) * sizeof *pc);
    if (!gv->plain_upto || !gv->plain_sub || !pc) {
        free(pc);
        return nomem();
    }
    for (int64_t id = 0; id < gv->n_tokens; id++) { /* each token's content characters, or -1 */
        int c = gv->in_trie[id] ? plain_chars(gv->pieces + gv->piece_off[id],
                                              gv->piece_off[id + 1] - gv->piece_off[id]) : -1;
        pc[id] = (int16_t)(c > 32767 ? 32767 : c);
        if (c < 0)
            continue;
        if (c > gv->max_plain_chars)
            gv->max_plain_chars = c;
        uint64_t *row = gv->plain_upto + (size_t)(c < GV_PLAIN_K ? c : GV_PLAIN_K) * (size_t)n_words;
        row[id >> 6] |= 1ull << (id & 63);
    }
    for (int k = 1; k <= GV_PLAIN_K; k++) { /* at most k: the rows up to k */
        uint64_t *row = gv->plain_upto + (size_t)k * (size_t)n_words;
        for (int64_t w = 0; w < n_words; w++)
            row[w] |= row[w - n_words];
    }
    /* trie order: a node's own tokens are content, then its children's
     * subtrees (after it) are: backwards */
    const struct gv_node *nd = gv->nodes;
    for (int32_t i = gv->n_nodes - 1; i >= 0; i--) {
        uint8_t all = 1;
        for (int32_t k = nd[i].tok_begin; k < nd[i + 1].tok_begin && all; k++)
            all = pc[gv->order[k]] >= 0;
        for (int32_t c = i + 1; c < nd[i].next && all; c = nd[c].next)
            all = gv->plain_sub[c];
        gv->plain_sub[i] = all;
    }
    free(pc);
    gv->plain_sub[0] = 0; /* the root: the walk starts below it */
    for (int32_t i = 1; i < gv->n_nodes; i++)
        gv->n_impure += !gv->plain_sub[i];
    gv->impure = malloc((size_t)(gv->n_impure ? gv->n_impure : 1) * sizeof *gv->impure);
    gv->impure_next = malloc((size_t)(gv->n_impure ? gv->n_impure : 1) * sizeof *gv->impure_next);
    if (!gv->impure || !gv->impure_next)
        return nomem();
    for (int32_t i = 1, q = 0; i < gv->n_nodes; i++)
        if (!gv->plain_sub[i])
            gv->impure[q++] = i;
    for (int32_t q = 0; q < gv->n_impure; q++) { /* a binary search past the subtree */
        int32_t end = nd[gv->impure[q]].next, lo = q + 1, hi = gv->n_impure;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (gv->impure[mid] < end)
                lo = mid + 1;
            else
                hi = mid;
        }
        gv->impure_next[q] = lo;
    }
    return IG_OK;
}

/* Fills gv->incl from the summaries of the boundary nodes below each
 * node; children come after their parent, so backwards. */
static int summarize(struct grammar_vocab *gv)
{
    const struct gv_node *nd = gv->nodes;
    gv->incl = calloc((size_t)gv->n_nodes + 1, sizeof *gv->incl);
    struct gv_below *below = calloc((size_t)gv->n_nodes + 1, sizeof *below);
    uint16_t *cdepth = malloc(((size_t)gv->n_nodes + 1) * sizeof *cdepth);
    bool *at = cdepth ? boundaries(gv, cdepth) : NULL;
    if (!gv->incl || !below || !at) {
        free(below), free(at), free(cdepth);
        return nomem();
    }
    for (int32_t i = gv->n_nodes - 1; i >= 0; i--) {
        if (!at[i])
            continue;
        for (int32_t c = i + 1; c < nd[i].next; c = nd[c].next) {
            uint8_t b = nd[c].byte, lo, hi;
            struct gv_below *in = &gv->incl[c];
            if (b < 0x80) {
                in->ascii[b >> 6] |= 1ull << (b & 63);
                merge_below(in, &below[c], 1);
                if (in->max_chars < 1)
                    in->max_chars = 1;
            } else {
                int n = lead_len(b, &lo, &hi);
                if (n)
                    below_char(gv, below, c, n - 1, lo, hi, in);
                else
                    in->flags |= GV_INVALID;
            }
            merge_below(&below[i], in, 0);
        }
    }
    int32_t last[GR_MAX_TOKEN_BYTES + 1]; /* the last node seen at each depth */
    last[0] = 0;
    for (int32_t i = 1; i < gv->n_nodes; i++) {
        int d = nd[i].depth;
        if (!at[last[d - 1]]) /* the parent ends inside a character */
            gv->incl[i].flags |= GV_INVALID;
        gv->incl[i].parent_chars = cdepth[last[d - 1]];
        last[d] = i;
    }
    free(below), free(at), free(cdepth);
    return IG_OK;
}

int grammar_vocab_build(const struct tok_vocab *v, struct grammar_vocab **out)
{
    *out = NULL;
    struct grammar_vocab *gv = calloc(1, sizeof *gv);
    if (!gv)
        return nomem();
    gv->n_tokens = tok_n_tokens(v);
    int64_t n = gv->n_tokens;
    gv->piece_off = malloc(((size_t)n + 1) * sizeof *gv->piece_off);
    gv->in_trie = calloc((size_t)n ? (size_t)n : 1, 1);
    gv->eog = malloc(16 * sizeof *gv->eog);
    if (!gv->piece_off || !gv->in_trie || !gv->eog)
        goto fail;
    /* Two passes over the pieces: their total size, then the bytes. */
    char buf[GR_MAX_TOKEN_BYTES + 1];
    int64_t total = 0, n_strip = 0;
    for (int64_t id = 0; id < n; id++) {
        int64_t len = text_of(v, (int32_t)id, buf, sizeof buf);
        if (len > 0 && len <= GR_MAX_TOKEN_BYTES) {
            gv->in_trie[id] = 1;
            total += len;
            n_strip += tok_first_piece_drops_space(v, (int32_t)id) && buf[0] == ' ';
        }
        if (tok_is_eog(v, (int32_t)id) && gv->n_eog < 16)
            gv->eog[gv->n_eog++] = (int32_t)id;
    }
    gv->pieces = malloc((size_t)(total ? total : 1));
    gv->strip = malloc((size_t)(n_strip ? n_strip : 1) * sizeof *gv->strip);
    if (!gv->pieces || !gv->strip)
        goto fail;
    int64_t at = 0;
    for (int64_t id = 0; id < n; id++) {
        gv->piece_off[id] = at;
        if (!gv->in_trie[id])
            continue;
        int64_t len = text_of(v, (int32_t)id, (char *)gv->pieces + at, (size_t)(total - at));
        if (gv->pieces[at] == ' ' && tok_first_piece_drops_space(v, (int32_t)id))
            gv->strip[gv->n_strip++] = (int32_t)id;
        at += len;
        if (len > gv->max_depth)
            gv->max_depth = (int32_t)len;
    }
    gv->piece_off[n] = at;
    gv->text_bits = calloc(((size_t)n + 63) / 64 + 1, sizeof *gv->text_bits);
    if (!gv->text_bits)
        goto fail;
    for (int64_t id = 0; id < n; id++)
        if (gv->in_trie[id])
            gv->text_bits[id >> 6] |= 1ull << (id & 63);
    if (build_trie(gv) != IG_OK || summarize(gv) != IG_OK || sort_by_chars(gv) != IG_OK ||
        plain_masks(gv) != IG_OK)
        goto fail_quiet;
    *out = gv;
    return IG_OK;
fail:
    nomem();
fail_quiet:
    grammar_vocab_free(gv);
    return IG_E_NOMEM;
}

void grammar_vocab_free(struct grammar_vocab *gv)
{
    if (!gv)
        return;
    free(gv->nodes);
    free(gv->incl);
    free(gv->chars);
    free(gv->by_chars);
    free(gv->chars_upto);
    free(gv->plain_upto);
    free(gv->plain_sub);
    free(gv->impure);
    free(gv->impure_next);
    free(gv->order);
    free(gv->piece_off);
    free(gv->pieces);
    free(gv->in_trie);
    free(gv->text_bits);
    free(gv->eog);
    free(gv->strip);
    free(gv);
}

int64_t grammar_vocab_n_tokens(const struct grammar_vocab *gv) { return gv->n_tokens; }
