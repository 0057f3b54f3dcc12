/* tests/models/test_gguf_api.c: the contracts of the models/ API that the
 * Python tests do not see directly: getter semantics across value types,
 * lookups of absent names, the error code of each parse failure, type
 * facts and names (the KV cache's bytes are tests/kvcache/test_kvmem.c's).
 * Files are built in memory by a tiny writer. */
#include "core/status.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/quant.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

struct buf {
    unsigned char b[4096];
    size_t n;
};

static void put(struct buf *w, const void *p, size_t n)
{
    IG_ASSERT(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put_u32(struct buf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(struct buf *w, uint64_t v) { put(w, &v, 8); }

static void put_str(struct buf *w, const char *s)
{
    put_u64(w, strlen(s));
    put(w, s, strlen(s));
}

static void header(struct buf *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    w->n = 0;
    put(w, "GGUF", 4);
    put_u32(w, version);
    put_u64(w, n_tensors);
    put_u64(w, n_kv);
}

static size_t f_key_at;  /* where the key "f" is: its one byte */
static size_t tinfo_at;  /* where tensor t's n_dims is */

/* A v3 file: 6 scalars of different types, a string array, an int8 array,
 * one F32 tensor of 8 elements (data at offset 0 after 32-byte padding). */
static void build_valid(struct buf *w)
{
    header(w, 3, 1, 8);
    put_str(w, "neg"), put_u32(w, GGUF_TYPE_INT32), put_u32(w, (uint32_t)-5);
    put_str(w, "small"), put_u32(w, GGUF_TYPE_UINT8), put(w, "\x07", 1);
    put_str(w, "big"), put_u32(w, GGUF_TYPE_UINT64), put_u64(w, UINT64_MAX);
    float f = 0.25f;
    f_key_at = w->n + 8;
    put_str(w, "f"), put_u32(w, GGUF_TYPE_FLOAT32), put(w, &f, 4);
    put_str(w, "yes"), put_u32(w, GGUF_TYPE_BOOL), put(w, "\x01", 1);
    put_str(w, "s"), put_u32(w, GGUF_TYPE_STRING), put_str(w, "hi");
    put_str(w, "strs"), put_u32(w, GGUF_TYPE_ARRAY), put_u32(w, GGUF_TYPE_STRING), put_u64(w, 2);
    put_str(w, "a"), put_str(w, "bc");
    put_str(w, "i8s"), put_u32(w, GGUF_TYPE_ARRAY), put_u32(w, GGUF_TYPE_INT8), put_u64(w, 3);
    put(w, "\x01\xff\x80", 3);
    put_str(w, "t");
    tinfo_at = w->n;
    put_u32(w, 1), put_u64(w, 8), put_u32(w, QUANT_F32), put_u64(w, 0);
    while (w->n % 32)
        put(w, "", 1);
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        put(w, &v, 4);
    }
}

static void test_valid(void)
{
    struct buf w;
    build_valid(&w);
    struct gguf_file *g;
    struct gguf_error err;
    CHECKF(gguf_parse(w.b, w.n, &g, &err) == IG_OK, "%s", err.msg);
    if (!g)
        return;
    uint64_t u;
    double d;
    bool b;
    struct gguf_str s;
    CHECK(!gguf_get_u64(g, "neg", &u));          /* negative: not a u64 */
    CHECK(gguf_get_u64(g, "small", &u) && u == 7);
    CHECK(gguf_get_u64(g, "big", &u) && u == UINT64_MAX);
    CHECK(!gguf_get_f64(g, "small", &d));        /* integers are not floats */
    CHECK(gguf_get_f64(g, "f", &d) && d == 0.25);
    CHECK(gguf_get_bool(g, "yes", &b) && b);
    CHECK(gguf_get_str(g, "s", &s) && gguf_str_eq(s, "hi") && !gguf_str_eq(s, "h"));
    CHECK(!gguf_get_str(g, "absent", &s) && !gguf_find_kv(g, "absent"));
    CHECK(!gguf_find_kv(g, "ne")); /* a prefix of a key is not the key */
    const struct gguf_kv *kv = gguf_find_kv(g, "strs");
    CHECK(kv && kv->arr_n == 2 && gguf_str_eq(gguf_arr_str(kv, 1), "bc"));
    kv = gguf_find_kv(g, "i8s");
    CHECK(kv && gguf_arr_int(kv, 0) == 1 && gguf_arr_int(kv, 1) == -1 && gguf_arr_int(kv, 2) == -128);
    const struct gguf_tensor *t = gguf_find_tensor(g, "t");
    CHECK(t && t->n_elems == 8 && t->nbytes == 32 && t->ne[1] == 1 && g->alignment == 32);
    CHECK(t && ((const float *)t->data)[7] == 7.0f);
    CHECK(!gguf_find_tensor(g, "u"));
    CHECK(g->data_offset % 32 == 0 && g->data_offset + 32 == w.n);
    gguf_close(g);
    CHECK(gguf_parse(w.b, w.n, &g, NULL) == IG_OK); /* err may be NULL */
    gguf_close(g);
}

/* Breaks the valid file at byte `at` with `v` (len bytes) and expects `code`. */
static void expect_code(size_t at, const void *v, size_t len, size_t size, enum gguf_err code)
{
    struct buf w;
    build_valid(&w);
    if (v)
        memcpy(w.b + at, v, len);
    struct gguf_file *g = NULL;
    struct gguf_error err;
    int st = gguf_parse(w.b, size ? size : w.n, &g, &err);
    CHECKF(st == IG_E_MODEL && err.code == code && !g && strlen(err.msg) > 10 &&
           !strchr(err.msg, '\n'), "at %zu: status %d code %d (want %d): %s", at, st,
           (int)err.code, (int)code, err.msg);
}

static void test_error_codes(void)
{
    struct buf w;
    build_valid(&w);
    uint32_t v1 = 1, huge32 = 0xffffffffu;
    uint64_t huge = 1ull << 40;
    size_t key0 = 24;           /* the first key's length */
    size_t type0 = key0 + 8 + 3; /* the first value's type */
    expect_code(0, NULL, 0, 10, GGUF_ERR_TOO_SMALL);
    expect_code(0, "GGUX", 4, 0, GGUF_ERR_MAGIC);
    expect_code(4, &v1, 4, 0, GGUF_ERR_VERSION);
    expect_code(0, NULL, 0, 40, GGUF_ERR_COUNT);
    expect_code(0, NULL, 0, tinfo_at + 6, GGUF_ERR_TRUNCATED);
    expect_code(16, &huge, 8, 0, GGUF_ERR_COUNT);
    expect_code(key0, &huge, 8, 0, GGUF_ERR_STRING);
    expect_code(type0, &huge32, 4, 0, GGUF_ERR_VALUE_TYPE);
    expect_code(f_key_at, "s", 1, 0, GGUF_ERR_DUPLICATE_KEY);
    uint32_t q4_2 = 4, q4_0 = QUANT_Q4_0, dims5 = 5;
    uint64_t zero = 0, off32 = 32, off8 = 8, dim_huge = 1ull << 62;
    expect_code(tinfo_at, &dims5, 4, 0, GGUF_ERR_DIMS);
    expect_code(tinfo_at + 4, &zero, 8, 0, GGUF_ERR_DIMS);
    expect_code(tinfo_at + 4, &dim_huge, 8, 0, GGUF_ERR_OVERFLOW); /* bytes overflow */
    expect_code(tinfo_at + 12, &q4_2, 4, 0, GGUF_ERR_TENSOR_TYPE);
    expect_code(tinfo_at + 12, &q4_0, 4, 0, GGUF_ERR_ROW_BLOCKS);
    expect_code(tinfo_at + 16, &off8, 8, 0, GGUF_ERR_TENSOR_ALIGN);
    expect_code(tinfo_at + 16, &off32, 8, 0, GGUF_ERR_TENSOR_BOUNDS);
    expect_code(0, NULL, 0, w.n - 1, GGUF_ERR_TENSOR_BOUNDS);
}

static void test_types(void)
{
    CHECK(quant_traits_of(4) == NULL && quant_traits_of(5) == NULL && quant_traits_of(31) == NULL);
    CHECK(quant_traits_of(1000) == NULL);
    CHECK(!strcmp(quant_type_name(QUANT_Q4_1), "Q4_1"));
    CHECK(!strcmp(quant_type_name(16), "IQ2_XXS") && !quant_traits_of(16)->can_dequantize);
    CHECK(!strcmp(quant_type_name(99), "type 99"));
    CHECK(quant_row_bytes(QUANT_Q4_1, 576) == 18 * 20);
    CHECK(quant_row_bytes(QUANT_Q6_K, 512) == 2 * 210);
    CHECK(quant_row_bytes(QUANT_Q4_0, 33) == 0);
    CHECK(quant_row_bytes(QUANT_BF16, 3) == 6);
}

int main(void)
{
    test_valid();
    test_error_codes();
    test_types();
    return test_summary("test_gguf_api");
}
