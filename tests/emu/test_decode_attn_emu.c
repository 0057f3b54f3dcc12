/* tests/emu/test_decode_attn_emu.c: the decode attention kernels
 * (decode/decode_attn.cu) run by the CPU emulator against their CPU twin
 * (decode_attn_ref), and the twin against an independent f64 computation:
 * n_ctx 64, 300, 1000; pos 0, 1, 63, 64, 299, n_ctx - 1; GQA 1, 3, 4, 8;
 * head_dim 64 and 128; 1, 7, the chosen, 33 and 128 splits (more than
 * needed: empty splits); head_dim 256 (Gemma 3: 4 query heads, 1 KV head)
 * without and with sliding windows of 16, 64 and 200 keys, before, at and
 * past the window's edge.
 * Cache rows past pos and behind the window hold NaN and garbage (never
 * read), the output and
 * `work` are poisoned first, guard elements follow the output. Tolerance:
 * 2 f16 ulps (the kernel's f32 sums may round the other way). Label emu. */
#include "decode/decode_attn.h"
#include "tests/test.h"

#include "core/half.h"

#include <stdlib.h>
#include <string.h>

enum { GUARD = 16 };
#define GUARD_BITS 0x5a5au

/* One f16 ulp at |x| (normal range), 2^-24 below it. */
static double f16_ulp(double x)
{
    x = fabs(x);
    if (x < 6.103515625e-05)
        return 5.9604644775390625e-08;
    return ldexp(1.0, ilogb(x) - 10);
}

static void fill_f16(uint16_t *a, int64_t n, float amp, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = ig_f32_to_f16(amp * test_rand_f(rng));
}

/* f64 attention of head h, written independently of the twin: one pass
 * over the keys with a running max. */
static void exact_head(const struct decode_attn_params *p, int64_t h, double *out)
{
    const int64_t hd = p->head_dim, hk = h / (p->n_head / p->n_head_kv);
    double m = -INFINITY, l = 0;
    for (int64_t d = 0; d < hd; d++)
        out[d] = 0;
    const int64_t lo = p->window > 0 && *p->pos - p->window + 1 > 0 ? *p->pos - p->window + 1 : 0;
    for (int64_t j = lo; j <= *p->pos; j++) {
        const uint16_t *k = p->k_cache + (hk * p->n_ctx + j) * hd;
        const uint16_t *v = p->v_cache + (hk * p->n_ctx + j) * hd;
        double s = 0;
        for (int64_t d = 0; d < hd; d++)
            s += (double)ig_f16_to_f32(p->q[h * hd + d]) * ig_f16_to_f32(k[d]);
        s *= p->scale;
        const double mn = s > m ? s : m, c = exp(m - mn), e = exp(s - mn);
        l = l * c + e;
        for (int64_t d = 0; d < hd; d++)
            out[d] = out[d] * c + e * ig_f16_to_f32(v[d]);
        m = mn;
    }
    for (int64_t d = 0; d < hd; d++)
        out[d] /= l;
}

static void run_case(int64_t n_ctx, int64_t pos, int64_t group, int64_t n_head_kv, int64_t hd,
                     int n_splits, int64_t window, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    const int64_t n_head = group * n_head_kv, o_elems = n_head * hd;
    const int64_t cache_elems = n_head_kv * n_ctx * hd;
    uint16_t *q = malloc((size_t)o_elems * 2);
    uint16_t *kc = malloc((size_t)cache_elems * 2), *vc = malloc((size_t)cache_elems * 2);
    uint16_t *o = malloc((size_t)(o_elems + GUARD) * 2), *o_ref = malloc((size_t)o_elems * 2);
    double *exact = malloc((size_t)hd * sizeof *exact);
    fill_f16(q, o_elems, 2.0f, &rng); /* larger q: sharper softmax */
    fill_f16(kc, cache_elems, 1.0f, &rng);
    fill_f16(vc, cache_elems, 1.0f, &rng);
    /* Rows past pos and behind the window: NaN and huge garbage; any read
     * of them shows. */
    const int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    for (int64_t hk = 0; hk < n_head_kv; hk++)
        for (int64_t j = 0; j < n_ctx; j++)
            for (int64_t d = 0; d < hd && (j < lo || j > pos); d++) {
                const int64_t i = (hk * n_ctx + j) * hd + d;
                kc[i] = (j + d) % 2 ? 0x7e00u : 0x7bffu;
                vc[i] = (j + d) % 3 ? 0xfe01u : 0x7c00u;
            }
    const int32_t pos32 = (int32_t)pos;
    struct decode_attn_params p = {
        .q = q, .k_cache = kc, .v_cache = vc, .pos = &pos32, .o = o, .work = NULL,
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .n_ctx = n_ctx,
        .n_splits = n_splits, .scale = 1.0f / sqrtf((float)hd), .window = window};
    const size_t wf = decode_attn_work_floats(&p);
    p.work = malloc(wf * sizeof(float));
    for (size_t i = 0; i < wf; i++)
        p.work[i] = NAN;
    for (int64_t i = 0; i < o_elems + GUARD; i++)
        o[i] = i < o_elems ? 0xffffu : GUARD_BITS;

    char name[128];
    snprintf(name, sizeof name, "n_ctx=%lld pos=%lld gqa=%lld kv=%lld hd=%lld splits=%d "
             "window=%lld", (long long)n_ctx, (long long)pos, (long long)group,
             (long long)n_head_kv, (long long)hd, n_splits, (long long)window);
    CHECKF(decode_attn_emu(&p, NULL) == 0, "%s: emulated launch failed", name);
    struct decode_attn_params pr = p;
    pr.o = o_ref;
    CHECKF(decode_attn_ref(&pr) == 0, "%s: ref failed", name);

    int bad_kernel = 0, bad_ref = 0, bad_guard = 0;
    for (int64_t h = 0; h < n_head; h++) {
        exact_head(&p, h, exact);
        for (int64_t d = 0; d < hd; d++) {
            const double a = ig_f16_to_f32(o[h * hd + d]), r = ig_f16_to_f32(o_ref[h * hd + d]);
            const double e = exact[d];
            /* NaN fails both comparisons. */
            if (!(fabs(a - r) <= 2 * f16_ulp(fmax(fabs(a), fabs(r))) + 1e-6)) {
                if (bad_kernel++ < 3)
                    fprintf(stderr, "%s: o[%lld][%lld] kernel %.8g ref %.8g\n", name,
                            (long long)h, (long long)d, a, r);
            }
            if (!(fabs(r - e) <= f16_ulp(e)))
                if (bad_ref++ < 3)
                    fprintf(stderr, "%s: o[%lld][%lld] ref %.8g exact %.8g\n", name,
                            (long long)h, (long long)d, r, e);
        }
    }
    for (int64_t i = o_elems; i < o_elems + GUARD; i++)
        bad_guard += o[i] != GUARD_BITS;
    CHECKF(bad_kernel == 0, "%s: %d outputs off the twin", name, bad_kernel);
    CHECKF(bad_ref == 0, "%s: %d twin outputs off f64", name, bad_ref);
    CHECKF(bad_guard == 0, "%s: wrote past the output", name);
    free(q), free(kc), free(vc), free(o), free(o_ref), free(exact), free(p.work);
}

int main(void)
{
    static const int64_t ctxs[] = {64, 300, 1000};
    static const int64_t groups[] = {1, 3, 4, 8};
    static const int64_t hds[] = {64, 128};
    uint64_t seed = 1;
    for (int ci = 0; ci < 3; ci++) {
        const int64_t n_ctx = ctxs[ci];
        const int64_t poss[] = {0, 1, 63, 64, 299, n_ctx - 1};
        for (int gi = 0; gi < 4; gi++)
            for (int hi = 0; hi < 2; hi++)
                for (int pi = 0; pi < 6; pi++) {
                    const int64_t pos = poss[pi];
                    if (pos >= n_ctx)
                        continue;
                    /* Rotate the split counts over the cases; 128 splits
                     * (more than needed) only while few are live: every
                     * live block costs 128 fibers under emulation. */
                    const int splits[] = {1, 7, decode_attn_choose_splits(n_ctx, 2, 132),
                                          pos < 64 ? DECODE_ATTN_MAX_SPLITS : 33};
                    const int64_t n_head_kv = groups[gi] == 8 ? 1 : 2;
                    run_case(n_ctx, pos, groups[gi], n_head_kv, hds[hi],
                             splits[(pi + gi + hi + ci) % 4], 0, seed);
                    seed++;
                }
    }
    /* head_dim 256, Gemma 3's 4 query heads on 1 KV head: no window, and
     * windows with pos before, at and past their edge (W - 1, W, W + 1 and
     * far past, where the live keys straddle split boundaries). */
    static const int64_t windows[] = {0, 16, 64, 200};
    for (int wi = 0; wi < 4; wi++) {
        const int64_t w = windows[wi];
        const int64_t poss[] = {w ? w - 1 : 5, w, w + 1, 299, 999};
        for (int pi = 0; pi < 5; pi++) {
            const int splits[] = {1, 7, decode_attn_choose_splits(1000, 1, 132), 33};
            run_case(1000, poss[pi], 4, 1, 256, splits[(pi + wi) % 4], w, seed++);
        }
    }
    /* The chooser: at least 64 keys per split, within the limits. */
    CHECK(decode_attn_choose_splits(64, 8, 132) == 1);
    CHECK(decode_attn_choose_splits(1, 8, 132) == 1);
    CHECK(decode_attn_choose_splits(32768, 8, 132) == 66);
    CHECK(decode_attn_choose_splits(1 << 20, 1, 132) == DECODE_ATTN_MAX_SPLITS);
    return test_summary("test_decode_attn_emu");
}
