/* cli/batch_request.c: a line of batch input into a request's prompt and
 * options (cli/batch_request.h), every key checked for its type and range.
 * Covered by tests/cli/test_batch.py and tests/fuzz/fuzz_batch_line.c. */
#include "cli/batch_request.h"

#include "core/json.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void batch_request_free(struct batch_request *r)
{
    cJSON_Delete(r->id);
    free(r->prompt);
    free(r->system);
    free(r->grammar);
    free(r->json_schema);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    *r = (struct batch_request){0};
}

/* ---- the id as it was written -------------------------------------------------------- */

/* cJSON keeps a number as a double and prints it back with 15 or 17
 * digits: an id of 9007199254740993 or 0.30000000000000004 would come back
 * as another number. The number's own text is echoed instead, found by
 * walking the line cJSON has accepted (so well-formed: no checks of
 * structure here, only of the bounds). */

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/* Past the value that starts at s[i]. */
static size_t skip_value(const char *s, size_t i, size_t n)
{
    int depth = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            i = ig_json_skip_string(s, i, n) - 1;
            if (!depth)
                return i + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (!depth)
                return i;
            if (!--depth)
                return i + 1;
        } else if (!depth && (c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n')) {
            return i;
        }
    }
    return n;
}

/* The text of the top-level "id" value (its key written plainly), or 0. */
static size_t id_text(const char *s, size_t n, size_t *at)
{
    size_t i = skip_ws(s, 0, n);
    if (i >= n || s[i] != '{')
        return 0;
    for (i++;;) {
        i = skip_ws(s, i, n);
        if (i >= n || s[i] != '"')
            return 0;
        size_t k0 = i + 1, k1 = ig_json_skip_string(s, i, n) - 1; /* the key's closing quote */
        i = skip_ws(s, k1 + 1, n);
        if (k1 > n || i >= n || s[i] != ':')
            return 0;
        size_t v0 = skip_ws(s, i + 1, n), v1 = skip_value(s, v0, n);
        if (k1 - k0 == 2 && !memcmp(s + k0, "id", 2)) {
            *at = v0;
            return v1 - v0;
        }
        i = skip_ws(s, v1, n);
        if (i >= n || s[i] != ',')
            return 0;
        i++;
    }
}

/* A numeric id as its own text (a raw item), else the id as parsed. */
static int keep_id_text(const char *line, size_t len, struct batch_request *r)
{
    size_t at = 0, n = r->id && cJSON_IsNumber(r->id) ? id_text(line, len, &at) : 0;
    if (!n || !ig_json_number(line + at, n))
        return IG_OK;
    char *text = strndup(line + at, n);
    cJSON *raw = text ? cJSON_CreateRaw(text) : NULL;
    free(text);
    if (!raw)
        return ig_error(IG_E_NOMEM, "out of memory");
    cJSON_Delete(r->id);
    r->id = raw;
    return IG_OK;
}

/* ---- keys ------------------------------------------------------------------------------- */

/* A malloc'd copy of string key `key`, checked: valid UTF-8, no NUL. */
static int copy_text(const cJSON *v, const char *key, bool non_empty, char **out)
{
    *out = NULL;
    if (!cJSON_IsString(v))
        return ig_error(IG_E_INPUT, "\"%s\" must be a string", key);
    size_t n = strlen(v->valuestring), bad;
    if (non_empty && n == 0)
        return ig_error(IG_E_INPUT, "\"%s\" is empty", key);
    if (!cli_utf8_valid(v->valuestring, n, &bad))
        return ig_error(IG_E_INPUT, "\"%s\" is not valid UTF-8 (byte 0x%02x at offset %zu)", key,
                        (unsigned char)v->valuestring[bad], bad);
    if (!(*out = strdup(v->valuestring)))
        return ig_error(IG_E_NOMEM, "out of memory");
    return IG_OK;
}

static int get_int(const cJSON *v, const char *key, double min, double max, int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= min && v->valuedouble <= max))
        return ig_error(IG_E_INPUT, "\"%s\" must be an integer in [%.0f, %.0f]", key, min, max);
    *out = (int64_t)v->valuedouble;
    return IG_OK;
}

static int get_num(const cJSON *v, const char *key, double min, double max, double *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= min && v->valuedouble <= max))
        return ig_error(IG_E_INPUT, "\"%s\" must be a number in [%g, %g]", key, min, max);
    *out = v->valuedouble;
    return IG_OK;
}

static int get_bool(const cJSON *v, const char *key, bool *out)
{
    if (!cJSON_IsBool(v))
        return ig_error(IG_E_INPUT, "\"%s\" must be true or false", key);
    *out = cJSON_IsTrue(v);
    return IG_OK;
}

static int get_stop(const cJSON *v, struct batch_request *r)
{
    if (cJSON_IsString(v)) {
        r->n_stop = 1;
        return copy_text(v, "stop", true, &r->stop[0]);
    }
    if (!cJSON_IsArray(v))
        return ig_error(IG_E_INPUT, "\"stop\" must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > GEN_CLI_MAX_STOP)
        return ig_error(IG_E_INPUT, "\"stop\" holds %d strings; at most %d",
                        cJSON_GetArraySize(v), GEN_CLI_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        int st = copy_text(e, "stop", true, &r->stop[r->n_stop]);
        if (st != IG_OK)
            return st;
        r->n_stop++;
    }
    return IG_OK;
}

/* Applies one key of the object to r. */
static int apply_key(const cJSON *v, struct batch_request *r)
{
    const char *k = v->string;
    struct gen_cli *o = &r->opts;
    double d = 1;
    if (!strcmp(k, "prompt"))
        return copy_text(v, k, true, &r->prompt);
    if (!strcmp(k, "id")) {
        if (!(r->id = cJSON_Duplicate(v, true)))
            return ig_error(IG_E_NOMEM, "out of memory");
        return IG_OK;
    }
    if (!strcmp(k, "n_predict")) {
        int st = get_int(v, k, -1, INT32_MAX, &o->n_predict);
        return st != IG_OK || o->n_predict
                   ? st : ig_error(IG_E_INPUT, "\"n_predict\": 0 generates nothing; use -1 or N >= 1");
    }
    if (!strcmp(k, "temperature"))
        return get_num(v, k, 0, 1e6, &o->sp.temperature);
    if (!strcmp(k, "top_k"))
        return get_int(v, k, 0, INT32_MAX, &o->sp.top_k);
    if (!strcmp(k, "top_p")) {
        int st = get_num(v, k, 0, 1, &d);
        if (st == IG_OK)
            o->sp.top_p = d > 0 ? d : 1e-9; /* 0 means: only the best token, as --top-p 0 */
        return st;
    }
    if (!strcmp(k, "min_p"))
        return get_num(v, k, 0, 1, &o->sp.min_p);
    if (!strcmp(k, "repeat_penalty"))
        return get_num(v, k, 1e-3, 1e3, &o->sp.repeat_penalty);
    if (!strcmp(k, "repeat_last_n"))
        return get_int(v, k, 0, 1 << 20, &o->sp.repeat_last_n);
    if (!strcmp(k, "seed"))
        return get_int(v, k, -1, UINT32_MAX, &o->seed);
    if (!strcmp(k, "ignore_eos"))
        return get_bool(v, k, &o->ignore_eos);
    if (!strcmp(k, "chat"))
        return get_bool(v, k, &o->chat);
    if (!strcmp(k, "system"))
        return copy_text(v, k, false, &r->system);
    if (!strcmp(k, "no_think"))
        return get_bool(v, k, &o->no_think);
    if (!strcmp(k, "stop"))
        return get_stop(v, r);
    if (!strcmp(k, "grammar"))
        return copy_text(v, k, true, &r->grammar);
    if (!strcmp(k, "lookup") || !strcmp(k, "draft")) { /* the one draft source, or none */
        bool on = false;
        int st = get_bool(v, k, &on);
        if (st != IG_OK)
            return st;
        if (on && !r->spec_cli)
            return ig_error(IG_E_INPUT, "\"%s\" needs speculation on the command line "
                            "(--lookup or --draft-model)", k);
        if (k[0] == 'd' && on && !r->spec_draft_model)
            return ig_error(IG_E_INPUT, "\"draft\" needs --draft-model on the command line");
        if (k[0] == 'l') {
            o->lookup = on;
            o->draft_model = on ? NULL : o->draft_model;
        } else {
            o->draft_model = on ? r->spec_draft_model : NULL;
            o->lookup = on ? false : o->lookup;
        }
        return IG_OK;
    }
    if (!strcmp(k, "spec_draft_n_max"))
        return get_int(v, k, 1, 64, &o->spec_n_max);
    if (!strcmp(k, "spec_draft_n_min"))
        return get_int(v, k, 0, 64, &o->spec_n_min);
    if (!strcmp(k, "draft_p_min"))
        return get_num(v, k, 0, 1, &o->spec_p_min);
    if (!strcmp(k, "json_schema")) {
        if (cJSON_IsString(v))
            return copy_text(v, k, true, &r->json_schema);
        if (!cJSON_IsObject(v))
            return ig_error(IG_E_INPUT, "\"json_schema\" must be an object (or its JSON text)");
        if (!(r->json_schema = cJSON_PrintUnformatted(v)))
            return ig_error(IG_E_NOMEM, "out of memory");
        return IG_OK;
    }
    return ig_error(IG_E_INPUT, "unknown key \"%s\" (known: prompt, id, n_predict, temperature, "
                    "top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, ignore_eos, "
                    "chat, system, no_think, stop, grammar, json_schema, lookup, draft, "
                    "spec_draft_n_max, spec_draft_n_min, draft_p_min)", k);
}

static int parse_json(const char *line, size_t len, struct batch_request *r)
{
    cJSON *root = NULL;
    char why[128];
    int st = ig_json_line(line, len, &root, why, sizeof why);
    if (st != IG_OK)
        return ig_error(st, "%s", why);
    const cJSON *v;
    for (v = root->child; v && st == IG_OK; v = v->next)
        st = apply_key(v, r);
    if (st == IG_OK && !r->prompt)
        st = ig_error(IG_E_INPUT, "no \"prompt\"");
    if (st == IG_OK) /* (an error object gives the line number: the request is freed) */
        st = keep_id_text(line, len, r);
    if (st == IG_OK && r->grammar && r->json_schema)
        st = ig_error(IG_E_INPUT, "give \"grammar\" or \"json_schema\", not both");
    cJSON_Delete(root);
    return st;
}

int batch_request_parse(const char *line, size_t len, bool plain, const struct gen_cli *defaults,
                        struct batch_request *r)
{
    *r = (struct batch_request){.opts = *defaults, .spec_draft_model = defaults->draft_model,
                                .spec_cli = defaults->lookup || defaults->draft_model};
    int st;
    if (plain) {
        size_t bad;
        if (!len)
            st = ig_error(IG_E_INPUT, "the line is empty");
        else if (memchr(line, '\0', len))
            st = ig_error(IG_E_INPUT, "the line holds a NUL byte");
        else if (!cli_utf8_valid(line, len, &bad))
            st = ig_error(IG_E_INPUT, "the line is not valid UTF-8 (byte 0x%02x at offset %zu)",
                          (unsigned char)line[bad], bad);
        else if (!(r->prompt = strndup(line, len)))
            st = ig_error(IG_E_NOMEM, "out of memory");
        else
            st = IG_OK;
    } else {
        st = parse_json(line, len, r);
    }
    if (st == IG_OK && r->system && !r->opts.chat)
        st = ig_error(IG_E_INPUT, "\"system\" needs \"chat\": true (or --chat)");
    /* --no-think applies to the lines that are chats; a line's own needs one */
    if (st == IG_OK && r->opts.no_think && !r->opts.chat && !defaults->no_think)
        st = ig_error(IG_E_INPUT, "\"no_think\" needs \"chat\": true (or --chat)");
    if (!r->opts.chat)
        r->opts.no_think = false;
    /* --system applies to the lines that are chats */
    if (st == IG_OK && !r->system && r->opts.chat && r->opts.system &&
        !(r->system = strdup(r->opts.system)))
        st = ig_error(IG_E_NOMEM, "out of memory");
    if (st != IG_OK) {
        batch_request_free(r);
        return st;
    }
    /* The line's own stop strings replace the command line's. */
    r->opts.system = r->system;
    if (r->n_stop) {
        for (int i = 0; i < r->n_stop; i++)
            r->opts.stop[i] = r->stop[i];
        r->opts.n_stop = r->n_stop;
    }
    return IG_OK;
}
