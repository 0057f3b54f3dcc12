/* models/safetensors.c: the safetensors header parser over bytes in memory,
 * and st_open. The JSON itself is cJSON's; this file checks every field
 * against the bytes that are there before a pointer is formed (see
 * safetensors.h for the list). Covered by tests/models/test_hf_malformed.py
 * and tests/fuzz/fuzz_safetensors.c. */
#include "models/safetensors.h"

#include "core/status.h"
#include "core/utf8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},   [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},     [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},   [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},     [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t st_dtype_size(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return IG_E_MODEL;
}

/* A name shortened for a message (the message printer drops control bytes). */
static const char *shown(const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    if (n < cap)
        return name;
    memcpy(buf, name, cap - 4);
    memcpy(buf + cap - 4, "...", 4);
    return buf;
}

/* A JSON number that is a whole number in [0, 2^53] (exact in a double). */
static bool get_u53(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d))
        return false;
    *out = (uint64_t)d;
    return true;
}

static int parse_tensor(const cJSON *j, struct st_tensor *t, char *err, size_t cap)
{
    char nb[80];
    const char *name = shown(t->name, nb, sizeof nb);
    if (!cJSON_IsObject(j))
        return fail(err, cap, "tensor '%s' is not a JSON object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return fail(err, cap, "tensor '%s' needs \"dtype\" (a string), \"shape\" and "
                    "\"data_offsets\" (arrays)", name);
    int k = 0;
    while (k < ST_DTYPE_COUNT && strcmp(dt->valuestring, dtypes[k].name))
        k++;
    if (k == ST_DTYPE_COUNT) {
        char db[40];
        return fail(err, cap, "tensor '%s' has unknown dtype '%s'", name,
                    shown(dt->valuestring, db, sizeof db));
    }
    t->dtype = (enum st_dtype)k;
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return fail(err, cap, "tensor '%s' has %d dimensions, at most %d are supported",
                    name, nd, ST_MAX_DIMS);
    t->n_dims = nd;
    t->n_elems = 1;
    int d = 0;
    for (const cJSON *e = sh->child; e; e = e->next, d++) {
        uint64_t v;
        if (!get_u53(e, &v))
            return fail(err, cap, "tensor '%s': shape[%d] is not a whole number >= 0", name, d);
        if (v > INT64_MAX || __builtin_mul_overflow(t->n_elems, (int64_t)v, &t->n_elems))
            return fail(err, cap, "tensor '%s': the element count overflows", name);
        t->shape[d] = (int64_t)v;
    }
    uint64_t b, e;
    if (cJSON_GetArraySize(off) != 2 || !get_u53(off->child, &b) || !get_u53(off->child->next, &e))
        return fail(err, cap, "tensor '%s': data_offsets must be two whole numbers [begin, end]",
                    name);
    if (e < b)
        return fail(err, cap, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                    name, (unsigned long long)b, (unsigned long long)e);
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)t->n_elems, (uint64_t)dtypes[k].size, &want) ||
        want != e - b)
        return fail(err, cap, "tensor '%s': shape and dtype %s make %llu bytes but "
                    "data_offsets [%llu, %llu] hold %llu", name, dtypes[k].name,
                    (unsigned long long)t->n_elems * dtypes[k].size, (unsigned long long)b,
                    (unsigned long long)e, (unsigned long long)(e - b));
    t->offset = b;
    t->nbytes = (size_t)(e - b);
    return IG_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
    const struct st_tensor *x = *(const struct st_tensor *const *)a;
    const struct st_tensor *y = *(const struct st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* Every tensor inside the data, none overlapping another, no hole left. */
static int check_layout(struct st_file *f, const unsigned char *base, char *err, size_t cap)
{
    size_t room = f->file_size - f->data_offset;
    struct st_tensor **order = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order)
        return fail(err, cap, "out of memory"), IG_E_NOMEM;
    for (int64_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, by_offset);
    char n1[80], n2[80];
    uint64_t at = 0;
    int st = IG_OK;
    for (int64_t i = 0; i < f->n_tensors && !st; i++) {
        const struct st_tensor *t = order[i];
        if (t->offset > at)
            st = fail(err, cap, "data bytes [%llu, %llu) belong to no tensor (before '%s')",
                      (unsigned long long)at, (unsigned long long)t->offset,
                      shown(t->name, n1, sizeof n1));
        else if (t->offset < at)
            st = fail(err, cap, "tensors '%s' and '%s' overlap in the data",
                      shown(order[i - 1]->name, n1, sizeof n1), shown(t->name, n2, sizeof n2));
        else if (t->nbytes > room - t->offset)
            st = fail(err, cap, "truncated: tensor '%s' ends at data byte %llu but the file "
                      "holds %zu bytes of data", shown(t->name, n1, sizeof n1),
                      (unsigned long long)(t->offset + t->nbytes), room);
        at = t->offset + t->nbytes;
    }
    free(order);
    if (!st && at != room)
        st = fail(err, cap, "%zu bytes after the last tensor's data belong to no tensor",
                  room - (size_t)at);
    for (int64_t i = 0; i < f->n_tensors && !st; i++)
        f->tensors[i].data = base + f->data_offset + f->tensors[i].offset;
    return st;
}

static int check_metadata(const cJSON *j, char *err, size_t cap)
{
    if (!cJSON_IsObject(j))
        return fail(err, cap, "__metadata__ is not a JSON object");
    for (const cJSON *e = j->child; e; e = e->next)
        if (!cJSON_IsString(e)) {
            char nb[80];
            return fail(err, cap, "__metadata__ '%s' is not a string",
                        shown(e->string, nb, sizeof nb));
        }
    return IG_OK;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = ig_utf8_char_len(s + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

static int parse_header(struct st_file *f, const unsigned char *p, cJSON **root, char *err,
                        size_t cap)
{
    if (f->file_size < 8)
        return fail(err, cap, "file too small: %zu bytes, the header size alone takes 8",
                    f->file_size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)p[i] << (8 * i);
    if (n > ST_MAX_HEADER)
        return fail(err, cap, "header size %llu is over the %llu-byte limit (not a "
                    "safetensors file?)", (unsigned long long)n,
                    (unsigned long long)ST_MAX_HEADER);
    if (n > f->file_size - 8)
        return fail(err, cap, "truncated: the header takes %llu bytes but only %zu follow",
                    (unsigned long long)n, f->file_size - 8);
    if (n < 2 || p[8] != '{')
        return fail(err, cap, "the header does not start with '{' (not a safetensors file?)");
    f->header_size = (size_t)n;
    f->data_offset = 8 + (size_t)n;
    const char *js = (const char *)p + 8;
    if (!valid_utf8(p + 8, (size_t)n))
        return fail(err, cap, "the header is not valid UTF-8");
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(js, (size_t)n, &end, 0);
    if (!*root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = at && at >= js && at <= js + n ? (size_t)(at - js) : 0;
        return fail(err, cap, "the header is not valid JSON (near byte %zu of it)", pos);
    }
    for (const char *q = end; q && q < js + n; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')
            return fail(err, cap, "the header has bytes after its JSON object (at byte %zu)",
                        (size_t)(q - js));
    if (!cJSON_IsObject(*root))
        return fail(err, cap, "the header is not a JSON object");
    return IG_OK;
}

static int parse_all(struct st_file *f, const unsigned char *p, char *err, size_t cap)
{
    cJSON *root = NULL;
    int st = parse_header(f, p, &root, err, cap);
    if (st)
        goto done;
    size_t names = 0;
    int64_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if ((st = check_metadata(e, err, cap)))
                goto done;
            continue;
        }
        n++;
        names += strlen(e->string) + 1;
    }
    f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    f->arena_ = malloc(names ? names : 1);
    if (!f->tensors || !f->arena_) {
        st = IG_E_NOMEM;
        fail(err, cap, "out of memory for %lld tensor entries", (long long)n);
        goto done;
    }
    char *a = f->arena_;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__"))
            continue;
        struct st_tensor *t = &f->tensors[f->n_tensors++];
        size_t len = strlen(e->string) + 1;
        memcpy(a, e->string, len);
        t->name = a;
        a += len;
        if ((st = parse_tensor(e, t, err, cap)))
            goto done;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_name);
    for (int64_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name)) {
            char nb[80];
            st = fail(err, cap, "tensor '%s' appears twice in the header",
                      shown(f->tensors[i].name, nb, sizeof nb));
            goto done;
        }
    st = check_layout(f, p, err, cap);
done:
    cJSON_Delete(root);
    return st;
}

int st_parse(const void *data, size_t size, struct st_file **out, char *err, size_t cap)
{
    *out = NULL;
    err[0] = '\0';
    struct st_file *f = calloc(1, sizeof *f);
    if (!f)
        return fail(err, cap, "out of memory"), IG_E_NOMEM;
    f->file_size = size;
    int st = parse_all(f, data, err, cap);
    if (st) {
        st_close(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

int st_open(const char *path, struct st_file **out)
{
    struct ig_mapped_file map;
    *out = NULL;
    int st = ig_map_file(path, &map);
    if (st)
        return st;
    char err[320];
    if ((st = st_parse(map.data, map.size, out, err, sizeof err))) {
        ig_unmap_file(&map);
        return ig_error(st, "'%s': %s", path, err);
    }
    (*out)->map = map;
    return IG_OK;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    free(f->tensors);
    free(f->arena_);
    ig_unmap_file(&f->map);
    free(f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    struct st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, by_name);
}
