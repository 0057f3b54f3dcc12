/* bench/bench_qmm.c: the quantized-weight kernels (ops/gpu_qmm.h) on the GPU
 * at Llama-3-8B shapes, against a device-to-device copy and the f16 kernels
 * measured in the same run, and the numbers gk_qmm_choose's thresholds
 * come from:
 *
 *   copy                       GB/s of a 1 GiB copy (read + write)
 *   gemv TYPE SHAPE n=1..8     gk_qgemv: us, GB/s of its weight bytes, of_copy;
 *                              gk_gemv_f16 on the same shape in f16 (n=1)
 *   step TYPE                  the GEMVs of one decode step (32 layers + head)
 *                              added up: their time and bandwidth alone
 *   rows TYPE n=...            gate|up (28672 x 4096): gk_qgemv (n <= 8),
 *                              gk_qmma, f16 slabs + cuBLAS (the dequant
 *                              path) and cuBLAS on f16 weights, then the
 *                              crossovers: the smallest n where qmma beats
 *                              qgemv and where dequant beats qmma
 *   dequant TYPE               gk_qdequant_f16 of gate|up: GB/s read + written
 *
 * Weights are random blocks made on the device (gk_qrandom), rotated over
 * copies totalling more than 256 MiB so L2 (50-60 MiB) does not serve them.
 * The first launch of each kernel and shape is checked against its CPU twin
 * on the first 64 rows (exit 1 on a mismatch). One line per figure,
 * key=value. Written over the device layer (device/device.h), so the same
 * source runs on the emulator at toy sizes: `bench_qmm --smoke` is a CI
 * test of this program (bench_qmm_emu, label emu), not a measurement.
 * Usage: bench_qmm [--types Q4_0,Q4_K,...] [--quick] [--copy-only] [--smoke]
 * (--quick: 1 and 8 rows for the GEMV lines, n = 8..2048 for the rows
 * lines, about 10 s a type; --copy-only: the copy line alone). Exits 77
 * without a GPU. */
#include "device/device.h"
#include "ops/gpu_ops.h"
#include "ops/gpu_qmm.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROTATE_BYTES ((size_t)256 << 20)
#define MAX_COPIES 64

static struct dev *g_dev;
static void *g_stream;
static bool g_smoke, g_quick;
static int g_bad;

static void die(const char *what)
{
    fprintf(stderr, "bench_qmm: %s failed\n", what);
    exit(1);
}

#define OK(call)                                                                \
    do {                                                                        \
        if ((call) != IG_OK)                                                    \
            die(#call);                                                         \
    } while (0)

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    OK(IG_DEV(dev_alloc)(g_dev, bytes ? bytes : 16, &p));
    return p;
}

/* ---- shapes ------------------------------------------------------------------ */

struct shape {
    const char *name;
    int64_t rows, cols;
    int per_step; /* times in one decode step of Llama-3-8B (32 layers) */
};

static const struct shape k_shapes[] = {
    {"qkv", 6144, 4096, 32}, {"wo", 4096, 4096, 32}, {"gate_up", 28672, 4096, 32},
    {"down", 4096, 14336, 32}, {"head", 128256, 4096, 1},
};
#define N_SHAPES (sizeof k_shapes / sizeof k_shapes[0])

/* --smoke: the same code on toy shapes (whole K super-blocks, ragged rows). */
static struct shape scaled(struct shape s)
{
    if (g_smoke) {
        s.rows = s.rows / 256 + 3;
        s.cols = s.cols / 4096 * 256;
    }
    return s;
}

/* ---- timing ---------------------------------------------------------------------- */

typedef int (*launch_fn)(void *ctx, int copy);

/* Mean ms of one launch over about 100 ms of back-to-back launches (one
 * launch in smoke mode). */
static double time_ms(launch_fn fn, void *ctx, int n_copies)
{
    for (int i = 0; i < (g_smoke ? 1 : 3); i++)
        OK(fn(ctx, i % n_copies));
    OK(IG_DEV(dev_sync)(g_dev));
    if (g_smoke)
        return 1;
    double ms = 0;
    int iters = 10;
    for (int pass = 0; pass < 2; pass++) {
        OK(IG_DEV(dev_timer_start)(g_dev));
        for (int i = 0; i < iters; i++)
            OK(fn(ctx, i % n_copies));
        OK(IG_DEV(dev_timer_stop)(g_dev, &ms));
        if (pass == 0) {
            int want = ms > 0 ? (int)(100.0 / (ms / iters)) : 1000;
            iters = want < 10 ? 10 : (want > 5000 ? 5000 : want);
        }
    }
    return ms / iters;
}

/* ---- the copy ------------------------------------------------------------------------ */

struct copy_ctx {
    void *dst, *src;
    size_t bytes;
};

static int copy_launch(void *ctx, int copy)
{
    struct copy_ctx *c = ctx;
    (void)copy;
    return IG_DEV(dev_copy)(g_dev, c->dst, c->src, c->bytes);
}

static double copy_gbps(void)
{
    struct copy_ctx c = {NULL, NULL, g_smoke ? (size_t)1 << 16 : (size_t)1 << 30};
    c.dst = dalloc(c.bytes);
    c.src = dalloc(c.bytes);
    OK(IG_DEV(dev_memset)(g_dev, c.src, 1, c.bytes));
    double ms = time_ms(copy_launch, &c, 1);
    IG_DEV(dev_free)(g_dev, c.dst);
    IG_DEV(dev_free)(g_dev, c.src);
    double gbps = 2.0 * (double)c.bytes / (ms * 1e-3) / 1e9;
    printf("copy bytes=%zu us=%.1f GBps=%.0f\n", c.bytes, ms * 1e3, gbps);
    return gbps;
}

/* ---- a weight on the device, rotated ------------------------------------------------------- */

struct weight {
    int type;
    int64_t rows, cols;
    size_t bytes;
    int n;                       /* copies */
    struct gk_qmat w[MAX_COPIES]; /* the same random blocks, n times */
};

static void make_weight(struct weight *wt, int type, int64_t rows, int64_t cols)
{
    wt->type = type, wt->rows = rows, wt->cols = cols;
    wt->bytes = gk_qmat_bytes(type, rows, cols);
    wt->n = (int)((ROTATE_BYTES + wt->bytes - 1) / wt->bytes);
    wt->n = g_smoke ? 1 : wt->n < 1 ? 1 : wt->n > MAX_COPIES ? MAX_COPIES : wt->n;
    for (int i = 0; i < wt->n; i++) {
        gk_qmat_carve(&wt->w[i], type, rows, cols, dalloc(wt->bytes));
        if (i == 0 && type == QUANT_F16)
            OK(IG_DEV(gk_random_f16)((uint16_t *)wt->w[0].q, rows * cols, 7, 0.0f,
                                     1.0f / sqrtf((float)cols), g_stream));
        else if (i == 0)
            OK(IG_DEV(gk_qrandom)(&wt->w[0], 7, g_stream));
        else
            OK(IG_DEV(dev_copy)(g_dev, wt->w[i].q, wt->w[0].q, wt->bytes));
    }
}

static void free_weight(struct weight *wt)
{
    for (int i = 0; i < wt->n; i++)
        IG_DEV(dev_free)(g_dev, wt->w[i].q);
}

/* The first rows of wt on the host (planes in one buffer). */
static struct gk_qmat host_rows(const struct weight *wt, int64_t rows, void **buf)
{
    size_t part = gk_qmat_bytes(wt->type, rows, wt->cols);
    *buf = malloc(part);
    struct gk_qmat h;
    gk_qmat_carve(&h, wt->type, rows, wt->cols, *buf);
    if (wt->type == QUANT_F16) {
        OK(IG_DEV(dev_download)(g_dev, h.q, wt->w[0].q, (size_t)(rows * wt->cols) * 2));
        return h;
    }
    struct gk_qlayout l;
    gk_qlayout_of(wt->type, &l);
    size_t blocks = (size_t)(rows * (wt->cols / l.block));
    OK(IG_DEV(dev_download)(g_dev, h.q, wt->w[0].q, blocks * l.q));
    if (l.h)
        OK(IG_DEV(dev_download)(g_dev, h.h, wt->w[0].h, blocks * l.h));
    OK(IG_DEV(dev_download)(g_dev, h.s, wt->w[0].s, blocks * l.s));
    return h;
}

/* x: n rows of random f16 on the device (and the host copy). */
static uint16_t *make_x(int64_t n, int64_t cols, uint16_t **host)
{
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(n * 131 + cols);
    *host = malloc((size_t)(n * cols) * 2);
    for (int64_t i = 0; i < n * cols; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        (*host)[i] = ig_f32_to_f16((float)((double)(s >> 11) / 9007199254740992.0 * 4 - 2));
    }
    uint16_t *d = dalloc((size_t)(n * cols) * 2);
    OK(IG_DEV(dev_upload)(g_dev, d, *host, (size_t)(n * cols) * 2));
    return d;
}

/* ---- the products ------------------------------------------------------------------------ */

enum path { P_QGEMV, P_QMMA, P_DEQUANT, P_F16 };
static const char *const k_path_names[] = {"qgemv", "qmma", "dequant", "f16_gemm"};

struct prod_ctx {
    enum path path;
    struct weight *wt;
    const uint16_t *x;
    int64_t n;
    float *y;
    uint16_t *scratch;
    int64_t slab;
};

static int prod_launch(void *ctx, int copy)
{
    struct prod_ctx *c = ctx;
    const struct gk_qmat *w = &c->wt->w[copy % c->wt->n];
    struct gk_qgemv_params p = {.w = *w, .x = c->x, .ld_x = w->cols, .n = c->n, .y = c->y,
                                .ld_y = w->rows, .beta = 0};
    switch (c->path) {
    case P_QGEMV:
        return w->type == QUANT_F16
                   ? IG_DEV(gk_gemv_f16)((const uint16_t *)w->q, c->x, c->y, w->rows, w->cols,
                                         0.0f, g_stream)
                   : IG_DEV(gk_qgemv)(&p, g_stream);
    case P_QMMA:
        return IG_DEV(gk_qmma)(&p, g_stream);
    case P_F16:
        return IG_DEV(dev_gemm_f16)(g_dev, (const uint16_t *)w->q, c->x, c->y, w->rows, w->cols,
                                    c->n, w->cols, w->rows, 0.0f);
    default: /* P_DEQUANT */
        for (int64_t r0 = 0; r0 < w->rows; r0 += c->slab) {
            int64_t nr = w->rows - r0 < c->slab ? w->rows - r0 : c->slab;
            int st = IG_DEV(gk_qdequant_f16)(w, r0, nr, c->scratch, g_stream);
            if (st == IG_OK)
                st = IG_DEV(dev_gemm_f16)(g_dev, c->scratch, c->x, c->y + r0, nr, w->cols, c->n,
                                          w->cols, w->rows, 0.0f);
            if (st != IG_OK)
                return st;
        }
        return IG_OK;
    }
}

/* One launch of c against the twin on the first rows; counts a mismatch. */
static void check(struct prod_ctx *c, const uint16_t *hx, const char *what)
{
    const int64_t rows = c->wt->rows < 64 ? c->wt->rows : 64, cols = c->wt->cols, n = c->n;
    OK(prod_launch(c, 0));
    float *y = malloc((size_t)(n * c->wt->rows) * 4), *yr = malloc((size_t)(n * rows) * 4);
    OK(IG_DEV(dev_download)(g_dev, y, c->y, (size_t)(n * c->wt->rows) * 4));
    void *buf;
    struct gk_qmat h = host_rows(c->wt, rows, &buf);
    struct gk_qgemv_params p = {.w = h, .x = hx, .ld_x = cols, .n = n, .y = yr, .ld_y = rows};
    if (h.type == QUANT_F16) {
        for (int64_t t = 0; t < n; t++)
            gk_gemv_f16_ref((const uint16_t *)h.q, hx + t * cols, yr + t * rows, rows, cols, 0);
    } else if (c->path == P_QGEMV) {
        gk_qgemv_ref(&p);
    } else {
        gk_qmma_ref(&p); /* qmma and dequant: the f16 GEMM of the dequantized rows */
    }
    int bad = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = y[t * c->wt->rows + r], b = yr[t * rows + r];
            /* f32 sums in another order; 1e-3 of the row's scale (|y| ~ 1) */
            if (!(fabs(a - b) <= 1e-3 * (1 + fabs(b))) && bad++ < 3)
                fprintf(stderr, "%s: y[%lld][%lld] gpu %.7g twin %.7g\n", what, (long long)t,
                        (long long)r, a, b);
        }
    if (bad)
        g_bad++;
    free(y), free(yr), free(buf);
}

/* ---- the sections -------------------------------------------------------------------------- */

static void bench_gemv(int type, double copy)
{
    double step_ms = 0, step_bytes = 0;
    for (size_t si = 0; si < N_SHAPES; si++) {
        struct shape s = scaled(k_shapes[si]);
        struct weight wt;
        make_weight(&wt, type, s.rows, s.cols);
        uint16_t *hx;
        uint16_t *x = make_x(GK_QGEMV_MAX_N, s.cols, &hx);
        float *y = dalloc((size_t)(GK_QGEMV_MAX_N * s.rows) * 4);
        for (int64_t n = 1; n <= GK_QGEMV_MAX_N; n *= 2) {
            if ((type == QUANT_F16 && n > 1) || (g_quick && n > 1 && n < GK_QGEMV_MAX_N))
                continue;
            struct prod_ctx c = {.path = P_QGEMV, .wt = &wt, .x = x, .n = n, .y = y};
            char what[96];
            snprintf(what, sizeof what, "gemv %s %s n=%lld", quant_type_name((uint32_t)type),
                     s.name, (long long)n);
            check(&c, hx, what);
            double ms = time_ms(prod_launch, &c, wt.n);
            double gbps = (double)wt.bytes / (ms * 1e-3) / 1e9;
            printf("gemv type=%s shape=%s rows=%lld cols=%lld n=%lld us=%.2f GBps=%.0f "
                   "of_copy=%.3f\n", quant_type_name((uint32_t)type), s.name, (long long)s.rows,
                   (long long)s.cols, (long long)n, ms * 1e3, gbps, gbps / copy);
            if (n == 1)
                step_ms += ms * s.per_step, step_bytes += (double)wt.bytes * s.per_step;
        }
        fflush(stdout);
        IG_DEV(dev_free)(g_dev, x);
        IG_DEV(dev_free)(g_dev, y);
        free(hx);
        free_weight(&wt);
    }
    double gbps = step_bytes / (step_ms * 1e-3) / 1e9;
    printf("step type=%s gemv_ms=%.3f weight_bytes=%.0f GBps=%.0f of_copy=%.3f tok_s_bound=%.1f\n",
           quant_type_name((uint32_t)type), step_ms, step_bytes, gbps, gbps / copy,
           1e3 / step_ms);
}

static void bench_rows(int type)
{
    struct shape s = scaled(k_shapes[2]); /* gate|up */
    struct weight wt, wf;
    make_weight(&wt, type, s.rows, s.cols);
    make_weight(&wf, QUANT_F16, s.rows, s.cols);
    static const int64_t all_ns[] = {1, 2, 4, 8, 9, 16, 32, 64, 128, 256, 512, 1024, 2048};
    static const int64_t quick_ns[] = {8, 16, 64, 256, 1024, 2048};
    const int64_t *ns = g_quick ? quick_ns : all_ns;
    const size_t n_ns = g_quick ? sizeof quick_ns / sizeof quick_ns[0]
                                : sizeof all_ns / sizeof all_ns[0];
    const int64_t n_max = g_smoke ? 70 : 2048;
    uint16_t *hx;
    uint16_t *x = make_x(n_max, s.cols, &hx);
    float *y = dalloc((size_t)(n_max * s.rows) * 4);
    struct gk_qmm_plan plan;
    gk_qmm_choose(type, s.rows, s.cols, 4096, &plan);
    int64_t slab = g_smoke ? 7 : plan.slab_rows;
    uint16_t *scratch = dalloc((size_t)(slab * s.cols) * 2);
    int64_t qmma_from = 0, dequant_from = 0;
    for (size_t i = 0; i < n_ns && ns[i] <= n_max; i++) {
        int64_t n = ns[i];
        double ms[4] = {0, 0, 0, 0};
        for (int p = 0; p < 4; p++) {
            if (p == P_QGEMV && n > GK_QGEMV_MAX_N)
                continue;
            struct prod_ctx c = {.path = (enum path)p, .wt = p == P_F16 ? &wf : &wt, .x = x,
                                 .n = n, .y = y, .scratch = scratch, .slab = slab};
            char what[96];
            snprintf(what, sizeof what, "%s %s n=%lld", k_path_names[p],
                     quant_type_name((uint32_t)type), (long long)n);
            if (n == 1 || n == 8 || n == 9 || n == 64)
                check(&c, hx, what);
            ms[p] = time_ms(prod_launch, &c, c.wt->n);
        }
        double flop = 2.0 * (double)(s.rows * s.cols) * (double)n;
        printf("rows type=%s n=%lld qgemv_us=%.1f qmma_us=%.1f dequant_us=%.1f f16_gemm_us=%.1f "
               "qmma_TFLOPs=%.1f dequant_TFLOPs=%.1f f16_TFLOPs=%.1f\n",
               quant_type_name((uint32_t)type), (long long)n, ms[P_QGEMV] * 1e3,
               ms[P_QMMA] * 1e3, ms[P_DEQUANT] * 1e3, ms[P_F16] * 1e3,
               flop / (ms[P_QMMA] * 1e-3) / 1e12, flop / (ms[P_DEQUANT] * 1e-3) / 1e12,
               flop / (ms[P_F16] * 1e-3) / 1e12);
        fflush(stdout);
        if (!qmma_from && n <= GK_QGEMV_MAX_N && ms[P_QMMA] < ms[P_QGEMV])
            qmma_from = n;
        if (!dequant_from && ms[P_DEQUANT] < ms[P_QMMA])
            dequant_from = n;
    }
    /* qmma_from_n 0: the GEMV wins up to its last row count (GK_QGEMV_MAX_N) */
    printf("crossover type=%s qmma_beats_qgemv_from_n=%lld dequant_beats_qmma_from_n=%lld "
           "(0: not in the range)\n", quant_type_name((uint32_t)type), (long long)qmma_from,
           (long long)dequant_from);

    /* the dequantization alone: bytes read (blocks) + written (f16) */
    double total = 0;
    int reps = g_smoke ? 1 : 20;
    OK(IG_DEV(dev_sync)(g_dev));
    double ms = 0;
    if (!g_smoke)
        OK(IG_DEV(dev_timer_start)(g_dev));
    for (int r = 0; r < reps; r++)
        for (int64_t r0 = 0; r0 < s.rows; r0 += slab) {
            int64_t nr = s.rows - r0 < slab ? s.rows - r0 : slab;
            OK(IG_DEV(gk_qdequant_f16)(&wt.w[r % wt.n], r0, nr, scratch, g_stream));
        }
    if (!g_smoke)
        OK(IG_DEV(dev_timer_stop)(g_dev, &ms));
    total = ((double)wt.bytes + 2.0 * (double)(s.rows * s.cols)) * reps;
    printf("dequant type=%s rows=%lld cols=%lld us=%.1f GBps=%.0f\n",
           quant_type_name((uint32_t)type), (long long)s.rows, (long long)s.cols,
           ms / reps * 1e3, g_smoke ? 0 : total / (ms * 1e-3) / 1e9);
    IG_DEV(dev_free)(g_dev, x);
    IG_DEV(dev_free)(g_dev, y);
    IG_DEV(dev_free)(g_dev, scratch);
    free(hx);
    free_weight(&wt);
    free_weight(&wf);
}

static int parse_type(const char *name)
{
    for (uint32_t t = 0; t < 64; t++) {
        const struct quant_traits *tr = quant_traits_of(t);
        if (tr && !strcmp(tr->name, name) && (t == QUANT_F16 || gk_qmm_native((int)t, 1, 256)))
            return (int)t;
    }
    fprintf(stderr, "bench_qmm: unknown or unsupported type '%s'\n", name);
    exit(2);
}

int main(int argc, char **argv)
{
    char types_arg[256] = "Q4_0,Q4_K,Q6_K,Q8_0,Q5_K";
    bool copy_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) {
            g_smoke = true;
        } else if (!strcmp(argv[i], "--copy-only")) {
            copy_only = true;
        } else if (!strcmp(argv[i], "--quick")) {
            g_quick = true;
        } else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            snprintf(types_arg, sizeof types_arg, "%s", argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: bench_qmm [--types Q4_0,Q4_K,...] [--quick] [--copy-only] [--smoke]\n");
            return 2;
        }
    }
    if (IG_DEV(dev_count)() == 0) {
        fprintf(stderr, "bench_qmm: no CUDA device\n");
        return 77;
    }
    OK(IG_DEV(dev_open)(0, &g_dev));
    g_stream = IG_DEV(dev_stream)(g_dev);
    double copy = copy_gbps();
    if (copy_only) {
        IG_DEV(dev_close)(g_dev);
        return 0;
    }
    bench_gemv(QUANT_F16, copy);
    for (char *save = NULL, *t = strtok_r(types_arg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int type = parse_type(t);
        bench_gemv(type, copy);
        bench_rows(type);
    }
    IG_DEV(dev_close)(g_dev);
    fprintf(stderr, "bench_qmm: %s\n", g_bad ? "MISMATCHES (see above)" : "every check ok");
    return g_bad ? 1 : 0;
}
