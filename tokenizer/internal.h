/* tokenizer/internal.h: module-internal: the built vocabulary and the
 * functions the tokenizer's files share. Not part of the public API. */
#ifndef IGNITE_TOKENIZER_INTERNAL_H
#define IGNITE_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <stdint.h>

/* One merge: the pair (left, right) of token ids becomes `id`; lower rank
 * merges first. Open addressing, key 0 is never a valid pair key because
 * keys are stored + 1. */
struct tok_merge_slot {
    uint64_t key; /* ((left << 32) | right) + 1; 0 = empty */
    int32_t rank;
    int32_t id;
};

/* Pre-token cache for byte-level BPE: piece bytes -> ids. Cleared whole
 * when half full, which bounds memory and keeps probing short. */
struct tok_cache_slot {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, key_len;
    uint32_t ids_off, n_ids;
};

struct tok_cache {
    struct tok_cache_slot *slots;
    uint64_t mask;
    int64_t used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    int64_t ids_len, ids_cap;
};

/* End-of-turn token texts vocab.c looks for (find_eog). */
#define TOK_EOG_NAMES 12

struct tok_vocab {
    enum tok_model model;
    enum tok_pre pre;
    int64_t n_tokens;
    struct tok_str *tokens; /* point into `arena` */
    char *arena;
    float *scores;          /* n_tokens */
    int32_t *types;         /* n_tokens enum tok_type */

    int32_t *str_slots;     /* token text -> id, open addressing, -1 = empty */
    uint64_t str_mask;

    struct tok_merge_slot *merge_slots;
    uint64_t merge_mask;

    int32_t byte_id[256];   /* BPE: id of the byte's one-character token; SPM: <0xXX>; -1 */
    uint32_t byte_cp[256];  /* GPT-2 byte -> code point */
    int16_t cp_byte[324];   /* its inverse for code points < 324, -1 elsewhere */

    int32_t *specials;      /* ids matched in text, longest text first */
    int64_t n_specials;
    uint8_t special_first[256]; /* 1 when some special token starts with this byte */

    int32_t bos_id, eos_id, eot_id, eom_id, unk_id, pad_id;
    /* the file's end-of-generation ids, then the end-of-turn tokens found
     * by their text (vocab.c: find_eog) */
    int32_t eog_ids[TOK_MAX_EOG + TOK_EOG_NAMES];
    int n_eog;
    int32_t end_not_eog;    /* harmony's <|end|> (ends a message, not the answer), or -1 */
    bool add_bos, add_eos, add_space_prefix;
    int space_prefix_hf;    /* tok_vocab_desc's */
    bool ignore_merges;     /* BPE: a piece that is a token is taken whole (Llama 3) */

    struct tok_cache cache;
};

uint64_t tok_hash_bytes(const void *p, size_t n);
/* Id of the token whose text is exactly s[0..n), or -1. */
int32_t tok_find(const struct tok_vocab *v, const char *s, size_t n);
/* Merge for the pair, or NULL. */
const struct tok_merge_slot *tok_find_merge(const struct tok_vocab *v, int32_t left, int32_t right);

int tok_ids_push(struct tok_ids *ids, int32_t id);
int tok_ids_reserve(struct tok_ids *ids, int64_t more);

/* Encode one fragment of plain text (no special tokens in it). */
int tok_bpe_encode(struct tok_vocab *v, const char *text, size_t len, struct tok_ids *out);
int tok_spm_encode(struct tok_vocab *v, const char *text, size_t len, bool space_prefix,
                   struct tok_ids *out);
int tok_bpe_utf8_encode(struct tok_vocab *v, const char *text, size_t len, struct tok_ids *out);

void tok_cache_free(struct tok_cache *c);

#endif
