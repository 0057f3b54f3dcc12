/* bench/bench_moe.c: the mixture-of-experts expert products (ops/gpu_moe.h)
 * on the GPU at one of two shapes (--shape), for issue 45's prefill target
 * (the expert GEMMs at >= 40 % of the dense f16 peak):
 *   qwen3    Qwen3-30B-A3B's (the default): n_embd 2048, expert width 768,
 *            128 experts, 8 a row; gate|up Q4_K, down Q6_K as Q4_K_M's;
 *            SwiGLU;
 *   gpt-oss  gpt-oss-20b's: n_embd 2880, expert width 2880, 32 experts, 4 a
 *            row; gate|up and down MXFP4; the clamped SwiGLU with biases
 *            (GK_MOE_GLU_OAI).
 *
 *   moe PATH shape=S rows=N   gate|up (with the activation) and down of one
 *                     layer step of N rows, PATH mma (gk_moe_mma, tiles of
 *                     64) or gemv (gk_moe_gemv, tiles of 8): us of each,
 *                     TFLOPS of the two (2 flops a weight a pair), of_gemm =
 *                     that rate over cuBLAS's f16 GEMM (dev_gemm_f16) on a
 *                     dense matrix of gate|up's 2 width x n_embd over the
 *                     step's pairs, and with --peak T (the card's dense f16
 *                     TFLOPS) of_peak
 *
 * Routing uniform at random (every row k distinct experts, a fixed seed),
 * grouped on the device (gk_moe_sort); the weights random blocks made on the
 * device (gk_qrandom), 0.4 GB (gpt-oss: 0.42), one copy (at these row counts a step reads
 * each expert from HBM once per tile anyway). No check of the values:
 * tests/emu/test_moe_emu.c and the moe step's test_backend_moe_gpu do that.
 * Written over the device layer, so `bench_moe --smoke` (toy shapes) runs
 * on the emulator too (by hand: bench_moe_emu, no CI test). One line per
 * figure, key=value.
 * Usage: bench_moe [--shape qwen3|gpt-oss] [--rows 512,2048] [--peak TFLOPS]
 * [--smoke]. Exits 77 without a GPU (2 on a bad argument). */
#include "device/device.h"
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"

#include "core/status.h"
#include "models/quant.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct dev *g_dev;
static void *g_stream;
static bool g_smoke;

static void die(const char *what)
{
    fprintf(stderr, "bench_moe: %s failed\n", what);
    exit(1);
}

#define OK(call)                                                                \
    do {                                                                        \
        if ((call) != IG_OK)                                                    \
            die(#call);                                                         \
    } while (0)

static void *g_allocs[16]; /* freed before the device closes */
static int g_n_allocs;

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (g_n_allocs == 16)
        die("dalloc (more than 16 buffers)");
    OK(IG_DEV(dev_alloc)(g_dev, bytes ? bytes : 16, &p));
    return g_allocs[g_n_allocs++] = p;
}

/* One layer's experts and a step's buffers. */
struct layer {
    int64_t e, ff, ne, k, max_rows;
    int glu;                 /* GK_GLU_SILU or GK_MOE_GLU_OAI (gpt-oss) */
    struct gk_qmat gate, up, down;
    float *b_gate, *b_up, *b_down; /* gpt-oss: f32 [ne][ff], [ne][ff], [ne][e]; else NULL */
    uint16_t *x, *h, *wf16;  /* f16 [rows][e], [pairs][ff], the GEMM's [2 ff][e] */
    float *y, *yg;           /* f32 [pairs][e], the GEMM's [pairs][2 ff] */
    int32_t *sel, *order, *tiles, *n_tiles;
};

static void make_experts(struct gk_qmat *w, int type, int64_t rows, int64_t cols, uint64_t seed)
{
    gk_qmat_carve(w, type, rows, cols, dalloc(gk_qmat_bytes(type, rows, cols)));
    OK(IG_DEV(gk_qrandom)(w, seed, g_stream));
}

/* splitmix64: the routing's random numbers */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A step of n rows: routing uploaded, sorted into tiles of `tile`. */
static void route(struct layer *L, int64_t n, int64_t tile)
{
    int64_t pairs = n * L->k;
    int32_t *sel = malloc((size_t)pairs * 4);
    uint64_t st = 17;
    for (int64_t t = 0; t < n; t++) {
        char used[GK_MOE_MAX_EXPERTS] = {0};
        for (int64_t j = 0; j < L->k; j++) {
            int64_t e;
            do
                e = (int64_t)(next_rand(&st) % (uint64_t)L->ne);
            while (used[e]);
            used[e] = 1;
        }
        for (int64_t e = 0, j = 0; e < L->ne; e++) /* ascending, as gk_moe_route */
            if (used[e])
                sel[t * L->k + j++] = (int32_t)e;
    }
    OK(IG_DEV(dev_upload)(g_dev, L->sel, sel, (size_t)pairs * 4));
    free(sel);
    struct gk_moe_sort_params sp = {.sel = L->sel, .n_pairs = pairs, .n_expert = L->ne,
                                    .tile = tile, .order = L->order, .tiles = L->tiles,
                                    .n_tiles = L->n_tiles};
    OK(IG_DEV(gk_moe_sort)(&sp, g_stream));
}

/* Mean ms of one call of `what` (0 gate|up, 1 down, 2 the dense GEMM) over
 * about 100 ms of back-to-back calls (one call in smoke mode). */
static double time_ms(const struct layer *L, int64_t n, bool mma, int what)
{
    int64_t pairs = n * L->k;
    int64_t max_tiles = gk_moe_max_tiles_of(pairs, L->ne, mma ? GK_MOE_MMA_TILE : GK_MOE_TILE);
    struct gk_moe_gemv_params gu = {
        .w = L->gate, .w2 = L->up, .rows = L->ff, .x = L->x, .ld_x = L->e, .x_div = L->k,
        .order = L->order, .tiles = L->tiles, .n_tiles = L->n_tiles, .max_tiles = max_tiles,
        .glu = L->glu, .h = L->h, .ld_h = L->ff, .bias = L->b_gate, .bias2 = L->b_up};
    struct gk_moe_gemv_params dp = {
        .w = L->down, .rows = L->e, .bias = L->b_down, .x = L->h, .ld_x = L->ff, .x_div = 1,
        .order = L->order,
        .tiles = L->tiles, .n_tiles = L->n_tiles, .max_tiles = max_tiles, .y = L->y,
        .ld_y = L->e};
    const struct gk_moe_gemv_params *p = what == 0 ? &gu : &dp;
    double ms = 0, per = 0;
    int iters = 1;
    for (int pass = 0; pass < (g_smoke ? 1 : 3); pass++) { /* pass 0 warms up and sizes */
        OK(IG_DEV(dev_timer_start)(g_dev));
        for (int i = 0; i < iters; i++) {
            if (what == 2)
                OK(IG_DEV(dev_gemm_f16)(g_dev, L->wf16, L->h, L->yg, 2 * L->ff, L->e, pairs,
                                        L->e, 2 * L->ff, 0.0f));
            else
                OK(mma ? IG_DEV(gk_moe_mma)(p, g_stream) : IG_DEV(gk_moe_gemv)(p, g_stream));
        }
        OK(IG_DEV(dev_timer_stop)(g_dev, &ms));
        per = ms / iters;
        int want = per > 0 ? (int)(100.0 / per) : 1000;
        iters = want < 3 ? 3 : want > 2000 ? 2000 : want;
    }
    return per;
}

int main(int argc, char **argv)
{
    char rows_arg[256] = "512,2048";
    const char *shape = "qwen3";
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) {
            g_smoke = true;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "qwen3") || !strcmp(argv[i + 1], "gpt-oss"))) {
            shape = argv[++i];
        } else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            snprintf(rows_arg, sizeof rows_arg, "%s", argv[++i]);
        } else if (!strcmp(argv[i], "--peak") && i + 1 < argc) {
            peak = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_moe [--shape qwen3|gpt-oss] [--rows 512,2048] "
                            "[--peak TFLOPS] [--smoke]\n");
            return 2;
        }
    }
    if (IG_DEV(dev_count)() == 0) {
        fprintf(stderr, "bench_moe: no CUDA device\n");
        return 77;
    }
    OK(IG_DEV(dev_open)(0, &g_dev));
    g_stream = IG_DEV(dev_stream)(g_dev);
    bool oss = !strcmp(shape, "gpt-oss");
    struct layer L = {.e = 2048, .ff = 768, .ne = 128, .k = 8, .glu = GK_GLU_SILU};
    int type_gu = QUANT_Q4_K, type_down = QUANT_Q6_K;
    if (oss) {
        L = (struct layer){.e = 2880, .ff = 2880, .ne = 32, .k = 4, .glu = GK_MOE_GLU_OAI};
        type_gu = type_down = QUANT_MXFP4;
    }
    if (g_smoke) { /* whole K super-blocks, few experts */
        L.e = 256, L.ff = 256, L.ne = 8, L.k = 2;
        snprintf(rows_arg, sizeof rows_arg, "24");
    }
    for (char *save = NULL, *t = strtok_r(rows_arg, ",", &save); t; t = strtok_r(NULL, ",", &save))
        L.max_rows = atoll(t) > L.max_rows ? atoll(t) : L.max_rows;
    if (L.max_rows < 1)
        die("--rows");
    int64_t max_pairs = L.max_rows * L.k;
    make_experts(&L.gate, type_gu, L.ne * L.ff, L.e, 1);
    make_experts(&L.up, type_gu, L.ne * L.ff, L.e, 2);
    make_experts(&L.down, type_down, L.ne * L.e, L.ff, 3);
    if (oss) { /* the biases: small values, as the file's (bench/randgguf_gptoss.py) */
        int64_t nb = L.ne * (L.e > L.ff ? L.e : L.ff);
        float *hb = malloc((size_t)nb * sizeof *hb);
        if (!hb)
            die("malloc");
        for (int64_t i = 0; i < nb; i++)
            hb[i] = 0.1f * (float)((i * 37) % 21 - 10) / 10.0f;
        float **b[3] = {&L.b_gate, &L.b_up, &L.b_down};
        int64_t n[3] = {L.ne * L.ff, L.ne * L.ff, L.ne * L.e};
        for (int j = 0; j < 3; j++) {
            *b[j] = dalloc((size_t)n[j] * 4);
            OK(IG_DEV(dev_upload)(g_dev, *b[j], hb, (size_t)n[j] * 4));
        }
        free(hb);
    }
    L.x = dalloc((size_t)(L.max_rows * L.e) * 2);
    L.h = dalloc((size_t)(max_pairs * (L.e > L.ff ? L.e : L.ff)) * 2); /* the GEMM's x too */
    L.wf16 = dalloc((size_t)(2 * L.ff * L.e) * 2);
    L.y = dalloc((size_t)(max_pairs * L.e) * 4);
    L.yg = dalloc((size_t)(max_pairs * 2 * L.ff) * 4);
    L.sel = dalloc((size_t)max_pairs * 4);
    L.order = dalloc((size_t)max_pairs * 4);
    L.tiles = dalloc((size_t)gk_moe_max_tiles(max_pairs, L.ne) * 12);
    L.n_tiles = dalloc(4);
    OK(IG_DEV(gk_random_f16)(L.x, L.max_rows * L.e, 5, 0.0f, 1.0f, g_stream));
    OK(IG_DEV(gk_random_f16)(L.h, max_pairs * (L.e > L.ff ? L.e : L.ff), 6, 0.0f, 1.0f,
                             g_stream));
    OK(IG_DEV(gk_random_f16)(L.wf16, 2 * L.ff * L.e, 7, 0.0f, 0.02f, g_stream));
    for (char *save = NULL, *t = strtok_r(rows_arg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int64_t n = atoll(t), pairs = n * L.k;
        if (n < 1)
            continue;
        double gemm = time_ms(&L, n, true, 2); /* 2 ff x e over the pairs: gate|up's flops */
        for (int m = 0; m < 2; m++) {
            bool mma = m == 0;
            route(&L, n, mma ? GK_MOE_MMA_TILE : GK_MOE_TILE);
            double gu = time_ms(&L, n, mma, 0), dn = time_ms(&L, n, mma, 1);
            double flops = 2.0 * (double)pairs * (double)(3 * L.ff * L.e);
            double tf = flops / ((gu + dn) * 1e-3) / 1e12;
            double tf_gemm = 2.0 * (double)pairs * (double)(2 * L.ff * L.e) / (gemm * 1e-3) / 1e12;
            printf("moe %s shape=%s rows=%lld pairs=%lld gate_up_us=%.1f down_us=%.1f "
                   "TFLOPS=%.1f gemm_f16_TFLOPS=%.1f of_gemm=%.2f",
                   mma ? "mma" : "gemv", shape, (long long)n, (long long)pairs, gu * 1e3,
                   dn * 1e3, tf, tf_gemm, tf / tf_gemm);
            if (peak > 0)
                printf(" of_peak=%.2f", tf / peak);
            printf("\n");
        }
    }
    for (int i = 0; i < g_n_allocs; i++)
        IG_DEV(dev_free)(g_dev, g_allocs[i]);
    IG_DEV(dev_close)(g_dev);
    return 0;
}
