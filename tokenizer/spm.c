/* tokenizer/spm.c: SentencePiece-style BPE ("llama" vocabularies). Spaces
 * become U+2581 ("▁"), one is prefixed when the vocabulary asks for it, the
 * text starts as one symbol per UTF-8 character, and the adjacent pair whose
 * concatenation is the highest-scoring token is merged (leftmost first on
 * ties), as sentencepiece's bpe_model does; a vocabulary that came with
 * merges (tokenizer.json's BPE) merges the pair of lowest merge rank
 * instead, as HF's BPE model does. Symbols that are not tokens at
 * the end fall back to their bytes' <0xXX> tokens, else to unk. A heap of
 * candidate pairs over a linked list of symbols keeps it O(n log n).
 * Covered by tests/tokenizer/test_spm.py. */
#include "tokenizer/internal.h"
#include "tokenizer/merge_heap.h"
#include "tokenizer/unicode.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

struct sym {
    uint32_t off, len; /* bytes of the normalised text; len 0 = merged away */
    int32_t prev, next;
};

struct work {
    const struct tok_vocab *v;
    const char *text;
    struct sym *syms;
    struct tok_merge_heap heap;
};

static void push_pair(struct work *w, int32_t pos)
{
    const struct sym *a = &w->syms[pos];
    if (a->next < 0)
        return;
    const struct sym *b = &w->syms[a->next];
    IG_ASSERT(a->off + a->len == b->off);
    if (w->v->merge_slots) {
        int32_t l = tok_find(w->v, w->text + a->off, a->len);
        int32_t r = l < 0 ? -1 : tok_find(w->v, w->text + b->off, b->len);
        const struct tok_merge_slot *m = r < 0 ? NULL : tok_find_merge(w->v, l, r);
        if (m)
            tok_merge_push(&w->heap, (struct tok_merge_cand){(double)m->rank, pos, a->len + b->len});
        return;
    }
    int32_t id = tok_find(w->v, w->text + a->off, a->len + b->len);
    if (id < 0 || w->v->types[id] == TOK_TYPE_UNUSED)
        return;
    tok_merge_push(&w->heap, (struct tok_merge_cand){-(double)w->v->scores[id], pos, a->len + b->len});
}

int tok_spm_encode(struct tok_vocab *v, const char *text, size_t len, bool space_prefix,
                   struct tok_ids *out)
{
    static const char ws[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */
    if (len == 0 && !space_prefix)
        return IG_OK;
    if (len > INT32_MAX / 4)
        return ig_error(IG_E_INPUT, "tokenizer: text of %zu bytes is too long", len);
    size_t cap = 3 * len + 3;
    char *norm = malloc(cap);
    struct sym *syms = malloc((cap + 1) * sizeof *syms);
    struct tok_merge_cand *heap = malloc(3 * (cap + 1) * sizeof *heap);
    int rc = IG_OK;
    if (!norm || !syms || !heap) {
        rc = ig_error(IG_E_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    if (space_prefix) {
        memcpy(norm, ws, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(norm + n, ws, 3);
            n += 3;
        } else {
            norm[n++] = text[i];
        }
    }
    struct work w = {v, norm, syms, {heap, 0}};
    int32_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_next((const unsigned char *)norm, i, n, &cp);
        syms[m] = (struct sym){(uint32_t)i, (uint32_t)l, m - 1, m + 1};
        m++;
        i += (size_t)l;
    }
    syms[m - 1].next = -1;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(&w, i);
    while (w.heap.n > 0) {
        struct tok_merge_cand c = tok_merge_pop(&w.heap);
        struct sym *a = &syms[c.pos];
        if (a->len == 0 || a->next < 0 || a->len + syms[a->next].len != c.len)
            continue;
        struct sym *b = &syms[a->next];
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            syms[b->next].prev = c.pos;
        if (a->prev >= 0)
            push_pair(&w, a->prev);
        push_pair(&w, c.pos);
    }
    for (int32_t i = 0; i >= 0 && !rc; i = syms[i].next) {
        int32_t id = tok_find(v, norm + syms[i].off, syms[i].len);
        if (id >= 0 && v->types[id] != TOK_TYPE_UNUSED) {
            rc = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < syms[i].len && !rc; k++) {
            int32_t b = v->byte_id[(unsigned char)norm[syms[i].off + k]];
            if (b < 0) {
                if (v->unk_id >= 0)
                    rc = tok_ids_push(out, v->unk_id);
                break; /* one unk for the whole symbol, as sentencepiece */
            }
            rc = tok_ids_push(out, b);
        }
    }
done:
    free(norm);
    free(syms);
    free(heap);
    return rc;
}
