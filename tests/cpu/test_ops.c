/* tests/cpu/test_ops.c: the element-wise primitives of ops/norm_rope.c against
 * their definitions computed in double: RMSNorm, RoPE in both pairings
 * (ROPE_ADJACENT for GGUF llama, ROPE_HALF_SPLIT for qwen2, which no test
 * model exercises end to end) with n_rot < head_dim and large positions,
 * bit for bit the scalar formula over the context's tables,
 * bias add, SwiGLU, and the thread pool covering every item exactly once. */
#include "core/status.h"
#include "models/model.h"
#include "ops/ops.h"
#include "tests/test.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x853c49e6748fea9bull;

static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static struct model fake_model(enum rope_style style, int64_t head_dim, int64_t n_rot)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_embd = m.hp.n_ff = 4 * head_dim;
    m.hp.n_head = 4;
    m.hp.n_head_kv = 2;
    m.hp.head_dim = head_dim;
    m.hp.n_rot = n_rot;
    m.hp.rope_base = 10000.0;
    m.hp.rope_style = style;
    model_hparams_set_defaults(&m.hp);
    return m;
}

/* n_rot 48 fills the vector steps (8 pairs apart, 4 adjacent); 20 and 44
 * leave pairs for the scalar tail in both pairings. */
static void test_rope(enum rope_style style, int64_t n_rot)
{
    const int64_t hd = 64, n_heads = 3, n = 5, pos0 = 7000;
    struct model m = fake_model(style, hd, n_rot);
    struct ops_ctx *ctx;
    CHECK(ops_ctx_create(&m, 1, n, &ctx) == IG_OK);
    float x[5 * 3 * 64], y[5 * 3 * 64];
    for (int64_t i = 0; i < n * n_heads * hd; i++)
        x[i] = y[i] = frand();
    int64_t pos[16];
    for (int64_t t = 0; t < n; t++)
        pos[t] = pos0 + t;
    ops_rope_prepare(ctx, pos, n);
    ops_rope_apply(ctx, y, 0, n, n_heads, MODEL_ROPE_GLOBAL);
    /* rows split as the pool splits them: the same bits */
    float z[5 * 3 * 64];
    memcpy(z, x, sizeof z);
    ops_rope_apply(ctx, z, 0, 2, n_heads, MODEL_ROPE_GLOBAL);
    ops_rope_apply(ctx, z, 2, n, n_heads, MODEL_ROPE_GLOBAL);
    CHECK(memcmp(y, z, sizeof z) == 0);

    /* the vectors give the scalar formula's bits over the context's tables */
    const struct ops_buffers *bufs = ops_ctx_buffers(ctx);
    int64_t half = n_rot / 2, gap = style == ROPE_ADJACENT ? 1 : half;
    int64_t step = style == ROPE_ADJACENT ? 2 : 1, differ = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++)
            for (int64_t i = 0; i < half; i++) {
                const float *a = x + (t * n_heads + h) * hd + i * step;
                const float *b = y + (t * n_heads + h) * hd + i * step;
                float c = bufs->rope_cos[t * half + i], sn = bufs->rope_sin[t * half + i];
                float r0 = a[0] * c - a[gap] * sn, r1 = a[0] * sn + a[gap] * c;
                differ += memcmp(&b[0], &r0, sizeof r0) != 0;
                differ += memcmp(&b[gap], &r1, sizeof r1) != 0;
            }
    CHECKF(differ == 0, "rope style %d, n_rot %lld: %lld values off the scalar formula's bits",
           (int)style, (long long)n_rot, (long long)differ);

    double worst = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++) {
            const float *a = x + (t * n_heads + h) * hd;
            const float *b = y + (t * n_heads + h) * hd;
            for (int64_t i = 0; i < n_rot / 2; i++) {
                double th = (double)(pos0 + t) * pow(10000.0, -2.0 * (double)i / (double)n_rot);
                int64_t i0 = style == ROPE_ADJACENT ? 2 * i : i;
                int64_t i1 = style == ROPE_ADJACENT ? 2 * i + 1 : i + n_rot / 2;
                double r0 = a[i0] * cos(th) - a[i1] * sin(th);
                double r1 = a[i0] * sin(th) + a[i1] * cos(th);
                worst = fmax(worst, fmax(fabs(b[i0] - r0), fabs(b[i1] - r1)));
            }
            for (int64_t i = n_rot; i < hd; i++)
                CHECKF(a[i] == b[i], "dim %lld beyond n_rot changed", (long long)i);
        }
    CHECKF(worst < 1e-6, "rope style %d, n_rot %lld: max error %.3e", (int)style,
           (long long)n_rot, worst);
    ops_ctx_free(ctx);
}

static void test_rmsnorm_bias_swiglu(void)
{
    enum { N = 7, W = 203 }; /* a block of four rows and three alone; a tail of 3 */
    float x[N * W], y[N * W], g[W], up[N * W], gate[N * W];
    for (int i = 0; i < N * W; i++) {
        x[i] = 30.0f * frand();
        up[i] = frand();
        gate[i] = 8.0f * frand();
    }
    for (int i = 0; i < W; i++)
        g[i] = frand();
    struct model_weight w = {QUANT_F32, 1, W, W * sizeof(float), g, 1, NULL};
    ops_rmsnorm(x, &w, N, W, 1e-5, y);
    for (int t = 0; t < N; t++) {
        double ss = 0;
        for (int i = 0; i < W; i++)
            ss += (double)x[t * W + i] * x[t * W + i];
        double r = 1.0 / sqrt(ss / W + 1e-5);
        for (int i = 0; i < W; i++) {
            double want = x[t * W + i] * r * g[i];
            CHECKF(fabs(y[t * W + i] - want) <= 1e-6 * (1.0 + fabs(want)), "rmsnorm [%d][%d]",
                   t, i);
        }
    }
    /* each row alone, and in place, gives its bits in the batch */
    float one[W];
    for (int t = 0; t < N; t++) {
        ops_rmsnorm(x + t * W, &w, 1, W, 1e-5, one);
        CHECKF(memcmp(one, y + t * W, sizeof one) == 0, "rmsnorm row %d alone", t);
    }
    float xi[N * W];
    memcpy(xi, x, sizeof xi);
    ops_rmsnorm(xi, &w, N, W, 1e-5, xi);
    CHECK(memcmp(xi, y, sizeof xi) == 0);

    memcpy(y, x, sizeof y);
    ops_add_bias(y, &w, N, W);
    for (int i = 0; i < N * W; i++)
        CHECK(y[i] == x[i] + g[i % W]);

    float s[N * W];
    for (int exact = 0; exact < 2; exact++) { /* the int8 path's exponential, expf's */
        memcpy(s, gate, sizeof s);
        ops_swiglu(s, up, N * W, exact);
        for (int i = 0; i < N * W; i++) {
            double want = gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
            CHECKF(fabs(s[i] - want) <= 1e-6 * (1.0 + fabs(want)), "swiglu [%d], exact %d", i,
                   exact);
        }
    }
}

struct count_job {
    _Atomic int hits[1000];
};

static void count_task(void *arg, int64_t i0, int64_t i1, int thread)
{
    struct count_job *j = arg;
    for (int64_t i = i0; i < i1; i++)
        atomic_fetch_add(&j->hits[i], 1);
}

static void test_pool(void)
{
    struct ops_pool *p;
    CHECK(ops_pool_create(3, &p) == IG_OK);
    CHECK(ops_pool_threads(p) == 3);
    static struct count_job job;
    for (int rep = 0; rep < 200; rep++) {
        int64_t n = 1 + rep * 5 % 1000, grain = 1 + rep % 7;
        for (int i = 0; i < 1000; i++)
            atomic_store(&job.hits[i], 0);
        ops_pool_run(p, n, grain, count_task, &job);
        int ok = 1;
        for (int i = 0; i < 1000; i++)
            ok &= atomic_load(&job.hits[i]) == (i < n ? 1 : 0);
        CHECKF(ok, "pool run %d: items not covered exactly once", rep);
    }
    ops_pool_free(p);
}

int main(void)
{
    for (int k = 0; k < 3; k++) {
        const int64_t n_rot[3] = {48, 20, 44};
        test_rope(ROPE_ADJACENT, n_rot[k]);
        test_rope(ROPE_HALF_SPLIT, n_rot[k]);
    }
    test_rmsnorm_bias_swiglu();
    test_pool();
    return test_summary("test_ops");
}
