/* prefill/flash_attn.h: fused causal attention for a chunk of prompt tokens
 * (FlashAttention-2 and -3 style kernels), GQA, head_dim 64, 128 or 256,
 * or 512 (Gemma 4's global layers: m64w4n16),
 * bf16 or f16 inputs, fp32 softmax and accumulation, an optional sliding
 * window. The same call writes the chunk's K and V into the KV cache.
 *
 * Semantics. The chunk holds the queries of positions pos0 .. pos0+n_tokens-1.
 * Query i attends to keys 0 .. pos0+i (bottom-right aligned causal mask),
 * or with a window W > 0 to keys pos0+i-W+1 .. pos0+i (its last W positions):
 * keys < pos0 are read from the cache, keys >= pos0 from the chunk's k/v.
 * Query head h uses KV head h / (n_head / n_head_kv).
 *   O[i][h]  = sum_j softmax_j(scale * q_i . k_j) v_j    (rounded to dtype)
 *   lse[h][i] = ln sum_j exp(scale * q_i . k_j)           (fp32, natural log)
 * With sinks (gpt-oss), head h's softmax denominator, and the sum in lse,
 * also hold exp(sinks[h]): a logit with no value (the mma.sync variants).
 * and cache rows pos0 .. pos0+n_tokens-1 of every KV head get the chunk's
 * K and V (no other cache row is touched).
 *
 * KV cache layout (per layer, K and V alike): [n_head_kv][n_ctx][head_dim],
 * element (hk, pos, d) at hk*cache_head_stride + pos*cache_row_stride + d;
 * or paged (block_table set; the batch engine's pool; mma.sync and ws
 * variants): blocks of block_rows positions, element (hk, pos, d) at
 * block_table[pos / block_rows]*cache_block_stride + hk*cache_head_stride +
 * (pos % block_rows)*cache_row_stride + d (the pool's block b is
 * [n_head_kv][block_rows][head_dim]).
 *
 * Variable length (seqs set; FlashAttention-2's varlen form; paged caches
 * only; the mma.sync variants, and the ws ones of whole-block tiles at head
 * dims 64 and 128 with seqs 16-byte aligned): the rows of q, k, v and o are
 * a batch step's rows, sequence s owning rows seqs[s].row0 .. row0 +
 * n_rows - 1 at positions seqs[s].pos0 .., each sequence exactly as one call above with
 * its own pos0 and its own block table (block_table + s * table_stride):
 * causal within its own rows, its cached positions < its pos0 read through
 * its table (and its window), its rows' K and V written into its blocks.
 * No sequence sees another's rows. lse is [n_head][step rows].
 *
 * Two twins share the params struct: prefill_attn_ref (CPU, plain C, the
 * reference) and prefill_attn_cuda (prefill/flash_attn.cu, tensor cores;
 * it dispatches to prefill/flash_attn_wgmma.cu and prefill/flash_attn_ws.cu).
 * The same .cu built for the CPU emulator gives prefill_attn_emu (tests).
 * Covered by tests/emu/test_flash_attn_emu.c and tests/gpu/test_flash_attn_gpu.c. */
#ifndef IGNITE_PREFILL_FLASH_ATTN_H
#define IGNITE_PREFILL_FLASH_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum prefill_attn_dtype { PREFILL_ATTN_BF16 = 0, PREFILL_ATTN_F16 = 1 };

/* One sequence of a variable-length call: its rows of the step (row0 ..
 * row0 + n_rows - 1 of q, k, v, o and lse; n_rows 0: nothing to do) and
 * the position of its first row (= its cached positions). */
struct prefill_attn_seq {
    int32_t row0, n_rows, pos0, pad_;
};

/* One call's pointers, sizes and strides. Strides count elements (not bytes)
 * and are 64-bit. For the CUDA kernel every pointer is 16-byte aligned and
 * every stride a multiple of 8 (16-byte rows); prefill_attn_choose checks. */
struct prefill_attn_params {
    const void *q;     /* [n_tokens][n_head][head_dim], post-RoPE queries */
    const void *k;     /* [n_tokens][n_head_kv][head_dim], the chunk's post-RoPE keys */
    const void *v;     /* [n_tokens][n_head_kv][head_dim], the chunk's values */
    void *k_cache;     /* [n_head_kv][n_ctx][head_dim]: rows < pos0 read, chunk rows written */
    void *v_cache;     /* same layout and strides as k_cache */
    void *o;           /* [n_tokens][n_head][head_dim] out, dtype */
    float *lse;        /* [n_head][n_tokens] out (natural log), or NULL */

    int64_t n_tokens;  /* queries in the chunk, >= 1 (varlen: the largest n_rows,
                          the launch's shape) */
    int64_t pos0;      /* position of the chunk's first token = cache rows before it
                          (varlen: the largest seqs[s].pos0, which sizes the work
                          for the chooser; each sequence uses its own) */
    int64_t n_ctx;     /* cache rows per head (paged: positions the block table
                          covers; varlen: table_stride * block_rows); pos0 +
                          n_tokens <= n_ctx (varlen: each sequence's pos0 + n_rows) */
    int64_t n_head;    /* query heads, a multiple of n_head_kv */
    int64_t n_head_kv; /* key/value heads */
    int64_t head_dim;  /* 64, 128 or 256 (256: m64w4, m64w4n32h and the ws variants),
                          or 512 (m64w4n16 only, f16 only: the backend's type) */
    int64_t window;    /* sliding window in keys (a query sees its last `window`
                          positions, itself included); 0 = none (mma.sync and ws
                          variants) */

    int64_t q_row_stride, q_head_stride; /* q: token, head */
    int64_t k_row_stride, k_head_stride; /* k: token, kv head */
    int64_t v_row_stride, v_head_stride; /* v: token, kv head */
    int64_t o_row_stride, o_head_stride; /* o: token, head */
    int64_t cache_row_stride;            /* caches: position (within a block when paged) */
    int64_t cache_head_stride;           /* caches: kv head */
    int64_t lse_head_stride;             /* lse: head (token stride is 1) */

    /* Paged caches (NULL: the contiguous layout above): the sequence's
     * block ids, [ceil((pos0 + n_tokens) / block_rows)] (device memory for
     * the CUDA kernel), int32 each, < n_blocks; varlen: sequence s's at
     * block_table + s * table_stride. */
    const int32_t *block_table;
    int64_t block_rows;                  /* positions per block (64) */
    int64_t cache_block_stride;          /* caches: block */
    int64_t n_blocks;                    /* blocks in the pool */

    /* Variable length (see above): [n_seqs] sequences (device memory for
     * the CUDA kernel, host memory for the reference; 16-byte aligned for
     * the ws variants, which read each in one load), or NULL: one
     * sequence, rows 0 .. n_tokens - 1 at pos0 (n_seqs, table_stride unused). */
    const struct prefill_attn_seq *seqs;
    int64_t n_seqs;                      /* 1 .. 65535 */
    int64_t table_stride;                /* int32 ids from one sequence's table to the next */

    float scale;       /* softmax scale, usually 1/sqrt(head_dim) */
    int dtype;         /* enum prefill_attn_dtype of q, k, v, caches and o */
    int variant;       /* enum prefill_attn_variant: 0 = the chooser's pick */
    const float *sinks; /* [n_head] f32 or NULL (device memory for the CUDA kernel, host
                           for the reference): see Semantics; the mma.sync variants */
    /* The ws variants' work counter (device memory, 2 uint32, zero before
     * the launch; the launch leaves them zero: graph-safe): tiles handed out
     * longest first by an atomic draw, as blocks free up. NULL: the static
     * schedule (block b takes items b, b + grid, ...). Other variants and
     * the reference ignore it. */
    uint32_t *tile_counter;
    /* A quantized pool (kvcache/kv_devq.h's KVQ_Q8_0 / KVQ_FP8; KVQ_F16 = 0:
     * the 2-byte dtype above): paged f16 only, the mma.sync variants. The
     * chunk's rows are already in the pool (ops/gpu_kvq.h writes them):
     * every key, the chunk's too, is read from it, dequantized into the
     * shared tile as f16 (f16(d q)); nothing is written. */
    int cache_k_dtype, cache_v_dtype;
};

/* The ws kernel stages O in its own shared-memory area (so the next item's
 * Q loads while this one's epilogue runs) when its tiles are whole 64-key
 * blocks (the variants on the dynamic schedule) and Q, the K/V ring, O and
 * the kernel's 1152 bytes of mbarriers and alignment fit sm_90's 227 KB a
 * block; else O goes into Q's rows (Q released after the store). */
#define PREFILL_ATTN_SMEM_MAX 232448
#define PREFILL_ATTN_WS_OWN_O(block_m, block_n, stages, hd)                             \
    ((block_n) % 64 == 0 && (2 * (int64_t)(block_m) + 2 * (int64_t)(stages) * (block_n)) * (hd) * 2 + 1024 + 128 <= \
     PREFILL_ATTN_SMEM_MAX)

/* The CUDA kernels' tile configurations ("variants"), compiled side by side.
 * X(ID, name, block_m, block_n, warps, m_tiles, q_regs_max_hd, head_dims, min_blocks, isa,
 *   stages, s_ahead):
 *   block_m   query rows per block = warps * 16 * m_tiles
 *   block_n   keys per K/V tile
 *   m_tiles   m16 tiles per warp: with 2, every K/V fragment feeds 4 mma
 *   q_regs_max_hd  Q stays in registers for head_dim <= this; above, its
 *             fragments are reloaded from shared memory every k-step (frees
 *             registers for the O accumulator)
 *   head_dims which head dims it is built for, a mask: 1 = 64, 2 = 128,
 *             4 = 256, 8 = 512 (a tile that would spill at 128 is built for 64
 *             only). At 512 a block computes half of O's columns (256, the
 *             accumulator of the 256 variants), S over the whole head: two
 *             blocks a query tile and head (blockIdx.y = 2 h + half)
 *   min_blocks blocks per SM the register allocation must allow
 *             (__launch_bounds__); 0 = unspecified, ptxas's own choice,
 *             which is not the same as 1 (it differs per variant which is
 *             better: 1 made m64w4 take 203 instead of 171 registers at hd
 *             128, 0 made m128w8 spill at hd 64). Also decides whether the
 *             mma kernel prefetches fragments on full tiles: only at 0 or 1,
 *             where registers allow a second set
 *   isa       PREFILL_ATTN_ISA_MMA: prefill/flash_attn.cu, mma.sync + ldmatrix,
 *             any sm_80+ GPU; PREFILL_ATTN_ISA_WGMMA: prefill/flash_attn_wgmma.cu,
 *             one warpgroup (4 warps) per 64 query rows, wgmma with Q and K/V
 *             read from shared memory by the tensor cores, compute capability
 *             9.0 only (sm_90a code); PREFILL_ATTN_ISA_WS: prefill/flash_attn_ws.cu,
 *             FlashAttention-3's structure (a producer warpgroup loading with
 *             TMA, warps / 4 - 1 consumer warpgroups of 64 rows ping-ponging
 *             wgmma, a persistent grid), 9.0 only. Sliding windows: the mma.sync
 *             and ws isas; paged caches: the mma.sync isa and the ws variants
 *             whose block_n is a multiple of 64; variable length: the mma.sync
 *             isa and those ws variants at head dims 64 and 128; head dim
 *             256: m64w4, m64w4n32h and the ws variants
 *   stages    K/V tiles in shared memory (2..4): tile t computes while the
 *             next stages - 1 - s_ahead tiles load (2 = double buffering; 3
 *             keeps two tiles in flight, more latency hidden)
 *   s_ahead   1 (wgmma kernel): S of tile t+1 issued before tile t's softmax,
 *             so the tensor cores work on it while the warpgroup computes
 *             exponentials (FlashAttention-3's intra-warpgroup overlap); tile
 *             t+1 must then be resident, so one stage more. The ws kernel
 *             always overlaps (S of tile t with P V of tile t - 1, K and V
 *             released separately), so its stages are all loading stages
 * The one table: the chooser, the kernel templates and the tests read it. */
#define PREFILL_ATTN_ISA_MMA 0
#define PREFILL_ATTN_ISA_WGMMA 1
#define PREFILL_ATTN_ISA_WS 2
#define PREFILL_ATTN_VARIANTS(X)                                                      \
    X(M64W4, "m64w4", 64, 64, 4, 1, 128, 7, 0, PREFILL_ATTN_ISA_MMA, 2, 0)            \
    X(M128W8, "m128w8", 128, 64, 8, 1, 128, 3, 1, PREFILL_ATTN_ISA_MMA, 2, 0)         \
    X(M64W4N32, "m64w4n32", 64, 32, 4, 1, 128, 3, 3, PREFILL_ATTN_ISA_MMA, 2, 0)      \
    X(M64W4N32H, "m64w4n32h", 64, 32, 4, 1, 128, 4, 0, PREFILL_ATTN_ISA_MMA, 2, 0)    \
    X(M128W4, "m128w4", 128, 64, 4, 2, 64, 1, 0, PREFILL_ATTN_ISA_MMA, 2, 0)          \
    X(M128W4N48, "m128w4n48", 128, 48, 4, 2, 64, 2, 0, PREFILL_ATTN_ISA_MMA, 2, 0)    \
    X(M128W4N32, "m128w4n32", 128, 32, 4, 2, 64, 3, 0, PREFILL_ATTN_ISA_MMA, 2, 0)    \
    X(M128W4K3, "m128w4k3", 128, 64, 4, 2, 64, 1, 0, PREFILL_ATTN_ISA_MMA, 3, 0)      \
    X(M128W4N48K3, "m128w4n48k3", 128, 48, 4, 2, 64, 2, 0, PREFILL_ATTN_ISA_MMA, 3, 0) \
    X(WG128N128, "wg128n128", 128, 128, 8, 1, 0, 3, 1, PREFILL_ATTN_ISA_WGMMA, 2, 0)  \
    X(WG128N64, "wg128n64", 128, 64, 8, 1, 0, 3, 1, PREFILL_ATTN_ISA_WGMMA, 2, 0)     \
    X(WG64N64, "wg64n64", 64, 64, 4, 1, 0, 3, 2, PREFILL_ATTN_ISA_WGMMA, 2, 0)        \
    X(WG128N64K3, "wg128n64k3", 128, 64, 8, 1, 0, 3, 1, PREFILL_ATTN_ISA_WGMMA, 3, 0) \
    X(WG64N64K3, "wg64n64k3", 64, 64, 4, 1, 0, 3, 2, PREFILL_ATTN_ISA_WGMMA, 3, 0)    \
    X(WG128N64S3, "wg128n64s3", 128, 64, 8, 1, 0, 3, 1, PREFILL_ATTN_ISA_WGMMA, 3, 1) \
    X(WG128N64S4, "wg128n64s4", 128, 64, 8, 1, 0, 3, 1, PREFILL_ATTN_ISA_WGMMA, 4, 1)  \
    X(WS128N128, "ws128n128", 128, 128, 12, 1, 0, 3, 1, PREFILL_ATTN_ISA_WS, 2, 1)     \
    X(WS128N128K3, "ws128n128k3", 128, 128, 12, 1, 0, 3, 1, PREFILL_ATTN_ISA_WS, 3, 1) \
    X(WS128N160, "ws128n160", 128, 160, 12, 1, 0, 2, 1, PREFILL_ATTN_ISA_WS, 2, 1)     \
    X(WS128N64, "ws128n64", 128, 64, 12, 1, 0, 7, 1, PREFILL_ATTN_ISA_WS, 2, 1)        \
    X(WS192N64, "ws192n64", 192, 64, 16, 1, 0, 1, 1, PREFILL_ATTN_ISA_WS, 2, 1)         \
    X(WS192N128, "ws192n128", 192, 128, 16, 1, 0, 1, 1, PREFILL_ATTN_ISA_WS, 2, 1)       \
    X(M64W4N16, "m64w4n16", 64, 16, 4, 1, 128, 8, 0, PREFILL_ATTN_ISA_MMA, 2, 0)

enum prefill_attn_variant {
    PREFILL_ATTN_AUTO = 0, /* the chooser decides (IGNITE_FLASH_VARIANT may force one) */
#define PREFILL_ATTN_ENUM_(id, ...) PREFILL_ATTN_##id,
    PREFILL_ATTN_VARIANTS(PREFILL_ATTN_ENUM_)
#undef PREFILL_ATTN_ENUM_
    PREFILL_ATTN_N_VARIANTS /* one past the last */
};

/* The chooser's pick per head_dim when nothing forces a variant and no
 * speed was measured for any candidate (see prefill_attn_choose_for). */
#define PREFILL_ATTN_DEFAULT_VARIANT(head_dim)                  \
    ((head_dim) == 128   ? PREFILL_ATTN_M128W4N48                \
     : (head_dim) == 256 ? PREFILL_ATTN_M64W4N32H                \
     : (head_dim) == 512 ? PREFILL_ATTN_M64W4N16                 \
                         : PREFILL_ATTN_M128W4)

/* One measured speed: variant `variant` ran at `tflops` on a GPU of compute
 * capability cc (major * 10 + minor) at head_dim hd and n tokens (B = 1,
 * 32 query / 8 KV heads, causal, bf16, pos0 0; bench/sdpa_compare.py). The
 * chooser's table, prefill/flash_attn_speed.inc, is written by
 * scripts/attn_speed_table.py from the GPU check's attn_speed.tsv. */
struct prefill_attn_speed {
    const char *variant;
    int cc, hd, n;
    float tflops;
};

/* Among rows[0..n_rows), the variant to run p on a device of compute
 * capability cc (0: any device, every variant runnable, the emulator's
 * view) with a build that has the sm_90a kernels or not (have_sm90a): only
 * variants built for p's head dim that support its window and run there
 * count; of the rows for that cc (any cc when cc is 0) and head
 * dim, those at the measured n nearest to pos0 + n_tokens (in ratio), the
 * fastest. PREFILL_ATTN_AUTO when no row qualifies. */
int prefill_attn_pick_measured(const struct prefill_attn_speed *rows, size_t n_rows,
                               const struct prefill_attn_params *p, int cc, int have_sm90a);

/* One launch's resolved configuration. */
struct prefill_attn_tile {
    int variant;       /* enum prefill_attn_variant, never AUTO */
    int block_m;       /* query rows per block */
    int block_n;       /* keys per K/V tile */
    int warps;         /* warps per block */
    int m_tiles;       /* m16 tiles (16 query rows each) per warp */
    int q_in_regs;     /* 1: Q fragments stay in registers; 0: reloaded per k-step */
    int isa;           /* PREFILL_ATTN_ISA_MMA, _WGMMA or _WS */
    int stages;        /* K/V tiles in shared memory (2..4) */
    int n_q_tiles;     /* query tiles (of the longest sequence); grid = (n_q_tiles,
                          n_head, n_seqs), or for the ws kernel n_q_tiles * n_head
                          work items on a persistent grid */
    size_t smem_bytes; /* dynamic shared memory per block */
};

/* The one chooser: whether the CUDA kernel supports p and with which tiles,
 * on a device of compute capability cc (0: any, as under the emulator) with
 * or without the sm_90a kernels in the build (have_sm90a).
 * Dispatch, shared-memory sizing and tests all ask it. The variant is
 * p->variant when set, else the one named by the environment variable
 * IGNITE_FLASH_VARIANT (e.g. "m128w4"), else the fastest measured one
 * (prefill_attn_pick_measured on the built-in table), else
 * PREFILL_ATTN_DEFAULT_VARIANT(hd) when it fits p, else the first variant
 * that does. Returns 0
 * and fills *t, or IG_E_INTERNAL after printing what is unsupported (an
 * unknown variant, a variant not built for the head dim, without windows,
 * paged caches (the wgmma ones; ws tiles not of whole blocks) or varlen
 * (the wgmma ones; ws tiles not of whole blocks, head dim 256, seqs not
 * 16-byte aligned), a paged cache not of 64-position blocks,
 * varlen without one, no variant for the device). */
int prefill_attn_choose_for(const struct prefill_attn_params *p, int cc, int have_sm90a,
                            struct prefill_attn_tile *t);

/* prefill_attn_choose_for(p, 0, 1, t). */
int prefill_attn_choose(const struct prefill_attn_params *p, struct prefill_attn_tile *t);

/* The built-in table of measured speeds and its length. */
const struct prefill_attn_speed *prefill_attn_speed_table(size_t *n_rows);

/* A variant's name ("m64w4"), or NULL for AUTO and out-of-range values. */
const char *prefill_attn_variant_name(int variant);

/* The variant called `name`, or PREFILL_ATTN_AUTO when there is none. */
int prefill_attn_variant_find(const char *name);

/* A variant's isa (PREFILL_ATTN_ISA_*), or -1 for AUTO and unknown values. */
int prefill_attn_variant_isa(int variant);

/* Whether `variant` is built for head_dim (0 for AUTO and unknown values). */
int prefill_attn_variant_supports(int variant, int64_t head_dim);

/* Whether a kernel of this isa can run on compute capability cc (0: any)
 * in a build that has the sm_90a kernels (have_sm90a). */
int prefill_attn_isa_runs_on(int isa, int cc, int have_sm90a);

/* CPU reference. Returns 0, or IG_E_INTERNAL for inconsistent sizes. */
int prefill_attn_ref(const struct prefill_attn_params *p);

/* CUDA kernel on `stream` (a cudaStream_t; NULL = default). Pointers are
 * device pointers. Returns 0, IG_E_INTERNAL for unsupported parameters or
 * IG_E_DEVICE for a CUDA error or a variant the device cannot run
 * (prefill_attn_cuda_supports; reported). Asynchronous. */
int prefill_attn_cuda(const struct prefill_attn_params *p, void *stream);

/* Whether the current CUDA device and this build can run `variant`: mma
 * variants on compute capability 8.0 and up, wgmma and ws ones on 9.0 with
 * sm_90a code built. 0 for unknown variants and without a device. Tests and
 * benchmarks skip what it refuses; prefill_attn_cuda reports it. */
int prefill_attn_cuda_supports(int variant);

/* The same kernel source run by the CPU emulator (emu/), host pointers.
 * Only in test programs that link tests/emu/flash_attn_emu.cc. */
int prefill_attn_emu(const struct prefill_attn_params *p, void *stream);

/* The wgmma kernel's launcher (prefill/flash_attn_wgmma.cu) for a tile the
 * chooser resolved to a PREFILL_ATTN_ISA_WGMMA variant: called by
 * prefill_attn_cuda / prefill_attn_emu (which check the device first), not
 * directly. Returns 0, IG_E_INTERNAL or IG_E_DEVICE. */
int prefill_attn_wgmma_cuda(const struct prefill_attn_params *p,
                            const struct prefill_attn_tile *t, void *stream);
int prefill_attn_wgmma_emu(const struct prefill_attn_params *p,
                           const struct prefill_attn_tile *t, void *stream);

/* The same for PREFILL_ATTN_ISA_WS variants (prefill/flash_attn_ws.cu). */
int prefill_attn_ws_cuda(const struct prefill_attn_params *p, const struct prefill_attn_tile *t,
                         void *stream);
int prefill_attn_ws_emu(const struct prefill_attn_params *p, const struct prefill_attn_tile *t,
                        void *stream);

#ifdef __cplusplus
}
#endif

#endif
