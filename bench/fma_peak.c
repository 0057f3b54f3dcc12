/* bench/fma_peak.c: the machine's f32 FMA peak, measured: each thread runs
 * chains of independent vfmadd231ps on registers (no memory traffic) for a
 * fixed count; FLOP/s = 2 * lanes * FMAs / s. AVX2 (8 lanes) and, where the
 * CPU has it, AVX-512 (16 lanes). Printed per wall second and per CPU second
 * of the threads (the core's own peak, which other load on a shared machine
 * does not lower). docs/benchmarks.md divides prefill's useful FLOP/s by it.
 *   cc -O2 -pthread bench/fma_peak.c -o build/fma_peak && build/fma_peak [THREADS]
 * Not part of the build or of CI. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ITERS 20000000L
#define CHAINS 12 /* >= FMA latency x FMA ports, so the pipes stay full */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the calling thread */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx2,fma"))) static void *run_avx2(void *arg)
{
    double c0 = cpu_now();
    __m256 a[CHAINS], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < ITERS; n++)
#pragma GCC unroll 16 /* keep a[] in registers */
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_ps(s, a[i]);
    ((float *)arg)[0] = _mm256_cvtss_f32(s);
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

__attribute__((target("avx512f"))) static void *run_avx512(void *arg)
{
    double c0 = cpu_now();
    __m512 a[CHAINS], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < ITERS; n++)
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, a[i]);
    ((float *)arg)[0] = _mm512_reduce_add_ps(s);
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

static void measure(const char *name, void *(*fn)(void *), int lanes, int threads)
{
    pthread_t th[256];
    float sink[256][2];
    double t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, fn, sink[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double s = now() - t0, cpu = 0;
    for (int i = 0; i < threads; i++)
        cpu += sink[i][1];
    double flops = 2.0 * lanes * CHAINS * (double)ITERS * threads;
    printf("%-8s %3d threads: %8.1f GFLOP/s f32 per wall second, %.1f per CPU second of a "
           "thread\n", name, threads, flops / s / 1e9, flops / cpu / 1e9);
}

int main(int argc, char **argv)
{
    int max = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (max < 1 || max > 256)
        max = 1;
    __builtin_cpu_init();
    for (int t = 1; t <= max; t *= 2) {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            measure("avx2+fma", run_avx2, 8, t);
        if (__builtin_cpu_supports("avx512f"))
            measure("avx512f", run_avx512, 16, t);
        if (t < max && 2 * t > max)
            t = max / 2;
    }
    return 0;
}
