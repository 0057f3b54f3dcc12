/* ops/gpu_deltanet.cu: the kernels of Qwen3.5's hybrid layers (gated
 * DeltaNet, gated attention's output gate) and their launchers; contracts
 * in ops/gpu_deltanet.h, results defined by the CPU twins in
 * ops/gpu_deltanet_ref.c (bit for bit: every f32 operation rounded on its
 * own, the sums in the twins' order).
 *
 * The delta rule here is the recurrent form: one
 * block per (value head, sequence) of 2 D threads, each pair holding a
 * column of S in registers for the whole launch (read from the slot once,
 * written once), the rows of the sequence in order; q_t and k_t are the same for
 * every thread (broadcast loads). A prompt of n rows is n dependent steps
 * of O(D) work per thread: the backend gives a prompt's sequences of
 * GK_DN_CHUNK_MIN rows or more to the chunked form (ops/gpu_deltanet_chunk.cu,
 * tensor cores for the chunk products) and decode rows here. The convolution
 * is one thread per channel of a sequence, its K - 1 inputs in registers;
 * the norms are one warp per head. Every kernel is a dependent launch under
 * IGNITE_PDL=1 (IG_LAUNCH_DEP) and starts with gk_dep_start: what it reads
 * first is the kernel before's.
 *
 * Built twice (devkit/dev_entry.h): nvcc (name_cuda) and the emulator
 * through ops/gpu_deltanet_emu.cc (name_emu). Covered by
 * tests/emu/test_deltanet_emu.c. */
#include "ops/gpu_math.cuh"
#include "ops/gpu_deltanet.h"

#include "core/status.h"

namespace {

constexpr int kConvThreads = 128;
constexpr int kWarps = 4; /* heads a block of the per-head norms */

/* The key head value head h reads. */
__device__ __forceinline__ int64_t dn_key_head(const gk_dn_shape &s, int64_t h)
{
    return s.grouped ? h / (s.Hv / s.Hk) : h % s.Hk;
}

/* ---- the convolution ----------------------------------------------------- */

__global__ void __launch_bounds__(kConvThreads)
dn_conv_kernel(gk_dn_shape s, float *__restrict__ qkv, const float *__restrict__ w,
               const gk_dn_seq *__restrict__ seqs)
{
    gk_dep_start(); /* qkv: the in-projection's; the sequences, the state */
    const gk_dn_seq q = seqs[blockIdx.y];
    const int64_t c = (int64_t)blockIdx.x * kConvThreads + threadIdx.x;
    if (c >= s.C || q.n_rows <= 0)
        return;
    const int K = (int)s.K;
    float *st = s.state + (int64_t)q.slot * s.state_floats;
    float wk[GK_DN_MAX_CONV], hist[GK_DN_MAX_CONV - 1];
    for (int i = 0; i < K; i++)
        wk[i] = w[c * K + i];
    for (int i = 0; i < K - 1; i++)
        hist[i] = q.pos0 == 0 ? 0.0f : st[i * s.C + c];
    for (int32_t t = 0; t < q.n_rows; t++) {
        float *x = qkv + (int64_t)(q.row0 + t) * s.C + c;
        const float in = *x;
        float acc = gk_mul(wk[K - 1], in);
        for (int i = 0; i < K - 1; i++)
            acc = gk_add(acc, gk_mul(wk[i], hist[i]));
        for (int i = 0; i + 1 < K - 1; i++)
            hist[i] = hist[i + 1];
        if (K > 1)
            hist[K - 2] = in;
        *x = acc / (1.0f + expf(-acc));
    }
    for (int i = 0; i < K - 1; i++)
        st[i * s.C + c] = hist[i];
}

/* ---- L2 norms, beta and the decay ------------------------------------------ */

/* The sum over a warp of every lane's v, by xor butterflies (every lane
 * gets the same value; the twin adds in this order). */
__device__ __forceinline__ float dn_warp_sum(float v)
{
    for (int m = 16; m > 0; m >>= 1)
        v = gk_add(v, ig_shfl_xor_f32(v, m));
    return v;
}

/* Block t (kWarps warps): warp w normalizes heads w, w + kWarps, .. of the
 * 2 Hk q and k heads; then thread h < Hv its beta and decay. */
__global__ void __launch_bounds__(32 * kWarps)
dn_gates_kernel(gk_dn_shape s, float *__restrict__ qkv, float *__restrict__ beta,
                float *__restrict__ alpha, const float *__restrict__ dt,
                const float *__restrict__ A)
{
    gk_dep_start(); /* qkv: the convolution's; beta, alpha: the products' */
    const int64_t t = blockIdx.x;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const float qscale = 1.0f / sqrtf((float)s.D);
    for (int64_t hh = warp; hh < 2 * s.Hk; hh += kWarps) {
        float *x = qkv + t * s.C + hh * s.D;
        float ss = 0;
        for (int64_t d = lane; d < s.D; d += 32)
            ss = gk_add(ss, gk_mul(x[d], x[d]));
        ss = dn_warp_sum(ss);
        float r = 1.0f / sqrtf(gk_add(ss, 1e-6f));
        if (hh < s.Hk)
            r = gk_mul(r, qscale);
        for (int64_t d = lane; d < s.D; d += 32)
            x[d] = gk_mul(x[d], r);
    }
    for (int64_t h = threadIdx.x; h < s.Hv; h += 32 * kWarps) {
        float *b = beta + t * s.Hv + h, *g = alpha + t * s.Hv + h;
        *b = 1.0f / (1.0f + expf(-*b));
        const float a = gk_add(*g, dt[h]);
        const float sp = a > 20.0f ? a : log1pf(expf(a));
        *g = gk_mul(A[h], sp);
    }
}

/* ---- the delta rule ----------------------------------------------------------- */

/* Block (value head, sequence) of 2 D threads: thread 2 j + half holds rows
 * [half D/2, (half + 1) D/2) of column j of S (D/2 registers: D = 128 in
 * 64 without spilling), the pair's partial sums of S^T k and S^T q added
 * by one shuffle. */
template <int D>
__global__ void __launch_bounds__(2 * D)
dn_rule_kernel(gk_dn_shape s, const float *__restrict__ qkv, const float *__restrict__ beta,
               const float *__restrict__ g, float *__restrict__ out,
               const gk_dn_seq *__restrict__ seqs)
{
    gk_dep_start(); /* qkv, beta, g: the gates'; the state */
    constexpr int R = D / 2;
    const gk_dn_seq q = seqs[blockIdx.y];
    const int64_t h = blockIdx.x, kh = dn_key_head(s, h);
    const int j = (int)threadIdx.x / 2, i0 = (int)threadIdx.x % 2 * R;
    if (q.n_rows <= 0 || (s.split && q.chunked)) /* gk_dn_chunk's */
        return;
    float *S = s.state + (int64_t)q.slot * s.state_floats + (s.K - 1) * s.C + h * D * D;
    float col[R]; /* S[i0 + i][j] */
    IG_UNROLL
    for (int i = 0; i < R; i++)
        col[i] = q.pos0 == 0 ? 0.0f : S[(i0 + i) * D + j];
    for (int32_t r = 0; r < q.n_rows; r++) {
        const int64_t t = q.row0 + r;
        const float *qv = qkv + t * s.C + kh * D + i0;
        const float *kv = qkv + t * s.C + (s.Hk + kh) * D + i0;
        const float decay = expf(g[t * s.Hv + h]), b = beta[t * s.Hv + h];
        const float v = qkv[t * s.C + (2 * s.Hk + h) * D + j];
        float sk = 0; /* (S^T k)_j after the decay: this half's, then the pair's */
        IG_UNROLL
        for (int i = 0; i < R; i++) {
            col[i] = gk_mul(col[i], decay);
            sk = gk_add(sk, gk_mul(kv[i], col[i]));
        }
        sk = gk_add(sk, ig_shfl_xor_f32(sk, 1));
        const float u = gk_mul(b, gk_sub(v, sk));
        float o = 0;
        IG_UNROLL
        for (int i = 0; i < R; i++) {
            col[i] = gk_add(col[i], gk_mul(kv[i], u));
            o = gk_add(o, gk_mul(qv[i], col[i]));
        }
        o = gk_add(o, ig_shfl_xor_f32(o, 1));
        if (i0 == 0)
            out[(t * s.Hv + h) * D + j] = o;
    }
    IG_UNROLL
    for (int i = 0; i < R; i++)
        S[(i0 + i) * D + j] = col[i];
}

/* ---- the gated norm ------------------------------------------------------------ */

/* Block (t, group of kWarps heads): warp w the head blockIdx.y kWarps + w. */
__global__ void __launch_bounds__(32 * kWarps)
dn_norm_kernel(gk_dn_shape s, const float *__restrict__ o, const float *__restrict__ z,
               const float *__restrict__ w, float eps, uint16_t *__restrict__ y)
{
    gk_dep_start(); /* o: the delta rule's; z: the product's */
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int64_t h = (int64_t)blockIdx.y * kWarps + warp;
    if (h >= s.Hv) /* whole warps leave: the shuffles are per warp */
        return;
    const int64_t base = ((int64_t)blockIdx.x * s.Hv + h) * s.D;
    float ss = 0;
    for (int64_t d = lane; d < s.D; d += 32)
        ss = gk_add(ss, gk_mul(o[base + d], o[base + d]));
    ss = dn_warp_sum(ss);
    const float r = 1.0f / sqrtf(gk_add(ss / (float)s.D, eps));
    for (int64_t d = lane; d < s.D; d += 32)
        y[base + d] = gk_f32_to_f16(gk_silu_mul(z[base + d], gk_mul(gk_mul(o[base + d], r), w[d])));
}

/* ---- gated attention ------------------------------------------------------------- */

__global__ void __launch_bounds__(256)
gate_split_kernel(const float *__restrict__ raw, int64_t n_head, int64_t n_head_kv, int64_t hd,
                  float *__restrict__ qkv, float *__restrict__ gate)
{
    gk_dep_start(); /* raw: the Q|gate|K|V product's */
    const int64_t t = blockIdx.x, q_dim = n_head * hd, kv2 = 2 * n_head_kv * hd;
    const float *src = raw + t * (2 * q_dim + kv2);
    for (int64_t i = threadIdx.x; i < q_dim; i += blockDim.x) {
        const int64_t at = i / hd * 2 * hd + i % hd;
        qkv[t * (q_dim + kv2) + i] = src[at];
        gate[t * q_dim + i] = src[at + hd];
    }
    for (int64_t i = threadIdx.x; i < kv2; i += blockDim.x)
        qkv[t * (q_dim + kv2) + q_dim + i] = src[2 * q_dim + i];
}

__global__ void __launch_bounds__(256)
gate_apply_kernel(uint16_t *__restrict__ att, const float *__restrict__ gate, int64_t n)
{
    gk_dep_start(); /* att: the attention's */
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i < n)
        att[i] = gk_f32_to_f16(gk_f16_to_f32(att[i]) / (1.0f + expf(-gate[i])));
}

bool shape_ok(const gk_dn_shape *s)
{
    return s && s->Hk >= 1 && s->Hv >= s->Hk && s->Hv % s->Hk == 0 && s->D >= 1 &&
           s->C == (2 * s->Hk + s->Hv) * s->D && s->K >= 1 && s->K <= GK_DN_MAX_CONV &&
           s->Hv <= 65535 && s->state &&
           s->state_floats >= (s->K - 1) * s->C + s->Hv * s->D * s->D;
}

int bad(const char *what, const gk_dn_shape *s, int64_t n)
{
    return ig_error(IG_E_INTERNAL, "%s: bad shape (C %lld, heads %lld/%lld, D %lld, K %lld) or "
                    "count %lld, or NULL", what, s ? (long long)s->C : 0LL,
                    s ? (long long)s->Hk : 0LL, s ? (long long)s->Hv : 0LL,
                    s ? (long long)s->D : 0LL, s ? (long long)s->K : 0LL, (long long)n);
}

} /* namespace */

extern "C" {

int IG_DEV(gk_dn_conv)(const struct gk_dn_shape *s, float *qkv, const float *conv_w,
                       const struct gk_dn_seq *seqs, int64_t n_seqs, void *stream_)
{
    if (!shape_ok(s) || n_seqs < 0 || n_seqs > 65535 || (n_seqs && (!qkv || !conv_w || !seqs)))
        return bad("gk_dn_conv", s, n_seqs);
    if (n_seqs == 0)
        return IG_OK;
    dim3 grid((unsigned)((s->C + kConvThreads - 1) / kConvThreads), (unsigned)n_seqs);
    return IG_LAUNCH_DEP(dn_conv_kernel, grid, dim3(kConvThreads), 0, (cudaStream_t)stream_,
                         *s, qkv, conv_w, seqs);
}

int IG_DEV(gk_dn_gates)(const struct gk_dn_shape *s, float *qkv, float *beta, float *alpha,
                        const float *dt, const float *A, int64_t n, void *stream_)
{
    if (!shape_ok(s) || n < 0 || n > 0x7fffffff ||
        (n && (!qkv || !beta || !alpha || !dt || !A)))
        return bad("gk_dn_gates", s, n);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(dn_gates_kernel, dim3((unsigned)n), dim3(32 * kWarps), 0,
                         (cudaStream_t)stream_, *s, qkv, beta, alpha, dt, A);
}

int IG_DEV(gk_dn_rule)(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                       const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs,
                       void *stream_)
{
    if (!shape_ok(s) || !GK_DN_HEAD_DIM_OK(s->D) || n_seqs < 0 || n_seqs > 65535 ||
        (n_seqs && (!qkv || !beta || !g || !out || !seqs)))
        return bad("gk_dn_rule", s, n_seqs);
    if (n_seqs == 0)
        return IG_OK;
    dim3 grid((unsigned)s->Hv, (unsigned)n_seqs);
    if (s->D == 64)
        return IG_LAUNCH_DEP(dn_rule_kernel<64>, grid, dim3(128), 0, (cudaStream_t)stream_,
                             *s, qkv, beta, g, out, seqs);
    return IG_LAUNCH_DEP(dn_rule_kernel<128>, grid, dim3(256), 0, (cudaStream_t)stream_, *s,
                         qkv, beta, g, out, seqs);
}

int IG_DEV(gk_dn_norm)(const struct gk_dn_shape *s, const float *o, const float *z,
                       const float *w, float eps, int64_t n, uint16_t *y, void *stream_)
{
    if (!shape_ok(s) || n < 0 || n > 0x7fffffff || (n && (!o || !z || !w || !y)))
        return bad("gk_dn_norm", s, n);
    if (n == 0)
        return IG_OK;
    dim3 grid((unsigned)n, (unsigned)((s->Hv + kWarps - 1) / kWarps));
    return IG_LAUNCH_DEP(dn_norm_kernel, grid, dim3(32 * kWarps), 0, (cudaStream_t)stream_, *s,
                         o, z, w, eps, y);
}

int IG_DEV(gk_gate_split)(const float *raw, int64_t n, int64_t n_head, int64_t n_head_kv,
                          int64_t hd, float *qkv, float *gate, void *stream_)
{
    if (n < 0 || n > 0x7fffffff || n_head < 1 || n_head_kv < 0 || hd < 1 ||
        (n && (!raw || !qkv || !gate)))
        return ig_error(IG_E_INTERNAL, "gk_gate_split: bad sizes (n %lld, heads %lld/%lld, "
                        "hd %lld) or NULL", (long long)n, (long long)n_head,
                        (long long)n_head_kv, (long long)hd);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(gate_split_kernel, dim3((unsigned)n), dim3(256), 0,
                         (cudaStream_t)stream_, raw, n_head, n_head_kv, hd, qkv, gate);
}

int IG_DEV(gk_gate_apply)(uint16_t *att, const float *gate, int64_t n, void *stream_)
{
    const int64_t blocks = (n + 255) / 256;
    if (n < 0 || blocks > 0x7fffffff || (n && (!att || !gate)))
        return ig_error(IG_E_INTERNAL, "gk_gate_apply: bad size %lld or NULL", (long long)n);
    if (n == 0)
        return IG_OK;
    return IG_LAUNCH_DEP(gate_apply_kernel, dim3((unsigned)blocks), dim3(256), 0,
                         (cudaStream_t)stream_, att, gate, n);
}

} /* extern "C" */
