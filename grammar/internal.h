/* grammar/internal.h: module-internal: the byte-level rule form the GBNF
 * parser builds and the checks finalize, the compiled grammar, and the
 * functions the grammar's files share. Not part of the public API.
 *
 * Every rule is a list of alternatives, each a sequence of elements; an
 * element is a byte set (one byte of the text, any byte in the set) or a
 * reference to a rule. Characters never appear: the parser turns each
 * literal character into its UTF-8 bytes and each character class into a
 * rule whose alternatives are byte-range sequences (utf8_class.c), so the
 * matcher runs on bytes and a token that ends inside a character is an
 * ordinary prefix. */
#ifndef IGNITE_GRAMMAR_INTERNAL_H
#define IGNITE_GRAMMAR_INTERNAL_H

#include "grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An element is one uint32: the type in the low 2 bits, a value above. */
enum gr_elem_type {
    GR_END = 0,   /* end of the rule's last alternative */
    GR_ALT = 1,   /* end of an alternative, another follows */
    GR_BYTES = 2, /* one byte from byte set `value` */
    GR_RULE = 3,  /* the rule `value` */
};
#define GR_ELEM(type, value) ((uint32_t)(value) << 2 | (uint32_t)(type))
#define GR_TYPE(e) ((enum gr_elem_type)((e) & 3u))
#define GR_VALUE(e) ((int32_t)((e) >> 2))
#define GR_ENDS_SEQ(e) (GR_TYPE(e) <= GR_ALT)

/* Limits that keep a hostile grammar from exhausting memory or the stack. */
#define GR_MAX_REPEAT 2000           /* llama.cpp's bound on {m,n} */
#define GR_MAX_ELEMS (1 << 22)       /* elements over all rules */
#define GR_MAX_RULES (1 << 20)
#define GR_MAX_NESTING 256           /* parentheses inside parentheses */

/* 256 bits: one per byte value. */
struct gr_byteset {
    uint64_t w[4];
};

static inline bool gr_byteset_has(const struct gr_byteset *s, unsigned b)
{
    return (s->w[b >> 6] >> (b & 63)) & 1;
}

static inline void gr_byteset_add_range(struct gr_byteset *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi; b++)
        s->w[b >> 6] |= 1ull << (b & 63);
}

/* What made a rule: the names errors give it. */
enum gr_rule_kind {
    GR_RULE_USER,   /* name ::= ... in the text */
    GR_RULE_GROUP,  /* ( ... ) */
    GR_RULE_REPEAT, /* the tail rule of * + ? {m,n} */
    GR_RULE_CLASS,  /* a character class with characters beyond ASCII, or '.' */
};

struct gr_rule {
    char *name;         /* user rules: as written; others: "<user rule>_<n>" */
    enum gr_rule_kind kind;
    int line, col;      /* where it is defined (user) or starts (others); 0 when used only */
    int use_line, use_col; /* first reference, for "undefined rule" */
    bool defined;
    uint32_t *elems;    /* alternatives separated by GR_ALT, closed by GR_END */
    int64_t n_elems, cap;
};

/* A code point range, inclusive. */
struct gr_cprange {
    uint32_t lo, hi;
};

/* A character class already turned into a rule, for reuse. */
struct gr_class_memo {
    uint64_t hash;
    int32_t rule;
    int64_t n;
    struct gr_cprange *ranges;
};

/* The grammar while it is being built: rules and byte sets. */
struct gr_builder {
    struct gr_rule *rules;
    int64_t n_rules, cap_rules;
    struct gr_byteset *sets;
    int64_t n_sets, cap_sets;
    int32_t *set_slots;  /* byte set -> index, open addressing, -1 = empty */
    int64_t set_mask;
    struct gr_class_memo *classes;
    int64_t n_classes, cap_classes;
    int64_t total_elems; /* over all rules, against GR_MAX_ELEMS */
    const char *source;  /* names the grammar in errors */
};

void gr_builder_free(struct gr_builder *b);
/* Index of byte set s (added when new), or -1 when out of memory. */
int32_t gr_builder_set(struct gr_builder *b, const struct gr_byteset *s);
/* Appends a new rule named `name` (copied); returns its index or -1 (no memory). */
int32_t gr_builder_add_rule(struct gr_builder *b, const char *name, size_t len,
                            enum gr_rule_kind kind);
/* Appends element e to rule r. IG_OK, IG_E_NOMEM, or IG_E_USAGE past GR_MAX_ELEMS. */
int gr_builder_push(struct gr_builder *b, int32_t r, uint32_t e);

/* Appends to rule r the elements that match one character from the sorted,
 * disjoint ranges (surrogates are never matched): one byte set when every
 * character is ASCII, else a reference to a GR_RULE_CLASS rule (shared by
 * identical classes) whose alternatives are the UTF-8 byte-range sequences.
 * An empty class appends an empty byte set, which matches nothing. Returns
 * IG_OK, IG_E_NOMEM, or IG_E_USAGE past the size limits. */
int gr_utf8_class(struct gr_builder *b, int32_t r, const struct gr_cprange *ranges, int64_t n,
                  const char *owner_name);

/* Writes the UTF-8 encoding of code point c (<= U+10FFFF) to out; returns
 * its length (1..4). */
int gr_utf8_encode(uint32_t c, uint8_t *out);

/* Calls emit(user, n, lo, hi) for byte-range sequences of n bytes whose
 * union encodes exactly the code points [lo, hi] minus the surrogates; lo
 * and hi of each call hold n bytes. Exposed for tests. */
void gr_utf8_sequences(uint32_t lo, uint32_t hi,
                       void (*emit)(void *user, int n, const uint8_t *lo, const uint8_t *hi),
                       void *user);

/* Checks the built rules (every rule defined, a root, none that can match
 * nothing, no left recursion) and turns them into a struct grammar. The
 * builder is consumed. Returns IG_OK and *out, IG_E_USAGE after one line
 * naming the rule and where it is, or IG_E_NOMEM. */
int gr_finalize(struct gr_builder *b, struct grammar **out);

/* The compiled grammar: all rules' elements in one array. */
struct grammar {
    uint32_t *elems;        /* [n_elems] */
    int64_t n_elems;
    int32_t n_rules;
    int32_t root;
    int32_t *alt_first;     /* [n_rules + 1]: rule r's alternatives are alt_start[alt_first[r]..alt_first[r+1]) */
    int32_t *alt_start;     /* element index where each alternative starts */
    struct gr_byteset *sets;
    int32_t n_sets;
    uint8_t byte_class[256]; /* bytes no byte set tells apart share a class */
    int32_t n_classes;
    uint8_t class_byte[256]; /* one byte of each class */
    char **names;           /* [n_rules] for messages */
};

/* ---- regular expressions (schema_regex.c) ---------------------------------- */

/* A JSON schema `pattern` as a GBNF expression of a JSON string's text
 * between its quotes (*out malloc'd); `anychar` names the rule of any string
 * character, for an end without its anchor. IG_OK, IG_E_USAGE (msg: the
 * construct and its offset), IG_E_NOMEM. */
int gr_regex_to_gbnf(const char *re, const char *anychar, char **out, char *msg, size_t cap);

/* ---- the vocabulary as a trie (vocab.c) ------------------------------------ */

#define GR_MAX_TOKEN_BYTES 1024 /* longer tokens are never allowed */

/* A trie node; nodes are stored in depth-first order, so a node's subtree
 * is the nodes after it up to `next`, and its tokens (its own, then its
 * subtree's) are a contiguous run of `order`. */
struct gv_node {
    int32_t next;      /* index just past this node's subtree */
    int32_t tok_begin; /* index in `order` of this node's first token */
    uint16_t depth;    /* bytes from the root */
    uint8_t byte;      /* the byte that leads here */
    uint8_t pad;
};

/* What the tokens of a trie node's subtree are made of from the node's own
 * byte on, read as UTF-8 starting at its parent, for skipping subtrees
 * whole (mask.c); GV_INVALID when the parent's prefix ends inside a
 * character. */
#define GV_NONASCII 1u /* a complete character beyond ASCII */
#define GV_PARTIAL 2u  /* a token ends inside a character */
#define GV_INVALID 4u  /* bytes that are not UTF-8 (or the node is mid-character) */
struct gv_below {
    uint64_t ascii[2];  /* the ASCII bytes that occur */
    uint16_t max_chars; /* characters after the parent in the longest token (a final partial one counts) */
    uint16_t parent_chars; /* characters in the parent's prefix */
    uint8_t flags;      /* GV_* */
};

#define GV_MAX_CHARS 128 /* chars_upto's reach; longer tokens are counted in the last entry */

/* A JSON string's content characters: every code point but '"', '\\', the
 * controls U+0000-U+001F and U+007F (schema.c's string rule, llama.cpp's
 * json.gbnf). The ASCII ones as bits, words 0 and 1 of a gv_below.ascii. */
#define GV_JSON_PLAIN0 (~0ull << 0x20 & ~(1ull << '"'))
#define GV_JSON_PLAIN1 (~(1ull << ('\\' - 64)) & ~(1ull << (0x7F - 64)))
#define GV_PLAIN_K 64 /* plain_upto's reach */

struct grammar_vocab {
    int64_t n_tokens;      /* the vocabulary's size: the masks' length */
    struct gv_below *incl; /* [n_nodes] */
    struct gv_node *nodes; /* [n_nodes + 1]: node 0 is the root (empty prefix), the last a sentinel */
    int32_t n_nodes;
    int32_t *order;        /* token ids in trie order; node i's own: [tok_begin(i), tok_begin(i + 1)) */
    uint16_t *chars;       /* [n_order] characters in each token's text, in trie order */
    /* Under each child of the root, its tokens' positions in `order` sorted
     * by characters (by_chars, [n_order]) and, per child, how many have at
     * most c characters (chars_upto[child byte][c], c < GV_MAX_CHARS): a
     * string near its maxLength takes the short ones without a scan. */
    int32_t *by_chars;
    int32_t (*chars_upto)[GV_MAX_CHARS];
    /* The tokens whose text is JSON string content (valid UTF-8, a final
     * partial character allowed; no '"', '\\' or control): plain_upto[k],
     * n_words each, those of at most k characters (k < GV_PLAIN_K), and
     * plain_upto[GV_PLAIN_K] all of them; max_plain_chars: the most
     * characters such a token has. A string with k characters left before
     * its maxLength allows exactly plain_upto[k] of them (mask.c). */
    uint64_t *plain_upto;
    int32_t max_plain_chars;
    uint8_t *plain_sub;    /* [n_nodes] 1: every token of node i's subtree, i's own included, is content */
    /* The other nodes (the root's children on), in trie order: a walk
     * inside a string visits only these; impure_next[q]: the first entry
     * past impure[q]'s subtree. */
    int32_t *impure, *impure_next;
    int32_t n_impure;
    int32_t n_order;
    int32_t max_depth;
    int64_t *piece_off;    /* [n_tokens + 1] each token's text in pieces */
    uint8_t *pieces;
    uint8_t *in_trie;      /* [n_tokens] 1 when the token is text (it may match) */
    uint64_t *text_bits;   /* the same as a bit mask */
    int32_t *eog;          /* end-of-generation ids */
    int32_t n_eog;
    int32_t *strip;        /* tokens that lose a leading space as the first token */
    int32_t n_strip;
};

/* Sets the bytes a matcher's tables may hold before they are dropped and
 * rebuilt from the current state (mask.c; tests use a tiny budget). */
void gr_matcher_set_budget(struct grammar_matcher *m, size_t bytes);

/* Parses GBNF into a builder (gbnf.c). */
int gr_parse_gbnf(const char *text, size_t len, const char *source, struct gr_builder *b);

#endif
