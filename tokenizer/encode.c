/* tokenizer/encode.c: text -> ids. Adds BOS/EOS as the vocabulary says,
 * cuts the text at special-token text (leftmost then longest match, as HF's
 * added-token matcher does: user-defined tokens always, as sentencepiece and
 * llama.cpp do, control tokens when the caller asks for it) and hands
 * each plain fragment to byte-level BPE (bpe.c) or SentencePiece-style BPE
 * (spm.c). For the latter the space prefix goes once, at the start of the
 * text, as sentencepiece puts it (not after every special token).
 * Covered by tests/tokenizer/. */
#include "tokenizer/internal.h"

#include "core/status.h"

#include <string.h>

/* The special token whose text starts at s[i] (longest first), or -1;
 * control tokens only when `control`. */
static int32_t special_at(const struct tok_vocab *v, const char *s, size_t i, size_t len,
                          bool control)
{
    if (!v->special_first[(unsigned char)s[i]])
        return -1;
    for (int64_t k = 0; k < v->n_specials; k++) {
        int32_t id = v->specials[k];
        const struct tok_str *t = &v->tokens[id];
        if ((control || v->types[id] == TOK_TYPE_USER_DEFINED) && t->len <= len - i &&
            !memcmp(s + i, t->ptr, t->len))
            return id;
    }
    return -1;
}

static int encode_plain(struct tok_vocab *v, const char *s, size_t start, size_t end,
                        struct tok_ids *out)
{
    if (v->model == TOK_MODEL_BPE)
        return start == end ? IG_OK : tok_bpe_encode(v, s + start, end - start, out);
    if (v->model == TOK_MODEL_BPE_UTF8)
        return start == end ? IG_OK : tok_bpe_utf8_encode(v, s + start, end - start, out);
    /* The prefix belongs to the text's start even when a special token is
     * there: sentencepiece then gives the lone "▁" its own token. HF's
     * tokenizer.json pipelines prefix non-empty pieces only: the one at the
     * start or each one, and Metaspace not one that starts with a space
     * (tokenizer.h, space_prefix_hf). */
    bool prefix = v->add_space_prefix && start == 0;
    int hf = v->space_prefix_hf;
    if (v->add_space_prefix && hf)
        prefix = start < end && (start == 0 || hf >= 2) && (hf == 2 || s[start] != ' ');
    if (start == end && !prefix)
        return IG_OK;
    return tok_spm_encode(v, s + start, end - start, prefix, out);
}

int tok_encode(struct tok_vocab *v, const char *text, size_t len, unsigned flags,
               struct tok_ids *out)
{
    int rc = IG_OK;
    if ((flags & TOK_ENC_ADD_BOS) && v->add_bos && (rc = tok_ids_push(out, v->bos_id)))
        return rc;
    size_t start = 0;
    bool control = flags & TOK_ENC_PARSE_SPECIAL;
    if (v->n_specials > 0) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = special_at(v, text, i, len, control);
            if (id < 0)
                continue;
            if ((rc = encode_plain(v, text, start, i, out)) || (rc = tok_ids_push(out, id)))
                return rc;
            i += v->tokens[id].len - 1;
            start = i + 1;
        }
    }
    if (len > 0 && (rc = encode_plain(v, text, start, len, out)))
        return rc;
    if ((flags & TOK_ENC_ADD_EOS) && v->add_eos)
        rc = tok_ids_push(out, v->eos_id);
    return rc;
}
