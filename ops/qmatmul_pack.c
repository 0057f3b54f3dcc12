/* ops/qmatmul_pack.c: the decode layout of ops/qmatmul.h (8 rows
 * interleaved per block, scales first): its sizes and the repacking of a
 * stored Q4_0, Q4_1 or Q8_0 weight into it. Plain C, run once per weight
 * when a context is created (ops/ctx.c). The kernels that read the layout
 * are in ops/qmatmul_scalar.c and ops/qmatmul_x86.h.
 * Covered by tests/cpu/test_qmatmul.c (packed kernels against the stored
 * rows' reference) and every model test on the fast path. */
#include "ops/qmatmul.h"

#include "core/status.h"

#include <string.h>

size_t ops_qmm_packed_block_bytes(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return QMM_PR * 2 + QMM_PR * QMM_QK / 2;
    case QUANT_Q4_1: return QMM_PR * 4 + QMM_PR * QMM_QK / 2;
    case QUANT_Q8_0: return QMM_PR * 2 + QMM_PR * QMM_QK;
    default: return 0;
    }
}

size_t ops_qmm_packed_bytes(enum quant_type type, int64_t rows, int64_t cols)
{
    int64_t groups = (rows + QMM_PR - 1) / QMM_PR;
    return (size_t)(groups * (cols / QMM_QK)) * ops_qmm_packed_block_bytes(type);
}

/* Row `blk`'s quants as unsigned values u[0..31] (w = d u + m) and its raw
 * f16 d and m (m only for Q4_1). */
static void unpack_block(enum quant_type type, const uint8_t *blk, uint8_t u[QMM_QK],
                         uint16_t *d, uint16_t *m)
{
    const uint8_t *qs;
    memcpy(d, blk, sizeof *d);
    *m = 0;
    if (type == QUANT_Q8_0) {
        for (int i = 0; i < QMM_QK; i++)
            u[i] = (uint8_t)(blk[2 + i] ^ 0x80); /* q + 128 */
        return;
    }
    if (type == QUANT_Q4_1) {
        memcpy(m, blk + 2, sizeof *m);
        qs = blk + 4;
    } else {
        qs = blk + 2;
    }
    for (int i = 0; i < QMM_QK / 2; i++) {
        u[i] = qs[i] & 0x0f;
        u[i + QMM_QK / 2] = qs[i] >> 4;
    }
}

void ops_qmm_repack(const struct model_weight *w, int64_t g0, int64_t g1, uint8_t *dst)
{
    size_t pb = ops_qmm_packed_block_bytes(w->type);
    size_t bb = w->type == QUANT_Q4_0 ? sizeof(struct block_q4_0)
              : w->type == QUANT_Q4_1 ? sizeof(struct block_q4_1)
                                      : sizeof(struct block_q8_0);
    IG_ASSERT(pb != 0 && w->cols % QMM_QK == 0);
    int64_t n_blk = w->cols / QMM_QK;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < n_blk; b++) {
            uint8_t *p = dst + (size_t)(g * n_blk + b) * pb;
            uint8_t u[QMM_PR][QMM_QK];
            uint16_t d[QMM_PR], m[QMM_PR];
            for (int j = 0; j < QMM_PR; j++) {
                int64_t r = g * QMM_PR + j;
                if (r < w->rows) {
                    unpack_block(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes +
                                              (size_t)b * bb, u[j], &d[j], &m[j]);
                } else { /* padding rows: zero scales, so zero outputs */
                    memset(u[j], 0, sizeof u[j]);
                    d[j] = m[j] = 0;
                }
            }
            memcpy(p, d, sizeof d);
            p += sizeof d;
            if (w->type == QUANT_Q4_1) {
                memcpy(p, m, sizeof m);
                p += sizeof m;
            }
            if (w->type == QUANT_Q8_0) {
                for (int k = 0; k < QMM_QK / 4; k++)
                    for (int j = 0; j < QMM_PR; j++)
                        for (int i = 0; i < 4; i++)
                            p[32 * k + 4 * j + i] = u[j][4 * k + i];
            } else {
                for (int v = 0; v < QMM_QK / 8; v++)
                    for (int j = 0; j < QMM_PR; j++)
                        for (int i = 0; i < 4; i++)
                            p[32 * v + 4 * j + i] =
                                (uint8_t)(u[j][8 * v + i] | u[j][8 * v + 4 + i] << 4);
            }
        }
}
