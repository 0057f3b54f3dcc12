/* bench/fma_peak.c: the machine's f32 FMA peak, measured: each thread runs
 * chains of independent vfmadd231ps on registers (no memory traffic) for a
 * fixed count; FLOP/s = 2 * lanes * FMAs / s. AVX2 (8 lanes) and, where the
 * CPU has it, AVX-512 (16 lanes). Printed per wall second and per CPU second
 * of the threads (the core's own peak, which other load on a shared machine
 * does not lower). docs/benchmarks.md divides prefill's useful FLOP/s by it.
 * Also the peaks of the inner steps of ignite's CPU kernels, in
 * multiply-adds a second: the AVX2 int8 GEMM's (vpmaddubsw into a vpaddw
 * sum, 32 u8 x s8 products each), the VNNI ones' (vpdpbusd on 256 and on
 * 512 bits), and the CPU attention's unfused f32 multiply and add (vmulps
 * then vaddps: the bit-for-bit rule keeps them apart; on ymm, and on zmm as
 * its AVX-512 forms run them), written in assembly so the compiler can
 * neither hoist nor fuse them.
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

/* Inner steps in assembly, 100 M loop turns of the listed instructions on
 * registers; [1] of the sink: CPU seconds. */
#define STEP_TURNS 100000000L
#define ASM_LOOP(body)                                                                        \
    do {                                                                                      \
        long n_ = STEP_TURNS;                                                                 \
        __asm__ volatile("vpxor %%xmm15, %%xmm15, %%xmm15\n"                                   \
                         "vpxor %%xmm14, %%xmm14, %%xmm14\n"                                   \
                         "1:\n" body "dec %0\n jnz 1b\n"                                       \
                         : "+r"(n_)                                                           \
                         :                                                                    \
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",    \
                           "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",      \
                           "xmm15", "cc");                                                    \
    } while (0)
/* int8: products into t, summed into accumulator i (8 independent sums) */
#define MADDUBS(i, t) "vpmaddubsw %%ymm15, %%ymm14, %%ymm" #t "\n vpaddw %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n"
#define DPBUSD(i) "vpdpbusd %%ymm15, %%ymm14, %%ymm" #i "\n"
/* f32: a product of two registers into t, added into accumulator i */
#define MULADD(i, t) "vmulps %%ymm15, %%ymm14, %%ymm" #t "\n vaddps %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n"

__attribute__((target("avx2"))) static void *run_maddubs(void *arg)
{
    double c0 = cpu_now();
    ASM_LOOP(MADDUBS(0, 8) MADDUBS(1, 9) MADDUBS(2, 10) MADDUBS(3, 11)
             MADDUBS(4, 12) MADDUBS(5, 13) MADDUBS(6, 8) MADDUBS(7, 9));
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

__attribute__((target("avx512vnni,avx512vl"))) static void *run_dpbusd(void *arg)
{
    double c0 = cpu_now();
    ASM_LOOP(DPBUSD(0) DPBUSD(1) DPBUSD(2) DPBUSD(3) DPBUSD(4) DPBUSD(5) DPBUSD(6) DPBUSD(7)
             DPBUSD(8) DPBUSD(9));
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

/* The same on zmm: the 512-bit prefill GEMM's (ops/qmatmul_zmm.h) */
#define DPBUSD512(i) "vpdpbusd %%zmm15, %%zmm14, %%zmm" #i "\n"
__attribute__((target("avx512vnni,avx512f"))) static void *run_dpbusd512(void *arg)
{
    double c0 = cpu_now();
    ASM_LOOP(DPBUSD512(0) DPBUSD512(1) DPBUSD512(2) DPBUSD512(3) DPBUSD512(4) DPBUSD512(5)
             DPBUSD512(6) DPBUSD512(7) DPBUSD512(8) DPBUSD512(9));
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

__attribute__((target("avx2"))) static void *run_muladd(void *arg)
{
    double c0 = cpu_now();
    ASM_LOOP(MULADD(0, 8) MULADD(1, 9) MULADD(2, 10) MULADD(3, 11)
             MULADD(4, 12) MULADD(5, 13) MULADD(6, 8) MULADD(7, 9));
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

#define MULADD512(i, t) "vmulps %%zmm15, %%zmm14, %%zmm" #t "\n vaddps %%zmm" #t ", %%zmm" #i ", %%zmm" #i "\n"
__attribute__((target("avx512f"))) static void *run_muladd512(void *arg)
{
    double c0 = cpu_now();
    ASM_LOOP(MULADD512(0, 8) MULADD512(1, 9) MULADD512(2, 10) MULADD512(3, 11)
             MULADD512(4, 12) MULADD512(5, 13) MULADD512(6, 8) MULADD512(7, 9));
    ((float *)arg)[1] = (float)(cpu_now() - c0);
    return NULL;
}

/* Runs fn on `threads` threads at once, each given its own sink (fn writes
 * its CPU seconds to [1]); *wall: the seconds until the last one ended,
 * *cpu: the threads' CPU seconds added up. */
static void run_threads(void *(*fn)(void *), int threads, double *wall, double *cpu)
{
    pthread_t th[256];
    float sink[256][2];
    double t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, fn, sink[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    *wall = now() - t0;
    *cpu = 0;
    for (int i = 0; i < threads; i++)
        *cpu += sink[i][1];
}

/* The inner steps: multiply-adds per loop turn (8 or 10 steps of 32, or 8 of 8). */
static void measure_step(const char *name, void *(*fn)(void *), double macs_per_turn,
                         int threads)
{
    double s, cpu;
    run_threads(fn, threads, &s, &cpu);
    double macs = macs_per_turn * (double)STEP_TURNS * threads;
    printf("%-22s %3d threads: %8.1f G multiply-adds/s per wall second, %.1f per CPU second "
           "of a thread\n", name, threads, macs / s / 1e9, macs / cpu / 1e9);
}

static void measure(const char *name, void *(*fn)(void *), int lanes, int threads)
{
    double s, cpu;
    run_threads(fn, threads, &s, &cpu);
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
        if (__builtin_cpu_supports("avx2")) {
            measure_step("int8 vpmaddubsw+vpaddw", run_maddubs, 8 * 32, t);
            measure_step("f32 vmulps+vaddps", run_muladd, 8 * 8, t);
        }
        if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
            measure_step("int8 vpdpbusd (ymm)", run_dpbusd, 10 * 32, t);
            measure_step("int8 vpdpbusd (zmm)", run_dpbusd512, 10 * 64, t);
        }
        if (__builtin_cpu_supports("avx512f"))
            measure_step("f32 vmulps+vaddps zmm", run_muladd512, 8 * 16, t);
        if (t < max && 2 * t > max)
            t = max / 2;
    }
    return 0;
}
