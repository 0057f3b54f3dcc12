/* backend/cpu_deltanet.c: the gated DeltaNet mixer of the CPU backend
 * (LAYER_MIXER_DELTANET, backend/cpu_layer.h; Qwen3.5's linear attention,
 * transformers' Qwen3_5GatedDeltaNet as llama.cpp's converter stores it).
 *
 * Per row: RMSNorm, then q|k|v (attn_qkv), the gate z (attn_gate), beta and
 * alpha (one each per value head); a causal depthwise convolution of width
 * dn_conv over each channel of q|k|v, continuing the sequence's last inputs
 * (its conv state), and SiLU; q and k L2-normalized per head, q scaled by
 * 1/sqrt(head dim); beta = sigmoid(beta), the log decay g = A softplus(alpha
 * + dt) (A = -exp(A_log) as stored). Per value head h (reading key head
 * h % k_heads in the converter's tiled order; h / (v_heads / k_heads) in a
 * folder's grouped one, dn_grouped) the delta rule on its state S [head_dim
 * keys, head_dim values]:
 *
 *   S_t = e^(g_t) S_(t-1) + k_t (beta_t (v_t - e^(g_t) S_(t-1)^T k_t))^T,
 *   o_t = S_t^T q_t
 *
 * A prompt chunk runs in the chunked form (chunks of DN_CHUNK positions,
 * ending at multiples of DN_CHUNK: within
 * a chunk the WY / UT transform T = (I + strictly-lower(beta k k^T decay))^-1
 * makes the chunk's corrections at once, and the state is carried from one
 * chunk to the next: the Gated DeltaNet paper's form, transformers'
 * torch_chunk_gated_delta_rule); a decode row (one row of its sequence) the
 * recurrent step (a prompt's rows, however few, the chunked form; a
 * prompt cut inside a chunk keeps a checkpoint and runs that chunk again
 * whole in its next step: "the checkpoint" below). Then o's RMSNorm per
 * head times the norm weight (as
 * stored: the converter does not widen it) times silu(z), and ssm_out into
 * proj. A sequence whose rows start at position 0 starts from a zero state.
 *
 * The state of a sequence (kvcache's recurrent group, in its slot,
 * kv_deltanet_state_bytes): [dn_conv - 1, channels] the convolution's last
 * inputs, oldest first, then per value head S as [key i][value j].
 * IGNITE_DELTANET=recurrent runs every row in the recurrent form (a test's
 * second path); IGNITE_DELTANET_TRACE=1 says on stderr which form each
 * sequence's rows ran in, and which instruction set's kernels (their body
 * is backend/cpu_deltanet_lanes.h, once per set: the same bits in each).
 * Covered by tests/cpu/test_deltanet.py (an fp64 numpy forward, token by
 * token, from transformers' recurrent form). */
#include "backend/cpu_layer.h"

#include "core/status.h"
#include "ops/exp_row.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a chunk of the chunked form (flash-linear-attention's and
 * llama.cpp's 64; the engine's prompt cuts fall on its multiples). */
#define DN_CHUNK BACKEND_STATE_CHUNK
_Static_assert(DN_CHUNK == KV_DELTANET_CHUNK, "the checkpoint holds a chunk's rows");

struct dn_kernels;

/* What every job of a layer's step reads. */
struct dn_job {
    struct cpu_step *s;
    const struct model_layer *L;
    int64_t layer;
    int64_t n;                   /* the step's rows */
    int64_t C, Hk, Hv, D, K;     /* channels, key heads, value heads, head dim, kernel */
    int64_t conv_w;              /* channels of a convolution item (conv_width) */
    float *qkv, *z, *beta, *g, *out; /* [n, C], [n, Hv*D], [n, Hv], [n, Hv], [n, Hv*D] */
    bool recurrent;              /* every row by the recurrent step */
    bool ckpt;                   /* the store keeps a checkpoint (kv_deltanet_ckpt_bytes) */
    int ckpt_read, ckpt_take;    /* the step's slots continuing it and keeping it (backend.h,
                                  * struct backend_ckpt_plan; -1: none) */
    bool grouped;                /* value heads grouped by key head (struct model_layer) */
    const struct dn_kernels *kern; /* the instruction set's (dn_kernels_here) */
};

/* The key head value head h reads: tiled (a GGUF: h % Hk) or grouped (a
 * folder: h / (Hv / Hk)); the same pairs, the value heads numbered apart. */
static int64_t key_head(const struct dn_job *j, int64_t h)
{
    return j->grouped ? h / (j->Hv / j->Hk) : h % j->Hk;
}

static float *conv_state(const struct dn_job *j, int64_t slot)
{
    return kv_store_state(j->s->kv, j->layer, slot);
}

static float *mat_state(const struct dn_job *j, int64_t slot, int64_t h)
{
    return conv_state(j, slot) + (j->K - 1) * j->C + h * j->D * j->D;
}

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Eight and sixteen floats at any alignment (GCC's vector extension): the
 * lanes of the AVX2 and baseline kernels, and of the AVX-512 ones
 * (backend/cpu_deltanet_lanes.h). */
typedef float dn_v8 __attribute__((vector_size(32), aligned(4)));
typedef float dn_v16 __attribute__((vector_size(64), aligned(4)));

/* ---- the convolution: items are (sequence, block of conv_w channels) --------- */

/* The widest block of channels a convolution item takes. An item walks its
 * sequence's rows, C floats apart (24 KiB on Qwen3.5-0.8B), and each row's
 * block starts on a new page: blocks of 64 channels (256 bytes) a row made
 * the walk wait on memory and TLB misses (the convolution was 14 % of a
 * pp4096 on Qwen3.5-0.8B, 2 threads), blocks of 512 take 8x fewer. */
#define DN_CONV_W_MAX 512

/* Channels of a convolution item: a multiple of 64 up to DN_CONV_W_MAX,
 * leaving at least four items a thread for a lone sequence. Each element's
 * operations are the same at any width: the same bits. */
static int64_t conv_width(int64_t C, int threads)
{
    int64_t w = (C + 63) / 64 / (4 * (int64_t)threads);
    w = w < 1 ? 1 : w > DN_CONV_W_MAX / 64 ? DN_CONV_W_MAX / 64 : w;
    return 64 * w;
}

/* Floats of a thread's scratch the convolution takes: the kernel
 * transposed [K][W], the ring of the last K - 1 inputs [K - 1][W], a row's
 * -outputs, then their exponentials [W]. */
static int64_t conv_scratch_floats(int64_t K)
{
    return 2 * K * DN_CONV_W_MAX;
}

/* ---- per row: L2 norms of q and k, beta and the decay ------------------------- */

/* ss[k] = the sum of x_k[i]^2 in double, i ascending, for the four rows
 * x_k = x + k stride of n floats: four chains of adds side by side where
 * each row's one add waited on its last (the same sums, in the same order,
 * as a row alone). */
static inline __attribute__((always_inline)) void
sumsq4(const float *x, int64_t stride, int64_t n, double ss[4])
{
    const float *x0 = x, *x1 = x0 + stride, *x2 = x1 + stride, *x3 = x2 + stride;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += (double)x0[i] * x0[i];
        s1 += (double)x1[i] * x1[i];
        s2 += (double)x2[i] * x2[i];
        s3 += (double)x3[i] * x3[i];
    }
    ss[0] = s0, ss[1] = s1, ss[2] = s2, ss[3] = s3;
}

/* ss[h] = sumsq4's sum of row h of the n_rows rows of n floats, stride
 * apart, four at a time. */
static inline __attribute__((always_inline)) void
sumsq_rows(const float *x, int64_t stride, int64_t n_rows, int64_t n, double *ss)
{
    int64_t h = 0;
    for (; h + 4 <= n_rows; h += 4)
        sumsq4(x + h * stride, stride, n, ss + h);
    for (; h < n_rows; h++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)x[h * stride + i] * x[h * stride + i];
        ss[h] = s;
    }
}

/* The thread's scratch as doubles past its first `floats` floats. */
static double *scratch_doubles(const struct dn_job *j, int thread, int64_t floats)
{
    return (double *)(void *)(ops_ctx_scratch(j->s->ops, thread) + (floats + 1) / 2 * 2);
}

/* ---- the delta rule: items are (sequence, value head) ------------------------- */

/* Row t's q, k (of key head kh) and v (of value head h). */
#define QROW(j, t, kh) ((j)->qkv + (t) * (j)->C + (kh) * (j)->D)
#define KROW(j, t, kh) ((j)->qkv + (t) * (j)->C + ((j)->Hk + (kh)) * (j)->D)
#define VROW(j, t, h) ((j)->qkv + (t) * (j)->C + (2 * (j)->Hk + (h)) * (j)->D)

/* A chunk's rows of one head as chunk_rows reads them: row i's q at
 * q + (i - p0) qs (rows from p0 on), its k at k + i ks, v at v + i vs, its
 * decay and beta at g[i gs], beta[i gs]; row i's output goes to
 * o + (i - p0) os. */
struct dn_rows {
    const float *q, *k, *v, *g, *beta;
    int64_t qs, ks, vs, gs;
    float *o;
    int64_t os;
};

/* ---- the kernels of each instruction set -------------------------------------- */

/* What a set runs (backend/cpu_deltanet_lanes.h). */
struct dn_kernels {
    void (*conv_task)(void *arg, int64_t i0, int64_t i1, int thread);
    void (*gates_task)(void *arg, int64_t r0, int64_t r1, int thread);
    void (*norm_task)(void *arg, int64_t r0, int64_t r1, int thread);
    void (*chunk_rows)(const struct dn_job *j, float *S, const struct dn_rows *r, int64_t c,
                       int64_t p0, float *sc);
    void (*step_row)(const struct dn_job *j, float *S, int64_t t, int64_t h, float *kv);
    const char *name; /* IGNITE_DELTANET_TRACE's */
};

/* The baseline: 8-float vectors (two SSE registers on x86-64). */
#define DN_TARGET
#define DN_NAME(name) name##_base
#define DN_LANES 8
#define DN_VEC dn_v8
#define DN_SET_NAME "baseline"
#include "backend/cpu_deltanet_lanes.h"
#undef DN_TARGET
#undef DN_NAME
#undef DN_LANES
#undef DN_VEC
#undef DN_SET_NAME

#if OPS_SIMD_CLONES_ON
/* AVX2 and FMA (x86-64-v3): 8-float vectors, one ymm register (FMA not
 * contracted: -ffp-contract=off keeps every set's bits). */
#define DN_TARGET __attribute__((target("arch=x86-64-v3")))
#define DN_NAME(name) name##_avx2
#define DN_LANES 8
#define DN_VEC dn_v8
#define DN_SET_NAME "avx2"
#include "backend/cpu_deltanet_lanes.h"
#undef DN_TARGET
#undef DN_NAME
#undef DN_LANES
#undef DN_VEC
#undef DN_SET_NAME

/* AVX-512 (x86-64-v4): 16-float vectors, one zmm register; two 512-bit FP
 * pipes (Xeons, Zen 5) run them at twice the AVX2 set's rate. */
#define DN_TARGET __attribute__((target("arch=x86-64-v4")))
#define DN_NAME(name) name##_avx512
#define DN_LANES 16
#define DN_VEC dn_v16
#define DN_SET_NAME "avx512"
#include "backend/cpu_deltanet_lanes.h"
#undef DN_TARGET
#undef DN_NAME
#undef DN_LANES
#undef DN_VEC
#undef DN_SET_NAME
#endif

/* The set this CPU runs: AVX-512 where it has x86-64-v4 and IGNITE_SIMD
 * leaves ignite its AVX-512 kernels (unset, empty or avx512vnni), AVX2
 * where it has x86-64-v3 and IGNITE_SIMD is not scalar (ops/norm_rope.c's
 * rule), else the baseline. Every set gives the same bits. */
static const struct dn_kernels *dn_kernels_chosen = &dn_kernels_base;
static pthread_once_t dn_kernels_once = PTHREAD_ONCE_INIT;

static void dn_kernels_choose(void)
{
#if OPS_SIMD_CLONES_ON
    const char *cap = getenv("IGNITE_SIMD");
    bool avx512 = !cap || !*cap || !strcmp(cap, "avx512vnni");
    __builtin_cpu_init();
    if (avx512 && __builtin_cpu_supports("x86-64-v4"))
        dn_kernels_chosen = &dn_kernels_avx512;
    else if (ops_qmm_best_isa() != QMM_SCALAR && __builtin_cpu_supports("x86-64-v3"))
        dn_kernels_chosen = &dn_kernels_avx2;
#endif
}

/* Chosen once a process, as ops_qmm_best_isa is (not per layer and step). */
static const struct dn_kernels *dn_kernels_here(void)
{
    pthread_once(&dn_kernels_once, dn_kernels_choose);
    return dn_kernels_chosen;
}

/* The job's set's kernels, under the names the steps below call. */
static void conv_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    ((const struct dn_job *)arg)->kern->conv_task(arg, i0, i1, thread);
}

static void gates_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    ((const struct dn_job *)arg)->kern->gates_task(arg, r0, r1, thread);
}

static void norm_task(void *arg, int64_t r0, int64_t r1, int thread)
{
    ((const struct dn_job *)arg)->kern->norm_task(arg, r0, r1, thread);
}

static void chunk_rows(const struct dn_job *j, float *S, const struct dn_rows *r, int64_t c,
                       int64_t p0, float *sc)
{
    j->kern->chunk_rows(j, S, r, c, p0, sc);
}

static void step_row(const struct dn_job *j, float *S, int64_t t, int64_t h, float *kv)
{
    j->kern->step_row(j, S, t, h, kv);
}

/* Floats of chunk_rows's scratch. */
static int64_t dn_chunk_floats(int64_t D)
{
    return DN_CHUNK + 2 * DN_CHUNK * DN_CHUNK + 6 * DN_CHUNK * D + D;
}

/* and the rows of a chunk run again gathered after it: k, v [DN_CHUNK, D],
 * g, beta [DN_CHUNK] */
static int64_t dn_scratch_floats(int64_t D)
{
    return dn_chunk_floats(D) + 2 * DN_CHUNK * D + 2 * DN_CHUNK;
}

/* ---- the checkpoint of a prompt cut mid-chunk ---------------------------------
 *
 * A chunk's state is the whole chunk's only when its rows ran in one
 * chunk_rows. When a step ends a prompt's rows inside a chunk (a row budget
 * under 64, decode rows filling the step), the sequence's checkpoint keeps
 * S as it was where that chunk began and the chunk's rows so far (their
 * keys, values, decay and beta: what the state update reads); the prompt's
 * next step runs the whole chunk from there, those rows first with their
 * outputs not written (they are the same bits as they were: chunk_rows),
 * so every chunk's state is the bits of the prompt in one step whatever
 * cut it. S itself is always the state after the step's last row (a
 * decode row, a saved cache read it). The convolution needs nothing: each
 * of its rows is the same operations at any cut. */

/* The header of the checkpoint (KV_STATE_ALIGN bytes; zero: none): the
 * position of the chunk's first row, how many rows it holds, whose slot.
 * One checkpoint serves the pool: backend_step says which sequence of the
 * step continues it (ckpt_read) and which keeps a new one (ckpt_take);
 * no other sequence reads or touches it. */

_Static_assert(sizeof(struct kv_ckpt_head) <= KV_STATE_ALIGN, "the header fits its bytes");

/* Floats of a pending row: k [Hk D], v [Hv D], g [Hv], beta [Hv]. */
static int64_t ckpt_row_floats(const struct dn_job *j)
{
    return (j->Hk + j->Hv) * j->D + 2 * j->Hv;
}

static float *ckpt_mat(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t h)
{
    return (float *)(void *)((char *)ck + KV_STATE_ALIGN) + h * j->D * j->D;
}

static float *ckpt_row(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t i)
{
    return ckpt_mat(j, ck, j->Hv) + i * ckpt_row_floats(j);
}

/* The checkpoint where q's prompt continues or keeps it this step; else NULL. */
static struct kv_ckpt_head *seq_ckpt(const struct dn_job *j, const struct backend_seq *q)
{
    if (!j->ckpt || !q->prompt || (q->slot != j->ckpt_read && q->slot != j->ckpt_take))
        return NULL;
    return kv_store_ckpt(j->s->kv, j->layer);
}

/* Rows of q's unfinished chunk an earlier step ran (0: none): the
 * checkpoint's where it is q's slot's and ends where q's rows start. */
static int64_t ckpt_pending(const struct dn_job *j, const struct backend_seq *q)
{
    const struct kv_ckpt_head *ck = q->slot == j->ckpt_read ? seq_ckpt(j, q) : NULL;
    return ck && q->pos0 > 0 && ck->n > 0 && ck->slot == q->slot && ck->pos + ck->n == q->pos0
               ? ck->n
               : 0;
}

/* Rows [0, c) of head h's chunk whose first p rows are the checkpoint's,
 * gathered into g0 (the scratch after chunk_rows's), the rest the step's
 * from row t; rows p on output. */
static struct dn_rows gather_rows(const struct dn_job *j, struct kv_ckpt_head *ck, int64_t p,
                                  int64_t t, int64_t c, int64_t h, float *g0)
{
    int64_t D = j->D, kh = key_head(j, h), kv = (j->Hk + j->Hv) * D;
    float *K = g0, *V = K + DN_CHUNK * D, *G = V + DN_CHUNK * D, *B = G + DN_CHUNK;
    for (int64_t i = 0; i < p; i++) {
        const float *row = ckpt_row(j, ck, i);
        memcpy(K + i * D, row + kh * D, (size_t)D * sizeof *K);
        memcpy(V + i * D, row + (j->Hk + h) * D, (size_t)D * sizeof *V);
        G[i] = row[kv + h];
        B[i] = row[kv + j->Hv + h];
    }
    for (int64_t i = p; i < c; i++) {
        int64_t r = t + i - p;
        memcpy(K + i * D, KROW(j, r, kh), (size_t)D * sizeof *K);
        memcpy(V + i * D, VROW(j, r, h), (size_t)D * sizeof *V);
        G[i] = j->g[r * j->Hv + h];
        B[i] = j->beta[r * j->Hv + h];
    }
    return (struct dn_rows){.q = QROW(j, t, kh), .qs = j->C, .k = K, .ks = D, .v = V, .vs = D,
                            .g = G, .beta = B, .gs = 1,
                            .o = j->out + t * j->Hv * D + h * D, .os = j->Hv * D};
}

/* Rows [t, t + c) of the step, head h. */
static struct dn_rows step_rows(const struct dn_job *j, int64_t t, int64_t h)
{
    int64_t kh = key_head(j, h);
    return (struct dn_rows){.q = QROW(j, t, kh), .k = KROW(j, t, kh), .v = VROW(j, t, h),
                            .qs = j->C, .ks = j->C, .vs = j->C,
                            .g = j->g + t * j->Hv + h, .beta = j->beta + t * j->Hv + h,
                            .gs = j->Hv, .o = j->out + t * j->Hv * j->D + h * j->D,
                            .os = j->Hv * j->D};
}

static void rule_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct dn_job *j = arg;
    float *sc = ops_ctx_scratch(j->s->ops, thread);
    int64_t D = j->D;
    for (int64_t it = i0; it < i1; it++) {
        const struct backend_seq *q = &j->s->batch->seqs[it / j->Hv];
        int64_t h = it % j->Hv;
        float *S = mat_state(j, q->slot, h);
        if (j->recurrent || (q->n_rows == 1 && !q->prompt)) {
            for (int64_t t = 0; t < q->n_rows; t++)
                step_row(j, S, q->row0 + t, h, sc);
            continue;
        }
        struct kv_ckpt_head *ck = seq_ckpt(j, q);
        int64_t p = ckpt_pending(j, q), end = q->pos0 + q->n_rows;
        if (p) /* the unfinished chunk again, from its start */
            memcpy(S, ckpt_mat(j, ck, h), (size_t)(D * D) * sizeof *S);
        /* chunks end at multiples of DN_CHUNK positions: a prompt split
         * into steps anywhere runs the same chunks, bit for bit */
        for (int64_t pos = q->pos0 - p, c; pos < end; pos += c) {
            c = DN_CHUNK - pos % DN_CHUNK;
            c = end - pos < c ? end - pos : c;
            if (ck && q->slot == j->ckpt_take && pos + c == end && end % DN_CHUNK &&
                pos >= q->pos0)
                memcpy(ckpt_mat(j, ck, h), S, (size_t)(D * D) * sizeof *S);
            int64_t t = q->row0 + pos - q->pos0;
            if (pos < q->pos0) {
                struct dn_rows r = gather_rows(j, ck, p, q->row0, c, h, sc + dn_chunk_floats(D));
                chunk_rows(j, S, &r, c, p, sc);
            } else {
                struct dn_rows r = step_rows(j, t, h);
                chunk_rows(j, S, &r, c, 0, sc);
            }
        }
    }
}

/* After the delta rule: the taker's checkpoint holds its unfinished
 * chunk's rows (rule_task wrote S at its start); a holder continuing it
 * and keeping none gives it back; no other sequence touches it. */
static void ckpt_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    (void)thread;
    const struct dn_job *j = arg;
    int64_t kv = (j->Hk + j->Hv) * j->D;
    for (int64_t i = i0; i < i1; i++) {
        const struct backend_seq *q = &j->s->batch->seqs[i];
        struct kv_ckpt_head *ck = seq_ckpt(j, q);
        if (!ck)
            continue;
        int64_t p = ckpt_pending(j, q), end = q->pos0 + q->n_rows;
        if (q->slot != j->ckpt_take || end % DN_CHUNK == 0) {
            *ck = (struct kv_ckpt_head){0};
            continue;
        }
        /* the chunk's first position: a multiple of DN_CHUNK, or where the
         * rows began (the checkpoint's, else the step's first) */
        int64_t first = end / DN_CHUNK * DN_CHUNK;
        first = first < q->pos0 - p ? q->pos0 - p : first;
        int64_t from = first > q->pos0 ? first - q->pos0 : 0; /* its first row of the step */
        int64_t at = first - (q->pos0 - p) > 0 ? 0 : p;        /* and where that row goes */
        for (int64_t t = from; t < q->n_rows; t++) {
            float *row = ckpt_row(j, ck, at + t - from);
            int64_t r = q->row0 + t;
            memcpy(row, KROW(j, r, 0), (size_t)kv * sizeof *row); /* k then v */
            memcpy(row + kv, j->g + r * j->Hv, (size_t)j->Hv * sizeof *row);
            memcpy(row + kv + j->Hv, j->beta + r * j->Hv, (size_t)j->Hv * sizeof *row);
        }
        *ck = (struct kv_ckpt_head){.pos = first, .n = (int32_t)(end - first), .slot = q->slot};
    }
}

int64_t cpu_deltanet_scratch_floats(const struct model *m)
{
    int64_t floats = 0;
    for (int64_t l = 0; m->layers && l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET) {
            int64_t f = dn_scratch_floats(m->layers[l].dn_head_dim);
            int64_t fc = conv_scratch_floats(m->layers[l].dn_conv);
            f = fc > f ? fc : f;
            /* the gated norm's row and the sums of squares (norm_task,
             * gates_task) */
            int64_t hv = m->layers[l].dn_v_heads, hk = m->layers[l].dn_k_heads;
            int64_t fn = hv * m->layers[l].dn_head_dim + 2 + 2 * (hv > 2 * hk ? hv : 2 * hk);
            f = fn > f ? fn : f;
            floats = f > floats ? f : floats;
        }
    return floats;
}

/* Moves rows want[i] of the [n, w] array a to row i (want ascending). */
static void compact(float *a, int64_t w, const int64_t *want, int64_t n_want)
{
    for (int64_t i = 0; i < n_want; i++)
        if (want[i] != i)
            memmove(a + i * w, a + want[i] * w, (size_t)w * sizeof *a);
}

static void trace(const struct dn_job *j)
{
    const char *e = getenv("IGNITE_DELTANET_TRACE");
    if (!e || !*e || !strcmp(e, "0"))
        return;
    /* (not "deltanet:": the lines below are read by their fields) */
    fprintf(stderr, "deltanet kernels: layer %lld %s\n", (long long)j->layer, j->kern->name);
    for (int64_t i = 0; i < j->s->batch->n_seqs; i++) {
        const struct backend_seq *q = &j->s->batch->seqs[i];
        bool rec = j->recurrent || (q->n_rows == 1 && !q->prompt);
        int64_t end = q->pos0 + q->n_rows; /* chunks end at multiples of DN_CHUNK */
        long long chunks = (long long)((end + DN_CHUNK - 1) / DN_CHUNK - q->pos0 / DN_CHUNK);
        /* then the rows of an unfinished chunk run again from its checkpoint */
        fprintf(stderr, "deltanet: layer %lld slot %d pos %lld rows %lld %s %lld again %lld\n",
                (long long)j->layer, q->slot, (long long)q->pos0, (long long)q->n_rows,
                rec ? "recurrent" : "chunked", rec ? (long long)q->n_rows : chunks,
                rec ? 0LL : (long long)ckpt_pending(j, q));
    }
}

int64_t cpu_deltanet(struct cpu_step *s, int64_t layer, int64_t n, const int64_t *want,
                     int64_t n_want)
{
    struct ops_ctx *ctx = s->ops;
    const struct model *m = ops_ctx_model(ctx);
    const struct model_layer *L = &m->layers[layer];
    struct ops_buffers *b = ops_ctx_buffers(ctx);
    struct ops_pool *pool = ops_ctx_pool(ctx);
    const char *form = getenv("IGNITE_DELTANET");
    struct dn_job j = {.s = s, .L = L, .layer = layer, .n = n, .Hk = L->dn_k_heads,
                       .grouped = L->dn_grouped,
                       .Hv = L->dn_v_heads, .D = L->dn_head_dim, .K = L->dn_conv,
                       .recurrent = form && !strcmp(form, "recurrent"),
                       .kern = dn_kernels_here()};
    j.ckpt = !j.recurrent && s->kv->memory->layers[layer].ckpt_bytes;
    j.ckpt_read = s->ckpt ? s->ckpt->read : -1;
    j.ckpt_take = s->ckpt ? s->ckpt->take : -1;
    j.C = (2 * j.Hk + j.Hv) * j.D;
    j.conv_w = conv_width(j.C, ops_pool_threads(pool));
    int64_t vd = j.Hv * j.D;
    j.qkv = b->dn;
    j.z = j.qkv + n * j.C;
    j.beta = j.z + n * vd;
    j.g = j.beta + n * j.Hv;
    j.out = j.g + n * j.Hv;
    IG_ASSERT(n == s->batch->n_rows);

    const struct model_weight *w[4] = {&L->w[LAYER_DN_QKV], &L->w[LAYER_DN_Z],
                                       &L->w[LAYER_DN_BETA], &L->w[LAYER_DN_ALPHA]};
    float *y[4] = {j.qkv, j.z, j.beta, j.g};
    cpu_rows_then_matmul(ctx, L, cpu_norm_rows, LAYER_ATTN_NORM, n, m->hp.n_embd, 4, w, b->xn,
                         y);
    /* a sequence that starts here starts from nothing */
    size_t bytes = kv_deltanet_state_bytes(L);
    for (int64_t i = 0; i < s->batch->n_seqs; i++)
        if (s->batch->seqs[i].pos0 == 0)
            memset(conv_state(&j, s->batch->seqs[i].slot), 0, bytes);
    trace(&j);
    ops_pool_run(pool, s->batch->n_seqs * ((j.C + j.conv_w - 1) / j.conv_w), 1, conv_task, &j);
    ops_pool_run(pool, n, 16, gates_task, &j);
    ops_pool_run(pool, s->batch->n_seqs * j.Hv, 1, rule_task, &j);
    ops_pool_run(pool, s->batch->n_seqs, 1, ckpt_task, &j);
    ops_pool_run(pool, n, 16, norm_task, &j);

    if (want) { /* only these rows are read after this layer's mixing */
        compact(b->x, m->hp.n_embd, want, n_want);
        compact(j.out, vd, want, n_want);
        n = n_want;
    }
    ops_matmul(ctx, &L->w[LAYER_DN_OUT], j.out, n, b->proj); /* [n, n_embd] */
    return n;
}
