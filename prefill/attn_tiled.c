/* prefill/attn_tiled.c: tiled causal attention with an online softmax (the
 * CPU twin of the CUDA prefill kernel), for every row of a step.
 *
 * A work item is (sequence, KV head, query tile): the rows of the item are the
 * ATTN_TILE_Q query tokens of every query head in the KV head's group. The
 * item walks the K/V tiles from position 0 to the last position its queries
 * can see (tiles above the causal diagonal are never touched), and keeps per
 * row a running max m, a running sum l and an unnormalized output o:
 *   m' = max(m, max_c s_c),  l' = l e^(m - m') + sum_c e^(s_c - m'),
 *   o' = o e^(m - m') + sum_c e^(s_c - m') v_c,   out = o / l at the end.
 * On a tile that crosses the diagonal each row simply stops at its own
 * position, so there is no mask value and no n x n buffer. A sliding window
 * starts the walk at the block of the first position the tile's first query
 * can see, and within that block at that position; on the tile that crosses
 * a row's window edge the row starts at its edge. So nothing behind the
 * window of the tile's first query is read (a cache may have dropped it).
 * A K/V tile is one cache block, found through the sequence's block table:
 * read in place from an f32 cache, dequantized into f32 from q8_0 or q4_0
 * blocks (V always; K on the exact path: f32 math over the dequantized
 * values), while on the int8 path a quantized K is scored in its blocks
 * against the query quantized to int8 (in registers, attn_decode_qk.c,
 * with the int8 matmul's tile kernel's bits; that kernel itself,
 * scores_quant, where there is no register one), converted once per item from f16 (a
 * decode item, one token's group of heads, reads an f16 cache in place too,
 * converting in registers: prefill/attn_decode.c; one thread walks a token's
 * KV heads together, block by block, or, with fewer tokens than threads to
 * go round, a part of its query heads). Each
 * score is a dot product over head_dim in a fixed order, so a row's result
 * does not depend on the other rows of its item (a decode row alone, or one
 * of a prompt chunk, bit for bit) and no tile is transposed. Writing K/V
 * into the cache is the caller's (backend/cpu.c). The int8 path runs this
 * file built a second time, with fused multiply-adds and a polynomial
 * softmax (prefill/attn_fused.h); the exact path, this build.
 * Covered by tests/cpu/test_attn_tiled.c. */
#include "prefill/attn_fused.h" /* first: the names of the fused build */
#include "prefill/attn_tiled.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"
#include "ops/exp_row.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"
#include "prefill/attn_decode.h"
#include "prefill/attn_decode_qk.h"
#include "prefill/attn_decode_quant.h"
#include "prefill/attn_v8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The softmax's exponentials: expf's bits, or the int8 path's polynomial.
 * And its running sum's update l corr + sum: one rounding in the fused build
 * wherever it runs (contraction fuses only where the code is built for FMA,
 * not in the baseline code around the cloned loops), two in the exact one. */
#ifdef ATTN_FUSED
#define softmax_exp_row ops_exp_row_fused
#define softmax_exp_rows ops_exp_rows_fused
#define row_sum_update(l, corr, sum) fmaf(l, corr, sum)
#else
#define softmax_exp_row ops_exp_row
#define softmax_exp_rows ops_exp_rows
#define row_sum_update(l, corr, sum) ((l) * (corr) + (sum))
#endif

/* Output columns handled per register block (two vectors of 8). */
#define ATTN_COL_BLOCK 16

/* ---- per-thread scratch -------------------------------------------------------- */

struct attn_scratch {
    float *q;  /* [rows, head_dim] queries of the item, pre-multiplied by scale */
    struct qmm_q8 *qq; /* [rows, head_dim / 32] q quantized to int8 (a quantized K
                        * on the int8 path: scores_quant) */
    float *k;  /* [ATTN_TILE_K, head_dim] K tile converted to f32 (f16 caches) */
    float *v;  /* [ATTN_TILE_K, head_dim] V tile converted to f32 */
    float *s;  /* [rows, ATTN_TILE_K] scores, then probabilities */
    float *o;  /* [rows, head_dim] unnormalized output */
    float *m;  /* [rows] running max */
    float *l;  /* [rows] running sum */
    float *corr; /* [rows] e^(m_old - m_new) of the current tile */
    float *qp; /* [rows, head_dim] the queries in pairs, side by side by eights (pair_queries) */
};

static int64_t max_rows(int64_t n_head, int64_t n_head_kv)
{
    return n_head / n_head_kv * ATTN_TILE_Q;
}

/* Floats of the quantized queries (struct qmm_q8 is a whole number of floats). */
static int64_t qq_floats(int64_t rows, int64_t head_dim)
{
    return rows * (head_dim / QMM_QK + 1) * (int64_t)(sizeof(struct qmm_q8) / sizeof(float));
}

int64_t attn_tiled_scratch_floats(int64_t n_head, int64_t n_head_kv, int64_t head_dim)
{
    int64_t rows = max_rows(n_head, n_head_kv);
    return rows * head_dim * 2 + head_dim * ATTN_TILE_K * 2 + rows * ATTN_TILE_K + rows * 3 +
           rows * head_dim + qq_floats(rows, head_dim);
}

static struct attn_scratch carve(float *p, int64_t n_head, int64_t n_head_kv, int64_t head_dim)
{
    int64_t rows = max_rows(n_head, n_head_kv), hd = head_dim;
    struct attn_scratch s;
    s.q = p, p += rows * hd;
    s.k = p, p += hd * ATTN_TILE_K;
    s.v = p, p += ATTN_TILE_K * hd;
    s.s = p, p += rows * ATTN_TILE_K;
    s.o = p, p += rows * hd;
    s.m = p, p += rows;
    s.l = p, p += rows;
    s.corr = p, p += rows;
    s.qp = p, p += rows * hd;
    s.qq = (struct qmm_q8 *)(void *)p;
    return s;
}

/* ---- loading a K/V tile ------------------------------------------------------- */

/* dst[0..n) = the n values of a quantized row run at src (whole blocks):
 * d q, d the block's f16 scale in f32 and q its integer (q8_0: the byte;
 * q4_0: the nibble less 8), the one product models/quant.c's
 * quant_dequantize_row makes, so the same f32 values. restrict: without
 * it GCC's -O2 cost model left the block loops scalar (an alias check to
 * version them), a byte at a time, 8-14 % of a q8_0 cache's prefill at
 * depth 4096 and sensitive to where the loop landed (docs/benchmarks.md,
 * issue 51). */
OPS_SIMD_CLONES
static void dequant_run(enum kv_dtype dtype, const uint8_t *restrict src, float *restrict dst,
                        int64_t n)
{
    if (dtype == KV_Q8_0) {
        for (int64_t b = 0; b < n / QK8_0; b++, src += sizeof(struct block_q8_0)) {
            float d = ig_f16_at(src);
            const int8_t *q = (const int8_t *)(src + offsetof(struct block_q8_0, qs));
            float *y = dst + b * QK8_0;
            for (int j = 0; j < QK8_0; j++)
                y[j] = d * (float)q[j];
        }
        return;
    }
    for (int64_t b = 0; b < n / QK4_0; b++, src += sizeof(struct block_q4_0)) {
        float d = ig_f16_at(src);
        const uint8_t *q = src + offsetof(struct block_q4_0, qs);
        float *y = dst + b * QK4_0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((q[j] & 0x0f) - 8);
            y[j + QK4_0 / 2] = d * (float)((q[j] >> 4) - 8);
        }
    }
}

/* Rows c0 .. nc - 1 of one K or V tile in f32: the cache's own rows when
 * they are f32, else converted into `buf`; the result points at row 0 (row
 * c is c * head_dim further). */
static const float *tile_f32(const struct attn_params *p, enum kv_dtype dtype, const void *row,
                             int64_t c0, int64_t nc, float *buf)
{
    int64_t hd = p->head_dim;
    if (dtype == KV_F32)
        return (const float *)row - c0 * hd;
    if (dtype == KV_F16)
        ig_f16_to_f32_row(row, buf + c0 * hd, (nc - c0) * hd);
    else
        dequant_run(dtype, row, buf + c0 * hd, (nc - c0) * hd);
    return buf;
}

/* The K and V rows k0 .. k0 + nc - 1 in f32: the cache's own rows for an f32
 * cache, else converted (f16) or dequantized (q8_0, q4_0) into the scratch;
 * *k and *v point at row k0 (row c is c * head_dim further), but only rows
 * c0 .. nc - 1 are read or converted (those before c0 are behind every
 * row's window). With `kq` (a quantized K the int8 path's scores read as it
 * is) *k is NULL and *kq points at K's row k0 in its blocks instead. The
 * tile is one cache block (k0 a multiple of KV_BLOCK): one contiguous run of
 * rows per KV head. */
static void load_kv_tile(const struct attn_params *p, const int32_t *table, int64_t kvh,
                         int64_t k0, int64_t c0, int64_t nc, struct attn_scratch *sc,
                         const float **k, const float **v, const uint8_t **kq)
{
    const void *kr = kv_row(&p->kv, p->kv.k, table, kvh, k0 + c0);
    const void *vr = kv_row(&p->kv, p->kv.v, table, kvh, k0 + c0);
    if (kq) {
        *kq = (const uint8_t *)kr - kv_dtype_row_bytes(p->kv.dtype, c0 * p->head_dim);
        *k = NULL;
    } else {
        *k = tile_f32(p, p->kv.dtype, kr, c0, nc, sc->k);
    }
    *v = tile_f32(p, p->kv.dtype_v, vr, c0, nc, sc->v);
}

/* Asks for the K and V rows of the tile at k0 (up to kend) while this tile
 * is worked on: consecutive tiles of a KV head are blocks apart in the pool
 * (other heads' rows and other blocks between them), a jump the hardware
 * prefetchers do not follow. Into L2 (hint T1): the tile is read once,
 * soon, by this core. (Decode rows ask line by line instead, as they read:
 * decode_tile.) */
static void prefetch_kv_tile(const struct attn_params *p, const int32_t *table, int64_t kvh,
                             int64_t k0, int64_t kend)
{
    int64_t n = kend - k0 < ATTN_TILE_K ? kend - k0 : ATTN_TILE_K;
    size_t kbytes = kv_dtype_row_bytes(p->kv.dtype, n * p->head_dim);
    size_t vbytes = kv_dtype_row_bytes(p->kv.dtype_v, n * p->head_dim);
    const char *kr = kv_row(&p->kv, p->kv.k, table, kvh, k0);
    const char *vr = kv_row(&p->kv, p->kv.v, table, kvh, k0);
    for (size_t off = 0; off < kbytes; off += 64)
        __builtin_prefetch(kr + off, 0, 2);
    for (size_t off = 0; off < vbytes; off += 64)
        __builtin_prefetch(vr + off, 0, 2);
}

/* ---- one work item ----------------------------------------------------------- */

/* scores() for rows r..r + 2: three rows x four columns, twelve
 * independent sums in registers (two rows give eight, too few to keep both
 * multiply-add pipes busy through their latency: an AVX2 prefill's
 * attention about 5 % slower, bench/attn_cpu.c), each K load used three
 * times. The same operations per score as the other blocks. `tail` as in
 * scores_rows2: without a tail (hd % 8 == 0) the sums go straight to the
 * scores, four at a store, with the general case's + 0 in one add (the
 * tail's zeroed sums and their scalar stores were half of this loop's time
 * at head_dim 64). */
static inline __attribute__((always_inline)) void
scores3_rows(struct attn_scratch *sc, const float *kt, int64_t r, int64_t c0, int64_t nc,
             int64_t hd, const bool tail)
{
    int64_t hd8 = tail ? hd / 8 * 8 : hd;
    const float *q = sc->q + r * hd, *q1 = q + hd, *q2 = q1 + hd;
    float *s = sc->s + r * ATTN_TILE_K, *s1 = s + ATTN_TILE_K, *s2 = s1 + ATTN_TILE_K;
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        const float *k = kt + c * hd;
        attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        attn_v8 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        attn_v8 e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 qa = v8_load(q + d), qb = v8_load(q1 + d), qe = v8_load(q2 + d);
            attn_v8 kv = v8_load(k + d);
            a0 += qa * kv, b0 += qb * kv, e0 += qe * kv;
            kv = v8_load(k + hd + d);
            a1 += qa * kv, b1 += qb * kv, e1 += qe * kv;
            kv = v8_load(k + 2 * hd + d);
            a2 += qa * kv, b2 += qb * kv, e2 += qe * kv;
            kv = v8_load(k + 3 * hd + d);
            a3 += qa * kv, b3 += qb * kv, e3 += qe * kv;
        }
        attn_v8 sum, sum2;
        v8_sums8(a0, a1, a2, a3, b0, b1, b2, b3, sum);
        v8_sums8(e0, e1, e2, e3, e0, e1, e2, e3, sum2);
        if (!tail) {
            sum += (attn_v8){0}, sum2 += (attn_v8){0};
            v4_store(s + c, v8_shuf(sum, sum, 0, 1, 2, 3));
            v4_store(s1 + c, v8_shuf(sum, sum, 4, 5, 6, 7));
            v4_store(s2 + c, v8_shuf(sum2, sum2, 0, 1, 2, 3));
            continue;
        }
        float t[12] = {0};
        for (int64_t d = hd8; d < hd; d++)
            for (int j = 0; j < 4; j++) {
                t[j] += q[d] * k[j * hd + d];
                t[4 + j] += q1[d] * k[j * hd + d];
                t[8 + j] += q2[d] * k[j * hd + d];
            }
        for (int j = 0; j < 4; j++) {
            s[c + j] = sum[j] + t[j];
            s1[c + j] = sum[4 + j] + t[4 + j];
            s2[c + j] = sum2[j] + t[8 + j];
        }
    }
    for (; c < nc; c++) {
        const float *k = kt + c * hd;
        attn_v8 a = {0}, b = {0}, e = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 kv = v8_load(k + d);
            a += v8_load(q + d) * kv;
            b += v8_load(q1 + d) * kv;
            e += v8_load(q2 + d) * kv;
        }
        float t = 0, u = 0, w = 0;
        for (int64_t d = hd8; d < hd; d++) {
            t += q[d] * k[d];
            u += q1[d] * k[d];
            w += q2[d] * k[d];
        }
        s[c] = v8_sum(a) + t;
        s1[c] = v8_sum(b) + u;
        s2[c] = v8_sum(e) + w;
    }
}

OPS_SIMD_CLONES
static void scores3(struct attn_scratch *sc, const float *kt, int64_t r, int64_t c0, int64_t nc,
                    int64_t hd)
{
    if (hd % 8 == 0)
        scores3_rows(sc, kt, r, c0, nc, hd, false);
    else
        scores3_rows(sc, kt, r, c0, nc, hd, true);
}

/* Rows r, r + 1 of scores(): two rows and four columns share each load of q
 * and k. `tail` (hd not a multiple of 8) adds the last products one by one;
 * without it, two copies of this loop (one per value of the constant) keep
 * the tail's registers out of the common one. */
static inline __attribute__((always_inline)) void
scores_rows2(struct attn_scratch *sc, const float *kt, int64_t r, int64_t c0, int64_t nc,
             int64_t hd, const bool tail)
{
    int64_t hd8 = tail ? hd / 8 * 8 : hd;
    const float *q = sc->q + r * hd, *q1 = q + hd;
    float *s = sc->s + r * ATTN_TILE_K, *s1 = s + ATTN_TILE_K;
    int64_t c = c0;
    for (; c + 4 <= nc; c += 4) {
        const float *k = kt + c * hd;
        attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        attn_v8 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        if (!tail) {
            /* Each K vector is loaded for the next step as soon as this step
             * has used it: a value carried round the loop stays in a
             * register, where GCC made a value used twice two loads (10
             * loads a step for 16 vector operations: the load ports were
             * the bound). hd >= 8 here. */
            attn_v8 k0 = v8_load(k), k1 = v8_load(k + hd);
            attn_v8 k2 = v8_load(k + 2 * hd), k3 = v8_load(k + 3 * hd);
            int64_t d = 0;
            for (; d + 8 < hd; d += 8) {
                attn_v8 qv = v8_load(q + d), qw = v8_load(q1 + d);
                a0 += qv * k0, b0 += qw * k0, k0 = v8_load(k + d + 8);
                a1 += qv * k1, b1 += qw * k1, k1 = v8_load(k + hd + d + 8);
                a2 += qv * k2, b2 += qw * k2, k2 = v8_load(k + 2 * hd + d + 8);
                a3 += qv * k3, b3 += qw * k3, k3 = v8_load(k + 3 * hd + d + 8);
            }
            attn_v8 qv = v8_load(q + d), qw = v8_load(q1 + d);
            a0 += qv * k0, b0 += qw * k0;
            a1 += qv * k1, b1 += qw * k1;
            a2 += qv * k2, b2 += qw * k2;
            a3 += qv * k3, b3 += qw * k3;
        } else {
            for (int64_t d = 0; d < hd8; d += 8) {
                attn_v8 qv = v8_load(q + d), qw = v8_load(q1 + d);
                attn_v8 k0 = v8_load(k + d), k1 = v8_load(k + hd + d);
                attn_v8 k2 = v8_load(k + 2 * hd + d), k3 = v8_load(k + 3 * hd + d);
                a0 += qv * k0, b0 += qw * k0;
                a1 += qv * k1, b1 += qw * k1;
                a2 += qv * k2, b2 += qw * k2;
                a3 += qv * k3, b3 += qw * k3;
            }
        }
        attn_v8 sum;
        v8_sums8(a0, a1, a2, a3, b0, b1, b2, b3, sum);
        if (!tail) { /* no tail: the + 0 of the general case, in one add */
            sum += (attn_v8){0};
            v4_store(s + c, v8_shuf(sum, sum, 0, 1, 2, 3));
            v4_store(s1 + c, v8_shuf(sum, sum, 4, 5, 6, 7));
            continue;
        }
        float t[8] = {0};
        for (int64_t d = hd8; d < hd; d++)
            for (int j = 0; j < 4; j++) {
                t[j] += q[d] * k[j * hd + d];
                t[4 + j] += q1[d] * k[j * hd + d];
            }
        for (int j = 0; j < 4; j++) {
            s[c + j] = sum[j] + t[j];
            s1[c + j] = sum[4 + j] + t[4 + j];
        }
    }
    for (; c < nc; c++) {
        const float *k = kt + c * hd;
        attn_v8 a = {0}, b = {0};
        for (int64_t d = 0; d < hd8; d += 8) {
            attn_v8 kv = v8_load(k + d);
            a += v8_load(q + d) * kv;
            b += v8_load(q1 + d) * kv;
        }
        float t = 0, u = 0;
        for (int64_t d = hd8; d < hd; d++) {
            t += q[d] * k[d];
            u += q1[d] * k[d];
        }
        s[c] = v8_sum(a) + t;
        s1[c] = v8_sum(b) + u;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Two 8-lane dot products per zmm: lanes 0..7 one score's, 8..15 another's,
 * each half the operations of scores_rows2's ymm (q broadcast to both
 * halves, two K rows side by side). The lane sums are v8_sums8's additions
 * on both halves at once (the same shuffle patterns within each 256-bit
 * half). */
#define v16_shuf(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define v16_pairs(a, b)                                                                       \
    (v16_shuf(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +               \
     v16_shuf(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
#define v16_quads(u, w)                                                                       \
    (v16_shuf(u, w, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +               \
     v16_shuf(u, w, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
#define v16_sums8(a0, a1, a2, a3, b0, b1, b2, b3, out)                                          \
    do {                                                                                       \
        attn_v16 za_ = v16_quads(v16_pairs(a0, a2), v16_pairs(a1, a3));                        \
        attn_v16 zb_ = v16_quads(v16_pairs(b0, b2), v16_pairs(b1, b3));                        \
        attn_v16 z_ = v16_shuf(za_, zb_, 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30) + \
                      v16_shuf(za_, zb_, 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31); \
        (out) = (attn_v16)v16_shuf((attn_d8)z_, (attn_d8)z_, 0, 2, 1, 3, 4, 6, 5, 7);          \
    } while (0)

/* Eight floats at p in both halves of a zmm: one broadcast load
 * (vbroadcastf64x4; the vector extension's shuffle became a load and a
 * shuffle). */
#define V8_BOTH(p) ((attn_v16)_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(const void *)(p))))

/* The first row of scores()'s two-row blocks on AVX-512: rows 0..2 go as
 * one three-row block where the count is odd. */
static int64_t pairs_from(int64_t rows)
{
    return rows % 2 == 1 && rows >= 3 ? 3 : 0;
}

/* The item's queries in pairs for scores_pairs_zmm, once an item: pair p
 * (rows pairs_from + 2p and the next) as [q_a(d..d+8) | q_b(d..d+8)] for
 * each d, 2 head_dim floats a pair. */
static void pair_queries(struct attn_scratch *sc, int64_t rows, int64_t hd)
{
    for (int64_t r = pairs_from(rows); r + 2 <= rows; r += 2) {
        const float *q = sc->q + r * hd, *q1 = q + hd;
        float *qp = sc->qp + (r - pairs_from(rows)) * hd;
        for (int64_t d = 0; d < hd; d += 8) {
            memcpy(qp + 2 * d, q + d, 8 * sizeof *qp);
            memcpy(qp + 2 * d + 8, q1 + d, 8 * sizeof *qp);
        }
    }
}

/* scores_rows2 (hd a multiple of 8) of every two-row block from r0 on
 * (sc->qp: pair_queries) for blocks of eight columns from c0 on: accumulator
 * p holds column c + p, row r in its low half and row r + 1 in its high
 * one. A step takes one load of the pair's queries and a broadcast load of
 * each K row: pairing two K rows in a zmm instead took a shuffle each on
 * the port the multiplies and adds need (hd 256 at depth 8192 spent 1.7x
 * the accumulation's time here). Columns outside, rows inside: the eight K
 * rows stay in L1 while the pairs stream past (a K tile of hd 256, 64 KiB,
 * does not fit). Returns the first column it left (fewer than eight left)
 * for scores_rows2. */
__attribute__((target("avx512f"))) static int64_t
scores_pairs_zmm(struct attn_scratch *sc, const float *kt, int64_t r0, int64_t rows, int64_t c0,
                 int64_t nc, int64_t hd)
{
    int64_t c = c0;
    for (; c + 8 <= nc; c += 8) {
        const float *k = kt + c * hd;
        for (int64_t r = r0; r + 2 <= rows; r += 2) {
            const float *qp = sc->qp + (r - r0) * hd;
            float *s = sc->s + r * ATTN_TILE_K, *s1 = s + ATTN_TILE_K;
            attn_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            attn_v16 a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
            for (int64_t d = 0; d < hd; d += 8) {
                attn_v16 qv = v16_load(qp + 2 * d);
                a0 += qv * V8_BOTH(k + d);
                a1 += qv * V8_BOTH(k + hd + d);
                a2 += qv * V8_BOTH(k + 2 * hd + d);
                a3 += qv * V8_BOTH(k + 3 * hd + d);
                a4 += qv * V8_BOTH(k + 4 * hd + d);
                a5 += qv * V8_BOTH(k + 5 * hd + d);
                a6 += qv * V8_BOTH(k + 6 * hd + d);
                a7 += qv * V8_BOTH(k + 7 * hd + d);
            }
            attn_v16 sum; /* [row r: columns c .. c + 7 | row r + 1: the same] */
            v16_sums8(a0, a1, a2, a3, a4, a5, a6, a7, sum);
            sum += (attn_v16){0}; /* scores_rows2's + 0 */
            v8_store(s + c, v16_shuf(sum, sum, 0, 1, 2, 3, 4, 5, 6, 7));
            v8_store(s1 + c, v16_shuf(sum, sum, 8, 9, 10, 11, 12, 13, 14, 15));
        }
    }
    return c;
}
#else
static int64_t pairs_from(int64_t rows)
{
    return rows % 2 == 1 && rows >= 3 ? 3 : 0;
}

static void pair_queries(struct attn_scratch *sc, int64_t rows, int64_t hd)
{
}

static int64_t scores_pairs_zmm(struct attn_scratch *sc, const float *kt, int64_t r0, int64_t rows,
                                int64_t c0, int64_t nc, int64_t hd)
{
    return c0;
}
#endif

/* s[r][c] = q[r] . k[c] for c0 <= c < nc. Each score is one dot product in a
 * fixed order (eight lanes over d, then v8_sum), three rows and four columns
 * sharing each load of q and k, then two (on AVX-512, two-row blocks in zmm,
 * three rows first only when the count is odd): a score never depends on the
 * other rows or columns of the item. The eight lane sums of a block are
 * reduced together (v8_sums8), in v8_sum's order. */
OPS_SIMD_CLONES
static void scores(struct attn_scratch *sc, const float *kt, int64_t rows, int64_t c0,
                   int64_t nc, int64_t hd, bool zmm)
{
    int64_t hd8 = hd / 8 * 8;
    int64_t r = 0;
    if (!zmm) { /* threes: each K load serves three rows, twelve sums in flight */
        for (; r + 3 <= rows; r += 3)
            scores3(sc, kt, r, c0, nc, hd);
    } else if (pairs_from(rows) == 3) {
        scores3(sc, kt, 0, c0, nc, hd);
        r = 3;
    }
    /* the columns the zmm blocks leave, fewer than eight */
    int64_t cz = zmm && hd % 8 == 0 ? scores_pairs_zmm(sc, kt, r, rows, c0, nc, hd) : c0;
    for (; r + 2 <= rows; r += 2) {
        if (hd % 8 == 0)
            scores_rows2(sc, kt, r, cz, nc, hd, false);
        else
            scores_rows2(sc, kt, r, c0, nc, hd, true);
    }
    for (; r < rows; r++) {
        const float *q = sc->q + r * hd;
        float *s = sc->s + r * ATTN_TILE_K;
        int64_t c = c0;
        for (; c + 4 <= nc; c += 4) {
            const float *k = kt + c * hd;
            attn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t d = 0; d < hd8; d += 8) {
                attn_v8 qv = v8_load(q + d);
                a0 += qv * v8_load(k + d);
                a1 += qv * v8_load(k + hd + d);
                a2 += qv * v8_load(k + 2 * hd + d);
                a3 += qv * v8_load(k + 3 * hd + d);
            }
            attn_v8 sum;
            v8_sums8(a0, a1, a2, a3, a0, a1, a2, a3, sum);
            float t[4] = {0};
            for (int64_t d = hd8; d < hd; d++)
                for (int j = 0; j < 4; j++)
                    t[j] += q[d] * k[j * hd + d];
            for (int j = 0; j < 4; j++)
                s[c + j] = sum[j] + t[j];
        }
        for (; c < nc; c++) {
            const float *k = kt + c * hd;
            attn_v8 a = {0};
            for (int64_t d = 0; d < hd8; d += 8)
                a += v8_load(q + d) * v8_load(k + d);
            float t = 0;
            for (int64_t d = hd8; d < hd; d++)
                t += q[d] * k[d];
            s[c] = v8_sum(a) + t;
        }
    }
}

/* s[r][c] = q[r] . k[c] for c0 <= c < nc from a quantized K tile (kt: row
 * 0 of the tile in its blocks) and the rows' queries quantized to int8
 * (sc->qq, struct qmm_q8 blocks): the int8 matmul's tile kernel (ops/qmatmul.h,
 * `tile`: the CPU's best set, VNNI or AVX2 where they run), an integer dot
 * product per block of 32 scaled by both blocks' scales, summed over the
 * blocks in order. A score's sums do not depend on the tile's other rows or
 * columns (the kernel's promise), so a row's bits are its own here too. */
static void scores_quant(const struct attn_params *p, struct attn_scratch *sc, qmm_tile_fn tile,
                         const uint8_t *kt, int64_t rows, int64_t c0, int64_t nc)
{
    int64_t nb = p->head_dim / QMM_QK;
    size_t rb = kv_dtype_row_bytes(p->kv.dtype, p->head_dim);
    for (int64_t r = 0; r < rows; r += QMM_NT) {
        int nt = rows - r < QMM_NT ? (int)(rows - r) : QMM_NT;
        for (int64_t c = c0; c < nc; c += QMM_MR) {
            int mr = nc - c < QMM_MR ? (int)(nc - c) : QMM_MR;
            tile(kt + (size_t)c * rb, rb, nb, sc->qq + r * nb, nb, mr, nt,
                 sc->s + r * ATTN_TILE_K + c, ATTN_TILE_K);
        }
    }
}

/* s = cap * tanh(s / cap) over columns [c0, nc) of the rows' scores (Gemma
 * 2 style soft-capping). */
static void softcap_scores(struct attn_scratch *sc, int64_t rows, int64_t c0, int64_t nc,
                           float cap)
{
    float inv = 1.0f / cap;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = c0; c < nc; c++)
            sc->s[r * ATTN_TILE_K + c] = cap * tanhf(sc->s[r * ATTN_TILE_K + c] * inv);
}

/* max(m, x[0..n)) as the scalar loop `m = x > m ? x : m` gives it (a NaN
 * score never taken), eight lanes at a time: each lane starts at m and
 * takes the same comparisons, and a max does not depend on their order
 * (but for the sign of a zero maximum, which no e^(s - m) or m_old - m
 * downstream can see). Four chains of eight lanes (one chain waited on each
 * compare and blend), then the lanes by halves, pairs and neighbours in
 * vectors (a scalar loop over them waited on each max): the two were 7 %
 * of an AVX2 prefill's attention at 2048 tokens (bench/attn_cpu). */
typedef int32_t attn_i8 __attribute__((vector_size(32)));
#define v8_max(w, v)                                                                         \
    ({                                                                                       \
        attn_v8 w_ = (w), v_ = (v);                                                          \
        attn_i8 gt_ = w_ > v_;                                                               \
        (attn_v8)((gt_ & (attn_i8)w_) | (~gt_ & (attn_i8)v_));                                \
    })
OPS_SIMD_CLONES
static float row_max(const float *x, int64_t n, float m)
{
    int64_t c = 0;
    if (n >= 16) {
        attn_v8 v0 = {m, m, m, m, m, m, m, m}, v1 = v0, v2 = v0, v3 = v0;
        for (; c + 32 <= n; c += 32) {
            v0 = v8_max(v8_load(x + c), v0), v1 = v8_max(v8_load(x + c + 8), v1);
            v2 = v8_max(v8_load(x + c + 16), v2), v3 = v8_max(v8_load(x + c + 24), v3);
        }
        for (; c + 8 <= n; c += 8)
            v0 = v8_max(v8_load(x + c), v0);
        v0 = v8_max(v0, v1), v2 = v8_max(v2, v3);
        v0 = v8_max(v0, v2);
        v0 = v8_max(v0, v8_shuf(v0, v0, 4, 5, 6, 7, 0, 1, 2, 3));
        v0 = v8_max(v0, v8_shuf(v0, v0, 2, 3, 0, 1, 6, 7, 4, 5));
        v0 = v8_max(v0, v8_shuf(v0, v0, 1, 0, 3, 2, 5, 4, 7, 6));
        m = v0[0];
    }
    for (; c < n; c++)
        m = x[c] > m ? x[c] : m;
    return m;
}

/* Online-softmax update of row r over its visible columns [lo, hi), first
 * half: sets m[r] to the new max (row_max's) and leaves m_old - m_new in
 * corr[r] for correct_rows to exponentiate (with the other rows' in one
 * vector pass, where a scalar expf per row and tile was 4 % of a long
 * prefill). Columns outside are never read. softmax_probs then turns
 * s[r][lo..hi) into probabilities relative to m[r] (softmax_exp_rows:
 * expf's bits, vectorized; the fused build's polynomial), for several rows
 * in one call. The sum and l[r] = l[r] corr[r] + sum, in column order, come
 * with the accumulation (accumulate_rows, add_row_sum; the decode path:
 * attn_decode_accumulate_f16), or on a tile every row sees whole before it,
 * eight rows at a time (accumulate_whole, add_row_sums8). */
static void softmax_max(struct attn_scratch *sc, int64_t r, int64_t lo, int64_t hi)
{
    float mx = row_max(sc->s + r * ATTN_TILE_K + lo, hi - lo, sc->m[r]);
    sc->corr[r] = sc->m[r] - mx;
    sc->m[r] = mx;
}

/* The probabilities of `rows` rows from r on, `step` rows apart, after
 * their softmax_max: s[r][lo..hi) = e^(s - m[r]), in one call. */
static void softmax_probs(struct attn_scratch *sc, int64_t r, int64_t rows, int64_t step,
                          int64_t lo, int64_t hi)
{
    softmax_exp_rows(sc->s + r * ATTN_TILE_K + lo, hi - lo, rows, step * ATTN_TILE_K,
                     sc->m + r, step);
}

/* corr[r] = e^(m_old - m_new) for rows 0..n-1 after their softmax_max: 0
 * on a row's first tile (m_old = -inf). ops_exp_row's e^(x - 0) is expf(x)
 * bit for bit (x - 0 is x, -0 and NaN included); the polynomial's is its
 * e^x. */
static void correct_rows(struct attn_scratch *sc, int64_t n)
{
    softmax_exp_row(sc->corr, n, 0.0f);
}

/* o[r] = o[r] * corr[r] + sum_{lo <= c < hi} s[r][c] v[c], a column block
 * of o at a time held in registers while the keys stream past: blocks of 64
 * columns (eight vectors: eight independent sums, each s[c] read once per
 * 64 columns), then of 16, then single columns. Every element of o sees the
 * same operations in the same order whatever its block. */
OPS_SIMD_CLONES
static void accumulate(struct attn_scratch *sc, const float *vt, int64_t r, int64_t lo,
                       int64_t hi, int64_t hd)
{
    const float *s = sc->s + r * ATTN_TILE_K;
    float *o = sc->o + r * hd;
    float corr = sc->corr[r];
    int64_t db = 0;
    for (; db + 64 <= hd; db += 64) { /* written out: -O2 keeps an array in memory */
        float *ob = o + db;
        attn_v8 a0 = v8_load(ob) * corr, a1 = v8_load(ob + 8) * corr;
        attn_v8 a2 = v8_load(ob + 16) * corr, a3 = v8_load(ob + 24) * corr;
        attn_v8 a4 = v8_load(ob + 32) * corr, a5 = v8_load(ob + 40) * corr;
        attn_v8 a6 = v8_load(ob + 48) * corr, a7 = v8_load(ob + 56) * corr;
        for (int64_t c = lo; c < hi; c++) {
            const float *v = vt + c * hd + db;
            float p = s[c];
            a0 += p * v8_load(v), a1 += p * v8_load(v + 8);
            a2 += p * v8_load(v + 16), a3 += p * v8_load(v + 24);
            a4 += p * v8_load(v + 32), a5 += p * v8_load(v + 40);
            a6 += p * v8_load(v + 48), a7 += p * v8_load(v + 56);
        }
        v8_store(ob, a0), v8_store(ob + 8, a1), v8_store(ob + 16, a2), v8_store(ob + 24, a3);
        v8_store(ob + 32, a4), v8_store(ob + 40, a5), v8_store(ob + 48, a6), v8_store(ob + 56, a7);
    }
    for (; db + ATTN_COL_BLOCK <= hd; db += ATTN_COL_BLOCK) {
        attn_v8 a0 = v8_load(o + db) * corr, a1 = v8_load(o + db + 8) * corr;
        for (int64_t c = lo; c < hi; c++) {
            const float *v = vt + c * hd + db;
            a0 += s[c] * v8_load(v);
            a1 += s[c] * v8_load(v + 8);
        }
        v8_store(o + db, a0);
        v8_store(o + db + 8, a1);
    }
    for (; db < hd; db++) {
        float acc = o[db] * corr;
        for (int64_t c = lo; c < hi; c++)
            acc += s[c] * vt[c * hd + db];
        o[db] = acc;
    }
}

/* The probabilities' sum of row r over [lo, hi), in column order, and
 * l[r] = l[r] corr[r] + sum. */
static void add_row_sum(struct attn_scratch *sc, int64_t r, int64_t lo, int64_t hi)
{
    const float *s = sc->s + r * ATTN_TILE_K;
    float sum = 0.0f;
    for (int64_t c = lo; c < hi; c++)
        sum += s[c];
    sc->l[r] = row_sum_update(sc->l[r], sc->corr[r], sum);
}

/* 2w output columns [db, db + 2w) of rows 0..n-1 (n <= 6) as two vectors V
 * of w floats (load, store: V's unaligned access), over columns [lo, hi),
 * and with `sums` each row's probability sum in column order into sum*.
 * Reads ACC_ROWS_N's variables (o*, s*, c*: each row's output,
 * probabilities and correction). Written out (rows as separate variables,
 * the unused ones dead for a constant n): -O2 keeps arrays of vectors in
 * memory. ACC_ROW(n, k, x) is x for row k when k < n. */
#define ACC_ROW(n, k, x)                                                                     \
    do {                                                                                     \
        if ((n) > (k))                                                                       \
            x;                                                                               \
    } while (0)
#define ACC_ROWS_BLOCK(V, load, store, w, n, db, sums)                                       \
    do {                                                                                     \
        V a0 = load(o0 + (db)) * c0, b0 = load(o0 + (db) + (w)) * c0;                        \
        V a1 = load(o1 + (db)) * c1, b1 = load(o1 + (db) + (w)) * c1;                        \
        V a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0}, a4 = {0}, b4 = {0}, a5 = {0}, b5 = {0};    \
        ACC_ROW(n, 2, (a2 = load(o2 + (db)) * c2, b2 = load(o2 + (db) + (w)) * c2));         \
        ACC_ROW(n, 3, (a3 = load(o3 + (db)) * c3, b3 = load(o3 + (db) + (w)) * c3));         \
        ACC_ROW(n, 4, (a4 = load(o4 + (db)) * c4, b4 = load(o4 + (db) + (w)) * c4));         \
        ACC_ROW(n, 5, (a5 = load(o5 + (db)) * c5, b5 = load(o5 + (db) + (w)) * c5));         \
        for (int64_t c = lo; c < hi; c++) {                                                  \
            V v0 = load(vt + c * hd + (db)), v1 = load(vt + c * hd + (db) + (w));            \
            a0 += s0[c] * v0, b0 += s0[c] * v1;                                              \
            a1 += s1[c] * v0, b1 += s1[c] * v1;                                              \
            ACC_ROW(n, 2, (a2 += s2[c] * v0, b2 += s2[c] * v1));                             \
            ACC_ROW(n, 3, (a3 += s3[c] * v0, b3 += s3[c] * v1));                             \
            ACC_ROW(n, 4, (a4 += s4[c] * v0, b4 += s4[c] * v1));                             \
            ACC_ROW(n, 5, (a5 += s5[c] * v0, b5 += s5[c] * v1));                             \
            if (sums) {                                                                      \
                sum0 += s0[c], sum1 += s1[c];                                                \
                ACC_ROW(n, 2, sum2 += s2[c]);                                                \
                ACC_ROW(n, 3, sum3 += s3[c]);                                                \
            }                                                                                \
        }                                                                                    \
        store(o0 + (db), a0), store(o0 + (db) + (w), b0);                                    \
        store(o1 + (db), a1), store(o1 + (db) + (w), b1);                                    \
        ACC_ROW(n, 2, (store(o2 + (db), a2), store(o2 + (db) + (w), b2)));                   \
        ACC_ROW(n, 3, (store(o3 + (db), a3), store(o3 + (db) + (w), b3)));                   \
        ACC_ROW(n, 4, (store(o4 + (db), a4), store(o4 + (db) + (w), b4)));                   \
        ACC_ROW(n, 5, (store(o5 + (db), a5), store(o5 + (db) + (w), b5)));                   \
    } while (0)

/* The body of accumulate_rows_n and accumulate_rows16_n (their arguments
 * sc, vt, rr, lo, hi, hd in scope): the rows' pointers and corrections,
 * ACC_ROWS_BLOCK over hd in steps of 2w columns, with `sums` (n <= 4) the
 * sums riding along the first, then l = l corr + sum. A macro, not a
 * function, for the vector type it takes. */
#define ACC_ROWS_N(V, load, store, w, n, sums)                                               \
    do {                                                                                     \
        int64_t r_[6];                                                                       \
        for (int k_ = 0; k_ < 6; k_++)                                                       \
            r_[k_] = rr[k_ < (n) ? k_ : 0];                                                  \
        const float *s0 = sc->s + r_[0] * ATTN_TILE_K, *s1 = sc->s + r_[1] * ATTN_TILE_K;    \
        const float *s2 = sc->s + r_[2] * ATTN_TILE_K, *s3 = sc->s + r_[3] * ATTN_TILE_K;    \
        const float *s4 = sc->s + r_[4] * ATTN_TILE_K, *s5 = sc->s + r_[5] * ATTN_TILE_K;    \
        float *o0 = sc->o + r_[0] * hd, *o1 = sc->o + r_[1] * hd;                            \
        float *o2 = sc->o + r_[2] * hd, *o3 = sc->o + r_[3] * hd;                            \
        float *o4 = sc->o + r_[4] * hd, *o5 = sc->o + r_[5] * hd;                            \
        float c0 = sc->corr[r_[0]], c1 = sc->corr[r_[1]], c2 = sc->corr[r_[2]];              \
        float c3 = sc->corr[r_[3]], c4 = sc->corr[r_[4]], c5 = sc->corr[r_[5]];              \
        float sum0 = 0.0f, sum1 = 0.0f, sum2 = 0.0f, sum3 = 0.0f;                            \
        int64_t db0 = 0;                                                                     \
        if (sums) {                                                                          \
            ACC_ROWS_BLOCK(V, load, store, w, n, 0, true);                                   \
            db0 = 2 * (w);                                                                   \
        }                                                                                    \
        for (int64_t db = db0; db < hd; db += 2 * (w))                                       \
            ACC_ROWS_BLOCK(V, load, store, w, n, db, false);                                 \
        if (sums) {                                                                          \
            sc->l[r_[0]] = row_sum_update(sc->l[r_[0]], c0, sum0);                           \
            sc->l[r_[1]] = row_sum_update(sc->l[r_[1]], c1, sum1);                           \
            ACC_ROW(n, 2, sc->l[r_[2]] = row_sum_update(sc->l[r_[2]], c2, sum2));            \
            ACC_ROW(n, 3, sc->l[r_[3]] = row_sum_update(sc->l[r_[3]], c3, sum3));            \
        }                                                                                    \
    } while (0)

/* accumulate() for rows rr[0..n) (2 <= n <= 6; n <= 4 with `sums`, which
 * adds their probability sums as add_row_sum does) that see the same
 * columns [lo, hi): 16 output columns of every row at a time (2n sums in
 * registers) while the values stream past, so each V load serves n rows
 * where accumulate() reloads the whole tile for every row (it spilled out
 * of L1 with the tile's K, scores and outputs). Four rows' eight sums only
 * just cover the multiply-adds' latency; six rows (where the probability
 * sums are added apart: add_row_sums8) give twelve. The n probability sums
 * ride along the first 16 columns, n chains of additions side by side
 * where one row's chain alone waited on each addition. Every element of o
 * sees accumulate()'s operations in its order (o * corr, then + s[c] v[c]
 * for c from lo up), every sum add_row_sum's. hd % 16 == 0. */
static inline __attribute__((always_inline)) void
accumulate_rows_n(struct attn_scratch *sc, const float *vt, const int64_t *rr, const int n,
                  int64_t lo, int64_t hi, int64_t hd, const bool sums)
{
    ACC_ROWS_N(attn_v8, v8_load, v8_store, 8, n, sums);
}

static void accumulate_rows(struct attn_scratch *sc, const float *vt, const int64_t *rr, int n,
                            int64_t lo, int64_t hi, int64_t hd, bool sums);

/* Runs f, accumulate_rows_n or its AVX-512 form, with n and sums as
 * constants (2 <= n <= 4 with sums, <= 6 without) and returns; falls
 * through for other n. */
#define ACC_ROWS_SELECT(f)                                                                   \
    do {                                                                                     \
        switch (n) {                                                                         \
        case 2:                                                                              \
            sums ? f(sc, vt, rr, 2, lo, hi, hd, true) : f(sc, vt, rr, 2, lo, hi, hd, false); \
            return;                                                                          \
        case 3:                                                                              \
            sums ? f(sc, vt, rr, 3, lo, hi, hd, true) : f(sc, vt, rr, 3, lo, hi, hd, false); \
            return;                                                                          \
        case 4:                                                                              \
            sums ? f(sc, vt, rr, 4, lo, hi, hd, true) : f(sc, vt, rr, 4, lo, hi, hd, false); \
            return;                                                                          \
        case 5: f(sc, vt, rr, 5, lo, hi, hd, false); return;                                 \
        case 6: f(sc, vt, rr, 6, lo, hi, hd, false); return;                                 \
        default: break;                                                                      \
        }                                                                                    \
    } while (0)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* accumulate_rows_n on AVX-512: 32 output columns of each row as two zmm,
 * so a multiply or an add covers 16 columns where the AVX2 form covers 8
 * (cores with full-width AVX-512 units run twice the multiply-adds; on
 * split ones the same). Each element sees the same operations in the same
 * order as in accumulate_rows_n, so the same bits. hd % 32 == 0. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
accumulate_rows16_n(struct attn_scratch *sc, const float *vt, const int64_t *rr, const int n,
                    int64_t lo, int64_t hi, int64_t hd, const bool sums)
{
    ACC_ROWS_N(attn_v16, v16_load, v16_store, 16, n, sums);
}

__attribute__((target("avx512f"))) static void
accumulate_rows16(struct attn_scratch *sc, const float *vt, const int64_t *rr, int n, int64_t lo,
                  int64_t hi, int64_t hd, bool sums)
{
    IG_ASSERT(n <= (sums ? 4 : 6));
    ACC_ROWS_SELECT(accumulate_rows16_n);
    accumulate_rows(sc, vt, rr, n, lo, hi, hd, sums);
}

/* Whether accumulate_rows16 runs: AVX-512 present and not capped away
 * (IGNITE_SIMD=avxvnni, avx2 or scalar: ignite's one ISA setting,
 * ops_qmm_best_isa, whose AVX512-VNNI level implies AVX-512 F/VL/BW). */
static bool attn_zmm(void)
{
    return ops_qmm_best_isa() == QMM_VNNI && attn_fma_forms_ok();
}
#else
static bool attn_zmm(void)
{
    return false;
}
#define accumulate_rows16 accumulate_rows
#endif

OPS_SIMD_CLONES
static void accumulate_rows(struct attn_scratch *sc, const float *vt, const int64_t *rr, int n,
                            int64_t lo, int64_t hi, int64_t hd, bool sums)
{
    IG_ASSERT(n <= (sums ? 4 : 6));
    if (hd % ATTN_COL_BLOCK == 0)
        ACC_ROWS_SELECT(accumulate_rows_n);
    for (int i = 0; i < n; i++) {
        if (sums)
            add_row_sum(sc, rr[i], lo, hi);
        accumulate(sc, vt, rr[i], lo, hi, hd);
    }
}

/* add_row_sum for rows r0 .. r0 + 7 at once, lane j of the running sums
 * row r0 + j's: eight columns of the eight rows turned into eight vectors
 * of a column each (an 8 x 8 transpose) and added in column order, so each
 * lane sees add_row_sum's additions (its tail columns one by one after). */
OPS_SIMD_CLONES
static void add_row_sums8(struct attn_scratch *sc, int64_t r0, int64_t lo, int64_t hi)
{
    const float *s = sc->s + r0 * ATTN_TILE_K;
    attn_v8 sum = {0};
    int64_t c = lo;
    for (; c + 8 <= hi; c += 8) {
        attn_v8 x0 = v8_load(s + c), x1 = v8_load(s + ATTN_TILE_K + c);
        attn_v8 x2 = v8_load(s + 2 * ATTN_TILE_K + c), x3 = v8_load(s + 3 * ATTN_TILE_K + c);
        attn_v8 x4 = v8_load(s + 4 * ATTN_TILE_K + c), x5 = v8_load(s + 5 * ATTN_TILE_K + c);
        attn_v8 x6 = v8_load(s + 6 * ATTN_TILE_K + c), x7 = v8_load(s + 7 * ATTN_TILE_K + c);
        /* pairs of rows interleaved, then quads, then the 128-bit halves */
        attn_v8 t0 = v8_shuf(x0, x1, 0, 8, 1, 9, 4, 12, 5, 13);
        attn_v8 t1 = v8_shuf(x0, x1, 2, 10, 3, 11, 6, 14, 7, 15);
        attn_v8 t2 = v8_shuf(x2, x3, 0, 8, 1, 9, 4, 12, 5, 13);
        attn_v8 t3 = v8_shuf(x2, x3, 2, 10, 3, 11, 6, 14, 7, 15);
        attn_v8 t4 = v8_shuf(x4, x5, 0, 8, 1, 9, 4, 12, 5, 13);
        attn_v8 t5 = v8_shuf(x4, x5, 2, 10, 3, 11, 6, 14, 7, 15);
        attn_v8 t6 = v8_shuf(x6, x7, 0, 8, 1, 9, 4, 12, 5, 13);
        attn_v8 t7 = v8_shuf(x6, x7, 2, 10, 3, 11, 6, 14, 7, 15);
        attn_v8 u0 = v8_shuf(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
        attn_v8 u1 = v8_shuf(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
        attn_v8 u2 = v8_shuf(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
        attn_v8 u3 = v8_shuf(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
        attn_v8 u4 = v8_shuf(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13);
        attn_v8 u5 = v8_shuf(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
        attn_v8 u6 = v8_shuf(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13);
        attn_v8 u7 = v8_shuf(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
        sum += v8_shuf(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11); /* column c */
        sum += v8_shuf(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11);
        sum += v8_shuf(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11);
        sum += v8_shuf(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11);
        sum += v8_shuf(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15); /* column c + 4 */
        sum += v8_shuf(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
        sum += v8_shuf(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
        sum += v8_shuf(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
    }
    float tot[8];
    v8_store(tot, sum);
    for (int j = 0; j < 8; j++) {
        for (int64_t cc = c; cc < hi; cc++)
            tot[j] += s[j * ATTN_TILE_K + cc];
        sc->l[r0 + j] = row_sum_update(sc->l[r0 + j], sc->corr[r0 + j], tot[j]);
    }
}

/* The row-batch accumulation run_item picks: accumulate_rows or its
 * AVX-512 form. */
typedef void (*acc_rows_fn)(struct attn_scratch *, const float *, const int64_t *, int, int64_t,
                            int64_t, int64_t, bool);

/* A tile every row sees whole ([lo, hi) for all): the probability sums
 * eight rows at a time, then the accumulation six rows at a time through
 * acc (twelve independent sums: accumulate_rows_n). */
static void accumulate_whole(struct attn_scratch *sc, const float *vt, int64_t rows,
                             int64_t lo, int64_t hi, int64_t hd, acc_rows_fn acc)
{
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8)
        add_row_sums8(sc, r, lo, hi);
    for (; r < rows; r++)
        add_row_sum(sc, r, lo, hi);
    for (r = 0; r < rows; r += 6) {
        int n = rows - r < 6 ? (int)(rows - r) : 6;
        int64_t rr[6];
        for (int k = 0; k < n; k++)
            rr[k] = r + k;
        if (n == 1)
            accumulate(sc, vt, r, lo, hi, hd);
        else
            acc(sc, vt, rr, n, lo, hi, hd, false);
    }
}

/* dst[0..n) = src[0..n) * f, eight at a time (one product each: the same
 * bits as one by one; the item's queries in and its outputs out, where the
 * baseline build's scalar loops were 1.5 % of an AVX2 prefill) and a decode
 * row's. */
OPS_SIMD_CLONES
static void scale_row(float *dst, const float *src, float f, int64_t n)
{
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        v8_store(dst + d, v8_load(src + d) * f);
    for (; d < n; d++)
        dst[d] = src[d] * f;
}

/* The scores of a decode tile's rows from a quantized K tile in its blocks
 * (kt: row 0): scores_quant's tile kernel calls, four keys at a time, with
 * the next tile's same rows requested as these are read (kn: its row 0, or
 * NULL), as attn_decode.c's f16 loops do. The same sums as scores_quant. */
static void decode_scores_quant(const struct attn_params *p, struct attn_scratch *sc,
                                qmm_tile_fn tile, const uint8_t *kt, int64_t rows, int64_t c0,
                                int64_t nc, const uint8_t *kn)
{
    int64_t nb = p->head_dim / QMM_QK;
    size_t rb = kv_dtype_row_bytes(p->kv.dtype, p->head_dim);
    for (int64_t c = c0; c < nc; c += QMM_MR) {
        int mr = nc - c < QMM_MR ? (int)(nc - c) : QMM_MR;
        if (kn)
            for (size_t off = 0; off < (size_t)mr * rb; off += 64)
                __builtin_prefetch(kn + (size_t)c * rb + off, 0, 3);
        for (int64_t r = 0; r < rows; r += QMM_NT) {
            int nt = rows - r < QMM_NT ? (int)(rows - r) : QMM_NT;
            tile(kt + (size_t)c * rb, rb, nb, sc->qq + r * nb, nb, mr, nt,
                 sc->s + r * ATTN_TILE_K + c, ATTN_TILE_K);
        }
    }
}

/* One K/V tile of a decode item (one query token; rows: its KV head's query
 * heads in the walk) read in place: K f16 (converted in registers as
 * attn_decode.c loads it) or quantized (scored against the int8 query in
 * registers, `kqk`: attn_decode_qk.c, the tile kernel's bits; where it has
 * no kernel, by the tile kernel itself, `ktile`), V f16 or quantized
 * (dequantized in registers, attn_decode_quant.c): the same scores, softmax and accumulation as
 * run_item's general loop, bit for bit, without the scratch tiles. The
 * same head's next block is requested line by line as this one is read
 * (it is elsewhere in the pool, and the hardware prefetchers missed its
 * start every time: bench/attn_cpu at depth 4096, 30 layers' caches, 0.26
 * -> 0.20 ms per layer and token; requesting it all at once before the tile
 * measured slower). */
static void decode_tile(const struct attn_params *p, const struct attn_seq *s, int64_t kvh,
                        int64_t k0, int64_t c0, int64_t nc, int64_t kend, int64_t rows,
                        qmm_tile_fn ktile, attn_qk_fn kqk, struct attn_scratch *sc)
{
    int64_t hd = p->head_dim;
    /* Row 0 of the tile; rows before c0 are not read (behind the window). */
    size_t kb = kv_dtype_row_bytes(p->kv.dtype, c0 * hd);
    size_t vb = kv_dtype_row_bytes(p->kv.dtype_v, c0 * hd);
    const char *kt = (const char *)kv_row(&p->kv, p->kv.k, s->table, kvh, k0 + c0) - kb;
    const char *vt = (const char *)kv_row(&p->kv, p->kv.v, s->table, kvh, k0 + c0) - vb;
    const char *kn = NULL, *vn = NULL;
    if (k0 + ATTN_TILE_K < kend) {
        kn = kv_row(&p->kv, p->kv.k, s->table, kvh, k0 + ATTN_TILE_K);
        vn = kv_row(&p->kv, p->kv.v, s->table, kvh, k0 + ATTN_TILE_K);
    }
    if (kqk)
        kqk(sc->qq, rows, (const uint8_t *)kt, c0, nc, hd, sc->s, ATTN_TILE_K,
            (const uint8_t *)kn);
    else if (ktile)
        decode_scores_quant(p, sc, ktile, (const uint8_t *)kt, rows, c0, nc,
                            (const uint8_t *)kn);
    else
        attn_decode_scores_f16(sc->q, rows, (const ig_f16 *)(const void *)kt, c0, nc, hd, sc->s,
                               ATTN_TILE_K, (const ig_f16 *)(const void *)kn);
    if (p->softcap > 0)
        softcap_scores(sc, rows, c0, nc, p->softcap);
    /* The token at pos0 + t0 (kend - 1) sees keys up to itself, and with a
     * window from kend - window on. */
    int64_t hi = kend - k0 < nc ? kend - k0 : nc;
    int64_t lo = p->window > 0 ? kend - p->window - k0 : 0;
    lo = lo > 0 ? lo : 0;
    if (hi <= lo)
        return;
    float sum[ATTN_TILE_Q];
    for (int64_t r = 0; r < rows; r++)
        softmax_max(sc, r, lo, hi);
    softmax_probs(sc, 0, rows, 1, lo, hi);
    correct_rows(sc, rows);
    if (p->kv.dtype_v == KV_F16)
        attn_decode_accumulate_f16(sc->s, ATTN_TILE_K, sc->corr, rows,
                                   (const ig_f16 *)(const void *)vt, lo, hi, hd, sc->o, sum,
                                   (const ig_f16 *)(const void *)vn);
    else
        attn_decode_accumulate_quant(p->kv.dtype_v, sc->s, ATTN_TILE_K, sc->corr, rows,
                                     (const uint8_t *)vt, lo, hi, hd, sc->o, sum,
                                     (const uint8_t *)vn);
    for (int64_t r = 0; r < rows; r++)
        sc->l[r] = row_sum_update(sc->l[r], sc->corr[r], sum[r]);
}

/* Whether the decode items of this call go through run_decode: K f16, or
 * quantized where the int8 path scores it in its blocks (`ktile`; the exact
 * path scores the dequantized values in f32, in run_item); V f16, q8_0 or
 * q4_0; on a CPU that converts in registers, and groups of two or more
 * query heads (one head's lone row has too few rows per K/V element to
 * gain), at most ATTN_TILE_Q (decode_tile's sums). */
static bool decode_walk_ok(const struct attn_params *p, qmm_tile_fn ktile)
{
    int64_t group = p->n_head / p->n_head_kv;
    bool k_ok = p->kv.dtype == KV_F16 || (kv_dtype_quantized(p->kv.dtype) && ktile);
    bool v_ok = p->kv.dtype_v == KV_F16 || kv_dtype_quantized(p->kv.dtype_v);
    return k_ok && v_ok && group >= 2 && group <= ATTN_TILE_Q && attn_decode_f16_fast();
}

/* Row r's softmax denominator at the end: its sum l of e^(s - m), plus
 * e^(sink - m) where query head h has a sink (gpt-oss: the sink takes its
 * share of the probability and gives no value). */
static float row_denominator(const struct attn_params *p, int64_t h,
                             const struct attn_scratch *sc, int64_t r)
{
    return p->sinks ? sc->l[r] + expf(p->sinks[h] - sc->m[r]) : sc->l[r];
}

/* Query heads h0 .. h1 - 1 of sequence s's one token (a decode token)
 * walked together, block by block: a block's K (and V) rows of
 * consecutive KV heads are contiguous in the pool, so one walk streams them
 * in order where separate items jumped a block's length for every head's 64
 * rows, a pattern the hardware prefetchers barely follow. The range may
 * start or end inside a KV head's group (a token split between threads):
 * each KV head it touches is read once for its rows there. Row r is query
 * head h0 + r (at most max_rows in the scratch); each row sees exactly
 * run_item's operations (a quantized K: the query quantized as run_item
 * quantizes it), so no split or grouping changes a bit. */
static void run_decode(const struct attn_params *p, const struct attn_seq *s, int64_t h0,
                       int64_t h1, qmm_tile_fn ktile, attn_qk_fn kqk, struct attn_scratch *sc)
{
    int64_t hd = p->head_dim, group = p->n_head / p->n_head_kv;
    int64_t rows = h1 - h0;
    int64_t kvh0 = h0 / group, kvh1 = (h1 - 1) / group + 1;
    const float *q = s->q + h0 * hd;
    scale_row(sc->q, q, p->scale, rows * hd);
    if (ktile)
        for (int64_t r = 0; r < rows; r++)
            ops_qmm_quantize(sc->q + r * hd, hd, sc->qq + r * (hd / QMM_QK));
    memset(sc->o, 0, (size_t)(rows * hd) * sizeof *sc->o);
    for (int64_t r = 0; r < rows; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    int64_t kend = s->pos0 + 1;
    int64_t kbegin = p->window > 0 ? s->pos0 - p->window + 1 : 0;
    kbegin = kbegin > 0 ? kbegin : 0;
    for (int64_t k0 = kbegin / ATTN_TILE_K * ATTN_TILE_K; k0 < kend; k0 += ATTN_TILE_K) {
        int64_t nc = kend - k0 < ATTN_TILE_K ? kend - k0 : ATTN_TILE_K;
        int64_t c0 = kbegin > k0 ? kbegin - k0 : 0;
        for (int64_t kvh = kvh0; kvh < kvh1; kvh++) {
            int64_t a = kvh * group > h0 ? kvh * group : h0;
            int64_t b = (kvh + 1) * group < h1 ? (kvh + 1) * group : h1;
            int64_t r0 = a - h0;
            struct attn_scratch hs = *sc;
            hs.q += r0 * hd, hs.o += r0 * hd, hs.s += r0 * ATTN_TILE_K;
            hs.m += r0, hs.l += r0, hs.corr += r0, hs.qq += r0 * (hd / QMM_QK);
            decode_tile(p, s, kvh, k0, c0, nc, kend, b - a, ktile, kqk, &hs);
        }
    }
    float *out = s->out + h0 * hd;
    for (int64_t r = 0; r < rows; r++)
        scale_row(out + r * hd, sc->o + r * hd, 1.0f / row_denominator(p, h0 + r, sc, r), hd);
}

/* The columns [lo, hi) of the tile at k0 (nc columns) that the query token
 * t of sequence s sees: up to its position pos0 + t, and with a window from
 * pos0 + t - window + 1 on. False when it sees none (the tile is in its
 * future or behind its window). */
static bool token_cols(const struct attn_params *p, const struct attn_seq *s, int64_t t,
                       int64_t k0, int64_t nc, int64_t *lo, int64_t *hi)
{
    int64_t h = s->pos0 + t + 1 - k0;
    int64_t l = p->window > 0 ? s->pos0 + t - p->window + 1 - k0 : 0;
    *lo = l > 0 ? l : 0;
    *hi = h > nc ? nc : h;
    return *hi > *lo;
}

/* Rows of an item: r = g * nq + i is query head kvh * group + g, token t0 + i
 * of sequence s (nq <= ATTN_TILE_Q). zmm: attn_zmm()'s answer. ktile: the
 * int8 tile kernel that scores a quantized K (NULL: f32 scores); kqk, where
 * there is one, the same scores in registers (attn_decode_qk.c, the tile's
 * bits), which a prompt's items take too: through the tile kernel's call
 * per 4 keys x 3 rows a q8_0/q4_0 cache's prefill attention cost 1.14-1.18x
 * an f16 one's, with it about the same (docs/benchmarks.md, issue 51). */
static void run_item(const struct attn_params *p, const struct attn_seq *s, int64_t kvh,
                     int64_t t0, int64_t nq, bool zmm, qmm_tile_fn ktile, attn_qk_fn kqk,
                     struct attn_scratch *sc)
{
    IG_ASSERT(nq <= ATTN_TILE_Q);
    int64_t hd = p->head_dim, group = p->n_head / p->n_head_kv;
    int64_t rows = group * nq;
    acc_rows_fn acc = hd % 32 == 0 && zmm ? accumulate_rows16 : accumulate_rows;

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            scale_row(sc->q + r * hd, s->q + (t0 + i) * p->q_tok_stride + h * hd, p->scale, hd);
            sc->m[r] = -INFINITY;
            sc->l[r] = 0.0f;
        }
    }
    memset(sc->o, 0, (size_t)(rows * hd) * sizeof *sc->o);
    if (ktile) /* each row's scaled query, quantized once for every tile */
        for (int64_t r = 0; r < rows; r++)
            ops_qmm_quantize(sc->q + r * hd, hd, sc->qq + r * (hd / QMM_QK));
    else if (zmm && hd % 8 == 0) /* or paired once for every tile */
        pair_queries(sc, rows, hd);

    /* Keys kbegin .. kend - 1 are visible to at least one query of the
     * tile: the last query sees up to kend - 1, the first from kbegin on. */
    int64_t kend = s->pos0 + t0 + nq;
    int64_t kbegin = p->window > 0 ? s->pos0 + t0 - p->window + 1 : 0;
    kbegin = kbegin > 0 ? kbegin : 0;
    for (int64_t k0 = kbegin / ATTN_TILE_K * ATTN_TILE_K; k0 < kend; k0 += ATTN_TILE_K) {
        int64_t nc = kend - k0 < ATTN_TILE_K ? kend - k0 : ATTN_TILE_K;
        int64_t c0 = kbegin > k0 ? kbegin - k0 : 0;
        const float *kt, *vt;
        const uint8_t *kq = NULL;
        load_kv_tile(p, s->table, kvh, k0, c0, nc, sc, &kt, &vt, ktile ? &kq : NULL);
        if (k0 + ATTN_TILE_K < kend)
            prefetch_kv_tile(p, s->table, kvh, k0 + ATTN_TILE_K, kend);
        if (kqk)
            kqk(sc->qq, rows, kq, c0, nc, hd, sc->s, ATTN_TILE_K, NULL);
        else if (ktile)
            scores_quant(p, sc, ktile, kq, rows, c0, nc);
        else
            scores(sc, kt, rows, c0, nc, hd, zmm);
        if (p->softcap > 0)
            softcap_scores(sc, rows, c0, nc, p->softcap);
        /* Each token's columns [lo, hi) of the tile (none where hi <= lo:
         * the tile is in its future or behind its window), asked once. The
         * maxima, then the probabilities: of all rows in one call where every
         * token sees the tile's columns [c0, nc), else a token's rows (its
         * query heads, nq rows apart) together. */
        int64_t lo[ATTN_TILE_Q], hi[ATTN_TILE_Q];
        bool whole = true;
        for (int64_t i = 0; i < nq; i++) {
            if (!token_cols(p, s, t0 + i, k0, nc, &lo[i], &hi[i])) {
                for (int64_t g = 0; g < group; g++)
                    sc->corr[g * nq + i] = 0.0f; /* not used: no tile columns */
                whole = false;
                continue;
            }
            whole = whole && lo[i] == c0 && hi[i] == nc;
            for (int64_t g = 0; g < group; g++)
                softmax_max(sc, g * nq + i, lo[i], hi[i]);
        }
        if (whole)
            softmax_probs(sc, 0, rows, 1, c0, nc);
        else
            for (int64_t i = 0; i < nq; i++)
                if (hi[i] > lo[i])
                    softmax_probs(sc, i, group, nq, lo[i], hi[i]);
        correct_rows(sc, rows);
        if (whole) {
            accumulate_whole(sc, vt, rows, c0, nc, hd, acc);
            continue;
        }
        /* Rows token by token (a token's query heads see the same columns),
         * accumulated up to four at a time while their columns agree. */
        int64_t batch[4], blo = 0, bhi = 0;
        int nb = 0;
        for (int64_t i = 0; i < nq; i++) {
            if (hi[i] <= lo[i])
                continue; /* no columns of this tile */
            for (int64_t g = 0; g < group; g++) {
                int64_t r = g * nq + i;
                if (nb == 4 || (nb > 0 && (lo[i] != blo || hi[i] != bhi))) {
                    acc(sc, vt, batch, nb, blo, bhi, hd, true);
                    nb = 0;
                }
                batch[nb++] = r, blo = lo[i], bhi = hi[i];
            }
        }
        if (nb > 0)
            acc(sc, vt, batch, nb, blo, bhi, hd, true);
    }

    for (int64_t g = 0; g < group; g++) {
        int64_t h = kvh * group + g;
        for (int64_t i = 0; i < nq; i++) {
            int64_t r = g * nq + i;
            scale_row(s->out + (t0 + i) * p->out_tok_stride + h * hd, sc->o + r * hd,
                      1.0f / row_denominator(p, h, sc, r), hd);
        }
    }
}

/* ---- the parallel driver ----------------------------------------------------- */

/* Work items are numbered sequence by sequence; first_item[i] is sequence
 * i's first, first_item[n_seqs] the total. A sequence's items are its
 * (KV head, query tile) pairs, or for a decode token on the decode walk
 * (decode_parts > 0) decode_parts ranges of its query heads, each walked
 * together by one thread. */
struct attn_job {
    const struct attn_params *p;
    float *scratch;
    int64_t scratch_stride;
    const int64_t *first_item;
    int64_t decode_parts;
    bool zmm; /* attn_zmm(), asked once per call rather than per item */
    qmm_tile_fn ktile; /* a quantized K's int8 scores (the int8 path), else NULL */
    attn_qk_fn kqk;    /* the same scores in registers (every item's), or NULL */
};

static int64_t n_qtiles(const struct attn_seq *s)
{
    return (s->n_tokens + ATTN_TILE_Q - 1) / ATTN_TILE_Q;
}

/* Parts a decode token's query heads are cut into: one walk of all of them
 * where the call has a token (or more) per thread to go round, else enough
 * parts that every thread has one (a single sequence on 2 threads: 9 heads
 * as 4 and 5). A part holds at most the scratch's rows. 0: no decode item
 * goes through run_decode. */
static int64_t decode_parts(const struct attn_params *p, int64_t threads, qmm_tile_fn ktile)
{
    if (!decode_walk_ok(p, ktile))
        return 0;
    int64_t tokens = 0;
    for (int64_t i = 0; i < p->n_seqs; i++)
        tokens += p->seqs[i].n_tokens == 1;
    int64_t parts = 1;
    if (threads > 1 && tokens > 0 && tokens < 2 * threads && tokens % threads != 0)
        parts = tokens < threads ? (threads + tokens - 1) / tokens : 2;
    int64_t fit = (p->n_head_kv + ATTN_TILE_Q - 1) / ATTN_TILE_Q;
    parts = parts > fit ? parts : fit;
    return parts < p->n_head ? parts : p->n_head;
}

static int64_t seq_items(const struct attn_seq *s, int64_t n_head_kv, int64_t decode_parts)
{
    return s->n_tokens == 1 && decode_parts > 0 ? decode_parts : n_qtiles(s) * n_head_kv;
}

static void attn_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    const struct attn_job *job = arg;
    const struct attn_params *p = job->p;
    struct attn_scratch sc = carve(job->scratch + thread * job->scratch_stride, p->n_head,
                                   p->n_head_kv, p->head_dim);
    int64_t si = 0;
    for (int64_t item = i0; item < i1; item++) {
        while (item >= job->first_item[si + 1])
            si++;
        const struct attn_seq *s = &p->seqs[si];
        int64_t local = item - job->first_item[si];
        if (s->n_tokens == 1 && job->decode_parts > 0) {
            int64_t n = job->decode_parts;
            run_decode(p, s, local * p->n_head / n, (local + 1) * p->n_head / n, job->ktile,
                       job->kqk, &sc);
            continue;
        }
        /* Latest query tiles (the most keys) first, so the tail balances. */
        int64_t kvh = local % p->n_head_kv;
        int64_t qt = n_qtiles(s) - 1 - local / p->n_head_kv;
        int64_t t0 = qt * ATTN_TILE_Q;
        int64_t nq = s->n_tokens - t0 < ATTN_TILE_Q ? s->n_tokens - t0 : ATTN_TILE_Q;
        run_item(p, s, kvh, t0, nq, job->zmm, job->ktile, job->kqk, &sc);
    }
}

/* The int8 scores' kernel for a quantized K: on the int8 path (this file's
 * fused build) the int8 matmul's tile for the block format on the CPU's
 * best set; the exact path (and f32 or f16 K) scores in f32, over the
 * dequantized values. */
static qmm_tile_fn key_tile(const struct attn_params *p)
{
#ifdef ATTN_FUSED
    if (p->kv.dtype == KV_Q8_0 || p->kv.dtype == KV_Q4_0)
        return ops_qmm_tile(p->kv.dtype == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0,
                            ops_qmm_best_isa());
#endif
    (void)p;
    return NULL;
}

void attn_tiled_run(const struct attn_params *p, struct ops_pool *pool, float *scratch,
                    int64_t scratch_stride)
{
#ifndef ATTN_FUSED
    if (p->fused) {
        attn_tiled_run_fused(p, pool, scratch, scratch_stride);
        return;
    }
#endif
    IG_ASSERT(p->n_head_kv > 0 && p->n_head % p->n_head_kv == 0);
    IG_ASSERT(scratch_stride >= attn_tiled_scratch_floats(p->n_head, p->n_head_kv, p->head_dim));
    IG_ASSERT(p->window >= 0);
    qmm_tile_fn ktile = key_tile(p);
    int64_t parts = decode_parts(p, ops_pool_threads(pool), ktile);
    int64_t *first = p->item_offsets;
    first[0] = 0;
    for (int64_t i = 0; i < p->n_seqs; i++) {
        IG_ASSERT(p->seqs[i].pos0 >= 0 && p->seqs[i].n_tokens >= 0);
        first[i + 1] = first[i] + seq_items(&p->seqs[i], p->n_head_kv, parts);
    }
    attn_qk_fn kqk =
        ktile ? attn_decode_qk(p->kv.dtype, ops_qmm_best_isa(), p->head_dim) : NULL;
    struct attn_job job = {p, scratch, scratch_stride, first, parts, attn_zmm(), ktile, kqk};
    ops_pool_run(pool, first[p->n_seqs], 1, attn_task, &job);
}
