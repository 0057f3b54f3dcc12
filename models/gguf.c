/* models/gguf.c: the GGUF v2/v3 parser over bytes in memory, and gguf_open.
 *
 * Reads the header, the metadata, the tensor infos and lays the tensors out
 * in the data section, checking every count, length, shape and offset
 * against the bytes that are there before it is used or allocated for. The
 * hash index lives in gguf_index.c, the known-key type checks in
 * gguf_keys.c, the lookups and getters in gguf_get.c.
 * Covered by tests/models/test_gguf_malformed.py and tests/fuzz/. */
#include "models/gguf_impl.h"

#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC "GGUF"
/* Smallest encodings, used to reject counts before allocating for them:
 * a key/value is a key length, a type and at least one byte of value; a
 * tensor info is a name length, n_dims, one dim, a type and an offset. */
#define GGUF_MIN_KV_BYTES (8 + 4 + 1)
#define GGUF_MIN_TENSOR_INFO_BYTES (8 + 4 + 8 + 4 + 8)
#define GGUF_HEADER_BYTES (4 + 4 + 8 + 8)
#define GGUF_MAX_ALIGNMENT (1u << 30)

/* A cursor over the image; ctx names what is being read, for messages. */
struct reader {
    const unsigned char *p;
    size_t size;
    size_t pos;
    struct gguf_error *err;
    char ctx[160];
};

int gguf_fail(struct gguf_error *err, enum gguf_err code, const char *fmt, ...)
{
    va_list ap;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return IG_E_MODEL;
}

const char *gguf_printable(char *buf, size_t cap, struct gguf_str s)
{
    size_t max = cap - 4, n = 0;
    for (uint64_t i = 0; i < s.len && n < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.len > max)
        memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return buf;
}

/* Fails with GGUF_ERR_TRUNCATED unless n more bytes are there. */
static int need(struct reader *r, size_t n, const char *what)
{
    if (r->size - r->pos >= n)
        return IG_OK;
    return gguf_fail(r->err, GGUF_ERR_TRUNCATED,
                     "%s: truncated: %s at byte %zu needs %zu bytes, %zu left",
                     r->ctx, what, r->pos, n, r->size - r->pos);
}

static int read_u32(struct reader *r, const char *what, uint32_t *out)
{
    int st = need(r, 4, what);
    if (st)
        return st;
    const unsigned char *b = r->p + r->pos;
    *out = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    r->pos += 4;
    return IG_OK;
}

static int read_u64(struct reader *r, const char *what, uint64_t *out)
{
    uint32_t lo = 0, hi = 0;
    int st = need(r, 8, what);
    if (!st && !(st = read_u32(r, what, &lo)))
        st = read_u32(r, what, &hi);
    *out = (uint64_t)hi << 32 | lo;
    return st;
}

static int read_str(struct reader *r, const char *what, struct gguf_str *out)
{
    uint64_t len;
    int st = read_u64(r, what, &len);
    if (st)
        return st;
    if (len > r->size - r->pos)
        return gguf_fail(r->err, GGUF_ERR_STRING,
                         "%s: %s length %llu at byte %zu exceeds the %zu bytes left",
                         r->ctx, what, (unsigned long long)len, r->pos - 8,
                         r->size - r->pos);
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += (size_t)len;
    return IG_OK;
}

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY, unknown. */
static size_t fixed_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static int check_type(struct reader *r, uint32_t t, const char *what)
{
    if (t <= GGUF_TYPE_FLOAT64)
        return IG_OK;
    return gguf_fail(r->err, GGUF_ERR_VALUE_TYPE, "%s: unknown %s %u at byte %zu",
                     r->ctx, what, t, r->pos - 4);
}

/* Decodes one little-endian scalar of a fixed-size type at b into kv->v. */
static int decode_scalar(struct reader *r, uint32_t t, const unsigned char *b,
                         struct gguf_kv *kv)
{
    uint64_t u = 0;
    size_t n = fixed_size(t);
    for (size_t i = 0; i < n; i++)
        u |= (uint64_t)b[i] << (8 * i);
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        kv->v.u64 = u;
        break;
    case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)u; break;
    case GGUF_TYPE_INT16: kv->v.i64 = (int16_t)u; break;
    case GGUF_TYPE_INT32: kv->v.i64 = (int32_t)u; break;
    case GGUF_TYPE_INT64: kv->v.i64 = (int64_t)u; break;
    case GGUF_TYPE_FLOAT32: kv->v.f64 = ig_bits_to_f32((uint32_t)u); break;
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, &u, 8); break;
    case GGUF_TYPE_BOOL:
        if (u > 1)
            return gguf_fail(r->err, GGUF_ERR_VALUE_TYPE,
                             "%s: bool value %u is neither 0 nor 1", r->ctx, (unsigned)u);
        kv->v.b = u != 0;
        break;
    default: break;
    }
    return IG_OK;
}

static int parse_array(struct reader *r, struct gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    int st = read_u32(r, "array element type", &et);
    if (st)
        return st;
    if (et == GGUF_TYPE_ARRAY)
        return gguf_fail(r->err, GGUF_ERR_NESTED_ARRAY,
                         "%s: arrays of arrays are not supported", r->ctx);
    if ((st = check_type(r, et, "array element type")) || (st = read_u64(r, "array count", &n)))
        return st;
    size_t es = et == GGUF_TYPE_STRING ? 8 : fixed_size(et);
    size_t left = r->size - r->pos;
    if (n > left / es)
        return gguf_fail(r->err, GGUF_ERR_COUNT,
                         "%s: array of %llu %s elements cannot fit in the %zu bytes left",
                         r->ctx, (unsigned long long)n, gguf_type_name((enum gguf_type)et), left);
    kv->arr_type = (enum gguf_type)et;
    kv->arr_n = n;
    kv->arr_data = r->p + r->pos;
    if (et != GGUF_TYPE_STRING) {
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->arr_data[i] > 1)
                    return gguf_fail(r->err, GGUF_ERR_VALUE_TYPE,
                                     "%s: bool element %llu is %u, neither 0 nor 1", r->ctx,
                                     (unsigned long long)i, kv->arr_data[i]);
        r->pos += (size_t)n * es;
        return IG_OK;
    }
    kv->arr_strs = calloc(n ? (size_t)n : 1, sizeof *kv->arr_strs);
    if (!kv->arr_strs)
        return IG_E_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        if ((st = read_str(r, "string element", &kv->arr_strs[i])))
            return st;
    return IG_OK;
}

static int parse_kv(struct reader *r, int64_t i, struct gguf_kv *kv)
{
    char name[64];
    snprintf(r->ctx, sizeof r->ctx, "metadata entry %lld", (long long)i);
    int st = read_str(r, "key", &kv->key);
    if (st)
        return st;
    snprintf(r->ctx, sizeof r->ctx, "metadata key '%s'",
             gguf_printable(name, sizeof name, kv->key));
    uint32_t t;
    if ((st = read_u32(r, "value type", &t)) || (st = check_type(r, t, "value type")))
        return st;
    kv->type = (enum gguf_type)t;
    if (t == GGUF_TYPE_ARRAY)
        return parse_array(r, kv);
    if (t == GGUF_TYPE_STRING)
        return read_str(r, "string value", &kv->v.str);
    size_t n = fixed_size(t);
    if ((st = need(r, n, "value")))
        return st;
    st = decode_scalar(r, t, r->p + r->pos, kv);
    r->pos += n;
    return st;
}

static int parse_tensor_info(struct reader *r, int64_t i, struct gguf_tensor *t)
{
    char name[64];
    snprintf(r->ctx, sizeof r->ctx, "tensor info %lld", (long long)i);
    int st = read_str(r, "tensor name", &t->name);
    if (st)
        return st;
    snprintf(r->ctx, sizeof r->ctx, "tensor '%s'", gguf_printable(name, sizeof name, t->name));
    uint32_t nd, type;
    if ((st = read_u32(r, "n_dims", &nd)))
        return st;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return gguf_fail(r->err, GGUF_ERR_DIMS, "%s: n_dims is %u, expected 1 to %d",
                         r->ctx, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    t->n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (st = read_u64(r, "dim", &ne)))
            return st;
        if (ne < 1)
            return gguf_fail(r->err, GGUF_ERR_DIMS, "%s: dim %d is 0", r->ctx, d);
        if (ne > INT64_MAX || __builtin_mul_overflow(t->n_elems, (int64_t)ne, &t->n_elems))
            return gguf_fail(r->err, GGUF_ERR_OVERFLOW,
                             "%s: the element count overflows at dim %d (%llu)", r->ctx, d,
                             (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((st = read_u32(r, "tensor type", &type)))
        return st;
    t->type = type;
    const struct quant_traits *q = quant_traits_of(type);
    if (!q) {
        const char *known = quant_type_name(type); /* "type N" when never assigned */
        bool named = strncmp(known, "type ", 5) != 0;
        return gguf_fail(r->err, GGUF_ERR_TENSOR_TYPE, "%s: unknown tensor type id %u%s%s%s",
                         r->ctx, type, named ? " (" : "", named ? known : "", named ? ")" : "");
    }
    if (t->ne[0] % q->block_elems)
        return gguf_fail(r->err, GGUF_ERR_ROW_BLOCKS,
                         "%s: row length %lld is not a multiple of %s's block of %lld",
                         r->ctx, (long long)t->ne[0], q->name, (long long)q->block_elems);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)(t->n_elems / q->block_elems),
                               (uint64_t)q->block_bytes, &bytes) || bytes > SIZE_MAX)
        return gguf_fail(r->err, GGUF_ERR_OVERFLOW, "%s: the byte size overflows", r->ctx);
    t->nbytes = (size_t)bytes;
    return read_u64(r, "tensor offset", &t->offset);
}

static int parse_header(struct reader *r, struct gguf_file *g, uint64_t *n_kv, uint64_t *n_t)
{
    snprintf(r->ctx, sizeof r->ctx, "header");
    if (r->size < GGUF_HEADER_BYTES)
        return gguf_fail(r->err, GGUF_ERR_TOO_SMALL,
                         "file too small: %zu bytes, a GGUF header takes %d", r->size,
                         GGUF_HEADER_BYTES);
    if (memcmp(r->p, GGUF_MAGIC, 4))
        return gguf_fail(r->err, GGUF_ERR_MAGIC,
                         "not a GGUF file: magic is %02x %02x %02x %02x, expected \"GGUF\"",
                         r->p[0], r->p[1], r->p[2], r->p[3]);
    r->pos = 4;
    int st = read_u32(r, "version", &g->version);
    if (st)
        return st;
    if (g->version != 2 && g->version != 3)
        return gguf_fail(r->err, GGUF_ERR_VERSION,
                         "GGUF version %u is not supported (2 and 3 are)%s", g->version,
                         (g->version & 0xffff) == 0 ? "; a big-endian file?" : "");
    if ((st = read_u64(r, "tensor count", n_t)) || (st = read_u64(r, "metadata count", n_kv)))
        return st;
    size_t left = r->size - r->pos;
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return gguf_fail(r->err, GGUF_ERR_COUNT,
                         "header: %llu metadata entries cannot fit in the %zu bytes left",
                         (unsigned long long)*n_kv, left);
    if (*n_t > left / GGUF_MIN_TENSOR_INFO_BYTES)
        return gguf_fail(r->err, GGUF_ERR_COUNT,
                         "header: %llu tensor infos cannot fit in the %zu bytes left",
                         (unsigned long long)*n_t, left);
    return IG_OK;
}

static int read_alignment(struct gguf_file *g, struct gguf_error *err)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(g, "general.alignment");
    if (!kv)
        return IG_OK;
    uint64_t a;
    if (!gguf_get_u64(g, "general.alignment", &a) || a == 0 || (a & (a - 1)) ||
        a > GGUF_MAX_ALIGNMENT)
    {
        char v[24];
        if (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 ||
            kv->type == GGUF_TYPE_INT32 || kv->type == GGUF_TYPE_INT64)
            snprintf(v, sizeof v, "%lld", (long long)kv->v.i64);
        else
            snprintf(v, sizeof v, "%llu", (unsigned long long)kv->v.u64);
        return gguf_fail(err, GGUF_ERR_ALIGNMENT,
                         "general.alignment must be a power of 2 up to %u, got %s",
                         GGUF_MAX_ALIGNMENT, v);
    }
    g->alignment = a;
    return IG_OK;
}

struct span {
    uint64_t start, end;
    int64_t idx;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Places every tensor in the data section: aligned, inside the file, not
 * sharing bytes with another, and each where the one before it ends (padded
 * to the alignment), as writers lay them out and llama.cpp requires: a
 * tensor whose type or shape was corrupted to fewer bytes would otherwise
 * read the wrong bytes without a word. */
static int layout_tensors(struct gguf_file *g, const unsigned char *base, struct gguf_error *err)
{
    char n1[64], n2[64];
    size_t room = g->data_offset <= g->file_size ? g->file_size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return gguf_fail(err, GGUF_ERR_TENSOR_ALIGN,
                             "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                             gguf_printable(n1, sizeof n1, t->name),
                             (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (g->data_offset > g->file_size || t->offset > room || t->nbytes > room - t->offset) {
            uint64_t a = g->data_offset + t->offset, b = a + t->nbytes; /* wrap only on absurd input */
            return gguf_fail(err, GGUF_ERR_TENSOR_BOUNDS,
                             "tensor '%s': data [%llu, %llu) lies outside the file (size %zu)",
                             gguf_printable(n1, sizeof n1, t->name), (unsigned long long)a,
                             (unsigned long long)b, g->file_size);
        }
        t->data = base + g->data_offset + t->offset;
    }
    if (g->n_tensors < 1)
        return IG_OK;
    struct span *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s)
        return IG_E_NOMEM;
    for (int64_t i = 0; i < g->n_tensors; i++)
        s[i] = (struct span){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].nbytes, i};
    qsort(s, (size_t)g->n_tensors, sizeof *s, span_cmp);
    int st = IG_OK;
    if (s[0].start != 0)
        st = gguf_fail(err, GGUF_ERR_TENSOR_GAP,
                       "tensor '%s' starts at %llu of the data section, not at 0",
                       gguf_printable(n1, sizeof n1, g->tensors[s[0].idx].name),
                       (unsigned long long)s[0].start);
    for (int64_t i = 1; i < g->n_tensors && !st; i++)
        if (s[i].start >= s[i - 1].end &&
            s[i].start != (s[i - 1].end + g->alignment - 1) / g->alignment * g->alignment)
            st = gguf_fail(err, GGUF_ERR_TENSOR_GAP,
                           "tensor '%s' ends at %llu but '%s' starts at %llu (bytes between "
                           "tensors: a type or shape that does not match the data)",
                           gguf_printable(n1, sizeof n1, g->tensors[s[i - 1].idx].name),
                           (unsigned long long)s[i - 1].end,
                           gguf_printable(n2, sizeof n2, g->tensors[s[i].idx].name),
                           (unsigned long long)s[i].start);
        else if (s[i].start < s[i - 1].end)
            st = gguf_fail(err, GGUF_ERR_TENSOR_OVERLAP,
                           "tensors '%s' and '%s' overlap: [%llu, %llu) and [%llu, %llu) "
                           "in the data section",
                           gguf_printable(n1, sizeof n1, g->tensors[s[i - 1].idx].name),
                           gguf_printable(n2, sizeof n2, g->tensors[s[i].idx].name),
                           (unsigned long long)s[i - 1].start, (unsigned long long)s[i - 1].end,
                           (unsigned long long)s[i].start, (unsigned long long)s[i].end);
    free(s);
    return st;
}

static int parse_all(struct reader *r, struct gguf_file *g)
{
    uint64_t n_kv = 0, n_t = 0;
    int st = parse_header(r, g, &n_kv, &n_t);
    if (st)
        return st;
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_t ? (size_t)n_t : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return IG_E_NOMEM;
    for (g->n_kv = 0; g->n_kv < (int64_t)n_kv;) {
        struct gguf_kv *kv = &g->kv[g->n_kv++]; /* counted first: gguf_close frees it */
        if ((st = parse_kv(r, g->n_kv - 1, kv)))
            return st;
    }
    for (g->n_tensors = 0; g->n_tensors < (int64_t)n_t; g->n_tensors++)
        if ((st = parse_tensor_info(r, g->n_tensors, &g->tensors[g->n_tensors])))
            return st;
    if ((st = gguf_index_build(g, r->err)) || (st = gguf_check_known_keys(g, r->err)) ||
        (st = read_alignment(g, r->err)))
        return st;
    /* pos <= size <= SIZE_MAX and alignment <= 2^30: the sum cannot wrap */
    g->data_offset = (r->pos + (g->alignment - 1)) / g->alignment * g->alignment;
    if (g->n_tensors == 0 && g->data_offset > g->file_size)
        g->data_offset = g->file_size; /* no data section: padding is optional */
    return layout_tensors(g, r->p, r->err);
}

int gguf_parse(const void *data, size_t size, struct gguf_file **out, struct gguf_error *err)
{
    struct gguf_error local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    *out = NULL;
    struct gguf_file *g = calloc(1, sizeof *g);
    if (!g)
        return IG_E_NOMEM;
    g->file_size = size;
    struct reader r = {.p = data, .size = size, .err = err};
    int st = parse_all(&r, g);
    if (st == IG_E_NOMEM && err->code == GGUF_OK)
        snprintf(err->msg, sizeof err->msg, "out of memory while parsing");
    if (st) {
        gguf_close(g);
        return st;
    }
    *out = g;
    return IG_OK;
}

int gguf_open(const char *path, struct gguf_file **out, struct gguf_error *err)
{
    struct ig_mapped_file map;
    *out = NULL;
    int st = ig_map_file(path, &map);
    if (st) {
        if (err)
            *err = (struct gguf_error){GGUF_OK, "cannot open the file"};
        return st;
    }
    struct gguf_error local;
    if (!err)
        err = &local;
    st = gguf_parse(map.data, map.size, out, err);
    if (st) {
        ig_unmap_file(&map);
        return ig_error(st, "'%s': %s", path, err->msg);
    }
    (*out)->map = map;
    return IG_OK;
}

void gguf_close(struct gguf_file *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++)
        free(g->kv[i].arr_strs);
    free(g->kv);
    free(g->tensors);
    gguf_index_free(g);
    ig_unmap_file(&g->map);
    free(g);
}
