/* tests/emu/test_backend_emu.c: the CUDA backend end to end under the
 * emulator (backend/gpu.c over device/device_emu.cc and the kernels' own
 * sources; the matrix products by their CPU twins, backend/gpu_matmul.c)
 * against the CPU backend (exact f32 matmuls) on the real test model:
 * every greedy step of two prompts (one longer than an attention tile,
 * prefilled in two chunks) must pick the CPU's token, with logits within
 * the bound of the weights' mode (backend_checks.h: f16 tolerance with
 * `--gpu-weights f16`; with native weights, the default, the bounds of the
 * CPU's int8-activation path, a top-1 within the error of the runner-up
 * counting as a tie), and so must two sequences sharing steps and every
 * row of a prompt that wants logits (as `ignite perplexity` asks); the cache
 * exported from the device matches the CPU cache; a cache imported into a
 * fresh backend continues with the same logits.
 * With --cache-type q8_0 both backends keep a q8_0 cache (rotated rows,
 * ggml's blocks: the device's rows are rounded to f16 before the rotation,
 * so a value may differ by one quant step, max|K| / 127, within the bounds
 * above); the exported caches compare as above.
 * Usage: test_backend_emu [--gpu-weights native|f16] [--layers N]
 * [--cache-type q8_0]: the
 * model's first N layers only (both backends), for a weight mode whose code
 * is the same in every layer (ctest runs native weights on 6 layers, f16
 * on 4). Exits 77 without the model. */
#include "models/model.h"
#include "models/synthetic.h"
#include "tests/cpu/model_path.h"
#include "tests/emu/backend_checks.h"
#include "tokenizer/tokenizer.h"

/* A model and context that cannot fit are refused up front (IG_E_NOMEM),
 * before anything is allocated: the emulated device reports the host's
 * memory, and an 8B model with a 16M-position cache needs terabytes. */
static void check_too_big(void)
{
    struct model *big = NULL;
    struct backend *g = NULL;
    CHECK(model_synthetic_spec_shapes("synthetic:Llama-3-8B", &big) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = (int64_t)1 << 24,
                             .max_rows = 512, .n_slots = 1, .n_blocks = ((int64_t)1 << 24) / KV_BLOCK};
    if (big) {
        fprintf(stderr, "(an out-of-memory line is expected next)\n");
        CHECK(gpu_backend_create_emu(big, &o, &g) == IG_E_NOMEM && g == NULL);
    }
    backend_free(g);
    model_free(big);
}

/* q4_0 on cuda is refused in one line before any device is looked for
 * (backend_create; fp8 on the CPU too). */
static void check_refused_types(const struct model *m)
{
    struct backend *b = NULL;
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 8,
                             .n_slots = 1, .kv_dtype = KV_F16, .kv_dtype_v = KV_Q4_0};
    CHECK(backend_create(m, &o, &b) == IG_E_USAGE && b == NULL);
    o.device.kind = BACKEND_CPU;
    o.kv_dtype = KV_FP8, o.kv_dtype_v = KV_F16;
    CHECK(backend_create(m, &o, &b) == IG_E_USAGE && b == NULL);
}

int main(int argc, char **argv)
{
    enum backend_gpu_weights mode = BACKEND_GPU_NATIVE;
    long layers = 0; /* 0: all */
    enum kv_dtype cache = KV_F32;
    for (int i = 1; i < argc; i += 2) {
        char *end = NULL;
        if (i + 1 < argc && !strcmp(argv[i], "--gpu-weights") &&
            backend_parse_gpu_weights(argv[i + 1], &mode) == IG_OK)
            continue;
        if (i + 1 < argc && !strcmp(argv[i], "--cache-type") && !strcmp(argv[i + 1], "q8_0")) {
            cache = KV_Q8_0;
            continue;
        }
        if (i + 1 < argc && !strcmp(argv[i], "--layers") &&
            (layers = strtol(argv[i + 1], &end, 10)) > 0 && !*end)
            continue;
        fprintf(stderr, "usage: test_backend_emu [--gpu-weights native|f16] [--layers N] "
                        "[--cache-type q8_0]\n");
        return 2;
    }
    char path[4096];
    if (test_model_path(path, sizeof path) != 0)
        return TEST_SKIP;
    struct model *m = NULL;
    struct tok_vocab *vocab = NULL;
    if (model_load(path, &m) != IG_OK || tok_load_model(m, &vocab) != IG_OK)
        return 1;
    if (layers > 0 && layers < m->hp.n_layer)
        m->hp.n_layer = layers;

    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 2, .n_ctx = N_CTX,
                             .max_rows = 128, .n_slots = 2, .kv_dtype = cache,
                             .kv_dtype_v = cache, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab};
    if (mode == BACKEND_GPU_NATIVE)
        p.tol = LOGIT_TOL_INT8, p.nmse_tol = NMSE_TOL_INT8, p.allow_ties = true;
    pair_init(&p, &o);
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    struct backend_opts oe = o;
    oe.device.kind = BACKEND_CUDA;
    oe.gpu_weights = mode;
    oe.n_blocks = 2 * (N_CTX / KV_BLOCK);
    CHECK(gpu_backend_create_emu(m, &oe, &p.dev) == IG_OK);
    if (!p.cpu || !p.dev || !p.lc || !p.le)
        return test_summary("test_backend_emu");

    static const char *const prompts[] = {
        "The capital of France is",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who "
        "went out every morning before dawn. One day his net brought up something he had "
        "never seen before: a small wooden box, sealed with wax, with letters carved into "
        "its lid that nobody in the village could read. He carried it home under his coat, "
        "set it on the kitchen table, and sat looking at it for a long time while the "
        "fire burned low and the wind rattled the shutters. At last he",
    };
    int64_t n_pos = 0;
    struct tok_ids ids[2] = {{0}};
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        CHECK(tok_encode(vocab, prompts[i], strlen(prompts[i]), TOK_ENC_ADD_BOS, &ids[i]) == IG_OK);
        /* The long prompt crosses a 64-key tile and goes in two chunks. */
        int64_t chunk = ids[i].n > 64 ? ids[i].n - 7 : ids[i].n;
        run_prompt(&p, ids[i].ids, ids[i].n, chunk, i ? "long" : "short");
        n_pos = ids[i].n + N_STEPS;
    }
    compare_caches(&p, m, n_pos);
    check_upload(&p, m, &oe, n_pos);
    /* slot 0 decodes after the long prompt while slot 1 prefills the short one */
    run_two(&p, ids[0].ids, ids[0].n, 4, n_pos);
    check_too_big();
    check_refused_types(m);
    run_all_rows(&p, ids[1].ids, ids[1].n, 100);
    fprintf(stderr, "%s weights: worst rel err %.2e, NMSE %.2e\n",
            backend_gpu_weights_name(mode), p.worst, p.worst_nmse);
    for (int i = 0; i < 2; i++)
        tok_ids_free(&ids[i]);

    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    tok_vocab_free(vocab);
    model_free(m);
    return test_summary("test_backend_emu");
}
