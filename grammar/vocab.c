/* grammar/vocab.c: a vocabulary's tokens as the grammar sees them: the
 * bytes each prints in generated text (tok_piece without special tokens),
 * in a trie stored depth-first so a mask is one walk over an array and a
 * dead prefix skips its whole subtree. Control, unused and unknown tokens
 * and tokens that print nothing are not text: never allowed (the
 * end-of-generation ids are kept apart for the end of the grammar). The
 * tokens SentencePiece's space prefix changes when they come first are
 * listed with their first-token text.
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
    if (build_trie(gv) != IG_OK)
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
    free(gv->order);
    free(gv->piece_off);
    free(gv->pieces);
    free(gv->in_trie);
    free(gv->eog);
    free(gv->strip);
    free(gv);
}

int64_t grammar_vocab_n_tokens(const struct grammar_vocab *gv) { return gv->n_tokens; }
