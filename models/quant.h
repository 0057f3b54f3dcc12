/* models/quant.h: the ggml tensor types and their block formats.
 *
 * Layouts are those of ggml (llama.cpp) as stored in GGUF files; a block of
 * QK elements is stored as one struct, rows are whole numbers of blocks.
 * This header is the one place that knows a block's bytes: dequantization
 * (quant.c) and the matmul kernels (ops/) both read these structs.
 * Covered by tests/models/test_dequant.py (against the gguf package). */
#ifndef IGNITE_MODELS_QUANT_H
#define IGNITE_MODELS_QUANT_H

#include "core/half.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Values are ggml's type ids, as written in GGUF tensor infos. */
enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_IQ4_NL = 20,
    QUANT_IQ4_XS = 23,
    QUANT_BF16 = 30,
    QUANT_MXFP4 = 39,
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* The CUDA kernels (C++) include this header too. */
#ifdef __cplusplus
#define QUANT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define QUANT_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

struct block_q4_0 { ig_f16 d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { ig_f16 d; ig_f16 m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { ig_f16 d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { ig_f16 d; ig_f16 m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { ig_f16 d; int8_t qs[QK8_0]; };
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; ig_f16 d; ig_f16 dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; ig_f16 d; };
struct block_q4_K { ig_f16 d; ig_f16 dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { ig_f16 d; ig_f16 dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; ig_f16 d; };
struct block_iq4_nl { ig_f16 d; uint8_t qs[QK4_NL / 2]; };
struct block_iq4_xs { ig_f16 d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
/* OCP microscaling FP4 (gpt-oss's experts): an E8M0 scale and 32 E2M1 values */
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };

QUANT_STATIC_ASSERT(sizeof(struct block_q4_0) == 18, "q4_0 block");
QUANT_STATIC_ASSERT(sizeof(struct block_q4_1) == 20, "q4_1 block");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_0) == 22, "q5_0 block");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_1) == 24, "q5_1 block");
QUANT_STATIC_ASSERT(sizeof(struct block_q8_0) == 34, "q8_0 block");
QUANT_STATIC_ASSERT(sizeof(struct block_q2_K) == 84, "q2_K block");
QUANT_STATIC_ASSERT(sizeof(struct block_q3_K) == 110, "q3_K block");
QUANT_STATIC_ASSERT(sizeof(struct block_q4_K) == 144, "q4_K block");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_K) == 176, "q5_K block");
QUANT_STATIC_ASSERT(sizeof(struct block_q6_K) == 210, "q6_K block");
QUANT_STATIC_ASSERT(sizeof(struct block_iq4_nl) == 18, "iq4_nl block");
QUANT_STATIC_ASSERT(sizeof(struct block_iq4_xs) == 136, "iq4_xs block");
QUANT_STATIC_ASSERT(sizeof(struct block_mxfp4) == 17, "mxfp4 block");

/* Facts about a type: elements per block and bytes per block. Both are 0 for
 * ids that GGUF may contain but ignite does not know. */
struct quant_traits {
    const char *name;     /* "Q4_1", as llama.cpp and the gguf package say */
    int64_t block_elems;  /* elements per block */
    size_t block_bytes;   /* bytes per block */
    bool can_dequantize;  /* quant_dequantize_row supports it */
};

/* Traits of `type`, or NULL if the id is not a ggml type ignite knows. */
const struct quant_traits *quant_traits_of(uint32_t type);

/* Name of any ggml type id, known or not ("IQ2_XXS", "type 99"). The string
 * for unknown ids lives in a static buffer. */
const char *quant_type_name(uint32_t type);

/* What llama.cpp (llama-bench's model_type, llama-cli's "file type") calls a
 * GGUF general.file_type value: "Q4_K - Medium", "all F32"; "unknown, may not
 * work" for values it does not name. Static strings. */
const char *quant_file_type_name(uint64_t ftype);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block. */
size_t quant_row_bytes(enum quant_type type, int64_t n);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K
 * super-block from its 12 scale bytes: bytes j, j + 4 for j < 4; for j >= 4
 * the low nibbles of byte j + 4 and the top 2 bits of bytes j - 4, j (ggml's
 * get_scale_min_k4). The one reader of that packing on the host. */
static inline void quant_k4_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q2_K's quant e (0..255) of a super-block, 0..3: bits 2 (e % 128 / 32) of
 * qs byte 32 (e / 128) + e % 32 (Q3_K's low bits). Sub-block e / 16 has
 * scales[e / 16]: its scale in the low nibble, its min in the high one;
 * w = d sc q - dmin min. */
static inline int quant_k2_value(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* Q3_K's scale j (0..15, one per 16 elements) of a super-block, from its
 * 12 scale bytes: low 4 bits in bytes 0-7 (two per byte), high 2 bits in
 * bytes 8-11 (four per byte), stored with a bias of 32. The one reader of
 * that packing on the host. */
static inline int quant_k3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q3_K's quant e (0..255) of a super-block as its value, -4..3: two bits of
 * qs (byte 32 (e / 128) + e % 32, bits 2 (e % 128 / 32)), less 4 where its
 * bit of hmask (bit e / 32 of byte e % 32) is clear. w = d scale v. */
static inline int quant_k3_value(const uint8_t *qs, const uint8_t *hmask, int e)
{
    int n = e / 128, j = e % 128 / 32, l = e % 32;
    return ((qs[32 * n + l] >> (2 * j)) & 3) - ((hmask[l] >> (4 * n + j)) & 1 ? 0 : 4);
}

/* The IQ4 formats' 16 levels (ggml's kvalues_iq4nl): a 4-bit quant q is
 * the value quant_iq4_value(q), w = d value (IQ4_NL, per 32 elements) or
 * d (scale - 32) value (IQ4_XS, a 6-bit scale per 32 of a super-block).
 * Quant e (0..31) of a 32-element block is the low nibble of qs[e] for
 * e < 16, the high nibble of qs[e - 16] above. */
static inline int quant_iq4_value(int q)
{
    static const int8_t values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
    return values[q & 15];
}

/* IQ4_XS's scale of sub-block j (0..7) of a super-block (its bytes) less
 * the bias of 32, -32..31: the low 4 bits in nibble j % 2 of scales_l[j /
 * 2], the top 2 in bits 2 j of scales_h (little-endian in the file). The
 * one reader of that packing on the host. */
static inline int quant_iq4_xs_scale(const uint8_t *block, int j)
{
    const uint8_t *h16 = block + offsetof(struct block_iq4_xs, scales_h);
    const uint8_t *lo = block + offsetof(struct block_iq4_xs, scales_l);
    int h = (h16[0] | h16[1] << 8) >> (2 * j) & 3;
    int l = lo[j / 2] >> (4 * (j % 2)) & 0x0f;
    return (l | h << 4) - 32;
}

/* MXFP4 (ggml's block_mxfp4): a quant q (nibbles laid out as IQ4_NL's) is
 * the E2M1 value doubled, quant_mxfp4_value(q) in {0, 1, 2, 3, 4, 6, 8, 12}
 * and their negatives (ggml's kvalues_mxfp4), and the E8M0 scale e stands
 * for 2^(e - 127) halved (GGML_E8M0_TO_FP32_HALF): w = 2^(e - 128) value,
 * exact in f32 for every e (e < 2: subnormal). */
static inline int quant_mxfp4_value(int q)
{
    static const int8_t values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    return values[q & 15];
}

static inline float quant_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? UINT32_C(0x00200000) << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Dequantizes one row of n elements (n a multiple of the block size) from
 * `src` (block-aligned, n/block_elems blocks) into dst[0..n). The type must
 * have can_dequantize. */
void quant_dequantize_row(enum quant_type type, const void *src, float *dst, int64_t n);

/* Quantizes n values (a multiple of 32) of src into n / 32 blocks of Q8_0
 * or Q4_0 at dst (any alignment), as ggml's quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref do, bit for bit (the gguf package's quantize, their
 * NumPy twin, is the test's reference): Q8_0 d = max|x| / 127, q =
 * roundf(x / d); Q4_0 d = m / -8 for the m of largest |m| (the first),
 * q = min(15, (int)(x / d + 8.5)). The KV cache's rows (kvcache/). */
void quant_quantize_row(enum quant_type type, const float *src, void *dst, int64_t n);

#endif
