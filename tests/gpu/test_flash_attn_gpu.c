/* tests/gpu/test_flash_attn_gpu.c: the prefill attention kernel on a real GPU
 * (prefill_attn_cuda), every variant of PREFILL_ATTN_VARIANTS, against fp64,
 * with the same cases, sentinels and tolerance rule as the emulated test
 * (tests/emu/attn_case.h), plus longer sequences the emulator cannot
 * afford; the ws variants also head dim 256, sliding windows, paged caches
 * (a block table in device memory) and K/V from cache and chunk on either
 * side of pos0; the mma.sync variants built for head dim 256 that too, and
 * every mma.sync variant windows, paged caches and variable-length calls
 * (attn_varlen: several sequences over one pool, sequences and tables in
 * device memory), as every ws variant the chooser lets take them (whole
 * 64-position block tiles, head dims 64 and 128). Exits 77 (skipped) when no CUDA
 * device is present. Label gpu.
 * Usage: test_flash_attn_gpu [--quick] [VARIANT...]: only those variants
 * (default all); --quick: the GPU check's list, small n first, then a few
 * medium ones (one line per case on stderr as it goes, so a time limit
 * leaves the quick cases' results). scripts/gpu/attn_correct.sh runs one
 * process per variant, so a variant that faults the CUDA context fails
 * alone. */
#include "tests/emu/attn_case.h"
#include "tests/gpu/cuda_check.h"
#include "tests/test.h"

/* The ws variants' work counter (two words, zero between launches), one
 * for every launch as the backend's; NULL before the first. */
static uint32_t *ws_tiles;

/* Every launch draws its items from ws_tiles (the other variants ignore it). */
static void use_ws_tiles(struct prefill_attn_params *p)
{
    if (!ws_tiles) {
        CK(cudaMalloc((void **)&ws_tiles, 2 * sizeof(uint32_t)));
        CK(cudaMemset(ws_tiles, 0, 2 * sizeof(uint32_t)));
    }
    p->tile_counter = ws_tiles;
}

/* After a launch: the counter back at zero (or the next launch skips items). */
static void check_ws_tiles(int variant)
{
    uint32_t w[2];
    CK(cudaMemcpy(w, ws_tiles, sizeof w, cudaMemcpyDeviceToHost));
    CHECKF(w[0] == 0 && w[1] == 0, "%s: the work counter left at %u, %u",
           prefill_attn_variant_name(variant), w[0], w[1]);
}

/* One variant on the GPU: fresh device copies of the case's buffers, the
 * kernel, the results back into the case's host buffers (o, lse, kc, vc). */
static int run_variant(struct attn_case *c, int variant)
{
    void *qkv = test_to_device(c->qkv, c->qkv_elems * 2);
    void *kc = test_to_device(c->kc0, c->cache_elems * 2);
    void *vc = test_to_device(c->vc0, c->cache_elems * 2);
    void *o = test_to_device(c->o, c->o_elems * 2);
    float *lse = (float *)test_to_device(c->lse, c->lse_elems * sizeof(float));
    struct prefill_attn_params p = attn_case_params(c, qkv, kc, vc, o, lse);
    p.variant = variant;
    void *table = NULL;
    if (c->paged) /* the kernel reads the block table from device memory */
        p.block_table = (const int32_t *)(table = test_to_device(
                            c->table, sizeof(int32_t) * (size_t)(c->n_ctx / ATTN_BLOCK)));
    use_ws_tiles(&p);
    int rc = prefill_attn_cuda(&p, NULL);
    CK(cudaDeviceSynchronize());
    check_ws_tiles(variant);
    CK(cudaMemcpy(c->o, o, c->o_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->lse, lse, c->lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->kc, kc, c->cache_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->vc, vc, c->cache_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaFree(qkv));
    CK(cudaFree(kc));
    CK(cudaFree(vc));
    CK(cudaFree(o));
    CK(cudaFree(lse));
    if (table)
        CK(cudaFree(table));
    return rc;
}

static int chosen[PREFILL_ATTN_N_VARIANTS]; /* from the command line */

/* Whether variant v is chosen, built for hd and runnable here (wgmma variants
 * off Hopper are not: listed once in main). */
static int wanted(int v, int64_t hd)
{
    return chosen[v] && prefill_attn_variant_supports(v, hd) && prefill_attn_cuda_supports(v);
}

/* The case on every wanted variant, against one fp64 reference (the CPU
 * reference dominates the run time: a case no variant wants is not made). */
/* Whether variant v can run the case (windows and paged caches: the chooser
 * says). */
static int fits(int v, const struct attn_case *c)
{
    if (!wanted(v, c->hd))
        return 0;
    if (!c->window && !c->paged)
        return 1;
    struct prefill_attn_params p = attn_case_params(c, c->qkv, c->kc, c->vc, c->o, c->lse);
    struct prefill_attn_tile t;
    p.variant = v;
    return prefill_attn_choose(&p, &t) == 0;
}

static void run_case_p(int64_t n, int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd,
                       int dtype, int64_t window, int paged)
{
    int any = 0;
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++)
        any |= wanted(v, hd) && ((!paged && !window) ||
                                 prefill_attn_variant_isa(v) != PREFILL_ATTN_ISA_WGMMA);
    if (!any)
        return;
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = n, c.pos0 = pos0, c.n_head = n_head, c.n_head_kv = n_head_kv, c.hd = hd;
    c.dtype = dtype;
    c.window = window;
    c.paged = paged;
    c.seed = (uint64_t)(n * 131 + pos0 * 7 + n_head + hd + dtype + window * 11);
    attn_case_init(&c);
    char name[128];
    attn_case_name(&c, name, sizeof name);
    uint16_t *o0 = (uint16_t *)malloc(c.o_elems * 2);
    float *lse0 = (float *)malloc(c.lse_elems * sizeof(float));
    memcpy(o0, c.o, c.o_elems * 2); /* the sentinels, restored before each variant */
    memcpy(lse0, c.lse, c.lse_elems * sizeof(float));
    struct attn_ref ref;
    attn_reference(&c, &ref);

    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++) {
        if (!fits(v, &c))
            continue;
        const char *vn = prefill_attn_variant_name(v);
        memcpy(c.o, o0, c.o_elems * 2);
        memcpy(c.lse, lse0, c.lse_elems * sizeof(float));
        int rc = run_variant(&c, v);
        CHECKF(rc == 0, "%s %s: launch returned %d", name, vn, rc);
        struct attn_err e;
        attn_errors(&c, &ref, c.o, c.lse, &e);
        int bad = attn_check_memory(&c, c.o, c.lse, c.kc, c.vc, "gpu");
        CHECKF(bad == 0, "%s %s: %d sentinel/cache violations", name, vn, bad);
        CHECKF(e.o_max <= 2 * ref.naive + 1e-7, "%s %s: max |O err| %.3g > 2 x naive %.3g", name,
               vn, e.o_max, ref.naive);
        CHECKF(e.lse_max <= 1e-3, "%s %s: max |lse err| %.3g", name, vn, e.lse_max);
        fprintf(stderr, "gpu %-52s %-11s O err %.3g (naive %.3g) lse err %.3g\n", name, vn,
                e.o_max, ref.naive, e.lse_max);
    }
    attn_ref_free(&ref);
    free(o0);
    free(lse0);
    attn_case_free(&c);
}

static void run_case_w(int64_t n, int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd,
                       int dtype, int64_t window)
{
    run_case_p(n, pos0, n_head, n_head_kv, hd, dtype, window, 0);
}

static void run_case(int64_t n, int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd,
                     int dtype)
{
    run_case_w(n, pos0, n_head, n_head_kv, hd, dtype, 0);
}

/* A variable-length case (attn_varlen: sequences of n_rows[i] rows at
 * pos0[i] over one shuffled pool, the sequences and tables in device
 * memory) on every wanted variant that takes it (the chooser says: the
 * mma.sync ones, the ws ones of whole-block tiles at head dims 64 and 128),
 * each sequence against its own fp64 reference. */
static void run_varlen(int n_seqs, const int32_t *n_rows, const int32_t *pos0, int64_t n_head,
                       int64_t n_head_kv, int64_t hd, int dtype, int64_t window)
{
    int any = 0;
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++)
        any |= wanted(v, hd) && (prefill_attn_variant_isa(v) == PREFILL_ATTN_ISA_MMA ||
                                 (prefill_attn_variant_isa(v) == PREFILL_ATTN_ISA_WS && hd <= 128));
    if (!any)
        return;
    struct attn_varlen vl;
    memset(&vl, 0, sizeof vl);
    vl.n_seqs = n_seqs;
    for (int i = 0; i < n_seqs; i++)
        vl.n_rows[i] = n_rows[i], vl.pos0[i] = pos0[i];
    vl.n_head = n_head, vl.n_head_kv = n_head_kv, vl.hd = hd, vl.dtype = dtype;
    vl.window = window;
    vl.seed = (uint64_t)(n_rows[0] * 131 + pos0[n_seqs - 1] * 7 + n_head + hd + dtype +
                         window * 11 + n_seqs);
    attn_varlen_init(&vl);
    struct attn_case *c = &vl.c;
    char name[200];
    attn_varlen_name(&vl, name, sizeof name);
    struct attn_ref ref[ATTN_MAX_SEQS];
    attn_varlen_reference(&vl, ref);
    uint16_t *o0 = (uint16_t *)malloc(c->o_elems * 2);
    float *lse0 = (float *)malloc(c->lse_elems * sizeof(float));
    memcpy(o0, c->o, c->o_elems * 2);
    memcpy(lse0, c->lse, c->lse_elems * sizeof(float));
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++) {
        if (!wanted(v, hd))
            continue;
        struct prefill_attn_params hp =
            attn_varlen_params(&vl, c->qkv, c->kc, c->vc, c->o, c->lse, vl.seqs, vl.tables);
        struct prefill_attn_tile t;
        hp.variant = v;
        if (prefill_attn_choose(&hp, &t) != 0)
            continue;
        const char *vn = prefill_attn_variant_name(v);
        void *qkv = test_to_device(c->qkv, c->qkv_elems * 2);
        void *kc = test_to_device(c->kc0, c->cache_elems * 2);
        void *vc = test_to_device(c->vc0, c->cache_elems * 2);
        void *o = test_to_device(o0, c->o_elems * 2);
        float *lse = (float *)test_to_device(lse0, c->lse_elems * sizeof(float));
        void *seqs = test_to_device(vl.seqs, sizeof(vl.seqs[0]) * (size_t)n_seqs);
        void *tables = test_to_device(vl.tables,
                                      sizeof(int32_t) * (size_t)(n_seqs * vl.table_stride));
        struct prefill_attn_params p = attn_varlen_params(
            &vl, qkv, kc, vc, o, lse, (const struct prefill_attn_seq *)seqs,
            (const int32_t *)tables);
        p.variant = v;
        use_ws_tiles(&p);
        int rc = prefill_attn_cuda(&p, NULL);
        CK(cudaDeviceSynchronize());
        check_ws_tiles(v);
        CK(cudaMemcpy(c->o, o, c->o_elems * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(c->lse, lse, c->lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(c->kc, kc, c->cache_elems * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(c->vc, vc, c->cache_elems * 2, cudaMemcpyDeviceToHost));
        void *bufs[] = {qkv, kc, vc, o, lse, seqs, tables};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            CK(cudaFree(bufs[i]));
        CHECKF(rc == 0, "%s %s: launch returned %d", name, vn, rc);
        int bad = attn_varlen_check_memory(&vl, c->o, c->lse, c->kc, c->vc, "gpu");
        CHECKF(bad == 0, "%s %s: %d sentinel/pool violations", name, vn, bad);
        double worst = 0, worst_lse = 0;
        for (int i = 0; i < n_seqs; i++) {
            struct attn_err e;
            attn_varlen_errors(&vl, i, &ref[i], c->o, c->lse, &e);
            CHECKF(e.o_max <= 2 * ref[i].naive + 1e-7,
                   "%s %s: sequence %d: max |O err| %.3g > 2 x naive %.3g", name, vn, i, e.o_max,
                   ref[i].naive);
            CHECKF(e.lse_max <= 1e-3, "%s %s: sequence %d: max |lse err| %.3g", name, vn, i,
                   e.lse_max);
            worst = fmax(worst, e.o_max / ref[i].naive);
            worst_lse = fmax(worst_lse, e.lse_max);
        }
        fprintf(stderr, "gpu %-52s %-11s O err %.3g x naive, lse err %.3g\n", name, vn, worst,
                worst_lse);
    }
    for (int i = 0; i < n_seqs; i++)
        attn_ref_free(&ref[i]);
    free(o0);
    free(lse0);
    attn_varlen_free(&vl);
}

/* Variable-length calls on every head dim: a 1-row sequence deep in its
 * cache, one at pos0 0, pos0 off the 64-position blocks, long and short
 * chunks; windows; six sequences. */
static void varlen_cases(int64_t hd_max)
{
    static const int32_t n1[] = {1, 300, 513, 5}, p1[] = {1000, 0, 37, 190};
    static const int32_t n2[] = {200, 1, 64, 129, 3, 700}, p2[] = {0, 2000, 64, 100, 7, 300};
    for (int64_t hd = 64; hd <= hd_max; hd *= 2) {
        run_varlen(4, n1, p1, 8, 2, hd, hd == 128 ? PREFILL_ATTN_F16 : PREFILL_ATTN_BF16, 0);
        run_varlen(4, n1, p1, 4, 1, hd, PREFILL_ATTN_F16, 100);
        run_varlen(6, n2, p2, 8, 1, hd, PREFILL_ATTN_BF16, 0);
    }
}

/* Head dim 512 (Gemma 4's global layers, 8 query heads on 1 KV head; the
 * variants built for it, f16 only): a chunk alone and after a cache, a
 * window, a paged prefix behind a window, variable length. */
static void cases_512(void)
{
    static const int32_t n1[] = {1, 300, 65}, p1[] = {1000, 0, 37};
    run_case(65, 0, 8, 1, 512, PREFILL_ATTN_F16);
    run_case(300, 100, 8, 1, 512, PREFILL_ATTN_F16);
    run_case_w(300, 200, 8, 1, 512, PREFILL_ATTN_F16, 64);
    run_case_p(150, 200, 8, 1, 512, PREFILL_ATTN_F16, 64, 1);
    run_varlen(3, n1, p1, 8, 1, 512, PREFILL_ATTN_F16, 0);
}

/* The GPU check's list: small n on every head dim and GQA shape (K/V from
 * the cache, the chunk, both), windows, then medium n. */
static void quick_cases(void)
{
    static const int64_t ns[] = {1, 17, 65, 300}, pos0s[] = {0, 100, 200};
    for (int64_t hd = 64; hd <= 256; hd *= 2)
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 3; b++) {
                const int dt = (int)((a + b) % 2);
                run_case(ns[a], pos0s[b], 8, 2, hd, dt);
                if (b == 1)
                    run_case(ns[a], pos0s[b], 8, 1, hd, 1 - dt);
            }
    for (int64_t hd = 64; hd <= 256; hd *= 2) {
        run_case_w(300, 0, 4, 2, hd, PREFILL_ATTN_BF16, 100);
        run_case_w(150, 200, 8, 2, hd, PREFILL_ATTN_F16, 64);
        run_case_p(65, 37, 8, 2, hd, PREFILL_ATTN_BF16, 0, 1); /* paged caches */
        run_case_p(300, 200, 4, 1, hd, PREFILL_ATTN_F16, 0, 1);
        run_case_p(150, 200, 8, 2, hd, PREFILL_ATTN_BF16, 64, 1);
    }
    varlen_cases(256);
    cases_512();
    run_case(1024, 0, 8, 2, 128, PREFILL_ATTN_BF16);
    run_case(1024, 333, 4, 1, 64, PREFILL_ATTN_F16);
    run_case(1024, 100, 4, 2, 256, PREFILL_ATTN_BF16);
    run_case_w(2000, 2096, 4, 1, 128, PREFILL_ATTN_BF16, 1000);
    run_case(2000, 2096, 4, 1, 64, PREFILL_ATTN_F16);
}

int main(int argc, char **argv)
{
    int quick = 0, named = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            continue;
        }
        int v = prefill_attn_variant_find(argv[i]);
        if (v == PREFILL_ATTN_AUTO) {
            fprintf(stderr, "test_flash_attn_gpu: no variant %s\n", argv[i]);
            return 2;
        }
        chosen[v] = 1;
        named = 1;
    }
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS && !named; v++)
        chosen[v] = 1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "test_flash_attn_gpu: no CUDA device, skipped\n");
        return 77;
    }
    for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++)
        if (chosen[v] && !prefill_attn_cuda_supports(v))
            fprintf(stderr, "test_flash_attn_gpu: variant %s cannot run on this device or "
                    "build, skipped\n", prefill_attn_variant_name(v));
    if (quick) {
        quick_cases();
        return test_summary("test_flash_attn_gpu");
    }
    static const int64_t ns[] = {1, 17, 64, 65, 300, 1024};
    static const int64_t ratios[] = {1, 3, 4, 8};
    for (size_t a = 0; a < 6; a++)
        for (int64_t pos0 = 0; pos0 <= 100; pos0 += 100)
            for (size_t r = 0; r < 4; r++)
                for (int64_t hd = 64; hd <= 256; hd *= 2)
                    for (int dt = 0; dt < 2; dt++)
                        run_case(ns[a], pos0, ratios[r] * (ratios[r] <= 3 ? 2 : 1),
                                 ratios[r] <= 3 ? 2 : 1, hd, dt);
    for (int64_t hd = 64; hd <= 256; hd *= 2)
        run_case_w(300, 100, 4, 2, hd, PREFILL_ATTN_BF16, 128);
    for (int64_t hd = 64; hd <= 256; hd *= 2) {
        run_case_p(300, 200, 4, 1, hd, PREFILL_ATTN_F16, 0, 1); /* paged caches */
        run_case_p(150, 200, 8, 2, hd, PREFILL_ATTN_BF16, 64, 1);
    }
    varlen_cases(256);
    cases_512();
    run_case(4096, 0, 8, 2, 128, PREFILL_ATTN_BF16);
    run_case(2000, 2096, 4, 1, 64, PREFILL_ATTN_F16);
    return test_summary("test_flash_attn_gpu");
}
