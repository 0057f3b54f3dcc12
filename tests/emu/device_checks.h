/* tests/emu/device_checks.h: checks of the device layer (device/device.h)
 * that both implementations must pass: copy/memset round trips, an absurd
 * allocation, the copy stream's order through events (dc_check_events), and
 * dev_gemm_f16 against a double-precision reference on
 * random f16 data, ragged shapes, padded strides (padding and a guard zone
 * after y must stay untouched) and beta 0 (y poisoned with NaN) and 1.
 * Included by tests/emu/test_device_emu.c and tests/gpu/test_device_gpu.c;
 * IG_DEV names whichever layer the test links. */
#ifndef IGNITE_TESTS_EMU_DEVICE_CHECKS_H
#define IGNITE_TESTS_EMU_DEVICE_CHECKS_H

#include "core/half.h"
#include "core/status.h"
#include "device/device.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DEV_CHECK_GUARD 64             /* floats after y that must stay untouched */
#define DEV_CHECK_SENTINEL 0xdeadbeefu /* their bits, and those of y's padding */
#define DEV_CHECK_F16_NAN 0x7e00u      /* x's padding: read it and the sum is NaN */

static void *dc_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "FAIL: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* The copy stream and events, as CUDA orders them: a download on the copy
 * stream after it waits on a main-stream event sees the main stream's
 * writes before the record; the host, after waiting on the copy's event,
 * sees its bytes; the main stream, after waiting on it, may overwrite the
 * source; an event never recorded is done; a record replaced by a later one
 * is waited for through the later. */
static void dc_check_events(struct dev *d)
{
    enum { N = 4096 };
    void *p = NULL, *h = NULL;
    struct dev_event *main_ev = NULL, *copy_ev = NULL;
    CHECK(IG_DEV(dev_alloc)(d, N, &p) == IG_OK && p);
    CHECK(IG_DEV(dev_alloc_host)(d, 2 * N, &h) == IG_OK && h);
    CHECK(IG_DEV(dev_event_create)(d, &main_ev) == IG_OK && main_ev);
    CHECK(IG_DEV(dev_event_create)(d, &copy_ev) == IG_OK && copy_ev);
    if (!p || !h || !main_ev || !copy_ev)
        return;
    unsigned char *hb = h;
    CHECK(IG_DEV(dev_event_sync)(d, copy_ev) == IG_OK); /* never recorded: done */
    memset(hb, 0, 2 * N);
    CHECK(IG_DEV(dev_memset)(d, p, 0x5a, N) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_MAIN, main_ev) == IG_OK);
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_COPY, main_ev) == IG_OK);
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, hb, p, N) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_COPY, copy_ev) == IG_OK);
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, hb + N, p, N) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_COPY, copy_ev) == IG_OK); /* replaces */
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_MAIN, copy_ev) == IG_OK);
    CHECK(IG_DEV(dev_memset)(d, p, 0x11, N) == IG_OK); /* after both copies read */
    CHECK(IG_DEV(dev_event_sync)(d, copy_ev) == IG_OK);
    int64_t bad = 0;
    for (int i = 0; i < 2 * N; i++)
        bad += hb[i] != 0x5a;
    CHECKF(bad == 0, "%lld of %d bytes downloaded on the copy stream are wrong", (long long)bad,
           2 * N);
    CHECK(IG_DEV(dev_sync)(d) == IG_OK);
    IG_DEV(dev_event_destroy)(d, main_ev);
    IG_DEV(dev_event_destroy)(d, copy_ev);
    IG_DEV(dev_event_destroy)(d, NULL);
    IG_DEV(dev_free_host)(d, h);
    IG_DEV(dev_free)(d, p);
}

/* Upload, memset, device copy, pinned async upload, download: every byte. */
static void dc_check_memory(struct dev *d)
{
    enum { N = 1000 }; /* not a multiple of the 256-byte alignment */
    unsigned char a[N], b[N], want[N];
    for (int i = 0; i < N; i++)
        a[i] = (unsigned char)(i * 37 + 11);
    void *p = NULL, *q = NULL, *h = NULL;
    CHECK(IG_DEV(dev_alloc)(d, N, &p) == IG_OK && p);
    CHECK(IG_DEV(dev_alloc)(d, N, &q) == IG_OK && q);
    CHECK(IG_DEV(dev_alloc_host)(d, N, &h) == IG_OK && h);
    if (!p || !q || !h)
        return;
    CHECK(((uintptr_t)p & 255) == 0 && ((uintptr_t)q & 255) == 0);

    CHECK(IG_DEV(dev_upload)(d, p, a, N) == IG_OK);
    memset(b, 0, N);
    CHECK(IG_DEV(dev_download)(d, b, p, N) == IG_OK);
    CHECK(memcmp(a, b, N) == 0);

    memcpy(want, a, N);
    memset(want + 100, 0xab, 300);
    CHECK(IG_DEV(dev_memset)(d, (char *)p + 100, 0xab, 300) == IG_OK);
    CHECK(IG_DEV(dev_copy)(d, q, p, N) == IG_OK);
    CHECK(IG_DEV(dev_download)(d, b, q, N) == IG_OK);
    CHECK(memcmp(want, b, N) == 0);

    for (int i = 0; i < N; i++)
        ((unsigned char *)h)[i] = (unsigned char)(255 - i);
    CHECK(IG_DEV(dev_upload_async)(d, (char *)p + 1, h, N - 1) == IG_OK);
    CHECK(IG_DEV(dev_sync)(d) == IG_OK);
    CHECK(IG_DEV(dev_download)(d, b, p, N) == IG_OK);
    CHECK(b[0] == want[0] && memcmp(b + 1, h, N - 1) == 0);

    CHECK(IG_DEV(dev_upload)(d, p, a, 0) == IG_OK); /* empty copies are fine */
    IG_DEV(dev_free)(d, p);
    IG_DEV(dev_free)(d, q);
    IG_DEV(dev_free)(d, NULL);
    IG_DEV(dev_free_host)(d, h);
    IG_DEV(dev_free_host)(d, NULL);
}

/* 1 PiB: IG_E_NOMEM and a NULL pointer, and the device still works after. */
static void dc_check_absurd_alloc(struct dev *d)
{
    void *p = (void *)1;
    fprintf(stderr, "(an out-of-memory line is expected next)\n");
    CHECK(IG_DEV(dev_alloc)(d, (size_t)1 << 50, &p) == IG_E_NOMEM);
    CHECK(p == NULL);
    unsigned char b[16] = {0};
    CHECK(IG_DEV(dev_alloc)(d, sizeof b, &p) == IG_OK && p);
    if (!p)
        return;
    CHECK(IG_DEV(dev_memset)(d, p, 7, sizeof b) == IG_OK);
    CHECK(IG_DEV(dev_sync)(d) == IG_OK);
    CHECK(IG_DEV(dev_download)(d, b, p, sizeof b) == IG_OK);
    CHECK(b[0] == 7 && b[15] == 7);
    IG_DEV(dev_free)(d, p);
}

/* One GEMM problem on the host: inputs, y's initial state, the reference. */
struct dc_gemm {
    int64_t rows, cols, n, ld_x, ld_y;
    float beta;
    uint16_t *w, *x; /* [rows][cols], [n][ld_x] (padding NaN) */
    float *y0;       /* [n * ld_y + guard]: what y holds before the product */
    double *ref;     /* [n][rows] */
    double *bound;   /* [n][rows]: sum |w x| + |beta y0|, scales the tolerance */
};

static void dc_gemm_fill_x(struct dc_gemm *g, uint64_t *rng)
{
    for (int64_t t = 0; t < g->n; t++)
        for (int64_t c = 0; c < g->ld_x; c++)
            g->x[t * g->ld_x + c] =
                c < g->cols ? ig_f32_to_f16(test_rand_f(rng)) : DEV_CHECK_F16_NAN;
}

/* The reference of the current w and x (and y0 when beta is 1). */
static void dc_gemm_reference(struct dc_gemm *g)
{
    for (int64_t t = 0; t < g->n; t++)
        for (int64_t r = 0; r < g->rows; r++) {
            double s = 0, m = 0;
            for (int64_t c = 0; c < g->cols; c++) {
                double p = (double)ig_f16_to_f32(g->w[r * g->cols + c]) *
                           ig_f16_to_f32(g->x[t * g->ld_x + c]);
                s += p;
                m += fabs(p);
            }
            if (g->beta != 0.0f) {
                s += g->y0[t * g->ld_y + r];
                m += fabs((double)g->y0[t * g->ld_y + r]);
            }
            g->ref[t * g->rows + r] = s;
            g->bound[t * g->rows + r] = m;
        }
}

static void dc_gemm_init(struct dc_gemm *g, int64_t rows, int64_t cols, int64_t n, int padded,
                         float beta, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->rows = rows, g->cols = cols, g->n = n, g->beta = beta;
    g->ld_x = cols + (padded ? 3 : 0);
    g->ld_y = rows + (padded ? 5 : 0);
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    g->w = (uint16_t *)dc_malloc((size_t)(rows * cols) * 2);
    g->x = (uint16_t *)dc_malloc((size_t)(n * g->ld_x) * 2);
    size_t ny = (size_t)(n * g->ld_y) + DEV_CHECK_GUARD;
    g->y0 = (float *)dc_malloc(ny * sizeof(float));
    g->ref = (double *)dc_malloc((size_t)(n * rows) * sizeof(double));
    g->bound = (double *)dc_malloc((size_t)(n * rows) * sizeof(double));
    for (int64_t i = 0; i < rows * cols; i++)
        g->w[i] = ig_f32_to_f16(test_rand_f(&rng));
    dc_gemm_fill_x(g, &rng);
    uint32_t sentinel = DEV_CHECK_SENTINEL;
    for (size_t i = 0; i < ny; i++)
        memcpy(&g->y0[i], &sentinel, 4);
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++)
            g->y0[t * g->ld_y + r] = beta == 0.0f ? NAN : test_rand_f(&rng);
    dc_gemm_reference(g);
}

static void dc_gemm_free(struct dc_gemm *g)
{
    free(g->w);
    free(g->x);
    free(g->y0);
    free(g->ref);
    free(g->bound);
}

static size_t dc_gemm_y_floats(const struct dc_gemm *g)
{
    return (size_t)(g->n * g->ld_y) + DEV_CHECK_GUARD;
}

/* Checks a downloaded y: every element within `ulps` f32 roundings per
 * addend of the reference ((cols + 2) * ulp * sum |terms|, the classic bound
 * for a recursive sum), padding and guard untouched bit for bit. Returns the
 * number of bad elements; *max_err gets the largest error relative to the
 * bound's scale. */
static int dc_gemm_verify(const struct dc_gemm *g, const float *y, double ulp, const char *name,
                          double *max_err)
{
    int bad = 0;
    double worst = 0;
    for (int64_t t = 0; t < g->n; t++)
        for (int64_t i = 0; i < g->ld_y; i++) {
            size_t at = (size_t)(t * g->ld_y + i);
            if (i >= g->rows) {
                if (memcmp(&y[at], &g->y0[at], 4) != 0 && bad++ < 5)
                    fprintf(stderr, "%s: y padding [%lld][%lld] written\n", name, (long long)t,
                            (long long)i);
                continue;
            }
            double ref = g->ref[t * g->rows + i];
            double tol = (double)(g->cols + 2) * ulp * g->bound[t * g->rows + i] + 1e-30;
            double err = fabs((double)y[at] - ref);
            if (isfinite(err))
                worst = fmax(worst, err / tol);
            if (!(err <= tol) && bad++ < 5)
                fprintf(stderr, "%s: y[%lld][%lld] = %.9g, want %.9g (tol %.3g)\n", name,
                        (long long)t, (long long)i, (double)y[at], ref, tol);
        }
    for (size_t i = (size_t)(g->n * g->ld_y); i < dc_gemm_y_floats(g); i++)
        if (memcmp(&y[i], &g->y0[i], 4) != 0 && bad++ < 5)
            fprintf(stderr, "%s: guard float %zu after y written\n", name, i);
    *max_err = worst;
    return bad;
}

static void dc_gemm_name(const struct dc_gemm *g, char *buf, size_t size)
{
    snprintf(buf, size, "gemm rows %lld cols %lld n %lld ld_x %lld ld_y %lld beta %g",
             (long long)g->rows, (long long)g->cols, (long long)g->n, (long long)g->ld_x,
             (long long)g->ld_y, (double)g->beta);
}

/* Device buffers of one problem: w, x uploaded, y holding y0. */
struct dc_gemm_dev {
    void *w, *x, *y;
};

static int dc_gemm_upload(struct dev *d, const struct dc_gemm *g, struct dc_gemm_dev *b)
{
    memset(b, 0, sizeof *b);
    size_t wb = (size_t)(g->rows * g->cols) * 2, xb = (size_t)(g->n * g->ld_x) * 2;
    size_t yb = dc_gemm_y_floats(g) * sizeof(float);
    if (IG_DEV(dev_alloc)(d, wb, &b->w) || IG_DEV(dev_alloc)(d, xb, &b->x) ||
        IG_DEV(dev_alloc)(d, yb, &b->y))
        return 1;
    return IG_DEV(dev_upload)(d, b->w, g->w, wb) || IG_DEV(dev_upload)(d, b->x, g->x, xb) ||
           IG_DEV(dev_upload)(d, b->y, g->y0, yb);
}

static void dc_gemm_dev_free(struct dev *d, struct dc_gemm_dev *b)
{
    IG_DEV(dev_free)(d, b->w);
    IG_DEV(dev_free)(d, b->x);
    IG_DEV(dev_free)(d, b->y);
}

static int dc_gemm_run(struct dev *d, const struct dc_gemm *g, const struct dc_gemm_dev *b)
{
    return IG_DEV(dev_gemm_f16)(d, (const uint16_t *)b->w, (const uint16_t *)b->x,
                                (float *)b->y, g->rows, g->cols, g->n, g->ld_x, g->ld_y,
                                g->beta);
}

/* One problem end to end; returns its worst error relative to tolerance. */
static double dc_gemm_case(struct dev *d, int64_t rows, int64_t cols, int64_t n, int padded,
                           float beta, double ulp)
{
    struct dc_gemm g;
    dc_gemm_init(&g, rows, cols, n, padded, beta,
                 (uint64_t)(rows * 1000003 + cols * 1009 + n * 17 + padded * 3) +
                     (beta != 0.0f));
    char name[160];
    dc_gemm_name(&g, name, sizeof name);
    struct dc_gemm_dev b;
    double worst = 0;
    CHECKF(dc_gemm_upload(d, &g, &b) == 0, "%s: upload", name);
    CHECKF(dc_gemm_run(d, &g, &b) == IG_OK, "%s: dev_gemm_f16 failed", name);
    CHECKF(IG_DEV(dev_sync)(d) == IG_OK, "%s: sync", name);
    float *y = (float *)dc_malloc(dc_gemm_y_floats(&g) * sizeof(float));
    if (b.y && IG_DEV(dev_download)(d, y, b.y, dc_gemm_y_floats(&g) * sizeof(float)) == IG_OK) {
        int bad = dc_gemm_verify(&g, y, ulp, name, &worst);
        CHECKF(bad == 0, "%s: %d bad elements", name, bad);
    } else {
        CHECKF(0, "%s: download", name);
    }
    free(y);
    dc_gemm_dev_free(d, &b);
    dc_gemm_free(&g);
    return worst;
}

/* The ragged shapes: every rows x cols x n, beta 0 and 1, tight and padded
 * strides. Prints the worst error relative to the tolerance. */
static void dc_check_gemms(struct dev *d, double ulp, const char *label)
{
    static const int64_t rows[] = {1, 7, 33}, cols[] = {8, 72, 576}, ns[] = {1, 5, 17};
    double worst = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++)
                for (int padded = 0; padded < 2; padded++)
                    for (int beta = 0; beta < 2; beta++)
                        worst = fmax(worst, dc_gemm_case(d, rows[i], cols[j], ns[k], padded,
                                                         (float)beta, ulp));
    fprintf(stderr, "%s: 108 GEMMs, worst error %.3g of the tolerance\n", label, worst);
}

#endif
