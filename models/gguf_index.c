/* models/gguf_index.c: O(1) lookups of metadata keys and tensor names.
 *
 * Two open-addressing hash tables (FNV-1a, linear probing) of indices into
 * g->kv and g->tensors, filled once after parsing; building them is also
 * where duplicate keys and names are found. The lookups and the typed
 * getters are in gguf_get.c. Covered by tests/models/ and tests/fuzz/. */
#include "models/gguf_impl.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

struct table {
    uint64_t mask;  /* capacity - 1, capacity a power of 2 */
    int64_t *slots; /* index + 1; 0 = empty */
};

struct gguf_index {
    struct table kv;
    struct table tensors;
};

static uint64_t hash(const char *p, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

static int table_init(struct table *t, int64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * (uint64_t)n + 1)
        cap *= 2;
    t->mask = cap - 1;
    t->slots = calloc(cap, sizeof *t->slots);
    return t->slots ? IG_OK : IG_E_NOMEM;
}

/* The slot holding `name`, or the empty slot where it would go. */
static int64_t *table_slot(const struct table *t, const char *p, uint64_t n,
                           struct gguf_str (*name_of)(const void *, int64_t), const void *arr)
{
    for (uint64_t i = hash(p, n) & t->mask;; i = (i + 1) & t->mask) {
        int64_t *s = &t->slots[i];
        if (*s == 0)
            return s;
        struct gguf_str k = name_of(arr, *s - 1);
        if (k.len == n && !memcmp(k.ptr, p, (size_t)n))
            return s;
    }
}

static struct gguf_str kv_name(const void *arr, int64_t i)
{
    return ((const struct gguf_kv *)arr)[i].key;
}

static struct gguf_str tensor_name(const void *arr, int64_t i)
{
    return ((const struct gguf_tensor *)arr)[i].name;
}

int gguf_index_build(struct gguf_file *g, struct gguf_error *err)
{
    char name[64];
    struct gguf_index *ix = calloc(1, sizeof *ix);
    if (!ix)
        return IG_E_NOMEM;
    g->index_ = ix;
    if (table_init(&ix->kv, g->n_kv) || table_init(&ix->tensors, g->n_tensors))
        return IG_E_NOMEM;
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct gguf_str k = g->kv[i].key;
        int64_t *s = table_slot(&ix->kv, k.ptr, k.len, kv_name, g->kv);
        if (*s)
            return gguf_fail(err, GGUF_ERR_DUPLICATE_KEY,
                             "metadata key '%s' appears twice (entries %lld and %lld)",
                             gguf_printable(name, sizeof name, k), (long long)(*s - 1),
                             (long long)i);
        *s = i + 1;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_str k = g->tensors[i].name;
        int64_t *s = table_slot(&ix->tensors, k.ptr, k.len, tensor_name, g->tensors);
        if (*s)
            return gguf_fail(err, GGUF_ERR_DUPLICATE_TENSOR,
                             "tensor name '%s' appears twice (tensor infos %lld and %lld)",
                             gguf_printable(name, sizeof name, k), (long long)(*s - 1),
                             (long long)i);
        *s = i + 1;
    }
    return IG_OK;
}

void gguf_index_free(struct gguf_file *g)
{
    struct gguf_index *ix = g->index_;
    if (!ix)
        return;
    free(ix->kv.slots);
    free(ix->tensors.slots);
    free(ix);
    g->index_ = NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key)
{
    const struct gguf_index *ix = g->index_;
    int64_t s = *table_slot(&ix->kv, key, strlen(key), kv_name, g->kv);
    return s ? &g->kv[s - 1] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    const struct gguf_index *ix = g->index_;
    int64_t s = *table_slot(&ix->tensors, name, strlen(name), tensor_name, g->tensors);
    return s ? &g->tensors[s - 1] : NULL;
}
