/* ops/matmul_quant.c: the weight formats ops_matmul reads in place: F32,
 * F16, BF16, Q4_0, Q4_1, Q8_0 have their own row decoders, the three block
 * formats also fused decode-and-multiply kernels; every other type
 * quant_dequantize_row supports goes through it (the generic path).
 *
 * A block is decoded exactly as ggml and the gguf package do (d * q, or
 * d * q + m, in f32), so a decoded weight equals the reference's bit for bit.
 * The matmul driver and the dense kernel are in ops/matmul.c.
 * Covered by tests/cpu/test_matmul.c. */
#include "ops/matmul_kernels.h"

#include "core/half.h"

#include <string.h>

/* Every block format here has 32 elements per block. */
#define MM_QK 32
_Static_assert(QK4_0 == MM_QK && QK4_1 == MM_QK && QK8_0 == MM_QK, "32-element blocks");
_Static_assert(MM_QK % MM_LANES == 0, "a block is whole lane groups");

/* ---- block decoders: one stored block -> w[MM_QK] f32 ---------------------- */

typedef void (*block_decode_fn)(const void *blk, float *w);

static inline void decode_q4_0(const void *blk, float *w)
{
    const struct block_q4_0 *b = blk;
    float d = ig_f16_to_f32(b->d);
    for (int j = 0; j < MM_QK / 2; j++) {
        w[j] = d * (float)((b->qs[j] & 0x0f) - 8);
        w[j + MM_QK / 2] = d * (float)((b->qs[j] >> 4) - 8);
    }
}

static inline void decode_q4_1(const void *blk, float *w)
{
    const struct block_q4_1 *b = blk;
    float d = ig_f16_to_f32(b->d), m = ig_f16_to_f32(b->m);
    for (int j = 0; j < MM_QK / 2; j++) {
        w[j] = d * (float)(b->qs[j] & 0x0f) + m;
        w[j + MM_QK / 2] = d * (float)(b->qs[j] >> 4) + m;
    }
}

static inline void decode_q8_0(const void *blk, float *w)
{
    const struct block_q8_0 *b = blk;
    float d = ig_f16_to_f32(b->d);
    for (int j = 0; j < MM_QK; j++)
        w[j] = (float)b->qs[j] * d;
}

/* ---- fused kernels: stored blocks x up to MM_NT tokens ---------------------- */

/* nt is a constant at each call site (see blocks_dot_tokens), so the
 * accumulators stay in registers; each decoded block is used nt times. */
static inline __attribute__((always_inline)) void
blocks_tile(const uint8_t *row, int64_t n_blocks, size_t block_bytes, block_decode_fn decode,
            const float *x, int64_t ldx, const int nt, float *y, int64_t ldy)
{
    double dacc[MM_NT][MM_LANES] = {{0}};
    for (int64_t b0 = 0; b0 < n_blocks; b0 += MM_FLUSH_COLS / MM_QK) {
        int64_t b1 = b0 + MM_FLUSH_COLS / MM_QK < n_blocks ? b0 + MM_FLUSH_COLS / MM_QK : n_blocks;
        float acc[MM_NT][MM_LANES] = {{0}};
        for (int64_t b = b0; b < b1; b++) {
            float w[MM_QK];
            decode(row + (size_t)b * block_bytes, w);
            const float *xb = x + b * MM_QK;
            for (int j = 0; j < MM_QK; j += MM_LANES)
                for (int t = 0; t < nt; t++)
                    for (int l = 0; l < MM_LANES; l++)
                        acc[t][l] += w[j + l] * xb[t * ldx + j + l];
        }
        for (int t = 0; t < nt; t++)
            for (int l = 0; l < MM_LANES; l++)
                dacc[t][l] += acc[t][l];
    }
    for (int t = 0; t < nt; t++)
        y[t * ldy] = (float)mm_sum_lanes_d(dacc[t]);
}

static inline __attribute__((always_inline)) void
blocks_dot_tokens(const void *row, int64_t cols, size_t block_bytes, block_decode_fn decode,
                  const float *x, int64_t ldx, int64_t nt, float *y, int64_t ldy)
{
    int64_t n_blocks = cols / MM_QK;
    for (int64_t t = 0; t < nt; t += MM_NT) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nt - t < MM_NT ? nt - t : MM_NT) {
        case 4: blocks_tile(row, n_blocks, block_bytes, decode, xt, ldx, 4, yt, ldy); break;
        case 3: blocks_tile(row, n_blocks, block_bytes, decode, xt, ldx, 3, yt, ldy); break;
        case 2: blocks_tile(row, n_blocks, block_bytes, decode, xt, ldx, 2, yt, ldy); break;
        default: blocks_tile(row, n_blocks, block_bytes, decode, xt, ldx, 1, yt, ldy); break;
        }
    }
}
_Static_assert(MM_NT == 4, "blocks_dot_tokens instantiates tiles of 1..4 tokens");

static void dot_q4_0(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q4_0), decode_q4_0, x, ldx, nt, y, ldy);
}

static void dot_q4_1(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q4_1), decode_q4_1, x, ldx, nt, y, ldy);
}

static void dot_q8_0(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q8_0), decode_q8_0, x, ldx, nt, y, ldy);
}

static void dot_f32(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                    float *y, int64_t ldy)
{
    ops_mm_f32_dot_tokens(row, cols, x, ldx, nt, y, ldy);
}

/* ---- row decoders: a stored row -> f32 -------------------------------------- */

static inline __attribute__((always_inline)) void
decode_blocks_row(const void *row, size_t block_bytes, block_decode_fn decode, float *dst,
                  int64_t cols)
{
    const uint8_t *p = row;
    for (int64_t b = 0; b < cols / MM_QK; b++)
        decode(p + (size_t)b * block_bytes, dst + b * MM_QK);
}

static void row_q4_0(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q4_0), decode_q4_0, dst, cols);
}

static void row_q4_1(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q4_1), decode_q4_1, dst, cols);
}

static void row_q8_0(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q8_0), decode_q8_0, dst, cols);
}

static void row_f32(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    memcpy(dst, row, (size_t)cols * sizeof(float));
}

static void row_f16(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    const ig_f16 *h = row;
    for (int64_t c = 0; c < cols; c++)
        dst[c] = ig_f16_to_f32(h[c]);
}

static void row_bf16(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    const ig_bf16 *h = row;
    for (int64_t c = 0; c < cols; c++)
        dst[c] = ig_bf16_to_f32(h[c]);
}

static void row_generic(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    quant_dequantize_row(type, row, dst, cols);
}

/* ---- the chooser ------------------------------------------------------------- */

static const struct mm_format fmt_f32 = {"f32", row_f32, dot_f32};
static const struct mm_format fmt_f16 = {"f16", row_f16, NULL};
static const struct mm_format fmt_bf16 = {"bf16", row_bf16, NULL};
static const struct mm_format fmt_q4_0 = {"q4_0", row_q4_0, dot_q4_0};
static const struct mm_format fmt_q4_1 = {"q4_1", row_q4_1, dot_q4_1};
static const struct mm_format fmt_q8_0 = {"q8_0", row_q8_0, dot_q8_0};
static const struct mm_format fmt_generic = {"generic", row_generic, NULL};

const struct mm_format *ops_mm_format_of(enum quant_type type)
{
    switch (type) {
    case QUANT_F32: return &fmt_f32;
    case QUANT_F16: return &fmt_f16;
    case QUANT_BF16: return &fmt_bf16;
    case QUANT_Q4_0: return &fmt_q4_0;
    case QUANT_Q4_1: return &fmt_q4_1;
    case QUANT_Q8_0: return &fmt_q8_0;
    default: break;
    }
    const struct quant_traits *tr = quant_traits_of((uint32_t)type);
    return tr && tr->can_dequantize ? &fmt_generic : NULL;
}
