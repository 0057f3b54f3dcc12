/* ops/qmatmul.h: the fast matmul path for block-quantized weights, the way
 * the fastest CPU engines do it: each token vector is quantized per block of
 * 32 to int8 with one f32 scale (struct qmm_q8), and the products are integer
 * dot products of weight and activation quants, scaled once per block.
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
 * weights; a scalar kernel set everywhere and AVX2, AVX-VNNI and AVX512-VNNI sets picked
 * at run time (ops/qmatmul_avx2.c, ops/qmatmul_avxvnni.c, ops/qmatmul_vnni.c;
 * IGNITE_SIMD=scalar|avx2|avxvnni caps the choice; Q2_K, Q3_K and the IQ4 formats have a scalar tile only, their SIMD
 * kernels are packed ones). Where the ISA has kernels for it, every format is read from a
 * copy in a packed 8-row layout made once per model (below; ops/qmatmul_pack.c
 * repacks, ops/packed.h keeps the copies).
 *
 * int8 activations cost accuracy (about 0.4% of a block's largest value per
 * element), so this path is the default but not the reference: the exact f32
 * path of ops/matmul.c stays selectable (IGNITE_MATMUL=exact, or
 * ops_ctx_set_exact) and is what the fp64 reference tests use.
 * Private to ops/; covered by tests/cpu/test_qmatmul.c and test_fast_forward. */
#ifndef IGNITE_OPS_QMATMUL_H
#define IGNITE_OPS_QMATMUL_H

#include "models/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The run state the matmuls below take their pool and buffers from
 * (ops/ops.h); the kernels and the packing do not need it. */
struct ops_ctx;

#define QMM_QK 32 /* activation elements per block */

/* One block of a quantized activation: x[i] ~= d * qs[i]; s = d * sum(qs);
 * dhs d times the sums of qs over each half (Q6_K's and Q2_K's packed
 * layouts scale halves; the product made once here, not per weight row);
 * sum8 and sum16 8 and 16 times sum(qs), what the SIMD kernels take from a
 * Q4_0 block's integer sum (w = d (q - 8)) and the VNNI ones from a Q5_0
 * block's (w = d (q - 16)); sum16_pairs sum16 in two parts, 16 times the
 * sums of the quants 4k, 4k + 1 and of 4k + 2, 4k + 3 (k = 0..7): Q5_0's
 * zero point in the int16 lanes where the AVX2 kernels' pair sums land
 * (each lane sums one of the two sets). |qs| <= 127, so each part is at
 * most 16 * 16 * 127 in size. */
struct qmm_q8 {
    float d;
    float s;
    int8_t qs[QMM_QK];
    float dhs[2];
    int32_t sum8;
    int32_t sum16;
    int16_t sum16_pairs[2];
};

/* Rows and tokens of the largest register tile. */
#define QMM_MR 4
#define QMM_NT 4

/* y[t * ldy + r] = dot(weight row r, activation t) for r < mr <= QMM_MR,
 * t < nt <= QMM_NT. Row r starts at w + r * row_bytes; token t's blocks at
 * x + t * ldx; n_blk is the number of 32-element blocks of a row. The
 * accumulation order of one (r, t) does not depend on mr or nt, so a token
 * gets the same result in a prefill tile as in a one-token decode. */
typedef void (*qmm_tile_fn)(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                            const struct qmm_q8 *x, int64_t ldx, int mr, int nt, float *y,
                            int64_t ldy);

/* 8 weight rows of one 32-element block, repacked for the prefill GEMM. */
struct qmm_pack8 {
    uint8_t q[8][32] __attribute__((aligned(32))); /* q[k] lane j: row j, quants 4k..4k+3 */
    float d[8] __attribute__((aligned(32)));       /* w = d q + m, per row */
    float m[8] __attribute__((aligned(32)));
};

/* y[t * ldy + j] = dot(weight row j, activation t) for j < 8 and any nt,
 * through `pack` (n_blk entries of scratch). For many tokens. */
typedef void (*qmm_gemm8_fn)(const uint8_t *w, size_t row_bytes, int64_t n_blk,
                             const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y,
                             int64_t ldy, struct qmm_pack8 *pack);

/* y[t * ldy + j] = dot(row j of w, x + t * ldx) for j < nr (<= 8), t < nt,
 * for F32, F16 or BF16 rows of `cols` (a multiple of 8) f32 columns; `pack`
 * holds 8 * cols floats (64-byte aligned). */
typedef void (*qmm_fgemm8_fn)(enum quant_type type, const uint8_t *w, size_t row_bytes, int nr,
                              int64_t cols, const float *x, int64_t ldx, int64_t nt, float *y,
                              int64_t ldy, float *pack);

/* ---- the decode layout: 8 rows interleaved ------------------------------- *
 *
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
 * weights are repacked once
 * (ops_qmm_repack, at context creation) so that decode reads one sequential
 * stream with no unpacking shuffles. Rows go in groups of QMM_PR (the last
 * group padded with zero rows); a group stores its blocks one after the
 * other, each as
 *   f16 d[8]; f16 m[8] (Q4_1, Q5_1 only); quants,
 * where for 4-bit formats the quants are 4 x 32 bytes: byte 4 j + i of
 * vector v holds row j's quant 8 v + i in its low nibble and 8 v + 4 + i in
 * its high one; 5-bit formats add 32 bytes after those: bit k of byte 4 j + i
 * is the fifth bit of row j's quant 4 k + i (so byte b of unpacked vector k
 * below takes bit k of byte b: a shift and a mask); for Q8_0 they are
 * 8 x 32 bytes: byte 4 j + i of vector k is row j's quant 4 k + i plus 128
 * (unsigned). Q4_K goes super-block by super-block (8 blocks, QMM_K4_SUPER
 * bytes): f16 d[8] and dmin[8] of its rows, then each block's u8 sc[8],
 * mn[8] (the 6-bit sub-block scales and mins) and 4-bit quants; a kernel
 * forms the f32 scale d sc and offset -dmin mn (exact products: 11 by 6
 * bits), 0.578 bytes a weight where keeping them as f32 took 0.75. Q5_K is
 * Q4_K with each block's 32-byte plane of fifth bits (the 5-bit formats'
 * plane) after its nibbles (QMM_K5_SUPER bytes a super-block). Q6_K
 * (scales per 16 elements) goes super-block by super-block too
 * (QMM_K6_SUPER bytes): f16 d[8], then each block's i8 sc0[8], sc1[8] (the
 * scales of its 16-element halves), its quants' low 4 bits as the 4-bit
 * formats' nibbles and their top 2 bits as a plane of 2 x 32 bytes (bits
 * 2 (k % 4), 2 (k % 4) + 1 of byte b of plane k / 4 belong to unpacked
 * vector k's byte b): w = d sc_h (u - 32) with u unsigned, d sc_h an exact
 * product (11 by 8 bits); its kernel sums each half apart and uses the
 * token's half sums (struct qmm_q8.dhs) for the -32. Q3_K (w = d sc v, v in
 * -4..3, sc in -32..31 per 16 elements) is stored as Q6_K with u = v + 32.
 * Q2_K (w = d sc u - dmin mn per 16 elements, u in 0..3) keeps Q6_K's
 * halves with a min each (QMM_K2_SUPER bytes a super-block: f16 d[8],
 * dmin[8], then each block's u8 sc0[8], sc1[8], mn0[8], mn1[8] and 2 x 32
 * bytes of 2-bit quants, bits 2 s, 2 s + 1 of byte b of vector v being
 * unpacked vector 4 v + s's byte b); its offsets come from the token's
 * half sums too. The IQ4 formats' quants are 4-bit indices into 16 int8
 * levels v (models/quant.h quant_iq4_value): IQ4_NL (w = d v per 32
 * elements) is laid out as Q4_0 (and MXFP4 so, with its own 16 levels and its
 * E8M0 scale as the f16 d), IQ4_XS (w = d sc v, sc in -32..31 per 32
 * elements of a super-block) goes super-block by super-block (QMM_XS_SUPER
 * bytes: f16 d[8], then each block's i8 sc[8] and nibbles), a kernel
 * forming d sc (an exact product); a kernel turns the nibbles into the bytes
 * v + 128 with one table lookup (vpshufb), after which they are Q8_0's
 * (-128 d in the offset). So 32-bit lane j of every unpacked vector k (k = 0..7:
 * low, high nibbles of v = k / 2) holds row j's quants 4 k .. 4 k + 3: one
 * u8 x s8 dot-accumulate against the token's quants 4 k .. 4 k + 3 serves 8
 * rows. Weights are w = d q + m with
 * q unsigned: m = -8 d (Q4_0), -16 d (Q5_0), the stored m (Q4_1, Q5_1),
 * -128 d (Q8_0). The sums are those of the prefill GEMM (struct
 * qmm_pack8), in the same order, so a token's output does not depend on the
 * path it takes. */
#define QMM_PR 8

/* Q4_K's packed super-block: its head (f16 d[8], dmin[8]) and 8 blocks of
 * u8 sc[8], mn[8] and 128 bytes of nibbles; block b of a group is
 * qmm_k4_block's. */
#define QMM_K4_HEAD (QMM_PR * 4)
#define QMM_K4_BLOCK (QMM_PR * 2 + QMM_PR * QMM_QK / 2)
#define QMM_K4_SUPER (QMM_K4_HEAD + 8 * QMM_K4_BLOCK)

/* Q6_K's packed super-block: its head (f16 d[8]) and 8 blocks of i8
 * sc0[8], sc1[8], 128 bytes of nibbles and a 64-byte plane of top bits. */
#define QMM_K6_HEAD (QMM_PR * 2)
#define QMM_K6_BLOCK (QMM_PR * 2 + QMM_PR * QMM_QK / 2 + QMM_PR * QMM_QK / 4)
#define QMM_K6_SUPER (QMM_K6_HEAD + 8 * QMM_K6_BLOCK)

/* Q5_K's packed super-block: Q4_K's, each block followed by its plane of
 * fifth bits. */
#define QMM_K5_BLOCK (QMM_K4_BLOCK + QMM_PR * 4)
#define QMM_K5_SUPER (QMM_K4_HEAD + 8 * QMM_K5_BLOCK)

/* Q2_K's packed super-block (above). */
#define QMM_K2_HEAD (QMM_PR * 4)
#define QMM_K2_BLOCK (QMM_PR * 4 + QMM_PR * QMM_QK / 4)
#define QMM_K2_SUPER (QMM_K2_HEAD + 8 * QMM_K2_BLOCK)

/* IQ4_XS's packed super-block (above): f16 d[8], then 8 blocks of i8
 * sc[8] and 128 bytes of nibbles. */
#define QMM_XS_HEAD (QMM_PR * 2)
#define QMM_XS_BLOCK (QMM_PR + QMM_PR * QMM_QK / 2)
#define QMM_XS_SUPER (QMM_XS_HEAD + 8 * QMM_XS_BLOCK)

static inline const uint8_t *qmm_xs_head(const uint8_t *group, int64_t b)
{
    return group + (size_t)(b / 8) * QMM_XS_SUPER;
}

static inline const uint8_t *qmm_xs_block(const uint8_t *group, int64_t b)
{
    return qmm_xs_head(group, b) + QMM_XS_HEAD + (size_t)(b % 8) * QMM_XS_BLOCK;
}

/* The IQ4 levels plus 128 (1..241), the byte a nibble q stands for. */
#define QMM_IQ4_BYTES 1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241
/* MXFP4's doubled E2M1 values plus 128 (models/quant.h quant_mxfp4_value). */
#define QMM_MXFP4_BYTES 128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116

/* MXFP4 goes into IQ4_NL's packed layout with its scale 2^(e - 128) as the
 * f16 d, which holds it exactly for e in [QMM_MXFP4_E_MIN, QMM_MXFP4_E_MAX]
 * (2^-24 .. 2^15); a weight with a scale outside (no trained model's) is
 * not packed and its stored rows are read (ops_qmm_packable). */
#define QMM_MXFP4_E_MIN 104
#define QMM_MXFP4_E_MAX 143

static inline const uint8_t *qmm_k2_head(const uint8_t *group, int64_t b)
{
    return group + (size_t)(b / 8) * QMM_K2_SUPER;
}

static inline const uint8_t *qmm_k2_block(const uint8_t *group, int64_t b)
{
    return qmm_k2_head(group, b) + QMM_K2_HEAD + (size_t)(b % 8) * QMM_K2_BLOCK;
}

static inline const uint8_t *qmm_k6_head(const uint8_t *group, int64_t b)
{
    return group + (size_t)(b / 8) * QMM_K6_SUPER;
}

static inline const uint8_t *qmm_k6_block(const uint8_t *group, int64_t b)
{
    return qmm_k6_head(group, b) + QMM_K6_HEAD + (size_t)(b % 8) * QMM_K6_BLOCK;
}

static inline const uint8_t *qmm_k4_head(const uint8_t *group, int64_t b)
{
    return group + (size_t)(b / 8) * QMM_K4_SUPER;
}

static inline const uint8_t *qmm_k4_block(const uint8_t *group, int64_t b)
{
    return qmm_k4_head(group, b) + QMM_K4_HEAD + (size_t)(b % 8) * QMM_K4_BLOCK;
}

static inline const uint8_t *qmm_k5_head(const uint8_t *group, int64_t b)
{
    return group + (size_t)(b / 8) * QMM_K5_SUPER;
}

static inline const uint8_t *qmm_k5_block(const uint8_t *group, int64_t b)
{
    return qmm_k5_head(group, b) + QMM_K4_HEAD + (size_t)(b % 8) * QMM_K5_BLOCK;
}

/* Bytes of one packed block of QMM_PR rows (for Q4_K, Q5_K and Q6_K an eighth of
 * a super-block, so only whole super-blocks' worth: their blocks per row are
 * a multiple of 8), or 0 for a type without the layout. */
size_t ops_qmm_packed_block_bytes(enum quant_type type);

/* Bytes of the packed copy of a rows x cols weight of `type` (the float
 * types' too: the layout of QMM_FPR below). */
size_t ops_qmm_packed_bytes(enum quant_type type, int64_t rows, int64_t cols);

/* False where w's stored blocks cannot go into the packed layout as they
 * are (an MXFP4 scale outside QMM_MXFP4_E_MIN..E_MAX): its stored rows are
 * read instead. Reads every MXFP4 scale; true at once for other types. */
bool ops_qmm_packable(const struct model_weight *w);

/* Packs row groups [g0, g1) of QMM_PR rows of w into `dst` (the whole
 * packed copy, of ops_qmm_packed_bytes); a float weight's 8-row group g is
 * half g % 2 of its 16-row group (the last one's other half zeroed with it). */
void ops_qmm_repack(const struct model_weight *w, int64_t g0, int64_t g1, uint8_t *dst);

/* y[t * ldy + j] = dot(row j of the packed group p, activation t) for
 * j < nr <= QMM_PR and t < nt, any nt; n_blk blocks per row. */
typedef void (*qmm_gemv8_fn)(const uint8_t *p, int64_t n_blk, const struct qmm_q8 *x,
                             int64_t ldx, int64_t nt, int nr, float *y, int64_t ldy);

/* The kernel sets, each a superset of the one before in what it asks of
 * the CPU except AVX-VNNI and AVX512-VNNI, which a CPU may have either of
 * (Alder Lake the first, Ice Lake and Zen 4 the second): ops_qmm_isa_runs. */
enum qmm_isa { QMM_SCALAR, QMM_AVX2, QMM_AVXVNNI, QMM_VNNI, QMM_N_ISA };

/* The tile kernel for weights of `type` on `isa`, or NULL when the type has
 * no integer kernel there (or the ISA was not built in). */
qmm_tile_fn ops_qmm_tile_scalar(enum quant_type type);
qmm_tile_fn ops_qmm_tile_avx2(enum quant_type type);
qmm_tile_fn ops_qmm_tile_avxvnni(enum quant_type type);
qmm_tile_fn ops_qmm_tile_vnni(enum quant_type type);
qmm_tile_fn ops_qmm_tile(enum quant_type type, enum qmm_isa isa);

/* The 8-row GEMM for `type` on `isa`, or NULL (then tiles do prefill too). */
qmm_gemm8_fn ops_qmm_gemm8_avx2(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8_avxvnni(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8_vnni(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8(enum quant_type type, enum qmm_isa isa);

/* The packed-layout kernel for `type` on `isa`, or NULL. */
qmm_gemv8_fn ops_qmm_gemv8_scalar(enum quant_type type);
qmm_gemv8_fn ops_qmm_gemv8_avx2(enum quant_type type);
qmm_gemv8_fn ops_qmm_gemv8_avxvnni(enum quant_type type);
qmm_gemv8_fn ops_qmm_gemv8_vnni(enum quant_type type);
qmm_gemv8_fn ops_qmm_gemv8(enum quant_type type, enum qmm_isa isa);

/* The 8-row GEMM reading a packed group (w = the group, row_bytes unused)
 * instead of stored rows, or NULL; the same sums as ops_qmm_gemm8's. */
qmm_gemm8_fn ops_qmm_gemm8_packed_avx2(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8_packed_avxvnni(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8_packed_vnni(enum quant_type type);
qmm_gemm8_fn ops_qmm_gemm8_packed(enum quant_type type, enum qmm_isa isa);

/* y[t * ldy + j] for j < 16, t < nt: the 16 rows of the two packed groups
 * at w and w + group_bytes, the same sums as ops_qmm_gemm8_packed's on each
 * group, bit for bit; `pack` holds 2 n_blk entries of scratch, 64-byte
 * aligned (zmm loads: ops_ctx_qpack's slices are). AVX512-VNNI
 * only (ops/qmatmul_zmm.h: 512-bit registers), NULL elsewhere. */
typedef void (*qmm_gemm16_fn)(const uint8_t *w, size_t group_bytes, int64_t n_blk,
                              const struct qmm_q8 *x, int64_t ldx, int64_t nt, float *y,
                              int64_t ldy, struct qmm_pack8 *pack);
qmm_gemm16_fn ops_qmm_gemm16_packed_vnni(enum quant_type type);
qmm_gemm16_fn ops_qmm_gemm16_packed(enum quant_type type, enum qmm_isa isa);

/* The float-weight GEMM (F32, F16, BF16) of the best ISA, or NULL. */
qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void);
qmm_fgemm8_fn ops_qmm_fgemm8(enum quant_type type);

/* y[t * ldy + j] for j < 16, t < nt: rows w and the 15 after it through
 * 512-bit registers, bit for bit the float GEMM's on each 8; `pack` holds
 * 16 * cols floats, 64-byte aligned. AVX-512 (with the AVX512-VNNI set's
 * kernels) only, NULL elsewhere. */
typedef void (*qmm_fgemm16_fn)(enum quant_type type, const uint8_t *w, size_t row_bytes,
                               int64_t cols, const float *x, int64_t ldx, int64_t nt, float *y,
                               int64_t ldy, float *pack);
qmm_fgemm16_fn ops_qmm_fgemm16_vnni(void);
qmm_fgemm16_fn ops_qmm_fgemm16(enum quant_type type);

/* ---- the packed float layout: 16 rows a column ---------------------------- *
 *
 * F32, F16 and BF16 weights are copied once (ops/packed.h) in the float
 * GEMMs' column-major layout, kept in the stored type: rows in groups of 16
 * (QMM_FPR; the last padded with zero rows), a group's columns one after the
 * other, column c's 16 values contiguous (the first 8-row group in the low
 * half, the second in the high: fgemm16's f32 scratch, ops/qmatmul_zmm.h,
 * made without a transpose). Decode then reads one sequential stream a
 * group with no conversion pass, and each row's FMAs run in column order as
 * fgemm8's do, so a row's output is bit for bit the same from the copy as
 * from the stored rows (tests/cpu/test_qmatmul.c, test_matmul's token
 * invariance). The same bytes as the stored weight, but for the padding. */
#define QMM_FPR 16

/* y[t * ldy + (r - r0)] = dot(row r of the packed float copy p of `type`,
 * x + t * ldx) for r0 <= r < r1 and t < nt; r0 a multiple of 8, r1 at most
 * the weight's rows; cols a multiple of 8. `scratch` holds 16 * cols floats,
 * 64-byte aligned. Bit for bit fgemm8's sums on the stored rows. */
typedef void (*qmm_fgemm_packed_fn)(enum quant_type type, const uint8_t *p, int64_t cols,
                                    int64_t r0, int64_t r1, const float *x, int64_t ldx,
                                    int64_t nt, float *y, int64_t ldy, float *scratch);
qmm_fgemm_packed_fn ops_qmm_fgemm_packed_avx2(void);
qmm_fgemm_packed_fn ops_qmm_fgemm_packed_vnni(void);
/* The packed float GEMM of the best ISA for `type`, or NULL (not a float
 * type, or no SIMD set: such weights are not copied). */
qmm_fgemm_packed_fn ops_qmm_fgemm_packed(enum quant_type type);

/* An ISA's table where it is not built (another architecture or compiler):
 * every kernel NULL. */
#define QMM_EMPTY_TABLE(isa)                                                                 \
    qmm_tile_fn ops_qmm_tile_##isa(enum quant_type type) { return NULL; }                     \
    qmm_gemm8_fn ops_qmm_gemm8_##isa(enum quant_type type) { return NULL; }                   \
    qmm_gemv8_fn ops_qmm_gemv8_##isa(enum quant_type type) { return NULL; }                   \
    qmm_gemm8_fn ops_qmm_gemm8_packed_##isa(enum quant_type type) { return NULL; }

/* The best ISA this CPU runs; IGNITE_SIMD=scalar, avx2 or avxvnni caps it
 * (avxvnni: AVX-VNNI where the CPU has it and the compiler built it, else
 * AVX2; avx512vnni: no cap). */
enum qmm_isa ops_qmm_best_isa(void);
/* IG_E_USAGE, said once, where IGNITE_SIMD is set to no set's name or
 * IGNITE_MATMUL to none of exact, int8 (or fast, the same). */
int ops_qmm_check_env(void);
/* Whether this CPU runs the ISA's kernels and they are built in, whatever
 * IGNITE_SIMD says (the tests run every such set). */
bool ops_qmm_isa_runs(enum qmm_isa isa);
const char *ops_qmm_isa_name(enum qmm_isa isa);

/* Quantizes x[0..cols) (cols a multiple of QMM_QK) into cols / QMM_QK blocks:
 * d = max|x| / 127, qs = round-to-nearest-even(x / d), s and dhs as above. */
void ops_qmm_quantize(const float *x, int64_t cols, struct qmm_q8 *out);
/* The same, bit for bit: in plain C (every CPU), and eight lanes at a time
 * (x86 with AVX2 only; ops_qmm_quantize picks it there). */
void ops_qmm_quantize_c(const float *x, int64_t cols, struct qmm_q8 *out);
void ops_qmm_quantize_avx2(const float *x, int64_t cols, struct qmm_q8 *out);

/* True when ops_matmul should take the int8 path for w on this context: not
 * exact, a kernel for the type, and at most max_batch tokens (the size of
 * the context's quantized-activation buffer). */
bool ops_qmatmul_handles(const struct ops_ctx *ctx, const struct model_weight *w,
                         int64_t n_tokens);

/* ops_qmatmul_handles for each of n weights (and they share cols). */
bool ops_qmatmul_handles_all(const struct ops_ctx *ctx, int n,
                             const struct model_weight *const *w, int64_t n_tokens);

/* y = x W^T like ops_matmul, through int8 activations. */
void ops_qmatmul(struct ops_ctx *ctx, const struct model_weight *w, const float *x,
                 int64_t n_tokens, float *y);

/* ops_matmul_multi through int8 activations: x is quantized once and the
 * rows of all n weights are split over the pool in one job. */
void ops_qmatmul_multi(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                       const float *x, int64_t n_tokens, float *const *y);

/* Whether ops_qmatmul_multi of these weights over n_tokens quantizes x (the
 * int8 path, and a weight not float). Then the step that writes x may
 * quantize its rows as it goes, while they are still in cache (the down
 * projection's input was read back from L3 for it), and the matmul take
 * them as they are: ops_qmatmul_quantize_rows, then ops_qmatmul_multi_q8. */
bool ops_qmatmul_quantizes(const struct ops_ctx *ctx, int n,
                           const struct model_weight *const *w, int64_t n_tokens);

/* Quantizes tokens [t0, t1) of a [n_tokens, cols] activation, given from
 * token t0 on (x is token t0's row), into the context's buffer, as
 * ops_qmatmul_multi would: tokens apart may be quantized on any thread. */
void ops_qmatmul_quantize_rows(struct ops_ctx *ctx, const float *x, int64_t cols, int64_t t0,
                               int64_t t1);

/* ops_qmatmul_multi of x whose every token ops_qmatmul_quantize_rows has
 * quantized since the buffer's last use (x itself still serves float
 * weights). */
void ops_qmatmul_multi_q8(struct ops_ctx *ctx, int n, const struct model_weight *const *w,
                          const float *x, int64_t n_tokens, float *const *y);

/* ---- context support (ops/ctx.c) --------------------------------------- */

/* The context's buffer for quantized activations: max_batch tokens of the
 * widest weight row. */
struct qmm_q8 *ops_ctx_qbuf(struct ops_ctx *ctx);

/* Thread `thread`'s repacking scratch: 4 entries per 32 columns of the
 * widest row (also 8 rows x the widest row of f32 for the float GEMM). */
struct qmm_pack8 *ops_ctx_qpack(struct ops_ctx *ctx, int thread);

/* The exact f32 path for every matmul of this context (true), or the fast
 * int8 path where a kernel exists (false, the default unless the environment
 * says IGNITE_MATMUL=exact when the context is created). */
void ops_ctx_set_exact(struct ops_ctx *ctx, bool exact);
bool ops_ctx_exact(const struct ops_ctx *ctx);

#endif
