/* kvcache/kvcache.h: the KV pool: K and V of every sequence in flight, in
 * fixed-size blocks, the block tables that map a sequence's positions onto
 * them, and the saved-cache file format.
 *
 * Memory. A pool holds n_blocks blocks of KV_BLOCK positions. For every
 * layer, K and V are each one array of blocks; a block holds
 * [n_head_kv][KV_BLOCK][head_dim] elements of `dtype` (a KV head's positions
 * contiguous, so attention streams them as tiles). K is stored after RoPE.
 * A sequence has a block table: entry i is the block that holds its
 * positions i * KV_BLOCK .. i * KV_BLOCK + KV_BLOCK - 1. So row `pos` of KV
 * head h of layer l of a sequence with table t is
 *   kv_layout(l).k + t[pos / KV_BLOCK] * block_stride + h * head_stride
 *                  + (pos % KV_BLOCK) * head_dim                 (elements).
 * struct kv_layout is this description; attention takes it and a table,
 * host (the CPU backend's kv_store) and device (the CUDA backend) alike.
 *
 * Allocation. struct kv_pool hands out block ids (host bookkeeping for every
 * backend): a free list in least-recently-freed order, a reference count per
 * block, and a prefix index of full blocks by their tokens (and the block
 * before them), so a sequence that starts with the same tokens as one seen
 * before takes references to those blocks instead of computing them again.
 * A shared block is only ever read: sequences write positions past their
 * shared prefix, in blocks of their own. A freed block stays in the index
 * (and on the free list) until it is handed out for something else.
 * Admission reserves every block a sequence may grow into (its prompt plus
 * its most generated tokens), so a running sequence never finds the pool
 * empty. The choice of KV_BLOCK is explained in docs/kvcache.md.
 *
 * Covered by tests/kvcache/ and tests/cpu/. */
#ifndef IGNITE_KVCACHE_KVCACHE_H
#define IGNITE_KVCACHE_KVCACHE_H

#include "models/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Positions per block: the CPU key tile (prefill/attn_tiled.h) and a
 * divisor of the GPU kernels' key tiles (docs/kvcache.md). */
#define KV_BLOCK 64

enum kv_dtype { KV_F32, KV_F16 };

/* What every layer's cache looks like. */
struct kv_shape {
    enum kv_dtype dtype;
    int64_t n_layer, n_head_kv, head_dim;
};

/* The shape of model `hp`'s cache with elements of `dtype`. */
struct kv_shape kv_shape_of(const struct model_hparams *hp, enum kv_dtype dtype);

/* Bytes of one element of `dtype` (4 or 2). */
size_t kv_dtype_bytes(enum kv_dtype dtype);

/* The one bytes formula: K and V of every layer for one block, and for n
 * blocks. */
size_t kv_block_bytes(const struct kv_shape *s);
double kv_bytes_for_blocks(const struct kv_shape *s, int64_t n_blocks);

/* Blocks that hold n_pos positions. */
static inline int64_t kv_blocks_for(int64_t n_pos)
{
    return (n_pos + KV_BLOCK - 1) / KV_BLOCK;
}

/* Bytes the system reports available (MemAvailable, else free pages); 0 when
 * unknown. */
double kv_mem_available(void);

/* ---- the layout attention reads ---------------------------------------------- */

/* One layer's K and V blocks, wherever they live. */
struct kv_layout {
    void *k, *v;           /* block 0 of this layer's K (V) array */
    enum kv_dtype dtype;
    int64_t block_stride;  /* elements from a block to the next: n_head_kv * head_stride */
    int64_t head_stride;   /* elements from a KV head to the next in a block: KV_BLOCK * head_dim */
    int64_t head_dim;      /* elements of a row; consecutive positions are a row apart */
};

/* Element offset of row `pos` of KV head `h` through block table `table`;
 * the rows to the end of the block follow contiguously. */
static inline int64_t kv_row_offset(const struct kv_layout *L, const int32_t *table, int64_t h,
                                    int64_t pos)
{
    return (int64_t)table[pos / KV_BLOCK] * L->block_stride + h * L->head_stride +
           (pos % KV_BLOCK) * L->head_dim;
}

/* Address of that row in `base` (L->k or L->v). */
static inline void *kv_row(const struct kv_layout *L, void *base, const int32_t *table, int64_t h,
                           int64_t pos)
{
    return (char *)base + (size_t)kv_row_offset(L, table, h, pos) * kv_dtype_bytes(L->dtype);
}

/* Stores the K and V of n tokens at positions pos0.. through `table`,
 * converting to the layout's dtype. k and v are [n, n_head_kv * head_dim]
 * f32 (K after RoPE). The blocks must be the sequence's own. */
void kv_write_rows(const struct kv_layout *L, const int32_t *table, int64_t n_head_kv,
                   int64_t pos0, int64_t n, const float *k, const float *v);

/* dst[i] = element i of n elements of `dtype` at src, as f32 (exact). */
void kv_row_to_f32(enum kv_dtype dtype, const void *src, int64_t n, float *dst);

/* ---- host memory for blocks ---------------------------------------------------- */

/* n_blocks blocks of every layer in host memory: the CPU backend's cache,
 * and the staging area of a device cache being saved or loaded. Pages are
 * committed when first written, so memory follows the blocks used. */
struct kv_store {
    struct kv_shape shape;
    int64_t n_blocks;
    char *mem;     /* layer l's K blocks, then its V blocks, for l = 0, 1, ... */
    size_t bytes;  /* of the mapping */
};

/* Creates a store of n_blocks blocks (no page is touched). Returns IG_OK;
 * IG_E_NOMEM, with the bytes the blocks need and the bytes available, when
 * they could never fit in memory, the line ending with `hint`, what the
 * user can do (NULL: "lower -c/--ctx-size"); IG_E_INTERNAL for a bad shape. */
int kv_store_create(const struct kv_shape *s, int64_t n_blocks, const char *hint,
                    struct kv_store **out);
void kv_store_free(struct kv_store *st);

/* Layer l of the store. */
struct kv_layout kv_store_layout(const struct kv_store *st, int64_t layer);

/* Copies positions [0, n_pos) of every layer from `src` through src_table
 * to `dst` through dst_table (same model shape), converting the element type
 * where the stores differ. */
void kv_copy_rows(const struct kv_store *dst, const int32_t *dst_table,
                  const struct kv_store *src, const int32_t *src_table, int64_t n_pos);

/* ---- the allocator ------------------------------------------------------------------ */

struct kv_pool;

/* A pool of n_blocks block ids; share_prefixes enables the prefix index.
 * Returns IG_OK or IG_E_NOMEM. */
int kv_pool_create(int64_t n_blocks, bool share_prefixes, struct kv_pool **out);
void kv_pool_free(struct kv_pool *p);

int64_t kv_pool_n_blocks(const struct kv_pool *p);
/* Blocks a new admission may still reserve or share from the free list. */
int64_t kv_pool_available(const struct kv_pool *p);
/* Blocks referenced by some sequence now, and the most at any time. */
int64_t kv_pool_used(const struct kv_pool *p);
int64_t kv_pool_peak(const struct kv_pool *p);
/* Blocks shared so far instead of being computed again. */
int64_t kv_pool_hits(const struct kv_pool *p);

/* A sequence's view of the pool. */
struct kv_seq {
    int32_t *table;       /* [max_blocks] block ids; owned */
    int64_t max_blocks;   /* the table's capacity */
    int64_t n_blocks;     /* entries in use */
    int64_t n_pos;        /* positions whose K/V are written (the caller advances it) */
    int64_t reserved;     /* blocks it may still take */
    int64_t n_registered; /* leading full blocks entered in the prefix index */
};

/* An empty sequence that may grow to max_pos positions. IG_OK or IG_E_NOMEM. */
int kv_seq_init(struct kv_seq *s, int64_t max_pos);
void kv_seq_destroy(struct kv_seq *s);

/* Blocks of tokens[0..n) found in the prefix index from the start, at most
 * `max_blocks`; no side effects. */
int64_t kv_pool_match(const struct kv_pool *p, const int32_t *tokens, int64_t n,
                      int64_t max_blocks);

/* Admits an empty sequence that will hold up to max_pos positions: shares
 * the first `n_shared` blocks (a kv_pool_match result for `tokens`, whose K/V
 * are then in place: n_pos = n_shared * KV_BLOCK) and reserves the rest.
 * Returns IG_OK, or IG_E_NOMEM without a message and without any change when
 * the pool cannot promise the blocks now. */
int kv_pool_admit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int64_t n_shared,
                  int64_t max_pos);

/* True when a sequence of max_pos positions with n_shared matched blocks
 * could be admitted now. */
bool kv_pool_can_admit(const struct kv_pool *p, const int32_t *tokens, int64_t n_shared,
                       int64_t max_pos);

/* Makes the table cover positions [0, n_pos), taking reserved blocks. */
void kv_pool_grow(struct kv_pool *p, struct kv_seq *s, int64_t n_pos);

/* Enters the sequence's full blocks written so far (below s->n_pos) into the
 * prefix index; tokens[i] is the token at position i. Only blocks computed
 * by this process's forward may be entered (their K/V are what any
 * sequence with the same tokens would compute). */
void kv_pool_register(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens);

/* Drops the sequence's blocks and reservation; the sequence is empty after. */
void kv_pool_release(struct kv_pool *p, struct kv_seq *s);

/* ---- saved caches (kvcache/kvfile.c; the format is docs/kvcache.md) ------- */

#define KV_FILE_VERSION 1
#define KV_MODEL_ID_BYTES 32

/* The identity a saved cache is bound to: SHA-256 over the architecture, the
 * hyperparameters, every weight's type and shape, and 3 x 64 sampled bytes of
 * every weight (start, middle, end); cheap however large the model is. */
void kv_model_id(const struct model *m, unsigned char id[KV_MODEL_ID_BYTES]);

/* The fixed-size head of a saved cache. */
struct kv_file_header {
    uint32_t version;
    enum kv_dtype dtype;
    unsigned char model_id[KV_MODEL_ID_BYTES];
    int64_t n_layer, n_head_kv, head_dim;
    int64_t n_tokens;   /* positions saved, >= 1 */
    int64_t n_vocab;    /* logits saved after the tokens: n_vocab, or 0 for none */
};

/* Writes positions [0, n_pos) of a sequence (table `table` into `st`) with
 * their token ids tokens[0..n_pos) and, unless NULL, the logits[0..n_vocab)
 * after the last token, to `f` in one sequential pass (pipes work). `name` is
 * for messages, printed as given: callers quote a file name ('c.kv',
 * 'stdout'), as every message does. Returns IG_OK or IG_E_IO. */
int kv_file_write(FILE *f, const char *name, const struct kv_store *st, const int32_t *table,
                  int64_t n_pos, const unsigned char id[KV_MODEL_ID_BYTES],
                  const int32_t *tokens, const float *logits, int64_t n_vocab);

/* A read in progress: the header is read and checked first so the caller can
 * size its store, then the body. */
struct kv_file_reader {
    FILE *f;
    const char *name;
    uint32_t crc;       /* CRC-32C of the bytes read so far */
    uint64_t n_read;    /* bytes read so far */
    int64_t model_vocab;/* token ids must be below this */
    struct kv_file_header hdr;
};

/* Reads and checks the header from `f` against the model (`hp` and its
 * identity `id`); `name` as for kv_file_write, kept for the body's
 * messages. Returns IG_OK, or IG_E_KVFILE (not a cache file, another
 * version, another model, a bad field, truncated) or IG_E_IO, in one line. */
int kv_file_read_header(struct kv_file_reader *r, FILE *f, const char *name,
                        const struct model_hparams *hp, const unsigned char id[KV_MODEL_ID_BYTES]);

/* Reads the rest into blocks 0, 1, ... of `st` (dtype hdr.dtype, at least
 * kv_blocks_for(hdr.n_tokens) blocks), tokens[0..hdr.n_tokens) and, when
 * hdr.n_vocab > 0, logits[0..n_vocab), then verifies the checksum and that
 * the stream ends there. Returns IG_OK, IG_E_KVFILE (truncated, a token out
 * of range, checksum mismatch, trailing bytes) or IG_E_IO. */
int kv_file_read_body(struct kv_file_reader *r, struct kv_store *st, int32_t *tokens,
                      float *logits);

/* The table 0, 1, 2, ... of n entries: a store read from a file, or staged
 * for one, holds its sequence in blocks 0.. in order. */
void kv_identity_table(int32_t *table, int64_t n);

#endif
