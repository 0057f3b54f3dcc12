/* tests/emu/backend_checks.h: the CUDA backend against the CPU backend, shared
 * by tests/emu/test_backend_emu.c (emulated, the real model),
 * tests/emu/test_backend_qemu.c (emulated kernels, small synthetic models)
 * and tests/gpu/test_backend_gpu.c (a GPU, synthetic models): greedy steps
 * fed with the CPU's choice (teacher forcing) must give logits within the
 * pair's bound and pick the same token unless the CPU's top two are closer
 * than twice the largest logit error; the downloaded cache matches the
 * CPU's; an uploaded cache continues exactly. IG_DEV picks the emulated or
 * the CUDA entry points. */
#ifndef IGNITE_TESTS_EMU_BACKEND_CHECKS_H
#define IGNITE_TESTS_EMU_BACKEND_CHECKS_H

#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/status.h"
#include "core/timer.h"
#include "tests/test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f16 weights (--gpu-weights f16): weights, activations and the cache are
 * f16 on the device, each rounding 2^-11 relative; through 30 layers the
 * logits move by about 1e-2 of their largest magnitude at most. */
#define LOGIT_TOL 3e-2
/* Native weights: products of up to 8 rows quantize the activations to
 * int8 per 32 elements (ops/gpu_qmm.h, as the CPU's fast path does), so the
 * bounds are those tests/cpu/test_fast_forward.py holds the CPU's int8 path
 * to on the real model (whose residual outliers make blocks coarse):
 * max |dev - cpu| / max |cpu| <= 0.15 and NMSE <= 3e-2. */
#define LOGIT_TOL_INT8 0.15
#define NMSE_TOL_INT8 3e-2
#define N_STEPS 5
#define N_CTX 256

struct pair {
    struct backend *cpu;
    struct gpu_backend *dev;
    float *lc, *le;
    int64_t n_vocab;
    double tol;      /* max |dev - cpu| / max |cpu|; 0: LOGIT_TOL */
    double nmse_tol; /* sum (dev - cpu)^2 / sum cpu^2; 0: not checked */
    bool allow_ties; /* a top-1 within twice the largest logit error of the CPU's is a tie */
    double worst, worst_nmse; /* the largest errors seen */
};

static void compare(struct pair *p, const char *what)
{
    double e = test_rel_err(p->le, p->lc, p->n_vocab), tol = p->tol ? p->tol : LOGIT_TOL;
    int64_t ac = test_argmax(p->lc, p->n_vocab), ae = test_argmax(p->le, p->n_vocab);
    CHECKF(e <= tol, "%s: logits relative error %.3e > %.1e", what, e, tol);
    double max_diff = 0, se = 0, sr = 0;
    for (int64_t i = 0; i < p->n_vocab; i++) {
        double d = (double)p->le[i] - p->lc[i];
        max_diff = fmax(max_diff, fabs(d));
        se += d * d;
        sr += (double)p->lc[i] * p->lc[i];
    }
    double nmse = sr > 0 ? se / sr : 0;
    if (p->nmse_tol)
        CHECKF(nmse <= p->nmse_tol, "%s: logits NMSE %.3e > %.1e", what, nmse, p->nmse_tol);
    bool tie = p->allow_ties && p->lc[ae] >= p->lc[ac] - 2 * max_diff;
    CHECKF(ac == ae || tie, "%s: top-1 %lld (CUDA backend) vs %lld (CPU)", what, (long long)ae,
           (long long)ac);
    p->worst = fmax(p->worst, e);
    p->worst_nmse = fmax(p->worst_nmse, nmse);
    fprintf(stderr, "%s: rel err %.2e, NMSE %.2e, top-1 %lld%s\n", what, e, nmse, (long long)ac,
            ac == ae ? "" : " (a tie)");
}

/* Prefills ids in chunks of `chunk` on both, then N_STEPS greedy steps fed
 * with the CPU's choice (so both see the same tokens). */
static void run_prompt(struct pair *p, const int32_t *ids, int64_t n, int64_t chunk,
                       const char *name)
{
    char what[96];
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        int64_t t0 = ig_now_ns();
        CHECK(backend_prefill(p->cpu, ids + i, len, i, p->lc) == IG_OK);
        int64_t t1 = ig_now_ns();
        CHECK(IG_DEV(gpu_prefill)(p->dev, ids + i, len, i, p->le) == IG_OK);
        fprintf(stderr, "prefill %lld: cpu %.0f ms, dev %.0f ms\n", (long long)len,
                (double)(t1 - t0) / 1e6, (double)(ig_now_ns() - t1) / 1e6);
    }
    snprintf(what, sizeof what, "%s prefill (%lld tokens)", name, (long long)n);
    compare(p, what);
    for (int s = 0; s < N_STEPS; s++) {
        int32_t tok = (int32_t)test_argmax(p->lc, p->n_vocab);
        int64_t pos = n + s;
        int64_t t0 = ig_now_ns();
        CHECK(backend_decode(p->cpu, tok, pos, p->lc) == IG_OK);
        int64_t t1 = ig_now_ns();
        CHECK(IG_DEV(gpu_decode)(p->dev, tok, pos, p->le) == IG_OK);
        fprintf(stderr, "decode: cpu %.0f ms, dev %.0f ms\n", (double)(t1 - t0) / 1e6,
                (double)(ig_now_ns() - t1) / 1e6);
        snprintf(what, sizeof what, "%s decode step %d", name, s + 1);
        compare(p, what);
    }
}

/* The device cache, downloaded, against the CPU's f32 cache. */
static void compare_caches(struct pair *p, const struct model *m)
{
    const struct kv_cache *ref;
    struct kv_cache *dl = NULL;
    CHECK(backend_kv_export(p->cpu, &ref) == IG_OK);
    CHECK(kv_cache_create(&m->hp, N_CTX, KV_F16, NULL, &dl) == IG_OK);
    if (!dl)
        return;
    CHECK(IG_DEV(gpu_kv_download)(p->dev, dl) == IG_OK);
    CHECK(dl->n_pos == ref->n_pos);
    double max_err = 0, max_ref = 0;
    float a[128], b[128];
    for (int64_t l = 0; l < ref->n_layer; l++)
        for (int64_t h = 0; h < ref->n_head_kv; h++)
            for (int64_t pos = 0; pos < ref->n_pos; pos++) {
                kv_row_to_f32(ref->dtype, kv_cache_rows(ref, kv_cache_k_table(ref, l), h, pos),
                              ref->head_dim, a);
                kv_row_to_f32(dl->dtype, kv_cache_rows(dl, kv_cache_k_table(dl, l), h, pos),
                              dl->head_dim, b);
                for (int64_t d = 0; d < ref->head_dim; d++) {
                    max_err = fmax(max_err, fabs((double)a[d] - b[d]));
                    max_ref = fmax(max_ref, fabs((double)a[d]));
                }
            }
    CHECKF(max_err <= (p->tol ? p->tol : LOGIT_TOL) * max_ref, "downloaded K cache: max error %.3e of %.3e", max_err,
           max_ref);
    fprintf(stderr, "K cache: max error %.2e of max |K| %.2e\n", max_err, max_ref);
    kv_cache_free(dl);
}

/* A fresh emulated backend given the downloaded cache continues exactly as
 * the original does. */
static void check_upload(struct pair *p, const struct model *m, const struct backend_opts *o)
{
    struct kv_cache *dl = NULL;
    struct gpu_backend *fresh = NULL;
    CHECK(kv_cache_create(&m->hp, N_CTX, KV_F16, NULL, &dl) == IG_OK);
    CHECK(IG_DEV(gpu_kv_download)(p->dev, dl) == IG_OK);
    CHECK(IG_DEV(gpu_backend_create)(m, o, &fresh) == IG_OK);
    if (!dl || !fresh)
        goto done;
    CHECK(IG_DEV(gpu_kv_upload)(fresh, dl) == IG_OK);
    CHECK(IG_DEV(gpu_n_pos)(fresh) == IG_DEV(gpu_n_pos)(p->dev));
    int64_t pos = IG_DEV(gpu_n_pos)(p->dev);
    float *lf = malloc((size_t)p->n_vocab * sizeof *lf);
    CHECK(lf != NULL);
    if (lf) {
        CHECK(IG_DEV(gpu_decode)(p->dev, 42, pos, p->le) == IG_OK);
        CHECK(IG_DEV(gpu_decode)(fresh, 42, pos, lf) == IG_OK);
        CHECKF(memcmp(lf, p->le, (size_t)p->n_vocab * sizeof *lf) == 0,
               "uploaded cache: logits differ (rel err %.3e)", test_rel_err(lf, p->le, p->n_vocab));
    }
    free(lf);
done:
    IG_DEV(gpu_backend_free)(fresh);
    kv_cache_free(dl);
}

#endif
