/* backend/gpu_impl.h: what the files of the CUDA backend share (gpu.c:
 * memory, set-up, the step's inputs and the decode graphs; gpu_forward.c:
 * the layer loop, its mixers and FFNs, the output head; gpu_weights.c:
 * weights onto the device; gpu_matmul.c: the one matrix-product dispatch;
 * gpu_cache.c: the cache to and from the host). Private to backend/. Functions shared between the files carry
 * IG_DEV names like the public ones: the CUDA and emulated builds meet in
 * one test program. */
#ifndef IGNITE_BACKEND_GPU_IMPL_H
#define IGNITE_BACKEND_GPU_IMPL_H

#include "backend/gpu.h"
#include "backend/gpu_plan.h"
#include "decode/decode_attn.h"
#include "device/device.h"
#include "ops/gpu_qmm.h"
#include "prefill/flash_attn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gk_dn_seq;

/* A weight matrix on the device: its rows in parts of one type each
 * (quantized blocks or f16; backend/gpu_plan.h), e.g. Q|K in Q4_K then V in
 * Q6_K. Read only through gpu_matmul and gpu_embed. */
struct gpu_matrix {
    int64_t rows, cols;
    int n_parts;
    struct gk_qmat part[GPU_PLAN_MAX_PARTS];
    int64_t row0[GPU_PLAN_MAX_PARTS]; /* first row of each part */
};

/* A layer's weights on the device, by the role of their row in the table
 * of tensors (models/tensors.h): a fused group at its first role, every
 * other weight at its own; the later roles of a group and the weights the
 * model lacks stay empty (no rows, NULL). */
struct gpu_layer {
    /* [LAYER_WQ]: Q|K|V [qkv_rows][n_embd]; [LAYER_WO]: [n_embd][q_dim];
     * [LAYER_FFN_GATE]: gate|up [2 * n_ff][n_embd], gate rows then up rows;
     * [LAYER_FFN_DOWN]: [n_embd][n_ff] */
    struct gpu_matrix mat[MODEL_LAYER_ROLES];
    /* f32: the norms ([n_embd], Q/K head norms [head_dim]); [LAYER_BQ]: the
     * Q|K|V biases [qkv_rows] */
    float *vec[MODEL_LAYER_ROLES];
    uint16_t *k_cache, *v_cache; /* the pool: [n_blocks][n_head_kv][KV_BLOCK][head_dim];
                                  * a layer sharing another's KV: the source's arrays */
    unsigned char *state;      /* a recurrent layer's: [n_states][state_bytes], else NULL */
    unsigned char *ckpt;       /* and the pool's one checkpoint [ckpt_bytes] (a prompt cut
                                * inside a chunk, ops/gpu_deltanet.h), else NULL */
};

/* Decode steps are padded to a bucket of 1, 2, 4, ... rows (up to
 * n_slots rounded up to a power of two), each bucket's step captured once
 * as a graph: at most this many buckets (2^16 sequences). */
#define GPU_MAX_BUCKETS 17

/* A mixture of experts' step buffers (backend/gpu_moe.c), for max_batch
 * rows of n_expert_used (row, slot) pairs each; NULL without experts. */
struct gpu_moe_bufs {
    int32_t *sel;      /* [pairs] each pair's expert (ascending within a row) */
    float *wts;        /* [pairs] its routing weight */
    int32_t *order;    /* [pairs] the pairs by expert */
    int32_t *tiles;    /* [max_tiles][3] (expert, first, count) */
    int32_t *n_tiles;  /* [1] */
    uint16_t *h;       /* [pairs][n_ff] f16: act(gate) * up of each pair */
    float *y;          /* [pairs][n_embd] each pair's down product */
    float *shexp_w;    /* qwen35moe: [max_batch] each row's shared expert gate, and */
    float *shexp_y;    /* [max_batch][n_embd] the shared expert's output (else NULL) */
    float *acc;        /* gemma4: [2][max_batch][n_embd] the experts' sum, then the FFN's,
                          and a tensor-parallel rank's dense MLP output after its rows
                          (else NULL) */
    int64_t mma_layers; /* layer steps queued whose expert products took gk_moe_mma */
};

/* Verify steps take q_len 2, 4, 8 or 16 rows a sequence (the most any
 * sequence has, rounded up: 4 graphs a bucket at most). */
#define GPU_VERIFY_Q_LOG2 4

struct gpu_backend {
    struct backend base;       /* first: the backend.h view */
    struct dev *dev;
    struct dev_info info;
    void *stream;
    const struct model *m;
    int64_t n_ctx, max_rows;   /* backend_opts' */
    int64_t max_batch;         /* activation rows: max_rows, or the largest bucket when more */
    int n_slots;
    /* The pool (f16, each layer's layout kvcache.h's: gpu_layer_layout) and
     * the step's compacted tables: sequence s of a step has its table at
     * tables + s * table_stride. */
    int64_t n_blocks, table_stride;
    /* The window rule (kvcache.h; base.o.n_window_blocks): the sliding-window
     * layers' K/V in a block-id space of their own, n_wblocks blocks and one
     * more, `n_wblocks` itself, never written and zero: the staged window
     * tables (wtables, beside tables, each sequence's kv_seq.wtable) point
     * the blocks given back at it, so a tile that starts behind a row's
     * window loads zeros it masks, never another sequence's rows or memory
     * outside the pool. 0: no window side, every layer through tables. */
    int64_t n_wblocks;
    int32_t *wtables, *h_wtables; /* [table_rows][table_stride], device and staged */
    int64_t n_states;          /* recurrent state slots (base.n_states) */
    int64_t max_seqs;          /* the largest decode bucket (n_slots rounded up) */
    int64_t q_dim, kv_dim, qkv_rows, n_ff; /* the largest layer's (model_layers_max): the
                                              activations' widths */
    enum backend_gpu_weights weights_mode;
    struct gpu_layer *layers;
    struct gpu_matrix mat[MODEL_ROLES]; /* [MODEL_TOK_EMBD], [MODEL_OUTPUT] (the same when tied) */
    int64_t vocab0;            /* the vocabulary row mat[MODEL_TOK_EMBD] starts at (a
                                  tensor-parallel rank's part; else 0) */
    float *vec[MODEL_ROLES];            /* [MODEL_OUTPUT_NORM] */
    double *inv_freq[2];       /* [model_rope_dims / 2] per RoPE variant (MODEL_ROPE_GLOBAL,
                                  _LOCAL) */
    double mscale[2];          /* their cos/sin factors (YaRN's attention factor) */
    /* activations for max_batch tokens; logits for logit_rows rows */
    float *x, *qkv, *gu, *logits;
    int64_t logit_rows;        /* max(max_seqs, GPU_HEAD_ROWS or max_rows when fewer) */
    int32_t *greedy;           /* [logit_rows] a greedy step's tokens (gk_greedy_rows) */
    int32_t *h_greedy;         /* host [max(max_seqs, verify_rows)]: a decode step's, before
                                  the wanted ones */
    float *proj;               /* [max_batch][n_embd] before a post norm, or NULL */
    uint16_t *xn, *q16, *k16, *v16, *att16, *h16;
    /* Gemma 4's shared KV: [local][0 K, 1 V] a prefill step's rows of K/V
     * that a source layer of that kind leaves for the layers reading its
     * K/V, [max_batch][kv_dim] f16; NULL without such layers (gpu_gemma4.c) */
    uint16_t *kv_keep[2][2];
    /* Gemma 4's per-layer embeddings (has_ple; else NULL): the step's token
     * rows and projection [max_batch][n_layer * n_embd_per_layer], and each
     * layer's gate | input rows [n_layer][max_batch][2 n_embd_per_layer] */
    float *ple_tok, *ple_proj, *ple_gu;
    /* The step's inputs in fixed device buffers (a graph replays them for
     * any batch of its bucket), staged in pinned host memory (h_*) */
    int32_t *tokens, *pos;     /* [max_batch] each row's token and position (-1: padding) */
    int32_t *tables;           /* [max(max_seqs, verify_rows)][table_stride] */
    struct prefill_attn_seq *seqs; /* [max_seqs] a prefill step's sequences */
    int32_t *h_tokens, *h_pos, *h_tables;
    struct prefill_attn_seq *h_seqs;
    /* A mixed prefill step (gpu.c's order_rows): its sequences as the
     * forward takes them, those of several rows first, and each batch
     * row's row in that order (host [max_seqs], [max_batch]) */
    struct backend_seq *h_order;
    int32_t *row_of;
    bool mixed_decode;         /* IGNITE_GPU_MIXED (default 1): a prefill step's one-row
                                  sequences through decode_attn; 0: the prefill kernel's */
    int64_t mixed_steps;       /* prefill steps that took that route (gpu_get_info) */
    int64_t *want;             /* host [max_batch]: the step's rows that want logits */
    void *h_stage;             /* the pinned allocation h_* point into */
    void *h_logits;            /* base.host_logits, pinned */
    float *attn_work;          /* the decode attention's, for the largest bucket: */
    size_t attn_work_floats;   /* its floats */
    uint32_t *attn_tickets;    /* its tickets (zero between launches: the combine in the
                                  last split) */
    uint32_t *norm_ticket;     /* the GEMVs' norm tail's (one, zero between launches) */
    uint32_t *attn_tiles;      /* the prefill attention's work counter (two, zero between
                                  launches: prefill_attn_params.tile_counter) */
    bool fuse;                 /* IGNITE_GPU_FUSE (default 1): a decode step's fused
                                  launches; 0: the earlier one launch per step */
    const float *xn_of;        /* the norm weights whose RMSNorm of x a fused product's
                                  tail left in xn (the next norm launch is skipped), or
                                  NULL */
    int8_t *xq;                /* [max_batch][n_embd] xn's int8 blocks from that tail, and */
    float *xqd;                /* [max_batch][n_embd / 32] their (d, s) (NULL: n_embd not
                                  a multiple of 32) */
    bool xq_ready;             /* xq holds xn's blocks: quantized GEMVs of xn load them */
    int8_t *hq;                /* [max_batch][n_ff] h16's int8 blocks from the quantized
                                  gate|up GEMV's tail, and */
    float *hqd;                /* [max_batch][n_ff / 32] their (d, s) (NULL: n_ff not a
                                  multiple of 32) */
    uint32_t *glu_tickets;     /* [n_ff / 32] that tail's (zero between launches) */
    int64_t hq_ld;             /* the row stride the last gate|up GEMV wrote them at */
    bool hq_ready;             /* hq holds h16's blocks: the down GEMV loads them */
    bool norm_blocks;          /* a fused decode step: a norm launch (norm_rows) also writes
                                  xn's blocks into xq (gk_rmsnorm_xq) */
    int8_t *oq;                /* [max_batch][q_dim] att16's int8 blocks from a fused decode
                                  step's attention (decode_attn_params.oq), and */
    float *oqd;                /* [max_batch][q_dim / 32] their (d, s) (NULL: q_dim not a
                                  multiple of 32) */
    int64_t oq_ld;             /* the row stride (the layer's q_dim) they were written at */
    bool oq_ready;             /* oq holds att16's blocks: the wo GEMV loads them */
    uint16_t *mm_scratch;      /* f16 slabs of dequantized weights (gpu_matmul) */
    size_t mm_scratch_bytes;
    bool emu_kernels;          /* emulated build: products by the emulated kernels, not the twins */
    int n_buckets;
    int n_splits[GPU_MAX_BUCKETS];          /* decode attention splits per bucket */
    struct dev_graph *graphs[GPU_MAX_BUCKETS]; /* each bucket's decode step, once captured */
    bool no_graph;             /* capture unavailable (the emulator) or failed */
    void **allocs;             /* every device allocation, for free */
    size_t n_allocs, cap_allocs;
    size_t weight_bytes, kv_bytes, device_bytes;
    struct kv_store *host_kv;  /* the last export's host copy */
    int32_t *host_table;       /* its table: 0, 1, 2, ... */
    /* A step's backend_batch.on_layer (gpu_cache.c): the step's batch
     * while the hook wants its layers (else NULL), the host store their rows
     * are copied into layer by layer (kept for the next such step, grown as
     * needed), where each sequence is in it and their tables there */
    const struct backend_batch *layer_batch;
    struct kv_store *layer_kv;
    struct backend_layer_seq *layer_seqs; /* [n_slots] */
    int32_t *layer_tables;
    int64_t layer_tables_cap;
    /* Their copies on the device's copy stream (gpu_layer_out; false:
     * IGNITE_PD_COPY_STREAM=0): layer l's rows downloaded into
     * layer_stage[l & 1] (page-locked, layer_stage_bytes each, kept and grown
     * as needed) once the main stream is past layer_mixed[l & 1], done at
     * layer_copied[l & 1]; layer_due the layer whose hook comes next (-1:
     * none) */
    bool layer_async;
    int64_t layer_due;
    void *layer_stage[2];
    size_t layer_stage_bytes;
    struct dev_event *layer_mixed[2], *layer_copied[2];
    /* batch --pd's NCCL transfers on the transfer stream (gpu_kv_p2p.c):
     * p2p_main marks the main stream's work the next group waits for,
     * p2p_done the last group queued (both NULL until the first);
     * p2p_sent: sends queued since the main stream last waited for them;
     * p2p_behind: the main stream waits for transfers since the last step
     * began, which the next step's host waits are then watched for
     * (gpu_kv_p2p_watch); p2p the communicator of the last group queued
     * (the caller's: it outlives the steps behind its transfers) */
    struct dev_event *p2p_main, *p2p_done;
    bool p2p_sent, p2p_behind;
    struct gpu_p2p *p2p;
    struct gpu_moe_bufs moe;   /* LAYER_FFN_MOE's (backend/gpu_moe.c) */
    /* Qwen3.5's hybrid layers (gpu_deltanet.c; NULL without): the step's
     * sequences [max_seqs] (staged in pinned h_dn_seqs), the DeltaNet
     * mixer's activations [max_batch][...], gated attention's raw Q|K|V
     * product and gates */
    struct gk_dn_seq *dn_seqs, *h_dn_seqs;
    int64_t dn_chunk_rows;     /* the step's rows in sequences for gk_dn_chunk (staged) */
    bool dn_recurrent;         /* IGNITE_DELTANET=recurrent: every row by gk_dn_rule */
    bool dn_ckpt;              /* prompts keep checkpoints (not with dn_recurrent) */
    float *dn_qkv, *dn_z, *dn_beta, *dn_alpha, *dn_out;
    uint16_t *dn_out16;
    float *gate_raw, *gate;
    /* Verify steps (a sequence of 2..16 rows: the decode kernels, q_len rows a
     * sequence): the q_len the forward being run or captured takes (1: a
     * decode step), the most rows one takes (bucket x q_len; 0: none), and
     * each (bucket, log2 q_len)'s graph. Its rows' tables are staged one a
     * row (the RoPE's pool write reads a row's own). */
    int64_t q_len, verify_rows, verify_steps;
    struct dev_graph *verify_graphs[GPU_MAX_BUCKETS][GPU_VERIFY_Q_LOG2 + 1];
    struct gpu_tp *tp;         /* a tensor-parallel rank's (gpu_tp.c), NULL in one process */
};

/* Rows of one output-head GEMM when several rows of a prefill step want
 * logits (the logits buffer holds at least this many rows). */
#define GPU_HEAD_ROWS 64

/* Layer l's K and V pool as kvcache.h describes it (device pointers; a
 * shared layer's are its source's). */
static inline struct kv_layout gpu_layer_layout(const struct gpu_backend *g, int64_t l)
{
    return kv_memory_layout(g->base.kv_mem, l, g->layers[l].k_cache, g->layers[l].v_cache);
}

/* Whether layer l reads and writes its K/V (its own or its source's)
 * through the window tables: the window rule and a sliding-window layer. */
static inline bool gpu_layer_windowed(const struct gpu_backend *g, int64_t l)
{
    return g->n_wblocks && kv_layer_windowed(g->base.kv_mem, l);
}

/* The staged block tables layer l's kernels index (device memory), and the
 * blocks of its arrays (the window side's with its zero block). */
static inline const int32_t *gpu_layer_tables(const struct gpu_backend *g, int64_t l)
{
    return gpu_layer_windowed(g, l) ? g->wtables : g->tables;
}

static inline int64_t gpu_layer_blocks(const struct gpu_backend *g, int64_t l)
{
    return gpu_layer_windowed(g, l) ? g->n_wblocks + 1 : g->n_blocks;
}

/* The kernels' name (kvcache/kv_devq.h's KVQ_*) of a pool element type:
 * q8_0 and fp8 regions, else f16. */
static inline int gpu_kvq_type(enum kv_dtype t)
{
    return t == KV_Q8_0 ? 1 : t == KV_FP8 ? 2 : 0;
}

/* Rows of layer L's fused Q|K|V product (the row stride of g->qkv in it). */
static inline int64_t gpu_layer_qkv_rows(const struct model_layer *L)
{
    return (L->n_head + 2 * L->n_head_kv) * L->head_dim;
}

/* The decode attention of bucket i (2^i rows) in layer l: its sizes,
 * strides, scale, window and sinks (the other pointers are the caller's). */
static inline struct decode_attn_params gpu_bucket_attn(const struct gpu_backend *g, int i,
                                                        int64_t l)
{
    const struct model_layer *L = &g->m->layers[l];
    struct kv_layout lay = gpu_layer_layout(g, l);
    struct decode_attn_params ap = {0};
    ap.n_seqs = (int64_t)1 << i;
    ap.n_head = L->n_head;
    ap.n_head_kv = L->n_head_kv;
    ap.head_dim = L->head_dim;
    ap.n_ctx = g->n_ctx;
    ap.n_splits = g->n_splits[i];
    ap.table_stride = g->table_stride;
    ap.block_stride = lay.block_stride;
    ap.head_stride = lay.head_stride;
    ap.scale = (float)L->attn_scale;
    ap.window = L->window;
    ap.sinks = g->layers[l].vec[LAYER_ATTN_SINKS]; /* gpt-oss's; NULL for the others */
    ap.k_dtype = gpu_kvq_type(lay.dtype);
    ap.v_dtype = gpu_kvq_type(lay.dtype_v);
    return ap;
}

/* A device allocation of `bytes` into *(void **)out, remembered for
 * the backend's destroy and added to *account when not NULL. */
int IG_DEV(gpu_alloc)(struct gpu_backend *g, size_t bytes, void *out, size_t *account);

/* backend_ops.kv_export / kv_import (gpu_cache.c). */
int IG_DEV(gpu_kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n_pos,
                          const struct kv_store **st, const int32_t **table, int64_t *slot);
int IG_DEV(gpu_kv_import)(struct backend *b, const struct backend_seq *seq,
                          const struct kv_store *src, int64_t n_pos);

/* A step with backend_batch.on_layer (gpu_cache.c; a prefill step, or a
 * decode or verify step launched ungraphed): the host store for the rows
 * the hook reads (batch->layer_from: each such sequence's
 * blocks from its first position's to its last row's, and a state slot
 * each where the model has recurrent layers), then g->layer_batch = batch.
 * gpu_layer_out after a layer's mixer: its rows (and states) queued for
 * the store on the copy stream, one download a run of blocks consecutive
 * in both (each block of a quantized pool, reordered as kv_export does, on
 * the host), after an event of the main stream, into page-locked staging;
 * then the previous layer's hook, once its copies are done (the host waits
 * for their event only). gpu_layer_out_end, after the step's last launch:
 * the last layer's hook, and the main stream ordered after the copies; it
 * returns st (the step's status so far: not IG_OK, the copies left are
 * waited for and no hook runs) or its own error. Under
 * IGNITE_PD_COPY_STREAM=0 the downloads are synchronous and each hook
 * comes at its layer. Nothing while g->layer_batch is NULL; with
 * batch->layer_device no store and no copy, the hook called with NULLs (it
 * sends from the device: gpu_kv_p2p.c). IG_OK, or IG_E_NOMEM / IG_E_DEVICE
 * after one line. gpu_layer_out_free: the staging and events (the
 * backend's destroy). */
int IG_DEV(gpu_layer_out_begin)(struct gpu_backend *g, const struct backend_batch *batch);
/* gpu_kv_p2p.c: the main stream waits for the sends queued since it last
 * did, before a step or an import writes the pool (the rule's why there);
 * gpu_kv_p2p_close: the transfers done (the host waits), their events gone. */
int IG_DEV(gpu_kv_p2p_fence)(struct gpu_backend *g);
void IG_DEV(gpu_kv_p2p_close)(struct gpu_backend *g);
/* Whether the step about to run has its host waits watched
 * (gpu_p2p_wait_begin: its main stream waits for transfers); the step ends
 * with gpu_p2p_wait_end(g->p2p, that). */
bool IG_DEV(gpu_kv_p2p_watch)(struct gpu_backend *g);
int IG_DEV(gpu_layer_out)(struct gpu_backend *g, int64_t l);
int IG_DEV(gpu_layer_out_end)(struct gpu_backend *g, int st);
void IG_DEV(gpu_layer_out_free)(struct gpu_backend *g);

/* Allocates and fills every weight, and the matmul scratch for max_batch
 * rows (gpu_weights.c). */
int IG_DEV(gpu_upload_weights)(struct gpu_backend *g);

/* y[t][r] = sum_c w[r][c] x[t][c] + beta y[t][r] for t < n, r < w->rows:
 * x f16 [n][ld_x], y f32 [n][ld_y], beta 0 or 1 (gpu_matmul.c). Each part
 * goes the way gk_qmm_choose says for n rows (GEMV, tensor cores, or f16
 * slabs for the device GEMM); queues work only, so a decode step captures. */
int IG_DEV(gpu_matmul)(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *x,
                       int64_t ld_x, int64_t n, float *y, int64_t ld_y, float beta);

/* Whether the gate|up product `w` of n rows takes gpu_matmul_glu: fused
 * (g->fuse), one part (gate and up of one type), a GEMV path for n rows. */
bool IG_DEV(gpu_matmul_glu_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                               int64_t n);

/* h[t][i] = f16(act(gate_i . x[t]) * (up_i . x[t])) for i < w->rows / 2 (act
 * GK_GLU_SILU or GK_GLU_GELU): the gate|up GEMV with the activation in its
 * epilogue, one launch (gpu_matmul_glu_ok said yes). */
int IG_DEV(gpu_matmul_glu)(struct gpu_backend *g, const struct gpu_matrix *w, const uint16_t *x,
                           int64_t ld_x, int64_t n, int act, uint16_t *h, int64_t ld_h);

/* Whether the residual product `w` of n rows takes gpu_matmul_norm: fused,
 * one part, a GEMV path. */
bool IG_DEV(gpu_matmul_norm_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                                int64_t n);

/* y[t] += W x[t] (the residual add, y [n][ld_y]), then xn[t] = f16(RMSNorm(y[t])
 * norm_w) ([n][w->rows]) by the GEMV's last block (g->norm_ticket): the
 * next product's input without a norm launch (gpu_matmul_norm_ok said yes). */
int IG_DEV(gpu_matmul_norm)(struct gpu_backend *g, const struct gpu_matrix *w,
                            const uint16_t *x, int64_t ld_x, int64_t n, float *y, int64_t ld_y,
                            const float *norm_w, float eps, uint16_t *xn);

/* Whether a layer's Q|K|V product `w` of n rows takes gpu_matmul_rope:
 * fused, one part, a GEMV path. */
bool IG_DEV(gpu_matmul_rope_ok)(const struct gpu_backend *g, const struct gpu_matrix *w,
                                int64_t n);

/* The Q|K|V product with gk_qkv_rope's work (rope: its params, qkv unused)
 * in the GEMV's epilogue: q and K/V out, one launch. */
int IG_DEV(gpu_matmul_rope)(struct gpu_backend *g, const struct gpu_matrix *w,
                            const uint16_t *x, int64_t ld_x, int64_t n,
                            const struct gk_qkv_params *rope);

/* Gemma 4 (gpu_gemma4.c): layer l's V heads in g->qkv RMS-normed without a
 * weight (n rows; nothing without has_v_norm), and rows residuals from x
 * times the layer's output scale (nothing without has_out_scale). */
int IG_DEV(gpu_gemma4_v_norm)(struct gpu_backend *g, int64_t l, int64_t n);
int IG_DEV(gpu_gemma4_out_scale)(struct gpu_backend *g, int64_t l, float *x, int64_t rows);

/* Per-layer embeddings (gpu_gemma4.c; nothing without has_ple): the step's
 * n rows' inputs from g->tokens and the embeddings in g->x (after embed),
 * and layer l's residual rows row0 .. row0 + rows given theirs (after its
 * FFN). Both rewrite g->xn. */
int IG_DEV(gpu_gemma4_ple_inputs)(struct gpu_backend *g, int64_t n);
int IG_DEV(gpu_gemma4_ple_layer)(struct gpu_backend *g, int64_t l, int64_t row0, int64_t rows);

/* Shared KV (gpu_gemma4.c): kv_keep's buffers where a layer reads another's
 * K/V (alloc_state); and where layer l's prefill attention reads its rows'
 * K (v 0) or V (v 1): the kept rows of its source (a shared layer) or its
 * own (a source: its RoPE writes them there), else g->k16 / g->v16. */
int IG_DEV(gpu_gemma4_alloc)(struct gpu_backend *g);
uint16_t *IG_DEV(gpu_gemma4_kv_rows)(const struct gpu_backend *g, int64_t l, int v);

/* x[t] = row tokens[t] of the embedding table (f32 [n][n_embd]); on a
 * tensor-parallel rank zeros for the tokens outside its rows (vocab0). */
int IG_DEV(gpu_embed)(struct gpu_backend *g, const int32_t *tokens, int64_t n, float *x);

/* The forward (gpu_forward.c). A prefill step's n rows of n_seqs
 * sequences (inputs, tables and h_seqs staged): embeddings and every layer;
 * in the last, rows want0.. alone go on past the mixing (none: want0 = n).
 * The last n_single sequences have one row each, the step's last rows, and
 * go through decode_attn (their K/V into the pool by the RoPE launch); the
 * others through the prefill kernel (0: every sequence). The residuals end
 * in g->x. Queues work only. */
int IG_DEV(gpu_forward_prefill)(struct gpu_backend *g, int64_t n, int64_t n_seqs,
                                int64_t n_single, int64_t want0);

/* Bucket `bucket`'s forward: 2^bucket rows, one per sequence (g->q_len
 * rows a sequence in a verify step, each row with its table), tokens,
 * positions (-1: padding) and tables read from device memory, so a graph
 * of it replays for any batch of that size. Logits of every row into
 * g->logits. Queues work only (a decode graph captures it). */
int IG_DEV(gpu_forward_decode)(struct gpu_backend *g, int bucket);

/* The logits of rows want[0..k) (ascending; residuals in g->x) into host
 * `logits` [k][n_vocab], or with `greedy` their greedy tokens into it [k]:
 * per group of up to logit_rows rows, the final norm gathers them into
 * g->xn (one launch per run of consecutive rows), one output-head product,
 * one download. */
int IG_DEV(gpu_head_rows)(struct gpu_backend *g, const int64_t *want, int64_t k, float *logits,
                          int32_t *greedy);

/* backend/gpu_moe.c: LAYER_FFN_MOE over the residual rows row0 .. n of
 * layer l (gpu_forward.c's FFN table), and its buffers (g->moe, for
 * max_batch rows; nothing without experts), and their bytes for the plan. */
int IG_DEV(gpu_ffn_moe)(struct gpu_backend *g, int64_t l, int64_t row0, int64_t n);
int IG_DEV(gpu_moe_alloc)(struct gpu_backend *g);
size_t IG_DEV(gpu_moe_buf_bytes)(const struct model *m, int64_t max_batch);

/* Reads the matmul settings of the environment once per backend:
 * IGNITE_QMM_PATH (checked, ops/gpu_qmm.h), IGNITE_GPU_FUSE=0|1 (checked:
 * g->fuse) and, in the emulated build, IGNITE_EMU_MATMUL=kernels
 * (gpu_matmul.c). */
int IG_DEV(gpu_matmul_setup)(struct gpu_backend *g);

/* ---- Qwen3.5's hybrid layers (gpu_deltanet.c) ---------------------------- */

/* Allocates the buffers above that the model's layers need. */
int IG_DEV(gpu_deltanet_alloc)(struct gpu_backend *g);

/* The bytes gpu_deltanet_alloc takes (gpu.c's memory check). */
double IG_DEV(gpu_deltanet_act_bytes)(const struct model *m, int64_t max_batch,
                                      int64_t max_seqs);

/* The step's sequences to dn_seqs (rows entries: a decode bucket's padding
 * past the batch's); nothing without DeltaNet layers. Queues work only. */
int IG_DEV(gpu_deltanet_stage)(struct gpu_backend *g, const struct backend_batch *batch,
                               int64_t rows);

/* DeltaNet layer l over n rows of n_seqs sequences (dn_seqs), from xn (its
 * input norm's output) to dn_out16 [n][v_heads * head_dim], ssm_out's input;
 * each sequence's state read and written in its slot. */
int IG_DEV(gpu_deltanet_mix)(struct gpu_backend *g, int64_t l, int64_t n, int64_t n_seqs);

/* Gated attention layer l's Q|K|V product of xn's n rows: queries, K, V to
 * g->qkv (gpu_layer_qkv_rows wide), the output gates to g->gate. */
int IG_DEV(gpu_gated_qkv)(struct gpu_backend *g, int64_t l, int64_t n);

/* ---- a tensor-parallel rank (gpu_tp.c) ---------------------------------------------- */

struct cpu_tp;
struct gpu_reduce;

/* g->tp for the rank's share (its vocabulary rows; the caller's). */
int IG_DEV(gpu_tp_open)(struct gpu_backend *g, struct cpu_tp *share);
void IG_DEV(gpu_tp_free)(struct gpu_backend *g);

/* The rank's CUDA device: first + its rank on this machine, modulo
 * n_devices; *ranks_here: the job's ranks on this machine. */
int IG_DEV(gpu_tp_device)(int first, int n_devices, int *ranks_here);

/* A residual product of a rank (add_product's, wo and down): its partial
 * sum, x's rows once in it (rank 0's beta), left for gpu_tp_reduce; w
 * without parts (an empty share: no columns) runs no product, its part
 * zeros. */
int IG_DEV(gpu_tp_partial)(struct gpu_backend *g, const struct gpu_matrix *w,
                           const uint16_t *in, int64_t ld_in, int64_t rows, float *x,
                           const float *post_norm);

/* A residual block a rank adds into x itself (the mixture of experts: its
 * experts' weighted sum, backend/gpu_moe.c): x's `rows` rows left for
 * gpu_tp_reduce. Returns whether the rank keeps the residual in them (rank
 * 0); the others' rows must hold their part alone (zeroed before the add). */
bool IG_DEV(gpu_tp_partial_rows)(struct gpu_backend *g, float *x, int64_t rows);

/* The waiting partial sum summed over the ranks into the residual (nothing
 * where none waits). */
int IG_DEV(gpu_tp_reduce)(struct gpu_backend *g);

/* The step's embedded rows x [n][n_embd] (each rank's tokens, zeros for the
 * others') summed over the ranks in place: every rank's whole rows. */
int IG_DEV(gpu_tp_embedded)(struct gpu_backend *g, float *x, int64_t n);

/* rows [n][n_embd] of a rank's partial sums summed over the ranks in place
 * (gemma4's MoE: its two sums, each before its norm). */
int IG_DEV(gpu_tp_sum_rows)(struct gpu_backend *g, float *rows, int64_t n);

/* Gemma 4's per-layer table rows of the step rows [n][n_layer *
 * n_embd_per_layer] (each rank's tokens, zeros for the others') summed over
 * the ranks in place, as gpu_tp_embedded's. */
int IG_DEV(gpu_tp_ple_rows)(struct gpu_backend *g, float *rows, int64_t n);

/* A step of a rank: run (the one-process step) with the logits the rank
 * computes (its vocabulary rows) gathered into rank 0's batch. A failure
 * past the step's checks ends the job (the others would wait). */
int IG_DEV(gpu_tp_step)(struct gpu_backend *g, const struct backend_batch *batch,
                        int (*run)(struct gpu_backend *, const struct backend_batch *));

/* The host path's all-reduce over g's device (gpu_reduce_host.c). */
int IG_DEV(gpu_reduce_host_open)(struct dev *dev, struct gpu_reduce **out);

#endif
