/* prefill/attn_decode_qk.h: a decode item's scores straight from a q8_0 or
 * q4_0 K tile, each key block's int8 dot products against the int8 query
 * in registers (prefill/attn_decode_qk.c), the twin of attn_decode.h's f16
 * score loops. prefill/attn_tiled.c runs it for every item on the int8
 * path (decode rows and prompt chunks) in place of the int8 matmul's tile
 * kernel, whose bits it gives. Covered by tests/cpu/test_attn_qk.c (against
 * the tile kernel, bit for bit) and tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_DECODE_QK_H
#define IGNITE_PREFILL_ATTN_DECODE_QK_H

#include "kvcache/kvcache.h"
#include "ops/qmatmul.h"

#include <stdint.h>

/* s[r * s_stride + c] = the score of query row r (its head_dim / 32 int8
 * blocks at qq + r * (hd / 32)) and key c (row c of the tile: hd values of
 * the kernel's type at kt + c * kv_dtype_row_bytes(type, hd)) for r < rows,
 * c0 <= c < nc: the value ops_qmm_tile's kernel gives for that key and row
 * (per block, eight int32 lane sums of four products each, as floats, times
 * the product of the two scales added to each lane by one FMA, block after
 * block; the lanes summed in v8_sum's order; q4_0's -8 d sx term summed by
 * FMAs in its own lane and added last). pf: row 0 of the tile read next (or
 * NULL), whose rows are requested as the same rows of this one are read. */
typedef void (*attn_qk_fn)(const struct qmm_q8 *qq, int64_t rows, const uint8_t *kt,
                           int64_t c0, int64_t nc, int64_t hd, float *s, int64_t s_stride,
                           const uint8_t *pf);

/* The kernel for a `dtype` K (KV_Q8_0 or KV_Q4_0) of head dim hd on the
 * int8 path's instruction set `isa` (ops_qmm_best_isa()), or NULL where
 * there is none (the scalar set, whose tile sums in another order; a head
 * dim over 512; not x86-64): then the tile kernel scores the keys. */
attn_qk_fn attn_decode_qk(enum kv_dtype dtype, enum qmm_isa isa, int64_t hd);

#endif
