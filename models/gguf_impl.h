/* models/gguf_impl.h: what the GGUF parser's files share (private to models/).
 *
 * gguf.c reads the bytes, gguf_index.c hashes keys and tensor names,
 * gguf_keys.c checks the value types of the keys ignite knows. */
#ifndef IGNITE_MODELS_GGUF_IMPL_H
#define IGNITE_MODELS_GGUF_IMPL_H

#include "models/gguf.h"

static inline bool gguf_type_is_unsigned(enum gguf_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static inline bool gguf_type_is_signed(enum gguf_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static inline bool gguf_type_is_int(enum gguf_type t)
{
    return gguf_type_is_signed(t) || gguf_type_is_unsigned(t);
}

/* Fills err with `code` and a formatted message; returns IG_E_MODEL. */
int gguf_fail(struct gguf_error *err, enum gguf_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a printable, shortened copy of a file string into buf (for
 * messages: names from a hostile file must not break the one-line rule). */
const char *gguf_printable(char *buf, size_t cap, struct gguf_str s);

/* Builds g->index_ over g->kv and g->tensors. Returns IG_OK, IG_E_NOMEM, or
 * IG_E_MODEL with GGUF_ERR_DUPLICATE_KEY / _TENSOR in err. */
int gguf_index_build(struct gguf_file *g, struct gguf_error *err);

/* Frees g->index_. */
void gguf_index_free(struct gguf_file *g);

/* Checks the types of known keys (general.*, tokenizer.*, <arch>.*).
 * Returns IG_OK or IG_E_MODEL with GGUF_ERR_KEY_TYPE in err. */
int gguf_check_known_keys(const struct gguf_file *g, struct gguf_error *err);

#endif
