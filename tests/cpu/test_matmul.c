/* tests/cpu/test_matmul.c: ops_matmul over every weight type it reads, against
 * dequantize (quant_dequantize_row, itself checked against the gguf package)
 * then an fp64 dot product. Seeded random weights in valid block encodings,
 * ragged row counts, token counts on both sides of the fused-kernel limit and
 * of the token tile and block (1, 2, 3, 4, 5, 7, 64, 65, 130), on one thread
 * (ops_matmul_rows) and on the pool (which must agree bit for bit, as every
 * output is computed by one thread in a fixed order). Bound per output: 1e-5
 * of sum_c |w x| (so cancellation cannot hide an error). Guard bands catch
 * writes out of bounds. On the exact path and on the default int8 path
 * (packed weights in 8-row layouts: every quantized type here, Q2_K and
 * Q3_K through Q6_K's kernels, IQ4_NL through Q8_0's), a token's outputs do not
 * depend on how many tokens share the call (bit for bit): what lets a
 * request give the same logits in any batch. ctest also runs it with
 * IGNITE_SIMD=avxvnni, avx2 and scalar, so every ISA's kernels are held to it. */
#include "core/half.h"
#include "core/status.h"
#include "models/model.h"
#include "models/quant.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/qmatmul.h"
#include "tests/cpu/random_weight.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 32
#define SENTINEL -777.0f
#define ROWS 37

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

/* A type under test and the byte offsets of the f16 scales inside its block
 * (random bytes elsewhere are valid quants; scales must be finite). */
static const struct type_case cases[] = {
    {QUANT_F32, 203, 0, {0}}, /* not a multiple of the lane count: the tail path */
    {QUANT_F16, 200, 0, {0}},
    {QUANT_BF16, 200, 0, {0}},
    /* multiples of 32 columns: the int8 path's FMA GEMM (ops_qmm_fgemm8) */
    {QUANT_F32, 576, 0, {0}},
    {QUANT_F16, 1536, 0, {0}},
    {QUANT_BF16, 576, 0, {0}},
    {QUANT_Q4_0, 576, 1, {0}},
    {QUANT_Q4_1, 576, 2, {0, 2}},
    {QUANT_Q8_0, 1536, 1, {0}},
    {QUANT_Q5_0, 256, 1, {0}}, /* Q5_0, Q5_1, Q4_K, Q6_K: packed 8-row layouts */
    {QUANT_Q5_1, 256, 2, {0, 2}},
    {QUANT_Q2_K, 512, 2, {80, 82}},
    {QUANT_Q3_K, 512, 1, {108}},
    {QUANT_Q4_K, 512, 2, {0, 2}},
    {QUANT_Q5_K, 512, 2, {0, 2}},
    {QUANT_Q6_K, 512, 1, {208}},
    {QUANT_IQ4_NL, 576, 1, {0}}, /* as Q8_0 */
    {QUANT_IQ4_XS, 512, 1, {0}},
    {QUANT_MXFP4, 576, 0, {0}}, /* the generic path (quant_dequantize_row) */
};

/* An ops context sized for weights of `cols` columns; only hp matters. */
static struct model fake_model(int64_t cols)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_embd = m.hp.n_ff = cols;
    m.hp.n_head = m.hp.n_head_kv = 1;
    m.hp.head_dim = m.hp.n_rot = 64;
    m.hp.rope_base = 10000.0;
    model_hparams_set_defaults(&m.hp);
    return m;
}

static void check_type(const struct type_case *tc, struct ops_ctx *ctx)
{
    static const int64_t token_counts[] = {1, 2, 3, 4, 5, 7, 64, 65, 130};
    const int64_t max_t = 130, cols = tc->cols;
    struct model_weight w = random_weight(tc, ROWS, &rng_state);
    float *x = malloc((size_t)(max_t * cols) * sizeof *x);
    float *deq = malloc((size_t)(ROWS * cols) * sizeof *deq);
    float *y1 = malloc((size_t)(max_t * ROWS + 2 * GUARD) * sizeof *y1);
    float *y2 = malloc((size_t)(max_t * ROWS + 2 * GUARD) * sizeof *y2);
    float *row_buf = malloc((size_t)(OPS_MATMUL_ROW_BUFS * cols) * sizeof *row_buf);
    for (int64_t i = 0; i < max_t * cols; i++)
        x[i] = test_rand_f(&rng_state);
    for (int64_t r = 0; r < ROWS; r++)
        quant_dequantize_row(tc->type, (const uint8_t *)w.data + r * w.row_bytes,
                             deq + r * cols, cols);

    for (size_t k = 0; k < sizeof token_counts / sizeof token_counts[0]; k++) {
        int64_t nt = token_counts[k];
        for (int64_t i = 0; i < nt * ROWS + 2 * GUARD; i++)
            y1[i] = y2[i] = SENTINEL;
        ops_matmul_rows(&w, 0, ROWS, x, nt, y1 + GUARD, row_buf);
        ops_matmul(ctx, &w, x, nt, y2 + GUARD);

        int bad = 0, same = 1, guard_ok = 1;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < ROWS; r++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    double pr = (double)deq[r * cols + c] * x[t * cols + c];
                    ref += pr;
                    mag += fabs(pr);
                }
                float got = y1[GUARD + t * ROWS + r];
                same &= got == y2[GUARD + t * ROWS + r];
                if (!(fabs(got - ref) <= 1e-5 * mag) && bad++ < 3)
                    fprintf(stderr, "  %s, %lld tokens: y[%lld][%lld] = %.7g, want %.7g\n",
                            quant_type_name(tc->type), (long long)nt, (long long)t,
                            (long long)r, got, ref);
            }
        for (int64_t i = 0; i < GUARD; i++)
            guard_ok &= y1[i] == SENTINEL && y2[i] == SENTINEL &&
                        y1[GUARD + nt * ROWS + i] == SENTINEL &&
                        y2[GUARD + nt * ROWS + i] == SENTINEL;
        CHECKF(bad == 0, "%s, %lld tokens: %d outputs off", quant_type_name(tc->type),
               (long long)nt, bad);
        CHECKF(same, "%s, %lld tokens: threaded result differs", quant_type_name(tc->type),
               (long long)nt);
        CHECKF(guard_ok, "%s, %lld tokens: write outside y", quant_type_name(tc->type),
               (long long)nt);
    }
    free(row_buf);
    free(y2);
    free(y1);
    free(deq);
    free(x);
    free((void *)w.data);
}

/* Each token of a call of nt tokens against the same token alone, on the
 * exact path or on the int8 path, where the weight is packed as a model's
 * are (ops_packed_add: the GEMV and the 8-token GEMM then read the same
 * copy and sum alike). */
static void check_token_invariance(const struct type_case *tc, bool exact)
{
    static const int64_t counts[] = {2, 5, 8, 9, 130};
    const int64_t max_t = 130, cols = tc->cols;
    struct model m = fake_model(1536);
    struct ops_ctx *ctx;
    CHECK(ops_ctx_create(&m, 2, max_t, &ctx) == IG_OK);
    ops_ctx_set_exact(ctx, exact);
    struct model_weight w = random_weight(tc, ROWS, &rng_state);
    struct ops_packed *packed = NULL;
    CHECK(ops_packed_create(NULL, NULL, &packed) == IG_OK);
    CHECK(exact || ops_packed_add(packed, &w, ops_ctx_pool(ctx)) == IG_OK);
    ops_ctx_set_packed(ctx, packed);
    float *x = malloc((size_t)(max_t * cols) * sizeof *x);
    float *alone = malloc((size_t)(max_t * ROWS) * sizeof *alone);
    float *y = malloc((size_t)(max_t * ROWS) * sizeof *y);
    for (int64_t i = 0; i < max_t * cols; i++)
        x[i] = test_rand_f(&rng_state);
    for (int64_t t = 0; t < max_t; t++)
        ops_matmul(ctx, &w, x + t * cols, 1, alone + t * ROWS);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int64_t nt = counts[k];
        ops_matmul(ctx, &w, x, nt, y);
        CHECKF(!memcmp(y, alone, (size_t)(nt * ROWS) * sizeof *y), "%s path, %s: a token among "
               "%lld differs from the same token alone", exact ? "exact" : "int8",
               quant_type_name(tc->type), (long long)nt);
    }
    free(y);
    free(alone);
    free(x);
    free((void *)w.data);
    ops_ctx_free(ctx);
    ops_packed_free(packed);
}

int main(void)
{
    struct model m = fake_model(1536);
    struct ops_ctx *ctx;
    if (ops_ctx_create(&m, 2, 1, &ctx) != IG_OK)
        return 1;
    /* check_type holds ops_matmul to ops_matmul_rows, the exact kernels, bit for
     * bit: the exact path whatever IGNITE_MATMUL says */
    ops_ctx_set_exact(ctx, true);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_type(&cases[i], ctx);
    ops_ctx_free(ctx);
    for (int exact = 0; exact < 2; exact++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            check_token_invariance(&cases[i], exact);
    return test_summary("test_matmul");
}
