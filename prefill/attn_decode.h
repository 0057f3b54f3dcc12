/* prefill/attn_decode.h: the score and accumulation loops of a decode item
 * (one query token and its KV head's query heads, or some of them) straight from an
 * f16 K/V tile, the halves converted in registers. prefill/attn_tiled.c
 * runs them for such items; each result is bit for bit what its general
 * loops give. Covered by tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_DECODE_H
#define IGNITE_PREFILL_ATTN_DECODE_H

#include "core/half.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether the kernels below run at full speed here (F16C, and FMA with
 * prefill/attn_fused.h's attn_fma_forms_ok); elsewhere they work, element
 * by element, and the caller's scratch conversion is faster. */
bool attn_decode_f16_fast(void);

/* s[r * s_stride + c] = q[r] . k[c] for r < rows (q[r] = q + r * hd) and
 * c0 <= c < nc (k[c] = kt + c * hd, f16): each a dot product in
 * attn_tiled.c's order (eight lanes over d, v8_sum, then the tail of d).
 * rows >= 1. pf: row 0 of the tile read next (or NULL), whose rows'
 * lines are requested as the same rows of this one are read. */
void attn_decode_scores_f16(const float *q, int64_t rows, const ig_f16 *kt, int64_t c0,
                            int64_t nc, int64_t hd, float *s, int64_t s_stride,
                            const ig_f16 *pf);

/* o[r] = o[r] * corr[r] + sum over lo <= c < hi of s[r * s_stride + c] v[c]
 * (v[c] = vt + c * hd, f16; o[r] = o + r * hd) for r < rows, the sum in
 * column order for every element; and sum[r] = the sum of those s[r][c]
 * from 0.0f in column order (the softmax's, while the row is loaded).
 * rows >= 1. pf as above, for the next tile's V rows. */
void attn_decode_accumulate_f16(const float *s, int64_t s_stride, const float *corr,
                                int64_t rows, const ig_f16 *vt, int64_t lo, int64_t hi,
                                int64_t hd, float *o, float *sum, const ig_f16 *pf);

#endif
