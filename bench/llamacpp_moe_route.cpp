// bench/llamacpp_moe_route.cpp: llama.cpp's router logits of a MoE model on
// the windows of a perplexity base file, for bench/kl_vs_fp64.py to count
// where llama.cpp's expert choices differ from the fp64 reference's.
//
//   llamacpp_moe_route MODEL BASE.kl N_CHUNKS OUT [THREADS]
//
// Runs each of the first N_CHUNKS windows of BASE (its tokens, its window
// length) as llama-perplexity does: one batch of the window, the first token
// replaced by BOS where the vocabulary adds one, logits asked for the second
// half only, no weight repacking (llama-perplexity -nr), the context's other
// settings llama.cpp's defaults. The graph's "ffn_moe_logits-IL" tensors
// ([n_expert, rows], the router's logits, before the bias where it has one)
// and "ffn_moe_probs-IL" (what its top k is taken of: the softmax of the
// logits, or with gpt-oss's SOFTMAX_WEIGHT gating the biased logits
// themselves) are read by the scheduler's eval callback and written to OUT as
// records: int32 chunk, layer, kind (0 logits, 1 probs), rows, n_expert, then
// the floats. Built by bench/kl_vs_fp64.sh; not part of the ignite build.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

struct capture {
    FILE *out;
    int32_t chunk;
};

/* 0 for "ffn_moe_logits-IL", 1 for "ffn_moe_probs-IL" (IL into *layer), else -1. */
static int kind_of(const char *name, int *layer)
{
    static const char *const names[] = {"ffn_moe_logits-", "ffn_moe_probs-"};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(names[k]);
        char *end;
        if (strncmp(name, names[k], n) == 0) {
            *layer = (int)strtol(name + n, &end, 10);
            return end > name + n && !*end ? k : -1;
        }
    }
    return -1;
}

static bool on_tensor(struct ggml_tensor *t, bool ask, void *data)
{
    int layer, kind = kind_of(t->name, &layer);
    if (kind < 0)
        return ask ? false : true;
    if (ask)
        return true;
    auto *c = (capture *)data;
    int32_t head[5] = {c->chunk, layer, kind, (int32_t)t->ne[1], (int32_t)t->ne[0]};
    std::vector<float> v((size_t)t->ne[0] * t->ne[1]);
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
        fprintf(stderr, "llamacpp_moe_route: %s is not contiguous f32\n", t->name);
        exit(1);
    }
    ggml_backend_tensor_get(t, v.data(), 0, v.size() * sizeof(float));
    fwrite(head, sizeof head, 1, c->out);
    fwrite(v.data(), sizeof(float), v.size(), c->out);
    return true;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *)
{
    if (level >= GGML_LOG_LEVEL_WARN)
        fputs(text, stderr);
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: llamacpp_moe_route MODEL BASE.kl N_CHUNKS OUT [THREADS]\n");
        return 2;
    }
    FILE *base = fopen(argv[2], "rb");
    char magic[8];
    int32_t n_ctx, n_vocab, n_chunk;
    if (!base || fread(magic, 1, 8, base) != 8 || memcmp(magic, "_logits_", 8) != 0 ||
        fread(&n_ctx, 4, 1, base) != 1 || fread(&n_vocab, 4, 1, base) != 1 ||
        fread(&n_chunk, 4, 1, base) != 1) {
        fprintf(stderr, "llamacpp_moe_route: %s is not a perplexity base file\n", argv[2]);
        return 1;
    }
    int32_t want = atoi(argv[3]);
    if (want < 1 || want > n_chunk)
        want = n_chunk;
    std::vector<llama_token> toks((size_t)want * n_ctx);
    if (fread(toks.data(), sizeof(llama_token), toks.size(), base) != toks.size()) {
        fprintf(stderr, "llamacpp_moe_route: %s is short\n", argv[2]);
        return 1;
    }
    fclose(base);

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false;  // llama-perplexity -nr
    mp.progress_callback = [](float, void *) { return true; };
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_moe_route: cannot load %s\n", argv[1]);
        return 1;
    }
    capture cap = {fopen(argv[4], "wb"), 0};
    if (!cap.out) {
        fprintf(stderr, "llamacpp_moe_route: cannot write %s\n", argv[4]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = argc > 5 ? atoi(argv[5]) : 2;
    cp.cb_eval = on_tensor;
    cp.cb_eval_user_data = &cap;
    cp.no_perf = true;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llamacpp_moe_route: cannot create a context\n");
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model);
    llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    for (int32_t c = 0; c < want; c++) {
        cap.chunk = c;
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = n_ctx;
        for (int32_t k = 0; k < n_ctx; k++) {
            batch.token[k] = toks[(size_t)c * n_ctx + k];
            batch.pos[k] = k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = k >= n_ctx / 2;
        }
        if (llama_vocab_get_add_bos(vocab))
            batch.token[0] = llama_vocab_bos(vocab);
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llamacpp_moe_route: llama_decode failed on chunk %d\n", c);
            return 1;
        }
    }
    fclose(cap.out);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
