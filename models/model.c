/* models/model.c: a parsed GGUF -> struct model for Llama-family archs
 * (a directory goes to hf_model.c instead), and the accessors that answer
 * for either format.
 *
 * Reads <arch>.* hyper-parameters with the spec's defaults, checks them for
 * sense, then finds every tensor by its llama.cpp name and checks its shape
 * and type. It leaves the bytes where they are (mmapped). The GGUF parser
 * (gguf.c) has already checked that every tensor lies inside the file and
 * that the known keys have the right types.
 * Covered by tests/models/test_info.py and test_gguf_malformed.py. */
#include "models/model.h"

#include "models/gguf_impl.h"
#include "models/hf.h"

#include "core/status.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A dimension larger than this is not a model ignite can run (and products
 * of two such stay far from overflow). */
#define MODEL_MAX_DIM (INT64_C(1) << 24)

/* Weights are read in place; every tensor must start on this boundary. */
#define MODEL_DATA_ALIGN 4

struct arch_info {
    const char *name;
    enum rope_style rope;
    bool qkv_bias; /* Q, K, V biases are required */
};

static const struct arch_info archs[] = {
    {"llama", ROPE_ADJACENT, false},
    {"qwen2", ROPE_HALF_SPLIT, true},
};

/* Everything a loader step needs to name the file in a message. */
struct loader {
    const char *path;
    const struct gguf_file *g;
    struct model_hparams *hp;
};

/* <arch>.<suffix> as an integer in [1, MODEL_MAX_DIM]; `def` < 0 means
 * required. */
static int hp_int(const struct loader *L, const char *suffix, int64_t def, int64_t *out)
{
    char key[96];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    if (!gguf_get_u64(L->g, key, &v)) {
        if (def < 0)
            return ig_error(IG_E_MODEL, "'%s': metadata key '%s' is missing", L->path, key);
        *out = def;
        return IG_OK;
    }
    if (v < 1 || v > (uint64_t)MODEL_MAX_DIM)
        return ig_error(IG_E_MODEL, "'%s': %s is %llu, expected 1 to %lld", L->path, key,
                        (unsigned long long)v, (long long)MODEL_MAX_DIM);
    *out = (int64_t)v;
    return IG_OK;
}

/* <arch>.<suffix> as a positive finite float, `def` when absent. */
static int hp_float(const struct loader *L, const char *suffix, double def, double *out)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", L->hp->arch, suffix);
    if (!gguf_get_f64(L->g, key, out))
        *out = def;
    if (!isfinite(*out) || *out <= 0)
        return ig_error(IG_E_MODEL, "'%s': %s is %g, expected a positive number", L->path,
                        key, *out);
    return IG_OK;
}

static int read_arch(const struct loader *L, const struct arch_info **ai)
{
    struct gguf_str a;
    if (!gguf_get_str(L->g, "general.architecture", &a))
        return ig_error(IG_E_MODEL, "'%s': metadata key 'general.architecture' is missing",
                        L->path);
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (gguf_str_eq(a, archs[i].name)) {
            *ai = &archs[i];
            snprintf(L->hp->arch, sizeof L->hp->arch, "%s", archs[i].name);
            return IG_OK;
        }
    char buf[48];
    return ig_error(IG_E_MODEL,
                    "'%s': architecture '%s' is not supported (supported: llama, qwen2)",
                    L->path, gguf_printable(buf, sizeof buf, a));
}

static int read_hparams(const struct loader *L, const struct arch_info *ai)
{
    struct model_hparams *hp = L->hp;
    int st;
    if ((st = hp_int(L, "block_count", -1, &hp->n_layer)) ||
        (st = hp_int(L, "embedding_length", -1, &hp->n_embd)) ||
        (st = hp_int(L, "attention.head_count", -1, &hp->n_head)) ||
        (st = hp_int(L, "attention.head_count_kv", hp->n_head, &hp->n_head_kv)) ||
        (st = hp_int(L, "feed_forward_length", -1, &hp->n_ff)) ||
        (st = hp_int(L, "context_length", -1, &hp->n_ctx_train)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return ig_error(IG_E_MODEL, "'%s': %lld heads are not a multiple of %lld KV heads",
                        L->path, (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t def_head_dim = hp->n_embd % hp->n_head ? -1 : hp->n_embd / hp->n_head;
    if ((st = hp_int(L, "attention.key_length", def_head_dim, &hp->head_dim)))
        return st;
    int64_t v_len;
    if ((st = hp_int(L, "attention.value_length", hp->head_dim, &v_len)))
        return st;
    if (v_len != hp->head_dim)
        return ig_error(IG_E_MODEL,
                        "'%s': %s.attention.value_length %lld differs from key_length %lld "
                        "(not supported)", L->path, hp->arch, (long long)v_len,
                        (long long)hp->head_dim);
    if ((st = hp_int(L, "rope.dimension_count", hp->head_dim, &hp->n_rot)))
        return st;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ig_error(IG_E_MODEL,
                        "'%s': %s.rope.dimension_count %lld must be even and at most "
                        "head_dim %lld", L->path, hp->arch, (long long)hp->n_rot,
                        (long long)hp->head_dim);
    if ((st = hp_float(L, "rope.freq_base", 10000.0, &hp->rope_base)) ||
        (st = hp_float(L, "attention.layer_norm_rms_epsilon", 1e-5, &hp->norm_eps)))
        return st;
    hp->rope_style = ai->rope;
    /* Each layer needs 9 tensors: reject absurd counts before allocating. */
    if (hp->n_layer > L->g->n_tensors / 9)
        return ig_error(IG_E_MODEL, "'%s': %s.block_count %lld but the file has only %lld tensors",
                        L->path, hp->arch, (long long)hp->n_layer, (long long)L->g->n_tensors);
    return IG_OK;
}

/* Finds `name` and checks it is [rows, cols] (1-D when rows == 1) of a type
 * ignite computes with; norms and biases (f32_only) must be F32. With
 * optional set, an absent tensor leaves w zeroed and is not an error. */
static int get_weight(const struct loader *L, const char *name, int64_t rows, int64_t cols,
                      bool f32_only, bool optional, struct model_weight *w)
{
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t) {
        if (optional)
            return IG_OK;
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing", L->path, name);
    }
    bool shape_ok = t->ne[0] == cols && t->ne[1] == rows && t->ne[2] == 1 && t->ne[3] == 1;
    if (!shape_ok)
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' has shape ne=[%lld, %lld, %lld, %lld], expected "
                        "ne=[%lld, %lld]", L->path, name, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3], (long long)cols,
                        (long long)rows);
    const struct quant_traits *q = quant_traits_of(t->type);
    if (f32_only && t->type != QUANT_F32)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' has type %s, expected F32", L->path,
                        name, quant_type_name(t->type));
    if (!q || !q->can_dequantize)
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' has type %s, which ignite cannot compute with "
                        "(F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K)",
                        L->path, name, quant_type_name(t->type));
    /* The kernels read F32 rows as floats and block fields as 16-bit
     * halves in place: a file laid out with general.alignment 1 or 2 can
     * put them at addresses the CPU must not load them from. */
    if ((uintptr_t)t->data % MODEL_DATA_ALIGN != 0)
        return ig_error(IG_E_MODEL,
                        "'%s': tensor '%s' starts at a file offset that is not a multiple of "
                        "%d bytes (general.alignment %llu); re-convert the file with the "
                        "default alignment of 32", L->path, name, MODEL_DATA_ALIGN,
                        (unsigned long long)L->g->alignment);
    w->type = (enum quant_type)t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = quant_row_bytes(w->type, cols);
    w->data = t->data;
    return IG_OK;
}

static int load_layer(const struct loader *L, int64_t i, struct model_layer *ly, bool bias)
{
    const struct model_hparams *hp = L->hp;
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n[9][64];
    static const char *const parts[9] = {
        "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
        "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
        "ffn_down.weight",
    };
    for (int k = 0; k < 9; k++)
        snprintf(n[k], sizeof n[k], "blk.%lld.%s", (long long)i, parts[k]);
    int st;
    if ((st = get_weight(L, n[0], 1, hp->n_embd, true, false, &ly->attn_norm)) ||
        (st = get_weight(L, n[1], q_dim, hp->n_embd, false, false, &ly->wq)) ||
        (st = get_weight(L, n[2], kv_dim, hp->n_embd, false, false, &ly->wk)) ||
        (st = get_weight(L, n[3], kv_dim, hp->n_embd, false, false, &ly->wv)) ||
        (st = get_weight(L, n[4], hp->n_embd, q_dim, false, false, &ly->wo)) ||
        (st = get_weight(L, n[5], 1, hp->n_embd, true, false, &ly->ffn_norm)) ||
        (st = get_weight(L, n[6], hp->n_ff, hp->n_embd, false, false, &ly->w_gate)) ||
        (st = get_weight(L, n[7], hp->n_ff, hp->n_embd, false, false, &ly->w_up)) ||
        (st = get_weight(L, n[8], hp->n_embd, hp->n_ff, false, false, &ly->w_down)))
        return st;
    char b[3][64];
    static const char *const biases[3] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
    for (int k = 0; k < 3; k++)
        snprintf(b[k], sizeof b[k], "blk.%lld.%s", (long long)i, biases[k]);
    if ((st = get_weight(L, b[0], 1, q_dim, true, !bias, &ly->bq)) ||
        (st = get_weight(L, b[1], 1, kv_dim, true, !bias, &ly->bk)) ||
        (st = get_weight(L, b[2], 1, kv_dim, true, !bias, &ly->bv)))
        return st;
    return IG_OK;
}

static int load_weights(const struct loader *L, struct model *m, bool bias)
{
    struct model_hparams *hp = &m->hp;
    const struct gguf_tensor *emb = gguf_find_tensor(L->g, "token_embd.weight");
    if (!emb)
        return ig_error(IG_E_MODEL, "'%s': tensor 'token_embd.weight' is missing", L->path);
    int st = hp_int(L, "vocab_size", emb->ne[1] <= MODEL_MAX_DIM ? emb->ne[1] : -1, &hp->n_vocab);
    if (st)
        return st;
    if ((st = get_weight(L, "token_embd.weight", hp->n_vocab, hp->n_embd, false, false,
                         &m->tok_embd)) ||
        (st = get_weight(L, "output_norm.weight", 1, hp->n_embd, true, false, &m->output_norm)) ||
        (st = get_weight(L, "output.weight", hp->n_vocab, hp->n_embd, false, true, &m->output)))
        return st;
    hp->tied_embeddings = m->output.data == NULL;
    if (hp->tied_embeddings)
        m->output = m->tok_embd;
    for (int64_t i = 0; i < hp->n_layer; i++)
        if ((st = load_layer(L, i, &m->layers[i], bias)))
            return st;
    hp->has_qkv_bias = m->layers[0].bq.data != NULL;
    for (int64_t i = 0; i < hp->n_layer; i++) {
        const struct model_layer *ly = &m->layers[i];
        if ((ly->bq.data != NULL) != hp->has_qkv_bias || (ly->bk.data != NULL) != hp->has_qkv_bias ||
            (ly->bv.data != NULL) != hp->has_qkv_bias)
            return ig_error(IG_E_MODEL, "'%s': layer %lld has only some of the Q/K/V biases "
                            "(all layers need all three or none)", L->path, (long long)i);
    }
    if (gguf_find_tensor(L->g, "rope_freqs.weight"))
        ig_warn("'%s': tensor 'rope_freqs.weight' (Llama 3 RoPE scaling) is not supported and "
                "is ignored; outputs will differ from llama.cpp", L->path);
    return IG_OK;
}

int model_load(const char *path, struct model **out)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return ig_error(IG_E_NOMEM, "out of memory loading '%s'", path);
    snprintf(m->path, sizeof m->path, "%s", path);
    struct stat sb;
    int st;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if ((st = hf_load(path, m)))
            goto fail;
        *out = m;
        return IG_OK;
    }
    if ((st = gguf_open(path, &m->gguf, NULL)))
        goto fail;
    struct loader L = {path, m->gguf, &m->hp};
    const struct arch_info *ai = NULL;
    if ((st = read_arch(&L, &ai)) || (st = read_hparams(&L, ai)))
        goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = ig_error(IG_E_NOMEM, "out of memory loading '%s'", path);
        goto fail;
    }
    if ((st = load_weights(&L, m, ai->qkv_bias)))
        goto fail;
    for (int64_t i = 0; i < m->gguf->n_tensors; i++)
        m->n_params += m->gguf->tensors[i].n_elems;
    m->n_tensors = m->gguf->n_tensors;
    m->file_bytes = m->gguf->file_size;
    *out = m;
    return IG_OK;
fail:
    model_free(m);
    return st;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    free(m->layers);
    gguf_close(m->gguf);
    hf_folder_free(m->hf);
    free(m);
}

int64_t model_kv_bytes_per_token(const struct model_hparams *hp, int elem_bytes)
{
    return 2 * hp->n_layer * hp->n_head_kv * hp->head_dim * (int64_t)elem_bytes;
}

bool model_is_folder(const struct model *m)
{
    return m->hf != NULL;
}

int model_folder_files(const struct model *m)
{
    return m->hf ? m->hf->n_shards : 0;
}

bool model_chat_template(const struct model *m, const char **text, size_t *len)
{
    if (m->hf) {
        *text = m->hf->chat_template;
        *len = *text ? strlen(*text) : 0;
        return *len > 0;
    }
    struct gguf_str t;
    if (!m->gguf || !gguf_get_str(m->gguf, "tokenizer.chat_template", &t) || !t.len)
        return false;
    *text = t.ptr;
    *len = (size_t)t.len;
    return true;
}

static void count_type(int64_t *count, int64_t *bytes, int n, uint32_t type, size_t nbytes)
{
    if (type < (uint32_t)n) {
        count[type]++;
        bytes[type] += (int64_t)nbytes;
    }
}

void model_tensor_types(const struct model *m, int64_t *count, int64_t *bytes, int n)
{
    memset(count, 0, (size_t)n * sizeof *count);
    memset(bytes, 0, (size_t)n * sizeof *bytes);
    if (m->gguf)
        for (int64_t i = 0; i < m->gguf->n_tensors; i++)
            count_type(count, bytes, n, m->gguf->tensors[i].type, m->gguf->tensors[i].nbytes);
    for (int64_t i = 0; m->hf && i < m->hf->n_tensors; i++) {
        const struct st_tensor *t = m->hf->by_name[i];
        int type = t->dtype == ST_F32 ? QUANT_F32 : t->dtype == ST_F16 ? QUANT_F16
                 : t->dtype == ST_BF16 ? QUANT_BF16 : -1;
        if (type >= 0)
            count_type(count, bytes, n, (uint32_t)type, t->nbytes);
    }
}
