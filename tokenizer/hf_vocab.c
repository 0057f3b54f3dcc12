/* tokenizer/hf_vocab.c: a Hugging Face tokenizer.json (with
 * tokenizer_config.json and generation_config.json) -> struct
 * tok_vocab_desc, the way gguf_vocab.c does it for GGUF metadata; the
 * algorithms are the rest of tokenizer/'s.
 *
 * Two pipelines are recognised, and anything else is refused naming the
 * part that did not match:
 *   byte-level BPE   pre_tokenizer ByteLevel (alone, after Digits, or after
 *                    a Split whose regex is one of pretok.c's), any
 *                    normalizer but NFC refused -> model "gpt2" with that
 *                    pre-tokenizer; ignore_merges from the model.
 *   SentencePiece    normalizer Prepend("▁") + Replace(" ", "▁"), Replace
 *   -style BPE       alone (Gemma: no prefix; its Split on ' ' after it
 *                    splits nothing), or a Metaspace pre-tokenizer;
 *                    byte_fallback -> model "llama" with the merges
 *                    (merged by rank, as HF does).
 * Token types: added tokens are control ("special": true) or user-defined;
 * the unk token is unknown unless added; <0xXX> tokens are bytes when byte_fallback is
 * set. BOS/EOS are added as the post-processor's template says; their ids
 * come from the template, tokenizer_config.json's bos_token / eos_token, and
 * generation_config.json's eos_token_id (a list adds end-of-generation ids).
 * Covered by tests/tokenizer/test_hf_json.py and tests/models/test_hf_malformed.py. */
#include "tokenizer/tokenizer.h"

#include "core/json.h"
#include "core/status.h"
#include "models/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The Split regexes of pretok.c's pre-tokenizers, as tokenizer.json files
 * write them. */
static const struct {
    const char *regex;
    const char *pre;
} split_regexes[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "llama3"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "qwen2"},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt2"},
};

/* What the reader learns about the pipeline, then the desc it fills. */
struct hf_tok {
    const char *name;         /* tokenizer.json's path, for messages */
    bool byte_level;
    bool spm;                 /* SentencePiece-style: ▁ for spaces */
    int space_prefix;         /* spm: -1 unknown, else tok_vocab_desc's space_prefix_hf */
    const char *pre;          /* byte-level pre-tokenizer family */
    bool digits;              /* a Digits(individual_digits) before ByteLevel */
    bool no_spaces;           /* a Replace(" ", "▁") or Metaspace ran: no ' ' is left */
};

static const char *type_of(const cJSON *o)
{
    return ig_json_str(o, "type");
}

static bool json_true(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* The steps of a "Sequence" (under `list`), or the object itself. */
static const cJSON *steps_of(const cJSON *o, const char *list, int *n)
{
    const char *t = type_of(o);
    if (t && !strcmp(t, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, list);
        *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
        return cJSON_IsArray(a) ? a->child : NULL;
    }
    *n = 1;
    return o;
}

static const char *string_pattern(const cJSON *step, const char *key)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(step, key);
    return ig_json_str(p, "String");
}

static int read_normalizer(struct hf_tok *h, const cJSON *norm)
{
    if (!norm || cJSON_IsNull(norm))
        return IG_OK;
    int n;
    const cJSON *s = steps_of(norm, "normalizers", &n);
    for (int i = 0; i < n && s; i++, s = s->next) {
        const char *t = type_of(s);
        const char *prepend = ig_json_str(s, "prepend");
        if (t && !strcmp(t, "Prepend") && prepend && !strcmp(prepend, "\xe2\x96\x81")) {
            h->spm = true;
            h->space_prefix = 2; /* normalizers run on each piece between added tokens */
            continue;
        }
        if (t && !strcmp(t, "Replace")) {
            const char *pat = string_pattern(s, "pattern"), *c = ig_json_str(s, "content");
            if (pat && c && !strcmp(pat, " ") && !strcmp(c, "\xe2\x96\x81")) {
                h->spm = true;
                h->no_spaces = true;
                continue;
            }
        }
        /* NFC changes nothing in text that is already NFC, which is nearly
         * all text; llama.cpp drops it for these models too (docs/hf.md). */
        if (t && !strcmp(t, "NFC"))
            continue;
        return ig_error(IG_E_MODEL, "'%s': normalizer '%.40s' is not supported (known: NFC, and "
                        "SentencePiece's Prepend + Replace of ' ' by U+2581)", h->name,
                        t ? t : "?");
    }
    return IG_OK;
}

static int pre_split(struct hf_tok *h, const cJSON *s)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const char *re = ig_json_str(pat, "Regex");
    const char *behavior = ig_json_str(s, "behavior");
    /* Gemma's tokenizer.json splits on ' ' after its normalizer has replaced
     * every ' ' by U+2581: a step that splits nothing. */
    const char *str = ig_json_str(pat, "String");
    if (h->no_spaces && str && !strcmp(str, " ") && behavior &&
        !strcmp(behavior, "MergedWithPrevious") && !json_true(s, "invert"))
        return IG_OK;
    if (re && behavior && !strcmp(behavior, "Isolated") && !json_true(s, "invert"))
        for (size_t k = 0; k < sizeof split_regexes / sizeof split_regexes[0]; k++)
            if (!strcmp(re, split_regexes[k].regex)) {
                h->pre = split_regexes[k].pre;
                return IG_OK;
            }
    return ig_error(IG_E_MODEL, "'%s': pre-tokenizer Split with regex '%.120s' matches none of "
                    "the known pre-tokenizers (gpt2, llama3, qwen2)", h->name, re ? re : "?");
}

static int read_pre_tokenizer(struct hf_tok *h, const cJSON *pre)
{
    if (!pre || cJSON_IsNull(pre))
        return IG_OK;
    int n;
    const cJSON *s = steps_of(pre, "pretokenizers", &n);
    for (int i = 0; i < n && s; i++, s = s->next) {
        const char *t = type_of(s);
        int st = IG_OK;
        if (!t) {
            st = ig_error(IG_E_MODEL, "'%s': a pre-tokenizer has no type", h->name);
        } else if (!strcmp(t, "ByteLevel")) {
            if (json_true(s, "add_prefix_space"))
                return ig_error(IG_E_MODEL, "'%s': ByteLevel with add_prefix_space is not "
                                "supported", h->name);
            const cJSON *ur = cJSON_GetObjectItemCaseSensitive(s, "use_regex");
            bool use_regex = !ur || cJSON_IsTrue(ur);
            if (use_regex == (h->pre != NULL))
                return ig_error(IG_E_MODEL, "'%s': ByteLevel's use_regex must be %s after %s",
                                h->name, h->pre ? "false" : "true", h->pre ? "a Split" : "nothing");
            if (!h->pre)
                h->pre = h->digits ? "smollm" : "gpt2";
            h->byte_level = true;
        } else if (!strcmp(t, "Digits") && json_true(s, "individual_digits") && !h->pre &&
                   !h->digits) {
            h->digits = true;
        } else if (!strcmp(t, "Split") && !h->pre && !h->digits) {
            st = pre_split(h, s);
        } else if (!strcmp(t, "Metaspace")) {
            const char *r = ig_json_str(s, "replacement"), *scheme = ig_json_str(s, "prepend_scheme");
            if (!r || strcmp(r, "\xe2\x96\x81") || json_true(s, "split"))
                return ig_error(IG_E_MODEL, "'%s': Metaspace other than U+2581 without splitting "
                                "is not supported", h->name);
            h->spm = true;
            h->no_spaces = true;
            if (scheme)
                h->space_prefix = !strcmp(scheme, "never") ? 0 : !strcmp(scheme, "first") ? 1 : 3;
            else
                h->space_prefix = json_true(s, "add_prefix_space") ? 3 : 0;
        } else {
            st = ig_error(IG_E_MODEL, "'%s': pre-tokenizer '%.40s' in this place matches none of "
                          "the known pipelines", h->name, t);
        }
        if (st)
            return st;
    }
    if (h->digits && !h->byte_level)
        return ig_error(IG_E_MODEL, "'%s': Digits without ByteLevel is not supported", h->name);
    return IG_OK;
}

/* ---- vocabulary ---------------------------------------------------------------- */

static int32_t find_id(const struct tok_str *tokens, int64_t n, const char *s)
{
    size_t len = strlen(s);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i].len == len && tokens[i].ptr && !memcmp(tokens[i].ptr, s, len))
            return (int32_t)i;
    return -1;
}

/* A special token named in tokenizer_config.json: a string, or an
 * AddedToken object with "content". */
static const char *token_name(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v))
        return v->valuestring;
    return ig_json_str(v, "content");
}

static bool id_of(const cJSON *v, int64_t n, int32_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < (double)n) ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *out = (int32_t)v->valuedouble;
    return true;
}

struct arrays {
    struct tok_str *tokens, *merges, *right;
    int32_t *types;
    int64_t n, n_merges;
};

/* Bounds on what a tokenizer.json may ask for, so that a hostile file costs
 * memory in proportion to its own size: ids are dense in real files (an
 * added token reuses a vocab id or takes the next), so an id may run past the
 * number of entries the file defines by at most HF_ID_SLACK (a few holes),
 * and one token's text is at most HF_MAX_TOKEN_BYTES (real ones are under
 * 300). fuzz_hf_json found ids near 1e9 sizing multi-GiB arrays. */
enum { HF_ID_SLACK = 1024, HF_MAX_TOKEN_BYTES = 16384 };

static int check_token(const struct hf_tok *h, const char *s, int32_t id, int64_t bound)
{
    size_t len = strlen(s);
    if (len > HF_MAX_TOKEN_BYTES)
        return ig_error(IG_E_MODEL, "'%s': token %d is %zu bytes long, over the %d-byte limit",
                        h->name, id, len, HF_MAX_TOKEN_BYTES);
    if (id >= bound)
        return ig_error(IG_E_MODEL, "'%s': token id %d of '%.40s' is past the %lld ids this file "
                        "defines (model.vocab and added_tokens, with %d to spare)",
                        h->name, id, s, (long long)(bound - HF_ID_SLACK), HF_ID_SLACK);
    return IG_OK;
}

static int read_vocab(struct hf_tok *h, const cJSON *model, const cJSON *added, struct arrays *a)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return ig_error(IG_E_MODEL, "'%s': model.vocab must be an object (token -> id)", h->name);
    int64_t bound = HF_ID_SLACK; /* entries + slack */
    for (const cJSON *e = vocab->child; e; e = e->next)
        bound++;
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next)
        bound++;
    int64_t n = 0;
    int32_t id;
    int st;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!id_of(e, INT32_MAX / 2, &id))
            return ig_error(IG_E_MODEL, "'%s': vocab id of '%.40s' is not a whole number in range",
                            h->name, e->string);
        if ((st = check_token(h, e->string, id, bound)))
            return st;
        n = id + 1 > n ? id + 1 : n;
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
        if (!id_of(cJSON_GetObjectItemCaseSensitive(e, "id"), INT32_MAX / 2, &id) ||
            !ig_json_str(e, "content"))
            return ig_error(IG_E_MODEL, "'%s': an added_tokens entry lacks a valid id or content",
                            h->name);
        if ((st = check_token(h, ig_json_str(e, "content"), id, bound)))
            return st;
        n = id + 1 > n ? id + 1 : n;
    }
    if (n == 0)
        return ig_error(IG_E_MODEL, "'%s': the vocabulary is empty", h->name);
    a->n = n;
    a->tokens = calloc((size_t)n, sizeof *a->tokens);
    a->types = malloc((size_t)n * sizeof *a->types);
    if (!a->tokens || !a->types)
        return ig_error(IG_E_NOMEM, "'%s': out of memory for %lld tokens", h->name, (long long)n);
    for (int64_t i = 0; i < n; i++) /* ids no entry names: never produced */
        a->types[i] = TOK_TYPE_UNUSED;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        id_of(e, n, &id);
        a->tokens[id] = (struct tok_str){e->string, strlen(e->string)};
        a->types[id] = TOK_TYPE_NORMAL;
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
        id_of(cJSON_GetObjectItemCaseSensitive(e, "id"), n, &id);
        const char *c = ig_json_str(e, "content");
        a->tokens[id] = (struct tok_str){c, strlen(c)};
        a->types[id] = json_true(e, "special") ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
    }
    return IG_OK;
}

static int read_merges(struct hf_tok *h, const cJSON *model, struct arrays *a)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!m || cJSON_IsNull(m))
        return IG_OK;
    if (!cJSON_IsArray(m))
        return ig_error(IG_E_MODEL, "'%s': model.merges must be a list", h->name);
    int64_t n = cJSON_GetArraySize(m);
    a->merges = malloc((size_t)(n ? n : 1) * sizeof *a->merges);
    bool pairs = m->child && cJSON_IsArray(m->child);
    a->right = pairs ? malloc((size_t)n * sizeof *a->right) : NULL;
    if (!a->merges || (pairs && !a->right))
        return ig_error(IG_E_NOMEM, "'%s': out of memory for %lld merges", h->name, (long long)n);
    int64_t k = 0;
    for (const cJSON *e = m->child; e; e = e->next, k++) {
        if (pairs) {
            const cJSON *l = cJSON_IsArray(e) ? e->child : NULL, *r = l ? l->next : NULL;
            if (!cJSON_IsString(l) || !cJSON_IsString(r) || r->next)
                return ig_error(IG_E_MODEL, "'%s': merge %lld is not a pair of strings", h->name,
                                (long long)k);
            a->merges[k] = (struct tok_str){l->valuestring, strlen(l->valuestring)};
            a->right[k] = (struct tok_str){r->valuestring, strlen(r->valuestring)};
        } else {
            if (!cJSON_IsString(e))
                return ig_error(IG_E_MODEL, "'%s': merge %lld is not a string 'left right'",
                                h->name, (long long)k);
            a->merges[k] = (struct tok_str){e->valuestring, strlen(e->valuestring)};
        }
    }
    a->n_merges = n;
    return IG_OK;
}

/* BOS/EOS: the post-processor's template says what is added (TemplateProcessing
 * alone or in a Sequence); a ByteLevel or no post-processor adds nothing. */
static int read_post(struct hf_tok *h, const cJSON *post, const struct arrays *a,
                     struct tok_vocab_desc *d)
{
    d->add_bos = d->add_eos = 0;
    if (!post || cJSON_IsNull(post))
        return IG_OK;
    int n;
    const cJSON *s = steps_of(post, "processors", &n);
    for (int i = 0; i < n && s; i++, s = s->next) {
        const char *t = type_of(s);
        if (t && !strcmp(t, "ByteLevel"))
            continue;
        if (!t || strcmp(t, "TemplateProcessing"))
            return ig_error(IG_E_MODEL, "'%s': post-processor '%.40s' is not supported "
                            "(ByteLevel, TemplateProcessing)", h->name, t ? t : "?");
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(s, "single");
        int k = 0, len = cJSON_IsArray(single) ? cJSON_GetArraySize(single) : 0;
        for (const cJSON *e = len ? single->child : NULL; e; e = e->next, k++) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
            if (!sp) {
                if (!cJSON_GetObjectItemCaseSensitive(e, "Sequence"))
                    return ig_error(IG_E_MODEL, "'%s': post-processor template piece %d is "
                                    "neither SpecialToken nor Sequence", h->name, k);
                continue;
            }
            const char *tok = ig_json_str(sp, "id");
            int32_t id = tok ? find_id(a->tokens, a->n, tok) : -1;
            if (id < 0 || (k != 0 && k != len - 1))
                return ig_error(IG_E_MODEL, "'%s': post-processor adds '%.40s', which is not a "
                                "token at the start or end", h->name, tok ? tok : "?");
            if (k == 0) {
                d->add_bos = 1;
                d->bos_id = id;
            } else {
                d->add_eos = 1;
                d->eos_id = id;
            }
        }
    }
    return IG_OK;
}

/* Names in tokenizer_config.json, ids in generation_config.json. */
static void read_specials(const cJSON *cfg, const cJSON *gen, const struct arrays *a,
                          struct tok_vocab_desc *d)
{
    const char *bos = cfg ? token_name(cfg, "bos_token") : NULL;
    const char *eos = cfg ? token_name(cfg, "eos_token") : NULL;
    const char *pad = cfg ? token_name(cfg, "pad_token") : NULL;
    int32_t id;
    if (d->bos_id < 0 && bos && (id = find_id(a->tokens, a->n, bos)) >= 0)
        d->bos_id = id;
    if (d->eos_id < 0 && eos && (id = find_id(a->tokens, a->n, eos)) >= 0)
        d->eos_id = id;
    if (pad && (id = find_id(a->tokens, a->n, pad)) >= 0)
        d->pad_id = id;
    if (!gen)
        return;
    if (d->bos_id < 0 && id_of(cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id"), a->n, &id))
        d->bos_id = id;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id");
    for (const cJSON *x = cJSON_IsArray(e) ? e->child : e; x; x = cJSON_IsArray(e) ? x->next : NULL) {
        if (!id_of(x, a->n, &id))
            continue;
        if (d->eos_id < 0)
            d->eos_id = id;
        else if (id != d->eos_id && d->n_eog < TOK_MAX_EOG)
            d->eog_ids[d->n_eog++] = id;
    }
}

static int read_model(struct hf_tok *h, const cJSON *model)
{
    const char *t = type_of(model);
    if (!cJSON_IsObject(model) || !t)
        return ig_error(IG_E_MODEL, "'%s': 'model' with a 'type' is missing", h->name);
    if (strcmp(t, "BPE"))
        return ig_error(IG_E_MODEL, "'%s': tokenizer model type '%.40s' is not supported (BPE "
                        "only)", h->name, t);
    const char *pfx = ig_json_str(model, "continuing_subword_prefix");
    const char *sfx = ig_json_str(model, "end_of_word_suffix");
    if ((pfx && *pfx) || (sfx && *sfx))
        return ig_error(IG_E_MODEL, "'%s': BPE with continuing_subword_prefix or "
                        "end_of_word_suffix is not supported", h->name);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return ig_error(IG_E_MODEL, "'%s': BPE dropout is not supported", h->name);
    return IG_OK;
}

int tok_hf_build(const char *name, const cJSON *tok, const cJSON *cfg, const cJSON *gen,
                 struct tok_vocab **out)
{
    *out = NULL;
    struct hf_tok h = {.name = name, .space_prefix = -1};
    struct arrays a = {0};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    if (!cJSON_IsObject(tok))
        return ig_error(IG_E_MODEL, "'%s': expected a JSON object", name);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    int st;
    if ((st = read_model(&h, model)) ||
        (st = read_normalizer(&h, cJSON_GetObjectItemCaseSensitive(tok, "normalizer"))) ||
        (st = read_pre_tokenizer(&h, cJSON_GetObjectItemCaseSensitive(tok, "pre_tokenizer"))))
        goto done;
    if (h.byte_level == h.spm) {
        st = ig_error(IG_E_MODEL, "'%s': the pipeline is %s (expected byte-level BPE or "
                      "SentencePiece-style BPE)", name,
                      h.spm ? "both byte-level and SentencePiece-style" : "neither byte-level nor "
                      "SentencePiece-style");
        goto done;
    }
    if ((st = read_vocab(&h, model, cJSON_GetObjectItemCaseSensitive(tok, "added_tokens"), &a)) ||
        (st = read_merges(&h, model, &a)) ||
        (st = read_post(&h, cJSON_GetObjectItemCaseSensitive(tok, "post_processor"), &a, &d)))
        goto done;
    read_specials(cfg, gen, &a, &d);
    const char *unk = ig_json_str(model, "unk_token");
    int32_t unk_id = unk ? find_id(a.tokens, a.n, unk) : -1;
    if (unk_id >= 0) {
        d.unk_id = unk_id;
        if (a.types[unk_id] == TOK_TYPE_NORMAL) /* an added token stays one: HF matches it in text */
            a.types[unk_id] = TOK_TYPE_UNKNOWN;
    }
    if (h.spm && json_true(model, "byte_fallback"))
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            int32_t id = find_id(a.tokens, a.n, s);
            if (id >= 0 && a.types[id] == TOK_TYPE_NORMAL)
                a.types[id] = TOK_TYPE_BYTE;
        }
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
    d.ignore_merges = cJSON_IsBool(im) ? cJSON_IsTrue(im) : 0;
    d.model = h.spm ? "llama" : "gpt2";
    d.pre = h.pre;
    d.n_tokens = a.n;
    d.tokens = a.tokens;
    d.types = a.types;
    d.n_merges = a.n_merges;
    d.merges = a.merges;
    d.merges_right = a.right;
    d.add_space_prefix = h.spm ? h.space_prefix > 0 : 0;
    d.space_prefix_hf = h.spm ? h.space_prefix : 0;
    st = tok_vocab_build(&d, out);
done:
    free(a.tokens);
    free(a.types);
    free(a.merges);
    free(a.right);
    return st;
}

static int load_json(const char *dir, const char *file, bool required, cJSON **out)
{
    char p[4352];
    size_t n = strlen(dir);
    snprintf(p, sizeof p, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", file);
    *out = NULL;
    struct stat sb;
    if (stat(p, &sb) != 0) {
        if (!required)
            return IG_OK;
        return ig_error(IG_E_MODEL, "'%s': %s is missing (ignite reads the tokenizer from it)",
                        dir, file);
    }
    return ig_json_load(p, out);
}

int tok_load_hf(const char *dir, struct tok_vocab **out)
{
    *out = NULL;
    cJSON *tok = NULL, *cfg = NULL, *gen = NULL;
    int st = load_json(dir, "tokenizer.json", true, &tok);
    if (!st)
        st = load_json(dir, "tokenizer_config.json", false, &cfg);
    if (!st)
        st = load_json(dir, "generation_config.json", false, &gen);
    if (!st) {
        char p[4352];
        size_t n = strlen(dir);
        snprintf(p, sizeof p, "%s%stokenizer.json", dir, n && dir[n - 1] == '/' ? "" : "/");
        st = tok_hf_build(p, tok, cfg, gen, out);
    }
    cJSON_Delete(tok);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    return st;
}

int tok_load_model(const struct model *m, struct tok_vocab **out)
{
    if (model_is_folder(m))
        return tok_load_hf(m->path, out);
    return tok_load_gguf(m->gguf, out);
}

int tok_load_path(const char *path, struct tok_vocab **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return tok_load_hf(path, out);
    struct gguf_file *g = NULL;
    int st = gguf_open(path, &g, NULL);
    if (!st)
        st = tok_load_gguf(g, out);
    gguf_close(g);
    return st;
}
