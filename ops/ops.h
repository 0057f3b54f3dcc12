/* ops/ops.h: the run state shared by prefill and decode, and the primitives
 * both stages use (matmul over stored-format weights, RMSNorm, RoPE with its
 * scalings, SwiGLU and GeGLU, soft-capping).
 * The CPU implementation is the reference; the CUDA one sits behind the same
 * table later. Covered by tests/cpu/.
 *
 * Activations are f32, token-major: a block of n_tokens vectors of width w
 * is x[n_tokens][w], contiguous. Weights stay in their stored format. */
#ifndef IGNITE_OPS_OPS_H
#define IGNITE_OPS_OPS_H

#include "models/model.h"

#include <stdint.h>

/* ---- thread pool (ops/threadpool.c) ------------------------------------ */

#define OPS_POOL_MAX_THREADS 256

/* A parallel-for body: handles items [i0, i1) on thread `thread`
 * (0..n_threads-1; use it to pick per-thread scratch). */
typedef void (*ops_task_fn)(void *arg, int64_t i0, int64_t i1, int thread);

struct ops_pool;

/* Starts n_threads - 1 workers (the caller of ops_pool_run is thread 0).
 * n_threads <= 0 means one per online core. Returns IG_OK or IG_E_NOMEM. */
int ops_pool_create(int n_threads, struct ops_pool **out);

/* Stops and joins the workers. NULL is fine. */
void ops_pool_free(struct ops_pool *p);

int ops_pool_threads(const struct ops_pool *p);

/* Runs fn over items [0, n_items) in chunks of `grain` items on all threads
 * and returns when every item is done. One job at a time per pool; not
 * reentrant (fn must not call ops_pool_run on the same pool). */
void ops_pool_run(struct ops_pool *p, int64_t n_items, int64_t grain, ops_task_fn fn, void *arg);

/* ---- run state (ops/ctx.c) ------------------------------------------------ */

/* Run state: the model (borrowed), a thread pool, and scratch buffers for
 * steps of up to max_batch rows. Nothing is allocated on the hot path. */
struct ops_ctx;
struct ops_packed; /* ops/packed.h */

/* Activation buffers of a forward pass, each for max_batch tokens, owned by
 * the context. Stages use them freely between calls. */
struct ops_buffers {
    float *x;        /* [max_batch, n_embd] residual stream */
    float *xn;       /* [max_batch, n_embd] normalized input of a sub-block */
    float *proj;     /* [max_batch, n_embd] output of wo / w_down before the residual add */
    float *q;        /* [max_batch, n_head * head_dim], twice that where q_proj carries
                        an output gate */
    float *attn_gate;/* [max_batch, n_head * head_dim] the output gates (qwen35); 1 element
                        without */
    float *dn;       /* gated DeltaNet's rows (backend/cpu_deltanet.c): [max_batch, conv
                        channels + 2 value widths + 2 value heads]; 1 element without */
    float *k, *v;    /* [max_batch, n_head_kv * head_dim] */
    float *att;      /* [max_batch, n_head * head_dim] attention output */
    float *gate, *up;/* [max_batch, n_ff] */
    float *rope_cos; /* [n_rope, max_batch, n_rot / 2] for the positions of the batch,
                        one table per RoPE variant the model uses (models/model.h) */
    float *rope_sin; /* [n_rope, max_batch, n_rot / 2] */
    /* a mixture of experts' (backend/cpu_moe.c; 1-element where the model
     * has none): k = n_expert_used, the largest layer's */
    float *moe_x, *moe_y;  /* [max_batch, n_embd] an expert's rows gathered, its output */
    float *moe_logits;     /* [max_batch, n_expert] the router's */
    float *moe_w;          /* [max_batch, k] the used experts' weights */
    int32_t *moe_sel;      /* [max_batch, k] the used experts */
    int32_t *moe_rows;     /* [max_batch * k] row * k + slot, grouped by expert */
    int64_t *moe_start;    /* [n_expert + 1] each expert's first entry of moe_rows */
};

/* Creates the run state. n_threads <= 0 means one per core. Returns IG_OK or
 * IG_E_NOMEM. */
int ops_ctx_create(const struct model *m, int n_threads, int64_t max_batch,
                   struct ops_ctx **out);
void ops_ctx_free(struct ops_ctx *ctx);

/* RoPE variants the context keeps tables for (1, or 2 when the model has
 * local layers), and variant `rope`'s inverse frequencies [n_rot / 2] and
 * cos/sin scale (ops_rope_freqs of hp.rope[rope], made at creation). */
int ops_ctx_n_rope(const struct ops_ctx *ctx);
const double *ops_ctx_rope_freqs(const struct ops_ctx *ctx, int rope, double *mscale);

/* Threads the context actually uses. */
int ops_ctx_threads(const struct ops_ctx *ctx);

const struct model *ops_ctx_model(const struct ops_ctx *ctx);
int64_t ops_ctx_max_batch(const struct ops_ctx *ctx);
struct ops_buffers *ops_ctx_buffers(struct ops_ctx *ctx);
struct ops_pool *ops_ctx_pool(struct ops_ctx *ctx);

/* Per-thread scratch of ops_ctx_scratch_floats() floats for thread `thread`
 * (64-byte aligned). Matmul and attention kernels use it during one job. */
float *ops_ctx_scratch(struct ops_ctx *ctx, int thread);
int64_t ops_ctx_scratch_floats(const struct ops_ctx *ctx);

/* Grows each thread's scratch to at least `floats` floats: the context
 * sizes it for ops/'s own kernels, and the caller that lends it to another
 * (the CPU backend's attention: cpu_attention_scratch_floats) asks for what
 * that one needs. Earlier scratch pointers are invalid after a growth.
 * Returns IG_OK or IG_E_NOMEM (the old scratch kept). */
int ops_ctx_reserve_scratch(struct ops_ctx *ctx, int64_t floats);

/* The model's packed weights (ops/packed.h) the int8 matmuls of this
 * context read, borrowed: they must outlive the context's matmuls. NULL (the
 * default): none, the kernels read the stored rows. */
void ops_ctx_set_packed(struct ops_ctx *ctx, const struct ops_packed *packed);
const struct ops_packed *ops_ctx_packed(const struct ops_ctx *ctx);

/* ---- primitives ----------------------------------------------------------- */

/* Expert e's [rows, cols] matrix of w (n_expert of them) as a weight of
 * its own, pointing into w's data (or its expert_data[e]): what every
 * matmul below takes (the packed copies are made and found per expert
 * alike). */
static inline struct model_weight ops_weight_expert(const struct model_weight *w, int64_t e)
{
    struct model_weight one = *w;
    one.n_expert = 1;
    one.expert_data = NULL;
    if (w->expert_data)
        one.data = w->expert_data[e];
    else if (w->data)
        one.data = (const uint8_t *)w->data + (size_t)e * (size_t)w->rows * w->row_bytes;
    return one;
}

/* Dequantized weight rows a matmul keeps per thread (see ops_matmul_rows). */
#define OPS_MATMUL_ROW_BUFS 2

/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tokens, r < w->rows, on the
 * context's threads (split by output rows). x is [n_tokens, w->cols], y is
 * [n_tokens, w->rows]; they must not overlap. The weight is read in its stored
 * format; every type quant_dequantize_row supports works (ops/matmul.c). */
void ops_matmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                int64_t n_tokens, float *y);

/* ops_matmul of n weights with the same cols and the same input x, as one
 * job on the pool (fewer synchronizations: Q/K/V, gate/up): y[i] is
 * [n_tokens, w[i]->rows]. */
void ops_matmul_multi(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                      const float *x, int64_t n_tokens, float *const *y);

/* Output rows [r0, r1) of ops_matmul on the calling thread only, with
 * scratch `row_buf` of at least OPS_MATMUL_ROW_BUFS * w->cols floats (tests,
 * and callers that split work themselves). */
void ops_matmul_rows(const struct model_weight *w, int64_t r0, int64_t r1, const float *x,
                     int64_t n_tokens, float *y, float *row_buf);

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w for t < n_tokens; x and y are
 * [n_tokens, n], w an f32 weight of n elements, or NULL: no weight. y may
 * equal x. */
void ops_rmsnorm(const float *x, const struct model_weight *w, int64_t n_tokens, int64_t n,
                 double eps, float *y);

/* Per-pair inverse frequencies inv_freq[0 .. n_rot/2) and the cos/sin
 * scale of RoPE variant r, as llama.cpp computes them (rope_freqs factors,
 * linear and YaRN scaling; ops/rope_freqs.c): pair i of a token at position
 * p turns by p * inv_freq[i], its cos and sin multiplied by *mscale. */
void ops_rope_freqs(const struct model_rope *r, int64_t n_rot, double *inv_freq, double *mscale);

/* Llama 3.1/3.2's rope_scaling ("llama3": factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings) as the per-pair
 * divisors out[0 .. n_rot/2) of a rope_freqs tensor, the form llama.cpp's
 * converter writes: 1 for wavelengths under orig_ctx / high, `factor` over
 * orig_ctx / low, smoothly between. */
void ops_rope_llama3_factors(double base, int64_t n_rot, double factor, double low, double high,
                             double orig_ctx, float *out);

/* Fills rope_cos/rope_sin of the context's buffers for rows at positions
 * pos[0..n_tokens), for every RoPE variant the model's layers use:
 * cos(pos * inv_freq[i]) * mscale (ops_rope_freqs, made once per context). */
void ops_rope_prepare(struct ops_ctx *ctx, const int64_t *pos, int64_t n_tokens);

/* Rotates the first n_rot dims of each of n_heads heads of rows [t0, t1)
 * of the step's x[n_tokens][n_heads * head_dim] with the angles
 * ops_rope_prepare made for them and variant `rope` (MODEL_ROPE_GLOBAL or
 * MODEL_ROPE_LOCAL: the layer's), pairing dims as the model's rope_style
 * says; head_dim is the layer's (n_rot <= head_dim). */
void ops_rope_rows(struct ops_ctx *ctx, float *x, int64_t t0, int64_t t1, int64_t n_heads,
                   int64_t head_dim, int rope);

/* ops_rope_rows at the model-wide hp.head_dim. */
void ops_rope_apply(struct ops_ctx *ctx, float *x, int64_t t0, int64_t t1, int64_t n_heads,
                    int rope);

/* gate[i] = silu(gate[i]) * up[i] for i < n; `exact`: with expf's bits (the
 * exact path), else the int8 path's polynomial exponential (within 2 ulp). */
void ops_swiglu(float *gate, const float *up, int64_t n, bool exact);

/* gate[i] = gelu(gate[i]) * up[i] for i < n, GELU's tanh form:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma's gelu_pytorch_tanh),
 * computed as x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))), the same function;
 * `exact` as for ops_swiglu. */
void ops_geglu(float *gate, const float *up, int64_t n, bool exact);

/* gpt-oss's clamped SwiGLU (MODEL_ACT_SWIGLU_OAI), as ggml's swiglu_oai and
 * transformers' GptOssExperts: g = min(gate[i], limit), u = clamp(up[i],
 * -limit, limit), gate[i] = g / (1 + e^(-alpha g)) * (u + 1), in f32 with
 * expf on either path (alpha 1.702, limit 7 for gpt-oss). */
void ops_swiglu_oai(float *gate, const float *up, int64_t n, float alpha, float limit);

/* x[i] = cap * tanh(x[i] / cap) for i < n (logit soft-capping). */
void ops_softcap(float *x, int64_t n, double cap);

/* x[c .. c + nrot) = H x[c .. c + nrot) for every chunk of nrot values
 * (n a multiple of nrot, a power of two): H the orthonormal Walsh-Hadamard
 * matrix of order nrot (Sylvester's, entries +-1/sqrt(nrot); H H = I), the
 * rotation of a quantized KV cache's rows (ops/hadamard.c). */
void ops_hadamard_rows(float *x, int64_t n, int64_t nrot);

/* x[i] += y[i] for i < n. */
void ops_add(float *x, const float *y, int64_t n);

/* x[t][i] += bias[i] for a 1-row f32 weight of n elements. */
void ops_add_bias(float *x, const struct model_weight *bias, int64_t n_tokens, int64_t n);

/* x[t] = row tokens[t] of tok_embd, dequantized, times hp.embd_scale (1, or
 * Gemma's sqrt(n_embd)); x is [n_tokens, n_embd]. Returns IG_OK, or
 * IG_E_INPUT naming the first id outside [0, n_vocab). */
int ops_embed(const struct model *m, const int32_t *tokens, int64_t n_tokens, float *x);

/* ops_embed where m's table holds the vocabulary rows [v0, v0 + its rows)
 * alone (a tensor-parallel rank's part, models/tp.h): a token outside them
 * gets a row of zeros (the rank's share of the lookup, summed over the
 * ranks: backend/cpu.c). Every id is still checked against the whole
 * vocabulary. */
int ops_embed_part(const struct model *m, const int32_t *tokens, int64_t n_tokens, int64_t v0,
                   float *x);

#endif
