/* tests/fuzz/fuzz_gguf.c: libFuzzer entry for the GGUF parser.
 *
 * Parses the input with gguf_parse and, when it parses, walks everything
 * the rest of ignite may touch: every key and tensor looked up by name,
 * every typed getter, array elements, and the first row of each tensor
 * dequantized. A file that parses must be safe to index, so any sanitizer
 * report here is a parser bug. Built by scripts/fuzz.sh (clang, libFuzzer);
 * fuzz_replay.c runs the same entry over the corpus in ordinary builds. */
#include "models/gguf.h"
#include "models/quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps values alive so the walk is not optimised away. */
static volatile uint64_t sink;

static void walk_kv(const struct gguf_file *g, const struct gguf_kv *kv)
{
    char key[256];
    if (kv->key.len < sizeof key) {
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = '\0';
        const struct gguf_kv *found = gguf_find_kv(g, key);
        sink += found != NULL; /* NULL only when the key holds a NUL byte */
        uint64_t u;
        double f;
        bool b;
        struct gguf_str s;
        sink += gguf_get_u64(g, key, &u) + gguf_get_f64(g, key, &f) + gguf_get_bool(g, key, &b) +
                gguf_get_str(g, key, &s);
    }
    sink += strlen(gguf_type_name(kv->type));
    if (kv->type != GGUF_TYPE_ARRAY)
        return;
    uint64_t n = kv->arr_n < 64 ? kv->arr_n : 64;
    for (uint64_t i = 0; i < n; i++) {
        switch (kv->arr_type) {
        case GGUF_TYPE_STRING: {
            struct gguf_str s = gguf_arr_str(kv, i);
            if (s.len)
                sink += (unsigned char)s.ptr[s.len - 1];
            break;
        }
        case GGUF_TYPE_FLOAT32: sink += (uint64_t)(gguf_arr_f32(kv, i) != 0); break;
        case GGUF_TYPE_FLOAT64: case GGUF_TYPE_BOOL: break;
        default: sink += (uint64_t)gguf_arr_int(kv, i); break;
        }
    }
}

static void walk_tensor(const struct gguf_file *g, const struct gguf_tensor *t)
{
    char name[256];
    if (t->name.len < sizeof name) {
        memcpy(name, t->name.ptr, (size_t)t->name.len);
        name[t->name.len] = '\0';
        sink += gguf_find_tensor(g, name) != NULL;
    }
    sink += strlen(quant_type_name(t->type));
    const struct quant_traits *q = quant_traits_of(t->type);
    if (!q || !q->can_dequantize || t->ne[0] > 4096)
        return;
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    if (!row)
        return;
    quant_dequantize_row((enum quant_type)t->type, t->data, row, t->ne[0]);
    sink += (uint64_t)(row[t->ne[0] - 1] != 0);
    /* the last row too: the far end of the tensor must be in bounds */
    size_t rb = quant_row_bytes((enum quant_type)t->type, t->ne[0]);
    quant_dequantize_row((enum quant_type)t->type,
                         (const unsigned char *)t->data + t->nbytes - rb, row, t->ne[0]);
    sink += (uint64_t)(row[0] != 0);
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *g;
    struct gguf_error err;
    if (gguf_parse(data, size, &g, &err) != 0) {
        sink += strlen(err.msg) + (unsigned)err.code;
        return 0;
    }
    for (int64_t i = 0; i < g->n_kv; i++)
        walk_kv(g, &g->kv[i]);
    for (int64_t i = 0; i < g->n_tensors; i++)
        walk_tensor(g, &g->tensors[i]);
    sink += gguf_find_kv(g, "general.architecture") != NULL;
    gguf_close(g);
    return 0;
}
