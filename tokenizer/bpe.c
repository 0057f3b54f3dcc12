/* tokenizer/bpe.c: byte-level BPE ("gpt2" vocabularies) and UTF-8 BPE
 * ("gemma4": characters instead of bytes, spaces as U+2581, newline runs as
 * the only pre-split, <0xXX> byte fallback). The text is split
 * by the pre-tokenizer (pretok.c); each piece starts as one symbol per
 * byte (the token of the byte's GPT-2 code point) and the adjacent pair
 * with the lowest merge rank is merged, leftmost first on ties, until no
 * pair has a merge: HF tokenizers' order exactly (with Llama 3's
 * ignore_merges, a piece that is itself a token is taken whole first). A
 * binary heap over the candidate pairs and a linked list of symbols make
 * that O(n log n) per piece; stale heap entries are skipped when popped.
 * Finished pieces are cached (struct tok_cache), so repeated words cost one
 * hash lookup.
 * Covered by tests/tokenizer/test_hf_smollm.py, test_hf_pretypes.py and
 * test_llamacpp_vocab.py (Gemma 4's vectors). */
#include "tokenizer/internal.h"
#include "tokenizer/merge_heap.h"
#include "tokenizer/unicode.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_PIECE = 256 };

struct sym {
    int32_t id;         /* -1: a character without a token (UTF-8 BPE; never merged) */
    int32_t prev, next; /* -1 at the ends */
    bool alive;
    uint32_t off, len;  /* its bytes in the piece (UTF-8 BPE's byte fallback) */
};

struct work {
    struct sym *syms;
    struct tok_merge_heap heap;
    char *mapped;       /* the piece in GPT-2 form, for ignore_merges */
    int64_t cap;
};

static void push_pair(const struct tok_vocab *v, struct work *w, int32_t pos)
{
    int32_t next = w->syms[pos].next;
    if (next < 0 || w->syms[pos].id < 0 || w->syms[next].id < 0)
        return;
    const struct tok_merge_slot *m = tok_find_merge(v, w->syms[pos].id, w->syms[next].id);
    if (m)
        tok_merge_push(&w->heap, (struct tok_merge_cand){m->rank, pos, 0});
}

/* Makes room in w for a piece of n bytes. */
static int work_reserve(struct work *w, size_t n)
{
    if ((int64_t)n <= w->cap)
        return IG_OK;
    int64_t cap = w->cap ? w->cap : 256;
    while (cap < (int64_t)n)
        cap *= 2;
    struct sym *syms = realloc(w->syms, (size_t)cap * sizeof *syms);
    if (syms)
        w->syms = syms;
    struct tok_merge_cand *heap = realloc(w->heap.a, (size_t)cap * 3 * sizeof *heap);
    if (heap)
        w->heap.a = heap;
    char *mapped = realloc(w->mapped, (size_t)cap * 2);
    if (mapped)
        w->mapped = mapped;
    if (!syms || !heap || !mapped)
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory for a %zu-byte piece", n);
    w->cap = cap;
    return IG_OK;
}

/* Merges w->syms[0..m) (linked in order) by rank, lowest first and
 * leftmost on ties. */
static void merge_syms(const struct tok_vocab *v, struct work *w, int32_t m)
{
    w->syms[m - 1].next = -1;
    w->heap.n = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(v, w, i);
    while (w->heap.n > 0) {
        struct tok_merge_cand c = tok_merge_pop(&w->heap);
        struct sym *a = &w->syms[c.pos];
        if (!a->alive || a->next < 0)
            continue;
        struct sym *b = &w->syms[a->next];
        const struct tok_merge_slot *mg = tok_find_merge(v, a->id, b->id);
        if (!mg || (double)mg->rank != c.prio)
            continue; /* stale: one side has been merged since */
        a->id = mg->id;
        a->len += b->len;
        b->alive = false;
        a->next = b->next;
        if (b->next >= 0)
            w->syms[b->next].prev = c.pos;
        if (a->prev >= 0)
            push_pair(v, w, a->prev);
        push_pair(v, w, c.pos);
    }
}

/* Merges the bytes of one piece and appends the ids. */
static int bpe_piece(const struct tok_vocab *v, struct work *w, const unsigned char *s, size_t n,
                     struct tok_ids *out)
{
    int rc = work_reserve(w, n);
    if (rc)
        return rc;
    if (v->ignore_merges) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += (size_t)tok_utf8_put(v->byte_cp[s[i]], w->mapped + m);
        int32_t id = tok_find(v, w->mapped, m);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    /* A byte the vocabulary has no token for is dropped, as HF's BPE (with
     * no unk token) and llama.cpp do: SmolLM2 lacks tokens for a few
     * control bytes, so such text does not survive a round trip. */
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_id[s[i]];
        if (id < 0)
            continue;
        w->syms[m] = (struct sym){id, m - 1, m + 1, true, (uint32_t)i, 1};
        m++;
    }
    if (m == 0)
        return IG_OK;
    merge_syms(v, w, m);
    if ((rc = tok_ids_reserve(out, m)))
        return rc;
    for (int32_t i = 0; i >= 0; i = w->syms[i].next)
        out->ids[out->n++] = w->syms[i].id;
    return IG_OK;
}

/* One piece of UTF-8 BPE ("gemma4"): one symbol per character, merged by
 * rank; a character without a token stays apart and ends as its bytes'
 * <0xXX> tokens (a byte without one is dropped, as llama.cpp does). A run
 * of newlines that is a token is taken whole, as llama.cpp does for
 * Gemma 4 (its merges would split it otherwise). */
static int bpe_utf8_piece(const struct tok_vocab *v, struct work *w, const unsigned char *s,
                          size_t n, struct tok_ids *out)
{
    int rc = work_reserve(w, n);
    if (rc)
        return rc;
    if (s[0] == '\n') {
        int32_t id = tok_find(v, (const char *)s, n);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    int32_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = tok_utf8_next(s, i, n, &cp);
        int32_t id = cp == TOK_CP_INVALID ? -1 : tok_find(v, (const char *)s + i, (size_t)len);
        w->syms[m] = (struct sym){id, m - 1, m + 1, true, (uint32_t)i, (uint32_t)len};
        m++;
        i += (size_t)len;
    }
    merge_syms(v, w, m);
    for (int32_t i = 0; i >= 0 && !rc; i = w->syms[i].next) {
        const struct sym *y = &w->syms[i];
        if (y->id >= 0) {
            rc = tok_ids_push(out, y->id);
            continue;
        }
        for (uint32_t k = 0; k < y->len && !rc; k++)
            if (v->byte_id[s[y->off + k]] >= 0)
                rc = tok_ids_push(out, v->byte_id[s[y->off + k]]);
    }
    return rc;
}

void tok_cache_free(struct tok_cache *c)
{
    free(c->slots);
    free(c->keys);
    free(c->ids);
    *c = (struct tok_cache){0};
}

static void cache_clear(struct tok_cache *c)
{
    memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
    c->used = 0;
    c->keys_len = 0;
    c->ids_len = 0;
}

/* Returns the slot for the piece: filled (hash != 0) on a hit, empty on a
 * miss; NULL when the cache cannot be used. */
static struct tok_cache_slot *cache_slot(struct tok_cache *c, const unsigned char *s, size_t n,
                                         uint64_t h)
{
    if (!c->slots) {
        c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
        if (!c->slots)
            return NULL;
        c->mask = CACHE_SLOTS - 1;
    }
    for (uint64_t i = h & c->mask;; i = (i + 1) & c->mask) {
        struct tok_cache_slot *e = &c->slots[i];
        if (e->hash == 0)
            return e;
        if (e->hash == h && e->key_len == n && !memcmp(c->keys + e->key_off, s, n))
            return e;
    }
}

static int cache_put(struct tok_cache *c, struct tok_cache_slot *e, const unsigned char *s,
                     size_t n, uint64_t h, const int32_t *ids, int64_t n_ids)
{
    if (c->keys_len + n > c->keys_cap) {
        size_t cap = c->keys_cap ? c->keys_cap * 2 : 1 << 20;
        char *p = realloc(c->keys, cap);
        if (!p)
            return IG_E_NOMEM;
        c->keys = p;
        c->keys_cap = cap;
    }
    if (c->ids_len + n_ids > c->ids_cap) {
        int64_t cap = c->ids_cap ? c->ids_cap * 2 : 1 << 18;
        int32_t *p = realloc(c->ids, (size_t)cap * sizeof *p);
        if (!p)
            return IG_E_NOMEM;
        c->ids = p;
        c->ids_cap = cap;
    }
    memcpy(c->keys + c->keys_len, s, n);
    if (n_ids > 0) /* a piece of dropped bytes has no ids at all */
        memcpy(c->ids + c->ids_len, ids, (size_t)n_ids * sizeof *ids);
    *e = (struct tok_cache_slot){h, (uint32_t)c->keys_len, (uint32_t)n, (uint32_t)c->ids_len,
                                 (uint32_t)n_ids};
    c->keys_len += n;
    c->ids_len += n_ids;
    c->used++;
    return IG_OK;
}

typedef int (*piece_fn)(const struct tok_vocab *v, struct work *w, const unsigned char *s,
                        size_t n, struct tok_ids *out);

/* Encodes the pieces of s that end at ends[0..), through the cache. */
static int encode_pieces(struct tok_vocab *v, const unsigned char *s, const struct tok_ids *ends,
                         piece_fn piece, struct tok_ids *out)
{
    struct work w = {0};
    struct tok_cache *c = &v->cache;
    int rc = IG_OK;
    for (int64_t k = 0, start = 0; !rc && k < ends->n; start = ends->ids[k++]) {
        const unsigned char *p = s + start;
        size_t n = (size_t)(ends->ids[k] - start);
        if (n > CACHE_MAX_PIECE) {
            rc = piece(v, &w, p, n, out);
            continue;
        }
        uint64_t h = tok_hash_bytes(p, n) | 1;
        struct tok_cache_slot *e = cache_slot(c, p, n, h);
        if (e && e->hash) {
            if (e->n_ids > 0 && !(rc = tok_ids_reserve(out, e->n_ids))) {
                memcpy(out->ids + out->n, c->ids + e->ids_off, e->n_ids * sizeof(int32_t));
                out->n += e->n_ids;
            }
            continue;
        }
        int64_t before = out->n;
        rc = piece(v, &w, p, n, out);
        if (!rc && e) {
            if (c->used * 2 > (int64_t)c->mask) {
                cache_clear(c);
                e = cache_slot(c, p, n, h);
            }
            /* no ids at all (every byte lacks a token) leaves out->ids NULL */
            cache_put(c, e, p, n, h, out->n > before ? out->ids + before : NULL, out->n - before);
        }
    }
    free(w.syms);
    free(w.heap.a);
    free(w.mapped);
    return rc;
}

int tok_bpe_encode(struct tok_vocab *v, const char *text, size_t len, struct tok_ids *out)
{
    struct tok_ids ends = {0};
    int rc = tok_pre_split(v->pre, text, len, &ends);
    if (!rc)
        rc = encode_pieces(v, (const unsigned char *)text, &ends, bpe_piece, out);
    tok_ids_free(&ends);
    return rc;
}

int tok_bpe_utf8_encode(struct tok_vocab *v, const char *text, size_t len, struct tok_ids *out)
{
    if (len > INT32_MAX / 3)
        return ig_error(IG_E_INPUT, "tokenizer: text of %zu bytes is too long", len);
    /* spaces become U+2581 (Gemma 4's normalizer), then pieces: runs of
     * newlines and runs of anything else */
    unsigned char *t = malloc(3 * len + 1);
    if (!t)
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            t[n++] = (unsigned char)text[i];
        }
    }
    struct tok_ids ends = {0};
    int rc = IG_OK;
    for (size_t i = 0; i < n && !rc;) {
        bool nl = t[i] == '\n';
        size_t j = i;
        while (j < n && (t[j] == '\n') == nl)
            j++;
        rc = tok_ids_push(&ends, (int32_t)j);
        i = j;
    }
    if (!rc)
        rc = encode_pieces(v, t, &ends, bpe_utf8_piece, out);
    tok_ids_free(&ends);
    free(t);
    return rc;
}
