/* tokenizer/vocab.c: builds a struct tok_vocab from plain arrays: copies the
 * token strings, indexes them (text -> id) and the merges (pair -> rank),
 * picks out the special tokens the encoder looks for in text, and settles
 * BOS/EOS defaults. Reading GGUF is left to gguf_vocab.c, the algorithms to
 * bpe.c, spm.c, encode.c and decode.c. Covered by tests/tokenizer/. */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tok_vocab_desc_init(struct tok_vocab_desc *d)
{
    memset(d, 0, sizeof *d);
    d->bos_id = d->eos_id = d->eot_id = d->eom_id = d->unk_id = d->pad_id = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = d->ignore_merges = -1;
}

/* 64-bit FNV-1a over 8 bytes at a time with a final mix: fast on the short
 * strings tokens and pre-tokens are. */
uint64_t tok_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--)
        h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t table_size(int64_t n)
{
    uint64_t s = 16;
    while (s < (uint64_t)n * 2)
        s <<= 1;
    return s;
}

int32_t tok_find(const struct tok_vocab *v, const char *s, size_t n)
{
    uint64_t i = tok_hash_bytes(s, n) & v->str_mask;
    for (;; i = (i + 1) & v->str_mask) {
        int32_t id = v->str_slots[i];
        if (id < 0)
            return -1;
        if (v->tokens[id].len == n && !memcmp(v->tokens[id].ptr, s, n))
            return id;
    }
}

const struct tok_merge_slot *tok_find_merge(const struct tok_vocab *v, int32_t left, int32_t right)
{
    if (!v->merge_slots)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    for (uint64_t i = mix64(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const struct tok_merge_slot *m = &v->merge_slots[i];
        if (m->key == key)
            return m;
        if (m->key == 0)
            return NULL;
    }
}

int tok_ids_reserve(struct tok_ids *ids, int64_t more)
{
    if (ids->n + more <= ids->cap)
        return IG_OK;
    int64_t cap = ids->cap ? ids->cap : 64;
    while (cap < ids->n + more)
        cap *= 2;
    int32_t *p = realloc(ids->ids, (size_t)cap * sizeof *p);
    if (!p)
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory for %lld ids", (long long)cap);
    ids->ids = p;
    ids->cap = cap;
    return IG_OK;
}

int tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        int rc = tok_ids_reserve(ids, 1);
        if (rc)
            return rc;
    }
    ids->ids[ids->n++] = id;
    return IG_OK;
}

void tok_ids_free(struct tok_ids *ids)
{
    free(ids->ids);
    *ids = (struct tok_ids){0};
}

static int check_id(const char *what, int32_t id, int64_t n_tokens)
{
    if (id < -1 || id >= n_tokens)
        return ig_error(IG_E_MODEL, "tokenizer: %s %d is out of range (vocabulary of %lld)",
                        what, id, (long long)n_tokens);
    return IG_OK;
}

static int add_merges(struct tok_vocab *v, const struct tok_vocab_desc *d)
{
    if (d->n_merges <= 0)
        return IG_OK;
    uint64_t size = table_size(d->n_merges);
    v->merge_slots = calloc(size, sizeof *v->merge_slots);
    if (!v->merge_slots)
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory for %lld merges", (long long)d->n_merges);
    v->merge_mask = size - 1;
    char tmp[512];
    for (int64_t r = 0; r < d->n_merges; r++) {
        struct tok_str m = d->merges[r];
        const char *lp = m.ptr, *rp;
        size_t ll, rl;
        if (d->merges_right) {
            ll = m.len;
            rp = d->merges_right[r].ptr;
            rl = d->merges_right[r].len;
        } else {
            /* "left right": split at the first space after the first byte (a
             * GPT-2-form token never contains a plain space, nor does a
             * Gemma 4 one: its spaces are U+2581). */
            const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
            if (!sp)
                return ig_error(IG_E_MODEL, "tokenizer: merge %lld ('%.*s') is not 'left right'",
                                (long long)r, (int)(m.len < 60 ? m.len : 60), m.ptr);
            ll = (size_t)(sp - m.ptr);
            rp = sp + 1;
            rl = m.len - ll - 1;
        }
        if (ll + rl > sizeof tmp || !ll || !rl)
            continue;
        int32_t left = tok_find(v, lp, ll), right = tok_find(v, rp, rl);
        memcpy(tmp, lp, ll);
        memcpy(tmp + ll, rp, rl);
        int32_t id = tok_find(v, tmp, ll + rl);
        if (left < 0 || right < 0 || id < 0)
            continue; /* HF refuses such files; we skip the merge */
        uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
        uint64_t i = mix64(key) & v->merge_mask;
        while (v->merge_slots[i].key && v->merge_slots[i].key != key)
            i = (i + 1) & v->merge_mask;
        if (v->merge_slots[i].key)
            continue; /* a repeated merge keeps its first (best) rank */
        v->merge_slots[i] = (struct tok_merge_slot){key, (int32_t)r, id};
    }
    return IG_OK;
}

struct special {
    size_t len;
    int32_t id;
};

static int by_length_desc(const void *a, const void *b)
{
    const struct special *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool is_special(const struct tok_vocab *v, int64_t i)
{
    return (v->types[i] == TOK_TYPE_CONTROL || v->types[i] == TOK_TYPE_USER_DEFINED) &&
           v->tokens[i].len > 0;
}

/* Lists the tokens the encoder looks for in text, longest first so the
 * first hit at a position is the longest. */
static int find_specials(struct tok_vocab *v)
{
    int64_t n = 0;
    for (int64_t i = 0; i < v->n_tokens; i++)
        n += is_special(v, i);
    struct special *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    v->specials = malloc((size_t)(n ? n : 1) * sizeof *v->specials);
    if (!tmp || !v->specials) {
        free(tmp);
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory");
    }
    n = 0;
    for (int64_t i = 0; i < v->n_tokens; i++)
        if (is_special(v, i)) {
            tmp[n++] = (struct special){v->tokens[i].len, (int32_t)i};
            v->special_first[(unsigned char)v->tokens[i].ptr[0]] = 1;
        }
    qsort(tmp, (size_t)n, sizeof *tmp, by_length_desc);
    for (int64_t k = 0; k < n; k++)
        v->specials[k] = tmp[k].id;
    v->n_specials = n;
    free(tmp);
    return IG_OK;
}

static void map_bytes(struct tok_vocab *v)
{
    for (int c = 0; c < 324; c++)
        v->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        v->byte_id[b] = -1;
        v->byte_cp[b] = tok_byte_to_cp((unsigned char)b);
        v->cp_byte[v->byte_cp[b]] = (int16_t)b;
        char s[8];
        int n;
        if (v->model == TOK_MODEL_BPE)
            n = tok_utf8_put(v->byte_cp[b], s);
        else
            n = snprintf(s, sizeof s, "<0x%02X>", b);
        v->byte_id[b] = tok_find(v, s, (size_t)n);
    }
}

/* The tokens that end a turn in the chat formats of the models ignite runs,
 * found by their text as llama.cpp finds them (GGUF has one EOS id, while
 * Gemma's instruct models end a turn with <end_of_turn>, Llama 3's with
 * <|eot_id|>, ChatML's with <|im_end|>). Only control tokens count; they
 * follow the ids the file listed. */
static void find_eog(struct tok_vocab *v)
{
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>",
                                        "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                        "<EOT>", "<|end_of_text|>", "<turn|>", "<eos>",
                                        "<|return|>", "<|call|>"};
    _Static_assert(sizeof names / sizeof names[0] == TOK_EOG_NAMES, "room for every name");
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int32_t id = tok_find(v, names[k], strlen(names[k]));
        if (id >= 0 && v->types[id] == TOK_TYPE_CONTROL && !tok_is_eog(v, id))
            v->eog_ids[v->n_eog++] = id;
    }
    /* harmony (gpt-oss): <|end|> closes one message of an answer that goes
     * on (analysis, then final); <|return|> and <|call|> end it. llama.cpp
     * takes <|end|> out of its EOG ids when both of those are there. */
    int32_t ret = tok_find(v, "<|return|>", 10), call = tok_find(v, "<|call|>", 8);
    if (ret >= 0 && call >= 0 && tok_is_eog(v, ret) && tok_is_eog(v, call))
        v->end_not_eog = tok_find(v, "<|end|>", 7);
}

int tok_vocab_build(const struct tok_vocab_desc *d, struct tok_vocab **out)
{
    *out = NULL;
    if (!d->model)
        return ig_error(IG_E_MODEL, "tokenizer: no tokenizer model type (tokenizer.ggml.model)");
    struct tok_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return ig_error(IG_E_NOMEM, "tokenizer: out of memory");
    v->end_not_eog = -1;
    int rc = IG_OK;
    if (!strcmp(d->model, "gpt2")) {
        v->model = TOK_MODEL_BPE;
        rc = tok_pre_from_name(d->pre ? d->pre : "gpt2", &v->pre);
        if (rc)
            goto fail;
    } else if (!strcmp(d->model, "llama")) {
        v->model = TOK_MODEL_SPM;
    } else if (!strcmp(d->model, "gemma4")) {
        v->model = TOK_MODEL_BPE_UTF8;
    } else {
        rc = ig_error(IG_E_MODEL, "tokenizer: unsupported tokenizer model '%s' (expected 'gpt2', "
                      "'llama' or 'gemma4')", d->model);
        goto fail;
    }
    if (d->n_tokens <= 0 || d->n_tokens > INT32_MAX / 2 || !d->tokens) {
        rc = ig_error(IG_E_MODEL, "tokenizer: vocabulary of %lld tokens", (long long)d->n_tokens);
        goto fail;
    }
    v->n_tokens = d->n_tokens;

    size_t bytes = 0;
    for (int64_t i = 0; i < d->n_tokens; i++)
        bytes += d->tokens[i].len + 1;
    v->arena = malloc(bytes);
    v->tokens = malloc((size_t)v->n_tokens * sizeof *v->tokens);
    v->scores = calloc((size_t)v->n_tokens, sizeof *v->scores);
    v->types = malloc((size_t)v->n_tokens * sizeof *v->types);
    uint64_t size = table_size(v->n_tokens);
    v->str_slots = malloc(size * sizeof *v->str_slots);
    if (!v->arena || !v->tokens || !v->scores || !v->types || !v->str_slots) {
        rc = ig_error(IG_E_NOMEM, "tokenizer: out of memory for %lld tokens", (long long)v->n_tokens);
        goto fail;
    }
    memset(v->str_slots, 0xff, size * sizeof *v->str_slots);
    v->str_mask = size - 1;
    char *p = v->arena;
    for (int64_t i = 0; i < v->n_tokens; i++) {
        if (d->tokens[i].len) /* an empty string may come with a NULL pointer */
            memcpy(p, d->tokens[i].ptr, d->tokens[i].len);
        p[d->tokens[i].len] = '\0';
        v->tokens[i] = (struct tok_str){p, d->tokens[i].len};
        p += d->tokens[i].len + 1;
        v->scores[i] = d->scores ? d->scores[i] : 0.0f;
        v->types[i] = d->types ? d->types[i] : TOK_TYPE_NORMAL;
        if (v->types[i] < TOK_TYPE_UNDEFINED || v->types[i] > TOK_TYPE_BYTE) {
            rc = ig_error(IG_E_MODEL, "tokenizer: token %lld has unknown type %d",
                          (long long)i, v->types[i]);
            goto fail;
        }
        /* Duplicate strings happen in real vocabularies (e.g. unused
         * slots); the last id wins, as in llama.cpp's token map. */
        uint64_t h = tok_hash_bytes(v->tokens[i].ptr, v->tokens[i].len) & v->str_mask;
        for (;; h = (h + 1) & v->str_mask) {
            int32_t id = v->str_slots[h];
            if (id < 0) {
                v->str_slots[h] = (int32_t)i;
                break;
            }
            if (v->tokens[id].len == v->tokens[i].len &&
                !memcmp(v->tokens[id].ptr, v->tokens[i].ptr, v->tokens[i].len)) {
                v->str_slots[h] = (int32_t)i;
                break;
            }
        }
    }

    const int32_t ids[6] = {d->bos_id, d->eos_id, d->eot_id, d->eom_id, d->unk_id, d->pad_id};
    static const char *const names[6] = {"bos_token_id", "eos_token_id", "eot_token_id",
                                         "eom_token_id", "unknown_token_id", "padding_token_id"};
    for (int k = 0; k < 6; k++)
        if ((rc = check_id(names[k], ids[k], v->n_tokens)))
            goto fail;
    v->bos_id = d->bos_id;
    v->eos_id = d->eos_id;
    v->eot_id = d->eot_id;
    v->eom_id = d->eom_id;
    v->unk_id = d->unk_id;
    v->pad_id = d->pad_id;
    if (d->n_eog < 0 || d->n_eog > TOK_MAX_EOG) {
        rc = ig_error(IG_E_MODEL, "tokenizer: %d end-of-generation ids, at most %d", d->n_eog,
                      TOK_MAX_EOG);
        goto fail;
    }
    for (int k = 0; k < d->n_eog; k++)
        if ((rc = check_id("end-of-generation id", d->eog_ids[k], v->n_tokens)))
            goto fail;
    memcpy(v->eog_ids, d->eog_ids, sizeof d->eog_ids);
    v->n_eog = d->n_eog;
    if (v->model == TOK_MODEL_SPM && v->unk_id < 0)
        for (int64_t i = 0; i < v->n_tokens && v->unk_id < 0; i++)
            if (v->types[i] == TOK_TYPE_UNKNOWN)
                v->unk_id = (int32_t)i;
    /* Defaults as llama.cpp has them: SentencePiece models start with BOS
     * and a space prefix, Llama 3 and Gemma 4 with BOS; other byte-level BPE
     * models add nothing. (llama.cpp forces Gemma 4's BOS on even when the
     * file says false; here the file's word stands.) */
    bool spm = v->model == TOK_MODEL_SPM;
    bool llama3 = v->model == TOK_MODEL_BPE &&
                  (v->pre == TOK_PRE_LLAMA3 || v->pre == TOK_PRE_TEKKEN);
    /* Llama 3's and Mistral's tekken tokenizer.json set ignore_merges;
     * llama.cpp ties it (and BOS) to the pre-tokenizer type, as GGUF has no
     * key for it. */
    v->ignore_merges = d->ignore_merges >= 0 ? d->ignore_merges : llama3;
    v->add_bos = d->add_bos >= 0 ? d->add_bos : spm || llama3 || v->model == TOK_MODEL_BPE_UTF8;
    v->add_eos = d->add_eos >= 0 ? d->add_eos : false;
    v->add_space_prefix = d->add_space_prefix >= 0 ? d->add_space_prefix : spm;
    v->space_prefix_hf = d->space_prefix_hf;
    if (v->add_bos && v->bos_id < 0)
        v->add_bos = false;
    if (v->add_eos && v->eos_id < 0)
        v->add_eos = false;

    if ((rc = add_merges(v, d)) || (rc = find_specials(v)))
        goto fail;
    map_bytes(v);
    find_eog(v);
    *out = v;
    return IG_OK;
fail:
    tok_vocab_free(v);
    return rc;
}

void tok_vocab_free(struct tok_vocab *v)
{
    if (!v)
        return;
    tok_cache_free(&v->cache);
    free(v->specials);
    free(v->merge_slots);
    free(v->str_slots);
    free(v->types);
    free(v->scores);
    free(v->tokens);
    free(v->arena);
    free(v);
}

int64_t tok_n_tokens(const struct tok_vocab *v) { return v->n_tokens; }
enum tok_model tok_model_of(const struct tok_vocab *v) { return v->model; }
int32_t tok_bos(const struct tok_vocab *v) { return v->bos_id; }
bool tok_adds_bos(const struct tok_vocab *v) { return v->add_bos; }
int32_t tok_eos(const struct tok_vocab *v) { return v->eos_id; }
int32_t tok_eot(const struct tok_vocab *v) { return v->eot_id; }

bool tok_is_eog(const struct tok_vocab *v, int32_t id)
{
    if (id < 0 || id == v->end_not_eog)
        return false;
    for (int k = 0; k < v->n_eog; k++)
        if (id == v->eog_ids[k])
            return true;
    return id == v->eos_id || id == v->eot_id || id == v->eom_id;
}

enum tok_pre tok_pre_of(const struct tok_vocab *v) { return v->pre; }

const char *tok_model_name(enum tok_model m)
{
    return m == TOK_MODEL_BPE ? "gpt2" : m == TOK_MODEL_BPE_UTF8 ? "gemma4" : "llama";
}

const char *tok_pre_name(enum tok_pre p)
{
    switch (p) {
    case TOK_PRE_GPT2: return "gpt2";
    case TOK_PRE_SMOLLM: return "smollm";
    case TOK_PRE_LLAMA3: return "llama3";
    case TOK_PRE_QWEN2: return "qwen2";
    case TOK_PRE_QWEN35: return "qwen35";
    case TOK_PRE_TEKKEN: return "tekken";
    case TOK_PRE_GPT4O: return "gpt-4o";
    case TOK_PRE_DEEPSEEK_LLM: return "deepseek-llm";
    case TOK_PRE_DEEPSEEK_CODER: return "deepseek-coder";
    case TOK_PRE_FALCON: return "falcon";
    }
    return "?";
}

enum tok_type tok_type_of(const struct tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens)
        return TOK_TYPE_UNDEFINED;
    return (enum tok_type)v->types[id];
}

struct tok_str tok_token_text(const struct tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens)
        return (struct tok_str){"", 0};
    return v->tokens[id];
}
