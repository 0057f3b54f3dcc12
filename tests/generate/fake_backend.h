/* tests/generate/fake_backend.h: what the engine's fake backends share
 * (test_engine.c, test_spec.c): the hash their logits come from, and the
 * backend operations they leave out (no cache moves between backends, no
 * device memory). Each test writes its own step and state. */
#ifndef IGNITE_TESTS_GENERATE_FAKE_BACKEND_H
#define IGNITE_TESTS_GENERATE_FAKE_BACKEND_H

#include "backend/backend.h"
#include "core/status.h"

#include <stdint.h>

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static int fake_export(struct backend *b, const struct backend_seq *s, int64_t n,
                       const struct kv_store **st, const int32_t **t, int64_t *slot)
{
    (void)b, (void)s, (void)n, (void)st, (void)t, (void)slot;
    return IG_E_INTERNAL;
}

static int fake_import(struct backend *b, const struct backend_seq *s, const struct kv_store *src,
                       int64_t n)
{
    (void)b, (void)s, (void)src, (void)n;
    return IG_E_INTERNAL;
}

static size_t fake_bytes(const struct backend *b)
{
    (void)b;
    return 0;
}

static void fake_destroy(struct backend *b)
{
    (void)b;
}

/* The operations of a fake whose step is fn. */
#define FAKE_BACKEND_OPS(fn)                                                           \
    {.step = (fn), .kv_export = fake_export, .kv_import = fake_import,                 \
     .device_bytes = fake_bytes, .destroy = fake_destroy}

#endif
