// bench/llamacpp_greedy.cpp: greedy generation by llama.cpp on given token
// ids, the independent side of tests/cpu/test_greedy_llamacpp.py.
//
//   llamacpp_greedy MODEL N PROMPT_IDS      (ids comma-separated)
//
// Prefills PROMPT_IDS in one batch, then N times takes the argmax of the last
// logits (not llama.cpp's sampler) and feeds it back. Per step it prints one
// line "id margin top2_id top1_logit top2_logit", where margin = top1 - top2
// logit, so the test can tell a real disagreement from a near-tie. KV cache
// f32 and no flash attention, to stay as close as llama.cpp allows to
// ignite's f32 path. Built and run by bench/llamacpp_greedy.sh; not part of
// the ignite build (it needs llama.cpp).
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// Parses "1,2,3"; returns false on anything else.
static bool parse_ids(const char *s, std::vector<llama_token> &ids)
{
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return false;
        ids.push_back((llama_token)v);
        s = *end ? end + 1 : end;
    }
    return !ids.empty();
}

static void quiet_log(enum ggml_log_level level, const char *text, void *)
{
    if (level >= GGML_LOG_LEVEL_WARN)
        fputs(text, stderr);
}

int main(int argc, char **argv)
{
    std::vector<llama_token> ids;
    int n_gen = argc == 4 ? atoi(argv[2]) : 0;
    if (argc != 4 || n_gen < 1 || !parse_ids(argv[3], ids)) {
        fprintf(stderr, "usage: llamacpp_greedy MODEL N PROMPT_IDS\n");
        return 2;
    }
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_greedy: cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(ids.size() + n_gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)ids.size();
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llamacpp_greedy: cannot create a context\n");
        return 1;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_batch batch = llama_batch_get_one(ids.data(), (int32_t)ids.size());
    llama_token tok = 0;
    for (int step = 0; step < n_gen; step++) {
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llamacpp_greedy: llama_decode failed at step %d\n", step);
            return 1;
        }
        const float *logits = llama_get_logits_ith(ctx, -1);
        int32_t best = 0, second = 1;  // first index wins ties, as in ignite
        if (logits[1] > logits[0])
            best = 1, second = 0;
        for (int32_t i = 2; i < n_vocab; i++) {
            if (logits[i] > logits[best])
                second = best, best = i;
            else if (logits[i] > logits[second])
                second = i;
        }
        printf("%d %.6f %d %.6f %.6f\n", best, logits[best] - logits[second], second,
               logits[best], logits[second]);
        tok = best;
        batch = llama_batch_get_one(&tok, 1);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
