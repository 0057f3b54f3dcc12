/* decode/decode_attn.h: attention of B sequences' single query rows (a
 * decode step) against the KV pool on the GPU, each sequence through its
 * own block table, split along the keys (flash-decoding), GQA heads sharing
 * each K/V read. f16 inputs and pool, f32 softmax and sums.
 *
 * Semantics: for sequence s and query head h (KV head h / (n_head /
 * n_head_kv)), with pos = p->pos[s] (the query's own row is already in the
 * pool), lo = 0, or with a sliding window W > 0 lo = max(0, pos - W + 1),
 *   o[s][h] = f16(sum_{lo <= j <= pos} softmax_j(scale * q[s][h] . k_s[j]) v_s[j])
 * where row j of KV head hk of sequence s is at (kvcache/kvcache.h's layout)
 *   k_cache + t_s[j / 64] * block_stride + hk * head_stride + (j % 64) * head_dim,
 * t_s = block_table + s * table_stride. Rows outside lo..pos are never read
 * (the pool there, and every block outside the tables, may hold anything). A
 * padding row (pos < 0) reads nothing and its o row is written as zeros.
 * Layout: q, o [n_seqs][n_head][head_dim].
 *
 * The launch shape depends only on n_seqs, n_ctx, n_splits and the heads,
 * never on pos or the tables, both read from device memory: a captured graph
 * replays for any positions and tables. Each sequence's live keys lo..pos
 * are split into ranges of max(64, ceil((pos - lo + 1) / n_splits)), so a
 * short sequence uses few splits and a long one many, every used split with
 * an even share; splits past pos contribute nothing; the partial results
 * (in `work`) are combined by the last split to finish of each (sequence, KV
 * head), which draws the last ticket, or with tickets NULL by a second
 * kernel (the result is the same bit for bit). Covered by
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
    const int32_t *pos;         /* [n_seqs]: each query's position (device memory for the
                                   kernel, host for _ref); < 0: padding */
    uint16_t *o;                /* [n_seqs][n_head][head_dim] f16 out */
    float *work;                /* decode_attn_work_floats(p) floats (kernel only) */
    uint32_t *tickets;          /* [n_seqs][n_head_kv] counters, 0 before the launch and
                                   left 0 after it: the last split of each (sequence, KV
                                   head) combines the partials (one launch); NULL: a
                                   second kernel combines them (kernel only) */
    int64_t n_seqs, n_head, n_head_kv, head_dim; /* head_dim 64, 128 or 256;
                                                    n_head / n_head_kv <= 8 */
    int64_t n_ctx;              /* most positions one sequence holds (<= table_stride * 64);
                                   a pos past it is taken as n_ctx - 1 */
    int n_splits;               /* 1 .. DECODE_ATTN_MAX_SPLITS, see decode_attn_choose_splits */
    float scale;                /* usually 1 / sqrt(head_dim) */
    int64_t window;             /* sliding window in keys, the query's included; 0 = none */
};

#define DECODE_ATTN_MAX_SPLITS 128

/* Splits for n_seqs sequences of up to n_ctx positions on a device with
 * n_sm multiprocessors: about 4 blocks per SM over all sequences and KV
 * heads (fewer splits when n_seqs * n_head_kv already fills the device),
 * ranges of at least 64 keys. */
int decode_attn_choose_splits(int64_t n_ctx, int64_t n_seqs, int64_t n_head_kv, int n_sm);

/* Floats of `work` the launch needs. */
size_t decode_attn_work_floats(const struct decode_attn_params *p);

/* Queues the split kernel (and, without tickets, the combine kernel).
 * IG_E_INTERNAL for unsupported sizes (reported). */
int IG_DEV(decode_attn)(const struct decode_attn_params *p, void *stream);

/* CPU twin (host pointers; work unused): f64 softmax and sums. */
int decode_attn_ref(const struct decode_attn_params *p);

#ifdef __cplusplus
}
#endif

#endif
