/* tokenizer/gguf_vocab.c: the thin adapter from a parsed GGUF's
 * tokenizer.ggml.* metadata to struct tok_vocab_desc. Parsing the file is
 * models/gguf.c's job, everything after the arrays is vocab.c's.
 * Covered by tests/tokenizer/test_hf_smollm.py and test_spm.py. */
#include "tokenizer/tokenizer.h"

#include "core/status.h"
#include "models/gguf.h"

#include <stdlib.h>
#include <string.h>

static const struct gguf_kv *find_array(const struct gguf_file *g, const char *key,
                                        enum gguf_type want, bool *bad)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return NULL;
    bool ok = kv->type == GGUF_TYPE_ARRAY &&
              (kv->arr_type == want ||
               (want == GGUF_TYPE_INT32 && kv->arr_type != GGUF_TYPE_STRING &&
                kv->arr_type != GGUF_TYPE_FLOAT32 && kv->arr_type != GGUF_TYPE_FLOAT64 &&
                kv->arr_type != GGUF_TYPE_BOOL && kv->arr_type != GGUF_TYPE_ARRAY));
    if (!ok) {
        ig_error(IG_E_MODEL, "tokenizer: %s should be an array of %s", key, gguf_type_name(want));
        *bad = true;
        return NULL;
    }
    return kv;
}

static int32_t get_id(const struct gguf_file *g, const char *key)
{
    uint64_t v;
    if (!gguf_get_u64(g, key, &v) || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

static int get_flag(const struct gguf_file *g, const char *key)
{
    bool b;
    return gguf_get_bool(g, key, &b) ? b : -1;
}

/* A NUL-terminated copy of a metadata string, or NULL when absent. */
static char *get_cstr(const struct gguf_file *g, const char *key)
{
    struct gguf_str s;
    if (!gguf_get_str(g, key, &s))
        return NULL;
    char *c = malloc(s.len + 1);
    if (c) {
        if (s.len)
            memcpy(c, s.ptr, s.len);
        c[s.len] = '\0';
    }
    return c;
}

int tok_load_gguf(const struct gguf_file *g, struct tok_vocab **out)
{
    *out = NULL;
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    bool bad = false;
    const struct gguf_kv *tokens = find_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &bad);
    const struct gguf_kv *scores = find_array(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &bad);
    const struct gguf_kv *types = find_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &bad);
    const struct gguf_kv *merges = find_array(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &bad);
    if (bad)
        return IG_E_MODEL;
    if (!tokens)
        return ig_error(IG_E_MODEL, "tokenizer: the model has no vocabulary (tokenizer.ggml.tokens)");
    int64_t n = (int64_t)tokens->arr_n;
    if ((scores && (int64_t)scores->arr_n != n) || (types && (int64_t)types->arr_n != n))
        return ig_error(IG_E_MODEL, "tokenizer: %lld tokens but %lld scores and %lld token types",
                        (long long)n, scores ? (long long)scores->arr_n : 0LL,
                        types ? (long long)types->arr_n : 0LL);

    int rc = IG_OK;
    char *model = get_cstr(g, "tokenizer.ggml.model");
    char *pre = get_cstr(g, "tokenizer.ggml.pre");
    struct tok_str *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
    float *sc = scores ? malloc((size_t)(n ? n : 1) * sizeof *sc) : NULL;
    int32_t *ty = types ? malloc((size_t)(n ? n : 1) * sizeof *ty) : NULL;
    int64_t n_merges = merges ? (int64_t)merges->arr_n : 0;
    struct tok_str *mg = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *mg);
    if (!tok || (scores && !sc) || (types && !ty) || !mg) {
        rc = ig_error(IG_E_NOMEM, "tokenizer: out of memory for %lld tokens", (long long)n);
        goto done;
    }
    if (!model) {
        rc = ig_error(IG_E_MODEL, "tokenizer: the model has no tokenizer.ggml.model");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(tokens, (uint64_t)i);
        tok[i] = (struct tok_str){s.ptr, (size_t)s.len};
        if (sc)
            sc[i] = gguf_arr_f32(scores, (uint64_t)i);
        if (ty)
            ty[i] = (int32_t)gguf_arr_int(types, (uint64_t)i);
    }
    for (int64_t i = 0; i < n_merges; i++) {
        struct gguf_str s = gguf_arr_str(merges, (uint64_t)i);
        mg[i] = (struct tok_str){s.ptr, (size_t)s.len};
    }
    d.model = model;
    d.pre = pre;
    d.n_tokens = n;
    d.tokens = tok;
    d.scores = sc;
    d.types = ty;
    d.n_merges = n_merges;
    d.merges = mg;
    d.bos_id = get_id(g, "tokenizer.ggml.bos_token_id");
    d.eos_id = get_id(g, "tokenizer.ggml.eos_token_id");
    d.eot_id = get_id(g, "tokenizer.ggml.eot_token_id");
    d.eom_id = get_id(g, "tokenizer.ggml.eom_token_id");
    d.unk_id = get_id(g, "tokenizer.ggml.unknown_token_id");
    d.pad_id = get_id(g, "tokenizer.ggml.padding_token_id");
    d.add_bos = get_flag(g, "tokenizer.ggml.add_bos_token");
    d.add_eos = get_flag(g, "tokenizer.ggml.add_eos_token");
    d.add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix");
    rc = tok_vocab_build(&d, out);
done:
    free(model);
    free(pre);
    free(tok);
    free(sc);
    free(ty);
    free(mg);
    return rc;
}
