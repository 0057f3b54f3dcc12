/* kvcache/kvcache.h: K and V of every layer, paged, growing with the context.
 *
 * Layout (host memory). Positions are grouped in blocks of KV_BLOCK; a block
 * is allocated on first use (kv_cache_reserve) and holds, for every layer,
 *   K: [n_head_kv][KV_BLOCK][head_dim]   then   V: the same,
 * elements of `dtype`. Each layer has a block table (k_blocks / v_blocks:
 * [n_layer][max_blocks] pointers into those allocations), so attention finds
 * position p of KV head h of layer l at
 *   k_blocks[l * max_blocks + p / KV_BLOCK] + (h * KV_BLOCK + p % KV_BLOCK) * head_dim.
 * A KV head's positions are contiguous inside a block, so attention streams
 * them as tiles; a tile never straddles a block when the tile size divides
 * KV_BLOCK (prefill and decode assert this). K is stored after RoPE.
 *
 * Memory grows by one block (all layers) at a time up to n_ctx positions;
 * kv_cache_create refuses up front, naming both numbers, a context whose
 * full size exceeds the memory the system reports available. A device
 * backend keeps its own cache and copies through kv_cache_rows.
 * Covered by tests/kvcache/ and tests/cpu/. */
#ifndef IGNITE_KVCACHE_KVCACHE_H
#define IGNITE_KVCACHE_KVCACHE_H

#include "models/model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Positions per block: a multiple of every attention tile (64). */
#define KV_BLOCK 256

enum kv_dtype { KV_F32, KV_F16 };

struct kv_cache {
    enum kv_dtype dtype;
    int64_t n_layer, n_head_kv, head_dim;
    int64_t n_ctx;       /* positions the cache may grow to */
    int64_t n_pos;       /* positions filled so far (0..n_ctx) */
    int64_t max_blocks;  /* ceil(n_ctx / KV_BLOCK) */
    int64_t n_blocks;    /* blocks allocated: positions < n_blocks * KV_BLOCK are backed */
    void **k_blocks;     /* [n_layer][max_blocks] -> [n_head_kv][KV_BLOCK][head_dim]; owned table */
    void **v_blocks;     /* the same for V */
    void **mem;          /* [max_blocks] one allocation per block, all layers, K and V */
};

/* Creates an empty cache that may grow to n_ctx positions of the model `hp`
 * (no block is allocated yet). Returns IG_OK; IG_E_NOMEM, with the bytes the
 * full context needs and the bytes available, when n_ctx positions could
 * never fit in memory, the line ending with `hint`, what the user can do
 * ("lower -c/--ctx-size" when NULL: commands set n_ctx differently);
 * IG_E_INTERNAL for a bad shape. */
int kv_cache_create(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype,
                    const char *hint, struct kv_cache **out);

void kv_cache_free(struct kv_cache *kv);

/* Makes positions 0 .. n_pos - 1 backed by memory, allocating blocks as
 * needed. Requires n_pos <= n_ctx. Returns IG_OK or IG_E_NOMEM (the cache is
 * unchanged for positions already backed). */
int kv_cache_reserve(struct kv_cache *kv, int64_t n_pos);

/* Bytes of K and V currently allocated (blocks in use). */
size_t kv_cache_bytes(const struct kv_cache *kv);

/* Bytes K and V need for n_ctx positions of `hp` (whole blocks). */
double kv_cache_bytes_for(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype);

/* Bytes the system reports available (MemAvailable, else free pages); 0 when
 * unknown. */
double kv_mem_available(void);

/* Bytes of one element of `dtype` (4 or 2). */
size_t kv_dtype_bytes(enum kv_dtype dtype);

/* This layer's block table for K (or V): entry b covers positions
 * b * KV_BLOCK .. , laid out [n_head_kv][KV_BLOCK][head_dim]. */
static inline void *const *kv_cache_k_table(const struct kv_cache *kv, int64_t layer)
{
    return kv->k_blocks + layer * kv->max_blocks;
}
static inline void *const *kv_cache_v_table(const struct kv_cache *kv, int64_t layer)
{
    return kv->v_blocks + layer * kv->max_blocks;
}

/* Address of row `pos` of KV head `kv_head` in a block table; the rows up to
 * the end of its block follow contiguously. `pos` must be backed. */
static inline void *kv_cache_rows(const struct kv_cache *kv, void *const *table, int64_t kv_head,
                                  int64_t pos)
{
    size_t elem = kv->dtype == KV_F16 ? 2 : 4;
    return (char *)table[pos / KV_BLOCK] +
           (size_t)((kv_head * KV_BLOCK + pos % KV_BLOCK) * kv->head_dim) * elem;
}

/* Stores the K and V of n_tokens tokens at positions pos0.. of `layer`,
 * converting to the cache's dtype. k and v are [n_tokens, n_head_kv *
 * head_dim] f32 (K after RoPE). Requires the positions to be backed
 * (kv_cache_reserve); does not touch n_pos (the forward that fills every
 * layer sets it). */
void kv_cache_write(struct kv_cache *kv, int64_t layer, int64_t pos0, int64_t n_tokens,
                    const float *k, const float *v);

/* dst[i] = element i of n elements of `dtype` at src, as f32 (exact). */
void kv_row_to_f32(enum kv_dtype dtype, const void *src, int64_t n, float *dst);

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

/* Writes the n_pos positions of `kv` with their token ids tokens[0..n_pos)
 * and, unless NULL, the logits[0..n_vocab) after the last token, to `f` in
 * one sequential pass (pipes work). `name` is for messages, printed as
 * given: callers quote a file name ('c.kv', 'stdout'), as every message
 * does. Returns IG_OK or IG_E_IO. */
int kv_file_write(FILE *f, const char *name, const struct kv_cache *kv,
                  const unsigned char id[KV_MODEL_ID_BYTES], const int32_t *tokens,
                  const float *logits, int64_t n_vocab);

/* A read in progress: the header is read and checked first so the caller can
 * size its cache, then the body. */
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

/* Reads the rest into the empty cache `kv` (dtype hdr.dtype, n_ctx >=
 * hdr.n_tokens), tokens[0..hdr.n_tokens) and, when hdr.n_vocab > 0,
 * logits[0..n_vocab), then verifies the checksum and that the stream ends
 * there. Sets kv->n_pos on success. Returns IG_OK, IG_E_KVFILE (truncated, a
 * token out of range, checksum mismatch, trailing bytes), IG_E_IO or
 * IG_E_NOMEM. */
int kv_file_read_body(struct kv_file_reader *r, struct kv_cache *kv, int32_t *tokens,
                      float *logits);

#endif
