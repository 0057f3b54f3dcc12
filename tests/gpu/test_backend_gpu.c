/* tests/gpu/test_backend_gpu.c: the CUDA backend on a real GPU against the
 * CPU backend (exact f32 matmuls), on synthetic models made on the host
 * (SmolLM2-135M in Q4_1: head_dim 64, GQA 3, tied; Llama-3.2-1B in Q8_0:
 * GQA 4, 128k vocabulary; Qwen3-tiny and Gemma3-tiny in Q8_0: Qwen 3's head
 * norms at head_dim 128, Gemma 3's block at head_dim 256 on one KV head with
 * a window of 16 keys, which the prompts cross) with the checks of
 * tests/emu/backend_checks.h (run_batch included: four requests sharing
 * steps, a shared prefix, decode steps of 4, 3, 2 and 1 sequences, one
 * graph captured per bucket); then
 * a shapes-only model whose weights are made on the device must run. The
 * weights stay quantized on the device (the default --gpu-weights native),
 * so the bounds are those of tests/emu/test_backend_qemu.c (int8
 * activations in decode steps); tests/gpu/test_backend_qgpu.c covers the
 * f16 mode and the K types. The weights are random, so a top-1 within the
 * error of the runner-up counts as a tie. Exits 77 without a GPU. */
#include "models/synthetic.h"
#include "prefill/flash_attn.h"
#include "tests/emu/backend_checks.h"

/* Whether the prefill kernel may be a variable-length one: not when the GPU
 * check forces a ws variant (scripts/gpu/backend.sh), which reads the pool
 * one sequence at a time only. */
static bool varlen_ok(void)
{
    const char *forced = getenv("IGNITE_FLASH_VARIANT");
    int fv = forced && *forced ? prefill_attn_variant_find(forced) : PREFILL_ATTN_AUTO;
    return fv == PREFILL_ATTN_AUTO || prefill_attn_variant_isa(fv) == PREFILL_ATTN_ISA_MMA;
}

/* The batch of backend_checks.h's run_batch on model m: the logits, and one
 * graph captured per decode bucket the steps used. */
static void check_batch(const struct model *m, struct pair *p, const int32_t *ids)
{
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 0, .n_ctx = N_CTX,
                             .max_rows = BATCH_ROWS, .n_slots = BATCH_SLOTS,
                             .n_blocks = 4 * BATCH_SLOTS, .kv_dtype = KV_F32, .exact = true};
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    int n_buckets = 0, n_graphs = 0;
    run_batch(p, m, &o, &og, ids, &n_buckets, &n_graphs);
    CHECKF(n_buckets == 3 && n_graphs == n_buckets,
           "batch: %d graphs captured for %d buckets (expected 3)", n_graphs, n_buckets);
}

static void check_model(const char *spec)
{
    struct model *m = NULL;
    CHECK(model_synthetic_spec(spec, &m) == IG_OK);
    if (!m)
        return;
    fprintf(stderr, "== %s\n", spec);
    struct backend_opts o = {.device = {.kind = BACKEND_CPU}, .n_threads = 0, .n_ctx = N_CTX,
                             .max_rows = 128, .n_slots = 2, .kv_dtype = KV_F32, .exact = true};
    struct pair p = {.n_vocab = m->hp.n_vocab, .tol = 3e-2, .nmse_tol = 1e-3, .allow_ties = true};
    pair_init(&p, &o);
    struct backend_opts og = o;
    og.device.kind = BACKEND_CUDA;
    og.n_blocks = 2 * (N_CTX / KV_BLOCK);
    CHECK(backend_create(m, &o, &p.cpu) == IG_OK);
    CHECK(gpu_backend_create_cuda(m, &og, &p.dev) == IG_OK);
    int32_t ids[200];
    uint64_t s = 7;
    for (int i = 0; i < 200; i++)
        ids[i] = (int32_t)(test_rand_u64(&s) % (uint64_t)m->hp.n_vocab);
    if (p.cpu && p.dev && p.lc && p.le) {
        run_prompt(&p, ids, 5, 5, "short");
        run_prompt(&p, ids, 150, 100, "long, 2 chunks");
        compare_caches(&p, m, 150 + N_STEPS);
        check_upload(&p, m, &og, 150 + N_STEPS);
        if (varlen_ok()) {
            run_two(&p, ids, 40, 16, 150 + N_STEPS);
            check_batch(m, &p, ids);
        }
        run_all_rows(&p, ids, 150, 100);
    }
    backend_free(p.cpu);
    backend_free(p.dev);
    free(p.lc);
    free(p.le);
    model_free(m);
}

int main(void)
{
    if (gpu_device_count_cuda() == 0) {
        fprintf(stderr, "skip: no CUDA device\n");
        return 77;
    }
    check_model("synthetic:SmolLM2-135M:Q4_1");
    check_model("synthetic:Llama-3.2-1B:Q8_0");
    check_model("synthetic:Qwen3-tiny:Q8_0");
    /* Gemma's head dim 256 and window, unless the GPU check forces a prefill
     * variant without them (scripts/gpu/backend.sh: ws128n128). */
    const char *forced = getenv("IGNITE_FLASH_VARIANT");
    int fv = forced && *forced ? prefill_attn_variant_find(forced) : PREFILL_ATTN_AUTO;
    if (fv == PREFILL_ATTN_AUTO || (prefill_attn_variant_supports(fv, 256) &&
                                    prefill_attn_variant_isa(fv) != PREFILL_ATTN_ISA_WGMMA))
        check_model("synthetic:Gemma3-tiny:Q8_0");

    /* Weights made on the device: finite logits. */
    struct model *m = NULL;
    struct backend *g = NULL;
    CHECK(model_synthetic_spec_shapes("synthetic:Llama-3.2-1B", &m) == IG_OK);
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 32,
                             .n_slots = 1, .n_blocks = 1};
    int32_t table[1] = {0};
    if (m && gpu_backend_create_cuda(m, &o, &g) == IG_OK) {
        float *l = malloc((size_t)m->hp.n_vocab * sizeof *l);
        int32_t ids[32] = {1, 2, 3}, five = 5;
        CHECK(l && backend_run_seq(g, table, 0, ids, 32, 0, l) == IG_OK);
        CHECK(backend_run_seq(g, table, 0, &five, 1, 32, l) == IG_OK);
        int finite = 1;
        for (int64_t i = 0; l && i < m->hp.n_vocab; i++)
            finite &= isfinite(l[i]);
        CHECKF(finite, "device-made weights: non-finite logits");
        free(l);
    } else {
        CHECK(!"device-made weights: backend creation failed");
    }
    backend_free(g);
    model_free(m);
    return test_summary("test_backend_gpu");
}
