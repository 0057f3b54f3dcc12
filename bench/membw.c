/* bench/membw.c: the machine's memory read bandwidth, measured the way
 * decode reads weights: each thread streams its share of a buffer much larger
 * than the caches with 256-bit loads and sums it (best of 5 passes).
 * docs/benchmarks.md divides decode's weight bytes per second by this.
 *   cc -O2 -pthread bench/membw.c -o build/membw && build/membw [THREADS] [MiB]
 * Not part of the build or of CI. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct part {
    const uint8_t *p;
    size_t n;
    double sink;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx2"))) static void *sum_part(void *arg)
{
    struct part *pt = arg;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= pt->n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(pt->p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(pt->p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(pt->p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(pt->p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    pt->sink = (double)_mm256_extract_epi64(a0, 0);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (threads < 1 || threads > 256)
        threads = 1;
    size_t bytes = mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf)
        return 1;
    memset(buf, 1, bytes);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[256];
        struct part pt[256];
        size_t share = bytes / (size_t)threads & ~(size_t)127;
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            pt[i] = (struct part){buf + (size_t)i * share, share, 0};
            pthread_create(&th[i], NULL, sum_part, &pt[i]);
        }
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        double gbs = (double)(share * (size_t)threads) / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    printf("read bandwidth, %d threads, %zu MiB: %.2f GB/s (best of 5)\n", threads, mib, best);
    free(buf);
    return 0;
}
