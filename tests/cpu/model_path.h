/* tests/cpu/model_path.h: where the C tests of tests/cpu/ find the real
 * model: $IGNITE_MODEL, else the cache rule of core/paths.c. A test whose
 * model is absent exits 77 (skipped). */
#ifndef IGNITE_TESTS_CPU_MODEL_PATH_H
#define IGNITE_TESTS_CPU_MODEL_PATH_H

#include "core/paths.h"
#include "core/status.h"
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_SKIP 77

/* Writes the model path into buf; returns 0, or TEST_SKIP (with a note on
 * stderr) when no model file is there. */
static inline int test_model_path(char *buf, size_t cap)
{
    const char *env = getenv("IGNITE_MODEL");
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
    } else if (ig_default_model_path(buf, cap) != IG_OK) {
        return TEST_SKIP;
    }
    if (access(buf, R_OK) != 0) {
        fprintf(stderr, "skip: no model at %s (run make fetch-model)\n", buf);
        return TEST_SKIP;
    }
    return 0;
}

/* Sanitizer builds run the real model's first TEST_SANITIZED_LAYERS layers
 * (of SmolLM2's 30): every layer runs the same code, so what ASan and UBSan
 * can find shows in the first ones, and the whole depth took these tests
 * tens of minutes there. Other builds keep every layer. */
#define TEST_SANITIZED_LAYERS 4
static inline void test_sanitized_depth(struct model *m)
{
#if defined(__SANITIZE_ADDRESS__)
    if (m->hp.n_layer > TEST_SANITIZED_LAYERS)
        m->hp.n_layer = TEST_SANITIZED_LAYERS;
#else
    (void)m;
#endif
}

#endif
