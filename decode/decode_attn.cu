/* decode/decode_attn.cu: split-KV (flash-decoding) attention of B
 * sequences' query rows against the f16 KV pool through their block tables,
 * and the kernel that combines the splits; semantics and params in
 * decode/decode_attn.h.
 *
 * Split kernel: one block per (split, KV head x row group, sequence), 4
 * warps. It computes up to 8 (row, query head) pairs of the KV head (every
 * query head of the group at q_len 1; a verify step's rows too), so each K/V
 * row is read once for all of them. A key row of head_dim halves is read by
 * head_dim / 8 lanes, 16 bytes each (1 row per warp load at hd 256, 2 at hd
 * 128, 4 at hd 64; at hd 512 by 32 lanes, two 16-byte chunks each, 256
 * columns apart, and at most 2 pairs a block: 16 dims of q and o per pair
 * in a lane's registers), U rows per lane a stage, through a two-stage cp.async
 * pipeline: the next stage's copies are issued before the current one is
 * reduced, so the cache streams (FlashInfer's decode does the same). A
 * lane reads back only the bytes it copied itself: no barrier between
 * stages. Scores are reduced across a row's lanes with shuffles; each lane
 * keeps an online softmax (running max, sum, its 8 output dims) per pair,
 * in the log2 domain (scale * log2(e) folded into q), over the keys the
 * pair's row sees (lo..its own pos: causal among the rows). At the end the
 * lane groups merge by shuffles, the warps through shared memory (the
 * stages' bytes), and the block writes its partial (o unnormalized, max,
 * sum) per pair to `work`. The sequence's live keys (the union of its
 * rows' lo..pos; lo > 0 behind a sliding window) are spread over the
 * splits at run time (split_chunk); splits that start past them exit at
 * once and the combine never looks at them; a split that holds none of a
 * row's keys leaves that row's partial empty (max -inf). Each key row's
 * block comes from the sequence's table (one int32 load per row, from L1).
 * Keys outside the union are never loaded (the pool there may hold
 * anything). A sequence whose rows are all padding (pos < 0) exits at once.
 *
 * Combine: with tickets (decode_attn_params), in the split kernel: a block
 * that wrote its partials fences and takes a ticket of its (sequence, KV
 * head, row group); the one that draws n_used - 1 (every live split has
 * written) reads the partials back from L2 and writes o for its pairs
 * (zeros for a padding row), then puts the ticket back to 0 for the next launch (a graph replays it). Split
 * 0 of an all-padding sequence writes its zeros. Without tickets, the
 * combine kernel: one block per (query head, row), one thread per dim; it
 * writes a padding row as zeros. Both merge in the same order
 * (combine_dim), so their results are the same bits. With p.oq, the block
 * that wrote o (the combining split, split 0 of an all-padding sequence, a
 * combine kernel's block) also writes its heads' int8 blocks (quantize_o),
 * which the wo GEMV loads instead of quantizing o in each of its blocks.
 *
 * Built twice: nvcc (decode_attn_cuda) and the emulator through
 * decode/decode_attn_emu.cc (decode_attn_emu). Covered by
 * tests/emu/test_decode_attn_emu.c and bench/bench_decode_kernels.c. */
#include "devkit/intrinsics.cuh"
#include "decode/decode_attn.h"
#include "ops/gpu_math.cuh"
extern "C" {
#include "kvcache/kvcache.h"
}
#include "kvcache/kv_devq.h"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStages = 2;      /* the K/V pipeline: the next stage loads while one is reduced */
constexpr int kRowsPerLane = 4; /* U: key rows a lane copies a stage */

__device__ __forceinline__ void unpack8(const gk_u32x4 &c, float f[8])
{
    for (int i = 0; i < 4; i++) {
        f[2 * i] = gk_f16_bits_to_f32(c.w[i] & 0xffffu);
        f[2 * i + 1] = gk_f16_bits_to_f32(c.w[i] >> 16);
    }
}

/* A quantized pool's row piece for one lane (kvcache/kv_devq.h): 8 quants
 * in w[0..1], the f16 scale pair holding theirs in w[2]. Lane dl (dims
 * 8 dl .. 8 dl + 7, block dl / 4) takes the scale of its block. */
__device__ __forceinline__ void unpack8_q(const gk_u32x4 *c, int type, int dl, float f[8])
{
    const uint32_t w[2] = {ig_lds(&c->w[0]), ig_lds(&c->w[1])};
    const float d = gk_f16_bits_to_f32(ig_lds(&c->w[2]) >> (16 * ((dl / 4) & 1)));
    for (int i = 0; i < 8; i++)
        f[i] = kvq_value(type, (w[i / 4] >> (8 * (i % 4))) & 0xffu, d);
}

/* A K or V row piece of the stage (shared memory) in registers: f16, or
 * dequantized (w[3] of a quantized piece is never written nor read). */
__device__ __forceinline__ void unpack8_any(const gk_u32x4 *c, int type, int dl, float f[8])
{
    if (type == KVQ_F16)
        unpack8(ig_lds(c), f);
    else
        unpack8_q(c, type, dl, f);
}

/* Issues this lane's copy of dims d0..d0+7 (d0 a multiple of 8) of row r
 * of the (block, KV head) region at element offset e of `cache` (type:
 * kv_devq.h's) into *dst: 16 bytes of f16, or 8 quants and the 4-byte
 * scale pair that holds their scale (unpack8_q picks its half by (d0 / 32)
 * % 2: dl / 4 % 2 for every chunk, a chunk being 256 dims). */
template <int HD>
__device__ __forceinline__ void load_row_piece(gk_u32x4 *dst, const uint16_t *cache, int type,
                                               int64_t e, int r, int d0, bool valid)
{
    if (type == KVQ_F16) {
        ig_cp_async16(dst, cache + e + (r * HD + d0), valid);
        return;
    }
    /* kv_devq.h's offsets in 32 bits: a region is under 2^31 bytes */
    const unsigned char *region = (const unsigned char *)cache + kvq_region(e);
    ig_cp_async8(&dst->w[0], region + (r * HD + d0), valid);
    ig_cp_async4(&dst->w[2], region + (64 * HD + r * (HD / 16) + (d0 / 64) * 4), valid);
}

/* exp2(m - M), 0 for an empty state (m = -inf), without -inf - -inf. */
__device__ __forceinline__ float rescale(float m, float M)
{
    return m == -INFINITY ? 0.0f : ig_exp2(m - M);
}

/* The first live key at position pos: 0, or the sliding window's edge. */
__device__ __forceinline__ int64_t first_key(int64_t pos, int64_t window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Keys per split for the live keys lo..pos: spread over the splits, at
 * least 64 a split (a short context uses few splits). Read from pos at run
 * time, so at any context length every split that has work has an even
 * share (a range fixed by n_ctx left most splits idle early in a long
 * context). The split and combine kernels agree on it. */
__device__ __forceinline__ int64_t split_chunk(int64_t lo, int64_t pos, int n_splits)
{
    const int64_t c = (pos - lo + n_splits) / n_splits; /* ceil((pos - lo + 1) / n_splits) */
    return c < 64 ? 64 : c;
}

/* Query rows a sequence (decode_attn_q_len on the device). */
__device__ __host__ __forceinline__ int64_t q_rows(const decode_attn_params &p)
{
    return p.q_len > 0 ? p.q_len : 1;
}

/* Floats of one partial in `work`: o[hd], max, sum (decode_attn_work_floats
 * in decode/decode_attn_ref.c counts the same). */
__device__ __host__ __forceinline__ int64_t partial_floats(int64_t hd)
{
    return hd + 2;
}

/* Splits of the live keys that start at or before pos (each holds a key). */
__device__ __forceinline__ int64_t used_splits(int64_t key0, int64_t pos, int n_splits)
{
    const int64_t n = (pos - key0) / split_chunk(key0, pos, n_splits) + 1;
    return n < n_splits ? n : n_splits;
}

/* Position of row r of sequence seq, past n_ctx taken as n_ctx - 1; < 0:
 * padding. */
__device__ __forceinline__ int64_t row_pos(const decode_attn_params &p, int64_t seq, int64_t r,
                                           int64_t R)
{
    const int64_t pos = p.pos[seq * R + r];
    return pos < p.n_ctx ? pos : p.n_ctx - 1;
}

/* The live keys of a sequence: the union of its rows' lo..pos (the first
 * row's lo to the last row's pos in a verify step); hi < 0: every row is
 * padding. Every block of the sequence and the combine read the same. */
struct key_range {
    int64_t lo, hi;
};

__device__ __forceinline__ key_range seq_keys(const decode_attn_params &p, int64_t seq, int64_t R)
{
    key_range k = {INT64_MAX, -1};
    for (int64_t r = 0; r < R; r++) {
        const int64_t pos = row_pos(p, seq, r, R);
        if (pos < 0)
            continue;
        const int64_t lo = first_key(pos, p.window);
        k.lo = lo < k.lo ? lo : k.lo;
        k.hi = pos > k.hi ? pos : k.hi;
    }
    return k;
}

/* Query head h's sink in log2 units (the partials' maxima are). */
__device__ __forceinline__ float sink_log2(const decode_attn_params &p, int64_t h)
{
    return p.sinks[h] * 1.4426950408889634f;
}

/* Dim d of query head h of row r of sequence seq (pos >= 0) from its
 * n_used partials: f16(sum_s o_s[d] 2^(m_s - M) / sum_s l_s 2^(m_s - M)); a
 * split that held none of the row's keys has m_s = -inf and adds nothing.
 * With sinks, M also covers sink_h and the denominator gains 2^(sink_h - M). */
template <int HD>
__device__ __forceinline__ uint16_t combine_dim(const decode_attn_params &p, int64_t seq,
                                                int64_t r, int64_t h, int64_t d, int64_t n_used)
{
    const int64_t R = q_rows(p);
    const float *part = p.work + ((seq * R + r) * p.n_head + h) * p.n_splits * partial_floats(HD);
    float M = -INFINITY;
    for (int64_t s = 0; s < n_used; s++)
        M = fmaxf(M, ig_ld_cg_f32(part + s * partial_floats(HD) + HD));
    /* gpt-oss's sink (log2 units, as the partials' maxima): one more term
     * of the denominator, joined here once, not once a split (read again
     * after the loop: no register held across it). */
    if (p.sinks)
        M = fmaxf(M, sink_log2(p, h));
    float acc = 0, sum = 0;
    for (int64_t s = 0; s < n_used; s++) {
        const float *ps = part + s * partial_floats(HD);
        const float f = rescale(ig_ld_cg_f32(ps + HD), M);
        acc += ig_ld_cg_f32(ps + d) * f;
        sum += ig_ld_cg_f32(ps + HD + 1) * f;
    }
    if (p.sinks)
        sum += rescale(sink_log2(p, h), M);
    return gk_f32_to_f16(acc / sum);
}

/* o's int8 blocks (p.oq, p.oqd) of the n (row, query head) pairs this
 * block has just written o for (pair g: row row_of(g) of sequence seq,
 * head head_of(g)), for the wo GEMV: a block of 32 dims is part of one
 * head (head_dim >= 64), whole in this block's o, so no other block is
 * waited for. One thread a block of 32 (gk_quantize32: the GEMV's staging
 * bits). Every thread of the block calls it (a barrier: o complete). */
template <int HD, typename RowOf, typename HeadOf>
__device__ __forceinline__ void quantize_o(const decode_attn_params &p, int64_t seq, int64_t n,
                                           RowOf row_of, HeadOf head_of)
{
    ig_syncthreads(); /* this block's o, read back through L1 */
    constexpr int NB = HD / 32;
    for (int idx = (int)threadIdx.x; idx < n * NB; idx += (int)blockDim.x) {
        const int g = idx / NB;
        const int64_t e =
            ((seq * q_rows(p) + row_of(g)) * p.n_head + head_of(g)) * HD + 32 * (idx % NB);
        gk_quantize32(p.o + e, p.oq + e, (gk_f32x2 *)p.oqd + e / 32);
    }
}

/* The pipeline's shared memory: kStages stages of each thread's U key rows
 * and U value rows (16 bytes each, a thread reads back only what it copied
 * itself: no barrier between stages), and after the loop the same bytes as
 * the warps' partials for their merge. */
template <int HD, int GM, int U> struct split_smem {
    static constexpr int kStageVecs = kStages * 2 * U * kThreads;
    static constexpr int kRedFloats = kWarps * GM * (HD + 2);
    static constexpr int kVecs =
        kStageVecs > (kRedFloats + 3) / 4 ? kStageVecs : (kRedFloats + 3) / 4;
    /* Stage st's K (kv 0) or V (kv 1) row u of thread t. */
    static __device__ __forceinline__ int at(int st, int kv, int u, int t)
    {
        return ((st * 2 + kv) * U + u) * kThreads + t;
    }
};

/* HD: head_dim; GM: (row, query head) pairs per block, a power of two
 * (decode_attn_block_pairs; padding pairs compute the last real pair
 * again); U: key rows per lane a stage; FUSED: the last split combines
 * (p.tickets); QUANT: a quantized K or V (p.k_dtype, p.v_dtype: kv_devq.h's
 * regions, dequantized in registers; a kernel of its own, so the f16 one
 * keeps its code and registers). Block (split, KV head hk x row group rg,
 * sequence). */
template <int HD, int GM, int U, bool FUSED, bool QUANT = false>
__global__ void __launch_bounds__(kThreads)
decode_attn_split_kernel(const decode_attn_params p, const float scale_log2, const int64_t n_rg)
{
    constexpr int C = HD > 256 ? HD / 256 : 1; /* 16-byte chunks a lane holds of a row */
    constexpr int L = HD / (8 * C);  /* lanes per key row */
    constexpr int KPW = 32 / L;      /* rows per warp load */
    constexpr int KB = kWarps * KPW * U; /* rows per block iteration (a stage) */
    using SM = split_smem<HD, GM, U * C>; /* a stage's K/V vectors: row u's chunk c at u C + c */
    IG_SHARED(gk_u32x4, smem, [SM::kVecs]);

    /* q and the step's K/V rows come from the Q|K|V product (launched with
     * IG_LAUNCH_PDL, this grid may start before it ends): wait first, in
     * every block; then let the wo product start loading its weights. */
    ig_grid_dependency_wait();
    ig_launch_dependents();
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int tid = (int)threadIdx.x, sub = lane / L, dl = lane % L;
    const int split = (int)blockIdx.x;
    const int64_t hk = blockIdx.y / n_rg, rg = blockIdx.y % n_rg, seq = blockIdx.z;
    const int64_t G = p.n_head / p.n_head_kv, R = q_rows(p), pairs = R * G;
    const int64_t pair0 = rg * GM, n_mine = pairs - pair0 < GM ? pairs - pair0 : GM;
    /* Pair t of the sequence's KV head: row t / G, query head hk * G + t % G. */
    const auto pair_row = [&](int g) { return (pair0 + (g < n_mine ? g : n_mine - 1)) / G; };
    const auto pair_head = [&](int g) {
        return hk * G + (pair0 + (g < n_mine ? g : n_mine - 1)) % G;
    };
    const key_range keys = seq_keys(p, seq, R);
    if (keys.hi < 0) { /* every row padding: zeros, from split 0 or the combine kernel */
        if (FUSED && split == 0) {
            for (int idx = tid; idx < n_mine * HD; idx += kThreads)
                p.o[((seq * R + pair_row(idx / HD)) * p.n_head + pair_head(idx / HD)) * HD +
                    idx % HD] = 0;
            if (p.oq)
                quantize_o<HD>(p, seq, n_mine, pair_row, pair_head);
        }
        return;
    }
    const int64_t chunk = split_chunk(keys.lo, keys.hi, p.n_splits);
    const int64_t k0 = keys.lo + (int64_t)split * chunk;
    if (k0 > keys.hi)
        return; /* nothing to attend to: the combine skips this split */
    int64_t k_end = k0 + chunk;
    k_end = k_end < keys.hi + 1 ? k_end : keys.hi + 1;

    /* Each pair's keys lo..hi (hi < 0: a padding row, none), in shared
     * memory (registers at GM 8 are full); the block loads the split's keys
     * that some pair of it sees. */
    IG_SHARED(int32_t, seen, [2][GM]);
    int64_t b_lo = INT64_MAX, b_hi = -1;
    for (int g = 0; g < GM; g++) {
        const int64_t hi = row_pos(p, seq, pair_row(g), R);
        const int64_t lo = hi < 0 ? 0 : first_key(hi, p.window);
        if (tid == g) {
            ig_sts(&seen[0][g], (int32_t)lo);
            ig_sts(&seen[1][g], (int32_t)hi);
        }
        if (hi >= 0) {
            b_lo = lo < b_lo ? lo : b_lo;
            b_hi = hi > b_hi ? hi : b_hi;
        }
    }
    ig_syncthreads();
    const int64_t j_begin = k0 > b_lo ? k0 : b_lo;
    const int64_t j_end = k_end < b_hi + 1 ? k_end : b_hi + 1;

    /* This lane's dims of a row: chunk c holds c * (HD / C) + dl * 8 .. + 7. */
    float q[GM][8 * C];
    for (int g = 0; g < GM; g++) {
        const int64_t row = seq * R + pair_row(g);
        for (int c = 0; c < C; c++)
            unpack8(*(const gk_u32x4 *)(p.q + (row * p.n_head + pair_head(g)) * HD +
                                        c * (HD / C) + dl * 8),
                    q[g] + 8 * c);
        for (int i = 0; i < 8 * C; i++)
            q[g][i] *= scale_log2;
    }
    float m[GM], l[GM], o[GM][8 * C];
    for (int g = 0; g < GM; g++) {
        m[g] = -INFINITY;
        l[g] = 0;
        for (int i = 0; i < 8 * C; i++)
            o[g][i] = 0;
    }

    const int32_t *table = p.block_table + seq * p.table_stride;
    const uint16_t *kc = p.k_cache + hk * p.head_stride + dl * 8;
    const uint16_t *vc = p.v_cache + hk * p.head_stride + dl * 8;
    /* This lane's key u of the stage that starts at jb. */
    const auto key_of = [&](int64_t jb, int u) { return jb + (u * kWarps + warp) * KPW + sub; };
    /* The K/V loads, in one place: key rows jb.. of this lane into stage
     * st, zeros past j_end (then nothing is read; the source is the pool's
     * first row, a valid address). */
    const auto load_stage = [&](int64_t jb, int st) {
        if constexpr (QUANT) { /* regions of kv_devq.h, each array its type */
            for (int u = 0; u < U; u++) {
                const int64_t j = key_of(jb, u);
                const bool valid = j < j_end;
                const int64_t e = valid ? table[j / KV_BLOCK] * p.block_stride : 0;
                const int64_t e_h = e + hk * p.head_stride;
                const int r = valid ? (int)(j % KV_BLOCK) : 0;
                for (int c = 0; c < C; c++) { /* hd 512: a lane's two chunks, 256 apart */
                    const int d0 = c * (HD / C) + dl * 8;
                    load_row_piece<HD>(&smem[SM::at(st, 0, u * C + c, tid)], p.k_cache,
                                       p.k_dtype, e_h, r, d0, valid);
                    load_row_piece<HD>(&smem[SM::at(st, 1, u * C + c, tid)], p.v_cache,
                                       p.v_dtype, e_h, r, d0, valid);
                }
            }
            ig_cp_async_commit();
            return;
        }
        for (int u = 0; u < U; u++) {
            const int64_t j = key_of(jb, u);
            const bool valid = j < j_end;
            const int64_t row =
                valid ? table[j / KV_BLOCK] * p.block_stride + (j % KV_BLOCK) * HD : 0;
            for (int c = 0; c < C; c++) {
                ig_cp_async16(&smem[SM::at(st, 0, u * C + c, tid)], kc + row + c * (HD / C),
                              valid);
                ig_cp_async16(&smem[SM::at(st, 1, u * C + c, tid)], vc + row + c * (HD / C),
                              valid);
            }
        }
        ig_cp_async_commit();
    };
    if (j_begin < j_end)
        load_stage(j_begin, 0);
    int st = 0;
    for (int64_t jb = j_begin; jb < j_end; jb += KB, st ^= 1) {
        ig_cp_async_wait<0>(); /* this stage's copies have landed */
        /* The next stage's copies go out before this one is reduced. After
         * the wait (a compiler memory barrier): this lane's reads of that
         * stage, an iteration ago, come before its refill. */
        if (jb + KB < j_end)
            load_stage(jb + KB, st ^ 1);
        /* s[u][g] = this lane's 8 dims of q[g] . k[u], then the row's sum. */
        float s[U][GM];
        for (int u = 0; u < U; u++) {
            for (int g = 0; g < GM; g++)
                s[u][g] = 0;
            for (int c = 0; c < C; c++) {
                float kf[8];
                if constexpr (QUANT)
                    unpack8_any(&smem[SM::at(st, 0, u * C + c, tid)], p.k_dtype, dl, kf);
                else
                    unpack8(ig_lds(&smem[SM::at(st, 0, u * C + c, tid)]), kf);
                for (int g = 0; g < GM; g++) {
                    float acc = s[u][g];
                    for (int i = 0; i < 8; i++)
                        acc = fmaf(q[g][8 * c + i], kf[i], acc);
                    s[u][g] = acc;
                }
            }
        }
        for (int off = 1; off < L; off <<= 1)
            for (int u = 0; u < U; u++)
                for (int g = 0; g < GM; g++)
                    s[u][g] += ig_shfl_xor_f32(s[u][g], off);
        /* Online softmax over the keys each pair sees: s becomes p = exp2(s -
         * new max), 0 for a key outside the pair's lo..hi. */
        for (int g = 0; g < GM; g++) {
            const int64_t lo = ig_lds(&seen[0][g]), hi = ig_lds(&seen[1][g]);
            bool sees[U];
            float mx = m[g];
            for (int u = 0; u < U; u++) {
                const int64_t j = key_of(jb, u);
                sees[u] = j < j_end && j >= lo && j <= hi;
                if (sees[u])
                    mx = fmaxf(mx, s[u][g]);
            }
            if (mx == -INFINITY) { /* no key yet for this lane group */
                for (int u = 0; u < U; u++)
                    s[u][g] = 0.0f;
                continue;
            }
            const float corr = rescale(m[g], mx);
            m[g] = mx;
            l[g] *= corr;
            for (int i = 0; i < 8 * C; i++)
                o[g][i] *= corr;
            for (int u = 0; u < U; u++) {
                s[u][g] = sees[u] ? ig_exp2(s[u][g] - mx) : 0.0f;
                l[g] += s[u][g];
            }
        }
        for (int u = 0; u < U; u++) {
            if (key_of(jb, u) >= j_end)
                continue;
            for (int c = 0; c < C; c++) {
                float vf[8];
                if constexpr (QUANT)
                    unpack8_any(&smem[SM::at(st, 1, u * C + c, tid)], p.v_dtype, dl, vf);
                else
                    unpack8(ig_lds(&smem[SM::at(st, 1, u * C + c, tid)]), vf);
                for (int g = 0; g < GM; g++)
                    for (int i = 0; i < 8; i++)
                        o[g][8 * c + i] = fmaf(s[u][g], vf[i], o[g][8 * c + i]);
            }
        }
    }

    /* Merge the warp's lane groups (same dims at lane ^ L, ^ 2L, ...). */
    for (int off = L; off < 32; off <<= 1)
        for (int g = 0; g < GM; g++) {
            const float mo = ig_shfl_xor_f32(m[g], off), lo2 = ig_shfl_xor_f32(l[g], off);
            const float M = fmaxf(m[g], mo);
            const float fa = rescale(m[g], M), fb = rescale(mo, M);
            l[g] = l[g] * fa + lo2 * fb;
            for (int i = 0; i < 8 * C; i++) {
                const float oo = ig_shfl_xor_f32(o[g][i], off);
                o[g][i] = o[g][i] * fa + oo * fb;
            }
            m[g] = M;
        }
    /* The stages become the warps' partials: every thread past its last
     * read of them. */
    ig_syncthreads();
    float *red = reinterpret_cast<float *>(smem);
    const auto red_at = [&](int w, int g, int d) { return &red[(w * GM + g) * (HD + 2) + d]; };
    if (sub == 0)
        for (int g = 0; g < GM; g++) {
            for (int i = 0; i < 8 * C; i++)
                ig_sts(red_at(warp, g, i / 8 * (HD / C) + dl * 8 + i % 8), o[g][i]);
            if (dl == 0) {
                ig_sts(red_at(warp, g, HD), m[g]);
                ig_sts(red_at(warp, g, HD + 1), l[g]);
            }
        }
    ig_syncthreads();

    /* Merge the warps; one (pair, dim) per thread. */
    for (int idx = tid; idx < n_mine * HD; idx += kThreads) {
        const int g = idx / HD, d = idx % HD;
        float M = -INFINITY;
        for (int w = 0; w < kWarps; w++)
            M = fmaxf(M, ig_lds(red_at(w, g, HD)));
        float acc = 0, sum = 0;
        for (int w = 0; w < kWarps; w++) {
            const float f = rescale(ig_lds(red_at(w, g, HD)), M);
            acc += ig_lds(red_at(w, g, d)) * f;
            sum += ig_lds(red_at(w, g, HD + 1)) * f;
        }
        const int64_t row = seq * R + pair_row(g);
        float *part = p.work + ((row * p.n_head + pair_head(g)) * p.n_splits + split) *
                                   partial_floats(HD);
        part[d] = acc;
        if (d == 0) {
            part[HD] = M;
            part[HD + 1] = sum;
        }
    }
    if (!FUSED)
        return;

    /* The last live split of (seq, hk, rg) to get here combines. */
    IG_SHARED(uint32_t, ticket, [1]);
    ig_threadfence(); /* this thread's partials before the ticket */
    ig_syncthreads();
    uint32_t *counter = p.tickets + (seq * p.n_head_kv + hk) * n_rg + rg;
    if (threadIdx.x == 0)
        ig_sts(&ticket[0], ig_atomic_add_u32(counter, 1u));
    ig_syncthreads();
    const int64_t n_used = used_splits(keys.lo, keys.hi, p.n_splits);
    if ((int64_t)ig_lds(&ticket[0]) != n_used - 1)
        return;
    ig_threadfence(); /* the others' partials after their tickets */
    for (int idx = tid; idx < n_mine * HD; idx += kThreads) {
        const int g = idx / HD, d = idx % HD;
        const int64_t r = pair_row(g), h = pair_head(g);
        p.o[((seq * R + r) * p.n_head + h) * HD + d] =
            ig_lds(&seen[1][g]) < 0 ? (uint16_t)0 : combine_dim<HD>(p, seq, r, h, d, n_used);
    }
    if (p.oq)
        quantize_o<HD>(p, seq, n_mine, pair_row, pair_head);
    if (threadIdx.x == 0)
        *counter = 0; /* for the next launch: nobody else touches it in this one */
}

/* o[seq][r][h][d] = f16(sum_s o_s[d] 2^(m_s - M) / sum_s l_s 2^(m_s - M))
 * over the splits that start at or before the sequence's last key (each
 * holds at least one key); zeros for a padding row. Block (h, seq * q_len
 * + r). */
template <int HD>
__global__ void __launch_bounds__(HD) decode_attn_combine_kernel(const decode_attn_params p)
{
    ig_grid_dependency_wait(); /* the splits' partials (IG_LAUNCH_PDL) */
    ig_launch_dependents();
    const int64_t R = q_rows(p);
    const int64_t h = blockIdx.x, seq = blockIdx.y / R, r = blockIdx.y % R, d = threadIdx.x;
    uint16_t *o = p.o + (blockIdx.y * p.n_head + h) * HD;
    if (row_pos(p, seq, r, R) < 0) {
        o[d] = 0;
    } else {
        const key_range keys = seq_keys(p, seq, R);
        o[d] = combine_dim<HD>(p, seq, r, h, d, used_splits(keys.lo, keys.hi, p.n_splits));
    }
    if (p.oq) /* the block's one pair: its head's blocks */
        quantize_o<HD>(p, seq, 1, [&](int) { return r; }, [&](int) { return h; });
}

/* A copy built for one test may leave head dims or the quantized pool's
 * kernels out (tests/emu/mutate.cmake's dec_* copies build what
 * test_decode_attn_mutants runs: a fraction of the compile); what is left
 * out is refused at launch. */
#ifndef IG_DECODE_BUILT
#define IG_DECODE_BUILT(hd, quant) true
#endif

template <int HD, int GM>
int launch(const decode_attn_params &p, cudaStream_t stream)
{
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const int64_t n_rg = decode_attn_row_groups(&p);
    dim3 grid((unsigned)p.n_splits, (unsigned)(p.n_head_kv * n_rg), (unsigned)p.n_seqs),
        block(kThreads);
    /* hd 512: 2 rows a lane a stage (4 would take 64 KB of static shared memory) */
    constexpr int U = HD > 256 ? 2 : kRowsPerLane;
    const bool quant = p.k_dtype != KVQ_F16 || p.v_dtype != KVQ_F16;
    constexpr bool QB = IG_DECODE_BUILT(HD, true); /* quantized kernels built */
    if (quant && !QB)
        return ig_error(IG_E_INTERNAL, "decode attention: no quantized pool at hd %d here", HD);
    const bool pdl = ig_pdl_on(); /* waits first: docs/gpu.md, programmatic dependent launch */
    if (p.tickets) {
        auto *fused = quant ? decode_attn_split_kernel<HD, GM, U, true, QB>
                            : decode_attn_split_kernel<HD, GM, U, true>;
        return pdl ? IG_LAUNCH_PDL(fused, grid, block, 0, stream, p, scale_log2, n_rg)
                   : IG_LAUNCH(fused, grid, block, 0, stream, p, scale_log2, n_rg);
    }
    auto *split = quant ? decode_attn_split_kernel<HD, GM, U, false, QB>
                        : decode_attn_split_kernel<HD, GM, U, false>;
    int st = pdl ? IG_LAUNCH_PDL(split, grid, block, 0, stream, p, scale_log2, n_rg)
                 : IG_LAUNCH(split, grid, block, 0, stream, p, scale_log2, n_rg);
    if (st)
        return st;
    auto *combine = decode_attn_combine_kernel<HD>;
    const dim3 cgrid((unsigned)p.n_head, (unsigned)(p.n_seqs * q_rows(p)));
    return pdl ? IG_LAUNCH_PDL(combine, cgrid, dim3(HD), 0, stream, p)
               : IG_LAUNCH(combine, cgrid, dim3(HD), 0, stream, p);
}

template <int HD>
int launch_hd(const decode_attn_params &p, cudaStream_t stream)
{
    if constexpr (!IG_DECODE_BUILT(HD, false)) {
        return ig_error(IG_E_INTERNAL, "decode attention: hd %d not built here", HD);
    } else {
        switch (decode_attn_block_pairs(&p)) {
        case 1:
            return launch<HD, 1>(p, stream);
        case 2:
            return launch<HD, 2>(p, stream);
        default: /* hd 512 never gets here (decode_attn_block_pairs): no block of 8 built */
            return launch<HD, (HD > 256 ? 2 : 8)>(p, stream);
        }
    }
}

} /* namespace */

extern "C" int IG_DEV(decode_attn)(const struct decode_attn_params *p, void *stream)
{
    if (!p->q || !p->k_cache || !p->v_cache || !p->block_table || !p->pos || !p->o ||
        !p->work)
        return ig_error(IG_E_INTERNAL, "decode attention: missing buffer");
    if (p->oq && (!p->oqd || !gk_aligned(p->oqd, 8)))
        return ig_error(IG_E_INTERNAL, "decode attention: o's int8 blocks without their "
                        "8-byte aligned (d, s) pairs");
    /* 16-byte row loads: every row of the pool starts 8 elements aligned. */
    if ((p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256 &&
         p->head_dim != 512) || p->window < 0 ||
        p->n_head_kv < 1 || p->n_head < 1 ||
        p->n_head % p->n_head_kv || p->n_head / p->n_head_kv > 8 || p->n_ctx < 1 ||
        p->n_splits < 1 || p->n_splits > DECODE_ATTN_MAX_SPLITS || p->n_head_kv > 65535 ||
        p->n_seqs < 0 || p->n_seqs > 65535 || p->n_ctx > p->table_stride * KV_BLOCK ||
        p->q_len < 0 || p->q_len > DECODE_ATTN_MAX_Q_LEN ||
        p->n_head_kv * decode_attn_row_groups(p) > 65535 ||
        p->n_seqs * decode_attn_q_len(p) > 65535 ||
        p->block_stride < 0 || p->block_stride % 8 || p->head_stride < 0 ||
        p->head_stride % 8 || !gk_aligned(p->k_cache, 16) || !gk_aligned(p->v_cache, 16) ||
        p->k_dtype < KVQ_F16 || p->k_dtype > KVQ_FP8 || p->v_dtype < KVQ_F16 ||
        p->v_dtype > KVQ_FP8)
        return ig_error(IG_E_INTERNAL,
                        "decode attention: unsupported sizes (%lld sequences of %lld rows, heads "
                        "%lld/%lld, hd %lld, n_ctx %lld, table stride %lld, block/head strides "
                        "%lld/%lld, splits %d)",
                        (long long)p->n_seqs, (long long)p->q_len, (long long)p->n_head,
                        (long long)p->n_head_kv,
                        (long long)p->head_dim, (long long)p->n_ctx,
                        (long long)p->table_stride, (long long)p->block_stride,
                        (long long)p->head_stride, p->n_splits);
    if (p->n_seqs == 0)
        return IG_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return p->head_dim == 64    ? launch_hd<64>(*p, s)
           : p->head_dim == 128 ? launch_hd<128>(*p, s)
           : p->head_dim == 256 ? launch_hd<256>(*p, s)
                                : launch_hd<512>(*p, s);
}
