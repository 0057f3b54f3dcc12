/* tests/test.h: the few macros C tests share. A failed CHECK prints the
 * expression and location and counts; a test's main returns test_summary(). */
#ifndef IGNITE_TESTS_TEST_H
#define IGNITE_TESTS_TEST_H

#include <stdio.h>

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

static inline int test_summary(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, test_checks_, test_failures_);
    return test_failures_ ? 1 : 0;
}

#endif
