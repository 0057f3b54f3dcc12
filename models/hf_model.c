/* models/hf_model.c: a Hugging Face folder -> struct model.
 *
 * Reads config.json (hf_config.c), maps model.safetensors or the shards
 * model.safetensors.index.json names (safetensors.c), then finds every
 * weight by its HF name and checks its dtype and shape against config.json.
 * Matrices are pointed into the mappings as stored (F32, F16, BF16: the
 * forward reads those types in place); the few 1-D norms and biases are
 * widened to f32 when stored narrower, as the forward reads them as f32.
 * tokenizer_config.json (chat template) and generation_config.json
 * (sampling defaults) are read here too; the tokenizer itself is
 * tokenizer/hf_vocab.c's. Gemma's norms are stored as HF applies them,
 * x * (1 + w): widen() adds the 1, so the forward sees what a GGUF holds.
 * gpt-oss's experts are fused MXFP4 tensors (mlp.experts.gate_up_proj_blocks,
 * _scales, _bias; down_proj_*): bind_fused splits gate from up and repacks
 * the blocks into ggml's (hf_mxfp4.c), as llama.cpp's converter does.
 * Gemma 4's experts (experts.gate_up_proj, down_proj) are read in place,
 * gate and up each expert's halves (bind_gate_up_halves); so are Qwen3.5-MoE's
 * as transformers 5 saves them (mlp.experts.gate_up_proj [E, 2 F, H], its
 * forward's chunk(2), and down_proj [E, H, F]), where a Qwen3-MoE-style
 * folder has a tensor per expert (bind_experts): fused_experts says which.
 * Covered by tests/models/test_hf_folder.py, test_hf_tiny.py,
 * test_hf_arch.py, test_hf_malformed.py, test_hf_qwen35.py and
 * tests/cpu/test_gptoss_hf.py. */
#include "models/hf.h"

#include "models/arch.h"

#include "core/half.h"
#include "core/json.h"
#include "core/status.h"
#include "ops/ops.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Weights are read in place; every matrix must start on this boundary. */
#define HF_DATA_ALIGN 4

/* Everything a loader step needs to name the files in a message. */
struct loader {
    const char *dir;
    struct model *m;
    struct hf_folder *h;
    const struct hf_arch *arch;
    const char *prefix, *beside; /* the arch's, or its other layout's */
    /* The experts the table names a tensor each ("mlp.experts.%lld.*") are
     * fused instead: layer 0 has mlp.experts.gate_up_proj. */
    bool fused_experts;
};

/* The fused experts' names (Qwen3_5MoeExperts' parameters). */
#define HF_FUSED_GATE_UP "mlp.experts.gate_up_proj"
#define HF_FUSED_DOWN "mlp.experts.down_proj"


static void join(char *buf, size_t cap, const char *dir, const char *file)
{
    size_t n = strlen(dir);
    snprintf(buf, cap, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", file);
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A file the folder must have: missing is a malformed model (exit 4), not
 * an I/O error. */
static int load_required_json(const char *dir, const char *file, cJSON **out)
{
    char p[4352];
    join(p, sizeof p, dir, file);
    if (!exists(p) && errno == ENOENT)
        return ig_error(IG_E_MODEL, "'%s': %s is missing (a Hugging Face model folder has "
                        "config.json, *.safetensors and tokenizer.json)", dir, file);
    return ig_json_load(p, out);
}

/* An optional file: absent is fine (*out stays NULL). */
static int load_optional_json(const char *dir, const char *file, cJSON **out)
{
    char p[4352];
    *out = NULL;
    join(p, sizeof p, dir, file);
    if (!exists(p))
        return IG_OK;
    return ig_json_load(p, out);
}

/* ---- weights files ----------------------------------------------------------- */

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* No safetensors: say whether the folder has pickled PyTorch weights. */
static int no_weights(const char *dir)
{
    DIR *d = opendir(dir);
    bool pickle = false;
    for (struct dirent *e; d && (e = readdir(d));)
        pickle |= has_suffix(e->d_name, ".bin") || has_suffix(e->d_name, ".pt") ||
                  has_suffix(e->d_name, ".pth");
    if (d)
        closedir(d);
    if (pickle)
        return ig_error(IG_E_MODEL, "'%s': the weights are PyTorch pickle files (*.bin) only; "
                        "ignite reads safetensors (model.safetensors or "
                        "model.safetensors.index.json), which loading cannot run code from",
                        dir);
    return ig_error(IG_E_MODEL, "'%s': no weights: model.safetensors and "
                    "model.safetensors.index.json are both missing", dir);
}

static int add_shard(struct loader *L, const char *file)
{
    struct hf_folder *h = L->h;
    char p[4352];
    join(p, sizeof p, L->dir, file);
    if (!exists(p) && errno == ENOENT)
        return ig_error(IG_E_MODEL, "'%s': %s is missing", L->dir, file);
    struct st_file **s = realloc(h->shards, (size_t)(h->n_shards + 1) * sizeof *s);
    if (s)
        h->shards = s;
    char **names = realloc(h->shard_names, (size_t)(h->n_shards + 1) * sizeof *names);
    if (names)
        h->shard_names = names;
    if (!s || !names || !(names[h->n_shards] = strdup(file)))
        return ig_error(IG_E_NOMEM, "out of memory loading %s", L->dir);
    int st = st_open(p, &h->shards[h->n_shards]);
    if (st) {
        free(names[h->n_shards]);
        return st;
    }
    h->n_shards++;
    return IG_OK;
}

/* A shard name from the index must be a plain file in the folder. */
static bool plain_name(const char *f)
{
    return *f && f[0] != '.' && !strchr(f, '/') && has_suffix(f, ".safetensors");
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens each shard the index names once, then checks that each entry of
 * its weight_map is in the shard it names. */
static int open_sharded(struct loader *L, const cJSON *idx, const char *idx_path)
{
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child)
        return ig_error(IG_E_MODEL, "'%s': 'weight_map' must be a non-empty object (tensor "
                        "name -> file)", idx_path);
    int n = cJSON_GetArraySize(wm);
    const char **files = malloc((size_t)n * sizeof *files);
    if (!files)
        return ig_error(IG_E_NOMEM, "out of memory reading %s", idx_path);
    int k = 0, st = IG_OK;
    for (const cJSON *e = wm->child; e && !st; e = e->next, k++) {
        if (!cJSON_IsString(e) || !plain_name(e->valuestring))
            st = ig_error(IG_E_MODEL, "'%s': weight_map puts '%.80s' in something that is not "
                          "a .safetensors file of the folder", idx_path, e->string);
        else
            files[k] = e->valuestring;
    }
    if (!st)
        qsort(files, (size_t)n, sizeof *files, str_cmp);
    for (int i = 0; i < n && !st; i++)
        if (i == 0 || strcmp(files[i], files[i - 1]))
            st = add_shard(L, files[i]);
    free(files);
    if (st)
        return st;
    for (const cJSON *e = wm->child; e; e = e->next) {
        int s = 0;
        while (strcmp(L->h->shard_names[s], e->valuestring))
            s++; /* every name of the map was opened above */
        if (!st_find(L->h->shards[s], e->string))
            return ig_error(IG_E_MODEL, "'%s': weight_map names tensor '%.80s' in '%s', which does "
                            "not hold it", idx_path, e->string, e->valuestring);
    }
    return IG_OK;
}

static int by_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const struct st_tensor *const *)a)->name,
                  (*(const struct st_tensor *const *)b)->name);
}

/* One sorted index over every shard; a name in two shards is refused. */
static int index_tensors(struct loader *L)
{
    struct hf_folder *h = L->h;
    int64_t n = 0;
    for (int i = 0; i < h->n_shards; i++)
        n += h->shards[i]->n_tensors;
    h->by_name = malloc((size_t)(n ? n : 1) * sizeof *h->by_name);
    if (!h->by_name)
        return ig_error(IG_E_NOMEM, "out of memory loading %s", L->dir);
    for (int i = 0; i < h->n_shards; i++)
        for (int64_t t = 0; t < h->shards[i]->n_tensors; t++)
            h->by_name[h->n_tensors++] = &h->shards[i]->tensors[t];
    qsort(h->by_name, (size_t)n, sizeof *h->by_name, by_tensor_name);
    for (int64_t i = 1; i < n; i++)
        if (!strcmp(h->by_name[i]->name, h->by_name[i - 1]->name))
            return ig_error(IG_E_MODEL, "'%s': tensor '%.80s' is in two safetensors files",
                            L->dir, h->by_name[i]->name);
    L->m->n_tensors = n;
    for (int i = 0; i < h->n_shards; i++)
        L->m->file_bytes += h->shards[i]->file_size;
    /* gpt-oss's MXFP4 experts: a _blocks byte holds two values, _scales none */
    for (int64_t i = 0; i < n; i++) {
        const struct st_tensor *t = h->by_name[i];
        bool mxfp4 = t->dtype == ST_U8 && HF_MXFP4_EXPERTS(L->arch);
        L->m->n_params += !mxfp4 ? t->n_elems
                          : has_suffix(t->name, "_blocks") ? 2 * t->n_elems : 0;
    }
    return IG_OK;
}

static int open_weights(struct loader *L)
{
    char p[4352];
    join(p, sizeof p, L->dir, "model.safetensors.index.json");
    int st;
    /* there but not readable (a symlink loop, no permission): opened, so
     * the message names the file and its reason, not "missing" */
    if (exists(p) || errno != ENOENT) {
        cJSON *idx = NULL;
        if ((st = ig_json_load(p, &idx)) == IG_OK)
            st = open_sharded(L, idx, p);
        cJSON_Delete(idx);
    } else {
        join(p, sizeof p, L->dir, "model.safetensors");
        st = exists(p) || errno != ENOENT ? add_shard(L, "model.safetensors") : no_weights(L->dir);
    }
    return st ? st : index_tensors(L);
}

/* ---- binding weights ------------------------------------------------------------ */

static const struct st_tensor *find(const struct hf_folder *h, const char *name)
{
    struct st_tensor key = {.name = name};
    const struct st_tensor *kp = &key;
    const struct st_tensor *const *r =
        bsearch(&kp, h->by_name, (size_t)h->n_tensors, sizeof *h->by_name, by_tensor_name);
    return r ? *r : NULL;
}

/* The file holding t, for messages. */
static const char *file_of(const struct hf_folder *h, const struct st_tensor *t)
{
    for (int i = 0; i < h->n_shards; i++)
        if (t >= h->shards[i]->tensors && t < h->shards[i]->tensors + h->shards[i]->n_tensors)
            return h->shard_names[i];
    return "?";
}

/* Widens t into the next n floats of h->vectors (sized for every vector of
 * the model up front, so pointers into it stay valid). */
enum widen_as { AS_IS, PLUS_ONE, NEG_EXP };

/* ... as it is, plus one (HF's (1 + w) norms), or as -exp(x) (Qwen3.5's
 * A_log, the A = -exp(A_log) llama.cpp's converter stores). */
static const float *widen(struct hf_folder *h, const struct st_tensor *t, enum widen_as as)
{
    size_t n = (size_t)t->n_elems;
    IG_ASSERT(h->n_vectors + n <= h->cap_vectors);
    float *dst = h->vectors + h->n_vectors;
    const unsigned char *src = t->data;
    for (size_t i = 0; i < n; i++) {
        float x;
        if (t->dtype == ST_F32) {
            memcpy(&x, src + 4 * i, 4);
        } else {
            uint16_t b;
            memcpy(&b, src + 2 * i, 2);
            x = t->dtype == ST_F16 ? ig_f16_to_f32(b) : ig_bf16_to_f32(b);
        }
        dst[i] = as == PLUS_ONE ? x + 1.0f : as == NEG_EXP ? -expf(x) : x;
    }
    h->n_vectors += n;
    return dst;
}

/* The row's name in layer `layer` of the folder. */
static void hf_name(const struct loader *L, const struct model_tensor *t, int64_t layer,
                    char *buf, size_t cap)
{
    const char *n = model_tensor_hf_name(t, model_features(&L->m->hp));
    if (L->fused_experts && t->n_expert == TENSOR_DIM_EXPERT && t->kind == TENSOR_MATRIX)
        n = t->role == LAYER_FFN_DOWN_EXPS ? HF_FUSED_DOWN : HF_FUSED_GATE_UP;
    if (t->scope == TENSOR_PER_LAYER)
        snprintf(buf, cap, "%slayers.%lld.%s", L->prefix, (long long)layer, n);
    else
        snprintf(buf, cap, "%s%s", t->hf_beside ? L->beside : L->prefix, n);
}

/* Finds row t's weight of layer `layer` and checks it is [rows, cols] (1-D
 * [cols] for vectors, [n_expert, rows, cols] for experts) of a float type;
 * binds it to w. Vectors stored other than as aligned f32 (or needing +1)
 * are widened into h->vectors. */
static int bind(struct loader *L, const struct model_tensor *row, int64_t layer,
                struct model_weight *w)
{
    struct hf_folder *h = L->h;
    char name[256];
    hf_name(L, row, layer, name, sizeof name);
    memset(w, 0, sizeof *w);
    const struct st_tensor *t = find(h, name);
    if (!t)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing%s", L->dir, name,
                        row->ties_to_embd ? " (config.json says tie_word_embeddings false)"
                                          : "");
    int64_t shape[3];
    model_weight_shape(row, L->m, layer, shape);
    /* the dimensions as stored: experts (when more than one), rows (of a
     * matrix), then columns */
    bool vec = row->kind != TENSOR_MATRIX;
    int64_t want_dims[3];
    int n_want = 0;
    if (shape[0] != 1)
        want_dims[n_want++] = shape[0];
    if (!vec || shape[1] != 1) /* (a vector per row: Qwen3.5's conv1d) */
        want_dims[n_want++] = shape[1];
    if (!vec || shape[2] != 1 || n_want) /* (a scalar: Gemma 4's layer_scalar [1]) */
        want_dims[n_want++] = shape[2];
    /* a vector's dims of 1 do not count: Qwen3.5's conv1d [C, 1, K] and
     * shared_expert_gate [1, n_embd] are [C, K] and [n_embd] */
    int64_t have[ST_MAX_DIMS];
    int n_have = 0;
    for (int d = 0; d < t->n_dims; d++)
        if (!vec || t->shape[d] != 1)
            have[n_have++] = t->shape[d];
    bool shape_ok = n_have == n_want;
    for (int d = 0; d < n_want && shape_ok; d++)
        shape_ok = have[d] == want_dims[d];
    if (!shape_ok) {
        char got[96] = "", want[64] = "";
        size_t k = 0;
        for (int d = 0; d < t->n_dims && k < sizeof got - 24; d++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%lld", d ? ", " : "",
                                  (long long)t->shape[d]);
        k = 0;
        for (int d = 0; d < n_want; d++)
            k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", d ? ", " : "",
                                  (long long)want_dims[d]);
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' in '%s' has shape [%s], config.json makes "
                        "it [%s]", L->dir, name, file_of(h, t), got, want);
    }
    enum quant_type type;
    switch (t->dtype) {
    case ST_F32: type = QUANT_F32; break;
    case ST_F16: type = QUANT_F16; break;
    case ST_BF16: type = QUANT_BF16; break;
    default:
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' has dtype %s; ignite computes with F32, "
                        "F16 and BF16", L->dir, name, st_dtype_name(t->dtype));
    }
    enum widen_as as = row->kind == TENSOR_NORM && L->arch->norm_plus_one ? PLUS_ONE
                       : row->role == LAYER_DN_A && row->scope == TENSOR_PER_LAYER ? NEG_EXP
                                                                                  : AS_IS;
    if (vec && (type != QUANT_F32 || as != AS_IS || (uintptr_t)t->data % HF_DATA_ALIGN)) {
        *w = (struct model_weight){.type = QUANT_F32, .n_expert = shape[0], .rows = shape[1],
                                   .cols = shape[2], .row_bytes = (size_t)shape[2] * 4,
                                   .data = widen(h, t, as)};
        return IG_OK;
    }
    /* The kernels read F32 rows as floats and F16/BF16 as 16-bit halves in
     * place; safetensors aligns nothing, so say so rather than misread. */
    if ((uintptr_t)t->data % HF_DATA_ALIGN)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' starts at data byte %llu, not a multiple "
                        "of %d; ignite reads weights in place and needs them aligned",
                        L->dir, name, (unsigned long long)t->offset, HF_DATA_ALIGN);
    w->type = type;
    w->n_expert = shape[0];
    w->rows = shape[1];
    w->cols = shape[2];
    w->row_bytes = quant_row_bytes(type, shape[2]);
    w->data = t->data;
    return IG_OK;
}

/* Binds row t's experts of layer `layer` (Qwen3MoE: a tensor per expert,
 * "mlp.experts.E.gate_proj.weight"), each [rows, cols] of the first one's
 * float type, read in place: w->expert_data lists them (h->experts). */
static int bind_experts(struct loader *L, const struct model_tensor *row, int64_t layer,
                        struct model_weight *w)
{
    struct hf_folder *h = L->h;
    int64_t shape[3];
    model_weight_shape(row, L->m, layer, shape);
    memset(w, 0, sizeof *w);
    IG_ASSERT(h->n_experts + (size_t)shape[0] <= h->cap_experts);
    const void **ptrs = h->experts + h->n_experts;
    const char *templ = model_tensor_hf_name(row, model_features(&L->m->hp));
    for (int64_t e = 0; e < shape[0]; e++) {
        /* the template's "%lld" is the expert's number */
        const char *at = strstr(templ, "%lld");
        IG_ASSERT(at);
        char name[256];
        snprintf(name, sizeof name, "%slayers.%lld.%.*s%lld%s", L->prefix, (long long)layer,
                 (int)(at - templ), templ, (long long)e, at + 4);
        const struct st_tensor *t = find(h, name);
        if (!t)
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing (config.json says "
                            "num_experts %lld)", L->dir, name, (long long)shape[0]);
        if (t->n_dims != 2 || t->shape[0] != shape[1] || t->shape[1] != shape[2])
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' in '%s' is not [%lld, %lld] "
                            "(config.json's hidden_size and moe_intermediate_size)", L->dir,
                            name, file_of(h, t), (long long)shape[1], (long long)shape[2]);
        bool is_float = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16;
        enum quant_type type = t->dtype == ST_F32 ? QUANT_F32
                             : t->dtype == ST_F16 ? QUANT_F16 : QUANT_BF16;
        if (!is_float || (e > 0 && type != w->type))
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' has dtype %s; the experts of a layer "
                            "are F32, F16 or BF16, all alike", L->dir, name,
                            st_dtype_name(t->dtype));
        if ((uintptr_t)t->data % HF_DATA_ALIGN)
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' starts at data byte %llu, not a "
                            "multiple of %d; ignite reads weights in place and needs them "
                            "aligned", L->dir, name, (unsigned long long)t->offset,
                            HF_DATA_ALIGN);
        w->type = type;
        ptrs[e] = t->data;
    }
    h->n_experts += (size_t)shape[0];
    w->n_expert = shape[0];
    w->rows = shape[1];
    w->cols = shape[2];
    w->row_bytes = quant_row_bytes(w->type, shape[2]);
    w->data = ptrs[0];
    w->expert_data = ptrs;
    return IG_OK;
}

/* ---- gpt-oss's fused experts (models/hf.h: hf_mxfp4_repack) ----------------- */

/* "[a, b, c]" of a stored tensor's shape, for messages. */
static void shape_text(const struct st_tensor *t, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && k < cap - 24; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    snprintf(buf + k, cap - k, "]");
}

/* t is dims[0..n) of dtype (ST_DTYPE_COUNT: a float one); else one line. */
static int check_stored(const struct loader *L, const struct st_tensor *t, const char *name,
                        enum st_dtype dtype, const int64_t *dims, int n, const char *what)
{
    bool ok = t->n_dims == n;
    for (int d = 0; d < n && ok; d++)
        ok = t->shape[d] == dims[d];
    char got[96], want[96] = "[";
    if (!ok) {
        shape_text(t, got, sizeof got);
        size_t k = 1;
        for (int d = 0; d < n; d++)
            k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", d ? ", " : "",
                                  (long long)dims[d]);
        snprintf(want + k, sizeof want - k, "]");
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' in '%s' has shape %s, config.json makes "
                        "it %s (%s)", L->dir, name, file_of(L->h, t), got, want, what);
    }
    bool is_float = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16;
    if (dtype == ST_DTYPE_COUNT ? !is_float : t->dtype != dtype)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' has dtype %s, expected %s", L->dir, name,
                        st_dtype_name(t->dtype),
                        dtype == ST_DTYPE_COUNT ? "F32, F16 or BF16" : st_dtype_name(dtype));
    return IG_OK;
}

/* Binds row's weight of Gemma 4's experts in layer `layer`
 * (Gemma4TextExperts; Qwen3_5MoeExperts alike): gate and up are each expert's first and second
 * halves of experts.gate_up_proj [E, 2 F, H] (its forward's chunk(2)),
 * read in place through w->expert_data; down_proj [E, H, F] is bound
 * whole. */
static int bind_gate_up_halves(struct loader *L, const struct model_tensor *row, int64_t layer,
                               struct model_weight *w)
{
    if (row->role == LAYER_FFN_DOWN_EXPS)
        return bind(L, row, layer, w);
    struct hf_folder *h = L->h;
    int64_t shape[3];
    model_weight_shape(row, L->m, layer, shape);
    memset(w, 0, sizeof *w);
    int64_t E = shape[0], F = shape[1], H = shape[2];
    char name[256];
    hf_name(L, row, layer, name, sizeof name);
    const struct st_tensor *t = find(h, name);
    if (!t)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing", L->dir, name);
    const int64_t dims[3] = {E, 2 * F, H};
    int st = check_stored(L, t, name, ST_DTYPE_COUNT, dims, 3,
                          "num_experts, 2 moe_intermediate_size, hidden_size");
    if (st)
        return st;
    if ((uintptr_t)t->data % HF_DATA_ALIGN)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' starts at data byte %llu, not a multiple "
                        "of %d; ignite reads weights in place and needs them aligned", L->dir,
                        name, (unsigned long long)t->offset, HF_DATA_ALIGN);
    IG_ASSERT(h->n_experts + (size_t)E <= h->cap_experts);
    w->type = t->dtype == ST_F32 ? QUANT_F32 : t->dtype == ST_F16 ? QUANT_F16 : QUANT_BF16;
    w->n_expert = E;
    w->rows = F;
    w->cols = H;
    w->row_bytes = quant_row_bytes(w->type, H);
    const void **ptrs = h->experts + h->n_experts;
    bool up = row->role == LAYER_FFN_UP_EXPS;
    for (int64_t e = 0; e < E; e++)
        ptrs[e] = (const uint8_t *)t->data + (size_t)(2 * e + up) * (size_t)F * w->row_bytes;
    h->n_experts += (size_t)E;
    w->data = ptrs[0];
    w->expert_data = ptrs;
    return IG_OK;
}

/* Binds row's weight of gpt-oss's fused experts in layer `layer`: gate and
 * up are gate_up's even and odd rows, down is down_proj; a matrix from
 * NAME_blocks and NAME_scales (MXFP4, repacked into h->repacked), a bias
 * from NAME_bias (widened to f32 into h->vectors). */
static int bind_fused(struct loader *L, const struct model_tensor *row, int64_t layer,
                      struct model_weight *w)
{
    struct hf_folder *h = L->h;
    int64_t shape[3];
    model_weight_shape(row, L->m, layer, shape);
    memset(w, 0, sizeof *w);
    bool vec = row->kind != TENSOR_MATRIX;
    int64_t E = shape[0], rows = vec ? shape[2] : shape[1], cols = shape[2];
    bool down = row->role == LAYER_FFN_DOWN_EXPS || row->role == LAYER_FFN_DOWN_EXPS_B;
    bool up = row->role == LAYER_FFN_UP_EXPS || row->role == LAYER_FFN_UP_EXPS_B;
    int64_t n_src = down ? rows : 2 * rows, first = up, step = down ? 1 : 2;
    char base[224], name[256];
    hf_name(L, row, layer, base, sizeof base);
    const struct st_tensor *t;
    int st;
    if (vec) {
        if (!(t = find(h, base)))
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing", L->dir, base);
        const int64_t dims[2] = {E, n_src};
        if ((st = check_stored(L, t, base, ST_DTYPE_COUNT, dims, 2, "experts, their rows")))
            return st;
        IG_ASSERT(h->n_vectors + (size_t)(E * rows) <= h->cap_vectors);
        float *dst = h->vectors + h->n_vectors;
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < rows; r++) {
                size_t i = (size_t)(e * n_src + first + r * step);
                const unsigned char *src = (const unsigned char *)t->data;
                float x;
                uint16_t b;
                if (t->dtype == ST_F32) {
                    memcpy(&x, src + 4 * i, 4);
                } else {
                    memcpy(&b, src + 2 * i, 2);
                    x = t->dtype == ST_F16 ? ig_f16_to_f32(b) : ig_bf16_to_f32(b);
                }
                dst[e * rows + r] = x;
            }
        h->n_vectors += (size_t)(E * rows);
        *w = (struct model_weight){.type = QUANT_F32, .n_expert = E, .rows = 1, .cols = rows,
                                   .row_bytes = (size_t)rows * 4, .data = dst};
        return IG_OK;
    }
    if (cols % 32)
        return ig_error(IG_E_MODEL, "'%s': '%s' rows of %lld values are not whole MXFP4 blocks "
                        "of 32", L->dir, base, (long long)cols);
    snprintf(name, sizeof name, "%s_blocks", base);
    const struct st_tensor *blocks = find(h, name);
    if (!blocks)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing (ignite reads gpt-oss's "
                        "experts as MXFP4 _blocks and _scales, as the released checkpoints "
                        "store them)", L->dir, name);
    const int64_t bdims[4] = {E, n_src, cols / 32, 16};
    if ((st = check_stored(L, blocks, name, ST_U8, bdims, 4,
                           "experts, rows, blocks of 32, 16 bytes of E2M1 pairs")))
        return st;
    snprintf(name, sizeof name, "%s_scales", base);
    const struct st_tensor *scales = find(h, name);
    if (!scales)
        return ig_error(IG_E_MODEL, "'%s': tensor '%s' is missing (the E8M0 scales of '%s_blocks')",
                        L->dir, name, base);
    const int64_t sdims[3] = {E, n_src, cols / 32};
    if ((st = check_stored(L, scales, name, ST_U8, sdims, 3,
                           "experts, rows, an E8M0 scale per block of 32")))
        return st;
    size_t row_bytes = quant_row_bytes(QUANT_MXFP4, cols);
    void **list = realloc(h->repacked, (size_t)(h->n_repacked + 1) * sizeof *list);
    if (list)
        h->repacked = list;
    uint8_t *out = list ? malloc((size_t)(E * rows) * row_bytes) : NULL;
    if (!out)
        return ig_error(IG_E_NOMEM, "out of memory repacking '%s' of %s", base, L->dir);
    h->repacked[h->n_repacked++] = out;
    hf_mxfp4_repack(blocks->data, scales->data, E, n_src, rows, first, step, cols, out);
    *w = (struct model_weight){.type = QUANT_MXFP4, .n_expert = E, .rows = rows, .cols = cols,
                               .row_bytes = row_bytes, .data = out};
    return IG_OK;
}

/* Gemma 4's per-layer embeddings (hidden_size_per_layer_input) and experts
 * (enable_moe_block) are on where config.json says so; a folder that holds
 * their tensors while config.json says none is refused, not run without
 * those weights (the GGUF loader's rule: models/model.c). */
static int keyed_feature_off(const struct loader *L)
{
    const struct model_hparams *hp = &L->m->hp;
    const struct model_arch_info *ai = model_arch_of(hp->arch_id);
    unsigned have = model_features(hp);
    unsigned off = ((ai && ai->per_layer_shapes ? MODEL_FEAT_PLE : 0u) |
                    (ai && ai->moe_optional ? MODEL_FEAT_MOE : 0u)) & ~have;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, L->m, MODEL_TENSORS_ALL | MODEL_TENSORS_ABSENT);
         off && model_tensors_next(&it);) {
        unsigned f = it.t->feature & off;
        if (!f || it.layer > 0 || it.t->n_expert == TENSOR_DIM_EXPERT)
            continue; /* layer 0's router (or the model's tensor) says it */
        const char *n = model_tensor_hf_name(it.t, have | f | (f & MODEL_FEAT_MOE ?
                                                               MODEL_FEAT_MOE_MLP : 0u));
        char name[256];
        if (it.t->scope == TENSOR_PER_LAYER)
            snprintf(name, sizeof name, "%slayers.0.%s", L->prefix, n ? n : "");
        else
            snprintf(name, sizeof name, "%s%s", L->prefix, n ? n : "");
        if (n && find(L->h, name))
            return ig_error(IG_E_MODEL, "'%s': tensor '%s' is in the folder, but config.json "
                            "says the model has no %s (%s)", L->dir, name,
                            model_feature_name(f & MODEL_FEAT_PLE ? MODEL_FEAT_PLE
                                                                  : MODEL_FEAT_MOE),
                            f & MODEL_FEAT_PLE ? "hidden_size_per_layer_input"
                                               : "enable_moe_block");
    }
    return IG_OK;
}

/* Binds every weight the model has (config.json's features), in the table's
 * order; the output head of tied embeddings is token_embd's (a copy of
 * lm_head some folders keep is not read). */
static int bind_weights(struct loader *L)
{
    struct model *m = L->m;
    char emb[128];
    const struct model_tensor *e = model_tensor_row(TENSOR_PER_MODEL, MODEL_TOK_EMBD);
    hf_name(L, e, -1, emb, sizeof emb);
    if (L->arch->prefix_alt && !find(L->h, emb)) {
        L->prefix = L->arch->prefix_alt;
        L->beside = L->arch->beside_alt;
        hf_name(L, e, -1, emb, sizeof emb);
        if (!find(L->h, emb)) { /* neither: name the first layout's in the message */
            L->prefix = L->arch->prefix;
            L->beside = L->arch->beside;
        }
    }
    if (m->hp.has_moe && !m->hp.has_moe_bias && !m->hp.has_moe_mlp) {
        char fused[256]; /* (every layer has experts: hf_config's read_moe) */
        snprintf(fused, sizeof fused, "%slayers.0." HF_FUSED_GATE_UP, L->prefix);
        L->fused_experts = find(L->h, fused) != NULL;
    }
    struct model_tensor_it it;
    int st;
    if ((st = keyed_feature_off(L)))
        return st;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        /* experts: a tensor each ("%lld" in the name), or fused (gpt-oss;
         * Gemma 4's and Qwen3.5-MoE's gate|up halves) */
        bool per_expert = !L->fused_experts &&
                          strstr(model_tensor_hf_name(it.t, model_features(&m->hp)), "%lld");
        if ((st = (it.t->n_expert != TENSOR_DIM_EXPERT   ? bind
                   : per_expert                            ? bind_experts
                   : m->hp.has_moe_mlp || L->fused_experts ? bind_gate_up_halves
                                                           : bind_fused)(
                 L, it.t, it.layer, model_weight_at(m, it.t, it.layer))))
            return st;
    }
    model_tensors_tie(m);
    return IG_OK;
}

/* Gemma 4's layers (hf_config's gemma4 facts): the full ones' KV heads
 * and V = K, the shared-KV layers' source (transformers' kv_sharing_modes:
 * the last earlier layer of their kind with K/V of its own) and FFN width. */
static int gemma4_layers(struct loader *L, const struct hf_config *c)
{
    struct model *m = L->m;
    int64_t n_own = m->hp.n_layer - m->hp.n_kv_shared;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *Ly = &m->layers[il];
        bool local = Ly->window > 0;
        if (!local)
            Ly->n_head_kv = c->gemma4.n_kv_global;
        if (il < n_own) {
            Ly->v_is_k = c->gemma4.k_eq_v && !local;
            continue;
        }
        int64_t src = n_own - 1;
        while (src >= 0 && (m->layers[src].window > 0) != local)
            src--;
        if (src < 0)
            return ig_error(IG_E_MODEL, "'%s': layer %lld shares the K/V of an earlier %s layer "
                            "(num_kv_shared_layers %lld), and none of the first %lld is one",
                            L->dir, (long long)il, local ? "sliding" : "full",
                            (long long)m->hp.n_kv_shared, (long long)n_own);
        Ly->kv_shared = true;
        Ly->kv_source = src;
        Ly->n_ff = c->gemma4.n_ff_shared;
    }
    for (int64_t il = 0; il < m->hp.n_layer && m->hp.has_moe_mlp; il++) {
        struct model_layer *Ly = &m->layers[il]; /* the experts beside the dense MLP */
        Ly->ffn = LAYER_FFN_MOE;
        Ly->n_ff_mlp = Ly->n_ff;
        Ly->n_ff = m->hp.n_ff_exp;
        Ly->n_expert = m->hp.n_expert;
        Ly->n_expert_used = m->hp.n_expert_used;
        Ly->moe_norm_topk = m->hp.moe_norm_topk;
    }
    /* proportional RoPE: the pairs past rot_pairs turn by 0 (1e30 divides
     * their angle, as the GGUF's rope_freqs) */
    int64_t half = m->hp.n_rot / 2;
    if (c->gemma4.rot_pairs >= half)
        return IG_OK;
    if (!(L->h->rope_freqs = malloc((size_t)half * sizeof *L->h->rope_freqs)))
        return ig_error(IG_E_NOMEM, "out of memory loading %s", L->dir);
    for (int64_t i = 0; i < half; i++)
        L->h->rope_freqs[i] = i < c->gemma4.rot_pairs ? 1.0f : 1e30f;
    m->hp.rope[MODEL_ROPE_GLOBAL].freq_factors = L->h->rope_freqs;
    return IG_OK;
}

/* ---- the other files ---------------------------------------------------------- */

static int read_chat_template(struct loader *L)
{
    cJSON *tc = NULL;
    int st = load_optional_json(L->dir, "tokenizer_config.json", &tc);
    if (st)
        return st;
    const char *t = tc ? hf_chat_template(tc) : NULL;
    if (t && !(L->h->chat_template = strdup(t)))
        st = ig_error(IG_E_NOMEM, "out of memory loading %s", L->dir);
    cJSON_Delete(tc);
    if (st || L->h->chat_template)
        return st;
    /* Newer transformers save the template as a file of its own. */
    char p[4352];
    join(p, sizeof p, L->dir, "chat_template.jinja");
    if (!exists(p))
        return IG_OK;
    struct ig_mapped_file f;
    if ((st = ig_map_file(p, &f)))
        return st;
    if ((L->h->chat_template = malloc(f.size + 1))) {
        if (f.size)
            memcpy(L->h->chat_template, f.data, f.size);
        L->h->chat_template[f.size] = '\0';
    } else {
        st = ig_error(IG_E_NOMEM, "out of memory loading %s", p);
    }
    ig_unmap_file(&f);
    return st;
}

static int read_generation(struct loader *L)
{
    cJSON *g = NULL;
    int st = load_optional_json(L->dir, "generation_config.json", &g);
    if (st == IG_OK && g) {
        char p[4352];
        join(p, sizeof p, L->dir, "generation_config.json");
        st = hf_parse_generation(p, g, &L->m->sampling);
    }
    cJSON_Delete(g);
    return st;
}

int hf_load(const char *dir, struct model *m)
{
    struct hf_folder *h = calloc(1, sizeof *h);
    if (!h)
        return ig_error(IG_E_NOMEM, "out of memory loading %s", dir);
    m->hf = h;
    cJSON *cfg = NULL;
    struct hf_config c;
    char p[4352];
    join(p, sizeof p, dir, "config.json");
    int st = load_required_json(dir, "config.json", &cfg);
    if (st == IG_OK)
        st = hf_parse_config(p, cfg, &c);
    cJSON_Delete(cfg);
    if (st)
        return st;
    m->hp = c.hp;
    if (c.llama3.factor > 0) {
        if (!(h->rope_freqs = malloc((size_t)(m->hp.n_rot / 2 + 1) * sizeof *h->rope_freqs)))
            return ig_error(IG_E_NOMEM, "out of memory loading %s", dir);
        ops_rope_llama3_factors(m->hp.rope[MODEL_ROPE_GLOBAL].base, m->hp.n_rot,
                                c.llama3.factor, c.llama3.low, c.llama3.high,
                                c.llama3.orig_ctx, h->rope_freqs);
        m->hp.rope[MODEL_ROPE_GLOBAL].freq_factors = h->rope_freqs;
    }
    struct loader L = {dir, m, h, c.arch, c.arch->prefix, c.arch->beside, false};
    if ((st = open_weights(&L)))
        return st;
    /* Each layer needs several tensors: refuse absurd counts before allocating. */
    if (m->hp.n_layer > m->n_tensors)
        return ig_error(IG_E_MODEL, "'%s': num_hidden_layers %lld but the folder holds %lld "
                        "tensors", p, (long long)m->hp.n_layer, (long long)m->n_tensors);
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers)
        return ig_error(IG_E_NOMEM, "out of memory loading %s", dir);
    /* each layer's kind and sizes, which its weights' shapes are checked against */
    const struct model_arch_info *ai = model_arch_of(m->hp.arch_id);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *Ly = &m->layers[il];
        model_arch_layer_at(ai, &m->hp, c.local[il / 8] >> (il % 8) & 1,
                            c.recurrent[il / 8] >> (il % 8) & 1, Ly);
        /* a folder keeps Qwen3.5's value heads grouped by key head (llama.cpp's
         * converter tiles them): the DeltaNet pairs them so */
        Ly->dn_grouped = Ly->mixer == LAYER_MIXER_DELTANET;
    }
    if (ai->per_layer_shapes && (st = gemma4_layers(&L, &c)))
        return st;
    /* Room for every norm and bias in f32, in case all are stored narrower. */
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
        if (it.t->kind != TENSOR_MATRIX) {
            int64_t shape[3];
            model_weight_shape(it.t, m, it.layer, shape);
            h->cap_vectors += (size_t)(shape[0] * shape[1] * shape[2]);
        } else if (it.t->n_expert == TENSOR_DIM_EXPERT && !HF_MXFP4_EXPERTS(c.arch)) {
            h->cap_experts += (size_t)model_layer_dim(m, it.layer, TENSOR_DIM_EXPERT);
        }
    if (!(h->vectors = malloc(h->cap_vectors * sizeof *h->vectors)) ||
        !(h->experts = malloc((h->cap_experts + 1) * sizeof *h->experts)))
        return ig_error(IG_E_NOMEM, "out of memory loading %s", dir);
    if ((st = bind_weights(&L)) || (st = read_chat_template(&L)) || (st = read_generation(&L)))
        return st;
    return IG_OK;
}

void hf_folder_free(struct hf_folder *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_shards; i++) {
        st_close(h->shards[i]);
        free(h->shard_names[i]);
    }
    free(h->shards);
    free(h->shard_names);
    free(h->by_name);
    free(h->vectors);
    free(h->experts);
    free(h->chat_template);
    free(h->rope_freqs);
    for (int64_t i = 0; i < h->n_repacked; i++)
        free(h->repacked[i]);
    free(h->repacked);
    free(h);
}
