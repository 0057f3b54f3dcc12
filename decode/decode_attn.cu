/* decode/decode_attn.cu: split-KV (flash-decoding) attention of B
 * sequences' query rows against the f16 KV pool through their block tables,
 * and the kernel that combines the splits; semantics and params in
 * decode/decode_attn.h.
 *
 * Split kernel: one block per (split, KV head, sequence), 4 warps. It computes every
 * query head of the KV head's group (up to 8), so each K/V row is read once
 * for the whole group. A key row of head_dim halves is read by head_dim / 8
 * lanes with 16-byte loads (1 row per warp load at hd 256, 2 at hd 128, 4 at
 * hd 64), U
 * rows per lane in flight. Scores are reduced across those lanes with
 * shuffles; each lane keeps an online softmax (running max, sum, its 8 output
 * dims) per query head, in the log2 domain (scale * log2(e) folded into q).
 * At the end the lane groups merge by shuffles, the warps through shared
 * memory, and the block writes its partial (o unnormalized, max, sum) per
 * query head to `work`. The sequence's live keys lo..pos (lo > 0 behind a
 * sliding window) are spread over the splits at run time (split_chunk);
 * splits that start past pos exit at once and the combine kernel never
 * looks at them. Each key row's block comes from the sequence's table (one
 * int32 load per row, from L1: the rows a lane loads in one iteration lie
 * in at most two blocks). Keys outside lo..pos are never loaded (the pool
 * there may hold anything). A padding sequence (pos < 0) exits at once.
 *
 * Combine: with tickets (decode_attn_params), in the split kernel: a block
 * that wrote its partials fences and takes a ticket of its (sequence, KV
 * head); the one that draws n_used - 1 (every live split has written) reads
 * the partials back from L2 and writes o for the group's query heads, then
 * puts the ticket back to 0 for the next launch (a graph replays it). Split
 * 0 of a padding sequence writes its zeros. Without tickets, the combine
 * kernel: one block per (query head, sequence), one thread per dim; it
 * writes a padding sequence's rows as zeros. Both merge in the same order
 * (combine_dim), so their results are the same bits.
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

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ void unpack8(const gk_u32x4 &c, float f[8])
{
    for (int i = 0; i < 4; i++) {
        f[2 * i] = gk_f16_bits_to_f32(c.w[i] & 0xffffu);
        f[2 * i + 1] = gk_f16_bits_to_f32(c.w[i] >> 16);
    }
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

/* Dim d of query head h of sequence seq (pos >= 0) from its n_used
 * partials: f16(sum_s o_s[d] 2^(m_s - M) / sum_s l_s 2^(m_s - M)). */
template <int HD>
__device__ __forceinline__ uint16_t combine_dim(const decode_attn_params &p, int64_t seq,
                                                int64_t h, int64_t d, int64_t n_used)
{
    const float *part = p.work + (seq * p.n_head + h) * p.n_splits * partial_floats(HD);
    float M = -INFINITY;
    for (int64_t s = 0; s < n_used; s++)
        M = fmaxf(M, ig_ld_cg_f32(part + s * partial_floats(HD) + HD));
    float acc = 0, sum = 0;
    for (int64_t s = 0; s < n_used; s++) {
        const float *ps = part + s * partial_floats(HD);
        const float f = ig_exp2(ig_ld_cg_f32(ps + HD) - M);
        acc += ig_ld_cg_f32(ps + d) * f;
        sum += ig_ld_cg_f32(ps + HD + 1) * f;
    }
    return gk_f32_to_f16(acc / sum);
}

/* HD: head_dim; GM: query heads per block rounded up to a power of two (the
 * last real head is computed again for the padding); U: key rows per lane in
 * flight; FUSED: the last split combines (p.tickets). */
template <int HD, int GM, int U, bool FUSED>
__global__ void __launch_bounds__(kThreads)
decode_attn_split_kernel(const decode_attn_params p, const float scale_log2)
{
    constexpr int L = HD / 8;        /* lanes per key row */
    constexpr int KPW = 32 / L;      /* rows per warp load */
    constexpr int KB = kWarps * KPW * U; /* rows per block iteration */
    IG_SHARED(float, red, [kWarps][GM][HD + 2]);

    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int sub = lane / L, dl = lane % L;
    const int split = (int)blockIdx.x;
    const int64_t hk = blockIdx.y, seq = blockIdx.z, G = p.n_head / p.n_head_kv;
    int64_t pos = p.pos[seq];
    if (pos < 0) { /* padding: zeros, from split 0 or the combine kernel */
        if (FUSED && split == 0)
            for (int idx = (int)threadIdx.x; idx < G * HD; idx += kThreads)
                p.o[(seq * p.n_head + hk * G) * HD + idx] = 0;
        return;
    }
    pos = pos < p.n_ctx ? pos : p.n_ctx - 1;
    const int64_t key0 = first_key(pos, p.window);
    const int64_t chunk = split_chunk(key0, pos, p.n_splits);
    const int64_t k0 = key0 + (int64_t)split * chunk;
    if (k0 > pos)
        return; /* nothing to attend to: the combine skips this split */
    int64_t k_end = k0 + chunk;
    k_end = k_end < pos + 1 ? k_end : pos + 1;

    float q[GM][8];
    for (int g = 0; g < GM; g++) {
        const int64_t h = hk * G + (g < G ? g : G - 1);
        unpack8(*(const gk_u32x4 *)(p.q + (seq * p.n_head + h) * HD + dl * 8), q[g]);
        for (int i = 0; i < 8; i++)
            q[g][i] *= scale_log2;
    }
    float m[GM], l[GM], o[GM][8];
    for (int g = 0; g < GM; g++) {
        m[g] = -INFINITY;
        l[g] = 0;
        for (int i = 0; i < 8; i++)
            o[g][i] = 0;
    }

    const int32_t *table = p.block_table + seq * p.table_stride;
    const uint16_t *kc = p.k_cache + hk * p.head_stride + dl * 8;
    const uint16_t *vc = p.v_cache + hk * p.head_stride + dl * 8;
    for (int64_t jb = k0; jb < k_end; jb += KB) {
        gk_u32x4 kr[U], vr[U];
        bool ok[U];
        for (int u = 0; u < U; u++) {
            const int64_t j = jb + (u * kWarps + warp) * KPW + sub;
            ok[u] = j < k_end;
            if (ok[u]) {
                const int64_t row = table[j / KV_BLOCK] * p.block_stride + (j % KV_BLOCK) * HD;
                kr[u] = gk_ld_stream16(kc + row);
                vr[u] = gk_ld_stream16(vc + row);
            } else {
                kr[u] = vr[u] = gk_u32x4{{0, 0, 0, 0}};
            }
        }
        /* s[u][g] = this lane's 8 dims of q[g] . k[u], then the row's sum. */
        float s[U][GM];
        for (int u = 0; u < U; u++) {
            float kf[8];
            unpack8(kr[u], kf);
            for (int g = 0; g < GM; g++) {
                float acc = 0;
                for (int i = 0; i < 8; i++)
                    acc = fmaf(q[g][i], kf[i], acc);
                s[u][g] = acc;
            }
        }
        for (int off = 1; off < L; off <<= 1)
            for (int u = 0; u < U; u++)
                for (int g = 0; g < GM; g++)
                    s[u][g] += ig_shfl_xor_f32(s[u][g], off);
        /* Online softmax: s becomes p = exp2(s - new max). */
        for (int g = 0; g < GM; g++) {
            float mx = m[g];
            for (int u = 0; u < U; u++)
                if (ok[u])
                    mx = fmaxf(mx, s[u][g]);
            if (mx == -INFINITY) /* no key yet for this lane group */
                continue;
            const float corr = rescale(m[g], mx);
            m[g] = mx;
            l[g] *= corr;
            for (int i = 0; i < 8; i++)
                o[g][i] *= corr;
            for (int u = 0; u < U; u++) {
                s[u][g] = ok[u] ? ig_exp2(s[u][g] - mx) : 0.0f;
                l[g] += s[u][g];
            }
        }
        for (int u = 0; u < U; u++) {
            if (!ok[u])
                continue;
            float vf[8];
            unpack8(vr[u], vf);
            for (int g = 0; g < GM; g++)
                for (int i = 0; i < 8; i++)
                    o[g][i] = fmaf(s[u][g], vf[i], o[g][i]);
        }
    }

    /* Merge the warp's lane groups (same dims at lane ^ L, ^ 2L, ...). */
    for (int off = L; off < 32; off <<= 1)
        for (int g = 0; g < GM; g++) {
            const float mo = ig_shfl_xor_f32(m[g], off), lo = ig_shfl_xor_f32(l[g], off);
            const float M = fmaxf(m[g], mo);
            const float fa = rescale(m[g], M), fb = rescale(mo, M);
            l[g] = l[g] * fa + lo * fb;
            for (int i = 0; i < 8; i++) {
                const float oo = ig_shfl_xor_f32(o[g][i], off);
                o[g][i] = o[g][i] * fa + oo * fb;
            }
            m[g] = M;
        }
    if (sub == 0)
        for (int g = 0; g < GM; g++) {
            for (int i = 0; i < 8; i++)
                ig_sts(&red[warp][g][dl * 8 + i], o[g][i]);
            if (dl == 0) {
                ig_sts(&red[warp][g][HD], m[g]);
                ig_sts(&red[warp][g][HD + 1], l[g]);
            }
        }
    ig_syncthreads();

    /* Merge the warps; one (query head, dim) per thread. */
    for (int idx = (int)threadIdx.x; idx < G * HD; idx += kThreads) {
        const int g = idx / HD, d = idx % HD;
        float M = -INFINITY;
        for (int w = 0; w < kWarps; w++)
            M = fmaxf(M, ig_lds(&red[w][g][HD]));
        float acc = 0, sum = 0;
        for (int w = 0; w < kWarps; w++) {
            const float f = rescale(ig_lds(&red[w][g][HD]), M);
            acc += ig_lds(&red[w][g][d]) * f;
            sum += ig_lds(&red[w][g][HD + 1]) * f;
        }
        float *part = p.work + ((seq * p.n_head + hk * G + g) * p.n_splits + split) *
                                   partial_floats(HD);
        part[d] = acc;
        if (d == 0) {
            part[HD] = M;
            part[HD + 1] = sum;
        }
    }
    if (!FUSED)
        return;

    /* The last live split of (seq, hk) to get here combines. */
    IG_SHARED(uint32_t, ticket, [1]);
    ig_threadfence(); /* this thread's partials before the ticket */
    ig_syncthreads();
    uint32_t *counter = p.tickets + seq * p.n_head_kv + hk;
    if (threadIdx.x == 0)
        ig_sts(&ticket[0], ig_atomic_add_u32(counter, 1u));
    ig_syncthreads();
    const int64_t n_used = used_splits(key0, pos, p.n_splits);
    if ((int64_t)ig_lds(&ticket[0]) != n_used - 1)
        return;
    ig_threadfence(); /* the others' partials after their tickets */
    for (int idx = (int)threadIdx.x; idx < G * HD; idx += kThreads) {
        const int64_t h = hk * G + idx / HD, d = idx % HD;
        p.o[(seq * p.n_head + h) * HD + d] = combine_dim<HD>(p, seq, h, d, n_used);
    }
    if (threadIdx.x == 0)
        *counter = 0; /* for the next launch: nobody else touches it in this one */
}

/* o[seq][h][d] = f16(sum_s o_s[d] 2^(m_s - M) / sum_s l_s 2^(m_s - M)) over
 * the splits that start at or before pos (each holds at least one key);
 * zeros for a padding sequence. */
template <int HD>
__global__ void __launch_bounds__(HD) decode_attn_combine_kernel(const decode_attn_params p)
{
    const int64_t h = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;
    uint16_t *o = p.o + (seq * p.n_head + h) * HD;
    int64_t pos = p.pos[seq];
    if (pos < 0) {
        o[d] = 0;
        return;
    }
    pos = pos < p.n_ctx ? pos : p.n_ctx - 1;
    const int64_t key0 = first_key(pos, p.window);
    o[d] = combine_dim<HD>(p, seq, h, d, used_splits(key0, pos, p.n_splits));
}

template <int HD, int GM>
int launch(const decode_attn_params &p, cudaStream_t stream)
{
    const float scale_log2 = p.scale * 1.4426950408889634f;
    dim3 grid((unsigned)p.n_splits, (unsigned)p.n_head_kv, (unsigned)p.n_seqs), block(kThreads);
    if (p.tickets) {
        auto *fused = decode_attn_split_kernel<HD, GM, 4, true>;
        return IG_LAUNCH(fused, grid, block, 0, stream, p, scale_log2);
    }
    auto *split = decode_attn_split_kernel<HD, GM, 4, false>;
    int st = IG_LAUNCH(split, grid, block, 0, stream, p, scale_log2);
    if (st)
        return st;
    auto *combine = decode_attn_combine_kernel<HD>;
    return IG_LAUNCH(combine, dim3((unsigned)p.n_head, (unsigned)p.n_seqs), dim3(HD), 0, stream,
                     p);
}

template <int HD>
int launch_hd(const decode_attn_params &p, cudaStream_t stream)
{
    const int64_t G = p.n_head / p.n_head_kv;
    if (G == 1)
        return launch<HD, 1>(p, stream);
    if (G == 2)
        return launch<HD, 2>(p, stream);
    if (G <= 4)
        return launch<HD, 4>(p, stream);
    return launch<HD, 8>(p, stream);
}

} /* namespace */

extern "C" int IG_DEV(decode_attn)(const struct decode_attn_params *p, void *stream)
{
    if (!p->q || !p->k_cache || !p->v_cache || !p->block_table || !p->pos || !p->o ||
        !p->work)
        return ig_error(IG_E_INTERNAL, "decode attention: missing buffer");
    /* 16-byte row loads: every row of the pool starts 8 elements aligned. */
    if ((p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256) || p->window < 0 ||
        p->n_head_kv < 1 || p->n_head < 1 ||
        p->n_head % p->n_head_kv || p->n_head / p->n_head_kv > 8 || p->n_ctx < 1 ||
        p->n_splits < 1 || p->n_splits > DECODE_ATTN_MAX_SPLITS || p->n_head_kv > 65535 ||
        p->n_seqs < 0 || p->n_seqs > 65535 || p->n_ctx > p->table_stride * KV_BLOCK ||
        p->block_stride < 0 || p->block_stride % 8 || p->head_stride < 0 ||
        p->head_stride % 8 || !gk_aligned(p->k_cache, 16) || !gk_aligned(p->v_cache, 16))
        return ig_error(IG_E_INTERNAL,
                        "decode attention: unsupported sizes (%lld sequences, heads %lld/%lld, "
                        "hd %lld, n_ctx %lld, table stride %lld, block/head strides %lld/%lld, "
                        "splits %d)",
                        (long long)p->n_seqs, (long long)p->n_head, (long long)p->n_head_kv,
                        (long long)p->head_dim, (long long)p->n_ctx,
                        (long long)p->table_stride, (long long)p->block_stride,
                        (long long)p->head_stride, p->n_splits);
    if (p->n_seqs == 0)
        return IG_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return p->head_dim == 64    ? launch_hd<64>(*p, s)
           : p->head_dim == 128 ? launch_hd<128>(*p, s)
                                : launch_hd<256>(*p, s);
}
