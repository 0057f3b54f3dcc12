/* tests/models/gguf_dump.c: a test helper that shows Python what our GGUF
 * parser and dequantizer read, so tests can compare it with the gguf
 * package (tests/models/test_dequant.py, test_info.py).
 *
 *   gguf_dump info FILE     one text line per tensor:
 *                           name type_id n_dims ne0 ne1 ne2 ne3 offset nbytes
 *                           after a line: version alignment n_kv n_tensors data_offset
 *   gguf_dump kv FILE       one line per metadata entry, file order:
 *                           KEY TYPE VALUE, or KEY array ELEMTYPE N E1 E2 ...
 *                           strings (and KEY) as "x" + hex bytes, integers in
 *                           decimal, floats as the hex of their bits (f32: 8
 *                           digits, f64: 16), bools 0/1
 *   gguf_dump dequant FILE  for each tensor ignite can dequantize, in file
 *                           order, all its elements as little-endian f32 on
 *                           stdout (row by row through quant_dequantize_row)
 *
 * Exit status: 0, or the status of gguf_open (message on stderr). */
#include "core/status.h"
#include "models/gguf.h"
#include "models/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dump_info(const struct gguf_file *g)
{
    printf("%u %llu %lld %lld %zu\n", g->version, (unsigned long long)g->alignment,
           (long long)g->n_kv, (long long)g->n_tensors, g->data_offset);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        printf("%.*s %u %d %lld %lld %lld %lld %llu %zu\n", (int)t->name.len, t->name.ptr,
               t->type, t->n_dims, (long long)t->ne[0], (long long)t->ne[1],
               (long long)t->ne[2], (long long)t->ne[3], (unsigned long long)t->offset,
               t->nbytes);
    }
}

static void put_str(struct gguf_str s)
{
    putchar('x');
    for (uint64_t i = 0; i < s.len; i++)
        printf("%02x", (unsigned char)s.ptr[i]);
}

static void put_f32(double v)
{
    printf("%08x", ig_f32_to_bits((float)v)); /* widened from f32: exact */
}

static void put_f64(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    printf("%016llx", (unsigned long long)u);
}

static void put_scalar(const struct gguf_kv *kv)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        printf("%llu", (unsigned long long)kv->v.u64);
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        printf("%lld", (long long)kv->v.i64);
        break;
    case GGUF_TYPE_FLOAT32: put_f32(kv->v.f64); break;
    case GGUF_TYPE_FLOAT64: put_f64(kv->v.f64); break;
    case GGUF_TYPE_BOOL: printf("%d", kv->v.b); break;
    default: put_str(kv->v.str); break;
    }
}

static void put_element(const struct gguf_kv *kv, uint64_t i)
{
    switch (kv->arr_type) {
    case GGUF_TYPE_STRING: put_str(gguf_arr_str(kv, i)); break;
    case GGUF_TYPE_FLOAT32: put_f32(gguf_arr_f32(kv, i)); break;
    case GGUF_TYPE_FLOAT64: {
        double d;
        memcpy(&d, kv->arr_data + 8 * i, 8);
        put_f64(d);
        break;
    }
    case GGUF_TYPE_BOOL: printf("%d", kv->arr_data[i]); break;
    case GGUF_TYPE_UINT64: {
        uint64_t u;
        memcpy(&u, kv->arr_data + 8 * i, 8);
        printf("%llu", (unsigned long long)u);
        break;
    }
    default: printf("%lld", (long long)gguf_arr_int(kv, i)); break;
    }
}

static void dump_kv(const struct gguf_file *g)
{
    for (int64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        put_str(kv->key);
        printf(" %s ", gguf_type_name(kv->type));
        if (kv->type != GGUF_TYPE_ARRAY) {
            put_scalar(kv);
        } else {
            printf("%s %llu", gguf_type_name(kv->arr_type), (unsigned long long)kv->arr_n);
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                putchar(' ');
                put_element(kv, j);
            }
        }
        putchar('\n');
    }
}

static int dump_dequant(const struct gguf_file *g)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        const struct quant_traits *q = quant_traits_of(t->type);
        if (!q || !q->can_dequantize)
            continue;
        int64_t cols = t->ne[0], rows = t->n_elems / cols;
        size_t row_bytes = quant_row_bytes((enum quant_type)t->type, cols);
        float *buf = malloc((size_t)cols * sizeof *buf);
        if (!buf)
            return ig_error(IG_E_NOMEM, "out of memory");
        for (int64_t r = 0; r < rows; r++) {
            quant_dequantize_row((enum quant_type)t->type,
                                 (const unsigned char *)t->data + (size_t)r * row_bytes, buf, cols);
            if (fwrite(buf, sizeof *buf, (size_t)cols, stdout) != (size_t)cols) {
                free(buf);
                return ig_error(IG_E_IO, "write failed");
            }
        }
        free(buf);
    }
    return fflush(stdout) ? ig_error(IG_E_IO, "write failed") : IG_OK;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "info") && strcmp(argv[1], "kv") &&
                      strcmp(argv[1], "dequant"))) {
        fprintf(stderr, "usage: gguf_dump info|kv|dequant FILE\n");
        return IG_E_USAGE;
    }
    struct gguf_file *g;
    int st = gguf_open(argv[2], &g, NULL);
    if (st)
        return st;
    if (!strcmp(argv[1], "info"))
        dump_info(g);
    else if (!strcmp(argv[1], "kv"))
        dump_kv(g);
    else
        st = dump_dequant(g);
    gguf_close(g);
    return st;
}
