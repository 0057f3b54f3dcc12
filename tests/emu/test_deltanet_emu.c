/* tests/emu/test_deltanet_emu.c: Qwen3.5's hybrid layers on the CUDA
 * backend under the emulator.
 *
 * Kernels (ops/gpu_deltanet.h) against their CPU twins, bit for bit, on two
 * sequences of one step (one starting at position 0 over a slot of garbage,
 * one continuing its state) and a padding entry: the convolution, the L2
 * norms and gates, the delta rule (head dims 64 and 128, the tiled and the
 * grouped value heads), the gated norm, gated attention's split and gate;
 * each output and both slots' states compared. Mutants of the kernel source
 * (tests/emu/mutate.cmake: the state not written back, the state read at
 * position 0, the output gate's sign, the decay's sign) must differ.
 * The chunked delta rule (gk_dn_chunk) on 70 rows from position 0 and 100
 * continuing at 37 (chunk boundaries, partial chunks) beside a decode row
 * the recurrent kernel takes: against its twin bit for bit and against the
 * recurrent kernel within CHUNK_TOL (f16 tensor-core operands); its mutants
 * (the state not decayed across a chunk boundary, the state not carried to
 * the next chunk) beyond 10x that bound.
 * The checkpoint (a prompt cut inside a chunk, gk_dn_ckpt): a prompt of 128
 * rows in steps of 37, 13, 37 and 41, each beside a decode row, gives the
 * outputs and the state of the prompt in one step bit for bit, and each step
 * the twins' bits (outputs, states, checkpoints); mutants (the prompt
 * continuing from the cut state, S at the chunk's start not kept, a
 * continued chunk's rows written over its first) must differ.
 * Under IGNITE_PDL=1 (test_pdl) every kernel of both files keeps the plain
 * launch's bits with its inputs hidden until its wait (tests/emu/pdl_hide.h).
 *
 * The backend (argv[1]: bench/random_gguf.py's qwen35 tiny F16 file: 3
 * DeltaNet layers and a gated attention layer, head dims 64) against the CPU
 * backend (f32 cache, exact matmuls, the chunked DeltaNet form): 40 ids
 * prefilled in chunks of 33 and 7, 5 decode steps (backend_checks.h's bound
 * for f16 weights, greedy equal), the exported DeltaNet states against the
 * CPU's, two sequences in one step (one decoding while the other
 * prefills); on the device alone a prompt in one step against the same in
 * chunks, and two requests batched against each alone (their states apart);
 * a sequence's cache and states exported and imported into another
 * backend continuing bit for bit; a prompt of 50 in steps of 37 and 13 rows
 * against it in one step (the states bit for bit); experts with a dense MLP
 * beside them refused. Label emu. Built
 * again as tests/gpu's test_deltanet_gpu: the backend part on a GPU
 * (scripts/gpu/qwen35.sh runs it on the tiny file). */
#include "backend/backend.h"
#include "core/half.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "ops/gpu_deltanet.h"
#include "tests/emu/backend_checks.h"
#include "tests/emu/pdl_hide.h"
#if defined(IG_EMU_BACKEND)
#include "dn_mutants.h" /* DN_MUTANTS(X): tests/emu/CMakeLists.txt */
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernels against twins (emulated: host pointers) ------------------------------- */
#if defined(IG_EMU_BACKEND)

/* The launchers of one build of ops/gpu_deltanet.cu: the real one or a
 * mutant copy (gk_<mutant>_dn_*, tests/emu/CMakeLists.txt). */
struct dn_kernels {
    const char *name;
    int (*conv)(const struct gk_dn_shape *, float *, const float *, const struct gk_dn_seq *,
                int64_t, void *);
    int (*gates)(const struct gk_dn_shape *, float *, float *, float *, const float *,
                 const float *, int64_t, void *);
    int (*rule)(const struct gk_dn_shape *, const float *, const float *, const float *, float *,
                const struct gk_dn_seq *, int64_t, void *);
    int (*gate_apply)(uint16_t *, const float *, int64_t, void *);
};

#define MUTANT(m)                                                                             \
    int gk_##m##_dn_conv(const struct gk_dn_shape *, float *, const float *,                \
                         const struct gk_dn_seq *, int64_t, void *);                          \
    int gk_##m##_dn_gates(const struct gk_dn_shape *, float *, float *, float *, const float *, \
                          const float *, int64_t, void *);                                     \
    int gk_##m##_dn_rule(const struct gk_dn_shape *, const float *, const float *,           \
                         const float *, float *, const struct gk_dn_seq *, int64_t, void *);   \
    int gk_##m##_gate_apply(uint16_t *, const float *, int64_t, void *);
#define MUTANT_ROW(m) {#m, gk_##m##_dn_conv, gk_##m##_dn_gates, gk_##m##_dn_rule, gk_##m##_gate_apply},
DN_MUTANTS(MUTANT)

static float *rnd(uint64_t *st, int64_t n, float scale)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * test_rand_f(st);
    return x;
}

static float *dup(const float *x, int64_t n)
{
    float *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

static bool same(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

/* One step's case through kernels k and the twins; returns whether every
 * output and state matched bit for bit (and the launches succeeded). */
static bool kernel_case(const struct dn_kernels *k, int64_t Hk, int64_t Hv, int64_t D,
                        int grouped, uint64_t seed)
{
    uint64_t st = seed;
    struct gk_dn_shape s = {.Hk = Hk, .Hv = Hv, .D = D, .K = 4, .grouped = grouped};
    s.C = (2 * Hk + Hv) * D;
    s.state_floats = (s.K - 1) * s.C + Hv * D * D + 7; /* a slot's stride past its state */
    const int64_t n = 6, vd = Hv * D, slots = 2;
    /* slot 1 starts at 0 over garbage (NaN: must not be read), slot 0 continues */
    const struct gk_dn_seq seqs[3] = {{0, 5, 0, 1, 0, 0}, {5, 1, 9, 0, 0, 0},
                                       {6, 0, -1, 0, 0, 0}};
    float *state = rnd(&st, slots * s.state_floats, 0.5f);
    for (int64_t i = 0; i < s.state_floats; i++)
        state[s.state_floats + i] = NAN;
    float *qkv = rnd(&st, n * s.C, 1.0f), *w = rnd(&st, s.C * s.K, 0.6f);
    float *beta = rnd(&st, n * Hv, 2.0f), *alpha = rnd(&st, n * Hv, 2.0f);
    float *dt = rnd(&st, Hv, 1.0f), *A = rnd(&st, Hv, 1.0f), *z = rnd(&st, n * vd, 2.0f);
    float *nw = rnd(&st, D, 1.0f);
    for (int64_t h = 0; h < Hv; h++)
        A[h] = -fabsf(A[h]) - 0.1f; /* -exp(A_log) */
    float *state_r = dup(state, slots * s.state_floats), *qkv_r = dup(qkv, n * s.C);
    float *beta_r = dup(beta, n * Hv), *alpha_r = dup(alpha, n * Hv);
    float *out = calloc((size_t)(n * vd), sizeof *out), *out_r = calloc((size_t)(n * vd), 4);
    uint16_t *y = calloc((size_t)(n * vd), 2), *y_r = calloc((size_t)(n * vd), 2);
    bool ok = true;
    s.state = state;
    ok &= k->conv(&s, qkv, w, seqs, 3, NULL) == IG_OK;
    ok &= k->gates(&s, qkv, beta, alpha, dt, A, n, NULL) == IG_OK;
    ok &= k->rule(&s, qkv, beta, alpha, out, seqs, 3, NULL) == IG_OK;
    ok &= IG_DEV(gk_dn_norm)(&s, out, z, nw, 1e-6f, n, y, NULL) == IG_OK;
    s.state = state_r;
    gk_dn_conv_ref(&s, qkv_r, w, seqs, 3);
    gk_dn_gates_ref(&s, qkv_r, beta_r, alpha_r, dt, A, n);
    gk_dn_rule_ref(&s, qkv_r, beta_r, alpha_r, out_r, seqs, 3);
    gk_dn_norm_ref(&s, out_r, z, nw, 1e-6f, n, y_r);
    ok &= same(qkv, qkv_r, (size_t)(n * s.C) * 4) && same(beta, beta_r, (size_t)(n * Hv) * 4) &&
          same(alpha, alpha_r, (size_t)(n * Hv) * 4);
    ok &= same(out, out_r, (size_t)(n * vd) * 4) && same(y, y_r, (size_t)(n * vd) * 2);
    ok &= same(state, state_r, (size_t)(slots * s.state_floats) * 4);
    for (int64_t i = 0; i < n * vd; i++) /* the NaN slot was not read */
        ok &= isfinite(out[i]);
    /* gated attention: 3 heads of D, 1 KV head */
    int64_t nh = 3, q_dim = nh * D, raw_w = 2 * q_dim + 2 * D;
    float *raw = rnd(&st, n * raw_w, 3.0f), *qkvc = calloc((size_t)(n * (q_dim + 2 * D)), 4);
    float *qkvc_r = calloc((size_t)(n * (q_dim + 2 * D)), 4), *gate = calloc((size_t)(n * q_dim), 4);
    float *gate_r = calloc((size_t)(n * q_dim), 4);
    uint16_t *att = malloc((size_t)(n * q_dim) * 2), *att_r = malloc((size_t)(n * q_dim) * 2);
    for (int64_t i = 0; i < n * q_dim; i++)
        att[i] = att_r[i] = ig_f32_to_f16(2.0f * test_rand_f(&st));
    ok &= IG_DEV(gk_gate_split)(raw, n, nh, 1, D, qkvc, gate, NULL) == IG_OK;
    gk_gate_split_ref(raw, n, nh, 1, D, qkvc_r, gate_r);
    ok &= k->gate_apply(att, gate, n * q_dim, NULL) == IG_OK;
    gk_gate_apply_ref(att_r, gate_r, n * q_dim);
    ok &= same(qkvc, qkvc_r, (size_t)(n * (q_dim + 2 * D)) * 4) &&
          same(gate, gate_r, (size_t)(n * q_dim) * 4) && same(att, att_r, (size_t)(n * q_dim) * 2);
    void *bufs[] = {state, qkv, w, beta, alpha, dt, A, z, nw, state_r, qkv_r, beta_r, alpha_r,
                    out, out_r, y, y_r, raw, qkvc, qkvc_r, gate, gate_r, att, att_r};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return ok;
}

/* ---- the chunked form (ops/gpu_deltanet_chunk.cu) ---------------------------------- */

typedef int (*dn_chunk_fn)(const struct gk_dn_shape *, const float *, const float *,
                           const float *, float *, const struct gk_dn_seq *, int64_t, void *);
typedef int (*dn_ckpt_fn)(const struct gk_dn_shape *, const float *, const float *,
                          const float *, const struct gk_dn_seq *, int64_t, void *);
#define CHUNK_MUTANT(m)                                                                       \
    int gk_##m##_dn_chunk(const struct gk_dn_shape *, const float *, const float *,          \
                          const float *, float *, const struct gk_dn_seq *, int64_t, void *); \
    int gk_##m##_dn_ckpt(const struct gk_dn_shape *, const float *, const float *,           \
                         const float *, const struct gk_dn_seq *, int64_t, void *);
#define CHUNK_MUTANT_ROW(m) {#m, gk_##m##_dn_chunk},
#define CKPT_MUTANT_ROW(m) {#m, gk_##m##_dn_chunk, gk_##m##_dn_ckpt},
DNC_MUTANTS(CHUNK_MUTANT)
DNK_MUTANTS(CHUNK_MUTANT)

/* Bound of the chunked form against the recurrent one (max |d| / max |rec| of
 * the outputs and of the states): the f16 operands of its products (q, k,
 * T, W, v_new, S: 2^-11 each) against the recurrent kernel's f32. */
#define CHUNK_TOL 2e-3

/* One step of q, k (L2-normed), v, beta and the log decay over rows of
 * sequences: 70 rows from position 0 (a chunk and a tail of 6, in a slot
 * of NaN), 100 continuing at 37 (a 27-row chunk to the boundary, one of 64, a
 * tail of 9), a decode row and a padding entry. Split, `chunk` takes the
 * first two (marked chunked) and the recurrent kernel the decode row: against the
 * twins (gk_dn_chunk_ref, gk_dn_rule_ref) bit for bit when *exact, and
 * against the recurrent kernel on every row: the worst relative error of the
 * outputs and states returned (the recurrent form by its twin, which
 * test_kernels shows equal to the kernel bit for bit). */
static double chunk_case(dn_chunk_fn chunk, int64_t Hk, int64_t Hv, int64_t D, int grouped,
                         uint64_t seed, bool *exact)
{
    uint64_t st = seed;
    struct gk_dn_shape s = {.Hk = Hk, .Hv = Hv, .D = D, .K = 4, .grouped = grouped};
    s.C = (2 * Hk + Hv) * D;
    s.state_floats = (s.K - 1) * s.C + Hv * D * D + 5;
    const struct gk_dn_seq seqs[4] = {{0, 70, 0, 1, 1, 0}, {70, 100, 37, 0, 1, 0},
                                      {170, 1, 60, 2, 0, 0}, {171, 0, -1, 0, 0, 0}};
    const int64_t n = 171, vd = Hv * D, slots = 3, nf = slots * s.state_floats;
    float *state = rnd(&st, nf, 0.3f), *qkv = rnd(&st, n * s.C, 1.0f);
    float *beta = rnd(&st, n * Hv, 1.0f), *g = rnd(&st, n * Hv, 1.0f);
    for (int64_t i = 0; i < s.state_floats; i++)
        state[s.state_floats + i] = NAN;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t hh = 0; hh < 2 * Hk; hh++) { /* as gk_dn_gates leaves them */
            float *x = qkv + t * s.C + hh * D, ss = 0;
            for (int64_t d = 0; d < D; d++)
                ss += x[d] * x[d];
            float r = 1.0f / sqrtf(ss + 1e-6f) * (hh < Hk ? 1.0f / sqrtf((float)D) : 1.0f);
            for (int64_t d = 0; d < D; d++)
                x[d] *= r;
        }
        for (int64_t h = 0; h < Hv; h++) {
            beta[t * Hv + h] = 0.5f + 0.5f * beta[t * Hv + h];
            g[t * Hv + h] = -0.15f * (1.0f + g[t * Hv + h]); /* decay e^g in (0.74, 1] */
        }
    }
    float *st_k = dup(state, nf), *st_r = dup(state, nf), *st_rec = dup(state, nf);
    float *out = calloc((size_t)(n * vd), 4), *out_r = calloc((size_t)(n * vd), 4);
    float *out_rec = calloc((size_t)(n * vd), 4);
    s.split = 1;
    s.state = st_k;
    bool ok = chunk(&s, qkv, beta, g, out, seqs, 4, NULL) == IG_OK &&
              IG_DEV(gk_dn_rule)(&s, qkv, beta, g, out, seqs, 4, NULL) == IG_OK;
    s.state = st_r;
    gk_dn_chunk_ref(&s, qkv, beta, g, out_r, seqs, 4);
    gk_dn_rule_ref(&s, qkv, beta, g, out_r, seqs, 4);
    *exact = ok && same(out, out_r, (size_t)(n * vd) * 4) && same(st_k, st_r, (size_t)nf * 4);
    s.split = 0; /* the recurrent kernel's twin (equal to it: test_kernels) on every row */
    s.state = st_rec;
    gk_dn_rule_ref(&s, qkv, beta, g, out_rec, seqs, 4);
    double e = ok ? 0 : INFINITY;
    for (int64_t i = 0; i < n * vd; i++)
        e = isfinite(out[i]) ? e : INFINITY; /* the NaN slot was not read */
    e = fmax(e, test_rel_err(out, out_rec, n * vd));
    for (int64_t sl = 0; sl < 2; sl++) { /* the two chunked sequences' heads */
        const float *a = st_k + sl * s.state_floats + (s.K - 1) * s.C;
        e = fmax(e, test_rel_err(a, st_rec + (a - st_k), Hv * D * D));
    }
    void *bufs[] = {state, qkv, beta, g, st_k, st_r, st_rec, out, out_r, out_rec};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return e;
}

/* A prompt of 70 rows in one step, then cut where the engine cuts a hybrid's
 * prompt (64 rows, then 6 in a step of their own), both through the chunked
 * kernel: the outputs and the state bit for bit. With the 6 rows marked for
 * the recurrent kernel (the rule before prompts were marked: under
 * GK_DN_CHUNK_MIN rows) they are not, which shows the comparison can fail. */
static bool cut_case(bool tail_chunked)
{
    uint64_t st = 31;
    struct gk_dn_shape s = {.Hk = 1, .Hv = 1, .D = 64, .K = 4, .split = 1};
    s.C = 3 * s.D;
    s.state_floats = (s.K - 1) * s.C + s.D * s.D;
    const int64_t n = 70, vd = s.D;
    float *qkv = rnd(&st, n * s.C, 1.0f), *beta = rnd(&st, n, 1.0f), *g = rnd(&st, n, 1.0f);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t hh = 0; hh < 2; hh++) {
            float *x = qkv + t * s.C + hh * s.D, ss = 0;
            for (int64_t d = 0; d < s.D; d++)
                ss += x[d] * x[d];
            for (int64_t d = 0; d < s.D; d++)
                x[d] /= sqrtf(ss + 1e-6f);
        }
        beta[t] = 0.5f + 0.5f * beta[t];
        g[t] = -0.15f * (1.0f + g[t]);
    }
    float *st_one = calloc((size_t)s.state_floats, 4), *st_cut = calloc((size_t)s.state_floats, 4);
    float *out_one = calloc((size_t)(n * vd), 4), *out_cut = calloc((size_t)(n * vd), 4);
    const struct gk_dn_seq one = {0, 70, 0, 0, 1, 0}, head = {0, 64, 0, 0, 1, 0},
                           tail = {64, 6, 64, 0, tail_chunked, 0};
    s.state = st_one;
    bool ok = IG_DEV(gk_dn_chunk)(&s, qkv, beta, g, out_one, &one, 1, NULL) == IG_OK;
    s.state = st_cut;
    ok = ok && IG_DEV(gk_dn_chunk)(&s, qkv, beta, g, out_cut, &head, 1, NULL) == IG_OK &&
         IG_DEV(gk_dn_chunk)(&s, qkv, beta, g, out_cut, &tail, 1, NULL) == IG_OK &&
         IG_DEV(gk_dn_rule)(&s, qkv, beta, g, out_cut, &tail, 1, NULL) == IG_OK;
    ok = ok && same(out_one, out_cut, (size_t)(n * vd) * 4) &&
         same(st_one, st_cut, (size_t)s.state_floats * 4);
    void *bufs[] = {qkv, beta, g, st_one, st_cut, out_one, out_cut};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return ok;
}

/* q, k (L2-normed), v, beta and the log decay of n rows as gk_dn_gates
 * leaves them (the decay e^g in (0.74, 1]). */
static void dn_rows(uint64_t *st, const struct gk_dn_shape *s, int64_t n, float **qkv,
                    float **beta, float **g)
{
    *qkv = rnd(st, n * s->C, 1.0f), *beta = rnd(st, n * s->Hv, 1.0f), *g = rnd(st, n * s->Hv, 1.0f);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t hh = 0; hh < 2 * s->Hk; hh++) {
            float *x = *qkv + t * s->C + hh * s->D, ss = 0;
            for (int64_t d = 0; d < s->D; d++)
                ss += x[d] * x[d];
            for (int64_t d = 0; d < s->D; d++)
                x[d] /= sqrtf(ss + 1e-6f);
        }
        for (int64_t h = 0; h < s->Hv; h++) {
            (*beta)[t * s->Hv + h] = 0.5f + 0.5f * (*beta)[t * s->Hv + h];
            (*g)[t * s->Hv + h] = -0.15f * (1.0f + (*g)[t * s->Hv + h]);
        }
    }
}

/* The checkpoint kernels of one build of ops/gpu_deltanet_chunk.cu. */
struct dnk_kernels {
    const char *name;
    dn_chunk_fn chunk;
    dn_ckpt_fn ckpt;
};

#define CK_ROWS 128
#define CK_SLOTS 3

/* One step of a prompt's rows [pos, pos + len) in slot `slot`, marked
 * `flags` (GK_DN_CKPT_READ, _KEEP: backend_step's plan), beside a decode
 * row of slot 2 (which leaves the pool's one checkpoint alone: its header
 * is the prompt's after a step that keeps it, zeros after one that gives
 * it back; checked) through k's chunk, the recurrent kernel and k's
 * checkpoint kernel, as gpu_deltanet_mix queues them, outputs to out's
 * rows pos..; the same through the twins on the `twin` arrays when given:
 * *same whether they agreed bit for bit (outputs, states, checkpoint). */
static bool ckpt_step(const struct dnk_kernels *k, struct gk_dn_shape *s, float *state,
                      float *ckpt, const float *qkv, const float *beta, const float *g,
                      float *out, int32_t pos, int32_t len, int slot, int32_t flags,
                      float *twin_state, float *twin_ckpt, bool *same_twin)
{
    const int64_t C = s->C, Hv = s->Hv, vd = Hv * s->D, n = len + 1;
    /* the step's rows: the prompt's, then the decode row (row CK_ROWS) */
    float *sq = malloc((size_t)(n * C) * 4), *sb = malloc((size_t)(n * Hv) * 4);
    float *sg = malloc((size_t)(n * Hv) * 4), *so = calloc((size_t)(n * vd), 4);
    float *so_r = calloc((size_t)(n * vd), 4);
    memcpy(sq, qkv + pos * C, (size_t)(len * C) * 4);
    memcpy(sq + len * C, qkv + CK_ROWS * C, (size_t)C * 4);
    memcpy(sb, beta + pos * Hv, (size_t)(len * Hv) * 4);
    memcpy(sb + len * Hv, beta + CK_ROWS * Hv, (size_t)Hv * 4);
    memcpy(sg, g + pos * Hv, (size_t)(len * Hv) * 4);
    memcpy(sg + len * Hv, g + CK_ROWS * Hv, (size_t)Hv * 4);
    const struct gk_dn_seq seqs[2] = {{0, len, pos, slot, 1, flags}, {len, 1, 300, 2, 0, 0}};
    s->split = 1;
    s->state = state, s->ckpt = ckpt;
    bool ok = k->chunk(s, sq, sb, sg, so, seqs, 2, NULL) == IG_OK &&
              IG_DEV(gk_dn_rule)(s, sq, sb, sg, so, seqs, 2, NULL) == IG_OK &&
              k->ckpt(s, sq, sb, sg, seqs, 2, NULL) == IG_OK;
    const int32_t *head = (const int32_t *)(const void *)ckpt; /* pos (int64), rows, slot */
    if ((flags & GK_DN_CKPT_KEEP) && (pos + len) % GK_DN_CHUNK)
        ok &= head[2] == (pos + len) % GK_DN_CHUNK && head[3] == slot;
    else if (flags)
        ok &= head[0] == 0 && head[1] == 0 && head[2] == 0 && head[3] == 0;
    if (twin_state) {
        s->state = twin_state, s->ckpt = twin_ckpt;
        gk_dn_chunk_ref(s, sq, sb, sg, so_r, seqs, 2);
        gk_dn_rule_ref(s, sq, sb, sg, so_r, seqs, 2);
        gk_dn_ckpt_ref(s, sq, sb, sg, seqs, 2);
        *same_twin &= same(so, so_r, (size_t)(n * vd) * 4) &&
                      same(state, twin_state, (size_t)(CK_SLOTS * s->state_floats) * 4) &&
                      same(ckpt, twin_ckpt, (size_t)s->ckpt_floats * 4);
    }
    memcpy(out + pos * vd, so, (size_t)(len * vd) * 4);
    void *bufs[] = {sq, sb, sg, so, so_r};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return ok;
}

/* A prompt of CK_ROWS rows (`heads` key and value heads of 64) in one
 * step (slot 0, marked nothing: the checkpoint untouched), then in steps of
 * 37, 13, 37 and 41 rows (slot 1, marked as backend_step marks the holder:
 * keep, then read and keep, then read), each beside a decode row: each
 * step but the last ends inside a chunk, so the next runs it again from the
 * pool's checkpoint (the 13 rows within the same chunk: its rows appended;
 * the 37 across a chunk's end). Every row's
 * output and the state bit for bit; with `twin`, every step against the
 * twins bit for bit (*twin). Returns whether the cut
 * prompt matched the whole one. */
static bool ckpt_case(const struct dnk_kernels *k, int64_t heads, bool *twin)
{
    uint64_t st = 41;
    struct gk_dn_shape s = {.Hk = heads, .Hv = heads, .D = 64, .K = 4};
    s.C = (2 * s.Hk + s.Hv) * s.D;
    s.state_floats = (s.K - 1) * s.C + s.Hv * s.D * s.D;
    s.ckpt_floats = GK_DN_CKPT_FLOATS(s.Hk, s.Hv, s.D) + 4; /* a few floats past it */
    const int64_t vd = s.Hv * s.D, nf = CK_SLOTS * s.state_floats, nc = s.ckpt_floats;
    float *qkv, *beta, *g;
    dn_rows(&st, &s, CK_ROWS + 1, &qkv, &beta, &g); /* and the decode row */
    float *state = rnd(&st, nf, 0.3f), *ckpt = calloc((size_t)nc, 4);
    float *out_one = calloc((size_t)(CK_ROWS * vd), 4);
    float *out_cut = calloc((size_t)(CK_ROWS * vd), 4);
    static const struct dnk_kernels real = {"real", IG_DEV(gk_dn_chunk), IG_DEV(gk_dn_ckpt)};
    bool ok = true, twins = true;
    ok &= ckpt_step(&real, &s, state, ckpt, qkv, beta, g, out_one, 0, CK_ROWS, 0, 0, NULL, NULL,
                    NULL);
    float *state_r = dup(state, nf), *ckpt_r = dup(ckpt, nc); /* the twins' from here */
    static const int32_t steps[] = {37, 13, 37, 41};
    for (int32_t i = 0, pos = 0; i < 4; pos += steps[i++]) {
        int32_t flags = (i ? GK_DN_CKPT_READ : 0) | (i < 3 ? GK_DN_CKPT_KEEP : 0);
        ok &= ckpt_step(k, &s, state, ckpt, qkv, beta, g, out_cut, pos, steps[i], 1, flags,
                        twin ? state_r : NULL, ckpt_r, &twins);
    }
    const float *S0 = state + (s.K - 1) * s.C, *S1 = S0 + s.state_floats;
    bool cut = ok && same(out_one, out_cut, (size_t)(CK_ROWS * vd) * 4) &&
               same(S0, S1, (size_t)(s.Hv * s.D * s.D) * 4);
    if (twin)
        *twin = ok && twins;
    void *bufs[] = {qkv, beta, g, state, ckpt, state_r, ckpt_r, out_one, out_cut};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return cut;
}

static void test_ckpt(void)
{
    static const struct dnk_kernels real = {"real", IG_DEV(gk_dn_chunk), IG_DEV(gk_dn_ckpt)};
    static const struct dnk_kernels mutants[] = {DNK_MUTANTS(CKPT_MUTANT_ROW)};
    bool twin = false;
    CHECKF(ckpt_case(&real, 2, &twin), "a prompt cut at 37/50/87 rows != the prompt in one step "
           "(the checkpoint)");
    CHECKF(twin, "the checkpoint's steps: kernels != their twins");
    for (size_t i = 0; i < sizeof mutants / sizeof mutants[0]; i++) {
        bool caught = !ckpt_case(&mutants[i], 1, NULL); /* one head: the test's time */
        CHECKF(caught, "mutant %s: the cut prompt still matches the whole one", mutants[i].name);
        fprintf(stderr, "mutant %s: %s\n", mutants[i].name, caught ? "caught" : "MISSED");
    }
}

static void test_chunk(void)
{
    CHECKF(cut_case(true), "a prompt cut at 64 rows + 6 != the prompt in one step (chunked)");
    CHECKF(!cut_case(false), "the 6 rows through the recurrent kernel gave the same bits: the "
           "cut check cannot fail");
    static const struct {
        const char *name;
        dn_chunk_fn fn;
    } mutants[] = {DNC_MUTANTS(CHUNK_MUTANT_ROW)};
    static const int64_t shapes[3][4] = {{2, 4, 64, 0}, {1, 2, 64, 1}, {1, 1, 128, 0}};
    for (int i = 0; i < 3; i++) {
        bool exact = false;
        double e = chunk_case(IG_DEV(gk_dn_chunk), shapes[i][0], shapes[i][1], shapes[i][2],
                              (int)shapes[i][3], 21 + (uint64_t)i, &exact);
        CHECKF(exact, "chunked kernel != its twin: %lld/%lld heads of %lld",
               (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2]);
        CHECKF(e <= CHUNK_TOL, "chunked vs recurrent, heads of %lld: rel err %.2e > %.0e",
               (long long)shapes[i][2], e, CHUNK_TOL);
        fprintf(stderr, "chunked vs recurrent kernel, %lld/%lld heads of %lld: rel err %.2e "
                "(bound %.0e)\n", (long long)shapes[i][0], (long long)shapes[i][1],
                (long long)shapes[i][2], e, CHUNK_TOL);
    }
    for (size_t i = 0; i < sizeof mutants / sizeof mutants[0]; i++) {
        bool exact = true;
        double e = chunk_case(mutants[i].fn, 1, 1, 64, 0, 21, &exact);
        bool caught = !exact && e > 10 * CHUNK_TOL;
        CHECKF(caught, "mutant %s: rel err %.2e against the recurrent kernel", mutants[i].name,
               e);
        fprintf(stderr, "mutant %s: %s (rel err %.2e)\n", mutants[i].name,
                caught ? "caught" : "MISSED", e);
    }
    struct gk_dn_shape s = {.Hk = 1, .Hv = 1, .D = 96, .K = 4, .C = 288};
    float f = 0;
    s.state = &f;
    s.state_floats = 3 * 288 + 96 * 96;
    struct gk_dn_seq q = {0, 1, 0, 0, 0, 0};
    CHECK(IG_DEV(gk_dn_chunk)(&s, &f, &f, &f, &f, &q, 1, NULL) == IG_E_INTERNAL);
}

static void test_kernels(void)
{
    static const struct dn_kernels real = {"real", IG_DEV(gk_dn_conv), IG_DEV(gk_dn_gates),
                                           IG_DEV(gk_dn_rule), IG_DEV(gk_gate_apply)};
    static const struct dn_kernels mutants[] = {DN_MUTANTS(MUTANT_ROW)};
    CHECKF(kernel_case(&real, 2, 4, 64, 0, 11), "kernels = twins: 2/4 heads of 64, tiled");
    CHECKF(kernel_case(&real, 1, 2, 64, 1, 12), "kernels = twins: 1/2 heads of 64, grouped");
    CHECKF(kernel_case(&real, 1, 1, 128, 0, 13), "kernels = twins: 1 head of 128");
    for (size_t i = 0; i < sizeof mutants / sizeof mutants[0]; i++) {
        bool caught = !kernel_case(&mutants[i], 2, 4, 64, 0, 11);
        CHECKF(caught, "mutant %s: the kernels still match their twins", mutants[i].name);
        fprintf(stderr, "mutant %s: %s\n", mutants[i].name, caught ? "caught" : "MISSED");
    }
    /* sizes the kernels refuse: a head dim without a kernel, a wide convolution */
    struct gk_dn_shape s = {.Hk = 1, .Hv = 1, .D = 96, .K = 4, .C = 288};
    float f = 0;
    s.state = &f;
    s.state_floats = 3 * 288 + 96 * 96;
    struct gk_dn_seq q = {0, 1, 0, 0, 0, 0};
    CHECK(IG_DEV(gk_dn_rule)(&s, &f, &f, &f, &f, &q, 1, NULL) == IG_E_INTERNAL);
    s.D = 64, s.C = 192, s.K = GK_DN_MAX_CONV + 1;
    CHECK(IG_DEV(gk_dn_conv)(&s, &f, &f, &q, 1, NULL) == IG_E_INTERNAL);
}

/* ---- programmatic dependent launch ------------------------------------------------ */

/* Every kernel of both files as a dependent launch (IGNITE_PDL=1), in a
 * hybrid layer's order, with what the kernels before it write (and the
 * sequences) hidden from each block until its wait (tests/emu/pdl_hide.h):
 * one arena holds the states, the checkpoint, the rows' arrays and the
 * outputs, all of it the plain launch's bits after each. A prompt of 6 rows
 * from position 0 (slot 0, chunked, its checkpoint kept) beside a decode
 * row at 9 (slot 1); then gated attention's split and gate. */
static void test_pdl(void)
{
    uint64_t st = 53;
    struct gk_dn_shape s = {.Hk = 1, .Hv = 2, .D = 64, .K = 4, .grouped = 1, .split = 1};
    s.C = (2 * s.Hk + s.Hv) * s.D;
    s.state_floats = (s.K - 1) * s.C + s.Hv * s.D * s.D;
    s.ckpt_floats = GK_DN_CKPT_FLOATS(s.Hk, s.Hv, s.D);
    enum { n = 7 };
    const int64_t C = s.C, vd = s.Hv * s.D, qd = s.D, kv2 = 2 * s.D; /* gated: 1 and 1 heads */
    /* the arena's parts, in floats */
    const int64_t a_ck = 2 * s.state_floats, a_qkv = a_ck + s.ckpt_floats, a_b = a_qkv + n * C;
    const int64_t a_g = a_b + n * s.Hv, a_o = a_g + n * s.Hv, a_z = a_o + n * vd;
    const int64_t a_y = a_z + n * vd, a_qc = a_y + n * vd / 2, a_gate = a_qc + n * (qd + kv2);
    const int64_t a_end = a_gate + n * qd;
    const size_t ab = (size_t)a_end * 4;
    float *ar = malloc(ab), *ar0 = rnd(&st, a_end, 0.5f);
    memset(ar0 + a_ck, 0, (size_t)s.ckpt_floats * 4);
    uint16_t *y0 = (uint16_t *)(void *)(ar0 + a_y);
    for (int64_t i = 0; i < n * vd; i++)
        y0[i] = ig_f32_to_f16(test_rand_f(&st));
    float *w = rnd(&st, C * s.K, 0.6f), *dt = rnd(&st, s.Hv, 1.0f), *A = rnd(&st, s.Hv, 1.0f);
    float *nw = rnd(&st, s.D, 1.0f);
    for (int64_t i = 0; i < s.Hv; i++)
        A[i] = -fabsf(A[i]) - 0.1f;
    struct gk_dn_seq seqs[2] = {{0, 6, 0, 0, 1, GK_DN_CKPT_KEEP}, {6, 1, 9, 1, 0, 0}};
    s.state = ar, s.ckpt = ar + a_ck;
    float *qkv = ar + a_qkv, *beta = ar + a_b, *g = ar + a_g, *o = ar + a_o;
    uint16_t *y = (uint16_t *)(void *)(ar + a_y);
    struct pdl_hide h = {0};
#define DN_PAIR(what, blocks, call)                                           \
    do {                                                                      \
        PDL_PAIR(what, &h, ar, ab, memcpy(ar, ar0, ab), blocks, call);        \
        memcpy(ar0, ar, ab); /* the next kernel's inputs */                   \
    } while (0)
    pdl_hide_add(&h, qkv, (size_t)(n * C) * 4);
    pdl_hide_add(&h, ar, (size_t)a_ck * 4);
    pdl_hide_add(&h, seqs, sizeof seqs);
    DN_PAIR("dn_conv", (int)(C + 127) / 128 * 2, IG_DEV(gk_dn_conv)(&s, qkv, w, seqs, 2, NULL));
    pdl_hide_add(&h, qkv, (size_t)(n * C) * 4);
    pdl_hide_add(&h, beta, (size_t)(2 * n * s.Hv) * 4); /* beta, g */
    DN_PAIR("dn_gates", n, IG_DEV(gk_dn_gates)(&s, qkv, beta, g, dt, A, n, NULL));
    pdl_hide_add(&h, ar, (size_t)(a_o - 0) * 4); /* states, checkpoint, qkv, beta, g */
    pdl_hide_add(&h, seqs, sizeof seqs);
    DN_PAIR("dn_chunk", (int)s.Hv * 2, IG_DEV(gk_dn_chunk)(&s, qkv, beta, g, o, seqs, 2, NULL));
    pdl_hide_add(&h, ar, (size_t)a_o * 4);
    pdl_hide_add(&h, seqs, sizeof seqs);
    DN_PAIR("dn_rule", (int)s.Hv * 2, IG_DEV(gk_dn_rule)(&s, qkv, beta, g, o, seqs, 2, NULL));
    pdl_hide_add(&h, ar, (size_t)a_o * 4);
    pdl_hide_add(&h, seqs, sizeof seqs);
    DN_PAIR("dn_ckpt", 2, IG_DEV(gk_dn_ckpt)(&s, qkv, beta, g, seqs, 2, NULL));
    pdl_hide_add(&h, o, (size_t)(2 * n * vd) * 4); /* o, z */
    DN_PAIR("dn_norm", n, IG_DEV(gk_dn_norm)(&s, o, ar + a_z, nw, 1e-6f, n, y, NULL));
    pdl_hide_add(&h, qkv, (size_t)(n * C) * 4); /* raw: Q|gate of 1 head, K, V */
    DN_PAIR("gate_split", n,
            IG_DEV(gk_gate_split)(qkv, n, 1, 1, s.D, ar + a_qc, ar + a_gate, NULL));
    pdl_hide_add(&h, y, (size_t)(n * qd) * 2);
    pdl_hide_add(&h, ar + a_gate, (size_t)(n * qd) * 4);
    DN_PAIR("gate_apply", (int)(n * qd + 255) / 256,
            IG_DEV(gk_gate_apply)(y, ar + a_gate, n * qd, NULL));
#undef DN_PAIR
    void *bufs[] = {ar, ar0, w, dt, A, nw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

#endif

/* ---- the backend ------------------------------------------------------------------ */

/* Each DeltaNet layer's state of slot 0, device against CPU: max |d| / max
 * |cpu| within tol. */
static void compare_states(struct pair *p, const struct model *m, int64_t n_pos, double tol)
{
    struct backend_seq s = {.table = p->table[0], .slot = 0};
    const struct kv_store *ref, *dl;
    const int32_t *tr, *td;
    int64_t sr, sd;
    CHECK(backend_kv_export(p->cpu, &s, n_pos, &ref, &tr, &sr) == IG_OK);
    CHECK(backend_kv_export(p->dev, &s, n_pos, &dl, &td, &sd) == IG_OK);
    int layers = 0;
    double worst = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        if (m->layers[l].mixer != LAYER_MIXER_DELTANET)
            continue;
        int64_t nf = (int64_t)(kv_deltanet_state_bytes(&m->layers[l]) / 4);
        const float *a = kv_store_state(ref, l, sr), *b = kv_store_state(dl, l, sd);
        double e = test_rel_err(b, a, nf);
        CHECKF(e <= tol, "layer %lld's DeltaNet state: rel err %.2e > %.1e", (long long)l, e,
               tol);
        worst = e > worst ? e : worst;
        layers++;
    }
    CHECK(layers == 3);
    fprintf(stderr, "DeltaNet states of %d layers: worst rel err %.2e against the CPU's "
            "(bound %.0e)\n", layers, worst, tol);
}

/* The last row's logits of ids[0..n) prefilled into `slot` of b from
 * position 0 in steps of `chunk` rows. */
static void prefill(struct backend *b, const int32_t *table, int slot, const int32_t *ids,
                    int64_t n, int64_t chunk, float *logits)
{
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        CHECK(backend_run_seq(b, table, slot, ids + i, len, i, logits) == IG_OK);
    }
}

/* On the device alone: a prompt in one step against the same in chunks of
 * 33 and 7 (slot 1; the chunked DeltaNet kernel took the 40 and the 33,
 * backend dn_chunked_rows says); two requests batched (prefill then 3 decode steps
 * together) against each alone, then a fourth step with their slots
 * swapped (each reading the other's state), which must not match. The
 * bound is not bit equality: a step's shape picks the attention's splits
 * and tiles (1e-4..1e-3 of max |logit| seen), where mixed states move the
 * logits by far more (the control). */
static void device_only(struct pair *p, const int32_t *ids, int64_t n)
{
    int64_t nv = p->n_vocab;
    float *one = malloc((size_t)nv * 4), *chunked = malloc((size_t)nv * 4);
    float *alone = malloc((size_t)(10 * nv) * 4), *both = malloc((size_t)(2 * nv) * 4);
    const int64_t c0 = p->dev->dn_chunked_rows;
    prefill(p->dev, p->table[0], 0, ids, n, n, one);
    const int64_t c1 = p->dev->dn_chunked_rows;
    prefill(p->dev, p->table[1], 1, ids, n, 33, chunked);
    /* the prompt's rows went to the chunked kernel in each of the 3 DeltaNet
     * layers; of 33 + 7, the 33 (7 < GK_DN_CHUNK_MIN: the recurrent one) */
    CHECKF(c1 - c0 == 3 * n && p->dev->dn_chunked_rows - c1 == 3 * 33,
           "rows run in the chunked form: %lld and %lld", (long long)(c1 - c0),
           (long long)(p->dev->dn_chunked_rows - c1));
    /* 40 rows chunked against 33 chunked and 7 recurrent: the chunked
     * form's f16 operands (CHUNK_TOL on the kernel) through 4 layers */
    double e = test_rel_err(chunked, one, nv);
    CHECKF(e <= 5e-3 && test_argmax(chunked, nv) == test_argmax(one, nv),
           "one step vs chunks of 33 and 7: rel err %.2e", e);
    fprintf(stderr, "prompt of %lld in one step vs chunks: rel err %.2e\n", (long long)n, e);
    /* request r: its prompt (ids from r * 7, 20 + 9 r long), then 4 steps
     * fed with its own greedy tokens; alone in slot r, then both batched */
    int64_t len[2] = {20, 29};
    int32_t tok[2][5];
    for (int r = 0; r < 2; r++) {
        prefill(p->dev, p->table[r], r, ids + 7 * r, len[r], len[r], alone + (5 * r) * nv);
        for (int s = 0; s < 4; s++) {
            tok[r][s] = (int32_t)test_argmax(alone + (5 * r + s) * nv, nv);
            CHECK(backend_run_seq(p->dev, p->table[r], r, &tok[r][s], 1, len[r] + s,
                                  alone + (5 * r + s + 1) * nv) == IG_OK);
        }
    }
    const double tol = 2e-3;
    double worst = 0, control = 1e30;
    for (int s = 0; s < 5; s++) {
        bool swap = s == 4;
        int32_t tokens[64];
        struct backend_seq seqs[2];
        int64_t rows = 0;
        for (int r = 0; r < 2; r++) {
            int64_t k = s ? 1 : len[r];
            if (s)
                tokens[rows] = tok[r][s - 1];
            else
                memcpy(tokens + rows, ids + 7 * r, (size_t)k * sizeof *tokens);
            seqs[r] = (struct backend_seq){.table = p->table[r], .slot = swap ? 1 - r : r,
                                           .row0 = rows,
                                           .n_rows = k, .pos0 = s ? len[r] + s - 1 : 0};
            rows += k;
        }
        struct backend_batch b = {.tokens = tokens, .n_rows = rows, .seqs = seqs, .n_seqs = 2,
                                  .logits = both};
        CHECK(backend_step(p->dev, &b) == IG_OK);
        for (int r = 0; r < 2; r++) {
            const float *a = alone + (5 * r + s) * nv;
            double er = test_rel_err(both + r * nv, a, nv);
            if (swap) {
                control = er < control ? er : control;
                CHECKF(er > 10 * tol, "control: request %d on the other's state: rel err "
                       "%.2e, within 10x the bound", r, er);
                continue;
            }
            worst = er > worst ? er : worst;
            CHECKF(er <= tol && test_argmax(both + r * nv, nv) == test_argmax(a, nv),
                   "batched vs alone: request %d, step %d: rel err %.2e", r, s, er);
        }
    }
    fprintf(stderr, "two requests batched vs alone: worst rel err %.2e (bound %.0e); with "
            "their states swapped: %.2e\n", worst, tol, control);
    free(one);
    free(chunked);
    free(alone);
    free(both);
}

/* Every DeltaNet layer's state of `slot` (n_pos positions through table)
 * into a new array, one layer after another. */
static float *export_states(struct backend *b, const struct model *m, const int32_t *table,
                            int slot, int64_t n_pos, size_t *bytes)
{
    struct backend_seq q = {.table = table, .slot = slot};
    const struct kv_store *kv = NULL;
    const int32_t *t;
    int64_t at;
    CHECK(backend_kv_export(b, &q, n_pos, &kv, &t, &at) == IG_OK);
    *bytes = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET)
            *bytes += kv_deltanet_state_bytes(&m->layers[l]);
    char *all = malloc(*bytes), *to = all;
    for (int64_t l = 0; kv && l < m->hp.n_layer; l++)
        if (m->layers[l].mixer == LAYER_MIXER_DELTANET) {
            memcpy(to, kv_store_state(kv, l, at), kv_deltanet_state_bytes(&m->layers[l]));
            to += kv_deltanet_state_bytes(&m->layers[l]);
        }
    return (float *)(void *)all;
}

/* On the device alone: a prompt of 50 ids in one step (slot 0), then in
 * steps of 37, 8 and 5 rows (slot 1: the first two end inside a 64-row
 * chunk, so the next runs that chunk again from the pool's checkpoint;
 * test_ckpt cuts across chunks' ends), its second step beside another
 * prompt's first 20 rows in slot 0 (more to come, inside a chunk: it keeps
 * no checkpoint while slot 1 holds it, backend.h's holder check; without
 * the check it takes it and slot 1's last step continues from its cut
 * state): the DeltaNet states bit for bit (continued from the cut state
 * they differ: test_ckpt's mutant), every prompt row's logits
 * within the bound of the attention's tiles and splits, which depend on a
 * step's shape (steps of 64, 64 and 42 rows, which need no checkpoint,
 * give logits that differ from the prompt in one step too). */
static void cut_prompt(const struct model *m, const struct backend_opts *oe, const int32_t *ids)
{
    enum { N = 50 };
    struct backend_opts o = *oe;
    o.max_rows = N;
    struct backend *b = NULL;
    CHECK(IG_DEV(gpu_backend_create)(m, &o, &b) == IG_OK);
    if (!b)
        return;
    struct pair p = {.n_vocab = m->hp.n_vocab};
    pair_init(&p, &o);
    int64_t nv = m->hp.n_vocab;
    float *one = malloc((size_t)(N * nv) * 4), *cut = malloc((size_t)(N * nv) * 4);
    bool want[N];
    for (int i = 0; i < N; i++)
        want[i] = true;
    static const int64_t steps[2][4] = {{N}, {37, 8, 5}};
    enum { OTHER = 20 }; /* the other prompt's rows beside slot 1's second step */
    float *s0 = NULL;
    size_t bytes = 0, bytes1;
    for (int r = 0; r < 2; r++)
        for (int64_t i = 0, pos = 0; steps[r][i]; pos += steps[r][i++]) {
            bool other = r == 1 && i == 1;
            struct backend_seq q[2] = {
                {.table = p.table[0], .slot = 0, .n_rows = OTHER, .prompt = true, .more = true},
                {.table = p.table[r], .slot = r, .row0 = other ? OTHER : 0,
                 .n_rows = steps[r][i], .pos0 = pos, .prompt = true,
                 .more = pos + steps[r][i] < N}};
            int32_t tok[N + OTHER];
            memcpy(tok, ids + N, OTHER * sizeof *tok);
            memcpy(tok + (other ? OTHER : 0), ids + pos, (size_t)steps[r][i] * sizeof *tok);
            bool w[N + OTHER] = {false}; /* the other prompt's rows want none */
            for (int64_t t = 0; t < steps[r][i]; t++)
                w[(other ? OTHER : 0) + t] = true;
            struct backend_batch bt = {.tokens = other ? tok : ids + pos,
                                       .want_logits = other ? w : want,
                                       .n_rows = steps[r][i] + (other ? OTHER : 0),
                                       .seqs = other ? q : q + 1, .n_seqs = 1 + other,
                                       .logits = (r ? cut : one) + pos * nv};
            CHECK(backend_step(b, &bt) == IG_OK);
            if (!r) /* before slot 0 takes the other prompt */
                s0 = export_states(b, m, p.table[0], 0, N, &bytes);
        }
    float *s1 = export_states(b, m, p.table[1], 1, N, &bytes1);
    bool same_states = bytes == bytes1 && memcmp(s0, s1, bytes) == 0;
    CHECKF(same_states, "a prompt in steps of 37, 8 and 5 (beside another cut prompt) vs one "
           "step: DeltaNet states differ");
    double e = test_rel_err(cut, one, N * nv);
    bool top = true;
    for (int i = 0; i < N; i++)
        top &= test_argmax(cut + i * nv, nv) == test_argmax(one + i * nv, nv);
    CHECKF(e <= 2e-3 && top, "a prompt in steps of 37, 8 and 5 vs one step: logits rel err "
           "%.2e", e);
    fprintf(stderr, "prompt of %d in steps of 37, 8 (beside another cut prompt) and 5 vs one "
            "step: DeltaNet states %s, logits rel err %.2e (bound 2e-3)\n", N,
            same_states ? "bit for bit" : "DIFFER", e);
    free(one);
    free(cut);
    free(s0);
    free(s1);
    free(p.lc);
    free(p.le);
    backend_free(b);
}

/* The pool's one checkpoint (backend.h), on backend kind `kind`: two
 * prompts of pn ids (A in slot 0, B in slot 1, B's 20 ids on) each in one
 * step first, their DeltaNet states the reference; then
 *   - with `rule` (pn 100): a scheduler that wants A in steps of 37 rows
 *     and B in steps of 70 in turn (both cut inside a chunk) asks
 *     backend_prompt_rows: A takes the checkpoint, B is cut at 64 instead
 *     while A holds it; both states bit for bit the reference's (without
 *     the rule B takes A's checkpoint and A continues from its cut state);
 *   - a caller breaking the rule: A's 37 rows, then one step of B's first
 *     20 and A's next 13 (both more to come, both inside a chunk), then
 *     A's last: the holder is in the step, so it keeps the checkpoint and
 *     B nothing; A's state bit for bit (without the holder check B takes
 *     it and A's last step continues from its cut state); with `rule`, B's
 *     continued from its cut state within 1e-3.
 * The CPU backend's (the rule and the plan are backend.c's, the same for
 * every backend; cut_prompt puts the emulated device's holder beside
 * another cut prompt: its chunks are the test's time). */
#define PN_MAX 100
static void pool_ckpt(const struct model *m, const struct backend_opts *oe,
                      enum backend_kind kind, const int32_t *ids, int64_t pn, bool rule)
{
    const int64_t PN = pn;
    struct backend_opts o = *oe;
    o.device.kind = kind;
    o.max_rows = PN;
    o.n_blocks = 2 * (N_CTX / KV_BLOCK);
    struct backend *b = NULL;
    CHECK((kind == BACKEND_CPU ? backend_create(m, &o, &b) : IG_DEV(gpu_backend_create)(m, &o, &b)) ==
          IG_OK);
    if (!b)
        return;
    struct pair p = {.n_vocab = m->hp.n_vocab};
    pair_init(&p, &o);
    float *logits = malloc((size_t)(2 * m->hp.n_vocab) * 4); /* a step's last rows' */
    const int32_t *prompt[2] = {ids, ids + 20};
#define POOL_STEP(nq, ...)                                                                     \
    do {                                                                                       \
        struct backend_seq q_[] = {__VA_ARGS__};                                               \
        int32_t tok_[PN_MAX];                                                                  \
        int64_t n_ = 0;                                                                        \
        for (int i_ = 0; i_ < (nq); i_++) {                                                    \
            q_[i_].table = p.table[q_[i_].slot], q_[i_].row0 = n_, q_[i_].prompt = true;       \
            q_[i_].more = q_[i_].pos0 + q_[i_].n_rows < PN;                                    \
            memcpy(tok_ + n_, prompt[q_[i_].slot] + q_[i_].pos0,                               \
                   (size_t)q_[i_].n_rows * sizeof *tok_);                                      \
            n_ += q_[i_].n_rows;                                                               \
        }                                                                                      \
        struct backend_batch bt_ = {.tokens = tok_, .n_rows = n_, .seqs = q_, .n_seqs = (nq), \
                                    .logits = logits};                                         \
        CHECK(backend_step(b, &bt_) == IG_OK);                                                 \
    } while (0)
    size_t bytes = 0;
    float *ref[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
    const char *name = kind == BACKEND_CPU ? "cpu" : "device";
    for (int r = 0; r < 1 + rule; r++) {
        POOL_STEP(1, {.slot = r, .n_rows = PN, .pos0 = 0});
        ref[r] = export_states(b, m, p.table[r], r, PN, &bytes);
    }
    /* a scheduler in turns, by the rule */
    int64_t cuts = 0;
    if (rule) {
        int64_t pos[2] = {0, 0}, want[2] = {37, 70};
        for (int turn = 0; pos[0] < PN || pos[1] < PN; turn++) {
            int r = turn % 2, h = b->ckpt_holder - 1;
            int64_t left = PN - pos[r], n = left < want[r] ? left : want[r];
            if (!left)
                continue;
            n = backend_prompt_rows(b, r, pos[r], n, left, h >= 0 && pos[h] < PN);
            cuts += n < (left < want[r] ? left : want[r]);
            if (n)
                POOL_STEP(1, {.slot = r, .n_rows = n, .pos0 = pos[r]});
            pos[r] += n;
        }
        for (int r = 0; r < 2; r++)
            got[r] = export_states(b, m, p.table[r], r, PN, &bytes);
        CHECKF(cuts == 1, "%s: the rule cut %lld steps back, want 1", name, (long long)cuts);
        CHECKF(!memcmp(got[0], ref[0], bytes) && !memcmp(got[1], ref[1], bytes),
               "%s: two prompts cut inside chunks in turn by the rule: DeltaNet states differ "
               "from the prompts in one step", name);
        for (int r = 0; r < 2; r++)
            free(got[r]);
    }
    /* a caller breaking the rule: the holder and another cut in one step */
    POOL_STEP(1, {.slot = 0, .n_rows = 37, .pos0 = 0});
    POOL_STEP(2, {.slot = 1, .n_rows = 20, .pos0 = 0}, {.slot = 0, .n_rows = 13, .pos0 = 37});
    POOL_STEP(1, {.slot = 0, .n_rows = PN - 50, .pos0 = 50});
    if (rule)
        POOL_STEP(1, {.slot = 1, .n_rows = PN - 20, .pos0 = 20});
#undef POOL_STEP
    for (int r = 0; r < 1 + rule; r++)
        got[r] = export_states(b, m, p.table[r], r, PN, &bytes);
    double e = rule ? test_rel_err(got[1], ref[1], (int64_t)(bytes / 4)) : 0;
    bool held = !memcmp(got[0], ref[0], bytes);
    CHECKF(held && e <= 1e-3,
           "%s: the holder beside another cut prompt: its DeltaNet states differ from the "
           "prompt in one step (the other's rel err %.2e)", name, e);
    fprintf(stderr, "%s: the pool's one checkpoint: %lld step cut back to 64 by the rule; "
            "the holder beside another cut prompt %s (the other's rel err %.2e)\n", name,
            (long long)cuts, held ? "bit for bit" : "DIFFERS", e);
    for (int r = 0; r < 2; r++)
        free(got[r]), free(ref[r]);
    free(logits);
    free(p.lc);
    free(p.le);
    backend_free(b);
}

/* Slot 0 of the device (n_pos positions through table 0) exported, imported
 * into slot 1 of a fresh device backend (table 1): one more step on each
 * gives the same logits bit for bit (the states went through the host). */
static void check_import(struct pair *p, const struct model *m, const struct backend_opts *o,
                         int64_t n_pos)
{
    struct backend *fresh = NULL;
    struct backend_seq s0 = {.table = p->table[0], .slot = 0};
    struct backend_seq s1 = {.table = p->table[1], .slot = 1};
    const struct kv_store *dl;
    const int32_t *td;
    int64_t slot;
    CHECK(IG_DEV(gpu_backend_create)(m, o, &fresh) == IG_OK);
    CHECK(backend_kv_export(p->dev, &s0, n_pos, &dl, &td, &slot) == IG_OK);
    if (!fresh)
        return;
    CHECK(slot == 0 && backend_kv_import(fresh, &s1, dl, n_pos) == IG_OK);
    int32_t tok = 42;
    CHECK(backend_run_seq(p->dev, p->table[0], 0, &tok, 1, n_pos, p->le) == IG_OK);
    CHECK(backend_run_seq(fresh, p->table[1], 1, &tok, 1, n_pos, p->lc) == IG_OK);
    CHECKF(memcmp(p->lc, p->le, (size_t)p->n_vocab * sizeof *p->lc) == 0,
           "imported cache and state: logits differ (rel err %.3e)",
           test_rel_err(p->lc, p->le, p->n_vocab));
    backend_free(fresh);
}

static void test_backend(const char *path)
{
    struct model *m = NULL;
    CHECK(model_load(path, &m) == IG_OK);
    if (!m)
        return;
    CHECK(m->hp.n_layer == 4 && m->layers[0].mixer == LAYER_MIXER_DELTANET &&
          m->layers[3].mixer == LAYER_MIXER_ATTENTION && m->layers[3].attn_gate);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 64, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab};
    pair_init(&p, &o);
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    struct backend_opts oe = o;
    oe.device.kind = BACKEND_CUDA;
    oe.gpu_weights = BACKEND_GPU_F16;
    oe.n_blocks = 2 * (N_CTX / KV_BLOCK);
    CHECK(IG_DEV(gpu_backend_create)(m, &oe, &p.dev) == IG_OK);
    if (p.cpu && p.dev && p.lc && p.le) {
        int32_t ids[128];
        uint64_t st = 7;
        for (int i = 0; i < 128; i++)
            ids[i] = (int32_t)(test_rand_u64(&st) % (uint64_t)m->hp.n_vocab);
        run_prompt(&p, ids, 40, 33, "qwen35 tiny");
        compare_states(&p, m, 40 + N_STEPS, 1e-2);
        run_two(&p, ids + 40, 20, 4, 40 + N_STEPS);
        device_only(&p, ids, 40);
        check_import(&p, m, &oe, 24); /* slot 0 holds 24 positions of table 0 now */
        cut_prompt(m, &oe, ids);
        pool_ckpt(m, &oe, BACKEND_CPU, ids, PN_MAX, true);
        fprintf(stderr, "qwen35 tiny: worst rel err %.2e against the CPU backend\n", p.worst);
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    /* qwen35moe runs (tests/emu/test_backend_moe_emu.c); experts with a
     * dense MLP beside them (Gemma 4's) are refused in one line */
    struct backend *moe = NULL;
    m->layers[1].ffn = LAYER_FFN_MOE;
    m->hp.has_moe_mlp = true;
    CHECK(IG_DEV(gpu_backend_create)(m, &oe, &moe) == IG_E_MODEL && !moe);
    free(p.lc);
    free(p.le);
    model_free(m);
}

int main(int argc, char **argv)
{
#if defined(IG_EMU_BACKEND)
    test_kernels();
    test_pdl();
    test_chunk();
    test_ckpt();
#else /* tests/gpu's test_deltanet_gpu: the backend part on a GPU */
    if (argc < 2 || IG_DEV(gpu_device_count)() == 0) {
        fprintf(stderr, "test_deltanet_gpu: skipped (needs a GPU and the qwen35 tiny file)\n");
        return 77;
    }
#endif
    if (argc > 1)
        test_backend(argv[1]);
    return test_summary("test_deltanet");
}
