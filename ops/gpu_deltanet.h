/* ops/gpu_deltanet.h: the CUDA kernels of Qwen3.5's hybrid layers (gated
 * DeltaNet and the output gate of its full attention), each with a CPU twin
 * (the same name with _ref, plain C, host pointers) that defines its
 * result, as ops/gpu_ops.h's do; backend/cpu_deltanet.c and
 * backend/cpu_attention.c state the rules. f32 throughout but the gated
 * norm's output, which feeds the ssm_out product (f16).
 *
 * A sequence's recurrent state is kvcache's layout (kv_deltanet_state_bytes):
 * [conv - 1][C] the convolution's last inputs, oldest first, then per value
 * head S [D keys][D values]. A sequence at position 0 starts from zeros (the
 * kernels read none of its slot). Launchers only queue work (a decode graph
 * captures them); the sequences come from device memory.
 *
 * Built twice (devkit/dev_entry.h): ops/gpu_deltanet.cu (name_cuda) and
 * ops/gpu_deltanet_emu.cc (name_emu). Covered by
 * tests/emu/test_deltanet_emu.c. */
#ifndef IGNITE_OPS_GPU_DELTANET_H
#define IGNITE_OPS_GPU_DELTANET_H

#include "devkit/dev_entry.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A step's sequence as the DeltaNet kernels see it: rows [row0, row0 +
 * n_rows) at positions pos0.., state in slot `slot`. n_rows 0: a decode
 * bucket's padding (nothing read or written). */
struct gk_dn_seq {
    int32_t row0, n_rows, pos0, slot;
    int32_t chunked; /* where the shape's split is set: gk_dn_chunk's (else gk_dn_rule's) */
    int32_t ckpt;    /* a prompt's rows (chunked) where the shape has a checkpoint: of
                      * GK_DN_CKPT_READ (gk_dn_chunk continues the checkpoint where
                      * its header is this slot's) and GK_DN_CKPT_KEEP (it keeps a
                      * new one); at most one sequence of a step has either */
};

/* The largest convolution kernel and the head dims the kernels take. */
#define GK_DN_MAX_CONV 8
#define GK_DN_HEAD_DIM_OK(d) ((d) == 64 || (d) == 128)

/* The layer's shapes and the state array. */
struct gk_dn_shape {
    int64_t C;          /* channels: (2 Hk + Hv) D */
    int64_t Hk, Hv, D;  /* key heads, value heads, head dim */
    int64_t K;          /* convolution width, 1..GK_DN_MAX_CONV */
    int grouped;        /* value head h reads key head h / (Hv / Hk); else h % Hk */
    float *state;       /* [slots][state_bytes / 4] */
    int64_t state_floats; /* a slot's stride */
    int32_t split;      /* 0: gk_dn_rule and gk_dn_chunk take every sequence; else
                         * gk_dn_chunk those marked chunked, gk_dn_rule the rest */
    float *ckpt;        /* [ckpt_floats] the pool's one checkpoint (below), or NULL: none */
    int64_t ckpt_floats; /* its floats */
};

/* The checkpoint is kvcache's layout (kv_deltanet_ckpt_bytes, the CPU
 * backend's), one for the pool (backend.h's rule): a header of
 * GK_DN_CKPT_HEAD floats (struct kv_ckpt_head: int64 position of the
 * unfinished chunk's first row, int32 rows it holds, int32 the slot whose
 * prompt they are; zeros: none),
 * then per value head S [D][D] where that chunk began, then up to
 * GK_DN_CHUNK - 1 rows of [k Hk D | v Hv D | g Hv | beta Hv] (after the
 * convolution and the norms: what the delta rule reads). A prompt cut
 * inside a chunk keeps one; its next step runs that chunk again whole from
 * it, so every state is the bits of the prompt in one step whatever cut it
 * (docs/kvcache.md). */
#define GK_DN_CKPT_HEAD 4
#define GK_DN_CKPT_READ 1
#define GK_DN_CKPT_KEEP 2
/* Floats a checkpoint needs (ckpt_floats at least this). */
#define GK_DN_CKPT_FLOATS(Hk, Hv, D)                                                         \
    (GK_DN_CKPT_HEAD + (Hv) * (D) * (D) + (GK_DN_CHUNK - 1) * (((Hk) + (Hv)) * (D) + 2 * (Hv)))

/* The causal depthwise convolution and SiLU of each sequence's rows of qkv
 * [n][C] in place, continuing and then updating its conv state: x_t[c] =
 * silu(w[c][K-1] x_t[c] + sum_(i < K-1) w[c][i] h_i[c]) over the K - 1
 * inputs before t, oldest first. conv_w f32 [C][K]. One thread a channel
 * of a sequence, its rows in order. */
int IG_DEV(gk_dn_conv)(const struct gk_dn_shape *s, float *qkv, const float *conv_w,
                       const struct gk_dn_seq *seqs, int64_t n_seqs, void *stream);
void gk_dn_conv_ref(const struct gk_dn_shape *s, float *qkv, const float *conv_w,
                    const struct gk_dn_seq *seqs, int64_t n_seqs);

/* Per row of n: each key head's q and k L2-normalized (x / sqrt(sum x^2 +
 * 1e-6), q also times 1/sqrt(D)) in place in qkv; beta = sigmoid(beta),
 * alpha becomes the log decay A[h] softplus(alpha + dt[h]) (softplus
 * linear above 20), both [n][Hv] in place. One block a row. */
int IG_DEV(gk_dn_gates)(const struct gk_dn_shape *s, float *qkv, float *beta, float *alpha,
                        const float *dt, const float *A, int64_t n, void *stream);
void gk_dn_gates_ref(const struct gk_dn_shape *s, float *qkv, float *beta, float *alpha,
                     const float *dt, const float *A, int64_t n);

/* The delta rule, the recurrent form, over each sequence's rows in order
 * (those not marked chunked when the shape's split is set):
 * S = e^g S; u = beta (v - S^T k); S += k u^T; o = S^T q, o into out
 * [n][Hv][D]; S read from and written back to the slot once. One block
 * per (value head, sequence), two threads a column of S, each half its
 * rows (the sums over S's rows: the first half's, plus the second's). */
int IG_DEV(gk_dn_rule)(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                       const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs,
                       void *stream);
void gk_dn_rule_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                    const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs);

/* The delta rule, the chunked form (the Gated DeltaNet paper's,
 * flash-linear-attention's chunk_gated_delta_rule), over each sequence's
 * rows in chunks ending at multiples of GK_DN_CHUNK positions (as
 * backend/cpu_deltanet.c's): per chunk of c rows, G the cumulative log
 * decay, T = (I - M)^-1 with M[i][m] = -beta_i k_i.k_m e^(G_i - G_m) (m < i)
 * by forward substitution in f32, then on tensor cores (mma.sync, f16 in,
 * f32 accumulate; a partial chunk padded with zero rows): W = T (beta e^G
 * k), v_new = T (beta v) - W S, o = e^G (q S) + (q k^T e^(G_i - G_m), m <=
 * i) v_new, S = e^(G_last) S + (e^(G_last - G) k)^T v_new. S in f32 in
 * shared memory (its f16 copy the products read), read from and written
 * back to the slot once. One block per (value head, 64 value columns,
 * sequence), 4 warps. Equal to gk_dn_rule within f16 rounding (the tests
 * state the bound); its twin bit for bit. */
#define GK_DN_CHUNK 64
/* The fewest rows of a sequence other than a prompt's the backend gives to
 * gk_dn_chunk: a chunk costs a padded 64-row chunk's products and solve
 * whatever its rows. A prompt's rows take it whatever their number, so a
 * prompt's state does not depend on where the engine cut it. */
#define GK_DN_CHUNK_MIN 16
/* A sequence marked GK_DN_CKPT_READ (the shape's ckpt set) whose slot's
 * checkpoint ends where its rows start runs that chunk again from the
 * checkpoint's S, its rows first (their outputs not written: they are the
 * bits the step that ran them wrote), then the step's; one marked
 * GK_DN_CKPT_KEEP whose rows end inside a chunk writes S at that chunk's
 * start to the checkpoint (gk_dn_ckpt keeps the rows after it). */
int IG_DEV(gk_dn_chunk)(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                        const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs,
                        void *stream);
void gk_dn_chunk_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                     const float *g, float *out, const struct gk_dn_seq *seqs, int64_t n_seqs);

/* After gk_dn_chunk, of a step's sequences (the shape's ckpt set): the
 * sequence marked GK_DN_CKPT_KEEP whose rows end inside a chunk keeps that
 * chunk's rows so far (the checkpoint's, then the step's) and the header
 * naming its slot; one marked GK_DN_CKPT_READ only clears the header; no
 * other touches it. One block a sequence. */
int IG_DEV(gk_dn_ckpt)(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                       const float *g, const struct gk_dn_seq *seqs, int64_t n_seqs,
                       void *stream);
void gk_dn_ckpt_ref(const struct gk_dn_shape *s, const float *qkv, const float *beta,
                    const float *g, const struct gk_dn_seq *seqs, int64_t n_seqs);

/* Rows of seq's unfinished chunk the checkpoint holds for it (0: none):
 * where seq may read it and the header names its slot and ends at its
 * first position. */
#if defined(__CUDACC__)
#define GK_DN_HD __host__ __device__
#else
#define GK_DN_HD
#endif
static inline GK_DN_HD int32_t gk_dn_ckpt_pending(const float *ck, const struct gk_dn_seq *q)
{
    if (!ck || !(q->ckpt & GK_DN_CKPT_READ) || q->pos0 <= 0)
        return 0;
    const int64_t pos = *(const int64_t *)(const void *)ck;
    const int32_t *nh = (const int32_t *)(const void *)ck + 2; /* rows, slot */
    return nh[0] > 0 && nh[0] < GK_DN_CHUNK && nh[1] == q->slot && pos + nh[0] == q->pos0
               ? nh[0]
               : 0;
}

/* The gated norm: y[t][h] = f16(o r w silu(z)), r = 1 / sqrt(mean(o^2) +
 * eps) over each head's D values; o, z f32 [n][Hv][D], w f32 [D], y f16. */
int IG_DEV(gk_dn_norm)(const struct gk_dn_shape *s, const float *o, const float *z,
                       const float *w, float eps, int64_t n, uint16_t *y, void *stream);
void gk_dn_norm_ref(const struct gk_dn_shape *s, const float *o, const float *z,
                    const float *w, float eps, int64_t n, uint16_t *y);

/* Gated attention's Q projection [n][n_head][2][hd] (each head's query
 * then its gate), K and V after it (raw [n][2 q_dim + 2 kv_dim]): the
 * queries, K and V to qkv [n][q_dim + 2 kv_dim] (what gk_qkv_rope reads),
 * the gates to gate [n][q_dim]. */
int IG_DEV(gk_gate_split)(const float *raw, int64_t n, int64_t n_head, int64_t n_head_kv,
                          int64_t hd, float *qkv, float *gate, void *stream);
void gk_gate_split_ref(const float *raw, int64_t n, int64_t n_head, int64_t n_head_kv,
                       int64_t hd, float *qkv, float *gate);

/* att[i] = f16(att[i] sigmoid(gate[i])) for i < n (the attention's f16
 * output, before wo). */
int IG_DEV(gk_gate_apply)(uint16_t *att, const float *gate, int64_t n, void *stream);
void gk_gate_apply_ref(uint16_t *att, const float *gate, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
