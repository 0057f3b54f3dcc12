/* tests/models/gguf_dump.c: a test helper that shows Python what our GGUF
 * parser and dequantizer read, so tests can compare it with the gguf
 * package (tests/models/test_dequant.py, test_info.py).
 *
 *   gguf_dump info FILE     one text line per tensor:
 *                           name type_id n_dims ne0 ne1 ne2 ne3 offset nbytes
 *                           after a line: version alignment n_kv n_tensors data_offset
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
    if (argc != 3 || (strcmp(argv[1], "info") && strcmp(argv[1], "dequant"))) {
        fprintf(stderr, "usage: gguf_dump info|dequant FILE\n");
        return IG_E_USAGE;
    }
    struct gguf_file *g;
    int st = gguf_open(argv[2], &g, NULL);
    if (st)
        return st;
    if (!strcmp(argv[1], "info"))
        dump_info(g);
    else
        st = dump_dequant(g);
    gguf_close(g);
    return st;
}
