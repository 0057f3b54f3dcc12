/* decode/decode_attn.h: attention of one query token against the KV cache
 * on the GPU, split along the keys (flash-decoding), GQA heads sharing each
 * K/V read. f16 inputs and cache, f32 softmax and sums.
 *
 * Semantics: for query head h (KV head h / (n_head / n_head_kv)),
 *   o[h] = f16(sum_{lo <= j <= pos} softmax_j(scale * q[h] . k[j]) v[j])
 * with pos = *p->pos (the query's own row is already in the cache) and
 * lo = 0, or with a sliding window W > 0 lo = max(0, pos - W + 1) (the
 * query's last W positions; rows before lo are never read).
 * Layout: q, o [n_head][head_dim]; caches [n_head_kv][n_ctx][head_dim].
 *
 * The launch shape depends only on n_ctx and n_splits, never on pos, and
 * pos is read from device memory: a captured graph replays it at every
 * position. The live keys lo..pos are split into ranges of
 * max(64, ceil((pos - lo + 1) / n_splits)), so every split has an even share at
 * any position; splits past pos contribute nothing; a second kernel
 * combines the partial results (in `work`). Covered by tests/emu/test_decode_attn_emu.c and
 * tests/gpu/. */
#ifndef IGNITE_DECODE_DECODE_ATTN_H
#define IGNITE_DECODE_DECODE_ATTN_H

#include "devkit/dev_entry.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct decode_attn_params {
    const uint16_t *q;         /* [n_head][head_dim] f16, after RoPE */
    const uint16_t *k_cache;   /* [n_head_kv][n_ctx][head_dim] f16 */
    const uint16_t *v_cache;   /* same layout */
    const int32_t *pos;        /* one int32 (device memory for the kernel, host for _ref) */
    uint16_t *o;               /* [n_head][head_dim] f16 out */
    float *work;               /* decode_attn_work_floats(p) floats (kernel only) */
    int64_t n_head, n_head_kv, head_dim; /* head_dim 64, 128 or 256; n_head / n_head_kv <= 8 */
    int64_t n_ctx;
    int n_splits;              /* 1 .. DECODE_ATTN_MAX_SPLITS, see decode_attn_choose_splits */
    float scale;               /* usually 1 / sqrt(head_dim) */
    int64_t window;            /* sliding window in keys, the query's included; 0 = none */
};

#define DECODE_ATTN_MAX_SPLITS 128

/* Splits for a context of n_ctx on a device with n_sm multiprocessors:
 * enough blocks to fill it at long contexts, ranges of at least 64 keys. */
int decode_attn_choose_splits(int64_t n_ctx, int64_t n_head_kv, int n_sm);

/* Floats of `work` the launch needs. */
size_t decode_attn_work_floats(const struct decode_attn_params *p);

/* Queues both kernels. IG_E_INTERNAL for unsupported sizes (reported). */
int IG_DEV(decode_attn)(const struct decode_attn_params *p, void *stream);

/* CPU twin (host pointers; work unused): f64 softmax and sums. */
int decode_attn_ref(const struct decode_attn_params *p);

#ifdef __cplusplus
}
#endif

#endif
