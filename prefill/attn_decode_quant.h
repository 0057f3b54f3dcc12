/* prefill/attn_decode_quant.h: a decode item's accumulation straight from a
 * q8_0 or q4_0 V tile, each block dequantized in registers as it is loaded
 * (prefill/attn_decode_quant.c), the twin of attn_decode.h's f16 loops.
 * prefill/attn_tiled.c runs it for decode items on the int8 path; each
 * result is bit for bit what its general loops give over the tile
 * dequantized into scratch. Covered by tests/cpu/test_attn_decode_quant.c
 * and tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_DECODE_QUANT_H
#define IGNITE_PREFILL_ATTN_DECODE_QUANT_H

#include "kvcache/kvcache.h"

#include <stdbool.h>
#include <stdint.h>

/* o[r] = o[r] * corr[r] + sum over lo <= c < hi of s[r * s_stride + c] v[c]
 * for r < rows, v[c] row c of the tile: head_dim values of `dtype` (KV_Q8_0
 * or KV_Q4_0) at vt + c * kv_dtype_row_bytes(dtype, hd), each d q as
 * models/quant.c dequantizes it; the sum in column order for every element
 * (attn_decode_accumulate_f16's loops), and sum[r] = the sum of those s[r][c]
 * from 0.0f in column order. hd a multiple of 32, rows >= 1. pf: row 0 of
 * the tile read next (or NULL), whose rows' lines are requested as the same
 * rows of this one are read. */
void attn_decode_accumulate_quant(enum kv_dtype dtype, const float *s, int64_t s_stride,
                                  const float *corr, int64_t rows, const uint8_t *vt, int64_t lo,
                                  int64_t hi, int64_t hd, float *o, float *sum,
                                  const uint8_t *pf);

#endif
