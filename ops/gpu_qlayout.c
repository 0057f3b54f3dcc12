/* ops/gpu_qlayout.c: the device layout of quantized weights (ops/gpu_qmm.h)
 * and its host twins: bytes and planes, the repack from the file's blocks
 * and back, and the chooser that picks a product's path by row count.
 *
 * Planes per block (q quants | h high bits | s scales), against the file:
 *   Q4_0  16 | -  | 2 (d)                 = 18, the file's 18
 *   Q4_1  16 | -  | 4 (d, m)              = 20
 *   Q5_0  16 | 4  | 2 (d)                 = 22
 *   Q5_1  16 | 4  | 4 (d, m)              = 24
 *   Q8_0  32 | -  | 2 (d)                 = 34
 *   Q4_K  128| -  | 16 (d, dmin, 12 scale bytes)      = 144
 *   Q5_K  128| 32 | 16                                = 176
 *   Q6_K  128| 64 | 20 (d, 2 zero bytes, 16 scales)   = 212, the file's 210
 *   MXFP4 16 | -  | 1 (e, the E8M0 scale)             = 17, the file's 17
 *         (the expert products' alone, ops/gpu_moe.cu: gk_qmm_native_experts)
 * Quants keep the file's byte order, except that a K type's super-block
 * holds the first 16 bytes of its four 32-byte chunks, then the second 16
 * (GK_KQ_OFF, ops/gpu_qmm.h). High bits are reordered so that for
 * the 32 elements of an activation block, one u32 and a shift give 4
 * elements' bits in the 4 bytes: bit 8b + k (1 bit per element: Q5_0,
 * Q5_1, Q5_K) belongs to element 4k + b; for Q6_K's 2 bits, bits 2m, 2m+1
 * of byte b of word p belong to element 4(4p + m) + b. Q5_K stores per
 * 64-element chunk j the word of sub-block 2j then of 2j + 1; Q6_K per
 * chunk c (elements A = 128 (c / 2) + 32 (c % 2) + l and B = A + 64) the
 * two words of A, then of B.
 * Covered by tests/emu/test_qmm_emu.c (repack round trips, the device
 * repack byte for byte, the chooser). */
#include "ops/gpu_qmm.h"

#include "core/status.h"
#include "models/quant.h"

#include <stdlib.h>
#include <string.h>

/* ---- layouts -------------------------------------------------------------- */

bool gk_qlayout_of(int type, struct gk_qlayout *out)
{
    struct gk_qlayout l;
    switch (type) {
    case QUANT_Q4_0: l = (struct gk_qlayout){32, 32, 16, 0, 2}; break;
    case QUANT_Q4_1: l = (struct gk_qlayout){32, 32, 16, 0, 4}; break;
    case QUANT_Q5_0: l = (struct gk_qlayout){32, 32, 16, 4, 2}; break;
    case QUANT_Q5_1: l = (struct gk_qlayout){32, 32, 16, 4, 4}; break;
    case QUANT_Q8_0: l = (struct gk_qlayout){32, 32, 32, 0, 2}; break;
    case QUANT_Q4_K: l = (struct gk_qlayout){256, 64, 128, 0, 16}; break;
    case QUANT_Q5_K: l = (struct gk_qlayout){256, 64, 128, 32, 16}; break;
    case QUANT_Q6_K: l = (struct gk_qlayout){256, 64, 128, 64, 20}; break;
    case QUANT_MXFP4: l = (struct gk_qlayout){32, 32, 16, 0, 1}; break;
    default: return false;
    }
    if (out)
        *out = l;
    return true;
}

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

size_t gk_qmat_bytes(int type, int64_t rows, int64_t cols)
{
    if (rows < 0 || cols < 0)
        return 0;
    if (type == QUANT_F16)
        return align256((size_t)(rows * cols) * 2);
    struct gk_qlayout l;
    if (!gk_qlayout_of(type, &l) || cols % l.block)
        return 0;
    size_t blocks = (size_t)(rows * (cols / l.block));
    return align256(blocks * l.q) + align256(blocks * l.h) + align256(blocks * l.s);
}

void gk_qmat_carve(struct gk_qmat *w, int type, int64_t rows, int64_t cols, void *base)
{
    *w = (struct gk_qmat){.type = type, .rows = rows, .cols = cols, .q = base};
    struct gk_qlayout l;
    if (type == QUANT_F16 || !gk_qlayout_of(type, &l))
        return;
    size_t blocks = (size_t)(rows * (cols / l.block));
    uint8_t *p = (uint8_t *)base + align256(blocks * l.q);
    w->h = l.h ? p : NULL;
    w->s = p + align256(blocks * l.h);
}

struct gk_qmat gk_qmat_rows(const struct gk_qmat *w, int64_t r0, int64_t nr)
{
    IG_ASSERT(r0 >= 0 && nr >= 0 && r0 + nr <= w->rows);
    struct gk_qmat v = *w;
    v.rows = nr;
    if (w->type == QUANT_F16) {
        v.q = w->q + (size_t)(r0 * w->cols) * 2;
        return v;
    }
    struct gk_qlayout l;
    IG_ASSERT(gk_qlayout_of(w->type, &l));
    size_t blocks = (size_t)(r0 * (w->cols / l.block));
    v.q = w->q + blocks * l.q;
    v.h = w->h ? w->h + blocks * l.h : NULL;
    v.s = w->s + blocks * l.s;
    return v;
}

/* ---- the high bits ------------------------------------------------------------ */

/* One bit per element, 32 elements: bit e of `bits` to bit 8 (e % 4) + e / 4. */
static uint32_t spread1(uint32_t bits)
{
    uint32_t out = 0;
    for (int e = 0; e < 32; e++)
        out |= ((bits >> e) & 1u) << (8 * (e % 4) + e / 4);
    return out;
}

static uint32_t gather1(uint32_t word)
{
    uint32_t bits = 0;
    for (int e = 0; e < 32; e++)
        bits |= ((word >> (8 * (e % 4) + e / 4)) & 1u) << e;
    return bits;
}

/* Two bits per element, 32 elements (hi2[e] in 0..3) into words w[0..1]:
 * element e = 4 (4p + m) + b goes to bits 2m, 2m + 1 of byte b of w[p]. */
static void spread2(const uint8_t hi2[32], uint32_t w[2])
{
    w[0] = w[1] = 0;
    for (int e = 0; e < 32; e++) {
        int k = e / 4, b = e % 4, p = k / 4, m = k % 4;
        w[p] |= (uint32_t)(hi2[e] & 3u) << (8 * b + 2 * m);
    }
}

static void gather2(const uint32_t w[2], uint8_t hi2[32])
{
    for (int e = 0; e < 32; e++) {
        int k = e / 4, b = e % 4, p = k / 4, m = k % 4;
        hi2[e] = (uint8_t)((w[p] >> (8 * b + 2 * m)) & 3u);
    }
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* A K type's 128 quant bytes, the file's order <-> the device's (GK_KQ_OFF). */
static void kq_to_planes(const uint8_t *file, uint8_t *q)
{
    for (int k = 0; k < 4; k++)
        for (int h = 0; h < 2; h++)
            memcpy(q + GK_KQ_OFF(k, h), file + 32 * k + 16 * h, 16);
}

static void kq_from_planes(const uint8_t *q, uint8_t *file)
{
    for (int k = 0; k < 4; k++)
        for (int h = 0; h < 2; h++)
            memcpy(file + 32 * k + 16 * h, q + GK_KQ_OFF(k, h), 16);
}

/* ---- one block: file <-> planes ------------------------------------------------- */

/* Block `blk` (the file's bytes at b) into the planes at q, h, s. */
static void block_to_planes(int type, const uint8_t *b, uint8_t *q, uint8_t *h, uint8_t *s)
{
    switch (type) {
    case QUANT_Q4_0:
        memcpy(s, b, 2);
        memcpy(q, b + 2, 16);
        return;
    case QUANT_Q4_1:
        memcpy(s, b, 4);
        memcpy(q, b + 4, 16);
        return;
    case QUANT_Q5_0:
        memcpy(s, b, 2);
        put_u32(h, spread1(get_u32(b + 2)));
        memcpy(q, b + 6, 16);
        return;
    case QUANT_Q5_1:
        memcpy(s, b, 4);
        put_u32(h, spread1(get_u32(b + 4)));
        memcpy(q, b + 8, 16);
        return;
    case QUANT_Q8_0:
        memcpy(s, b, 2);
        memcpy(q, b + 2, 32);
        return;
    case QUANT_MXFP4:
        s[0] = b[0];
        memcpy(q, b + 1, 16);
        return;
    case QUANT_Q4_K:
        memcpy(s, b, 16);
        kq_to_planes(b + 16, q);
        return;
    case QUANT_Q5_K: {
        memcpy(s, b, 16);
        const uint8_t *qh = b + offsetof(struct block_q5_K, qh);
        for (int j = 0; j < 8; j++) { /* sub-block j: element l's bit is bit j of qh[l] */
            uint32_t bits = 0;
            for (int l = 0; l < 32; l++)
                bits |= (uint32_t)((qh[l] >> j) & 1u) << l;
            put_u32(h + 4 * j, spread1(bits));
        }
        kq_to_planes(b + offsetof(struct block_q5_K, qs), q);
        return;
    }
    case QUANT_Q6_K: {
        const uint8_t *qh = b + offsetof(struct block_q6_K, qh);
        kq_to_planes(b + offsetof(struct block_q6_K, ql), q);
        for (int c = 0; c < 4; c++) {
            int half = c / 2, sub = c % 2;
            for (int piece = 0; piece < 2; piece++) { /* A, then B = A + 64 */
                uint8_t hi2[32];
                for (int l = 0; l < 32; l++)
                    hi2[l] = (uint8_t)((qh[32 * half + l] >> (4 * piece + 2 * sub)) & 3u);
                uint32_t w[2];
                spread2(hi2, w);
                put_u32(h + 16 * c + 8 * piece, w[0]);
                put_u32(h + 16 * c + 8 * piece + 4, w[1]);
            }
        }
        memcpy(s, b + offsetof(struct block_q6_K, d), 2);
        s[2] = s[3] = 0;
        memcpy(s + 4, b + offsetof(struct block_q6_K, scales), 16);
        return;
    }
    default:
        IG_ASSERT(!"block_to_planes: no device layout");
    }
}

static void planes_to_block(int type, const uint8_t *q, const uint8_t *h, const uint8_t *s,
                            uint8_t *b)
{
    switch (type) {
    case QUANT_Q4_0:
        memcpy(b, s, 2);
        memcpy(b + 2, q, 16);
        return;
    case QUANT_Q4_1:
        memcpy(b, s, 4);
        memcpy(b + 4, q, 16);
        return;
    case QUANT_Q5_0:
        memcpy(b, s, 2);
        put_u32(b + 2, gather1(get_u32(h)));
        memcpy(b + 6, q, 16);
        return;
    case QUANT_Q5_1:
        memcpy(b, s, 4);
        put_u32(b + 4, gather1(get_u32(h)));
        memcpy(b + 8, q, 16);
        return;
    case QUANT_Q8_0:
        memcpy(b, s, 2);
        memcpy(b + 2, q, 32);
        return;
    case QUANT_MXFP4:
        b[0] = s[0];
        memcpy(b + 1, q, 16);
        return;
    case QUANT_Q4_K:
        memcpy(b, s, 16);
        kq_from_planes(q, b + 16);
        return;
    case QUANT_Q5_K: {
        memcpy(b, s, 16);
        uint8_t *qh = b + offsetof(struct block_q5_K, qh);
        memset(qh, 0, 32);
        for (int j = 0; j < 8; j++) {
            uint32_t bits = gather1(get_u32(h + 4 * j));
            for (int l = 0; l < 32; l++)
                qh[l] |= (uint8_t)(((bits >> l) & 1u) << j);
        }
        kq_from_planes(q, b + offsetof(struct block_q5_K, qs));
        return;
    }
    case QUANT_Q6_K: {
        uint8_t *qh = b + offsetof(struct block_q6_K, qh);
        memset(qh, 0, 64);
        kq_from_planes(q, b + offsetof(struct block_q6_K, ql));
        for (int c = 0; c < 4; c++) {
            int half = c / 2, sub = c % 2;
            for (int piece = 0; piece < 2; piece++) {
                uint32_t w[2] = {get_u32(h + 16 * c + 8 * piece),
                                 get_u32(h + 16 * c + 8 * piece + 4)};
                uint8_t hi2[32];
                gather2(w, hi2);
                for (int l = 0; l < 32; l++)
                    qh[32 * half + l] |= (uint8_t)(hi2[l] << (4 * piece + 2 * sub));
            }
        }
        memcpy(b + offsetof(struct block_q6_K, d), s, 2);
        memcpy(b + offsetof(struct block_q6_K, scales), s + 4, 16);
        return;
    }
    default:
        IG_ASSERT(!"planes_to_block: no device layout");
    }
}

void gk_qrepack_ref(const struct gk_qmat *w, const void *src, size_t row_bytes)
{
    struct gk_qlayout l;
    IG_ASSERT(gk_qlayout_of(w->type, &l));
    const struct quant_traits *t = quant_traits_of((uint32_t)w->type);
    int64_t nb = w->cols / l.block;
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t k = 0; k < nb; k++) {
            size_t i = (size_t)(r * nb + k);
            block_to_planes(w->type, (const uint8_t *)src + (size_t)r * row_bytes + k * t->block_bytes,
                            w->q + i * l.q, l.h ? w->h + i * l.h : NULL, w->s + i * l.s);
        }
}

void gk_qunpack_row_ref(const struct gk_qmat *w, int64_t row, void *dst)
{
    struct gk_qlayout l;
    IG_ASSERT(gk_qlayout_of(w->type, &l));
    const struct quant_traits *t = quant_traits_of((uint32_t)w->type);
    int64_t nb = w->cols / l.block;
    for (int64_t k = 0; k < nb; k++) {
        size_t i = (size_t)(row * nb + k);
        planes_to_block(w->type, w->q + i * l.q, l.h ? w->h + i * l.h : NULL, w->s + i * l.s,
                        (uint8_t *)dst + k * t->block_bytes);
    }
}

/* ---- the chooser ------------------------------------------------------------------ */

/* Activation rows above which the tensor-core kernel beats the GEMV (the
 * GEMV's integer work grows with every row, the weights' bytes do not), and
 * above which dequantizing into f16 slabs for cuBLAS beats the tensor-core
 * kernel (cuBLAS's GEMM outruns ours once the slab's extra bytes are paid
 * for). Placeholders until the GPU check measures them (docs/gpu.md). */
#define QMM_QMMA_MIN_N 9
#define QMM_DEQUANT_MIN_N 256
/* Rows of W per dequantized slab: the scratch is at most this many rows of
 * f16 (the output head of a 128k vocabulary is taken in slabs). */
#define QMM_SLAB_ELEMS ((int64_t)64 << 20) /* 128 MiB of f16 */

const char *gk_qmm_path_name(enum gk_qmm_path path)
{
    switch (path) {
    case GK_QMM_GEMV_F16: return "gemv_f16";
    case GK_QMM_GEMM_F16: return "gemm_f16";
    case GK_QMM_QGEMV: return "qgemv";
    case GK_QMM_QMMA: return "qmma";
    case GK_QMM_DEQUANT: return "dequant";
    default: return "unsupported";
    }
}

/* The forced path of IGNITE_QMM_PATH, or GK_QMM_UNSUPPORTED when unset or
 * unknown (gk_qmm_check_env reports that). */
static enum gk_qmm_path forced_path(void)
{
    const char *e = getenv("IGNITE_QMM_PATH");
    if (!e || !*e)
        return GK_QMM_UNSUPPORTED;
    if (!strcmp(e, "qgemv"))
        return GK_QMM_QGEMV;
    if (!strcmp(e, "qmma"))
        return GK_QMM_QMMA;
    if (!strcmp(e, "dequant"))
        return GK_QMM_DEQUANT;
    return GK_QMM_UNSUPPORTED;
}

int gk_qmm_check_env(void)
{
    const char *e = getenv("IGNITE_QMM_PATH");
    if (e && *e && forced_path() == GK_QMM_UNSUPPORTED)
        return ig_error(IG_E_USAGE, "IGNITE_QMM_PATH: expected qgemv, qmma or dequant, got '%s'",
                        e);
    return IG_OK;
}

bool gk_qmm_native_experts(int type, int64_t rows, int64_t cols)
{
    struct gk_qlayout l;
    return gk_qlayout_of(type, &l) && rows >= 1 && cols >= l.block && cols % l.block == 0 &&
           rows <= INT32_MAX && cols <= INT32_MAX;
}

bool gk_qmm_native(int type, int64_t rows, int64_t cols)
{
    /* MXFP4: no dense kernel reads it (gpt-oss has it in its experts only) */
    return type != QUANT_MXFP4 && gk_qmm_native_experts(type, rows, cols);
}

int gk_qmm_choose(int type, int64_t rows, int64_t cols, int64_t n, struct gk_qmm_plan *plan)
{
    *plan = (struct gk_qmm_plan){.path = GK_QMM_UNSUPPORTED};
    if (n < 1 || rows < 1 || cols < 1)
        return ig_error(IG_E_INTERNAL, "gk_qmm_choose: bad shape %lld x %lld, n %lld",
                        (long long)rows, (long long)cols, (long long)n);
    if (type == QUANT_F16) {
        plan->path = n == 1 ? GK_QMM_GEMV_F16 : GK_QMM_GEMM_F16;
        return IG_OK;
    }
    if (!gk_qmm_native(type, rows, cols))
        return ig_error(IG_E_INTERNAL, "gk_qmm_choose: no quantized path for %s %lld x %lld",
                        quant_type_name((uint32_t)type), (long long)rows, (long long)cols);
    enum gk_qmm_path p = forced_path();
    if (p == GK_QMM_QGEMV && n > GK_QGEMV_MAX_N)
        p = GK_QMM_UNSUPPORTED; /* the GEMV takes few rows: the order below decides */
    if (p == GK_QMM_UNSUPPORTED)
        p = n < QMM_QMMA_MIN_N ? GK_QMM_QGEMV : n < QMM_DEQUANT_MIN_N ? GK_QMM_QMMA
                                                                       : GK_QMM_DEQUANT;
    plan->path = p;
    if (p == GK_QMM_DEQUANT) {
        int64_t slab = QMM_SLAB_ELEMS / cols;
        slab = slab < 1 ? 1 : slab;
        plan->slab_rows = rows < slab ? rows : slab;
        plan->scratch_bytes = (size_t)(plan->slab_rows * cols) * 2;
    }
    return IG_OK;
}
