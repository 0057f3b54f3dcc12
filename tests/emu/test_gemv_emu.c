/* tests/emu/test_gemv_emu.c: the decode GEMV kernel (ops/gpu_gemv.cu) run by
 * the CPU emulator against its CPU twin (gk_gemv_f16_ref), and the twin
 * against an independent f64 sum: rows 1, 7, 33, 576 x cols 8, 64, 576,
 * 1544, 4104 (not multiples of the 256-column warp step), beta 0 (y poisoned
 * with NaN: never read) and 1. Guard elements after y must stay untouched.
 * The gate|up GEMV with SwiGLU/GeGLU in its epilogue (gk_gemv_f16_glu): the
 * bits of the GEMV then the element-wise kernel, n_ff 1, 7, 33, 288; the
 * residual GEMV with the next RMSNorm in its last block (gk_gemv_f16_norm):
 * the bits of the GEMV then gk_rmsnorm, twice (its ticket back to 0), also
 * at 12288 columns, where x's 48 KiB and the tail's static shared memory
 * pass the default limit (the emulator faults unless the launch raised it:
 * a GPU refuses the launch); the
 * Q|K|V GEMV with bias, RoPE and the pool write in its epilogue
 * (gk_gemv_f16_rope): the bits of the GEMV then gk_qkv_rope.
 * Under IGNITE_PDL=1 (run_pdl) the GEMV with beta 1 and the norm tail's GEMV
 * keep the plain launch's bits with x and y hidden until their wait
 * (tests/emu/pdl_hide.h).
 * Tolerance: f32 summation order, 2e-6 * cols^(1/2)... bounded by
 * 1e-5 * sum |w x|. Label emu. */
#include <stddef.h> /* gpu_ops.h uses size_t without including it */

#include "ops/gpu_ops.h"
#include "tests/test.h"
#include "tests/emu/pdl_hide.h"
#include "tests/emu/rope_case.h"

#include "core/half.h"

#include <stdlib.h>
#include <string.h>

enum { GUARD = 8 };
static const float guard_value = 12345.5f;

static void run_case(int64_t rows, int64_t cols, float beta, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 7;
    uint16_t *w = aligned_alloc(16, (size_t)(rows * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    float *y = malloc((size_t)(rows + GUARD) * sizeof(float));
    float *y0 = malloc((size_t)rows * sizeof(float)), *y_ref = malloc((size_t)rows * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t r = 0; r < rows; r++)
        y0[r] = beta != 0 ? 4.0f * test_rand_f(&rng) : NAN;
    memcpy(y, y0, (size_t)rows * sizeof(float));
    memcpy(y_ref, y0, (size_t)rows * sizeof(float));
    for (int i = 0; i < GUARD; i++)
        y[rows + i] = guard_value;

    CHECKF(gk_gemv_f16_emu(w, x, y, rows, cols, beta, NULL) == 0, "rows=%lld cols=%lld: launch",
           (long long)rows, (long long)cols);
    gk_gemv_f16_ref(w, x, y_ref, rows, cols, beta);

    int bad_kernel = 0, bad_ref = 0, bad_guard = 0;
    for (int64_t r = 0; r < rows; r++) {
        double exact = beta != 0 ? (double)y0[r] : 0, mag = beta != 0 ? fabs(y0[r]) : 0;
        for (int64_t c = 0; c < cols; c++) {
            const double t = (double)ig_f16_to_f32(w[r * cols + c]) * ig_f16_to_f32(x[c]);
            exact += t;
            mag += fabs(t);
        }
        if (!(fabs((double)y[r] - y_ref[r]) <= 1e-5 * mag + 1e-30) && bad_kernel++ < 3)
            fprintf(stderr, "rows=%lld cols=%lld beta=%g: y[%lld] kernel %.9g ref %.9g\n",
                    (long long)rows, (long long)cols, beta, (long long)r, y[r], y_ref[r]);
        if (!(fabs((double)y_ref[r] - exact) <= 1e-7 * fabs(exact) + 1e-30) && bad_ref++ < 3)
            fprintf(stderr, "rows=%lld cols=%lld: ref %.9g exact %.12g\n", (long long)rows,
                    (long long)cols, y_ref[r], exact);
    }
    for (int i = 0; i < GUARD; i++)
        bad_guard += y[rows + i] != guard_value;
    CHECKF(bad_kernel == 0, "rows=%lld cols=%lld beta=%g: %d rows off the twin", (long long)rows,
           (long long)cols, beta, bad_kernel);
    CHECKF(bad_ref == 0, "rows=%lld cols=%lld: %d twin rows off f64", (long long)rows,
           (long long)cols, bad_ref);
    CHECKF(bad_guard == 0, "rows=%lld cols=%lld: wrote past y", (long long)rows, (long long)cols);
    free(w), free(x), free(y), free(y0), free(y_ref);
}

/* The gate|up product with its activation (gk_gemv_f16_glu): the same bits
 * as the GEMV and then the element-wise kernel (gk_swiglu / gk_geglu), both
 * emulated, nothing written past h; the twin within f16 rounding of them. */
static void run_glu(int64_t n_ff, int64_t cols, int act, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 11;
    const int64_t rows = 2 * n_ff;
    uint16_t *w = aligned_alloc(16, (size_t)(rows * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    float *y = malloc((size_t)rows * sizeof(float));
    uint16_t *h = malloc((size_t)(n_ff + GUARD) * 2), *h_two = malloc((size_t)n_ff * 2);
    uint16_t *h_ref = malloc((size_t)n_ff * 2);
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t i = 0; i < n_ff + GUARD; i++)
        h[i] = 0x7e00u; /* NaN: every output must be written */
    const char *name = act == GK_GLU_GELU ? "geglu" : "swiglu";
    CHECKF(gk_gemv_f16_glu_emu(w, x, h, rows, cols, act, NULL) == 0, "%s %lld x %lld: launch",
           name, (long long)rows, (long long)cols);
    CHECK(gk_gemv_f16_emu(w, x, y, rows, cols, 0.0f, NULL) == 0);
    CHECK((act == GK_GLU_GELU ? gk_geglu_emu : gk_swiglu_emu)(y, 1, n_ff, h_two, NULL) == 0);
    gk_gemv_f16_glu_ref(w, x, h_ref, rows, cols, act);
    int64_t off_two = 0, off_ref = 0, guard = 0;
    for (int64_t i = 0; i < n_ff; i++) {
        off_two += h[i] != h_two[i];
        const double a = ig_f16_to_f32(h[i]), b = ig_f16_to_f32(h_ref[i]);
        off_ref += !(fabs(a - b) <= 2e-3 * fabs(b) + 1e-6);
    }
    for (int i = 0; i < GUARD; i++)
        guard += h[n_ff + i] != 0x7e00u;
    CHECKF(off_two == 0, "%s %lld x %lld: %lld outputs differ from GEMV + %s kernels", name,
           (long long)rows, (long long)cols, (long long)off_two, name);
    CHECKF(off_ref == 0, "%s %lld x %lld: %lld outputs off the twin", name, (long long)rows,
           (long long)cols, (long long)off_ref);
    CHECKF(guard == 0, "%s %lld x %lld: wrote past h", name, (long long)rows, (long long)cols);
    free(w), free(x), free(y), free(h), free(h_two), free(h_ref);
}

/* The residual GEMV with the next norm in its last block
 * (gk_gemv_f16_norm): y the bits of gk_gemv_f16 with beta 1, xn the bits of
 * gk_rmsnorm of that y, twice in a row (the ticket back to 0), rows over
 * several blocks (the last block must see the others' rows). */
static void run_norm(int64_t rows, int64_t cols, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 13;
    uint16_t *w = aligned_alloc(16, (size_t)(rows * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    float *y = aligned_alloc(16, (size_t)(rows * 4 + 15) / 16 * 16);
    float *y2 = aligned_alloc(16, (size_t)(rows * 4 + 15) / 16 * 16);
    float *nw = aligned_alloc(16, (size_t)(rows * 4 + 15) / 16 * 16);
    uint16_t *xn = malloc((size_t)(rows + GUARD) * 2), *xn2 = malloc((size_t)rows * 2);
    uint32_t ticket = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t r = 0; r < rows; r++) {
        y[r] = y2[r] = 4.0f * test_rand_f(&rng);
        nw[r] = 1.0f + 0.5f * test_rand_f(&rng);
    }
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < rows + GUARD; i++)
            xn[i] = 0x7e00u;
        CHECKF(gk_gemv_f16_norm_emu(w, x, y, rows, cols, nw, 1e-5f, xn, &ticket, NULL) == 0,
               "norm tail %lld x %lld: launch", (long long)rows, (long long)cols);
        CHECK(gk_gemv_f16_emu(w, x, y2, rows, cols, 1.0f, NULL) == 0);
        CHECK(gk_rmsnorm_emu(y2, rows, nw, 1, rows, 1e-5f, xn2, NULL) == 0);
        int64_t off_y = 0, off_n = 0, guard = 0;
        for (int64_t r = 0; r < rows; r++) {
            off_y += memcmp(&y[r], &y2[r], 4) != 0;
            off_n += xn[r] != xn2[r];
        }
        for (int i = 0; i < GUARD; i++)
            guard += xn[rows + i] != 0x7e00u;
        CHECKF(off_y == 0 && off_n == 0, "norm tail %lld x %lld, launch %d: %lld residuals and "
               "%lld normalized elements differ from the GEMV + gk_rmsnorm", (long long)rows,
               (long long)cols, rep, (long long)off_y, (long long)off_n);
        CHECKF(ticket == 0 && guard == 0, "norm tail %lld x %lld: ticket %u left, %lld written "
               "past xn", (long long)rows, (long long)cols, ticket, (long long)guard);
    }
    free(w), free(x), free(y), free(y2), free(nw), free(xn), free(xn2);
}

/* The one-row Q|K|V GEMV with bias, RoPE and the pool write in its
 * epilogue (gk_gemv_f16_rope): the bits of gk_gemv_f16 then gk_qkv_rope. */
static void run_rope(int style, int64_t n_rot, bool bias, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 17;
    const int64_t cols = 136;
    uint16_t *w = aligned_alloc(16, (size_t)(RC_ROWS * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    float *y = malloc(RC_ROWS * 4);
    for (int64_t i = 0; i < RC_ROWS * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    struct rope_case c;
    rope_case_init(&c, &rng);
    struct gk_qkv_params fused = rope_case_params(&c, 0, 1, style, n_rot, bias);
    struct gk_qkv_params plain = rope_case_params(&c, 1, 1, style, n_rot, bias);
    plain.qkv = y;
    c.pos[0] = 70; /* the table's second block */
    CHECKF(gk_gemv_f16_rope_emu(w, x, RC_ROWS, cols, &fused, NULL) == 0, "rope: launch");
    CHECK(gk_gemv_f16_emu(w, x, y, RC_ROWS, cols, 0.0f, NULL) == 0 &&
          gk_qkv_rope_emu(&plain, NULL) == 0);
    char what[80];
    snprintf(what, sizeof what, "f16 Q|K|V GEMV + RoPE, style %d, n_rot %lld%s", style,
             (long long)n_rot, bias ? ", bias" : "");
    rope_case_check(&c, 1, what);
    rope_case_free(&c);
    free(w), free(x), free(y);
}

/* As a programmatic dependent launch with x and y (beta 1: an input, in
 * place) hidden from each block until its wait: the plain launch's y bit for
 * bit, and with the norm tail its normalized row; every block hidden. */
static void run_pdl(int64_t rows, int64_t cols, bool norm, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 19;
    uint16_t *w = aligned_alloc(16, (size_t)(rows * cols * 2 + 15) / 16 * 16);
    uint16_t *x = aligned_alloc(16, (size_t)(cols * 2 + 15) / 16 * 16);
    const size_t yb = (size_t)(rows * 4 + 15) / 16 * 16;
    float *y0 = aligned_alloc(16, yb), *y = aligned_alloc(16, yb), *y2 = aligned_alloc(16, yb);
    float *nw = aligned_alloc(16, yb);
    uint16_t *xn = malloc((size_t)rows * 2), *xn2 = malloc((size_t)rows * 2);
    uint32_t ticket = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = ig_f32_to_f16(test_rand_f(&rng));
    for (int64_t i = 0; i < cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int64_t r = 0; r < rows; r++) {
        y0[r] = 4.0f * test_rand_f(&rng);
        nw[r] = 1.0f + 0.5f * test_rand_f(&rng);
    }
    memcpy(y2, y0, (size_t)rows * 4);
    CHECK((norm ? gk_gemv_f16_norm_emu(w, x, y2, rows, cols, nw, 1e-5f, xn2, &ticket, NULL)
                : gk_gemv_f16_emu(w, x, y2, rows, cols, 1.0f, NULL)) == 0);
    memcpy(y, y0, (size_t)rows * 4);
    struct pdl_hide h = {0};
    pdl_hide_add(&h, x, (size_t)cols * 2);
    pdl_hide_add(&h, y, (size_t)rows * 4);
    pdl_hide_on(&h);
    int rc = norm ? gk_gemv_f16_norm_emu(w, x, y, rows, cols, nw, 1e-5f, xn, &ticket, NULL)
                  : gk_gemv_f16_emu(w, x, y, rows, cols, 1.0f, NULL);
    pdl_hide_off(&h);
    const int64_t blocks = (rows + 15) / 16;
    CHECKF(rc == 0 && h.hides == blocks && h.shows == blocks, "f16 GEMV pdl %lld x %lld: rc %d, "
           "%d of %lld blocks hidden, %d shown", (long long)rows, (long long)cols, rc, h.hides,
           (long long)blocks, h.shows);
    CHECKF(memcmp(y, y2, (size_t)rows * 4) == 0 &&
           (!norm || memcmp(xn, xn2, (size_t)rows * 2) == 0),
           "f16 GEMV pdl %lld x %lld%s: differs from the plain launch", (long long)rows,
           (long long)cols, norm ? " (norm tail)" : "");
    free(w), free(x), free(y0), free(y), free(y2), free(nw), free(xn), free(xn2);
}

int main(void)
{
    static const int64_t rows[] = {1, 7, 33, 576};
    static const int64_t cols[] = {8, 64, 576, 1544, 4104};
    uint64_t seed = 1;
    for (int ri = 0; ri < 4; ri++)
        for (int ci = 0; ci < 5; ci++)
            for (int b = 0; b < 2; b++)
                run_case(rows[ri], cols[ci], (float)b, seed++);
    static const int64_t ffs[] = {1, 7, 33, 288};
    for (int fi = 0; fi < 4; fi++)
        for (int act = GK_GLU_SILU; act <= GK_GLU_GELU; act++)
            run_glu(ffs[fi], fi % 2 ? 1544 : 64, act, seed++);
    run_norm(576, 64, seed++);   /* 36 blocks; the norm's vector path */
    run_norm(33, 1544, seed++);  /* 3 blocks; 33 elements: the scalar path */
    run_norm(16, 12288, seed++); /* x 48 KiB + the tail's static: needs IG_SMEM_OPTIN */
    run_rope(ROPE_ADJACENT, RC_HD, true, seed++);
    run_rope(ROPE_HALF_SPLIT, RC_HD / 2, false, seed++);
    run_pdl(40, 576, false, seed++); /* 3 blocks, the last's second warp dead */
    run_pdl(64, 64, true, seed++);
    /* Unsupported sizes are refused, not launched. */
    CHECK(gk_gemv_f16_glu_emu(NULL, NULL, NULL, 3, 64, GK_GLU_SILU, NULL) != 0);
    CHECK(gk_gemv_f16_emu(NULL, NULL, NULL, 4, 12, 0, NULL) != 0);
    return test_summary("test_gemv_emu");
}
