/* prefill/attn_decode.c: a decode item's scores and accumulation read the
 * f16 cache directly, eight halves at a time converted in registers (F16C),
 * instead of converting each K/V tile into a scratch tile first. A decode
 * item has only its group's few rows (three on SmolLM2), so each converted
 * element was stored, loaded back and used three times: the round trip cost
 * as much as the arithmetic and was half of a decode step's attention at
 * depth. Here each element is converted once, as it is loaded.
 *
 * Rows go in blocks of three (twelve score sums or six output vectors in
 * registers) and two, a lone row (a token split between threads) alone. Every score is the dot product of attn_tiled.c's
 * scores() (lane d % 8 sums q[d] k[d] in order of d, the lanes reduced in
 * v8_sum's order, then the tail of d), and every output element the
 * accumulation of its accumulate() (o * corr, then + p_c v_c in column
 * order), so a decode row gives the bits it gives inside a prompt chunk.
 * Covered by tests/cpu/test_attn_tiled.c (rows alone against the same rows
 * in one item, bit for bit, f16 caches, several group sizes and head dims)
 * and tests/cpu/test_prefill_decode.c. */
#include "prefill/attn_fused.h" /* first: the names of the fused build */
#include "prefill/attn_decode.h"

#include "prefill/attn_v8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* fma: the fused build's contraction (prefill/attn_fused.h), where
 * attn_fma_forms_ok(); the exact build has none, whatever the target. */
#define DEC_FN __attribute__((target("avx2,f16c,fma")))
/* prefetcht0 as a statement GCC keeps: it deleted loops of nothing but
 * __builtin_prefetch with a bound known only at run time as dead code. */
#define prefetch_line(p) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)(p)))
#define h8_load(p) ((attn_v8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))

bool attn_decode_f16_fast(void)
{
    /* every AVX2 CPU has F16C (as core/half.c); FMA for the fused build's
     * contraction, which must fuse here as the tiled loops do there */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && attn_fma_forms_ok();
}
#else
#define DEC_FN
#define prefetch_line(p) __builtin_prefetch((p), 0, 3)
#define h8_load(p)                                                                         \
    ((attn_v8){ig_f16_to_f32((p)[0]), ig_f16_to_f32((p)[1]), ig_f16_to_f32((p)[2]),          \
               ig_f16_to_f32((p)[3]), ig_f16_to_f32((p)[4]), ig_f16_to_f32((p)[5]),          \
               ig_f16_to_f32((p)[6]), ig_f16_to_f32((p)[7])})

bool attn_decode_f16_fast(void)
{
    return false;
}
#endif

/* Asks for the lines of the next tile's rows c .. c + n - 1 (pf: that tile's
 * row 0, or NULL) while this tile's same rows are read: the next block is
 * elsewhere in the pool, and its first lines missed the hardware
 * prefetchers every time (a decode row at depth 4096 waited on them for a
 * fifth of its attention). */
static inline void prefetch_rows(const ig_f16 *pf, int64_t c, int64_t n, int64_t hd)
{
    if (!pf)
        return;
    const char *b = (const char *)(pf + c * hd);
    for (int64_t o = 0; o < n * hd * (int64_t)sizeof *pf; o += 64)
        prefetch_line(b + o);
}

/* ---- scores ---------------------------------------------------------------------- */

/* Three rows x four columns, twelve sums in registers, each K vector
 * converted once and used three times (attn_tiled.c's scores3). */
DEC_FN static void scores3(const float *q0, const float *q1, const float *q2, const ig_f16 *kt,
                           int64_t c0, int64_t nc, int64_t hd, float *s0, float *s1, float *s2,
                           const ig_f16 *pf)
{
    int64_t hd8 = hd / 8 * 8;
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        const ig_f16 *k = kt + c * hd;
        prefetch_rows(pf, c, 4, hd);
        attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        attn_v8 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        attn_v8 e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 qa = v8_load(q0 + d), qb = v8_load(q1 + d), qe = v8_load(q2 + d);
            attn_v8 kv = h8_load(k + d);
            a0 += qa * kv, b0 += qb * kv, e0 += qe * kv;
            kv = h8_load(k + hd + d);
            a1 += qa * kv, b1 += qb * kv, e1 += qe * kv;
            kv = h8_load(k + 2 * hd + d);
            a2 += qa * kv, b2 += qb * kv, e2 += qe * kv;
            kv = h8_load(k + 3 * hd + d);
            a3 += qa * kv, b3 += qb * kv, e3 += qe * kv;
        }
        attn_v8 sum, sum2;
        v8_sums8(a0, a1, a2, a3, b0, b1, b2, b3, sum);
        v8_sums8(e0, e1, e2, e3, e0, e1, e2, e3, sum2);
        float t[12] = {0};
        for (int64_t d = hd8; d < hd; d++)
            for (int j = 0; j < 4; j++) {
                float kf = ig_f16_to_f32(k[j * hd + d]);
                t[j] += q0[d] * kf;
                t[4 + j] += q1[d] * kf;
                t[8 + j] += q2[d] * kf;
            }
        for (int j = 0; j < 4; j++) {
            s0[c + j] = sum[j] + t[j];
            s1[c + j] = sum[4 + j] + t[4 + j];
            s2[c + j] = sum2[j] + t[8 + j];
        }
    }
    for (; c < nc; c++) {
        const ig_f16 *k = kt + c * hd;
        attn_v8 a = {0}, b = {0}, e = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 kv = h8_load(k + d);
            a += v8_load(q0 + d) * kv;
            b += v8_load(q1 + d) * kv;
            e += v8_load(q2 + d) * kv;
        }
        float t = 0, u = 0, w = 0;
        for (int64_t d = hd8; d < hd; d++) {
            float kf = ig_f16_to_f32(k[d]);
            t += q0[d] * kf;
            u += q1[d] * kf;
            w += q2[d] * kf;
        }
        s0[c] = v8_sum(a) + t;
        s1[c] = v8_sum(b) + u;
        s2[c] = v8_sum(e) + w;
    }
}

/* Two rows x four columns (attn_tiled.c's blocks of two rows). */
DEC_FN static void scores2(const float *q0, const float *q1, const ig_f16 *kt, int64_t c0,
                           int64_t nc, int64_t hd, float *s0, float *s1, const ig_f16 *pf)
{
    int64_t hd8 = hd / 8 * 8;
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        const ig_f16 *k = kt + c * hd;
        prefetch_rows(pf, c, 4, hd);
        attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        attn_v8 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 qv = v8_load(q0 + d), qw = v8_load(q1 + d);
            attn_v8 k0 = h8_load(k + d), k1 = h8_load(k + hd + d);
            attn_v8 k2 = h8_load(k + 2 * hd + d), k3 = h8_load(k + 3 * hd + d);
            a0 += qv * k0, b0 += qw * k0;
            a1 += qv * k1, b1 += qw * k1;
            a2 += qv * k2, b2 += qw * k2;
            a3 += qv * k3, b3 += qw * k3;
        }
        attn_v8 sum;
        v8_sums8(a0, a1, a2, a3, b0, b1, b2, b3, sum);
        float t[8] = {0};
        for (int64_t d = hd8; d < hd; d++)
            for (int j = 0; j < 4; j++) {
                float kf = ig_f16_to_f32(k[j * hd + d]);
                t[j] += q0[d] * kf;
                t[4 + j] += q1[d] * kf;
            }
        for (int j = 0; j < 4; j++) {
            s0[c + j] = sum[j] + t[j];
            s1[c + j] = sum[4 + j] + t[4 + j];
        }
    }
    for (; c < nc; c++) {
        const ig_f16 *k = kt + c * hd;
        attn_v8 a = {0}, b = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 kv = h8_load(k + d);
            a += v8_load(q0 + d) * kv;
            b += v8_load(q1 + d) * kv;
        }
        float t = 0, u = 0;
        for (int64_t d = hd8; d < hd; d++) {
            float kf = ig_f16_to_f32(k[d]);
            t += q0[d] * kf;
            u += q1[d] * kf;
        }
        s0[c] = v8_sum(a) + t;
        s1[c] = v8_sum(b) + u;
    }
}

/* One row x four columns (a row alone in its KV head's part of a token
 * split between threads), the sums reduced as scores3's third row. */
DEC_FN static void scores1(const float *q0, const ig_f16 *kt, int64_t c0, int64_t nc, int64_t hd,
                           float *s0, const ig_f16 *pf)
{
    int64_t hd8 = hd / 8 * 8;
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        const ig_f16 *k = kt + c * hd;
        prefetch_rows(pf, c, 4, hd);
        attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 qv = v8_load(q0 + d);
            a0 += qv * h8_load(k + d), a1 += qv * h8_load(k + hd + d);
            a2 += qv * h8_load(k + 2 * hd + d), a3 += qv * h8_load(k + 3 * hd + d);
        }
        attn_v8 sum;
        v8_sums8(a0, a1, a2, a3, a0, a1, a2, a3, sum);
        float t[4] = {0};
        for (int64_t d = hd8; d < hd; d++)
            for (int j = 0; j < 4; j++)
                t[j] += q0[d] * ig_f16_to_f32(k[j * hd + d]);
        for (int j = 0; j < 4; j++)
            s0[c + j] = sum[j] + t[j];
    }
    for (; c < nc; c++) {
        const ig_f16 *k = kt + c * hd;
        attn_v8 a = {0};
        for (int64_t d = 0; d < hd8; d += 8)
            a += v8_load(q0 + d) * h8_load(k + d);
        float t = 0;
        for (int64_t d = hd8; d < hd; d++)
            t += q0[d] * ig_f16_to_f32(k[d]);
        s0[c] = v8_sum(a) + t;
    }
}

/* Rows in blocks of three, the last four or two as two blocks of two, a
 * lone row alone. */
static int64_t block_rows(int64_t left)
{
    return left == 1 ? 1 : left == 4 || left == 2 ? 2 : 3;
}

void attn_decode_scores_f16(const float *q, int64_t rows, const ig_f16 *kt, int64_t c0,
                            int64_t nc, int64_t hd, float *s, int64_t s_stride,
                            const ig_f16 *pf)
{
    for (int64_t r = 0; r < rows;) {
        const float *qr = q + r * hd;
        float *sr = s + r * s_stride;
        int64_t n = block_rows(rows - r);
        const ig_f16 *pfr = r == 0 ? pf : NULL; /* the first pass over the keys asks */
        if (n == 3)
            scores3(qr, qr + hd, qr + 2 * hd, kt, c0, nc, hd, sr, sr + s_stride,
                    sr + 2 * s_stride, pfr);
        else if (n == 2)
            scores2(qr, qr + hd, kt, c0, nc, hd, sr, sr + s_stride, pfr);
        else
            scores1(qr, kt, c0, nc, hd, sr, pfr);
        r += n;
    }
}

/* ---- accumulation ---------------------------------------------------------------- */

/* o_r = o_r * corr_r + sum_c p_r[c] v[c] for three rows, sixteen columns
 * (six sums) at a time, each V vector converted once for the three rows;
 * the first block also sums each row's p[c] in column order into sum[r]
 * (the softmax's sum, off its own serial loop). */
#define ACC3_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const ig_f16 *v = vt + c * hd + db;                                                \
        attn_v8 v0 = h8_load(v), v1 = h8_load(v + 8);                                      \
        a0 += p0[c] * v0, a1 += p0[c] * v1;                                                \
        b0 += p1[c] * v0, b1 += p1[c] * v1;                                                \
        e0 += p2[c] * v0, e1 += p2[c] * v1;                                                \
        extra;                                                                             \
    }
DEC_FN static void acc3(const float *p0, const float *p1, const float *p2, const float *corr,
                        const ig_f16 *vt, int64_t lo, int64_t hi, int64_t hd, float *o0,
                        float *o1, float *o2, float *sum, const ig_f16 *pf)
{
    float c0 = corr[0], c1 = corr[1], c2 = corr[2];
    float u0 = 0.0f, u1 = 0.0f, u2 = 0.0f;
    int64_t db = 0;
    if (hd < 16)
        for (int64_t c = lo; c < hi; c++)
            u0 += p0[c], u1 += p1[c], u2 += p2[c];
    for (; db + 16 <= hd; db += 16) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 b0 = v8_load(o1 + db) * c1, b1 = v8_load(o1 + db + 8) * c1;
        attn_v8 e0 = v8_load(o2 + db) * c2, e1 = v8_load(o2 + db + 8) * c2;
        if (db == 0) {
            ACC3_STEP((u0 += p0[c], u1 += p1[c], u2 += p2[c], prefetch_rows(pf, c, 1, hd)))
        } else {
            ACC3_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o1 + db, b0), v8_store(o1 + db + 8, b1);
        v8_store(o2 + db, e0), v8_store(o2 + db + 8, e1);
    }
    for (; db < hd; db++) {
        float a = o0[db] * c0, b = o1[db] * c1, e = o2[db] * c2;
        for (int64_t c = lo; c < hi; c++) {
            float vf = ig_f16_to_f32(vt[c * hd + db]);
            a += p0[c] * vf, b += p1[c] * vf, e += p2[c] * vf;
        }
        o0[db] = a, o1[db] = b, o2[db] = e;
    }
    sum[0] = u0, sum[1] = u1, sum[2] = u2;
}

/* The same for two rows, thirty-two columns (eight sums) at a time. */
#define ACC2_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const ig_f16 *v = vt + c * hd + db;                                                \
        attn_v8 v0 = h8_load(v), v1 = h8_load(v + 8);                                      \
        attn_v8 v2 = h8_load(v + 16), v3 = h8_load(v + 24);                                \
        a0 += p0[c] * v0, a1 += p0[c] * v1, a2 += p0[c] * v2, a3 += p0[c] * v3;           \
        b0 += p1[c] * v0, b1 += p1[c] * v1, b2 += p1[c] * v2, b3 += p1[c] * v3;           \
        extra;                                                                             \
    }
DEC_FN static void acc2(const float *p0, const float *p1, const float *corr, const ig_f16 *vt,
                        int64_t lo, int64_t hi, int64_t hd, float *o0, float *o1, float *sum,
                        const ig_f16 *pf)
{
    float c0 = corr[0], c1 = corr[1];
    float u0 = 0.0f, u1 = 0.0f;
    int64_t db = 0;
    if (hd < 32)
        for (int64_t c = lo; c < hi; c++)
            u0 += p0[c], u1 += p1[c];
    for (; db + 32 <= hd; db += 32) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 a2 = v8_load(o0 + db + 16) * c0, a3 = v8_load(o0 + db + 24) * c0;
        attn_v8 b0 = v8_load(o1 + db) * c1, b1 = v8_load(o1 + db + 8) * c1;
        attn_v8 b2 = v8_load(o1 + db + 16) * c1, b3 = v8_load(o1 + db + 24) * c1;
        if (db == 0) {
            ACC2_STEP((u0 += p0[c], u1 += p1[c], prefetch_rows(pf, c, 1, hd)))
        } else {
            ACC2_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o0 + db + 16, a2), v8_store(o0 + db + 24, a3);
        v8_store(o1 + db, b0), v8_store(o1 + db + 8, b1);
        v8_store(o1 + db + 16, b2), v8_store(o1 + db + 24, b3);
    }
    for (; db < hd; db++) {
        float a = o0[db] * c0, b = o1[db] * c1;
        for (int64_t c = lo; c < hi; c++) {
            float vf = ig_f16_to_f32(vt[c * hd + db]);
            a += p0[c] * vf, b += p1[c] * vf;
        }
        o0[db] = a, o1[db] = b;
    }
    sum[0] = u0, sum[1] = u1;
}

/* The same for one row, thirty-two columns (four sums) at a time. */
#define ACC1_STEP(extra)                                                                   \
    for (int64_t c = lo; c < hi; c++) {                                                    \
        const ig_f16 *v = vt + c * hd + db;                                                \
        a0 += p0[c] * h8_load(v), a1 += p0[c] * h8_load(v + 8);                            \
        a2 += p0[c] * h8_load(v + 16), a3 += p0[c] * h8_load(v + 24);                      \
        extra;                                                                             \
    }
DEC_FN static void acc1(const float *p0, const float *corr, const ig_f16 *vt, int64_t lo,
                        int64_t hi, int64_t hd, float *o0, float *sum, const ig_f16 *pf)
{
    float c0 = corr[0];
    float u0 = 0.0f;
    int64_t db = 0;
    if (hd < 32)
        for (int64_t c = lo; c < hi; c++)
            u0 += p0[c];
    for (; db + 32 <= hd; db += 32) {
        attn_v8 a0 = v8_load(o0 + db) * c0, a1 = v8_load(o0 + db + 8) * c0;
        attn_v8 a2 = v8_load(o0 + db + 16) * c0, a3 = v8_load(o0 + db + 24) * c0;
        if (db == 0) {
            ACC1_STEP((u0 += p0[c], prefetch_rows(pf, c, 1, hd)))
        } else {
            ACC1_STEP((void)0)
        }
        v8_store(o0 + db, a0), v8_store(o0 + db + 8, a1);
        v8_store(o0 + db + 16, a2), v8_store(o0 + db + 24, a3);
    }
    for (; db < hd; db++) {
        float a = o0[db] * c0;
        for (int64_t c = lo; c < hi; c++)
            a += p0[c] * ig_f16_to_f32(vt[c * hd + db]);
        o0[db] = a;
    }
    sum[0] = u0;
}

void attn_decode_accumulate_f16(const float *s, int64_t s_stride, const float *corr,
                                int64_t rows, const ig_f16 *vt, int64_t lo, int64_t hi,
                                int64_t hd, float *o, float *sum, const ig_f16 *pf)
{
    for (int64_t r = 0; r < rows;) {
        const float *sr = s + r * s_stride;
        float *orow = o + r * hd;
        int64_t n = block_rows(rows - r);
        const ig_f16 *pfr = r == 0 ? pf : NULL;
        if (n == 3)
            acc3(sr, sr + s_stride, sr + 2 * s_stride, corr + r, vt, lo, hi, hd, orow,
                 orow + hd, orow + 2 * hd, sum + r, pfr);
        else if (n == 2)
            acc2(sr, sr + s_stride, corr + r, vt, lo, hi, hd, orow, orow + hd, sum + r, pfr);
        else
            acc1(sr, corr + r, vt, lo, hi, hd, orow, sum + r, pfr);
        r += n;
    }
}
