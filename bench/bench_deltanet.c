/* bench/bench_deltanet.c: the delta rule of gated DeltaNet on the GPU at
 * Qwen3.5-35B-A3B's shape (16 key heads, 32 value heads, head dim 128):
 * the chunked kernel (gk_dn_chunk) and the recurrent one (gk_dn_rule) over
 * one sequence of n rows from position 0, n = 512 and 8192 (argv: other
 * n), the time of each (CUDA events, the median of 5 launches after one),
 * and the chunked outputs and state against the recurrent ones (max |d| /
 * max |rec|: f16 tensor-core operands against f32). Random q, k
 * (L2-normed, q times 1/sqrt(128)), v, beta in (0.5, 1), log decay in
 * (-0.3, 0], as gk_dn_gates leaves them. One line each:
 *   dn_chunk n=8192 Hv=32 D=128 ms=... rows_per_ms=... vs_rule=12.3x rel_err=...
 * scripts/gpu/fla_deltanet.py times flash-linear-attention's
 * chunk_gated_delta_rule on the same shape (the GPU check's qwen35 step).
 * Exits 77 without a GPU, 1 when the chunked form is off by more than 1e-2. */
#include "ops/gpu_deltanet.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            fprintf(stderr, "bench_deltanet: %s: %s (%s:%d)\n", #call,          \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float urand(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static double rel_err(const float *a, const float *ref, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return e / m;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*rule_fn)(const struct gk_dn_shape *, const float *, const float *, const float *,
                       float *, const struct gk_dn_seq *, int64_t, void *);

/* Median ms of 5 launches of f after one untimed. */
static float time_ms(rule_fn f, const struct gk_dn_shape *s, const float *qkv, const float *beta,
                     const float *g, float *out, const struct gk_dn_seq *seq)
{
    cudaEvent_t a, b;
    float ms[5];
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    if (f(s, qkv, beta, g, out, seq, 1, NULL))
        exit(1);
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(a, 0));
        if (f(s, qkv, beta, g, out, seq, 1, NULL))
            exit(1);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms[r], a, b));
    }
    qsort(ms, 5, sizeof *ms, cmp_f);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms[2];
}

static int run(int64_t n)
{
    struct gk_dn_shape s = {.Hk = 16, .Hv = 32, .D = 128, .K = 4};
    s.C = (2 * s.Hk + s.Hv) * s.D;
    s.state_floats = (s.K - 1) * s.C + s.Hv * s.D * s.D;
    size_t nq = (size_t)(n * s.C), nh = (size_t)(n * s.Hv), no = (size_t)(n * s.Hv * s.D);
    float *qkv = malloc(nq * 4), *beta = malloc(nh * 4), *g = malloc(nh * 4);
    float *o_c = malloc(no * 4), *o_r = malloc(no * 4);
    float *st_c = malloc((size_t)s.state_floats * 4), *st_r = malloc((size_t)s.state_floats * 4);
    for (size_t i = 0; i < nq; i++)
        qkv[i] = urand();
    for (int64_t t = 0; t < n; t++)
        for (int64_t hh = 0; hh < 2 * s.Hk; hh++) {
            float *x = qkv + t * s.C + hh * s.D, ss = 0;
            for (int64_t d = 0; d < s.D; d++)
                ss += x[d] * x[d];
            float r = 1.0f / sqrtf(ss + 1e-6f) * (hh < s.Hk ? 1.0f / sqrtf((float)s.D) : 1.0f);
            for (int64_t d = 0; d < s.D; d++)
                x[d] *= r;
        }
    for (size_t i = 0; i < nh; i++) {
        beta[i] = 0.75f + 0.25f * urand();
        g[i] = -0.15f * (1.0f + urand());
    }
    float *d_qkv, *d_beta, *d_g, *d_out, *d_state;
    struct gk_dn_seq seq = {.n_rows = (int32_t)n}, *d_seq;
    CK(cudaMalloc((void **)&d_qkv, nq * 4));
    CK(cudaMalloc((void **)&d_beta, nh * 4));
    CK(cudaMalloc((void **)&d_g, nh * 4));
    CK(cudaMalloc((void **)&d_out, no * 4));
    CK(cudaMalloc((void **)&d_state, (size_t)s.state_floats * 4));
    CK(cudaMalloc((void **)&d_seq, sizeof seq));
    CK(cudaMemcpy(d_qkv, qkv, nq * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_beta, beta, nh * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_g, g, nh * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_seq, &seq, sizeof seq, cudaMemcpyHostToDevice));
    s.state = d_state;
    float ms_c = time_ms(gk_dn_chunk_cuda, &s, d_qkv, d_beta, d_g, d_out, d_seq);
    CK(cudaMemcpy(o_c, d_out, no * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(st_c, d_state, (size_t)s.state_floats * 4, cudaMemcpyDeviceToHost));
    float ms_r = time_ms(gk_dn_rule_cuda, &s, d_qkv, d_beta, d_g, d_out, d_seq);
    CK(cudaMemcpy(o_r, d_out, no * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(st_r, d_state, (size_t)s.state_floats * 4, cudaMemcpyDeviceToHost));
    int64_t at = (s.K - 1) * s.C, ns = s.Hv * s.D * s.D;
    double e = fmax(rel_err(o_c, o_r, no), rel_err(st_c + at, st_r + at, (size_t)ns));
    printf("dn_chunk n=%lld Hv=%lld D=%lld ms=%.3f rows_per_ms=%.0f vs_rule=%.2fx rel_err=%.2e\n",
           (long long)n, (long long)s.Hv, (long long)s.D, ms_c, n / ms_c, ms_r / ms_c, e);
    printf("dn_rule n=%lld Hv=%lld D=%lld ms=%.3f rows_per_ms=%.0f\n", (long long)n,
           (long long)s.Hv, (long long)s.D, ms_r, n / ms_r);
    cudaFree(d_qkv), cudaFree(d_beta), cudaFree(d_g), cudaFree(d_out), cudaFree(d_state);
    cudaFree(d_seq);
    free(qkv), free(beta), free(g), free(o_c), free(o_r), free(st_c), free(st_r);
    return e <= 1e-2 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "bench_deltanet: no GPU\n");
        return 77;
    }
    int rc = 0;
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            rc |= run(atoll(argv[i]));
    else
        rc = run(512) | run(8192);
    return rc;
}
