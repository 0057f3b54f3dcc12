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
#include "ops/simd.h"

#include "core/half.h"

#include <string.h>


/* Every block format here has 32 elements per block. */
#define MM_QK 32
_Static_assert(QK4_0 == MM_QK && QK4_1 == MM_QK && QK8_0 == MM_QK, "32-element blocks");
_Static_assert(MM_QK % MM_LANES == 0, "a block is whole lane groups");

/* ---- block decoders ------------------------------------------------------------ */

/* A block is decoded one lane group (MM_LANES elements) at a time, after its
 * scales, into a GNU C vector value: a group is one register (two on SSE),
 * so decoded weights never make a round trip through memory (a block
 * written as narrow stores and read back as wide loads stalls on store
 * forwarding). The vector types are the compiler's portable extension, not
 * intrinsics: the same source serves every ISA the kernels are cloned for. */
typedef float mm_v8f __attribute__((vector_size(32)));
typedef int32_t mm_v8i __attribute__((vector_size(32)));
typedef uint8_t mm_v8u8 __attribute__((vector_size(8)));
typedef int8_t mm_v8i8 __attribute__((vector_size(8)));
_Static_assert(MM_LANES == 8, "one mm_v8f per lane group");

struct blk_scale {
    float d, m;
};

typedef struct blk_scale (*block_scale_fn)(const void *blk);
/* *w = elements g*MM_LANES .. g*MM_LANES+7 of the block. (Vectors travel
 * through pointers: a vector argument or return value would change the ABI
 * between the AVX2 clone and the baseline.) */
typedef void (*group_decode_fn)(const void *blk, struct blk_scale s, int g, mm_v8f *w);

/* The 4-bit formats: elements 0..15 are the low nibbles of qs[0..15], 16..31
 * the high ones, so group g is byte half g % 2, nibble g / 2. */
static inline void nibbles(const uint8_t *qs, int g, mm_v8f *w)
{
    mm_v8u8 q;
    memcpy(&q, qs + (g % 2) * MM_LANES, sizeof q);
    q = g < 2 ? (q & 0x0f) : (q >> 4);
    *w = __builtin_convertvector(__builtin_convertvector(q, mm_v8i), mm_v8f);
}

static inline struct blk_scale scale_q4_0(const void *blk)
{
    const struct block_q4_0 *b = blk;
    return (struct blk_scale){ig_f16_to_f32(b->d), 0.0f};
}

static inline void group_q4_0(const void *blk, struct blk_scale s, int g, mm_v8f *w)
{
    const struct block_q4_0 *b = blk;
    nibbles(b->qs, g, w);
    *w = s.d * (*w - 8.0f);
}

static inline struct blk_scale scale_q4_1(const void *blk)
{
    const struct block_q4_1 *b = blk;
    return (struct blk_scale){ig_f16_to_f32(b->d), ig_f16_to_f32(b->m)};
}

static inline void group_q4_1(const void *blk, struct blk_scale s, int g, mm_v8f *w)
{
    const struct block_q4_1 *b = blk;
    nibbles(b->qs, g, w);
    *w = s.d * *w + s.m;
}

static inline struct blk_scale scale_q8_0(const void *blk)
{
    const struct block_q8_0 *b = blk;
    return (struct blk_scale){ig_f16_to_f32(b->d), 0.0f};
}

static inline void group_q8_0(const void *blk, struct blk_scale s, int g, mm_v8f *w)
{
    const struct block_q8_0 *b = blk;
    mm_v8i8 q;
    memcpy(&q, b->qs + g * MM_LANES, sizeof q);
    *w = __builtin_convertvector(__builtin_convertvector(q, mm_v8i), mm_v8f) * s.d;
}
_Static_assert(MM_QK / 2 == 2 * MM_LANES, "a 4-bit block is two lane groups of bytes");

/* ---- fused kernels: stored blocks x up to MM_NT tokens ---------------------- */

/* Lane groups per block. */
#define MM_GROUPS (MM_QK / MM_LANES)

/* nt is a constant at each call site (see blocks_dot_tokens), so the
 * accumulators stay in registers; each decoded group is used nt times. A
 * token's sum is built exactly as the dense kernel of ops/matmul.c builds it
 * (MM_LANES f32 lanes over the columns, added into f64 lanes every
 * MM_FLUSH_COLS columns), whatever nt is: a token's result does not depend
 * on how many tokens share the call, so a request's logits are the same in
 * any batch (a second accumulator per token would hide the add latency but
 * sum in another order). */
static inline __attribute__((always_inline)) void
blocks_tile(const uint8_t *row, int64_t n_blocks, size_t block_bytes, block_scale_fn scale,
            group_decode_fn group, const float *x, int64_t ldx, const int nt, float *y,
            int64_t ldy)
{
    double dacc[MM_NT][MM_LANES] = {{0}};
    for (int64_t b0 = 0; b0 < n_blocks; b0 += MM_FLUSH_COLS / MM_QK) {
        int64_t b1 = b0 + MM_FLUSH_COLS / MM_QK < n_blocks ? b0 + MM_FLUSH_COLS / MM_QK : n_blocks;
        mm_v8f acc[MM_NT];
        MM_UNROLL for (int t = 0; t < nt; t++)
            acc[t] = (mm_v8f){0};
        for (int64_t b = b0; b < b1; b++) {
            const uint8_t *blk = row + (size_t)b * block_bytes;
            struct blk_scale sc = scale(blk);
            const float *xb = x + b * MM_QK;
            MM_UNROLL for (int j = 0; j < MM_GROUPS; j++) {
                mm_v8f w, xv;
                group(blk, sc, j, &w);
                MM_UNROLL for (int t = 0; t < nt; t++) {
                    memcpy(&xv, xb + t * ldx + j * MM_LANES, sizeof xv);
                    acc[t] += w * xv;
                }
            }
        }
        MM_UNROLL for (int t = 0; t < nt; t++)
            for (int l = 0; l < MM_LANES; l++)
                dacc[t][l] += acc[t][l];
    }
    for (int t = 0; t < nt; t++)
        y[t * ldy] = (float)mm_sum_lanes_d(dacc[t]);
}

static inline __attribute__((always_inline)) void
blocks_dot_tokens(const void *row, int64_t cols, size_t block_bytes, block_scale_fn scale,
                  group_decode_fn group, const float *x, int64_t ldx, int64_t nt, float *y,
                  int64_t ldy)
{
    int64_t n_blocks = cols / MM_QK;
    for (int64_t t = 0; t < nt; t += MM_NT) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nt - t < MM_NT ? nt - t : MM_NT) {
        case 4: blocks_tile(row, n_blocks, block_bytes, scale, group, xt, ldx, 4, yt, ldy); break;
        case 3: blocks_tile(row, n_blocks, block_bytes, scale, group, xt, ldx, 3, yt, ldy); break;
        case 2: blocks_tile(row, n_blocks, block_bytes, scale, group, xt, ldx, 2, yt, ldy); break;
        default: blocks_tile(row, n_blocks, block_bytes, scale, group, xt, ldx, 1, yt, ldy); break;
        }
    }
}
_Static_assert(MM_NT == 4, "blocks_dot_tokens instantiates tiles of 1..4 tokens");

OPS_SIMD_CLONES
static void dot_q4_0(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q4_0), scale_q4_0, group_q4_0, x, ldx, nt, y,
                      ldy);
}

OPS_SIMD_CLONES
static void dot_q4_1(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q4_1), scale_q4_1, group_q4_1, x, ldx, nt, y,
                      ldy);
}

OPS_SIMD_CLONES
static void dot_q8_0(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                     float *y, int64_t ldy)
{
    blocks_dot_tokens(row, cols, sizeof(struct block_q8_0), scale_q8_0, group_q8_0, x, ldx, nt, y,
                      ldy);
}

static void dot_f32(const void *row, int64_t cols, const float *x, int64_t ldx, int64_t nt,
                    float *y, int64_t ldy)
{
    ops_mm_f32_dot_tokens(row, cols, x, ldx, nt, y, ldy);
}

/* ---- row decoders: a stored row -> f32 -------------------------------------- */

static inline __attribute__((always_inline)) void
decode_blocks_row(const void *row, size_t block_bytes, block_scale_fn scale, group_decode_fn group,
                  float *dst, int64_t cols)
{
    const uint8_t *p = row;
    for (int64_t b = 0; b < cols / MM_QK; b++) {
        const uint8_t *blk = p + (size_t)b * block_bytes;
        struct blk_scale sc = scale(blk);
        MM_UNROLL for (int j = 0; j < MM_GROUPS; j++) {
            mm_v8f w;
            group(blk, sc, j, &w);
            memcpy(dst + b * MM_QK + j * MM_LANES, &w, sizeof w);
        }
    }
}

OPS_SIMD_CLONES
static void row_q4_0(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q4_0), scale_q4_0, group_q4_0, dst, cols);
}

OPS_SIMD_CLONES
static void row_q4_1(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q4_1), scale_q4_1, group_q4_1, dst, cols);
}

OPS_SIMD_CLONES
static void row_q8_0(enum quant_type type, const void *row, float *dst, int64_t cols)
{
    decode_blocks_row(row, sizeof(struct block_q8_0), scale_q8_0, group_q8_0, dst, cols);
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
