/* models/safetensors.h: Hugging Face's safetensors tensor files.
 *
 * A file is an 8-byte little-endian header size N, N bytes of JSON (an
 * object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
 * plus an optional "__metadata__" object of strings), then the data, whose
 * bytes every tensor indexes relative to its start. The parser works on bytes
 * in memory and never reads outside them, so it is fuzzed directly
 * (tests/fuzz/fuzz_safetensors.c); st_open adds the mapping. It checks what
 * the reference implementation checks: a header size that fits the file
 * and is at most ST_MAX_HEADER, valid UTF-8 JSON, no duplicate names, known
 * dtypes, shape x dtype size == the byte range, and ranges that cover the
 * data exactly, without overlaps or holes, up to the end of the file.
 * Tensor data points into the mapping: nothing is copied.
 * Covered by tests/models/test_hf_malformed.py and tests/fuzz/. */
#ifndef IGNITE_MODELS_SAFETENSORS_H
#define IGNITE_MODELS_SAFETENSORS_H

#include "core/mapped_file.h"

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
/* The reference implementation refuses larger headers; real ones are a few
 * hundred KiB. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

/* Element types of the spec with a whole number of bytes per element. */
enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_DTYPE_COUNT
};

struct st_tensor {
    const char *name;               /* NUL-terminated, owned by the st_file */
    enum st_dtype dtype;
    int n_dims;                     /* 0 (a scalar) to ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS];     /* outermost first (row-major), as in the file */
    int64_t n_elems;                /* product of the shape (1 for a scalar) */
    uint64_t offset;                /* from the start of the data section */
    size_t nbytes;
    const void *data;               /* points into the image */
};

struct st_file {
    int64_t n_tensors;
    struct st_tensor *tensors;      /* sorted by name */
    size_t header_size;             /* N, the JSON's bytes */
    size_t data_offset;             /* 8 + N */
    size_t file_size;
    struct ig_mapped_file map;      /* set by st_open */
    char *arena_;                   /* private: the names */
};

/* Parses a safetensors image held in memory (not copied; it must outlive the
 * result). Returns IG_OK and *out (free with st_close), or IG_E_MODEL (or
 * IG_E_NOMEM) with one line naming the problem in err[0..cap) and nothing
 * printed. */
int st_parse(const void *data, size_t size, struct st_file **out, char *err, size_t cap);

/* Maps and parses `path`. On failure prints one line naming the file and the
 * problem and returns IG_E_IO, IG_E_MODEL or IG_E_NOMEM. */
int st_open(const char *path, struct st_file **out);

/* Frees and unmaps. NULL is fine. */
void st_close(struct st_file *f);

/* The tensor called `name`, or NULL. O(log n). */
const struct st_tensor *st_find(const struct st_file *f, const char *name);

/* "F16", "BF16", ... as the spec spells them. */
const char *st_dtype_name(enum st_dtype t);

/* Bytes of one element. */
size_t st_dtype_size(enum st_dtype t);

#endif
