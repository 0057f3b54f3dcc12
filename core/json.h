/* core/json.h: reading a whole JSON file (config.json, tokenizer.json, ...)
 * into a cJSON tree, with the one-line errors every reader of such files
 * shares. The readers of each format (models/hf_config.c,
 * tokenizer/hf_vocab.c) work on the tree and never see the file.
 * Covered by tests/models/test_hf_malformed.py. */
#ifndef IGNITE_CORE_JSON_H
#define IGNITE_CORE_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Larger JSON files than this are refused (a tokenizer.json of a 256k
 * vocabulary is about 30 MB). */
#define IG_JSON_MAX_BYTES ((size_t)512 << 20)

/* Parses text[0..len) (need not be NUL-terminated) as one JSON value with
 * nothing but white space after it and, where it is an object, no key twice
 * among its own members. `name` names the source in the message.
 * Returns IG_OK and *out (free with cJSON_Delete), or IG_E_MODEL naming the
 * byte offset, line and column of the error, or IG_E_NOMEM; one line on
 * stderr when `quiet` is 0. */
int ig_json_parse(const char *name, const char *text, size_t len, int quiet, cJSON **out);

/* Maps and parses the file at `path` as ig_json_parse does. IG_E_IO (one
 * line) when it cannot be opened or is over IG_JSON_MAX_BYTES. */
int ig_json_load(const char *path, cJSON **out);

/* The offset of the first bracket (outside strings) that opens a level past
 * CJSON_NESTING_LIMIT (1000) in text[0..len), or len: where cJSON failed at
 * or past it, the message says the text is too deep, not "not valid JSON". */
size_t ig_json_too_deep_at(const char *text, size_t len);

/* Parses one line of JSON Lines (line[0..len), no newline) as one JSON
 * object, with what cJSON lets through refused: a raw NUL byte or a \u0000
 * escape (cJSON ends the C string there and drops the rest), nesting past
 * CJSON_NESTING_LIMIT, text after the object, a number JSON's grammar does
 * not allow (cJSON reads numbers with strtod: 020, 1., -01 pass), a key
 * twice among the object's members. Returns IG_OK and *root (free with
 * cJSON_Delete), or IG_E_INPUT with the reason (naming the byte offset)
 * in why[0..n) and *root NULL. Used by `ignite batch` and `bench
 * --requests-file`. */
int ig_json_line(const char *line, size_t len, cJSON **root, char *why, size_t n);

/* Whether s[0..n) is a number by JSON's grammar. */
bool ig_json_number(const char *s, size_t n);

/* Past the string whose opening quote is at s[i] (s[0..n) holds valid JSON). */
size_t ig_json_skip_string(const char *s, size_t i, size_t n);

/* The string member `key` of `obj`, or NULL when absent or not a string. */
const char *ig_json_str(const cJSON *obj, const char *key);

#endif
