/* cli/cmd_info.c: `ignite info`: loads and validates a model (a GGUF file or
 * a Hugging Face folder) and describes it (hyper-parameters, the
 * architecture's features: RoPE scaling, sliding window, norms, activation;
 * tokenizer metadata, tensors by type, KV cache size, the weights' bytes
 * on a CUDA device in either --gpu-weights mode) as text or, with
 * --json, as one JSON object on stdout, the same keys for both formats. A
 * GGUF file of an architecture `run` does not know is described as far as
 * the file goes (metadata, tokenizer, tensors) and says so, rather than
 * refused. Loading and validation are models/'s and tokenizer/'s, the
 * device plan backend/'s; this file only formats. Covered by
 * tests/models/test_info.py, test_gguf_malformed.py, test_arch_load.py,
 * test_hf_folder.py and tests/cli/test_args.sh (write errors). */
#include "cli/cli.h"

#include "backend/tp.h"

#include "backend/backend.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { OPT_JSON = 256 };

static const struct cli_option info_options[] = {
    {"model", 'm', required_argument, "PATH", "GGUF model file or Hugging Face model folder", "the fetched SmolLM2-135M"},
    {"json", OPT_JSON, no_argument, NULL, "print one JSON object instead of text", NULL},
    {"help", 'h', no_argument, NULL, "show this help and exit", NULL},
    {"version", 'V', no_argument, NULL, "show the version and exit", NULL},
    {NULL, 0, 0, NULL, NULL, NULL},
};

#define N_TYPE_IDS 64

/* What info prints beyond struct model: metadata the tokenizer owns and
 * per-type tensor totals. Strings are NUL-terminated copies. */
struct info {
    char arch[64];
    char name[256];
    char tok_model[64];
    char tok_pre[64];
    int64_t bos, eos;     /* -1 when absent */
    int64_t n_tokens;     /* tokenizer.ggml.tokens entries, -1 when absent */
    bool chat_template;
    int64_t n_params;     /* elements over all tensors */
    int64_t n_tensors;
    size_t file_bytes;
    char format[48];      /* "GGUF v3" or "safetensors, 2 files" */
    char file_type[48];   /* as llama.cpp names it ("Q4_K - Medium"); "" when unknown */
    int n_files;
    int64_t type_count[N_TYPE_IDS];
    int64_t type_bytes[N_TYPE_IDS];
    struct kv_memory *kv[KV_N_DTYPES]; /* the KV cache's groups with elements of each
                              * enum kv_dtype (kv_memory_of), owned; NULL for an unknown
                              * architecture, and for a quantized type where a
                              * head dim is not whole blocks of it */
};

static void copy_str(const struct gguf_file *g, const char *key, char *buf, size_t cap)
{
    struct gguf_str s;
    buf[0] = '\0';
    if (!gguf_get_str(g, key, &s))
        return;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    for (size_t i = 0; i < n; i++) { /* one line per field and no terminal escapes */
        unsigned char c = (unsigned char)s.ptr[i];
        buf[i] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    buf[n] = '\0';
}

static int64_t get_id(const struct gguf_file *g, const char *key)
{
    uint64_t v;
    return gguf_get_u64(g, key, &v) && v <= INT32_MAX ? (int64_t)v : -1;
}

/* A folder's tokenizer facts come from its built vocabulary (tokenizer.json
 * has no such summary keys); its name is the folder's. */
static int gather_folder(const struct model *m, struct info *in)
{
    const char *end = m->path + strlen(m->path);
    while (end > m->path + 1 && end[-1] == '/')
        end--;
    const char *base = end;
    while (base > m->path && base[-1] != '/')
        base--;
    snprintf(in->name, sizeof in->name, "%.*s", (int)(end - base), base);
    struct tok_vocab *v;
    int st = tok_load_model(m, &v);
    if (st)
        return st;
    snprintf(in->tok_model, sizeof in->tok_model, "%s", tok_model_name(tok_model_of(v)));
    if (tok_model_of(v) == TOK_MODEL_BPE)
        snprintf(in->tok_pre, sizeof in->tok_pre, "%s", tok_pre_name(tok_pre_of(v)));
    in->bos = tok_bos(v);
    in->eos = tok_eos(v);
    in->n_tokens = tok_n_tokens(v);
    tok_vocab_free(v);
    return IG_OK;
}

/* What a GGUF file's metadata says, whether ignite runs its architecture
 * or not. */
static void gather_gguf(const struct gguf_file *g, struct info *in)
{
    snprintf(in->format, sizeof in->format, "GGUF v%u", g->version);
    in->n_files = 1;
    copy_str(g, "general.architecture", in->arch, sizeof in->arch);
    copy_str(g, "general.name", in->name, sizeof in->name);
    copy_str(g, "tokenizer.ggml.model", in->tok_model, sizeof in->tok_model);
    copy_str(g, "tokenizer.ggml.pre", in->tok_pre, sizeof in->tok_pre);
    in->bos = get_id(g, "tokenizer.ggml.bos_token_id");
    in->eos = get_id(g, "tokenizer.ggml.eos_token_id");
    const struct gguf_kv *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
    in->n_tokens = tok ? (int64_t)tok->arr_n : -1;
    /* an empty template counts, as the key is there */
    in->chat_template |= gguf_find_kv(g, "tokenizer.chat_template") != NULL;
    uint64_t ft;
    if (gguf_get_u64(g, "general.file_type", &ft))
        snprintf(in->file_type, sizeof in->file_type, "%s", quant_file_type_name(ft));
}

/* A GGUF file of an architecture ignite does not run: no struct model. */
static void gather_unknown(const struct gguf_file *g, struct info *in)
{
    memset(in, 0, sizeof *in);
    gather_gguf(g, in);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        uint32_t t = g->tensors[i].type; /* the parser accepts known ids only */
        IG_ASSERT(t < N_TYPE_IDS);
        in->type_count[t]++;
        in->type_bytes[t] += (int64_t)g->tensors[i].nbytes;
        in->n_params += g->tensors[i].n_elems;
    }
    in->n_tensors = g->n_tensors;
    in->file_bytes = g->file_size;
}

static int gather_model(const struct model *m, struct info *in)
{
    const char *tmpl;
    size_t len;
    in->chat_template = model_chat_template(m, &tmpl, &len);
    model_tensor_types(m, in->type_count, in->type_bytes, N_TYPE_IDS);
    in->n_params = m->n_params;
    in->n_tensors = m->n_tensors;
    in->file_bytes = m->file_bytes;
    snprintf(in->arch, sizeof in->arch, "%s", m->hp.arch);
    snprintf(in->file_type, sizeof in->file_type, "%s", model_type_name(m));
    if (m->gguf) {
        gather_gguf(m->gguf, in);
        snprintf(in->arch, sizeof in->arch, "%s", m->hp.arch);
        return IG_OK;
    }
    in->n_files = m->hf ? model_folder_files(m) : 0;
    snprintf(in->format, sizeof in->format, "safetensors, %d file%s", in->n_files,
             in->n_files == 1 ? "" : "s");
    return gather_folder(m, in);
}

static int gather(const struct model *m, struct info *in)
{
    memset(in, 0, sizeof *in);
    int st = gather_model(m, in);
    bool whole_blocks = true; /* the quantized types' rows */
    for (int64_t l = 0; m->layers && l < m->hp.n_layer; l++)
        whole_blocks = whole_blocks && m->layers[l].head_dim % KV_QBLOCK == 0;
    for (int t = 0; st == IG_OK && t < KV_N_DTYPES; t++)
        if (!kv_dtype_quantized((enum kv_dtype)t) || whole_blocks)
            st = kv_memory_of(m, (enum kv_dtype)t, (enum kv_dtype)t, &in->kv[t]);
    return st;
}

static void info_free(struct info *in)
{
    for (int t = 0; t < KV_N_DTYPES; t++)
        kv_memory_free(in->kv[t]);
}

static const char *scaling_name(enum rope_scaling s)
{
    switch (s) {
    case ROPE_SCALING_LINEAR: return "linear";
    case ROPE_SCALING_YARN: return "yarn";
    case ROPE_SCALING_LONGROPE: return "longrope";
    default: return "none";
    }
}

static const char *act_name(enum model_act a)
{
    return a == MODEL_ACT_GELU_TANH ? "gelu_tanh" : a == MODEL_ACT_SWIGLU_OAI ? "swiglu_oai" : "silu";
}

static const char *rope_style_name(enum rope_style s)
{
    return s == ROPE_ADJACENT ? "adjacent" : "half-split";
}

static const char *or_dash(const char *s)
{
    return *s ? s : "-";
}

/* The lines every model has, whether ignite runs its architecture or not. */
static void print_file_text(const char *path, const struct info *in, bool supported)
{
    printf("file            %s\n", path);
    printf("file size       %zu bytes (%.1f MiB), %s\n", in->file_bytes,
           (double)in->file_bytes / (1 << 20), in->format);
    if (supported)
        printf("architecture    %s\n", or_dash(in->arch));
    else
        printf("architecture    %s (ignite run does not support it; supported: %s)\n",
               or_dash(in->arch), model_arch_names());
    printf("name            %s\n", or_dash(in->name));
    printf("parameters      %lld (%.1f M)\n", (long long)in->n_params, (double)in->n_params / 1e6);
    printf("file type       %s\n", or_dash(in->file_type));
}

static void print_tokenizer_text(const struct info *in)
{
    char bos[24] = "-", eos[24] = "-";
    if (in->bos >= 0)
        snprintf(bos, sizeof bos, "%lld", (long long)in->bos);
    if (in->eos >= 0)
        snprintf(eos, sizeof eos, "%lld", (long long)in->eos);
    printf("tokenizer       %s, pre-tokenizer %s\n", or_dash(in->tok_model), or_dash(in->tok_pre));
    printf("BOS / EOS       %s / %s\n", bos, eos);
    printf("chat template   %s\n", in->chat_template ? "yes" : "no");
    printf("tensors         %lld\n", (long long)in->n_tensors);
    for (uint32_t t = 0; t < N_TYPE_IDS; t++)
        if (in->type_count[t])
            printf("  %-8s      %lld tensors, %lld bytes\n", quant_type_name(t),
                   (long long)in->type_count[t], (long long)in->type_bytes[t]);
}

/* What the architecture adds to the Llama block, one line each. */
static void print_features_text(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_rope *g = &hp->rope[MODEL_ROPE_GLOBAL];
    printf("rope scaling    %s", scaling_name(g->scaling));
    if (g->scaling != ROPE_SCALING_NONE)
        printf(", factor %g", g->factor);
    if (g->scaling == ROPE_SCALING_YARN)
        printf(", original context %lld", (long long)g->orig_ctx);
    if (g->freq_factors)
        printf(", per-dimension factors (rope_freqs)");
    printf("\n");
    if (hp->n_swa_layers)
        printf("sliding window  %lld positions on %lld of %lld layers, their rope base %g\n",
               (long long)hp->n_swa, (long long)hp->n_swa_layers, (long long)hp->n_layer,
               hp->rope[MODEL_ROPE_LOCAL].base);
    else
        printf("sliding window  none\n");
    if (hp->has_deltanet) /* a hybrid: every full_attn_every-th layer attention */
        printf("gated DeltaNet  %lld key / %lld value heads of %lld, conv kernel %lld, "
               "attention every %lld layers (gated)\n", (long long)hp->dn_k_heads,
               (long long)hp->dn_v_heads, (long long)hp->dn_head_dim, (long long)hp->dn_conv,
               (long long)hp->full_attn_every);
    printf("norms           RMSNorm%s%s\n", hp->has_qk_norm ? ", Q/K per head" : "",
           hp->has_post_norms ? ", after attention and after the FFN" : "");
    printf("FFN activation  %s\n", hp->ffn_act == MODEL_ACT_GELU_TANH    ? "GELU (tanh), GeGLU"
                                   : hp->ffn_act == MODEL_ACT_SWIGLU_OAI ? "SwiGLU, clamped at 7 (gpt-oss)"
                                                                         : "SiLU, SwiGLU");
    printf("attention scale 1/sqrt(%g)\n", 1.0 / (hp->attn_scale * hp->attn_scale));
    if (hp->embd_scale != 1.0)
        printf("embedding scale %g\n", hp->embd_scale);
    if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        printf("soft-capping    attention %g, logits %g\n", hp->attn_softcap, hp->final_softcap);
}

/* The layers of group g as ranges: "0-4, 6-10, 12". */
static void print_layer_ranges(const struct kv_memory *mem, int64_t g)
{
    const char *sep = "";
    for (int64_t l = 0; l < mem->n_layer; l++) {
        if (mem->layers[l].group != g || (l > 0 && mem->layers[l - 1].group == g))
            continue;
        int64_t end = l;
        while (end + 1 < mem->n_layer && mem->layers[end + 1].group == g)
            end++;
        if (end > l)
            printf("%s%lld-%lld", sep, (long long)l, (long long)end);
        else
            printf("%s%lld", sep, (long long)l);
        sep = ", ";
    }
}

/* The window rule (kvcache.h) for steps of INFO_WINDOW_ROWS rows (run's
 * default --chunk): the sliding-window layers' blocks a sequence holds at
 * most, within the training context. 0 without such layers. */
#define INFO_WINDOW_ROWS 512
static int64_t info_window_cap(const struct model *m, const struct kv_memory *mem)
{
    int64_t n_ctx = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : INFO_WINDOW_ROWS;
    return kv_memory_window_cap(mem, n_ctx, INFO_WINDOW_ROWS);
}

/* K and V bytes a token of elements of `elem` bytes if every layer kept its
 * own (the shared-KV layers too): what sharing saves, for comparison.
 * 0 where no layer shares. */
static size_t kv_unshared_bytes(const struct model *m, size_t elem)
{
    size_t bytes = 0;
    bool shares = false;
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        shares |= L->kv_shared;
        if (L->mixer == LAYER_MIXER_ATTENTION)
            bytes += 2 * (size_t)(L->n_head_kv * L->head_dim) * elem;
    }
    return shares ? bytes : 0;
}

/* Where attention layers differ in shape (gemma4): each size's range over
 * them, the lines above giving the file's (largest) values. Nothing
 * otherwise. */
static void print_layer_ranges_text(const struct model *m)
{
    int64_t lo[4], hi[4];
    bool first = true;
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if (L->mixer != LAYER_MIXER_ATTENTION) /* a DeltaNet layer has no heads of this kind */
            continue;
        int64_t v[4] = {L->n_head, L->n_head_kv, L->head_dim,
                        L->ffn == LAYER_FFN_MOE && L->n_ff_mlp ? L->n_ff_mlp : L->n_ff};
        for (int i = 0; i < 4; i++) {
            lo[i] = first || v[i] < lo[i] ? v[i] : lo[i];
            hi[i] = first || v[i] > hi[i] ? v[i] : hi[i];
        }
        first = false;
    }
    if (first || (lo[0] == hi[0] && lo[1] == hi[1] && lo[2] == hi[2] && lo[3] == hi[3]))
        return;
    static const char *const names[4] = {"heads", "KV heads", "head dim", "FFN size"};
    printf("per layer      ");
    for (int i = 0; i < 4; i++)
        if (lo[i] == hi[i])
            printf("%s %s %lld", i ? "," : "", names[i], (long long)lo[i]);
        else
            printf("%s %s %lld-%lld", i ? "," : "", names[i], (long long)lo[i], (long long)hi[i]);
    printf("\n");
}

/* One line a group of the KV cache: its kind, layers and bytes (a token's
 * and a block's for the paged kinds, a sequence's for recurrent state). */
static void print_kv_groups_text(const struct info *in)
{
    const struct kv_memory *f32 = in->kv[0], *f16 = in->kv[1];
    for (int64_t g = 0; g < f32->n_groups; g++) {
        const struct kv_group *G = &f32->groups[g], *H = &f16->groups[g];
        printf("KV group        %s", kv_kind_name(G->kind));
        if (G->kind == KV_WINDOW)
            printf(" %lld", (long long)G->window);
        printf(", %lld layer%s (", (long long)G->n_layers, G->n_layers == 1 ? "" : "s");
        print_layer_ranges(f32, g);
        if (G->kind == KV_FULL || G->kind == KV_WINDOW)
            printf("): %zu bytes/token f32, %zu f16; %zu and %zu bytes a block of %d\n",
                   G->block_bytes / KV_BLOCK, H->block_bytes / KV_BLOCK, G->block_bytes,
                   H->block_bytes, KV_BLOCK);
        else if (G->kind == KV_RECURRENT)
            printf("): %zu bytes/sequence, a checkpoint of %zu bytes once\n", G->state_bytes,
                   G->ckpt_bytes); /* the pool's one (docs/kvcache.md) */
        else
            printf("): no memory of their own\n");
    }
}

static void print_text(const struct model *m, const struct info *in)
{
    const struct model_hparams *hp = &m->hp;
    print_file_text(m->path, in, true);
    printf("layers          %lld\n", (long long)hp->n_layer);
    printf("embedding       %lld\n", (long long)hp->n_embd);
    printf("heads           %lld, KV heads %lld\n", (long long)hp->n_head,
           (long long)hp->n_head_kv);
    printf("head dim        %lld\n", (long long)hp->head_dim);
    if (hp->n_ff)
        printf("FFN size        %lld\n", (long long)hp->n_ff);
    else /* qwen35moe's files state no dense width */
        printf("FFN size        none (experts only)\n");
    print_layer_ranges_text(m);
    if (hp->has_moe) {
        int64_t active;
        size_t bytes;
        model_active_size(m, &active, &bytes);
        printf("experts         %lld, %lld used a token, FFN size %lld each\n",
               (long long)hp->n_expert, (long long)hp->n_expert_used, (long long)hp->n_ff_exp);
        if (hp->has_moe_shexp)
            printf("shared expert   FFN size %lld, gated\n", (long long)hp->n_ff_shexp);
        printf("active          %lld parameters a token (%.1f M); %zu bytes of weights read "
               "a token (%.2f GiB)\n", (long long)active, (double)active / 1e6, bytes,
               (double)bytes / (1 << 30));
    } else { /* what a decode step streams: tok/s x these bytes is the bandwidth it uses */
        int64_t active;
        size_t bytes;
        model_active_size(m, &active, &bytes);
        printf("weights read    %zu bytes a token (%.2f GiB): every weight, a row of each "
               "looked-up table\n", bytes, (double)bytes / (1 << 30));
    }
    printf("vocab size      %lld\n", (long long)hp->n_vocab);
    printf("context length  %lld\n", (long long)hp->n_ctx_train);
    printf("rope            base %g, style %s, %lld dims\n", hp->rope_base,
           rope_style_name(hp->rope_style), (long long)hp->n_rot);
    print_features_text(m);
    printf("norm epsilon    %g\n", hp->norm_eps);
    printf("embeddings      %s\n", hp->tied_embeddings ? "tied (output = token_embd)" : "separate output");
    printf("QKV biases      %s\n", hp->has_qkv_bias ? "yes" : "no");
    print_tokenizer_text(in);
    printf("KV cache        %zu bytes/token f32, %zu bytes/token f16",
           in->kv[0]->block_bytes / KV_BLOCK, in->kv[1]->block_bytes / KV_BLOCK);
    for (int t = KV_Q8_0; t < KV_N_DTYPES; t++)
        if (in->kv[t])
            printf(", %zu %s", in->kv[t]->block_bytes / KV_BLOCK, kv_dtype_name((enum kv_dtype)t));
    printf("\n");
    if (kv_unshared_bytes(m, 4))
        printf("KV unshared     %zu bytes/token f32, %zu f16 (the same layers, each with K/V "
               "of its own)\n", kv_unshared_bytes(m, 4), kv_unshared_bytes(m, 2));
    int64_t wcap = info_window_cap(m, in->kv[0]);
    if (wcap) /* the window rule: the full layers grow with the context, the others not;
               * the CPU's cache and the CUDA pool (f16) alike */
        printf("KV windowed     %zu bytes/token f32, %zu f16 (the full-attention layers), and "
               "at most %.2f MiB f32, %.2f f16 a sequence for the sliding-window layers (%lld "
               "blocks: window %lld, steps of %d rows)\n",
               (in->kv[0]->block_bytes - in->kv[0]->window_bytes) / KV_BLOCK,
               (in->kv[1]->block_bytes - in->kv[1]->window_bytes) / KV_BLOCK,
               (double)wcap * (double)in->kv[0]->window_bytes / 1048576.0,
               (double)wcap * (double)in->kv[1]->window_bytes / 1048576.0, (long long)wcap,
               (long long)in->kv[0]->window_max, INFO_WINDOW_ROWS);
    print_kv_groups_text(in);
    int64_t layer;
    const char *missing = backend_gpu_missing(m, &layer);
    if (missing) {
        printf("CUDA weights    none: the CUDA backend does not run %s yet\n", missing);
        return;
    }
    size_t native = backend_gpu_weight_bytes(m, BACKEND_GPU_NATIVE);
    size_t f16 = backend_gpu_weight_bytes(m, BACKEND_GPU_F16);
    printf("CUDA weights    native %zu bytes (%.2f GiB), f16 %zu bytes (%.2f GiB)\n", native,
           (double)native / (1 << 30), f16, (double)f16 / (1 << 30));
}

/* v as a JSON string: a file's metadata (or a path) need not be UTF-8, so
 * bad bytes become U+FFFD. Empty (or out of memory) gives null. */
static void add_str_or_null(cJSON *o, const char *k, const char *v)
{
    char *u = *v ? cli_utf8_repair(v, strlen(v)) : NULL;
    if (u)
        cJSON_AddStringToObject(o, k, u);
    else
        cJSON_AddNullToObject(o, k);
    free(u);
}

static void add_id_or_null(cJSON *o, const char *k, int64_t v)
{
    if (v >= 0)
        cJSON_AddNumberToObject(o, k, (double)v);
    else
        cJSON_AddNullToObject(o, k);
}

/* The architecture's features (what print_features_text says) as an object. */
static void add_features_json(cJSON *o, const struct model_hparams *hp)
{
    const struct model_rope *g = &hp->rope[MODEL_ROPE_GLOBAL];
    cJSON *f = cJSON_AddObjectToObject(o, "features");
    cJSON_AddStringToObject(f, "rope_scaling", scaling_name(g->scaling));
    cJSON_AddNumberToObject(f, "rope_scaling_factor", g->factor);
    cJSON_AddNumberToObject(f, "rope_original_context", (double)g->orig_ctx);
    cJSON_AddBoolToObject(f, "rope_freqs", g->freq_factors != NULL);
    cJSON_AddNumberToObject(f, "sliding_window", (double)hp->n_swa);
    cJSON_AddNumberToObject(f, "sliding_window_layers", (double)hp->n_swa_layers);
    if (hp->n_swa_layers)
        cJSON_AddNumberToObject(f, "rope_base_local", hp->rope[MODEL_ROPE_LOCAL].base);
    else
        cJSON_AddNullToObject(f, "rope_base_local");
    cJSON_AddBoolToObject(f, "qk_norm", hp->has_qk_norm);
    if (hp->has_deltanet) {
        cJSON *d = cJSON_AddObjectToObject(f, "deltanet");
        cJSON_AddNumberToObject(d, "key_heads", (double)hp->dn_k_heads);
        cJSON_AddNumberToObject(d, "value_heads", (double)hp->dn_v_heads);
        cJSON_AddNumberToObject(d, "head_dim", (double)hp->dn_head_dim);
        cJSON_AddNumberToObject(d, "conv_kernel", (double)hp->dn_conv);
        cJSON_AddNumberToObject(d, "full_attention_interval", (double)hp->full_attn_every);
    }
    cJSON_AddBoolToObject(f, "post_norms", hp->has_post_norms);
    cJSON_AddStringToObject(f, "ffn_activation", act_name(hp->ffn_act));
    cJSON_AddNumberToObject(f, "embedding_scale", hp->embd_scale);
    cJSON_AddNumberToObject(f, "attention_scale", hp->attn_scale);
    cJSON_AddNumberToObject(f, "attn_logit_softcapping", hp->attn_softcap);
    cJSON_AddNumberToObject(f, "final_logit_softcapping", hp->final_softcap);
}

static const char *kv_kind_json(enum kv_kind kind)
{
    switch (kind) {
    case KV_FULL: return "full";
    case KV_WINDOW: return "sliding_window";
    case KV_SHARED: return "shared";
    case KV_RECURRENT: return "recurrent";
    }
    return "unknown";
}

/* "kv_groups": the KV cache's groups: kind, window, layers, bytes a token
 * and a block (paged kinds) or a sequence (recurrent state). */
static void add_kv_groups_json(cJSON *o, const struct info *in)
{
    const struct kv_memory *f32 = in->kv[0], *f16 = in->kv[1];
    cJSON *arr = cJSON_AddArrayToObject(o, "kv_groups");
    for (int64_t g = 0; g < f32->n_groups; g++) {
        const struct kv_group *G = &f32->groups[g], *H = &f16->groups[g];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, e);
        cJSON_AddStringToObject(e, "kind", kv_kind_json(G->kind));
        cJSON_AddNumberToObject(e, "window", (double)G->window);
        cJSON *layers = cJSON_AddArrayToObject(e, "layers");
        for (int64_t l = 0; l < f32->n_layer; l++)
            if (f32->layers[l].group == g)
                cJSON_AddItemToArray(layers, cJSON_CreateNumber((double)l));
        cJSON *t = cJSON_AddObjectToObject(e, "bytes_per_token");
        cJSON_AddNumberToObject(t, "f32", (double)(G->block_bytes / KV_BLOCK));
        cJSON_AddNumberToObject(t, "f16", (double)(H->block_bytes / KV_BLOCK));
        cJSON *b = cJSON_AddObjectToObject(e, "bytes_per_block");
        cJSON_AddNumberToObject(b, "f32", (double)G->block_bytes);
        cJSON_AddNumberToObject(b, "f16", (double)H->block_bytes);
        cJSON_AddNumberToObject(e, "bytes_per_sequence", (double)G->state_bytes);
        if (G->kind == KV_RECURRENT) /* the pool's one checkpoint */
            cJSON_AddNumberToObject(e, "checkpoint_bytes", (double)G->ckpt_bytes);
    }
}

/* m is NULL for a GGUF file of an architecture ignite does not run: then
 * only what the file says (metadata, tokenizer, tensors) and "supported":
 * false; g is the file (NULL for a folder). */
static int print_json(const char *path, const struct gguf_file *g, const struct model *m,
                      const struct info *in, int tp)
{
    cJSON *o = cJSON_CreateObject();
    add_str_or_null(o, "path", path);
    cJSON_AddStringToObject(o, "format", g ? "gguf" : "safetensors");
    cJSON_AddNumberToObject(o, "file_size", (double)in->file_bytes);
    if (g)
        cJSON_AddNumberToObject(o, "gguf_version", g->version);
    else
        cJSON_AddNullToObject(o, "gguf_version");
    cJSON_AddNumberToObject(o, "n_files", in->n_files);
    add_str_or_null(o, "architecture", in->arch);
    cJSON_AddBoolToObject(o, "supported", m != NULL);
    add_str_or_null(o, "name", in->name);
    add_str_or_null(o, "file_type", in->file_type);
    cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
    if (m) {
        const struct model_hparams *hp = &m->hp;
        cJSON_AddNumberToObject(o, "n_layer", (double)hp->n_layer);
        cJSON_AddNumberToObject(o, "n_embd", (double)hp->n_embd);
        cJSON_AddNumberToObject(o, "n_head", (double)hp->n_head);
        cJSON_AddNumberToObject(o, "n_head_kv", (double)hp->n_head_kv);
        cJSON_AddNumberToObject(o, "head_dim", (double)hp->head_dim);
        cJSON_AddNumberToObject(o, "n_ff", (double)hp->n_ff);
        cJSON_AddNumberToObject(o, "n_vocab", (double)hp->n_vocab);
        cJSON_AddNumberToObject(o, "n_ctx_train", (double)hp->n_ctx_train);
        cJSON_AddNumberToObject(o, "n_rot", (double)hp->n_rot);
        cJSON_AddNumberToObject(o, "rope_base", hp->rope_base);
        cJSON_AddStringToObject(o, "rope_style", rope_style_name(hp->rope_style));
        cJSON_AddNumberToObject(o, "norm_eps", hp->norm_eps);
        cJSON_AddBoolToObject(o, "tied_embeddings", hp->tied_embeddings);
        cJSON_AddBoolToObject(o, "has_qkv_bias", hp->has_qkv_bias);
        if (hp->has_moe) {
            int64_t active;
            size_t bytes;
            model_active_size(m, &active, &bytes);
            cJSON_AddNumberToObject(o, "n_expert", (double)hp->n_expert);
            cJSON_AddNumberToObject(o, "n_expert_used", (double)hp->n_expert_used);
            cJSON_AddNumberToObject(o, "n_ff_exp", (double)hp->n_ff_exp);
            if (hp->has_moe_shexp)
                cJSON_AddNumberToObject(o, "n_ff_shexp", (double)hp->n_ff_shexp);
            cJSON_AddNumberToObject(o, "active_params", (double)active);
            cJSON_AddNumberToObject(o, "bytes_per_token", (double)bytes);
        }
        add_features_json(o, hp);
    }
    cJSON *tok = cJSON_AddObjectToObject(o, "tokenizer");
    add_str_or_null(tok, "model", in->tok_model);
    add_str_or_null(tok, "pre", in->tok_pre);
    add_id_or_null(tok, "bos_id", in->bos);
    add_id_or_null(tok, "eos_id", in->eos);
    add_id_or_null(tok, "n_tokens", in->n_tokens);
    cJSON_AddBoolToObject(tok, "chat_template", in->chat_template);
    cJSON_AddNumberToObject(o, "n_tensors", (double)in->n_tensors);
    cJSON *types = cJSON_AddObjectToObject(o, "tensor_types");
    for (uint32_t t = 0; t < N_TYPE_IDS; t++) {
        if (!in->type_count[t])
            continue;
        cJSON *e = cJSON_AddObjectToObject(types, quant_type_name(t));
        cJSON_AddNumberToObject(e, "count", (double)in->type_count[t]);
        cJSON_AddNumberToObject(e, "bytes", (double)in->type_bytes[t]);
    }
    if (m) {
        cJSON *kv = cJSON_AddObjectToObject(o, "kv_bytes_per_token");
        for (int t = 0; t < KV_N_DTYPES; t++)
            if (in->kv[t])
                cJSON_AddNumberToObject(kv, kv_dtype_name((enum kv_dtype)t),
                                        (double)(in->kv[t]->block_bytes / KV_BLOCK));
        if (kv_unshared_bytes(m, 4)) {
            cJSON *un = cJSON_AddObjectToObject(o, "kv_bytes_per_token_unshared");
            cJSON_AddNumberToObject(un, "f32", (double)kv_unshared_bytes(m, 4));
            cJSON_AddNumberToObject(un, "f16", (double)kv_unshared_bytes(m, 2));
        }
        add_kv_groups_json(o, in);
        int64_t wcap = info_window_cap(m, in->kv[0]);
        if (wcap) { /* the window rule (kvcache.h) */
            cJSON *w = cJSON_AddObjectToObject(o, "kv_window_rule");
            cJSON *pt = cJSON_AddObjectToObject(w, "bytes_per_token");
            cJSON *ps = cJSON_AddObjectToObject(w, "window_bytes_per_sequence");
            for (int t = 0; t < 2; t++) {
                const struct kv_memory *k = in->kv[t];
                const char *name = kv_dtype_name((enum kv_dtype)t);
                cJSON_AddNumberToObject(pt, name, (double)((k->block_bytes - k->window_bytes) /
                                                           KV_BLOCK));
                cJSON_AddNumberToObject(ps, name, (double)wcap * (double)k->window_bytes);
            }
            cJSON_AddNumberToObject(w, "window_blocks", (double)wcap);
            cJSON_AddNumberToObject(w, "rows_per_step", INFO_WINDOW_ROWS);
        }
        int64_t layer;
        if (backend_gpu_missing(m, &layer)) { /* not run on the GPU yet */
            cJSON_AddNullToObject(o, "cuda_weight_bytes");
        } else {
            cJSON *cw = cJSON_AddObjectToObject(o, "cuda_weight_bytes");
            cJSON_AddNumberToObject(cw, "native",
                                    (double)backend_gpu_weight_bytes(m, BACKEND_GPU_NATIVE));
            cJSON_AddNumberToObject(cw, "f16",
                                    (double)backend_gpu_weight_bytes(m, BACKEND_GPU_F16));
        }
    }
    int st = m && tp > 1 ? cli_info_tp(m, tp, o) : IG_OK;
    char *s = st == IG_OK ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (st != IG_OK)
        return st;
    if (!s)
        return ig_error(IG_E_NOMEM, "out of memory formatting JSON");
    puts(s);
    cli_stdout_ok(false); /* keeps a failed write's errno */
    free(s);
    return IG_OK;
}

int cmd_info(int argc, char **argv)
{
    static const char usage[] = "ignite info [-m PATH] [--json]";
    struct cli_parser p;
    cli_parser_init(&p, info_options);
    const char *model_arg = NULL;
    bool json = false;
    int st = cli_check_args("info", argc, argv, info_options);
    if (st)
        return st;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, p.shortopts, p.longopts, NULL)) != -1;) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case OPT_JSON: json = true; break;
        case 'h':
            cli_print_help(stdout, usage,
                           "Loads and validates a model (GGUF file or Hugging Face folder) and\n"
                           "describes it: architecture, shapes, features (RoPE scaling, sliding\n"
                           "window, norms, activation), tokenizer metadata, tensors by type, KV\n"
                           "cache size, the weights' bytes on a CUDA device (--gpu-weights native\n"
                           "and f16). A GGUF file of an architecture ignite cannot run is\n"
                           "described as far as its metadata, tokenizer and tensors go.",
                           info_options);
            return cli_flush_stdout();
        case 'V': cli_print_version(); return cli_flush_stdout();
        default: return cli_option_error("info", c, argv);
        }
    }
    if (optind < argc)
        return ig_error(IG_E_USAGE, "info: unexpected argument '%s'", argv[optind]);
    char path[4096];
    st = cli_model_path(model_arg, path, sizeof path);
    if (st)
        return st;
    struct info in = {0};
    struct stat sb;
    struct model *m = NULL;
    if (!(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        struct gguf_file *g = NULL;
        if ((st = gguf_open(path, &g, NULL)))
            return st;
        if (!model_arch_known(g)) { /* describe the file, do not refuse it */
            gather_unknown(g, &in);
            if (json) {
                st = print_json(path, g, NULL, &in, 0);
            } else {
                print_file_text(path, &in, false);
                print_tokenizer_text(&in);
            }
            cli_stdout_ok(true);
            gguf_close(g);
            return st == IG_OK ? cli_flush_stdout() : st;
        }
        st = model_from_gguf(path, g, &m); /* takes g */
    } else {
        st = model_load(path, &m);
    }
    if (st)
        return st;
    int tp = backend_tp_asked();
    if ((tp > 1 && (st = cli_info_tp_check(m, tp))) || (st = gather(m, &in))) {
        info_free(&in);
        model_free(m);
        return st;
    }
    if (json)
        st = print_json(m->path, m->gguf, m, &in, tp);
    else
        print_text(m, &in);
    if (st == IG_OK && !json && tp > 1)
        st = cli_info_tp(m, tp, NULL);
    cli_stdout_ok(true); /* before model_free, while errno is the write's */
    info_free(&in);
    model_free(m);
    return st == IG_OK ? cli_flush_stdout() : st;
}
