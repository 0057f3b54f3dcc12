/* ops/gpu_deltanet_chunk.cu: the delta rule of gated DeltaNet in the chunked
 * form (gk_dn_chunk; contract in ops/gpu_deltanet.h), the prefill side of
 * ops/gpu_deltanet.cu's recurrent kernel. Its twin gk_dn_chunk_ref
 * (ops/gpu_deltanet_chunk_ref.c) does the same phases on the same arrays:
 * bit for bit under the emulator, whose mma.sync adds each 16-deep step in
 * double from the accumulator and rounds once (emu/warp.cc).
 *
 * Block (value head h, value columns [v0, v0 + 64), sequence), 4 warps. The
 * columns of S are independent given the chunk's keys, so a head of 128
 * value columns is two blocks (each solving the chunk's T again: 64 x 64,
 * small next to the products). Per chunk of c <= 64 rows, phases apart by
 * barriers, all in shared memory:
 *   1. G (cumulative log decay) and beta; k, q, beta e^G k and beta v in f16;
 *   2. M = -beta_i k_i.k_m e^(G_i - G_m) (m < i) and P = q_i.k_m e^(G_i -
 *      G_m) (m <= i) from two 64 x 64 x D products;
 *   3. T = (I - M)^-1 by forward substitution in f32, a row a barrier (64
 *      threads: T_i[p] = sum_(p <= m < i) M_im T_mp);
 *   4. -W = -(T beta e^G k); 5. v_new = T beta v - W S (f16 out);
 *   6. o = e^G (q S) + P v_new into out; S = e^(G_last) S + (e^(G_last - G)
 *      k)^T v_new in f32, then its f16 copy for the next chunk.
 * A prompt cut inside a chunk (ops/gpu_deltanet.h's checkpoint): the block
 * of its next step starts from the checkpoint's S and runs the chunk's
 * rows kept there first (their k, v, g, beta read from it, their k as q,
 * their outputs not written: a row's output reads only its own row of P
 * and of q S, so the rows the earlier step wrote stand), and writes S at
 * the start of a chunk its rows end inside; dn_ckpt_kernel then keeps that
 * chunk's rows. The state at every chunk's end is the bits of the prompt
 * in one step.
 * Fragments are loaded element by element with ig_lds (any stride, so the
 * transposed operands need no copies); ldmatrix and a pipelined state pass
 * across chunks (flash-linear-attention's split into intra-chunk kernels and
 * a state kernel) are what the GPU check's timings may ask for next.
 *
 * Both kernels are dependent launches under IGNITE_PDL=1 (gk_dep_start first).
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator through
 * ops/gpu_deltanet_chunk_emu.cc (name_emu). Covered by
 * tests/emu/test_deltanet_emu.c (twin, the recurrent kernel, a prompt cut
 * at 37/50/87 rows against it in one step, mutants). */
#include "ops/gpu_math.cuh"
#include "ops/gpu_deltanet.h"

#include "core/status.h"

namespace {

constexpr int kCh = GK_DN_CHUNK; /* rows of a chunk */
constexpr int kBv = 64;          /* value columns of a block */
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

/* The shared arrays' byte offsets (f16 as raw bits). */
template <int D> struct ChunkSmem {
    static constexpr size_t sf = 0;                        /* f32 [D][kBv] S's columns */
    static constexpr size_t sh = sf + D * kBv * 4;         /* f16 [D][kBv] their copy */
    static constexpr size_t kh = sh + D * kBv * 2;         /* f16 [kCh][D] k, then -W */
    static constexpr size_t qh = kh + kCh * D * 2;         /* f16 [kCh][D] q */
    static constexpr size_t kb = qh + kCh * D * 2;         /* f16 [kCh][D] beta e^G k, then e^(Gl-G) k */
    static constexpr size_t af = kb + kCh * D * 2;         /* f32 [kCh][kCh] M, then T in f16 */
    static constexpr size_t tf = af + kCh * kCh * 4;       /* f32 [kCh][kCh] T */
    static constexpr size_t ph = tf + kCh * kCh * 4;       /* f16 [kCh][kCh] P */
    static constexpr size_t vb = ph + kCh * kCh * 2;       /* f16 [kCh][kBv] beta v */
    static constexpr size_t vn = vb + kCh * kBv * 2;       /* f16 [kCh][kBv] v_new */
    static constexpr size_t gs = vn + kCh * kBv * 2;       /* f32 [kCh] G */
    static constexpr size_t bs = gs + kCh * 4;             /* f32 [kCh] beta */
    static constexpr size_t kp = bs + kCh * 4;             /* [kCh] each row's k (then v) */
    static constexpr size_t qp = kp + kCh * sizeof(void *); /* [kCh] its q (a kept row: k) */
    static constexpr size_t bytes = qp + kCh * sizeof(void *);
};

__device__ __forceinline__ uint32_t dn_pack(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

/* acc (a 16 x 8 tile in the mma C layout) += A B over k < K (a multiple of
 * 16): A's (r, k) at a[r ars + k acs], B's (k, n) at b[k brs + n bcs], f16
 * in shared memory, a and b at the tile's origin. All 32 lanes. */
__device__ __forceinline__ void dn_mma(float acc[4], const uint16_t *a, int ars, int acs,
                                       const uint16_t *b, int brs, int bcs, int K, int lane)
{
    const int g = lane / 4, t = lane % 4;
    for (int k = 0; k < K; k += 16) {
        uint32_t ra[4], rb[2];
        IG_UNROLL
        for (int i = 0; i < 4; i++) {
            const int r = g + 8 * (i % 2), c = k + 2 * t + 8 * (i / 2);
            ra[i] = dn_pack(ig_lds(a + r * ars + c * acs), ig_lds(a + r * ars + (c + 1) * acs));
        }
        IG_UNROLL
        for (int i = 0; i < 2; i++) {
            const int r = k + 2 * t + 8 * i;
            rb[i] = dn_pack(ig_lds(b + r * brs + g * bcs), ig_lds(b + (r + 1) * brs + g * bcs));
        }
        ig_mma_16816<ig_f16_t>(acc, ra, rb, acc);
    }
}

/* Element e of a 16 x 8 C tile: its row and column in the tile. */
__device__ __forceinline__ int dn_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
__device__ __forceinline__ int dn_col(int lane, int e) { return 2 * (lane % 4) + e % 2; }

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
dn_chunk_kernel(gk_dn_shape s, const float *__restrict__ qkv, const float *__restrict__ beta,
                const float *__restrict__ g, float *__restrict__ out,
                const gk_dn_seq *__restrict__ seqs)
{
    using L = ChunkSmem<D>;
    gk_dep_start(); /* qkv, beta, g: the gates'; the state, the checkpoint */
    constexpr int kVb = D / kBv;
    const gk_dn_seq q = seqs[blockIdx.y];
    if (q.n_rows <= 0 || (s.split && !q.chunked)) /* gk_dn_rule's */
        return;
    const int64_t h = blockIdx.x / kVb, v0 = blockIdx.x % kVb * kBv;
    const int64_t kh = s.grouped ? h / (s.Hv / s.Hk) : h % s.Hk;
    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    IG_DYN_SHARED(unsigned char, sm);
    float *Sf = (float *)(void *)(sm + L::sf), *Af = (float *)(void *)(sm + L::af);
    float *Tf = (float *)(void *)(sm + L::tf), *Gs = (float *)(void *)(sm + L::gs);
    float *Bs = (float *)(void *)(sm + L::bs);
    uint16_t *Sh = (uint16_t *)(void *)(sm + L::sh), *Kh = (uint16_t *)(void *)(sm + L::kh);
    uint16_t *Qh = (uint16_t *)(void *)(sm + L::qh), *Kb = (uint16_t *)(void *)(sm + L::kb);
    uint16_t *Ph = (uint16_t *)(void *)(sm + L::ph), *Vb = (uint16_t *)(void *)(sm + L::vb);
    uint16_t *VN = (uint16_t *)(void *)(sm + L::vn);
    const float **Kp = (const float **)(void *)(sm + L::kp);
    const float **Qp = (const float **)(void *)(sm + L::qp);
    uint16_t *Th = (uint16_t *)(void *)Af, *Wn = Kh;
    float *S = s.state + (int64_t)q.slot * s.state_floats + (s.K - 1) * s.C + h * D * D;
    /* its checkpoint, and the rows of its unfinished chunk an earlier step
     * ran (held: that chunk runs again from the checkpoint's S, those rows first) */
    float *ck = s.ckpt && q.ckpt ? s.ckpt : nullptr;
    const int32_t held = gk_dn_ckpt_pending(ck, &q), end = q.pos0 + q.n_rows;
    const int64_t ckr = (s.Hk + s.Hv) * D + 2 * s.Hv, kvw = (s.Hk + s.Hv) * D; /* a row's */
    float *ckS = ck ? ck + GK_DN_CKPT_HEAD + h * D * D : nullptr;
    const float *ckrows = ck ? ck + GK_DN_CKPT_HEAD + s.Hv * D * D : nullptr;
    /* S where the chunk from position `at` begins goes to the checkpoint
     * where that chunk is the step's last and ends inside (as S is loaded,
     * or copied to f16 for that chunk) */
    auto keep = [&](int32_t at) {
        return ck && end % kCh && at >= q.pos0 && at < end && at / kCh == (end - 1) / kCh &&
               (q.ckpt & GK_DN_CKPT_KEEP);
    };
    bool keep_S = keep(q.pos0 - held);
    for (int e = tid; e < D * kBv; e += kThreads) {
        const float x = held ? ckS[e / kBv * D + v0 + e % kBv]
                          : q.pos0 == 0 ? 0.0f : S[e / kBv * D + v0 + e % kBv];
        ig_sts(Sf + e, x);
        ig_sts(Sh + e, gk_f32_to_f16(x));
        if (keep_S)
            ckS[e / kBv * D + v0 + e % kBv] = x;
    }
    for (int32_t pos = q.pos0 - held, c; pos < end; pos += c) {
        c = kCh - pos % kCh; /* chunks end at multiples of kCh positions */
        c = end - pos < c ? end - pos : c;
        /* rows [0, pp) the checkpoint's (no q, no output), row i >= pp the
         * step's row t0 + i */
        const int32_t pp = pos < q.pos0 ? held : 0;
        const int64_t t0 = q.row0 + (pos - q.pos0);
        /* 1: each row's decay, beta (padding rows: 0) and where its k|v
         * and q are (a kept row's q is its k, any finite row: its output is
         * not written), then G (padding rows: G stays), then the f16 rows.
         * Tables, not a choice in each load: at D = 128 on sm_80 the kernel
         * takes 103 registers so (113 before the checkpoint), 133 with the
         * choices, 255 with G summed from global memory as before */
        if (tid < kCh) {
            const float *kv = tid < pp ? ckrows + tid * ckr : qkv + (t0 + tid) * s.C + s.Hk * D;
            ig_sts(Kp + tid, kv);
            ig_sts(Qp + tid, tid < pp ? kv : qkv + (t0 + tid) * s.C);
            ig_sts(Gs + tid, tid >= c    ? 0.0f
                             : tid < pp ? ckrows[tid * ckr + kvw + h]
                                        : g[(t0 + tid) * s.Hv + h]);
            ig_sts(Bs + tid, tid >= c    ? 0.0f
                             : tid < pp ? ckrows[tid * ckr + kvw + s.Hv + h]
                                        : beta[(t0 + tid) * s.Hv + h]);
        }
        ig_syncthreads();
        if (tid == 0) {
            float acc = 0;
            for (int i = 0; i < kCh; i++) {
                if (i < c)
                    acc = gk_add(acc, ig_lds(Gs + i));
                ig_sts(Gs + i, acc);
            }
        }
        ig_syncthreads();
        for (int e = tid; e < kCh * D; e += kThreads) {
            const int r = e / D, d = e % D;
            float kx = 0, qx = 0, kbx = 0;
            if (r < c) {
                qx = ig_lds(Qp + r)[kh * D + d];
                kx = ig_lds(Kp + r)[kh * D + d];
                kbx = gk_mul(gk_mul(ig_lds(Bs + r), expf(ig_lds(Gs + r))), kx);
            }
            ig_sts(Kh + e, gk_f32_to_f16(kx));
            ig_sts(Qh + e, gk_f32_to_f16(qx));
            ig_sts(Kb + e, gk_f32_to_f16(kbx));
        }
        for (int e = tid; e < kCh * kBv; e += kThreads) {
            const int r = e / kBv;
            const float vx = r < c ? gk_mul(ig_lds(Bs + r),
                                            ig_lds(Kp + r)[(s.Hk + h) * D + v0 + e % kBv])
                                   : 0.0f;
            ig_sts(Vb + e, gk_f32_to_f16(vx));
        }
        ig_syncthreads();
        /* 2: M (tiles 0..31) and P (32..63) from k k^T and q k^T */
        for (int tile = warp; tile < 64; tile += kWarps) {
            const bool p = tile >= 32;
            const int r0 = tile % 32 / 8 * 16, n0 = tile % 8 * 8;
            float acc[4] = {0, 0, 0, 0};
            dn_mma(acc, (p ? Qh : Kh) + r0 * D, D, 1, Kh + n0 * D, 1, D, D, lane);
            IG_UNROLL
            for (int e = 0; e < 4; e++) {
                const int i = r0 + dn_row(lane, e), m = n0 + dn_col(lane, e);
                const float dec = expf(gk_sub(ig_lds(Gs + i), ig_lds(Gs + m)));
                if (p)
                    ig_sts(Ph + i * kCh + m, gk_f32_to_f16(m <= i ? gk_mul(acc[e], dec) : 0.0f));
                else
                    ig_sts(Af + i * kCh + m,
                           m < i ? gk_mul(gk_mul(-ig_lds(Bs + i), acc[e]), dec) : 0.0f);
            }
        }
        ig_syncthreads();
        /* 3: T's rows in order (the chunk's; padding rows of T are 0) */
        for (int i = 0; i < c; i++) {
            if (tid < kCh) {
                float v = tid == i ? 1.0f : 0.0f;
                for (int m = tid; m < i; m++)
                    v = gk_add(v, gk_mul(ig_lds(Af + i * kCh + m), ig_lds(Tf + m * kCh + tid)));
                ig_sts(Tf + i * kCh + tid, v);
            }
            ig_syncthreads();
        }
        for (int e = tid; e < kCh * kCh; e += kThreads) /* T in f16, over M */
            ig_sts(Th + e, e / kCh < c ? gk_f32_to_f16(ig_lds(Tf + e)) : (uint16_t)0);
        ig_syncthreads();
        /* 4: -W = -(T beta e^G k), over k */
        for (int tile = warp; tile < 4 * (D / 8); tile += kWarps) {
            const int r0 = tile / (D / 8) * 16, n0 = tile % (D / 8) * 8;
            float acc[4] = {0, 0, 0, 0};
            dn_mma(acc, Th + r0 * kCh, kCh, 1, Kb + n0, D, 1, kCh, lane);
            IG_UNROLL
            for (int e = 0; e < 4; e++)
                ig_sts(Wn + (r0 + dn_row(lane, e)) * D + n0 + dn_col(lane, e),
                       gk_f32_to_f16(-acc[e]));
        }
        ig_syncthreads();
        /* 5: v_new = T beta v - W S; the decayed keys over beta e^G k */
        for (int tile = warp; tile < 32; tile += kWarps) {
            const int r0 = tile / 8 * 16, n0 = tile % 8 * 8;
            float acc[4] = {0, 0, 0, 0};
            dn_mma(acc, Th + r0 * kCh, kCh, 1, Vb + n0, kBv, 1, kCh, lane);
            dn_mma(acc, Wn + r0 * D, D, 1, Sh + n0, kBv, 1, D, lane);
            IG_UNROLL
            for (int e = 0; e < 4; e++)
                ig_sts(VN + (r0 + dn_row(lane, e)) * kBv + n0 + dn_col(lane, e),
                       gk_f32_to_f16(acc[e]));
        }
        const float glast = ig_lds(Gs + c - 1);
        for (int e = tid; e < kCh * D; e += kThreads) {
            const int r = e / D;
            const float kd = r < c ? gk_mul(expf(gk_sub(glast, ig_lds(Gs + r))),
                                            ig_lds(Kp + r)[kh * D + e % D])
                                   : 0.0f;
            ig_sts(Kb + e, gk_f32_to_f16(kd));
        }
        ig_syncthreads();
        /* 6: the chunk's outputs, then S */
        for (int tile = warp; tile < 32; tile += kWarps) {
            const int r0 = tile / 8 * 16, n0 = tile % 8 * 8;
            float acc[4] = {0, 0, 0, 0};
            dn_mma(acc, Qh + r0 * D, D, 1, Sh + n0, kBv, 1, D, lane);
            IG_UNROLL
            for (int e = 0; e < 4; e++)
                acc[e] = gk_mul(acc[e], expf(ig_lds(Gs + r0 + dn_row(lane, e))));
            dn_mma(acc, Ph + r0 * kCh, kCh, 1, VN + n0, kBv, 1, kCh, lane);
            IG_UNROLL
            for (int e = 0; e < 4; e++) {
                const int i = r0 + dn_row(lane, e);
                if (i >= pp && i < c)
                    out[((t0 + i) * s.Hv + h) * D + v0 + n0 + dn_col(lane, e)] = acc[e];
            }
        }
        const float el = expf(glast);
        for (int tile = warp; tile < D / 16 * 8; tile += kWarps) {
            const int r0 = tile / 8 * 16, n0 = tile % 8 * 8;
            float acc[4];
            IG_UNROLL
            for (int e = 0; e < 4; e++)
                acc[e] = gk_mul(ig_lds(Sf + (r0 + dn_row(lane, e)) * kBv + n0 + dn_col(lane, e)),
                                el);
            dn_mma(acc, Kb + r0, 1, D, VN + n0, kBv, 1, kCh, lane); /* A(i, r) = kd[r][i] */
            IG_UNROLL
            for (int e = 0; e < 4; e++)
                ig_sts(Sf + (r0 + dn_row(lane, e)) * kBv + n0 + dn_col(lane, e), acc[e]);
        }
        ig_syncthreads();
        keep_S = keep(pos + c);
        for (int e = tid; e < D * kBv; e += kThreads) { /* the next chunk's copy of S */
            ig_sts(Sh + e, gk_f32_to_f16(ig_lds(Sf + e)));
            if (keep_S)
                ckS[e / kBv * D + v0 + e % kBv] = ig_lds(Sf + e);
        }
    }
    ig_syncthreads();
    for (int e = tid; e < D * kBv; e += kThreads)
        S[e / kBv * D + v0 + e % kBv] = ig_lds(Sf + e);
}

/* gk_dn_ckpt: block of sequence blockIdx.x. Every thread reads the header
 * before thread 0 rewrites it; a continued chunk's rows stay where they
 * are, the step's go after them. */
__global__ void __launch_bounds__(kThreads)
dn_ckpt_kernel(gk_dn_shape s, const float *__restrict__ qkv, const float *__restrict__ beta,
               const float *__restrict__ g, const gk_dn_seq *__restrict__ seqs)
{
    gk_dep_start(); /* the checkpoint: the chunk kernel's */
    const gk_dn_seq q = seqs[blockIdx.x];
    if (q.n_rows <= 0)
        return;
    if (!q.ckpt) /* the pool's one checkpoint is not this sequence's */
        return;
    float *ck = s.ckpt;
    const int32_t held = gk_dn_ckpt_pending(ck, &q), end = q.pos0 + q.n_rows;
    ig_syncthreads();
    int64_t *head = (int64_t *)(void *)ck;
    if (!(q.ckpt & GK_DN_CKPT_KEEP) || end % kCh == 0) { /* given back */
        if (threadIdx.x == 0)
            head[0] = head[1] = 0;
        return;
    }
    /* the chunk's first position: a multiple of kCh, or where the rows began
     * (the checkpoint's, else the step's first) */
    const int32_t first = end / kCh * kCh > q.pos0 - held ? end / kCh * kCh : q.pos0 - held;
    const int32_t from = first > q.pos0 ? first - q.pos0 : 0; /* its first row of the step */
    const int32_t at = first > q.pos0 - held ? 0 : held;      /* and where that row goes */
    const int64_t kvw = (s.Hk + s.Hv) * s.D, ckr = kvw + 2 * s.Hv;
    float *rows = ck + GK_DN_CKPT_HEAD + s.Hv * s.D * s.D + (int64_t)at * ckr;
    for (int64_t e = threadIdx.x; e < (int64_t)(q.n_rows - from) * ckr; e += kThreads) {
        const int64_t j = e % ckr, r = q.row0 + from + e / ckr;
        rows[e] = j < kvw          ? qkv[r * s.C + s.Hk * s.D + j]
                  : j < kvw + s.Hv ? g[r * s.Hv + j - kvw]
                                   : beta[r * s.Hv + j - kvw - s.Hv];
    }
    if (threadIdx.x == 0) {
        head[0] = first;
        ((int32_t *)(void *)ck)[2] = end - first, ((int32_t *)(void *)ck)[3] = q.slot;
    }
}

template <int D>
int launch(const gk_dn_shape *s, const float *qkv, const float *beta, const float *g,
           float *out, const gk_dn_seq *seqs, int64_t n_seqs, cudaStream_t stream)
{
    const size_t smem = ChunkSmem<D>::bytes;
#if defined(__CUDACC__)
    IG_CUDA_CHECK(cudaFuncSetAttribute(&dn_chunk_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
#endif
    const dim3 grid((unsigned)(s->Hv * (D / kBv)), (unsigned)n_seqs);
    return IG_LAUNCH_DEP(dn_chunk_kernel<D>, grid, dim3(kThreads), smem, stream, *s, qkv, beta,
                         g, out, seqs);
}

} /* namespace */

extern "C" int IG_DEV(gk_dn_chunk)(const struct gk_dn_shape *s, const float *qkv,
                                   const float *beta, const float *g, float *out,
                                   const struct gk_dn_seq *seqs, int64_t n_seqs, void *stream)
{
    const bool shape = s && s->Hk >= 1 && s->Hv >= s->Hk && s->Hv % s->Hk == 0 &&
                       GK_DN_HEAD_DIM_OK(s->D) && s->C == (2 * s->Hk + s->Hv) * s->D &&
                       s->K >= 1 && s->K <= GK_DN_MAX_CONV && s->Hv <= 65535 && s->state &&
                       s->state_floats >= (s->K - 1) * s->C + s->Hv * s->D * s->D;
    if (!shape || n_seqs < 0 || n_seqs > 65535 ||
        (n_seqs && (!qkv || !beta || !g || !out || !seqs)))
        return ig_error(IG_E_INTERNAL, "gk_dn_chunk: bad shape (C %lld, heads %lld/%lld, D "
                        "%lld) or count %lld, or NULL", s ? (long long)s->C : 0LL,
                        s ? (long long)s->Hk : 0LL, s ? (long long)s->Hv : 0LL,
                        s ? (long long)s->D : 0LL, (long long)n_seqs);
    if (s->ckpt && s->ckpt_floats < GK_DN_CKPT_FLOATS(s->Hk, s->Hv, s->D))
        return ig_error(IG_E_INTERNAL, "gk_dn_chunk: a checkpoint of %lld floats, under %lld",
                        (long long)s->ckpt_floats,
                        (long long)GK_DN_CKPT_FLOATS(s->Hk, s->Hv, s->D));
    if (n_seqs == 0)
        return IG_OK;
    return s->D == 64 ? launch<64>(s, qkv, beta, g, out, seqs, n_seqs, (cudaStream_t)stream)
                      : launch<128>(s, qkv, beta, g, out, seqs, n_seqs, (cudaStream_t)stream);
}

extern "C" int IG_DEV(gk_dn_ckpt)(const struct gk_dn_shape *s, const float *qkv,
                                  const float *beta, const float *g,
                                  const struct gk_dn_seq *seqs, int64_t n_seqs, void *stream)
{
    if (!s || !s->ckpt || s->ckpt_floats < GK_DN_CKPT_FLOATS(s->Hk, s->Hv, s->D) ||
        s->C != (2 * s->Hk + s->Hv) * s->D || n_seqs < 0 || n_seqs > 65535 ||
        (n_seqs && (!qkv || !beta || !g || !seqs)))
        return ig_error(IG_E_INTERNAL, "gk_dn_ckpt: no checkpoints, or too small (%lld "
                        "floats), or count %lld, or NULL", s ? (long long)s->ckpt_floats : 0LL,
                        (long long)n_seqs);
    if (n_seqs == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(dn_ckpt_kernel, dim3((unsigned)n_seqs), dim3(kThreads), 0,
                         (cudaStream_t)stream, *s, qkv, beta, g, seqs);
}
