/* tests/quant_bound.h: the bound the quantized-GEMV tests put on each f32
 * term of a weight (tests/emu/test_qmm_emu.c's A_i, its header says how it
 * is used; tests/gpu/test_qmm_gpu.c on the real GPU): one copy, so a new
 * block type gets its bound once. */
#ifndef IGNITE_TESTS_QUANT_BOUND_H
#define IGNITE_TESTS_QUANT_BOUND_H

#include "core/half.h"
#include "models/quant.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A bound on every f32 term of the block holding element c of a file row
 * (its bytes as in the GGUF file): |d| 128 + |m| for 32-element blocks,
 * |d| 63 * 63 + |dmin| 63 for Q4_K/Q5_K, |d| 128 * 64 for Q6_K. */
static inline double test_quant_term_bound(int type, const uint8_t *row, int64_t c)
{
    const struct quant_traits *tr = quant_traits_of((uint32_t)type);
    const uint8_t *blk = row + (size_t)(c / tr->block_elems) * tr->block_bytes;
    uint16_t h0, h1;
    if (type == QUANT_Q6_K) {
        memcpy(&h0, blk + offsetof(struct block_q6_K, d), 2);
        return fabs(ig_f16_to_f32(h0)) * 128 * 64;
    }
    memcpy(&h0, blk, 2);
    memcpy(&h1, blk + 2, 2);
    double d = fabs(ig_f16_to_f32(h0)), m = fabs(ig_f16_to_f32(h1));
    switch (type) {
    case QUANT_Q4_1: case QUANT_Q5_1: return d * 128 + m;
    case QUANT_Q4_K: case QUANT_Q5_K: return d * 63 * 63 + m * 63;
    default: return d * 128;
    }
}

#endif
