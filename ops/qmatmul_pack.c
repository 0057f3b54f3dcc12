/* ops/qmatmul_pack.c: the decode layout of ops/qmatmul.h (8 rows
 * interleaved per block, scales first): its sizes and the repacking of a
 * stored Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K (as Q6_K), Q4_K,
 * Q5_K, Q6_K or IQ4_XS weight into it; and of an F32, F16 or BF16 weight into
 * the float layout (16 rows a column, QMM_FPR). Plain C, run once per weight
 * when a context is created (ops/ctx.c). The kernels that read the layout
 * are in ops/qmatmul_scalar.c and ops/qmatmul_x86.h.
 * Covered by tests/cpu/test_qmatmul.c (packed kernels against the stored
 * rows' reference) and every model test on the fast path. */
#include "ops/qmatmul.h"

#include "core/half.h"
#include "core/status.h"

#include <stdbool.h>
#include <string.h>

size_t ops_qmm_packed_block_bytes(enum quant_type type)
{
    switch (type) {
    case QUANT_IQ4_NL: /* Q4_0's layout, the nibbles indices */
    case QUANT_MXFP4:
    case QUANT_Q4_0: return QMM_PR * 2 + QMM_PR * QMM_QK / 2;
    case QUANT_Q4_1: return QMM_PR * 4 + QMM_PR * QMM_QK / 2;
    case QUANT_Q5_0: return QMM_PR * 2 + QMM_PR * QMM_QK / 2 + QMM_PR * 4;
    case QUANT_Q5_1: return QMM_PR * 4 + QMM_PR * QMM_QK / 2 + QMM_PR * 4;
    case QUANT_Q4_K: return QMM_K4_SUPER / 8; /* a block's share of its super-block */
    case QUANT_Q5_K: return QMM_K5_SUPER / 8;
    case QUANT_Q2_K: return QMM_K2_SUPER / 8;
    case QUANT_IQ4_XS: return QMM_XS_SUPER / 8;
    case QUANT_Q3_K: /* packed as Q6_K */
    case QUANT_Q6_K: return QMM_K6_SUPER / 8;
    case QUANT_Q8_0: return QMM_PR * 2 + QMM_PR * QMM_QK;
    default: return 0;
    }
}

static bool is_float(enum quant_type type)
{
    return type == QUANT_F32 || type == QUANT_F16 || type == QUANT_BF16;
}

size_t ops_qmm_packed_bytes(enum quant_type type, int64_t rows, int64_t cols)
{
    if (is_float(type))
        return (size_t)((rows + QMM_FPR - 1) / QMM_FPR * QMM_FPR * cols) *
               (type == QUANT_F32 ? 4 : 2);
    int64_t groups = (rows + QMM_PR - 1) / QMM_PR;
    return (size_t)(groups * (cols / QMM_QK)) * ops_qmm_packed_block_bytes(type);
}

/* Row j's block `blk` into packed block p (see ops/qmatmul.h for the
 * layout); qoff is where p's quants start. Written as plain byte moves the
 * compiler can vectorize: repacking a large model must take well under a
 * second. */
static void pack_row_block(enum quant_type type, const uint8_t *blk, int j, uint8_t *p,
                           int qoff)
{
    if (type == QUANT_MXFP4) { /* 2^(e - 128) as f16 (ops_qmm_packable: exact) */
        ig_f16 d = ig_f32_to_f16(quant_e8m0_half(blk[0]));
        memcpy(p + 2 * j, &d, 2);
    } else {
        memcpy(p + 2 * j, blk, 2); /* d */
    }
    uint8_t *q = p + qoff + 4 * j;
    if (type == QUANT_Q8_0) {
        for (int k = 0; k < QMM_QK / 4; k++)
            for (int i = 0; i < 4; i++)
                q[32 * k + i] = (uint8_t)(blk[2 + 4 * k + i] ^ 0x80); /* q + 128 */
        return;
    }
    bool has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1;
    if (has_m)
        memcpy(p + 2 * QMM_PR + 2 * j, blk + 2, 2); /* m */
    const uint8_t *qs = blk + (type == QUANT_Q4_0 || type == QUANT_IQ4_NL ? 2
                               : type == QUANT_MXFP4 ? 1
                               : type == QUANT_Q4_1 ? 4
                               : type == QUANT_Q5_0 ? 6 : 8);
    if (type == QUANT_Q5_0 || type == QUANT_Q5_1) {
        /* the fifth bits: bit e of qh is quant e's; bit k of byte 4j + i
         * of the block's bit plane is row j's quant 4k + i's */
        uint32_t qh;
        memcpy(&qh, blk + (type == QUANT_Q5_0 ? 2 : 4), 4);
        uint8_t *hb = p + qoff + QMM_PR * QMM_QK / 2 + 4 * j;
        for (int k = 0; k < QMM_QK / 4; k++)
            for (int i = 0; i < 4; i++)
                hb[i] |= (uint8_t)(((qh >> (4 * k + i)) & 1) << k);
    }
    /* quants 0..15 are the low nibbles of qs[0..15], 16..31 the high ones */
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 4; i++) {
            uint8_t a = qs[8 * v + i], b = qs[8 * v + 4 + i];
            q[32 * v + i] = (uint8_t)((a & 0x0f) | (b << 4));
            q[32 * (v + 2) + i] = (uint8_t)((a >> 4) | (b & 0xf0));
        }
}

/* The nibbles of 32 quants q[0..32) of row j into a packed block's quants
 * (the 4-bit layout of ops/qmatmul.h). */
static void put_nibbles(const uint8_t *q, int j, uint8_t *dst)
{
    for (int v = 0; v < 4; v++)
        for (int i = 0; i < 4; i++)
            dst[32 * v + 4 * j + i] = (uint8_t)(q[8 * v + i] | q[8 * v + 4 + i] << 4);
}

/* Row j's Q4_K super-block (qh NULL), or Q5_K's (d, dmin, scales and qs
 * as Q4_K's, qh its fifth bits: bit sb of qh[l] is element l of sub-block
 * sb's), into a packed one (out): d and dmin in the head, each sub-block's
 * 6-bit scale and min as bytes, its quants as nibbles, for Q5_K then its
 * plane of fifth bits (OR-ed into: the group starts zeroed). */
static void pack_row_k4(ig_f16 d, ig_f16 dmin, const uint8_t *scales, const uint8_t *qs,
                        const uint8_t *qh, int j, uint8_t *out)
{
    memcpy(out + 2 * j, &d, 2);
    memcpy(out + 2 * QMM_PR + 2 * j, &dmin, 2);
    for (int sb = 0; sb < 8; sb++) {
        uint8_t *o = out + QMM_K4_HEAD + sb * (qh ? QMM_K5_BLOCK : QMM_K4_BLOCK);
        int sc, mn;
        quant_k4_scale_min(scales, sb, &sc, &mn);
        o[j] = (uint8_t)sc;
        o[QMM_PR + j] = (uint8_t)mn;
        uint8_t q[QMM_QK];
        for (int l = 0; l < QMM_QK; l++) {
            uint8_t b = qs[32 * (sb / 2) + l];
            q[l] = sb % 2 ? b >> 4 : b & 0x0f;
        }
        put_nibbles(q, j, o + 2 * QMM_PR);
        if (qh) { /* bit k of byte 4 j + i: row j's quant 4 k + i (as Q5_0's) */
            uint8_t *plane = o + 2 * QMM_PR + QMM_PR * QMM_QK / 2 + 4 * j;
            for (int l = 0; l < QMM_QK; l++)
                plane[l % 4] |= (uint8_t)(((qh[l] >> sb) & 1) << (l / 4));
        }
    }
}

/* Row j's share of a packed Q6_K-layout block o: the scales sc0, sc1 of its
 * 16-element halves, its 6-bit quants u (0..63) as the 4-bit formats'
 * nibbles and a plane of top bits (ops/qmatmul.h; OR-ed into: the group
 * starts zeroed). */
static void put_k6_block(uint8_t *o, int j, int8_t sc0, int8_t sc1, const uint8_t u[QMM_QK])
{
    o[j] = (uint8_t)sc0;
    o[QMM_PR + j] = (uint8_t)sc1;
    uint8_t lo[QMM_QK];
    for (int e = 0; e < QMM_QK; e++) {
        lo[e] = u[e] & 0x0f;
        /* quant e is byte 4 j + e % 4 of unpacked vector e / 4 */
        uint8_t *plane = o + 2 * QMM_PR + QMM_PR * QMM_QK / 2 + 32 * (e / 16);
        plane[4 * j + e % 4] |= (uint8_t)((u[e] >> 4) << (2 * (e / 4 % 4)));
    }
    put_nibbles(lo, j, o + 2 * QMM_PR);
}

/* Row j's Q6_K super-block into a packed one (out): its d in the head, then
 * block by block its scales and quants. */
static void pack_row_q6_K(const struct block_q6_K *blk, int j, uint8_t *out)
{
    memcpy(out + 2 * j, &blk->d, 2);
    for (int sb = 0; sb < 8; sb++) {
        uint8_t u[QMM_QK];
        for (int e = 0; e < QMM_QK; e++) {
            int x = 32 * sb + e; /* element of the super-block, as ggml lays it out */
            int n = x / 128, k = (x % 128) / 32, l = x % 32;
            const uint8_t *ql = blk->ql + 64 * n, *qh = blk->qh + 32 * n;
            int lo = k % 2 ? ql[l + 32] : ql[l];
            u[e] = (uint8_t)((k < 2 ? lo & 0x0f : lo >> 4) | ((qh[l] >> (2 * k)) & 3) << 4);
        }
        put_k6_block(out + QMM_K6_HEAD + sb * QMM_K6_BLOCK, j, blk->scales[2 * sb],
                     blk->scales[2 * sb + 1], u);
    }
}

/* Row j's Q3_K super-block into a packed Q6_K one: w = d sc v with v in
 * -4..3 and sc in -32..31 is Q6_K's w = d sc (u - 32) with u = v + 32, so
 * Q3_K runs Q6_K's kernels (at Q6_K's 6.6 bits a weight in memory, about
 * twice the file's 3.4). */
static void pack_row_q3_K(const struct block_q3_K *blk, int j, uint8_t *out)
{
    memcpy(out + 2 * j, &blk->d, 2);
    for (int sb = 0; sb < 8; sb++) {
        uint8_t u[QMM_QK];
        for (int e = 0; e < QMM_QK; e++)
            u[e] = (uint8_t)(quant_k3_value(blk->qs, blk->hmask, 32 * sb + e) + 32);
        put_k6_block(out + QMM_K6_HEAD + sb * QMM_K6_BLOCK, j,
                     (int8_t)quant_k3_scale(blk->scales, 2 * sb),
                     (int8_t)quant_k3_scale(blk->scales, 2 * sb + 1), u);
    }
}

/* Row j's Q2_K super-block into a packed one (out): d and dmin in the
 * head, each block's halves' 4-bit scales and mins as bytes, its quants two
 * bits each (OR-ed into: the group starts zeroed). */
static void pack_row_q2_K(const struct block_q2_K *blk, int j, uint8_t *out)
{
    memcpy(out + 2 * j, &blk->d, 2);
    memcpy(out + 2 * QMM_PR + 2 * j, &blk->dmin, 2);
    for (int sb = 0; sb < 8; sb++) {
        uint8_t *o = out + QMM_K2_HEAD + sb * QMM_K2_BLOCK;
        for (int h = 0; h < 2; h++) {
            o[QMM_PR * h + j] = blk->scales[2 * sb + h] & 0x0f;
            o[QMM_PR * (2 + h) + j] = blk->scales[2 * sb + h] >> 4;
        }
        /* quant e is byte 4 j + e % 4 of unpacked vector k = e / 4: bits
         * 2 (k % 4) of byte 4 j + e % 4 of vector k / 4 */
        uint8_t *q = o + 4 * QMM_PR;
        for (int e = 0; e < QMM_QK; e++)
            q[32 * (e / 16) + 4 * j + e % 4] |=
                (uint8_t)(quant_k2_value(blk->qs, 32 * sb + e) << (2 * (e / 4 % 4)));
    }
}

/* Row j's IQ4_XS super-block (its bytes) into a packed one (out): d in the
 * head, each block's scale (less its bias) and its quants' nibbles. */
static void pack_row_iq4_xs(const uint8_t *blk, int j, uint8_t *out)
{
    memcpy(out + 2 * j, blk, 2);
    const uint8_t *qs = blk + offsetof(struct block_iq4_xs, qs);
    for (int sb = 0; sb < 8; sb++) {
        uint8_t *o = out + QMM_XS_HEAD + sb * QMM_XS_BLOCK;
        o[j] = (uint8_t)(int8_t)quant_iq4_xs_scale(blk, sb);
        uint8_t q[QMM_QK];
        for (int e = 0; e < QMM_QK; e++)
            q[e] = (uint8_t)(qs[16 * sb + e % 16] >> (4 * (e / 16)) & 0x0f);
        put_nibbles(q, j, o + QMM_PR);
    }
}

bool ops_qmm_packable(const struct model_weight *w)
{
    if (w->type != QUANT_MXFP4)
        return true;
    int64_t n_blk = w->cols / QK_MXFP4;
    for (int64_t r = 0; r < w->rows; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            uint8_t e = row[(size_t)b * sizeof(struct block_mxfp4)];
            if (e < QMM_MXFP4_E_MIN || e > QMM_MXFP4_E_MAX)
                return false;
        }
    }
    return true;
}

/* The float layout (QMM_FPR in ops/qmatmul.h): 8-row group g's rows into
 * half g % 2 of its 16-row group, value by value in the stored type (a
 * copy: no rounding). The last group's missing rows are zeros; where it is
 * the first half, the second half is all padding and zeroed here. A
 * 16-row group is written column by column from its 8 rows' streams. */
#define REPACK_FLOAT(T)                                                                      \
    for (int64_t g = g0; g < g1; g++) {                                                      \
        T *p = (T *)(void *)dst + (g / 2) * QMM_FPR * cols + (g % 2) * 8;                    \
        int64_t rows = w->rows - g * QMM_PR < QMM_PR ? w->rows - g * QMM_PR : QMM_PR;        \
        bool pad_half = g % 2 == 0 && (g + 1) * QMM_PR >= w->rows;                           \
        const T *r[QMM_PR];                                                                  \
        for (int64_t j = 0; j < QMM_PR; j++)                                                 \
            r[j] = (const T *)(const void *)((const uint8_t *)w->data +                      \
                                             (size_t)(g * QMM_PR + (j < rows ? j : 0)) *     \
                                                 w->row_bytes);                              \
        for (int64_t c = 0; c < cols; c++) {                                                 \
            T *o = p + c * QMM_FPR;                                                          \
            for (int64_t j = 0; j < QMM_PR; j++)                                             \
                o[j] = j < rows ? r[j][c] : 0;                                               \
            if (pad_half)                                                                    \
                for (int64_t j = QMM_PR; j < QMM_FPR; j++)                                   \
                    o[j] = 0;                                                                \
        }                                                                                    \
    }

static void repack_float(const struct model_weight *w, int64_t g0, int64_t g1, uint8_t *dst)
{
    const int64_t cols = w->cols;
    if (w->type == QUANT_F32) {
        REPACK_FLOAT(uint32_t)
    } else {
        REPACK_FLOAT(uint16_t)
    }
}
#undef REPACK_FLOAT

void ops_qmm_repack(const struct model_weight *w, int64_t g0, int64_t g1, uint8_t *dst)
{
    if (is_float(w->type)) {
        repack_float(w, g0, g1, dst);
        return;
    }
    if (w->type == QUANT_Q2_K || w->type == QUANT_Q3_K || w->type == QUANT_Q4_K ||
        w->type == QUANT_Q5_K || w->type == QUANT_Q6_K || w->type == QUANT_IQ4_XS) {
        size_t pb = ops_qmm_packed_block_bytes(w->type);
        IG_ASSERT(w->cols % QK_K == 0);
        int64_t n_blk = w->cols / QMM_QK;
        for (int64_t g = g0; g < g1; g++) {
            uint8_t *p = dst + (size_t)(g * n_blk) * pb;
            int64_t rows = w->rows - g * QMM_PR < QMM_PR ? w->rows - g * QMM_PR : QMM_PR;
            if (rows < QMM_PR || w->type != QUANT_Q4_K) /* (planes are OR-ed into) */
                memset(p, 0, (size_t)n_blk * pb);
            for (int j = 0; j < rows; j++) {
                const uint8_t *row = (const uint8_t *)w->data + (size_t)(g * QMM_PR + j) * w->row_bytes;
                for (int64_t sb = 0; sb < n_blk / 8; sb++) {
                    uint8_t *out = p + (size_t)(8 * sb) * pb;
                    if (w->type == QUANT_Q4_K) {
                        const struct block_q4_K *b = (const struct block_q4_K *)(const void *)row + sb;
                        pack_row_k4(b->d, b->dmin, b->scales, b->qs, NULL, j, out);
                    } else if (w->type == QUANT_Q5_K) {
                        const struct block_q5_K *b = (const struct block_q5_K *)(const void *)row + sb;
                        pack_row_k4(b->d, b->dmin, b->scales, b->qs, b->qh, j, out);
                    } else if (w->type == QUANT_Q2_K) {
                        pack_row_q2_K((const struct block_q2_K *)(const void *)row + sb, j, out);
                    } else if (w->type == QUANT_Q3_K) {
                        pack_row_q3_K((const struct block_q3_K *)(const void *)row + sb, j, out);
                    } else if (w->type == QUANT_IQ4_XS) {
                        pack_row_iq4_xs(row + (size_t)sb * sizeof(struct block_iq4_xs), j, out);
                    } else {
                        pack_row_q6_K((const struct block_q6_K *)(const void *)row + sb, j, out);
                    }
                }
            }
        }
        return;
    }
    size_t pb = ops_qmm_packed_block_bytes(w->type);
    size_t bb = w->type == QUANT_Q4_0 ? sizeof(struct block_q4_0)
              : w->type == QUANT_Q4_1 ? sizeof(struct block_q4_1)
              : w->type == QUANT_Q5_0 ? sizeof(struct block_q5_0)
              : w->type == QUANT_Q5_1 ? sizeof(struct block_q5_1)
              : w->type == QUANT_IQ4_NL ? sizeof(struct block_iq4_nl)
              : w->type == QUANT_MXFP4 ? sizeof(struct block_mxfp4)
                                      : sizeof(struct block_q8_0);
    IG_ASSERT(pb != 0 && w->cols % QMM_QK == 0);
    int64_t n_blk = w->cols / QMM_QK;
    int qoff = (w->type == QUANT_Q4_1 || w->type == QUANT_Q5_1 ? 4 : 2) * QMM_PR;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *p = dst + (size_t)(g * n_blk) * pb;
        int64_t rows = w->rows - g * QMM_PR < QMM_PR ? w->rows - g * QMM_PR : QMM_PR;
        /* padding rows: zero scales and quants, zero outputs; the fifth-bit
         * words are OR-ed row by row, so they start at zero too */
        if (rows < QMM_PR || w->type == QUANT_Q5_0 || w->type == QUANT_Q5_1)
            memset(p, 0, (size_t)n_blk * pb);
        for (int j = 0; j < rows; j++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(g * QMM_PR + j) * w->row_bytes;
            for (int64_t b = 0; b < n_blk; b++)
                pack_row_block(w->type, row + (size_t)b * bb, j, p + (size_t)b * pb, qoff);
        }
    }
}
