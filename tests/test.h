/* tests/test.h: the few macros C tests share. A failed CHECK prints the
 * expression and location and counts; a test's main returns test_summary(). */
#ifndef IGNITE_TESTS_TEST_H
#define IGNITE_TESTS_TEST_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures_;
static int test_checks_;

#define CHECK(cond)                                                             \
    do {                                                                        \
        test_checks_++;                                                         \
        if (!(cond)) {                                                          \
            test_failures_++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                       \
    } while (0)

#define CHECKF(cond, ...)                                                       \
    do {                                                                        \
        test_checks_++;                                                         \
        if (!(cond)) {                                                          \
            test_failures_++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

/* A seeded xorshift64 stream for test data: the same numbers on every machine. */
static inline uint64_t test_rand_u64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Uniform in [-1, 1), from the top 53 bits of the stream. */
static inline float test_rand_f(uint64_t *state)
{
    return (float)((double)(test_rand_u64(state) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* max |a - ref| / max |ref|: the relative error the forward tests bound. */
static inline double test_rel_err(const float *a, const float *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return e / m;
}

/* Index of the largest element (the first one on ties). */
static inline int64_t test_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Parses a tool's id list "1,2,3" into ids (at most cap); returns the count,
 * or -1 for a word that is not a number or a list longer than cap. */
static inline int64_t test_parse_ids(const char *s, int32_t *ids, int64_t cap)
{
    int64_t n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || n >= cap)
            return -1;
        ids[n++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

/* The sampler's greedy rule written out (decode/sampler.h): the first index
 * of the largest value, NaN ranking last, +inf counting as FLT_MAX, 0 when
 * nothing is above -inf. */
static inline int32_t test_greedy_rule(const float *x, int64_t n)
{
    int64_t best = 0;
    float bv = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = isnan(x[i]) ? -INFINITY : x[i] == INFINITY ? FLT_MAX : x[i];
        if (v > bv)
            best = i, bv = v;
    }
    return (int32_t)best;
}

static inline int test_summary(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, test_checks_, test_failures_);
    return test_failures_ ? 1 : 0;
}

#endif
