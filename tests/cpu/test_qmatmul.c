/* tests/cpu/test_qmatmul.c: the int8 matmul path. For Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, IQ4_NL, the K-quants, IQ4_XS and MXFP4 weights of random valid blocks
 * (MXFP4 also with scales the packed layout cannot hold: left unpacked)
 * and random activations (the K-quants and IQ4_XS also in the packed layout,
 * super-block by super-block):
 *  - ops_qmm_quantize: |x - d q| <= d / 2 per element, s = d * sum(q), d
 *    times the half sums, 8 and 16 times sum(q); a block with an inf or NaN
 *    gives d = s = dhs = NaN (no undefined conversion);
 *    the AVX2 quantizer byte for byte like the plain C one, ties, signed
 *    zeros, subnormals and huge values included;
 *  - the scalar tile kernel against an fp64 dot of the dequantized weight
 *    (quant_dequantize_row, checked against the gguf package elsewhere) and
 *    the dequantized activation, within 1e-5 of sum |w x|;
 *  - every SIMD kernel this CPU runs against the scalar kernel, same bound,
 *    for every tile shape (mr 1..2 x nt 1..4), and each tile shape against
 *    the 1 x 1 tile bit for bit (a token's result must not depend on the
 *    tile it lands in: prefill and decode then agree);
 *  - the 8-row prefill GEMM (repacked rows) of each ISA against the same
 *    reference, for 1..13 tokens, and that it writes only its 8 x nt outputs;
 *  - F32, F16 and BF16 weights through the float FMA GEMM (fast path, 8..130
 *    tokens, a ragged last row group) against fp64, and its 16-row form bit
 *    for bit like it, and so the kernels of their packed copy (16 rows a
 *    column, zero padding rows) for 1..21 tokens and row ranges that start
 *    or end inside a 16-row group;
 *  - the packed decode layout (ops_qmm_repack, 8 rows interleaved, a ragged
 *    last group) through each ISA's kernel for 1..13 tokens against the same
 *    reference, writing only its outputs, and bit for bit like the GEMM
 *    (which gives the same from the packed group as from the stored rows),
 *    and the 16-row GEMM of two packed groups bit for bit like it;
 *  - ops_matmul on a context (fast path, pool, token blocks of 1..130) against
 *    the same fp64 reference, ops_matmul_multi of two weights bit for bit
 *    like ops_matmul, and ops_ctx_set_exact switching the path off; again on
 *    a context holding a packed copy, where a token's result must also be
 *    the same for any number of tokens.
 * Guard values catch writes outside the tile. */
#include "core/half.h"
#include "core/status.h"
#include "models/model.h"
#include "models/quant.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/qmatmul.h"
#include "tests/cpu/random_weight.h"
#include "tests/test.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 37
#define MAX_T 130
#define SENTINEL -777.0f

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static const struct type_case cases[] = {
    {QUANT_Q4_0, 576, 1, {0}},
    {QUANT_Q4_1, 576, 2, {0, 2}},
    {QUANT_Q5_0, 640, 1, {0}},
    {QUANT_Q5_1, 576, 2, {0, 2}},
    {QUANT_Q8_0, 1536, 1, {0}},
    {QUANT_IQ4_NL, 576, 1, {0}},
    {QUANT_Q2_K, 512, 2, {80, 82}},
    {QUANT_Q3_K, 512, 1, {108}},
    {QUANT_Q4_K, 512, 2, {0, 2}},
    {QUANT_Q5_K, 768, 2, {0, 2}},
    {QUANT_Q6_K, 768, 1, {208}},
    {QUANT_IQ4_XS, 512, 1, {0}},
    {QUANT_MXFP4, 576, 0, {0}},
    {QUANT_MXFP4, 576, 1, {0}}, /* scales outside the packed layout's */
    /* rows of 80 blocks: the 16-row GEMM goes in chunks of 32, the last
     * ragged (ops/qmatmul_zmm.h), with offsets, a zero point, Q6_K's and
     * Q2_K's halves */
    {QUANT_Q4_K, 2560, 2, {0, 2}},
    {QUANT_Q4_0, 2560, 1, {0}},
    {QUANT_Q6_K, 2560, 1, {208}},
    {QUANT_Q2_K, 2560, 2, {80, 82}},
};

/* The 16-row GEMM (two packed groups a call, where an ISA has one) bit for
 * bit like the 8-row one on each of its groups, for token counts that take
 * every step size (8 at a time, then 4, 2, 1), writing only its 16 x nt
 * outputs. */
static void check_gemm16(const struct type_case *tc, const uint8_t *packed, size_t group_bytes,
                         int64_t nb, const struct qmm_q8 *xq, struct qmm_pack8 *pack)
{
    const char *name = quant_type_name(tc->type);
    enum { N16 = 31, LD = 17 };
    for (int isa = 0; isa < QMM_N_ISA; isa++) {
        qmm_gemm16_fn g16 = ops_qmm_gemm16_packed(tc->type, (enum qmm_isa)isa);
        qmm_gemm8_fn g8p = ops_qmm_gemm8_packed(tc->type, (enum qmm_isa)isa);
        if (!g16 || !ops_qmm_isa_runs((enum qmm_isa)isa))
            continue;
        CHECKF(g8p != NULL, "%s %s: a 16-row GEMM without an 8-row one", name,
               ops_qmm_isa_name((enum qmm_isa)isa));
        static const int64_t nts[] = {1, 2, 3, 5, 8, 13, N16};
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            int64_t n = nts[k];
            int outside = 0, diff = 0;
            for (int64_t r = 0; r + 16 <= ROWS; r += 8) { /* pairs from every group */
                float o16[N16 * LD], o8[2][N16 * 8];
                for (int i = 0; i < N16 * LD; i++)
                    o16[i] = SENTINEL;
                g16(packed + (size_t)(r / QMM_PR) * group_bytes, group_bytes, nb, xq, nb, n, o16,
                    LD, pack);
                for (int h = 0; h < 2; h++)
                    g8p(packed + (size_t)(r / QMM_PR + h) * group_bytes, 0, nb, xq, nb, n, o8[h],
                        8, pack);
                for (int64_t t = 0; t < N16; t++)
                    for (int j = 0; j < LD; j++) {
                        float v = o16[t * LD + j];
                        if (t >= n || j == 16) {
                            outside += v != SENTINEL;
                            continue;
                        }
                        float want = o8[j / 8][t * 8 + j % 8];
                        if (v != want && diff++ < 3)
                            fprintf(stderr, "%s gemm16 %s n=%lld row %lld tok %lld: %.9g but "
                                    "gemm8 gave %.9g\n", name,
                                    ops_qmm_isa_name((enum qmm_isa)isa), (long long)n,
                                    (long long)(r + j), (long long)t, v, want);
                    }
            }
            CHECKF(outside == 0, "%s gemm16 %s, %lld tokens: %d writes outside its outputs",
                   name, ops_qmm_isa_name((enum qmm_isa)isa), (long long)n, outside);
            CHECKF(diff == 0, "%s gemm16 %s, %lld tokens: %d outputs differ from gemm8", name,
                   ops_qmm_isa_name((enum qmm_isa)isa), (long long)n, diff);
        }
    }
}

/* Activations of very different scales per block, some zero blocks. */
static void make_x(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += QMM_QK) {
        float scale = (test_rand_u64(&rng_state) % 7 == 0) ? 0.0f : powf(10.0f, 3.0f * test_rand_f(&rng_state));
        for (int j = 0; j < QMM_QK; j++)
            x[i + j] = scale * test_rand_f(&rng_state);
    }
}

static void check_quantize(const float *x, int64_t cols, const struct qmm_q8 *q)
{
    int bad = 0;
    for (int64_t b = 0; b < cols / QMM_QK; b++) {
        int32_t sum = 0;
        for (int j = 0; j < QMM_QK; j++) {
            double e = fabs((double)x[b * QMM_QK + j] - (double)q[b].d * q[b].qs[j]);
            if (e > q[b].d * 0.5 * (1 + 1e-5) && bad++ < 3)
                fprintf(stderr, "quantize: block %lld elem %d: x %g d %g q %d\n", (long long)b,
                        j, x[b * QMM_QK + j], q[b].d, q[b].qs[j]);
            sum += q[b].qs[j];
        }
        if (q[b].s != q[b].d * (float)sum && bad++ < 3)
            fprintf(stderr, "quantize: block %lld: s %g != d * %d\n", (long long)b, q[b].s, sum);
        int32_t half = 0;
        for (int j = 0; j < QMM_QK / 2; j++)
            half += q[b].qs[j];
        if ((q[b].dhs[0] != q[b].d * (float)half || q[b].dhs[1] != q[b].d * (float)(sum - half)) &&
            bad++ < 3)
            fprintf(stderr, "quantize: block %lld: d half sums %g %g, want d * %d, d * %d\n",
                    (long long)b, q[b].dhs[0], q[b].dhs[1], half, sum - half);
        int32_t even = 0; /* the quants 4k and 4k + 1 */
        for (int j = 0; j < QMM_QK; j += 4)
            even += q[b].qs[j] + q[b].qs[j + 1];
        if ((q[b].sum8 != 8 * sum || q[b].sum16 != 16 * sum ||
             q[b].sum16_pairs[0] != 16 * even || q[b].sum16_pairs[1] != 16 * (sum - even)) &&
            bad++ < 3)
            fprintf(stderr, "quantize: block %lld: sum8 %d sum16 %d sum16_pairs %d %d, sums %d "
                    "%d\n", (long long)b, q[b].sum8, q[b].sum16, q[b].sum16_pairs[0],
                    q[b].sum16_pairs[1], even, sum - even);
    }
    CHECKF(bad == 0, "activation quantization: %d bad elements", bad);
}

/* A block holding an inf or NaN quantizes to d = s = NaN and zero quants
 * (the f32 product would be NaN) with no undefined int conversion; a NaN
 * after a larger finite value must not be lost. Its neighbour is unharmed. */
static void check_quantize_nonfinite(void)
{
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        float x[2 * QMM_QK];
        for (int j = 0; j < 2 * QMM_QK; j++)
            x[j] = (float)(j % 7) - 3.0f;
        x[0] = 100.0f; /* the NaN comes after the block's largest value */
        x[17] = bad[k];
        struct qmm_q8 q[2];
        memset(q, 0x5a, sizeof q);
        ops_qmm_quantize(x, 2 * QMM_QK, q);
        int nonzero = 0;
        for (int j = 0; j < QMM_QK; j++)
            nonzero += q[0].qs[j] != 0;
        CHECKF(isnan(q[0].d) && isnan(q[0].s) && isnan(q[0].dhs[0]) && isnan(q[0].dhs[1]) &&
                   nonzero == 0,
               "x[17] = %g: d %g s %g dhs %g %g, %d quants not 0", bad[k], q[0].d, q[0].s,
               q[0].dhs[0], q[0].dhs[1], nonzero);
        check_quantize(x + QMM_QK, QMM_QK, q + 1);
    }
}

/* ops_qmm_quantize (the AVX2 one where the CPU has it) against
 * ops_qmm_quantize_c, every byte: random blocks over twelve decades, blocks
 * of integers and half-integers times a power of two (x * id lands on
 * rounding ties), zeros of both signs (all-zero blocks end in either; an
 * all-zero block's d keeps the last zero's sign in the plain loop),
 * subnormals, the largest floats, and an inf or NaN at each position. */
static void check_quantize_same(void)
{
    enum { NB = 64 };
    float x[NB * QMM_QK];
    int same = 1;
    for (int round = 0; round < 40 && same; round++) {
        for (int b = 0; b < NB; b++) {
            float *xb = x + b * QMM_QK;
            int kind = (round * NB + b) % 6;
            float scale = powf(10.0f, 6.0f * test_rand_f(&rng_state));
            for (int j = 0; j < QMM_QK; j++) {
                float r = test_rand_f(&rng_state);
                xb[j] = kind == 0   ? scale * r
                        : kind == 1 ? ldexpf(floorf(254.0f * r) * 0.5f, b % 9 - 4)
                        : kind == 2 ? (r < 0 ? -0.0f : 0.0f)
                        : kind == 3 ? r * 1e-39f
                        : kind == 4 ? (r < 0 ? -FLT_MAX : FLT_MAX) * fabsf(r)
                                    : (j == 5 ? -0.0f : scale * r);
            }
            if (kind == 1 && b % 2)
                xb[b % QMM_QK] = 127.0f * ldexpf(1.0f, b % 9 - 4); /* amax exact: d = 2^k */
            if (kind == 5 && round % 4 == 1)
                xb[(round + b) % QMM_QK] = round % 8 == 1 ? NAN : (b % 2 ? INFINITY : -INFINITY);
        }
        struct qmm_q8 a[NB], c[NB];
        memset(a, 0x5a, sizeof a);
        memset(c, 0x5a, sizeof c);
        ops_qmm_quantize(x, NB * QMM_QK, a);
        ops_qmm_quantize_c(x, NB * QMM_QK, c);
        for (int b = 0; b < NB; b++)
            if (memcmp(&a[b], &c[b], sizeof a[b]) != 0) {
                CHECKF(0, "round %d block %d: ops_qmm_quantize (d %a s %a) differs from "
                       "ops_qmm_quantize_c (d %a s %a)", round, b, (double)a[b].d,
                       (double)a[b].s, (double)c[b].d, (double)c[b].s);
                same = 0;
                break;
            }
    }
    CHECKF(same, "the quantizers agree");
}

static void check_type(const struct type_case *tc, const struct model *model,
                       struct ops_ctx *ctx)
{
    const char *name = quant_type_name(tc->type);
    int64_t cols = tc->cols, nb = cols / QMM_QK;
    struct model_weight w = random_weight(tc, ROWS, &rng_state);
    float *x = malloc((size_t)(MAX_T * cols) * sizeof *x);
    struct qmm_q8 *xq = malloc((size_t)(MAX_T * nb) * sizeof *xq);
    float *wd = malloc((size_t)(ROWS * cols) * sizeof *wd);
    double *ref = malloc((size_t)(MAX_T * ROWS) * sizeof *ref);
    double *mag = malloc((size_t)(MAX_T * ROWS) * sizeof *mag);
    double *fref = malloc((size_t)(MAX_T * ROWS) * sizeof *fref); /* float-x reference */
    double *fmag = malloc((size_t)(MAX_T * ROWS) * sizeof *fmag);
    float *y = malloc((size_t)(MAX_T * ROWS) * sizeof *y);
    float *y1 = malloc((size_t)(2 * MAX_T * ROWS) * sizeof *y1);
    make_x(x, MAX_T * cols);
    for (int64_t t = 0; t < MAX_T; t++)
        ops_qmm_quantize(x + t * cols, cols, xq + t * nb);
    check_quantize(x, MAX_T * cols, xq);
    for (int64_t r = 0; r < ROWS; r++)
        quant_dequantize_row(tc->type, (const uint8_t *)w.data + r * w.row_bytes, wd + r * cols,
                             cols);
    for (int64_t t = 0; t < MAX_T; t++)
        for (int64_t r = 0; r < ROWS; r++) {
            double s = 0, m = 0, fs = 0, fm = 0;
            for (int64_t c = 0; c < cols; c++) {
                const struct qmm_q8 *b = &xq[t * nb + c / QMM_QK];
                double xv = (double)b->d * b->qs[c % QMM_QK];
                s += (double)wd[r * cols + c] * xv;
                m += fabs((double)wd[r * cols + c] * xv);
                fs += (double)wd[r * cols + c] * x[t * cols + c];
                fm += fabs((double)wd[r * cols + c] * x[t * cols + c]);
            }
            ref[t * ROWS + r] = s;
            mag[t * ROWS + r] = m;
            fref[t * ROWS + r] = fs;
            fmag[t * ROWS + r] = fm;
        }

    for (int isa = 0; isa < QMM_N_ISA; isa++) {
        qmm_tile_fn tile = ops_qmm_tile(tc->type, (enum qmm_isa)isa);
        if (!tile || !ops_qmm_isa_runs((enum qmm_isa)isa))
            continue;
        /* every tile shape, over a block of 8 tokens x the rows */
        for (int mr = 1; mr <= QMM_MR; mr++)
            for (int nt = 1; nt <= QMM_NT; nt++) {
                int bad = 0, diff = 0;
                for (int64_t r = 0; r + mr <= ROWS; r += mr)
                    for (int64_t t = 0; t + nt <= 8; t += nt) {
                        float out[QMM_NT][QMM_MR + 1];
                        for (int i = 0; i < QMM_NT; i++)
                            for (int j = 0; j <= QMM_MR; j++)
                                out[i][j] = SENTINEL;
                        tile((const uint8_t *)w.data + r * w.row_bytes, w.row_bytes, nb,
                             xq + t * nb, nb, mr, nt, &out[0][0], QMM_MR + 1);
                        for (int i = 0; i < QMM_NT; i++)
                            for (int j = 0; j <= QMM_MR; j++) {
                                bool inside = i < nt && j < mr;
                                if (!inside) {
                                    if (out[i][j] != SENTINEL && bad++ < 3)
                                        fprintf(stderr, "%s %s %dx%d: wrote outside the tile\n",
                                                name, ops_qmm_isa_name(isa), mr, nt);
                                    continue;
                                }
                                int64_t k = (t + i) * ROWS + r + j;
                                double e = fabs(out[i][j] - ref[k]);
                                if (e > 1e-5 * mag[k] + 1e-30 && bad++ < 3)
                                    fprintf(stderr, "%s %s %dx%d row %lld tok %lld: %.9g vs "
                                            "%.9g (err %.3g, bound %.3g)\n", name,
                                            ops_qmm_isa_name(isa), mr, nt, (long long)(r + j),
                                            (long long)(t + i), out[i][j], ref[k], e,
                                            1e-5 * mag[k]);
                                if (mr == 1 && nt == 1)
                                    y1[k] = out[i][j];
                                else if (out[i][j] != y1[k] && diff++ < 3)
                                    fprintf(stderr, "%s %s %dx%d row %lld tok %lld: %.9g but "
                                            "the 1x1 tile gave %.9g\n", name,
                                            ops_qmm_isa_name(isa), mr, nt, (long long)(r + j),
                                            (long long)(t + i), out[i][j], y1[k]);
                            }
                    }
                CHECKF(bad == 0, "%s %s tile %dx%d: %d outputs off the fp64 reference", name,
                       ops_qmm_isa_name(isa), mr, nt, bad);
                CHECKF(diff == 0, "%s %s tile %dx%d: %d outputs differ from the 1x1 tile", name,
                       ops_qmm_isa_name(isa), mr, nt, diff);
            }
    }

    /* the 8-row prefill GEMM, for every token count mod 4 */
    struct qmm_pack8 *pack = aligned_alloc(64, (size_t)(2 * nb) * sizeof *pack); /* gemm16's */
    for (int isa = 0; isa < QMM_N_ISA; isa++) {
        qmm_gemm8_fn g = ops_qmm_gemm8(tc->type, (enum qmm_isa)isa);
        if (!g || !ops_qmm_isa_runs((enum qmm_isa)isa))
            continue;
        static const int64_t nts[] = {1, 2, 3, 4, 8, 13};
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            int64_t n = nts[k];
            int bad = 0;
            for (int64_t r = 0; r + 8 <= ROWS; r += 8) {
                float out[13 * 9];
                for (int i = 0; i < 13 * 9; i++)
                    out[i] = SENTINEL;
                g((const uint8_t *)w.data + r * w.row_bytes, w.row_bytes, nb, xq, nb, n, out, 9,
                  pack);
                for (int64_t t = 0; t < 13; t++)
                    for (int j = 0; j < 9; j++) {
                        float v = out[t * 9 + j];
                        if (t >= n || j == 8) {
                            if (v != SENTINEL && bad++ < 3)
                                fprintf(stderr, "%s gemm8 %s: wrote outside\n", name,
                                        ops_qmm_isa_name(isa));
                            continue;
                        }
                        int64_t q = t * ROWS + r + j;
                        if (fabs(v - ref[q]) > 1e-5 * mag[q] + 1e-30 && bad++ < 3)
                            fprintf(stderr, "%s gemm8 %s n=%lld row %lld tok %lld: %.9g vs %.9g\n",
                                    name, ops_qmm_isa_name(isa), (long long)n,
                                    (long long)(r + j), (long long)t, v, ref[q]);
                    }
            }
            CHECKF(bad == 0, "%s gemm8 %s, %lld tokens: %d outputs off", name,
                   ops_qmm_isa_name(isa), (long long)n, bad);
        }
    }
    /* the packed decode layout (8 rows interleaved, 37 rows: a ragged last
     * group) through every ISA's kernel: against the reference, only its
     * nr x nt outputs written, and bit for bit like the prefill GEMM */
    if (ops_qmm_packed_block_bytes(tc->type) != 0 && ops_qmm_packable(&w)) {
        size_t pbytes = ops_qmm_packed_bytes(tc->type, ROWS, cols);
        uint8_t *packed = malloc(pbytes);
        ops_qmm_repack(&w, 0, (ROWS + QMM_PR - 1) / QMM_PR, packed);
        size_t group_bytes = (size_t)nb * ops_qmm_packed_block_bytes(tc->type);
        for (int isa = 0; isa < QMM_N_ISA; isa++) {
            qmm_gemv8_fn g = ops_qmm_gemv8(tc->type, (enum qmm_isa)isa);
            if (!g || !ops_qmm_isa_runs((enum qmm_isa)isa))
                continue;
            qmm_gemm8_fn g8 = ops_qmm_gemm8(tc->type, (enum qmm_isa)isa);
            qmm_gemm8_fn g8p = ops_qmm_gemm8_packed(tc->type, (enum qmm_isa)isa);
            /* (Q4_K has a GEMM on its packed layout only) */
            CHECKF(!g8 || g8p, "%s %s: a packed GEMM where there is a GEMM", name,
                   ops_qmm_isa_name(isa));
            static const int64_t nts[] = {1, 2, 3, 4, 5, 8, 13};
            for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
                int64_t n = nts[k];
                int bad = 0, diff = 0;
                for (int64_t r = 0; r < ROWS; r += QMM_PR) {
                    int nr = ROWS - r < QMM_PR ? (int)(ROWS - r) : QMM_PR;
                    float out[13 * 9], o8[13 * 9];
                    for (int i = 0; i < 13 * 9; i++)
                        out[i] = SENTINEL;
                    g(packed + (size_t)(r / QMM_PR) * group_bytes, nb, xq, nb, n, nr, out, 9);
                    float o8p[13 * 9];
                    for (int i = 0; i < 13 * 9; i++)
                        o8p[i] = SENTINEL;
                    if (g8p && nr == QMM_PR) {
                        g8p(packed + (size_t)(r / QMM_PR) * group_bytes, 0, nb, xq, nb, n, o8p,
                            9, pack);
                        if (g8)
                            g8((const uint8_t *)w.data + r * w.row_bytes, w.row_bytes, nb, xq,
                               nb, n, o8, 9, pack);
                        else
                            memcpy(o8, o8p, sizeof o8);
                    }
                    for (int64_t t = 0; t < 13; t++)
                        for (int j = 0; j < 9; j++) {
                            float v = out[t * 9 + j];
                            if (t >= n || j >= nr) {
                                if (v != SENTINEL && bad++ < 3)
                                    fprintf(stderr, "%s gemv8 %s: wrote outside\n", name,
                                            ops_qmm_isa_name(isa));
                                if (o8p[t * 9 + j] != SENTINEL && bad++ < 3)
                                    fprintf(stderr, "%s packed gemm8 %s: wrote outside\n", name,
                                            ops_qmm_isa_name(isa));
                                continue;
                            }
                            int64_t q = t * ROWS + r + j;
                            if (fabs(v - ref[q]) > 1e-5 * mag[q] + 1e-30 && bad++ < 3)
                                fprintf(stderr, "%s gemv8 %s n=%lld row %lld tok %lld: %.9g vs "
                                        "%.9g\n", name, ops_qmm_isa_name(isa), (long long)n,
                                        (long long)(r + j), (long long)t, v, ref[q]);
                            if (g8p && nr == QMM_PR && o8p[t * 9 + j] != o8[t * 9 + j] &&
                                diff++ < 3)
                                fprintf(stderr, "%s gemm8 %s packed n=%lld row %lld tok %lld: "
                                        "%.9g but from stored rows %.9g\n", name,
                                        ops_qmm_isa_name(isa), (long long)n, (long long)(r + j),
                                        (long long)t, o8p[t * 9 + j], o8[t * 9 + j]);
                            if (g8p && nr == QMM_PR && v != o8[t * 9 + j] && diff++ < 3)
                                fprintf(stderr, "%s gemv8 %s n=%lld row %lld tok %lld: %.9g but "
                                        "gemm8 gave %.9g\n", name, ops_qmm_isa_name(isa),
                                        (long long)n, (long long)(r + j), (long long)t, v,
                                        o8[t * 9 + j]);
                        }
                }
                CHECKF(bad == 0, "%s gemv8 %s, %lld tokens: %d outputs off", name,
                       ops_qmm_isa_name(isa), (long long)n, bad);
                CHECKF(diff == 0, "%s gemv8 %s, %lld tokens: %d outputs differ from gemm8", name,
                       ops_qmm_isa_name(isa), (long long)n, diff);
            }
        }
        check_gemm16(tc, packed, group_bytes, nb, xq, pack);
        free(packed);
    }

    free(pack);

    /* through ops_matmul: the fast path, then exact; on a context with the
     * stored rows only, then on one that holds a packed copy of w (where its
     * result for a token must not depend on the number of tokens) */
    struct ops_ctx *pctx = NULL;
    CHECK(ops_ctx_create(model, 2, MAX_T, &pctx) == IG_OK && pctx);
    struct ops_packed *packed = NULL;
    CHECK(ops_packed_create(NULL, NULL, &packed) == IG_OK);
    CHECK(ops_packed_add(packed, &w, ops_ctx_pool(pctx)) == IG_OK);
    ops_ctx_set_packed(pctx, packed);
    bool has_packed = ops_packed_find(packed, &w) != NULL;
    CHECKF(has_packed == (ops_qmm_best_isa() != QMM_SCALAR &&
                          ops_qmm_gemv8(tc->type, ops_qmm_best_isa()) != NULL &&
                          ops_qmm_packable(&w)),
           "%s: a packed copy exactly where the ISA has a packed kernel", name);
    float first[ROWS];
    static const int64_t token_counts[] = {1, 2, 3, 5, 64, 65, 130};
    for (size_t run = 0; run < 2 * sizeof token_counts / sizeof token_counts[0]; run++) {
        size_t i = run % (sizeof token_counts / sizeof token_counts[0]);
        int64_t n = token_counts[i];
        if (run == sizeof token_counts / sizeof token_counts[0])
            ctx = pctx;
        if (ctx == pctx && has_packed) {
            ops_ctx_set_exact(ctx, false);
            ops_matmul(ctx, &w, x, n, y);
            if (n == 1)
                memcpy(first, y, sizeof first);
            CHECKF(memcmp(first, y, sizeof first) == 0,
                   "%s packed: token 0 of %lld differs from the one-token result", name,
                   (long long)n);
        }
        ops_ctx_set_exact(ctx, false);
        CHECKF(ops_qmatmul_handles(ctx, &w, n), "%s: the fast path takes %lld tokens", name,
               (long long)n);
        ops_matmul(ctx, &w, x, n, y);
        int bad = 0;
        for (int64_t k = 0; k < n * ROWS; k++) {
            double e = fabs(y[k] - ref[k]);
            if (e > 1e-5 * mag[k] + 1e-30 && bad++ < 3)
                fprintf(stderr, "%s ops_matmul n=%lld out %lld: %.9g vs %.9g\n", name,
                        (long long)n, (long long)k, y[k], ref[k]);
        }
        CHECKF(bad == 0, "%s ops_matmul fast, %lld tokens: %d outputs off", name, (long long)n,
               bad);
        /* two weights in one job (37 rows each: chunks cross between them) */
        const struct model_weight *ws[2] = {&w, &w};
        float *ys[2] = {y1, y1 + n * ROWS};
        ops_matmul_multi(ctx, 2, ws, x, n, ys);
        CHECKF(memcmp(y1, y, (size_t)(n * ROWS) * sizeof *y) == 0 &&
                   memcmp(y1 + n * ROWS, y, (size_t)(n * ROWS) * sizeof *y) == 0,
               "%s ops_matmul_multi, %lld tokens: differs from ops_matmul", name, (long long)n);
        /* tokens quantized by the caller, in two uneven parts (as the rows
         * steps of a layer do on their threads), then the matmul on them */
        CHECKF(ops_qmatmul_quantizes(ctx, 1, ws, n), "%s: quantizes x for %lld tokens", name,
               (long long)n);
        int64_t half = n / 3;
        memset(ops_ctx_qbuf(ctx), 0xff, (size_t)(n * nb) * sizeof(struct qmm_q8));
        memset(y1, 0xff, (size_t)(n * ROWS) * sizeof *y1); /* NaNs: every output written */
        ops_qmatmul_quantize_rows(ctx, x + half * cols, cols, half, n);
        ops_qmatmul_quantize_rows(ctx, x, cols, 0, half);
        ops_qmatmul_multi_q8(ctx, 1, ws, x, n, ys);
        CHECKF(memcmp(y1, y, (size_t)(n * ROWS) * sizeof *y) == 0,
               "%s ops_qmatmul_multi_q8, %lld tokens: differs from ops_matmul", name,
               (long long)n);
        ops_ctx_set_exact(ctx, true);
        CHECK(!ops_qmatmul_handles(ctx, &w, n));
        ops_matmul(ctx, &w, x, n, y);
        bad = 0;
        for (int64_t k = 0; k < n * ROWS; k++)
            if (fabs(y[k] - fref[k]) > 1e-5 * fmag[k] + 1e-30 && bad++ < 3)
                fprintf(stderr, "%s ops_matmul exact n=%lld out %lld: %.9g vs %.9g\n", name,
                        (long long)n, (long long)k, y[k], fref[k]);
        CHECKF(bad == 0, "%s ops_matmul exact, %lld tokens: %d outputs off", name, (long long)n,
               bad);
    }
    ops_ctx_free(pctx);
    ops_packed_free(packed);
    free(y1);
    free(y);
    free(fmag);
    free(fref);
    free(mag);
    free(ref);
    free(wd);
    free(xq);
    free(x);
    free((void *)w.data);
}

/* The packed float copy (ops_qmm_repack: 16 rows a column, a ragged last
 * group) through each ISA's kernel that this CPU runs, bit for bit like
 * fgemm8 on the stored rows: one token step straight from the copy (1-8
 * tokens, several groups at once) and longer ones through its conversion
 * (9, 13, 21), over row ranges starting at either half of a group and
 * ending inside one, writing only their (r1 - r0) x nt outputs. */
static void check_float_packed(const struct model_weight *w, const float *x)
{
    enum { NT = 21, LD = ROWS + 3 };
    const int64_t cols = w->cols;
    const char *name = quant_type_name(w->type);
    size_t bytes = ops_qmm_packed_bytes(w->type, ROWS, cols);
    CHECKF(bytes == (size_t)((ROWS + 15) / 16 * 16 * cols) * (w->type == QUANT_F32 ? 4 : 2),
           "%s: %zu packed bytes", name, bytes);
    uint8_t *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memset(packed, 0xa5, bytes); /* the padding rows must be written as zeros */
    ops_qmm_repack(w, 0, (ROWS + QMM_PR - 1) / QMM_PR, packed);
    float *scratch = aligned_alloc(64, (size_t)(16 * cols) * sizeof *scratch);
    float *want = malloc((size_t)(NT * ROWS) * sizeof *want);
    float *got = malloc((size_t)(NT * LD) * sizeof *got);
    float *pack8 = aligned_alloc(64, (size_t)(8 * cols) * sizeof *pack8);
    qmm_fgemm8_fn f8 = ops_qmm_fgemm8(w->type);
    for (int64_t r = 0; f8 && r < ROWS; r += 8)
        f8(w->type, (const uint8_t *)w->data + r * w->row_bytes, w->row_bytes,
           ROWS - r < 8 ? (int)(ROWS - r) : 8, cols, x, cols, NT, want + r, ROWS, pack8);
    static qmm_fgemm_packed_fn (*const kernels[])(void) = {ops_qmm_fgemm_packed_avx2,
                                                           ops_qmm_fgemm_packed_vnni};
    static const enum qmm_isa isas[] = {QMM_AVX2, QMM_VNNI};
    static const int64_t counts[] = {1, 2, 3, 4, 5, 8, 9, 13, 21};
    static const int64_t ranges[][2] = {{0, ROWS}, {8, ROWS}, {0, 24}, {8, 32}, {16, 21}};
    int pad = 0;
    for (int64_t i = 0; i < (ROWS + 15) / 16 * 16 * cols; i++)
        if (i / (16 * cols) * 16 + i % 16 >= ROWS) /* group i / (16 cols), lane i % 16 */
            pad += w->type == QUANT_F32 ? ((const uint32_t *)(const void *)packed)[i] != 0
                                        : ((const uint16_t *)(const void *)packed)[i] != 0;
    CHECKF(pad == 0, "%s packed: %d padding values not zero", name, pad);
    for (size_t k = 0; f8 && k < sizeof kernels / sizeof kernels[0]; k++) {
        qmm_fgemm_packed_fn f = kernels[k]();
        if (!f || !ops_qmm_isa_runs(isas[k]))
            continue;
        int diff = 0, outside = 0;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (size_t q = 0; q < sizeof ranges / sizeof ranges[0]; q++) {
                int64_t nt = counts[c], r0 = ranges[q][0], r1 = ranges[q][1];
                for (int64_t i = 0; i < NT * LD; i++)
                    got[i] = SENTINEL;
                f(w->type, packed, cols, r0, r1, x, cols, nt, got, LD, scratch);
                for (int64_t t = 0; t < NT; t++)
                    for (int64_t j = 0; j < LD; j++) {
                        float v = got[t * LD + j];
                        if (t >= nt || j >= r1 - r0)
                            outside += v != SENTINEL;
                        else if (v != want[t * ROWS + r0 + j] && diff++ < 3)
                            fprintf(stderr, "%s packed %s rows %lld-%lld, %lld tokens: row "
                                    "%lld tok %lld: %.9g but fgemm8 gave %.9g\n", name,
                                    ops_qmm_isa_name(isas[k]), (long long)r0, (long long)r1,
                                    (long long)nt, (long long)(r0 + j), (long long)t, v,
                                    want[t * ROWS + r0 + j]);
                    }
            }
        CHECKF(outside == 0, "%s packed %s: %d writes outside its outputs", name,
               ops_qmm_isa_name(isas[k]), outside);
        CHECKF(diff == 0, "%s packed %s: %d outputs differ from fgemm8", name,
               ops_qmm_isa_name(isas[k]), diff);
    }
    free(pack8);
    free(got);
    free(want);
    free(scratch);
    free(packed);
}

/* F32, F16 and BF16 weights through the FMA GEMM (prefill sizes) against
 * an fp64 dot of the stored values, 1e-5 of sum |w x|. */
static void check_float_type(enum quant_type type, struct ops_ctx *ctx)
{
    const int64_t cols = 576;
    struct model_weight w = {type, ROWS, cols, quant_row_bytes(type, cols), NULL, 1, NULL};
    uint8_t *p = malloc(w.row_bytes * ROWS);
    float *wd = malloc((size_t)(ROWS * cols) * sizeof *wd);
    for (int64_t i = 0; i < ROWS * cols; i++) {
        float v = test_rand_f(&rng_state);
        if (type == QUANT_F32) {
            ((float *)(void *)p)[i] = v;
        } else if (type == QUANT_F16) {
            ((ig_f16 *)(void *)p)[i] = ig_f32_to_f16(v);
            v = ig_f16_to_f32(ig_f32_to_f16(v));
        } else {
            ((ig_bf16 *)(void *)p)[i] = ig_f32_to_bf16(v);
            v = ig_bf16_to_f32(ig_f32_to_bf16(v));
        }
        wd[i] = v;
    }
    w.data = p;
    float *x = malloc((size_t)(MAX_T * cols) * sizeof *x);
    float *y = malloc((size_t)(MAX_T * ROWS) * sizeof *y);
    make_x(x, MAX_T * cols);
    ops_ctx_set_exact(ctx, false);
    bool fast = ops_qmm_best_isa() != QMM_SCALAR;
    CHECKF(ops_qmatmul_handles(ctx, &w, 64) == fast, "%s: fast path for 64 tokens",
           quant_type_name(type));
    const struct model_weight *ws[1] = {&w};
    CHECKF(!ops_qmatmul_quantizes(ctx, 1, ws, 64), "%s: float weights read x unquantized",
           quant_type_name(type));
    /* the 16-row GEMM, where there is one, bit for bit like the 8-row one on
     * each group, for every remainder of its 8-token steps, writing only its
     * 16 x nt outputs */
    qmm_fgemm16_fn f16 = ops_qmm_fgemm16(type);
    if (f16) {
        enum { NT16 = 13, LD = 17 };
        float *pack = aligned_alloc(64, (size_t)(16 * cols) * sizeof *pack);
        int outside = 0, diff = 0;
        for (int64_t n = 1; n <= NT16; n++)
            for (int64_t r = 0; r + 16 <= ROWS; r += 8) {
                float o16[NT16 * LD], o8[2][NT16 * 8];
                for (int i = 0; i < NT16 * LD; i++)
                    o16[i] = SENTINEL;
                f16(type, p + r * w.row_bytes, w.row_bytes, cols, x, cols, n, o16, LD, pack);
                for (int h = 0; h < 2; h++)
                    ops_qmm_fgemm8(type)(type, p + (r + 8 * h) * w.row_bytes, w.row_bytes, 8,
                                         cols, x, cols, n, o8[h], 8, pack);
                for (int64_t t = 0; t < NT16; t++)
                    for (int j = 0; j < LD; j++) {
                        float v = o16[t * LD + j];
                        if (t >= n || j == 16)
                            outside += v != SENTINEL;
                        else if (v != o8[j / 8][t * 8 + j % 8] && diff++ < 3)
                            fprintf(stderr, "%s fgemm16 n=%lld row %lld tok %lld: %.9g but "
                                    "fgemm8 gave %.9g\n", quant_type_name(type), (long long)n,
                                    (long long)(r + j), (long long)t, v,
                                    o8[j / 8][t * 8 + j % 8]);
                    }
            }
        CHECKF(outside == 0, "%s fgemm16: %d writes outside its outputs", quant_type_name(type),
               outside);
        CHECKF(diff == 0, "%s fgemm16: %d outputs differ from fgemm8", quant_type_name(type),
               diff);
        free(pack);
    }
    check_float_packed(&w, x);
    static const int64_t token_counts[] = {8, 9, 15, 64, 130};
    for (size_t k = 0; k < sizeof token_counts / sizeof token_counts[0]; k++) {
        int64_t n = token_counts[k];
        ops_matmul(ctx, &w, x, n, y);
        int bad = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < ROWS; r++) {
                double s = 0, m = 0;
                for (int64_t c = 0; c < cols; c++) {
                    s += (double)wd[r * cols + c] * x[t * cols + c];
                    m += fabs((double)wd[r * cols + c] * x[t * cols + c]);
                }
                if (fabs(y[t * ROWS + r] - s) > 1e-5 * m + 1e-30 && bad++ < 3)
                    fprintf(stderr, "%s n=%lld row %lld tok %lld: %.9g vs %.9g\n",
                            quant_type_name(type), (long long)n, (long long)r, (long long)t,
                            y[t * ROWS + r], s);
            }
        CHECKF(bad == 0, "%s float GEMM, %lld tokens: %d outputs off", quant_type_name(type),
               (long long)n, bad);
    }
    free(y);
    free(x);
    free(wd);
    free(p);
}

/* Q5_0 at the int16 limits of the AVX2 sums: quants all 31 or all 0
 * against activations all +-127 wrap each lane's int16 sum of q x (16 * 31 *
 * 127), where the sum less the zero point fits (minus_pairs16). With d = 1
 * and integer activations every product and sum is exact in f32, so each
 * ISA's GEMV and GEMMs must give the integers: 6 tokens, one assembly step
 * of 4 and two through the C loop. */
static void check_q5_0_extremes(void)
{
    enum { COLS = 64, NB = COLS / QMM_QK, NT = 6 };
    size_t rb = quant_row_bytes(QUANT_Q5_0, COLS);
    uint8_t *data = calloc(QMM_PR, rb);
    int q[QMM_PR][COLS];
    for (int r = 0; r < QMM_PR; r++)
        for (int c = 0; c < COLS; c++) {
            q[r][c] = r == 0   ? 31
                      : r == 1 ? 0
                      : r == 2 ? (c % 4 < 2 ? 31 : 0)
                      : r == 3 ? (c % 4 < 2 ? 0 : 31)
                               : (c * 7 + r * 5) % 32;
            struct block_q5_0 *b = (struct block_q5_0 *)(void *)(data + r * rb) + c / QMM_QK;
            int j = c % QMM_QK, lo = q[r][c] & 15, hi = q[r][c] >> 4;
            b->d = ig_f32_to_f16(1.0f);
            b->qs[j % 16] |= (uint8_t)(j < 16 ? lo : lo << 4);
            b->qh[j / 8] |= (uint8_t)(hi << (j % 8));
        }
    float w[COLS], x[NT * COLS];
    for (int r = 0; r < QMM_PR; r++) { /* the encoding, by the dequantizer */
        quant_dequantize_row(QUANT_Q5_0, data + r * rb, w, COLS);
        for (int c = 0; c < COLS; c++)
            CHECKF(w[c] == (float)(q[r][c] - 16), "q5_0 extremes: row %d col %d is %g", r, c,
                   (double)w[c]);
    }
    for (int t = 0; t < NT; t++)
        for (int c = 0; c < COLS; c++)
            x[t * COLS + c] = t == 0   ? 127.0f
                              : t == 1 ? -127.0f
                              : t == 2 ? (c % 4 < 2 ? 127.0f : -127.0f)
                              : t == 3 ? (c % 4 < 2 ? -127.0f : 127.0f)
                              : t == 4 ? (c % 2 ? 127.0f : -127.0f)
                                       : (float)(c % 32 == 0 ? 127 : (c * 37) % 255 - 127);
    struct qmm_q8 xq[NT * NB];
    for (int t = 0; t < NT; t++)
        ops_qmm_quantize(x + t * COLS, COLS, xq + t * NB);
    double want[NT][QMM_PR];
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < QMM_PR; r++) {
            int64_t sum = 0;
            for (int c = 0; c < COLS; c++)
                sum += (int64_t)(q[r][c] - 16) * (int64_t)x[t * COLS + c];
            want[t][r] = (double)sum;
        }
    struct model_weight mw = {QUANT_Q5_0, QMM_PR, COLS, rb, data, 1, NULL};
    uint8_t *packed = malloc(ops_qmm_packed_bytes(QUANT_Q5_0, QMM_PR, COLS));
    ops_qmm_repack(&mw, 0, 1, packed);
    struct qmm_pack8 *pack = aligned_alloc(64, NB * sizeof *pack);
    for (int isa = 0; isa < QMM_N_ISA; isa++) {
        if (!ops_qmm_isa_runs((enum qmm_isa)isa))
            continue;
        qmm_gemv8_fn gv = ops_qmm_gemv8(QUANT_Q5_0, (enum qmm_isa)isa);
        qmm_gemm8_fn gm = ops_qmm_gemm8(QUANT_Q5_0, (enum qmm_isa)isa);
        qmm_gemm8_fn gp = ops_qmm_gemm8_packed(QUANT_Q5_0, (enum qmm_isa)isa);
        float y[3][NT * QMM_PR];
        int ran[3] = {gv != NULL, gm != NULL, gp != NULL};
        if (gv)
            gv(packed, NB, xq, NB, NT, QMM_PR, y[0], QMM_PR);
        if (gm)
            gm(data, rb, NB, xq, NB, NT, y[1], QMM_PR, pack);
        if (gp)
            gp(packed, 0, NB, xq, NB, NT, y[2], QMM_PR, pack);
        int bad = 0;
        for (int k = 0; k < 3; k++)
            for (int t = 0; ran[k] && t < NT; t++)
                for (int r = 0; r < QMM_PR; r++)
                    if ((double)y[k][t * QMM_PR + r] != want[t][r] && bad++ < 3)
                        fprintf(stderr, "q5_0 extremes %s kernel %d: token %d row %d: %.9g, "
                                "want %.0f\n", ops_qmm_isa_name((enum qmm_isa)isa), k, t, r,
                                (double)y[k][t * QMM_PR + r], want[t][r]);
        CHECKF(bad == 0, "q5_0 extremes on %s: %d outputs off",
               ops_qmm_isa_name((enum qmm_isa)isa), bad);
    }
    free(pack);
    free(packed);
    free(data);
}

int main(void)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_embd = 1536;
    m.hp.n_ff = 2560; /* the widest case's columns */
    m.hp.n_head = m.hp.n_head_kv = 1;
    m.hp.head_dim = m.hp.n_rot = 64;
    m.hp.rope_base = 10000.0;
    model_hparams_set_defaults(&m.hp);
    struct ops_ctx *ctx;
    if (ops_ctx_create(&m, 2, MAX_T, &ctx) != IG_OK)
        return 1;
    printf("int8 kernels: best ISA here %s; checked:", ops_qmm_isa_name(ops_qmm_best_isa()));
    for (int isa = 0; isa < QMM_N_ISA; isa++)
        if (ops_qmm_isa_runs((enum qmm_isa)isa))
            printf(" %s", ops_qmm_isa_name((enum qmm_isa)isa));
    printf("\n");
    check_quantize_nonfinite();
    check_quantize_same();
    check_q5_0_extremes();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_type(&cases[i], &m, ctx);
    check_float_type(QUANT_F32, ctx);
    check_float_type(QUANT_F16, ctx);
    check_float_type(QUANT_BF16, ctx);
    ops_ctx_free(ctx);
    return test_summary("test_qmatmul");
}
