/* ops/matmul_kernels.h: the per-format kernels behind ops_matmul, private to
 * ops/matmul*.c.
 *
 * A weight format offers two things: `decode_row`, a stored row -> f32 (the
 * prefill path dequantizes a row once into a per-thread buffer and applies it
 * to a block of tokens), and optionally `dot_tokens`, a fused kernel that
 * reads the stored blocks directly and multiplies them with up to MM_NT
 * tokens (the decode path; no row buffer traffic). SIMD variants slot in as
 * other tables returned by ops_mm_format_of for the same type (today the
 * same C is compiled twice, baseline and AVX2, see ops/simd.h).
 * Covered by tests/cpu/test_matmul.c. */
#ifndef IGNITE_OPS_MATMUL_KERNELS_H
#define IGNITE_OPS_MATMUL_KERNELS_H

#include "models/quant.h"

#include <stdint.h>

/* Tokens per register tile: each decoded weight value is used MM_NT times. */
#define MM_NT 4
/* Weight rows per register tile of the dense (prefill) kernel. */
#define MM_MR 2
/* Independent partial sums per dot product. Summing lanes separately lets the
 * compiler vectorize without reassociating (no fast-math on reference paths). */
#define MM_LANES 8

/* Fully unrolls a register-tile loop so its accumulators stay in registers
 * (GCC leaves them in memory otherwise). */
#if defined(__GNUC__) && !defined(__clang__)
#define MM_UNROLL _Pragma("GCC unroll 32")
#else
#define MM_UNROLL
#endif

/* Sum of one accumulator's f64 lanes, in a fixed order. */
static inline double mm_sum_lanes_d(const double a[MM_LANES])
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
_Static_assert(MM_LANES == 8, "mm_sum_lanes_d reduces 8 lanes");

/* Columns summed in f32 before the partial sums are added into f64 lanes.
 * Long f32 dot products cost accuracy where it hurts: SmolLM2's residual
 * stream carries values in the thousands that later layers cancel, and plain
 * f32 sums over 1536 columns put some logits up to 1e-4 off the fp64
 * reference; flushed every 128 columns they stay near 1e-5 at a small cost
 * (flushing every block of 32 cost far more). */
#define MM_FLUSH_COLS 128
_Static_assert(MM_FLUSH_COLS % 32 == 0, "flush at block boundaries");

/* y[t * ldy] = dot(stored row, x + t * ldx) over `cols` elements, t < nt. */
typedef void (*mm_dot_tokens_fn)(const void *row, int64_t cols, const float *x, int64_t ldx,
                                 int64_t nt, float *y, int64_t ldy);

/* dst[0..cols) = the stored row of `type`, dequantized. */
typedef void (*mm_decode_row_fn)(enum quant_type type, const void *row, float *dst,
                                 int64_t cols);

struct mm_format {
    const char *name;             /* kernel name, for benchmarks and test output */
    mm_decode_row_fn decode_row;  /* always set */
    mm_dot_tokens_fn dot_tokens;  /* fused kernel for nt <= MM_NT, or NULL */
};

/* The kernels for weights of `type` (ops/matmul_quant.c). A type without its
 * own kernels gets the generic quant_dequantize_row path; NULL when the type
 * cannot be dequantized at all. */
const struct mm_format *ops_mm_format_of(enum quant_type type);

/* The dense kernel every decoded row goes through (ops/matmul.c):
 * y[t * ldy] = dot(w, x + t * ldx) for t < nt, any nt. */
void ops_mm_f32_dot_tokens(const float *w, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                       float *y, int64_t ldy);

#endif
