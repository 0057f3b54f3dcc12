/* tests/gpu/test_gpu_ops_gpu.c: the element-wise and weight kernels of
 * ops/gpu_ops.h on a real GPU (gk_*_cuda) against their CPU twins, at model
 * sizes (SmolLM2-135M and Llama-3-8B widths; 1, 7 and 512 tokens), and their
 * throughput (IGNITE_GPU_BENCH=1 prints GB/s of the bytes each must move).
 * Bit equality where the operations are the same; 1 f16 ulp for RMSNorm
 * (summation order) and SwiGLU (CUDA's expf is not glibc's). Exits 77
 * (skipped) without a CUDA device. Label gpu. */
#include "ops/gpu_ops.h"

#include "core/half.h"
#include "decode/greedy.h"
#include "models/model.h"
#include "models/quant.h"
#include "tests/gpu/cuda_check.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

static int g_bench;

/* A device buffer filled with 0xff (NaN in f16/f32): unwritten elements show. */
static void *dev_poison(size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemset(d, 0xff, bytes));
    return d;
}

static void *host_copy(const void *dev, size_t bytes)
{
    void *h = malloc(bytes);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
    return h;
}

static int max_ulps(const uint16_t *a, const uint16_t *b, int64_t n)
{
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (((a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff)) ||
            ((b[i] & 0x7c00) == 0x7c00 && (b[i] & 0x3ff)))
            return -1;
        int ka = a[i] & 0x8000 ? -(int)(a[i] & 0x7fff) : (int)(a[i] & 0x7fff);
        int kb = b[i] & 0x8000 ? -(int)(b[i] & 0x7fff) : (int)(b[i] & 0x7fff);
        int u = abs(ka - kb);
        m = u > m ? u : m;
    }
    return m;
}

static float *rand_floats(uint64_t *st, int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (0.5f * test_rand_f(st) + 0.5f);
    return x;
}

/* Times `launch` (already checked once) and prints GB/s for `bytes` moved. */
#define BENCH(name, bytes, launch)                                              \
    do {                                                                        \
        if (!g_bench)                                                           \
            break;                                                              \
        cudaEvent_t a_, b_;                                                     \
        CK(cudaEventCreate(&a_));                                               \
        CK(cudaEventCreate(&b_));                                               \
        for (int i_ = 0; i_ < 3; i_++)                                          \
            (void)(launch);                                                     \
        CK(cudaEventRecord(a_, 0));                                             \
        for (int i_ = 0; i_ < 20; i_++)                                         \
            (void)(launch);                                                     \
        CK(cudaEventRecord(b_, 0));                                             \
        CK(cudaEventSynchronize(b_));                                           \
        float ms_;                                                              \
        CK(cudaEventElapsedTime(&ms_, a_, b_));                                 \
        ms_ /= 20;                                                              \
        fprintf(stderr, "bench %-44s %9.4f ms %8.1f GB/s\n", name, ms_,         \
                (double)(bytes) / ms_ / 1e6);                                   \
        CK(cudaEventDestroy(a_));                                               \
        CK(cudaEventDestroy(b_));                                               \
    } while (0)

struct dims {
    const char *name;
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff;
    int rope_style;
};

static void test_model(uint64_t *st, const struct dims *m, int64_t n)
{
    char name[96];
    const int64_t d = m->n_embd, n_vocab = 1000, hd = m->head_dim;
    /* embed */
    uint16_t *table = malloc((size_t)(n_vocab * d) * 2);
    for (int64_t i = 0; i < n_vocab * d; i++)
        table[i] = ig_f32_to_f16(test_rand_f(st));
    int32_t *tok = malloc((size_t)n * 4);
    for (int64_t t = 0; t < n; t++)
        tok[t] = (int32_t)(test_rand_u64(st) % n_vocab);
    uint16_t *dtable = test_to_device(table, (size_t)(n_vocab * d) * 2);
    int32_t *dtok = test_to_device(tok, (size_t)n * 4);
    float *dx = dev_poison((size_t)(n * d) * 4);
    float *xref = malloc((size_t)(n * d) * 4);
    gk_embed_ref(table, tok, n, d, 0, n_vocab, xref);
    CHECK(gk_embed_cuda(dtable, dtok, n, d, 0, n_vocab, dx, NULL) == 0);
    float *x = host_copy(dx, (size_t)(n * d) * 4);
    CHECKF(memcmp(x, xref, (size_t)(n * d) * 4) == 0, "%s n %lld: embed", m->name, (long long)n);
    snprintf(name, sizeof name, "embed %s n %lld", m->name, (long long)n);
    BENCH(name, n * d * 6, gk_embed_cuda(dtable, dtok, n, d, 0, n_vocab, dx, NULL));

    /* rmsnorm over the embeddings (scaled up) */
    for (int64_t i = 0; i < n * d; i++)
        x[i] *= 3.0f;
    CK(cudaMemcpy(dx, x, (size_t)(n * d) * 4, cudaMemcpyHostToDevice));
    float *w = rand_floats(st, d, 0.5f, 1.5f);
    float *dw = test_to_device(w, (size_t)d * 4);
    uint16_t *dy = dev_poison((size_t)(n * d) * 2), *yref = malloc((size_t)(n * d) * 2);
    gk_rmsnorm_ref(x, d, w, n, d, 1e-5f, yref);
    CHECK(gk_rmsnorm_cuda(dx, d, dw, n, d, 1e-5f, dy, NULL) == 0);
    uint16_t *y = host_copy(dy, (size_t)(n * d) * 2);
    int u = max_ulps(y, yref, n * d);
    CHECKF(u >= 0 && u <= 1, "%s n %lld: rmsnorm %d ulps", m->name, (long long)n, u);
    snprintf(name, sizeof name, "rmsnorm %s n %lld", m->name, (long long)n);
    BENCH(name, n * d * 6, gk_rmsnorm_cuda(dx, d, dw, n, d, 1e-5f, dy, NULL));

    /* qkv + rope, both output modes: rows at 2047.. of one sequence, the
     * pool's blocks in reverse order in its table (each row a copy) */
    const int64_t nh = m->n_head, nkv = m->n_head_kv, wd = (nh + 2 * nkv) * hd;
    const int64_t ts = (2048 + n + 3 + 63) / 64, hs = 64 * hd, bs = nkv * hs;
    float *qkv = rand_floats(st, n * wd, -2.0f, 2.0f), *bias = rand_floats(st, wd, -0.1f, 0.1f);
    double inv_freq[64];
    for (int64_t i = 0; i < hd / 2; i++)
        inv_freq[i] = pow(500000.0, -2.0 * (double)i / (double)hd);
    int32_t *pos = malloc((size_t)n * 4), *tables = malloc((size_t)(n * ts) * 4);
    for (int64_t t = 0; t < n; t++) {
        pos[t] = (int32_t)(2047 + t);
        for (int64_t i = 0; i < ts; i++)
            tables[t * ts + i] = (int32_t)(ts - 1 - i);
    }
    float *dqkv = test_to_device(qkv, (size_t)(n * wd) * 4);
    float *dbias = test_to_device(bias, (size_t)wd * 4);
    double *dfreq = test_to_device(inv_freq, sizeof inv_freq);
    int32_t *dpos = test_to_device(pos, (size_t)n * 4);
    int32_t *dtables = test_to_device(tables, (size_t)(n * ts) * 4);
    for (int to_cache = 0; to_cache < 2; to_cache++) {
        struct gk_qkv_params r = {.qkv = qkv, .bias = to_cache ? NULL : bias,
                                  .inv_freq = inv_freq, .pos = pos, .n = n, .n_head = nh,
                                  .n_head_kv = nkv, .head_dim = hd, .n_rot = hd,
                                  .rope_style = m->rope_style, .block_table = tables,
                                  .table_stride = ts, .block_stride = bs, .head_stride = hs};
        struct gk_qkv_params p = r;
        p.qkv = dqkv, p.bias = to_cache ? NULL : dbias, p.inv_freq = dfreq, p.pos = dpos;
        p.block_table = dtables;
        const int64_t qn = n * nh * hd, kn = to_cache ? ts * bs : n * nkv * hd;
        r.q = malloc((size_t)qn * 2), p.q = dev_poison((size_t)qn * 2);
        uint16_t *rk = malloc((size_t)kn * 2), *rv = malloc((size_t)kn * 2);
        memset(rk, 0xff, (size_t)kn * 2);
        memset(rv, 0xff, (size_t)kn * 2);
        uint16_t *pk = dev_poison((size_t)kn * 2), *pv = dev_poison((size_t)kn * 2);
        if (to_cache)
            r.k_cache = rk, r.v_cache = rv, p.k_cache = pk, p.v_cache = pv;
        else
            r.k = rk, r.v = rv, p.k = pk, p.v = pv;
        gk_qkv_rope_ref(&r);
        CHECK(gk_qkv_rope_cuda(&p, NULL) == 0);
        uint16_t *q = host_copy(p.q, (size_t)qn * 2), *k = host_copy(pk, (size_t)kn * 2);
        uint16_t *v = host_copy(pv, (size_t)kn * 2);
        /* 0xffff (the poison) is the same on both sides outside the cache rows. */
        int uq = max_ulps(q, r.q, qn), uk = max_ulps(k, rk, to_cache ? 0 : kn);
        if (to_cache)
            uk = memcmp(k, rk, (size_t)kn * 2) || memcmp(v, rv, (size_t)kn * 2) ? -1 : 0;
        else
            uk = uk || max_ulps(v, rv, kn) ? -1 : 0;
        CHECKF(uq == 0 && uk == 0, "%s n %lld cache %d: qkv_rope q %d ulps, k/v %d",
               m->name, (long long)n, to_cache, uq, uk);
        snprintf(name, sizeof name, "qkv_rope %s n %lld cache %d", m->name, (long long)n,
                 to_cache);
        BENCH(name, n * wd * 6, gk_qkv_rope_cuda(&p, NULL));
        free(q), free(k), free(v), free(r.q), free(rk), free(rv);
        CK(cudaFree(p.q));
        CK(cudaFree(pk));
        CK(cudaFree(pv));
    }

    /* swiglu */
    const int64_t f = m->n_ff;
    float *gu = rand_floats(st, n * 2 * f, -8.0f, 8.0f);
    float *dgu = test_to_device(gu, (size_t)(n * 2 * f) * 4);
    uint16_t *dh = dev_poison((size_t)(n * f) * 2), *href = malloc((size_t)(n * f) * 2);
    gk_swiglu_ref(gu, n, f, href);
    CHECK(gk_swiglu_cuda(dgu, n, f, dh, NULL) == 0);
    uint16_t *h = host_copy(dh, (size_t)(n * f) * 2);
    u = max_ulps(h, href, n * f);
    CHECKF(u >= 0 && u <= 1, "%s n %lld: swiglu %d ulps", m->name, (long long)n, u);
    snprintf(name, sizeof name, "swiglu %s n %lld", m->name, (long long)n);
    BENCH(name, n * f * 10, gk_swiglu_cuda(dgu, n, f, dh, NULL));

    free(table), free(tok), free(xref), free(x), free(w), free(yref), free(y);
    free(qkv), free(bias), free(gu), free(href), free(h);
    CK(cudaFree(dtable));
    CK(cudaFree(dtok));
    CK(cudaFree(dx));
    CK(cudaFree(dw));
    CK(cudaFree(dy));
    CK(cudaFree(dqkv));
    CK(cudaFree(dbias));
    CK(cudaFree(dfreq));
    CK(cudaFree(dpos));
    CK(cudaFree(dtables));
    free(pos), free(tables);
    CK(cudaFree(dgu));
    CK(cudaFree(dh));
}

static void test_weights(uint64_t *st)
{
    const int types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_1};
    const int64_t rows = 4096, cols = 1536;
    for (size_t ti = 0; ti < 6; ti++) {
        const struct quant_traits *t = quant_traits_of((uint32_t)types[ti]);
        size_t row_bytes = quant_row_bytes(types[ti], cols), bytes = row_bytes * (size_t)rows;
        unsigned char *src = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            src[i] = (unsigned char)test_rand_u64(st);
        /* Finite scales and values: clear the top exponent bit of every f16 scale
         * (blocks) or element (F16/BF16); F32 gets plain random floats. */
        for (size_t i = 0; i < bytes; i += t->block_bytes) {
            if (types[ti] == QUANT_F32) {
                float v = test_rand_f(st) * 100.0f;
                memcpy(src + i, &v, 4);
            } else {
                src[i + 1] &= 0xbf;
                if (types[ti] == QUANT_Q4_1)
                    src[i + 3] &= 0xbf;
            }
        }
        void *dsrc = test_to_device(src, bytes);
        uint16_t *ddst = dev_poison((size_t)(rows * cols) * 2);
        uint16_t *ref = malloc((size_t)(rows * cols) * 2);
        gk_dequant_f16_ref(types[ti], src, rows, cols, row_bytes, ref);
        CHECK(gk_dequant_f16_cuda(types[ti], dsrc, rows, cols, row_bytes, ddst, NULL) == 0);
        uint16_t *got = host_copy(ddst, (size_t)(rows * cols) * 2);
        CHECKF(memcmp(got, ref, (size_t)(rows * cols) * 2) == 0, "dequant %s", t->name);
        char name[64];
        snprintf(name, sizeof name, "dequant %s %lldx%lld", t->name, (long long)rows,
                 (long long)cols);
        BENCH(name, bytes + (size_t)(rows * cols) * 2,
              gk_dequant_f16_cuda(types[ti], dsrc, rows, cols, row_bytes, ddst, NULL));
        free(src), free(ref), free(got);
        CK(cudaFree(dsrc));
        CK(cudaFree(ddst));
    }
    const int64_t n = 1 << 24;
    uint16_t *dh = dev_poison((size_t)n * 2), *rh = malloc((size_t)n * 2);
    float *df = dev_poison((size_t)n * 4), *rf = malloc((size_t)n * 4);
    gk_random_f16_ref(rh, n, 42, 0.0f, 0.02f);
    gk_random_f32_ref(rf, n, 42, 1.0f, 0.1f);
    CHECK(gk_random_f16_cuda(dh, n, 42, 0.0f, 0.02f, NULL) == 0);
    CHECK(gk_random_f32_cuda(df, n, 42, 1.0f, 0.1f, NULL) == 0);
    uint16_t *h = host_copy(dh, (size_t)n * 2);
    float *f = host_copy(df, (size_t)n * 4);
    CHECK(memcmp(h, rh, (size_t)n * 2) == 0);
    CHECK(memcmp(f, rf, (size_t)n * 4) == 0);
    BENCH("random f16 16M", n * 2, gk_random_f16_cuda(dh, n, 42, 0.0f, 0.02f, NULL));
    free(rh), free(rf), free(h), free(f);
    CK(cudaFree(dh));
    CK(cudaFree(df));
}

/* gk_greedy_rows at Llama 3's vocabulary, 1 and 256 rows, against its twin:
 * random logits with a copy of each row's best planted later (a tie), NaN
 * and +inf in some rows. */
static void test_greedy(uint64_t *st)
{
    const int64_t nv = 128256;
    for (int64_t rows = 1; rows <= 256; rows += 255) {
        float *x = rand_floats(st, rows * nv, -20.0f, 20.0f);
        for (int64_t t = 0; t < rows; t++) {
            float *r = x + t * nv;
            int64_t a = (int64_t)(test_rand_u64(st) % (uint64_t)nv), b = a + (nv - a) / 2;
            r[a] = r[b] = 25.0f;
            if (t % 3 == 1)
                r[(a + 7) % nv] = NAN;
            if (t % 5 == 2)
                r[(a + 11) % nv] = INFINITY;
        }
        float *dx = test_to_device(x, (size_t)(rows * nv) * 4);
        int32_t *dids = dev_poison((size_t)rows * 4), *ref = malloc((size_t)rows * 4);
        gk_greedy_rows_ref(x, nv, rows, nv, ref);
        CHECK(gk_greedy_rows_cuda(dx, nv, rows, nv, dids, NULL) == 0);
        int32_t *got = host_copy(dids, (size_t)rows * 4);
        CHECKF(memcmp(got, ref, (size_t)rows * 4) == 0, "greedy tokens of %lld rows",
               (long long)rows);
        char name[64];
        snprintf(name, sizeof name, "greedy %lld rows of %lld", (long long)rows, (long long)nv);
        BENCH(name, (size_t)(rows * nv) * 4, gk_greedy_rows_cuda(dx, nv, rows, nv, dids, NULL));
        free(x), free(ref), free(got);
        CK(cudaFree(dx));
        CK(cudaFree(dids));
    }
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "test_gpu_ops_gpu: no CUDA device, skipped\n");
        return 77;
    }
    g_bench = getenv("IGNITE_GPU_BENCH") != NULL;
    const struct dims models[] = {
        {"smollm2-135m", 576, 9, 3, 64, 1536, ROPE_ADJACENT},
        {"llama3-8b", 4096, 32, 8, 128, 14336, ROPE_HALF_SPLIT},
    };
    uint64_t st = 12345;
    const int64_t ns[] = {1, 7, 512};
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t ni = 0; ni < 3; ni++)
            test_model(&st, &models[mi], ns[ni]);
    test_weights(&st);
    test_greedy(&st);
    return test_summary("test_gpu_ops_gpu");
}
