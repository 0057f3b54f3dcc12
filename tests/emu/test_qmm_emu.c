/* tests/emu/test_qmm_emu.c: the quantized-weight kernels of ops/gpu_qmm.h
 * (ops/gpu_qweights.cu, ops/gpu_qgemv.cu, ops/gpu_qgemm.cu) run by the CPU
 * emulator against their twins, and the twins against independent
 * references: quant_dequantize_row (checked against the gguf package by
 * tests/models/test_dequant.py) on the file's blocks as they were before
 * the repack, and fp64 sums. Every device type: Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q4_K, Q5_K, Q6_K.
 *
 * - layout: the host repack and its inverse give back the file's bytes; the
 *   device repack writes the host's planes byte for byte;
 * - dequantization to f16 and the embedding lookup: bit for bit
 *   quant_dequantize_row's values (f16-rounded for the former);
 * - random blocks: byte for byte the twin's;
 * - GEMV (1..8 activation rows, ragged rows, one and two slabs of x, beta 0
 *   and 1, strided x and y): the kernel within (16 + blocks) 2^-24 of
 *   M = sum_i A_i |x_i| of its twin (A_i bounds every f32 term of element
 *   i's block: |d| 128 + |m| for 32-element blocks, |d| 63 * 63 + |dmin| 63
 *   for Q4_K/Q5_K, |d| 128 * 64 for Q6_K); the twin within
 *   sum_i |w_i| (0.5 + 4e-5) dx_i + 1e-6 M of the fp64 product of the
 *   dequantized weights and x, dx_i being the int8 scale of x's block: the
 *   error int8 activations may make, and no more;
 * - the gate|up GEMV with SwiGLU/GeGLU in its epilogue (glu): the bits of
 *   the GEMV then the element-wise kernel, h's row padding untouched; the
 *   residual GEMV with the next RMSNorm in its last block: the bits of the
 *   GEMV then gk_rmsnorm, twice (the ticket back to 0), and its int8 blocks
 *   of xn ops_qmm_quantize's, which a GEMV loading them turns into the bits
 *   of one that quantizes xn itself; the norm launch with blocks
 *   (gk_rmsnorm_xq) the same xn and blocks; the Q|K|V GEMV with bias, RoPE and the
 *   pool write in its epilogue: the bits of the GEMV then gk_qkv_rope;
 * - tensor-core product: the kernel within 2^-20 sum |w x| of its twin, the
 *   twin (the f16 GEMM of the dequantized rows) exact to fp64 rounding;
 * - the chooser: paths by row count, their order, scratch, refusals;
 * - programmatic dependent launch (IGNITE_PDL=1): with x, its int8 blocks
 *   and y (beta 1) hidden from each block until its griddepcontrol.wait
 *   (tests/emu/pdl_hide.h), y the plain launch's bit for bit; the embedding
 *   (gk_qembed) with its tokens hidden, the same rows; the dequantization
 *   (gk_qdequant_f16, every type) with its destination hidden; the tensor-core
 *   product (gk_qmma, Q4_K and Q4_0) with x and y hidden, the same bits.
 * Outputs are poisoned and framed by guards. Label emu. */
#include "ops/gpu_qmm.h"
#include "ops/gpu_ops.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"
#include "ops/qmatmul.h"
#include "tests/quant_bound.h"
#include "tests/test.h"
#include "tests/emu/pdl_hide.h"
#include "tests/emu/rope_case.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const int k_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1,
                              QUANT_Q8_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
#define N_TYPES (sizeof k_types / sizeof k_types[0])
#define GUARD 64 /* bytes of guard around outputs */

uint64_t test_qmm_ldmatrix_conflicts(void); /* qmm_emu_stats.cc */
#define GUARD_BYTE 0xa5

static const char *tname(int type)
{
    return quant_type_name((uint32_t)type);
}

/* ---- test data --------------------------------------------------------------- */

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = ig_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* rows x cols of `type` in the file's format: random quants and scale
 * bytes, f16 scales of either sign around `a`. */
static uint8_t *rand_rows(int type, int64_t rows, int64_t cols, float a, uint64_t *st)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    size_t bytes = (size_t)rows * quant_row_bytes((enum quant_type)type, cols);
    uint8_t *r = malloc(bytes + 8);
    for (size_t i = 0; i < bytes; i++)
        r[i] = (uint8_t)test_rand_u64(st);
    for (size_t b = 0; b < bytes / t->block_bytes; b++) {
        uint8_t *blk = r + b * t->block_bytes;
        float d = a * (0.5f + 0.5f * fabsf(test_rand_f(st))) * (test_rand_f(st) < 0 ? -1 : 1);
        switch (type) {
        case QUANT_Q4_0: case QUANT_Q5_0: case QUANT_Q8_0: put_f16(blk, d); break;
        case QUANT_Q4_1: case QUANT_Q5_1: put_f16(blk, d), put_f16(blk + 2, -8 * fabsf(d)); break;
        case QUANT_Q4_K: case QUANT_Q5_K:
            put_f16(blk, d / 32), put_f16(blk + 2, fabsf(d) / 16);
            break;
        case QUANT_Q6_K: put_f16(blk + offsetof(struct block_q6_K, d), d / 64); break;
        default: break;
        }
    }
    return r;
}

/* n rows of f16 activations (ld elements apart, 16-byte aligned), values in
 * [-2, 2] with an outlier now and then and one all-zero block. */
static uint16_t *rand_x(int64_t n, int64_t cols, int64_t ld, uint64_t *st)
{
    uint16_t *x = aligned_alloc(64, ((size_t)(n * ld) * 2 + 63) / 64 * 64);
    for (int64_t i = 0; i < n * ld; i++) {
        float v = 2.0f * test_rand_f(st);
        if (test_rand_u64(st) % 97 == 0)
            v *= 300.0f;
        x[i] = ig_f32_to_f16(v);
    }
    if (cols >= 64)
        memset(x + 32, 0, 64); /* row 0, block 1: amax 0 */
    return x;
}

/* A host matrix of the device layout, its planes in one buffer. */
static struct gk_qmat host_mat(int type, int64_t rows, int64_t cols, void **buf)
{
    size_t bytes = gk_qmat_bytes(type, rows, cols);
    *buf = aligned_alloc(256, (bytes + 255) / 256 * 256);
    memset(*buf, 0x5a, bytes);
    struct gk_qmat w;
    gk_qmat_carve(&w, type, rows, cols, *buf);
    return w;
}

/* A device matrix of random weights: rows of `type` in the file's format
 * (src, rb bytes a row) and the kernel's repack of them (w, its planes in
 * buf); the set-up of every product case. */
struct dev_mat {
    uint8_t *src;
    size_t rb;
    void *buf;
    struct gk_qmat w;
};

static struct gk_qmat dev_mat_init(struct dev_mat *m, int type, int64_t rows, int64_t cols,
                                   uint64_t *st)
{
    m->rb = quant_row_bytes((enum quant_type)type, cols);
    m->src = rand_rows(type, rows, cols, 0.02f, st);
    m->w = host_mat(type, rows, cols, &m->buf);
    CHECK(IG_DEV(gk_qrepack)(&m->w, m->src, m->rb, NULL) == IG_OK);
    return m->w;
}

static void dev_mat_free(struct dev_mat *m)
{
    free(m->src), free(m->buf);
}

static bool same_planes(const struct gk_qmat *a, const struct gk_qmat *b)
{
    struct gk_qlayout l;
    gk_qlayout_of(a->type, &l);
    size_t blocks = (size_t)(a->rows * (a->cols / l.block));
    return memcmp(a->q, b->q, blocks * l.q) == 0 && memcmp(a->s, b->s, blocks * l.s) == 0 &&
           (!l.h || memcmp(a->h, b->h, blocks * l.h) == 0);
}

/* Guarded output buffer. */
struct out_buf {
    uint8_t *base;
    size_t bytes;
};

static void *out_init(struct out_buf *o, size_t bytes)
{
    o->bytes = bytes;
    o->base = aligned_alloc(64, (2 * GUARD + bytes + 63) / 64 * 64);
    memset(o->base, GUARD_BYTE, 2 * GUARD + bytes);
    memset(o->base + GUARD, 0xff, bytes);
    return o->base + GUARD;
}

static bool out_guards_ok(struct out_buf *o)
{
    bool ok = true;
    for (size_t i = 0; i < GUARD; i++)
        ok &= o->base[i] == GUARD_BYTE && o->base[GUARD + o->bytes + i] == GUARD_BYTE;
    free(o->base);
    return ok;
}

/* ---- layout, repack, rows ------------------------------------------------------ */

static void test_layout_and_rows(int type, uint64_t *st)
{
    struct gk_qlayout l;
    CHECK(gk_qlayout_of(type, &l));
    const struct quant_traits *tr = quant_traits_of((uint32_t)type);
    /* the planes hold the file's bytes (Q6_K: 2 more per block) */
    CHECKF(l.q + l.h + l.s == tr->block_bytes + (type == QUANT_Q6_K ? 2 : 0), "%s: %u bytes",
           tname(type), l.q + l.h + l.s);
    const int64_t rows = 13, cols = l.block * 3;
    size_t rb = quant_row_bytes((enum quant_type)type, cols);
    uint8_t *src = rand_rows(type, rows, cols, 0.01f, st);
    void *b1, *b2;
    struct gk_qmat ref = host_mat(type, rows, cols, &b1), dev = host_mat(type, rows, cols, &b2);
    gk_qrepack_ref(&ref, src, rb);
    uint8_t *back = malloc(rb);
    bool round = true;
    for (int64_t r = 0; r < rows; r++) {
        gk_qunpack_row_ref(&ref, r, back);
        round &= memcmp(back, src + r * rb, rb) == 0;
    }
    CHECKF(round, "%s: repack and unpack do not give back the file's bytes", tname(type));
    if (l.block == 256) { /* K types: chunk halves where GK_KQ_OFF puts them */
        const size_t qs = type == QUANT_Q4_K   ? offsetof(struct block_q4_K, qs)
                          : type == QUANT_Q5_K ? offsetof(struct block_q5_K, qs)
                                               : offsetof(struct block_q6_K, ql);
        bool placed = true;
        for (int64_t i = 0; i < rows * 3; i++)
            for (int k = 0; k < 4; k++)
                for (int h = 0; h < 2; h++)
                    placed &= memcmp(ref.q + i * 128 + GK_KQ_OFF(k, h),
                                     src + (i / 3) * rb + (i % 3) * tr->block_bytes + qs +
                                         32 * k + 16 * h,
                                     16) == 0;
        CHECKF(placed, "%s: quant chunk halves not at GK_KQ_OFF", tname(type));
    }
    CHECK(IG_DEV(gk_qrepack)(&dev, src, rb, NULL) == IG_OK);
    CHECKF(same_planes(&ref, &dev), "%s: device repack differs from the twin", tname(type));

    /* dequantization to f16: rows 2..11, bit for bit */
    const int64_t r0 = 2, nr = 9;
    struct out_buf ob;
    uint16_t *dq = out_init(&ob, (size_t)(nr * cols) * 2);
    uint16_t *dq_ref = malloc((size_t)(nr * cols) * 2);
    CHECK(IG_DEV(gk_qdequant_f16)(&dev, r0, nr, dq, NULL) == IG_OK);
    gk_qdequant_f16_ref(&ref, r0, nr, dq_ref);
    float *f = malloc((size_t)cols * sizeof *f);
    bool exact = true;
    for (int64_t r = 0; r < nr; r++) {
        quant_dequantize_row((enum quant_type)type, src + (r0 + r) * rb, f, cols);
        for (int64_t c = 0; c < cols; c++)
            exact &= dq_ref[r * cols + c] == ig_f32_to_f16(f[c]);
    }
    CHECKF(exact, "%s: twin dequantization differs from quant_dequantize_row", tname(type));
    /* as a dependent launch, the destination (a scratch the GEMM before may
     * still read) hidden until the wait: a store before it is lost there */
    struct pdl_hide hd = {0};
    uint16_t *dq2 = malloc((size_t)(nr * cols) * 2);
    pdl_hide_add(&hd, dq2, (size_t)(nr * cols) * 2);
    PDL_PAIR(tname(type), &hd, dq2, (size_t)(nr * cols) * 2,
             memset(dq2, 0, (size_t)(nr * cols) * 2), 1,
             IG_DEV(gk_qdequant_f16)(&dev, r0, nr, dq2, NULL));
    free(dq2);
    CHECKF(memcmp(dq, dq_ref, (size_t)(nr * cols) * 2) == 0, "%s: dequantization kernel",
           tname(type));
    CHECKF(out_guards_ok(&ob), "%s: dequantization wrote outside", tname(type));

    /* embedding: f32, bit for bit; tokens repeat and come in any order */
    const int32_t tok[] = {12, 0, 5, 5, 7};
    const int64_t n = 5;
    float *x = out_init(&ob, (size_t)(n * cols) * 4);
    CHECK(IG_DEV(gk_qembed)(&dev, tok, n, 0, x, NULL) == IG_OK);
    float *x_ref = malloc((size_t)(n * cols) * 4);
    gk_qembed_ref(&ref, tok, n, 0, x_ref);
    exact = true;
    for (int64_t t = 0; t < n; t++) {
        quant_dequantize_row((enum quant_type)type, src + tok[t] * rb, f, cols);
        exact &= memcmp(f, x_ref + t * cols, (size_t)cols * 4) == 0;
    }
    CHECKF(exact, "%s: twin embedding differs from quant_dequantize_row", tname(type));
    CHECKF(memcmp(x, x_ref, (size_t)(n * cols) * 4) == 0, "%s: embedding kernel", tname(type));
    /* a tensor-parallel rank's part: the matrix as the vocabulary rows
     * [v0, v0 + rows), zeros for the tokens outside (x holds whole rows) */
    const int64_t v0 = 3;
    const int32_t tok_part[] = {12, 0, 5, 2, (int32_t)(v0 + rows)};
    CHECK(IG_DEV(gk_qembed)(&dev, tok_part, n, v0, x, NULL) == IG_OK);
    gk_qembed_ref(&ref, tok_part, n, v0, x_ref);
    exact = true;
    for (int64_t t = 0; t < n; t++) {
        bool mine = tok_part[t] >= v0 && tok_part[t] < v0 + rows;
        if (mine)
            quant_dequantize_row((enum quant_type)type, src + (tok_part[t] - v0) * rb, f, cols);
        for (int64_t c = 0; c < cols; c++)
            exact &= x_ref[t * cols + c] == (mine ? f[c] : 0.0f);
    }
    CHECKF(exact, "%s: twin embedding of a part differs", tname(type));
    CHECKF(memcmp(x, x_ref, (size_t)(n * cols) * 4) == 0, "%s: embedding kernel, a part",
           tname(type));
    /* as a dependent launch (IGNITE_PDL=1), the tokens (a greedy kernel's)
     * hidden until each block's wait: the same rows */
    int32_t tok_pdl[5];
    memcpy(tok_pdl, tok_part, sizeof tok_pdl);
    memset(x, 0x5a, (size_t)(n * cols) * 4);
    struct pdl_hide hide = {0};
    pdl_hide_add(&hide, tok_pdl, sizeof tok_pdl);
    pdl_hide_on(&hide);
    CHECK(IG_DEV(gk_qembed)(&dev, tok_pdl, n, v0, x, NULL) == IG_OK);
    pdl_hide_off(&hide);
    CHECKF(hide.hides > 0 && hide.hides == hide.shows &&
           memcmp(x, x_ref, (size_t)(n * cols) * 4) == 0,
           "%s: embedding as a dependent launch (%d blocks hidden, %d shown)", tname(type),
           hide.hides, hide.shows);
    CHECKF(out_guards_ok(&ob), "%s: embedding wrote outside", tname(type));

    /* random blocks */
    CHECK(IG_DEV(gk_qrandom)(&dev, 77, NULL) == IG_OK);
    gk_qrandom_ref(&ref, 77);
    CHECKF(same_planes(&ref, &dev), "%s: random blocks differ from the twin", tname(type));
    float amax = 0;
    for (int64_t r = 0; r < rows; r++) {
        gk_qunpack_row_ref(&ref, r, back);
        quant_dequantize_row((enum quant_type)type, back, f, cols);
        for (int64_t c = 0; c < cols; c++)
            amax = fmaxf(amax, isfinite(f[c]) ? fabsf(f[c]) : INFINITY);
    }
    CHECKF(amax > 0.3f / sqrtf((float)cols) && amax <= 2.5f / sqrtf((float)cols),
           "%s: random weights up to %g for %lld columns", tname(type), amax, (long long)cols);

    /* refusals */
    CHECK(IG_DEV(gk_qdequant_f16)(&dev, 10, 4, dq_ref, NULL) != IG_OK);     /* past the rows */
    CHECK(IG_DEV(gk_qdequant_f16)(&dev, 0, 1, dq_ref + 1, NULL) != IG_OK); /* misaligned */
    struct gk_qmat bad = dev;
    bad.cols = l.block + 16;
    CHECK(IG_DEV(gk_qembed)(&bad, tok, 1, 0, x_ref, NULL) != IG_OK);
    free(f), free(x_ref), free(dq_ref), free(back), free(src), free(b1), free(b2);
}

/* ---- GEMV ---------------------------------------------------------------------------- */

/* The int8 scale of x's block holding column c: max |x| / 127. */
static double x_scale(const uint16_t *x, int64_t c)
{
    double m = 0;
    for (int64_t i = c / 32 * 32; i < c / 32 * 32 + 32; i++)
        m = fmax(m, fabs(ig_f16_to_f32(x[i])));
    return m / 127;
}

static void gemv_case(int type, int64_t rows, int64_t cols, int64_t n, float beta, uint64_t *st,
                      bool poison_inf)
{
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    const int64_t ld_x = cols + 8 * (n % 2), ld_y = rows + 3;
    uint16_t *x = rand_x(n, cols, ld_x, st);
    if (poison_inf)
        x[(n - 1) * ld_x + cols - 5] = 0x7c00; /* +inf: that block's products are NaN */
    struct out_buf ob;
    float *y = out_init(&ob, (size_t)(n * ld_y) * 4);
    float *y0 = malloc((size_t)(n * ld_y) * 4), *yr = malloc((size_t)(n * ld_y) * 4);
    for (int64_t i = 0; i < n * ld_y; i++)
        y0[i] = beta != 0 ? test_rand_f(st) : NAN; /* beta 0: never read */
    memcpy(y, y0, (size_t)(n * ld_y) * 4);
    memcpy(yr, y0, (size_t)(n * ld_y) * 4);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = ld_x, .n = n, .y = y, .ld_y = ld_y,
                                .beta = beta};
    int rc = IG_DEV(gk_qgemv)(&p, NULL);
    CHECKF(rc == IG_OK, "%s gemv %lld x %lld n %lld: launch", tname(type), (long long)rows,
           (long long)cols, (long long)n);
    p.y = yr;
    gk_qgemv_ref(&p);

    float *wf = malloc((size_t)cols * sizeof *wf);
    int bad_k = 0, bad_t = 0, bad_keep = 0;
    double worst_k = 0, worst_t = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row((enum quant_type)type, m.src + r * m.rb, wf, cols);
        for (int64_t t = 0; t < n; t++) {
            const uint16_t *xt = x + t * ld_x;
            double exact = beta != 0 ? (double)y0[t * ld_y + r] : 0, mag = 0, qerr = 0;
            for (int64_t c = 0; c < cols; c++) {
                double xv = ig_f16_to_f32(xt[c]);
                exact += (double)wf[c] * xv;
                mag += test_quant_term_bound(type, m.src + r * m.rb, c) * fabs(xv);
                qerr += fabs((double)wf[c]) * (0.5 + 4e-5) * x_scale(xt, c);
            }
            double k = y[t * ld_y + r], tw = yr[t * ld_y + r];
            if (poison_inf && t == n - 1) {
                bad_k += !isnan(k) || !isnan(tw);
                continue;
            }
            double tol_k = (16 + cols / 32) * ldexp(mag, -24) + 1e-30;
            double tol_t = qerr + 1e-6 * mag + 1e-30;
            if (!(fabs(k - tw) <= tol_k) && bad_k++ < 3)
                fprintf(stderr, "%s gemv %lldx%lld n %lld: y[%lld][%lld] kernel %.9g twin %.9g "
                        "(tol %.3g)\n", tname(type), (long long)rows, (long long)cols,
                        (long long)n, (long long)t, (long long)r, k, tw, tol_k);
            if (!(fabs(tw - exact) <= tol_t) && bad_t++ < 3)
                fprintf(stderr, "%s gemv %lldx%lld n %lld: y[%lld][%lld] twin %.9g fp64 %.9g "
                        "(tol %.3g)\n", tname(type), (long long)rows, (long long)cols,
                        (long long)n, (long long)t, (long long)r, tw, exact, tol_t);
            worst_k = fmax(worst_k, fabs(k - tw) / (tol_k));
            worst_t = fmax(worst_t, fabs(tw - exact) / (tol_t));
        }
    }
    for (int64_t t = 0; t < n; t++) /* the padding of y between rows is untouched */
        for (int64_t r = rows; r < ld_y; r++)
            bad_keep += memcmp(&y[t * ld_y + r], &y0[t * ld_y + r], 4) != 0;
    CHECKF(bad_k == 0, "%s gemv %lld x %lld n %lld beta %g: %d outputs off the twin",
           tname(type), (long long)rows, (long long)cols, (long long)n, beta, bad_k);
    CHECKF(bad_t == 0, "%s gemv %lld x %lld n %lld: %d twin outputs off fp64", tname(type),
           (long long)rows, (long long)cols, (long long)n, bad_t);
    CHECKF(bad_keep == 0, "%s gemv: wrote %d elements of y past the rows", tname(type), bad_keep);
    CHECKF(out_guards_ok(&ob), "%s gemv: wrote outside y", tname(type));
    if (getenv("IGNITE_TEST_VERBOSE"))
        fprintf(stderr, "%s %lldx%lld n %lld: worst kernel/tol %.3f twin/tol %.3f\n", tname(type),
                (long long)rows, (long long)cols, (long long)n, worst_k, worst_t);
    free(wf), free(y0), free(yr), free(x);
    dev_mat_free(&m);
}

/* The gate|up GEMV with its activation (glu): for n rows of x, h (ld_h
 * past n_ff, NaN-poisoned) the same bits as the plain GEMV's y through the
 * element-wise kernel (gk_swiglu / gk_geglu, emulated too), the padding of h
 * between rows untouched; its twin the plain twin's y through the
 * activation's twin, bit for bit (kernel against twin: gemv_case's bounds). */
static void glu_case(int type, int64_t n_ff, int64_t cols, int64_t n, int act, uint64_t *st)
{
    const int64_t rows = 2 * n_ff, ld_h = n_ff + 5;
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    struct out_buf ob;
    uint16_t *h = out_init(&ob, (size_t)(n * ld_h) * 2);
    for (int64_t i = 0; i < n * ld_h; i++)
        h[i] = 0x7e00u;
    float *y = malloc((size_t)(n * rows) * 4);
    uint16_t *h_two = malloc((size_t)(n * n_ff) * 2), *h_ref = malloc((size_t)(n * ld_h) * 2);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .glu = act, .h = h,
                                .ld_h = ld_h};
    const char *name = act == GK_GLU_GELU ? "geglu" : "swiglu";
    CHECKF(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK, "%s %s %lld x %lld n %lld: launch", tname(type),
           name, (long long)rows, (long long)cols, (long long)n);
    struct gk_qgemv_params q = {.w = w, .x = x, .ld_x = cols, .n = n, .y = y, .ld_y = rows};
    CHECK(IG_DEV(gk_qgemv)(&q, NULL) == IG_OK);
    for (int64_t t = 0; t < n; t++)
        CHECK((act == GK_GLU_GELU ? IG_DEV(gk_geglu) : IG_DEV(gk_swiglu))(
                  y + t * rows, 1, n_ff, h_two + t * n_ff, NULL) == IG_OK);
    /* the twin: the plain twin's product through the activation's twin */
    p.h = h_ref;
    gk_qgemv_ref(&p);
    q.y = y;
    gk_qgemv_ref(&q);
    uint16_t *h_tw = malloc((size_t)n_ff * 2);
    int64_t off_two = 0, off_ref = 0, keep = 0;
    for (int64_t t = 0; t < n; t++) {
        (act == GK_GLU_GELU ? gk_geglu_ref : gk_swiglu_ref)(y + t * rows, 1, n_ff, h_tw);
        for (int64_t i = 0; i < n_ff; i++) {
            off_two += h[t * ld_h + i] != h_two[t * n_ff + i];
            off_ref += h_ref[t * ld_h + i] != h_tw[i];
        }
        for (int64_t i = n_ff; i < ld_h; i++)
            keep += h[t * ld_h + i] != 0x7e00u;
    }
    CHECKF(off_two == 0, "%s %s %lld x %lld n %lld: %lld outputs differ from the GEMV + %s "
           "kernels", tname(type), name, (long long)rows, (long long)cols, (long long)n,
           (long long)off_two, name);
    CHECKF(off_ref == 0, "%s %s %lld x %lld n %lld: %lld outputs off the twin", tname(type),
           name, (long long)rows, (long long)cols, (long long)n, (long long)off_ref);
    CHECKF(keep == 0 && out_guards_ok(&ob), "%s %s: wrote outside h's rows", tname(type), name);
    free(y), free(h_two), free(h_ref), free(h_tw), free(x);
    dev_mat_free(&m);
}

/* The gate|up GEMV's h blocks (qn with glu): each 32 outputs' int8 block by
 * the last of its 4 blocks, bit for bit ops_qmm_quantize of the kernel's h
 * (the twin does the same to its own h), the tickets left 0; and a down product loading them (xq) gives
 * the y it gives quantizing h itself, bit for bit. n_ff = 256: 8 groups. */
static void glu_blocks_case(int type, int64_t n, uint64_t *st)
{
    const int64_t n_ff = 256, rows = 2 * n_ff, cols = 256, ld_h = n_ff + 32, down_rows = 18;
    struct dev_mat m, md;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    const struct gk_qmat wd = dev_mat_init(&md, type, down_rows, n_ff, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    uint16_t *h = calloc((size_t)(n * ld_h), 2), *h_ref = calloc((size_t)(n * ld_h), 2);
    int8_t *hq = calloc((size_t)(n * ld_h), 1), *hq_ref = calloc((size_t)(n * ld_h), 1);
    float *hqd = calloc((size_t)(n * ld_h / 32) * 2, 4), *hqd_ref = calloc((size_t)(n * ld_h / 32) * 2, 4);
    uint32_t tickets[8] = {0};
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .glu = GK_GLU_SILU,
                                .h = h, .ld_h = ld_h, .qn = hq, .qnd = hqd, .ticket = tickets};
    CHECKF(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK, "%s glu blocks n %lld: launch", tname(type),
           (long long)n);
    /* the twin's blocks are those of its own h (within the GEMV's tolerance of
     * the kernel's): each against ops_qmm_quantize of its h */
    p.h = h_ref, p.qn = hq_ref, p.qnd = hqd_ref, p.ticket = NULL;
    gk_qgemv_ref(&p);
    int64_t off_q = 0, off_ref = 0;
    float f[256];
    struct qmm_q8 b[8];
    for (int pass = 0; pass < 2; pass++)
        for (int64_t t = 0; t < n; t++) {
            const uint16_t *hh = (pass ? h_ref : h) + t * ld_h;
            const int8_t *qq = (pass ? hq_ref : hq) + t * ld_h;
            const float *dd = (pass ? hqd_ref : hqd) + t * (ld_h / 16);
            for (int64_t i = 0; i < n_ff; i++)
                f[i] = ig_f16_to_f32(hh[i]);
            ops_qmm_quantize(f, n_ff, b);
            bool same = true;
            for (int i = 0; i < 8; i++)
                same &= memcmp(qq + 32 * i, b[i].qs, 32) == 0 &&
                        memcmp(&dd[2 * i], &b[i].d, 4) == 0 && memcmp(&dd[2 * i + 1], &b[i].s, 4) == 0;
            *(pass ? &off_ref : &off_q) += !same;
        }
    CHECKF(off_q == 0, "%s glu blocks n %lld: %lld rows of h's int8 blocks off ops_qmm_quantize",
           tname(type), (long long)n, (long long)off_q);
    CHECKF(off_ref == 0, "%s glu blocks n %lld: the twin's blocks, %lld rows", tname(type),
           (long long)n, (long long)off_ref);
    bool zero = true;
    for (int i = 0; i < 8; i++)
        zero &= tickets[i] == 0;
    CHECKF(zero, "%s glu blocks: tickets not left 0", tname(type));
    /* the down product from h's blocks and from h itself */
    float *y1 = calloc((size_t)(n * down_rows), 4), *y2 = calloc((size_t)(n * down_rows), 4);
    struct gk_qgemv_params d = {.w = wd, .x = h, .ld_x = ld_h, .n = n, .y = y1,
                                .ld_y = down_rows};
    CHECK(IG_DEV(gk_qgemv)(&d, NULL) == IG_OK);
    d.y = y2, d.xq = hq, d.xqd = hqd;
    CHECK(IG_DEV(gk_qgemv)(&d, NULL) == IG_OK);
    CHECKF(memcmp(y1, y2, (size_t)(n * down_rows) * 4) == 0,
           "%s glu blocks n %lld: the down product from h's blocks differs", tname(type),
           (long long)n);
    /* refused: outputs not whole blocks of 32, no tickets */
    p.h = h, p.qn = hq, p.qnd = hqd, p.ticket = NULL;
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    free(y1), free(y2), free(h), free(h_ref), free(hq), free(hq_ref), free(hqd), free(hqd_ref);
    free(x);
    dev_mat_free(&m), dev_mat_free(&md);
}

/* Elements per block of `type`. */
static int64_t l_block(int type)
{
    struct gk_qlayout l;
    return gk_qlayout_of(type, &l) ? l.block : 1;
}

/* The residual GEMV with the next norm in its last block (norm_w): for n
 * rows, y the bits of the plain GEMV with beta 1 and xn those of gk_rmsnorm
 * of that y, twice in a row (the ticket back to 0); rows over several
 * blocks, so the last block must see every other block's rows. */
static void norm_case(int type, int64_t rows, int64_t cols, int64_t n, uint64_t *st)
{
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    float *y = aligned_alloc(16, (size_t)(n * rows * 4 + 15) / 16 * 16);
    float *y2 = aligned_alloc(16, (size_t)(n * rows * 4 + 15) / 16 * 16);
    float *nw = aligned_alloc(16, (size_t)(rows * 4 + 15) / 16 * 16);
    uint16_t *xn = aligned_alloc(16, (size_t)(n * rows * 2 + 15) / 16 * 16);
    uint16_t *xn2 = malloc((size_t)(n * rows) * 2);
    int8_t *qn = aligned_alloc(16, (size_t)(n * rows + 15) / 16 * 16);
    float *qnd = malloc((size_t)(n * rows / 32) * 2 * sizeof *qnd);
    uint32_t ticket = 0;
    for (int64_t i = 0; i < n * rows; i++)
        y[i] = y2[i] = test_rand_f(st);
    for (int64_t r = 0; r < rows; r++)
        nw[r] = 1.0f + 0.5f * test_rand_f(st);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .y = y, .ld_y = rows,
                                .beta = 1, .norm_w = nw, .norm_eps = 1e-6f, .xn = xn,
                                .ticket = &ticket, .qn = qn, .qnd = qnd};
    struct gk_qgemv_params q = {.w = w, .x = x, .ld_x = cols, .n = n, .y = y2, .ld_y = rows,
                                .beta = 1};
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < n * rows; i++)
            xn[i] = 0x7e00u;
        CHECKF(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK, "%s norm tail: launch", tname(type));
        CHECK(IG_DEV(gk_qgemv)(&q, NULL) == IG_OK);
        CHECK(IG_DEV(gk_rmsnorm)(y2, rows, nw, n, rows, 1e-6f, xn2, NULL) == IG_OK);
        int64_t off_y = 0, off_n = 0;
        for (int64_t i = 0; i < n * rows; i++) {
            off_y += memcmp(&y[i], &y2[i], 4) != 0;
            off_n += xn[i] != xn2[i];
        }
        CHECKF(off_y == 0 && off_n == 0, "%s norm tail %lld x %lld n %lld, launch %d: %lld "
               "residuals and %lld normalized elements differ from the GEMV + gk_rmsnorm",
               tname(type), (long long)rows, (long long)cols, (long long)n, rep,
               (long long)off_y, (long long)off_n);
        CHECKF(ticket == 0, "%s norm tail: ticket %u left", tname(type), ticket);
    }
    /* xn's int8 blocks: ops_qmm_quantize's (the CPU's quantizer) of xn, and
     * a GEMV of xn that loads them gives the bits of one that quantizes xn
     * itself (a second matrix: rows x rows, 1 or 2 rows of x) */
    int64_t off_q = 0, nbn = rows / 32;
    float *f = malloc((size_t)rows * sizeof *f);
    struct qmm_q8 *qb = malloc((size_t)nbn * sizeof *qb);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t c = 0; c < rows; c++)
            f[c] = ig_f16_to_f32(xn[t * rows + c]);
        ops_qmm_quantize(f, rows, qb);
        for (int64_t b = 0; b < nbn; b++)
            off_q += memcmp(qn + t * rows + 32 * b, qb[b].qs, 32) != 0 ||
                     memcmp(&qnd[2 * (t * nbn + b)], &qb[b].d, 4) != 0 ||
                     memcmp(&qnd[2 * (t * nbn + b) + 1], &qb[b].s, 4) != 0;
    }
    CHECKF(off_q == 0, "%s norm tail: %lld int8 blocks of xn off ops_qmm_quantize's",
           tname(type), (long long)off_q);
    /* the norm launch with its blocks (gk_rmsnorm_xq: a decode step's layer
     * 0): gk_rmsnorm's xn, and the blocks the tail wrote of the same bits */
    int8_t *qn2 = malloc((size_t)(n * rows));
    float *qnd2 = aligned_alloc(8, (size_t)(n * rows / 32) * 2 * sizeof *qnd2);
    memset(qn2, 0x80, (size_t)(n * rows));
    CHECK(IG_DEV(gk_rmsnorm_xq)(y2, rows, nw, n, rows, 1e-6f, xn2, qn2, qnd2, NULL) == IG_OK);
    CHECKF(memcmp(xn2, xn, (size_t)(n * rows) * 2) == 0 && memcmp(qn2, qn, (size_t)(n * rows)) == 0 &&
           memcmp(qnd2, qnd, (size_t)(n * rows / 32) * 2 * sizeof *qnd) == 0,
           "%s: gk_rmsnorm_xq's xn or int8 blocks differ from the norm tail's", tname(type));
    free(qn2), free(qnd2);
    if (rows % l_block(type) == 0) {
        struct dev_mat m2;
        const struct gk_qmat w2 = dev_mat_init(&m2, type, 24, rows, st);
        float *ya = malloc((size_t)(n * 24) * 4), *yb = malloc((size_t)(n * 24) * 4);
        struct gk_qgemv_params a = {.w = w2, .x = xn, .ld_x = rows, .n = n, .y = ya, .ld_y = 24};
        struct gk_qgemv_params b = a;
        b.y = yb, b.xq = qn, b.xqd = qnd;
        CHECK(IG_DEV(gk_qgemv)(&a, NULL) == IG_OK && IG_DEV(gk_qgemv)(&b, NULL) == IG_OK);
        CHECKF(memcmp(ya, yb, (size_t)(n * 24) * 4) == 0,
               "%s: a GEMV from x's int8 blocks differs from one that quantizes x", tname(type));
        free(ya), free(yb);
        dev_mat_free(&m2);
    }
    free(f), free(qb), free(qn), free(qnd);
    free(y), free(y2), free(nw), free(xn), free(xn2), free(x);
    dev_mat_free(&m);
}

/* The Q|K|V GEMV with bias, RoPE and the pool write in its epilogue
 * (rope): the bits of the plain GEMV then gk_qkv_rope (rope_case.h). */
static void rope_gemv_case(int type, int64_t n, int style, int64_t n_rot, bool bias,
                           uint64_t *st)
{
    const int64_t cols = l_block(type) == 256 ? 256 : 96;
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, RC_ROWS, cols, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    float *y = malloc((size_t)(n * RC_ROWS) * 4);
    struct rope_case c;
    rope_case_init(&c, st);
    struct gk_qkv_params fused = rope_case_params(&c, 0, n, style, n_rot, bias);
    struct gk_qkv_params plain = rope_case_params(&c, 1, n, style, n_rot, bias);
    plain.qkv = y;
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .rope = &fused};
    struct gk_qgemv_params q = {.w = w, .x = x, .ld_x = cols, .n = n, .y = y, .ld_y = RC_ROWS};
    CHECKF(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK, "%s rope: launch", tname(type));
    CHECK(IG_DEV(gk_qgemv)(&q, NULL) == IG_OK && IG_DEV(gk_qkv_rope)(&plain, NULL) == IG_OK);
    char what[96];
    snprintf(what, sizeof what, "%s Q|K|V GEMV + RoPE, n %lld, style %d, n_rot %lld%s",
             tname(type), (long long)n, style, (long long)n_rot, bias ? ", bias" : "");
    rope_case_check(&c, n, what);
    rope_case_free(&c);
    free(y), free(x);
    dev_mat_free(&m);
}

/* The GEMV launched as a programmatic dependent launch with what a previous
 * kernel writes (x, or x's int8 blocks, and y read with beta 1) hidden from
 * each block until its wait: y must be the plain launch's bit for bit (a
 * read before the wait computes from NaN), every block having met at the
 * wait. */
static void pdl_case(int type, int64_t rows, int64_t cols, int64_t n, bool blocks, uint64_t *st)
{
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    int8_t *xq = blocks ? malloc((size_t)(n * cols)) : NULL;
    float *xqd = blocks ? malloc((size_t)(n * cols / 16) * 4) : NULL;
    float *f = malloc((size_t)cols * 4);
    struct qmm_q8 *b = malloc((size_t)(cols / 32) * sizeof *b);
    for (int64_t t = 0; blocks && t < n; t++) {
        for (int64_t c = 0; c < cols; c++)
            f[c] = ig_f16_to_f32(x[t * cols + c]);
        ops_qmm_quantize(f, cols, b);
        for (int64_t i = 0; i < cols / 32; i++) {
            memcpy(xq + t * cols + 32 * i, b[i].qs, 32);
            xqd[t * (cols / 16) + 2 * i] = b[i].d;
            xqd[t * (cols / 16) + 2 * i + 1] = b[i].s;
        }
    }
    float *ya = malloc((size_t)(n * rows) * 4), *yb = malloc((size_t)(n * rows) * 4);
    for (int64_t i = 0; i < n * rows; i++)
        ya[i] = yb[i] = test_rand_f(st);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .y = ya, .ld_y = rows,
                                .beta = 1, .xq = xq, .xqd = xqd};
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK);
    struct pdl_hide h = {0};
    pdl_hide_add(&h, x, (size_t)(n * cols) * 2);
    pdl_hide_add(&h, yb, (size_t)(n * rows) * 4);
    if (blocks) {
        pdl_hide_add(&h, xq, (size_t)(n * cols));
        pdl_hide_add(&h, xqd, (size_t)(n * cols / 16) * 4);
    }
    pdl_hide_on(&h);
    p.y = yb;
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) == IG_OK);
    pdl_hide_off(&h);
    const int grid = (int)(((rows + 1) / 2 + 7) / 8);
    CHECKF(h.hides == grid && h.shows == grid, "%s pdl: %d blocks, %d hidden, %d shown",
           tname(type), grid, h.hides, h.shows);
    CHECKF(memcmp(ya, yb, (size_t)(n * rows) * 4) == 0,
           "%s pdl %lld x %lld n %lld%s: y differs from the plain launch's", tname(type),
           (long long)rows, (long long)cols, (long long)n, blocks ? " (x's blocks)" : "");
    free(ya), free(yb), free(f), free(b), free(xq), free(xqd), free(x);
    dev_mat_free(&m);
}

static void test_gemv(int type, uint64_t *st)
{
    struct gk_qlayout l;
    gk_qlayout_of(type, &l);
    const bool k = l.block == 256;
    /* rows: one, an odd number, past one block of 16 rows; cols: one block,
     * a ragged count of chunks; n: every instance (1, 2, 4, 8) with ragged n */
    gemv_case(type, 1, l.block, 1, 0, st, false);
    gemv_case(type, 17, k ? 768 : 544, 1, 1, st, false);
    gemv_case(type, 33, k ? 512 : 96, 2, 0, st, false);
    gemv_case(type, 7, k ? 256 : 1056, 3, 1, st, false);
    gemv_case(type, 18, k ? 768 : 160, 5, 0, st, false);
    gemv_case(type, 3, k ? 256 : 64, 8, 1, st, true);
    /* gate|up with its activation: an output per warp, a ragged last block */
    glu_case(type, 13, k ? 512 : 96, 1, GK_GLU_SILU, st);
    glu_case(type, 9, k ? 256 : 160, 3, GK_GLU_GELU, st);
    /* and its int8 blocks of h for the down product */
    glu_blocks_case(type, type == QUANT_Q4_K ? 3 : 1, st);
    /* the next norm in the last block and its int8 blocks: 6 or 32 blocks of
     * rows, 1 row of x (2 for Q4_K) */
    norm_case(type, k ? 512 : 96, k ? 256 : 96, type == QUANT_Q4_K ? 2 : 1, st);
    /* Q|K|V with RoPE and the pool write: both styles, a padding row */
    rope_gemv_case(type, 3, ROPE_ADJACENT, RC_HD, true, st);
    rope_gemv_case(type, 2, ROPE_HALF_SPLIT, RC_HD / 2, false, st);
    /* two slabs of x: 8 rows take 4096 columns at a time */
    gemv_case(type, 5, k ? 4352 : 4128, 6, 0, st, false);
    /* the load ring: 104 (200) chunks a row, so a lane reduces 3 or 4 stages
     * of the 1- and 2-row instances, the last one ragged */
    gemv_case(type, 3, k ? 6656 : 6400, 1, 1, st, false);
    gemv_case(type, 2, k ? 6656 : 6400, 2, 0, st, false);
    /* programmatic dependent launch: 3 blocks, x and x's blocks */
    if (type == QUANT_Q4_K || type == QUANT_Q4_0) {
        pdl_case(type, 40, k ? 512 : 256, 2, false, st);
        pdl_case(type, 40, k ? 512 : 256, 1, true, st);
    }
}

static void test_gemv_refusals(void)
{
    void *buf;
    struct gk_qmat w = host_mat(QUANT_Q4_K, 4, 256, &buf);
    uint16_t *x = aligned_alloc(64, 2 * 512 * 2);
    float y[64];
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = 256, .n = 1, .y = y, .ld_y = 4};
    p.n = 0;
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    p.n = GK_QGEMV_MAX_N + 1;
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    p.n = 1, p.x = x + 1; /* misaligned */
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    p.x = x, p.ld_x = 260; /* row stride not a multiple of 8 */
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    p.ld_x = 256, p.w.cols = 288; /* not whole super-blocks */
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    p.w.cols = 256, p.beta = 0.5f;
    CHECK(IG_DEV(gk_qgemv)(&p, NULL) != IG_OK);
    free(x);
    free(buf);
}

/* ---- tensor cores ------------------------------------------------------------------------- */

static void qmma_case(int type, int64_t rows, int64_t cols, int64_t n, float beta, uint64_t *st)
{
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    const int64_t ld_x = cols + 8, ld_y = rows + 1;
    uint16_t *x = rand_x(n, cols, ld_x, st);
    struct out_buf ob;
    float *y = out_init(&ob, (size_t)(n * ld_y) * 4);
    float *y0 = malloc((size_t)(n * ld_y) * 4), *yr = malloc((size_t)(n * ld_y) * 4);
    for (int64_t i = 0; i < n * ld_y; i++)
        y0[i] = beta != 0 ? test_rand_f(st) : NAN;
    memcpy(y, y0, (size_t)(n * ld_y) * 4);
    memcpy(yr, y0, (size_t)(n * ld_y) * 4);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = ld_x, .n = n, .y = y, .ld_y = ld_y,
                                .beta = beta};
    CHECKF(IG_DEV(gk_qmma)(&p, NULL) == IG_OK, "%s qmma %lld x %lld n %lld: launch", tname(type),
           (long long)rows, (long long)cols, (long long)n);
    p.y = yr;
    gk_qmma_ref(&p);
    float *wf = malloc((size_t)cols * sizeof *wf);
    int bad_k = 0, bad_t = 0, bad_keep = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row((enum quant_type)type, m.src + r * m.rb, wf, cols);
        for (int64_t t = 0; t < n; t++) {
            double exact = beta != 0 ? (double)y0[t * ld_y + r] : 0, mag = fabs(exact);
            for (int64_t c = 0; c < cols; c++) {
                double pr = (double)ig_f16_to_f32(ig_f32_to_f16(wf[c])) *
                            ig_f16_to_f32(x[t * ld_x + c]);
                exact += pr;
                mag += fabs(pr);
            }
            double k = y[t * ld_y + r], tw = yr[t * ld_y + r];
            if (!(fabs(k - tw) <= 1e-5 * mag + 1e-30) && bad_k++ < 3)
                fprintf(stderr, "%s qmma %lldx%lld n %lld: y[%lld][%lld] kernel %.9g twin %.9g\n",
                        tname(type), (long long)rows, (long long)cols, (long long)n,
                        (long long)t, (long long)r, k, tw);
            bad_t += !(fabs(tw - exact) <= 1e-7 * mag + 1e-30);
        }
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = rows; r < ld_y; r++)
            bad_keep += memcmp(&y[t * ld_y + r], &y0[t * ld_y + r], 4) != 0;
    CHECKF(bad_k == 0, "%s qmma %lld x %lld n %lld beta %g: %d outputs off the twin", tname(type),
           (long long)rows, (long long)cols, (long long)n, beta, bad_k);
    CHECKF(bad_t == 0, "%s qmma: %d twin outputs off fp64", tname(type), bad_t);
    CHECKF(bad_keep == 0, "%s qmma: wrote %d elements of y past the rows", tname(type), bad_keep);
    CHECKF(out_guards_ok(&ob), "%s qmma: wrote outside y", tname(type));
    CHECKF(test_qmm_ldmatrix_conflicts() == 0, "%s qmma: ldmatrix bank conflicts",
           tname(type));
    free(wf), free(y0), free(yr), free(x);
    dev_mat_free(&m);
}

/* The product as a programmatic dependent launch: x and y (beta 1) hidden
 * from each block until its wait (the first k-tile's weights are loaded
 * before it); y the plain launch's bit for bit, every block waiting. */
static void qmma_pdl_case(int type, int64_t rows, int64_t cols, int64_t n, uint64_t *st)
{
    struct dev_mat m;
    const struct gk_qmat w = dev_mat_init(&m, type, rows, cols, st);
    uint16_t *x = rand_x(n, cols, cols, st);
    const size_t yb = (size_t)(n * rows) * 4;
    float *y = malloc(yb), *y0 = malloc(yb);
    for (int64_t i = 0; i < n * rows; i++)
        y0[i] = test_rand_f(st);
    struct gk_qgemv_params p = {.w = w, .x = x, .ld_x = cols, .n = n, .y = y, .ld_y = rows,
                                .beta = 1};
    struct pdl_hide h = {0};
    pdl_hide_add(&h, x, (size_t)(n * cols) * 2);
    pdl_hide_add(&h, y, yb);
    const int blocks = (int)(((rows + 63) / 64) * ((n + 63) / 64));
    PDL_PAIR(tname(type), &h, y, yb, memcpy(y, y0, yb), blocks, IG_DEV(gk_qmma)(&p, NULL));
    free(y), free(y0), free(x);
    dev_mat_free(&m);
}

static void test_qmma(int type, uint64_t *st)
{
    struct gk_qlayout l;
    gk_qlayout_of(type, &l);
    const bool k = l.block == 256;
    /* rows past a 64-row tile, columns ending in half a k-tile (32-element
     * types), tokens past one and two 64-token tiles */
    qmma_case(type, 1, l.block, 1, 0, st);
    qmma_case(type, 70, k ? 512 : 96, 9, 1, st);
    qmma_case(type, 64, k ? 256 : 544, 65, 0, st);
    if (type == QUANT_Q4_K || type == QUANT_Q8_0)
        qmma_case(type, 130, k ? 768 : 160, 130, 1, st);
    /* programmatic dependent launch: two row tiles, one of tokens */
    if (type == QUANT_Q4_K || type == QUANT_Q4_0)
        qmma_pdl_case(type, 70, k ? 512 : 96, 9, st);
}

/* ---- the chooser ----------------------------------------------------------------------- */

static void test_choose(void)
{
    struct gk_qmm_plan p;
    CHECK(gk_qmm_choose(QUANT_F16, 64, 64, 1, &p) == IG_OK && p.path == GK_QMM_GEMV_F16);
    CHECK(gk_qmm_choose(QUANT_F16, 64, 64, 2, &p) == IG_OK && p.path == GK_QMM_GEMM_F16);
    for (size_t i = 0; i < N_TYPES; i++) {
        int type = k_types[i];
        enum gk_qmm_path last = GK_QMM_QGEMV;
        bool ordered = true, gemv_ok = true;
        for (int64_t n = 1; n <= 4096; n += n < 64 ? 1 : 61) {
            CHECK(gk_qmm_choose(type, 4096, 4096, n, &p) == IG_OK);
            ordered &= p.path >= last;
            gemv_ok &= p.path != GK_QMM_QGEMV || n <= GK_QGEMV_MAX_N;
            last = p.path;
            if (p.path == GK_QMM_DEQUANT)
                CHECK(p.scratch_bytes == (size_t)(p.slab_rows * 4096) * 2 && p.slab_rows >= 1 &&
                      p.slab_rows <= 4096);
        }
        CHECKF(ordered && gemv_ok, "%s: paths out of order", tname(type));
        CHECK(gk_qmm_choose(type, 4096, 4096, 1, &p) == IG_OK && p.path == GK_QMM_QGEMV);
        CHECK(gk_qmm_choose(type, 128256, 4096, 4096, &p) == IG_OK &&
              p.path == GK_QMM_DEQUANT && p.slab_rows < 128256); /* the head in slabs */
        CHECK(gk_qmm_native(type, 8, 256) && !gk_qmm_native(type, 8, 16) &&
              !gk_qmm_native(type, 0, 256));
    }
    fprintf(stderr, "(two gk_qmm_choose errors are expected next)\n");
    CHECK(gk_qmm_choose(QUANT_Q4_K, 8, 288, 1, &p) != IG_OK && p.path == GK_QMM_UNSUPPORTED);
    CHECK(gk_qmm_choose(QUANT_Q2_K, 8, 256, 1, &p) != IG_OK);
    CHECK(!gk_qmm_native(QUANT_Q3_K, 8, 256) && !gk_qmm_native(QUANT_BF16, 8, 256));

    /* IGNITE_QMM_PATH forces a path where it is supported */
    setenv("IGNITE_QMM_PATH", "dequant", 1);
    CHECK(gk_qmm_check_env() == IG_OK);
    CHECK(gk_qmm_choose(QUANT_Q4_0, 64, 64, 1, &p) == IG_OK && p.path == GK_QMM_DEQUANT);
    setenv("IGNITE_QMM_PATH", "qgemv", 1);
    CHECK(gk_qmm_choose(QUANT_Q4_0, 64, 64, 8, &p) == IG_OK && p.path == GK_QMM_QGEMV);
    CHECK(gk_qmm_choose(QUANT_Q4_0, 64, 64, 9, &p) == IG_OK && p.path != GK_QMM_QGEMV);
    setenv("IGNITE_QMM_PATH", "qmma", 1);
    CHECK(gk_qmm_choose(QUANT_Q6_K, 64, 256, 1, &p) == IG_OK && p.path == GK_QMM_QMMA);
    CHECK(gk_qmm_choose(QUANT_F16, 64, 256, 1, &p) == IG_OK && p.path == GK_QMM_GEMV_F16);
    setenv("IGNITE_QMM_PATH", "fast", 1);
    fprintf(stderr, "(an IGNITE_QMM_PATH error is expected next)\n");
    CHECK(gk_qmm_check_env() == IG_E_USAGE);
    unsetenv("IGNITE_QMM_PATH");
    CHECK(gk_qmm_check_env() == IG_OK);
}

int main(void)
{
    uint64_t st = 0x1234567;
    for (size_t i = 0; i < N_TYPES; i++) {
        test_layout_and_rows(k_types[i], &st);
        test_gemv(k_types[i], &st);
        test_qmma(k_types[i], &st);
    }
    test_gemv_refusals();
    test_choose();
    return test_summary("test_qmm_emu");
}
