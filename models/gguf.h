/* models/gguf.h: GGUF (llama.cpp's model file format), versions 2 and 3.
 *
 * The parser works on bytes in memory and never reads outside them, so it is
 * fuzzed directly (tests/fuzz/fuzz_gguf.c); gguf_open adds the file I/O.
 * Strings and tensor data point into the mapped file: nothing is copied, and
 * the views live as long as the gguf_file. Every count, length, offset and
 * shape is validated during parsing; a file that parses is safe to index.
 * Covered by tests/models/ (malformed files, agreement with the gguf package).
 */
#ifndef IGNITE_MODELS_GGUF_H
#define IGNITE_MODELS_GGUF_H

#include "core/mapped_file.h"
#include "models/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, as numbered in the spec. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* One distinct code per way a file can be malformed, so tests can tell the
 * cases apart; all of them map to the exit status IG_E_MODEL. */
enum gguf_err {
    GGUF_OK = 0,
    GGUF_ERR_TOO_SMALL,       /* shorter than a header */
    GGUF_ERR_MAGIC,           /* not "GGUF" */
    GGUF_ERR_VERSION,         /* not version 2 or 3 */
    GGUF_ERR_TRUNCATED,       /* a read ran past the end of the file */
    GGUF_ERR_COUNT,           /* a count larger than the file could hold */
    GGUF_ERR_STRING,          /* a string length larger than the file */
    GGUF_ERR_VALUE_TYPE,      /* unknown metadata value type */
    GGUF_ERR_NESTED_ARRAY,    /* arrays of arrays are not supported */
    GGUF_ERR_DUPLICATE_KEY,   /* the same metadata key twice */
    GGUF_ERR_KEY_TYPE,        /* a known key with the wrong value type */
    GGUF_ERR_ALIGNMENT,       /* general.alignment zero or not a power of 2 */
    GGUF_ERR_DIMS,            /* n_dims 0 or more than 4, or a dim < 1 */
    GGUF_ERR_OVERFLOW,        /* product of dims or byte size overflows */
    GGUF_ERR_TENSOR_TYPE,     /* unknown ggml tensor type id */
    GGUF_ERR_ROW_BLOCKS,      /* row length not a multiple of the block size */
    GGUF_ERR_DUPLICATE_TENSOR,/* the same tensor name twice */
    GGUF_ERR_TENSOR_ALIGN,    /* tensor offset not a multiple of the alignment */
    GGUF_ERR_TENSOR_BOUNDS,   /* tensor data outside the file */
    GGUF_ERR_TENSOR_OVERLAP,  /* two tensors share bytes */
    GGUF_ERR_TENSOR_GAP,      /* bytes between tensors (or before the first) */
    GGUF_ERR__COUNT
};

/* A string inside the file: not NUL-terminated. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* One metadata key/value. Scalars are decoded into `v`; arrays keep a view of
 * their raw little-endian elements (fixed-size types) or an index of string
 * views (string arrays). */
struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;
    union {
        uint64_t u64; /* every unsigned integer type, widened */
        int64_t i64;  /* every signed integer type, widened */
        double f64;   /* FLOAT32 and FLOAT64, widened */
        bool b;
        struct gguf_str str;
    } v;
    enum gguf_type arr_type;       /* element type when type == ARRAY */
    uint64_t arr_n;                /* element count when type == ARRAY */
    const unsigned char *arr_data; /* raw elements (fixed-size types) */
    struct gguf_str *arr_strs;     /* arr_n views (STRING arrays), owned */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t type;              /* ggml type id (enum quant_type if known) */
    int n_dims;                 /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS];  /* ne[0] is the row length (innermost); unused dims are 1 */
    int64_t n_elems;            /* product of ne */
    uint64_t offset;            /* from the start of the data section */
    size_t nbytes;              /* bytes of data */
    const void *data;           /* points into the file */
};

struct gguf_file {
    uint32_t version;
    uint64_t alignment;
    int64_t n_kv;
    struct gguf_kv *kv;         /* n_kv entries, file order */
    int64_t n_tensors;
    struct gguf_tensor *tensors;/* n_tensors entries, file order */
    size_t data_offset;         /* start of the data section in the file */
    size_t file_size;           /* bytes */
    struct ig_mapped_file map;  /* set by gguf_open; zero after gguf_parse */
    void *index_;               /* private: hash index over keys and names */
};

struct gguf_error {
    enum gguf_err code;
    char msg[256]; /* one line naming the problem and where, no newline */
};

/* Parses a GGUF image held in memory (not copied; it must outlive the
 * result). On success returns IG_OK and *out (free with gguf_close). On
 * failure returns IG_E_MODEL (or IG_E_NOMEM), fills *err and prints nothing. */
int gguf_parse(const void *data, size_t size, struct gguf_file **out,
               struct gguf_error *err);

/* Maps and parses the file at `path`. On failure prints one line (path and
 * problem) and returns IG_E_IO, IG_E_MODEL or IG_E_NOMEM; `err` may be NULL
 * and receives the details when not. */
int gguf_open(const char *path, struct gguf_file **out, struct gguf_error *err);

/* Frees everything, unmaps the file if gguf_open mapped it. NULL is fine. */
void gguf_close(struct gguf_file *g);

/* Lookups by exact name; NULL when absent. O(1). */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);

/* Typed getters for scalar metadata. Each returns true and sets *out when the
 * key exists with a compatible type (any integer type that fits for the
 * integer getters, FLOAT32/FLOAT64 for the float one); false when absent
 * or of another type. The keys ignite reads (general.*, tokenizer.*,
 * <arch>.* hyper-parameters; list in docs/gguf.md) have had their types
 * checked by the parser (GGUF_ERR_KEY_TYPE), so for them false means absent. */
bool gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out);
bool gguf_get_f64(const struct gguf_file *g, const char *key, double *out);
bool gguf_get_bool(const struct gguf_file *g, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out);

/* Array element access; the index must be < kv->arr_n and the element type
 * must match (asserted). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
float gguf_arr_f32(const struct gguf_kv *kv, uint64_t i);
int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i); /* any integer type */

/* True when the string view equals the NUL-terminated `s` (inline: the
 * architecture table, models/arch.c, uses it without the parser). */
static inline bool gguf_str_eq(struct gguf_str a, const char *s)
{
    size_t n = strlen(s);
    return a.len == n && !memcmp(a.ptr, s, n);
}

/* Name of a value type ("uint32", "array"; element types are named
 * separately). */
const char *gguf_type_name(enum gguf_type t);

#endif
