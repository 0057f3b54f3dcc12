/* kvcache/kvcache.h: the KV pool: the memory of every sequence in flight,
 * described per group of layers, the fixed-size blocks and the block tables
 * that map a sequence's positions onto them, recurrent state slots, and the
 * saved-cache file format.
 *
 * Groups. A model's layers fall into groups of one memory kind (struct
 * kv_memory, from kv_memory_of): full attention and sliding-window
 * attention keep K and V in the pool's blocks (paged), a layer that reuses
 * another layer's K/V keeps nothing of its own, a recurrent layer keeps a
 * fixed-size state per sequence. Every size comes from one formula:
 * blocks x the paged groups' bytes per block + state slots x the recurrent
 * groups' bytes per sequence (kv_memory_bytes).
 *
 * Blocks. A pool holds n_blocks blocks of KV_BLOCK positions. For every
 * paged layer, K and V are each one array of blocks; a block holds
 * [n_head_kv][KV_BLOCK][head_dim] values of K's type (V's array: V's type,
 * which may differ; a quantized type's rows as whole blocks of 32) (the
 * layer's own n_head_kv and head_dim; a KV head's positions contiguous, so
 * attention streams them as tiles). K is stored after RoPE. A sequence has one block
 * table for all its paged layers: entry i is the block that holds its
 * positions i * KV_BLOCK .. i * KV_BLOCK + KV_BLOCK - 1. So row `pos` of KV
 * head h of layer l of a sequence with table t is
 *   kv_layout(l).k + t[pos / KV_BLOCK] * block_stride + h * head_stride
 *                  + (pos % KV_BLOCK) * head_dim                 (values,
 * turned into bytes by kv_dtype_row_bytes with the array's type).
 * struct kv_layout is this description (a shared layer's is its source's);
 * attention takes it and a table, host (the CPU backend's kv_store) and
 * device (the CUDA backend) alike. A recurrent layer's state is indexed by
 * the sequence's slot in the engine.
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
 * its most generated tokens) and, for a model with recurrent layers, a
 * state slot, so a running sequence never finds the pool empty. The choice
 * of KV_BLOCK is explained in docs/kvcache.md.
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
/* A recurrent layer's state is a whole number of these bytes, so that every
 * state slot and every layer stored after it starts aligned. */
#define KV_STATE_ALIGN 16

/* The element types of the cache's K and V (each may be any; they may
 * differ). The quantized ones are ggml's block formats (models/quant.h):
 * 32 values with an f16 scale, 34 bytes (q8_0) or 18 (q4_0), rows
 * quantized as they are written (kv_write_rows); a row of head_dim values is
 * head_dim / 32 whole blocks, so a quantized type needs head_dim % 32 == 0. */
/* KV_FP8: e4m3 in blocks of 32 with an f16 scale (kvcache/kv_devq.h), the
 * CUDA backend's only (a block is laid out as q8_0's: d, then 32 bytes). */
enum kv_dtype { KV_F32, KV_F16, KV_Q8_0, KV_Q4_0, KV_FP8 };
#define KV_N_DTYPES 5
/* The values of a quantized type's block. */
#define KV_QBLOCK 32

/* Bytes of one element of an f32 or f16 `dtype` (4 or 2); 0 for a quantized
 * one, whose rows kv_dtype_row_bytes sizes. */
size_t kv_dtype_bytes(enum kv_dtype dtype);

/* Bytes of n values of `dtype` (n a multiple of KV_QBLOCK where it is
 * quantized): every size and offset in the cache goes through it. */
size_t kv_dtype_row_bytes(enum kv_dtype dtype, int64_t n);

/* Whether `dtype` is a quantized block format. */
static inline bool kv_dtype_quantized(enum kv_dtype dtype)
{
    return dtype == KV_Q8_0 || dtype == KV_Q4_0 || dtype == KV_FP8;
}

/* The order of the Walsh-Hadamard rotation (ops_hadamard_rows) applied to
 * K's rows (and the queries), or V's (and the attention's output, back),
 * before a cache of `dtype` stores them, as llama.cpp does (its attn_rot_k,
 * attn_rot_v): quantized types with a head dim that is a multiple of 64,
 * K in chunks of the largest power of two dividing the head dim but at most
 * KV_ROT_K_MAX, V in chunks of 64; 0 (no rotation) otherwise. The stored
 * rows are rotated, so the rotation is part of the cache's type (saved
 * caches too: file version 3). */
int64_t kv_rotation(enum kv_dtype dtype, int64_t head_dim, bool is_v);

/* K's largest rotation. llama.cpp rotates K by the whole power of two (256
 * for a head dim of 256); on Gemma 3 270M a q4_0 K's KL divergence against
 * the f16 cache was 0.105 with chunks of 256, 0.075 with 128, 0.086 with 64
 * (docs/benchmarks.md, "A quantized KV cache"). Version 2 files rotated K
 * by the whole power of two. */
#define KV_ROT_K_MAX 128

/* "f32", "f16", "q8_0", "q4_0" (llama.cpp's names). */
const char *kv_dtype_name(enum kv_dtype dtype);

/* The type named `name` (kv_dtype_name's spelling): IG_OK, else
 * IG_E_USAGE after one line that names `what` (the option) and the types. */
int kv_dtype_parse(const char *what, const char *name, enum kv_dtype *out);

/* Blocks that hold n_pos positions. */
static inline int64_t kv_blocks_for(int64_t n_pos)
{
    return (n_pos + KV_BLOCK - 1) / KV_BLOCK;
}

/* ---- memory per group of layers (kvcache/kvmem.c) ---------------------------- */

/* What a layer keeps for a sequence. */
enum kv_kind {
    KV_FULL,      /* K and V of every position, in the pool's blocks */
    KV_WINDOW,    /* sliding-window attention: paged like KV_FULL. Under the window
                   * rule (a pool with a window side, kv_pool_create_windowed) its
                   * blocks are a block-id space of their own and a sequence keeps
                   * only the blocks its window can still reach; otherwise it keeps
                   * every block (its attention skips the blocks behind the window) */
    KV_SHARED,    /* reads another layer's K and V: no memory of its own */
    KV_RECURRENT, /* a fixed-size state per sequence (gated DeltaNet, a short
                   * convolution), in the sequence's state slot */
};
#define KV_N_KINDS 4

/* "full attention", "sliding window", "shared KV", "recurrent state". */
const char *kv_kind_name(enum kv_kind kind);

/* One layer's memory. The paged kinds (KV_FULL, KV_WINDOW) hold per block
 * [n_head_kv][KV_BLOCK][head_dim] elements of K and as many of V. */
struct kv_layer_mem {
    enum kv_kind kind;
    int64_t n_head_kv, head_dim; /* paged: its rows; KV_SHARED: its source's (set by
                                  * kv_memory_build); KV_RECURRENT: 0 */
    int64_t window;              /* KV_WINDOW: a query sees this many positions; else 0 */
    int64_t source;              /* KV_SHARED: the paged layer whose K/V it reads; else -1 */
    size_t state_bytes;          /* KV_RECURRENT: its state for one sequence; else 0 */
    size_t ckpt_bytes;           /* KV_RECURRENT: its checkpoint (a prompt cut
                                  * mid-chunk: kv_deltanet_ckpt_bytes), one for the
                                  * whole pool, 0: none; the store's, never a file's */
    int64_t group;               /* its group (set by kv_memory_build) */
};

/* Layers of one kind (and, sliding, one window), in order of their first layer. */
struct kv_group {
    enum kv_kind kind;
    int64_t window;       /* KV_WINDOW's window; else 0 */
    int64_t n_layers;
    size_t block_bytes;   /* K and V of its layers for one block (paged kinds; else 0) */
    size_t state_bytes;   /* its layers' state for one sequence (KV_RECURRENT; else 0) */
    size_t ckpt_bytes;    /* its layers' checkpoints: once for the pool (KV_RECURRENT) */
};

/* A model's memory: the sum of its groups. Every paged layer has a block
 * for each block id of the pool (one block table serves them all); every
 * recurrent layer has a state for each state slot. */
struct kv_memory {
    enum kv_dtype dtype;          /* the paged layers' K elements */
    enum kv_dtype dtype_v;        /* and their V elements */
    int64_t n_layer, n_groups;
    struct kv_layer_mem *layers;  /* [n_layer] owned */
    struct kv_group *groups;      /* [n_groups] owned */
    size_t block_bytes;           /* the one formula: the groups' block_bytes summed */
    size_t state_bytes;           /* and their state_bytes: one sequence's state (what a
                                   * state slot costs) */
    size_t ckpt_bytes;            /* and their ckpt_bytes: the pool's one checkpoint,
                                   * counted once where there are state slots */
    size_t window_bytes;          /* of block_bytes, the sliding-window groups' */
    int64_t window_max;           /* the largest window (0: no sliding-window layer) */
};

/* Builds a memory from n_layer layers' kind, shape, window, source and
 * state bytes (`group` and a shared layer's shape are filled in), grouping
 * them by kind (and window), with K elements of `dtype` and V elements of
 * `dtype_v`. Returns IG_OK, IG_E_NOMEM, IG_E_USAGE for a quantized type
 * and a head dim that is not whole blocks of it, or IG_E_INTERNAL for a
 * layout that makes no sense (a shape below 1, a window of 0, a shared
 * layer whose source is not a paged layer, an empty state), each after one
 * line. Free with kv_memory_free. */
int kv_memory_build(const struct kv_layer_mem *layers, int64_t n_layer, enum kv_dtype dtype,
                    enum kv_dtype dtype_v, struct kv_memory **out);

/* One sequence's state of a gated DeltaNet layer (float32): the
 * convolution's last dn_conv - 1 input rows of every channel, then a
 * dn_head_dim x dn_head_dim matrix per value head; rounded up to
 * KV_STATE_ALIGN. backend/cpu_deltanet.c lays it out. */
size_t kv_deltanet_state_bytes(const struct model_layer *L);

/* Rows of a gated DeltaNet chunk (its chunked form's; BACKEND_STATE_CHUNK). */
#define KV_DELTANET_CHUNK 64

/* The pool's checkpoint of a gated DeltaNet layer, after its states in the
 * store (never in a file), one for every slot (it belongs to one at a time:
 * backend.h's rule): a header of KV_STATE_ALIGN bytes (struct kv_ckpt_head;
 * all zero: none), the delta rule's matrices at the start of the holder's
 * unfinished chunk, and that chunk's rows so far (up to KV_DELTANET_CHUNK - 1:
 * each row's keys, values, decay and beta), so that the prompt's next step
 * runs the whole chunk again (backend/cpu_deltanet.c; docs/kvcache.md). */
size_t kv_deltanet_ckpt_bytes(const struct model_layer *L);

/* The checkpoint's header: where the unfinished chunk begins, the rows it
 * holds (0: none), and the state slot whose prompt they are. */
struct kv_ckpt_head {
    int64_t pos;
    int32_t n, slot;
};

/* The memory of model m with K elements of `dtype` and V elements of
 * `dtype_v`: every layer full attention (n_head_kv x head_dim of the
 * model) unless it has a window, the windowed ones sliding-window groups.
 * The one place a model's layers become memory: the backends, the engine,
 * `ignite info` and the saved caches all ask it. */
int kv_memory_of(const struct model *m, enum kv_dtype dtype, enum kv_dtype dtype_v,
                 struct kv_memory **out);

/* n_layer full-attention layers of one shape, K and V of `dtype` (kernel
 * tests, fuzzing). */
int kv_memory_uniform(enum kv_dtype dtype, int64_t n_layer, int64_t n_head_kv,
                      int64_t head_dim, struct kv_memory **out);

/* A copy of `src` without checkpoints (every ckpt_bytes 0), for a backend
 * that keeps none (both keep them now: the CUDA backend no longer asks). */
int kv_memory_without_ckpt(const struct kv_memory *src, struct kv_memory **out);

/* A copy of `src` with K elements of `dtype`, V of `dtype_v`. */
int kv_memory_copy(const struct kv_memory *src, enum kv_dtype dtype, enum kv_dtype dtype_v,
                   struct kv_memory **out);
void kv_memory_free(struct kv_memory *mem);

/* True when a and b have the same layers (kind, shape, window, source,
 * state bytes), whatever their dtypes. */
bool kv_memory_same_layers(const struct kv_memory *a, const struct kv_memory *b);

/* Bytes of n_blocks blocks and n_states state slots: n_blocks x block_bytes
 * + n_states x state_bytes, + ckpt_bytes once where n_states > 0 (a double:
 * the refusals print sizes that do not fit in memory). Every size the tools
 * print or check comes from it. */
double kv_memory_bytes(const struct kv_memory *mem, int64_t n_blocks, int64_t n_states);

/* The window rule. A pool may keep the sliding-window layers' blocks in a
 * block-id space of their own (the "window side"): a sequence's window
 * table then holds only the blocks its rows can still reach, those behind
 * (the position of the step's first row - window_max + 1) going back to the
 * pool. n_wblocks window blocks cost n_wblocks x window_bytes, the others
 * (full attention) n_blocks x (block_bytes - window_bytes); n_wblocks 0
 * means no window side (the window layers keep every block, sized and
 * indexed like the full ones): kv_memory_bytes. */
double kv_memory_bytes_windowed(const struct kv_memory *mem, int64_t n_blocks,
                                int64_t n_wblocks, int64_t n_states);

/* Blocks one sequence's window layers hold at once under the window rule,
 * when its steps have at most max_rows rows and it holds at most n_ctx
 * positions: the window_max - 1 positions its first row looks back over
 * and the step's rows, which may straddle one block more. 0 for a memory
 * without sliding-window layers. */
int64_t kv_memory_window_cap(const struct kv_memory *mem, int64_t n_ctx, int64_t max_rows);

/* The window side of a pool of n_slots sequences under the window rule: a
 * cap (kv_memory_window_cap) for each; 0 without sliding-window layers. */
int64_t kv_memory_window_blocks(const struct kv_memory *mem, int n_slots, int64_t n_ctx,
                                int64_t max_rows);

/* The positions a row looks back over under the window rule (a pool's
 * w_span: window_max - 1; 0 without sliding-window layers), and the first
 * block a row at position `pos` can see so: where a sequence's window
 * table starts (kv_pool_grow, kv_pool_grow_loaded). One rule for the pool
 * and for what batch --pd moves of a window layer (backend_kv_send_part). */
static inline int64_t kv_memory_window_span(const struct kv_memory *mem)
{
    return mem->window_max > 0 ? mem->window_max - 1 : 0;
}

static inline int64_t kv_window_first(int64_t w_span, int64_t pos)
{
    return pos > w_span ? (pos - w_span) / KV_BLOCK : 0;
}

/* State slots a pool of n_slots sequences needs: n_slots when the memory
 * has a recurrent group (a slot each, indexed by the sequence's slot), else 0. */
int64_t kv_memory_states_for(const struct kv_memory *mem, int64_t n_slots);

/* Blocks that `bytes` hold beside n_states state slots (0 when the states
 * alone take them; as many as a pool can count when no layer is paged). */
int64_t kv_memory_blocks_in(const struct kv_memory *mem, double bytes, int64_t n_states);
/* The same beside a window side of n_wblocks blocks (> 0): the full
 * layers' blocks that the rest holds. */
int64_t kv_memory_blocks_in_windowed(const struct kv_memory *mem, double bytes,
                                     int64_t n_wblocks, int64_t n_states);

/* Elements of one block of a paged layer's K (as many of V):
 * n_head_kv x KV_BLOCK x head_dim. */
static inline int64_t kv_layer_block_elems(const struct kv_layer_mem *L)
{
    return L->n_head_kv * KV_BLOCK * L->head_dim;
}

/* The layer a paged or shared layer's K/V live in: a shared layer's
 * source, else the layer itself. */
int64_t kv_memory_kv_layer(const struct kv_memory *mem, int64_t layer);

/* Bytes the system reports available (MemAvailable, else free pages); 0 when
 * unknown. */
double kv_mem_available(void);

/* ---- the layout attention reads ---------------------------------------------- */

/* One layer's K and V blocks, wherever they live. */
struct kv_layout {
    void *k, *v;           /* block 0 of this layer's K (V) array */
    enum kv_dtype dtype;   /* K's elements */
    int64_t block_stride;  /* elements from a block to the next: n_head_kv * head_stride */
    int64_t head_stride;   /* elements from a KV head to the next in a block: KV_BLOCK * head_dim */
    int64_t head_dim;      /* elements of a row; consecutive positions are a row apart */
    enum kv_dtype dtype_v; /* V's elements */
};

/* Layer l's layout in arrays whose block 0 of K is at k and of V at v
 * (host or device): the strides of the layer's own shape, a shared layer's
 * its source's. */
struct kv_layout kv_memory_layout(const struct kv_memory *mem, int64_t layer, void *k, void *v);

/* Element offset of row `pos` of KV head `h` through block table `table`;
 * the rows to the end of the block follow contiguously. */
static inline int64_t kv_row_offset(const struct kv_layout *L, const int32_t *table, int64_t h,
                                    int64_t pos)
{
    return (int64_t)table[pos / KV_BLOCK] * L->block_stride + h * L->head_stride +
           (pos % KV_BLOCK) * L->head_dim;
}

/* The element type of `base`, L->k or L->v. */
static inline enum kv_dtype kv_base_dtype(const struct kv_layout *L, const void *base)
{
    return base == L->v ? L->dtype_v : L->dtype;
}

/* Address of that row in `base` (L->k or L->v, each in its own type: an
 * element offset is a whole number of rows, so of a quantized type's blocks). */
static inline void *kv_row(const struct kv_layout *L, void *base, const int32_t *table, int64_t h,
                           int64_t pos)
{
    return (char *)base + kv_dtype_row_bytes(kv_base_dtype(L, base),
                                             kv_row_offset(L, table, h, pos));
}

/* Stores the K and V of n tokens at positions pos0.. through `table`,
 * converting to the layout's types (quantizing each row as ggml's
 * reference quantizer does: models/quant.h quant_quantize_row). k and v are [n, n_head_kv * head_dim]
 * f32 (K after RoPE). The blocks must be the sequence's own. */
void kv_write_rows(const struct kv_layout *L, const int32_t *table, int64_t n_head_kv,
                   int64_t pos0, int64_t n, const float *k, const float *v);

/* dst[i] = element i of n elements of `dtype` at src, as f32 (exact; a
 * quantized row's blocks dequantized, d * q). */
void kv_row_to_f32(enum kv_dtype dtype, const void *src, int64_t n, float *dst);

/* ---- host memory for blocks and states ------------------------------------------- */

/* n_blocks blocks of every paged layer and n_states states of every
 * recurrent layer in host memory: the CPU backend's cache, and the staging
 * area of a device cache being saved or loaded. Pages are committed when
 * first written, so memory follows the blocks used. */
struct kv_store {
    struct kv_memory *memory; /* its layout (an owned copy) */
    int64_t n_blocks, n_states;
    int64_t n_wblocks; /* blocks of each sliding-window layer: n_blocks, or the
                        * window side's under the window rule (kv_store_create_windowed) */
    char *base;     /* each paged layer's K blocks then its V blocks, each recurrent
                     * layer's states then its one checkpoint, in layer order */
    size_t *offset; /* [n_layer] bytes from base to the layer's K blocks (a shared
                     * layer: its source's) or its states */
    size_t bytes;   /* of the mapping */
};

/* Creates a store of n_blocks blocks and n_states state slots of `mem`'s
 * layout (no page is touched). Returns IG_OK; IG_E_NOMEM, with the bytes
 * they need (kv_memory_bytes) and the bytes available, when they could
 * never fit in memory, the line ending with `hint`, what the user can do
 * (NULL: "lower -c/--ctx-size"); IG_E_INTERNAL for no blocks, or states
 * missing where the layout has recurrent layers. */
int kv_store_create(const struct kv_memory *mem, int64_t n_blocks, int64_t n_states,
                    const char *hint, struct kv_store **out);
/* The same with n_wblocks blocks for each sliding-window layer (the window
 * side of a pool under the window rule; tables index them with the
 * sequence's window table). */
int kv_store_create_windowed(const struct kv_memory *mem, int64_t n_blocks, int64_t n_wblocks,
                             int64_t n_states, const char *hint, struct kv_store **out);
void kv_store_free(struct kv_store *st);

/* Whether layer l's K/V (its own or its source's) are a sliding-window
 * layer's: under the window rule it reads and writes them through the
 * sequence's window table. */
bool kv_layer_windowed(const struct kv_memory *mem, int64_t layer);

/* Layer l's blocks: a paged layer's own, a shared layer's source's. */
struct kv_layout kv_store_layout(const struct kv_store *st, int64_t layer);

/* Recurrent layer l's state in state slot `slot` (state_bytes bytes). */
void *kv_store_state(const struct kv_store *st, int64_t layer, int64_t slot);
/* Its one checkpoint (ckpt_bytes bytes, a header naming its slot; NULL
 * where the layer has none). */
void *kv_store_ckpt(const struct kv_store *st, int64_t layer);

/* Copies one sequence from `src` to `dst` (the same layers): positions
 * [0, n_pos) of every paged layer through src_table to dst_table,
 * converting the element type where the stores differ, and every
 * recurrent layer's state from src_slot to dst_slot (the checkpoint
 * cleared where it is dst_slot's: the state did not come from a step there). Shared layers have
 * nothing of their own to copy. */
void kv_copy_seq(const struct kv_store *dst, const int32_t *dst_table, int64_t dst_slot,
                 const struct kv_store *src, const int32_t *src_table, int64_t src_slot,
                 int64_t n_pos);
/* The same where either side may keep its sliding-window layers' rows
 * through a window table (NULL: the table): a window entry below 0 is a
 * block given back (kv_pool_grow): such a source's rows arrive as zeros
 * (no later row of the sequence reads them), such a destination's are not
 * written. */
void kv_copy_seq_windowed(const struct kv_store *dst, const int32_t *dst_table,
                          const int32_t *dst_wtable, int64_t dst_slot,
                          const struct kv_store *src, const int32_t *src_table,
                          const int32_t *src_wtable, int64_t src_slot, int64_t n_pos);

/* ---- the allocator ------------------------------------------------------------------ */

struct kv_pool;

/* A pool of n_blocks block ids (one id is a block of every paged layer)
 * and n_states state slots (kv_memory_states_for: 0 when no layer is
 * recurrent, and then a sequence needs none). share_prefixes enables the
 * prefix index, which a pool with states never uses: a recurrent state
 * holds its whole prefix in a fixed size, so a sequence cannot start from
 * blocks another computed. Returns IG_OK or IG_E_NOMEM. */
int kv_pool_create(int64_t n_blocks, int64_t n_states, bool share_prefixes,
                   struct kv_pool **out);
/* The same with a window side (the window rule): n_wblocks block ids for
 * the sliding-window layers, handed out and shared beside the full ones
 * (a sequence's window table, entry i beside full entry i), a sequence
 * holding at most w_cap of them (kv_memory_window_cap) and giving back the
 * blocks wholly before (its next row's position - w_span), w_span the
 * positions a row looks back (window_max - 1). A shared prefix shares the
 * window blocks its last rows' windows reach, where they are still held or
 * untouched on the free list (else the match is cut back to where they
 * are). n_wblocks 0: kv_pool_create. */
int kv_pool_create_windowed(int64_t n_blocks, int64_t n_states, bool share_prefixes,
                            int64_t n_wblocks, int64_t w_span, int64_t w_cap,
                            struct kv_pool **out);
void kv_pool_free(struct kv_pool *p);

int64_t kv_pool_n_blocks(const struct kv_pool *p);
/* Blocks a new admission may still reserve or share from the free list. */
int64_t kv_pool_available(const struct kv_pool *p);
/* Blocks referenced by some sequence now, and the most at any time. */
int64_t kv_pool_used(const struct kv_pool *p);
int64_t kv_pool_peak(const struct kv_pool *p);
/* Blocks shared so far instead of being computed again. */
int64_t kv_pool_hits(const struct kv_pool *p);
/* State slots: in all, held by sequences now, and the most at any time. */
int64_t kv_pool_n_states(const struct kv_pool *p);
int64_t kv_pool_states_used(const struct kv_pool *p);
int64_t kv_pool_states_peak(const struct kv_pool *p);
/* The window side: its blocks (0: none), held now, promised to the
 * sequences admitted (what a new one's promise must fit beside), the most
 * at any time, and how many a sequence gave back as its window moved on. */
int64_t kv_pool_window_blocks(const struct kv_pool *p);
int64_t kv_pool_window_used(const struct kv_pool *p);
int64_t kv_pool_window_promised(const struct kv_pool *p);
int64_t kv_pool_window_peak(const struct kv_pool *p);
int64_t kv_pool_window_freed(const struct kv_pool *p);
/* Bytes of the most blocks (both sides) and state slots held at once. */
double kv_pool_peak_bytes(const struct kv_pool *p, const struct kv_memory *mem);

/* A sequence's view of the pool. */
struct kv_seq {
    int32_t *table;       /* [max_blocks] block ids; owned */
    int64_t max_blocks;   /* the table's capacity */
    int64_t n_blocks;     /* entries in use */
    int64_t n_pos;        /* positions whose K/V are written (the caller advances it) */
    int64_t reserved;     /* blocks it may still take */
    int64_t n_registered; /* leading full blocks entered in the prefix index */
    bool has_state;       /* it holds one of the pool's state slots */
    /* the window side (a pool with one; else unused) */
    int32_t *wtable;      /* [max_blocks] window block ids beside table's; -1: given
                           * back (every entry below w_lo) or none yet; owned */
    int64_t w_lo;         /* entries below it are given back (or never taken) */
    int64_t w_reserved;   /* window blocks promised to it: the most it may hold at
                           * once (kv_memory_window_cap), those held included */
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
 * are then in place: n_pos = n_shared * KV_BLOCK), reserves the rest and,
 * in a pool with states, takes a state slot (which slot holds its state is
 * the caller's: the engine's slot of the sequence). Returns IG_OK, or
 * IG_E_NOMEM without a message and without any change when the pool cannot
 * promise the blocks, or has no state slot left, now. */
int kv_pool_admit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int64_t n_shared,
                  int64_t max_pos);

/* True when a sequence of max_pos positions with n_shared matched blocks
 * (and a state slot, where the pool has states) could be admitted now. */
bool kv_pool_can_admit(const struct kv_pool *p, const int32_t *tokens, int64_t n_shared,
                       int64_t max_pos);

/* Makes the table cover positions [0, n_pos), taking reserved blocks. With
 * a window side, the window blocks wholly before s->n_pos - w_span (which
 * the rows s->n_pos .. n_pos - 1 cannot see) go back to the pool first,
 * and the window table covers the rest. */
void kv_pool_grow(struct kv_pool *p, struct kv_seq *s, int64_t n_pos);
/* The same for rows that are filled from elsewhere (a loaded cache), no
 * row of them attending: the window table covers only what a row at n_pos
 * can see. */
void kv_pool_grow_loaded(struct kv_pool *p, struct kv_seq *s, int64_t n_pos);

/* Enters the sequence's full blocks written so far (below s->n_pos) into the
 * prefix index; tokens[i] is the token at position i. Only blocks computed
 * by this process's forward may be entered (their K/V are what any
 * sequence with the same tokens would compute). */
void kv_pool_register(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens);

/* Drops the sequence's blocks, reservation and state slot; the sequence is
 * empty after. */
void kv_pool_release(struct kv_pool *p, struct kv_seq *s);

/* Sequences that live on after a request (a conversation, generate/):
 * kv_pool_shrink forgets positions [n_pos, s->n_pos): the blocks wholly past
 * n_pos go back to the pool, the block holding position n_pos leaves the
 * prefix index (it will be written again) and must not be shared with
 * another sequence; the reservation is dropped, the state slot kept (its
 * state is not rolled back: a recurrent layer's state after n_pos
 * positions is gone once it has taken more). kv_pool_reserve then
 * promises the blocks to grow to max_pos positions (within the table):
 * IG_OK, or IG_E_NOMEM without a message or any change when the pool cannot
 * promise them now. */
void kv_pool_shrink(struct kv_pool *p, struct kv_seq *s, int64_t n_pos);
int kv_pool_reserve(struct kv_pool *p, struct kv_seq *s, int64_t max_pos);

/* Speculative decoding (generate/): forgets positions [n_pos, ...) a step
 * wrote for drafted tokens the model rejected. The blocks wholly past n_pos
 * go back to the free list and stay promised to the sequence (it writes
 * those positions again); none of them, nor the block holding n_pos, is in
 * the prefix index, which only ever hears of rows that were kept. */
void kv_pool_trim(struct kv_pool *p, struct kv_seq *s, int64_t n_pos);

/* ---- saved caches (kvcache/kvfile.c; the format is docs/kvcache.md) ------- */

/* Version 2 describes the groups of layers and stores what each holds;
 * version 3 is version 2 with a quantized K rotated in chunks of at most
 * KV_ROT_K_MAX; version 1 (every layer full attention of one shape), and
 * version 2 where its K's rotation is version 3's, still load. */
#define KV_FILE_VERSION 3
#define KV_MODEL_ID_BYTES 32

/* The identity a saved cache is bound to: SHA-256 over the architecture, the
 * hyperparameters, every weight's type and shape, and 3 x 64 sampled bytes of
 * every weight (start, middle, end); cheap however large the model is. */
void kv_model_id(const struct model *m, unsigned char id[KV_MODEL_ID_BYTES]);

/* The head of a saved cache, whichever version. */
struct kv_file_header {
    uint32_t version;   /* 1 or 2 */
    enum kv_dtype dtype;   /* K's elements */
    enum kv_dtype dtype_v; /* V's */
    unsigned char model_id[KV_MODEL_ID_BYTES];
    int64_t n_layer;
    int64_t n_groups;   /* version 1: 1 (one shape, every layer) */
    int64_t n_tokens;   /* positions saved, >= 1 */
    int64_t n_vocab;    /* logits saved after the tokens: n_vocab, or 0 for none */
};

/* Writes one sequence, positions [0, n_pos) of the paged layers (table
 * `table` into `st`) and the recurrent layers' states in state slot
 * `slot`, with its token ids tokens[0..n_pos) and, unless NULL, the
 * logits[0..n_vocab) after the last token, to `f` in one sequential pass
 * (pipes work), in the current version. `name` is for messages, printed as
 * given: callers quote a file name ('c.kv', 'stdout'), as every message
 * does. Returns IG_OK or IG_E_IO. */
int kv_file_write(FILE *f, const char *name, const struct kv_store *st, const int32_t *table,
                  int64_t slot, int64_t n_pos, const unsigned char id[KV_MODEL_ID_BYTES],
                  const int32_t *tokens, const float *logits, int64_t n_vocab);

/* A read in progress: the header is read and checked first so the caller can
 * check it against its context, then the body. */
struct kv_file_reader {
    FILE *f;
    const char *name;
    uint32_t crc;       /* CRC-32C of the bytes read so far */
    bool no_crc;        /* parts (kv_file_read_layer, _tokens after the head): no
                         * checksum to check, none computed */
    uint64_t n_read;    /* bytes read so far */
    int64_t model_vocab;/* token ids must be below this */
    const struct kv_memory *want; /* the model's layers (borrowed until the body is read) */
    struct kv_file_header hdr;
};

/* Reads and checks the header from `f`: the model's identity `id`, its
 * layers `want` (kv_memory_of at any dtype: the file's groups must be
 * these, a version 1 file's one shape every layer's) and vocabulary of
 * n_vocab; `name` as for kv_file_write, kept for the body's messages.
 * Returns IG_OK, or IG_E_KVFILE (not a cache file, another version,
 * another model, other layers, a bad field, truncated) or IG_E_IO, in one
 * line. */
int kv_file_read_header(struct kv_file_reader *r, FILE *f, const char *name,
                        const struct kv_memory *want, int64_t n_vocab,
                        const unsigned char id[KV_MODEL_ID_BYTES]);

/* Reads the rest into a new store (*out: want's layers at the file's
 * dtype, kv_blocks_for(hdr.n_tokens) blocks holding the positions in order,
 * one state slot, 0, where there are recurrent layers),
 * tokens[0..hdr.n_tokens) and, when hdr.n_vocab > 0, logits[0..n_vocab),
 * then verifies the checksum and that the stream ends there. Returns IG_OK,
 * or IG_E_KVFILE (truncated, a token out of range, checksum mismatch,
 * trailing bytes), IG_E_NOMEM or IG_E_IO with *out NULL. */
int kv_file_read_body(struct kv_file_reader *r, struct kv_store **out, int32_t *tokens,
                      float *logits);

/* A saved cache in parts, for a cache sent while it is written (prefill and
 * decode on different ranks, cli/pd_prefill.c): kv_file_write's bytes but
 * the checksum, cut where they can be written apart. The head (the header
 * and the tables, n_vocab 0 for no logits); the token ids and logits; and
 * a layer's part, rows [p0, p1) of a paged layer (K then V, by KV head:
 * the file's order within the range) through `table`, or `wtable` for a
 * sliding-window layer where given (the window rule: a given-back block,
 * below 0, as zeros), a recurrent layer's state (whole: write it once the
 * rows are the prompt's last), nothing for a shared one. Each IG_OK or
 * IG_E_IO. */
int kv_file_write_head(FILE *f, const char *name, const struct kv_memory *mem, int64_t n_pos,
                       const unsigned char id[KV_MODEL_ID_BYTES], int64_t n_vocab);
int kv_file_write_tokens(FILE *f, const char *name, const int32_t *tokens, int64_t n_pos,
                         const float *logits, int64_t n_vocab);
int kv_file_write_layer(FILE *f, const char *name, const struct kv_store *st,
                        const int32_t *table, const int32_t *wtable, int64_t slot, int64_t layer,
                        int64_t p0, int64_t p1);
/* Reading them (r->f may change from part to part) after kv_file_read_header
 * read the head: a store for the sequence (kv_file_read_body's), its tokens
 * and logits, a layer's part into it. IG_OK, or kv_file_read_body's errors. */
int kv_file_new_store(const struct kv_file_reader *r, struct kv_store **out);
int kv_file_read_tokens(struct kv_file_reader *r, int32_t *tokens, float *logits);
int kv_file_read_layer(struct kv_file_reader *r, struct kv_store *store, int64_t layer,
                       int64_t p0, int64_t p1);

/* The table 0, 1, 2, ... of n entries: a store read from a file, or staged
 * for one, holds its sequence in blocks 0.. in order. */
void kv_identity_table(int32_t *table, int64_t n);

#endif
