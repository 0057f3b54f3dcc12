/* tests/fuzz/fuzz_safetensors.c: libFuzzer entry for the safetensors header
 * parser (models/safetensors.c).
 *
 * Parses the input with st_parse and, when it parses, touches what the model
 * loader may touch: every tensor found again by name, its first and last
 * bytes, its shape. A file that parses must be safe to index, so any
 * sanitizer report here is a parser bug. Built by scripts/fuzz.sh
 * (clang, libFuzzer); fuzz_replay.c runs it over tests/fuzz/corpus_st/ in
 * ordinary builds. */
#include "models/safetensors.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_file *f;
    char err[320];
    if (st_parse(data, size, &f, err, sizeof err) != 0) {
        sink += strlen(err);
        return 0;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = &f->tensors[i];
        sink += st_find(f, t->name) == t;
        sink += strlen(st_dtype_name(t->dtype)) + (uint64_t)t->n_elems;
        for (int d = 0; d < t->n_dims; d++)
            sink += (uint64_t)t->shape[d];
        if (t->nbytes) {
            const unsigned char *p = t->data;
            sink += p[0] + p[t->nbytes - 1];
        }
    }
    st_close(f);
    return 0;
}
