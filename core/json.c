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

/* True when a JSON string escape in s[0..len) decodes to NUL (\u0000). */
static bool has_nul_escape(const char *s, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_string) {
            in_string = s[i] == '"';
            continue;
        }
        if (s[i] == '"')
            in_string = false;
        else if (s[i] == '\\' && i + 1 < len) {
            if (s[i + 1] == 'u' && i + 5 < len && !strncmp(s + i + 2, "0000", 4))
                return true;
            i++; /* skip the escaped character */
        }
    }
    return false;
}

size_t ig_json_skip_string(const char *s, size_t i, size_t n)
{
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
            i++;
    return i + 1;
}

bool ig_json_number(const char *s, size_t n)
{
    size_t i = s[0] == '-';
    if (i >= n || s[i] < '0' || s[i] > '9' || (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' &&
                                                s[i + 1] <= '9'))
        return false;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    return i == n;
}

/* The offset of the first number in s[0..n) that JSON's grammar does not
 * allow, or n. */
static size_t bad_number_at(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (s[i] == '"') {
            i = ig_json_skip_string(s, i, n);
        } else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
            size_t j = i;
            while (j < n && strchr("+-.0123456789eE", s[j]))
                j++;
            if (!ig_json_number(s + i, j - i))
                return i;
            i = j;
        } else {
            i++;
        }
    }
    return n;
}

int ig_json_line(const char *line, size_t len, cJSON **root, char *why, size_t n)
{
    *root = NULL;
    const char *nul = memchr(line, '\0', len);
    if (nul) {
        snprintf(why, n, "the line holds a NUL byte (offset %zu)", (size_t)(nul - line));
        return IG_E_INPUT;
    }
    if (has_nul_escape(line, len)) {
        snprintf(why, n, "a string holds a NUL character (\\u0000)");
        return IG_E_INPUT;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!j && end && (size_t)(end - line) >= ig_json_too_deep_at(line, len)) {
        snprintf(why, n, "JSON nested more than %d levels deep", CJSON_NESTING_LIMIT);
        return IG_E_INPUT;
    }
    if (!j) {
        snprintf(why, n, "not valid JSON (near byte %zu)", end ? (size_t)(end - line) : (size_t)0);
        return IG_E_INPUT;
    }
    while (end && (size_t)(end - line) < len && (*end == ' ' || *end == '\t' || *end == '\r'))
        end++;
    size_t bad = bad_number_at(line, len);
    const char *twice = NULL;
    for (const cJSON *v = cJSON_IsObject(j) ? j->child : NULL; v && !twice; v = v->next)
        for (const cJSON *w = j->child; w != v && !twice; w = w->next)
            twice = strcmp(w->string, v->string) ? NULL : v->string;
    if (end && (size_t)(end - line) < len)
        snprintf(why, n, "text after the JSON object (at byte %zu)", (size_t)(end - line));
    else if (bad < len)
        snprintf(why, n, "not valid JSON: a number JSON does not allow at byte %zu", bad);
    else if (!cJSON_IsObject(j))
        snprintf(why, n, "not a JSON object");
    else if (twice)
        snprintf(why, n, "key \"%s\" appears twice", twice);
    else {
        *root = j;
        return IG_OK;
    }
    cJSON_Delete(j);
    return IG_E_INPUT;
}
