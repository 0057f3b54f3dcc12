/* models/gguf_get.c: typed access to parsed GGUF metadata.
 *
 * Scalar getters by key, array element readers (elements stay raw,
 * little-endian, possibly unaligned in the file, so they are read with
 * memcpy), string comparison and type names. Lookup is gguf_index.c's.
 * Covered by tests/models/ and tests/fuzz/. */
#include "models/gguf_impl.h"

#include "core/status.h"

#include <string.h>

bool gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return false;
    if (gguf_type_is_unsigned(kv->type)) {
        *out = kv->v.u64;
        return true;
    }
    if (gguf_type_is_signed(kv->type) && kv->v.i64 >= 0) {
        *out = (uint64_t)kv->v.i64;
        return true;
    }
    return false;
}

bool gguf_get_f64(const struct gguf_file *g, const char *key, double *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64))
        return false;
    *out = kv->v.f64;
    return true;
}

bool gguf_get_bool(const struct gguf_file *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL)
        return false;
    *out = kv->v.b;
    return true;
}

bool gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_TYPE_STRING)
        return false;
    *out = kv->v.str;
    return true;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    IG_ASSERT(kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING && i < kv->arr_n);
    return kv->arr_strs[i];
}

float gguf_arr_f32(const struct gguf_kv *kv, uint64_t i)
{
    IG_ASSERT(kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_FLOAT32 && i < kv->arr_n);
    uint32_t u;
    memcpy(&u, kv->arr_data + 4 * i, 4); /* GGUF is little-endian, like our targets */
    return ig_bits_to_f32(u);
}

int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i)
{
    IG_ASSERT(kv->type == GGUF_TYPE_ARRAY && i < kv->arr_n &&
              gguf_type_is_int(kv->arr_type));
    const unsigned char *p = kv->arr_data;
    switch (kv->arr_type) {
    case GGUF_TYPE_UINT8: return p[i];
    case GGUF_TYPE_INT8: return (int8_t)p[i];
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (int64_t)v; }
    default: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    }
}

const char *gguf_type_name(enum gguf_type t)
{
    static const char *const names[] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    if ((unsigned)t < sizeof names / sizeof names[0])
        return names[t];
    return "unknown";
}
