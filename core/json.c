/* core/json.c: JSON files -> cJSON trees with one-line errors.
 * Covered by tests/models/test_hf_malformed.py (bad JSON in each file). */
#include "core/json.h"

#include "core/mapped_file.h"
#include "core/status.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

size_t ig_json_too_deep_at(const char *text, size_t len)
{
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > CJSON_NESTING_LIMIT)
                return i;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    return len;
}

int ig_json_parse(const char *name, const char *text, size_t len, int quiet, cJSON **out)
{
    const char *end = NULL;
    *out = len ? cJSON_ParseWithLengthOpts(text, len, &end, 0) : NULL;
    size_t at = len;
    if (*out) {
        for (; end < text + len; end++)
            if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
                break;
        if (end == text + len) {
            /* a key given twice at the top (config.json): cJSON keeps both and a
             * lookup takes the first, silently; files with more keys than any
             * config are left to their readers */
            int n = cJSON_GetArraySize(*out);
            for (const cJSON *a = (*out)->child; cJSON_IsObject(*out) && n <= 4096 && a;
                 a = a->next)
                for (const cJSON *b = a->next; b; b = b->next)
                    if (!strcmp(a->string, b->string)) {
                        char key[64];
                        snprintf(key, sizeof key, "%s", a->string);
                        cJSON_Delete(*out);
                        *out = NULL;
                        return quiet ? IG_E_MODEL
                                     : ig_error(IG_E_MODEL, "'%s': key \"%s\" appears twice",
                                                name, key);
                    }
            return IG_OK;
        }
        at = (size_t)(end - text);
        cJSON_Delete(*out);
        *out = NULL;
    } else if (len) {
        const char *e = cJSON_GetErrorPtr();
        at = e && e >= text && e <= text + len ? (size_t)(e - text) : 0;
    }
    if (quiet)
        return IG_E_MODEL;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < len; i++, col++)
        if (text[i] == '\n')
            line++, col = 0;
    if (!len)
        return ig_error(IG_E_MODEL, "'%s': empty file, expected JSON", name);
    if (at >= ig_json_too_deep_at(text, len))
        return ig_error(IG_E_MODEL, "'%s': JSON nested more than %d levels deep", name,
                        CJSON_NESTING_LIMIT);
    return ig_error(IG_E_MODEL, "'%s': invalid JSON at line %zu, column %zu (byte %zu)", name,
                    line, col, at);
}

int ig_json_load(const char *path, cJSON **out)
{
    *out = NULL;
    struct ig_mapped_file map;
    int st = ig_map_file(path, &map);
    if (st)
        return st;
    if (map.size > IG_JSON_MAX_BYTES) {
        ig_unmap_file(&map);
        return ig_error(IG_E_IO, "'%s': %zu bytes is too large for a JSON file (at most %zu)",
                        path, map.size, IG_JSON_MAX_BYTES);
    }
    st = ig_json_parse(path, (const char *)map.data, map.size, 0, out);
    ig_unmap_file(&map);
    return st;
}

const char *ig_json_str(const cJSON *obj, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}
