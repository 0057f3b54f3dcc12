/* decode/decode_attn.h: attention of B sequences' query rows, q_len (1..16)
 * a sequence (a decode step: 1; a speculative verify step: the drafted
 * tokens and the last accepted one), against the KV pool on the GPU, each
 * sequence through its own block table, split along the keys
 * (flash-decoding), GQA heads and a sequence's rows sharing each K/V read.
 * f16 inputs and pool, f32 softmax and sums.
 *
 * Semantics: for row r of sequence s and query head h (KV head h / (n_head /
 * n_head_kv)), with pos = p->pos[s * q_len + r] (the row's own K/V, and
 * those of the sequence's earlier rows, already in the pool: causal among
 * the rows), lo = 0, or with a sliding window W > 0 lo = max(0, pos - W + 1),
 *   o[s][r][h] = f16(sum_{lo <= j <= pos} softmax_j(scale * q[s][r][h] . k_s[j]) v_s[j])
 * where with sinks the softmax's denominator also holds e^sinks[h] (once a
 * row and head, however many splits; scores and sink share one max),
 * where row j of KV head hk of sequence s is at (kvcache/kvcache.h's layout)
 *   k_cache + t_s[j / 64] * block_stride + hk * head_stride + (j % 64) * head_dim,
 * t_s = block_table + s * table_stride. A sequence's keys outside the union
 * of its rows' lo..pos are never read (the pool there, and every block
 * outside the tables, may hold anything; the keys between two rows' ranges
 * are read, masked: a verify step's rows are consecutive positions, so there
 * are none). A padding row (pos < 0) reads nothing and its o row is written
 * as zeros. Layout: q, o [n_seqs][q_len][n_head][head_dim], pos
 * [n_seqs][q_len].
 *
 * The launch shape depends only on n_seqs, n_ctx, n_splits and the heads,
 * never on pos or the tables, both read from device memory: a captured graph
 * replays for any positions and tables. Each sequence's live keys (the
 * union of its rows' lo..pos) are split into ranges of max(64, ceil((pos - lo + 1) / n_splits)), so a
 * short sequence uses few splits and a long one many, every used split with
 * an even share; splits past pos contribute nothing; the partial results
 * (in `work`) are combined by the last split to finish of each (sequence, KV
 * head, row group), which draws the last ticket, or with tickets NULL by a
 * second kernel (the result is the same bit for bit). A block computes up
 * to 8 (row, query head) pairs of one KV head; a sequence's q_len * group
 * pairs take decode_attn_row_groups blocks a split. Covered by
 * tests/emu/test_decode_attn_emu.c and tests/gpu/. */
#ifndef IGNITE_DECODE_DECODE_ATTN_H
#define IGNITE_DECODE_DECODE_ATTN_H

#include "devkit/dev_entry.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct decode_attn_params {
    const uint16_t *q;          /* [n_seqs][n_head][head_dim] f16, after RoPE */
    const uint16_t *k_cache;    /* the layer's pool (layout above) */
    const uint16_t *v_cache;
    const int32_t *block_table; /* [n_seqs][table_stride] block ids (device memory for the
                                   kernel, host for _ref) */
    int64_t table_stride, block_stride, head_stride; /* elements (struct kv_layout's) */
    const int32_t *pos;         /* [n_seqs][q_len]: each query row's position (device memory
                                   for the kernel, host for _ref); < 0: padding */
    uint16_t *o;                /* [n_seqs][q_len][n_head][head_dim] f16 out */
    float *work;                /* decode_attn_work_floats(p) floats (kernel only) */
    uint32_t *tickets;          /* decode_attn_tickets(p) counters, 0 before the launch and
                                   left 0 after it: the last split of each (sequence, KV
                                   head) combines the partials (one launch); NULL: a
                                   second kernel combines them (kernel only) */
    int64_t n_seqs, n_head, n_head_kv, head_dim; /* head_dim 64, 128, 256 or 512;
                                                    n_head / n_head_kv <= 8 */
    int64_t n_ctx;              /* most positions one sequence holds (<= table_stride * 64);
                                   a pos past it is taken as n_ctx - 1 */
    int n_splits;               /* 1 .. DECODE_ATTN_MAX_SPLITS, see decode_attn_choose_splits */
    float scale;                /* usually 1 / sqrt(head_dim) */
    int64_t window;             /* sliding window in keys, the query's included; 0 = none */
    int64_t q_len;              /* query rows a sequence, 1 .. DECODE_ATTN_MAX_Q_LEN (0: 1) */
    const float *sinks;         /* [n_head] f32 or NULL (device memory for the kernel, host
                                   for _ref): gpt-oss's learned logit of query head h, in
                                   the softmax's denominator with no value (below) */
    int k_dtype, v_dtype;       /* KVQ_F16 (0), KVQ_Q8_0 or KVQ_FP8 (kvcache/kv_devq.h): the
                                   pool's K and V elements; a quantized array's rows are
                                   read as kv_devq.h lays them out, dequantized in
                                   registers */
    int8_t *oq;                 /* NULL, or o's int8 blocks too (the twin: of its o): oq
                                   [n_seqs][q_len][n_head * head_dim] int8 and oqd
                                   [n_seqs][q_len][n_head * head_dim / 32] (d, s) float
                                   pairs (8-byte aligned), each 32 dims of a head quantized
                                   as the quantized GEMV quantizes its x (gk_quantize32:
                                   ops_qmm_quantize's bits; a padding row's zeros too), so
                                   the wo GEMV loads them (gk_qgemv_params.xq) */
    float *oqd;
};

#define DECODE_ATTN_MAX_SPLITS 128
#define DECODE_ATTN_MAX_Q_LEN 16

/* (row, query head) pairs a block computes (the kernel's GM): a sequence's
 * q_len * group pairs of one KV head, 1, 2 or 8 (at q_len 1: the group, each
 * K/V read once for it; 3 to 8 pairs take 8, the last real pair computed again
 * in the rest: ptxas (nvcc 13.0) spills a block of 4 past 255 registers on
 * sm_80, not one of 8). Head dim 512: 1 or 2 (a lane holds 16 dims of q and
 * o a pair; 8 pairs would not fit its registers). */
static inline int decode_attn_block_pairs(const struct decode_attn_params *p)
{
    const int64_t pairs = (p->q_len > 0 ? p->q_len : 1) * (p->n_head / p->n_head_kv);
    return pairs <= 1 ? 1 : pairs <= 2 || p->head_dim > 256 ? 2 : 8;
}

/* Blocks a (split, KV head, sequence) takes: ceil(pairs / block pairs). */
static inline int64_t decode_attn_row_groups(const struct decode_attn_params *p)
{
    const int64_t pairs = (p->q_len > 0 ? p->q_len : 1) * (p->n_head / p->n_head_kv);
    return (pairs + decode_attn_block_pairs(p) - 1) / decode_attn_block_pairs(p);
}

/* Tickets the fused launch needs: [n_seqs][n_head_kv][row groups]. */
size_t decode_attn_tickets(const struct decode_attn_params *p);

/* Splits for n_seqs sequences of up to n_ctx positions on a device with
 * n_sm multiprocessors: about 4 blocks per SM over all sequences and KV
 * heads (fewer splits when n_seqs * n_head_kv already fills the device),
 * ranges of at least 64 keys. */
int decode_attn_choose_splits(int64_t n_ctx, int64_t n_seqs, int64_t n_head_kv, int n_sm);

/* Floats of `work` the launch needs. */
size_t decode_attn_work_floats(const struct decode_attn_params *p);

/* Query rows a sequence: p->q_len, 1 where 0. */
static inline int64_t decode_attn_q_len(const struct decode_attn_params *p)
{
    return p->q_len > 0 ? p->q_len : 1;
}

/* Queues the split kernel (and, without tickets, the combine kernel).
 * IG_E_INTERNAL for unsupported sizes (reported). */
int IG_DEV(decode_attn)(const struct decode_attn_params *p, void *stream);

/* CPU twin (host pointers; work unused): f64 softmax and sums. */
int decode_attn_ref(const struct decode_attn_params *p);

#ifdef __cplusplus
}
#endif

#endif
