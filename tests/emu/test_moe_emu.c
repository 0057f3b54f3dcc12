/* tests/emu/test_moe_emu.c: the mixture-of-experts kernels (ops/gpu_moe.cu)
 * run by the CPU emulator against their twins (ops/gpu_moe_ref.c), one
 * layer's pipeline of route, sort, gate|up with the activation, down and
 * the weighted sum, on seeded random data: 8 experts of which 2 a row, 5
 * rows (a tile of several pairs, experts no row picks), n_embd and
 * expert width 256 (the K types' super-blocks), or 128 and 96 (a width that
 * is not a multiple of 256: f16 and Q8_0 down experts); gate|up / down in
 * F16 / Q8_0, Q4_K / Q6_K (random blocks) with SwiGLU, Q8_0 / F16 and
 * MXFP4 / MXFP4 (gpt-oss's experts) with gpt-oss's clamped SwiGLU and
 * biases, Q8_0 / F16 with Gemma 4's rules (GeGLU, the router's input
 * scale 1 / sqrt(n_embd), a per-expert down scale in [0.5, 1.5]); and MXFP4's blocks alone (test_mxfp4_blocks: repack, and the
 * values the kernels read bit for bit models/quant.c's, every E8M0 byte;
 * random blocks the twin's).
 *
 * - route: the same experts (a row whose k-th and (k+1)-th twin logits lie
 *   within 1e-4 would be allowed to differ: none does with this seed, the
 *   test says so if one did), weights within 1e-5 relative; renormalized
 *   weights sum to 1, unrenormalized ones to less; each row's shared expert
 *   weight (qwen35moe: sigmoid of the gate's dot product) within 1e-5;
 * - sort: order, tiles and their count equal; every pair once, grouped by
 *   ascending expert, no tile over GK_MOE_TILE; a tensor-parallel rank's
 *   part (check_part: 2 and 3 ranks' expert ranges) its pairs alone, and
 *   the ranks' combines adding up to the whole one;
 * - the products: against the twin (fp64 sums of the same f32 weights, read
 *   back from the file's blocks by quant_dequantize_row), h within 2^-9
 *   relative + 1e-4 (f16 output), y within 1e-4 of max |y|; the weighted
 *   sum within 1e-5 of max |x|;
 * - the tensor-core product (gk_moe_mma, run_mma_case): 7 experts taking
 *   1, 0, 7, 17, 70, 40, 0 pairs (tiles of 64: one of a single pair, a full
 *   one, an expert over two), 5 slots a row, in Q4_K / Q6_K with SwiGLU,
 *   Q8_0 / Q8_0 with the clamped SwiGLU and biases, Q8_0 / Q8_0 with GeGLU
 *   and the per-expert scale, MXFP4 / MXFP4 (gpt-oss's; every 8th block's
 *   scale 2^-24 of the others', its values in f16's subnormals) and F16 /
 *   F16 with the clamped SwiGLU and biases (widths 96: ragged rows and
 *   k-tiles), each output within ops/gpu_moe.h's bound of the twin (the
 *   weights' f16 rounding: 2^-10 sum |w x| + 2^-24 sum |x|, carried through
 *   the activation for h); the chooser's picks (every expert type), and
 *   f16 rows of 48 columns refused;
 * - launch limits: the routing at 48 KiB of row and logits less 16 bytes
 *   (gk_block_sum's static slots past the default: the raise), the twin's
 *   choices (test_route_smem_edge); the GEMV and tensor-core pipelines with
 *   the emulator's grid.y limit at 3 (the products' tiles cut into launches,
 *   the combine's rows on grid.x), the twins' results (test_grid_y_limit);
 * - programmatic dependent launch (test_pdl, IGNITE_PDL=1): each of the five
 *   kernels with its inputs hidden until its wait (tests/emu/pdl_hide.h),
 *   the plain launch's bits;
 * - mutants (tests/emu/mutate.cmake, planted in copies of ops/gpu_moe.cu):
 *   a product that reads the wrong expert's rows, a routing that drops the
 *   renormalization, a shared expert weight without its sigmoid, a down
 *   product without its per-expert scale, a routing without its input
 *   scale (Gemma 4's), a tensor-core product reading the next expert's rows
 *   (moe_mma_expert_off), one with the gate and up rows of its W tile
 *   swapped (moe_mma_glu_swap, on MXFP4 experts): each caught by the same
 *   comparisons.
 * Outputs are poisoned first. Label emu. */
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"
#include "tests/emu/pdl_hide.h"
#include "tests/test.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* the mutants' entry points (tests/emu/mutate.cmake) */
int gk_moe_gemv_emu_moe_wrong_expert(const struct gk_moe_gemv_params *p, void *stream);
int gk_moe_route_emu_moe_no_renorm(const struct gk_moe_route_params *p, void *stream);
int gk_moe_route_emu_moe_shexp_no_sigmoid(const struct gk_moe_route_params *p, void *stream);
int gk_moe_gemv_emu_moe_no_expert_scale(const struct gk_moe_gemv_params *p, void *stream);
int gk_moe_route_emu_moe_no_router_scale(const struct gk_moe_route_params *p, void *stream);
int gk_moe_mma_emu_moe_mma_expert_off(const struct gk_moe_gemv_params *p, void *stream);
int gk_moe_mma_emu_moe_mma_glu_swap(const struct gk_moe_gemv_params *p, void *stream);
void test_emu_set_max_grid_y(unsigned n); /* tests/emu/emu_knobs.cc */

#define NE 8
#define K 2
#define N 5

typedef int (*route_fn)(const struct gk_moe_route_params *, void *);
typedef int (*gemv_fn)(const struct gk_moe_gemv_params *, void *);

static void *zalloc(size_t bytes)
{
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    memset(p, 0xff, (bytes + 255) / 256 * 256); /* poison: NaN */
    return p;
}

/* An expert matrix of `type`, n_expert * rows x cols: random file blocks
 * repacked into the device layout (host memory), or random f16. */
static struct gk_qmat rand_experts(int type, int64_t rows, int64_t cols, uint64_t *st,
                                   void **buf)
{
    struct gk_qmat w;
    *buf = zalloc(gk_qmat_bytes(type, rows, cols));
    gk_qmat_carve(&w, type, rows, cols, *buf);
    float a = 1.0f / sqrtf((float)cols);
    if (type == QUANT_F16) {
        for (int64_t i = 0; i < rows * cols; i++)
            ((uint16_t *)w.q)[i] = ig_f32_to_f16(2.0f * a * test_rand_f(st));
        return w;
    }
    /* random quant bytes, the f16 scales set so |w| stays near a (as
     * tests/emu/test_qmm_emu.c's rand_rows) */
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    size_t rb = quant_row_bytes((enum quant_type)type, cols), bytes = rb * (size_t)rows;
    uint8_t *src = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (uint8_t)test_rand_u64(st);
    for (size_t b = 0; b < bytes / t->block_bytes; b++) {
        uint8_t *blk = src + b * t->block_bytes;
        float d = a * (0.5f + 0.5f * fabsf(test_rand_f(st))) * (test_rand_f(st) < 0 ? -1 : 1);
        uint16_t h[2] = {0, 0};
        size_t at = 0;
        switch (type) {
        case QUANT_Q8_0: h[0] = ig_f32_to_f16(d / 64); break;
        case QUANT_Q4_K: h[0] = ig_f32_to_f16(d / 32), h[1] = ig_f32_to_f16(fabsf(d) / 16); break;
        case QUANT_Q6_K: h[0] = ig_f32_to_f16(d / 64), at = offsetof(struct block_q6_K, d); break;
        case QUANT_MXFP4: /* E8M0: 2^(e - 128) near a / 8, |value| <= 12; every 8th
                             block 2^-24 of that: below 2^-14, f16's subnormals in
                             gk_moe_mma's tiles (e under 104: rounded there) */
            blk[0] = (uint8_t)(128 + (int)floorf(log2f(fabsf(d) / 8)) - (b % 8 ? 0 : 24));
            continue;
        default: IG_ASSERT(0);
        }
        memcpy(blk + at, h, type == QUANT_Q4_K ? 4 : 2);
    }
    gk_qrepack_ref(&w, src, rb);
    free(src);
    return w;
}

static float *rand_f32(int64_t n, float scale, float center, uint64_t *st)
{
    float *v = zalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        v[i] = center + scale * test_rand_f(st);
    return v;
}

static double max_abs(const float *v, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

/* The number of elements of a and b (n) further apart than tol. */
static int64_t count_off(const float *a, const float *b, int64_t n, double tol)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)a[i] - b[i]) <= tol);
    return bad;
}

/* A tensor-parallel rank's part of the experts (backend/gpu_moe.c): for the
 * ranks' ranges of 2 ranks and of 3 (experts 0-2, 3-5, 6-7): the sort kernel
 * groups the pairs of its range alone, tiles naming them from 0, as its twin;
 * the combine adds those slots alone (kernel and twin), and the ranks' sums
 * from zero add up to the whole combine's within 1e-6 of max |x|. */
static void check_part(const int32_t *sel, const float *wts, const float *y, int64_t E,
                       int64_t pairs, int64_t max_tiles)
{
    static const int64_t split[2][4] = {{0, 4, 8, -1}, {0, 3, 6, 8}};
    int32_t *order[2], *tiles[2], n_tiles[2];
    float *whole = zalloc((size_t)(N * E) * 4), *sum = zalloc((size_t)(N * E) * 4);
    float *xp[2] = {zalloc((size_t)(N * E) * 4), zalloc((size_t)(N * E) * 4)};
    for (int s = 0; s < 2; s++) {
        order[s] = zalloc((size_t)pairs * 4);
        tiles[s] = zalloc((size_t)max_tiles * 12);
    }
    memset(whole, 0, (size_t)(N * E) * 4); /* zalloc's poison */
    CHECK(IG_DEV(gk_moe_combine)(whole, E, y, E, wts, (struct gk_moe_part){0}, N, K, E, NULL) ==
          IG_OK);
    for (int sp_i = 0; sp_i < 2; sp_i++) {
        memset(sum, 0, (size_t)(N * E) * 4);
        for (int r = 0; r < 3 && split[sp_i][r + 1] >= 0; r++) {
            int64_t e0 = split[sp_i][r], ne = split[sp_i][r + 1] - e0, mine = 0;
            for (int s = 0; s < 2; s++) {
                struct gk_moe_sort_params sp = {.sel = sel, .n_pairs = pairs, .expert0 = e0,
                                                .n_expert = ne, .order = order[s],
                                                .tiles = tiles[s], .n_tiles = &n_tiles[s]};
                if (s == 0)
                    CHECK(IG_DEV(gk_moe_sort)(&sp, NULL) == IG_OK);
                else
                    gk_moe_sort_ref(&sp);
            }
            for (int64_t i = 0; i < pairs; i++)
                mine += sel[i] >= e0 && sel[i] < e0 + ne;
            int32_t seen = 0;
            for (int32_t t = 0; t < n_tiles[1]; t++) {
                const int32_t *tl = tiles[1] + 3 * t;
                CHECK(tl[0] >= 0 && tl[0] < ne && tl[1] == seen);
                for (int32_t j = 0; j < tl[2]; j++)
                    CHECK(sel[order[1][tl[1] + j]] == e0 + tl[0]);
                seen += tl[2];
            }
            CHECKF(n_tiles[0] == n_tiles[1] && seen == mine &&
                   !memcmp(order[0], order[1], (size_t)mine * 4) &&
                   !memcmp(tiles[0], tiles[1], (size_t)n_tiles[1] * 12),
                   "experts %lld-%lld: the sort's part differs from the twin's (%d tiles, %d of "
                   "%lld pairs)", (long long)e0, (long long)(e0 + ne - 1), n_tiles[0], seen,
                   (long long)mine);
            struct gk_moe_part part = {sel, e0, ne};
            for (int s = 0; s < 2; s++)
                memset(xp[s], 0, (size_t)(N * E) * 4);
            CHECK(IG_DEV(gk_moe_combine)(xp[0], E, y, E, wts, part, N, K, E, NULL) == IG_OK);
            gk_moe_combine_ref(xp[1], E, y, E, wts, part, N, K, E);
            CHECK(count_off(xp[0], xp[1], N * E, 1e-5 * max_abs(xp[1], N * E)) == 0);
            for (int64_t i = 0; i < N * E; i++)
                sum[i] += xp[0][i];
        }
        CHECKF(count_off(sum, whole, N * E, 1e-6 * max_abs(whole, N * E)) == 0,
               "the ranks' combines (split %d) do not add up to the whole", sp_i);
    }
    for (int s = 0; s < 2; s++)
        free(order[s]), free(tiles[s]), free(xp[s]);
    free(whole), free(sum);
}

/* One layer's pipeline on the emulator (route and gemv possibly mutants)
 * against the twins. Returns whether everything matched; with `quiet` no
 * failure is recorded (a mutant's run, expected to differ). */
/* gate|up with the activation, then down, through kernel and through the
 * twins: the twin first, since both down products read the twin's h (the
 * down product then checks alone what the gate|up one left). gp and dp carry
 * every input; h[s], y[s] take pass s's outputs (0 the kernel, 1 the twin). */
static void products_and_twins(gemv_fn kernel, struct gk_moe_gemv_params gp,
                               struct gk_moe_gemv_params dp, uint16_t *const h[2],
                               float *const y[2])
{
    for (int s = 1; s >= 0; s--) {
        gp.h = h[s];
        dp.x = h[1];
        dp.y = y[s];
        if (s == 0) {
            CHECK(kernel(&gp, NULL) == IG_OK);
            CHECK(kernel(&dp, NULL) == IG_OK);
        } else {
            gk_moe_gemv_ref(&gp);
            gk_moe_gemv_ref(&dp);
        }
    }
}

static bool run_case(int type, int down_type, int64_t E, int64_t ff, int glu, bool bias,
                     route_fn route, gemv_fn gemv, bool quiet, uint64_t seed)
{
    uint64_t st = seed;
    int64_t pairs = N * K, max_tiles = gk_moe_max_tiles(pairs, NE);
    bool ok = true;
    void *bg, *bu, *bd;
    struct gk_qmat wg = rand_experts(type, NE * ff, E, &st, &bg);
    struct gk_qmat wu = rand_experts(type, NE * ff, E, &st, &bu);
    struct gk_qmat wd = rand_experts(down_type, NE * E, ff, &st, &bd);
    float *x = rand_f32(N * E, 2.0f, 0.0f, &st), *norm_w = rand_f32(E, 0.2f, 1.0f, &st);
    float *router = rand_f32(NE * E, 1.0f / 16, 0.0f, &st);
    float *rb = bias ? rand_f32(NE, 0.5f, 0.0f, &st) : NULL;
    float *sg = rand_f32(E, 1.0f / 8, 0.0f, &st); /* the shared expert's gate */
    float *b1 = bias ? rand_f32(NE * ff, 0.5f, 0.0f, &st) : NULL;
    float *b2 = bias ? rand_f32(NE * ff, 0.5f, 0.0f, &st) : NULL;
    float *b3 = bias ? rand_f32(NE * E, 0.5f, 0.0f, &st) : NULL;
    /* Gemma 4's (with GeGLU): each expert's down scale */
    bool gemma = glu == GK_GLU_GELU;
    float *es = gemma ? rand_f32(NE, 0.5f, 1.0f, &st) : NULL;
    uint16_t *xn = zalloc((size_t)(N * E) * 2);
    for (int64_t i = 0; i < N * E; i++) /* an f16 input as the norm leaves it */
        xn[i] = ig_f32_to_f16(x[i] * norm_w[i % E]);
    int32_t *sel[2], *order[2], *tiles[2], *n_tiles[2];
    float *wts[2], *y[2], *xo[2], *sw[2];
    uint16_t *h[2];
    for (int s = 0; s < 2; s++) { /* 0: the emulated kernels, 1: the twins */
        sel[s] = zalloc((size_t)pairs * 4);
        wts[s] = zalloc((size_t)pairs * 4);
        sw[s] = zalloc((size_t)N * 4);
        order[s] = zalloc((size_t)pairs * 4);
        tiles[s] = zalloc((size_t)max_tiles * 12);
        n_tiles[s] = zalloc(4);
        h[s] = zalloc((size_t)(pairs * ff) * 2);
        y[s] = zalloc((size_t)(pairs * E) * 4);
        xo[s] = zalloc((size_t)(N * E) * 4);
        memcpy(xo[s], x, (size_t)(N * E) * 4);
    }
    /* route */
    struct gk_moe_route_params rp = {.x = x, .ld_x = E, .norm_w = norm_w, .eps = 1e-6f,
                                     .router = router, .bias = rb, .n = N, .n_embd = E,
                                     .n_expert = NE, .k = K, .norm_topk = 1,
                                     .shexp_gate = sg,
                                     .in_scale = gemma ? 1.0f / sqrtf((float)E) : 0.0f};
    rp.sel = sel[0], rp.wts = wts[0], rp.shexp_w = sw[0];
    CHECK(route(&rp, NULL) == IG_OK);
    rp.sel = sel[1], rp.wts = wts[1], rp.shexp_w = sw[1];
    gk_moe_route_ref(&rp);
    bool same_sel = memcmp(sel[0], sel[1], (size_t)pairs * 4) == 0;
    int64_t sw_bad = count_off(sw[0], sw[1], N, 1e-5);
    ok &= same_sel && count_off(wts[0], wts[1], pairs, 1e-5) == 0 && sw_bad == 0;
    for (int64_t t = 0; t < N && !quiet; t++) {
        double sum = 0;
        for (int64_t j = 0; j < K; j++) {
            sum += wts[1][t * K + j];
            CHECKF(j == 0 || sel[1][t * K + j] > sel[1][t * K + j - 1], "row %lld: experts "
                   "not ascending", (long long)t);
        }
        CHECKF(fabs(sum - 1) < 1e-6, "row %lld: renormalized weights sum to %.9f",
               (long long)t, sum);
    }
    /* sort (the twin's routing for both, so each later kernel is compared alone) */
    for (int s = 0; s < 2; s++) {
        struct gk_moe_sort_params sp = {.sel = sel[1], .n_pairs = pairs, .n_expert = NE,
                                        .order = order[s], .tiles = tiles[s],
                                        .n_tiles = n_tiles[s]};
        if (s == 0)
            CHECK(IG_DEV(gk_moe_sort)(&sp, NULL) == IG_OK);
        else
            gk_moe_sort_ref(&sp);
    }
    CHECK(*n_tiles[0] == *n_tiles[1] && *n_tiles[1] <= max_tiles &&
          memcmp(order[0], order[1], (size_t)pairs * 4) == 0 &&
          memcmp(tiles[0], tiles[1], (size_t)*n_tiles[1] * 12) == 0);
    int32_t seen = 0, last = -1;
    for (int32_t t = 0; t < *n_tiles[1]; t++) {
        const int32_t *tl = tiles[1] + 3 * t;
        CHECK(tl[0] >= last && tl[2] >= 1 && tl[2] <= GK_MOE_TILE && tl[1] == seen);
        for (int32_t j = 0; j < tl[2]; j++)
            CHECK(sel[1][order[1][tl[1] + j]] == tl[0]);
        last = tl[0], seen += tl[2];
    }
    CHECK(seen == pairs);
    /* gate|up with the activation, then down (of the twin's h), from the
     * twins' tiles */
    products_and_twins(gemv,
                       (struct gk_moe_gemv_params){
                           .w = wg, .w2 = wu, .rows = ff, .bias = b1, .bias2 = b2, .x = xn,
                           .ld_x = E, .x_div = K, .order = order[1], .tiles = tiles[1],
                           .n_tiles = n_tiles[1], .max_tiles = max_tiles, .glu = glu,
                           .ld_h = ff},
                       (struct gk_moe_gemv_params){
                           .w = wd, .rows = E, .bias = b3, .ld_x = ff, .x_div = 1,
                           .order = order[1], .tiles = tiles[1], .n_tiles = n_tiles[1],
                           .max_tiles = max_tiles, .ld_y = E, .scale = es},
                       h, y);
    int64_t h_bad = 0;
    for (int64_t i = 0; i < pairs * ff; i++) {
        float a = ig_f16_to_f32(h[0][i]), b = ig_f16_to_f32(h[1][i]);
        h_bad += !(fabsf(a - b) <= fabsf(b) / 512 + 1e-4f);
    }
    double ymax = max_abs(y[1], pairs * E);
    int64_t y_bad = count_off(y[0], y[1], pairs * E, 1e-4 * ymax);
    ok &= h_bad == 0 && y_bad == 0;
    /* the weighted sum */
    CHECK(IG_DEV(gk_moe_combine)(xo[0], E, y[1], E, wts[1], (struct gk_moe_part){0}, N, K, E,
                                 NULL) == IG_OK);
    gk_moe_combine_ref(xo[1], E, y[1], E, wts[1], (struct gk_moe_part){0}, N, K, E);
    int64_t x_bad = count_off(xo[0], xo[1], N * E, 1e-5 * max_abs(xo[1], N * E));
    CHECK(x_bad == 0);
    if (!quiet)
        check_part(sel[1], wts[1], y[1], E, pairs, max_tiles);
    if (!quiet) {
        CHECKF(same_sel, "%s: the routing's experts differ from the twin's",
               quant_type_name((uint32_t)type));
        CHECKF(count_off(wts[0], wts[1], pairs, 1e-5) == 0, "routing weights differ");
        CHECKF(sw_bad == 0, "%lld of %d shared expert weights differ", (long long)sw_bad, N);
        CHECKF(h_bad == 0 && y_bad == 0, "%s/%s ff %lld glu %d: %lld of h, %lld of y off "
               "(max |y| %.3g)", quant_type_name((uint32_t)type),
               quant_type_name((uint32_t)down_type), (long long)ff, glu, (long long)h_bad,
               (long long)y_bad, ymax);
        CHECKF(ymax > 0.01, "y is flat (max %.3g): the case proves nothing", ymax);
    }
    for (int s = 0; s < 2; s++) {
        free(sel[s]), free(wts[s]), free(sw[s]), free(order[s]), free(tiles[s]), free(n_tiles[s]);
        free(h[s]), free(y[s]), free(xo[s]);
    }
    free(bg), free(bu), free(bd), free(x), free(norm_w), free(router), free(rb), free(b1);
    free(b2), free(b3), free(xn), free(sg), free(es);
    return ok;
}

/* MXFP4 on the device, every E8M0 byte (row r's blocks have e = r: 0 and 1
 * subnormal, 255) and every nibble: the emulated repack equals the host's
 * (gk_qrepack_ref) byte for byte and unpacks to the file's blocks, and the
 * values a kernel reads (qb_decode32, through gk_qembed's f32 rows, the
 * dequantization gk_moe_gemv does in registers) are models/quant.c's
 * quant_dequantize_row's bit for bit. */
static void test_mxfp4_blocks(void)
{
    enum { ROWS = 256, COLS = 64, NB = COLS / QK_MXFP4 };
    const size_t rb = quant_row_bytes(QUANT_MXFP4, COLS),
                 bytes = gk_qmat_bytes(QUANT_MXFP4, ROWS, COLS);
    uint8_t *src = malloc(rb * ROWS), *back = malloc(rb);
    for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < NB; b++) {
            uint8_t *blk = src + (size_t)r * rb + (size_t)b * sizeof(struct block_mxfp4);
            blk[0] = (uint8_t)r;
            for (int j = 0; j < QK_MXFP4 / 2; j++) /* nibbles j and 15 - j, then swapped */
                blk[1 + j] = (uint8_t)(b ? (15 - j) | j << 4 : j | (15 - j) << 4);
        }
    void *hb = zalloc(bytes), *db = zalloc(bytes), *srcd = zalloc(rb * ROWS);
    memcpy(srcd, src, rb * ROWS);
    struct gk_qmat host, dev;
    gk_qmat_carve(&host, QUANT_MXFP4, ROWS, COLS, hb);
    gk_qmat_carve(&dev, QUANT_MXFP4, ROWS, COLS, db);
    gk_qrepack_ref(&host, src, rb);
    CHECK(IG_DEV(gk_qrepack)(&dev, srcd, rb, NULL) == IG_OK);
    CHECK(memcmp(host.q, dev.q, (size_t)ROWS * NB * 16) == 0 &&
          memcmp(host.s, dev.s, (size_t)ROWS * NB) == 0);
    int32_t *tokens = malloc(ROWS * sizeof *tokens);
    float *got = zalloc((size_t)ROWS * COLS * 4), *want = malloc(COLS * sizeof *want);
    for (int r = 0; r < ROWS; r++)
        tokens[r] = r;
    CHECK(IG_DEV(gk_qembed)(&dev, tokens, ROWS, 0, got, NULL) == IG_OK);
    int bad_blocks = 0, bad_values = 0;
    for (int r = 0; r < ROWS; r++) {
        gk_qunpack_row_ref(&dev, r, back);
        bad_blocks += memcmp(back, src + (size_t)r * rb, rb) != 0;
        quant_dequantize_row(QUANT_MXFP4, src + (size_t)r * rb, want, COLS);
        bad_values += memcmp(got + (size_t)r * COLS, want, COLS * sizeof *want) != 0;
    }
    CHECKF(bad_blocks == 0 && bad_values == 0, "MXFP4: %d rows unpack wrong, %d rows' values "
           "differ from quant_dequantize_row's", bad_blocks, bad_values);
    /* the ends: 2^-128 (e 0), 12 2^124 (e 252; above, 12 2^(e - 128) is inf, as the CPU's) */
    quant_dequantize_row(QUANT_MXFP4, src, want, COLS);
    CHECK(want[1] == ldexpf(1.0f, -128) && got[252 * COLS + 7] == 12 * ldexpf(1.0f, 124));
    /* random blocks (shapes-only models): the emulated kernel's bytes the
     * host twin's, |w| <= 1 / sqrt(cols) */
    gk_qrandom_ref(&host, 5);
    CHECK(IG_DEV(gk_qrandom)(&dev, 5, NULL) == IG_OK);
    CHECK(memcmp(host.q, dev.q, (size_t)ROWS * NB * 16) == 0 &&
          memcmp(host.s, dev.s, (size_t)ROWS * NB) == 0);
    gk_qunpack_row_ref(&dev, 3, back);
    quant_dequantize_row(QUANT_MXFP4, back, want, COLS);
    CHECKF(max_abs(want, COLS) <= 1 / sqrt(COLS) && max_abs(want, COLS) > 0.25 / sqrt(COLS),
           "MXFP4 random blocks: max |w| %.4g", max_abs(want, COLS));
    free(src), free(back), free(hb), free(db), free(srcd), free(tokens), free(got), free(want);
}

/* The tensor-core product's bound (ops/gpu_moe.h) for one output: ref and
 * sabs, sx = sum_c w_c x_c (f64, the twin's terms), sum_c |w_c x_c|, sum_c
 * |x_c| of weight row `row` and f16 row x. */
static void row_sums(const struct gk_qmat *w, int64_t row, const uint16_t *x, float *wf,
                     void *raw, double *ref, double *sabs, double *sx)
{
    if (w->type == QUANT_F16) {
        for (int64_t c = 0; c < w->cols; c++)
            wf[c] = ig_f16_to_f32(((const uint16_t *)w->q)[row * w->cols + c]);
    } else {
        gk_qunpack_row_ref(w, row, raw);
        quant_dequantize_row((uint32_t)w->type, raw, wf, w->cols);
    }
    *ref = *sabs = *sx = 0;
    for (int64_t c = 0; c < w->cols; c++) {
        double xv = ig_f16_to_f32(x[c]);
        *ref += wf[c] * xv;
        *sabs += fabs(wf[c] * xv);
        *sx += fabs(xv);
    }
}

/* |mma - twin| allowed for a product of that row: the weights' f16
 * rounding (2^-11 of each term; subnormal f16 weights 2^-25 absolute) and
 * f32 sums, with room: 2^-10 sum |w x| + 2^-24 sum |x| (+ 2^-20 |ref| for a
 * bias added in f32). */
static double mma_bound(double ref, double sabs, double sx)
{
    return ldexp(sabs, -10) + ldexp(sx, -24) + ldexp(fabs(ref), -20);
}

/* gk_moe_mma (or a mutant) against the twin on a ragged set of experts: 7
 * experts, of which 0, 2, 3, 4, 5 take 1, 7, 17, 70, 40 pairs (a tile of one
 * pair, tiles under 16, a full tile of 64 and an expert of two tiles; 1 and
 * 6 none), k = 5 slots a row (x_div), the pairs' experts shuffled over the
 * rows; sorted into tiles of GK_MOE_MMA_TILE by the kernel and the twin
 * (equal). gate|up with the activation, then down (of the twin's h) with
 * the per-expert scale where gemma, each output within mma_bound of the
 * twin (glu: the bound of a and b carried through the activation to first
 * order, |d act / d a| <= 1.2 (|b| + 1), |d act / d b| <= |a|, plus the f16
 * output's 2^-10). Returns whether all matched. */
static bool run_mma_case(int type, int down_type, int64_t E, int64_t ff, int glu, bool bias,
                         gemv_fn mma, bool quiet, uint64_t seed)
{
    enum { NX = 7, KX = 5, NPX = 135 };
    static const int counts[NX] = {1, 0, 7, 17, 70, 40, 0};
    uint64_t st = seed;
    int64_t pairs = NPX, rows = NPX / KX;
    int64_t max_tiles = gk_moe_max_tiles_of(pairs, NX, GK_MOE_MMA_TILE);
    void *bg, *bu, *bd;
    struct gk_qmat wg = rand_experts(type, NX * ff, E, &st, &bg);
    struct gk_qmat wu = rand_experts(type, NX * ff, E, &st, &bu);
    struct gk_qmat wd = rand_experts(down_type, NX * E, ff, &st, &bd);
    float *b1 = bias ? rand_f32(NX * ff, 0.5f, 0.0f, &st) : NULL;
    float *b2 = bias ? rand_f32(NX * ff, 0.5f, 0.0f, &st) : NULL;
    float *b3 = bias ? rand_f32(NX * E, 0.5f, 0.0f, &st) : NULL;
    float *es = glu == GK_GLU_GELU ? rand_f32(NX, 0.5f, 1.0f, &st) : NULL;
    uint16_t *xn = zalloc((size_t)(rows * E) * 2);
    for (int64_t i = 0; i < rows * E; i++)
        xn[i] = ig_f32_to_f16(2.0f * test_rand_f(&st));
    int32_t *sel = zalloc((size_t)pairs * 4);
    for (int64_t e = 0, i = 0; e < NX; e++)
        for (int c = 0; c < counts[e]; c++)
            sel[i++] = (int32_t)e;
    for (int64_t i = pairs - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(test_rand_u64(&st) % (uint64_t)(i + 1));
        int32_t t = sel[i];
        sel[i] = sel[j], sel[j] = t;
    }
    int32_t *order[2], *tiles[2], *n_tiles[2];
    uint16_t *h[2];
    float *y[2];
    for (int s = 0; s < 2; s++) {
        order[s] = zalloc((size_t)pairs * 4);
        tiles[s] = zalloc((size_t)max_tiles * 12);
        n_tiles[s] = zalloc(4);
        h[s] = zalloc((size_t)(pairs * ff) * 2);
        y[s] = zalloc((size_t)(pairs * E) * 4);
        struct gk_moe_sort_params sp = {.sel = sel, .n_pairs = pairs, .n_expert = NX,
                                        .tile = GK_MOE_MMA_TILE, .order = order[s],
                                        .tiles = tiles[s], .n_tiles = n_tiles[s]};
        if (s == 0)
            CHECK(IG_DEV(gk_moe_sort)(&sp, NULL) == IG_OK);
        else
            gk_moe_sort_ref(&sp);
    }
    CHECK(*n_tiles[1] == 6 && *n_tiles[0] == *n_tiles[1] &&
          memcmp(order[0], order[1], (size_t)pairs * 4) == 0 &&
          memcmp(tiles[0], tiles[1], 12 * 6) == 0 && tiles[1][3 * 3 + 2] == 64);
    products_and_twins(mma,
                       (struct gk_moe_gemv_params){
                           .w = wg, .w2 = wu, .rows = ff, .bias = b1, .bias2 = b2, .x = xn,
                           .ld_x = E, .x_div = KX, .order = order[1], .tiles = tiles[1],
                           .n_tiles = n_tiles[1], .max_tiles = max_tiles, .glu = glu,
                           .ld_h = ff},
                       (struct gk_moe_gemv_params){
                           .w = wd, .rows = E, .bias = b3, .ld_x = ff, .x_div = 1,
                           .order = order[1], .tiles = tiles[1], .n_tiles = n_tiles[1],
                           .max_tiles = max_tiles, .ld_y = E, .scale = es},
                       h, y);
    int64_t h_bad = 0, y_bad = 0, cols = E > ff ? E : ff;
    double h_worst = 0, y_worst = 0; /* |error| / bound */
    float *wf = malloc((size_t)cols * sizeof *wf);
    void *raw = malloc((size_t)cols * 4 + 64);
    for (int64_t pr = 0; pr < pairs; pr++) {
        int64_t ex = sel[pr];
        const uint16_t *x = xn + (pr / KX) * E;
        for (int64_t i = 0; i < ff; i++) {
            double a, sa, xa, b, sb, xb;
            row_sums(&wg, ex * ff + i, x, wf, raw, &a, &sa, &xa);
            row_sums(&wu, ex * ff + i, x, wf, raw, &b, &sb, &xb);
            double ea = mma_bound(a, sa, xa), eb = mma_bound(b, sb, xb);
            a += b1 ? b1[ex * ff + i] : 0, b += b2 ? b2[ex * ff + i] : 0;
            double want = ig_f16_to_f32(h[1][pr * ff + i]), got = ig_f16_to_f32(h[0][pr * ff + i]);
            double tol = 1.2 * (fabs(b) + eb + 1) * ea + (fabs(a) + ea) * eb +
                         ldexp(fabs(want), -10) + 1e-7;
            double err = fabs(got - want);
            h_bad += !(err <= tol);
            h_worst = err / tol > h_worst ? err / tol : h_worst;
        }
        for (int64_t i = 0; i < E; i++) {
            double r, sr, xr;
            row_sums(&wd, ex * E + i, h[1] + pr * ff, wf, raw, &r, &sr, &xr);
            double sc = es ? es[ex] : 1.0, tol = sc * mma_bound(r, sr, xr) + 1e-7;
            double err = fabs((double)y[0][pr * E + i] - y[1][pr * E + i]);
            y_bad += !(err <= tol);
            y_worst = err / tol > y_worst ? err / tol : y_worst;
        }
    }
    bool ok = h_bad == 0 && y_bad == 0;
    if (!quiet) {
        fprintf(stderr, "  mma: worst error / bound: h %.3f, y %.3f\n", h_worst, y_worst);
        CHECKF(ok, "gk_moe_mma %s/%s glu %d: %lld of h, %lld of y outside the bound",
               quant_type_name((uint32_t)type), quant_type_name((uint32_t)down_type), glu,
               (long long)h_bad, (long long)y_bad);
        CHECKF(max_abs(y[1], pairs * E) > 0.01, "y is flat: the case proves nothing");
    }
    for (int s = 0; s < 2; s++)
        free(order[s]), free(tiles[s]), free(n_tiles[s]), free(h[s]), free(y[s]);
    free(bg), free(bu), free(bd), free(b1), free(b2), free(b3), free(es), free(xn), free(sel);
    free(wf), free(raw);
    return ok;
}

/* The chooser: tiles of 64 on the tensor cores for prefill steps of every
 * expert type (block types, MXFP4, f16; from 4 pairs an expert on), the
 * GEMV for decode steps and for a type the device keeps no experts in; and
 * f16 experts whose rows are not whole 32-column blocks refused by
 * gk_moe_mma. */
static void test_mma_choose(void)
{
    CHECK(gk_moe_choose(QUANT_Q4_K, QUANT_Q6_K, 2048 * 8, 128) == GK_MOE_MMA_TILE);
    CHECK(gk_moe_choose(QUANT_Q4_K, QUANT_Q6_K, 8 * 8, 128) == GK_MOE_TILE);
    CHECK(gk_moe_choose(QUANT_MXFP4, QUANT_MXFP4, 2048 * 4, 32) == GK_MOE_MMA_TILE);
    CHECK(gk_moe_choose(QUANT_MXFP4, QUANT_MXFP4, 32 * 4, 32) == GK_MOE_MMA_TILE);
    CHECK(gk_moe_choose(QUANT_MXFP4, QUANT_MXFP4, 31 * 4, 32) == GK_MOE_TILE);
    CHECK(gk_moe_choose(QUANT_Q8_0, QUANT_F16, 2048 * 8, 128) == GK_MOE_MMA_TILE);
    CHECK(gk_moe_choose(QUANT_F16, QUANT_F16, 2048 * 8, 128) == GK_MOE_MMA_TILE);
    CHECK(gk_moe_choose(QUANT_F16, QUANT_F16, 8 * 8, 128) == GK_MOE_TILE);
    CHECK(gk_moe_choose(QUANT_Q2_K, QUANT_F16, 2048 * 8, 128) == GK_MOE_TILE);
    void *buf;
    uint64_t st = 3;
    struct gk_qmat w = rand_experts(QUANT_F16, 64, 48, &st, &buf);
    int32_t tiles[3] = {0, 0, 1}, order[1] = {0}, n_tiles[1] = {1};
    uint16_t *x = zalloc(64 * 2);
    float *y = zalloc(64 * 4);
    struct gk_moe_gemv_params p = {.w = w, .rows = 64, .x = x, .ld_x = 48, .x_div = 1,
                                   .order = order, .tiles = tiles, .n_tiles = n_tiles,
                                   .max_tiles = 1, .y = y, .ld_y = 64};
    fprintf(stderr, "(an error line expected:)\n");
    CHECK(IG_DEV(gk_moe_mma)(&p, NULL) == IG_E_INTERNAL);
    free(buf), free(x), free(y);
}

/* ---- launch limits ----------------------------------------------------------------------- */

/* The routing at the 48 KiB edge: n_embd + n_expert = 12284 floats of
 * dynamic shared memory (48 KiB less 16 bytes) and gk_block_sum's static
 * slots pass the 48 KiB a block gets without the raise (the emulator
 * faults as a GPU refuses: emu/smem.cc); the same experts and weights as
 * the twin. */
static void test_route_smem_edge(void)
{
    enum { E = 12276, R = 2 };
    uint64_t st = 5;
    float *x = rand_f32(R * E, 2.0f, 0.0f, &st), *norm_w = rand_f32(E, 0.2f, 1.0f, &st);
    float *router = rand_f32(NE * E, 1.0f / 16, 0.0f, &st);
    int32_t *sel[2];
    float *wts[2];
    for (int s = 0; s < 2; s++)
        sel[s] = zalloc(R * K * 4), wts[s] = zalloc(R * K * 4);
    struct gk_moe_route_params rp = {.x = x, .ld_x = E, .norm_w = norm_w, .eps = 1e-6f,
                                     .router = router, .n = R, .n_embd = E, .n_expert = NE,
                                     .k = K, .norm_topk = 1};
    rp.sel = sel[0], rp.wts = wts[0];
    CHECKF(IG_DEV(gk_moe_route)(&rp, NULL) == IG_OK,
           "gk_moe_route at n_embd %d + %d experts (48 KiB less 16 bytes, dynamic) failed", E, NE);
    rp.sel = sel[1], rp.wts = wts[1];
    gk_moe_route_ref(&rp);
    CHECK(memcmp(sel[0], sel[1], R * K * 4) == 0 && count_off(wts[0], wts[1], R * K, 1e-5) == 0);
    free(x), free(norm_w), free(router);
    for (int s = 0; s < 2; s++)
        free(sel[s]), free(wts[s]);
}

/* A prefill step past grid.y's limit (CUDA's 65535), at a limit of 3 the
 * emulator faults past (test_emu_set_max_grid_y; 65537 rows ran 18 s for the
 * combine alone): the whole pipeline, the GEMV's and the tensor cores', of
 * 10 tiles each (launches of 3, 3, 3, 1: the tile offsets) and the
 * combine's 5 rows (on grid.x), the twins' results as at the full limit. */
static void test_grid_y_limit(void)
{
    test_emu_set_max_grid_y(3);
    CHECKF(run_case(QUANT_Q8_0, QUANT_F16, 128, 96, GK_MOE_GLU_OAI, true, IG_DEV(gk_moe_route),
                    IG_DEV(gk_moe_gemv), false, 13),
           "gk_moe_gemv and gk_moe_combine with grid.y at most 3");
    CHECKF(run_mma_case(QUANT_Q8_0, QUANT_Q8_0, 64, 96, GK_GLU_GELU, false, IG_DEV(gk_moe_mma),
                        false, 33),
           "gk_moe_mma with grid.y at most 3");
    test_emu_set_max_grid_y(0);
}

/* ---- programmatic dependent launch ------------------------------------------------------- */

/* Each kernel as a dependent launch (IGNITE_PDL=1) with what the kernels
 * before it write hidden from each block until its wait (tests/emu/pdl_hide.h):
 * the routing (the residual), the sort (the choices), the GEMV and
 * tensor-core products (x, the order, the tiles and their count; the blocks
 * past the count wait, then leave), the combine (x in place, y, the
 * weights). Every block waits; the outputs the plain launch's bit for bit. */
static void test_pdl(void)
{
    enum { E = 64, FF = 64 };
    uint64_t st = 71;
    const int64_t pairs = N * K;
    void *bg, *bu;
    struct gk_qmat wg = rand_experts(QUANT_Q8_0, NE * FF, E, &st, &bg);
    struct gk_qmat wu = rand_experts(QUANT_Q8_0, NE * FF, E, &st, &bu);
    float *x = rand_f32(N * E, 2.0f, 0.0f, &st), *norm_w = rand_f32(E, 0.2f, 1.0f, &st);
    float *router = rand_f32(NE * E, 1.0f / 16, 0.0f, &st);
    float *sg = rand_f32(E, 1.0f / 8, 0.0f, &st);
    struct pdl_hide h = {0};

    /* routing: the choices, their weights and the shared expert's in one buffer */
    const size_t rb = (size_t)(2 * pairs + N) * 4;
    unsigned char *ro = zalloc(rb);
    int32_t *sel = (int32_t *)ro;
    float *wts = (float *)(ro + pairs * 4);
    struct gk_moe_route_params rp = {
        .x = x, .ld_x = E, .norm_w = norm_w, .eps = 1e-6f, .router = router, .n = N,
        .n_embd = E, .n_expert = NE, .k = K, .norm_topk = 1, .shexp_gate = sg, .sel = sel,
        .wts = wts, .shexp_w = (float *)(ro + 2 * pairs * 4)};
    pdl_hide_add(&h, x, (size_t)(N * E) * 4);
    PDL_PAIR("moe_route", &h, ro, rb, memset(ro, 0, rb), N, IG_DEV(gk_moe_route)(&rp, NULL));

    /* the sort, into the GEMV's tiles and (plainly) the tensor cores' */
    const int64_t mt[2] = {gk_moe_max_tiles(pairs, NE),
                           gk_moe_max_tiles_of(pairs, NE, GK_MOE_MMA_TILE)};
    int32_t *so[2];
    size_t sb[2];
    for (int i = 0; i < 2; i++) {
        sb[i] = (size_t)(pairs + 3 * mt[i] + 1) * 4;
        so[i] = zalloc(sb[i]);
    }
    struct gk_moe_sort_params sp = {.sel = sel, .n_pairs = pairs, .n_expert = NE,
                                    .order = so[0], .tiles = so[0] + pairs,
                                    .n_tiles = so[0] + pairs + 3 * mt[0]};
    pdl_hide_add(&h, sel, (size_t)pairs * 4);
    PDL_PAIR("moe_sort", &h, so[0], sb[0], memset(so[0], 0, sb[0]), 1,
             IG_DEV(gk_moe_sort)(&sp, NULL));
    sp.tile = GK_MOE_MMA_TILE, sp.order = so[1], sp.tiles = so[1] + pairs;
    sp.n_tiles = so[1] + pairs + 3 * mt[1];
    CHECK(IG_DEV(gk_moe_sort)(&sp, NULL) == IG_OK);

    /* gate|up with SwiGLU: the GEMV, then the tensor cores */
    uint16_t *xn = zalloc((size_t)(N * E) * 2);
    for (int64_t i = 0; i < N * E; i++)
        xn[i] = ig_f32_to_f16(x[i] * norm_w[i % E]);
    const size_t hb = (size_t)(pairs * FF) * 2;
    uint16_t *hh = zalloc(hb);
    for (int i = 0; i < 2; i++) {
        struct gk_moe_gemv_params gp = {
            .w = wg, .w2 = wu, .rows = FF, .x = xn, .ld_x = E, .x_div = K, .order = so[i],
            .tiles = so[i] + pairs, .n_tiles = so[i] + pairs + 3 * mt[i], .max_tiles = mt[i],
            .glu = GK_GLU_SILU, .h = hh, .ld_h = FF};
        pdl_hide_add(&h, xn, (size_t)(N * E) * 2);
        pdl_hide_add(&h, so[i], sb[i]);
        const int blocks = (int)(i ? (FF + 31) / 32 * mt[1] : (FF + 7) / 8 * mt[0]);
        PDL_PAIR(i ? "moe_mma" : "moe_gemv", &h, hh, hb, memset(hh, 0, hb), blocks,
                 i ? IG_DEV(gk_moe_mma)(&gp, NULL) : IG_DEV(gk_moe_gemv)(&gp, NULL));
    }

    /* the weighted sum into the residual */
    float *y = rand_f32(pairs * E, 1.0f, 0.0f, &st), *xo = zalloc((size_t)(N * E) * 4);
    pdl_hide_add(&h, xo, (size_t)(N * E) * 4);
    pdl_hide_add(&h, y, (size_t)(pairs * E) * 4);
    pdl_hide_add(&h, wts, (size_t)pairs * 4);
    PDL_PAIR("moe_combine", &h, xo, (size_t)(N * E) * 4, memcpy(xo, x, (size_t)(N * E) * 4), N,
             IG_DEV(gk_moe_combine)(xo, E, y, E, wts, (struct gk_moe_part){0}, N, K, E, NULL));
    free(bg), free(bu), free(x), free(norm_w), free(router), free(sg), free(ro), free(so[0]);
    free(so[1]), free(xn), free(hh), free(y), free(xo);
}

int main(void)
{
    struct {
        int type, down;
        int64_t e, ff;
        int glu;
        bool bias;
    } cases[] = {
        {QUANT_F16, QUANT_Q8_0, 128, 96, GK_GLU_SILU, false},
        {QUANT_Q4_K, QUANT_Q6_K, 256, 256, GK_GLU_SILU, false},
        {QUANT_Q8_0, QUANT_F16, 128, 96, GK_MOE_GLU_OAI, true},
        {QUANT_MXFP4, QUANT_MXFP4, 128, 96, GK_MOE_GLU_OAI, true}, /* gpt-oss's */
        {QUANT_Q8_0, QUANT_F16, 128, 96, GK_GLU_GELU, false},      /* Gemma 4's */
    };
    test_mxfp4_blocks();
    test_pdl();
    test_route_smem_edge();
    test_grid_y_limit();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fprintf(stderr, "%s gate|up, %s down, n_embd %lld, width %lld, glu %d%s\n",
                quant_type_name((uint32_t)cases[i].type), quant_type_name((uint32_t)cases[i].down),
                (long long)cases[i].e, (long long)cases[i].ff, cases[i].glu,
                cases[i].bias ? ", biases" : "");
        CHECK(run_case(cases[i].type, cases[i].down, cases[i].e, cases[i].ff, cases[i].glu,
                       cases[i].bias, IG_DEV(gk_moe_route), IG_DEV(gk_moe_gemv), false, 11 + i));
    }
    /* the tensor-core product (prefill) */
    test_mma_choose();
    struct {
        int type, down;
        int64_t e, ff;
        int glu;
        bool bias;
    } mcases[] = {
        {QUANT_Q4_K, QUANT_Q6_K, 256, 256, GK_GLU_SILU, false},
        {QUANT_Q8_0, QUANT_Q8_0, 128, 96, GK_MOE_GLU_OAI, true},
        {QUANT_Q8_0, QUANT_Q8_0, 64, 96, GK_GLU_GELU, false}, /* Gemma 4's scale */
        {QUANT_MXFP4, QUANT_MXFP4, 128, 96, GK_MOE_GLU_OAI, true}, /* gpt-oss's */
        {QUANT_F16, QUANT_F16, 64, 96, GK_MOE_GLU_OAI, true},     /* an F16 gpt-oss */
    };
    for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) {
        fprintf(stderr, "mma: %s gate|up, %s down, n_embd %lld, width %lld, glu %d%s\n",
                quant_type_name((uint32_t)mcases[i].type),
                quant_type_name((uint32_t)mcases[i].down), (long long)mcases[i].e,
                (long long)mcases[i].ff, mcases[i].glu, mcases[i].bias ? ", biases" : "");
        CHECK(run_mma_case(mcases[i].type, mcases[i].down, mcases[i].e, mcases[i].ff,
                           mcases[i].glu, mcases[i].bias, IG_DEV(gk_moe_mma), false, 31 + i));
    }
    /* planted bugs must be caught */
    CHECKF(!run_mma_case(QUANT_Q8_0, QUANT_Q8_0, 64, 96, GK_GLU_SILU, false,
                         gk_moe_mma_emu_moe_mma_expert_off, true, 31),
           "mutant moe_mma_expert_off (the expert's weight rows one expert off) not caught");
    CHECKF(!run_mma_case(QUANT_MXFP4, QUANT_MXFP4, 64, 64, GK_MOE_GLU_OAI, true,
                         gk_moe_mma_emu_moe_mma_glu_swap, true, 34),
           "mutant moe_mma_glu_swap (gate and up rows swapped in the W tile) not caught");
    CHECKF(!run_case(QUANT_Q8_0, QUANT_Q8_0, 64, 64, GK_GLU_SILU, false, IG_DEV(gk_moe_route),
                     gk_moe_gemv_emu_moe_wrong_expert, true, 11),
           "mutant moe_wrong_expert (a product reads the wrong expert's rows) not caught");
    CHECKF(!run_case(QUANT_Q8_0, QUANT_Q8_0, 64, 64, GK_GLU_SILU, false,
                     gk_moe_route_emu_moe_no_renorm, IG_DEV(gk_moe_gemv), true, 11),
           "mutant moe_no_renorm (no renormalization) not caught");
    CHECKF(!run_case(QUANT_Q8_0, QUANT_Q8_0, 64, 64, GK_GLU_SILU, false,
                     gk_moe_route_emu_moe_shexp_no_sigmoid, IG_DEV(gk_moe_gemv), true, 11),
           "mutant moe_shexp_no_sigmoid (the shared expert gate's sigmoid dropped) not caught");
    CHECKF(!run_case(QUANT_Q8_0, QUANT_Q8_0, 64, 64, GK_GLU_GELU, false, IG_DEV(gk_moe_route),
                     gk_moe_gemv_emu_moe_no_expert_scale, true, 11),
           "mutant moe_no_expert_scale (the per-expert down scale dropped) not caught");
    CHECKF(!run_case(QUANT_Q8_0, QUANT_Q8_0, 64, 64, GK_GLU_GELU, false,
                     gk_moe_route_emu_moe_no_router_scale, IG_DEV(gk_moe_gemv), true, 11),
           "mutant moe_no_router_scale (the router's input scale dropped) not caught");
    return test_summary("test_moe_emu");
}
