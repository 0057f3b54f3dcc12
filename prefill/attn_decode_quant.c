/* prefill/attn_decode_quant.c: a decode item's accumulation reads a q8_0 or
 * q4_0 V cache directly, eight values at a time dequantized in registers
 * (the block's f16 scale times the sign-extended byte, or the nibble less
 * 8), instead of dequantizing each V tile into a scratch tile first: at
 * depth that round trip was half of a quantized cache's decode attention,
 * and made a q8_0 cache slower than an f16 one that reads twice its bytes.
 * The loops are attn_decode.c's acc3/acc2/acc1 (three, two or one rows;
 * o * corr, then + p_c v_c in column order, the softmax's sums on the
 * first pass), and every value the product models/quant.c's
 * quant_dequantize_row and attn_tiled.c's dequant_run make, so a row's
 * bits are those of the general loops. Where ignite runs AVX-512 a pass
 * covers 64 columns in zmm (accz), each key's blocks dequantized once for
 * all of them, where the eight-lane forms did it (and converted the scale)
 * once per 16 or 32 columns: the same operations per element
 * (docs/benchmarks.md, issue 51, for the time). Covered by
 * tests/cpu/test_attn_decode_quant.c (against fp64 over the same
 * quantized cache) and tests/cpu/test_attn_tiled.c (bit for bit against
 * the same rows in a prompt chunk). */
#include "prefill/attn_fused.h" /* first: the names of the fused build */
#include "prefill/attn_decode_quant.h"

#include "core/half.h"
#include "models/quant.h"
#include "ops/qmatmul.h"
#include "prefill/attn_v8.h"

#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DEC_FN __attribute__((target("avx2,f16c,fma")))
#define DEC_INLINE static inline __attribute__((always_inline))
#define prefetch_line(p) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)(p)))

/* Values db .. db + 7 of a quantized row (db % 8 == 0: one block's). */
DEC_FN DEC_INLINE attn_v8 load8(const enum kv_dtype dt, const uint8_t *row, int64_t db)
{
    int64_t j = db % QK8_0;
    if (dt == KV_Q8_0) {
        const uint8_t *blk = row + db / QK8_0 * (int64_t)sizeof(struct block_q8_0);
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + j));
        __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
        return (attn_v8)q * ig_f16_at(blk);
    }
    const uint8_t *blk = row + db / QK4_0 * (int64_t)sizeof(struct block_q4_0);
    __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + j % (QK4_0 / 2)));
    __m256i w = _mm256_cvtepu8_epi32(b);
    w = j < QK4_0 / 2 ? _mm256_and_si256(w, _mm256_set1_epi32(15)) : _mm256_srli_epi32(w, 4);
    __m256 q = _mm256_cvtepi32_ps(_mm256_sub_epi32(w, _mm256_set1_epi32(8)));
    return (attn_v8)q * ig_f16_at(blk);
}
#else
#define DEC_FN
#define DEC_INLINE static inline
#define prefetch_line(p) __builtin_prefetch((p), 0, 3)

static inline attn_v8 load8(const enum kv_dtype dt, const uint8_t *row, int64_t db)
{
    attn_v8 v;
    int64_t j = db % QK8_0;
    if (dt == KV_Q8_0) {
        const uint8_t *blk = row + db / QK8_0 * (int64_t)sizeof(struct block_q8_0);
        float d = ig_f16_at(blk);
        for (int i = 0; i < 8; i++)
            v[i] = d * (float)(int8_t)blk[2 + j + i];
        return v;
    }
    const uint8_t *blk = row + db / QK4_0 * (int64_t)sizeof(struct block_q4_0);
    float d = ig_f16_at(blk);
    for (int i = 0; i < 8; i++) {
        uint8_t b = blk[2 + (j + i) % (QK4_0 / 2)];
        v[i] = d * (float)((j < QK4_0 / 2 ? b & 15 : b >> 4) - 8);
    }
    return v;
}
#endif

/* Asks for the lines of row c of the next tile (pf: its row 0, rb bytes a
 * row) while this tile's row c is read: the next block is elsewhere in the
 * pool, a jump the hardware prefetchers do not follow. */
static inline void prefetch_row(const uint8_t *pf, int64_t c, int64_t rb)
{
    if (!pf)
        return;
    const uint8_t *b = pf + c * rb;
    for (int64_t o = 0; o < rb; o += 64)
        prefetch_line(b + o);
    prefetch_line(b + rb - 1);
}

/* Three rows, sixteen columns (six sums) at a time: each V vector
 * dequantized once for the three rows (attn_decode.c's acc3). */
#define ACC3_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const uint8_t *v = vt + c * rb;                                                    \
        attn_v8 v0 = load8(dt, v, db), v1 = load8(dt, v, db + 8);                          \
        a0 += p0[c] * v0, a1 += p0[c] * v1;                                                \
        b0 += p1[c] * v0, b1 += p1[c] * v1;                                                \
        e0 += p2[c] * v0, e1 += p2[c] * v1;                                                \
        extra;                                                                             \
    }
DEC_FN DEC_INLINE void acc3(const enum kv_dtype dt, const float *p0, const float *p1,
                            const float *p2, const float *corr, const uint8_t *vt, int64_t lo,
                            int64_t hi, int64_t hd, float *o0, float *o1, float *o2, float *sum,
                            const uint8_t *pf)
{
    int64_t rb = (int64_t)kv_dtype_row_bytes(dt, hd);
    float c0 = corr[0], c1 = corr[1], c2 = corr[2];
    float u0 = 0.0f, u1 = 0.0f, u2 = 0.0f;
    for (int64_t db = 0; db < hd; db += 16) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 b0 = v8_load(o1 + db) * c1, b1 = v8_load(o1 + db + 8) * c1;
        attn_v8 e0 = v8_load(o2 + db) * c2, e1 = v8_load(o2 + db + 8) * c2;
        if (db == 0) {
            ACC3_STEP((u0 += p0[c], u1 += p1[c], u2 += p2[c], prefetch_row(pf, c, rb)))
        } else {
            ACC3_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o1 + db, b0), v8_store(o1 + db + 8, b1);
        v8_store(o2 + db, e0), v8_store(o2 + db + 8, e1);
    }
    sum[0] = u0, sum[1] = u1, sum[2] = u2;
}

/* Two rows, thirty-two columns (eight sums) at a time. */
#define ACC2_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const uint8_t *v = vt + c * rb;                                                    \
        attn_v8 v0 = load8(dt, v, db), v1 = load8(dt, v, db + 8);                          \
        attn_v8 v2 = load8(dt, v, db + 16), v3 = load8(dt, v, db + 24);                    \
        a0 += p0[c] * v0, a1 += p0[c] * v1, a2 += p0[c] * v2, a3 += p0[c] * v3;           \
        b0 += p1[c] * v0, b1 += p1[c] * v1, b2 += p1[c] * v2, b3 += p1[c] * v3;           \
        extra;                                                                             \
    }
DEC_FN DEC_INLINE void acc2(const enum kv_dtype dt, const float *p0, const float *p1,
                            const float *corr, const uint8_t *vt, int64_t lo, int64_t hi,
                            int64_t hd, float *o0, float *o1, float *sum, const uint8_t *pf)
{
    int64_t rb = (int64_t)kv_dtype_row_bytes(dt, hd);
    float c0 = corr[0], c1 = corr[1];
    float u0 = 0.0f, u1 = 0.0f;
    for (int64_t db = 0; db < hd; db += 32) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 a2 = v8_load(o0 + db + 16) * c0, a3 = v8_load(o0 + db + 24) * c0;
        attn_v8 b0 = v8_load(o1 + db) * c1, b1 = v8_load(o1 + db + 8) * c1;
        attn_v8 b2 = v8_load(o1 + db + 16) * c1, b3 = v8_load(o1 + db + 24) * c1;
        if (db == 0) {
            ACC2_STEP((u0 += p0[c], u1 += p1[c], prefetch_row(pf, c, rb)))
        } else {
            ACC2_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o0 + db + 16, a2), v8_store(o0 + db + 24, a3);
        v8_store(o1 + db, b0), v8_store(o1 + db + 8, b1);
        v8_store(o1 + db + 16, b2), v8_store(o1 + db + 24, b3);
    }
    sum[0] = u0, sum[1] = u1;
}

/* One row, thirty-two columns (four sums) at a time. */
#define ACC1_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const uint8_t *v = vt + c * rb;                                                    \
        a0 += p0[c] * load8(dt, v, db), a1 += p0[c] * load8(dt, v, db + 8);                \
        a2 += p0[c] * load8(dt, v, db + 16), a3 += p0[c] * load8(dt, v, db + 24);          \
        extra;                                                                             \
    }
DEC_FN DEC_INLINE void acc1(const enum kv_dtype dt, const float *p0, const float *corr,
                            const uint8_t *vt, int64_t lo, int64_t hi, int64_t hd, float *o0,
                            float *sum, const uint8_t *pf)
{
    int64_t rb = (int64_t)kv_dtype_row_bytes(dt, hd);
    float c0 = corr[0];
    float u0 = 0.0f;
    for (int64_t db = 0; db < hd; db += 32) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 a2 = v8_load(o0 + db + 16) * c0, a3 = v8_load(o0 + db + 24) * c0;
        if (db == 0) {
            ACC1_STEP((u0 += p0[c], prefetch_row(pf, c, rb)))
        } else {
            ACC1_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o0 + db + 16, a2), v8_store(o0 + db + 24, a3);
    }
    sum[0] = u0;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* ---- AVX-512: sixty-four columns of a row as four zmm -------------------------------- */

/* The forms above with a pass of 64 columns (hd % 64 == 0) in zmm: each key
 * row's blocks dequantized once a pass where the eight-lane forms did it
 * once per 16 or 32 columns (with the scale's conversion and the rows'
 * p_c loads each time), a multiply-add covering 16 columns. Each element
 * sees the same operations in the same order (o * corr, then + p_c v_c in
 * column order, v_c = d q the same product), so the same bits; the scale
 * converted by F16C, the float ig_f16_at gives. */
#define ZMM_FN __attribute__((target("avx512f,avx2,f16c,fma")))

/* Values db .. db + 15 of a quantized row (db % 16 == 0: half a block). */
ZMM_FN DEC_INLINE attn_v16 load16(const enum kv_dtype dt, const uint8_t *row, int64_t db)
{
    int64_t j = db % QK8_0;
    if (dt == KV_Q8_0) {
        const uint8_t *blk = row + db / QK8_0 * (int64_t)sizeof(struct block_q8_0);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2 + j));
        __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
        return (attn_v16)q * _cvtsh_ss(ig_f16_load(blk));
    }
    const uint8_t *blk = row + db / QK4_0 * (int64_t)sizeof(struct block_q4_0);
    __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
    w = j < QK4_0 / 2 ? _mm512_and_si512(w, _mm512_set1_epi32(15)) : _mm512_srli_epi32(w, 4);
    __m512 q = _mm512_cvtepi32_ps(_mm512_sub_epi32(w, _mm512_set1_epi32(8)));
    return (attn_v16)q * _cvtsh_ss(ig_f16_load(blk));
}

/* n rows (1..3) of the pass at db: 4 n sums, each key's 64 values
 * dequantized once for the n rows. */
#define ACCZ_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const uint8_t *v = vt + c * rb;                                                    \
        attn_v16 v0 = load16(dt, v, db), v1 = load16(dt, v, db + 16);                      \
        attn_v16 v2 = load16(dt, v, db + 32), v3 = load16(dt, v, db + 48);                 \
        a0 += p0[c] * v0, a1 += p0[c] * v1, a2 += p0[c] * v2, a3 += p0[c] * v3;           \
        if (n > 1)                                                                         \
            b0 += p1[c] * v0, b1 += p1[c] * v1, b2 += p1[c] * v2, b3 += p1[c] * v3;       \
        if (n > 2)                                                                         \
            e0 += p2[c] * v0, e1 += p2[c] * v1, e2 += p2[c] * v2, e3 += p2[c] * v3;       \
        extra;                                                                             \
    }
ZMM_FN DEC_INLINE void accz(const enum kv_dtype dt, const int n, const float *p0,
                            const float *p1, const float *p2, const float *corr,
                            const uint8_t *vt, int64_t lo, int64_t hi, int64_t hd, float *o0,
                            float *o1, float *o2, float *sum, const uint8_t *pf)
{
    int64_t rb = (int64_t)kv_dtype_row_bytes(dt, hd);
    float c0 = corr[0], c1 = n > 1 ? corr[1] : 0.0f, c2 = n > 2 ? corr[2] : 0.0f;
    float u0 = 0.0f, u1 = 0.0f, u2 = 0.0f;
    for (int64_t db = 0; db < hd; db += 64) {
        attn_v16 a0 = v16_load(o0 + db) * c0, a1 = v16_load(o0 + db + 16) * c0;
        attn_v16 a2 = v16_load(o0 + db + 32) * c0, a3 = v16_load(o0 + db + 48) * c0;
        attn_v16 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        attn_v16 e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
        if (n > 1) {
            b0 = v16_load(o1 + db) * c1, b1 = v16_load(o1 + db + 16) * c1;
            b2 = v16_load(o1 + db + 32) * c1, b3 = v16_load(o1 + db + 48) * c1;
        }
        if (n > 2) {
            e0 = v16_load(o2 + db) * c2, e1 = v16_load(o2 + db + 16) * c2;
            e2 = v16_load(o2 + db + 32) * c2, e3 = v16_load(o2 + db + 48) * c2;
        }
        if (db == 0) {
            ACCZ_STEP((u0 += p0[c], u1 += n > 1 ? p1[c] : 0.0f, u2 += n > 2 ? p2[c] : 0.0f,
                       prefetch_row(pf, c, rb)))
        } else {
            ACCZ_STEP((void)0)
        }
        v16_store(o0 + db, a0), v16_store(o0 + db + 16, a1);
        v16_store(o0 + db + 32, a2), v16_store(o0 + db + 48, a3);
        if (n > 1) {
            v16_store(o1 + db, b0), v16_store(o1 + db + 16, b1);
            v16_store(o1 + db + 32, b2), v16_store(o1 + db + 48, b3);
        }
        if (n > 2) {
            v16_store(o2 + db, e0), v16_store(o2 + db + 16, e1);
            v16_store(o2 + db + 32, e2), v16_store(o2 + db + 48, e3);
        }
    }
    sum[0] = u0;
    if (n > 1)
        sum[1] = u1;
    if (n > 2)
        sum[2] = u2;
}
#endif

/* Rows in blocks of three, the last four or two as two blocks of two, a
 * lone row alone (attn_decode.c's grouping). */
static int64_t block_rows(int64_t left)
{
    return left == 1 ? 1 : left == 4 || left == 2 ? 2 : 3;
}

/* The walk over the rows for one type (a constant, so each load8 is one
 * type's instructions). */
DEC_FN DEC_INLINE void accumulate(const enum kv_dtype dt, const float *s, int64_t s_stride,
                                  const float *corr, int64_t rows, const uint8_t *vt, int64_t lo,
                                  int64_t hi, int64_t hd, float *o, float *sum, const uint8_t *pf)
{
    for (int64_t r = 0; r < rows;) {
        const float *sr = s + r * s_stride;
        float *orow = o + r * hd;
        int64_t n = block_rows(rows - r);
        const uint8_t *pfr = r == 0 ? pf : NULL; /* the first pass over the values asks */
        if (n == 3)
            acc3(dt, sr, sr + s_stride, sr + 2 * s_stride, corr + r, vt, lo, hi, hd, orow,
                 orow + hd, orow + 2 * hd, sum + r, pfr);
        else if (n == 2)
            acc2(dt, sr, sr + s_stride, corr + r, vt, lo, hi, hd, orow, orow + hd, sum + r, pfr);
        else
            acc1(dt, sr, corr + r, vt, lo, hi, hd, orow, sum + r, pfr);
        r += n;
    }
}

DEC_FN static void accumulate_q8_0(const float *s, int64_t s_stride, const float *corr,
                                   int64_t rows, const uint8_t *vt, int64_t lo, int64_t hi,
                                   int64_t hd, float *o, float *sum, const uint8_t *pf)
{
    accumulate(KV_Q8_0, s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
}

DEC_FN static void accumulate_q4_0(const float *s, int64_t s_stride, const float *corr,
                                   int64_t rows, const uint8_t *vt, int64_t lo, int64_t hi,
                                   int64_t hd, float *o, float *sum, const uint8_t *pf)
{
    accumulate(KV_Q4_0, s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* accumulate's walk with the AVX-512 form. */
ZMM_FN DEC_INLINE void accumulate_z(const enum kv_dtype dt, const float *s, int64_t s_stride,
                                    const float *corr, int64_t rows, const uint8_t *vt,
                                    int64_t lo, int64_t hi, int64_t hd, float *o, float *sum,
                                    const uint8_t *pf)
{
    for (int64_t r = 0; r < rows;) {
        const float *sr = s + r * s_stride;
        float *orow = o + r * hd;
        int64_t n = block_rows(rows - r);
        const uint8_t *pfr = r == 0 ? pf : NULL;
        if (n == 3)
            accz(dt, 3, sr, sr + s_stride, sr + 2 * s_stride, corr + r, vt, lo, hi, hd, orow,
                 orow + hd, orow + 2 * hd, sum + r, pfr);
        else if (n == 2)
            accz(dt, 2, sr, sr + s_stride, NULL, corr + r, vt, lo, hi, hd, orow, orow + hd,
                 NULL, sum + r, pfr);
        else
            accz(dt, 1, sr, NULL, NULL, corr + r, vt, lo, hi, hd, orow, NULL, NULL, sum + r,
                 pfr);
        r += n;
    }
}

ZMM_FN static void accumulate_q8_0_z(const float *s, int64_t s_stride, const float *corr,
                                     int64_t rows, const uint8_t *vt, int64_t lo, int64_t hi,
                                     int64_t hd, float *o, float *sum, const uint8_t *pf)
{
    accumulate_z(KV_Q8_0, s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
}

ZMM_FN static void accumulate_q4_0_z(const float *s, int64_t s_stride, const float *corr,
                                     int64_t rows, const uint8_t *vt, int64_t lo, int64_t hi,
                                     int64_t hd, float *o, float *sum, const uint8_t *pf)
{
    accumulate_z(KV_Q4_0, s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
}

/* Whether the AVX-512 form runs: attn_tiled.c's attn_zmm() (AVX-512 present,
 * not capped by IGNITE_SIMD, and the fused build's FMA forms allowed), and
 * whole passes of 64 columns. */
static bool zmm_runs(int64_t hd)
{
    return hd % 64 == 0 && ops_qmm_best_isa() == QMM_VNNI && attn_fma_forms_ok();
}
#else
static bool zmm_runs(int64_t hd)
{
    (void)hd;
    return false;
}
#define accumulate_q8_0_z accumulate_q8_0
#define accumulate_q4_0_z accumulate_q4_0
#endif

void attn_decode_accumulate_quant(enum kv_dtype dtype, const float *s, int64_t s_stride,
                                  const float *corr, int64_t rows, const uint8_t *vt, int64_t lo,
                                  int64_t hi, int64_t hd, float *o, float *sum,
                                  const uint8_t *pf)
{
    if (zmm_runs(hd)) {
        if (dtype == KV_Q8_0)
            accumulate_q8_0_z(s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
        else
            accumulate_q4_0_z(s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
        return;
    }
    if (dtype == KV_Q8_0)
        accumulate_q8_0(s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
    else
        accumulate_q4_0(s, s_stride, corr, rows, vt, lo, hi, hd, o, sum, pf);
}
