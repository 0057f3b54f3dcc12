/* prefill/flash_attn_ws.cu: the fused causal prefill attention kernel with
 * FlashAttention-3's structure on Hopper (sm_90a); semantics, cache layout
 * and params in prefill/flash_attn.h, the variants (isa PREFILL_ATTN_ISA_WS)
 * in its PREFILL_ATTN_VARIANTS table, which prefill_attn_cuda dispatches here.
 *
 * Warp specialization. A block is one producer warpgroup and C consumer
 * warpgroups (C = warps / 4 - 1), each consumer owning 64 of the block's
 * 64 C query rows. setmaxnreg moves registers from the producer (which only
 * issues copies) to the consumers (which hold S, O and P). No block-wide
 * barrier after the start:
 *   - one producer thread loads Q and the K and V tiles with TMA (the
 *     128-byte swizzle, boxes of 64 columns) into a ring of `stages`
 *     buffers, each guarded by a full mbarrier (armed with the tile's bytes,
 *     completed by the TMA) and an empty one (one arrival per consumer warp
 *     once its wgmma has read the buffer); K and V are released separately;
 *     each K/V tile comes whole from the cache or from the chunk (see
 *     ws_item);
 *   - each consumer warpgroup computes S = Q K^T and O += P V with wgmma
 *     (Q, K, V from shared memory, P from registers), issues S of tile t
 *     while P V of tile t - 1 is in flight (wgmma.wait_group 1), and runs
 *     tile t's softmax while that P V completes; the consumers take turns
 *     issuing their MMAs through named barriers (ping-pong), so one's
 *     softmax runs while the other's MMAs use the tensor cores;
 *   - the output is normalized into shared memory and written by a TMA
 *     store: into O's own area where it fits (PREFILL_ATTN_WS_OWN_O; Q is
 *     released once the item's last S has completed, so the next item's Q
 *     loads under this one's last P V and epilogue), else into the
 *     warpgroup's own Q rows, Q released once the store has read them.
 * Persistent grid: min(work items, SMs) blocks; an item is (query tile,
 * head), numbered longest causal tiles first and the heads of one KV group
 * next to each other (their K and V stay in L2). Block b takes item b
 * first, then with p.tile_counter the next undrawn item of an atomic
 * counter each time it finishes one (FlashAttention-3's dynamic
 * scheduler: no block idles while another still has two long tiles), the
 * producer drawing the next item once it has issued item i's loads (while
 * the consumers still compute i's last tiles) and passing each to the
 * consumers through a shared slot under full_q's mbarrier; the last
 * block done puts the counter back to zero (ws_done). Without a counter,
 * items b, b + grid, ... (the static stride).
 * A sliding window skips the K/V tiles wholly outside it and masks the
 * rest. A paged cache (the batch engine's pool of 64-position blocks) is
 * read one block per TMA box (see ws_item). The first head of each KV group
 * also copies the chunk's K and V rows into the cache (blocks read only
 * cache rows < pos0). Variable length (p.seqs; whole-block tiles, head dims
 * 64 and 128): an item is (query tile, sequence, head), items past their
 * sequence's rows skipped, everything else per sequence; tiles that a
 * sequence's end or its pos0 cuts are copied and stored row by row, so no
 * row outside the sequence is read into a tile or written (ws_producer, the
 * epilogue). The one-sequence path is its own instantiation (VL = false).
 *
 * Everything reaches the hardware through devkit/ (wgmma.cuh, tma.cuh,
 * sync.cuh). Built for sm_90a only (ignite_gpu_sm90a in CMakeLists.txt)
 * and, as plain C++, for the CPU emulator, which implements TMA, mbarriers,
 * named barriers and setmaxnreg with a happens-before race detector
 * (emu/sync.cc, emu/tma.cc). Covered by tests/emu/test_flash_attn_emu.c
 * (--variant ws...), tests/emu/test_flash_attn_mutants.cc and
 * tests/gpu/test_flash_attn_gpu.c. */
#include "devkit/tma.cuh" /* first: it defines IG_EMU, which dev_entry.h reads */
#include "devkit/wgmma.cuh"
#include "devkit/dev_entry.h"
#include "prefill/flash_attn.h"
#include "prefill/flash_tiles.cuh"
#include "prefill/flash_wgmma.cuh"

#if defined(__CUDA_ARCH__) && !IG_HAVE_WGMMA
#error "prefill/flash_attn_ws.cu is for sm_90a only: -gencode=arch=compute_90a,code=sm_90a"
#endif

namespace {

/* A ws variant's shape and register split. */
template <int V> struct ws_cfg {
    static constexpr int kConsumers = variant<V>::warps / 4 - 1; /* warpgroups of 64 rows */
    static constexpr int kThreads = 32 * variant<V>::warps;
    static constexpr int kBlockM = variant<V>::block_m, kBlockN = variant<V>::block_n;
    static constexpr int kStages = variant<V>::stages;
    /* K/V boxes of 64 rows where the tile allows: the paged pool's block. */
    static constexpr int kBoxRows = kBlockN % 64 == 0 ? 64 : kBlockN;
    /* Variable length: the tiles that read the paged pool (whole blocks),
     * head dim up to 128 (ws_varlen). */
    static constexpr bool kVarlen = kBlockN % 64 == 0;
    /* Items drawn from the work counter (p.tile_counter) and passed to the
     * consumers through the item slot: not at 160-key tiles, whose
     * consumers (80 S and 40 P registers) spilled 16 bytes with the slot's
     * loop; they keep the static schedule, each warpgroup computing it. */
    static constexpr bool kDynamic = kBlockN % 64 == 0;
    static constexpr int kLaunchRegs = ig_launch_regs(kThreads);
    /* 24 (FA3's at two consumer warpgroups) spilled 16 to 600 bytes once
     * the producer drew items from the counter (atom.global); 40 leaves
     * the consumers 232 registers at 12 warps (240 before) and 152 at 16
     * (160). Three consumers of 128-key tiles (ws192n128: S 64, P 32 and
     * O 32 accumulator registers at hd 64) need FA3's 32 / 160 split: its
     * producer fits 32 with its item count in shared memory, the draw's
     * grid size read anew and each item's last tile recomputed (ws_smem,
     * ws_draw, ws_producer); ws192n64's varlen producer still spilled 8
     * bytes at 32, so it keeps 40. */
    static constexpr int kProducerRegs =
        !kDynamic ? 24 : kConsumers == 3 && kBlockN >= 128 ? 32 : 40;
    /* What the consumers may take from the launch pool, at most 240. */
    static constexpr int kConsumerRegs0 =
        (kLaunchRegs * kThreads - kProducerRegs * 128) / (128 * kConsumers) / 8 * 8;
    static constexpr int kConsumerRegs = kConsumerRegs0 > 240 ? 240 : kConsumerRegs0;
    static_assert(kConsumers >= 1 && kBlockM == 64 * kConsumers, "a consumer per 64 query rows");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256 && kStages >= 2, "K/V tiles");
    static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= kLaunchRegs * kThreads,
                  "setmaxnreg: the CTA's register pool");
};

/* The kernel's one argument: the tensor maps (by value, for TMA), the
 * params and what the launcher derived. Bit i of swap: map i has its head
 * dimension before its row dimension (strides kept increasing). A paged
 * cache's maps (KC, VC) are 4-D (hd, block_rows, n_head_kv, n_blocks) over
 * the pool, and KT, VT the same with only the first pos0 % 64 rows of each
 * block inside (the block holding pos0: its later rows are the chunk's,
 * which this launch writes, and read as zeros). */
enum { MAP_Q, MAP_K, MAP_V, MAP_KC, MAP_VC, MAP_O, MAP_KT, MAP_VT, N_MAPS };
/* Variable length (p.seqs): no tail maps (each sequence's pos0 is its own),
 * but maps of one-row boxes over the same tensors as Q, K, V, KC and VC
 * (MAP_Q1 .. MAP_VC1 at the places of MAP_KT, MAP_VT and after) and O
 * (MAP_O1): a tile that a sequence's end (or its pos0, in the block holding
 * it) cuts is loaded row by row, its rows outside the sequence at row -1
 * (outside every map: zeros), and stored row by row, only the sequence's. */
enum { MAP_Q1 = MAP_KT, MAP_K1 = MAP_VT, MAP_V1 = N_MAPS, MAP_KC1, MAP_VC1, MAP_O1, N_MAPS_VARLEN };
struct ws_args { /* aligned as its maps */
    ig_tma_map maps[N_MAPS_VARLEN];
    prefill_attn_params p;
    float scale_log2;
    int n_items, n_q_tiles, window;
    int paged; /* a paged cache: block-aligned cache tiles */
    uint32_t swap;
    uint32_t *tiles; /* p.tile_counter: [0] draws, [1] blocks done; NULL: static */
};

/* One work item: query rows q0 .. of its sequence (ws_seq), head h (KV
 * head hk), K/V tiles t_lo..t_hi.
 * Tiles t >= 0 hold keys pos0 + t bn .. (bn = block_n) from the chunk (keys
 * past the end read as zeros and are masked), tiles t < 0 keys of the
 * cache: with a contiguous cache aligned to pos0 as well (keys pos0 + t bn
 * ..; the first one's keys below 0 read as zeros, masked), with a paged
 * one aligned to its 64-position blocks (cache tile c = t + n_cache_tiles
 * holds keys c bn .., two boxes of one block each at bn = 128; keys at and
 * past pos0 masked). No tile mixes cache and chunk, every tile is TMA
 * boxes, and chunk tile t is the diagonal of query tile t when
 * block_m = block_n. Everything is the item's sequence's: its rows,
 * its pos0, its block table. */
struct ws_item {
    int q0, h, hk, t_lo, t_hi;
};

/* Work item `item`'s sequence: the whole call, or with variable length
 * sequence (item / n_head) % n_seqs (items are ordered query tile, then
 * sequence, then head), read anew at each call (ig_ld_fresh_v4): nothing
 * of it is held across the tile loop. */
template <int V, bool VL> __device__ __forceinline__ attn_seq ws_seq(const ws_args &a, int item)
{
    if constexpr (!VL) {
        return attn_seq_whole(a.p);
    } else {
        const int s = (item / (int)a.p.n_head) % (int)a.p.n_seqs;
        int32_t f[4];
        ig_ld_fresh_v4(&a.p.seqs[s].row0, f);
        return attn_seq{f[0], f[1], f[2], s};
    }
}

/* Work item `item`'s first query row (of its sequence). */
template <int V, bool VL> __device__ __forceinline__ int ws_q0(const ws_args &a, int item)
{
    const int per_tile = (int)a.p.n_head * (VL ? (int)a.p.n_seqs : 1);
    return (a.n_q_tiles - 1 - item / per_tile) * ws_cfg<V>::kBlockM; /* most keys first */
}

/* The item this block takes after `item` (its first is blockIdx.x): with
 * the counter the next draw (draw d is item grid + d, items 0 .. grid - 1
 * being the blocks' first), so a block that finishes early takes the next
 * longest tile; without it the static stride item + grid. */
template <int V> __device__ __forceinline__ int ws_draw(const ws_args &a, int item)
{
    if (ws_cfg<V>::kDynamic && a.tiles)
        return (int)ig_atomic_add_u32(&a.tiles[0], 1u) + ig_grid_size_fresh();
    return item + ig_grid_size_fresh();
}

/* The first of item and the block's later items (ws_draw) with rows (the
 * longest sequence's query tiles are every sequence's items; a shorter
 * one's past its rows are skipped), or n_items or more: no more. */
template <int V, bool VL> __device__ __forceinline__ int ws_next(const ws_args &a, int item)
{
    if constexpr (VL) {
        for (; item < a.n_items; item = ws_draw<V>(a, item)) {
            const int s = (item / (int)a.p.n_head) % (int)a.p.n_seqs;
            if (ws_q0<V, VL>(a, item) < ig_ld_fresh_s32(&a.p.seqs[s].n_rows))
                break;
        }
    }
    return item;
}

/* The block has made its last draw: the last block to get here puts the
 * counter back to zero for the next launch (no draw follows in this one),
 * so a graph replays it as it is. */
template <int V> __device__ __forceinline__ void ws_done(const ws_args &a)
{
    if (!ws_cfg<V>::kDynamic || !a.tiles)
        return;
    ig_threadfence(); /* this block's draws before its ticket */
    if (ig_atomic_add_u32(&a.tiles[1], 1u) == gridDim.x - 1) {
        ig_threadfence(); /* every block's draws before the reset */
        a.tiles[0] = 0;
        a.tiles[1] = 0;
    }
}

/* Paged: the tiles of sequence sq's cache keys, -n .. -1. */
template <int V> __device__ __forceinline__ int ws_cache_tiles(const attn_seq &sq)
{
    return (sq.pos0 + ws_cfg<V>::kBlockN - 1) / ws_cfg<V>::kBlockN;
}

/* The first key of tile t of sequence sq. */
template <int V> __device__ __forceinline__ int ws_tile_j0(const ws_args &a, int t,
                                                           const attn_seq &sq)
{
    constexpr int kBlockN = ws_cfg<V>::kBlockN;
    if (t < 0 && a.paged)
        return (t + ws_cache_tiles<V>(sq)) * kBlockN;
    return sq.pos0 + t * kBlockN;
}

/* floor(a / b) for b > 0. */
__device__ __forceinline__ int ws_floor_div(int a, int b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

template <int V, bool VL>
__device__ __forceinline__ ws_item ws_item_at(const ws_args &a, int item, const attn_seq &sq)
{
    constexpr int kBlockM = ws_cfg<V>::kBlockM, kBlockN = ws_cfg<V>::kBlockN;
    const int n_head = (int)a.p.n_head, group = n_head / (int)a.p.n_head_kv;
    const int n = sq.n, pos0 = sq.pos0;
    ws_item it;
    it.q0 = ws_q0<V, VL>(a, item);
    it.h = item % n_head;
    it.hk = it.h / group;
    const int q_last = (it.q0 + kBlockM < n ? it.q0 + kBlockM : n) - 1;
    int lo = a.window > 0 ? pos0 + it.q0 - a.window + 1 : 0; /* the first key any row sees */
    lo = lo > 0 ? lo : 0;
    if (a.paged && lo < pos0)
        it.t_lo = lo / kBlockN - ws_cache_tiles<V>(sq);
    else
        it.t_lo = ws_floor_div(lo - pos0, kBlockN);
    it.t_hi = q_last / kBlockN;
    return it;
}

/* The block's shared memory: mbarriers, the item slot (byte 120), the
 * producer's item count (byte 124), then
 * (1024-byte aligned) Q [kBlockM][HD], K and V [kStages][kBlockN][HD], and
 * where it fits O [kBlockM][HD] (kOwnO), flash_tiles.cuh's layout.
 * Every address is computed where it is used from the dynamic area's
 * symbol and the padding (constants to the compiler, not registers held
 * across the loops the accumulators need them in). */
template <int HD, int V> struct ws_smem {
    static constexpr int kStages = ws_cfg<V>::kStages;
    static constexpr int kQ = ws_cfg<V>::kBlockM * HD, kKV = kStages * ws_cfg<V>::kBlockN * HD;
    static constexpr bool kOwnO =
        PREFILL_ATTN_WS_OWN_O(ws_cfg<V>::kBlockM, ws_cfg<V>::kBlockN, kStages, HD);
    static_assert((2 + 4 * kStages) * 8 <= 120, "the mbarriers fit before the item slot");
    unsigned char *raw;
    uint32_t pad; /* from raw to the tiles: past the mbarriers, 1024-byte aligned */

    __device__ __forceinline__ ig_mbarrier *bar(int i) const { return (ig_mbarrier *)raw + i; }
    __device__ __forceinline__ ig_mbarrier *full_q() const { return bar(0); }
    __device__ __forceinline__ ig_mbarrier *empty_q() const { return bar(1); }
    __device__ __forceinline__ ig_mbarrier *full_k(int st) const { return bar(2 + st); }
    __device__ __forceinline__ ig_mbarrier *empty_k(int st) const { return bar(2 + kStages + st); }
    __device__ __forceinline__ ig_mbarrier *full_v(int st) const
    {
        return bar(2 + 2 * kStages + st);
    }
    __device__ __forceinline__ ig_mbarrier *empty_v(int st) const
    {
        return bar(2 + 3 * kStages + st);
    }
    /* The producer's next item for the consumers (written before full_q's
     * arrival, read after its wait; n_items or more: no more). */
    __device__ __forceinline__ int32_t *item() const { return (int32_t *)(raw + 120); }
    /* How many items the producer has passed on (its alone: the parity of
     * its wait on empty_q). Kept here, not in a register: at the 32
     * registers of three consumers' producer (ws192n128) the variable-length
     * loop spilled it. */
    __device__ __forceinline__ int32_t *q_count() const { return (int32_t *)(raw + 124); }
    __device__ __forceinline__ uint16_t *q() const { return (uint16_t *)(raw + pad); }
    __device__ __forceinline__ uint16_t *k() const { return q() + kQ; }
    __device__ __forceinline__ uint16_t *v() const { return k() + kKV; }
    /* Where the epilogue stages O: its own area, or Q's rows. */
    __device__ __forceinline__ uint16_t *o() const { return kOwnO ? v() + kKV : q(); }
    /* Shared addresses of the tiles, for the wgmma descriptors. */
    __device__ __forceinline__ uint32_t aq() const { return ig_shared_address(raw) + pad; }
    __device__ __forceinline__ uint32_t ak() const { return aq() + kQ * 2; }
    __device__ __forceinline__ uint32_t av() const { return ak() + kKV * 2; }
};

template <int HD, int V> __device__ __forceinline__ ws_smem<HD, V> ws_smem_at(unsigned char *raw)
{
    const uint32_t a_raw = ig_shared_address(raw);
    return ws_smem<HD, V>{raw, 128 + (1024u - (a_raw + 128) % 1024u) % 1024u};
}

/* TMA of the box at (column, row, head) of map `which`. */
__device__ __forceinline__ void ws_load(const ws_args &a, int which, void *dst, ig_mbarrier *bar,
                                        int col, int row, int head)
{
    if ((a.swap >> which) & 1)
        ig_tma_load_3d(&a.maps[which], dst, bar, col, head, row);
    else
        ig_tma_load_3d(&a.maps[which], dst, bar, col, row, head);
}

__device__ __forceinline__ void ws_store(const ws_args &a, int which, const void *src, int col,
                                         int row, int head)
{
    if ((a.swap >> which) & 1)
        ig_tma_store_3d(&a.maps[which], src, col, head, row);
    else
        ig_tma_store_3d(&a.maps[which], src, col, row, head);
}

/* ---- the producer --------------------------------------------------------- */

/* The producer (thread 0): for every item of this block, Q, then K and V of
 * each tile into ring position `fill` (stage fill % kStages, the
 * (fill / kStages)-th time there), once the consumers released the
 * previous contents. Everything is TMA: a thread issues, the TMA unit
 * copies. With variable length a tile the sequence's end cuts (its last
 * query tile, the chunk tile holding its last key) or its pos0 cuts (the
 * block holding pos0) is copied row by row, the rows outside it zeros: no
 * other sequence's row (nor a gap's NaN) reaches the tile, where a masked
 * P times a NaN V would still be NaN. */
template <int HD, int V, bool VL>
__device__ __forceinline__ void ws_producer(const ws_args &a, const ws_smem<HD, V> &sm)
{
    constexpr int kBlockM = ws_cfg<V>::kBlockM, kBlockN = ws_cfg<V>::kBlockN;
    constexpr int kStages = ws_cfg<V>::kStages, kBox = ws_cfg<V>::kBoxRows;
    constexpr bool varlen = VL;

    /* Rows of a tile one by one from map `which` (one-row boxes): row r at
     * row0 + r when r < valid, else zeros. */
    auto rows_1 = [&](int which, uint16_t *tile, int tile_rows, ig_mbarrier *full, int row0,
                      int valid, int head) {
        for (int r = 0; r < tile_rows; r++)
            IG_UNROLL
            for (int pg = 0; pg < HD / 64; pg++)
                ws_load(a, which, tile + pg * tile_rows * 64 + r * 64, full, pg * 64,
                        r < valid ? row0 + r : -1, head);
    };

    /* K or V of tile t of item `item` from the cache (t < 0) or the chunk
     * (ws_item); the item's sequence and KV head read anew (registers). */
    auto fill_stage = [&](int t, int item, int stage, bool is_v, uint32_t free_parity) {
        const attn_seq sq = ws_seq<V, VL>(a, item);
        const int hk = (item % (int)a.p.n_head) / (int)(a.p.n_head / a.p.n_head_kv);
        ig_mbarrier *full = is_v ? sm.full_v(stage) : sm.full_k(stage);
        uint16_t *tile = (is_v ? sm.v() : sm.k()) + stage * kBlockN * HD;
        const int pos0 = sq.pos0, j0 = ws_tile_j0<V>(a, t, sq);
        ig_mbarrier_wait(is_v ? sm.empty_v(stage) : sm.empty_k(stage), free_parity);
        ig_mbarrier_arrive_expect_tx(full, kBlockN * HD * 2);
        if (t < 0 && a.paged) {
            if constexpr (kBox == 64) {
                /* One box per block: whole blocks below pos0 from the pool,
                 * the block holding pos0 through the tail map (its rows from
                 * pos0 on read as zeros; varlen: row by row), blocks past it
                 * as zeros (a block index past the pool is out of bounds). */
                const int32_t *table = a.p.block_table + sq.s * a.p.table_stride;
                IG_UNROLL
                for (int rb = 0; rb < kBlockN / 64; rb++) {
                    const int b = j0 / 64 + rb;
                    const bool whole = (b + 1) * 64 <= pos0, part = !whole && b * 64 < pos0;
                    const int blk = whole || part ? table[b] : (int)a.p.n_blocks;
                    uint16_t *dst = tile + rb * 64 * 64;
                    if (varlen && part) {
                        for (int r = 0; r < 64; r++)
                            IG_UNROLL
                            for (int pg = 0; pg < HD / 64; pg++)
                                ig_tma_load_4d(&a.maps[is_v ? MAP_VC1 : MAP_KC1],
                                               dst + pg * kBlockN * 64 + r * 64, full, pg * 64,
                                               r < pos0 % 64 ? r : -1, hk, blk);
                        continue;
                    }
                    const int map = whole || !part ? (is_v ? MAP_VC : MAP_KC)
                                                   : (is_v ? MAP_VT : MAP_KT);
                    IG_UNROLL
                    for (int pg = 0; pg < HD / 64; pg++)
                        ig_tma_load_4d(&a.maps[map], dst + pg * kBlockN * 64, full, pg * 64, 0,
                                       hk, blk);
                }
            }
            return;
        }
        const int map = t < 0 ? (is_v ? MAP_VC : MAP_KC) : (is_v ? MAP_V : MAP_K);
        const int row = t < 0 ? j0 : sq.row0 + j0 - pos0;
        if (varlen && t >= 0 && j0 - pos0 + kBlockN > sq.n) { /* the sequence's end cuts it */
            rows_1(is_v ? MAP_V1 : MAP_K1, tile, kBlockN, full, row, sq.n - (j0 - pos0), hk);
            return;
        }
        IG_UNROLL
        for (int rb = 0; rb < kBlockN / kBox; rb++)
            IG_UNROLL
            for (int pg = 0; pg < HD / 64; pg++)
                ws_load(a, map, tile + pg * kBlockN * 64 + rb * kBox * 64, full, pg * 64,
                        row + rb * kBox, hk);
    };

    /* Each item (and at the end n_items: no more) goes to the consumers
     * through the item slot, written before full_q's arrival. */
    int fill = 0;
    ig_sts(sm.q_count(), (int32_t)0);
    for (int item = ws_next<V, VL>(a, (int)blockIdx.x);;
         ig_sts(sm.q_count(), ig_lds(sm.q_count()) + 1)) {
        if (!ws_cfg<V>::kDynamic && item >= a.n_items)
            break; /* the consumers count the static schedule themselves */
        ig_mbarrier_wait(sm.empty_q(), (uint32_t)(ig_lds(sm.q_count()) & 1) ^ 1u);
        ig_sts(sm.item(), (int32_t)item);
        if (item >= a.n_items) {
            ig_mbarrier_arrive(sm.full_q()); /* no Q: the consumers stop */
            break;
        }
        int t_lo;
        {
            const attn_seq sq = ws_seq<V, VL>(a, item);
            const ws_item it = ws_item_at<V, VL>(a, item, sq);
            t_lo = it.t_lo;
            ig_mbarrier_arrive_expect_tx(sm.full_q(), kBlockM * HD * 2);
            if (varlen && it.q0 + kBlockM > sq.n) {
                rows_1(MAP_Q1, sm.q(), kBlockM, sm.full_q(), sq.row0 + it.q0, sq.n - it.q0,
                       it.h);
            } else {
                IG_UNROLL
                for (int pg = 0; pg < HD / 64; pg++)
                    ws_load(a, MAP_Q, sm.q() + pg * kBlockM * 64, sm.full_q(), pg * 64,
                            sq.row0 + it.q0, it.h);
            }
        }
        /* Tiles t_lo .. t_hi (at least one), t_hi recomputed after each
         * tile's loads rather than held (a register the 32-register
         * producer of ws192n128 did not have). */
        for (int t = t_lo;; t++) {
            const int stage = fill % kStages;
            const uint32_t free_parity = (uint32_t)((fill / kStages) & 1) ^ 1u;
            fill_stage(t, item, stage, false, free_parity);
            fill_stage(t, item, stage, true, free_parity);
            fill++;
            if (t >= ws_item_at<V, VL>(a, item, ws_seq<V, VL>(a, item)).t_hi)
                break;
        }
        /* The next item, drawn as soon as this one's loads are issued: its
         * latency hides under the consumers' last tiles, before Q's buffer
         * frees. */
        item = ws_next<V, VL>(a, ws_draw<V>(a, item));
    }
    ws_done<V>(a);
}

/* ---- the consumers -------------------------------------------------------- */

/* Masks what the warp's rows may not see in a tile whose first key is j0:
 * key k (of the tile) is visible to row r (0..15 of the warp) when
 * k <= diag + r, k < n_keys, k >= -j0 (no key below 0) and, with a
 * window, k > diag + r - window. s[0][j][e]: row g + 8 (e / 2), key
 * 8 j + 2 t + e % 2. Each row's visible keys are one range [lo, hi),
 * compared (less 2 t) with each element's constant 8 j + e % 2: two
 * registers a row, where the four tests per element took the 160-register
 * consumers of ws192n128 past their budget (ptxas packed their results
 * into predicate words and spilled the loop's state). */
template <int kBlockN>
__device__ __forceinline__ void ws_mask(float (&s)[1][kBlockN / 8][4], int diag, int n_keys,
                                        int j0, int window, int g, int t)
{
    if (diag >= kBlockN - 1 && n_keys >= kBlockN && j0 >= 0 &&
        (window == 0 || diag + 16 <= window))
        return;
    IG_UNROLL
    for (int r = 0; r < 2; r++) {
        const int row = g + 8 * r;
        const int hi = (diag + row + 1 < n_keys ? diag + row + 1 : n_keys) - 2 * t;
        int lo = -j0;
        if (window > 0 && diag + row - window + 1 > lo)
            lo = diag + row - window + 1;
        lo -= 2 * t;
        IG_UNROLL
        for (int j = 0; j < kBlockN / 8; j++)
            IG_UNROLL
            for (int e = 0; e < 2; e++)
                if (j * 8 + e >= hi || j * 8 + e < lo)
                    s[0][j][2 * r + e] = -INFINITY;
    }
}

/* Tile t's softmax step on this thread's rows g (r = 0) and g + 8 (r = 1),
 * while the previous tile's P V may still be in flight: the new row
 * maxima m, the factor corr that O must be rescaled by once it completes,
 * the scores replaced by exp2(s * scale_log2 - m * scale_log2), and the
 * row sums l rescaled with their sum added (this lane's part; l is not the
 * MMA's, so it moves on at once). A row that saw only masked keys so far
 * keeps a zero offset (no NaN). */
template <int kBlockN>
__device__ __forceinline__ void ws_softmax(float (&s)[1][kBlockN / 8][4], float (&m)[2],
                                           float (&corr)[2], float (&l)[2], float scale_log2)
{
    IG_UNROLL
    for (int r = 0; r < 2; r++) {
        float x = m[r];
        IG_UNROLL
        for (int j = 0; j < kBlockN / 8; j++)
            x = fmaxf(x, fmaxf(s[0][j][2 * r], s[0][j][2 * r + 1]));
        x = fmaxf(x, ig_shfl_xor_f32(x, 1));
        x = fmaxf(x, ig_shfl_xor_f32(x, 2));
        const float base = x == -INFINITY ? 0.0f : x * scale_log2;
        corr[r] = ig_exp2_approx(m[r] * scale_log2 - base);
        m[r] = x;
        float sum = 0;
        IG_UNROLL
        for (int j = 0; j < kBlockN / 8; j++)
            for (int e = 2 * r; e < 2 * r + 2; e++) {
                s[0][j][e] = ig_exp2_approx(s[0][j][e] * scale_log2 - base);
                sum += s[0][j][e];
            }
        l[r] = l[r] * corr[r] + sum;
    }
}

/* A consumer warpgroup (threads 128 (w + 1) .. for consumer w): every item
 * of the block. */
template <class T, int HD, int V, bool VL>
__device__ __forceinline__ void ws_consumer(const ws_args &a, const ws_smem<HD, V> &sm)
{
    constexpr int C = ws_cfg<V>::kConsumers, kBlockM = ws_cfg<V>::kBlockM;
    constexpr int kBlockN = ws_cfg<V>::kBlockN, kStages = ws_cfg<V>::kStages;
    const prefill_attn_params &p = a.p;
    /* This thread's place (thread ct of the warpgroup: warp ct / 32, lane
     * ct % 32, C-fragment row g = lane / 4 and column pair tq = lane % 4),
     * read anew where used: values derived from it and held across the
     * loops took registers the accumulators need (ptxas spilled). */
    auto wg = [] { return ig_thread_index_fresh() / 128 - 1; }; /* w */
    auto ct = [] { return ig_thread_index_fresh() % 128; };
    const int group = (int)(p.n_head / p.n_head_kv);
    /* Descriptors of this warpgroup's 64 rows of Q and of stage st of K
     * and V, made where used (a few integer instructions per tile, no
     * registers held across the loop). */
    auto desc_q = [&] { return k_major_desc(sm.aq() + (uint32_t)(64 * wg() * 128)); };
    auto desc_k = [&](int st) {
        return k_major_desc(sm.ak() + (uint32_t)(st * kBlockN * HD * 2));
    };
    auto desc_v = [&](int st) {
        return n_major_desc<kBlockN>(sm.av() + (uint32_t)(st * kBlockN * HD * 2));
    };
    /* Named barriers: the ping-pong turns (1 .. C) and each warpgroup's own
     * (C + 1 ..); a turn is this warpgroup's bar.sync and the previous
     * one's bar.arrive, 256 threads. */
    auto turn_mine = [&] { return 1 + wg(); };
    auto turn_next = [&] { return 1 + (wg() + 1) % C; };
    constexpr int kTurn = 256;

    float s[1][kBlockN / 8][4];
    /* P's A fragments (named: g++ 12 crashes on the array spelled out in a
     * lambda) */
    using p_frags = uint32_t[kBlockN / 16][1][4];
    p_frags pa;

    /* S = Q K^T of the tile in stage st: issued and committed. */
    auto issue_s = [&](int st) {
        const uint64_t dq = desc_q(), dk = desc_k(st);
        ig_wgmma_fence();
        IG_UNROLL
        for (int kk = 0; kk < HD / 16; kk++)
            ig_wgmma_ss<T, kBlockN, 0, 0>(flat(s), dq + k_step<kBlockM>(kk),
                                          dk + k_step<kBlockN>(kk), kk > 0);
        ig_wgmma_commit();
    };
    /* O += P V of the tile in stage st: issued and committed. */
    float o[1][HD / 8][4];
    auto issue_pv = [&](int st) {
        const uint64_t dv = desc_v(st);
        ig_wgmma_fence_operand(flat(o));
        ig_wgmma_fence_operand(pa);
        ig_wgmma_fence();
        IG_UNROLL
        for (int kk = 0; kk < kBlockN / 16; kk++)
            ig_wgmma_rs<T, HD, 1>(flat(o), pa[kk][0], dv + v_step(kk), 1);
        ig_wgmma_commit();
    };
    /* One arrival per warp on an empty barrier: every wgmma that read the
     * buffer has completed in all its threads. */
    auto release = [&](ig_mbarrier *bar) {
        if (ct() % 32 == 0)
            ig_mbarrier_arrive(bar);
    };

    /* Each item from the producer's slot (written before full_q's arrival,
     * read after its wait; n_items or more: no more), the first before the
     * loop, the next at the end of each item. */
    constexpr bool kDyn = ws_cfg<V>::kDynamic;
    int fill = 0, q_fill = 0, item;
    if constexpr (kDyn) {
        ig_mbarrier_wait(sm.full_q(), 0u);
        item = ig_lds(sm.item());
    } else {
        item = ws_next<V, VL>(a, (int)blockIdx.x);
    }
    if (item < a.n_items && wg() == C - 1) /* the first turn is the first warpgroup's */
        ig_named_barrier_arrive(1, kTurn);
    while (item < a.n_items) {
        /* The item's fields and its sequence's are recomputed where used
         * (integer math, the sequence's from the constant bank or an L1
         * hit) rather than held through the tile loop. */
        auto seq = [&] { return ws_seq<V, VL>(a, item); };
        auto it = [&] { return ws_item_at<V, VL>(a, item, seq()); };
        const int t_lo = it().t_lo, t_hi = it().t_hi;
        if (it().h % group == 0) {
            if (a.paged)
                write_cache_rows<HD, kBlockM, 128 * C, true>(p, it().h, it().q0,
                                                             ig_thread_index_fresh() - 128,
                                                             seq());
            else
                write_cache_rows<HD, kBlockM, 128 * C>(p, it().h, it().q0,
                                                       ig_thread_index_fresh() - 128, seq());
        }
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, corr[2];
        IG_UNROLL
        for (int d = 0; d < HD / 8; d++)
            o[0][d][0] = o[0][d][1] = o[0][d][2] = o[0][d][3] = 0;
        auto softmax = [&](int t) {
            const attn_seq sq = seq();
            const int j0 = ws_tile_j0<V>(a, t, sq), c = ct(), lane = c % 32, pos0 = sq.pos0;
            const int row0 = it().q0 + 64 * wg() + 16 * (c / 32); /* this warp's first row */
            const int end = t < 0 ? pos0 : pos0 + sq.n; /* a cache tile's keys stop at pos0 */
            ws_mask<kBlockN>(s, pos0 + row0 - j0, end - j0 > kBlockN ? kBlockN : end - j0, j0,
                             a.window, lane / 4, lane % 4);
            ws_softmax<kBlockN>(s, m, corr, l, a.scale_log2);
        };
        if constexpr (!kDyn)
            ig_mbarrier_wait(sm.full_q(), (uint32_t)(q_fill & 1));

        /* The first tile: S alone. */
        int st = fill % kStages;
        ig_mbarrier_wait(sm.full_k(st), (uint32_t)((fill / kStages) & 1));
        ig_named_barrier_sync(turn_mine(), kTurn);
        issue_s(st);
        ig_named_barrier_arrive(turn_next(), kTurn);
        ig_wgmma_wait<0>();
        ig_wgmma_fence_operand(flat(s));
        release(sm.empty_k(st));
        softmax(t_lo);
        pack_p<T, 1, kBlockN>(s, pa);

        /* Then S of tile t with P V of tile t - 1 in flight. */
        for (int t = t_lo + 1; t <= t_hi; t++) {
            const int sv = fill % kStages;
            const uint32_t v_parity = (uint32_t)((fill / kStages) & 1);
            fill++;
            st = fill % kStages;
            ig_mbarrier_wait(sm.full_k(st), (uint32_t)((fill / kStages) & 1));
            ig_mbarrier_wait(sm.full_v(sv), v_parity);
            ig_named_barrier_sync(turn_mine(), kTurn);
            issue_s(st);
            issue_pv(sv);
            ig_named_barrier_arrive(turn_next(), kTurn);
            ig_wgmma_wait<1>(); /* S done, P V in flight */
            ig_wgmma_fence_operand(flat(s));
            release(sm.empty_k(st));
            softmax(t);
            ig_wgmma_wait<0>();
            ig_wgmma_fence_operand(flat(o));
            ig_wgmma_fence_operand(pa);
            release(sm.empty_v(sv));
            IG_UNROLL
            for (int r = 0; r < 2; r++) {
                IG_UNROLL
                for (int d = 0; d < HD / 8; d++) {
                    o[0][d][2 * r] *= corr[r];
                    o[0][d][2 * r + 1] *= corr[r];
                }
            }
            pack_p<T, 1, kBlockN>(s, pa);
        }

        /* Every S has completed: with O staged apart, Q is free for the
         * next item's (one arrival per warp, as for K). */
        if (sm.kOwnO)
            release(sm.empty_q());

        /* The last P V. The last warpgroup's last turn of the last item
         * passes to the first warpgroup, which takes it after the loop
         * (whether an item is the last is known only at the next one; on
         * the static schedule without variable length it passes to nobody). */
        const int sv = fill % kStages;
        ig_mbarrier_wait(sm.full_v(sv), (uint32_t)((fill / kStages) & 1));
        fill++;
        ig_named_barrier_sync(turn_mine(), kTurn);
        issue_pv(sv);
        if (kDyn || VL || !(item + (int)gridDim.x >= a.n_items && wg() == C - 1))
            ig_named_barrier_arrive(turn_next(), kTurn);
        ig_wgmma_wait<0>();
        ig_wgmma_fence_operand(flat(o));
        ig_wgmma_fence_operand(pa);
        release(sm.empty_v(sv));

        /* O / l into the warpgroup's own rows of O's area (ws_smem::o: its
         * own, whose previous store this thread's warpgroup waited for in
         * its last epilogue, or the Q buffer, every S that read it having
         * completed), then one TMA store per 64 columns. Row
         * `row` of the tile, columns 8 d + 2 tq: swz's chunk d % 8 ^ g (the
         * row's low bits are g) as one XOR per store. With variable length,
         * 64 rows the sequence's end cuts are stored row by row, only those
         * of the sequence (a 64-row box would write the next sequence's). */
        const int w = wg(), c = ct(), g = (c % 32) / 4, tq = c % 4, q0 = it().q0, h = it().h;
        const int n = seq().n;
        IG_UNROLL
        for (int r = 0; r < 2; r++) {
            l[r] += ig_shfl_xor_f32(l[r], 1);
            l[r] += ig_shfl_xor_f32(l[r], 2);
            const float inv = 1.0f / l[r];
            const int row = 64 * w + 16 * (c / 32) + g + 8 * r; /* in the block's tile */
            uint16_t *o_row = sm.o() + row * 64 + 2 * tq;
            IG_UNROLL
            for (int d = 0; d < HD / 8; d++)
                ig_sts((uint32_t *)&o_row[(d / 8) * kBlockM * 64 + ((((d % 8) ^ g)) << 3)],
                       ig_pack2<T>(o[0][d][2 * r] * inv, o[0][d][2 * r + 1] * inv));
            const int grow = q0 + row;
            if (p.lse && tq == 0 && grow < n)
                p.lse[(int64_t)h * p.lse_head_stride + seq().row0 + grow] =
                    (m[r] * a.scale_log2 + log2f(l[r])) * 0.6931471805599453f;
        }
        ig_fence_proxy_async(); /* the TMA store reads what st.shared wrote */
        ig_named_barrier_sync(1 + C + w, 128); /* the warpgroup's own */
        if (c == 0) {
            const attn_seq sq = seq();
            const int r0 = q0 + 64 * w; /* the warpgroup's first row */
            if (VL && r0 + 64 > sq.n) {
                for (int r = 0; r < sq.n - r0; r++)
                    IG_UNROLL
                    for (int pg = 0; pg < HD / 64; pg++)
                        ws_store(a, MAP_O1, sm.o() + pg * kBlockM * 64 + (r0 - q0 + r) * 64,
                                 pg * 64, sq.row0 + r0 + r, h);
            } else {
                IG_UNROLL
                for (int pg = 0; pg < HD / 64; pg++)
                    ws_store(a, MAP_O, sm.o() + pg * kBlockM * 64 + 64 * w * 64, pg * 64,
                             sq.row0 + r0, h);
            }
            ig_bulk_commit();
            /* O's area (or Q's) written again only after this (the next
             * item's turns order the warpgroup's other threads after it) */
            ig_bulk_wait_read<0>();
            if (!sm.kOwnO)
                ig_mbarrier_arrive(sm.empty_q()); /* the producer may load the next Q */
        }
        q_fill++;
        if constexpr (kDyn) {
            ig_mbarrier_wait(sm.full_q(), (uint32_t)(q_fill & 1));
            item = ig_lds(sm.item());
        } else {
            item = ws_next<V, VL>(a, item + (int)gridDim.x);
        }
    }
    if ((kDyn || VL) && q_fill > 0 && wg() == 0) /* the block took items: the last one's last turn */
        ig_named_barrier_sync(1, kTurn);
    if (ct() == 0)
        ig_bulk_wait<0>();
}

/* Whether the kernel takes variable length at head dim HD: at 256 (O is
 * 128 registers per thread) the varlen loop spilled 36 bytes. */
template <int HD, int V> struct ws_varlen_at {
    static constexpr bool value = ws_cfg<V>::kVarlen && HD <= 128;
};

template <class T, int HD, int V>
__global__ void __launch_bounds__(ws_cfg<V>::kThreads, 1)
flash_attn_ws_kernel(const __grid_constant__ ws_args a)
{
    static_assert((variant<V>::head_dims & (HD == 64 ? 1 : HD == 128 ? 2 : 4)) != 0,
                  "variant not built for HD");
    constexpr int C = ws_cfg<V>::kConsumers, kStages = ws_cfg<V>::kStages;
    constexpr int kLaunch = ws_cfg<V>::kLaunchRegs;
    IG_DYN_SHARED(unsigned char, smem_raw);
    const ws_smem<HD, V> sm = ws_smem_at<HD, V>(smem_raw);
    if (threadIdx.x == 0) {
        ig_mbarrier_init(sm.full_q(), 1);
        ig_mbarrier_init(sm.empty_q(), sm.kOwnO ? 4 * C : C); /* per warp, or per warpgroup */
        for (int st = 0; st < kStages; st++) {
            ig_mbarrier_init(sm.full_k(st), 1);
            ig_mbarrier_init(sm.empty_k(st), 4 * C);
            ig_mbarrier_init(sm.full_v(st), 1);
            ig_mbarrier_init(sm.empty_v(st), 4 * C);
        }
        ig_fence_mbarrier_init();
    }
    /* Launched with IG_LAUNCH_DEP (IGNITE_PDL=1): the barriers are set up
     * under the previous kernel's tail; q, k, v, the tables and the work
     * counter are read only after it. Every thread waits. */
    ig_grid_dependency_wait();
    ig_launch_dependents();
    ig_syncthreads();
    const int wg = (int)threadIdx.x / 128;
    if (wg == 0) {
        ig_setmaxnreg<false, ws_cfg<V>::kProducerRegs, kLaunch>();
        if (threadIdx.x == 0) {
            if (ws_varlen_at<HD, V>::value && a.p.seqs)
                ws_producer<HD, V, ws_varlen_at<HD, V>::value>(a, sm);
            else
                ws_producer<HD, V, false>(a, sm);
        }
    } else {
        ig_setmaxnreg<true, ws_cfg<V>::kConsumerRegs, kLaunch>();
        /* Variable length is its own copy of the loop: the one-sequence
         * path stays as it was, registers included. */
        if (ws_varlen_at<HD, V>::value && a.p.seqs)
            ws_consumer<T, HD, V, ws_varlen_at<HD, V>::value>(a, sm);
        else
            ws_consumer<T, HD, V, false>(a, sm);
    }
}

/* A [rows][HD] x heads tensor at base (row and head strides in elements) as
 * a map with boxes of 64 columns x box_rows rows: dimensions ordered so
 * that the strides grow (either order lands the same box in shared memory,
 * one of its dimensions being 1); bit `which` of *swap says which. */
int ws_map(ig_tma_map *m, uint32_t *swap, int which, const void *base, int64_t hd, int64_t rows,
           int64_t heads, int64_t row_stride, int64_t head_stride, int box_rows)
{
    const bool sw = head_stride < row_stride && heads > 1;
    const uint64_t dim[3] = {(uint64_t)hd, (uint64_t)(sw ? heads : rows),
                             (uint64_t)(sw ? rows : heads)};
    const uint64_t stride[2] = {(uint64_t)(2 * (sw ? head_stride : row_stride)),
                                (uint64_t)(2 * (sw ? row_stride : head_stride))};
    const uint32_t box[3] = {64, sw ? 1u : (uint32_t)box_rows, sw ? (uint32_t)box_rows : 1u};
    if (sw)
        *swap |= 1u << which;
    return ig_tma_encode(m, base, 3, dim, stride, box, IG_TMA_SWIZZLE_128B);
}

/* A paged pool (p's k_cache or v_cache at base) as a 4-D map (hd,
 * block_rows, n_head_kv, n_blocks) with boxes of 64 columns x box_rows rows
 * of one block; rows: how many of each block's rows are inside (64, or
 * pos0 % 64 for the tail map). */
int ws_pool_map(ig_tma_map *m, const void *base, const prefill_attn_params &p, int64_t hd,
                int64_t rows, uint32_t box_rows = 64)
{
    const uint64_t dim[4] = {(uint64_t)hd, (uint64_t)rows, (uint64_t)p.n_head_kv,
                             (uint64_t)p.n_blocks};
    const uint64_t stride[3] = {(uint64_t)(2 * p.cache_row_stride),
                                (uint64_t)(2 * p.cache_head_stride),
                                (uint64_t)(2 * p.cache_block_stride)};
    const uint32_t box[4] = {64, box_rows, 1, 1};
    return ig_tma_encode(m, base, 4, dim, stride, box, IG_TMA_SWIZZLE_128B);
}

/* Streaming multiprocessors of the current device (the persistent grid). */
int ws_sm_count(void)
{
#if defined(IG_EMU)
    return ig_emu_sm_count();
#else
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) {
        cudaGetLastError();
        return 1;
    }
    return n;
#endif
}

/* One ws variant: dtype and head_dim (only those the variant is built for). */
template <int V>
int launch_ws_variant(const prefill_attn_params &p, const prefill_attn_tile &tile,
                      cudaStream_t stream)
{
    if constexpr (variant<V>::isa != PREFILL_ATTN_ISA_WS || !IG_ATTN_BUILT(V)) {
        return ig_error(IG_E_INTERNAL, "flash attention: %s is not a ws variant of this build",
                        prefill_attn_variant_name(V));
    } else {
        if (tile.block_m != variant<V>::block_m || tile.block_n != variant<V>::block_n ||
            tile.warps != variant<V>::warps)
            return ig_error(IG_E_INTERNAL,
                            "flash attention: chooser and kernel disagree on tiles");
        return for_type_and_head_dim<V>(p, [&](auto type, auto hd) {
            constexpr int HD = decltype(hd)::value;
            auto *kernel = flash_attn_ws_kernel<decltype(type), HD, V>;
            ws_args a;
            memset(&a, 0, sizeof a);
            a.p = p;
            a.scale_log2 = p.scale * 1.4426950408889634f;
            a.n_q_tiles = tile.n_q_tiles;
            a.tiles = p.tile_counter;
            /* Variable length: items for every sequence at the longest's
             * query tiles (those past a sequence's rows skipped), and maps
             * over rows to 2^31 - 1 (the step's rows are in device memory):
             * the kernel reads and writes only its sequences' rows, a tile
             * that a sequence's end cuts row by row. */
            const bool varlen = p.seqs != nullptr;
            if (varlen && !ws_varlen_at<HD, V>::value)
                return ig_error(IG_E_INTERNAL, "flash attention: %s takes no variable-length "
                                "sequences at head_dim %d", prefill_attn_variant_name(V), HD);
            a.n_items = tile.n_q_tiles * (int)p.n_head * (varlen ? (int)p.n_seqs : 1);
            const int64_t rows = varlen ? INT32_MAX : p.n_tokens;
            a.window = p.window > p.n_ctx ? 0 : (int)p.window;
            const int box = ws_cfg<V>::kBoxRows;
            int st = ws_map(&a.maps[MAP_Q], &a.swap, MAP_Q, p.q, HD, rows, p.n_head,
                            p.q_row_stride, p.q_head_stride, ws_cfg<V>::kBlockM);
            if (!st)
                st = ws_map(&a.maps[MAP_K], &a.swap, MAP_K, p.k, HD, rows, p.n_head_kv,
                            p.k_row_stride, p.k_head_stride, box);
            if (!st)
                st = ws_map(&a.maps[MAP_V], &a.swap, MAP_V, p.v, HD, rows, p.n_head_kv,
                            p.v_row_stride, p.v_head_stride, box);
            if (varlen) { /* one-row boxes: tiles a sequence's end or pos0 cuts */
                if (!st)
                    st = ws_map(&a.maps[MAP_Q1], &a.swap, MAP_Q1, p.q, HD, rows, p.n_head,
                                p.q_row_stride, p.q_head_stride, 1);
                if (!st)
                    st = ws_map(&a.maps[MAP_K1], &a.swap, MAP_K1, p.k, HD, rows, p.n_head_kv,
                                p.k_row_stride, p.k_head_stride, 1);
                if (!st)
                    st = ws_map(&a.maps[MAP_V1], &a.swap, MAP_V1, p.v, HD, rows, p.n_head_kv,
                                p.v_row_stride, p.v_head_stride, 1);
                if (!st && p.pos0 > 0)
                    st = ws_pool_map(&a.maps[MAP_KC1], p.k_cache, p, HD, 64, 1);
                if (!st && p.pos0 > 0)
                    st = ws_pool_map(&a.maps[MAP_VC1], p.v_cache, p, HD, 64, 1);
                if (!st)
                    st = ws_map(&a.maps[MAP_O1], &a.swap, MAP_O1, p.o, HD, rows, p.n_head,
                                p.o_row_stride, p.o_head_stride, 1);
            }
            if (p.block_table) { /* the pool: whole blocks, and the block holding pos0 */
                a.paged = 1;
                const int64_t tail = varlen ? 0 : p.pos0 % 64; /* varlen: row by row */
                if (!st && p.pos0 > 0)
                    st = ws_pool_map(&a.maps[MAP_KC], p.k_cache, p, HD, 64);
                if (!st && p.pos0 > 0)
                    st = ws_pool_map(&a.maps[MAP_VC], p.v_cache, p, HD, 64);
                if (!st && tail)
                    st = ws_pool_map(&a.maps[MAP_KT], p.k_cache, p, HD, tail);
                if (!st && tail)
                    st = ws_pool_map(&a.maps[MAP_VT], p.v_cache, p, HD, tail);
            } else { /* only rows < pos0: the chunk's go in meanwhile */
                if (!st && p.pos0 > 0)
                    st = ws_map(&a.maps[MAP_KC], &a.swap, MAP_KC, p.k_cache, HD, p.pos0,
                                p.n_head_kv, p.cache_row_stride, p.cache_head_stride, box);
                if (!st && p.pos0 > 0)
                    st = ws_map(&a.maps[MAP_VC], &a.swap, MAP_VC, p.v_cache, HD, p.pos0,
                                p.n_head_kv, p.cache_row_stride, p.cache_head_stride, box);
            }
            if (!st)
                st = ws_map(&a.maps[MAP_O], &a.swap, MAP_O, p.o, HD, rows, p.n_head,
                            p.o_row_stride, p.o_head_stride, 64);
            if (st)
                return st;
            const int sms = ws_sm_count();
            dim3 grid((unsigned)(a.n_items < sms ? a.n_items : sms));
#if defined(__CUDACC__)
            IG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)tile.smem_bytes));
#endif
            return IG_LAUNCH_DEP(kernel, grid, dim3(ws_cfg<V>::kThreads), tile.smem_bytes, stream,
                                 a);
        });
    }
}

} /* namespace */

extern "C" int IG_DEV(prefill_attn_ws)(const struct prefill_attn_params *p,
                                       const struct prefill_attn_tile *t, void *stream_)
{
    cudaStream_t stream = (cudaStream_t)stream_;
    switch (t->variant) {
#define IG_WS_CASE_(id, ...)                                                    \
    case PREFILL_ATTN_##id:                                                     \
        return launch_ws_variant<PREFILL_ATTN_##id>(*p, *t, stream);
        PREFILL_ATTN_VARIANTS(IG_WS_CASE_)
#undef IG_WS_CASE_
    default:
        return ig_error(IG_E_INTERNAL, "flash attention: no variant %d", t->variant);
    }
}
